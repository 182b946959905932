//! `nostall._nostall._analyze`: the engine's DS-Analyzer ([`nostall_analyze`]) for
//! `nostall.analyze` (python/nostall/_analyze.py), which documents the arguments, gives
//! their defaults, times the user's training step and wraps the report.
//!
//! The loader's settings come as `Loader`'s do, in their text forms from the front
//! ([`spec::settings_from`]), for one rank reading the whole dataset; the analysis runs
//! with the GIL released, which is taken again only to call `progress` and to time the
//! model.

use std::time::Duration;

use nostall::cache::Capacity;
use nostall::storage::{Link, ReadMode};
use nostall_analyze::{
    self as analyze, ModelRate, Options, RemoteCosts, Report, RunLength, Subject,
};
use pyo3::prelude::*;

use nostall::loader::LoaderBuilder;

use crate::errors::{config_error, raise};
use crate::fields::FieldsArg;
use crate::python_ops::PythonOps;
use crate::{arrow, spec, user_code};

/// [`analyze::positive`], raised as Python's `ConfigError`.
fn positive(py: Python<'_>, name: &str, value: f64, zero_ok: bool) -> PyResult<f64> {
    analyze::positive(name, value, zero_ok).map_err(|e| raise(py, e))
}

/// G as the arguments give it, before the dataset is opened: `Err` for a bad value,
/// `Ok(None)` when the training step is to be timed.
fn model_from_args(
    py: Python<'_>,
    model_rate: Option<f64>,
    step_ms: Option<f64>,
    timed: bool,
    batch_size: usize,
) -> PyResult<Option<ModelRate>> {
    match (model_rate, step_ms, timed) {
        (None, None, false) => Ok(Some(ModelRate::none())),
        (Some(rate), None, false) => ModelRate::given(rate).map(Some).map_err(|e| raise(py, e)),
        (None, Some(step_ms), false) => ModelRate::simulated(step_ms, batch_size)
            .map(Some)
            .map_err(|e| raise(py, e)),
        (None, None, true) => Ok(None),
        _ => Err(config_error(
            py,
            "give the model one way: model (a training step to time), model_rate (images/s) \
             or step_ms (a simulated model), not several"
                .into(),
        )),
    }
}

