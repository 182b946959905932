//! A memory budget for a loader (`memory="2GiB"`), split among what it holds by design:
//! batch buffers, read-ahead, decoded Parquet pages and the cache, as tf.data's autotune
//! splits its RAM budget.
//!
//! The pipeline is paid first: batch buffers (`prefetch` batches, twice while epochs
//! overlap, plus one the consumer holds) and the read-ahead window (twice while epochs
//! overlap), each at its configured size if that fits, the read-ahead's bound at most an
//! eighth of the budget (its window adapts well below the bound on local storage); if
//! not, the read-ahead shrinks towards two batches of encoded samples, then `prefetch`
//! towards one. A dataset read in groups (Parquet pages) then gets its memory for decoded
//! groups (`group_memory`, by default a quarter of the budget up to
//! [`DEFAULT_GROUP_MEMORY`]). The cache gets what is left, up to the size asked for. What
//! is not held by design is outside the budget: batches the consumer keeps beyond one, the
//! decoders' working memory (a few megabytes a thread), the catalog.

use crate::error::{Error, Result};
use crate::storage::DEFAULT_GROUP_MEMORY;

use super::LoaderConfig;

/// How a budget was split, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryPlan {
    /// The budget.
    pub budget: u64,
    /// Batch buffers at most: the prefetch windows and one batch the consumer holds.
    pub batch_buffers: u64,
    /// Read-ahead windows at most.
    pub readahead: u64,
    /// Decoded groups of samples (Parquet pages); 0 for a dataset without groups.
    pub groups: u64,
    /// The cache's capacity.
    pub cache: u64,
    /// Batches of prefetch the buffers allow.
    pub prefetch: usize,
}

