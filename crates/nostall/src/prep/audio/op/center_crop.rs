//! `CenterCrop`: the middle of the clip, at a length (for evaluation).

use super::{int, AudioOp, Crop, Declaration};
use crate::prep::args::{Kind, Param};

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
    build: |args| Crop::build(args, false),
};

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
