//! The pipeline: fetch threads read sample bytes along the plan, prep threads decode and
//! transform them straight into their slot of a batch buffer, and the consumer receives
//! whole batches in plan order.
//!
//! ```text
//!  plan ─▶ fetch threads ─▶ read-ahead (bytes, bounded) ─▶ prep threads ─▶ slot of a batch
//!   │      (cache → storage)                                  ▲                  │
//!   └────────── claim: position + slot, in plan order ────────┘                  │
//!                window of batch buffers (prefetch depth) ◀── consumer ◀─────────┘
//! ```
//!
//! **Read-ahead.** The epoch's order is known, so fetch threads read along it ahead of
//! prep, through the loader's cache, and park the bytes until the prep thread that claims
//! the sample takes them. What they hold (in flight or parked) is bounded in bytes by a
//! window that adapts to what is observed: by Little's law, keeping prep fed at `R`
//! bytes/s through reads that take `L` seconds needs about `R·L` bytes under way, so the
//! window follows twice that, between a floor and the configured
//! [`LoaderConfig::readahead`]. Slow storage thus gets a deep window, a cache or a local
//! disk a shallow one. The floor is a batch of samples (at least two per prep thread):
//! cache hits arrive at once, so with a cache in front of slow storage a run of hits fills
//! a shallow window, and the fetch threads would wait for prep instead of starting the
//! next slow miss (measured: 15% of a 10 MB/s link lost with half the dataset cached). The factor of two also lets a window that starts small
//! grow: reads limited by the window raise the pace, which widens the window, until the
//! fetch threads or prep are the limit.
//!
//! **Positions.** The `i`-th sample of the rank's stream belongs at output position
//! `i − (samples skipped before it)`: skipping a sample pulls the next ones forward so that
//! batches stay full. A worker cannot know that number when it starts (earlier samples may
//! still be in flight), so each claim gets a *tentative* position, strictly increasing
//! across claims and never below the final one. The consumer finalises samples in stream
//! order; when a skip made the two differ, it moves the sample's bytes back to the final
//! slot (rare: only after a failure). Without failures nothing is ever copied. Either way
//! the output bytes depend only on the data and the seed, not on thread timing.
//!
//! **Bounds.** Claims stop when the tentative position falls beyond the window of
//! `prefetch` batch buffers past the oldest undelivered one; the channel between fetch and
//! prep holds a fixed number of samples. Memory is therefore fixed by configuration,
//! whatever the dataset size.
//!
//! **Wake-ups.** Threads outnumber cores (fetch threads and the consumer beside the prep
//! threads), so every wake-up preempts a prep thread. Waiting fetch threads are woken when
//! a quarter of the read-ahead window is free, to read a burst, and the consumer when the
//! samples that finish its batch are complete (or when finalising could free a claimer
//! waiting on the window), not once per sample: 45 000 context switches over 10 000
//! samples became 3 000, and the loader 4% faster on two cores.
//!
//! **Randomness** of each sample's augmentation comes from (seed, epoch, sample id), so it
//! does not matter which thread prepares it.

mod buffer;
mod checkpoint;
mod quarantine;

pub use checkpoint::{Checkpoint, RunIdentity};

use std::collections::{BTreeMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cache::{CacheConfig, Cached};
use crate::catalog::{Catalog, SampleId};
use crate::codec::DEFAULT_MAX_PIXELS;
use crate::error::{Cause, Error, Result, SampleError};
use crate::metrics::{EpochStats, ReadaheadStats, StageCounters};
use crate::ops::{DType, Pipeline, Prep};
use crate::plan::locality::Locality;
use crate::plan::{batches_for, samples_per_rank, EpochPlan, PlanConfig, Position};
use crate::rng::{derive, Rng};
use crate::storage::Source;
use buffer::{BatchBuffer, Pool, Slot};
use quarantine::Quarantine;

/// What to do with a sample that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// Stop the epoch with an error naming the sample and the cause.
    #[default]
    Error,
    /// Leave the sample out, count it by cause, and fill its place with the next sample
    /// of the plan.
    Skip,
}

/// How a [`Loader`] runs.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Order, sharding and batching.
    pub plan: PlanConfig,
    /// What is done to each sample.
    pub pipeline: Pipeline,
    /// Threads decoding and transforming (the CPU-heavy stage).
    pub prep_threads: usize,
    /// Threads reading bytes (I/O-bound; more help with high-latency storage).
    pub fetch_threads: usize,
    /// Batches prepared ahead of the consumer.
    pub prefetch: usize,
    /// What to do with bad samples.
    pub on_error: ErrorPolicy,
    /// Decompression-bomb guard: images with more pixels are refused.
    pub max_pixels: u64,
    /// The loader's cache of encoded samples, kept across epochs.
    pub cache: CacheConfig,
    /// The most bytes fetch threads may hold ahead of prep (in flight or waiting); see
    /// the [module docs](self).
    pub readahead: u64,
    /// With a cache partitioned across nodes: plan each epoch locality-aware
    /// ([`EpochPlan::locality_aware`]), so that ranks take the samples their node holds.
    /// Every global batch keeps the plain plan's contents.
    pub locality: Option<Locality>,
    /// Under [`ErrorPolicy::Skip`]: append every skipped sample to this file, one JSON
    /// object a line (`epoch`, `sample_id`, `location`, `cause`, `detail`), so that the
    /// dataset can be cleaned. Unlike [`Epoch::skipped`], it has no cap.
    pub quarantine: Option<std::path::PathBuf>,
}

