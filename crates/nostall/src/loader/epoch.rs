//! One epoch in progress: the state its threads share, and the consumer's side, which
//! finalises samples in plan order into batches.
//!
//! **Overlapping epochs.** When an epoch has read its last sample, it starts the next one
//! ([`Running`]) and leaves it where the loader finds it (`Upcoming`): the next epoch's
//! reads overlap this one's last preps, and its preps this one's last batches, so the
//! consumer never waits for an empty pipeline to fill. The plan of an epoch is a pure
//! function of the seed, so the work done ahead is exactly what the consumer would get by
//! starting the epoch itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cache::{CacheStats, Cached};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Error, Result, SampleError};
use crate::metrics::live::Totals;
use crate::metrics::{CostLog, EpochStats, StageCounters};
use crate::plan::elastic::Stretch;
use crate::plan::{Blocks, EpochPlan, Position};
use crate::prep::{Deferred, Prepared};
use crate::sched::roles::{Observed, PrepRole};
use crate::storage::{Source, SourceStats, Tier};

use super::buffer::Pool;
use super::order::{Guard, Order};
use super::quarantine::Quarantine;
use super::workers::{spawn, staff, work};
use super::{Batch, ErrorPolicy, LoaderConfig};
use crate::sched::balance::share::{demand, fetch_cpu_per_read, Balance};
use crate::sched::reads::readahead::{CarriedReads, ReadAhead};
use crate::sched::roles::table::{Role, Roles};

/// What starting an epoch takes from its loader: all shared, so that an epoch can start
/// the next one.
#[derive(Clone)]
pub(super) struct Parts {
    pub(super) config: LoaderConfig,
    pub(super) catalog: Arc<Catalog>,
    pub(super) source: Arc<Cached>,
    pub(super) pool: Arc<Pool>,
    pub(super) quarantine: Option<Arc<Quarantine>>,
    /// The loader's figures across epochs.
    pub(super) totals: Arc<Totals>,
    /// Where an epoch started ahead waits for the consumer. Weak: a dropped loader stops
    /// the epoch started ahead rather than leaving it running for nobody.
    pub(super) upcoming: Weak<Upcoming>,
    /// This rank's share of its node's prep threads, when balanced.
    pub(super) balance: Option<Arc<Balance>>,
    /// How many workers prepare, revised by the consumer once a batch; carried across
    /// epochs.
    pub(super) prep_role: Arc<Mutex<PrepRole>>,
    /// The read times the last epoch's read-ahead had at its last batch, for the next.
    pub(super) carried_reads: Arc<Mutex<Option<CarriedReads>>>,
    /// The loader's runs, each added as it starts ([`halt_runs`]).
    pub(super) runs: Arc<Runs>,
}

/// The epoch started ahead of the consumer, if any.
pub(super) type Upcoming = Mutex<Option<Running>>;

/// The runs a loader started, while they last.
pub(super) type Runs = Mutex<Vec<Weak<Shared>>>;

/// Halts every run of `runs` still going and waits (boundedly) for their threads.
pub(super) fn halt_runs(runs: &Runs) {
    let live: Vec<Arc<Shared>> = runs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for run in &live {
        run.halt();
    }
    for run in &live {
        run.wait_for_threads(STOP_GRACE);
    }
}

/// [`Shared::progress`]: the run has read its last sample.
const READ_ALL: u8 = 1;
/// [`Shared::progress`]: a consumer iterates the run.
const CONSUMED: u8 = 2;

