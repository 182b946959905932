//! The loader's cache, its read-ahead along the plan, and sources other than plain files:
//! what reaches storage, what memory is held, and that none of it changes the output.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{config, epoch_output, image_folder, write_shards};
use nostall::cache::{CacheConfig, CachePolicy, Capacity};
use nostall::storage::{Link, LocalDir, LocalFiles, ReadMode, Source, TarShards, Throttled};
use nostall::{Catalog, Loader, LoaderConfig};

fn files(root: &Path) -> (Arc<Catalog>, Arc<LocalFiles>) {
    let (catalog, _) = Catalog::scan(root, nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let source = Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
    (catalog, source)
}

fn with_cache(mut config: LoaderConfig, policy: CachePolicy, fraction: f64) -> LoaderConfig {
    config.cache = CacheConfig::new(policy, Capacity::Fraction(fraction));
    config
}

#[test]
fn minio_reads_only_the_uncached_bytes_after_the_first_epoch() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 4, 30);
    let (catalog, source) = files(dir.path());
    let total = catalog.total_bytes();
    let loader = Loader::new(
        catalog.clone(),
        source,
        with_cache(config(8, 2), CachePolicy::Minio, 0.35),
    )
    .unwrap();
    let mut epochs = loader.epoch(0).unwrap();
    for batch in epochs.by_ref() {
        batch.unwrap();
    }
    let first = epochs.stats();
    assert_eq!(
        first.storage.bytes, total,
        "the first epoch reads everything once"
    );
    let cached = first.cache.used;
    assert!(cached <= first.cache.capacity);
    assert!(
        cached as f64 > 0.30 * total as f64,
        "MinIO fills up: {cached} of {total}"
    );
    drop(epochs);
    for epoch in 1..3 {
        let mut run = loader.epoch(epoch).unwrap();
        for batch in run.by_ref() {
            batch.unwrap();
        }
        let stats = run.stats();
        assert_eq!(stats.storage.bytes, total - cached, "epoch {epoch}");
        assert_eq!(stats.cache.hit_bytes, cached, "epoch {epoch}");
        assert_eq!(stats.cache.used, cached, "MinIO never evicts");
        assert_eq!(stats.cache.hits + stats.cache.misses, catalog.len() as u64);
    }
}

#[test]
fn the_cache_never_changes_the_output() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 3, 20);
    let (catalog, source) = files(dir.path());
    let plain = Loader::new(catalog.clone(), source.clone(), config(8, 2)).unwrap();
    let expected: Vec<_> = (0..3).map(|e| epoch_output(&plain, e)).collect();
    for (policy, fraction) in [(CachePolicy::Minio, 0.5), (CachePolicy::Lru, 0.3)] {
        let cached = Loader::new(
            catalog.clone(),
            source.clone(),
            with_cache(config(8, 2), policy, fraction),
        )
        .unwrap();
        for (epoch, expected) in expected.iter().enumerate() {
            assert!(
                epoch_output(&cached, epoch as u64) == *expected,
                "{policy:?}, epoch {epoch}"
            );
        }
    }
}

#[test]
fn read_ahead_stays_within_its_byte_bound_and_deepens_for_slow_storage() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 2, 40);
    let (catalog, source) = files(dir.path());
    let largest = (0..catalog.len() as u64)
        .map(|id| catalog.size(id))
        .max()
        .unwrap();
    let slow: Arc<dyn Source> = Arc::new(Throttled::new(
        source,
        Link {
            latency: Duration::from_millis(15),
            ..Link::default()
        },
    ));
    for limit in [largest, 3 * largest, 1 << 20] {
        // Batches of 2 and one prep thread: a floor of two samples.
        let mut config = config(2, 1);
        config.fetch_threads = 8;
        config.readahead = limit;
        let loader = Loader::new(catalog.clone(), slow.clone(), config).unwrap();
        let mut epoch = loader.epoch(0).unwrap();
        for batch in epoch.by_ref() {
            batch.unwrap();
        }
        let ahead = epoch.stats().readahead;
        assert!(
            ahead.peak <= limit,
            "peak {} over the bound {limit}",
            ahead.peak
        );
        assert!(ahead.window <= limit);
        if limit == 1 << 20 {
            // 15 ms per read at hundreds of samples per second: far more than the floor of
            // two samples must be under way.
            let floor = 2 * catalog.total_bytes() / catalog.len() as u64;
            assert!(
                ahead.peak > floor,
                "the window did not deepen: peak {} ≤ floor {floor}",
                ahead.peak
            );
        }
    }
}

#[test]
fn tar_shards_yield_the_same_batches_as_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path(), 3, 14);
    let (catalog, source) = files(dir.path());
    let shards_dir = tempfile::tempdir().unwrap();
    write_shards(&catalog, shards_dir.path(), 10);

    let shards = TarShards::open(
        Arc::new(LocalDir::new(shards_dir.path()).unwrap()),
        nostall::Modality::Image,
    )
    .unwrap();
    assert_eq!(shards.shards().len(), 5);
    let tar_catalog = shards.catalog().clone();
    assert_eq!(tar_catalog.len(), catalog.len());
    let from_folder = Loader::new(catalog, source, config(8, 2)).unwrap();
    let from_tar = Loader::new(tar_catalog, Arc::new(shards), config(8, 2)).unwrap();
    // Ids are assigned in the same order (shards were written in catalog order), so
    // the same seed picks the same samples with the same augmentation.
    assert!(epoch_output(&from_folder, 1) == epoch_output(&from_tar, 1));
}
