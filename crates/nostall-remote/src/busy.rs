//! How busy the trainer's process is against its CPU budget: what holds the trainer's own
//! loader back from a part while remote preparers are up.
//!
//! Receiving a batch costs the trainer a fraction of what making one does, so on a
//! trainer held to a few cores, the cores its own loader takes from receiving cost more
//! batches than they make. The rule the client follows: the loader takes a new part only
//! while the process used less than a share of its budget (its cgroup quota, else its
//! cores: [`nostall::sched::cpu`]) over about the last second.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nostall::clock::Clock;
use nostall::sched::cpu::{cpu_budget, process_cpu_time};

/// The span the process's CPU use is read over.
const WINDOW: Duration = Duration::from_secs(1);
/// The least span a reading needs, so that one burst does not decide alone.
const LEAST: Duration = Duration::from_millis(250);

/// The process's CPU use over the last [`WINDOW`], as a share of its budget.
pub(crate) struct Busy {
    budget: f64,
    /// What the window's wall time is read on (the client's: one a test moves).
    clock: Clock,
    /// Readings of the process's CPU time, oldest first: one before the window, the rest
    /// in it.
    readings: Mutex<VecDeque<(Instant, Duration)>>,
}

impl Busy {
    pub(crate) fn new(clock: Clock) -> Busy {
        let first = (clock.now(), process_cpu_time());
        Busy {
            budget: cpu_budget(),
            clock,
            readings: Mutex::new(VecDeque::from([first])),
        }
    }

    /// The share of its budget the process used over about the last second; `None` while
    /// less than [`LEAST`] has been seen.
    pub(crate) fn share(&self) -> Option<f64> {
        let (now, cpu) = (self.clock.now(), process_cpu_time());
        let mut readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        readings.push_back((now, cpu));
        while readings.len() > 2 && now.duration_since(readings[1].0) >= WINDOW {
            readings.pop_front();
        }
        let &(then, before) = readings.front()?;
        let wall = now.duration_since(then);
        (wall >= LEAST)
            .then(|| cpu.saturating_sub(before).as_secs_f64() / wall.as_secs_f64() / self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_read_once_a_quarter_second_is_seen_and_the_window_stays_bounded() {
        let clock = Clock::manual();
        let busy = Busy::new(clock.clone());
        assert_eq!(busy.share(), None, "nothing seen yet");
        clock.advance(2 * LEAST);
        let share = busy.share().expect("half a second seen");
        assert!(share >= 0.0 && share.is_finite(), "{share}");
        // Readings older than the window go, but for the one the rate is read from.
        clock.advance(3 * WINDOW);
        for _ in 0..100 {
            busy.share();
        }
        let readings = busy.readings.lock().unwrap();
        assert!(readings.len() <= 102, "{}", readings.len());
        assert!(clock.since(readings[0].0) <= 3 * WINDOW);
    }
}
