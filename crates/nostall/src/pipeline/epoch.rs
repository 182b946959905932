//! One epoch in progress: the state its threads share, and the consumer's side, which
//! finalises samples in plan order into batches.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cache::Cached;
use crate::catalog::{Catalog, SampleId};
use crate::error::{Error, Result, SampleError};
use crate::metrics::live::Totals;
use crate::metrics::{CostLog, EpochStats, StageCounters};
use crate::plan::elastic::Stretch;
use crate::plan::{EpochPlan, Position};
use crate::storage::Source;

use super::buffer::Pool;
use super::order::{Guard, Order};
use super::quarantine::Quarantine;
use super::readahead::ReadAhead;
use super::workers::{fetch_loop, prep_loop, spawn};
use super::{Batch, ErrorPolicy, Loader, LoaderConfig};

/// What every thread of an epoch shares.
pub(super) struct Shared {
    pub(super) config: LoaderConfig,
    /// The rank's samples of the epoch, in plan order.
    pub(super) stream: Arc<[SampleId]>,
    /// Where this run starts: epoch, first batch number, first stream index.
    pub(super) from: Position,
    /// Bytes of one prepared sample (from the pipeline; used on every claim).
    pub(super) sample_bytes: usize,
    catalog: Arc<Catalog>,
    pub(super) source: Arc<Cached>,
    pool: Arc<Pool>,
    pub(super) order: Order,
    pub(super) ahead: ReadAhead,
    /// Loader threads still running, and the signal that one has exited.
    running: Mutex<usize>,
    exited: Condvar,
    pub(super) fetch: StageCounters,
    pub(super) prep: StageCounters,
    /// Each sample's fetch and prep time, for the slowest samples and shards.
    pub(super) costs: CostLog,
    /// The loader's figures across epochs.
    pub(super) totals: Arc<Totals>,
    quarantine: Option<Arc<Quarantine>>,
    /// The cache's and the storage's counters when the epoch started.
    cache_before: crate::cache::CacheStats,
    storage_before: crate::storage::SourceStats,
}

