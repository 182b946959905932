//! The pipeline: fetch threads read sample bytes along the plan, prep threads decode and
//! transform them straight into their slot of a batch buffer, and the consumer receives
//! whole batches in plan order.
//!
//! ```text
//!  plan ─▶ claim ─▶ fetch threads ─▶ bounded channel ─▶ prep threads ─▶ slot of a batch
//!            ▲                                                              │
//!            └──── window of batch buffers (prefetch depth) ◀── consumer ◀──┘ (in order)
//! ```
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
//! **Randomness** of each sample's augmentation comes from (seed, epoch, sample id), so it
//! does not matter which thread prepares it.

mod buffer;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::catalog::{Catalog, SampleId};
use crate::codec::DEFAULT_MAX_PIXELS;
use crate::error::{Cause, Error, Result, SampleError};
use crate::metrics::{EpochStats, StageCounters};
use crate::ops::{DType, Pipeline, Prep};
use crate::plan::{batches_for, samples_per_rank, EpochPlan, PlanConfig, Position};
use crate::rng::{derive, Rng};
use crate::storage::Source;
use buffer::{BatchBuffer, Pool, Slot};

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
}

impl LoaderConfig {
    /// Defaults around a pipeline: batch 64, shuffled, 2 prep threads, 1 fetch thread,
    /// 4 batches of prefetch, stop on errors.
    pub fn new(pipeline: Pipeline) -> LoaderConfig {
        LoaderConfig {
            plan: PlanConfig::default(),
            pipeline,
            prep_threads: 2,
            fetch_threads: 1,
            prefetch: 4,
            on_error: ErrorPolicy::Error,
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }

    fn validate(&self, dataset_len: usize) -> Result<()> {
        self.plan.validate(dataset_len)?;
        if self.prep_threads == 0 || self.fetch_threads == 0 {
            return Err(Error::Config(
                "prep and fetch need at least one thread each".into(),
            ));
        }
        if self.prefetch == 0 {
            return Err(Error::Config("prefetch must be at least 1 batch".into()));
        }
        Ok(())
    }
}

/// An image loader over one dataset: makes an iterator of batches per epoch.
pub struct Loader {
    catalog: Arc<Catalog>,
    source: Arc<dyn Source>,
    config: LoaderConfig,
    pool: Arc<Pool>,
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
    /// A loader reading `catalog`'s samples from `source`.
    pub fn new(
        catalog: Arc<Catalog>,
        source: Arc<dyn Source>,
        config: LoaderConfig,
    ) -> Result<Loader> {
        config.validate(catalog.len())?;
        let buffer_bytes = config.plan.batch_size * config.pipeline.sample_bytes();
        Ok(Loader {
            catalog,
            source,
            config,
            pool: Pool::new(buffer_bytes),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
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
        let plan = EpochPlan::new(&self.config.plan, self.catalog.len(), position.epoch)?;
        if position.sample as usize > plan.samples().len() {
            return Err(Error::Config(format!(
                "position {position:?} lies beyond the epoch's {} samples on this rank",
                plan.samples().len()
            )));
        }
        Ok(Epoch::start(self, plan, position))
    }
}

/// A sample handed from a fetch thread to a prep thread.
struct Fetched {
    index: usize,
    position: u64,
    slot: Slot,
    bytes: std::result::Result<Vec<u8>, Cause>,
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
    source: Arc<dyn Source>,
    pool: Arc<Pool>,
    state: Mutex<State>,
    /// Signalled when claiming may proceed (a batch delivered, a sample finalised).
    claimable: Condvar,
    /// Signalled when a sample completes.
    completed: Condvar,
    stop: AtomicBool,
    fetch: StageCounters,
    prep: StageCounters,
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
        drop(st);
        // The consumer finalises in order, so only the oldest sample can unblock it; waking
        // it for every other sample would steal the prep threads' cores for nothing.
        if k == 0 {
            self.completed.notify_all();
        }
    }

    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        // Take the lock so that no thread misses the wake-up between its check and wait.
        drop(self.lock());
        self.claimable.notify_all();
        self.completed.notify_all();
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
    fn start(loader: &Loader, plan: EpochPlan, position: Position) -> Epoch {
        let config = &loader.config;
        let start = position.sample as usize;
        let shared = Arc::new(Shared {
            config: config.clone(),
            stream: plan.samples().to_vec(),
            from: position,
            sample_bytes: config.pipeline.sample_bytes(),
            catalog: loader.catalog.clone(),
            source: loader.source.clone(),
            pool: loader.pool.clone(),
            state: Mutex::new(State {
                next: start,
                last_position: None,
                cursor: start,
                done: VecDeque::new(),
                skipped: 0,
                skipped_by_cause: BTreeMap::new(),
                skipped_samples: Vec::new(),
                delivered: 0,
                window: VecDeque::new(),
                claimers_waiting: 0,
                labels: Vec::with_capacity(config.plan.batch_size),
                ids: Vec::with_capacity(config.plan.batch_size),
            }),
            claimable: Condvar::new(),
            completed: Condvar::new(),
            stop: AtomicBool::new(false),
            fetch: StageCounters::default(),
            prep: StageCounters::default(),
        });
        // Room for every prep thread to have one sample queued behind the one it works on.
        let (to_prep, from_fetch) = bounded::<Fetched>(config.prep_threads * 2);
        let (recycle, recycled) =
            bounded::<Vec<u8>>(config.prep_threads * 2 + config.fetch_threads);
        let mut threads = Vec::new();
        for n in 0..config.fetch_threads {
            let (shared, to_prep, recycled) = (shared.clone(), to_prep.clone(), recycled.clone());
            threads.push(spawn(format!("nostall-fetch-{n}"), move || {
                fetch_loop(&shared, &to_prep, &recycled)
            }));
        }
        drop(to_prep);
        for n in 0..config.prep_threads {
            let (shared, from_fetch, recycle) =
                (shared.clone(), from_fetch.clone(), recycle.clone());
            threads.push(spawn(format!("nostall-prep-{n}"), move || {
                prep_loop(&shared, &from_fetch, &recycle)
            }));
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
        }
    }

    /// Where the epoch stands: save it to resume exactly here.
    pub fn position(&self) -> Position {
        self.position
    }

    /// Figures so far.
    pub fn stats(&self) -> EpochStats {
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
        }
    }

