//! Loader assembly: a location and settings, given typed or as text, become a loader over
//! the opened dataset. Every knob has a name and a parser here, once, so that a command
//! line, the Python bindings or a configuration file only hand over what the user wrote.
//!
//! ```no_run
//! use nostall::pipeline::LoaderBuilder;
//!
//! # fn main() -> nostall::Result<()> {
//! let mut builder = LoaderBuilder::new("s3://bucket/fma/train");
//! builder.set("pipeline", "m5")?.set("batch_size", "32")?.set("cache", "35%")?;
//! let (loader, _dataset) = builder.open()?;
//! # let _ = loader;
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Catalog;
use crate::dataset::{self, Dataset};
use crate::error::{Error, Result};
use crate::prep::audio::AudioPipeline;
use crate::prep::image::{DeviceFinish, ImagePipeline, Layout};
use crate::prep::{DType, Operators, Pipeline};
use crate::sched::offload::DecodeRoute;
use crate::storage::{Link, ReadMode, Source, Throttled};

use super::{ErrorPolicy, Loader, LoaderConfig, PageLock};

/// The knobs [`LoaderBuilder::set`] knows, with what each takes.
pub const KNOBS: [(&str, &str); 26] = [
    (
        "pipeline",
        "a preset: train, val (images), m5, melspec, m5-val, melspec-val (audio), or a list \
         of operators: [Resize(256), CenterCrop(224)] (nostall.ops and nostall.audio, as \
         Python writes them)",
    ),
    ("image_size", "output side of the image presets, pixels"),
    ("dtype", "images: float32 or uint8"),
    ("layout", "images: CHW or HWC"),
    ("batch_size", "samples per batch"),
    ("shuffle", "true or false"),
    ("seed", "an integer"),
    ("drop_last", "true or false"),
    (
        "shard",
        "pad or drop: how ranks share a dataset that does not divide evenly",
    ),
    ("rank", "this process's rank"),
    ("world_size", "ranks in the job"),
    (
        "threads",
        "prep threads, or auto: the cores this process may use (its CPU affinity and \
         cgroup quota), shared by the node's torchrun ranks (a number turns balance_ranks \
         off)",
    ),
    (
        "balance_ranks",
        "true or false: the node's torchrun ranks share its prep threads by the work each has",
    ),
    (
        "fetch_threads",
        "the most reads in flight (they follow the latency up to this)",
    ),
    ("prefetch", "batches prepared ahead"),
    (
        "overlap_epochs",
        "true or false: start the next epoch while this one's last batches are consumed",
    ),
    ("on_error", "error or skip"),
    (
        "quarantine",
        "a file listing skipped samples (with on_error=skip)",
    ),
    ("cache", "cache size: 35%, 0.35 or 512MiB"),
    ("cache_policy", "none, minio, lookahead, frequency or lru"),
    (
        "cache_epochs",
        "the epochs the job runs (for the frequency cache policy)",
    ),
    (
        "cache_fill",
        "background or before: when the frequency cache reads its placement",
    ),
    ("readahead", "bytes fetched ahead at most: 64MiB"),
    (
        "memory",
        "bytes for batch buffers, read-ahead and cache together: 2GiB",
    ),
    ("read", "cached or cold (bypass the page cache)"),
    (
        "throttle",
        "emulated storage: MB/s[,latency ms], e.g. 20 or 20,5",
    ),
];

/// A loader to be: where the data is, and how to load it.
#[derive(Debug, Clone)]
pub struct LoaderBuilder {
    location: String,
    config: LoaderConfig,
    pipeline: Recipe,
    /// Set explicitly (for the image presets; an error with anything else).
    image_size: Option<u32>,
    dtype: DType,
    layout: Layout,
    read: ReadMode,
    /// Emulated links in front of the storage, by the time each takes over.
    links: Vec<(Duration, Link)>,
    /// The settings given as text, in order, while every setting was (see
    /// [`LoaderBuilder::settings`]).
    texts: Option<Vec<(String, String)>>,
    /// Batches for a device ([`LoaderBuilder::for_device`]).
    device: Option<ForDevice>,
    /// Object storage's settings as another process has them
    /// ([`LoaderBuilder::storage_environment`]); `None`: this process's environment.
    storage_environment: Option<Vec<(String, String)>>,
}

