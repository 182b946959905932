//! `Resize`: the shorter side to a length, or the image to an exact size.

use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::rng::Rng;

/// A target size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Scale so that the shorter side has this length, keeping the aspect ratio.
    Shorter(u32),
    /// Exactly this height and width.
    Exact {
        /// Height in pixels.
        height: u32,
        /// Width in pixels.
        width: u32,
    },
}

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Resize",
    doc: "Resizes the image (bilinear, antialiased when shrinking, as torchvision's). Like \
          the crops it only plans the geometry: the one resize of a sample happens once the \
          crop is known.",
    params: &[Param::required(
        "size",
        Kind::Size,
        "an int resizes the shorter side to it, keeping the aspect ratio (follow it with \
         `CenterCrop` for batches of one shape); `(height, width)` resizes to exactly that",
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let size = args.size("size")?;
    match size {
        Size::Shorter(side) => not_empty(args, "size", (side, side))?,
        Size::Exact { height, width } => not_empty(args, "size", (height, width))?,
    }
    Ok(Op::new(Resize { size }))
}

struct Resize {
    size: Size,
}

impl Operator for Resize {
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

impl Geometric for Resize {
    fn output_size(&self) -> OutputSize {
        match self.size {
            Size::Shorter(_) => OutputSize::Varies,
            Size::Exact { height, width } => OutputSize::Fixed(height, width),
        }
    }

    fn plan(&self, view: &mut View, _: &mut Rng) {
        match self.size {
            Size::Shorter(s) => {
                let portrait = view.w <= view.h;
                let (short, long) = if portrait {
                    (view.w, view.h)
                } else {
                    (view.h, view.w)
                };
                let new_long = (s as f64 * long / short).floor();
                (view.w, view.h) = if portrait {
                    (s as f64, new_long)
                } else {
                    (new_long, s as f64)
                };
            }
            Size::Exact { height, width } => (view.w, view.h) = (width as f64, height as f64),
        }
    }
}
