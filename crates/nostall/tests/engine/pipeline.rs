//! The loader end to end: determinism, exactly-once delivery, resume, bounded buffers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::common::{self, config, image_folder, loader};
use nostall::plan::EpochPlan;
use nostall::{Batch, Position, Shard};

/// (ids, labels, bytes) of every batch of an epoch.
fn run(loader: &nostall::Loader, epoch: u64) -> Vec<(Vec<u64>, Vec<i64>, Vec<u8>)> {
    loader
        .epoch(epoch)
        .unwrap()
        .map(|b| snapshot(&b.unwrap()))
        .collect()
}

fn snapshot(b: &Batch) -> (Vec<u64>, Vec<i64>, Vec<u8>) {
    (b.ids().to_vec(), b.labels().to_vec(), b.data().to_vec())
}

#[test]
fn output_bytes_do_not_depend_on_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 3, 14);
    let one = run(&loader(dir.path(), config(8, 1)), 0);
    let two = run(&loader(dir.path(), config(8, 2)), 0);
    let four = run(&loader(dir.path(), config(8, 4)), 0);
    assert_eq!(one.len(), 6); // 42 samples in batches of 8, the last one partial
    assert_eq!(one, two);
    assert_eq!(one, four);
    // Another epoch or seed gives another order and other augmentations.
    assert_ne!(one, run(&loader(dir.path(), config(8, 2)), 1));
    let mut other_seed = config(8, 2);
    other_seed.plan.seed = 6;
    let other = run(&loader(dir.path(), other_seed), 0);
    assert_ne!(
        one.iter().map(|b| &b.2).collect::<Vec<_>>(),
        other.iter().map(|b| &b.2).collect::<Vec<_>>()
    );
}

#[test]
fn batches_have_the_pipeline_shape_and_catalog_labels() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 5);
    let l = loader(dir.path(), config(4, 2));
    for batch in l.epoch(0).unwrap() {
        let batch = batch.unwrap();
        assert_eq!(&batch.shape()[1..], &[3, 32, 32]);
        let values = batch.as_f32().unwrap();
        assert_eq!(values.len(), batch.len() * 3 * 32 * 32);
        // Normalised ImageNet values stay within about (0 - 0.485)/0.229 .. (1 - 0.406)/0.225.
        assert!(values.iter().all(|v| (-2.2..=2.7).contains(v)));
        for (&id, &label) in batch.ids().iter().zip(batch.labels()) {
            assert_eq!(label, l.catalog().label(id).unwrap() as i64);
        }
    }
}

#[test]
fn each_rank_gets_its_plan_exactly_once_under_both_shard_policies() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 13); // 26 samples over 4 ranks: uneven on purpose
    for shard in [Shard::Pad, Shard::Drop] {
        let mut union = Vec::new();
        let mut batch_counts = HashSet::new();
        for rank in 0..4 {
            let mut c = config(3, 2);
            (c.plan.rank, c.plan.world, c.plan.shard) = (rank, 4, shard);
            let l = loader(dir.path(), c.clone());
            let ids: Vec<u64> = run(&l, 2).into_iter().flat_map(|b| b.0).collect();
            let plan = EpochPlan::new(&c.plan, 26, 2).unwrap();
            assert_eq!(
                ids,
                plan.samples(),
                "rank {rank} got other samples than planned"
            );
            batch_counts.insert(l.batches_per_epoch());
            union.extend(ids.iter().copied());
            if shard == Shard::Drop {
                union.extend(if rank == 0 {
                    plan.dropped().to_vec()
                } else {
                    vec![]
                });
            }
        }
        assert_eq!(
            batch_counts.len(),
            1,
            "ranks disagree on the number of batches"
        );
        let distinct: HashSet<u64> = union.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            26,
            "{shard:?}: the ranks together do not cover the dataset"
        );
        if shard == Shard::Drop {
            assert_eq!(union.len(), 26, "a sample went to two ranks");
        }
    }
}

#[test]
fn resuming_yields_exactly_the_remaining_batches() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 10);
    let l = loader(dir.path(), config(3, 2));
    let full = run(&l, 4);
    let mut epoch = l.epoch(4).unwrap();
    let first: Vec<_> = epoch
        .by_ref()
        .take(3)
        .map(|b| snapshot(&b.unwrap()))
        .collect();
    let saved = epoch.position();
    drop(epoch);
    assert_eq!(
        saved,
        Position {
            epoch: 4,
            batch: 3,
            sample: 9
        }
    );
    let rest: Vec<_> = l
        .resume(saved)
        .unwrap()
        .map(|b| snapshot(&b.unwrap()))
        .collect();
    assert_eq!([first, rest].concat(), full);
    assert!(l
        .resume(Position {
            epoch: 4,
            batch: 0,
            sample: 21
        })
        .is_err());
}

