//! DS-Analyzer: why training stalls on data, and what would remove the stall.
//!
//! An analysis has four steps, each in its own module:
//!
//! 1. [`measure`] the three rates by difference: F, cold reads from the real source with
//!    the loader's concurrency; P(n), the loader over samples held in memory, for 1..N
//!    threads; C, hits from the in-memory cache. G, the model's rate, is given, simulated
//!    (a fixed time per batch) or, from Python, timed on the user's training step.
//! 2. Feed them to the rate model ([`nostall::sched::model`], below the pipeline, where a
//!    scheduler can use it too): throughput = min(F, P, G) and the split of epoch time
//!    into compute, prep stall and fetch stall.
//! 3. [`observe`] the real loader, as configured, feeding a simulated model at rate G,
//!    and hold its figures beside the prediction.
//! 4. Sweep the model along one knob at a time, weigh remote prep (cores elsewhere, at
//!    the cost of receiving their batches here), and draw advice from it ([`whatif`]),
//!    then render a [`Report`] for a terminal, as JSON, or as an HTML page with charts.
//!
//! [`analyze`] runs all four within a time budget.

mod chart;
pub mod measure;
pub mod observe;
pub mod report;
pub mod whatif;

pub use nostall::sched::model::{Bottleneck, Prediction, Rates, Setup};
pub use observe::RunLength;
pub use report::{Configuration, ModelRate, Report};
pub use whatif::RemoteCosts;

use std::sync::Arc;
use std::time::{Duration, Instant};

use measure::Keep;
use nostall::cache::CachePolicy;
use nostall::catalog::Catalog;
use nostall::dataset::{self, Columns, Dataset, Format};
use nostall::error::{Error, Result};
use nostall::loader::{Loader, LoaderConfig};
use nostall::storage::{Link, ReadMode, Source, Throttled};
use report::Measurements;

/// The most samples, and bytes, held in memory to measure prep with.
const PREP_KEEP: Keep = Keep {
    samples: 1024,
    bytes: 256 << 20,
};

/// What to analyse: a dataset's catalog and source (opened cold, so that fetch is
/// measured honestly, and behind any emulated link), and the loader configuration.
pub struct Subject {
    /// The dataset's location, for the report.
    pub location: String,
    /// The dataset.
    pub catalog: Arc<Catalog>,
    /// Where its bytes come from.
    pub source: Arc<dyn Source>,
    /// The configuration to analyse.
    pub config: LoaderConfig,
    /// The configuration as the report describes it.
    pub description: Configuration,
}

impl Subject {
    /// Opens the dataset at `location` (see [`dataset::open_in`]; `columns` for a Parquet
    /// dataset) with `read`, behind `link` if given, to analyse `config`. Cold reads need
    /// plain files: a dataset of shards, objects or Parquet files is read through the
    /// page cache instead, and the report says so.
    ///
    /// # Errors
    ///
    /// What [`dataset::open`] returns for a location it cannot open, and what
    /// [`Loader::new`] returns for a configuration it refuses (checked here, before any
    /// measurement, rather than after them at the real run).
    pub fn open(
        location: &str,
        config: LoaderConfig,
        read: ReadMode,
        link: Option<Link>,
        columns: &Columns,
    ) -> Result<Subject> {
        let modality = config.pipeline.modality();
        let var = |name: &str| std::env::var(name).ok();
        let (dataset, read) = match dataset::open_in(location, read, modality, columns, &var) {
            Ok(dataset) => (dataset, read),
            Err(refused @ Error::Config(_)) if read == ReadMode::Cold => {
                match dataset::open_in(location, ReadMode::Cached, modality, columns, &var) {
                    Ok(dataset) if dataset.format != Format::Files => (dataset, ReadMode::Cached),
                    _ => return Err(refused),
                }
            }
            Err(e) => return Err(e),
        };
        Subject::of_dataset(location, dataset, config, read, link)
    }

