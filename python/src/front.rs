//! What the Python front hands the extension once, as the package is imported
//! (`nostall/__init__.py` calls `_connect`): the modules of the package whose code the
//! extension calls back, as it calls the user's functions. The extension never imports
//! the package, so the dependency runs one way, Python on Rust; what Rust calls is given
//! to it.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The package's modules the extension calls into.
pub(crate) struct Front {
    /// `nostall._errors`: the exception classes raised.
    pub errors: Py<PyModule>,
    /// `nostall.ops`: the operators' classes, for the operators the engine hands back.
    pub ops: Py<PyModule>,
    /// `nostall._python_ops`: `ops.Python` and the job its worker processes run.
    pub python_ops: Py<PyModule>,
    /// `nostall._user_code`: the worker processes of the user's code.
    pub user_code: Py<PyModule>,
    /// `nostall._fields`: batches of records as dictionaries.
    pub fields: Py<PyModule>,
    /// `nostall._tokenizer`: a tokenizer object's JSON.
    pub tokenizer: Py<PyModule>,
    /// `nostall._device`: batches staged on a CUDA device.
    pub device: Py<PyModule>,
}

static FRONT: PyOnceLock<Front> = PyOnceLock::new();

/// The front's modules.
///
/// # Errors
///
/// A `RuntimeError` when the extension is used without its package.
pub(crate) fn front(py: Python<'_>) -> PyResult<&Front> {
    FRONT.get(py).ok_or_else(|| {
        PyRuntimeError::new_err(
            "nostall._nostall is used through the nostall package: import nostall first",
        )
    })
}

/// Hands the extension the front's modules (once: a later call changes nothing).
#[pyfunction]
#[pyo3(name = "_connect")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect(
    py: Python<'_>,
    errors: Py<PyModule>,
    ops: Py<PyModule>,
    python_ops: Py<PyModule>,
    user_code: Py<PyModule>,
    fields: Py<PyModule>,
    tokenizer: Py<PyModule>,
    device: Py<PyModule>,
) {
    let _ = FRONT.set(
        py,
        Front {
            errors,
            ops,
            python_ops,
            user_code,
            fields,
            tokenizer,
            device,
        },
    );
}