/// How a loader prepares batches for a consumer that moves them to a device (the Python
/// `Loader`'s `device=`): buffers page-locked for the copy, an image pipeline's geometry
/// in 8-bit HWC pixels (the device converts and normalises: see
/// [`ImagePipeline::for_device`]), and, with a route, some JPEGs left to the device's
/// decoder.
#[derive(Debug, Clone)]
pub struct ForDevice {
    /// Locks the batch buffers; `None`: plain memory (copied to the device through a
    /// staging buffer, more slowly).
    pub page_lock: Option<Arc<dyn PageLock>>,
    /// Which JPEGs the device decodes; `None`: the CPU decodes every one.
    pub route: Option<Arc<DecodeRoute>>,
}

/// How the pipeline is given, resolved when the loader opens (the image settings may
/// come after it).
#[derive(Debug, Clone)]
enum Recipe {
    /// A preset by name.
    Preset(String),
    /// Operators (images' with the builder's dtype and layout).
    Operators(Operators),
    /// Made by the caller: the configuration's pipeline as it is.
    Made,
}

/// Output side of the image presets unless `image_size` says otherwise.
pub const DEFAULT_IMAGE_SIZE: u32 = 224;

impl LoaderBuilder {
    /// A loader over `location` (see [`dataset::open`]) with the default settings of
    /// [`LoaderConfig::new`] and the `train` image preset.
    pub fn new(location: impl Into<String>) -> LoaderBuilder {
        LoaderBuilder {
            location: location.into(),
            config: LoaderConfig::new(Pipeline::imagenet_train(DEFAULT_IMAGE_SIZE)),
            pipeline: Recipe::Preset("train".into()),
            image_size: None,
            dtype: DType::F32,
            layout: Layout::Chw,
            read: ReadMode::Cached,
            links: Vec::new(),
            texts: Some(Vec::new()),
            device: None,
            storage_environment: None,
        }
    }

    /// Prepares batches for a device (see [`ForDevice`]). Such settings have no text
    /// form: a loader for a device is not shared through the node agent.
    pub fn for_device(&mut self, device: ForDevice) -> &mut LoaderBuilder {
        self.texts = None;
        self.device = Some(device);
        self
    }

