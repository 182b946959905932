//! A simulator of sample-cache policies over nostall's real access stream.
//!
//! This module simulates one cache per worker; [`super::cluster`] simulates a multi-node job
//! over a partitioned cache (bytes from storage, between nodes and from local caches).
//!
//! # The model
//!
//! A dataset of `N` equally sized samples is read for several epochs. Each epoch visits
//! every sample once in the seeded random order of [`crate::plan`]; with `W` workers
//! (ranks), the epoch's global permutation is split among them exactly as the loader
//! splits it ([`EpochPlan`] with the [`Shard::Pad`] policy: rank `r` takes every `W`-th
//! sample starting at `r`). Each worker has its own cache of `capacity = floor(c·N)`
//! samples (per-worker caches, as in NoPFS; with `W = 1` this is the single-node case of
//! CoorDL's MinIO study). A worker's access either *hits* its cache or *misses* (the
//! sample is read from elsewhere and the policy decides whether to keep it). Per epoch
//! the simulator counts hits and accesses summed over workers; the *steady-state* hit
//! rate is the mean over every epoch but the first, which starts from an empty cache.
//!
//! # Why each policy behaves as it does
//!
//! A random permutation per epoch is the worst case for recency: a sample read now is
//! next read about one epoch (`N` accesses) later, so a cache smaller than the dataset
//! must evict it before its reuse unless something protects it.
//!
//! - [`SimPolicy::LRU`] keeps the `capacity` most recently used samples. A sample hits
//!   only when few enough distinct samples were read between its two uses: late in one
//!   epoch and early in the next. That is a small corner of the square of positions,
//!   a little over `c²/2` of the accesses (0.5% at 10% cache, 15.4% at 50%), and since
//!   every epoch starts from the same situation, epoch 1 is already steady.
//! - [`SimPolicy::TwoList`] approximates the Linux page cache: a first access enters an
//!   *inactive* list, a hit there promotes to an *active* list that a scan cannot flush;
//!   the active list is capped (its tail is demoted to the head of the inactive list) and
//!   eviction takes the inactive tail. Samples that hit once are shielded and hit again
//!   the next epoch, so the hit rate *climbs* epoch after epoch, each epoch adding the
//!   LRU-like lucky hits to the shielded set, until the active list is full; in the long
//!   run it tends to the active list's share of the dataset (about `c/2`). The cap is
//!   half of the cache (`TWO_LIST_ACTIVE_SHARE`), Linux's rule for small memories
//!   (`inactive_is_low` with ratio 1: active never outgrows inactive). With it the
//!   simulator reproduces the reference table of the research notes (1.2/6.8/12.8/
//!   22.5/50.9% at 10/25/35/50/80%) for the default 5-epoch run, whose "steady state"
//!   (epochs 1–4) for this policy is still the warm-up climb, not the long-run limit.
//! - [`SimPolicy::MINIO`] (CoorDL) inserts until full and never evicts. Every later epoch
//!   reads each sample once, so it gets exactly `capacity` hits per epoch on one node.
//!   Nothing can do better there: a sample is read once per epoch, so it can hit only if
//!   it was cached when the epoch began, and at most `capacity` were.
//! - [`SimPolicy::Belady`] evicts the sample whose next use is furthest in the future
//!   (or does not keep the new sample, if its own next use is the furthest), using the
//!   known future stream. It is the optimum of all policies that fill on a miss, so it
//!   equals MinIO on one node; with several workers a worker's epoch holds only a random
//!   `1/W` of the samples, and Belady beats MinIO by keeping those needed soonest.
//! - [`SimPolicy::LOOKAHEAD`] is the loader's `lookahead` cache policy
//!   (`cache/lookahead.rs`, the same code): Belady's rule with the loader's horizon,
//!   the next epoch's plan. On one node it equals Belady (and MinIO); with several
//!   workers it keeps what this worker reads next epoch, so it beats MinIO, though not
//!   unbounded Belady, which also sees the epochs after.
//! - [`SimPolicy::FREQUENCY`] (NoPFS) fills each worker's cache, before training, with
//!   the `capacity` samples that worker will access most often over all epochs (ties
//!   broken by earlier first access), fetched ahead by the clairvoyant prefetcher, so
//!   even a first access hits; the contents never change. On one node every sample is
//!   read once per epoch, all counts tie and it gets exactly `c`. With `W` workers a
//!   worker's count of a sample is Binomial(E, 1/W), and the top of that distribution
//!   gives more than `c`: about 9.6/17.7/38.3% at 5/10/25% for 16 workers over 90 epochs,
//!   NoPFS's figures. Because it prefetches instead of filling on a miss, it is not bound
//!   by Belady's optimum in every epoch (its epoch 0 already hits).
//!
//! The loader's policies run through their own `Keeper`s (`cache/policy.rs`): what
//! is simulated is the code the loader runs. The two references are the simulator's own,
//! indexed by sample id in `Vec`s (intrusive linked lists over `u32` arrays for the
//! two-list cache, an ordered set of next-use positions for Belady). 20 000 samples × 90
//! epochs × 16 workers simulate in under a second per policy in a release build.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::cache::frequency::placement;
use crate::cache::policy::{Admission, Keeper};
use crate::cache::CachePolicy;
use crate::error::{Error, Result};
use crate::plan::{EpochPlan, PlanConfig, Shard};
use crate::sample::SampleId;

