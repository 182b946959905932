//! The measurements behind the rate model, each taken by difference so that one stage is
//! timed with the others out of the way.
//!
//! - **F** ([`fetch`]): reads from the real source, cold (the caller opens it with
//!   [`ReadMode::Cold`](nostall::storage::ReadMode::Cold) so the page cache does not
//!   flatter it), in a seeded random order, with the loader's own request concurrency.
//!   Nothing is decoded. The bytes of the first samples read are kept for P.
//! - **P(n)** ([`prep`]): the loader itself, with `n` prep threads, over those samples
//!   held in memory ([`Memory`]), so that storage is out of the picture. Whole epochs
//!   are timed, as a training run would see them.
//! - **C** ([`cache`]): hits served by the loader's cache, with the same concurrency.
//!
//! Each measurement runs for a time budget and reports the [`Spread`] of the rates it
//! saw (across time windows, or across epochs), so a reader can tell a stable figure from
//! a noisy one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use nostall::cache::{CacheConfig, CachePolicy, SampleCache};
use nostall::catalog::{Catalog, SampleId};
use nostall::error::{Error, Result};
use nostall::loader::{Loader, LoaderConfig};
use nostall::plan::global_order;
use nostall::storage::{Memory, Source};

/// The most reads [`fetch`] times, whatever its budget: enough for a stable rate.
const MAX_FETCH_READS: usize = 20_000;

/// How much a rate varied across the runs or windows it was measured over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The slowest run's rate.
    pub min: f64,
    /// The fastest run's rate.
    pub max: f64,
    /// Runs (epochs or time windows) measured.
    pub runs: usize,
}

impl Spread {
    fn of(rates: &[f64]) -> Spread {
        Spread {
            min: rates.iter().copied().fold(f64::INFINITY, f64::min),
            max: rates.iter().copied().fold(0.0, f64::max),
            runs: rates.len(),
        }
    }

    /// The range as a share of `rate`: 0.04 means the runs lay within 4% of it.
    pub fn relative(&self, rate: f64) -> f64 {
        if rate > 0.0 && self.runs > 1 {
            (self.max - self.min) / rate
        } else {
            0.0
        }
    }
}

/// F: what the source delivers, cold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchRate {
    /// Bytes per second, all requests together.
    pub bytes_per_s: f64,
    /// Samples per second.
    pub samples_per_s: f64,
    /// Requests kept in flight (the loader's fetch threads).
    pub concurrency: usize,
    /// Samples read.
    pub samples: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Seconds spent reading.
    pub seconds: f64,
    /// Reads that failed (not counted in the rates).
    pub failed: u64,
    /// Bytes per second across ten time windows.
    pub spread: Spread,
}

/// P(n): samples per second with `threads` prep threads and the data in memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrepRate {
    /// Prep threads.
    pub threads: usize,
    /// Samples per second over all epochs measured.
    pub samples_per_s: f64,
    /// Distinct samples the measurement cycled over.
    pub distinct: usize,
    /// Samples prepared.
    pub samples: u64,
    /// Seconds spent.
    pub seconds: f64,
    /// Samples per second across up to ten runs of consecutive epochs.
    pub spread: Spread,
}

/// C: hits served from the loader's in-memory cache.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CacheRate {
    /// Samples per second.
    pub samples_per_s: f64,
    /// Bytes per second.
    pub bytes_per_s: f64,
}

/// Samples read by [`fetch`] and kept for [`prep`]: catalog id and bytes.
pub type Kept = Vec<(SampleId, Vec<u8>)>;

/// How many of the samples [`fetch`] reads to keep in memory for [`prep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// At most this many samples.
    pub samples: usize,
    /// At most this many bytes.
    pub bytes: u64,
}