    /// What the device does to the batches of an image pipeline after the engine
    /// ([`ImagePipeline::for_device`]); `None` without [`for_device`](Self::for_device)
    /// or for audio, whose batches are moved as they are.
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`].
    pub fn device_finish(&self) -> Result<Option<DeviceFinish>> {
        self.config()?;
        if self.device.is_none() {
            return Ok(None);
        }
        Ok(self.user_image_pipeline()?.map(|p| p.for_device().1))
    }

    /// The image pipeline the user asked for, before any split for a device; `None` for
    /// audio and a pipeline made by the caller.
    fn user_image_pipeline(&self) -> Result<Option<ImagePipeline>> {
        let ops = match &self.pipeline {
            Recipe::Preset(name) if AudioPipeline::PRESETS.contains(&name.as_str()) => None,
            Recipe::Preset(name) => {
                let size = self.image_size.unwrap_or(DEFAULT_IMAGE_SIZE);
                Some(ImagePipeline::preset(name, size)?.ops().to_vec())
            }
            Recipe::Operators(Operators::Image(ops)) => Some(ops.clone()),
            Recipe::Operators(Operators::Audio(_)) | Recipe::Made => None,
        };
        ops.map(|ops| ImagePipeline::new(ops, self.dtype, self.layout))
            .transpose()
    }

    /// `image` as the loader runs it: whole, or split for the device.
    fn for_consumer(&self, image: ImagePipeline) -> Pipeline {
        let Some(device) = &self.device else {
            return image.into();
        };
        let (geometry, _) = image.for_device();
        match &device.route {
            Some(route) => geometry.with_decode_route(route.clone()).into(),
            None => geometry.into(),
        }
    }

    /// Every setting given so far, as text, in order: what another process (the node
    /// agent) needs to make the same loader (operators in their [text
    /// form](crate::prep::text)). `None` once something was given that has no text form
    /// (a pipeline made in code, links, settings changed through
    /// [`LoaderBuilder::config_mut`]).
    pub fn settings(&self) -> Option<&[(String, String)]> {
        self.texts.as_deref()
    }

    /// Sets knob `name` (one of [`KNOBS`]) from text.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the knob and what it takes, for an unknown knob or a value
    /// it cannot read.
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut LoaderBuilder> {
        let c = &mut self.config;
        match name {
            "pipeline" if Operators::written_in(value) => {
                self.pipeline = Recipe::Operators(value.parse()?);
            }
            "pipeline" => {
                // Checked now, resolved at open (image_size may follow).
                Pipeline::preset(value, DEFAULT_IMAGE_SIZE)?;
                self.pipeline = Recipe::Preset(value.to_string());
            }
            "image_size" => self.image_size = Some(parse(name, value)?),
            "dtype" => self.dtype = value.parse()?,
            "layout" => self.layout = value.parse()?,
            "batch_size" => c.plan.batch_size = parse(name, value)?,
            "shuffle" => c.plan.shuffle = parse(name, value)?,
            "seed" => c.plan.seed = parse(name, value)?,
            "drop_last" => c.plan.drop_last = parse(name, value)?,
            "shard" => c.plan.shard = parse(name, value)?,
            "rank" => c.plan.rank = parse(name, value)?,
            "world_size" => c.plan.world = parse(name, value)?,
            "threads" if value.trim() == "auto" => {
                c.prep_threads = auto_threads();
                c.balance_ranks = true;
            }
            "threads" => {
                c.prep_threads = parse(name, value)?;
                c.balance_ranks = false;
            }
            "balance_ranks" => c.balance_ranks = parse(name, value)?,
            "fetch_threads" => c.fetch_threads = parse(name, value)?,
            "prefetch" => c.prefetch = parse(name, value)?,
            "overlap_epochs" => c.overlap_epochs = parse(name, value)?,
            "on_error" => c.on_error = parse(name, value)?,
            "quarantine" => c.quarantine = Some(PathBuf::from(value)),
            "cache" => c.cache.capacity = parse(name, value)?,
            "cache_policy" => c.cache.policy = parse(name, value)?,
            "cache_epochs" => c.cache.planned_epochs = parse(name, value)?,
            "cache_fill" => c.cache.fill = parse(name, value)?,
            "readahead" => c.readahead = bytes(name, value)?,
            "memory" => c.memory = Some(bytes(name, value)?),
            "read" => self.read = parse(name, value)?,
            "throttle" => self.links = vec![(Duration::ZERO, parse_link(value)?)],
            _ => {
                let known: Vec<&str> = KNOBS.iter().map(|(k, _)| *k).collect();
                return Err(Error::Config(format!(
                    "unknown loader setting {name:?}: the settings are {}",
                    known.join(", ")
                )));
            }
        }
        if let Some(texts) = &mut self.texts {
            texts.push((name.to_string(), value.to_string()));
        }
        Ok(self)
    }

    /// Uses `pipeline` (any modality's, or one of your own) instead of a preset.
    pub fn pipeline(&mut self, pipeline: Pipeline) -> &mut LoaderBuilder {
        self.texts = None;
        self.pipeline = Recipe::Made;
        self.config.pipeline = pipeline;
        self
    }

    /// Prepares samples with `operators` instead of a preset (images with the `dtype` and
    /// `layout` knobs). The settings keep them as text: `pipeline` set to their [text
    /// form](crate::prep::text).
    pub fn operators(&mut self, operators: Operators) -> &mut LoaderBuilder {
        if let Some(texts) = &mut self.texts {
            texts.push(("pipeline".into(), operators.to_string()));
        }
        self.pipeline = Recipe::Operators(operators);
        self
    }

    /// Puts an emulated link in front of the storage.
    pub fn link(&mut self, link: Link) -> &mut LoaderBuilder {
        self.texts = None;
        self.links = vec![(Duration::ZERO, link)];
        self
    }

    /// Puts emulated links in front of the storage, each from its time on (measured from
    /// when the loader is built): storage that changes during a run
    /// ([`Throttled::phased`]).
    pub fn link_phases(&mut self, phases: Vec<(Duration, Link)>) -> &mut LoaderBuilder {
        self.texts = None;
        self.links = phases;
        self
    }

    /// The settings so far, for those without a text form (locality, say).
    pub fn config_mut(&mut self) -> &mut LoaderConfig {
        self.texts = None;
        &mut self.config
    }

    /// The configuration the loader will run with (the pipeline resolved).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the settings do not fit together: a preset that does not
    /// fit `image_size` (0), image settings with an audio preset or a pipeline made by
    /// the caller, `image_size` with a list of operators, operators that do not make a
    /// pipeline.
    pub fn config(&self) -> Result<LoaderConfig> {
        let mut config = self.config.clone();
        let images_set =
            self.image_size.is_some() || self.dtype != DType::F32 || self.layout != Layout::Chw;
        config.pipeline = match &self.pipeline {
            Recipe::Preset(name) if AudioPipeline::PRESETS.contains(&name.as_str()) => {
                if images_set {
                    return Err(Error::Config(format!(
                        "pipeline={name:?} prepares audio as float32 waveforms or \
                         spectrograms: image_size, dtype and layout apply to images only"
                    )));
                }
                Pipeline::preset(name, DEFAULT_IMAGE_SIZE)?
            }
            Recipe::Operators(Operators::Image(_)) if self.image_size.is_some() => {
                return Err(Error::Config(
                    "image_size sets the size of the \"train\" and \"val\" presets; with a \
                     list of operators, give the sizes to the operators (e.g. \
                     RandomResizedCrop(224) or CenterCrop(224))"
                        .into(),
                ))
            }
            Recipe::Preset(_) | Recipe::Operators(Operators::Image(_)) => {
                let image = self.user_image_pipeline()?;
                self.for_consumer(image.expect("an image preset or image operators"))
            }
            Recipe::Operators(Operators::Audio(_)) if images_set => {
                return Err(Error::Config(
                    "audio operators prepare float32 waveforms or spectrograms: image_size, \
                     dtype and layout apply to images only"
                        .into(),
                ))
            }
            Recipe::Operators(Operators::Audio(ops)) => AudioPipeline::new(ops.clone())?.into(),
            Recipe::Made if images_set => {
                return Err(Error::Config(
                    "image_size, dtype and layout apply to presets and lists of operators, \
                     not to a pipeline given whole"
                        .into(),
                ))
            }
            Recipe::Made => config.pipeline,
        };
        if let Some(device) = &self.device {
            config.page_lock.clone_from(&device.page_lock);
        }
        Ok(config)
    }

    /// Opens the dataset for the pipeline's modality (its catalog and unthrottled
    /// source); [`LoaderBuilder::build`] then makes the loader over it, or over a source
    /// in front of it (a node's partitioned cache, say).
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`] and [`dataset::open`].
    pub fn open_dataset(&self) -> Result<Dataset> {
        let modality = self.config()?.pipeline.modality();
        match &self.storage_environment {
            None => dataset::open(&self.location, self.read, modality),
            Some(vars) => {
                let var = |name: &str| {
                    vars.iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, value)| value.clone())
                };
                dataset::open_in(&self.location, self.read, modality, &var)
            }
        }
    }

    /// Reads object storage with these values of [`crate::storage::S3_ENVIRONMENT`]
    /// (the variables a job had set) instead of this process's environment: a process
    /// that reads for other jobs (the node agent) reads each job's data from its server,
    /// as that job.
    pub fn storage_environment(&mut self, vars: Vec<(String, String)>) -> &mut Self {
        self.storage_environment = Some(vars);
        self
    }

    /// Makes the loader over `catalog`, reading from `source` (behind the `throttle`
    /// link, if set).
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`] and [`Loader::new`].
    pub fn build(&self, catalog: Arc<Catalog>, source: Arc<dyn Source>) -> Result<Loader> {
        let source: Arc<dyn Source> = if self.links.is_empty() {
            source
        } else {
            Arc::new(Throttled::phased(source, self.links.clone()))
        };
        Loader::new(catalog, source, self.config()?)
    }

    /// Opens the dataset and makes the loader over it; the dataset comes back too.
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::open_dataset`] and [`LoaderBuilder::build`].
    pub fn open(&self) -> Result<(Loader, Dataset)> {
        let dataset = self.open_dataset()?;
        let loader = self.build(dataset.catalog.clone(), dataset.source.clone())?;
        Ok((loader, dataset))
    }
}

