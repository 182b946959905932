//! A loader's settings: every knob a user sets, typed, with its default and its check.
//!
//! [`LoaderSettings`] is what a command line, the Python bindings and the node agent's
//! jobs fill in, each converting its own arguments; a [`LoaderBuilder`](super::LoaderBuilder)
//! takes it whole. Text is read only at the edges: a knob's text form
//! ([`LoaderSettings::set`], [`LoaderSettings::texts`]) serves the settings a job sends
//! the node agent and a configuration written by hand, and [`KNOBS`] lists the names and
//! what each takes, once.
//!
//! ```no_run
//! use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
//! use nostall::ErrorPolicy;
//!
//! # fn main() -> nostall::Result<()> {
//! let mut settings = LoaderSettings::default(); // the "train" preset at 224 pixels, ...
//! settings.plan.batch_size = 256;
//! settings.threads = Threads::Count(8);
//! settings.on_error = ErrorPolicy::Skip;
//! // Knobs by name, from text (a configuration file's):
//! settings.set("cache_policy", "minio")?.set("cache", "35%")?;
//! let (loader, _dataset) = LoaderBuilder::with_settings("/data/imagenet/train", settings).open()?;
//! for epoch in 0..90 {
//!     for batch in loader.epoch(epoch)? {
//!         let batch = batch?;
//!         # let _ = batch;
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! What a loader needs that no user sets (where batch buffers live, the ranks it balances
//! with, a node's locality) is not a setting: the builder takes it beside them.

use std::path::PathBuf;
use std::time::Duration;

use crate::cache::{CacheConfig, Capacity};
use crate::dataset::Columns;
use crate::error::{Error, Result};
use crate::plan::PlanConfig;
use crate::prep::image::Layout;
use crate::prep::{DType, Operators, Pipeline};
use crate::storage::{Link, ReadMode};

use super::{ErrorPolicy, LoaderConfig};

/// Output side of the image presets unless `image_size` says otherwise.
pub const DEFAULT_IMAGE_SIZE: u32 = 224;

/// Every knob a loader has, typed. Start from `LoaderSettings::default()` and set the
/// fields you need (more may come); text forms are read by [`LoaderSettings::set`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoaderSettings {
    /// What is done to each sample (`pipeline`): a preset or operators. Default: the
    /// `train` image preset.
    pub pipeline: PipelineSetting,
    /// Output side of the image presets in pixels (`image_size`); `None`:
    /// [`DEFAULT_IMAGE_SIZE`]. An error with operators (they carry their sizes) and audio.
    pub image_size: Option<u32>,
    /// Element type of image batches (`dtype`). Default `float32`.
    pub dtype: DType,
    /// Order of image batches' dimensions (`layout`). Default CHW.
    pub layout: Layout,
    /// A detection batch cut to its largest image (`pad_to_largest`), its height and
    /// width rounded up to this multiple, with a padding mask ([`PadToLargest`]); `None`:
    /// each image on the pipeline's `max_size` canvas.
    ///
    /// [`PadToLargest`]: super::PadToLargest
    pub pad_to_largest: Option<u32>,
    /// Order, sharding and batching (`batch_size` 64, `shuffle` on, `seed` 0,
    /// `drop_last` off, `shard` pad, `rank` 0, `world_size` 1).
    pub plan: PlanConfig,
    /// Prep threads (`threads`). Default: [`Threads::Auto`].
    pub threads: Threads,
    /// Whether a node's torchrun ranks share its prep threads by the work each has
    /// (`balance_ranks`); `None`: with `threads` automatic, yes; counted, no.
    pub balance_ranks: Option<bool>,
    /// The most reads in flight (`fetch_threads`): a ceiling the read-ahead follows the
    /// latency up to. Default 128.
    pub fetch_threads: usize,
    /// Whether reads in flight follow the observed latency (`adaptive_reads`); off,
    /// `fetch_threads` are always in flight (a static configuration, for comparison).
    /// Default on.
    pub adaptive_reads: bool,
    /// Whether fewer than the prep threads prepare when the consumer needs fewer
    /// (`adaptive_prep`); off, all of them always do. Default on.
    pub adaptive_prep: bool,
    /// How far below the consumer's the loader threads' CPU priority is (`worker_nice`,
    /// a Linux nice increment, 0 to 19), so that a training thread that launches a GPU's
    /// work is never queued behind a decoder. Default 0 (the Python `Loader` takes 10
    /// with `device=`).
    pub worker_nice: u8,
    /// Batches prepared ahead of the consumer (`prefetch`), at least 1. Default 4.
    pub prefetch: usize,
    /// Start each epoch while the previous one's last batches are consumed
    /// (`overlap_epochs`). Default on.
    pub overlap_epochs: bool,
    /// What to do with a sample that cannot be read or decoded (`on_error`). Default:
    /// stop with an error.
    pub on_error: ErrorPolicy,
    /// A file listing skipped samples (`quarantine`), with `on_error` skip.
    pub quarantine: Option<PathBuf>,
    /// The loader's cache of encoded samples (`cache` size, `cache_policy`,
    /// `cache_epochs`, `cache_fill`). Default: none.
    pub cache: CacheConfig,
    /// The most bytes fetched ahead of prep (`readahead`), at least 1. Default 64 MiB.
    pub readahead: u64,
    /// Bytes for batch buffers, read-ahead and cache together (`memory`); `None`: no
    /// bound beyond each part's own.
    pub memory: Option<u64>,
    /// Bytes for decoded Parquet pages (or row groups), which sets how many each rank
    /// keeps open (`group_memory`); `None`: [`DEFAULT_GROUP_MEMORY`], or a quarter of
    /// `memory` where that is less. Part of `memory` where both are set.
    ///
    /// [`DEFAULT_GROUP_MEMORY`]: crate::storage::DEFAULT_GROUP_MEMORY
    pub group_memory: Option<u64>,
    /// Bytes of videos' frame indexes kept in memory and in a file beside the dataset's
    /// index (`frame_index_cache`), so that a new process scans no video already indexed;
    /// 0 keeps none. Default 64 MiB (the video pipeline's `DEFAULT_INDEX_CACHE`).
    pub frame_index_cache: u64,
    /// How reads treat the page cache (`read`). Default: cached.
    pub read: ReadMode,
    /// An emulated link in front of the storage (`throttle`); `None`: the storage as it is.
    pub throttle: Option<Link>,
    /// Which columns of a Parquet dataset hold samples and labels (`sample_column`,
    /// `label_column`). Default: found from the files.
    pub columns: Columns,
}