#[test]
fn a_position_resumes_only_what_it_was_saved_with() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 10);
    let l = loader(dir.path(), config(3, 2));
    let saved = nostall::Checkpoint {
        position: Position {
            epoch: 1,
            batch: 3,
            sample: 9,
        },
        identity: l.identity(),
        skipped: Default::default(),
        rank: 0,
        history: Vec::new(),
    };
    assert_eq!(
        l.resume_saved(&saved).unwrap().count(),
        l.batches_per_epoch() - 3
    );
    // The same settings in another loader agree; any change is named.
    assert_eq!(loader(dir.path(), config(3, 4)).identity(), saved.identity);
    let refused = |l: &nostall::Loader| match l.resume_saved(&saved) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("resumed a position of another run"),
    };
    assert!(refused(&loader(dir.path(), config(4, 2))).contains("batch_size was 3, is 4"));
    let mut other_seed = config(3, 2);
    other_seed.plan.seed += 1;
    assert!(refused(&loader(dir.path(), other_seed)).contains("seed was 5, is 6"));
    let mut val = config(3, 2);
    val.pipeline = nostall::Pipeline::imagenet_val(32);
    assert!(refused(&loader(dir.path(), val)).contains("the pipeline changed"));
    std::fs::write(
        dir.path().join("class0").join("new.jpg"),
        common::jpeg(64, 48, 77),
    )
    .unwrap();
    assert!(refused(&loader(dir.path(), config(3, 2))).contains("the dataset changed"));
}

/// Ranks `0..world` of a job: (rank, loader).
fn ranks(root: &std::path::Path, world: usize) -> Vec<nostall::Loader> {
    (0..world)
        .map(|rank| {
            let mut c = config(3, 2);
            c.plan.rank = rank;
            c.plan.world = world;
            loader(root, c)
        })
        .collect()
}

/// What a job's ranks did in one stretch: their checkpoints, the batches each delivered,
/// and every delivered sample with its bytes.
struct Ran {
    saved: Vec<nostall::Checkpoint>,
    counts: Vec<usize>,
    samples: Vec<(u64, Vec<u8>)>,
}

/// Runs each rank's epoch (resumed from `states`, or from the start of epoch 1) for
/// `batches` batches (all when `None`).
fn stretch(job: &[nostall::Loader], states: &[nostall::Checkpoint], batches: Option<usize>) -> Ran {
    let (mut saved, mut counts, mut samples) = (Vec::new(), Vec::new(), Vec::new());
    for l in job {
        let mut epoch = if states.is_empty() {
            l.epoch(1).unwrap()
        } else {
            l.resume_from(states).unwrap()
        };
        let mut n = 0;
        while batches != Some(n) {
            let Some(batch) = epoch.next() else { break };
            let batch = batch.unwrap();
            let bytes = batch.data().chunks(batch.data().len() / batch.len());
            samples.extend(batch.ids().iter().copied().zip(bytes.map(<[u8]>::to_vec)));
            n += 1;
        }
        counts.push(n);
        saved.push(l.checkpoint(&epoch));
    }
    Ran {
        saved,
        counts,
        samples,
    }
}

#[test]
fn an_epoch_resumes_on_another_number_of_ranks_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 24); // 48 samples
    let whole: std::collections::BTreeMap<u64, Vec<u8>> = stretch(&ranks(dir.path(), 1), &[], None)
        .samples
        .into_iter()
        .collect();
    // Two ranks deliver 2 batches of 3, three ranks 1 batch from rank 0's state alone,
    // then one rank the rest from rank 2's.
    let two = stretch(&ranks(dir.path(), 2), &[], Some(2));
    let three = stretch(&ranks(dir.path(), 3), &two.saved[..1], Some(1));
    assert_eq!(three.counts, [1, 1, 1]);
    assert!(three
        .saved
        .iter()
        .all(|c| c.history.len() == 1 && c.position.batch == 3));
    let one = stretch(&ranks(dir.path(), 1), &three.saved[2..], None);
    assert_eq!(one.counts, [(48 - 12 - 9) / 3]);
    let delivered: Vec<&(u64, Vec<u8>)> = [&two, &three, &one]
        .iter()
        .flat_map(|ran| &ran.samples)
        .collect();
    let mut ids: Vec<u64> = delivered.iter().map(|d| d.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..48).collect::<Vec<_>>(), "every sample once");
    // Each sample prepared as in the uninterrupted run: same crop, same flip.
    for (id, bytes) in delivered {
        assert!(&whole[id] == bytes, "sample {id} prepared differently");
    }
    // States of different points of training do not mix.
    let mixed = [two.saved[0].clone(), three.saved[1].clone()];
    let error = ranks(dir.path(), 1)[0].resume_from(&mixed).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("different runs or points of training"),
        "{error}"
    );
    // Three ranks resuming the rest of two ranks' epoch get equal batch counts.
    let rest = stretch(&ranks(dir.path(), 3), &two.saved, None);
    assert_eq!(rest.counts, [4, 4, 4]); // 36 samples left: 12 each
}

