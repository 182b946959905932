//! `CenterCrop`: the centre of the image, at a size (padded with zeros to it first where
//! the image is smaller, as torchvision pads it).

use super::{not_empty, pad, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "CenterCrop",
    doc: "Crops the centre of the image to `size` (torchvision's `CenterCrop`: an image \
          smaller than `size` is first padded with zeros to it, the odd pixel after).",
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
        // v2 pads an image smaller than the crop with zeros to the crop's size first, the
        // odd pixel after (`center_crop`'s `padding_ltrb`).
        let (across, down) = (pad::shortfall(view.w, w), pad::shortfall(view.h, h));
        if across > 0 || down > 0 {
            let ltrb = [across / 2, down / 2, across.div_ceil(2), down.div_ceil(2)];
            pad::pad(view, ltrb, [0; 3]);
        }
        let x = ((view.w - w) / 2.0).round_ties_even();
        let y = ((view.h - h) / 2.0).round_ties_even();
        view.crop(x, y, w, h);
    }
}
