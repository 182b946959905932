//! `RandomAutocontrast`: each channel stretched to the full range, with a probability.

use super::simd::cast_u8;
use super::{with_probability, Declaration, Op, Planes};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param};
use crate::prep::translation::{Conv, Translation};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomAutocontrast",
    doc: "Stretches each channel so that its lowest value becomes 0 and its highest 255 \
          (`(v - min) / ((max - min) / 255)` in 32-bit floats, truncated; a flat channel \
          is kept), with probability `p` (torchvision.transforms.v2's `RandomAutocontrast` \
          on uint8 images).",
    params: &[Param::with_default(
        "p",
        Kind::Float,
        "0.5",
        "probability of autocontrasting",
    )],
    translates: &[Translation::torchvision(
        "RandomAutocontrast",
        &[("p", "p", Conv::Float)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    with_probability(args, &DECLARATION, each_channel)
}

/// [`autocontrast`] on each channel.
fn each_channel(image: &mut Planes<'_>) {
    image.rgb_mut().into_iter().for_each(autocontrast);
}

/// torchvision's `autocontrast_image` on one uint8 channel: `(v - min) / inv_scale` with
/// `inv_scale = (max - min) · (1 / 255)`, in 32-bit floats, clamped and truncated; a
/// channel with one value is left as it is.
pub(super) fn autocontrast(plane: &mut [u8]) {
    let (Some(&min), Some(&max)) = (plane.iter().min(), plane.iter().max()) else {
        return;
    };
    if min == max {
        return;
    }
    let min = f32::from(min);
    let inv_scale = (f32::from(max) - min) * (1.0 / 255.0) as f32;
    for v in plane {
        *v = cast_u8((f32::from(*v) - min) / inv_scale);
    }
}
