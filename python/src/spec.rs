//! What `nostall.Loader` (python/nostall/_loader.py) resolved from the user's arguments:
//! one typed [`Spec`], which the extension's `Loader` constructor takes whole.
//!
//! The front decides what the user handed over (a location, a list of them, a Dataset, a
//! `datasets.Dataset` read natively), refuses the combinations that cannot work, and
//! writes the engine's settings in their text forms, each read here by its declaration
//! ([`nostall::loader::SETTINGS`]): one conversion, shared with configuration files,
//! the command line and the node agent. What has no text form (operators with the
//! user's functions, the user's objects) comes as objects.

use std::sync::Arc;

use nostall::cache::Capacity;
use nostall::env::Distributed;
use nostall::loader::{LoaderBuilder, LoaderSettings};
use nostall_agent::Share;
use pyo3::prelude::*;

use crate::convert::PipelineArg;
use crate::errors::{config_error, raise};
use crate::mixup::Mixup;
use crate::python_ops::PythonOps;
use crate::store::NodeStore;
use crate::user_code;

/// A loader as the front resolved it (the attributes of `nostall._loader.Spec`).
#[derive(FromPyObject)]
pub(crate) struct Spec {
    /// The dataset's location; several joined by ` + ` for a mixture; a Dataset object's
    /// class name.
    pub location: String,
    /// A mixture's datasets with their weights (`None`: by size); empty for one dataset.
    pub mixture: Vec<(String, Option<f64>)>,
    /// The engine's settings the user gave, in their text forms.
    pub settings: Vec<(String, String)>,
    /// `pipeline=` as given, when given: a preset's name, operators, views or a recipe.
    pub pipeline: Option<Py<PyAny>>,
    /// Whether `ops.Python` get torch tensors (else NumPy arrays).
    pub torch_ops: bool,
    /// The columns of a `datasets.Dataset` read natively (`nostall._hf.arrow_columns`).
    pub arrow: Option<Py<PyAny>>,
    /// A Dataset object whose `__getitem__` runs as the user's code.
    pub dataset: Option<Py<PyAny>>,
    /// How the user's code runs (`workers=`).
    pub workers: Option<user_code::Mode>,
    /// A Dataset's workers' `worker_init_fn`.
    pub worker_init_fn: Option<Py<PyAny>>,
    /// The bound on one call of the user's code, seconds.
    pub timeout: Option<f64>,
    /// Each node's part of a cache partitioned across the job's nodes.
    pub node_cache: Option<String>,
    /// Where the nodes of that cache meet: torch.distributed's store, when the job has
    /// one; else nostall's rendezvous at `MASTER_ADDR`.
    pub node_store: Option<NodeStore>,
    /// `"auto"`, `"torch"`, `"numpy"` or `"dlpack"`.
    pub output: String,
    /// The CUDA device batches are handed over on (`device=`).
    pub device: Option<String>,
    /// Where JPEGs are decoded with a device (`decode=`).
    pub decode: String,
    /// The smallest JPEG `decode="auto"` sends to the device, pixels.
    pub gpu_decode_min_pixels: u64,
    /// `share=`: the node agent's group.
    pub share: Option<String>,
    /// MixUp and CutMix of each batch (`mix=`).
    pub mix: Option<Py<Mixup>>,
    /// The user's function on each batch, wrapped (`nostall._batch.BatchTransform`).
    pub batch_transform: Option<Py<PyAny>>,
    /// Whether consecutive views of one shape come as one tensor.
    pub stack_views: bool,
    /// `fields=`, converted where it is used (so that its own errors reach the user).
    pub fields: Option<Py<PyAny>>,
    /// Where live metrics are served (`metrics_addr=`).
    pub metrics_addr: Option<String>,
}

impl Spec {
    /// The node agent's group asked for, if any.
    pub(crate) fn share(&self, py: Python<'_>) -> PyResult<Share> {
        match &self.share {
            None => Ok(Share::Off),
            Some(text) => text.parse().map_err(|e: String| config_error(py, e)),
        }
    }

    /// The loader the settings describe, its pipeline's `ops.Python` joining `python`,
    /// and the ranks it reads as: every setting checked together, before anything is
    /// opened.
    pub(crate) fn builder(
        &self,
        py: Python<'_>,
        python: &Arc<PythonOps>,
    ) -> PyResult<(LoaderBuilder, Distributed)> {
        let given = |name: &str| self.settings.iter().any(|(n, _)| n == name);
        let pipeline = self.pipeline.as_ref().map(|p| p.bind(py));
        let mut settings = settings_from(py, &self.settings, pipeline, python)?;
        let rank = given("rank").then_some(settings.plan.rank);
        let world = given("world_size").then_some(settings.plan.world);
        let dist = Distributed::resolve(rank, world).map_err(|e| raise(py, e))?;
        (settings.plan.rank, settings.plan.world) = (dist.rank, dist.world);
        let mut builder = LoaderBuilder::with_settings(self.location.clone(), settings);
        builder.config().map_err(|e| raise(py, e))?;
        if !self.mixture.is_empty() {
            builder.mixture(self.mixture.clone());
        }
        Ok((builder, dist))
    }

    /// The size of each node's part of a partitioned cache; `None` for any other.
    pub(crate) fn node_capacity(&self, py: Python<'_>) -> PyResult<Option<Capacity>> {
        self.node_cache
            .as_deref()
            .map(|size| size.parse().map_err(|e: nostall::Error| raise(py, e)))
            .transpose()
    }
}

/// The settings `texts` give over the defaults, with `pipeline=` (its `ops.Python`
/// joining `python`).
pub(crate) fn settings_from(
    py: Python<'_>,
    texts: &[(String, String)],
    pipeline: Option<&Bound<'_, PyAny>>,
    python: &Arc<PythonOps>,
) -> PyResult<LoaderSettings> {
    let mut settings = LoaderSettings::default();
    for (name, text) in texts {
        settings.set(name, text).map_err(|e| raise(py, e))?;
    }
    if let Some(pipeline) = pipeline {
        settings.pipeline = PipelineArg::with_python(pipeline, python)?.0;
    }
    Ok(settings)
}

/// One engine setting's declaration as the front reads it: name, kind (`count`, `bool`,
/// `choice`, `bytes`, `size`, `path`, `text`, `threads`, `pipeline`), the words of a
/// choice, its default's text form (`None`: unset unless given), what it takes, its doc.
type SettingRow = (
    &'static str,
    &'static str,
    Vec<&'static str>,
    Option<String>,
    &'static str,
    &'static str,
);

/// The engine's loader settings, for `nostall/_loader.py` to make `Loader`'s signature,
/// conversion and docs from.
#[pyfunction]
#[pyo3(name = "_loader_settings")]
pub(crate) fn loader_settings() -> Vec<SettingRow> {
    use nostall::loader::{SettingKind, SETTINGS};

    SETTINGS
        .iter()
        .map(|s| {
            let (kind, words) = match s.kind {
                SettingKind::Count => ("count", Vec::new()),
                SettingKind::Bool => ("bool", Vec::new()),
                SettingKind::Choice(words) => ("choice", words.to_vec()),
                SettingKind::Bytes => ("bytes", Vec::new()),
                SettingKind::Size => ("size", Vec::new()),
                SettingKind::Path => ("path", Vec::new()),
                SettingKind::Threads => ("threads", Vec::new()),
                SettingKind::Pipeline => ("pipeline", Vec::new()),
                _ => ("text", Vec::new()),
            };
            (s.name, kind, words, s.default_text(), s.takes, s.doc)
        })
        .collect()
}