/// The cores this process may run on: its CPU affinity mask and, under a cgroup CPU quota,
/// the quota (Rust's `available_parallelism` reads both on Linux); 1 if unknown.
pub fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Prep threads for `threads="auto"`: this process's share of the cores it may use, the
/// node's local ranks (torchrun's `LOCAL_WORLD_SIZE`) splitting them evenly; at least 1.
pub fn auto_threads() -> usize {
    (usable_cores() / crate::env::local_ranks()).max(1)
}

/// `value` as a number of bytes (`64MiB`, `2GB`, `1000000`) for knob `name`.
fn bytes(name: &str, value: &str) -> Result<u64> {
    match parse(name, value)? {
        crate::cache::Capacity::Bytes(bytes) => Ok(bytes),
        crate::cache::Capacity::Fraction(_) => Err(Error::Config(format!(
            "{name}={value:?}: give bytes (64MiB, 2GiB), not a share"
        ))),
    }
}

/// `value` as knob `name`'s type, or an error naming both.
fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value.trim().parse().map_err(|_| {
        let takes = KNOBS
            .iter()
            .find(|(k, _)| *k == name)
            .map_or("", |(_, takes)| takes);
        Error::Config(format!("{name}={value:?}: expected {takes}"))
    })
}

/// `MB/s[,latency ms]`.
fn parse_link(value: &str) -> Result<Link> {
    let bad = || {
        Error::Config(format!(
            "throttle={value:?}: expected MB/s[,latency ms], e.g. 20,5"
        ))
    };
    let (rate, latency) = match value.split_once(',') {
        Some((rate, latency)) => (rate, Some(latency)),
        None => (value, None),
    };
    let rate: f64 = rate.trim().parse().map_err(|_| bad())?;
    let latency_ms: f64 = latency
        .map_or(Ok(0.0), |l| l.trim().parse())
        .map_err(|_| bad())?;
    if !(rate > 0.0 && rate.is_finite() && latency_ms >= 0.0 && latency_ms.is_finite()) {
        return Err(bad());
    }
    Ok(Link {
        bandwidth: Some(rate * 1e6),
        latency: Duration::from_secs_f64(latency_ms / 1e3),
        concurrency: None,
    })
}