/// Share of the cache the [`SimPolicy::TwoList`] active list may hold: Linux keeps the
/// active list no larger than the inactive one on small memories (inactive ratio 1), and
/// this value reproduces the reference hit rates (see the module documentation).
pub(crate) const TWO_LIST_ACTIVE_SHARE: f64 = 0.5;

/// A cache policy the simulator knows: the loader's, run with the loader's own code
/// (their `Keeper`s), and two references the loader does not offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SimPolicy {
    /// One of the loader's policies.
    Loader(CachePolicy),
    /// The Linux page cache, approximated: an inactive and a capped active list (what a
    /// loader without a cache of its own gets from the operating system).
    TwoList,
    /// Belady's optimum: evict the sample whose next use is furthest away, every future
    /// epoch known (the bound for policies that fill on a miss).
    Belady,
}

impl SimPolicy {
    /// LRU (the loader's).
    pub const LRU: SimPolicy = SimPolicy::Loader(CachePolicy::Lru);
    /// CoorDL's MinIO (the loader's): insert until full, never evict.
    pub const MINIO: SimPolicy = SimPolicy::Loader(CachePolicy::Minio);
    /// The loader's `lookahead`: Belady's rule over the next epoch's plan.
    pub const LOOKAHEAD: SimPolicy = SimPolicy::Loader(CachePolicy::Lookahead);
    /// NoPFS (the loader's `frequency`): each worker's most frequently read samples,
    /// prefetched.
    pub const FREQUENCY: SimPolicy = SimPolicy::Loader(CachePolicy::Frequency);

    /// Every policy, in the order tables show them.
    pub const ALL: [SimPolicy; 6] = [
        SimPolicy::LRU,
        SimPolicy::TwoList,
        SimPolicy::MINIO,
        SimPolicy::Belady,
        SimPolicy::LOOKAHEAD,
        SimPolicy::FREQUENCY,
    ];

    /// The policy's short name, as the command line spells it (e.g. `"two-list"`): the
    /// loader's policies by the loader's names.
    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Loader(policy) => policy.name(),
            SimPolicy::TwoList => "two-list",
            SimPolicy::Belady => "belady",
        }
    }
}

impl fmt::Display for SimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SimPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<SimPolicy> {
        SimPolicy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown cache policy {s:?} (known: lru, two-list, minio, belady, lookahead, \
                     frequency)"
                ))
            })
    }
}

/// One simulation: a dataset, a cache size, a training run and a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Samples in the dataset (`N`), at least 1.
    pub samples: usize,
    /// Each worker's cache size as a fraction of the dataset, in `[0, 1]`.
    pub cache_fraction: f64,
    /// Epochs simulated, at least 1 (at least 2 for a steady-state rate).
    pub epochs: u64,
    /// Workers (world size), each with its own cache, at least 1.
    pub workers: usize,
    /// Shuffle seed of the plan.
    pub seed: u64,
    /// The cache policy.
    pub policy: SimPolicy,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            samples: 20_000,
            cache_fraction: 0.35,
            epochs: 5,
            workers: 1,
            seed: 0,
            policy: SimPolicy::MINIO,
        }
    }
}

/// Cache capacity in samples for a fraction of a dataset: `floor(fraction · samples)`,
/// tolerant of the rounding of decimal fractions (0.35 · 20 000 gives 7 000).
pub fn capacity_for(fraction: f64, samples: usize) -> usize {
    let exact = fraction * samples as f64;
    (exact + exact.abs() * 1e-12 + 1e-9).floor().max(0.0) as usize
}

