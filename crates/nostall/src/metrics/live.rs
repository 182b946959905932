//! Counters that live as long as the loader, across epochs: what a live exporter reads
//! while a job runs ([`super::export`]), where [`super::EpochStats`] describes one epoch.
//!
//! Worker threads and the consumer bump atomics; nothing here takes a lock on the
//! per-sample path (skips, which are rare, take one).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::{ReadaheadStats, StageCounters, StageStats};
use crate::cache::CacheStats;
use crate::storage::SourceStats;

/// Upper bounds, in seconds, of the buckets of the per-batch wait histogram: from a
/// wait nobody notices to one that idles a GPU for seconds.
pub(crate) const STALL_BUCKETS: [f64; 12] = [
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

/// The consumer's wait for each batch, in buckets (the last one unbounded).
#[derive(Debug, Default)]
pub(crate) struct WaitHistogram {
    buckets: [AtomicU64; STALL_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl WaitHistogram {
    fn observe(&self, wait: Duration) {
        let seconds = wait.as_secs_f64();
        let bucket = STALL_BUCKETS.partition_point(|&bound| bound < seconds);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(wait.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Batches per bucket (not cumulative), the last one past every bound.
    fn counts(&self) -> [u64; STALL_BUCKETS.len() + 1] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }

    /// The waits summed.
    fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed))
    }
}

/// A loader's figures since it was made, over all its epochs: what a live exporter
/// serves ([`crate::Loader::live_stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LiveStats {
    /// The epoch running, or the last one run.
    pub epoch: u64,
    /// Samples delivered.
    pub samples: u64,
    /// The consumer's wait for each batch: (upper bound in seconds, batches) per bucket,
    /// not cumulative, the last bound infinite.
    pub stall_buckets: Vec<(f64, u64)>,
    /// The waits summed: the data stall.
    pub stall: Duration,
    /// The fetch stage.
    pub fetch: StageStats,
    /// The prep stage.
    pub prep: StageStats,
    /// Samples skipped, by cause.
    pub skipped: BTreeMap<&'static str, u64>,
    /// The loader's cache.
    pub cache: CacheStats,
    /// What the source served (cache misses).
    pub storage: SourceStats,
    /// The read-ahead: its window at the last batch, its peak in that epoch, its bound.
    pub readahead: ReadaheadStats,
}

impl LiveStats {
    /// Batches delivered.
    pub fn batches(&self) -> u64 {
        self.stall_buckets.iter().map(|b| b.1).sum()
    }
}

/// A loader's figures since it was made.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) fetch: StageCounters,
    pub(crate) prep: StageCounters,
    /// Prep's thread CPU time and the bytes it read.
    pub(crate) prep_cpu: StageCounters,
    pub(crate) stall: WaitHistogram,
    pub(crate) samples: AtomicU64,
    skipped: Mutex<BTreeMap<&'static str, u64>>,
    /// The epoch running (or last run).
    pub(crate) epoch: AtomicU64,
    /// The read-ahead window's bound at the last batch, and the most bytes it held in
    /// that epoch.
    pub(crate) readahead_window: AtomicU64,
    pub(crate) readahead_peak: AtomicU64,
    /// The bound on reads in flight at the last batch.
    pub(crate) reads_in_flight: AtomicU64,
    /// The loader's fetch workers at the last batch (0 before the first).
    pub(crate) fetch_workers: AtomicU64,
}

impl Totals {
    /// A batch of `samples` samples delivered after the consumer waited `wait`.
    pub(crate) fn delivered(&self, samples: usize, wait: Duration) {
        self.stall.observe(wait);
        self.samples.fetch_add(samples as u64, Ordering::Relaxed);
    }

    /// A sample skipped for a cause of kind `kind`.
    pub(crate) fn skipped(&self, kind: &'static str) {
        *self
            .skipped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    /// The figures so far; the threads are the fetch workers at the last batch (the
    /// ceiling `threads.0` before it) and the prep workers `threads.1`, the cache, source
    /// and read-ahead bound the loader's.
    pub(crate) fn snapshot(
        &self,
        threads: (usize, usize),
        cache: CacheStats,
        storage: SourceStats,
        readahead_limit: u64,
    ) -> LiveStats {
        let counts = self.stall.counts();
        let bounds = STALL_BUCKETS.iter().copied().chain([f64::INFINITY]);
        LiveStats {
            epoch: self.epoch.load(Ordering::Relaxed),
            samples: self.samples.load(Ordering::Relaxed),
            stall_buckets: bounds.zip(counts).collect(),
            stall: self.stall.sum(),
            fetch: self
                .fetch
                .snapshot(match self.fetch_workers.load(Ordering::Relaxed) {
                    0 => threads.0,
                    workers => workers as usize,
                }),
            prep: self.prep.snapshot(threads.1),
            skipped: self
                .skipped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            cache,
            storage,
            readahead: ReadaheadStats {
                window: self.readahead_window.load(Ordering::Relaxed),
                peak: self.readahead_peak.load(Ordering::Relaxed),
                limit: readahead_limit,
                reads_in_flight: self.reads_in_flight.load(Ordering::Relaxed) as usize,
                read_time: Duration::ZERO,
                by_tier: Default::default(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_fall_in_the_bucket_of_their_upper_bound() {
        let h = WaitHistogram::default();
        let waits = [0.0, 0.1, 0.2, 3.0, 10.0, 7000.0].map(|ms| Duration::from_secs_f64(ms / 1e3));
        for wait in waits {
            h.observe(wait);
        }
        let counts = h.counts();
        // 0 and 0.1 ms in the first bucket (le 0.1 ms), 0.2 ms in le 0.5 ms, 3 ms in
        // le 5 ms, 10 ms in le 10 ms, 7 s past the last bound.
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[4], 1);
        assert_eq!(counts[5], 1);
        assert_eq!(counts[STALL_BUCKETS.len()], 1);
        assert_eq!(counts.iter().sum::<u64>(), 6);
        assert_eq!(h.sum(), waits.iter().sum::<Duration>());
    }
}