impl std::str::FromStr for ErrorPolicy {
    type Err = Error;

    /// `error` or `skip`.
    fn from_str(s: &str) -> Result<ErrorPolicy> {
        match s {
            "error" => Ok(ErrorPolicy::Error),
            "skip" => Ok(ErrorPolicy::Skip),
            _ => Err(Error::Config(format!(
                "on_error={s:?}: use \"error\" or \"skip\""
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::audio::AudioOp;

    #[test]
    fn every_knob_reads_its_text_and_refuses_nonsense() {
        let mut b = LoaderBuilder::new("/data");
        let every = [
            ("pipeline", "val"),
            ("image_size", "96"),
            ("dtype", "f32"),
            ("layout", "HWC"),
            ("batch_size", "32"),
            ("shuffle", "false"),
            ("seed", "7"),
            ("drop_last", "true"),
            ("shard", "drop"),
            ("rank", "1"),
            ("world_size", "2"),
            ("threads", "3"),
            ("balance_ranks", "true"),
            ("fetch_threads", "4"),
            ("prefetch", "5"),
            ("overlap_epochs", "false"),
            ("on_error", "skip"),
            ("quarantine", "/tmp/bad.jsonl"),
            ("cache", "35%"),
            ("cache_policy", "minio"),
            ("cache_epochs", "90"),
            ("cache_fill", "background"),
            ("readahead", "16MiB"),
            ("memory", "2GiB"),
            ("read", "cold"),
            ("throttle", "20,5"),
        ];
        for (name, value) in every {
            b.set(name, value)
                .unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        }
        let set: Vec<&str> = every.iter().map(|(name, _)| *name).collect();
        let known: Vec<&str> = KNOBS.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            set, known,
            "every knob is exercised, in the documented order"
        );
        let c = b.config().unwrap();
        assert_eq!(c.pipeline.layout().shape(), [96, 96, 3]);
        assert_eq!(
            LoaderBuilder::new("/data")
                .set("threads", "auto")
                .unwrap()
                .config()
                .unwrap()
                .prep_threads,
            auto_threads()
        );
        assert_eq!(
            (c.plan.batch_size, c.plan.seed, c.plan.rank, c.plan.world),
            (32, 7, 1, 2)
        );
        assert!(!c.plan.shuffle && c.plan.drop_last);
        assert_eq!((c.prep_threads, c.fetch_threads, c.prefetch), (3, 4, 5));
        assert!(!c.overlap_epochs);
        assert!(c.balance_ranks, "set after threads");
        assert!(
            !LoaderBuilder::new("/data")
                .set("threads", "2")
                .unwrap()
                .config()
                .unwrap()
                .balance_ranks,
            "a thread count given pins it"
        );
        assert_eq!(c.cache.planned_epochs, 90);
        assert_eq!(c.on_error, ErrorPolicy::Skip);
        assert_eq!(c.readahead, 16 << 20);
        assert_eq!(c.memory, Some(2 << 30));
        assert_eq!(b.read, ReadMode::Cold);
        assert_eq!(b.links[0].1.latency, Duration::from_millis(5));
        for (name, value) in [
            ("batch_size", "many"),
            ("shuffle", "maybe"),
            ("on_error", "ignore"),
            ("pipeline", "resnet"),
            ("cache", "lots"),
            ("cache_fill", "sometimes"),
            ("readahead", "50%"),
            ("read", "warm"),
            ("throttle", "-3"),
            ("dtype", "float16"),
            ("layout", "CWH"),
            ("colour", "blue"),
        ] {
            let why = b.set(name, value).unwrap_err().to_string();
            assert!(why.contains(name), "{name}={value}: {why}");
        }
        b.set("pipeline", "m5").unwrap();
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("images only"), "{why}");
        let mut audio = LoaderBuilder::new("/data");
        audio.set("pipeline", "m5").unwrap();
        assert_eq!(
            audio.config().unwrap().pipeline.layout().shape(),
            [1, 32_000]
        );
    }

    #[test]
    fn image_settings_that_would_be_ignored_are_refused() {
        let mut b = LoaderBuilder::new("/data");
        b.operators(Operators::Image(
            ImagePipeline::imagenet_val(64).ops().to_vec(),
        ));
        b.set("layout", "HWC").unwrap();
        assert_eq!(b.config().unwrap().pipeline.layout().shape(), [64, 64, 3]);
        // The operators end with Normalize, which needs float output.
        b.set("dtype", "uint8").unwrap();
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("Normalize"), "{why}");
        b.set("dtype", "float32").unwrap();
        b.set("image_size", "96").unwrap();
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("give the sizes to the operators"), "{why}");

        let mut b = LoaderBuilder::new("/data");
        b.operators(Operators::Audio(vec![
            AudioOp::resample(8_000),
            AudioOp::CenterCrop { length: 100 },
        ]));
        assert_eq!(b.config().unwrap().pipeline.layout().shape(), [1, 100]);
        b.set("layout", "HWC").unwrap();
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("images only"), "{why}");

        let mut b = LoaderBuilder::new("/data");
        b.pipeline(Pipeline::imagenet_val(64))
            .set("dtype", "uint8")
            .unwrap();
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("not to a pipeline given whole"), "{why}");
    }

    #[test]
    fn operators_are_settings_another_process_can_replay() {
        let ops = Operators::Audio(vec![
            AudioOp::Channels(2),
            AudioOp::resample(22_050),
            AudioOp::RandomCrop { length: 4_410 },
        ]);
        let mut b = LoaderBuilder::new("/data");
        b.set("batch_size", "8").unwrap().operators(ops.clone());
        let settings = b.settings().expect("operators have a text form").to_vec();
        assert_eq!(settings[1].1, ops.to_string());
        let mut replayed = LoaderBuilder::new("/data");
        for (name, value) in &settings {
            replayed.set(name, value).unwrap();
        }
        let (a, b) = (b.config().unwrap(), replayed.config().unwrap());
        assert_eq!(a.pipeline.layout(), b.pipeline.layout());
        assert_eq!(format!("{:?}", a.pipeline), format!("{:?}", b.pipeline));
        assert_eq!(b.plan.batch_size, 8);

        let mut hand = LoaderBuilder::new("/data");
        hand.set("pipeline", "[Resize(256), CenterCrop(224)]")
            .unwrap()
            .set("dtype", "uint8")
            .unwrap();
        assert_eq!(
            hand.config().unwrap().pipeline.layout().shape(),
            [3, 224, 224]
        );
        let why = hand.set("pipeline", "[Resize(256), Blur(3)]").unwrap_err();
        assert!(
            why.to_string().contains("unknown operator \"Blur\""),
            "{why}"
        );
    }
}