/// What every thread of an epoch shares.
pub(super) struct Shared {
    pub(super) parts: Parts,
    /// The rank's samples of the epoch, in plan order.
    pub(super) stream: Arc<[SampleId]>,
    /// Under repeated augmentation, which repeat each of `stream` is (else empty).
    pub(super) repeats: Arc<[u32]>,
    /// Where this run starts: epoch, first batch number, first stream index.
    pub(super) from: Position,
    /// Whether `stream` was cut before the epoch's end ([`Loader::batches`]): its last
    /// batch is delivered even when short, and no next epoch starts after it.
    ///
    /// [`Loader::batches`]: super::Loader::batches
    cut: bool,
    /// Bytes of one prepared sample (from the pipeline; used on every claim).
    pub(super) sample_bytes: usize,
    pub(super) order: Order,
    pub(super) ahead: ReadAhead,
    /// The role each worker takes.
    pub(super) roles: Roles,
    /// Loader threads started (joined when the run stops), those still running, and the
    /// signal that one has exited.
    threads: Mutex<Vec<JoinHandle<()>>>,
    running: Mutex<usize>,
    exited: Condvar,
    /// Reads finished (or failed) in this run, and the cache's and storage's counters once
    /// the last one had: the epoch's own reads end there, whatever runs after it.
    fetched: AtomicUsize,
    reads_end: OnceLock<(CacheStats, SourceStats)>,
    /// [`READ_ALL`] and [`CONSUMED`] as they happen: the next epoch starts once both have
    /// (a run started ahead must not start its own successor before a consumer takes it).
    progress: AtomicU8,
    pub(super) fetch: StageCounters,
    pub(super) prep: StageCounters,
    /// Prep's thread CPU time and the bytes it read (demand per byte, when balancing).
    pub(super) prep_cpu: StageCounters,
    /// The fetch role's thread CPU time by the tier of the reads it was spent on
    /// ([`Tier::index`]; demand per read; counted only when balancing).
    pub(super) fetch_cpu: [StageCounters; 3],
    /// Each sample's fetch and prep time, for the slowest samples and shards.
    pub(super) costs: CostLog,
    /// The cache's and the storage's counters when the epoch started.
    cache_before: CacheStats,
    storage_before: SourceStats,
}

impl Shared {
    /// Records that a loader thread died and stops the epoch, so that the consumer
    /// reports it instead of waiting for that thread.
    pub(super) fn crashed(&self, what: String) {
        self.order.crashed(what);
        self.halt();
    }

    /// Counts a loader thread about to start.
    pub(super) fn thread_starting(&self) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    /// Keeps `thread` to join when the run stops.
    pub(super) fn keep(&self, thread: JoinHandle<()>) {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(thread);
    }

    /// Tells the role table how many fetch workers the bound on reads in flight asks
    /// for: one per [`Source::reads_at_once`] reads, below the ceiling.
    pub(super) fn want_fetchers(&self) {
        let reads = self
            .ahead
            .reads_allowed()
            .min(self.parts.config.fetch_threads);
        let workers = reads.div_ceil(self.parts.source.reads_at_once().max(1));
        self.roles.want(Role::Fetch, workers);
    }

    pub(super) fn thread_exited(&self) {
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
        self.order.halt();
        self.ahead.halt();
        self.roles.stop();
    }

    /// Called by a fetch thread when a read has finished, before its bytes are parked
    /// (so before the consumer can see the sample): after the run's last read, the
    /// epoch's read counters are final and the next epoch may start.
    pub(super) fn read_finished(&self) {
        let to_read = self.stream.len() - self.from.sample as usize;
        if self.fetched.fetch_add(1, Ordering::AcqRel) + 1 != to_read {
            return;
        }
        let source = &self.parts.source;
        // Set once: only the run's last read gets here.
        let _ = self.reads_end.set((source.cache().stats(), source.stats()));
        self.advance(READ_ALL);
    }

    /// Records `step` of the run's progress; whoever records the second of the two starts
    /// the next epoch (so it starts once).
    fn advance(&self, step: u8) {
        let before = self.progress.fetch_or(step, Ordering::AcqRel);
        let completes = before & step == 0 && before | step == READ_ALL | CONSUMED;
        if completes && self.parts.config.overlap_epochs && !self.cut && !self.order.halted() {
            self.start_next();
        }
    }

