//! `RandomInvert`: every value `v` becomes `255 - v`, with a probability.

use super::{with_probability, Declaration, Op, Planes};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param};
use crate::prep::translation::{Conv, Translation};

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
    translates: &[Translation::torchvision(
        "RandomInvert",
        &[("p", "p", Conv::Float)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    with_probability(args, &DECLARATION, invert)
}

/// `255 - v` for every value.
fn invert(image: &mut Planes<'_>) {
    image.data.iter_mut().for_each(|v| *v = 255 - *v);
}