impl LoaderConfig {
    /// Defaults around a pipeline: batch 64, shuffled, 2 prep threads, 2 fetch threads,
    /// 4 batches of prefetch, stop on errors, no cache, read-ahead up to 64 MiB.
    pub fn new(pipeline: Pipeline) -> LoaderConfig {
        LoaderConfig {
            plan: PlanConfig::default(),
            pipeline,
            prep_threads: 2,
            // Two requests in flight: when the thread whose read just finished waits for
            // a core (prep keeps them busy), the other keeps storage busy. With one, a
            // 30 MB/s link with a quarter of the dataset cached delivered 15% less.
            fetch_threads: 2,
            prefetch: 4,
            on_error: ErrorPolicy::Error,
            max_pixels: DEFAULT_MAX_PIXELS,
            cache: CacheConfig::default(),
            readahead: 64 << 20,
            locality: None,
            quarantine: None,
        }
    }

    fn validate(&self, dataset_len: usize) -> Result<()> {
        self.plan.validate(dataset_len)?;
        if let Some(locality) = &self.locality {
            // Fails early, with the reason, when the placement does not fit the job.
            EpochPlan::locality_aware(
                &self.plan,
                &locality.placement,
                locality.ranks_per_node,
                dataset_len,
                0,
            )?;
        }
        if self.prep_threads == 0 || self.fetch_threads == 0 {
            return Err(Error::Config(
                "prep and fetch need at least one thread each".into(),
            ));
        }
        if self.prefetch == 0 {
            return Err(Error::Config("prefetch must be at least 1 batch".into()));
        }
        if self.quarantine.is_some() && self.on_error != ErrorPolicy::Skip {
            return Err(Error::Config(
                "a quarantine file lists skipped samples: it needs the skip error policy".into(),
            ));
        }
        if self.readahead == 0 {
            return Err(Error::Config(
                "readahead must be at least 1 byte (it bounds bytes fetched ahead of prep)".into(),
            ));
        }
        Ok(())
    }
}

/// An image loader over one dataset: makes an iterator of batches per epoch.
pub struct Loader {
    catalog: Arc<Catalog>,
    source: Arc<Cached>,
    config: LoaderConfig,
    pool: Arc<Pool>,
    /// Computed when first asked for: a pass over the catalog.
    identity: std::sync::OnceLock<RunIdentity>,
    quarantine: Option<Arc<Quarantine>>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("samples", &self.catalog.len())
            .field("config", &self.config)
            .finish()
    }
}

impl Loader {
    /// A loader reading `catalog`'s samples from `source`, through a cache as
    /// configured.
    pub fn new(
        catalog: Arc<Catalog>,
        source: Arc<dyn Source>,
        config: LoaderConfig,
    ) -> Result<Loader> {
        config.validate(catalog.len())?;
        let buffer_bytes = config.plan.batch_size * config.pipeline.sample_bytes();
        let capacity = config.cache.capacity.bytes(catalog.total_bytes());
        let quarantine = config
            .quarantine
            .as_deref()
            .map(|path| Quarantine::open(path).map(Arc::new))
            .transpose()?;
        Ok(Loader {
            quarantine,
            source: Arc::new(Cached::new(source, config.cache.policy, capacity)),
            catalog,
            config,
            pool: Pool::new(buffer_bytes),
            identity: std::sync::OnceLock::new(),
        })
    }

    /// What a position of this loader is valid for (part of a [`Checkpoint`]).
    pub fn identity(&self) -> RunIdentity {
        *self
            .identity
            .get_or_init(|| RunIdentity::of(&self.catalog, &self.config))
    }

    /// Where `epoch` stands, for what, and what it skipped so far: save it to resume
    /// exactly there with [`Loader::resume_saved`].
    pub fn checkpoint(&self, epoch: &Epoch) -> Checkpoint {
        Checkpoint {
            position: epoch.position(),
            identity: self.identity(),
            skipped: epoch.stats().skipped,
        }
    }

    /// Resumes a [`Checkpoint`], after checking that it belongs to this dataset and these
    /// settings; the epoch's skip counts go on from the saved ones.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming what differs, or as for [`Loader::resume`].
    pub fn resume_saved(&self, checkpoint: &Checkpoint) -> Result<Epoch> {
        self.identity().check(&checkpoint.identity)?;
        self.start(checkpoint.position, checkpoint.skipped.clone())
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The cache's counters since the loader was made.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.source.cache().stats()
    }

