//! Caches of encoded sample bytes in the fetch stage.
//!
//! Training reads the whole dataset once per epoch in a fresh random order. For that
//! access pattern the classic policies are the wrong ones: LRU (and the page cache, which
//! approximates it) evicts each sample shortly before its next use, so a cache of 35% of
//! the dataset hits far less than 35% of the time. [`CachePolicy::Minio`] (from CoorDL)
//! keeps the first samples it sees until it is full and never evicts: every later epoch
//! hits exactly the cached bytes, which is the best any policy can do on one node (see
//! [`crate::sim::cache`] for the numbers).
//!
//! With several ranks (a rank reads a different part of the dataset each epoch),
//! [`CachePolicy::Lookahead`] reads the plan's future (`cache/lookahead.rs`): it keeps the samples
//! this rank reads soonest, and so hits where MinIO's first-come set goes unread.
//!
//! [`CachePolicy::Frequency`] (NoPFS) keeps, for good, the samples this rank reads most
//! often over the planned epochs (`cache/frequency.rs`), read ahead in the background.
//!
//! Each policy is one implementation of a `Keeper` (`cache/policy.rs`: the seam; `lru.rs`,
//! `lookahead.rs`, `frequency.rs`), which the cache asks about every miss and tells about
//! every hit; the simulator ([`crate::sim::cache`]) runs the same keepers over the plan's
//! access stream, so what it predicts is what this code does.
//!
//! A [`Cached`] source puts a [`SampleCache`] in front of any [`Source`]: a hit copies the
//! bytes out of memory, a miss reads the source and offers the bytes to the cache. The
//! cache holds encoded bytes, several times smaller than decoded pixels, and its memory
//! is bounded by its capacity in payload bytes (plus a small per-entry overhead).

pub use crate::plan::Capacity;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Cause, Error, Result};
use crate::sample::SampleId;
use crate::storage::{NextRead, Numbering, ReadDone, Source, SourceStats, Tier};

pub(crate) mod frequency;
pub(crate) mod lookahead;
mod lru;
pub(crate) mod policy;

use policy::{Admission, Keeper};

/// Which samples a cache keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CachePolicy {
    /// Keep each sample the first time it is fetched, until full; never evict.
    #[default]
    Minio,
    /// Least recently used: the classic baseline, for comparison.
    Lru,
    /// Belady's rule over the plan's next epoch: on a miss, evict the sample read
    /// furthest ahead, unless the missed sample is read later still (see `cache/lookahead.rs`).
    Lookahead,
    /// NoPFS: keep the samples this rank reads most often over the planned epochs
    /// ([`CacheConfig::planned_epochs`]), read ahead ([`CacheFill`]); never evict.
    Frequency,
    /// No cache in the loader; repeated reads rely on the operating system's page cache.
    None,
}

impl std::str::FromStr for CachePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<CachePolicy> {
        match s {
            "minio" => Ok(CachePolicy::Minio),
            "lru" => Ok(CachePolicy::Lru),
            "lookahead" => Ok(CachePolicy::Lookahead),
            "frequency" => Ok(CachePolicy::Frequency),
            "none" => Ok(CachePolicy::None),
            _ => Err(Error::Config(format!(
                "unknown cache policy {s:?}: use minio, lookahead, frequency, lru or none"
            ))),
        }
    }
}

impl CachePolicy {
    /// The policy's name, as its `FromStr` reads it.
    pub fn name(self) -> &'static str {
        match self {
            CachePolicy::Minio => "minio",
            CachePolicy::Lru => "lru",
            CachePolicy::Lookahead => "lookahead",
            CachePolicy::Frequency => "frequency",
            CachePolicy::None => "none",
        }
    }
}

impl std::fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// When a cache that places its samples reads them: [`CachePolicy::Frequency`] (the
/// samples this rank reads most often) or, before the first epoch only,
/// [`CachePolicy::Minio`] (the dataset's first samples that fit: the cache a job would
/// hold after its first epoch, which a baseline measures from the start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CacheFill {
    /// From the moment the loader is made, beside the epochs' own reads: the first batch
    /// comes at once, and the first epoch hits what has arrived ahead of its reads (over
    /// a link the reads saturate, a sample arrives once either way: the first epoch moves
    /// the same bytes, and the cache pays off from the second).
    #[default]
    Background,
    /// Before the loader's first read: making the loader reads the placement, and every
    /// epoch, the first too, hits what `nostall simulate cache` predicts (NoPFS's
    /// setting, a cache filled before training).
    Before,
}