/// Hits and accesses of one epoch, summed over workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EpochCount {
    /// The epoch, from 0.
    pub epoch: u64,
    /// Accesses served by the accessing worker's own cache.
    pub hits: u64,
    /// All accesses (every worker's samples of the epoch).
    pub accesses: u64,
}

impl EpochCount {
    /// `hits / accesses` (0 for an epoch without accesses).
    pub fn hit_rate(&self) -> f64 {
        if self.accesses == 0 {
            0.0
        } else {
            self.hits as f64 / self.accesses as f64
        }
    }
}

/// The outcome of simulating one policy at one cache size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimResult {
    /// The policy simulated.
    pub policy: SimPolicy,
    /// Each worker's cache capacity in samples.
    pub capacity: usize,
    /// Number of workers.
    pub workers: usize,
    /// One entry per epoch, in order.
    pub epochs: Vec<EpochCount>,
}

impl SimResult {
    /// The steady-state hit rate: hits over accesses of every epoch but the first (the
    /// cold one). `None` with fewer than two epochs.
    pub fn steady_state(&self) -> Option<f64> {
        if self.epochs.len() < 2 {
            return None;
        }
        let (hits, accesses) = self.epochs[1..]
            .iter()
            .fold((0, 0), |(h, a), e| (h + e.hits, a + e.accesses));
        Some(if accesses == 0 {
            0.0
        } else {
            hits as f64 / accesses as f64
        })
    }

    /// The hit rate over all epochs, the cold one included.
    pub fn overall(&self) -> f64 {
        let (hits, accesses) = self
            .epochs
            .iter()
            .fold((0, 0), |(h, a), e| (h + e.hits, a + e.accesses));
        if accesses == 0 {
            0.0
        } else {
            hits as f64 / accesses as f64
        }
    }
}

/// Every worker's access stream over every epoch, built once from the plan and shared by
/// as many simulations (policies, cache sizes) as needed.
#[derive(Debug, Clone)]
pub struct AccessStreams {
    samples: usize,
    epochs: u64,
    per_epoch: usize,
    /// Per worker: the samples of epoch 0, then epoch 1, ..., `per_epoch` each.
    streams: Vec<Vec<u32>>,
}

impl AccessStreams {
    /// Builds the streams of `workers` ranks over `epochs` epochs of a `samples`-sample
    /// dataset shuffled with `seed`, using the loader's own plan ([`EpochPlan`], shuffle
    /// on, [`Shard::Pad`]; the batch size does not change the stream, so it is 1).
    pub fn new(samples: usize, epochs: u64, workers: usize, seed: u64) -> Result<AccessStreams> {
        if samples == 0 {
            return Err(Error::Config(
                "the simulated dataset needs at least 1 sample".into(),
            ));
        }
        if samples >= u32::MAX as usize {
            return Err(Error::Config(format!(
                "the simulator handles fewer than {} samples",
                u32::MAX
            )));
        }
        if epochs == 0 {
            return Err(Error::Config("simulate at least 1 epoch".into()));
        }
        if workers == 0 {
            return Err(Error::Config("simulate at least 1 worker".into()));
        }
        let mut streams: Vec<Vec<u32>> = Vec::with_capacity(workers);
        let mut per_epoch = 0;
        for rank in 0..workers {
            let config = PlanConfig {
                seed,
                shuffle: true,
                rank,
                world: workers,
                batch_size: 1,
                drop_last: false,
                shard: Shard::Pad,
                blocks: None,
                repeats: 1,
                mixture: None,
            };
            let mut stream = Vec::new();
            for epoch in 0..epochs {
                let plan = EpochPlan::new(&config, samples, epoch)?;
                per_epoch = plan.samples().len();
                stream.extend(plan.samples().iter().map(|&s| s as u32));
            }
            streams.push(stream);
        }
        Ok(AccessStreams {
            samples,
            epochs,
            per_epoch,
            streams,
        })
    }