/// Reads samples from `source` in a seeded random order with `concurrency` threads,
/// for `budget` or `MAX_FETCH_READS` reads, whichever ends first (a smaller dataset is
/// read again, in the same order), and keeps the first ones read, up to
/// `keep`, for [`prep`].
///
/// # Errors
///
/// [`Error::Sample`]-like failures are counted, not raised; if no read succeeds at all,
/// [`Error::Storage`] names the source and the first failure.
pub fn fetch(
    source: &dyn Source,
    catalog: &Catalog,
    seed: u64,
    concurrency: usize,
    budget: Duration,
    keep: Keep,
) -> Result<(FetchRate, Kept)> {
    let order = global_order(seed, 0, true, catalog.len());
    if order.is_empty() {
        return Err(Error::Config(format!(
            "{}: the dataset is empty",
            catalog.root().display()
        )));
    }
    let concurrency = concurrency.max(1);
    let next = AtomicUsize::new(0);
    let kept = Mutex::new((Kept::new(), 0u64));
    let first_failure = Mutex::new(None::<String>);
    let started = Instant::now();
    // Each thread logs (seconds since start, bytes) per read, for the windows.
    let logs: Vec<(Vec<(f64, u64)>, u64)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                scope.spawn(|| {
                    let (mut log, mut failed) = (Vec::new(), 0u64);
                    let mut bytes = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= MAX_FETCH_READS || started.elapsed() >= budget {
                            break;
                        }
                        let id = order[i % order.len()];
                        match source.read(id, &mut bytes) {
                            Ok(()) => {
                                log.push((started.elapsed().as_secs_f64(), bytes.len() as u64));
                                if i < order.len() {
                                    let mut kept = kept.lock().expect("no panics while held");
                                    if kept.0.len() < keep.samples
                                        && kept.1 + bytes.len() as u64 <= keep.bytes
                                    {
                                        kept.1 += bytes.len() as u64;
                                        kept.0.push((id, bytes.clone()));
                                    }
                                }
                            }
                            Err(cause) => {
                                failed += 1;
                                first_failure
                                    .lock()
                                    .expect("no panics while held")
                                    .get_or_insert_with(|| {
                                        format!("{}: {cause}", source.location(id))
                                    });
                            }
                        }
                    }
                    (log, failed)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("fetch measurement threads do not panic"))
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let failed: u64 = logs.iter().map(|(_, f)| f).sum();
    let mut log: Vec<(f64, u64)> = logs.into_iter().flat_map(|(l, _)| l).collect();
    if log.is_empty() {
        let why = first_failure
            .into_inner()
            .expect("no panics while held")
            .unwrap_or_else(|| "no read finished within the time budget".into());
        return Err(Error::Storage {
            location: catalog.root().display().to_string(),
            message: format!("could not measure the fetch rate: {why}"),
        });
    }
    log.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bytes: u64 = log.iter().map(|(_, b)| b).sum();
    let mut kept = kept.into_inner().expect("no panics while held").0;
    kept.sort_by_key(|(id, _)| *id);
    let rate = FetchRate {
        bytes_per_s: bytes as f64 / seconds,
        samples_per_s: log.len() as f64 / seconds,
        concurrency,
        samples: log.len() as u64,
        bytes,
        seconds,
        failed,
        spread: Spread::of(&window_rates(&log, seconds)),
    };
    Ok((rate, kept))
}

/// Bytes per second in ten equal windows of `[0, seconds]`, from (finish time, bytes)
/// per read; one overall rate when there are too few reads for windows to mean much.
fn window_rates(log: &[(f64, u64)], seconds: f64) -> Vec<f64> {
    const WINDOWS: usize = 10;
    let total: u64 = log.iter().map(|(_, b)| b).sum();
    if log.len() < 5 * WINDOWS || seconds <= 0.0 {
        return vec![total as f64 / seconds.max(f64::MIN_POSITIVE)];
    }
    let width = seconds / WINDOWS as f64;
    let mut bytes = [0u64; WINDOWS];
    for &(t, b) in log {
        bytes[((t / width) as usize).min(WINDOWS - 1)] += b;
    }
    bytes.iter().map(|&b| b as f64 / width).collect()
}

/// Runs the loader configured by `config`, with `threads` prep threads, over the `kept`
/// samples held in memory, epoch after epoch for `budget` (at least two epochs): P(n).
///
/// The cache is off and the plan is the configured one on one rank; the batch size is
/// cut to the number of samples when there are fewer.
///
/// # Errors
///
/// A sample that fails to decode stops the measurement under the `error` policy, as it
/// would stop training; under `skip` it is left out of the rate.
pub fn prep(
    catalog: &Catalog,
    kept: &Kept,
    config: &LoaderConfig,
    threads: usize,
    budget: Duration,
) -> Result<PrepRate> {
    if kept.is_empty() {
        return Err(Error::Config(
            "no samples in memory to measure prep with (the fetch measurement read none)".into(),
        ));
    }
    let subset = Catalog::from_samples(
        catalog.root(),
        catalog.modality(),
        catalog.classes().to_vec(),
        kept.iter().map(|(id, bytes)| {
            (
                catalog.relative_path(*id).to_string(),
                catalog.label(*id),
                bytes.len() as u64,
            )
        }),
    )?;
    let source = Arc::new(Memory::new(
        kept.iter().map(|(_, bytes)| bytes.clone()).collect(),
    ));
    let mut config = config.clone();
    config.prep_threads = threads;
    config.cache = CacheConfig::default();
    config.plan.rank = 0;
    config.plan.world = 1;
    config.plan.batch_size = config.plan.batch_size.min(kept.len());
    // Rates are samples over each epoch's wall time: an epoch prepared partly during the
    // previous one would look faster than prep is.
    config.overlap_epochs = false;
    let loader = Loader::new(Arc::new(subset), source, config)?;
    // (samples, seconds) per epoch.
    let mut epochs = Vec::new();
    let started = Instant::now();
    while epochs.len() < 2 || started.elapsed() < budget {
        let mut batches = loader.epoch(epochs.len() as u64)?;
        for batch in batches.by_ref() {
            batch?;
        }
        let stats = batches.stats();
        epochs.push((stats.samples, stats.wall.as_secs_f64()));
    }
    let samples = epochs.iter().map(|e| e.0).sum::<u64>();
    let seconds = epochs.iter().map(|e| e.1).sum::<f64>();
    // The spread over up to ten runs of consecutive epochs: a small subset makes epochs
    // of a few milliseconds, too short to time one by one.
    let runs: Vec<f64> = epochs
        .chunks(epochs.len().div_ceil(10))
        .map(|run| {
            run.iter().map(|e| e.0).sum::<u64>() as f64 / run.iter().map(|e| e.1).sum::<f64>()
        })
        .collect();
    Ok(PrepRate {
        threads,
        samples_per_s: samples as f64 / seconds,
        distinct: kept.len(),
        samples,
        seconds,
        spread: Spread::of(&runs),
    })
}

