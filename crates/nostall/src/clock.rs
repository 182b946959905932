//! Time as the engine's decisions read it: one clock, which a test can drive.
//!
//! Decisions that depend on elapsed time (how often the read-ahead revises its bound on
//! reads in flight, how long a peer that went away is left alone before it is tried
//! again) read it through a [`Clock`]. In a running loader that is the monotonic clock;
//! a test gives the component a [`Clock::manual`] one and moves it with
//! [`Clock::advance`], so that "once the interval has passed" is an event the test makes
//! happen, not a sleep whose length decides the verdict. Durations that are measured
//! rather than decided on (how long a read or a batch took, for reports and rates) keep
//! the real clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A monotonic clock: the real one, or one a test moves by hand. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<Manual>>,
}

/// A clock that stands still until advanced.
#[derive(Debug)]
struct Manual {
    origin: Instant,
    /// Nanoseconds advanced since `origin`.
    advanced: AtomicU64,
}

impl Clock {
    /// The monotonic clock ([`Instant::now`]).
    pub fn real() -> Clock {
        Clock::default()
    }

    /// A clock that reads the same instant until [`Clock::advance`] moves it.
    pub fn manual() -> Clock {
        Clock {
            manual: Some(Arc::new(Manual {
                origin: Instant::now(),
                advanced: AtomicU64::new(0),
            })),
        }
    }

    /// The current instant.
    pub fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(manual) => {
                manual.origin + Duration::from_nanos(manual.advanced.load(Ordering::Acquire))
            }
        }
    }

    /// The time since `earlier` (zero for an instant still to come).
    pub fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }

    /// Moves a manual clock on by `by`, for every clone of it.
    ///
    /// # Panics
    ///
    /// On the real clock, which no one moves.
    pub fn advance(&self, by: Duration) {
        let manual = self
            .manual
            .as_ref()
            .expect("only a manual clock is advanced");
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        manual.advanced.fetch_add(nanos, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_for_every_clone() {
        let clock = Clock::manual();
        let copy = clock.clone();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        copy.advance(Duration::from_millis(250));
        assert_eq!(clock.since(start), Duration::from_millis(250));
        assert_eq!(copy.since(clock.now()), Duration::ZERO);
        let real = Clock::real();
        assert!(real.now() >= start);
    }
}