    /// Batch buffers allocated so far: bounded by the prefetch depth plus the batches the
    /// consumer holds, whatever the number of epochs.
    pub fn buffers_allocated(&self) -> usize {
        self.pool.allocated()
    }

    /// Batches per epoch on this rank when no sample is skipped.
    pub fn batches_per_epoch(&self) -> usize {
        let plan = &self.config.plan;
        batches_for(
            samples_per_rank(plan, self.catalog.len()),
            plan.batch_size,
            plan.drop_last,
        )
    }

    /// Starts `epoch` from its beginning.
    pub fn epoch(&self, epoch: u64) -> Result<Epoch> {
        self.resume(Position::start_of(epoch))
    }

    /// Starts from a saved position: yields exactly the batches that remained.
    pub fn resume(&self, position: Position) -> Result<Epoch> {
        self.start(position, BTreeMap::new())
    }

    /// Starts at `position`, with the epoch's skips before it counted as `skipped`.
    fn start(&self, position: Position, skipped: BTreeMap<&'static str, u64>) -> Result<Epoch> {
        let len = self.catalog.len();
        let plan = match &self.config.locality {
            None => EpochPlan::new(&self.config.plan, len, position.epoch)?,
            Some(l) => EpochPlan::locality_aware(
                &self.config.plan,
                &l.placement,
                l.ranks_per_node,
                len,
                position.epoch,
            )?,
        };
        if position.sample as usize > plan.samples().len() {
            return Err(Error::Config(format!(
                "position {position:?} lies beyond the epoch's {} samples on this rank",
                plan.samples().len()
            )));
        }
        Ok(Epoch::start(self, plan, position, skipped))
    }
}

/// How a claimed sample ended, kept until the consumer finalises it.
struct Outcome {
    position: u64,
    result: std::result::Result<(), Cause>,
}

/// The state every thread of an epoch shares under one lock.
struct State {
    /// Next stream index to claim.
    next: usize,
    /// Tentative position of the last claim (relative to this run's first position).
    last_position: Option<u64>,
    /// Next stream index to finalise; `done[k]` is stream index `cursor + k`.
    cursor: usize,
    done: VecDeque<Option<Outcome>>,
    /// How many entries at the front of `done` are complete.
    ready: usize,
    /// While the consumer sleeps: the `ready` count that lets it finish its batch.
    wanted: Option<usize>,
    /// Samples finalised as skipped in this run.
    skipped: u64,
    skipped_by_cause: BTreeMap<&'static str, u64>,
    skipped_samples: Vec<SampleError>,
    /// Batches delivered in this run; buffers of the batches being filled, from there on.
    delivered: u64,
    window: VecDeque<BatchBuffer>,
    /// Fetch threads waiting in `claim` for room in the window.
    claimers_waiting: usize,
    /// Labels and ids of the batch being assembled.
    labels: Vec<i64>,
    ids: Vec<SampleId>,
    /// Set when a loader thread died outside any one sample; the epoch stops with it.
    crash: Option<String>,
}

/// The fetch threads' state: how far they have read along the stream, and the bytes
/// waiting for prep.
struct Ahead {
    /// Next stream index to read.
    next: usize,
    /// Bytes read ahead, by stream index, until the prep thread that claims them takes them.
    parked: BTreeMap<usize, std::result::Result<Vec<u8>, Cause>>,
    /// Bytes held: reserved for reads in flight (at their catalog size) and parked.
    held: u64,
    peak: u64,
    /// The current bound on `held`.
    window: u64,
    /// The smallest window: two samples of average size per prep thread.
    floor: u64,
    /// Smoothed duration of one read, in seconds.
    latency: f64,
    /// Bytes taken by prep since the epoch started.
    taken: u64,
    /// Time prep threads spent waiting for bytes.
    starved: Duration,
    /// Emptied byte buffers, re-used by fetch threads.
    spare: Vec<Vec<u8>>,
    /// Fetch threads waiting for room, and prep threads waiting for bytes.
    fetchers_waiting: usize,
    takers_waiting: usize,
}