impl Default for LoaderSettings {
    fn default() -> LoaderSettings {
        LoaderSettings {
            pipeline: PipelineSetting::Preset("train".into()),
            image_size: None,
            dtype: DType::F32,
            layout: Layout::Chw,
            pad_to_largest: None,
            plan: PlanConfig::default(),
            threads: Threads::Auto,
            balance_ranks: None,
            // A ceiling: reads in flight follow the observed latency, from two (when the
            // thread whose read just finished waits for a core, the other keeps storage
            // busy; with one, a 30 MB/s link with a quarter of the dataset cached delivered
            // 15% less) up to this.
            fetch_threads: 128,
            adaptive_reads: true,
            adaptive_prep: true,
            worker_nice: 0,
            prefetch: 4,
            overlap_epochs: true,
            on_error: ErrorPolicy::Error,
            quarantine: None,
            cache: CacheConfig::default(),
            readahead: 64 << 20,
            memory: None,
            group_memory: None,
            frame_index_cache: 64 << 20,
            read: ReadMode::Cached,
            throttle: None,
            columns: Columns::default(),
        }
    }
}

/// The `pipeline` setting.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PipelineSetting {
    /// A preset by name: `train`, `val` (images, at `image_size`), `m5`, `melspec`,
    /// `m5-val`, `melspec-val` (audio).
    Preset(String),
    /// Operators (images' with the settings' `dtype` and `layout`).
    Operators(Operators),
}

