//! `RandomCrop`: a random window of the clip, at a length.

use super::{int, AudioOp, Crop, Declaration};
use crate::prep::args::{Kind, Param};

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
    build: |args| Crop::build(args, true),
};

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