/// Serves the `kept` samples from a [`SampleCache`] that holds them all, with
/// `concurrency` threads, for `budget`: C.
pub fn cache(kept: &Kept, concurrency: usize, budget: Duration) -> CacheRate {
    let total: u64 = kept.iter().map(|(_, b)| b.len() as u64).sum();
    let cache = SampleCache::new(CachePolicy::Minio, total);
    for (id, bytes) in kept {
        cache.offer(*id, bytes);
    }
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let bytes: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..concurrency.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let (mut out, mut bytes) = (Vec::new(), 0u64);
                    while started.elapsed() < budget {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let (id, _) = kept[i % kept.len()];
                        if cache.get(id, &mut out) {
                            bytes += out.len() as u64;
                        }
                    }
                    bytes
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("cache measurement threads do not panic"))
            .sum()
    });
    let seconds = started.elapsed().as_secs_f64();
    CacheRate {
        samples_per_s: next.into_inner() as f64 / seconds,
        bytes_per_s: bytes as f64 / seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostall::storage::{Link, Throttled};

    fn memory(samples: usize, bytes: usize) -> Memory {
        Memory::new((0..samples).map(|i| vec![i as u8; bytes]).collect())
    }

    fn catalog(samples: usize, bytes: u64) -> Catalog {
        Catalog::from_samples(
            "/synthetic",
            nostall::sample::Modality::Image,
            Vec::new(),
            (0..samples).map(|i| (format!("{i}.jpg"), None, bytes)),
        )
        .unwrap()
    }

    #[test]
    fn fetch_measures_the_links_bandwidth_and_keeps_what_it_may() {
        // 2 MB/s in front of memory: the measured rate is the link's.
        let source = Throttled::new(Arc::new(memory(400, 10_000)), Link::bandwidth_mb(2.0));
        let keep = Keep {
            samples: 50,
            bytes: 300_000,
        };
        let (rate, kept) = fetch(
            &source,
            &catalog(400, 10_000),
            7,
            2,
            Duration::from_millis(600),
            keep,
        )
        .unwrap();
        assert!(
            (rate.bytes_per_s / 2e6 - 1.0).abs() < 0.15,
            "measured {} B/s through a 2 MB/s link",
            rate.bytes_per_s
        );
        assert_eq!(rate.concurrency, 2);
        assert_eq!(rate.failed, 0);
        // The byte bound (30 samples of 10 kB) binds before the count bound.
        assert_eq!(kept.len(), 30);
        assert!(kept.iter().all(|(id, b)| b == &vec![*id as u8; 10_000]));
    }

    #[test]
    fn fetch_from_a_source_that_always_fails_names_the_failure() {
        let source = Memory::new(vec![Vec::new(); 5]);
        let err = fetch(
            &source,
            &catalog(5, 1),
            0,
            1,
            Duration::from_millis(50),
            Keep {
                samples: 5,
                bytes: 1 << 20,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("memory sample"), "{err}");
    }

    #[test]
    fn window_rates_split_the_bytes_over_time() {
        let log: Vec<(f64, u64)> = (0..100).map(|i| ((i as f64 + 0.5) / 100.0, 10)).collect();
        let rates = window_rates(&log, 1.0);
        assert_eq!(rates.len(), 10);
        assert!(rates.iter().all(|r| (r - 1000.0).abs() < 1e-6), "{rates:?}");
        assert_eq!(window_rates(&log[..10], 1.0), vec![100.0]);
    }

    #[test]
    fn the_cache_serves_every_kept_sample() {
        let kept: Kept = (0..10).map(|i| (i, vec![1u8; 1000])).collect();
        let rate = cache(&kept, 2, Duration::from_millis(50));
        assert!(rate.samples_per_s > 1000.0, "{rate:?}");
        assert!((rate.bytes_per_s / rate.samples_per_s - 1000.0).abs() < 1.0);
    }
}