    /// Starts the next epoch from its beginning for the consumer to adopt.
    fn start_next(&self) {
        let Some(upcoming) = self.parts.upcoming.upgrade() else {
            return; // the loader is gone
        };
        let (config, len) = (&self.parts.config, self.parts.catalog.len());
        // The last epoch a position can name has no next one.
        let Some(epoch) = self.from.epoch.checked_add(1) else {
            return;
        };
        // A plan that cannot be made is reported when the consumer asks for the epoch.
        let Ok(plan) = config.epoch_plan(len, epoch) else {
            return;
        };
        Running::ahead(
            self.parts.clone(),
            plan,
            Position::start_of(epoch),
            &upcoming,
        );
    }
}

/// An epoch's threads at work, with the state they share: started by the consumer, or
/// ahead of it by the previous epoch. Dropping it stops and joins the threads.
pub(super) struct Running {
    shared: Arc<Shared>,
}

impl Running {
    /// Starts the threads of `plan` from `position`, for a consumer (`consumed`) or ahead
    /// of one; up to stream index `until` when given (else to the epoch's end).
    pub(super) fn launch(
        parts: Parts,
        plan: EpochPlan,
        position: Position,
        consumed: bool,
        until: Option<usize>,
    ) -> Running {
        let config = &parts.config;
        let catalog = &parts.catalog;
        let start = position.sample as usize;
        let average = catalog.total_bytes() / catalog.len().max(1) as u64;
        // The smallest read-ahead window: a batch of samples of average size, at least two
        // per prep thread (see the `readahead` module).
        let floor_samples = (2 * config.prep_threads).max(config.plan.batch_size) as u64;
        let floor = (floor_samples * average).clamp(1, config.readahead);
        let end = until.map_or(plan.samples().len(), |until| {
            until.clamp(start, plan.samples().len())
        });
        let cut = end < plan.samples().len();
        let stream: Arc<[SampleId]> = plan.samples()[..end].into();
        let repeats = plan.repeats();
        let repeats: Arc<[u32]> = repeats[..end.min(repeats.len())].into();
        let sample_bytes = config.pipeline.sample_bytes();
        let in_flight = parts.totals.reads_in_flight.load(Ordering::Relaxed) as usize;
        let carried = *parts
            .carried_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let prep_workers = parts
            .prep_role
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .workers();
        let cache = parts.source.cache();
        if cache.looks_ahead() {
            let next = (position.epoch.checked_add(1))
                .and_then(|epoch| config.epoch_plan(catalog.len(), epoch).ok());
            cache.begin_epoch(
                position.epoch,
                next.as_ref().map_or(&[], EpochPlan::samples),
            );
        }
        let shared = Arc::new(Shared {
            order: Order::new(
                stream.len(),
                start,
                config.plan.batch_size,
                config.prefetch,
                sample_bytes,
                parts.pool.clone(),
            ),
            ahead: ReadAhead::new(
                stream.clone(),
                catalog.clone(),
                start,
                (floor, config.readahead),
                (
                    in_flight,
                    config.fetch_threads,
                    config
                        .scheduler()
                        .reads_revised_every(config.plan.batch_size),
                ),
                config.fetch_threads + config.prep_threads,
            )
            .with_tiers({
                let source = parts.source.clone();
                Box::new(move |id| source.tier(id))
            })
            .carrying(carried),
            roles: Roles::new(prep_workers, 0),
            stream,
            repeats,
            from: position,
            cut,
            sample_bytes,
            cache_before: parts.source.cache().stats(),
            storage_before: parts.source.stats(),
            threads: Mutex::new(Vec::new()),
            running: Mutex::new(0),
            exited: Condvar::new(),
            fetched: AtomicUsize::new(0),
            reads_end: OnceLock::new(),
            progress: AtomicU8::new(if consumed { CONSUMED } else { 0 }),
            fetch: StageCounters::default(),
            prep: StageCounters::default(),
            prep_cpu: StageCounters::default(),
            fetch_cpu: Default::default(),
            costs: CostLog::default(),
            parts,
        });
        {
            let mut runs = shared.parts.runs.lock().unwrap_or_else(|e| e.into_inner());
            runs.retain(|run| run.strong_count() > 0);
            runs.push(Arc::downgrade(&shared));
        }
        // Workers for the roles as they start: prep as the consumer's side last decided,
        // fetch as the bound on reads in flight starts (both move; see `workers::work`).
        shared.want_fetchers();
        while let Some(n) = shared.roles.hire() {
            spawn(format!("nostall-worker-{n}"), &shared, work)
                .expect("cannot start a loader thread");
        }
        Running { shared }
    }

