//! The loader end to end: determinism, exactly-once delivery, resume, bounded buffers.

mod common;

use std::collections::HashSet;

use common::{config, image_folder, loader};
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
    let mut two_ranks = config(3, 2);
    two_ranks.plan.world = 2;
    assert!(refused(&loader(dir.path(), two_ranks)).contains("world_size was 1, is 2"));
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

#[test]
fn buffers_are_recycled_not_reallocated_across_epochs() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 6);
    let l = loader(dir.path(), config(4, 2));
    for epoch in 0..20 {
        assert_eq!(l.epoch(epoch).unwrap().count(), 3);
    }
    // Window of `prefetch` (2) buffers plus the one the consumer holds.
    assert!(
        l.buffers_allocated() <= 3,
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
