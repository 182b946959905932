//! `RandomEqualize`: each channel's histogram equalized, with a probability.

use super::{with_probability, Declaration, Op, Planes};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param};
use crate::prep::translation::{Conv, Translation};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomEqualize",
    doc: "Equalizes the histogram of each channel, with probability `p` \
          (torchvision.transforms.v2's `RandomEqualize` on uint8 images: its tensor \
          kernel, PIL's lookup table from the cumulative histogram, a channel left as it is \
          where all but its highest value are fewer than 255 pixels).",
    params: &[Param::with_default(
        "p",
        Kind::Float,
        "0.5",
        "probability of equalizing",
    )],
    translates: &[Translation::torchvision(
        "RandomEqualize",
        &[("p", "p", Conv::Float)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    with_probability(args, &DECLARATION, each_channel)
}

/// [`equalize`] on each channel.
fn each_channel(image: &mut Planes<'_>) {
    image.rgb_mut().into_iter().for_each(equalize);
}

/// torchvision's `equalize_image` on one uint8 channel: with `step` the pixels not of
/// the channel's highest value over 255 (floored), `lut[0] = 0` and `lut[k] =
/// min((cumulative[k - 1] + step / 2) / step, 255)`; nothing changes where `step` is 0.
pub(super) fn equalize(plane: &mut [u8]) {
    let mut histogram = [0u64; 256];
    for v in plane.iter() {
        histogram[usize::from(*v)] += 1;
    }
    // The highest value present: where the cumulative histogram first reaches its end.
    let Some(top) = histogram.iter().rposition(|&n| n > 0) else {
        return;
    };
    let step = (plane.len() as u64 - histogram[top]) / 255;
    if step == 0 {
        return;
    }
    let mut lut = [0u8; 256];
    let mut cumulative = 0;
    for k in 1..256 {
        cumulative += histogram[k - 1];
        lut[k] = ((cumulative + step / 2) / step).min(255) as u8;
    }
    for v in plane {
        *v = lut[usize::from(*v)];
    }
}