#[test]
fn after_skips_another_world_size_needs_every_ranks_state() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 1, 23); // and a broken file: 24, no padding for 2 ranks
    let broken = dir.path().join("class0").join("broken.jpg");
    std::fs::write(&broken, b"not a jpeg").unwrap();
    let job = |world| -> Vec<nostall::Loader> {
        (0..world)
            .map(|rank| {
                let mut c = config(3, 2);
                c.plan.rank = rank;
                c.plan.world = world;
                c.on_error = nostall::ErrorPolicy::Skip;
                loader(dir.path(), c)
            })
            .collect()
    };
    // Run two ranks to the end of epoch 1 but the last batch, then stop.
    let two = job(2);
    let per_rank = two[0].batches_per_epoch();
    let two = stretch(&two, &[], Some(per_rank - 1));
    let skipper = two
        .saved
        .iter()
        .find(|c| !c.skipped.is_empty())
        .expect("a skip");
    let one = job(1);
    let error = one[0].resume_saved(skipper).unwrap_err().to_string();
    assert!(error.contains("give every rank's state"), "{error}");
    // Every rank's state: the rest exactly, and the skip carried in rank 0's counts.
    let rest = stretch(&one, &two.saved, None);
    assert_eq!(rest.saved[0].skipped, skipper.skipped);
    let delivered: Vec<_> = two.samples.iter().chain(&rest.samples).collect();
    let mut ids: Vec<u64> = delivered.iter().map(|d| d.0).collect();
    ids.sort_unstable();
    let broken_id = (0..one[0].catalog().len() as u64)
        .find(|&id| one[0].catalog().relative_path(id).ends_with("broken.jpg"))
        .unwrap();
    let expected: Vec<u64> = (0..24).filter(|&id| id != broken_id).collect();
    assert_eq!(ids, expected, "every good sample once");
}

#[test]
fn buffers_are_recycled_not_reallocated_across_epochs() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 6);
    let l = loader(dir.path(), config(4, 2));
    for epoch in 0..20 {
        assert_eq!(l.epoch(epoch).unwrap().count(), 3);
    }
    // Windows of `prefetch` (2) buffers, this epoch's and the next one's started ahead,
    // plus the one the consumer holds.
    assert!(
        l.buffers_allocated() <= 5,
        "{} buffers allocated",
        l.buffers_allocated()
    );
}

#[test]
fn dropping_an_epoch_midway_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 10);
    let l = loader(dir.path(), config(2, 3));
    for _ in 0..5 {
        let mut epoch = l.epoch(0).unwrap();
        let kept = epoch.next().unwrap().unwrap();
        drop(epoch);
        assert_eq!(kept.len(), 2); // a batch outlives its epoch
    }
}

/// A source that times its own reads, and holds the read of one sample until the read of
/// the sample after it in the plan has finished (so that the loader's clock, which
/// encloses the source's, must report it as at least that slow).
struct Held {
    inner: Arc<dyn nostall::storage::Source>,
    held: u64,
    after: u64,
    after_done: Mutex<bool>,
    done: Condvar,
    took: Mutex<HashMap<u64, Duration>>,
}

impl nostall::storage::Source for Held {
    fn read(&self, id: u64, out: &mut Vec<u8>) -> Result<(), nostall::Cause> {
        let started = Instant::now();
        if id == self.held {
            let mut done = self.after_done.lock().unwrap();
            while !*done {
                done = self.done.wait(done).unwrap();
            }
        }
        let result = self.inner.read(id, out);
        if id == self.after {
            *self.after_done.lock().unwrap() = true;
            self.done.notify_all();
        }
        self.took.lock().unwrap().insert(id, started.elapsed());
        result
    }

    fn location(&self, id: u64) -> String {
        self.inner.location(id)
    }

    fn shard(&self, id: u64) -> Option<u32> {
        self.inner.shard(id)
    }

    fn shard_location(&self, shard: u32) -> String {
        self.inner.shard_location(shard)
    }

    fn stats(&self) -> nostall::storage::SourceStats {
        self.inner.stats()
    }
}

