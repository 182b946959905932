//! `nostall._nostall`: the Python bindings, a PyO3 layer over the engine.
//!
//! Samples are made in the engine crate. This layer converts arguments (`convert`), but
//! it also still resolves what the user handed over (the kind of source, user code,
//! fields, device and sharing, in `loader`): issue 64 moves that into Python. It releases the GIL around every call into the engine (`interrupt`),
//! hands batches to Python through DLPack (`tensor`, `dlpack`) and maps engine errors
//! to the exceptions of `nostall._errors` (`errors`). One module per concept:
//! `loader` is `nostall.Loader`, `shared` and `handoff` its batches from the node
//! agent, `device` its batches on a GPU, `state` its saved state, `stats` and
//! `live` its figures, `ops` and `audio_ops` the operators, `tokenizer` the engine's
//! tokenizer, `analyze` the engine's side of `nostall.analyze` (DS-Analyzer).

mod analyze;
mod arrow;
mod audio_ops;
mod convert;
mod device;
mod dlpack;
mod errors;
mod fields;
mod front;
mod handoff;
mod interrupt;
mod live;
mod loader;
mod mixture;
mod mixup;
mod ops;
mod python_ops;
mod remote;
mod run;
mod shared;
mod spec;
mod state;
mod stats;
mod store;
mod tensor;
mod tokenizer;
mod user_code;
mod video_ops;

use std::path::PathBuf;

use nostall::loader::DEFAULT_IMAGE_SIZE;
use nostall::prep::ImagePipeline;
use pyo3::prelude::*;

use errors::raise;
use loader::Loader;
use tensor::BatchTensor;

/// Writes the demo photographs (a few real photographs in four classes, built into
/// the package) in ImageFolder layout under `directory` (default: a `nostall-demo`
/// folder in the temporary directory) and returns its path. Files already there with
/// the right size are kept.
#[pyfunction]
#[pyo3(signature = (directory=None))]
fn demo_photos(py: Python<'_>, directory: Option<PathBuf>) -> PyResult<String> {
    let dir = directory.unwrap_or_else(nostall_demo::default_dir);
    let dir = py
        .detach(|| nostall_demo::write(&dir))
        .map_err(|e| raise(py, e))?;
    Ok(dir.to_string_lossy().into_owned())
}

/// The operators of a preset as a list of `nostall.ops` objects.
fn preset_list<'py>(py: Python<'py>, name: &str, size: u32) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let pipeline = ImagePipeline::preset(name, size).map_err(|e| raise(py, e))?;
    pipeline
        .ops()
        .iter()
        .map(|op| ops::to_python(py, op))
        .collect()
}

/// The ImageNet training pipeline as a list of operators, for `Loader(pipeline=...)`:
/// `[RandomResizedCrop(size), RandomHorizontalFlip(), Normalize(ImageNet mean, std)]`.
/// The same as `pipeline="train", image_size=size`.
#[pyfunction]
#[pyo3(signature = (size=DEFAULT_IMAGE_SIZE), text_signature = "(size=224)")]
fn imagenet_train(py: Python<'_>, size: u32) -> PyResult<Vec<Bound<'_, PyAny>>> {
    preset_list(py, "train", size)
}

/// The ImageNet evaluation pipeline as a list of operators, for `Loader(pipeline=...)`:
/// `[Resize(round(size * 256 / 224)), CenterCrop(size), Normalize(ImageNet mean, std)]`.
/// The same as `pipeline="val", image_size=size`.
#[pyfunction]
#[pyo3(signature = (size=DEFAULT_IMAGE_SIZE), text_signature = "(size=224)")]
fn imagenet_val(py: Python<'_>, size: u32) -> PyResult<Vec<Bound<'_, PyAny>>> {
    preset_list(py, "val", size)
}

/// The module: `Loader`, `BatchTensor`, the operators of `nostall.ops`, the presets,
/// `demo_photos`, `_analyze` (the engine's side of `nostall.analyze`), the worker
/// processes' wire (`_worker_wire`), and the version.
#[pymodule]
fn _nostall(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Loader>()?;
    m.add_class::<loader::Batches>()?;
    m.add_class::<remote::RemoteClient>()?;
    m.add_class::<BatchTensor>()?;
    m.add_class::<mixup::Mixup>()?;
    m.add_class::<tokenizer::Tokenizer>()?;
    m.add_class::<fields::Field>()?;
    ops::register(m)?;
    audio_ops::register(m)?;
    video_ops::register(m)?;
    m.add_function(wrap_pyfunction!(imagenet_train, m)?)?;
    m.add_function(wrap_pyfunction!(imagenet_val, m)?)?;
    m.add_function(wrap_pyfunction!(demo_photos, m)?)?;
    m.add_function(wrap_pyfunction!(shared::_run_agent, m)?)?;
    m.add_function(wrap_pyfunction!(shared::_default_agent_socket, m)?)?;
    m.add_function(wrap_pyfunction!(analyze::run, m)?)?;
    m.add_function(wrap_pyfunction!(spec::loader_settings, m)?)?;
    m.add_function(wrap_pyfunction!(front::connect, m)?)?;
    m.add("_worker_wire", user_code::worker_wire(m.py())?)?;
    // Hand-off threads must stop before the interpreter finalises (see `handoff`).
    let stop = wrap_pyfunction!(handoff::stop_at_exit, m)?;
    m.py().import("atexit")?.call_method1("register", (stop,))?;
    // So must the loaders' prep threads, which may be in the user's code (see `loader`).
    let halt = wrap_pyfunction!(loader::halt_at_exit, m)?;
    m.py().import("atexit")?.call_method1("register", (halt,))?;
    Ok(())
}
