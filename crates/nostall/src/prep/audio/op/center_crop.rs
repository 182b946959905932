//! `CenterCrop`: the middle of the clip, at a length (for evaluation).

use super::{crop_length, int, AudioOp, Declaration, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "CenterCrop",
    doc: "The middle `length` samples (for evaluation); shorter clips are padded with zeros \
          at the end.",
    params: &[Param::required(
        "length",
        Kind::Int,
        "samples kept, 1 to 2^28",
    )],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    Ok(AudioOp::new(CenterCrop(crop_length(args)?)))
}

struct CenterCrop(usize);

impl Operator for CenterCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![int(self.0)]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::CenterCrop { length: self.0 }
    }
}

impl AudioOp {
    /// `CenterCrop(length)`.
    ///
    /// # Panics
    ///
    /// When `length` is not between 1 and 2^28.
    pub fn center_crop(length: usize) -> AudioOp {
        AudioOp::known("CenterCrop", vec![int(length)])
    }
}
