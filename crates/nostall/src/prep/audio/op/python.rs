//! `Python`: the caller's own function ([`UserFn`](crate::user_code::function::UserFn))
//! among the audio operators. Made by the bindings from `ops.Python(fn)`, never from the
//! text form: it is not among [`DECLARATIONS`](super::DECLARATIONS).

use super::{AudioOp, Declaration, Operator, Stage};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};
use crate::user_code::function::UserOp;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Python",
    doc: "The caller's own function on each sample, after the crop: the cut waveform \
          (`float32[channels, length]`) when `MelSpectrogram` follows it, else the sample as \
          delivered.",
    params: &[Param::required("fn", Kind::Choice, "the function's name")],
    translates: &[],
    build,
};

fn build(_: &Args) -> Result<AudioOp> {
    Err(Error::Config(
        "Python(...) is made from a function, with nostall.ops.Python(fn), not from text".into(),
    ))
}

struct Python(UserOp);

impl Operator for Python {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![Value::Str(self.0.name().to_string())]
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