/// `config` fitted into `config.memory` (unchanged without a budget), for a dataset of
/// `dataset_bytes` in `samples` samples, read in groups where `grouped`, and the split.
///
/// # Errors
///
/// [`Error::Config`] when even one batch of prefetch and the smallest read-ahead do not
/// fit, naming what they need.
pub(super) fn fit(
    config: &LoaderConfig,
    dataset_bytes: u64,
    samples: usize,
    grouped: bool,
) -> Result<(LoaderConfig, Option<MemoryPlan>)> {
    let Some(budget) = config.memory else {
        return Ok((config.clone(), None));
    };
    let batch = (config.plan.batch_size * config.pipeline.sample_bytes()) as u64;
    let windows = if config.overlap_epochs { 2 } else { 1 };
    let average = dataset_bytes / samples.max(1) as u64;
    let smallest_readahead =
        (2 * config.plan.batch_size as u64 * average).clamp(1, config.readahead);
    let pipeline =
        |prefetch: u64, readahead: u64| (windows * prefetch + 1) * batch + windows * readahead;
    let least = pipeline(1, smallest_readahead);
    if least > budget {
        return Err(Error::Config(format!(
            "memory={budget} bytes cannot hold the pipeline: it needs at least {least} bytes \
             ({} batch buffers of {batch} bytes and {windows} read-ahead window(s) of \
             {smallest_readahead} bytes); raise the budget or lower batch_size",
            windows + 1
        )));
    }
    let mut prefetch = config.prefetch as u64;
    let mut readahead = config.readahead.min((budget / 8).max(smallest_readahead));
    // Shrink read-ahead first (down to two batches of samples), then prefetch.
    if pipeline(prefetch, readahead) > budget {
        let room = budget.saturating_sub((windows * prefetch + 1) * batch) / windows;
        readahead = room.clamp(smallest_readahead, readahead);
    }
    while pipeline(prefetch, readahead) > budget && prefetch > 1 {
        prefetch -= 1;
    }
    let spent = pipeline(prefetch, readahead);
    let groups = if grouped {
        let wanted = config
            .group_memory
            .unwrap_or(DEFAULT_GROUP_MEMORY.min(budget / 4));
        wanted.min(budget - spent)
    } else {
        0
    };
    let wanted = config.cache.capacity.bytes(dataset_bytes);
    let cache = wanted.min(budget - spent - groups);
    let mut fitted = config.clone();
    fitted.prefetch = prefetch as usize;
    fitted.readahead = readahead;
    fitted.cache.capacity = crate::cache::Capacity::Bytes(cache);
    if grouped {
        fitted.group_memory = Some(groups);
    }
    let plan = MemoryPlan {
        budget,
        batch_buffers: (windows * prefetch + 1) * batch,
        readahead: windows * readahead,
        groups,
        cache,
        prefetch: prefetch as usize,
    };
    Ok((fitted, Some(plan)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheConfig, CachePolicy, Capacity};
    use crate::prep::Pipeline;

    /// Batches of 4 images of 8×8×3 float32: 3 072 bytes a batch.
    fn config(memory: u64) -> LoaderConfig {
        let mut config = LoaderConfig::new(Pipeline::imagenet_val(8));
        config.plan.batch_size = 4;
        config.memory = Some(memory);
        config.cache = CacheConfig::new(CachePolicy::Minio, Capacity::Fraction(1.0));
        config
    }

    const BATCH: u64 = 4 * 8 * 8 * 3 * 4;
    /// 100 samples of 1 000 bytes.
    const DATASET: u64 = 100_000;

    #[test]
    fn the_pipeline_is_paid_first_and_the_cache_gets_the_rest() {
        let mut c = config(0);
        c.readahead = 10_000;
        // Room for everything: the cache gets what it asked for.
        c.memory = Some(1 << 30);
        let (fitted, _) = fit(&c, DATASET, 100, false).unwrap();
        assert_eq!(fitted.readahead, 10_000);
        c.readahead = 1 << 30;
        let (fitted, _) = fit(&c, DATASET, 100, false).unwrap();
        assert_eq!(fitted.readahead, 1 << 27, "an eighth of the budget");
        c.readahead = 10_000;
        let (fitted, plan) = fit(&c, DATASET, 100, false).unwrap();
        let plan = plan.unwrap();
        assert_eq!((fitted.prefetch, fitted.readahead), (4, 10_000));
        assert_eq!(plan.batch_buffers, 9 * BATCH);
        assert_eq!(plan.readahead, 20_000);
        assert_eq!(plan.cache, DATASET);
        // A tighter budget: the cache takes the cut.
        c.memory = Some(9 * BATCH + 20_000 + 60_000);
        let (fitted, plan) = fit(&c, DATASET, 100, false).unwrap();
        assert_eq!(fitted.readahead, 10_000);
        assert_eq!(plan.unwrap().cache, 60_000);
        assert_eq!(fitted.cache.capacity, Capacity::Bytes(60_000));
    }

    #[test]
    fn read_ahead_then_prefetch_shrink_to_fit_and_never_exceed_the_budget() {
        for memory in [
            3 * BATCH + 16_000,
            5 * BATCH + 16_000,
            7 * BATCH + 30_000,
            1 << 20,
        ] {
            let mut c = config(memory);
            c.readahead = 64 << 20;
            let (fitted, plan) = fit(&c, DATASET, 100, false).unwrap();
            let plan = plan.unwrap();
            assert!(
                plan.batch_buffers + plan.readahead + plan.cache <= memory,
                "{plan:?}"
            );
            assert!(
                fitted.prefetch >= 1 && fitted.readahead >= 8_000,
                "{plan:?}"
            );
            assert_eq!(plan.prefetch, fitted.prefetch);
        }
        // Without overlap, one window of each.
        let mut c = config(3 * BATCH + 8_000);
        c.overlap_epochs = false;
        let (fitted, plan) = fit(&c, DATASET, 100, false).unwrap();
        assert_eq!((fitted.prefetch, fitted.readahead), (2, 8_000));
        assert_eq!(plan.unwrap().cache, 0);
    }

    #[test]
    fn a_budget_too_small_for_the_pipeline_says_what_it_needs() {
        let error = fit(&config(3 * BATCH + 15_999), DATASET, 100, false).unwrap_err();
        assert!(error
            .to_string()
            .contains(&format!("at least {}", 3 * BATCH + 16_000)));
        let (fitted, plan) = fit(
            &LoaderConfig {
                memory: None,
                ..config(0)
            },
            DATASET,
            100,
            false,
        )
        .unwrap();
        assert!(plan.is_none());
        assert_eq!(fitted.prefetch, 4);
    }

    #[test]
    fn decoded_groups_take_a_quarter_of_the_budget_before_the_cache() {
        let mut c = config(1 << 20);
        c.readahead = 10_000;
        let (fitted, plan) = fit(&c, 1 << 30, 1000, true).unwrap();
        let plan = plan.unwrap();
        assert_eq!(plan.groups, 1 << 18);
        assert_eq!(fitted.group_memory, Some(1 << 18));
        assert_eq!(
            plan.batch_buffers + plan.readahead + plan.groups + plan.cache,
            1 << 20,
            "{plan:?}"
        );
        // Asked for, as much as the pipeline leaves.
        c.group_memory = Some(1 << 30);
        let (fitted, plan) = fit(&c, 1 << 30, 1000, true).unwrap();
        let plan = plan.unwrap();
        assert_eq!((plan.cache, fitted.group_memory), (0, Some(plan.groups)));
        assert_eq!(plan.batch_buffers + plan.readahead + plan.groups, 1 << 20);
        // Without groups, nothing for them.
        let (fitted, plan) = fit(&c, 1 << 30, 1000, false).unwrap();
        assert_eq!(
            (plan.unwrap().groups, fitted.group_memory),
            (0, c.group_memory)
        );
    }
}
