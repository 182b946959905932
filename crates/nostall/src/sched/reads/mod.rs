//! The fetch controller's decisions: how many reads are in flight, and when that moves.
//!
//! **Reads in flight** follow Little's law, as the read-ahead's window does: keeping prep
//! fed at `r` samples/s through reads of `L` seconds needs `r·L` of them at once, so at
//! most twice that may run, between two (one read waiting for a core while the other
//! keeps storage busy) and the loader's `fetch_threads`, a ceiling. Local storage keeps
//! two; 20 ms object storage opens as many as the rate needs. The bound moves at most
//! once a batch and once every 100 ms, and only by a quarter or more (hysteresis), so
//! that it does not oscillate with noise. While samples come slowly it moves sooner, once
//! 250 ms and 8 samples have passed: two reads of 40 ms bring a batch of 64 in 1.3 s, and
//! climbing from two to a hundred would take a revision a batch most of an epoch. A
//! read's time includes its wait behind others on a link of limited bandwidth, so
//! Little's law alone would keep raising the bound there. A raise is judged as TCP Vegas
//! judges a window: if the rate did not follow (by a tenth) while reads took longer (by a
//! quarter), the raise only queued reads behind each other, and it is undone and not
//! tried again for a while. A raise that left read times as they were is kept even if it
//! brought little: near the point where prep becomes the limit, a few percent is what a
//! raise brings.
//!
//! **Reads by tier.** A read's time depends on where the sample is served from (this
//! process's cache, a peer's, storage: [`Tier`]), so a time is kept per tier, and a
//! revision sets the bound by the reads to come: the mean, over the next batch of reads,
//! of each one's tier time. A cache that holds the next samples lowers the bound before
//! their reads show it, and a run of misses raises it before they queue. A tier not yet
//! timed counts nothing for memory and the time over every read for the others.
//!
//!
//! The read-ahead (`readahead`) keeps the bound these decisions give and the
//! reads under it.

pub(crate) mod readahead;

use std::time::Duration;

use crate::storage::Tier;

/// Smoothed read times (seconds): by tier, and over every read.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadTimes {
    pub(crate) by_tier: [Option<f64>; 3],
    all: Option<f64>,
}

/// The weight of a new read in a smoothed read time.
pub(crate) const SMOOTHING: f64 = 0.1;

impl ReadTimes {
    /// Counts a read from `tier` that took `took` seconds: the first of a kind sets its
    /// time, later ones move it.
    pub(crate) fn record(&mut self, tier: Tier, took: f64) {
        for time in [&mut self.by_tier[tier.index()], &mut self.all] {
            *time = Some(time.map_or(took, |time| time + SMOOTHING * (took - time)));
        }
    }

    /// The time over every read (0 before one).
    pub(crate) fn all(&self) -> f64 {
        self.all.unwrap_or(0.0)
    }

    /// What a read from `tier` is expected to take: its own time once one was timed;
    /// before, nothing from memory and the time over every read from the others.
    pub(crate) fn of(&self, tier: Tier) -> f64 {
        self.by_tier[tier.index()].unwrap_or(match tier {
            Tier::Memory => 0.0,
            _ => self.all(),
        })
    }

    /// The farthest timed tier's time, in which queueing behind a link shows.
    pub(crate) fn farthest(&self) -> f64 {
        self.by_tier
            .iter()
            .rev()
            .flatten()
            .next()
            .copied()
            .unwrap_or(0.0)
    }
}

/// The fewest reads in flight: one may wait for a core while another keeps storage busy.
pub(crate) const MIN_IN_FLIGHT: usize = 2;

/// Reads to keep in flight to take `rate` samples/s through reads of `latency` seconds:
/// twice Little's law, between [`MIN_IN_FLIGHT`] and `max`.
pub(crate) fn reads_in_flight(rate: f64, latency: f64, max: usize) -> usize {
    let wanted = (2.0 * rate * latency).ceil();
    (wanted.min(max as f64) as usize).clamp(MIN_IN_FLIGHT.min(max), max)
}

/// The bound after a revision that asks for `wanted`: moved only by a quarter of the
/// current bound or more (at least one read), so that noise does not make it oscillate.
pub(crate) fn revise(current: usize, wanted: usize) -> usize {
    if wanted.abs_diff(current) >= (current / 4).max(1) {
        wanted
    } else {
        current
    }
}

/// The shortest time between two revisions of the bound on reads in flight: a rate
/// measured over less swings with the bursts in which prep takes samples.
pub(crate) const REVISION_INTERVAL: Duration = Duration::from_millis(100);

/// While fewer than a batch of samples come in this long, the bound is revised once
/// [`SLOW_REVISION_SAMPLES`] have: enough for a rate to judge a doubling by.
pub(crate) const SLOW_REVISION_INTERVAL: Duration = Duration::from_millis(250);
pub(crate) const SLOW_REVISION_SAMPLES: u64 = 8;

/// Revisions a raise that brought nothing is not tried again for.
pub(crate) const HOLD_AFTER_FAILED_RAISE: u32 = 16;

