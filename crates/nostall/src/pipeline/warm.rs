//! The `frequency` cache policy's placement: from the plans of every planned epoch, the
//! samples this rank reads most often ([`crate::cache::frequency`]), placed when the
//! loader is made (so that the epochs' own reads fill the cache with them from the
//! start), then read into the cache ahead of their first use by a background thread, one
//! at a time, beside the epochs' reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cache::frequency::placement;
use crate::cache::Cached;
use crate::catalog::Catalog;
use crate::plan::EpochPlan;

use super::LoaderConfig;

/// The background thread; dropping this stops it after its current read.
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
        let stopped = stop.clone();
        let warm = move || {
            let mut buffer = Vec::new();
            for id in kept {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                // A sample that cannot be read is left to the epoch that reads it, which
                // reports it.
                let _ = source.prefetch(id, &mut buffer);
            }
        };
        // Without the thread the cache still fills as the epochs read: slower, never wrong.
        let _ = std::thread::Builder::new()
            .name("nostall-warm".into())
            .spawn(warm);
        Warmer { stop }
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
