//! A cache's placement, read ahead of the epochs. The `frequency` policy's: from the plans
//! of every planned epoch, the samples this rank reads most often
//! ([`crate::cache::frequency`]), placed when the loader is made (so that the epochs' own
//! reads fill the cache with them from the start). The `minio` policy's, asked for with
//! [`CacheFill::Before`]: the dataset's first samples that fit, which minio keeps as it
//! reads them. Either is read into the cache by [`WARM_READS`] threads: in the background,
//! beside the epochs' reads ([`CacheFill::Background`]), or before the loader's first
//! read ([`CacheFill::Before`]). One read at a time was too slow over object storage: on
//! the 4-host testbed the placement took three epochs to arrive.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::cache::frequency::placement;
use crate::cache::{CacheFill, CachePolicy, Cached};
use crate::catalog::{Catalog, SampleId};

use super::LoaderConfig;

/// Reads in flight filling the placement.
pub(super) const WARM_READS: usize = 4;

/// The background threads; dropping this stops them after their current reads.
pub(super) struct Warmer {
    reading: Arc<Reading>,
}

impl Warmer {
    /// Places `source`'s cache for the job `config` plans, if its policy places (see the
    /// module's doc), and reads the placement: before returning with
    /// [`CacheFill::Before`] (and `None`), else in the background.
    pub(super) fn start(
        config: &LoaderConfig,
        catalog: &Catalog,
        source: Arc<Cached>,
    ) -> Option<Warmer> {
        let capacity = source.cache().stats().capacity;
        let kept = match (config.cache.policy, config.cache.fill) {
            (CachePolicy::Frequency, _) => {
                let reads = (0..config.cache.planned_epochs)
                    .filter_map(|epoch| config.epoch_plan(catalog.len(), epoch).ok())
                    .flat_map(|plan| plan.samples().to_vec());
                let kept = placement(reads, capacity, |id| catalog.size(id));
                source.cache().place(&kept);
                kept
            }
            (CachePolicy::Minio, CacheFill::Before) => first_that_fit(catalog, capacity),
            _ => return None,
        };
        let reading = Reading {
            kept: kept.into(),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            source,
        };
        let reading = Arc::new(reading);
        // One that fails to start leaves its share to the others; without any, the cache
        // still fills as the epochs read: slower, never wrong.
        let threads: Vec<_> = (0..WARM_READS)
            .filter_map(|n| {
                let reading = Arc::clone(&reading);
                std::thread::Builder::new()
                    .name(format!("nostall-warm-{n}"))
                    .spawn(move || reading.read())
                    .ok()
            })
            .collect();
        if config.cache.fill == CacheFill::Before {
            for thread in threads {
                // A read that panicked leaves its sample to the epoch that reads it.
                let _ = thread.join();
            }
            return None;
        }
        Some(Warmer { reading })
    }
}

/// The dataset's first samples, in order, whose sizes add up to at most `capacity`.
fn first_that_fit(catalog: &Catalog, capacity: u64) -> Vec<SampleId> {
    let mut left = capacity;
    (0..catalog.len() as SampleId)
        .map_while(|id| {
            let size = catalog.size(id).max(1);
            left = left.checked_sub(size)?;
            Some(id)
        })
        .collect()
}

/// The placement being read, shared by the threads reading it.
struct Reading {
    kept: Arc<[SampleId]>,
    next: AtomicUsize,
    stop: AtomicBool,
    source: Arc<Cached>,
}

impl Reading {
    /// Reads the placement's next samples into the cache until none is left or told to
    /// stop.
    fn read(&self) {
        let mut buffer = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            let Some(&id) = self.kept.get(self.next.fetch_add(1, Ordering::Relaxed)) else {
                return;
            };
            // A sample that cannot be read is left to the epoch that reads it, which
            // reports it.
            let _ = self.source.prefetch(id, &mut buffer);
        }
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.reading.stop.store(true, Ordering::Relaxed);
    }
}