/// The bound's last raise, judged at the next revision by the rate and read time it
/// brought.
#[derive(Debug, Default)]
pub(crate) struct Trial {
    /// The bound before the raise, and the rate and read time then, while the raise is
    /// on trial.
    raised_from: Option<(usize, Observed)>,
    /// Revisions left before raising again, after a raise that brought nothing.
    hold: u32,
}

/// What a revision observed under the current bound: samples/s taken, and a read's
/// smoothed duration in seconds.
pub(crate) type Observed = (f64, f64);

impl Trial {
    /// The bound after a revision that observed `now` under `current` and asks for
    /// `wanted`.
    pub(crate) fn revise(&mut self, current: usize, wanted: usize, now: Observed) -> usize {
        let (rate, latency) = now;
        if let Some((before, (rate_before, latency_before))) = self.raised_from.take() {
            if rate < 1.1 * rate_before && latency > 1.25 * latency_before {
                // The added reads queued behind the others (the link's bandwidth, or a
                // device's queue) and brought no rate: undo the raise.
                self.hold = HOLD_AFTER_FAILED_RAISE;
                return before;
            }
        }
        self.hold = self.hold.saturating_sub(1);
        let revised = revise(current, wanted);
        if revised > current {
            if self.hold > 0 {
                return current;
            }
            self.raised_from = Some((current, now));
        }
        revised
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_flight_follow_littles_law_between_two_and_the_ceiling() {
        // Local reads: 4 000 samples/s at 50 µs each need less than one in flight.
        assert_eq!(reads_in_flight(4000.0, 50e-6, 32), 2);
        // Object storage: 1 000 samples/s at 20 ms need 20 in flight; twice that, capped.
        assert_eq!(reads_in_flight(1000.0, 0.02, 64), 40);
        assert_eq!(reads_in_flight(1000.0, 0.02, 32), 32);
        // A ceiling below two is kept.
        assert_eq!(reads_in_flight(1000.0, 0.02, 1), 1);
        assert_eq!(reads_in_flight(0.0, 0.0, 8), 2);
    }

    #[test]
    fn the_bound_moves_only_by_a_quarter_or_more() {
        assert_eq!(revise(2, 3), 3); // one read is a quarter of nothing
        assert_eq!(revise(16, 19), 16);
        assert_eq!(revise(16, 20), 20);
        assert_eq!(revise(16, 13), 16);
        assert_eq!(revise(16, 12), 12);
        // Rising and falling around a value settles instead of following every step.
        let mut bound = 20;
        for wanted in [22, 18, 23, 17, 21] {
            bound = revise(bound, wanted);
        }
        assert_eq!(bound, 20);
    }

    #[test]
    fn read_times_are_kept_by_tier() {
        let mut times = ReadTimes::default();
        assert_eq!(
            (times.of(Tier::Memory), times.of(Tier::Storage)),
            (0.0, 0.0)
        );
        times.record(Tier::Storage, 0.02);
        // Before a read of theirs: nothing from memory, the time over every read from a
        // peer.
        assert_eq!((times.of(Tier::Memory), times.of(Tier::Peer)), (0.0, 0.02));
        times.record(Tier::Memory, 0.0);
        assert_eq!(times.of(Tier::Storage), 0.02, "a hit leaves storage's time");
        assert!(times.all() < 0.02);
        assert_eq!(times.farthest(), 0.02, "queueing shows in storage's");
    }

    #[test]
    fn a_raise_that_only_queues_reads_is_undone() {
        const L: f64 = 0.02;
        let mut trial = Trial::default();
        // 20 ms reads: each raise doubles the rate, so each is kept.
        assert_eq!(trial.revise(2, 4, (100.0, L)), 4);
        assert_eq!(trial.revise(4, 8, (200.0, L)), 8);
        assert_eq!(trial.revise(8, 16, (400.0, L)), 16);
        // Near the knee a raise brings little, but reads take no longer: kept.
        assert_eq!(trial.revise(16, 32, (800.0, L)), 32);
        assert_eq!(trial.revise(32, 40, (824.0, L)), 40);
        // A bandwidth-bound link: read times grow with the queue, the rate does not.
        let mut trial = Trial::default();
        assert_eq!(trial.revise(2, 4, (650.0, 0.006)), 4);
        assert_eq!(trial.revise(4, 8, (655.0, 0.012)), 2, "undone");
        // ... and not tried again for a while, though lowering still happens.
        for _ in 0..HOLD_AFTER_FAILED_RAISE - 1 {
            assert_eq!(trial.revise(2, 4, (650.0, 0.006)), 2, "held at two");
        }
        assert_eq!(
            trial.revise(2, 4, (650.0, 0.006)),
            4,
            "tried again after the hold"
        );
        // Read times that grow while the rate follows: the reads were the limit, kept.
        let mut trial = Trial::default();
        assert_eq!(trial.revise(8, 16, (400.0, 0.020)), 16);
        assert_eq!(trial.revise(16, 16, (700.0, 0.030)), 16);
    }
}
