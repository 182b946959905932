//! How many of the loader's workers prepare samples: the prep role's share of the pool,
//! decided once a batch from online estimates.
//!
//! The loader's workers are one pool, each taking the fetch or the prep role as the pool
//! needs (its `table`). The fetch role follows Little's law (the read-ahead's bound
//! on reads in flight, on as few workers as the source allows); the prep role follows the
//! consumer, decided here. The rate model is the one `nostall analyze` validates
//! ([`Rates::threads_needed`]): fed a worker's measured CPU seconds per sample and the
//! consumer's measured rate, it gives the fewest prep workers whose rate keeps
//! [`HEADROOM`] ahead of the consumer's. Workers beyond that would only run in bursts
//! that take a core from a training step that is itself CPU (a model trained on the CPU,
//! a Python loop launching kernels), and from the fetch role's CPU.
//!
//! **Hysteresis.** More workers at once, when the model asks for them or the consumer
//! waited for a batch ([`STALL_SHARE`] of its time or more): a stall costs the GPU, an
//! idle worker costs nothing but a core's share. Fewer one at a time, and only after the
//! model asked for fewer at [`LOWER_AFTER`] revisions in a row with the consumer not
//! waiting; after a stall, not before [`HOLD_AFTER_STALL`] revisions. So noise in the
//! measured rates does not make the count oscillate.

pub(crate) mod table;

use super::model::Rates;
use crate::metrics::PrepReason;

/// How far ahead of the consumer's rate the prep workers kept must be.
pub(crate) const HEADROOM: f64 = 1.25;

/// The share of the consumer's time spent waiting for a batch that counts as a stall.
pub(crate) const STALL_SHARE: f64 = 0.05;

/// Revisions in a row asking for fewer prep workers before one is let go.
pub(crate) const LOWER_AFTER: u32 = 8;

/// Revisions after a stall before fewer prep workers are considered.
pub(crate) const HOLD_AFTER_STALL: u32 = 32;

/// What the consumer's side observed over the batch just delivered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Observed {
    /// A prep worker's CPU seconds per sample so far (0: none prepared yet).
    pub prep_seconds: f64,
    /// The consumer's seconds per sample between two batches, its wait left out: its
    /// training step. Near zero for a consumer that only counts batches.
    pub step_seconds: f64,
    /// The share of the time since the previous batch that the consumer waited.
    pub waited_share: f64,
}

/// The prep role's size, revised once a batch.
#[derive(Debug, Clone)]
pub(crate) struct PrepRole {
    workers: usize,
    ceiling: usize,
    /// Revisions in a row that asked for fewer.
    asked_fewer: u32,
    /// Revisions left before fewer may be considered (after a stall).
    hold: u32,
    reason: PrepReason,
}

impl PrepRole {
    /// Starts with every one of `ceiling` workers preparing.
    pub(crate) fn new(ceiling: usize) -> PrepRole {
        let ceiling = ceiling.max(1);
        PrepRole {
            workers: ceiling,
            ceiling,
            asked_fewer: 0,
            hold: 0,
            reason: PrepReason::Ceiling,
        }
    }

    /// Prep workers now.
    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    /// Why there are as many as there are.
    pub(crate) fn reason(&self) -> PrepReason {
        self.reason
    }

    /// Lets at most `ceiling` workers prepare (a rank's share of its node, which moves),
    /// keeping the count within it.
    pub(crate) fn set_ceiling(&mut self, ceiling: usize) {
        self.ceiling = ceiling.max(1);
        self.workers = self.workers.min(self.ceiling);
    }

    /// Keeps every worker it may have preparing (a static configuration), whatever is
    /// observed.
    pub(crate) fn hold_ceiling(&mut self) {
        self.workers = self.ceiling;
        self.reason = PrepReason::Ceiling;
    }

    /// The prep workers after a batch that observed `now`.
    pub(crate) fn revise(&mut self, now: Observed) -> usize {
        self.hold = self.hold.saturating_sub(1);
        if now.waited_share >= STALL_SHARE {
            self.asked_fewer = 0;
            self.hold = HOLD_AFTER_STALL;
            if self.workers < self.ceiling {
                self.workers += 1;
                self.reason = PrepReason::Stalled;
            }
            return self.workers;
        }
        let Some((needed, reason)) = self.needed(now) else {
            return self.workers;
        };
        if needed > self.workers {
            self.asked_fewer = 0;
            self.workers = needed;
            self.reason = reason;
        } else if needed < self.workers && self.hold == 0 {
            self.asked_fewer += 1;
            if self.asked_fewer >= LOWER_AFTER {
                self.asked_fewer = 0;
                self.workers -= 1;
                self.reason = reason;
            }
        } else if needed == self.workers {
            self.asked_fewer = 0;
            self.reason = reason;
        } else {
            self.asked_fewer = 0;
        }
        self.workers
    }