impl Shared {
    /// Records that a loader thread died and stops the epoch, so that the consumer
    /// reports it instead of waiting for that thread.
    pub(super) fn crashed(&self, what: String) {
        self.order.crashed(what);
        self.halt();
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
    /// Labels and ids of the batch being assembled.
    labels: Vec<i64>,
    ids: Vec<SampleId>,
    /// The epoch's skips by cause (with those before a resumed position), and the first
    /// 1 000 skipped samples of this run.
    skipped_by_cause: BTreeMap<&'static str, u64>,
    skipped_samples: Vec<SampleError>,
    /// The epoch's stretches under other world sizes before this run.
    history: Vec<Stretch>,
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

/// Skipped samples kept with their causes, for [`Epoch::skipped`].
const KEPT_SKIPS: usize = 1000;

impl Epoch {
    pub(super) fn start(
        loader: &Loader,
        plan: EpochPlan,
        position: Position,
        skipped_by_cause: BTreeMap<&'static str, u64>,
        history: Vec<Stretch>,
    ) -> Epoch {
        let config = &loader.config;
        let catalog = &loader.catalog;
        let start = position.sample as usize;
        let average = catalog.total_bytes() / catalog.len().max(1) as u64;
        // The smallest read-ahead window: a batch of samples of average size, at least two
        // per prep thread (see the `readahead` module).
        let floor_samples = (2 * config.prep_threads).max(config.plan.batch_size) as u64;
        let floor = (floor_samples * average).clamp(1, config.readahead);
        let stream: Arc<[SampleId]> = plan.samples().into();
        let sample_bytes = config.pipeline.sample_bytes();
        let shared = Arc::new(Shared {
            order: Order::new(
                stream.len(),
                start,
                config.plan.batch_size,
                config.prefetch,
                sample_bytes,
                loader.pool.clone(),
            ),
            ahead: ReadAhead::new(
                stream.clone(),
                catalog.clone(),
                start,
                floor,
                config.readahead,
                config.fetch_threads + config.prep_threads,
            ),
            config: config.clone(),
            stream,
            from: position,
            sample_bytes,
            catalog: catalog.clone(),
            source: loader.source.clone(),
            pool: loader.pool.clone(),
            quarantine: loader.quarantine.clone(),
            cache_before: loader.source.cache().stats(),
            storage_before: loader.source.stats(),
            running: Mutex::new(config.fetch_threads + config.prep_threads),
            exited: Condvar::new(),
            fetch: StageCounters::default(),
            prep: StageCounters::default(),
            costs: CostLog::default(),
            totals: loader.totals.clone(),
        });
        shared.totals.epoch.store(position.epoch, Ordering::Relaxed);
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
            labels: Vec::with_capacity(config.plan.batch_size),
            ids: Vec::with_capacity(config.plan.batch_size),
            skipped_by_cause,
            skipped_samples: Vec::new(),
            history,
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

    /// Figures so far.
    pub fn stats(&self) -> EpochStats {
        let shared = &self.shared;
        let (starved, readahead) = shared.ahead.stats();
        let batches = shared.order.lock().delivered();
        let end = self.finished.unwrap_or_else(Instant::now);
        let (slowest, slowest_shards) = shared.costs.snapshot(&*shared.source);
        EpochStats {
            epoch: shared.from.epoch,
            batches,
            samples: self.samples,
            skipped: self.skipped_by_cause.clone(),
            wall: end - self.started,
            wait: self.wait,
            max_wait: self.max_wait,
            fetch: shared.fetch.snapshot(shared.config.fetch_threads),
            prep: shared.prep.snapshot(shared.config.prep_threads),
            prep_starved: starved,
            cache: shared.source.cache().stats().since(&shared.cache_before),
            storage: shared.source.stats() - shared.storage_before,
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
        self.shared.halt();
        self.failed = true;
        Some(Some(Err(error)))
    }

    /// Finalises samples in order until a batch is complete, the plan ends, an error
    /// stops the epoch, or `deadline` passes (`Some(None)`).
    fn next_batch(&mut self, deadline: Option<Instant>) -> Option<Option<Result<Batch>>> {
        let shared = self.shared.clone();
        let order = &shared.order;
        let batch_size = shared.config.plan.batch_size;
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
                            location: shared.source.location(id),
                            cause,
                        };
                        if shared.config.on_error == ErrorPolicy::Error {
                            drop(st);
                            return self.fail(Error::Sample(error));
                        }
                        if let Some(quarantine) = &shared.quarantine {
                            if let Err(e) = quarantine.record(shared.from.epoch, &error) {
                                drop(st);
                                return self.fail(e);
                            }
                        }
                        *self.skipped_by_cause.entry(error.cause.kind()).or_default() += 1;
                        shared.totals.skipped(error.cause.kind());
                        if self.skipped_samples.len() < KEPT_SKIPS {
                            self.skipped_samples.push(error);
                        }
                    }
                    Ok(()) => {
                        let label = shared.catalog.label(id).map_or(-1, i64::from);
                        self.labels.push(label);
                        self.ids.push(id);
                        if self.labels.len() == batch_size {
                            return Some(Some(Ok(self.deliver(st, waited))));
                        }
                    }
                }
            }
            if order.finished(&st) {
                if !self.labels.is_empty() && !shared.config.plan.drop_last {
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
        let shared = &self.shared;
        let index = shared.from.batch + st.delivered();
        let position = Position {
            epoch: shared.from.epoch,
            batch: index + 1,
            sample: st.cursor() as u64,
        };
        let buffer = shared.order.pop_batch(st);
        let batch_size = shared.config.plan.batch_size;
        let labels = std::mem::replace(&mut self.labels, Vec::with_capacity(batch_size));
        let ids = std::mem::replace(&mut self.ids, Vec::with_capacity(batch_size));
        self.position = position;
        self.samples += labels.len() as u64;
        shared.totals.delivered(labels.len(), waited);
        let (_, readahead) = shared.ahead.stats();
        let totals = &shared.totals;
        totals
            .readahead_window
            .store(readahead.window, Ordering::Relaxed);
        totals
            .readahead_peak
            .store(readahead.peak, Ordering::Relaxed);
        self.wait += waited;
        self.max_wait = self.max_wait.max(waited);
        Batch {
            buffer: Some(buffer),
            pool: shared.pool.clone(),
            len: labels.len(),
            layout: shared.config.pipeline.layout().clone(),
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
        self.shared.order.release_buffers();
    }
}
