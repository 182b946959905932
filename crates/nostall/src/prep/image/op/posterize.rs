//! `RandomPosterize`: each value kept to its high bits, with a probability.

use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomPosterize",
    doc: "Keeps the `bits` high bits of every value, with probability `p` \
          (torchvision.transforms.v2's `RandomPosterize` on uint8 images).",
    params: &[
        Param::required("bits", Kind::Int, "bits kept, 0 to 8"),
        Param::with_default("p", Kind::Float, "0.5", "probability of posterizing"),
    ],
    translates: &[Translation::torchvision(
        "RandomPosterize",
        &[("bits", "bits", Conv::Int), ("p", "p", Conv::Float)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let bits: u8 = args.int("bits")?;
    if bits > 8 {
        return Err(args.error("bits", format!("{bits} is more than the 8 bits of a value")));
    }
    Ok(Op::new(RandomPosterize {
        bits,
        p: args.probability("p")?,
    }))
}

struct RandomPosterize {
    bits: u8,
    p: f64,
}

impl Operator for RandomPosterize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![u32::from(self.bits).into(), self.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for RandomPosterize {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            posterize(image.data, self.bits);
        }
    }
}

/// Keeps the `bits` high bits of each value.
pub(super) fn posterize(values: &mut [u8], bits: u8) {
    let mask = (0xFF00u16 >> bits) as u8;
    values.iter_mut().for_each(|v| *v &= mask);
}