impl std::fmt::Display for PipelineSetting {
    /// The preset's name, or the operators' [text form](crate::prep::notation).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PipelineSetting::Preset(name) => f.write_str(name),
            PipelineSetting::Operators(ops) => write!(f, "{ops}"),
        }
    }
}

impl std::str::FromStr for PipelineSetting {
    type Err = Error;

    /// A preset's name, or operators as Python writes a list of them.
    fn from_str(s: &str) -> Result<PipelineSetting> {
        if Operators::written_in(s) {
            return Ok(PipelineSetting::Operators(s.parse()?));
        }
        // The size is the image presets' business, checked when the settings resolve.
        Pipeline::preset(s, DEFAULT_IMAGE_SIZE)?;
        Ok(PipelineSetting::Preset(s.to_string()))
    }
}

/// The `threads` setting: how many workers prepare at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Threads {
    /// This process's share of the cores it may use ([`auto_threads`]), shared by the
    /// node's torchrun ranks.
    #[default]
    Auto,
    /// This many, whatever the machine.
    Count(usize),
}

impl Threads {
    /// The number of prep threads, on this machine.
    pub fn count(self) -> usize {
        match self {
            Threads::Auto => auto_threads(),
            Threads::Count(n) => n,
        }
    }
}

impl std::fmt::Display for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Threads::Auto => f.write_str("auto"),
            Threads::Count(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for Threads {
    type Err = Error;

    /// `auto` or a count.
    fn from_str(s: &str) -> Result<Threads> {
        match s.trim() {
            "auto" => Ok(Threads::Auto),
            n => n
                .parse()
                .map(Threads::Count)
                .map_err(|_| Error::Config(format!("threads={s:?}: give a count, or \"auto\""))),
        }
    }
}

/// Prep threads for `threads="auto"`: this process's share of the cores it may use, the
/// node's local ranks (torchrun's `LOCAL_WORLD_SIZE`) splitting them evenly; at least 1.
pub fn auto_threads() -> usize {
    (crate::env::usable_cores() / crate::env::local_ranks()).max(1)
}

impl LoaderSettings {
    /// Sets knob `name` (one of [`KNOBS`]) from its text form.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the knob and what it takes, for an unknown knob or a value
    /// it cannot read.
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut LoaderSettings> {
        let knob = SETTINGS.iter().find(|k| k.name == name).ok_or_else(|| {
            let known: Vec<&str> = SETTINGS.iter().map(|k| k.name).collect();
            Error::Config(format!(
                "unknown loader setting {name:?}: the settings are {}",
                known.join(", ")
            ))
        })?;
        (knob.set)(self, value.trim()).map_err(|e| {
            let why = match e {
                Error::Config(why) => why,
                other => other.to_string(),
            };
            // Say which knob, and what it takes, when the value's own parser did not.
            if why.contains(name) {
                Error::Config(why)
            } else {
                Error::Config(format!("{name}={value:?}: expected {} ({why})", knob.takes))
            }
        })?;
        Ok(self)
    }

    /// Settings from text pairs, each as [`LoaderSettings::set`] reads it, over the
    /// defaults.
    ///
    /// # Errors
    ///
    /// Those of [`LoaderSettings::set`].
    pub fn from_texts<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<LoaderSettings> {
        let mut settings = LoaderSettings::default();
        for (name, value) in pairs {
            settings.set(name, value)?;
        }
        Ok(settings)
    }

    /// The knobs that differ from their defaults, in their text forms, in the order of
    /// [`KNOBS`]: what [`LoaderSettings::from_texts`] reads back to these settings.
    pub fn texts(&self) -> Vec<(String, String)> {
        let default = LoaderSettings::default();
        SETTINGS
            .iter()
            .filter_map(|knob| {
                let value = (knob.get)(self)?;
                ((knob.get)(&default).as_ref() != Some(&value))
                    .then(|| (knob.name.to_string(), value))
            })
            .collect()
    }

    /// Whether the node's ranks share its prep threads (`balance_ranks`, or what
    /// `threads` implies).
    pub fn balances_ranks(&self) -> bool {
        self.balance_ranks
            .unwrap_or(matches!(self.threads, Threads::Auto))
    }

    /// The loader's configuration with these settings around `pipeline` (the settings'
    /// own pipeline is resolved by the builder, which knows what it is for).
    pub fn config_with(&self, pipeline: Pipeline) -> LoaderConfig {
        LoaderConfig {
            plan: self.plan.clone(),
            pipeline,
            prep_threads: self.threads.count(),
            fetch_threads: self.fetch_threads,
            adaptive_reads: self.adaptive_reads,
            adaptive_prep: self.adaptive_prep,
            worker_nice: self.worker_nice,
            prefetch: self.prefetch,
            on_error: self.on_error,
            cache: self.cache,
            readahead: self.readahead,
            locality: None,
            quarantine: self.quarantine.clone(),
            overlap_epochs: self.overlap_epochs,
            memory: self.memory,
            group_memory: self.group_memory,
            balance_ranks: self.balances_ranks(),
            local_ranks: None,
            arena: super::Arena::Private,
            page_lock: None,
            device_queue: None,
            mixup: None,
        }
    }
}

/// With the `serde` feature, settings are a map from knob names to their text forms, the
/// knobs that differ from their defaults (as [`LoaderSettings::texts`] gives them): a
/// configuration file in JSON, TOML or YAML reads as `{"batch_size": "256", "cache":
/// "35%"}`, and what is written reads back to the same settings.
#[cfg(feature = "serde")]
impl serde::Serialize for LoaderSettings {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let texts = self.texts();
        let mut map = serializer.serialize_map(Some(texts.len()))?;
        for (name, value) in &texts {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// Reads what [`Serialize`](serde::Serialize) writes; every value through
/// [`LoaderSettings::set`], so a bad one is refused with the knob's name.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for LoaderSettings {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let texts: std::collections::BTreeMap<String, String> =
            serde::Deserialize::deserialize(deserializer)?;
        // Knobs do not depend on each other's order.
        let pairs = texts.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        LoaderSettings::from_texts(pairs).map_err(serde::de::Error::custom)
    }
}

/// One setting's declaration: its name, the kind of value it takes, what it takes and
/// does in words, and its text form both ways. Everything else reads it: the text form
/// ([`LoaderSettings::set`]), the Python front's signature, conversion and stub, and the
/// docs' table of settings.
#[non_exhaustive]
pub struct Setting {
    /// Its name: the text form's, the Python keyword's and the command line's.
    pub name: &'static str,
    /// The kind of value it takes.
    pub kind: SettingKind,
    /// What it takes, in a few words (what an error shows).
    pub takes: &'static str,
    /// What it does (the docs' and Python's words), one paragraph of Markdown.
    pub doc: &'static str,
    set: fn(&mut LoaderSettings, &str) -> Result<()>,
    /// `None`: the setting is unset (an optional one).
    get: fn(&LoaderSettings) -> Option<String>,
}

impl Setting {
    /// Its default's text form; `None` for an optional setting, unset unless given.
    pub fn default_text(&self) -> Option<String> {
        (self.get)(&LoaderSettings::default())
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setting")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The kind of value a [`Setting`] takes: what a front converts to its text form, and
/// the type it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettingKind {
    /// A whole number, 0 or more.
    Count,
    /// `true` or `false`.
    Bool,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Bytes: a number, or a number with a unit (`64MiB`, `2GB`).
    Bytes,
    /// A size: bytes as [`SettingKind::Bytes`], or a share of the dataset (`35%`, `0.35`).
    Size,
    /// A file's path.
    Path,
    /// Text the setting reads itself (a column's name, `20,5`).
    Text,
    /// A count, or `auto`.
    Threads,
    /// A preset's name, or operators as Python writes a list of them.
    Pipeline,
}

/// `$field` of the settings, read with `FromStr` and written with `Display`.
macro_rules! setting {
    ($name:literal, $kind:expr, $takes:expr, $doc:expr, $($field:ident).+) => {
        Setting {
            name: $name,
            kind: $kind,
            takes: $takes,
            doc: $doc,
            set: |s, v| {
                s.$($field).+ = parse(v)?;
                Ok(())
            },
            get: |s| Some(s.$($field).+.to_string()),
        }
    };
    ($name:literal, $kind:expr, $takes:expr, $doc:expr, optional $($field:ident).+) => {
        Setting {
            name: $name,
            kind: $kind,
            takes: $takes,
            doc: $doc,
            set: |s, v| {
                s.$($field).+ = Some(parse(v)?);
                Ok(())
            },
            get: |s| s.$($field).+.as_ref().map(ToString::to_string),
        }
    };
}

use SettingKind::{Bool, Bytes, Choice, Count, Path, Size, Text};

/// Every setting, in the order the docs list them.
pub static SETTINGS: &[Setting] = &TABLE;

const TABLE: [Setting; SETTING_COUNT] = [
    setting!(
        "pipeline",
        SettingKind::Pipeline,
        "a preset: train, val (images), m5, melspec, m5-val, melspec-val (audio), or a list \
         of operators: [Resize(256), CenterCrop(224)] (nostall.ops and nostall.audio, as \
         Python writes them)",
        "What is done to each sample: a list of operators (`nostall.ops` for images, \
         `nostall.audio` for audio), a torchvision or timm recipe (translated), or a \
         preset. `\"train\"` is RandomResizedCrop(`image_size`), a random horizontal flip \
         and ImageNet's normalisation; `\"val\"` resizes the shorter side to \
         `image_size * 256/224`, centre-crops `image_size` and normalises. Audio presets: \
         `\"m5\"` (mono, 8 kHz, a random 32 000-sample crop), `\"melspec\"` (16 kHz, a \
         random 4 s crop, 64 log-mel bands), and `\"m5-val\"`, `\"melspec-val\"` with \
         centre crops. A list of pipelines makes several views of each sample.",
        pipeline
    ),
    setting!(
        "image_size",
        Count,
        "output side of the image presets, pixels",
        "Output height and width of the `\"train\"` and `\"val\"` presets (224 unset); an \
         operator list sets its sizes in its operators.",
        optional image_size
    ),
    setting!(
        "dtype",
        Choice(&["float32", "uint8"]),
        "images: float32 or uint8",
        "Images' element type: `\"float32\"` (normalised when the pipeline has \
         `Normalize`, else in [0, 1]) or `\"uint8\"` (0-255, a quarter of the bytes: \
         normalise on the GPU).",
        dtype
    ),
    setting!(
        "layout",
        Choice(&["CHW", "HWC"]),
        "images: CHW or HWC",
        "Images' dimensions: `\"CHW\"` (channels first, PyTorch's) or `\"HWC\"`.",
        layout
    ),
    setting!(
        "pad_to_largest",
        Count,
        "detection: the multiple a batch's largest image is rounded up to, 1 or more",
        "Detection with images of their own sizes (`RandomShortestSize`, \
         `DetrRandomResize` with `max_size`): each batch's images cut to its largest \
         height and width, each rounded up to this multiple (`1` as DETR's \
         `nested_tensor_from_tensor_list`, `32` as torchvision's detection models), the \
         boxes' masks too, and a `padding_mask` (bool `[batch, height, width]`, True on \
         the padding) in the batch. Unset: the `max_size` square canvas.",
        optional pad_to_largest
    ),
    setting!(
        "batch_size",
        Count,
        "samples per batch",
        "Samples per batch on this rank.",
        plan.batch_size
    ),
    setting!(
        "shuffle",
        Bool,
        "true or false",
        "Whether each epoch's order is a seeded permutation (else the dataset's order).",
        plan.shuffle
    ),
    setting!(
        "seed",
        Count,
        "an integer",
        "The seed of the order and of every random draw: a batch is a function of \
         (seed, epoch, rank, batch), whatever the thread count.",
        plan.seed
    ),
    setting!(
        "drop_last",
        Bool,
        "true or false",
        "Leave out the last, incomplete batch.",
        plan.drop_last
    ),
    setting!(
        "aug_repeats",
        Count,
        "repeated augmentation: each sample drawn this many times an epoch, 1 (off) to 16",
        "Repeated augmentation, as DeiT's `RASampler` (timm's `--aug-repeats`): each \
         sample is drawn into the epoch this many times (up to 16), its repeats dealt to \
         consecutive ranks, each with its own augmentation; an epoch on each rank is \
         `len // 256 * 256 // world_size` samples, as theirs.",
        plan.repeats
    ),
    setting!(
        "shard",
        Choice(&["pad", "drop"]),
        "pad or drop: how ranks share a dataset that does not divide evenly",
        "How an epoch that does not divide among the ranks is evened out: `\"pad\"` repeats \
         a few samples, `\"drop\"` leaves the permutation's tail out \
         (`DistributedSampler(drop_last=...)`).",
        plan.shard
    ),
    setting!(
        "rank",
        Count,
        "this process's rank",
        "This process's rank: it reads its shard, and every rank gets as many batches.",
        plan.rank
    ),
    setting!(
        "world_size",
        Count,
        "ranks in the job",
        "The number of ranks in the job.",
        plan.world
    ),
    setting!(
        "threads",
        SettingKind::Threads,
        "prep threads, or auto: the cores this process may use (its CPU affinity and \
         cgroup quota), shared by the node's torchrun ranks",
        "The most workers decoding and transforming at once, or `\"auto\"`: this process's \
         share of the cores it may use (its CPU affinity and cgroup quota, split among \
         the node's torchrun ranks). Fewer prepare while the training loop takes batches \
         slower than they could come.",
        threads
    ),
    setting!(
        "balance_ranks",
        Bool,
        "true or false: the node's torchrun ranks share its prep threads by the work each \
         has (default: with threads=auto)",
        "Whether a node's torchrun ranks share its prep threads by the work each has (CPU \
         time per byte times the bytes their plans read next), through a table in \
         `/dev/shm` only this user can open. Unset: on with `threads=\"auto\"`.",
        optional balance_ranks
    ),
    setting!(
        "fetch_threads",
        Count,
        "the most reads in flight (they follow the latency up to this)",
        "The most reads in flight. How many run follows the read latency (Little's law), \
         from 2 on local storage to dozens on object storage.",
        fetch_threads
    ),
    setting!(
        "adaptive_reads",
        Bool,
        "true or false: reads in flight follow the latency (false: always fetch_threads)",
        "Whether reads in flight follow the observed latency; off, `fetch_threads` are \
         always in flight (a static configuration, for comparison).",
        adaptive_reads
    ),
    setting!(
        "adaptive_prep",
        Bool,
        "true or false: fewer prep threads work when the consumer needs fewer",
        "Whether fewer prep threads work while the consumer needs fewer; off, all of them \
         always do.",
        adaptive_prep
    ),
    setting!(
        "worker_nice",
        Count,
        "0 to 19: how much lower the loader threads' CPU priority is than the consumer's \
         (a Linux nice increment)",
        "How far below the training thread's the loader threads' CPU priority is (a Linux \
         nice increment, 0 to 19), so that the thread launching the GPU's work is not \
         queued behind a decoder.",
        worker_nice
    ),
    setting!(
        "prefetch",
        Count,
        "batches prepared ahead",
        "Batches prepared ahead of the training loop.",
        prefetch
    ),
    setting!(
        "overlap_epochs",
        Bool,
        "true or false: start the next epoch while this one's last batches are consumed",
        "Start reading and preparing the next epoch while this one's last batches are \
         consumed, so that the loop does not wait at epoch boundaries (batch buffers then \
         reach twice `prefetch`). The first epoch is started as the loader is made.",
        overlap_epochs
    ),
    setting!(
        "on_error",
        Choice(&["error", "skip"]),
        "error or skip",
        "A bad sample raises `SampleError` (`\"error\"`), or is left out, its place filled \
         by the next sample, and counted by cause (`\"skip\"`).",
        on_error
    ),
    Setting {
        name: "quarantine",
        kind: Path,
        takes: "a file listing skipped samples (with on_error=skip)",
        doc: "With `on_error=\"skip\"`, a file to which every skipped sample is appended as \
              a JSON line (`epoch`, `sample_id`, `location`, `cause`, `detail`).",
        set: |s, v| {
            s.quarantine = Some(PathBuf::from(v));
            Ok(())
        },
        get: |s| {
            s.quarantine
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
        },
    },
    setting!(
        "cache",
        Size,
        "cache size: 35%, 0.35 or 512MiB",
        "Keep encoded samples in memory across epochs: `\"35%\"` or `0.35` of the dataset, \
         `\"2GiB\"`, or a number of bytes.",
        cache.capacity
    ),
    setting!(
        "cache_policy",
        Choice(&["none", "minio", "lookahead", "frequency", "lru"]),
        "none, minio, lookahead, frequency or lru",
        "`\"minio\"` never evicts (CoorDL); `\"lookahead\"` keeps the samples this rank \
         reads soonest in the next epoch; `\"frequency\"` (NoPFS) keeps those it reads most \
         often over `cache_epochs` epochs; `\"lru\"`.",
        cache.policy
    ),
    setting!(
        "cache_epochs",
        Count,
        "the epochs the job runs (for the frequency cache policy)",
        "The epochs the job runs, over which `cache_policy=\"frequency\"` counts reads.",
        cache.planned_epochs
    ),
    setting!(
        "cache_fill",
        Choice(&["background", "before"]),
        "background or before: when the frequency cache reads its placement",
        "When a `\"minio\"` or `\"frequency\"` cache is filled: as the epochs read \
         (`\"background\"`), or before the first read (`\"before\"`).",
        cache.fill
    ),
    Setting {
        name: "readahead",
        kind: Bytes,
        takes: "bytes fetched ahead at most: 64MiB",
        doc: "The most bytes fetched ahead of prep.",
        set: |s, v| {
            s.readahead = parse_bytes(v)?;
            Ok(())
        },
        get: |s| Some(s.readahead.to_string()),
    },
    Setting {
        name: "memory",
        kind: Bytes,
        takes: "bytes for batch buffers, read-ahead and cache together: 2GiB",
        doc: "Bytes for batch buffers, read-ahead and cache together: the pipeline is paid \
              first (read-ahead, then prefetch, shrunk to fit), decoded Parquet pages a \
              quarter (`group_memory`), the cache the rest; `loader.memory_plan` says how.",
        set: |s, v| {
            s.memory = Some(parse_bytes(v)?);
            Ok(())
        },
        get: |s| s.memory.map(|m| m.to_string()),
    },
    Setting {
        name: "group_memory",
        kind: Bytes,
        takes: "Parquet: bytes for decoded pages, which sets how many are open: 1GiB, or \
                a quarter of memory",
        doc: "Parquet: bytes for decoded pages (or row groups), which sets how many are \
              open at once: 1 GiB, or a quarter of `memory`.",
        set: |s, v| {
            s.group_memory = Some(parse_bytes(v)?);
            Ok(())
        },
        get: |s| s.group_memory.map(|m| m.to_string()),
    },
    Setting {
        name: "frame_index_cache",
        kind: Bytes,
        takes: "videos: bytes of frame indexes kept in memory and on disk beside the \
                dataset's index, 0 for none: 64MiB",
        doc: "Videos: the bytes of frame indexes (each video's packets' times and key \
              frames, 33 bytes a frame: 64 MiB holds some 6,700 ten-second clips) kept in \
              memory and in a file beside the dataset's index in the cache directory, so \
              that an index is made once per video, not in every process. Each is checked \
              against its video's length and CRC-32 at every read. `0` keeps none: every \
              read scans its video.",
        set: |s, v| {
            // A bare count is bytes, 0 and 1 too (which `parse_bytes` reads as shares).
            s.frame_index_cache = v.parse().or_else(|_| parse_bytes(v))?;
            Ok(())
        },
        get: |s| Some(s.frame_index_cache.to_string()),
    },
    setting!(
        "read",
        Choice(&["cached", "cold"]),
        "cached or cold (bypass the page cache)",
        "`\"cold\"` reads every sample around the page cache (O_DIRECT where the file \
         system allows): storage measured as it is, for benchmarks.",
        read
    ),
    setting!(
        "throttle",
        Text,
        "emulated storage: MB/s[,latency ms[,reads at once]], e.g. 20 or 20,5 \
         (MB/s may be unlimited)",
        "An emulated link in front of the storage: `\"MB/s[,latency ms[,reads at \
         once]]\"`, e.g. `\"20,5\"` (MB/s may be `unlimited`), to measure a slower storage.",
        optional throttle
    ),
    setting!(
        "sample_column",
        Text,
        "Parquet: the column of encoded samples (binary, or a struct with a bytes field)",
        "Parquet: the column of encoded samples (binary, or the `{bytes, path}` struct \
         `datasets` writes). Unset: the files' Hugging Face features say (the `Image` or \
         `Audio` feature), else a column named `image` (`audio`).",
        optional columns.sample
    ),
    setting!(
        "label_column",
        Text,
        "Parquet: the column of labels, auto (the ClassLabel feature or a column named \
         label) or none",
        "Parquet: the column of labels, `\"auto\"` (the `ClassLabel` feature, else a \
         column named `label`) or `\"none\"` (no labels).",
        columns.label
    ),
];

/// How many settings there are.
const SETTING_COUNT: usize = 35;

/// The settings [`LoaderSettings::set`] knows, with what each takes.
pub const KNOBS: [(&str, &str); SETTING_COUNT] = {
    let mut knobs = [("", ""); SETTING_COUNT];
    let mut i = 0;
    while i < TABLE.len() {
        knobs[i] = (TABLE[i].name, TABLE[i].takes);
        i += 1;
    }
    knobs
};

/// `value` as a knob's type; the caller says which knob.
fn parse<T: std::str::FromStr>(value: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    value
        .parse()
        .map_err(|e: T::Err| Error::Config(e.to_string()))
}

/// `value` as a number of bytes (`64MiB`, `2GB`, `1000000`), as the `readahead` and
/// `memory` knobs read it.
///
/// # Errors
///
/// [`Error::Config`] for anything else, a share (`35%`) included.
pub fn parse_bytes(value: &str) -> Result<u64> {
    match parse(value)? {
        Capacity::Bytes(bytes) => Ok(bytes),
        Capacity::Fraction(_) => Err(Error::Config(
            "give bytes (64MiB, 2GiB), not a share".into(),
        )),
    }
}

impl std::fmt::Display for Link {
    /// `MB/s[,latency ms[,reads at once]]`, what its `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.bandwidth {
            Some(rate) => write!(f, "{:?}", rate / 1e6)?,
            None => f.write_str("unlimited")?,
        }
        write!(f, ",{:?}", self.latency.as_secs_f64() * 1e3)?;
        if let Some(n) = self.concurrency {
            write!(f, ",{n}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Link {
    type Err = Error;

    /// `MB/s[,latency ms[,reads at once]]`: `20`, `20,5`, `unlimited,5,4`.
    fn from_str(s: &str) -> Result<Link> {
        let bad = || {
            Error::Config(format!(
                "throttle={s:?}: expected MB/s[,latency ms[,reads at once]], e.g. 20,5"
            ))
        };
        let mut parts = s.split(',').map(str::trim);
        let rate = match parts.next().ok_or_else(bad)? {
            "unlimited" => None,
            rate => Some(rate.parse::<f64>().map_err(|_| bad())?),
        };
        let latency_ms: f64 = parts
            .next()
            .map_or(Ok(0.0), str::parse)
            .map_err(|_| bad())?;
        let concurrency = parts
            .next()
            .map(str::parse::<usize>)
            .transpose()
            .map_err(|_| bad())?;
        let rate_ok = rate.is_none_or(|r| r > 0.0 && r.is_finite());
        if parts.next().is_some()
            || !rate_ok
            || !(latency_ms >= 0.0 && latency_ms.is_finite())
            || concurrency == Some(0)
        {
            return Err(bad());
        }
        Ok(Link {
            bandwidth: rate.map(|r| r * 1e6),
            latency: Duration::from_secs_f64(latency_ms / 1e3),
            concurrency,
        })
    }
}

#[cfg(test)]
mod tests;
