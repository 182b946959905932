//! The ordering protocol, read-ahead and thread lifecycle with a fake prep: no codec,
//! every sample's fate chosen by its bytes.
//!
//! A sample's bytes are its id (8 bytes) and a command: `b'.'` prepares it, `b'F'` fails
//! it, `b'P'` panics, and `b'H'` holds it until the samples whose ids follow the command
//! have entered prep in other threads (the next `HOLD` of the stream: so that it
//! completes after them, a slow sample at a known point). A held sample needs a second
//! prep thread, and a window with room for `HOLD` claims past it: claims made while it is
//! in flight take positions after its tentative one, which exceeds its final position by
//! the skips not yet finalised, so the window must span `HOLD` plus those skips beyond
//! its batch (`prefetch − 1` batches ≥ 8 samples here).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use crate::catalog::Catalog;
use crate::error::{Cause, Error, Result};
use crate::loader::{Checkpoint, ErrorPolicy, Loader, LoaderConfig};
use crate::loader::{DeviceQueue, PageLock};
use crate::prep::image::codec::Rect;
use crate::prep::image::Geometry;
use crate::prep::{DType, Deferred, Pipeline, Prep, Prepared, Preparer, SampleLayout};
use crate::rng::Rng;
use crate::sample::Modality;
use crate::sample::SampleId;
use crate::storage::{Memory, NextRead, ReadDone, Source, SourceStats};

/// How many samples a held sample waits for.
const HOLD: usize = 2;
const SEED: u64 = 5;
/// What a held sample waits at most: only reached if the protocol is broken (the sample
/// then fails, and the test with it).
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// The samples that entered prep so far (held ones aside), for held samples to wait on.
#[derive(Debug, Default)]
struct Progress {
    entered: Mutex<HashSet<SampleId>>,
    changed: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct FakePrep {
    progress: Arc<Progress>,
}

impl std::fmt::Display for FakePrep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fake")
    }
}

/// Output: the sample's id, then a draw of its generator (16 bytes).
impl Prep for FakePrep {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(vec![16], DType::U8)
    }

    fn fingerprint(&self) -> String {
        "fake".into()
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(FakePreparer {
            progress: self.progress.clone(),
        }))
    }
}

struct FakePreparer {
    progress: Arc<Progress>,
}

impl Preparer for FakePreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let (id, command) = data.split_at(8);
        let progress = &self.progress;
        if command[0] != b'H' {
            let id = u64::from_le_bytes(id.try_into().unwrap());
            progress.entered.lock().unwrap().insert(id);
            progress.changed.notify_all();
        }
        match command[0] {
            b'F' => return Err(Cause::Corrupt("told to fail".into())),
            b'P' => panic!("told to panic"),
            b'H' => {
                let awaited: Vec<SampleId> = command[1..]
                    .chunks(8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                let (entered, timeout) = progress
                    .changed
                    .wait_timeout_while(progress.entered.lock().unwrap(), HOLD_LIMIT, |seen| {
                        !awaited.iter().all(|id| seen.contains(id))
                    })
                    .unwrap();
                drop(entered);
                if timeout.timed_out() {
                    return Err(Cause::Internal("the held sample was never released".into()));
                }
            }
            _ => {}
        }
        out[..8].copy_from_slice(id);
        out[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
        if command[0] == b'D' {
            return Ok(Prepared::Deferred(Box::new(Deferred {
                data: Arc::from(data),
                geometry: Geometry {
                    source: Rect::full(1, 1),
                    width: 1,
                    height: 1,
                    flip: false,
                    filter: Default::default(),
                    bound: None,
                },
            })));
        }
        Ok(Prepared::InSlot)
    }
}

/// A loader over samples whose commands are `commands` (one per sample id); a held
/// sample waits for the `HOLD` samples after it in the stream of `commands.epoch`.
fn loader(commands: &Commands, batch_size: usize, threads: usize, prefetch: usize) -> Loader {
    loader_with(commands, batch_size, threads, prefetch, |_| {})
}

/// As [`loader`], with the configuration adjusted by `adjust` first.
fn loader_with(
    commands: &Commands,
    batch_size: usize,
    threads: usize,
    prefetch: usize,
    adjust: impl FnOnce(&mut LoaderConfig),
) -> Loader {
    loader_over(
        commands,
        (batch_size, threads, prefetch),
        adjust,
        |memory| memory,
    )
}

/// As [`loader_with`], reading through the source `wrap` makes of the samples in memory.
fn loader_over(
    commands: &Commands,
    (batch_size, threads, prefetch): (usize, usize, usize),
    adjust: impl FnOnce(&mut LoaderConfig),
    wrap: impl FnOnce(Arc<dyn Source>) -> Arc<dyn Source>,
) -> Loader {
    let order = plain_stream(commands.of.len(), batch_size, commands.epoch);
    let samples: Vec<Vec<u8>> = commands
        .of
        .iter()
        .enumerate()
        .map(|(id, &command)| {
            let mut bytes = (id as u64).to_le_bytes().to_vec();
            bytes.push(command);
            if command == b'H' {
                let at = order.iter().position(|&s| s == id as u64).unwrap();
                for &next in order[at + 1..].iter().take(HOLD) {
                    bytes.extend_from_slice(&next.to_le_bytes());
                }
            }
            bytes
        })
        .collect();
    let catalog = Catalog::from_samples(
        "memory",
        crate::sample::Modality::Image,
        Vec::new(),
        samples
            .iter()
            .enumerate()
            .map(|(id, s)| (format!("{id}.fake"), None, s.len() as u64)),
    )
    .unwrap();
    let mut config = LoaderConfig::new(Pipeline::new(FakePrep::default()));
    config.plan.batch_size = batch_size;
    config.plan.seed = SEED;
    config.prep_threads = threads;
    config.fetch_threads = threads;
    config.prefetch = prefetch;
    config.on_error = ErrorPolicy::Skip;
    adjust(&mut config);
    let source = wrap(Arc::new(Memory::new(samples)));
    Loader::new(Arc::new(catalog), source, config).unwrap()
}

