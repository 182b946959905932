//! `RandomGrayscale`: the image's luma in all three channels, with a probability.

use super::simd::{cast_u8, dispatched, fused};
use super::{with_probability, Declaration, Op, Planes};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param};
use crate::prep::translation::{Conv, Translation};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomGrayscale",
    doc: "Replaces each channel by the pixel's luma, `0.2989 R + 0.587 G + 0.114 B` \
          (as torch computes it) truncated to 8 bits, with probability `p` (torchvision.transforms.v2's \
          `RandomGrayscale` on uint8 tensors; three channels stay three).",
    params: &[Param::with_default(
        "p",
        Kind::Float,
        "0.1",
        "probability of converting",
    )],
    translates: &[Translation::torchvision("RandomGrayscale", &[("p", "p", Conv::Float)])],
    build,
};

fn build(args: &Args) -> Result<Op> {
    with_probability(args, &DECLARATION, to_gray)
}

dispatched! {
    /// Every pixel's luma in its three channels, computed as torchvision's
    /// `rgb_to_grayscale` computes it on uint8 tensors (32-bit floats, truncated).
    pub(super) fn to_gray(image: &mut Planes<'_>) => to_gray_body::<FMA>
}

#[inline(always)]
fn to_gray_body<const FMA: bool>(image: &mut Planes<'_>) {
    image.map_pixels(|r, g, b| [cast_u8(luma::<FMA>(r, g, b)); 3]);
}

/// torchvision's luma of one pixel, floored: `r·0.2989 + g·0.587 + b·0.114` in 32-bit
/// floats, the later products fused into the sum as PyTorch's `add_(…, alpha=…)` fuses
/// them (`RandomGrayscale`, and the grayscale `adjust_contrast` and
/// `adjust_saturation` take). Unfused, 21 of the 2^24 colours come out a level lower.
#[inline(always)]
pub(super) fn luma<const FMA: bool>(r: u8, g: u8, b: u8) -> f32 {
    // Every term is a multiple of 2^-26 below 2^9: through f64 the sums are exact.
    let l = f32::from(r) * 0.2989;
    let l = fused::<FMA>(l, f32::from(g), 0.587);
    let l = fused::<FMA>(l, f32::from(b), 0.114);
    l.floor()
}