/// Runs `nostall analyze` on `source` and returns the report as `(json, text, html)`.
///
/// Every argument is keyword-only and required: `nostall.analyze` documents them and
/// gives the defaults. `time_model`, when given, is called once the dataset is open as
/// `time_model(shape, dtype, num_classes)` with the shape of a batch of images (e.g.
/// `[64, 3, 224, 224]`), its element type (`"float32"` or `"uint8"`) and the dataset's
/// number of classes (at least 1), and returns `(images_per_s, what_was_timed)`.
/// `rates` is the JSON text of an earlier report whose rates to reuse. `progress` is
/// called with each line of progress.
#[pyfunction(name = "_analyze")]
#[pyo3(signature = (
    location, *, dataset, settings, pipeline, model_rate, step_ms, time_model, budget,
    run_seconds, run_epochs, max_threads, warm, throttle_mbps, latency_ms, rates,
    node_cache, network_gbps, progress, fields=None, arrow=None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    py: Python<'_>,
    location: String,
    dataset: Option<Py<PyAny>>,
    settings: Vec<(String, String)>,
    pipeline: Option<Bound<'_, PyAny>>,
    model_rate: Option<f64>,
    step_ms: Option<f64>,
    time_model: Option<Bound<'_, PyAny>>,
    budget: f64,
    run_seconds: f64,
    run_epochs: u64,
    max_threads: Option<usize>,
    warm: bool,
    throttle_mbps: Option<f64>,
    latency_ms: Option<f64>,
    rates: Option<String>,
    node_cache: Option<String>,
    network_gbps: f64,
    progress: Option<Py<PyAny>>,
    fields: Option<FieldsArg>,
    arrow: Option<Py<PyAny>>,
) -> PyResult<(String, String, String)> {
    // Every argument is checked before the dataset is opened or anything measured.
    // Its `ops.Python` run in the threads, on torch tensors where torch is installed.
    let python = PythonOps::new(py.import("torch").is_ok());
    let settings = spec::settings_from(py, &settings, pipeline.as_ref(), &python)?;
    let (batch_size, seed) = (settings.plan.batch_size, settings.plan.seed);
    let max_threads = max_threads.unwrap_or_else(nostall::loader::usable_cores);
    let mut builder = LoaderBuilder::with_settings(location.clone(), settings);
    builder.config().map_err(|e| raise(py, e))?;
    let held = arrow
        .map(|columns| arrow::held_dataset(py, columns.bind(py)))
        .transpose()?;
    let mut user = None;
    if let Some(object) = &dataset {
        let args = user_code::UserArgs {
            mode: user_code::Mode::Auto,
            workers: max_threads,
            timeout: None,
            worker_init_fn: None,
            seed,
        };
        let (pipeline, opened, samples) = user_code::UserSamples::new(py, object.bind(py), args)?;
        builder.pipeline(pipeline);
        user = Some((opened, samples));
    }
    let mut columns = builder.settings().columns.clone();
    if let Some(fields) = fields {
        let modality = builder
            .config()
            .map_err(|e| raise(py, e))?
            .pipeline
            .modality();
        let fields = fields.fields(py, modality)?;
        columns.record = Some(fields.others());
        columns.sub_columns = fields.sub_columns();
        builder.fields(Some(fields));
    }
    let config = builder.config().map_err(|e| raise(py, e))?;
    let given_model = model_from_args(py, model_rate, step_ms, time_model.is_some(), batch_size)?;
    let budget = Duration::from_secs_f64(positive(py, "budget", budget, false)?);
    let run_seconds = positive(py, "run_seconds", run_seconds, true)?;
    let run = (run_seconds > 0.0 || run_epochs > 0).then(|| RunLength {
        budget: Duration::from_secs_f64(run_seconds),
        min_epochs: run_epochs,
    });
    let link = Link {
        bandwidth: throttle_mbps
            .map(|mbps| positive(py, "throttle_mbps", mbps, false))
            .transpose()?
            .map(|mbps| mbps * 1e6),
        latency: Duration::from_secs_f64(
            positive(py, "latency_ms", latency_ms.unwrap_or(0.0), true)? / 1e3,
        ),
        concurrency: None,
    };
    let link = (link.bandwidth.is_some() || !link.latency.is_zero()).then_some(link);
    let node_cache = match node_cache.as_deref().map(str::parse).transpose() {
        Ok(None) => None,
        Ok(Some(Capacity::Fraction(share))) => Some(share),
        Ok(Some(Capacity::Bytes(_))) | Err(_) => {
            return Err(config_error(
                py,
                format!(
                    "node_cache={:?}: give a share of the dataset (\"25%\" or 0.25), not bytes",
                    node_cache.unwrap_or_default()
                ),
            ))
        }
    };
    let network_bytes_per_s = positive(py, "network_gbps", network_gbps, false)? * 1e9 / 8.0;
    let rates = rates
        .map(|text| Report::rates_from_json(&text))
        .transpose()
        .map_err(|e| raise(py, e))?;
    let read = if warm {
        ReadMode::Cached
    } else {
        ReadMode::Cold
    };
    // The model is filled in once known (a timed step needs the dataset open).
    let mut options = Options {
        budget,
        max_threads,
        model: ModelRate::none(),
        run,
        rates,
        node_cache_share: node_cache,
        network_bytes_per_s,
        // The measured receive cost and the assumed send cost and host: the remote what-if
        // is in the advice (its verdict, and `report["advice"]["remote"]`).
        remote: RemoteCosts::default(),
        seed,
    };
    options.validate().map_err(|e| raise(py, e))?;

    let subject = py
        .detach(|| match (held, &user) {
            (Some(held), _) => Subject::of_dataset(&location, held, config, ReadMode::Cached, link),
            (None, Some((opened, _))) => {
                Subject::of_dataset(&location, opened.clone(), config, ReadMode::Cached, link)
            }
            (None, None) => Subject::open(&location, config, read, link, &columns),
        })
        .map_err(|e| raise(py, e))?;
    let model = match (given_model, time_model) {
        (Some(model), _) => model,
        (None, Some(time_model)) => {
            let layout = subject.config.pipeline.layout();
            let mut shape = vec![subject.config.plan.batch_size];
            shape.extend_from_slice(layout.shape());
            let classes = subject.catalog.classes().len().max(1);
            let (rate, what) = time_model
                .call1((shape, layout.dtype().to_string(), classes))?
                .extract::<(f64, String)>()?;
            if !(rate.is_finite() && rate > 0.0) {
                return Err(config_error(
                    py,
                    format!("the training step timed at {rate} images/s: expected a rate above 0"),
                ));
            }
            ModelRate::timed(rate, &what)
        }
        (None, None) => unreachable!("model_rate gives a rate unless there is a step to time"),
    };
    options.model = model;
    // The first exception `progress` raises (a KeyboardInterrupt arrives this way) is
    // raised once the analysis ends; `progress` is not called again after it.
    let mut progress_error: Option<PyErr> = None;
    let report = py
        .detach(|| {
            nostall_analyze::analyze(&subject, &options, &mut |line: &str| {
                if let (Some(callback), None) = (&progress, &progress_error) {
                    if let Err(e) = Python::attach(|py| callback.call1(py, (line,)).map(drop)) {
                        progress_error = Some(e);
                    }
                }
            })
            .map(|report| (report.json(), report.text(), report.html()))
        })
        .map_err(|e| raise(py, e))?;
    match progress_error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}
