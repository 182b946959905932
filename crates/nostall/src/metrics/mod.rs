//! What the loader measures about itself: the consumer's wait for each batch (the data
//! stall) and, per stage, busy time and throughput.
//!
//! Stage counters are atomics bumped by worker threads; an [`EpochStats`] is a snapshot
//! taken by the consumer, cheap enough to read after every batch.
//!
//! Stall attribution: every sample's fetch and prep time goes to a `CostLog`, which
//! keeps the costliest few samples and the sums per shard, so that an epoch can name the
//! files to re-encode (prep) or move (fetch). Keeping only a bounded top list costs one
//! comparison per sample once the list is full.

#[cfg(feature = "prometheus")]
pub mod export;
pub(crate) mod live;

pub use live::LiveStats;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::cache::CacheStats;
use crate::sample::SampleId;
use crate::storage::{Source, SourceStats};

/// Running counters of one stage (fetch or prep), shared by its threads.
#[derive(Debug, Default)]
pub(crate) struct StageCounters {
    busy_ns: AtomicU64,
    items: AtomicU64,
    bytes: AtomicU64,
}

impl StageCounters {
    pub(crate) fn record(&self, busy: Duration, bytes: u64) {
        self.busy_ns
            .fetch_add(busy.as_nanos() as u64, Ordering::Relaxed);
        self.items.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, threads: usize) -> StageStats {
        StageStats {
            threads,
            busy: Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed)),
            items: self.items.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// Samples kept in [`EpochStats::slowest`].
const SLOWEST_SAMPLES: usize = 10;
/// Shards kept in [`EpochStats::slowest_shards`].
const SLOWEST_SHARDS: usize = 5;

/// The costliest samples of an epoch and the cost of each shard, recorded by prep
/// threads as samples finish.
#[derive(Debug, Default)]
pub(crate) struct CostLog {
    /// Total nanoseconds of the cheapest sample kept, once the list is full: samples
    /// below it skip the lock.
    floor_ns: AtomicU64,
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// (total, id, fetch, prep), costliest first.
    slowest: Vec<(Duration, SampleId, Duration, Duration)>,
    /// Per shard index: samples, fetch and prep time.
    shards: HashMap<u32, (u64, Duration, Duration)>,
}

impl CostLog {
    /// Records that sample `id` (in `shard`, if samples share blobs) took `fetch` to
    /// read and `prep` to prepare.
    pub(crate) fn record(&self, id: SampleId, shard: Option<u32>, fetch: Duration, prep: Duration) {
        let total = fetch + prep;
        let slow = total.as_nanos() as u64 > self.floor_ns.load(Ordering::Relaxed);
        if !slow && shard.is_none() {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shard) = shard {
            let sums = kept.shards.entry(shard).or_default();
            sums.0 += 1;
            sums.1 += fetch;
            sums.2 += prep;
        }
        if slow {
            let at = kept.slowest.partition_point(|k| k.0 >= total);
            kept.slowest.insert(at, (total, id, fetch, prep));
            kept.slowest.truncate(SLOWEST_SAMPLES);
            if kept.slowest.len() == SLOWEST_SAMPLES {
                let floor = kept.slowest[SLOWEST_SAMPLES - 1].0;
                self.floor_ns
                    .store(floor.as_nanos() as u64, Ordering::Relaxed);
            }
        }
    }

    /// The costliest samples and shards so far, named by `source`.
    pub(crate) fn snapshot(&self, source: &dyn Source) -> (Vec<SampleCost>, Vec<ShardCost>) {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let samples = kept
            .slowest
            .iter()
            .map(|&(_, id, fetch, prep)| SampleCost {
                id,
                location: source.location(id),
                fetch,
                prep,
            })
            .collect();
        let mut shards: Vec<(&u32, &(u64, Duration, Duration))> = kept.shards.iter().collect();
        // Costliest first; ties by index, so that the order never depends on the map's.
        shards.sort_by_key(|&(&shard, &(_, fetch, prep))| (std::cmp::Reverse(fetch + prep), shard));
        let shards = shards
            .into_iter()
            .take(SLOWEST_SHARDS)
            .map(|(&shard, &(samples, fetch, prep))| ShardCost {
                shard: source.shard_location(shard),
                samples,
                fetch,
                prep,
            })
            .collect();
        (samples, shards)
    }
}

/// What one sample cost in an epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleCost {
    /// The sample.
    pub id: SampleId,
    /// Where it lives (a path, an object, a tar member).
    pub location: String,
    /// Time to read its bytes (from the cache, a peer or storage).
    pub fetch: Duration,
    /// Time to prepare it (decode and augment).
    pub prep: Duration,
}