impl std::str::FromStr for CacheFill {
    type Err = Error;

    fn from_str(s: &str) -> Result<CacheFill> {
        match s {
            "background" => Ok(CacheFill::Background),
            "before" => Ok(CacheFill::Before),
            _ => Err(Error::Config(format!(
                "unknown cache fill {s:?}: use background (beside the epochs' reads) or \
                 before (before the loader's first read)"
            ))),
        }
    }
}

impl std::fmt::Display for CacheFill {
    /// The name its `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheFill::Background => "background",
            CacheFill::Before => "before",
        })
    }
}

/// A cache's policy and size.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CacheConfig {
    /// Which samples it keeps.
    pub policy: CachePolicy,
    /// How much it may hold.
    pub capacity: Capacity,
    /// The epochs the job will run, which [`CachePolicy::Frequency`] counts reads over
    /// (0: not given).
    pub planned_epochs: u64,
    /// When [`CachePolicy::Frequency`] reads its placement.
    pub fill: CacheFill,
}

impl CacheConfig {
    /// A cache of `policy` holding up to `capacity`.
    pub fn new(policy: CachePolicy, capacity: Capacity) -> CacheConfig {
        CacheConfig {
            policy,
            capacity,
            planned_epochs: 0,
            fill: CacheFill::Background,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.policy == CachePolicy::Frequency && self.planned_epochs == 0 {
            return Err(Error::Config(
                "the frequency cache policy keeps the samples each rank reads most often \
                 over the job's epochs: give their number (cache_epochs)"
                    .into(),
            ));
        }
        if self.fill == CacheFill::Before
            && ![CachePolicy::Frequency, CachePolicy::Minio].contains(&self.policy)
        {
            return Err(Error::Config(format!(
                "cache_fill=before reads the cache's placement before the first epoch, which \
                 the {} cache policy does not have: use cache_policy=frequency or minio, or \
                 leave cache_fill out",
                self.policy
            )));
        }
        Ok(())
    }
}

impl Default for CacheConfig {
    /// No cache.
    fn default() -> CacheConfig {
        CacheConfig::new(CachePolicy::None, Capacity::Bytes(0))
    }
}

/// A cache's counters, cumulative since it was made (subtract two readings for an
/// interval such as one epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads that went to the source.
    pub misses: u64,
    /// Bytes served from the cache.
    pub hit_bytes: u64,
    /// Bytes read from the source on misses.
    pub miss_bytes: u64,
    /// Samples held now.
    pub entries: u64,
    /// Bytes held now.
    pub used: u64,
    /// The most the cache may hold.
    pub capacity: u64,
}

impl CacheStats {
    /// The counters accumulated since `earlier`; the occupancy is this reading's.
    pub fn since(&self, earlier: &CacheStats) -> CacheStats {
        CacheStats {
            hits: self.hits - earlier.hits,
            misses: self.misses - earlier.misses,
            hit_bytes: self.hit_bytes - earlier.hit_bytes,
            miss_bytes: self.miss_bytes - earlier.miss_bytes,
            ..*self
        }
    }

    /// Hits over all reads, 0 when nothing was read.
    pub fn hit_rate(&self) -> f64 {
        let reads = self.hits + self.misses;
        if reads == 0 {
            0.0
        } else {
            self.hits as f64 / reads as f64
        }
    }
}

/// Encoded sample bytes in memory, under a byte capacity, kept by a [`CachePolicy`].
///
/// Shared by all fetch threads. Entries are reference-counted so that a hit copies the
/// bytes out after releasing the lock. What to keep is the policy's `Keeper`'s to say.
#[derive(Debug)]
pub struct SampleCache {
    capacity: u64,
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
}

#[derive(Debug)]
struct Entries {
    map: HashMap<SampleId, Arc<[u8]>>,
    used: u64,
    keeper: Box<dyn Keeper>,
}