    /// Samples in the dataset.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Epochs in each stream.
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.streams.len()
    }

    /// Accesses per worker per epoch.
    pub fn per_epoch(&self) -> usize {
        self.per_epoch
    }

    /// Worker `rank`'s accesses, epoch after epoch.
    pub fn stream(&self, rank: usize) -> &[u32] {
        &self.streams[rank]
    }

    /// Simulates `policy` with a cache of `capacity` samples on every worker.
    pub fn run(&self, policy: SimPolicy, capacity: usize) -> SimResult {
        let mut epochs: Vec<EpochCount> = (0..self.epochs)
            .map(|epoch| EpochCount {
                epoch,
                hits: 0,
                accesses: (self.per_epoch * self.streams.len()) as u64,
            })
            .collect();
        for stream in &self.streams {
            let hits = self.run_worker(policy, stream, capacity);
            for (count, h) in epochs.iter_mut().zip(hits) {
                count.hits += h;
            }
        }
        SimResult {
            policy,
            capacity,
            workers: self.streams.len(),
            epochs,
        }
    }

    /// One worker's hits per epoch.
    fn run_worker(&self, policy: SimPolicy, stream: &[u32], capacity: usize) -> Vec<u64> {
        let mut hits = vec![0u64; self.epochs as usize];
        let mut record = |pos: usize| hits[pos / self.per_epoch] += 1;
        let n = self.samples;
        match policy {
            SimPolicy::Loader(policy) => {
                run_keeper(policy, stream, n, self.per_epoch, capacity, &mut record);
            }
            SimPolicy::TwoList => two_list(stream, n, capacity, TWO_LIST_ACTIVE_SHARE, &mut record),
            SimPolicy::Belady => belady(stream, n, capacity, &mut record),
        }
        hits
    }
}

/// Simulates one configuration (builds its streams; use [`AccessStreams`] directly to
/// share them between several policies or cache sizes).
pub fn simulate(config: &SimConfig) -> Result<SimResult> {
    if !(0.0..=1.0).contains(&config.cache_fraction) {
        return Err(Error::Config(format!(
            "cache fraction {} is outside [0, 1]",
            config.cache_fraction
        )));
    }
    let streams = AccessStreams::new(config.samples, config.epochs, config.workers, config.seed)?;
    Ok(streams.run(
        config.policy,
        capacity_for(config.cache_fraction, config.samples),
    ))
}

/// "No item": the end of a list.
const NIL: u32 = u32::MAX;

/// Links of intrusive doubly linked lists over sample ids; one sample is in at most one
/// list at a time.
struct Links {
    prev: Vec<u32>,
    next: Vec<u32>,
}

impl Links {
    fn new(n: usize) -> Links {
        Links {
            prev: vec![NIL; n],
            next: vec![NIL; n],
        }
    }
}

/// A list threaded through [`Links`]: head is the most recent end, tail the oldest.
struct List {
    head: u32,
    tail: u32,
    len: usize,
}

impl List {
    fn new() -> List {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    fn push_front(&mut self, links: &mut Links, x: u32) {
        links.prev[x as usize] = NIL;
        links.next[x as usize] = self.head;
        if self.head == NIL {
            self.tail = x;
        } else {
            links.prev[self.head as usize] = x;
        }
        self.head = x;
        self.len += 1;
    }

    fn remove(&mut self, links: &mut Links, x: u32) {
        let (p, n) = (links.prev[x as usize], links.next[x as usize]);
        if p == NIL {
            self.head = n;
        } else {
            links.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            links.prev[n as usize] = p;
        }
        self.len -= 1;
    }

    fn pop_back(&mut self, links: &mut Links) -> Option<u32> {
        let x = self.tail;
        if x == NIL {
            return None;
        }
        self.remove(links, x);
        Some(x)
    }
}

/// Where a sample is in the two-list cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Out,
    Inactive,
    Active,
}

/// The Linux-like two-list cache; the active list holds at most `active_share` of it.
fn two_list(
    stream: &[u32],
    n: usize,
    capacity: usize,
    active_share: f64,
    hit: &mut impl FnMut(usize),
) {
    if capacity == 0 {
        return;
    }
    let active_cap = ((capacity as f64 * active_share).floor() as usize).min(capacity - 1);
    let mut links = Links::new(n);
    let mut place = vec![Place::Out; n];
    let (mut inactive, mut active) = (List::new(), List::new());
    for (pos, &x) in stream.iter().enumerate() {
        match place[x as usize] {
            Place::Active => {
                hit(pos);
                active.remove(&mut links, x);
                active.push_front(&mut links, x);
            }
            Place::Inactive => {
                hit(pos);
                inactive.remove(&mut links, x);
                if active_cap == 0 {
                    // No room for an active list: behave as LRU on the inactive one.
                    inactive.push_front(&mut links, x);
                    continue;
                }
                active.push_front(&mut links, x);
                place[x as usize] = Place::Active;
                if active.len > active_cap {
                    let old = active.pop_back(&mut links).expect("over the cap");
                    inactive.push_front(&mut links, old);
                    place[old as usize] = Place::Inactive;
                }
            }
            Place::Out => {
                if inactive.len + active.len == capacity {
                    // The active list is below capacity, so the inactive one is not empty.
                    let old = inactive.pop_back(&mut links).expect("inactive not empty");
                    place[old as usize] = Place::Out;
                }
                inactive.push_front(&mut links, x);
                place[x as usize] = Place::Inactive;
            }
        }
    }
}

