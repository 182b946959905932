//! `nostall.audio`: the audio operators as Python objects, as `nostall.ops` holds those
//! of images.
//!
//! One extension class, `AudioOp` (`nostall.audio.Op`), holds any audio operator
//! ([`AudioOp`]). `nostall/audio.py` makes one subclass of it per operator the engine
//! declares ([`audio_operators`] lists them, with their parameters and docs), whose
//! `__new__` hands its name and arguments to `AudioOp.__new__`; the engine binds, checks
//! and builds the operator from its declaration. So nothing here names an operator. How
//! the operators fit together (a crop is required, `MelSpectrogram` at the resampled
//! rate) is checked when a `Loader` is made.

use nostall::prep::audio::{AudioOp, DECLARATIONS};
use pyo3::prelude::*;

use crate::ops::{declared, operator_base, Declared};

operator_base!(
    /// An operator of an audio pipeline: the base class of the operators of
    /// `nostall.audio`.
    ///
    /// Operators are made by their subclasses and cannot be changed once made; a list of
    /// them is the `pipeline` of a `nostall.Loader`. Two operators are equal when they do the
    /// same thing.
    AudioOpBase(AudioOp),
    module = "nostall.audio"
);

/// The audio operators' declarations, for `nostall/audio.py` to make their classes.
#[pyfunction]
#[pyo3(name = "_audio_operators")]
fn audio_operators() -> Vec<Declared> {
    DECLARATIONS
        .iter()
        .map(|d| declared(d.name, d.doc, d.params))
        .collect()
}

/// Adds `AudioOp` (named so beside the image operators' `Op`; `nostall.audio` calls it
/// `Op`) and the declarations to the extension module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("AudioOp", m.py().get_type::<AudioOpBase>())?;
    m.add_function(wrap_pyfunction!(audio_operators, m)?)
}