impl SampleCache {
    /// An empty cache of `capacity` bytes.
    pub fn new(policy: CachePolicy, capacity: u64) -> SampleCache {
        let capacity = if policy == CachePolicy::None {
            0
        } else {
            capacity
        };
        let entries = Entries {
            map: HashMap::new(),
            used: 0,
            keeper: policy.keeper(capacity),
        };
        SampleCache {
            capacity,
            entries: Mutex::new(entries),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
            miss_bytes: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies sample `id` into `out` and counts a hit, or counts nothing and returns
    /// `false` when it is not cached.
    pub fn get(&self, id: SampleId, out: &mut Vec<u8>) -> bool {
        let bytes = {
            let mut entries = self.lock();
            let Some(bytes) = entries.map.get(&id).cloned() else {
                return false;
            };
            entries.keeper.touch(id);
            bytes
        };
        out.clear();
        out.extend_from_slice(&bytes);
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.hit_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        true
    }

    /// Counts a miss of `len` bytes served by the source.
    fn count_miss(&self, len: usize) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.miss_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Offers sample `id`'s bytes after a miss; the policy decides whether to keep them.
    pub fn offer(&self, id: SampleId, bytes: &[u8]) {
        let len = bytes.len() as u64;
        if len == 0 || len > self.capacity {
            return;
        }
        let mut entries = self.lock();
        if entries.map.contains_key(&id) {
            return;
        }
        let Admission::Keep(victims) = entries.keeper.admit(id, len) else {
            return;
        };
        for victim in victims {
            let evicted = entries
                .map
                .remove(&victim)
                .expect("the keeper's samples are held");
            entries.used -= evicted.len() as u64;
        }
        // Copied only once kept (under the lock: a miss of a full MinIO cache, the common
        // case once it has filled, copies nothing).
        entries.used += len;
        entries.map.insert(id, Arc::from(bytes));
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        let (entries, used) = {
            let e = self.lock();
            (e.map.len() as u64, e.used)
        };
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
            miss_bytes: self.miss_bytes.load(Ordering::Relaxed),
            entries,
            used,
            capacity: self.capacity,
        }
    }

    /// Whether sample `id` is cached.
    pub fn contains(&self, id: SampleId) -> bool {
        self.lock().map.contains_key(&id)
    }

    /// Keeps, from now on, only `ids` (for [`CachePolicy::Frequency`]: its placement,
    /// which fits the capacity).
    pub(crate) fn place(&self, ids: &[SampleId]) {
        self.lock().keeper.place(ids);
    }

    /// Whether the policy reads the plan's future ([`SampleCache::begin_epoch`]).
    pub fn looks_ahead(&self) -> bool {
        self.lock().keeper.looks_ahead()
    }

    /// Tells a policy that reads the future that `epoch`'s reads begin, and which samples
    /// this rank reads in the next one (in order); nothing for the others.
    pub fn begin_epoch(&self, epoch: u64, next: &[SampleId]) {
        self.lock().keeper.begin_epoch(epoch, next);
    }
}

/// A source with a [`SampleCache`] in front of it.
#[derive(Debug)]
pub struct Cached<S: ?Sized = dyn Source> {
    cache: SampleCache,
    inner: Arc<S>,
}

impl<S: Source + ?Sized> Cached<S> {
    /// `inner` behind a cache of `capacity` bytes kept by `policy`.
    pub fn new(inner: Arc<S>, policy: CachePolicy, capacity: u64) -> Cached<S> {
        Cached {
            cache: SampleCache::new(policy, capacity),
            inner,
        }
    }

    /// The cache.
    pub fn cache(&self) -> &SampleCache {
        &self.cache
    }

    /// Reads sample `id` into the cache ahead of its use, unless it is cached already:
    /// not a read of the pipeline, so neither a hit nor a miss (the source counts it).
    pub(crate) fn prefetch(
        &self,
        id: SampleId,
        buffer: &mut Vec<u8>,
    ) -> std::result::Result<(), Cause> {
        if self.cache.contains(id) {
            return Ok(());
        }
        self.inner.read(id, buffer)?;
        self.cache.offer(id, buffer);
        Ok(())
    }