struct Shared {
    config: LoaderConfig,
    /// The rank's samples of the epoch, in plan order.
    stream: Vec<SampleId>,
    /// Where this run starts: epoch, first batch number, first stream index.
    from: Position,
    /// Bytes of one prepared sample (from the pipeline; used on every claim).
    sample_bytes: usize,
    catalog: Arc<Catalog>,
    source: Arc<Cached>,
    pool: Arc<Pool>,
    state: Mutex<State>,
    ahead: Mutex<Ahead>,
    /// Signalled when bytes are parked.
    parked: Condvar,
    /// Signalled when prep takes bytes, making room in the read-ahead window.
    room: Condvar,
    started: Instant,
    /// Signalled when claiming may proceed (a batch delivered, a sample finalised).
    claimable: Condvar,
    /// Signalled when a sample completes.
    completed: Condvar,
    stop: AtomicBool,
    /// Loader threads still running, and the signal that one has exited.
    running: Mutex<usize>,
    exited: Condvar,
    fetch: StageCounters,
    prep: StageCounters,
    quarantine: Option<Arc<Quarantine>>,
    /// The cache's and the storage's counters when the epoch started.
    cache_before: crate::cache::CacheStats,
    storage_before: crate::storage::SourceStats,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking worker must not wedge the others: the state stays consistent at
        // every unlock, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the next sample of the plan a position and a slot, waiting while the window
    /// is full. `None` once the plan is exhausted or the epoch stopped.
    fn claim(&self) -> Option<(usize, u64, Slot)> {
        let mut st = self.lock();
        loop {
            if self.stop.load(Ordering::Acquire) || st.next == self.stream.len() {
                return None;
            }
            let index = st.next;
            // Never below the final position (later skips only lower it); exact when
            // nothing is in flight, since then every earlier sample is final.
            let exact = (index - self.from.sample as usize) as u64 - st.skipped;
            // With samples in flight, stay above their positions.
            let in_flight = st.next > st.cursor;
            let position = match st.last_position {
                Some(last) if in_flight => (last + 1).max(exact),
                _ => exact,
            };
            let batch_size = self.config.plan.batch_size as u64;
            let batch = position / batch_size;
            if batch >= st.delivered + self.config.prefetch as u64 {
                // Finalising the complete samples may lower this position: wake the
                // consumer for them, whatever it was waiting for.
                if st.ready > 0 && st.wanted.take().is_some() {
                    self.completed.notify_all();
                }
                st.claimers_waiting += 1;
                st = self.claimable.wait(st).unwrap_or_else(|e| e.into_inner());
                st.claimers_waiting -= 1;
                continue;
            }
            while st.delivered + (st.window.len() as u64) <= batch {
                let buffer = self.pool.take();
                st.window.push_back(buffer);
            }
            let slot = st.window[(batch - st.delivered) as usize]
                .slot((position % batch_size) as usize, self.sample_bytes);
            st.next += 1;
            st.last_position = Some(position);
            st.done.push_back(None);
            return Some((index, position, slot));
        }
    }

    fn complete(&self, index: usize, position: u64, result: std::result::Result<(), Cause>) {
        let mut st = self.lock();
        let k = index - st.cursor;
        st.done[k] = Some(Outcome { position, result });
        if k == st.ready {
            while st.done.get(st.ready).is_some_and(Option::is_some) {
                st.ready += 1;
            }
        }
        // Wake the consumer once it can finish its batch (or free a waiting claimer), not
        // for every sample: each wake-up takes a core from a prep thread.
        let wake = match st.wanted {
            Some(wanted) => st.ready >= wanted || (st.claimers_waiting > 0 && st.ready > 0),
            None => false,
        };
        if wake {
            st.wanted = None;
            drop(st);
            self.completed.notify_all();
        }
    }

    /// Records that a loader thread died (the first such report wins) and stops the
    /// epoch, so that the consumer reports it instead of waiting for that thread.
    fn crashed(&self, what: String) {
        self.lock().crash.get_or_insert(what);
        self.halt();
    }