/// The ids and bytes of an epoch's batches, and its skip counts.
type Run = (Vec<Vec<SampleId>>, Vec<u8>, BTreeMap<&'static str, u64>);

fn run(loader: &Loader, epoch: u64) -> Run {
    drain(&mut loader.epoch(epoch).unwrap())
}

/// The rest of `run`, as [`run`] gives it: its figures stay to be read.
fn drain(run: &mut crate::loader::Epoch) -> Run {
    let (mut ids, mut bytes) = (Vec::new(), Vec::new());
    for batch in run.by_ref() {
        let batch = batch.unwrap();
        for (slot, &id) in batch.data().chunks(16).zip(batch.ids()) {
            assert_eq!(slot[..8], id.to_le_bytes(), "sample {id} not in its slot");
        }
        ids.push(batch.ids().to_vec());
        bytes.extend_from_slice(batch.data());
    }
    (ids, bytes, run.stats().skipped)
}

/// What each sample is told to do, by id, and the epoch its holds are planned for.
#[derive(Clone)]
struct Commands {
    of: Vec<u8>,
    epoch: u64,
}

impl Commands {
    /// The same samples, none held (for a single thread, which cannot release them, or a
    /// window of one batch).
    fn without_holds(&self) -> Commands {
        let of = self
            .of
            .iter()
            .map(|&c| if c == b'H' { b'.' } else { c })
            .collect();
        Commands { of, ..*self }
    }
}

/// The stream of `epoch` over `len` samples, as every loader of these tests plans it.
fn plain_stream(len: usize, batch_size: usize, epoch: u64) -> Vec<SampleId> {
    let plan = crate::plan::PlanConfig {
        batch_size,
        seed: SEED,
        ..crate::plan::PlanConfig::default()
    };
    crate::plan::EpochPlan::new(&plan, len, epoch)
        .unwrap()
        .samples()
        .to_vec()
}

/// Commands for 40 samples, placed along the stream of `epoch`: failures, panics and held
/// samples, some back to back, one right at a batch boundary.
fn commands(epoch: u64) -> Commands {
    let order = plain_stream(40, 4, epoch);
    let mut of = vec![b'.'; 40];
    for (i, c) in [
        (2, b'F'),
        (3, b'F'),
        (6, b'H'),
        (7, b'P'),
        (11, b'F'),
        (15, b'H'),
        (16, b'F'),
        (24, b'P'),
        (33, b'H'),
        (39, b'F'),
    ] {
        of[order[i] as usize] = c;
    }
    Commands { of, epoch }
}

#[test]
fn batches_are_full_in_plan_order_whatever_fails_and_however_many_threads() {
    let commands = commands(0);
    let good: Vec<SampleId> = plain_stream(40, 4, 0)
        .iter()
        .copied()
        .filter(|&id| matches!(commands.of[id as usize], b'.' | b'H'))
        .collect();
    let expected: Vec<Vec<SampleId>> = good.chunks(4).map(<[_]>::to_vec).collect();
    let skipped = BTreeMap::from([("corrupt", 5), ("internal", 2)]);
    // Held samples need another thread to release them.
    let reference = run(&loader(&commands.without_holds(), 4, 1, 1), 0);
    assert_eq!(reference.0, expected);
    assert_eq!(reference.2, skipped);
    let got = run(&loader(&commands.without_holds(), 4, 3, 1), 0);
    assert_eq!(got, reference);
    for threads in 2..=4 {
        for prefetch in [1, 2, 4] {
            let commands = if prefetch < 4 {
                commands.without_holds()
            } else {
                commands.clone()
            };
            let got = run(&loader(&commands, 4, threads, prefetch), 0);
            assert_eq!(got.0, expected, "{threads} threads, prefetch {prefetch}");
            assert_eq!(got.1, reference.1, "{threads} threads, prefetch {prefetch}");
            assert_eq!(got.2, skipped);
        }
    }
}

#[test]
fn samples_left_to_a_device_are_delivered_with_their_slots_across_skips() {
    let order = plain_stream(40, 4, 0);
    let mut of = vec![b'.'; 40];
    // Deferred samples around failures, at both ends of batches, and last.
    for (i, c) in [
        (0, b'D'),
        (2, b'F'),
        (3, b'D'),
        (4, b'D'),
        (9, b'F'),
        (10, b'D'),
        (11, b'D'),
        (39, b'D'),
    ] {
        of[order[i] as usize] = c;
    }
    let expected: Vec<SampleId> = order
        .iter()
        .copied()
        .filter(|&id| of[id as usize] == b'D')
        .collect();
    let commands = Commands { of, epoch: 0 };
    for threads in [1, 3] {
        let loader = loader(&commands, 4, threads, 2);
        let mut deferred = Vec::new();
        for batch in loader.epoch(0).unwrap() {
            let batch = batch.unwrap();
            for (slot, sample) in batch.deferred() {
                let id = u64::from_le_bytes(sample.data[..8].try_into().unwrap());
                assert_eq!(batch.ids()[*slot], id, "{threads} threads");
                deferred.push(id);
            }
        }
        assert_eq!(deferred, expected, "{threads} threads");
    }
}

#[test]
fn samples_left_to_a_device_are_queued_for_it_as_they_are_prepared() {
    let mut of = vec![b'.'; 24];
    for id in [1, 2, 7, 12, 13, 23] {
        of[id] = b'D';
    }
    of[5] = b'F';
    let commands = Commands { of, epoch: 1 };
    for threads in [1, 3] {
        let queue = Arc::new(DeviceQueue::new());
        let loader = loader_with(&commands, 4, threads, 2, |c| {
            c.device_queue = Some(queue.clone());
        });
        let mut in_batches = Vec::new();
        for batch in loader.epoch(1).unwrap() {
            let batch = batch.unwrap();
            for (slot, sample) in batch.deferred() {
                in_batches.push((batch.ids()[*slot], sample.data.clone()));
            }
        }
        // Every one was queued by the time its batch was delivered, once, with its
        // epoch, and the bytes its batch carries (shared, not copied).
        // The next epoch, prepared while this one ends, may have queued some of its own.
        let (mut queued, next): (Vec<_>, Vec<_>) = queue
            .take(usize::MAX, Duration::ZERO)
            .into_iter()
            .partition(|q| q.epoch == 1);
        assert!(next
            .iter()
            .all(|q| q.epoch == 2 && commands.of[q.id as usize] == b'D'));
        queued.sort_by_key(|q| q.id);
        in_batches.sort_by_key(|(id, _)| *id);
        assert_eq!(queued.len(), in_batches.len(), "{threads} threads");
        for (q, (id, data)) in queued.iter().zip(&in_batches) {
            assert_eq!(q.id, *id, "{threads} threads");
            assert!(Arc::ptr_eq(&q.sample.data, data));
        }
        assert_eq!(
            in_batches.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [1, 2, 7, 12, 13, 23]
        );
    }
}

#[test]
fn a_resumed_epoch_yields_exactly_the_rest_across_skips() {
    let commands = commands(1);
    let loader = loader(&commands, 4, 3, 4);
    let (whole, bytes, _) = run(&loader, 1);
    for stop in [1, 2, 5] {
        let mut epoch = loader.epoch(1).unwrap();
        let mut head = Vec::new();
        for _ in 0..stop {
            head.push(epoch.next().unwrap().unwrap().ids().to_vec());
        }
        let checkpoint = loader.checkpoint(&epoch);
        drop(epoch);
        let mut rest = loader.resume_saved(&checkpoint).unwrap();
        let mut tail = Vec::new();
        let mut tail_bytes = Vec::new();
        for batch in rest.by_ref() {
            let batch = batch.unwrap();
            tail.push(batch.ids().to_vec());
            tail_bytes.extend_from_slice(batch.data());
        }
        head.extend(tail);
        assert_eq!(head, whole, "stopped after {stop} batches");
        assert_eq!(tail_bytes, bytes[stop * 4 * 16..], "stopped after {stop}");
        assert_eq!(
            rest.stats().skipped.values().sum::<u64>(),
            7,
            "skips before the checkpoint carry over"
        );
    }
}

#[test]
fn every_sample_failing_ends_the_epoch_with_no_batch() {
    let commands = Commands {
        of: vec![b'F'; 9],
        epoch: 0,
    };
    for threads in 1..=3 {
        let (ids, _, skipped) = run(&loader(&commands, 4, threads, 2), 0);
        assert!(ids.is_empty());
        assert_eq!(skipped, BTreeMap::from([("corrupt", 9)]));
    }
}

#[test]
fn under_the_error_policy_the_first_failure_in_plan_order_stops_the_epoch() {
    let mut of = vec![b'.'; 20];
    of[13] = b'F';
    of[17] = b'P';
    let commands = Commands { of, epoch: 0 };
    let mut loader = loader(&commands, 4, 3, 2);
    loader.config.on_error = ErrorPolicy::Error;
    let stream = plain_stream(20, 4, 0);
    let first_bad = *stream.iter().find(|&&id| id == 13 || id == 17).unwrap();
    let mut delivered = 0;
    let mut epoch = loader.epoch(0).unwrap();
    let error = loop {
        match epoch.next().expect("the epoch stops with an error") {
            Ok(batch) => delivered += batch.len(),
            Err(error) => break error,
        }
    };
    let crate::error::Error::Sample(sample) = error else {
        panic!("not a sample error: {error}");
    };
    assert_eq!(sample.id, first_bad);
    let position = stream.iter().position(|&id| id == first_bad).unwrap();
    assert_eq!(
        delivered,
        position / 4 * 4,
        "every batch before the bad sample"
    );
    assert!(epoch.next().is_none(), "nothing after the error");
}

/// The epoch started ahead, if any.
fn started_ahead(loader: &Loader) -> Option<u64> {
    loader.upcoming().map(|(from, _, _)| from.epoch)
}

/// Waits until the epoch `loader` started ahead has read all its samples and prepared
/// `samples` (a state it then keeps: its window is full); the limit is only reached if it
/// never does.
fn wait_prepared_ahead(loader: &Loader, samples: u64) -> (crate::plan::Position, u64) {
    let limit = std::time::Instant::now() + HOLD_LIMIT;
    loop {
        let (from, prepared, read_all) = loader.upcoming().expect("an epoch started ahead");
        if (prepared >= samples && read_all) || std::time::Instant::now() > limit {
            return (from, prepared);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_next_epoch_starts_before_this_one_ends_and_is_the_same_epoch() {
    let commands = commands(1).without_holds();
    // A window of the whole epoch (40 samples): the epoch started ahead can prepare, and
    // so read, all of it.
    let (batch_size, prefetch) = (4, 10);
    let mut alone = loader(&commands, batch_size, 2, prefetch);
    alone.config.overlap_epochs = false;
    for threads in [1, 2, 3] {
        let overlapping = loader(&commands, batch_size, threads, prefetch);
        let mut epoch = overlapping.epoch(0).unwrap();
        for batch in epoch.by_ref() {
            batch.unwrap();
        }
        // The last sample was read before it could be prepared, so the next epoch had
        // started by the time the last batch was delivered.
        let window = (prefetch * batch_size) as u64;
        let (from, prepared) = wait_prepared_ahead(&overlapping, window);
        // Having read everything, it still waits for a consumer before starting epoch 2.
        assert_eq!(from, crate::plan::Position::start_of(1));
        assert_eq!(prepared, window);
        drop(epoch);
        let mut next = overlapping.epoch(1).unwrap();
        let got = drain(&mut next);
        assert_eq!(next.stats().prepared_ahead, window);
        assert_eq!(got, run(&alone, 1), "{threads} threads");
        // Adopted after reading everything, it started epoch 2 as it was taken.
        assert_eq!(
            overlapping.upcoming().map(|u| u.0),
            Some(crate::plan::Position::start_of(2))
        );
        assert!(alone.upcoming().is_none(), "no overlap when it is off");
    }
}

#[test]
fn asking_for_another_epoch_discards_the_one_started_ahead() {
    let commands = commands(3).without_holds();
    let mut alone = loader(&commands, 4, 2, 2);
    alone.config.overlap_epochs = false;
    let overlapping = loader(&commands, 4, 2, 2);
    run(&overlapping, 0);
    assert_eq!(
        overlapping.upcoming().map(|u| u.0),
        Some(crate::plan::Position::start_of(1))
    );
    let mut other = overlapping.epoch(3).unwrap();
    // Epoch 3, once it has read its last sample, may start epoch 4 ahead: whenever this
    // runs, nothing of epoch 1 is left.
    assert!(
        started_ahead(&overlapping) != Some(1),
        "epoch 1 was stopped"
    );
    let ids: Vec<Vec<SampleId>> = other.by_ref().map(|b| b.unwrap().ids().to_vec()).collect();
    assert_eq!(ids, run(&alone, 3).0);
    assert_eq!(other.stats().prepared_ahead, 0);
    // A position inside the epoch started ahead is not its start: it is stopped too.
    run(&overlapping, 0);
    let mut head = alone.epoch(1).unwrap();
    head.next().unwrap().unwrap();
    head.next().unwrap().unwrap();
    let middle = head.position();
    drop(head);
    let rest: Vec<Vec<SampleId>> = overlapping
        .resume(middle)
        .unwrap()
        .map(|b| b.unwrap().ids().to_vec())
        .collect();
    assert_eq!(rest, run(&alone, 1).0[2..]);
    // A loader dropped with an epoch started ahead stops it (the test would hang if not).
    run(&overlapping, 1);
    assert!(overlapping.upcoming().is_some());
    drop(overlapping);
}

#[test]
fn an_epoch_prepared_before_it_is_asked_for_is_adopted_whole_or_stopped() {
    let commands = commands(2).without_holds();
    let (batch_size, prefetch) = (4, 10);
    let mut alone = loader(&commands, batch_size, 2, prefetch);
    alone.config.overlap_epochs = false;
    alone.prepare(crate::plan::Position::start_of(0)).unwrap();
    assert!(
        alone.upcoming().is_none(),
        "nothing prepared with overlap off"
    );
    let window = (prefetch * batch_size) as u64;
    for threads in [1, 3] {
        let prepared = loader(&commands, batch_size, threads, prefetch);
        prepared
            .prepare(crate::plan::Position::start_of(0))
            .unwrap();
        let (from, ready) = wait_prepared_ahead(&prepared, window);
        assert_eq!((from, ready), (crate::plan::Position::start_of(0), window));
        let mut epoch = prepared.epoch(0).unwrap();
        let got = drain(&mut epoch);
        assert_eq!(epoch.stats().prepared_ahead, window);
        assert_eq!(got, run(&alone, 0));
    }
    // Asked for elsewhere: stopped, and the epoch asked for is exact.
    let prepared = loader(&commands, batch_size, 2, prefetch);
    prepared
        .prepare(crate::plan::Position::start_of(0))
        .unwrap();
    let mut other = prepared.epoch(2).unwrap();
    assert!(started_ahead(&prepared) != Some(0), "epoch 0 was stopped");
    let ids: Vec<Vec<SampleId>> = other.by_ref().map(|b| b.unwrap().ids().to_vec()).collect();
    assert_eq!(ids, run(&alone, 2).0);
    assert_eq!(other.stats().prepared_ahead, 0);
    // A position no epoch holds is refused, as resuming there would be.
    let beyond = crate::plan::Position {
        epoch: 0,
        batch: 1000,
        sample: 4000,
    };
    assert!(prepared.prepare(beyond).is_err());
}

/// Hits per epoch of `policy` caching `fraction` of 200 samples over `epochs`, summed over
/// `workers` loaders of one job, and as the simulator predicts them. Before its first
/// epoch, each loader waits until its cache holds `wait_for` samples.
fn hits_and_prediction(
    policy: crate::cache::CachePolicy,
    workers: usize,
    fraction: f64,
    epochs: u64,
) -> (Vec<u64>, Vec<u64>) {
    use crate::cache::{CacheConfig, CacheFill, Capacity};
    use crate::sim::cache::{capacity_for, AccessStreams, SimPolicy};
    let n = 200;
    // Every sample 9 bytes (its id and a command): capacities in samples and bytes agree.
    let commands = Commands {
        of: vec![b'.'; n],
        epoch: 0,
    };
    let streams = AccessStreams::new(n, epochs, workers, SEED).unwrap();
    let capacity = capacity_for(fraction, n);
    let predicted = streams.run(SimPolicy::Loader(policy), capacity);
    let mut hits = vec![0; epochs as usize];
    for rank in 0..workers {
        // One fetch thread: the cache sees the reads in plan order, as simulated.
        let loader = loader_with(&commands, 4, 2, 2, |c| {
            c.plan.rank = rank;
            c.plan.world = workers;
            c.fetch_threads = 1;
            c.cache = CacheConfig::new(policy, Capacity::Bytes(capacity as u64 * 9));
            c.cache.planned_epochs = epochs;
            // The simulator's setting: a placement read before the first epoch.
            if policy == crate::cache::CachePolicy::Frequency {
                c.cache.fill = CacheFill::Before;
            }
        });
        for (epoch, hits) in hits.iter_mut().enumerate() {
            let mut run = loader.epoch(epoch as u64).unwrap();
            for batch in run.by_ref() {
                batch.unwrap();
            }
            *hits += run.stats().cache.hits;
        }
    }
    (hits, predicted.epochs.iter().map(|e| e.hits).collect())
}

#[test]
fn the_frequency_cache_hits_as_the_simulator_predicts() {
    use crate::cache::CachePolicy;
    for (workers, fraction) in [(1, 0.25), (4, 0.1), (4, 0.25)] {
        // The placement read before the first epoch, every epoch hits as predicted, the
        // first too.
        let (hits, predicted) = hits_and_prediction(CachePolicy::Frequency, workers, fraction, 8);
        assert_eq!(
            hits, predicted,
            "{workers} workers, {fraction} of the dataset"
        );
    }
}

#[test]
fn a_minio_cache_filled_before_holds_the_first_samples_that_fit_from_the_first_epoch() {
    use crate::cache::{CacheConfig, CacheFill, CachePolicy, Capacity};
    let commands = Commands {
        of: vec![b'.'; 200],
        epoch: 0,
    };
    // Every sample 9 bytes: room for the first 50, and 5 bytes to spare.
    let loader = loader_with(&commands, 4, 2, 2, |c| {
        c.cache = CacheConfig::new(CachePolicy::Minio, Capacity::Bytes(50 * 9 + 5));
        c.cache.fill = CacheFill::Before;
    });
    let held = loader.cache_stats();
    assert_eq!((held.entries, held.used), (50, 50 * 9));
    for epoch in 0..2 {
        let mut run = loader.epoch(epoch).unwrap();
        let mut read_from_cache = 0;
        for batch in run.by_ref() {
            read_from_cache += batch.unwrap().ids().iter().filter(|&&id| id < 50).count();
        }
        let cache = run.stats().cache;
        assert_eq!((cache.hits, cache.misses), (50, 150), "epoch {epoch}");
        assert_eq!(read_from_cache, 50);
    }
}

#[test]
fn the_lookahead_cache_hits_as_the_simulator_predicts() {
    use crate::cache::CachePolicy;
    for (workers, fraction) in [(1, 0.25), (4, 0.1), (4, 0.25)] {
        let (hits, predicted) = hits_and_prediction(CachePolicy::Lookahead, workers, fraction, 6);
        assert_eq!(
            hits, predicted,
            "{workers} workers, {fraction} of the dataset"
        );
    }
}

#[test]
fn a_share_of_the_nodes_threads_that_changes_mid_epoch_keeps_every_sample_in_place() {
    use crate::env::LocalRanks;
    use crate::sched::balance::share::Balance;
    use crate::sched::balance::NodeTable;

    let dir = tempfile::tempdir().unwrap();
    let table = |local_rank| {
        let ranks = LocalRanks {
            job: 7,
            local_rank,
            local_world: 2,
        };
        let mut table = NodeTable::open(dir.path(), &ranks).unwrap();
        // The verdicts must not depend on how fast the test runs.
        table.keep_records_for(Duration::from_secs(3600));
        table
    };
    let commands = commands(0).without_holds();
    let reference = run(&loader(&commands, 4, 1, 2), 0);
    // A budget of 4 threads, 3 at most for this rank, starting with 1, revised at every
    // batch. The other rank has said nothing: once this one knows its demand, it is
    // alone, and takes its ceiling.
    let balance = Balance::new(table(0), 4, (1, 3), Duration::ZERO);
    let balanced = loader(&commands, 4, 1, 2).with_balance(balance);
    let mut epoch = balanced.epoch(0).unwrap();
    assert_eq!(epoch.stats().prep.threads, 1);
    let (mut ids, mut bytes) = (Vec::new(), Vec::new());
    for batch in epoch.by_ref() {
        let batch = batch.unwrap();
        ids.push(batch.ids().to_vec());
        bytes.extend_from_slice(batch.data());
    }
    assert_eq!(epoch.stats().prep.threads, 3, "alone: the ceiling");
    assert_eq!((ids, bytes), (reference.0.clone(), reference.1.clone()));
    // The other rank's batches now cost a thousand times more: this one keeps one thread.
    let other = table(1);
    other.publish(1e3);
    let again = run(&balanced, 0);
    assert_eq!((again.0, again.1), (reference.0, reference.1));
    let epoch = balanced.epoch(0).unwrap();
    assert_eq!(epoch.stats().prep.threads, 1, "the other rank's share");
}

#[test]
fn a_batch_larger_than_any_machine_holds_is_refused_not_overflowed() {
    use crate::prep::image::{ImagePipeline, Layout, Op};
    let catalog = Catalog::from_samples(
        "memory",
        Modality::Image,
        Vec::new(),
        [("0.jpg".to_string(), None, 1)],
    )
    .unwrap();
    let (catalog, source) = (Arc::new(catalog), Arc::new(Memory::new(vec![vec![0u8]])));
    // A sample past an image's pixels is the pipeline's to refuse.
    let huge = ImagePipeline::new(
        vec![Op::center_crop(u32::MAX, u32::MAX)],
        DType::U8,
        Layout::Chw,
    );
    assert!(huge
        .unwrap_err()
        .to_string()
        .contains("more pixels than an image may"));
    for (side, batch_size) in [(10_000, 1 << 10), (4096, 1 << 20)] {
        let crop = vec![Op::center_crop(side, side)];
        let pipeline = ImagePipeline::new(crop, DType::U8, Layout::Chw).unwrap();
        let mut config = LoaderConfig::new(pipeline.into());
        config.plan.batch_size = batch_size;
        match Loader::new(catalog.clone(), source.clone(), config) {
            Ok(_) => panic!("{side}x{side} in batches of {batch_size} was accepted"),
            Err(e) => assert!(e.to_string().contains("16 GiB a batch may"), "{e}"),
        }
    }
}

/// How a [`Concurrent`] source breaks its word, if it does.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Panics as it is about to end this sample's read (the reads after it in its group
    /// are ended already, those before it not).
    PanicsReading(SampleId),
    /// Never ends this sample's read.
    Forgets(SampleId),
    /// Ends every read a second time, with an error.
    EndsTwice,
}

/// Reads [`Concurrent::AT_ONCE`] samples at a time, as object storage does from one
/// thread, ending each group in reverse order; records the threads that read and the
/// largest group.
struct Concurrent {
    inner: Arc<dyn Source>,
    fault: Fault,
    threads: Mutex<HashSet<ThreadId>>,
    largest: AtomicUsize,
}

impl Concurrent {
    const AT_ONCE: usize = 8;

    fn new(inner: Arc<dyn Source>, fault: Fault) -> Arc<Concurrent> {
        Arc::new(Concurrent {
            inner,
            fault,
            threads: Mutex::default(),
            largest: AtomicUsize::new(0),
        })
    }
}

impl Source for Concurrent {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
        self.inner.read(id, out)
    }

    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        self.threads
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        let mut given = 0;
        loop {
            let read: Vec<_> = std::iter::from_fn(&mut *next)
                .take(Self::AT_ONCE)
                .map(|(id, mut out)| {
                    let result = self.inner.read(id, &mut out);
                    (id, out, result)
                })
                .collect();
            if read.is_empty() {
                return;
            }
            self.largest.fetch_max(read.len(), Ordering::Relaxed);
            let first = given;
            given += read.len();
            for (i, (id, out, result)) in read.into_iter().enumerate().rev() {
                let number = first + i;
                match self.fault {
                    Fault::PanicsReading(bad) if bad == id => panic!("the source broke down"),
                    Fault::Forgets(bad) if bad == id => {}
                    Fault::EndsTwice => {
                        done(number, out, result);
                        done(
                            number,
                            Vec::new(),
                            Err(Cause::Corrupt("a second ending".into())),
                        );
                    }
                    _ => done(number, out, result),
                }
            }
        }
    }

    fn reads_at_once(&self) -> usize {
        Self::AT_ONCE
    }

    fn location(&self, id: SampleId) -> String {
        self.inner.location(id)
    }

    fn stats(&self) -> SourceStats {
        self.inner.stats()
    }
}

/// An epoch of `commands` through a [`Concurrent`] source with `fault`, 32 reads in
/// flight: its run, the samples skipped with their causes, and the source.
fn concurrent_run(
    commands: &Commands,
    fault: Fault,
) -> (Run, Vec<crate::error::SampleError>, Arc<Concurrent>) {
    let mut source = None;
    // The next epoch is not started ahead: the threads counted are this epoch's.
    let pin_reads = |config: &mut LoaderConfig| {
        config.fetch_threads = 32;
        config.adaptive_reads = false;
        config.overlap_epochs = false;
    };
    let loader = loader_over(commands, (4, 2, 4), pin_reads, |memory| {
        let concurrent = Concurrent::new(memory, fault);
        source = Some(concurrent.clone());
        concurrent
    });
    let mut epoch = loader.epoch(0).unwrap();
    let run = drain(&mut epoch);
    (run, epoch.skipped(), source.unwrap())
}

/// 40 samples, each prepared.
fn all_good() -> Commands {
    Commands {
        of: vec![b'.'; 40],
        epoch: 0,
    }
}

#[test]
fn a_source_that_reads_many_at_once_takes_a_thread_per_that_many_and_changes_no_byte() {
    let commands = commands(0).without_holds();
    let reference = run(&loader(&commands, 4, 2, 4), 0);
    let (got, _, source) = concurrent_run(&commands, Fault::None);
    assert_eq!(got, reference);
    let threads = source.threads.lock().unwrap().len();
    assert!(
        threads <= 32 / Concurrent::AT_ONCE,
        "{threads} fetch threads"
    );
    let largest = source.largest.load(Ordering::Relaxed);
    assert!(
        (2..=Concurrent::AT_ONCE).contains(&largest),
        "{largest} reads at once"
    );
}

#[test]
fn a_read_ended_twice_counts_once() {
    let reference = run(&loader(&all_good(), 4, 2, 4), 0);
    let (got, skipped, _) = concurrent_run(&all_good(), Fault::EndsTwice);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(got, reference);
}

#[test]
fn a_read_the_source_never_ends_fails_alone_and_named() {
    let bad = plain_stream(40, 4, 0)[13];
    let ((ids, _, counts), skipped, _) = concurrent_run(&all_good(), Fault::Forgets(bad));
    assert_eq!(counts, BTreeMap::from([("internal", 1)]));
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].id, bad);
    assert!(skipped[0].to_string().contains("did not finish reading it"));
    let delivered: Vec<SampleId> = ids.concat();
    let expected: Vec<SampleId> = plain_stream(40, 4, 0)
        .into_iter()
        .filter(|&id| id != bad)
        .collect();
    assert_eq!(delivered, expected);
}