    /// Counts a miss the source below served with `bytes`, and offers them to the cache.
    fn miss(&self, id: SampleId, bytes: &[u8]) {
        self.cache.count_miss(bytes.len());
        self.cache.offer(id, bytes);
    }
}

impl<S: Source + ?Sized> Source for Cached<S> {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
        if self.cache.get(id, out) {
            return Ok(());
        }
        self.inner.read(id, out)?;
        self.miss(id, out);
        Ok(())
    }

    /// Hits end at once; the misses go to the source below, which keeps them in flight
    /// together if it can.
    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        let numbers = RefCell::new(Numbering::default());
        let done = RefCell::new(done);
        let mut next_miss = || loop {
            let (id, mut out) = next()?;
            let number = numbers.borrow_mut().given();
            if self.cache.get(id, &mut out) {
                (*done.borrow_mut())(number, out, Ok(()));
            } else {
                numbers.borrow_mut().pass(number, id);
                return Some((id, out));
            }
        };
        self.inner
            .read_each(&mut next_miss, &mut |below, out, result| {
                let Some((number, id)) = numbers.borrow_mut().ended(below) else {
                    return; // a source that ended it twice, or never was given it
                };
                if result.is_ok() {
                    self.miss(id, &out);
                }
                (*done.borrow_mut())(number, out, result);
            });
    }

    fn reads_at_once(&self) -> usize {
        self.inner.reads_at_once()
    }

    fn tier(&self, id: SampleId) -> Tier {
        if self.cache.capacity > 0 && self.cache.contains(id) {
            Tier::Memory
        } else {
            self.inner.tier(id)
        }
    }

    fn location(&self, id: SampleId) -> String {
        self.inner.location(id)
    }

    fn shard(&self, id: SampleId) -> Option<u32> {
        self.inner.shard(id)
    }

    fn shard_location(&self, shard: u32) -> String {
        self.inner.shard_location(shard)
    }

    fn set_group_memory(&self, bytes: u64) {
        self.inner.set_group_memory(bytes);
    }

    /// The source's own counters: what storage served, misses only.
    fn stats(&self) -> SourceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Serves `id % 7 + 1` kilobytes of the byte `id` for every id.
    #[derive(Debug, Default)]
    struct Synthetic {
        reads: AtomicU64,
    }

    impl Source for Synthetic {
        fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            out.clear();
            out.resize((id as usize % 7 + 1) * 1000, id as u8);
            Ok(())
        }
        fn location(&self, id: SampleId) -> String {
            id.to_string()
        }
        fn stats(&self) -> SourceStats {
            SourceStats::default()
        }
    }

    fn size(id: SampleId) -> u64 {
        (id % 7 + 1) * 1000
    }

    #[test]
    fn minio_hits_exactly_what_it_first_cached_and_never_evicts() {
        let source = Arc::new(Synthetic::default());
        let cached = Cached::new(source.clone(), CachePolicy::Minio, 50_000);
        let mut out = Vec::new();
        let mut rng = Rng::new(1);
        let mut order: Vec<SampleId> = (0..100).collect();
        let mut kept = Vec::new();
        for epoch in 0..4 {
            rng.shuffle(&mut order);
            let before = cached.cache().stats();
            for &id in &order {
                cached.read(id, &mut out).unwrap();
                assert_eq!(out.len() as u64, size(id));
                assert!(out.iter().all(|&b| b == id as u8));
            }
            let now: Vec<SampleId> = (0..100).filter(|&id| cached.cache().contains(id)).collect();
            if epoch == 0 {
                kept = now;
            } else {
                assert_eq!(now, kept, "MinIO must keep its first set");
                let epoch_stats = cached.cache().stats().since(&before);
                assert_eq!(epoch_stats.hits, kept.len() as u64);
                assert_eq!(
                    epoch_stats.hit_bytes,
                    kept.iter().map(|&i| size(i)).sum::<u64>()
                );
            }
        }
        let stats = cached.cache().stats();
        assert!(stats.used <= 50_000 && stats.used > 50_000 - 7_000);
        assert_eq!(source.reads.load(Ordering::Relaxed), stats.misses);
    }

    #[test]
    fn reads_given_together_hit_miss_and_fill_the_cache_as_one_at_a_time() {
        for policy in [CachePolicy::Minio, CachePolicy::Lru] {
            let alone = Cached::new(Arc::new(Synthetic::default()), policy, 50_000);
            let together = Cached::new(Arc::new(Synthetic::default()), policy, 50_000);
            let mut rng = Rng::new(3);
            let mut order: Vec<SampleId> = (0..100).collect();
            let mut out = Vec::new();
            for _ in 0..3 {
                rng.shuffle(&mut order);
                for group in order.chunks(8) {
                    let mut ended = vec![None; group.len()];
                    let mut reads = group.iter().map(|&id| (id, Vec::new()));
                    together.read_each(&mut || reads.next(), &mut |i, bytes, result| {
                        assert!(ended[i].replace((bytes, result)).is_none());
                    });
                    for (&id, ended) in group.iter().zip(ended) {
                        alone.read(id, &mut out).unwrap();
                        assert_eq!(ended, Some((out.clone(), Ok(()))), "sample {id}");
                    }
                }
                assert_eq!(alone.cache().stats(), together.cache().stats());
            }
            let held = |c: &Cached<Synthetic>| -> Vec<SampleId> {
                (0..100).filter(|&id| c.cache().contains(id)).collect()
            };
            assert_eq!(held(&alone), held(&together));
        }
    }

    #[test]
    fn memory_never_exceeds_capacity_and_accounting_is_exact() {
        for policy in [CachePolicy::Minio, CachePolicy::Lru] {
            let cache = SampleCache::new(policy, 20_000);
            let mut rng = Rng::new(7);
            let mut out = Vec::new();
            for _ in 0..5_000 {
                let id = rng.below(60);
                if !cache.get(id, &mut out) {
                    cache.offer(id, &vec![1; size(id) as usize]);
                }
                let held: u64 = (0..60).filter(|&i| cache.contains(i)).map(size).sum();
                let stats = cache.stats();
                assert_eq!(stats.used, held, "{policy:?}");
                assert!(stats.used <= 20_000, "{policy:?}: {}", stats.used);
            }
        }
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let cache = SampleCache::new(CachePolicy::Lru, 3_000);
        let mut out = Vec::new();
        for id in [0, 7, 14] {
            cache.offer(id, &[0; 1000]); // size(id) = 1000 for multiples of 7
        }
        assert!(cache.get(0, &mut out)); // 7 is now the oldest
        cache.offer(21, &[0; 1000]);
        assert!(!cache.contains(7));
        assert!(cache.contains(0) && cache.contains(14) && cache.contains(21));
        cache.offer(99, &[0; 4000]); // larger than the whole cache: refused, nothing evicted
        assert_eq!(cache.stats().entries, 3);
    }

    #[test]
    fn no_cache_reads_the_source_every_time() {
        let source = Arc::new(Synthetic::default());
        let cached = Cached::new(source.clone(), CachePolicy::None, 1 << 30);
        let mut out = Vec::new();
        for id in [1, 1, 2, 1] {
            cached.read(id, &mut out).unwrap();
        }
        assert_eq!(source.reads.load(Ordering::Relaxed), 4);
        assert_eq!(cached.cache().stats().used, 0);
    }

    #[test]
    fn capacities_parse_as_users_write_them() {
        let parse = |s: &str| s.parse::<Capacity>().unwrap();
        assert_eq!(parse("35%"), Capacity::Fraction(0.35));
        assert_eq!(parse("0.35"), Capacity::Fraction(0.35));
        assert_eq!(parse("1.0"), Capacity::Fraction(1.0));
        assert_eq!(parse("512MiB"), Capacity::Bytes(512 << 20));
        assert_eq!(parse("2GB"), Capacity::Bytes(2_000_000_000));
        assert_eq!(parse("1000"), Capacity::Bytes(1000));
        assert_eq!(Capacity::Fraction(0.5).bytes(1000), 500);
        for bad in ["", "lots", "150%", "12 parsecs"] {
            assert!(bad.parse::<Capacity>().is_err(), "{bad}");
        }
    }
}