    fn thread_exited(&self) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        self.exited.notify_all();
    }

    /// Waits up to `limit` for every loader thread to exit; whether they all did.
    fn wait_for_threads(&self, limit: Duration) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let (running, _) = self
            .exited
            .wait_timeout_while(running, limit, |running| *running > 0)
            .unwrap_or_else(|e| e.into_inner());
        *running == 0
    }

    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        // Take the locks so that no thread misses the wake-up between its check and wait.
        drop(self.lock());
        drop(self.lock_ahead());
        self.claimable.notify_all();
        self.completed.notify_all();
        self.parked.notify_all();
        self.room.notify_all();
    }

    fn lock_ahead(&self) -> MutexGuard<'_, Ahead> {
        self.ahead.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the next sample of the stream for a fetch thread, waiting while the
    /// read-ahead window is full: its index, the bytes reserved and a buffer to read
    /// into. `None` once the stream is exhausted or the epoch stopped.
    fn next_to_fetch(&self) -> Option<(usize, u64, Vec<u8>)> {
        let mut ahead = self.lock_ahead();
        loop {
            if self.stop.load(Ordering::Acquire) || ahead.next == self.stream.len() {
                return None;
            }
            let need = self.next_need(&ahead);
            // A sample larger than the whole window still goes through, alone.
            if ahead.held == 0 || ahead.held + need <= ahead.window {
                let index = ahead.next;
                ahead.next += 1;
                ahead.held += need;
                ahead.peak = ahead.peak.max(ahead.held);
                return Some((index, need, ahead.spare.pop().unwrap_or_default()));
            }
            ahead.fetchers_waiting += 1;
            ahead = self.room.wait(ahead).unwrap_or_else(|e| e.into_inner());
            ahead.fetchers_waiting -= 1;
        }
    }

    /// The bytes to reserve for the next sample to fetch: its catalog size, at least one
    /// (zero past the end of the stream).
    fn next_need(&self, ahead: &Ahead) -> u64 {
        self.stream
            .get(ahead.next)
            .map_or(0, |&id| self.catalog.size(id).max(1))
    }

    /// Parks a fetched sample for prep, correcting the reservation to its real size.
    fn park(
        &self,
        index: usize,
        reserved: u64,
        took: Duration,
        bytes: std::result::Result<Vec<u8>, Cause>,
    ) {
        let len = bytes.as_ref().map_or(0, |b| b.len() as u64);
        let mut ahead = self.lock_ahead();
        ahead.held = ahead.held - reserved + len;
        ahead.peak = ahead.peak.max(ahead.held);
        ahead.latency += 0.1 * (took.as_secs_f64() - ahead.latency);
        ahead.parked.insert(index, bytes);
        let wake = ahead.takers_waiting > 0;
        drop(ahead);
        if wake {
            self.parked.notify_all();
        }
    }

    /// Takes sample `index`'s bytes once they are parked, and adapts the window to the
    /// pace at which prep takes bytes. `None` if the epoch stopped.
    fn take(&self, index: usize) -> Option<std::result::Result<Vec<u8>, Cause>> {
        let mut ahead = self.lock_ahead();
        let before = Instant::now();
        let bytes = loop {
            if let Some(bytes) = ahead.parked.remove(&index) {
                break bytes;
            }
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            ahead.takers_waiting += 1;
            ahead = self.parked.wait(ahead).unwrap_or_else(|e| e.into_inner());
            ahead.takers_waiting -= 1;
        };
        ahead.starved += before.elapsed();
        let len = bytes.as_ref().map_or(0, |b| b.len() as u64);
        ahead.held -= len;
        ahead.taken += len;
        let pace = ahead.taken as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        let wanted = (2.0 * pace * ahead.latency) as u64;
        ahead.window = wanted.clamp(ahead.floor, self.config.readahead);
        // Let waiting fetch threads refill a quarter of the window at a time rather than a
        // sample at a time: one wake-up per sample would take a core from prep as often.
        let refill = ahead.fetchers_waiting > 0 && {
            let burst = self.next_need(&ahead).max(ahead.window / 4);
            ahead.held == 0 || ahead.held + burst <= ahead.window
        };
        drop(ahead);
        if refill {
            self.room.notify_all();
        }
        Some(bytes)
    }

    /// Returns an emptied byte buffer to the fetch threads.
    fn recycle(&self, mut bytes: Vec<u8>) {
        let mut ahead = self.lock_ahead();
        if ahead.spare.len() < self.config.fetch_threads + self.config.prep_threads {
            bytes.clear();
            ahead.spare.push(bytes);
        }
    }
}

/// One epoch in progress: an iterator of batches in plan order.
///
/// Dropping it stops and joins its threads.
pub struct Epoch {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    position: Position,
    started: Instant,
    finished: Option<Instant>,
    wait: Duration,
    max_wait: Duration,
    samples: u64,
    failed: bool,
    /// Time already waited for the next batch by calls to `next_within` that ran out.
    carried_wait: Duration,
}

/// What [`Epoch::next_within`] found.
#[derive(Debug)]
pub enum Next {
    /// The next batch, or the error that stopped the epoch.
    Batch(Result<Batch>),
    /// The batch is not ready yet; ask again.
    Pending,
    /// The epoch has no more batches.
    End,
}

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch")
            .field("epoch", &self.shared.from.epoch)
            .field("samples", &self.samples)
            .finish()
    }
}

