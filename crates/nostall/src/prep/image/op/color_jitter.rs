//! `ColorJitter`: brightness, contrast, saturation and hue changed by random factors, in
//! a random order.

use super::grayscale::luma;
use super::simd::{cast_u8, dispatched, fused};
use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{number, Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "ColorJitter",
    doc: "Changes the brightness, contrast, saturation and hue of the image by factors drawn \
          uniformly from their ranges, applying those that are on in a random order \
          (torchvision.transforms.v2's `ColorJitter` on uint8 images: its kernels and their \
          32-bit float arithmetic, the order a uniform permutation as `torch.randperm(4)`). A \
          number `x` is the range `[max(0, 1 - x), 1 + x]` (for hue `[-x, x]`, `x <= 0.5`), a \
          `(min, max)` pair the range itself; `None`, or a range that changes nothing (`0`, \
          `(1, 1)`; hue `(0, 0)`), leaves that adjustment out. Each range is given back as its \
          `(min, max)` pair, or `None` where off.",
    params: &[
        Param::with_default(
            "brightness",
            Kind::Jitter,
            "None",
            "range of the factor the values are multiplied by (non-negative)",
        ),
        Param::with_default(
            "contrast",
            Kind::Jitter,
            "None",
            "range of the factor of the blend with the mean of the grayscale image \
             (non-negative)",
        ),
        Param::with_default(
            "saturation",
            Kind::Jitter,
            "None",
            "range of the factor of the blend with the grayscale image (non-negative)",
        ),
        Param::with_default(
            "hue",
            Kind::Jitter,
            "None",
            "range of the turn added to the hue, within [-0.5, 0.5]",
        ),
    ],
    translates: &[Translation::torchvision(
        "ColorJitter",
        &[
            ("brightness", "brightness", Conv::OptionalFloats),
            ("contrast", "contrast", Conv::OptionalFloats),
            ("saturation", "saturation", Conv::OptionalFloats),
            ("hue", "hue", Conv::OptionalFloats),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let unbounded = (0.0, f64::INFINITY);
    Ok(Op::new(ColorJitter {
        ranges: [
            jitter(args, "brightness", 1.0, unbounded)?,
            jitter(args, "contrast", 1.0, unbounded)?,
            jitter(args, "saturation", 1.0, unbounded)?,
            jitter(args, "hue", 0.0, (-0.5, 0.5))?,
        ],
    }))
}

/// torchvision's `ColorJitter._check_input`: the range of `param`, `None` where it is off.
/// A number `x` is `[center - x, center + x]`, the low end clipped at 0 where the center is
/// 1 (the factors; hue's is 0 and is not clipped).
fn jitter(args: &Args, param: &str, center: f64, bound: (f64, f64)) -> Result<Option<(f64, f64)>> {
    let (lo, hi) = match args.value(param) {
        Value::None => return Ok(None),
        Value::Tuple(_) => args.range(param)?,
        value => {
            let x = number(value).ok_or_else(|| {
                args.error(
                    param,
                    format!("takes a number, a (min, max) pair or None, not {value}"),
                )
            })?;
            if x.is_nan() || x < 0.0 {
                let says = format!("{x}: a single number must be non-negative");
                return Err(args.error(param, says));
            }
            let lo = center - x;
            (if center == 0.0 { lo } else { lo.max(0.0) }, center + x)
        }
    };
    if !(bound.0 <= lo && lo <= hi && hi <= bound.1 && hi.is_finite()) {
        return Err(args.error(
            param,
            format!(
                "({lo}, {hi}) must be increasing and within [{}, {}]",
                bound.0, bound.1
            ),
        ));
    }
    Ok((lo != center || hi != center).then_some((lo, hi)))
}

pub(super) struct ColorJitter {
    /// Brightness, contrast, saturation and hue, in torchvision's numbering (0 to 3).
    pub(super) ranges: [Option<(f64, f64)>; 4],
}

/// One sample's draws: the order of the four adjustments, and each one's factor (`None`
/// where it is off).
pub(super) type Draw = ([usize; 4], [Option<f32>; 4]);

impl ColorJitter {
    /// One sample's draws, in torchvision's order: the permutation, then the factors of
    /// those on (brightness, contrast, saturation, hue), each rounded to 32 bits as torch's
    /// `uniform_` on a float tensor gives it.
    pub(super) fn draw(&self, rng: &mut Rng) -> Draw {
        let mut order = [0, 1, 2, 3];
        rng.shuffle(&mut order);
        let factors = self
            .ranges
            .map(|range| range.map(|(lo, hi)| rng.uniform(lo, hi) as f32));
        (order, factors)
    }
}

impl Operator for ColorJitter {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        self.ranges.iter().map(|&range| range.into()).collect()
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for ColorJitter {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let (order, factors) = self.draw(rng);
        for i in order {
            let Some(factor) = factors[i] else {
                continue;
            };
            match i {
                0 => {
                    let area = image.area();
                    brightness(&mut image.data[..3 * area], factor);
                }
                1 => contrast(image, f64::from(factor)),
                2 => saturation(image, f64::from(factor)),
                _ => hue(image, factor),
            }
        }
    }
}

dispatched! {
    /// torchvision's `adjust_brightness` on uint8 values: `v · factor` in 32-bit floats,
    /// clamped and truncated.
    pub(super) fn brightness(values: &mut [u8], factor: f32)
        => brightness_body
}

#[inline(always)]
fn brightness_body(values: &mut [u8], factor: f32) {
    for v in values {
        *v = cast_u8(f32::from(*v) * factor);
    }
}

dispatched! {
    /// torchvision's `adjust_contrast` on uint8 images: each value blended with the mean of
    /// the floored grayscale image.
    pub(super) fn contrast(image: &mut Planes<'_>, factor: f64)
        => contrast_body::<FMA>
}

#[inline(always)]
fn contrast_body<const FMA: bool>(image: &mut Planes<'_>, factor: f64) {
    let area = image.area();
    if area == 0 {
        return;
    }
    let [r, g, b] = image.rgb_mut();
    // A loop, not an iterator's `map` and `sum`: those were not inlined into the AVX2 copy
    // (nor `floor` with them, a library call there).
    let mut sum = 0u64;
    for i in 0..area {
        sum += u64::from(cast_u8(luma::<FMA>(r[i], g[i], b[i])));
    }
    // torch's float32 mean, correctly rounded from the exact sum.
    let mean = (sum as f64 / area as f64) as f32;
    let (ratio, alpha) = ratios(factor);
    for plane in [r, g, b] {
        for v in plane.iter_mut() {
            *v = blend::<FMA>(*v, mean, ratio, alpha);
        }
    }
}

dispatched! {
    /// torchvision's `adjust_saturation` on uint8 images: each value blended with its pixel's
    /// floored grayscale.
    pub(super) fn saturation(image: &mut Planes<'_>, factor: f64)
        => saturation_body::<FMA>
}

#[inline(always)]
fn saturation_body<const FMA: bool>(image: &mut Planes<'_>, factor: f64) {
    let (ratio, alpha) = ratios(factor);
    image.map_pixels(|r, g, b| {
        let gray = luma::<FMA>(r, g, b);
        [r, g, b].map(|v| blend::<FMA>(v, gray, ratio, alpha))
    });
}

dispatched! {
    /// torchvision's `adjust_hue` on uint8 images: each pixel to HSV, `factor` added to the
    /// hue (modulo 1), back to RGB, as its tensor kernel computes it.
    pub(super) fn hue(image: &mut Planes<'_>, factor: f32)
        => hue_body
}

#[inline(always)]
fn hue_body(image: &mut Planes<'_>, factor: f32) {
    // A loop of its own, not `Planes::map_pixels`: this closure, unlike the lighter ones,
    // is not inlined into the AVX2 copy and runs as a call a pixel (1.7 times slower).
    let [r, g, b] = image.rgb_mut();
    for ((r, g), b) in r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()) {
        [*r, *g, *b] = rotate_hue(*r, *g, *b, factor);
    }
}

/// `_blend`'s two weights as torch takes them: the factor `ratio` and `1 - ratio`, each
/// computed in Python's 64-bit floats and rounded to 32 bits.
fn ratios(factor: f64) -> (f32, f32) {
    (factor as f32, (1.0 - factor) as f32)
}

/// torchvision's `_blend` of a uint8 value with `other`: `v · ratio + other · alpha`
/// (`alpha` = 1 − `ratio`) in 32-bit floats, the second product fused into the sum as
/// PyTorch's `add_(…, alpha=…)` fuses it (one rounding), clamped and truncated.
#[inline(always)]
fn blend<const FMA: bool>(v: u8, other: f32, ratio: f32, alpha: f32) -> u8 {
    let scaled = f32::from(v) * ratio;
    // Through f64 the sum, for these magnitudes, is exact too: one rounding, as fused.
    cast_u8(fused::<FMA>(scaled, other, alpha))
}

/// `x % 1.0` (fmod) for `x` below 2: `x − 1` from 1 on (exact there), else `x`.
#[inline(always)]
fn below_one(x: f32) -> f32 {
    if x >= 1.0 {
        x - 1.0
    } else {
        x
    }
}

/// One pixel through torchvision's `_rgb_to_hsv`, the hue turned by `factor`, and back
/// through `_hsv_to_rgb`, the same 32-bit float operations in the same order.
#[inline(always)]
pub(super) fn rotate_hue(r: u8, g: u8, b: u8, factor: f32) -> [u8; 3] {
    // to_dtype(float32, scale=True), and back: `x · (255 + 1 - 1e-3)` truncated.
    const UNIT: f32 = (1.0 / 255.0) as f32;
    const SCALE: f32 = (255.0 + 1.0 - 1e-3) as f32;
    const SIXTH: f32 = (1.0 / 6.0) as f32;
    let (r, g, b) = (
        f32::from(r) * UNIT,
        f32::from(g) * UNIT,
        f32::from(b) * UNIT,
    );
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let equal = maxc == minc;
    let range = maxc - minc;
    let s = range / if equal { 1.0 } else { maxc };
    let divisor = if equal { 1.0 } else { range };
    let (rc, gc, bc) = (
        (maxc - r) / divisor,
        (maxc - g) / divisor,
        (maxc - b) / divisor,
    );
    let h = if maxc == r {
        bc - gc
    } else if maxc == g {
        (rc + 2.0) - bc
    } else {
        (gc + 4.0) - rc
    };
    // `% 1.0` of a value in [5/6, 11/6]: fmod, exact, is the value less 1 from 1 on.
    let h = below_one(h * SIXTH + 1.0);
    // torch's remainder: fmod of a value in [-0.5, 1.5), then the divisor added where the
    // sign differs.
    let h = below_one(h + factor);
    let h = if h < 0.0 { h + 1.0 } else { h };
    let v = maxc;
    let h6 = h * 6.0;
    let i = h6.floor();
    let f = h6 - i;
    let sxf = s * f;
    let one_minus_s = 1.0 - s;
    let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
    let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
    let p = (one_minus_s * v).clamp(0.0, 1.0);
    // The sector's (v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q), as
    // selections the compiler can make on a vector of pixels (a `match` branches).
    // `i % 6` of a whole number in [0, 6], kept a float (a conversion to an integer is
    // one scalar instruction a lane).
    let sector = if i == 6.0 { 0.0 } else { i };
    let r = if sector == 0.0 || sector == 5.0 {
        v
    } else if sector == 1.0 {
        q
    } else if sector == 4.0 {
        t
    } else {
        p
    };
    let g = if sector == 1.0 || sector == 2.0 {
        v
    } else if sector == 3.0 {
        q
    } else if sector == 0.0 {
        t
    } else {
        p
    };
    let b = if sector == 3.0 || sector == 4.0 {
        v
    } else if sector == 5.0 {
        q
    } else if sector == 2.0 {
        t
    } else {
        p
    };
    [cast_u8(r * SCALE), cast_u8(g * SCALE), cast_u8(b * SCALE)]
}
