//! One seam for the scheduler's decisions during an epoch: how often the bound on reads in
//! flight is revised, and how many workers prepare after each batch.
//!
//! A [`Schedule`] makes each decision; [`Static`] keeps the configuration's counts (the
//! fixed setting of `nostall bench --fixed-reads`/`--fixed-prep`, and what a comparison
//! needs as its baseline), [`Adaptive`] follows what the epoch observes (the fetch
//! controller of `reads`, the prep role of `roles`). A loader's [`Scheduler`] picks one
//! per decision from its settings (`adaptive_reads`, `adaptive_prep`), so a new policy is
//! one more implementation, not a boolean tested inside the pipeline. Under load balance
//! across a node's ranks, the rank's share of the node's threads bounds the prep workers
//! whichever schedule decides them.

use super::roles::{Observed, PrepRole};

/// The decisions an epoch asks its scheduler for.
pub(crate) trait Schedule: Sync {
    /// Samples taken between two revisions of the bound on reads in flight, for batches
    /// of `batch_size`; 0: never revised (the loader's fetch threads read at once
    /// throughout).
    fn reads_revised_every(&self, batch_size: usize) -> usize;

    /// Revises `role` after a batch, given what was `observed` over it (`None` for the
    /// first batch, which has no interval before it).
    fn revise_prep(&self, role: &mut PrepRole, observed: Option<Observed>);
}

/// The configuration's counts, whatever is observed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Static;

impl Schedule for Static {
    fn reads_revised_every(&self, _batch_size: usize) -> usize {
        0
    }

    fn revise_prep(&self, role: &mut PrepRole, _observed: Option<Observed>) {
        role.hold_ceiling();
    }
}

/// Counts that follow the epoch: reads in flight revised once a batch (Little's law,
/// hysteresis, a raise on trial), prep workers by the consumer's rate and waits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Adaptive;

impl Schedule for Adaptive {
    fn reads_revised_every(&self, batch_size: usize) -> usize {
        batch_size
    }

    fn revise_prep(&self, role: &mut PrepRole, observed: Option<Observed>) {
        if let Some(observed) = observed {
            role.revise(observed);
        }
    }
}

/// A loader's schedule: one [`Schedule`] per decision.
#[derive(Clone, Copy)]
pub(crate) struct Scheduler {
    reads: &'static dyn Schedule,
    prep: &'static dyn Schedule,
}

impl Scheduler {
    /// Adaptive reads in flight and prep workers where asked, static otherwise.
    pub(crate) fn new(adaptive_reads: bool, adaptive_prep: bool) -> Scheduler {
        let pick = |adaptive: bool| -> &'static dyn Schedule {
            if adaptive {
                &Adaptive
            } else {
                &Static
            }
        };
        Scheduler {
            reads: pick(adaptive_reads),
            prep: pick(adaptive_prep),
        }
    }

    /// See [`Schedule::reads_revised_every`].
    pub(crate) fn reads_revised_every(&self, batch_size: usize) -> usize {
        self.reads.reads_revised_every(batch_size)
    }

    /// The prep workers after a batch: within `share` (this rank's share of its node's
    /// threads, when load balance revised it), as the prep schedule revises them.
    pub(crate) fn prep_workers(
        &self,
        role: &mut PrepRole,
        share: Option<usize>,
        observed: Option<Observed>,
    ) -> usize {
        if let Some(share) = share {
            role.set_ceiling(share);
        }
        self.prep.revise_prep(role, observed);
        role.workers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer that takes a sample every millisecond while a worker prepares one in
    /// ten: it needs more than one worker, never waiting.
    fn busy_consumer() -> Observed {
        Observed {
            prep_seconds: 0.010,
            step_seconds: 0.001,
            waited_share: 0.0,
        }
    }

    /// A consumer far slower than one worker, never waiting.
    fn slow_consumer() -> Observed {
        Observed {
            prep_seconds: 0.001,
            step_seconds: 1.0,
            waited_share: 0.0,
        }
    }

    #[test]
    fn a_static_schedule_keeps_every_worker_within_the_share_whatever_is_observed() {
        let scheduler = Scheduler::new(false, false);
        assert_eq!(scheduler.reads_revised_every(64), 0);
        let mut role = PrepRole::new(8);
        for _ in 0..100 {
            assert_eq!(
                scheduler.prep_workers(&mut role, None, Some(slow_consumer())),
                8
            );
        }
        assert_eq!(
            scheduler.prep_workers(&mut role, Some(3), Some(slow_consumer())),
            3
        );
    }

    #[test]
    fn an_adaptive_schedule_follows_the_consumer_within_the_share() {
        let scheduler = Scheduler::new(true, true);
        assert_eq!(scheduler.reads_revised_every(64), 64);
        let mut role = PrepRole::new(8);
        // No interval before the first batch: nothing to revise by.
        assert_eq!(scheduler.prep_workers(&mut role, None, None), 8);
        let mut workers = 8;
        for _ in 0..100 {
            workers = scheduler.prep_workers(&mut role, None, Some(slow_consumer()));
        }
        assert!(workers < 8, "a slow consumer needs fewer than every worker");
        for _ in 0..100 {
            workers = scheduler.prep_workers(&mut role, Some(4), Some(busy_consumer()));
        }
        assert_eq!(workers, 4, "a busy consumer takes the whole share, no more");
    }

    #[test]
    fn each_decision_takes_the_schedule_its_setting_picks() {
        let reads_only = Scheduler::new(true, false);
        assert_eq!(reads_only.reads_revised_every(32), 32);
        let mut role = PrepRole::new(6);
        for _ in 0..100 {
            reads_only.prep_workers(&mut role, None, Some(slow_consumer()));
        }
        assert_eq!(role.workers(), 6);
        let prep_only = Scheduler::new(false, true);
        assert_eq!(prep_only.reads_revised_every(32), 0);
    }
}