    /// Starts the threads of `plan` from `position` ahead of a consumer, as the
    /// `upcoming` epoch (stopping the one there, if any).
    pub(super) fn ahead(parts: Parts, plan: EpochPlan, position: Position, upcoming: &Upcoming) {
        let run = Running::launch(parts, plan, position, false, None);
        let replaced = upcoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(run);
        // Stopped outside the lock (it joins threads).
        drop(replaced);
    }

    /// Where the run starts.
    pub(super) fn from(&self) -> Position {
        self.shared.from
    }

    /// Samples prepared so far.
    pub(super) fn prepared(&self) -> u64 {
        self.shared.prep.snapshot(0).items
    }

    /// Whether every sample of the run has been read.
    #[cfg(test)]
    pub(super) fn read_all(&self) -> bool {
        self.shared.progress.load(Ordering::Acquire) & READ_ALL != 0
    }
}

/// How long stopping a run waits for its threads to notice.
const STOP_GRACE: Duration = Duration::from_millis(500);

impl Drop for Running {
    fn drop(&mut self) {
        self.shared.halt();
        // A thread inside a read (a storage request can hang for minutes) or a long decode
        // notices the halt only when that returns: the consumer does not wait for it.
        if !self.shared.wait_for_threads(STOP_GRACE) {
            // Each keeps the epoch's shared state alive, batch buffers included, until it
            // exits; the buffers are freed then rather than returned to the pool, since a
            // prep thread may still be writing into its slot.
            return;
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for thread in threads {
            // Panics were caught in the thread; joining must not panic the consumer.
            let _ = thread.join();
        }
        self.shared.order.release_buffers();
    }
}

/// One epoch in progress: an iterator of batches in plan order.
///
/// Dropping it stops and joins its threads.
pub struct Epoch {
    run: Running,
    position: Position,
    started: Instant,
    finished: Option<Instant>,
    wait: Duration,
    max_wait: Duration,
    first_wait: Option<Duration>,
    samples: u64,
    failed: bool,
    /// Time already waited for the next batch by calls to `next_within` that ran out.
    carried_wait: Duration,
    /// Labels and ids of the batch being assembled.
    labels: Vec<i64>,
    ids: Vec<SampleId>,
    /// The samples of the batch being assembled that a device decodes, by slot.
    deferred: Vec<(usize, Deferred)>,
    /// The epoch's skips by cause (with those before a resumed position), and the first
    /// 1 000 skipped samples of this run.
    skipped_by_cause: BTreeMap<&'static str, u64>,
    skipped_samples: Vec<SampleError>,
    /// The epoch's stretches under other world sizes before this run.
    history: Vec<Stretch>,
    /// The groups its order was dealt in (`None`: a plain permutation), which a resumed
    /// epoch keeps whatever the settings say now.
    blocks: Option<Blocks>,
    /// Samples prepared before the consumer asked for the epoch (while the previous
    /// epoch ended).
    prepared_ahead: u64,
    /// When the previous batch was handed over: the consumer's step is the time from
    /// there to the next, less its wait.
    handed: Option<Instant>,
}

/// What [`Epoch::next_within`] found.
// Returned once per batch and taken apart at once: boxing the batch would cost an
// allocation per batch to save a few bytes of stack.
#[allow(clippy::large_enum_variant)]
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
            .field("epoch", &self.run.shared.from.epoch)
            .field("samples", &self.samples)
            .finish()
    }
}

/// Skipped samples kept with their causes, for [`Epoch::skipped`].
const KEPT_SKIPS: usize = 1000;

