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
//! use nostall::pipeline::{LoaderBuilder, LoaderSettings, Threads};
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
    /// The preset's name, or the operators' [text form](crate::prep::text).
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

impl LoaderSettings {
    /// Sets knob `name` (one of [`KNOBS`]) from its text form.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the knob and what it takes, for an unknown knob or a value
    /// it cannot read.
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut LoaderSettings> {
        let knob = TABLE.iter().find(|k| k.name == name).ok_or_else(|| {
            let known: Vec<&str> = TABLE.iter().map(|k| k.name).collect();
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
        TABLE
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
            mix: None,
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

/// One knob: its name, what it takes, and its text form both ways.
struct Knob {
    name: &'static str,
    takes: &'static str,
    set: fn(&mut LoaderSettings, &str) -> Result<()>,
    /// `None`: the knob is unset (an optional one).
    get: fn(&LoaderSettings) -> Option<String>,
}

/// `$field` of the settings, read with `FromStr` and written with `Display`.
macro_rules! knob {
    ($name:literal, $takes:expr, $($field:ident).+) => {
        Knob {
            name: $name,
            takes: $takes,
            set: |s, v| {
                s.$($field).+ = parse(v)?;
                Ok(())
            },
            get: |s| Some(s.$($field).+.to_string()),
        }
    };
    ($name:literal, $takes:expr, optional $($field:ident).+) => {
        Knob {
            name: $name,
            takes: $takes,
            set: |s, v| {
                s.$($field).+ = Some(parse(v)?);
                Ok(())
            },
            get: |s| s.$($field).+.as_ref().map(ToString::to_string),
        }
    };
}

/// Every knob, in the order [`KNOBS`] lists them.
const TABLE: [Knob; KNOB_COUNT] = [
    knob!(
        "pipeline",
        "a preset: train, val (images), m5, melspec, m5-val, melspec-val (audio), or a list \
         of operators: [Resize(256), CenterCrop(224)] (nostall.ops and nostall.audio, as \
         Python writes them)",
        pipeline
    ),
    knob!(
        "image_size",
        "output side of the image presets, pixels",
        optional image_size
    ),
    knob!("dtype", "images: float32 or uint8", dtype),
    knob!("layout", "images: CHW or HWC", layout),
    knob!("batch_size", "samples per batch", plan.batch_size),
    knob!("shuffle", "true or false", plan.shuffle),
    knob!("seed", "an integer", plan.seed),
    knob!("drop_last", "true or false", plan.drop_last),
    knob!(
        "aug_repeats",
        "repeated augmentation: each sample drawn this many times an epoch, 1 (off) to 16",
        plan.repeats
    ),
    knob!(
        "shard",
        "pad or drop: how ranks share a dataset that does not divide evenly",
        plan.shard
    ),
    knob!("rank", "this process's rank", plan.rank),
    knob!("world_size", "ranks in the job", plan.world),
    knob!(
        "threads",
        "prep threads, or auto: the cores this process may use (its CPU affinity and \
         cgroup quota), shared by the node's torchrun ranks",
        threads
    ),
    knob!(
        "balance_ranks",
        "true or false: the node's torchrun ranks share its prep threads by the work each \
         has (default: with threads=auto)",
        optional balance_ranks
    ),
    knob!(
        "fetch_threads",
        "the most reads in flight (they follow the latency up to this)",
        fetch_threads
    ),
    knob!(
        "adaptive_reads",
        "true or false: reads in flight follow the latency (false: always fetch_threads)",
        adaptive_reads
    ),
    knob!(
        "adaptive_prep",
        "true or false: fewer prep threads work when the consumer needs fewer",
        adaptive_prep
    ),
    knob!(
        "worker_nice",
        "0 to 19: how much lower the loader threads' CPU priority is than the consumer's \
         (a Linux nice increment)",
        worker_nice
    ),
    knob!("prefetch", "batches prepared ahead", prefetch),
    knob!(
        "overlap_epochs",
        "true or false: start the next epoch while this one's last batches are consumed",
        overlap_epochs
    ),
    knob!("on_error", "error or skip", on_error),
    Knob {
        name: "quarantine",
        takes: "a file listing skipped samples (with on_error=skip)",
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
    knob!("cache", "cache size: 35%, 0.35 or 512MiB", cache.capacity),
    knob!(
        "cache_policy",
        "none, minio, lookahead, frequency or lru",
        cache.policy
    ),
    knob!(
        "cache_epochs",
        "the epochs the job runs (for the frequency cache policy)",
        cache.planned_epochs
    ),
    knob!(
        "cache_fill",
        "background or before: when the frequency cache reads its placement",
        cache.fill
    ),
    Knob {
        name: "readahead",
        takes: "bytes fetched ahead at most: 64MiB",
        set: |s, v| {
            s.readahead = parse_bytes(v)?;
            Ok(())
        },
        get: |s| Some(s.readahead.to_string()),
    },
    Knob {
        name: "memory",
        takes: "bytes for batch buffers, read-ahead and cache together: 2GiB",
        set: |s, v| {
            s.memory = Some(parse_bytes(v)?);
            Ok(())
        },
        get: |s| s.memory.map(|m| m.to_string()),
    },
    Knob {
        name: "group_memory",
        takes: "Parquet: bytes for decoded pages, which sets how many are open: 1GiB, or \
                a quarter of memory",
        set: |s, v| {
            s.group_memory = Some(parse_bytes(v)?);
            Ok(())
        },
        get: |s| s.group_memory.map(|m| m.to_string()),
    },
    knob!("read", "cached or cold (bypass the page cache)", read),
    knob!(
        "throttle",
        "emulated storage: MB/s[,latency ms[,reads at once]], e.g. 20 or 20,5 \
         (MB/s may be unlimited)",
        optional throttle
    ),
    knob!(
        "sample_column",
        "Parquet: the column of encoded samples (binary, or a struct with a bytes field)",
        optional columns.sample
    ),
    knob!(
        "label_column",
        "Parquet: the column of labels, auto (the ClassLabel feature or a column named \
         label) or none",
        columns.label
    ),
];

/// How many knobs there are.
const KNOB_COUNT: usize = 33;

/// The knobs [`LoaderSettings::set`] knows, with what each takes.
pub const KNOBS: [(&str, &str); KNOB_COUNT] = {
    let mut knobs = [("", ""); KNOB_COUNT];
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