/// What the samples of one shard cost together in an epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardCost {
    /// Where the shard lives.
    pub shard: String,
    /// Samples of it read this epoch.
    pub samples: u64,
    /// Their read time, summed.
    pub fetch: Duration,
    /// Their prep time, summed.
    pub prep: Duration,
}

/// One stage's work so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageStats {
    /// Threads in the stage.
    pub threads: usize,
    /// Time its threads spent working (summed over threads), not waiting.
    pub busy: Duration,
    /// Samples processed.
    pub items: u64,
    /// Bytes processed (read, for fetch; written, for prep).
    pub bytes: u64,
}

impl StageStats {
    /// Samples per second of busy time of one thread: the stage's speed per core.
    pub fn rate_per_thread(&self) -> f64 {
        rate(self.items, self.busy)
    }

    /// Samples per second the whole stage could sustain if never starved:
    /// per-thread rate × threads.
    pub fn capacity(&self) -> f64 {
        self.rate_per_thread() * self.threads as f64
    }
}

fn rate(items: u64, time: Duration) -> f64 {
    if time.is_zero() {
        0.0
    } else {
        items as f64 / time.as_secs_f64()
    }
}

/// An epoch's figures so far (or in full, once it has ended).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpochStats {
    /// The epoch.
    pub epoch: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Samples delivered.
    pub samples: u64,
    /// Samples skipped, by cause (see [`crate::Cause::kind`]).
    pub skipped: BTreeMap<&'static str, u64>,
    /// Time from the epoch's start to now (or to its last batch).
    pub wall: Duration,
    /// Total time the consumer waited for batches: the data stall.
    pub wait: Duration,
    /// The longest single wait.
    pub max_wait: Duration,
    /// The wait for the epoch's first batch (of this run): what starting the pipeline
    /// cost the consumer, unless the epoch was started ahead.
    pub first_wait: Duration,
    /// The fetch stage.
    pub fetch: StageStats,
    /// The prep stage; its threads are the workers the pool last gave the prep role.
    pub prep: StageStats,
    /// Why that many workers prepare (the scheduler's prep role, `sched/roles`).
    pub prep_reason: PrepReason,
    /// Time prep threads waited for fetched bytes (summed over threads): how much the
    /// fetch stage held prep back.
    pub prep_starved: Duration,
    /// The loader's cache in this epoch: hits, misses and bytes of each.
    pub cache: CacheStats,
    /// What the storage source served in this epoch (cache misses only).
    pub storage: SourceStats,
    /// The read-ahead window along the plan.
    pub readahead: ReadaheadStats,
    /// Samples prepared before the consumer asked for the epoch, while the previous one
    /// ended (see [`LoaderConfig::overlap_epochs`](crate::LoaderConfig::overlap_epochs)).
    pub prepared_ahead: u64,
    /// The costliest samples so far (fetch + prep), costliest first: at most 10.
    pub slowest: Vec<SampleCost>,
    /// The costliest shards so far, when samples share blobs (tar shards): at most 5.
    pub slowest_shards: Vec<ShardCost>,
}

/// The fetch stage's read-ahead along the plan: samples fetched before prep asks for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadaheadStats {
    /// The window's byte bound now; it adapts to fetch latency and prep's pace.
    pub window: u64,
    /// The most bytes ever held (in flight or waiting for prep) in this epoch.
    pub peak: u64,
    /// The configured bound the window never exceeds.
    pub limit: u64,
    /// The bound on reads in flight now (Little's law, up to `fetch_threads`).
    pub reads_in_flight: usize,
    /// The time of one read the bound followed at its last revision: the mean over the
    /// reads then to come of their tier's time (see `by_tier`).
    pub read_time: Duration,
    /// Each tier's part in it, by [`Tier::index`](crate::storage::Tier::index).
    pub by_tier: [TierReads; 3],
}

