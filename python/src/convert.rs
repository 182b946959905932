//! Python's arguments as the engine's types, each conversion once: `Loader` and `analyze`
//! take these in their signatures and hand the engine typed [`LoaderSettings`], so no
//! binding formats a number for the engine to parse again, and no default is written
//! twice (an argument left out keeps the engine's default).

use std::fmt::Display;
use std::str::FromStr;
use std::sync::Arc;

use nostall::cache::{CacheFill, CachePolicy, Capacity};
use nostall::dataset::LabelColumn;
use nostall::env::Distributed;
use nostall::pipeline::{LoaderBuilder, LoaderSettings, PipelineSetting, Threads};
use nostall::prep::image::Layout;
use nostall::prep::DType;
use nostall::storage::ReadMode;
use nostall::ErrorPolicy;
use nostall::Shard;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyString};

use crate::errors::{config_error, raise};
use crate::ops;
use crate::python_ops::PythonOps;

/// A setting Python gives as text the engine reads (`dtype="uint8"`, `read="cold"`): a
/// `ConfigError` with the engine's words when it cannot.
pub(crate) struct Text<T>(pub T);

impl<'py, T: FromStr> FromPyObject<'_, 'py> for Text<T>
where
    T::Err: Display,
{
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Text<T>> {
        let text: String = obj.extract()?;
        text.parse()
            .map(Text)
            .map_err(|e: T::Err| config_error(obj.py(), e.to_string()))
    }
}

/// `Loader(source)`: one dataset's location (a `str` or path), or several, for a mixture
/// (a list or tuple of them).
pub(crate) enum SourceArg {
    One(String),
    /// Several (which only `Loader` takes, through the front).
    Many,
    /// A map-style dataset: an object with `__getitem__` and `__len__` (not a path).
    Dataset(Py<PyAny>),
}

impl<'py> FromPyObject<'_, 'py> for SourceArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<SourceArg> {
        let location = |o: &Bound<'py, PyAny>| -> PyResult<String> {
            Ok(o.extract::<std::path::PathBuf>()?
                .to_string_lossy()
                .into_owned())
        };
        if obj.is_instance_of::<pyo3::types::PyList>()
            || obj.is_instance_of::<pyo3::types::PyTuple>()
        {
            return Ok(SourceArg::Many);
        }
        let is_path = obj.is_instance_of::<pyo3::types::PyString>()
            || obj.hasattr("__fspath__")?
            || obj.is_instance_of::<pyo3::types::PyBytes>();
        if !is_path && obj.hasattr("__getitem__")? && obj.hasattr("__len__")? {
            return Ok(SourceArg::Dataset(obj.to_owned().unbind()));
        }
        location(&obj.to_owned()).map(SourceArg::One)
    }
}

/// `threads=`: a count, or `"auto"`.
pub(crate) struct ThreadsArg(pub Threads);

impl<'py> FromPyObject<'_, 'py> for ThreadsArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<ThreadsArg> {
        if let Ok(n) = obj.extract::<usize>() {
            return Ok(ThreadsArg(Threads::Count(n)));
        }
        obj.extract::<Text<Threads>>().map(|t| ThreadsArg(t.0))
    }
}

/// `Tokenizer(tokenizer)`: a `tokenizer.json`'s path, or a tokenizer object that
/// `nostall._tokenizer` turns into that file's JSON (a `tokenizers.Tokenizer`, OpenCLIP's).
pub(crate) enum TokenizerSource {
    Path(std::path::PathBuf),
    Json(String),
}

impl<'py> FromPyObject<'_, 'py> for TokenizerSource {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<TokenizerSource> {
        if let Ok(path) = obj.extract::<std::path::PathBuf>() {
            return Ok(TokenizerSource::Path(path));
        }
        let py = obj.py();
        let json = crate::front::front(py)?
            .tokenizer
            .bind(py)
            .call_method1("tokenizer_json", (obj,))?;
        Ok(TokenizerSource::Json(json.extract()?))
    }
}

/// A tokenizer's texts: a list of `str`, or of `bytes` holding UTF-8 (a WebDataset `txt`
/// member as it is read). A text that is not valid Unicode (bytes that are not UTF-8, a
/// `str` with a lone surrogate) is kept as its cause, for the error that names it.
pub(crate) struct Texts(pub Vec<Result<String, nostall::Cause>>);

