//! `RandomCrop`: a random window of the clip, at a length.

use super::{crop_length, int, AudioOp, Declaration, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomCrop",
    doc: "A random window of `length` samples (at the output rate), chosen from the seed, the \
          epoch and the sample; shorter clips are padded with zeros at the end.",
    params: &[Param::required(
        "length",
        Kind::Int,
        "samples kept, 1 to 2^28",
    )],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    Ok(AudioOp::new(RandomCrop(crop_length(args)?)))
}

struct RandomCrop(usize);

impl Operator for RandomCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![int(self.0)]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::RandomCrop { length: self.0 }
    }
}

impl AudioOp {
    /// `RandomCrop(length)`.
    ///
    /// # Panics
    ///
    /// When `length` is not between 1 and 2^28.
    pub fn random_crop(length: usize) -> AudioOp {
        AudioOp::known("RandomCrop", vec![int(length)])
    }
}