    /// What the rate model asks for, and why; `None` before a sample's cost is known.
    fn needed(&self, now: Observed) -> Option<(usize, PrepReason)> {
        if now.step_seconds <= 0.0 {
            return Some((self.ceiling, PrepReason::ConsumerFaster));
        }
        if now.prep_seconds <= 0.0 {
            return None;
        }
        let rates = Rates::prep_only(1.0 / now.prep_seconds, HEADROOM / now.step_seconds);
        Some(match rates.threads_needed(self.ceiling) {
            Some(n) => (n, PrepReason::ConsumerNeeds),
            None => (self.ceiling, PrepReason::ConsumerFaster),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prep role of `ceiling` workers after 40 revisions of a consumer at `rate`
    /// samples/s that never waited: settled.
    fn settled(ceiling: usize, rate: f64) -> PrepRole {
        let mut role = PrepRole::new(ceiling);
        for _ in 0..40 {
            role.revise(observed(rate, 0.0));
        }
        role
    }

    /// A worker prepares 1 000 samples/s; the consumer takes `rate` samples/s and
    /// waited `waited` of its time.
    fn observed(rate: f64, waited: f64) -> Observed {
        Observed {
            prep_seconds: 1e-3,
            step_seconds: 1.0 / rate,
            waited_share: waited,
        }
    }

    #[test]
    fn the_consumer_s_rate_with_headroom_sets_the_workers_after_a_run_of_revisions() {
        let mut role = PrepRole::new(4);
        // 1 500/s needs 1 875/s of prep: two workers. Eight revisions in a row let one go
        // at a time.
        let counts: Vec<usize> = (0..16)
            .map(|_| role.revise(observed(1500.0, 0.0)))
            .collect();
        assert_eq!(counts[..7], [4; 7]);
        assert_eq!(counts[7], 3);
        assert_eq!(counts[8..15], [3; 7]);
        assert_eq!(counts[15], 2);
        assert_eq!(role.reason(), PrepReason::ConsumerNeeds);
        for _ in 0..40 {
            assert_eq!(
                role.revise(observed(1500.0, 0.0)),
                2,
                "never below the need"
            );
        }
    }

    #[test]
    fn a_faster_consumer_takes_the_workers_back_at_once() {
        let mut role = settled(4, 500.0);
        assert_eq!(role.workers(), 1);
        assert_eq!(role.revise(observed(2500.0, 0.0)), 4, "3 125/s needs 4");
        assert_eq!(role.revise(observed(f64::INFINITY, 0.0)), 4);
        assert_eq!(role.reason(), PrepReason::ConsumerFaster);
    }

    #[test]
    fn a_stall_adds_a_worker_and_holds_the_count_a_while() {
        let mut role = settled(3, 400.0);
        assert_eq!(role.workers(), 1);
        assert_eq!(role.revise(observed(400.0, 0.2)), 2);
        assert_eq!(role.reason(), PrepReason::Stalled);
        // Held: the model asks for one, but not before the hold and a run of revisions.
        let counts: Vec<usize> = (0..HOLD_AFTER_STALL + LOWER_AFTER)
            .map(|_| role.revise(observed(400.0, 0.0)))
            .collect();
        let lowered = counts.iter().position(|&n| n == 1).unwrap() as u32;
        assert_eq!(lowered, HOLD_AFTER_STALL - 1 + LOWER_AFTER - 1);
    }

    #[test]
    fn noise_around_the_need_does_not_make_the_count_oscillate() {
        let mut role = settled(2, 700.0);
        assert_eq!(role.workers(), 1, "875/s needs one worker of 1 000/s");
        // Rates either side of the boundary (one worker at 800/s, 2 at 801/s): raises at
        // once, lowers only after a run of lower asks, so alternating noise settles high.
        let mut changes = 0;
        let mut last = role.workers();
        for i in 0..64 {
            let rate = if i % 2 == 0 { 790.0 } else { 810.0 };
            let now = role.revise(observed(rate, 0.0));
            changes += usize::from(now != last);
            last = now;
        }
        assert_eq!(changes, 1, "one raise, then held");
        assert_eq!(last, 2);
    }

    #[test]
    fn the_ceiling_bounds_every_decision() {
        let mut role = PrepRole::new(4);
        role.set_ceiling(2);
        assert_eq!(role.workers(), 2);
        role.set_ceiling(3);
        assert_eq!(
            role.workers(),
            2,
            "a share that grows is taken by a decision"
        );
        role.hold_ceiling();
        assert_eq!(role.workers(), 3, "or at once when held at the ceiling");
        role.set_ceiling(2);
        assert_eq!(role.revise(observed(1e9, 0.5)), 2);
        role.set_ceiling(0);
        assert_eq!(role.workers(), 1, "never none");
    }

    #[test]
    fn a_consumer_without_a_step_takes_every_worker_and_no_prep_time_changes_nothing() {
        let mut role = settled(3, 500.0);
        assert_eq!(role.workers(), 1);
        let unknown = Observed {
            prep_seconds: 0.0,
            ..observed(5000.0, 0.0)
        };
        for _ in 0..40 {
            assert_eq!(role.revise(unknown), 1, "nothing known of prep: held");
        }
        let no_step = Observed {
            step_seconds: 0.0,
            ..observed(500.0, 0.0)
        };
        assert_eq!(role.revise(no_step), 3);
        assert_eq!(role.reason(), PrepReason::ConsumerFaster);
    }
}