#[test]
fn a_source_that_panics_costs_the_reads_it_had_not_ended_and_no_other() {
    let bad = plain_stream(40, 4, 0)[13];
    let ((ids, _, counts), skipped, _) = concurrent_run(&all_good(), Fault::PanicsReading(bad));
    // Which reads shared the failing group depends on the threads' timing; what does not:
    // the sample it failed on is among the lost, every loss is named and counted, at most
    // a group's worth is lost, and every other sample arrives once, in plan order.
    let lost: HashSet<SampleId> = skipped.iter().map(|e| e.id).collect();
    assert!(lost.contains(&bad), "{skipped:?}");
    assert!((1..=Concurrent::AT_ONCE).contains(&lost.len()));
    assert_eq!(counts, BTreeMap::from([("internal", lost.len() as u64)]));
    assert!(skipped.iter().all(|e| e
        .to_string()
        .contains("reading it panicked: the source broke down")));
    let delivered: Vec<SampleId> = ids.concat();
    let expected: Vec<SampleId> = plain_stream(40, 4, 0)
        .into_iter()
        .filter(|id| !lost.contains(id))
        .collect();
    assert_eq!(delivered, expected);
}

/// Counts what it locks and unlocks, and checks what it is given.
#[derive(Debug, Default)]
struct CountingLock {
    locked: AtomicUsize,
    unlocked: AtomicUsize,
}