    /// [`Subject::open`] over a dataset opened by the caller (samples made by a Python
    /// `Dataset`, or held in its memory), read as `read` says.
    ///
    /// # Errors
    ///
    /// What [`Loader::new`] returns for a configuration it refuses.
    pub fn of_dataset(
        location: &str,
        dataset: Dataset,
        config: LoaderConfig,
        read: ReadMode,
        link: Option<Link>,
    ) -> Result<Subject> {
        let source: Arc<dyn Source> = match link {
            Some(link) => Arc::new(Throttled::new(dataset.source.clone(), link)),
            None => dataset.source.clone(),
        };
        Loader::new(dataset.catalog.clone(), source.clone(), config.clone())?;
        let mut storage = match (dataset.format, read) {
            _ if location.starts_with("s3://") => format!("object storage ({location})"),
            (Format::Indexed, _) => {
                format!("none: {location}'s __getitem__ makes each sample (timed as prep)")
            }
            (Format::Held, _) => format!("memory ({location})"),
            (Format::TarShards, ReadMode::Cold) => "local tar shards, read cold".to_string(),
            (Format::TarShards, ReadMode::Cached) => "local tar shards, page cache".to_string(),
            (Format::Parquet, _) => "local Parquet files, page cache".to_string(),
            (Format::Segments, _) => {
                "segments of local recordings (a manifest), page cache".to_string()
            }
            (_, ReadMode::Cold) => "local files, read cold".to_string(),
            _ => "local files, through the page cache".to_string(),
        };
        if let Some(link) = link {
            if let Some(bandwidth) = link.bandwidth {
                storage.push_str(&format!(", throttled to {} MB/s", bandwidth / 1e6));
            }
            if !link.latency.is_zero() {
                storage.push_str(&format!(
                    ", {} ms per read",
                    link.latency.as_secs_f64() * 1e3
                ));
            }
        }
        let description = Configuration {
            pipeline: config.pipeline.to_string(),
            batch_size: config.plan.batch_size,
            prep_threads: config.prep_threads,
            fetch_threads: config.fetch_threads,
            cache: match config.cache.policy {
                CachePolicy::Minio => "minio".into(),
                CachePolicy::Lru => "lru (predicted as if MinIO: LRU hits less)".into(),
                CachePolicy::Lookahead => {
                    "lookahead (predicted as if MinIO: the same hits on one node)".into()
                }
                CachePolicy::Frequency => {
                    "frequency (predicted as if MinIO: the same hits on one node)".into()
                }
                CachePolicy::None => "none".into(),
                other => format!("{other} (predicted as if MinIO)"),
            },
            cache_share: cache_share(&config, dataset.catalog.total_bytes()),
            storage,
        };
        Ok(Subject {
            location: location.into(),
            catalog: dataset.catalog,
            source,
            config,
            description,
        })
    }
}

/// How an analysis runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Time for the measurements of F, P(n) and C together.
    pub budget: Duration,
    /// P(n) is measured for n = 1..=`max_threads`.
    pub max_threads: usize,
    /// G.
    pub model: ModelRate,
    /// The real run beside the prediction; `None` to skip it.
    pub run: Option<RunLength>,
    /// Rates from an earlier analysis to reuse instead of measuring (G is replaced by
    /// [`Options::model`]).
    pub rates: Option<Rates>,
    /// The share of the dataset each node caches in the node sweep; `None`: the
    /// configured cache's share, or 25% without a cache.
    pub node_cache_share: Option<f64>,
    /// The network bandwidth between nodes in the node sweep, bytes/s.
    pub network_bytes_per_s: f64,
    /// What remote prep costs, for its what-if.
    pub remote: RemoteCosts,
    /// Seed of the order samples are measured in.
    pub seed: u64,
}

/// The shortest measurement budget: below it the rates are noise.
const MIN_BUDGET: Duration = Duration::from_millis(500);

impl Options {
    /// Checks the options a user gave (a command line, Python's `nostall.analyze`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the option: no thread to measure prep with, a network
    /// without bandwidth, a node cache share outside (0, 1], remote costs out of range.
    pub fn validate(&self) -> Result<()> {
        if self.max_threads == 0 {
            return Err(Error::Config(
                "max_threads=0: prep is measured for 1 to max_threads threads".into(),
            ));
        }
        positive("network bytes/s", self.network_bytes_per_s, false)?;
        self.remote.validate()?;
        if let Some(share) = self.node_cache_share.filter(|s| !(*s > 0.0 && *s <= 1.0)) {
            return Err(Error::Config(format!(
                "node_cache={share}: give a share of the dataset in (0, 1] (\"25%\" or 0.25)"
            )));
        }
        Ok(())
    }
}

/// `value`, given by a user for `what`, if it is finite and above 0 (at least 0 with
/// `zero_ok`): the check every number of seconds, rates and bandwidths an analysis is
/// given goes through, from the command line or Python.
///
/// # Errors
///
/// [`Error::Config`] naming `what` and the value.
pub fn positive(what: &str, value: f64, zero_ok: bool) -> Result<f64> {
    if value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0)) {
        return Ok(value);
    }
    let bound = if zero_ok { "0 or more" } else { "above 0" };
    Err(Error::Config(format!(
        "{what}={value}: give a number {bound}"
    )))
}

