//! `RandomSolarize`: values at or above a threshold inverted, with a probability.

use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomSolarize",
    doc: "Inverts every value at or above `threshold` (`v >= threshold` becomes `255 - v`), \
          with probability `p` (torchvision.transforms.v2's `RandomSolarize` on uint8 images).",
    params: &[
        Param::required(
            "threshold",
            Kind::Float,
            "values at or above it are inverted, in 0..=255",
        ),
        Param::with_default("p", Kind::Float, "0.5", "probability of solarizing"),
    ],
    translates: &[Translation::torchvision(
        "RandomSolarize",
        &[
            ("threshold", "threshold", Conv::Float),
            ("p", "p", Conv::Float),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let threshold = args.float("threshold")?;
    if !(0.0..=255.0).contains(&threshold) {
        return Err(args.error(
            "threshold",
            format!("{threshold} is not in [0, 255], the range of 8-bit values"),
        ));
    }
    Ok(Op::new(RandomSolarize {
        threshold,
        p: args.probability("p")?,
    }))
}

struct RandomSolarize {
    threshold: f64,
    p: f64,
}

impl Operator for RandomSolarize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.threshold.into(), self.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for RandomSolarize {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            solarize(image.data, self.threshold);
        }
    }
}

/// `v >= threshold` becomes `255 - v`, compared in 32-bit floats as torch compares a
/// uint8 tensor with a Python float.
pub(super) fn solarize(values: &mut [u8], threshold: f64) {
    // The smallest byte at or above the threshold (256: none).
    let from = (threshold as f32).ceil() as u16;
    for v in values {
        if u16::from(*v) >= from {
            *v = 255 - *v;
        }
    }
}