/// Belady's MIN with bypass. Each cached sample is keyed by the position of its next use
/// (positions are unique, so the key names the sample); a sample never used again gets
/// the key `len + id`, beyond every position. The largest key is the one to evict.
fn belady(stream: &[u32], n: usize, capacity: usize, hit: &mut impl FnMut(usize)) {
    if capacity == 0 {
        return;
    }
    let len = stream.len() as u64;
    // next_key[pos]: key of the sample at pos after this access.
    let mut next_key = vec![0u64; stream.len()];
    let mut last = vec![NIL; n];
    for pos in (0..stream.len()).rev() {
        let x = stream[pos] as usize;
        next_key[pos] = if last[x] == NIL {
            len + x as u64
        } else {
            last[x] as u64
        };
        last[x] = pos as u32;
    }
    let sample_of = |key: u64| -> usize {
        if key >= len {
            (key - len) as usize
        } else {
            stream[key as usize] as usize
        }
    };
    let mut cached = vec![false; n];
    let mut keys: BTreeSet<u64> = BTreeSet::new();
    for (pos, &x) in stream.iter().enumerate() {
        let key = next_key[pos];
        if cached[x as usize] {
            hit(pos);
            // A cached sample's key is its next use, which is now.
            keys.remove(&(pos as u64));
            keys.insert(key);
        } else if keys.len() < capacity {
            keys.insert(key);
            cached[x as usize] = true;
        } else {
            let furthest = *keys.last().expect("capacity > 0 and full");
            if furthest > key {
                keys.pop_last();
                cached[sample_of(furthest)] = false;
                keys.insert(key);
                cached[x as usize] = true;
            }
        }
    }
}

/// One of the loader's policies over a worker's stream, each sample of size 1, through
/// the policy's own `Keeper`: a [`CachePolicy::Frequency`] cache is given its placement
/// (NoPFS's, from the whole stream) and filled with it before the first read, as the
/// loader's `cache_fill="before"` does. Returns which samples are cached at the end.
fn run_keeper(
    policy: CachePolicy,
    stream: &[u32],
    n: usize,
    per_epoch: usize,
    capacity: usize,
    hit: &mut impl FnMut(usize),
) -> Vec<bool> {
    let mut keeper = policy.keeper(capacity as u64);
    let mut cached = vec![false; n];
    let admit = |keeper: &mut dyn Keeper, cached: &mut [bool], x: u32| {
        if let Admission::Keep(victims) = keeper.admit(u64::from(x), 1) {
            for victim in victims {
                cached[victim as usize] = false;
            }
            cached[x as usize] = true;
        }
    };
    if policy == CachePolicy::Frequency {
        let kept = placement(stream.iter().map(|&x| u64::from(x)), capacity as u64, |_| 1);
        keeper.place(&kept);
        for &x in &kept {
            admit(&mut *keeper, &mut cached, x as u32);
        }
    }
    let epochs: Vec<&[u32]> = stream.chunks(per_epoch.max(1)).collect();
    for (epoch, reads) in epochs.iter().enumerate() {
        if keeper.looks_ahead() {
            let next: Vec<SampleId> = epochs.get(epoch + 1).map_or_else(Vec::new, |next| {
                next.iter().map(|&x| u64::from(x)).collect()
            });
            keeper.begin_epoch(epoch as u64, &next);
        }
        for (at, &x) in reads.iter().enumerate() {
            if cached[x as usize] {
                hit(epoch * per_epoch + at);
                keeper.touch(u64::from(x));
            } else {
                admit(&mut *keeper, &mut cached, x);
            }
        }
    }
    cached
}

#[cfg(test)]
mod tests;
