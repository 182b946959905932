//! `nostall._nostall._analyze`: the engine's DS-Analyzer ([`nostall_analyze`]) for
//! `nostall.analyze` (python/nostall/_analyze.py), which documents the arguments, gives
//! their defaults, times the user's training step and wraps the report.
//!
//! The loader configuration is built from the arguments exactly as `Loader` builds it
//! ([`ConfigArgs`]), on one rank reading the whole dataset; the analysis runs with the
//! GIL released, which is taken again only to call `progress` and to time the model.

use std::time::Duration;

use nostall::cache::Capacity;
use nostall::storage::{Link, ReadMode};
use nostall_analyze::{self as analyze, ModelRate, Options, Report, RunLength, Subject};
use pyo3::prelude::*;

use nostall::pipeline::Threads;
use nostall::prep::image::Layout;
use nostall::prep::DType;
use nostall::ErrorPolicy;

use crate::convert::{
    CacheChoice, CacheSize, ConfigArgs, PipelineArg, SourceArg, Text, ThreadsArg,
};
use crate::errors::{config_error, raise};
use crate::fields::FieldsArg;
use crate::{arrow, user};

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
    source, *, model_rate, step_ms, time_model, batch_size, pipeline, image_size, dtype,
    layout, threads, fetch_threads, cache, cache_policy, on_error, budget, run_seconds,
    run_epochs, max_threads, warm, throttle_mbps, latency_ms, rates, node_cache,
    network_gbps, seed, progress, fields=None, arrow=None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    py: Python<'_>,
    source: SourceArg,
    model_rate: Option<f64>,
    step_ms: Option<f64>,
    time_model: Option<Bound<'_, PyAny>>,
    batch_size: usize,
    pipeline: Option<PipelineArg>,
    image_size: Option<u32>,
    dtype: Text<DType>,
    layout: Text<Layout>,
    threads: usize,
    fetch_threads: usize,
    cache: Option<CacheSize>,
    cache_policy: CacheChoice,
    on_error: Text<ErrorPolicy>,
    budget: f64,
    run_seconds: f64,
    run_epochs: u64,
    max_threads: Option<usize>,
    warm: bool,
    throttle_mbps: Option<f64>,
    latency_ms: Option<f64>,
    rates: Option<String>,
    node_cache: Option<Bound<'_, PyAny>>,
    network_gbps: f64,
    seed: u64,
    progress: Option<Py<PyAny>>,
    fields: Option<FieldsArg>,
    arrow: Option<Py<PyAny>>,
) -> PyResult<(String, String, String)> {
    if fields.is_some() && time_model.is_some() {
        return Err(config_error(
            py,
            "analyze times a training step on synthetic images: with fields=, give the \
             model as model_rate or step_ms"
                .into(),
        ));
    }
    // Every argument is checked before the dataset is opened or anything measured.
    let args = ConfigArgs {
        batch_size: Some(batch_size),
        pipeline,
        image_size,
        dtype: Some(dtype),
        layout: Some(layout),
        seed: Some(seed),
        threads: Some(ThreadsArg(Threads::Count(threads))),
        fetch_threads: Some(fetch_threads),
        cache,
        cache_policy: Some(cache_policy),
        on_error: Some(on_error),
        // One node reading the whole dataset; the node sweep predicts for more.
        rank: Some(0),
        world_size: Some(1),
        ..ConfigArgs::default()
    };
    if args.partitioned() {
        return Err(config_error(
            py,
            "analyze measures one node: give the node's cache with cache_policy \"minio\", \
             and node_cache to predict a cache partitioned over more nodes"
                .into(),
        ));
    }
    let max_threads = max_threads.unwrap_or_else(nostall::pipeline::usable_cores);
    let (location, object) = match source {
        SourceArg::One(location) => (location, None),
        SourceArg::Many => {
            return Err(config_error(
                py,
                "analyze measures one dataset: give one location (or Dataset)".into(),
            ))
        }
        SourceArg::Dataset(object) => {
            let name = object.bind(py).get_type().name()?.to_string();
            (name, Some(object))
        }
    };
    let held = arrow
        .map(|columns| arrow::held_dataset(py, columns.bind(py)))
        .transpose()?;
    // A Dataset object's own samples: its __getitem__ in worker processes (as many as the
    // threads P(n) is measured for), or threads on a free-threaded interpreter.
    let user_code = object.filter(|_| held.is_none());
    if user_code.is_some() {
        let refused = [
            (
                args.pipeline.is_some(),
                "pipeline= (its transform is its own)",
            ),
            (args.image_size.is_some(), "image_size="),
            (fields.is_some(), "fields="),
            (
                time_model.is_some(),
                "model= (timed on batches of images; give model_rate or step_ms)",
            ),
        ];
        if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
            return Err(config_error(
                py,
                format!("analyze of a Dataset object with {what} is not supported"),
            ));
        }
    }
    let (mut builder, _) = args.builder(py, location.clone())?;
    let mut user = None;
    if let Some(object) = &user_code {
        let args = user::UserArgs {
            mode: user::Mode::Auto,
            workers: max_threads,
            timeout: None,
            worker_init_fn: None,
            seed,
        };
        let (pipeline, opened, samples) = user::UserSamples::new(py, object.bind(py), args)?;
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
    let node_cache = match node_cache {
        None => None,
        Some(share) => match share.extract::<CacheSize>()?.0 {
            Capacity::Fraction(f) => Some(f),
            Capacity::Bytes(_) => {
                return Err(config_error(
                    py,
                    format!(
                        "node_cache={}: give a share of the dataset (\"25%\" or 0.25), not bytes",
                        share.repr()?
                    ),
                ))
            }
        },
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