    /// The samples skipped so far, with their causes (the first 1 000).
    pub fn skipped(&self) -> Vec<SampleError> {
        self.shared.lock().skipped_samples.clone()
    }

    /// Finalises samples in order until a batch is complete, the plan ends, or an error
    /// stops the epoch.
    fn next_batch(&mut self) -> Option<Result<Batch>> {
        let shared = self.shared.clone();
        let bs = shared.config.plan.batch_size as u64;
        let mut st = shared.lock();
        let mut waited = Duration::ZERO;
        loop {
            while let Some(Some(_)) = st.done.front() {
                let Outcome { position, result } = st.done.pop_front().flatten().expect("checked");
                let index = st.cursor;
                st.cursor += 1;
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
                            return Some(Err(Error::Sample(error)));
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
                            return Some(Ok(self.deliver(st, waited)));
                        }
                    }
                }
                if st.claimers_waiting > 0 {
                    shared.claimable.notify_all();
                }
            }
            if st.cursor == shared.stream.len() {
                if !st.labels.is_empty() && !shared.config.plan.drop_last {
                    return Some(Ok(self.deliver(st, waited)));
                }
                self.finished.get_or_insert_with(Instant::now);
                self.position.sample = st.cursor as u64;
                return None;
            }
            let before = Instant::now();
            st = shared.completed.wait(st).unwrap_or_else(|e| e.into_inner());
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
        self.next_batch()
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        self.shared.halt();
        for thread in self.threads.drain(..) {
            // A worker that panicked has already reported through its sample (or will be
            // noticed as a missing one); joining must not panic the consumer.
            let _ = thread.join();
        }
        let mut st = self.shared.lock();
        while let Some(buffer) = st.window.pop_front() {
            self.shared.pool.give(buffer);
        }
    }
}

fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(body)
        .expect("cannot start a loader thread")
}

fn fetch_loop(shared: &Shared, to_prep: &Sender<Fetched>, recycled: &Receiver<Vec<u8>>) {
    while let Some((index, position, slot)) = shared.claim() {
        let id = shared.stream[index];
        let mut bytes = recycled.try_recv().unwrap_or_default();
        let started = Instant::now();
        let result = shared.source.read(id, &mut bytes);
        shared.fetch.record(started.elapsed(), bytes.len() as u64);
        let fetched = Fetched {
            index,
            position,
            slot,
            bytes: result.map(|()| bytes),
        };
        if to_prep.send(fetched).is_err() {
            return; // prep threads are gone: the epoch is stopping
        }
    }
}

fn prep_loop(shared: &Shared, from_fetch: &Receiver<Fetched>, recycle: &Sender<Vec<u8>>) {
    // Without a decoder every sample fails, and is reported as such, rather than the
    // thread vanishing and the epoch waiting forever for its samples.
    let mut prep = Prep::new(&shared.config.pipeline, shared.config.max_pixels).ok();
    for Fetched {
        index,
        position,
        mut slot,
        bytes,
    } in from_fetch.iter()
    {
        let id = shared.stream[index];
        let started = Instant::now();
        let result = match (&mut prep, bytes) {
            (_, Err(cause)) => Err(cause),
            (None, Ok(_)) => Err(Cause::Corrupt(
                "the JPEG decoder could not be initialised".into(),
            )),
            (Some(prep), Ok(bytes)) => {
                let mut rng = Rng::new(derive(&[shared.config.plan.seed, shared.from.epoch, id]));
                // A panic in a decoder must cost one sample, not the epoch: a thread that died
                // would leave its sample unfinished and the consumer waiting forever.
                let run = || prep.run(&shared.config.pipeline, &bytes, &mut rng, slot.as_mut());
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                    .unwrap_or_else(|_| {
                        Err(Cause::Corrupt("the decoder panicked on this sample".into()))
                    });
                let _ = recycle.try_send(bytes);
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
