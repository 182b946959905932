//! `Python` ([`crate::prep::python`]) among the audio operators: after the crop.

use super::{AudioOp, Declaration, Operator, Stage};
use crate::prep::args::Value;
use crate::prep::python::Python;
use crate::user_code::function::UserOp;

pub(super) static DECLARATION: Declaration = Python::declaration(
    "The caller's own function on each sample, after the crop: the cut waveform \
     (`float32[channels, length]`) when `MelSpectrogram` follows it, else the sample as \
     delivered.",
);

impl Operator for Python {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        self.values()
    }

    fn stage(&self) -> Stage<'_> {
        Stage::User(&self.0)
    }
}

impl AudioOp {
    /// The caller's function `f` as an audio operator (see [`crate::user_code::function`]).
    pub fn user(f: UserOp) -> AudioOp {
        AudioOp::new(Python(f))
    }
}
