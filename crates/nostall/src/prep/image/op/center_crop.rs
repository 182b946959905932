//! `CenterCrop`: the centre of the image, at a size.

use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "CenterCrop",
    doc: "Crops the centre of the image to `size` (torchvision's `CenterCrop`).",
    params: &[Param::required(
        "size",
        Kind::Square,
        "an int (square) or `(height, width)`",
    )],
    translates: &[Translation::torchvision(
        "CenterCrop",
        &[("size", "size", Conv::Size)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let size = args.square("size")?;
    not_empty(args, "size", size)?;
    Ok(Op::new(CenterCrop { size }))
}

struct CenterCrop {
    size: (u32, u32),
}

impl Operator for CenterCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.size.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for CenterCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Fixed(self.size.0, self.size.1)
    }

    fn plan(&self, view: &mut View, _: &mut Rng) {
        let (w, h) = (self.size.1 as f64, self.size.0 as f64);
        let x = ((view.w - w) / 2.0).round_ties_even();
        let y = ((view.h - h) / 2.0).round_ties_even();
        view.crop(x, y, w, h);
    }
}
