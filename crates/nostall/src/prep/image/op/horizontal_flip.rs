//! `RandomHorizontalFlip`: mirrors the image left to right, with a probability.

use super::{Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomHorizontalFlip",
    doc: "Mirrors the image left to right with probability `p` (torchvision's \
          `RandomHorizontalFlip`). Planned before decoding: the last pass reads mirrored rows \
          backwards.",
    params: &[Param::with_default(
        "p",
        Kind::Float,
        "0.5",
        "probability of mirroring",
    )],
    translates: &[Translation::torchvision(
        "RandomHorizontalFlip",
        &[("p", "p", Conv::Float)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    Ok(Op::new(HorizontalFlip {
        p: args.probability("p")?,
    }))
}

struct HorizontalFlip {
    p: f64,
}

impl Operator for HorizontalFlip {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for HorizontalFlip {
    fn output_size(&self) -> OutputSize {
        OutputSize::Keeps
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            view.mirror();
        }
    }

    fn mirrors(&self) -> bool {
        true
    }
}