/// One tier's reads, as the read-ahead's bound on reads in flight last saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierReads {
    /// Of the reads to come at the last revision, those from this tier.
    pub upcoming: u32,
    /// The smoothed time of a read from this tier (`None` before one was timed).
    pub time: Option<Duration>,
}

impl EpochStats {
    /// Samples delivered per second of wall time.
    pub fn throughput(&self) -> f64 {
        rate(self.samples, self.wall)
    }

    /// Share of wall time the consumer spent waiting for data, 0–1.
    pub fn stall_fraction(&self) -> f64 {
        if self.wall.is_zero() {
            0.0
        } else {
            self.wait.as_secs_f64() / self.wall.as_secs_f64()
        }
    }

    /// Samples skipped, all causes together.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }
}

impl fmt::Display for EpochStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "epoch {}: {} samples in {} batches, {:.2} s, {:.1} samples/s",
            self.epoch,
            self.samples,
            self.batches,
            self.wall.as_secs_f64(),
            self.throughput()
        )?;
        writeln!(
            f,
            "  data stall: {:.3} s waited ({:.1}% of the epoch), longest wait {:.1} ms, first \
             batch after {:.1} ms",
            self.wait.as_secs_f64(),
            100.0 * self.stall_fraction(),
            self.max_wait.as_secs_f64() * 1e3,
            self.first_wait.as_secs_f64() * 1e3
        )?;
        if self.prepared_ahead > 0 {
            writeln!(
                f,
                "  prepared ahead: {} samples while the previous epoch ended",
                self.prepared_ahead
            )?;
        }
        for (name, s) in [("fetch", &self.fetch), ("prep", &self.prep)] {
            writeln!(
                f,
                "  {name}: {} threads, busy {:.2} s, {:.0} samples/s per thread, capacity {:.0} samples/s, {:.1} MB",
                s.threads,
                s.busy.as_secs_f64(),
                s.rate_per_thread(),
                s.capacity(),
                s.bytes as f64 / 1e6
            )?;
        }
        writeln!(
            f,
            "  cache: {} hits ({:.1}%), {:.1} MB from cache, {:.1} MB from storage, {:.1}/{:.1} MB held",
            self.cache.hits,
            100.0 * self.cache.hit_rate(),
            self.cache.hit_bytes as f64 / 1e6,
            self.storage.bytes as f64 / 1e6,
            self.cache.used as f64 / 1e6,
            self.cache.capacity as f64 / 1e6,
        )?;
        if !self.skipped.is_empty() {
            let causes: Vec<String> = self
                .skipped
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            writeln!(
                f,
                "  skipped: {} ({})",
                self.skipped_total(),
                causes.join(", ")
            )?;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for cost in self.slowest.iter().take(3) {
            writeln!(
                f,
                "  slow sample: {} (fetch {:.1} ms, prep {:.1} ms)",
                cost.location,
                ms(cost.fetch),
                ms(cost.prep)
            )?;
        }
        for cost in self.slowest_shards.iter().take(3) {
            writeln!(
                f,
                "  slow shard: {} ({} samples, fetch {:.1} ms, prep {:.1} ms)",
                cost.shard,
                cost.samples,
                ms(cost.fetch),
                ms(cost.prep)
            )?;
        }
        Ok(())
    }
}
/// Why the prep workers are as many as they are, for `nostall analyze` and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PrepReason {
    /// Nothing measured yet (or the count is held fixed): every worker the loader may
    /// have.
    #[default]
    Ceiling,
    /// The consumer takes samples as fast as the workers can prepare them: all of them.
    ConsumerFaster,
    /// The consumer's rate needs this many, with headroom.
    ConsumerNeeds,
    /// The consumer waited for a batch, so one more was taken.
    Stalled,
}

impl std::fmt::Display for PrepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PrepReason::Ceiling => "every worker the loader may have",
            PrepReason::ConsumerFaster => "the consumer takes batches as fast as they come",
            PrepReason::ConsumerNeeds => "as many as keep a quarter ahead of the consumer's rate",
            PrepReason::Stalled => "one more after the consumer waited",
        })
    }
}
