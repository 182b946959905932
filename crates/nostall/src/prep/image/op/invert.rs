//! `RandomInvert`: every value `v` becomes `255 - v`, with a probability.

use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomInvert",
    doc: "Inverts the colours, `255 - v`, with probability `p` (torchvision.transforms.v2's \
          `RandomInvert`).",
    params: &[Param::with_default(
        "p",
        Kind::Float,
        "0.5",
        "probability of inverting",
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    Ok(Op::new(RandomInvert {
        p: args.probability("p")?,
    }))
}

struct RandomInvert {
    p: f64,
}

impl Operator for RandomInvert {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for RandomInvert {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            image.data.iter_mut().for_each(|v| *v = 255 - *v);
        }
    }
}