impl<'py> FromPyObject<'_, 'py> for Texts {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Texts> {
        let items: Vec<Bound<'py, PyAny>> = obj.extract()?;
        let not_unicode = |what: String| nostall::Cause::Corrupt(format!("a text that is {what}"));
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                if let Ok(text) = item.cast::<PyString>() {
                    return Ok(text
                        .to_str()
                        .map(str::to_owned)
                        .map_err(|_| not_unicode("not valid Unicode (a lone surrogate)".into())));
                }
                if let Ok(bytes) = item.cast::<PyBytes>() {
                    return Ok(std::str::from_utf8(bytes.as_bytes())
                        .map(str::to_owned)
                        .map_err(|e| not_unicode(format!("not UTF-8 ({e})"))));
                }
                Err(PyTypeError::new_err(format!(
                    "texts[{i}]: give str or UTF-8 bytes, not {}",
                    item.get_type().name()?
                )))
            })
            .collect::<PyResult<_>>()
            .map(Texts)
    }
}

/// `memory=`: bytes, or text (`"2GiB"`).
pub(crate) struct Bytes(pub u64);

impl<'py> FromPyObject<'_, 'py> for Bytes {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Bytes> {
        if let Ok(bytes) = obj.extract::<u64>() {
            return Ok(Bytes(bytes));
        }
        let text: String = obj.extract()?;
        nostall::pipeline::parse_bytes(&text)
            .map(Bytes)
            .map_err(|e| raise(obj.py(), e))
    }
}

/// `cache=` (and `node_cache=`): a size, as text (`"35%"`, `"2GiB"`), a fraction of the
/// dataset (0.35) or bytes.
pub(crate) struct CacheSize(pub Capacity);

impl<'py> FromPyObject<'_, 'py> for CacheSize {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<CacheSize> {
        let py = obj.py();
        let takes = || {
            PyTypeError::new_err(
                "cache takes a size (\"35%\", \"2GiB\", 0.35 or a number of bytes) or None",
            )
        };
        if let Ok(text) = obj.extract::<String>() {
            return text
                .parse::<Capacity>()
                .map(CacheSize)
                .map_err(|e| raise(py, e));
        }
        if obj.is_instance_of::<PyBool>() {
            return Err(takes());
        }
        if let Ok(bytes) = obj.extract::<u64>() {
            return Ok(CacheSize(Capacity::Bytes(bytes)));
        }
        match obj.extract::<f64>() {
            Ok(fraction) if (0.0..=1.0).contains(&fraction) => {
                Ok(CacheSize(Capacity::Fraction(fraction)))
            }
            Ok(fraction) => Err(config_error(
                py,
                format!("cache={fraction}: a fraction of the dataset must lie in 0..1"),
            )),
            Err(_) => Err(takes()),
        }
    }
}

/// `cache_policy=`: a policy of the loader's own cache, or `"partitioned"`, a cache
/// partitioned across the job's nodes.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum CacheChoice {
    /// The loader's own cache.
    Loader(CachePolicy),
    /// Each node holds a part (the peer layer).
    Partitioned,
}

impl<'py> FromPyObject<'_, 'py> for CacheChoice {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<CacheChoice> {
        let text: String = obj.extract()?;
        if text == "partitioned" {
            return Ok(CacheChoice::Partitioned);
        }
        text.parse()
            .map(CacheChoice::Loader)
            .map_err(|e| raise(obj.py(), e))
    }
}

/// `pipeline=`: a preset's name, or a list of `nostall.ops` or `nostall.audio` operators
/// (with `nostall.ops.Python` among them), or a list of such lists (views). A recipe of
/// torchvision's or timm's is translated by the front (`nostall._translate.resolve`).
pub(crate) struct PipelineArg(pub PipelineSetting);

impl PipelineArg {
    /// `obj` as a pipeline, its `ops.Python` joining `python`.
    pub(crate) fn with_python(
        obj: &Bound<'_, PyAny>,
        python: &Arc<PythonOps>,
    ) -> PyResult<PipelineArg> {
        if let Ok(name) = obj.extract::<String>() {
            return name
                .parse()
                .map(PipelineArg)
                .map_err(|e| raise(obj.py(), e));
        }
        let operators = ops::from_python(obj, python)?;
        Ok(PipelineArg(PipelineSetting::Operators(operators)))
    }
}

impl<'py> FromPyObject<'_, 'py> for PipelineArg {
    type Error = PyErr;

    /// With torch tensors for `ops.Python` where torch is installed, run in the threads.
    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<PipelineArg> {
        let torch = obj.py().import("torch").is_ok();
        PipelineArg::with_python(&obj.to_owned(), &PythonOps::new(torch))
    }
}