#[test]
fn the_epoch_names_its_slowest_samples_and_shards() {
    let photos = tempfile::tempdir().unwrap();
    image_folder(photos.path(), 2, 4); // 8 samples: the list of the slowest holds all
    let (catalog, _) = nostall::Catalog::scan(photos.path(), nostall::Modality::Image).unwrap();
    let shards = tempfile::tempdir().unwrap();
    common::write_shards(&catalog, shards.path(), 3);
    let dataset = nostall::dataset::open(
        shards.path().to_str().unwrap(),
        nostall::storage::ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap();
    let mut c = config(4, 2);
    // The source records each sample's read: epoch 1's, started ahead, would replace them.
    c.overlap_epochs = false;
    let order = EpochPlan::new(&c.plan, 8, 0).unwrap().samples().to_vec();
    let source = Arc::new(Held {
        inner: dataset.source.clone(),
        held: order[2],
        after: order[3],
        after_done: Mutex::new(false),
        done: Condvar::new(),
        took: Mutex::new(HashMap::new()),
    });
    let l = nostall::Loader::new(dataset.catalog.clone(), source.clone(), c).unwrap();
    let mut epoch = l.epoch(0).unwrap();
    assert_eq!(epoch.by_ref().map(|b| b.unwrap().len()).sum::<usize>(), 8);
    let stats = epoch.stats();
    let took = source.took.lock().unwrap();
    // Every sample, costliest first, each with at least the read time the source saw.
    assert_eq!(stats.slowest.len(), 8);
    assert!(stats
        .slowest
        .windows(2)
        .all(|w| w[0].fetch + w[0].prep >= w[1].fetch + w[1].prep));
    for cost in &stats.slowest {
        assert_eq!(cost.location, source.inner.location(cost.id));
        assert!(
            cost.fetch >= took[&cost.id],
            "{cost:?}: read took {:?}",
            took[&cost.id]
        );
        assert!(cost.prep > Duration::ZERO);
    }
    // Three shards (3, 3 and 2 samples), each the sum of its samples.
    assert_eq!(stats.slowest_shards.len(), 3);
    for shard in &stats.slowest_shards {
        let members: Vec<_> = stats
            .slowest
            .iter()
            .filter(|c| c.location.starts_with(&format!("{}:", shard.shard)))
            .collect();
        assert_eq!(members.len() as u64, shard.samples, "{shard:?}");
        assert_eq!(
            shard.fetch,
            members.iter().map(|c| c.fetch).sum::<Duration>()
        );
        assert_eq!(shard.prep, members.iter().map(|c| c.prep).sum::<Duration>());
    }
    let summary = stats.to_string();
    assert!(summary.contains(&format!("slow sample: {}", stats.slowest[0].location)));
}

#[test]
fn a_memory_budget_bounds_buffers_read_ahead_and_cache_together() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 12);
    let batch = 4 * 3 * 32 * 32 * 4; // 4 samples of 3×32×32 float32
    let mut c = config(4, 2);
    c.prefetch = 4;
    c.cache = nostall::cache::CacheConfig::new(
        nostall::cache::CachePolicy::Minio,
        nostall::cache::Capacity::Fraction(1.0),
    );
    // Room for two batches of prefetch per window and a little cache: prefetch and the
    // cache must shrink.
    let budget = 5 * batch + 2 * (64 << 10) + 20_000;
    c.readahead = 64 << 10;
    c.memory = Some(budget);
    let l = loader(dir.path(), c);
    let plan = l.memory_plan().expect("a budget");
    assert_eq!(plan.prefetch, 2);
    assert_eq!(l.config().prefetch, 2);
    assert!(plan.batch_buffers + plan.readahead + plan.cache <= budget);
    for epoch in 0..6 {
        let mut run = l.epoch(epoch).unwrap();
        assert_eq!(run.by_ref().map(|b| b.unwrap().len()).sum::<usize>(), 24);
        let stats = run.stats();
        assert!(
            stats.readahead.peak <= l.config().readahead,
            "{:?}",
            stats.readahead
        );
        assert!(stats.cache.used <= plan.cache);
    }
    assert!(l.buffers_allocated() as u64 * batch <= plan.batch_buffers);
    // A budget that cannot hold one batch of prefetch per window is refused, saying so.
    let mut c = config(4, 2);
    c.memory = Some(batch);
    let (catalog, _) = nostall::Catalog::scan(dir.path(), nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let source = Arc::new(nostall::storage::LocalFiles::new(
        catalog.clone(),
        nostall::storage::ReadMode::Cached,
    ));
    let error = nostall::Loader::new(catalog, source, c)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("memory=") && error.contains("at least"),
        "{error}"
    );
}