impl PageLock for CountingLock {
    fn lock(&self, ptr: std::ptr::NonNull<u8>, len: usize) -> bool {
        // Whole pages of its own: no other allocation may share a locked page.
        assert_eq!(
            ptr.as_ptr() as usize % 4096,
            0,
            "a locked buffer starts a page"
        );
        assert!(len >= 16 * 4, "a locked buffer holds its batch");
        self.locked.fetch_add(1, Ordering::SeqCst);
        true
    }

    fn unlock(&self, _: std::ptr::NonNull<u8>) {
        self.unlocked.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn page_locked_buffers_are_locked_once_each_and_unlocked_before_they_are_freed() {
    let lock = Arc::new(CountingLock::default());
    let page_lock: Arc<dyn PageLock> = lock.clone();
    let commands = all_good();
    let loader = loader_with(&commands, 4, 2, 2, |c| {
        c.page_lock = Some(page_lock);
        c.overlap_epochs = false;
    });
    let plain = run(&loader_with(&commands, 4, 2, 2, |_| {}), 0);
    assert_eq!(run(&loader, 0), plain, "locked buffers change no byte");
    run(&loader, 1);
    let allocated = loader.buffers_allocated();
    assert!(allocated > 0);
    assert_eq!(lock.locked.load(Ordering::SeqCst), allocated);
    assert_eq!(lock.unlocked.load(Ordering::SeqCst), 0);
    drop(loader);
    assert_eq!(lock.unlocked.load(Ordering::SeqCst), allocated);
}

#[test]
fn a_retired_batch_frees_its_buffer_and_the_others_are_recycled() {
    let lock = Arc::new(CountingLock::default());
    let page_lock: Arc<dyn PageLock> = lock.clone();
    let loader = loader_with(&all_good(), 4, 2, 2, |c| {
        c.page_lock = Some(page_lock);
        c.overlap_epochs = false;
    });
    let mut epoch = loader.epoch(0).unwrap();
    let retired = epoch.next().unwrap().unwrap();
    retired.retire();
    drop(retired);
    assert_eq!(
        lock.unlocked.load(Ordering::SeqCst),
        1,
        "freed as it dropped"
    );
    for batch in epoch.by_ref() {
        drop(batch.unwrap());
    }
    drop(epoch);
    run(&loader, 1);
    assert_eq!(
        lock.unlocked.load(Ordering::SeqCst),
        1,
        "the others went back to the pool"
    );
    drop(loader);
    assert_eq!(
        lock.unlocked.load(Ordering::SeqCst),
        lock.locked.load(Ordering::SeqCst)
    );
}

#[test]
fn a_saved_state_with_any_field_out_of_bounds_is_a_config_error_never_a_panic() {
    use crate::plan::elastic::Stretch;
    let loader = loader(&all_good(), 4, 2, 2);
    let mut epoch = loader.epoch(0).unwrap();
    epoch.next().unwrap().unwrap();
    let saved = loader.checkpoint(&epoch);
    drop(epoch);
    assert!(loader.resolve(std::slice::from_ref(&saved)).is_ok());
    let extremes = [u64::MAX, 1 << 63, 1 << 40, 41, 0];
    type Change = fn(&mut Checkpoint, u64);
    let fields: [(&str, Change); 12] = [
        ("epoch", |c, v| c.position.epoch = v),
        ("batch", |c, v| c.position.batch = v),
        ("sample", |c, v| c.position.sample = v),
        ("rank", |c, v| c.rank = v),
        ("world_size", |c, v| c.identity.world_size = v),
        ("batch_size", |c, v| c.identity.batch_size = v),
        ("open_groups", |c, v| c.identity.open_groups = v),
        ("groups", |c, v| {
            (c.identity.open_groups, c.identity.groups) = (3, v);
        }),
        ("skipped", |c, v| {
            c.skipped.insert("corrupt", v);
        }),
        ("history.world", |c, v| {
            c.history = vec![Stretch {
                world: v,
                batches: 1,
                consumed: None,
            }]
        }),
        ("history.batches", |c, v| {
            c.history = vec![Stretch {
                world: 1,
                batches: v,
                consumed: None,
            }]
        }),
        ("history.consumed", |c, v| {
            c.history = vec![Stretch {
                world: 2,
                batches: 1,
                consumed: Some(vec![v, 4]),
            }]
        }),
    ];
    for (name, change) in fields {
        for value in extremes {
            let mut state = saved.clone();
            change(&mut state, value);
            // Resolved, then resumed and read to its end where it is a state this loader
            // accepts: no step may panic.
            let resumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                loader.resume_from(&[state]).map(|epoch| {
                    epoch.for_each(drop);
                })
            }));
            match resumed {
                Err(_) => panic!("{name} = {value}: a panic"),
                Ok(Ok(())) => {}
                Ok(Err(Error::Config(message))) => {
                    assert!(
                        !message.contains("skipped samples"),
                        "{name} = {value}: {message}"
                    )
                }
                Ok(Err(other)) => panic!("{name} = {value}: not a config error: {other}"),
            }
        }
    }
    // A batch past the epoch's end is refused, not resumed as an empty rest.
    let mut state = saved.clone();
    state.position.batch = loader.batches_per_epoch() as u64 + 1;
    let message = loader.resolve(&[state]).unwrap_err().to_string();
    assert!(
        message.contains("an epoch here has 10 batches"),
        "{message}"
    );
    // Every field's extreme is refused, naming it.
    let mut state = saved.clone();
    state.identity.world_size = 1 << 40;
    let message = loader.resolve(&[state]).unwrap_err().to_string();
    assert!(
        message.contains("identity.world_size is 1099511627776"),
        "{message}"
    );
}

