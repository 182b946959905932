//! Engine errors as the exceptions of `nostall._errors`: which class, with which
//! attributes.

use nostall_agent::JobError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Raises the `nostall` exception matching an engine error.
pub(crate) fn raise(py: Python<'_>, err: nostall::Error) -> PyErr {
    let kwargs = PyDict::new(py);
    match exception_class(&err, &kwargs) {
        Ok(class) => exception(py, class, err.to_string(), Some(&kwargs)),
        Err(e) => e,
    }
}

/// A peer-layer error as the Python exception that fits: bad settings are `ConfigError`s,
/// peers that cannot be reached or refuse are `PeerError`s.
pub(crate) fn raise_peer(py: Python<'_>, err: nostall_peer::Error) -> PyErr {
    match err {
        nostall_peer::Error::Core(err) => raise(py, err),
        nostall_peer::Error::Config(message) => config_error(py, message),
        // Network, Refused and any kind to come: the peers failed the job.
        _ => exception(py, "PeerError", err.to_string(), None),
    }
}

/// A job that did not start as the Python exception that fits: the engine's and the
/// peers' errors as [`raise`] and [`raise_peer`] give them, settings that cannot be
/// shared a `ConfigError`, the node agent's refusal or absence an `AgentError`.
pub(crate) fn job_error(py: Python<'_>, err: JobError) -> PyErr {
    match err {
        JobError::Loader(err) => raise(py, err),
        JobError::Peers(err) => raise_peer(py, err),
        JobError::Settings(message) => config_error(py, message),
        // The agent absent or refusing, and any kind to come.
        _ => exception(py, "AgentError", err.to_string(), None),
    }
}

/// The `nostall._errors` class for an engine error, with its attributes put in `kwargs`.
fn exception_class(err: &nostall::Error, kwargs: &Bound<'_, PyDict>) -> PyResult<&'static str> {
    Ok(match err {
        nostall::Error::Sample(e) => {
            sample_kwargs(
                kwargs,
                e.id,
                &e.location,
                e.cause.kind(),
                &e.cause.to_string(),
            )?;
            "SampleError"
        }
        nostall::Error::Config(_) => "ConfigError",
        nostall::Error::Io { path, source } => {
            kwargs.set_item("location", path.to_string_lossy())?;
            kwargs.set_item("errno", source.raw_os_error())?;
            "StorageError"
        }
        nostall::Error::Storage { location, .. } => {
            kwargs.set_item("location", location)?;
            "StorageError"
        }
        nostall::Error::BadIndex { path, .. } => {
            kwargs.set_item("location", path.to_string_lossy())?;
            "StorageError"
        }
        // Internal, and any kind to come.
        _ => "NostallError",
    })
}

/// The attributes of a `SampleError`: the sample's id, where it lives, the cause's stable
/// name and the cause in words.
pub(crate) fn sample_kwargs(
    kwargs: &Bound<'_, PyDict>,
    id: u64,
    location: &str,
    cause: &str,
    detail: &str,
) -> PyResult<()> {
    kwargs.set_item("sample_id", id)?;
    kwargs.set_item("location", location)?;
    kwargs.set_item("cause", cause)?;
    kwargs.set_item("detail", detail)
}

/// An instance of `nostall._errors.<class>`, or the error met while making it.
pub(crate) fn exception(
    py: Python<'_>,
    class: &str,
    message: String,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyErr {
    crate::front::front(py)
        .and_then(|front| front.errors.bind(py).getattr(class))
        .and_then(|class| class.call((message,), kwargs))
        .map(PyErr::from_value)
        .unwrap_or_else(|e| e)
}

pub(crate) fn config_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, nostall::Error::Config(message))
}
