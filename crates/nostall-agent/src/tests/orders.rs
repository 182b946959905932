//! Jobs whose settings read alike but whose loaders deal other orders over the dataset
//! (a Parquet dataset's row groups kept open as `group_memory` allows) are other groups:
//! each trains on the order its own `state_dict` describes.

use std::time::Duration;

use nostall::loader::LoaderSettings;
use nostall::Position;

use super::{read_epoch, settings, strip, Fixture};
use crate::AgentError;

/// A Parquet dataset as `datasets` writes it (the fuzz corpus's: six photographs, two a
/// row group), eight files of it: 24 row groups.
fn parquet(window: u64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus/parquet/datasets-row-groups.parquet");
    let data = dir.path().join("train");
    std::fs::create_dir(&data).unwrap();
    for n in 0..8 {
        std::fs::copy(&file, data.join(format!("train-{n:05}-of-00008.parquet"))).unwrap();
    }
    let location = data.to_string_lossy().into_owned();
    Fixture::serving(dir, location, window, Duration::from_secs(30), |_| {})
}

/// The same settings, one keeping a single row group open, one keeping them all.
fn two_plans() -> (LoaderSettings, LoaderSettings) {
    let all = settings(11);
    let mut one = all.clone();
    one.group_memory = Some(1);
    (one, all)
}

#[test]
fn jobs_whose_loaders_deal_other_orders_over_a_parquet_dataset_are_other_groups() {
    let f = parquet(3);
    let (one, all) = two_plans();
    let (expected_one, expected_all) = (f.expected_with(&one, 0), f.expected_with(&all, 0));
    assert_ne!(
        expected_one, expected_all,
        "the two plans deal other orders"
    );
    let mut a = f.attach_with(&one, "").unwrap();
    let mut b = f.attach_with(&all, "").unwrap();
    assert_ne!(a.attached().group, b.attached().group);
    // A job of either plan joins its plan's group.
    let again = f.attach_with(&one, "").unwrap();
    assert_eq!(again.attached().group, a.attached().group);
    drop(again);
    let (read_a, read_b) = std::thread::scope(|scope| {
        let hb = scope.spawn(|| read_epoch(&mut b, Position::start_of(0), None).0);
        (
            read_epoch(&mut a, Position::start_of(0), None).0,
            hb.join().unwrap(),
        )
    });
    assert!(
        strip(&read_a) == expected_one,
        "the job keeping one group open reads its own loader's order"
    );
    assert!(
        strip(&read_b) == expected_all,
        "the job keeping every group open reads its own loader's order"
    );
}

#[test]
fn a_named_group_refuses_a_job_whose_loader_deals_another_order_saying_both() {
    let f = parquet(3);
    let (one, all) = two_plans();
    let _first = f.attach_with(&one, "search").unwrap();
    let refused = f.attach_with(&all, "search").unwrap_err();
    let AgentError::Refused(why) = refused else {
        panic!("expected a refusal, got {refused:?}");
    };
    assert!(why.contains("another order"), "{why}");
    assert!(
        why.contains("dealt from 1 of 24 groups of samples open at once"),
        "{why}"
    );
    assert!(why.contains("group_memory"), "{why}");
    // The group's own plan still joins it.
    let second = f.attach_with(&one, "search").unwrap();
    assert_eq!(second.attached().group, "search");
}