impl Epoch {
    /// The consumer's side of `run`, with the epoch's skips before it counted as
    /// `skipped` and its stretches under other world sizes as `history`, its order dealt
    /// in `blocks`; `adopted` when the run was started ahead of the consumer.
    pub(super) fn new(
        run: Running,
        skipped_by_cause: BTreeMap<&'static str, u64>,
        history: Vec<Stretch>,
        blocks: Option<Blocks>,
        adopted: bool,
    ) -> Epoch {
        let shared = &run.shared;
        let batch_size = shared.parts.config.plan.batch_size;
        let position = shared.from;
        shared
            .parts
            .totals
            .epoch
            .store(position.epoch, Ordering::Relaxed);
        let prepared_ahead = if adopted {
            // May start the epoch after it, when this one has read everything already.
            shared.advance(CONSUMED);
            run.prepared()
        } else {
            0
        };
        Epoch {
            run,
            position,
            started: Instant::now(),
            finished: None,
            wait: Duration::ZERO,
            max_wait: Duration::ZERO,
            first_wait: None,
            samples: 0,
            failed: false,
            carried_wait: Duration::ZERO,
            labels: Vec::with_capacity(batch_size),
            ids: Vec::with_capacity(batch_size),
            deferred: Vec::new(),
            skipped_by_cause,
            skipped_samples: Vec::new(),
            history,
            blocks,
            prepared_ahead,
            handed: None,
        }
    }

    /// Where the epoch stands: save it to resume exactly here.
    pub fn position(&self) -> Position {
        self.position
    }

    /// The epoch's stretches under other world sizes before this run (empty unless it
    /// resumed a state saved by another number of ranks).
    pub fn history(&self) -> &[Stretch] {
        &self.history
    }

    /// The groups the epoch's order was dealt in (`None`: a plain permutation).
    pub(super) fn blocks(&self) -> Option<&Blocks> {
        self.blocks.as_ref()
    }

    /// Figures so far.
    pub fn stats(&self) -> EpochStats {
        let shared = &self.run.shared;
        let (starved, readahead) = shared.ahead.stats();
        let batches = shared.order.lock().delivered();
        let end = self.finished.unwrap_or_else(Instant::now);
        let source = &shared.parts.source;
        let (slowest, slowest_shards) = shared.costs.snapshot(&**source);
        let (cache, storage) = shared
            .reads_end
            .get()
            .copied()
            .unwrap_or_else(|| (source.cache().stats(), source.stats()));
        EpochStats {
            epoch: shared.from.epoch,
            batches,
            samples: self.samples,
            skipped: self.skipped_by_cause.clone(),
            wall: end - self.started,
            wait: self.wait,
            max_wait: self.max_wait,
            first_wait: self.first_wait.unwrap_or_default(),
            fetch: shared.fetch.snapshot(shared.roles.wanted(Role::Fetch)),
            prep: shared.prep.snapshot(shared.roles.wanted(Role::Prep)),
            prep_reason: shared
                .parts
                .prep_role
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .reason(),
            prep_starved: starved,
            cache: cache.since(&shared.cache_before),
            storage: storage - shared.storage_before,
            prepared_ahead: self.prepared_ahead,
            readahead,
            slowest,
            slowest_shards,
        }
    }

    /// The samples skipped so far, with their causes (the first 1 000).
    pub fn skipped(&self) -> Vec<SampleError> {
        self.skipped_samples.clone()
    }

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

    /// Stops the epoch's threads and marks it failed with `error`.
    fn fail(&mut self, error: Error) -> Option<Option<Result<Batch>>> {
        self.run.shared.halt();
        self.failed = true;
        Some(Some(Err(error)))
    }

