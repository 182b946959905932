//! `nostall.video`: the video operators (the clip's plan) as Python objects, as
//! `nostall.audio` holds those of audio.
//!
//! One extension class, `VideoOp` (`nostall.video.Op`), holds any video operator
//! ([`VideoOp`]). `nostall/video.py` makes one subclass of it per operator the engine
//! declares ([`video_operators`]). A video pipeline is one of them first, then image
//! operators of `nostall.ops` that every frame goes through (checked when a `Loader` is
//! made).

use nostall::prep::video::{VideoOp, DECLARATIONS};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::ops::{arg, call, declared, hash, reduce, Declared, PyValue};

/// An operator of a video pipeline: the base class of the operators of `nostall.video`.
///
/// Operators are made by their subclasses and cannot be changed once made. A video
/// pipeline is a list whose first item is one of them and whose others are image
/// operators (`nostall.ops`). Two operators are equal when they do the same thing.
#[pyclass(module = "nostall.video", name = "Op", subclass, frozen, eq)]
#[derive(PartialEq)]
pub struct VideoOpBase(pub VideoOp);

#[pymethods]
impl VideoOpBase {
    /// The video operator `name` with these arguments (what each class's `__new__`
    /// calls).
    #[new]
    #[pyo3(signature = (name, args, kwargs))]
    fn new(
        py: Python<'_>,
        name: &str,
        args: Vec<PyValue>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<VideoOpBase> {
        Ok(VideoOpBase(call(py, name, args, kwargs)?))
    }

    fn __repr__(&self) -> String {
        self.0.to_string()
    }

    fn __hash__(&self) -> u64 {
        hash(&self.0)
    }

    /// The value of its parameter `name`, as the operator holds it (each class's
    /// properties read them).
    fn _arg<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        arg(py, &self.0, name)
    }

    /// Pickled as its class and its arguments, in order.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        reduce(slf.get_type().into_any(), &slf.get().0)
    }
}

/// The video operators' declarations, for `nostall/video.py` to make their classes.
#[pyfunction]
#[pyo3(name = "_video_operators")]
fn video_operators() -> Vec<Declared> {
    DECLARATIONS
        .iter()
        .map(|d| declared(d.name, d.doc, d.params))
        .collect()
}

/// Adds `VideoOp` (`nostall.video` calls it `Op`) and the declarations to the extension
/// module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VideoOp", m.py().get_type::<VideoOpBase>())?;
    m.add_function(wrap_pyfunction!(video_operators, m)?)
}