impl Epoch {
    fn start(
        loader: &Loader,
        plan: EpochPlan,
        position: Position,
        skipped_by_cause: BTreeMap<&'static str, u64>,
    ) -> Epoch {
        let config = &loader.config;
        let start = position.sample as usize;
        let average = loader.catalog.total_bytes() / loader.catalog.len().max(1) as u64;
        let floor_samples = (2 * config.prep_threads).max(config.plan.batch_size) as u64;
        let floor = (floor_samples * average).clamp(1, config.readahead);
        let shared = Arc::new(Shared {
            config: config.clone(),
            stream: plan.samples().to_vec(),
            from: position,
            sample_bytes: config.pipeline.sample_bytes(),
            catalog: loader.catalog.clone(),
            source: loader.source.clone(),
            pool: loader.pool.clone(),
            quarantine: loader.quarantine.clone(),
            state: Mutex::new(State {
                next: start,
                last_position: None,
                cursor: start,
                done: VecDeque::new(),
                ready: 0,
                wanted: None,
                skipped: 0,
                skipped_by_cause,
                skipped_samples: Vec::new(),
                delivered: 0,
                window: VecDeque::new(),
                claimers_waiting: 0,
                labels: Vec::with_capacity(config.plan.batch_size),
                ids: Vec::with_capacity(config.plan.batch_size),
                crash: None,
            }),
            ahead: Mutex::new(Ahead {
                next: start,
                parked: BTreeMap::new(),
                held: 0,
                peak: 0,
                window: floor,
                floor,
                latency: 0.0,
                taken: 0,
                starved: Duration::ZERO,
                spare: Vec::new(),
                fetchers_waiting: 0,
                takers_waiting: 0,
            }),
            parked: Condvar::new(),
            room: Condvar::new(),
            started: Instant::now(),
            cache_before: loader.source.cache().stats(),
            storage_before: loader.source.stats(),
            claimable: Condvar::new(),
            completed: Condvar::new(),
            stop: AtomicBool::new(false),
            running: Mutex::new(config.fetch_threads + config.prep_threads),
            exited: Condvar::new(),
            fetch: StageCounters::default(),
            prep: StageCounters::default(),
        });
        let mut threads = Vec::new();
        for n in 0..config.fetch_threads {
            threads.push(spawn(format!("nostall-fetch-{n}"), &shared, fetch_loop));
        }
        for n in 0..config.prep_threads {
            threads.push(spawn(format!("nostall-prep-{n}"), &shared, prep_loop));
        }
        Epoch {
            shared,
            threads,
            position,
            started: Instant::now(),
            finished: None,
            wait: Duration::ZERO,
            max_wait: Duration::ZERO,
            samples: 0,
            failed: false,
            carried_wait: Duration::ZERO,
        }
    }

    /// Where the epoch stands: save it to resume exactly here.
    pub fn position(&self) -> Position {
        self.position
    }

    /// Figures so far.
    pub fn stats(&self) -> EpochStats {
        let shared = &self.shared;
        let (starved, readahead) = {
            let ahead = shared.lock_ahead();
            let readahead = ReadaheadStats {
                window: ahead.window,
                peak: ahead.peak,
                limit: shared.config.readahead,
            };
            (ahead.starved, readahead)
        };
        let st = self.shared.lock();
        let end = self.finished.unwrap_or_else(Instant::now);
        EpochStats {
            epoch: self.shared.from.epoch,
            batches: st.delivered,
            samples: self.samples,
            skipped: st.skipped_by_cause.clone(),
            wall: end - self.started,
            wait: self.wait,
            max_wait: self.max_wait,
            fetch: self.shared.fetch.snapshot(self.shared.config.fetch_threads),
            prep: self.shared.prep.snapshot(self.shared.config.prep_threads),
            prep_starved: starved,
            cache: shared.source.cache().stats().since(&shared.cache_before),
            storage: shared.source.stats() - shared.storage_before,
            readahead,
        }
    }

    /// The samples skipped so far, with their causes (the first 1 000).
    pub fn skipped(&self) -> Vec<SampleError> {
        self.shared.lock().skipped_samples.clone()
    }

    /// Finalises samples in order until a batch is complete, the plan ends, or an error
    /// stops the epoch.
    /// Like [`Iterator::next`], but waits at most `limit` for the batch: a caller that
    /// must stay responsive (to Ctrl-C, say) waits in slices. A wait cut short resumes
    /// where it stopped, and the batch's [`Batch::wait`] counts every slice.
    pub fn next_within(&mut self, limit: Duration) -> Next {
        if self.failed {
            return Next::End;
        }
        match self.next_batch(Some(Instant::now() + limit)) {
            Some(Some(batch)) => Next::Batch(batch),
            Some(None) => Next::Pending,
            None => Next::End,
        }
    }