/// Runs an analysis of `subject`; `progress` hears what is being done.
///
/// # Errors
///
/// Those of [`Options::validate`], a source that cannot be read at all, a configuration
/// the loader refuses, or a failing sample under the `error` policy during the prep
/// measurement or the real run.
pub fn analyze(
    subject: &Subject,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    options.validate()?;
    let options = &Options {
        budget: options.budget.max(MIN_BUDGET),
        ..options.clone()
    };
    let catalog = &subject.catalog;
    let config = &subject.config;
    let (rates, measurements) = match &options.rates {
        Some(rates) => (
            Rates {
                model: options.model.rate,
                ..rates.clone()
            },
            None,
        ),
        None => {
            let m = measure_all(subject, options, progress)?;
            let rates = Rates {
                samples: catalog.len() as u64,
                dataset_bytes: catalog.total_bytes(),
                prep: m.prep.iter().map(|p| p.samples_per_s).collect(),
                storage_bytes_per_s: m.fetch.bytes_per_s,
                cache: m.cache.samples_per_s,
                model: options.model.rate,
            };
            (rates, Some(m))
        }
    };
    let setup = Setup {
        batch_size: config.plan.batch_size,
        ..Setup::single(subject.description.cache_share, config.prep_threads)
    };
    let prediction = rates.predict(&setup);
    let (observation, observed) = match options.run {
        Some(length) => {
            progress("running the loader as configured, fed to the model");
            let loader = Loader::new(catalog.clone(), subject.source.clone(), config.clone())?;
            // One line a second at most: a small dataset runs hundreds of epochs.
            let mut last_line: Option<Instant> = None;
            let observation = observe::observe(&loader, options.model.rate, length, |e| {
                if last_line.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    return;
                }
                last_line = Some(Instant::now());
                progress(&format!(
                    "  epoch {}: {:.0} samples/s, {:.1}% waiting for data",
                    e.epoch,
                    e.samples as f64 / e.seconds.max(1e-9),
                    100.0 * e.stall_seconds / e.seconds.max(1e-9)
                ))
            })?;
            let steady = observation.steady();
            (Some(observation), steady)
        }
        None => (None, None),
    };
    let max_threads = 4 * options.max_threads.max(config.prep_threads).max(8);
    Ok(Report {
        version: env!("CARGO_PKG_VERSION").into(),
        dataset: subject.location.clone(),
        configuration: subject.description.clone(),
        model: options.model.clone(),
        what_if: whatif::sweep(
            &rates,
            &setup,
            options
                .node_cache_share
                .unwrap_or(match subject.description.cache_share {
                    0.0 => 0.25,
                    configured => configured,
                }),
            options.network_bytes_per_s,
        ),
        advice: whatif::advise(
            &rates,
            &setup,
            &prediction,
            max_threads,
            config.pipeline.sample_bytes(),
            &options.remote,
        ),
        rates,
        measurements,
        prediction,
        observation,
        observed,
    })
}

/// F first (keeping samples for P), then C, then P(n) for each thread count, sharing
/// the budget: a fifth for F, the rest for P.
fn measure_all(
    subject: &Subject,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Measurements> {
    let started = Instant::now();
    let config = &subject.config;
    progress(&format!(
        "measuring fetch: cold reads, {} in flight",
        config.fetch_threads
    ));
    let (fetch, kept) = measure::fetch(
        subject.source.as_ref(),
        &subject.catalog,
        options.seed,
        config.fetch_threads,
        options.budget / 5,
        PREP_KEEP,
    )?;
    let cache = measure::cache(&kept, config.fetch_threads, Duration::from_millis(200));
    let threads = options.max_threads;
    let per_count = options.budget * 4 / 5 / threads as u32;
    let mut prep = Vec::new();
    for n in 1..=threads {
        progress(&format!(
            "measuring prep: {n} thread(s), {} samples in memory",
            kept.len()
        ));
        prep.push(measure::prep(
            &subject.catalog,
            &kept,
            config,
            n,
            per_count,
        )?);
    }
    Ok(Measurements {
        fetch,
        prep,
        cache,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The share of the dataset the configured cache holds in steady state: MinIO keeps
/// what it first sees until full, so a capacity of `x` of the dataset serves `x` of
/// every later epoch. LRU under a random order serves far less; the report says the
/// prediction assumes MinIO.
fn cache_share(config: &LoaderConfig, dataset_bytes: u64) -> f64 {
    if config.cache.policy == CachePolicy::None || dataset_bytes == 0 {
        return 0.0;
    }
    (config.cache.capacity.bytes(dataset_bytes) as f64 / dataset_bytes as f64).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_user_gives_are_checked_naming_the_option() {
        let options = Options {
            budget: Duration::from_secs(1),
            max_threads: 2,
            model: ModelRate::none(),
            run: None,
            rates: None,
            node_cache_share: Some(0.25),
            network_bytes_per_s: 1.25e9,
            remote: RemoteCosts::default(),
            seed: 0,
        };
        options.validate().unwrap();
        let refused = |options: Options, name: &str| {
            let why = options.validate().unwrap_err().to_string();
            assert!(why.contains(name), "{why}");
        };
        refused(
            Options {
                max_threads: 0,
                ..options.clone()
            },
            "max_threads",
        );
        refused(
            Options {
                node_cache_share: Some(1.5),
                ..options.clone()
            },
            "node_cache",
        );
        refused(
            Options {
                network_bytes_per_s: f64::NAN,
                ..options.clone()
            },
            "network",
        );
        refused(
            Options {
                remote: RemoteCosts {
                    host_cores: 0.0,
                    ..RemoteCosts::default()
                },
                ..options.clone()
            },
            "host cores",
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(ModelRate::given(bad).is_err(), "{bad}");
            assert!(ModelRate::simulated(bad, 8).is_err(), "{bad}");
            assert!(positive("budget", bad, false).is_err(), "{bad}");
        }
        assert_eq!(positive("run_seconds", 0.0, true).unwrap(), 0.0);
        assert_eq!(ModelRate::simulated(10.0, 8).unwrap().rate, Some(800.0));
    }
}