#[test]
fn any_batches_of_a_run_are_its_samples_alone_and_received_batches_are_the_same() {
    let all_good = Commands {
        of: vec![b'.'; 41],
        epoch: 2,
    };
    for drop_last in [false, true] {
        let loader = loader_with(&all_good, 4, 2, 2, |c| c.plan.drop_last = drop_last);
        let (whole, bytes, _) = run(&loader, 2);
        let mut epoch = loader.epoch(2).unwrap();
        epoch.next().unwrap().unwrap();
        let start = loader.checkpoint(&epoch);
        drop(epoch);
        let left = loader.batches_left(&start).unwrap();
        assert_eq!(left as usize, whole.len() - 1, "drop_last {drop_last}");
        // The rest of the run in parts of 3, 1 and the remainder (past its end).
        let mut got = Vec::new();
        let mut got_bytes = Vec::new();
        for part in [0..3, 3..4, 4..left + 5] {
            for batch in loader.batches(&start, part.clone()).unwrap() {
                let batch = batch.unwrap();
                // What another process makes of the header and bytes is the same batch.
                let received = loader
                    .receive(batch.header(), Duration::ZERO, "test", |out| {
                        out.copy_from_slice(batch.data());
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(received.header(), batch.header());
                got.push(received.ids().to_vec());
                got_bytes.extend_from_slice(received.data());
            }
        }
        assert_eq!(got, whole[1..], "drop_last {drop_last}");
        assert_eq!(got_bytes, bytes[4 * 16..], "drop_last {drop_last}");
    }
    // Under the skip policy batches take the next samples of the range only: its last
    // batch comes short, and no sample of the range after it is taken.
    let commands = commands(0).without_holds();
    let loader = loader(&commands, 4, 2, 1);
    let start = loader.resolve(&[Checkpoint {
        position: crate::plan::Position::start_of(0),
        identity: loader.identity(),
        skipped: BTreeMap::new(),
        rank: 0,
        history: Vec::new(),
    }]);
    let start = start.unwrap();
    let stream = plain_stream(40, 4, 0);
    let mut part = loader.batches(&start, 0..2).unwrap();
    let first: Vec<Vec<SampleId>> = part.by_ref().map(|b| b.unwrap().ids().to_vec()).collect();
    let good = |ids: &[SampleId]| -> Vec<SampleId> {
        ids.iter()
            .copied()
            .filter(|&id| commands.of[id as usize] == b'.')
            .collect()
    };
    let good = good(&stream[0..8]);
    assert_eq!(first, vec![good[..4].to_vec(), good[4..].to_vec()]);
    assert_eq!(part.stats().skipped.values().sum::<u64>(), 3);
    let refused = loader.receive(
        crate::loader::BatchHeader {
            labels: vec![0; 5],
            ids: vec![0; 5],
            ..loader
                .batches(&start, 0..1)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .header()
        },
        Duration::ZERO,
        "peer 1",
        |_| Ok(()),
    );
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains("peer 1") && message.contains("5 labels"),
        "{message}"
    );
}