    /// Finalises samples in order until a batch is complete, the plan ends, an error
    /// stops the epoch, or `deadline` passes (`Some(None)`).
    fn next_batch(&mut self, deadline: Option<Instant>) -> Option<Option<Result<Batch>>> {
        let shared = self.shared.clone();
        let bs = shared.config.plan.batch_size as u64;
        let mut st = shared.lock();
        let mut waited = std::mem::take(&mut self.carried_wait);
        loop {
            if let Some(crash) = &st.crash {
                let error = Error::Internal(crash.clone());
                drop(st);
                shared.halt();
                self.failed = true;
                return Some(Some(Err(error)));
            }
            while let Some(Some(_)) = st.done.front() {
                let Outcome { position, result } = st.done.pop_front().flatten().expect("checked");
                let index = st.cursor;
                st.cursor += 1;
                st.ready -= 1;
                let id = shared.stream[index];
                match result {
                    Err(cause) => {
                        let error = SampleError {
                            id,
                            location: shared.source.location(id),
                            cause,
                        };
                        if shared.config.on_error == ErrorPolicy::Error {
                            drop(st);
                            shared.halt();
                            self.failed = true;
                            return Some(Some(Err(Error::Sample(error))));
                        }
                        if let Some(quarantine) = &shared.quarantine {
                            if let Err(e) = quarantine.record(shared.from.epoch, &error) {
                                drop(st);
                                shared.halt();
                                self.failed = true;
                                return Some(Some(Err(e)));
                            }
                        }
                        st.skipped += 1;
                        *st.skipped_by_cause.entry(error.cause.kind()).or_default() += 1;
                        if st.skipped_samples.len() < 1000 {
                            st.skipped_samples.push(error);
                        }
                    }
                    Ok(()) => {
                        let fin = (index - shared.from.sample as usize) as u64 - st.skipped;
                        if fin != position {
                            let (to, from) = (
                                (fin / bs - st.delivered) as usize,
                                (position / bs - st.delivered) as usize,
                            );
                            st.window[to].copy_slot(
                                (fin % bs) as usize,
                                &st.window[from],
                                (position % bs) as usize,
                                shared.sample_bytes,
                            );
                        }
                        let label = shared.catalog.label(id).map_or(-1, i64::from);
                        st.labels.push(label);
                        st.ids.push(id);
                        if st.labels.len() as u64 == bs {
                            return Some(Some(Ok(self.deliver(st, waited))));
                        }
                    }
                }
                if st.claimers_waiting > 0 {
                    shared.claimable.notify_all();
                }
            }
            if st.cursor == shared.stream.len() {
                if !st.labels.is_empty() && !shared.config.plan.drop_last {
                    return Some(Some(Ok(self.deliver(st, waited))));
                }
                self.finished.get_or_insert_with(Instant::now);
                self.position.sample = st.cursor as u64;
                return None;
            }
            let needed = (bs as usize - st.labels.len()).min(shared.stream.len() - st.cursor);
            st.wanted = Some(needed);
            let before = Instant::now();
            st = match deadline {
                None => shared.completed.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) if deadline <= before => {
                    st.wanted = None;
                    self.carried_wait = waited;
                    return Some(None);
                }
                Some(deadline) => {
                    let (st, _) = shared
                        .completed
                        .wait_timeout(st, deadline - before)
                        .unwrap_or_else(|e| e.into_inner());
                    st
                }
            };
            st.wanted = None;
            waited += before.elapsed();
        }
    }

    /// Hands the batch being assembled to the consumer.
    fn deliver(&mut self, mut st: MutexGuard<'_, State>, waited: Duration) -> Batch {
        let shared = &self.shared;
        let buffer = st
            .window
            .pop_front()
            .expect("the batch being assembled has a buffer");
        let labels = std::mem::replace(
            &mut st.labels,
            Vec::with_capacity(shared.config.plan.batch_size),
        );
        let ids = std::mem::replace(
            &mut st.ids,
            Vec::with_capacity(shared.config.plan.batch_size),
        );
        let index = shared.from.batch + st.delivered;
        st.delivered += 1;
        let position = Position {
            epoch: shared.from.epoch,
            batch: index + 1,
            sample: st.cursor as u64,
        };
        drop(st);
        shared.claimable.notify_all();
        self.position = position;
        self.samples += labels.len() as u64;
        self.wait += waited;
        self.max_wait = self.max_wait.max(waited);
        Batch {
            buffer: Some(buffer),
            pool: shared.pool.clone(),
            len: labels.len(),
            sample_shape: shared.config.pipeline.sample_shape(),
            dtype: shared.config.pipeline.dtype(),
            sample_bytes: shared.sample_bytes,
            labels,
            ids,
            index,
            position,
            wait: waited,
        }
    }
}

impl Iterator for Epoch {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.failed {
            return None;
        }
        // Without a deadline the wait is never cut short.
        self.next_batch(None).flatten()
    }
}

/// How long dropping an epoch waits for its threads to notice that it stopped.
const STOP_GRACE: Duration = Duration::from_millis(500);

impl Drop for Epoch {
    fn drop(&mut self) {
        self.shared.halt();
        // A thread inside a read (a storage request can hang for minutes) or a long decode
        // notices the halt only when that returns: the consumer does not wait for it.
        if !self.shared.wait_for_threads(STOP_GRACE) {
            // Each keeps the epoch's shared state alive, batch buffers included, until it
            // exits; the buffers are freed then rather than returned to the pool, since a
            // prep thread may still be writing into its slot.
            self.threads.clear();
            return;
        }
        for thread in self.threads.drain(..) {
            // Panics were caught in the thread; joining must not panic the consumer.
            let _ = thread.join();
        }
        let mut st = self.shared.lock();
        while let Some(buffer) = st.window.pop_front() {
            self.shared.pool.give(buffer);
        }
    }
}

