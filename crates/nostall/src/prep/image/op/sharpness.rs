//! `RandomAdjustSharpness`: the image blended with a smoothed copy of itself, with a
//! probability.

use super::simd::{cast_u8, dispatched};
use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomAdjustSharpness",
    doc: "Adjusts the sharpness: blends the image with its smoothing by the 3×3 kernel \
          `[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13` (rounded), the border pixels kept, with \
          probability `p` (torchvision.transforms.v2's `RandomAdjustSharpness` on uint8 \
          images). Factor 0 gives the smoothed image, 1 the image, 2 twice as sharp.",
    params: &[
        Param::required(
            "sharpness_factor",
            Kind::Float,
            "how much to sharpen (non-negative): 0 smooths, 1 keeps",
        ),
        Param::with_default("p", Kind::Float, "0.5", "probability of adjusting"),
    ],
    translates: &[Translation::torchvision(
        "RandomAdjustSharpness",
        &[
            ("sharpness_factor", "sharpness_factor", Conv::Float),
            ("p", "p", Conv::Float),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let factor = args.float("sharpness_factor")?;
    if !(factor >= 0.0 && factor.is_finite()) {
        return Err(args.error(
            "sharpness_factor",
            format!("{factor} must be a non-negative number"),
        ));
    }
    Ok(Op::new(RandomAdjustSharpness {
        factor,
        p: args.probability("p")?,
    }))
}

struct RandomAdjustSharpness {
    factor: f64,
    p: f64,
}

impl Operator for RandomAdjustSharpness {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.factor.into(), self.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for RandomAdjustSharpness {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            let (width, height) = (image.width, image.height);
            for plane in image.rgb_mut() {
                sharpen(plane, width, height, self.factor);
            }
        }
    }
}

dispatched! {
    /// torchvision's `adjust_sharpness_image` on one uint8 channel of `height` rows of
    /// `width`: inside the border, `v + (1 - factor) · (round(smoothed) - v)` in 32-bit
    /// floats (the product fused into the sum, as torch's `add_(…, alpha=…)`), clamped and
    /// truncated; the border, and images of 2 pixels or fewer a side, kept.
    pub(super) fn sharpen(plane: &mut [u8], width: usize, height: usize, factor: f64)
        => sharpen_body
}

#[inline(always)]
fn sharpen_body(plane: &mut [u8], width: usize, height: usize, factor: f64) {
    if width <= 2 || height <= 2 {
        return;
    }
    let (a, b) = ((1.0 / 13.0) as f32, (5.0 / 13.0) as f32);
    let alpha = f64::from((1.0 - factor) as f32);
    // Each output row needs the input rows above and below it as they were.
    let mut above = plane[..width].to_vec();
    let mut row = plane[width..2 * width].to_vec();
    let mut out = vec![0u8; width];
    for y in 1..height - 1 {
        let below = &plane[(y + 1) * width..(y + 2) * width];
        for x in 1..width - 1 {
            let ring = [
                above[x - 1],
                above[x],
                above[x + 1],
                row[x - 1],
                row[x + 1],
                below[x - 1],
                below[x],
                below[x + 1],
            ];
            let sum: f32 = ring.iter().map(|v| f32::from(*v) * a).sum();
            // Never within 1/26 of a half (the exact sum is an integer over 13), so the
            // order of the additions cannot change the rounding.
            let smoothed = (sum + f32::from(row[x]) * b).round_ties_even();
            let v = f32::from(row[x]);
            // The fused multiply-add: exact in f64, one rounding to f32.
            let sharp = (f64::from(v) + f64::from(smoothed - v) * alpha) as f32;
            out[x] = cast_u8(sharp);
        }
        let line = &mut plane[y * width..(y + 1) * width];
        line[1..width - 1].copy_from_slice(&out[1..width - 1]);
        std::mem::swap(&mut above, &mut row);
        row.copy_from_slice(&plane[(y + 1) * width..(y + 2) * width]);
    }
}