    /// Finalises samples in order until a batch is complete, the plan ends, an error
    /// stops the epoch, or `deadline` passes (`Some(None)`).
    fn next_batch(&mut self, deadline: Option<Instant>) -> Option<Option<Result<Batch>>> {
        let shared = self.run.shared.clone();
        let order = &shared.order;
        let batch_size = shared.parts.config.plan.batch_size;
        let mut st = order.lock();
        let mut waited = std::mem::take(&mut self.carried_wait);
        loop {
            if let Some(crash) = st.crash() {
                let error = Error::Internal(crash.to_owned());
                drop(st);
                return self.fail(error);
            }
            while let Some((index, result)) = order.finalise_next(&mut st) {
                let id = shared.stream[index];
                match result {
                    Err(cause) => {
                        let error = SampleError {
                            id,
                            location: shared.parts.source.location(id),
                            cause,
                        };
                        if shared.parts.config.on_error == ErrorPolicy::Error {
                            drop(st);
                            return self.fail(Error::Sample(error));
                        }
                        if let Some(quarantine) = &shared.parts.quarantine {
                            if let Err(e) = quarantine.record(shared.from.epoch, &error) {
                                drop(st);
                                return self.fail(e);
                            }
                        }
                        *self.skipped_by_cause.entry(error.cause.kind()).or_default() += 1;
                        shared.parts.totals.skipped(error.cause.kind());
                        if self.skipped_samples.len() < KEPT_SKIPS {
                            self.skipped_samples.push(error);
                        }
                    }
                    Ok(prepared) => {
                        if let Prepared::Deferred(deferred) = prepared {
                            self.deferred.push((self.labels.len(), *deferred));
                        }
                        let label = shared.parts.catalog.label(id).map_or(-1, i64::from);
                        self.labels.push(label);
                        self.ids.push(id);
                        if self.labels.len() == batch_size {
                            return Some(Some(Ok(self.deliver(st, waited))));
                        }
                    }
                }
            }
            if order.finished(&st) {
                if !self.labels.is_empty() && (!shared.parts.config.plan.drop_last || shared.cut) {
                    return Some(Some(Ok(self.deliver(st, waited))));
                }
                self.finished.get_or_insert_with(Instant::now);
                self.position.sample = st.cursor() as u64;
                return None;
            }
            let needed = (batch_size - self.labels.len()).min(shared.stream.len() - st.cursor());
            let before = Instant::now();
            let (guard, timed_out) = order.wait_completed(st, needed, deadline);
            st = guard;
            if timed_out {
                self.carried_wait = waited;
                return Some(None);
            }
            waited += before.elapsed();
        }
    }

    /// Hands the batch being assembled to the consumer.
    fn deliver(&mut self, st: Guard<'_>, waited: Duration) -> Batch {
        let shared = &self.run.shared.clone();
        let index = shared.from.batch + st.delivered();
        let position = Position {
            epoch: shared.from.epoch,
            batch: index + 1,
            sample: st.cursor() as u64,
        };
        let buffer = shared.order.pop_batch(st);
        let batch_size = shared.parts.config.plan.batch_size;
        let labels = std::mem::replace(&mut self.labels, Vec::with_capacity(batch_size));
        let ids = std::mem::replace(&mut self.ids, Vec::with_capacity(batch_size));
        self.position = position;
        self.samples += labels.len() as u64;
        shared.parts.totals.delivered(labels.len(), waited);
        let (_, readahead) = shared.ahead.stats();
        let totals = &shared.parts.totals;
        totals
            .readahead_window
            .store(readahead.window, Ordering::Relaxed);
        totals
            .readahead_peak
            .store(readahead.peak, Ordering::Relaxed);
        totals
            .reads_in_flight
            .store(readahead.reads_in_flight as u64, Ordering::Relaxed);
        *shared
            .parts
            .carried_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(shared.ahead.carried());
        totals
            .fetch_workers
            .store(shared.roles.wanted(Role::Fetch) as u64, Ordering::Relaxed);
        self.wait += waited;
        self.max_wait = self.max_wait.max(waited);
        self.first_wait.get_or_insert(waited);
        self.revise_roles(position.sample as usize, labels.len(), waited);
        if let Some(route) = shared.parts.config.pipeline.prep().decode_route() {
            route.observe(waited);
        }
        let mut batch = Batch {
            buffer: Some(buffer),
            pool: shared.parts.pool.clone(),
            len: labels.len(),
            layout: shared.parts.config.pipeline.layout().clone(),
            sample_bytes: shared.sample_bytes,
            labels,
            soft_labels: None,
            ids,
            index,
            position,
            wait: waited,
            deferred: std::mem::take(&mut self.deferred),
            retired: AtomicBool::new(false),
        };
        if let Some(mix) = &shared.parts.config.mixup {
            // Keyed by the batch's first sample, not its index or rank: the same batch
            // is mixed alike after any resume.
            let first = batch.ids.first().copied().unwrap_or(0);
            let key = [
                shared.parts.config.plan.seed,
                position.epoch,
                first,
                0x004d_4958_5550,
            ];
            let mut rng = crate::rng::Rng::new(crate::rng::derive(&key));
            let layout = batch.layout.clone();
            let (image, shape, dtype) = layout.tensor().expect("checked with the mixer");
            let labels = std::mem::take(&mut batch.labels);
            let soft = mix.apply_within(
                batch.data_mut(),
                (layout.bytes(), image),
                shape,
                dtype,
                &labels,
                &mut rng,
            );
            (batch.labels, batch.soft_labels) = (labels, Some(soft));
        }
        batch
    }
}