/// The keyword arguments that configure a loader, converted; `None`: left out (the
/// engine's default). `Loader` and `analyze` take them the same way.
#[derive(Default)]
pub(crate) struct ConfigArgs {
    pub batch_size: Option<usize>,
    pub pipeline: Option<PipelineArg>,
    pub image_size: Option<u32>,
    pub dtype: Option<Text<DType>>,
    pub layout: Option<Text<Layout>>,
    pub shuffle: Option<bool>,
    pub seed: Option<u64>,
    pub drop_last: Option<bool>,
    pub shard: Option<Text<Shard>>,
    pub aug_repeats: Option<u32>,
    pub threads: Option<ThreadsArg>,
    pub balance_ranks: Option<bool>,
    pub fetch_threads: Option<usize>,
    pub prefetch: Option<usize>,
    pub worker_nice: Option<u8>,
    pub overlap_epochs: Option<bool>,
    pub cache: Option<CacheSize>,
    pub cache_policy: Option<CacheChoice>,
    pub cache_epochs: Option<u64>,
    pub cache_fill: Option<Text<CacheFill>>,
    pub memory: Option<Bytes>,
    pub group_memory: Option<Bytes>,
    pub on_error: Option<Text<ErrorPolicy>>,
    pub quarantine: Option<std::path::PathBuf>,
    pub read: Option<Text<ReadMode>>,
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub sample_column: Option<String>,
    pub label_column: Option<Text<LabelColumn>>,
}

impl ConfigArgs {
    /// The settings the arguments give, over the engine's defaults.
    pub(crate) fn settings(&self, dist: Distributed) -> LoaderSettings {
        let mut s = LoaderSettings::default();
        if let Some(p) = &self.pipeline {
            s.pipeline = p.0.clone();
        }
        s.image_size = self.image_size;
        let plan = &mut s.plan;
        plan.rank = dist.rank;
        plan.world = dist.world;
        set(&mut plan.batch_size, self.batch_size);
        set(&mut plan.shuffle, self.shuffle);
        set(&mut plan.seed, self.seed);
        set(&mut plan.drop_last, self.drop_last);
        set(&mut plan.shard, self.shard.as_ref().map(|t| t.0));
        set(&mut plan.repeats, self.aug_repeats);
        set(&mut s.dtype, self.dtype.as_ref().map(|t| t.0));
        set(&mut s.layout, self.layout.as_ref().map(|t| t.0));
        set(&mut s.threads, self.threads.as_ref().map(|t| t.0));
        s.balance_ranks = self.balance_ranks;
        set(&mut s.fetch_threads, self.fetch_threads);
        set(&mut s.prefetch, self.prefetch);
        set(&mut s.worker_nice, self.worker_nice);
        set(&mut s.overlap_epochs, self.overlap_epochs);
        set(&mut s.on_error, self.on_error.as_ref().map(|t| t.0));
        s.quarantine.clone_from(&self.quarantine);
        set(&mut s.read, self.read.as_ref().map(|t| t.0));
        s.columns.sample.clone_from(&self.sample_column);
        set(
            &mut s.columns.label,
            self.label_column.as_ref().map(|t| t.0.clone()),
        );
        s.memory = self.memory.as_ref().map(|b| b.0);
        s.group_memory = self.group_memory.as_ref().map(|b| b.0);
        set(&mut s.cache.planned_epochs, self.cache_epochs);
        set(&mut s.cache.fill, self.cache_fill.as_ref().map(|t| t.0));
        // Python's `cache=` turns the loader's cache on (minio unless a policy is given);
        // a partitioned cache is the node's, not the loader's.
        if let (Some(size), None | Some(CacheChoice::Loader(_))) = (&self.cache, self.cache_policy)
        {
            s.cache.capacity = size.0;
            s.cache.policy = match self.cache_policy {
                Some(CacheChoice::Loader(policy)) => policy,
                _ => CachePolicy::Minio,
            };
        }
        s
    }

    /// The loader the arguments describe, over `location`, and the ranks it reads as:
    /// every setting checked together, before anything is opened.
    pub(crate) fn builder(
        &self,
        py: Python<'_>,
        location: String,
    ) -> PyResult<(LoaderBuilder, Distributed)> {
        let dist = Distributed::resolve(self.rank, self.world_size).map_err(|e| raise(py, e))?;
        let builder = LoaderBuilder::with_settings(location, self.settings(dist));
        builder.config().map_err(|e| raise(py, e))?;
        Ok((builder, dist))
    }

    /// Whether the cache is partitioned across the job's nodes rather than this process's
    /// own.
    pub(crate) fn partitioned(&self) -> bool {
        self.cache_policy == Some(CacheChoice::Partitioned)
    }
}

/// `value`, where given, in place of `field`'s default.
fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}
