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

use crate::ops::{declared, operator_base, Declared};

operator_base!(
    /// An operator of a video pipeline: the base class of the operators of `nostall.video`.
    ///
    /// Operators are made by their subclasses and cannot be changed once made. A video
    /// pipeline is a list whose first item is one of them and whose others are image
    /// operators (`nostall.ops`). Two operators are equal when they do the same thing.
    VideoOpBase(VideoOp),
    module = "nostall.video"
);

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
