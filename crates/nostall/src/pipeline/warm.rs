//! The `frequency` cache policy's placement: from the plans of every planned epoch, the
//! samples this rank reads most often ([`crate::cache::frequency`]), placed when the
//! loader is made (so that the epochs' own reads fill the cache with them from the
//! start), then read into the cache ahead of their first use by [`WARM_READS`]
//! background threads, beside the epochs' reads. One read at a time was too slow over
//! object storage: on the 4-host testbed the placement took three epochs to arrive.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::cache::frequency::placement;
use crate::cache::Cached;
use crate::catalog::Catalog;
use crate::plan::EpochPlan;

use super::LoaderConfig;

/// Reads in flight filling the placement.
pub(super) const WARM_READS: usize = 4;

/// The background threads; dropping this stops them after their current reads.
pub(super) struct Warmer {
    stop: Arc<AtomicBool>,
}

impl Warmer {
    /// Places `source`'s cache for the job `config` plans (a pass over the plan of every
    /// planned epoch), and starts reading the placement ahead.
    pub(super) fn start(config: &LoaderConfig, catalog: &Catalog, source: Arc<Cached>) -> Warmer {
        let (plan, locality) = (&config.plan, config.locality.as_ref());
        let reads = (0..config.cache.planned_epochs)
            .filter_map(|epoch| EpochPlan::resumed(plan, locality, catalog.len(), epoch, &[]).ok())
            .flat_map(|plan| plan.samples().to_vec());
        let capacity = source.cache().stats().capacity;
        let kept = placement(reads, capacity, |id| catalog.size(id));
        source.cache().place(&kept);
        let stop = Arc::new(AtomicBool::new(false));
        let kept: Arc<[_]> = kept.into();
        let next = Arc::new(AtomicUsize::new(0));
        for n in 0..WARM_READS {
            let (kept, next, stopped, source) =
                (kept.clone(), next.clone(), stop.clone(), source.clone());
            let warm = move || {
                let mut buffer = Vec::new();
                while !stopped.load(Ordering::Relaxed) {
                    let Some(&id) = kept.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        return;
                    };
                    // A sample that cannot be read is left to the epoch that reads it,
                    // which reports it.
                    let _ = source.prefetch(id, &mut buffer);
                }
            };
            // Without these threads the cache still fills as the epochs read: slower,
            // never wrong.
            let _ = std::thread::Builder::new()
                .name(format!("nostall-warm-{n}"))
                .spawn(warm);
        }
        Warmer { stop }
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