impl Epoch {
    /// Revises how many workers prepare, once a batch of `samples` is handed over after
    /// a wait of `waited`: this rank's share of its node's threads under load balance
    /// (by its demand for the samples from stream index `next` on, the batches being
    /// prepared) bounds what the consumer's rate needs ([`PrepRole`]).
    fn revise_roles(&mut self, next: usize, samples: usize, waited: Duration) {
        let now = Instant::now();
        let previous = self.handed.replace(now);
        let shared = &self.run.shared;
        let share = self.node_share(next);
        let observed = previous.map(|previous| {
            let interval = now - previous;
            let prep = shared.parts.totals.prep_cpu.snapshot(0);
            Observed {
                prep_seconds: prep.busy.as_secs_f64() / prep.items.max(1) as f64,
                step_seconds: interval.saturating_sub(waited).as_secs_f64() / samples.max(1) as f64,
                waited_share: waited.as_secs_f64() / interval.as_secs_f64().max(1e-9),
            }
        });
        let mut role = shared
            .parts
            .prep_role
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let workers = shared
            .parts
            .config
            .scheduler()
            .prep_workers(&mut role, share, observed);
        drop(role);
        if workers != shared.roles.wanted(Role::Prep) {
            shared.roles.want(Role::Prep, workers);
            staff(shared);
        }
    }

    /// Under load balance across the node's ranks: says this rank's demand for the
    /// samples from stream index `next` on and returns the share of prep threads the
    /// table gives it, when revised.
    fn node_share(&self, next: usize) -> Option<usize> {
        let shared = &self.run.shared;
        let balance = shared.parts.balance.as_ref()?;
        let batch_size = shared.parts.config.plan.batch_size;
        let ahead = batch_size * (shared.parts.config.prefetch + 1);
        let upcoming = &shared.stream[next.min(shared.stream.len())..];
        let upcoming = &upcoming[..ahead.min(upcoming.len())];
        let catalog = &shared.parts.catalog;
        let bytes = upcoming.iter().map(|&id| catalog.size(id)).sum();
        let cpu = shared.prep_cpu.snapshot(0);
        // Where the reads to come are served from: the read-ahead's view at its last
        // revision (the samples above were mostly read already).
        let mix = shared.ahead.stats().1.by_tier.map(|tier| tier.upcoming);
        let spent = Tier::ALL.map(|tier| {
            let cpu = shared.fetch_cpu[tier.index()].snapshot(0);
            (cpu.busy.as_secs_f64(), cpu.items)
        });
        let demand = demand(
            (cpu.busy.as_secs_f64(), cpu.bytes),
            (bytes, upcoming.len()),
            fetch_cpu_per_read(spent, mix),
            batch_size,
        );
        balance.revise(demand)
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