/// Starts a loader thread running `body`. A panic that escapes it (one outside any
/// sample: the samples' own are caught where they happen) stops the epoch with an error,
/// rather than leaving the consumer waiting for that thread's samples forever.
fn spawn(name: String, shared: &Arc<Shared>, body: fn(&Shared)) -> JoinHandle<()> {
    let shared = shared.clone();
    let thread = name.clone();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(&shared))) {
                shared.crashed(format!("{thread} panicked: {}", panic_message(&*panic)));
            }
            shared.thread_exited();
        })
        .expect("cannot start a loader thread")
}

/// The message a panic carries, when it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

fn fetch_loop(shared: &Shared) {
    while let Some((index, reserved, mut bytes)) = shared.next_to_fetch() {
        let started = Instant::now();
        let id = shared.stream[index];
        // A source that panics on one sample costs that sample (named, skippable), not the
        // epoch; the buffer it held is not reused.
        let result = catch_unwind(AssertUnwindSafe(|| shared.source.read(id, &mut bytes)))
            .unwrap_or_else(|panic| {
                bytes = Vec::new();
                Err(Cause::Internal(format!(
                    "reading it panicked: {}",
                    panic_message(&*panic)
                )))
            });
        let took = started.elapsed();
        shared.fetch.record(took, bytes.len() as u64);
        shared.park(index, reserved, took, result.map(|()| bytes));
    }
}

fn prep_loop(shared: &Shared) {
    // Without a decoder every sample fails, and is reported as such, rather than the
    // thread vanishing and the epoch waiting forever for its samples.
    let mut prep = Prep::new(shared.config.max_pixels).ok();
    while let Some((index, position, mut slot)) = shared.claim() {
        let Some(bytes) = shared.take(index) else {
            return; // the epoch is stopping
        };
        let id = shared.stream[index];
        let started = Instant::now();
        let result = match (&mut prep, bytes) {
            (_, Err(cause)) => Err(cause),
            (None, Ok(_)) => Err(Cause::Corrupt(
                "the JPEG decoder could not be initialised".into(),
            )),
            (Some(state), Ok(bytes)) => {
                let mut rng = Rng::new(derive(&[shared.config.plan.seed, shared.from.epoch, id]));
                // A panic in a decoder must cost one sample, not the epoch: a thread that died
                // would leave its sample unfinished and the consumer waiting forever.
                let run = || state.run(&shared.config.pipeline, &bytes, &mut rng, slot.as_mut());
                let result = catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|panic| {
                    // Whatever the panic left half-done in the decoder stays with this sample.
                    prep = Prep::new(shared.config.max_pixels).ok();
                    Err(Cause::Internal(format!(
                        "preparing it panicked: {}",
                        panic_message(&*panic)
                    )))
                });
                shared.recycle(bytes);
                result
            }
        };
        shared.prep.record(
            started.elapsed(),
            if result.is_ok() {
                shared.sample_bytes as u64
            } else {
                0
            },
        );
        shared.complete(index, position, result);
    }
}

/// A batch of prepared samples, in one buffer that returns to the loader when dropped.
pub struct Batch {
    buffer: Option<BatchBuffer>,
    pool: Arc<Pool>,
    len: usize,
    sample_shape: [usize; 3],
    dtype: DType,
    sample_bytes: usize,
    labels: Vec<i64>,
    ids: Vec<SampleId>,
    index: u64,
    position: Position,
    wait: Duration,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("index", &self.index)
            .field("shape", &self.shape())
            .finish_non_exhaustive()
    }
}

impl Batch {
    /// Number of samples (the batch size, except perhaps for the last batch).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no sample (never true for a delivered batch).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Shape: `[len, 3, h, w]` for CHW, `[len, h, w, 3]` for HWC.
    pub fn shape(&self) -> [usize; 4] {
        let [a, b, c] = self.sample_shape;
        [self.len, a, b, c]
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The samples' bytes, back to back, native endianness.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref().expect("present until drop").bytes()[..self.len * self.sample_bytes]
    }

    /// The samples' bytes, writable (for handing the batch to a framework that may
    /// change its tensors in place).
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len * self.sample_bytes;
        &mut self
            .buffer
            .as_mut()
            .expect("present until drop")
            .bytes_mut()[..len]
    }

    /// The data as f32 values, when the dtype is f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        if self.dtype != DType::F32 {
            return None;
        }
        let data = self.data();
        // SAFETY: the buffer is 64-byte aligned and was written as f32 values; every
        // bit pattern is a valid f32; the length is a multiple of 4 (whole samples).
        Some(unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<f32>(), data.len() / 4) })
    }

    /// One label per sample (the class index; -1 for unlabelled data).
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// The samples' catalog ids, in batch order.
    pub fn ids(&self) -> &[SampleId] {
        &self.ids
    }

    /// This batch's number within the epoch.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The position just after this batch: resuming there yields the next batch.
    pub fn position(&self) -> Position {
        self.position
    }

    /// How long the consumer waited for this batch: the data stall it caused.
    pub fn wait(&self) -> Duration {
        self.wait
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.pool.give(buffer);
        }
    }
}
