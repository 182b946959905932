//! `RandomAffine`: the image rotated, translated, scaled and sheared by random amounts
//! about its centre; and the kernel it shares with `RandomRotation`.
//!
//! The kernel is torchvision.transforms.v2's on uint8 tensors: the inverse matrix
//! (`_get_inverse_affine_matrix`, in 64-bit floats), rounded to 32 bits, each output
//! pixel's centre mapped through it (`_affine_grid`), and sampled as `grid_sample` does
//! with `align_corners=False` and zeros outside, a mask sampled alike blending the fill in
//! (`_apply_grid_transform`), all in 32-bit floats, rounded half to even.

use super::simd::{cast_u8, dispatched};
use super::{Declaration, Motion, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{number, Args, Kind, Param, Value};
use crate::prep::image::OUTSIDE;
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomAffine",
    doc: "Rotates, translates, scales and shears the image about its centre by amounts drawn \
          uniformly for each sample, keeping its size; what comes from outside the image is \
          `fill` (torchvision.transforms.v2's `RandomAffine` on uint8 images: its draws, in \
          its order, its inverse matrix and its sampling, in 32-bit floats). The angle is \
          anticlockwise, in degrees; a translation is a whole number of pixels, drawn within \
          ±`translate` × the image's width and height; `shear` is one angle's range (along \
          x) or two (x then y), in degrees. Only `center=None` (the image's centre) is taken.",
    params: &[
        Param::required(
            "degrees",
            Kind::Angle,
            "range of the rotation in degrees: a non-negative number `d` (`(-d, d)`) or a \
             (min, max) pair",
        ),
        Param::with_default(
            "translate",
            Kind::OptionalPair,
            "None",
            "the largest translations as fractions of the width and the height, each in \
             [0, 1], or None for none",
        ),
        Param::with_default(
            "scale",
            Kind::OptionalPair,
            "None",
            "range of the scale factor (positive), or None to keep the scale",
        ),
        Param::with_default(
            "shear",
            Kind::Shear,
            "None",
            "range of the shear in degrees: a non-negative number `s` (`(-s, s)` along x), \
             a (min, max) pair along x, or four numbers (x's range, then y's); None for none",
        ),
        INTERPOLATION,
        FILL,
        CENTER,
    ],
    translates: &[Translation::torchvision(
        "RandomAffine",
        &[
            ("degrees", "degrees", Conv::Floats),
            ("translate", "translate", Conv::Same),
            ("scale", "scale", Conv::Same),
            ("shear", "shear", Conv::Same),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("center", "center", Conv::Same),
            ("fill", "fill", Conv::Fill),
        ],
    )],
    build,
};

/// The `interpolation` parameter of `RandomAffine` and `RandomRotation`.
pub(super) const INTERPOLATION: Param = Param::with_default(
    "interpolation",
    Kind::Choice,
    "'nearest'",
    "how the image is sampled: 'nearest' or 'bilinear'",
);

/// The `fill` parameter of `RandomAffine` and `RandomRotation`.
pub(super) const FILL: Param = Param::with_default(
    "fill",
    Kind::Fill,
    "0",
    "the value of what comes from outside the image: one number, or one per channel \
     (R, G, B)",
);

/// The `center` parameter of `RandomAffine` and `RandomRotation`.
pub(super) const CENTER: Param = Param::with_default(
    "center",
    Kind::OptionalPair,
    "None",
    "the centre of the transform: only None (the image's centre) is taken",
);

fn build(args: &Args) -> Result<Op> {
    let degrees = angle_range(args, "degrees")?;
    let translate = match args.value("translate") {
        Value::None => None,
        _ => {
            let (x, y) = args.range("translate")?;
            if !((0.0..=1.0).contains(&x) && (0.0..=1.0).contains(&y)) {
                return Err(args.error(
                    "translate",
                    format!("({x}, {y}): translation values should be between 0 and 1"),
                ));
            }
            Some((x, y))
        }
    };
    let scale = match args.value("scale") {
        Value::None => None,
        _ => {
            let (lo, hi) = args.range("scale")?;
            if !(lo > 0.0 && hi > 0.0) {
                return Err(args.error(
                    "scale",
                    format!("({lo}, {hi}): scale values should be positive"),
                ));
            }
            if !(lo <= hi && hi.is_finite()) {
                return Err(args.error("scale", format!("({lo}, {hi}) must be (min, max)")));
            }
            Some((lo, hi))
        }
    };
    let shear = shear_ranges(args, "shear")?;
    let interpolation = interpolation(args)?;
    let fill = fill(args)?;
    only_the_centre(args)?;
    Ok(Op::new(RandomAffine {
        degrees,
        translate,
        scale,
        shear,
        interpolation,
        fill,
    }))
}

/// torchvision's `_setup_angle` for one range: a non-negative number `x` is `(-x, x)`,
/// else a `(min, max)` pair (which `uniform_` needs increasing).
pub(super) fn angle_range(args: &Args, param: &str) -> Result<(f64, f64)> {
    let (lo, hi) = match args.value(param) {
        Value::Tuple(_) => args.range(param)?,
        value => {
            let x = number(value).ok_or_else(|| {
                args.error(
                    param,
                    format!("takes a number or a (min, max) pair, not {value}"),
                )
            })?;
            if x.is_nan() || x < 0.0 {
                return Err(args.error(param, format!("{x}: a single number must be non-negative")));
            }
            (-x, x)
        }
    };
    if !(lo <= hi && lo.is_finite() && hi.is_finite()) {
        return Err(args.error(
            param,
            format!("({lo}, {hi}) must be finite and of the form (min, max)"),
        ));
    }
    Ok((lo, hi))
}

/// `shear` as torchvision's `_setup_angle(shear, req_sizes=(2, 4))` reads it: the range
/// along x, and along y where given.
fn shear_ranges(args: &Args, param: &str) -> Result<Option<Shear>> {
    let wrong = |value: &Value| {
        args.error(
            param,
            format!("takes a number, 2 or 4 numbers, or None, not {value}"),
        )
    };
    let ranges = match args.value(param) {
        Value::None => return Ok(None),
        Value::Tuple(items) => {
            let values: Vec<f64> = items
                .iter()
                .map(number)
                .collect::<Option<_>>()
                .ok_or_else(|| wrong(args.value(param)))?;
            match values[..] {
                [lo, hi] => Shear::X((lo, hi)),
                [a, b, c, d] => Shear::Xy((a, b), (c, d)),
                _ => return Err(wrong(args.value(param))),
            }
        }
        value => {
            let x = number(value).ok_or_else(|| wrong(value))?;
            if x.is_nan() || x < 0.0 {
                return Err(args.error(param, format!("{x}: a single number must be non-negative")));
            }
            Shear::X((-x, x))
        }
    };
    for (lo, hi) in ranges.ranges() {
        if !(lo <= hi && lo.is_finite() && hi.is_finite()) {
            return Err(args.error(
                param,
                format!("({lo}, {hi}) must be finite and of the form (min, max)"),
            ));
        }
    }
    Ok(Some(ranges))
}

/// How the image is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interpolation {
    /// The nearest pixel (half-way rounds to even).
    Nearest,
    /// The four nearest pixels, weighted.
    Bilinear,
}

impl Interpolation {
    pub(super) fn name(self) -> &'static str {
        match self {
            Interpolation::Nearest => "nearest",
            Interpolation::Bilinear => "bilinear",
        }
    }
}

/// The `interpolation` argument.
pub(super) fn interpolation(args: &Args) -> Result<Interpolation> {
    Ok(
        match args.choice("interpolation", &["nearest", "bilinear"])? {
            "nearest" => Interpolation::Nearest,
            _ => Interpolation::Bilinear,
        },
    )
}

/// The `fill` argument, one value per channel.
pub(super) fn fill(args: &Args) -> Result<[f64; 3]> {
    let fill = match args.value("fill") {
        Value::Tuple(items) if items.len() == 1 => match number(&items[0]) {
            Some(v) => [v; 3],
            None => return Err(args.error("fill", "takes a number or 3 numbers")),
        },
        _ => args.fill("fill")?,
    };
    if !fill.iter().all(|v| v.is_finite()) {
        return Err(args.error("fill", format!("{fill:?} must be finite")));
    }
    Ok(fill)
}

/// The fill as its argument gives it back: one number where the channels agree.
pub(super) fn fill_value(fill: [f64; 3]) -> Value {
    match fill {
        [a, b, c] if a == b && b == c => Value::Float(a),
        values => values.into(),
    }
}

/// Refuses a `center` other than `None`.
pub(super) fn only_the_centre(args: &Args) -> Result<()> {
    if !args.is_none("center") {
        return Err(args.error(
            "center",
            format!(
                "{}: only None (the image's centre) is supported",
                args.value("center")
            ),
        ));
    }
    Ok(())
}

/// The shear's ranges, in degrees.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Shear {
    /// Along x only.
    X((f64, f64)),
    /// Along x, then along y.
    Xy((f64, f64), (f64, f64)),
}

impl Shear {
    fn ranges(self) -> Vec<(f64, f64)> {
        match self {
            Shear::X(x) => vec![x],
            Shear::Xy(x, y) => vec![x, y],
        }
    }

    fn value(self) -> Value {
        match self {
            Shear::X((a, b)) => [a, b].into(),
            Shear::Xy((a, b), (c, d)) => [a, b, c, d].into(),
        }
    }
}

pub(super) struct RandomAffine {
    pub(super) degrees: (f64, f64),
    pub(super) translate: Option<(f64, f64)>,
    pub(super) scale: Option<(f64, f64)>,
    pub(super) shear: Option<Shear>,
    pub(super) interpolation: Interpolation,
    pub(super) fill: [f64; 3],
}

/// One sample's draws: the angle, the translation in pixels, the scale and the shears.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Draw {
    pub(super) angle: f64,
    pub(super) translate: [f64; 2],
    pub(super) scale: f64,
    pub(super) shear: [f64; 2],
}

/// One value drawn from `[lo, hi)` as torch's `uniform_` on a float32 tensor gives it.
pub(super) fn uniform32(rng: &mut Rng, (lo, hi): (f64, f64)) -> f64 {
    f64::from(rng.uniform(lo, hi) as f32)
}

impl RandomAffine {
    /// torchvision's `RandomAffine.make_params` for a `width` × `height` image: the angle,
    /// the translation (each a whole number of pixels, rounded half to even), the scale,
    /// the shear along x then along y, drawn in that order.
    pub(super) fn draw(&self, width: usize, height: usize, rng: &mut Rng) -> Draw {
        let angle = uniform32(rng, self.degrees);
        let translate = match self.translate {
            Some((fx, fy)) => {
                let (dx, dy) = (fx * width as f64, fy * height as f64);
                let tx = uniform32(rng, (-dx, dx)).round_ties_even();
                let ty = uniform32(rng, (-dy, dy)).round_ties_even();
                [tx, ty]
            }
            None => [0.0, 0.0],
        };
        let scale = self.scale.map_or(1.0, |range| uniform32(rng, range));
        let shear = match self.shear {
            None => [0.0, 0.0],
            Some(Shear::X(x)) => [uniform32(rng, x), 0.0],
            Some(Shear::Xy(x, y)) => {
                let sx = uniform32(rng, x);
                [sx, uniform32(rng, y)]
            }
        };
        Draw {
            angle,
            translate,
            scale,
            shear,
        }
    }
}

impl Operator for RandomAffine {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.degrees.into(),
            self.translate.into(),
            self.scale.into(),
            self.shear.map_or(Value::None, Shear::value),
            self.interpolation.name().into(),
            fill_value(self.fill),
            Value::None,
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    // Its warp moves every pixel.
    fn moves_pixels(&self) -> bool {
        true
    }

    fn moves_targets(&self) -> bool {
        true
    }
}

impl Photometric for RandomAffine {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let d = self.draw(image.width, image.height, rng);
        let matrix = inverse_matrix([0.0, 0.0], d.angle, d.translate, d.scale, d.shear);
        warp(image, matrix, self.interpolation, Some(self.fill));
    }

    fn motion(&self, width: usize, height: usize, rng: &mut Rng) -> Option<Motion> {
        Some(Motion::Affine(self.draw(width, height, rng)))
    }
}

/// torchvision's `_get_inverse_affine_matrix`, in its order of 64-bit operations: the
/// matrix taking an output point to its source, both relative to `center` (here relative
/// to the image's centre), for a rotation by `angle` degrees (clockwise in pixel
/// coordinates, where y grows downwards), a translation, a scale, and shears in degrees.
pub(super) fn inverse_matrix(
    center: [f64; 2],
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
) -> [f64; 6] {
    let [a, b, c, d] = rotation_shear(angle, shear);
    let [cx, cy] = center;
    let [cx_plus_tx, cy_plus_ty] = [cx + translate[0], cy + translate[1]];
    let mut m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0];
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
    m
}

/// The rotation-and-shear part `[a, b, c, d]` of torchvision's
/// `_get_inverse_affine_matrix` (its `RSS` before the scale), in its order of 64-bit
/// operations: [`inverse_matrix`] inverts it, [`forward_matrix`] applies it.
fn rotation_shear(angle: f64, shear: [f64; 2]) -> [f64; 4] {
    // Python's math.radians: x · (π / 180).
    let rot = angle.to_radians();
    let sx = shear[0].to_radians();
    let sy = shear[1].to_radians();
    let cos_sy = sy.cos();
    let tan_sx = sx.tan();
    let rot_minus_sy = rot - sy;
    let a = rot_minus_sy.cos() / cos_sy;
    let b = -(a * tan_sx + rot.sin());
    let c = rot_minus_sy.sin() / cos_sy;
    let d = rot.cos() - c * tan_sx;
    [a, b, c, d]
}

/// torchvision's `_get_inverse_affine_matrix(..., inverted=False)`, in its order of 64-bit
/// operations: the matrix taking a source point to the output, in pixel coordinates, for
/// the transform of [`inverse_matrix`] about `center` (pixels): what v2 moves boxes and
/// keypoints by.
pub(crate) fn forward_matrix(
    center: [f64; 2],
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
) -> [f64; 6] {
    let [a, b, c, d] = rotation_shear(angle, shear);
    let [cx, cy] = center;
    let [cx_plus_tx, cy_plus_ty] = [cx + translate[0], cy + translate[1]];
    let mut m = [a * scale, b * scale, 0.0, c * scale, d * scale, 0.0];
    m[2] += cx_plus_tx - m[0] * cx - m[1] * cy;
    m[5] += cy_plus_ty - m[3] * cx - m[4] * cy;
    m
}

/// Where [`warp`] samples each output pixel of a `width` × `height` image through
/// `matrix`: the normalised grid of torchvision's `_affine_grid`, unnormalised as
/// `grid_sample` does, in 32-bit floats. One computation for the pixels and the masks
/// that follow them, so that a mask reads exactly where its image did.
struct Grid {
    r: [f32; 6],
    scale: (f32, f32),
    first: (f32, f32),
}

impl Grid {
    #[inline(always)]
    fn new(width: usize, height: usize, matrix: [f64; 6]) -> Grid {
        Grid::onto((width, height), (width, height), matrix)
    }

    /// The grid of an output of `output` (width, height) read from an image of `input`:
    /// `_affine_grid`'s `ow`, `oh` (a rotation's `expand`) set the grid's points, the
    /// input's size normalises them.
    #[inline(always)]
    fn onto(input: (usize, usize), output: (usize, usize), matrix: [f64; 6]) -> Grid {
        let (width, height) = input;
        let theta = matrix.map(|v| v as f32);
        let (half_w, half_h) = ((0.5 * width as f64) as f32, (0.5 * height as f64) as f32);
        // `theta.transpose(1, 2).div_([w/2, h/2])`: x's row by w/2, y's by h/2.
        let r = [
            theta[0] / half_w,
            theta[1] / half_w,
            theta[2] / half_w,
            theta[3] / half_h,
            theta[4] / half_h,
            theta[5] / half_h,
        ];
        Grid {
            r,
            scale: (width as f32 / 2.0, height as f32 / 2.0),
            // `linspace((1 - n) / 2, (n - 1) / 2, n)`: half-integers or integers, exact.
            first: ((1.0 - output.0 as f32) * 0.5, (1.0 - output.1 as f32) * 0.5),
        }
    }

    /// The source point (pixel coordinates, `align_corners=False`) output pixel (`ox`,
    /// `oy`) samples.
    #[inline(always)]
    fn source(&self, ox: usize, oy: usize) -> (f32, f32) {
        let [r00, r10, r20, r01, r11, r21] = self.r;
        let (x, y) = (self.first.0 + ox as f32, self.first.1 + oy as f32);
        let gx = x * r00 + y * r10 + r20;
        let gy = x * r01 + y * r11 + r21;
        (
            (gx + 1.0) * self.scale.0 - 0.5,
            (gy + 1.0) * self.scale.1 - 0.5,
        )
    }
}

/// The pixel [`warp`] reads, nearest, for each output pixel of a `width` × `height` image
/// through `matrix` (row-major indices), [`OUTSIDE`] where it reads the fill: where a mask
/// moved with the image reads.
pub(super) fn nearest_sources(width: usize, height: usize, matrix: [f64; 6]) -> Vec<u32> {
    nearest_sources_onto((width, height), (width, height), matrix)
}

/// [`nearest_sources`] for an output of `output` (width, height) read from an image of
/// `input` ([`warp_onto`]).
pub(super) fn nearest_sources_onto(
    input: (usize, usize),
    output: (usize, usize),
    matrix: [f64; 6],
) -> Vec<u32> {
    let grid = Grid::onto(input, output, matrix);
    nearest_reads_onto(input, output, |ox, oy| grid.source(ox, oy))
}

/// The pixel [`resample`] reads, nearest, for each output pixel of a `width` × `height`
/// image whose pixel (`ox`, `oy`) samples `source(ox, oy)` (row-major indices),
/// [`OUTSIDE`] where it reads the fill.
pub(super) fn nearest_reads(
    width: usize,
    height: usize,
    source: impl Fn(usize, usize) -> (f32, f32),
) -> Vec<u32> {
    nearest_reads_onto((width, height), (width, height), source)
}

/// [`nearest_reads`] for an output of `output` (width, height) read from an image of
/// `input`.
fn nearest_reads_onto(
    (width, height): (usize, usize),
    (out_w, out_h): (usize, usize),
    source: impl Fn(usize, usize) -> (f32, f32),
) -> Vec<u32> {
    let mut out = Vec::with_capacity(out_w * out_h);
    for oy in 0..out_h {
        for ox in 0..out_w {
            let (ix, iy) = source(ox, oy);
            let (nx, ny) = (ix.round_ties_even(), iy.round_ties_even());
            let inside = nx >= 0.0 && ny >= 0.0 && nx < width as f32 && ny < height as f32;
            out.push(match inside {
                true => (ny as usize * width + nx as usize) as u32,
                false => OUTSIDE,
            });
        }
    }
    out
}

dispatched! {
    /// The image resampled through `matrix` (from [`inverse_matrix`], about the image's
    /// centre), keeping its size, as torchvision's `_affine_grid` and `_apply_grid_transform`
    /// on a uint8 image: in 32-bit floats, each output pixel's centre `(x, y)` (relative to
    /// the image's centre) mapped to the normalised source point
    /// `(x·θ₀ + y·θ₁ + θ₂) / (w/2)`, `(x·θ₃ + y·θ₄ + θ₅) / (h/2)`, that unnormalised as
    /// `grid_sample` does with `align_corners=False` (`(g + 1)·size/2 − 0.5`), sampled with
    /// zeros outside, and the fill blended in by the mask sampled alike (nearest: the fill
    /// where the mask is under 0.5; bilinear: `(v − fill)·mask + fill`), rounded half to even.
    /// Without a fill (torchvision's `fill=None`) no mask is sampled: zeros come in from
    /// outside, weighted as they are.
    pub(super) fn warp(
        image: &mut Planes<'_>,
        matrix: [f64; 6],
        interpolation: Interpolation,
        fill: Option<[f64; 3]>,
    )
        => warp_body
}

#[inline(always)]
fn warp_body(
    image: &mut Planes<'_>,
    matrix: [f64; 6],
    interpolation: Interpolation,
    fill: Option<[f64; 3]>,
) {
    let (width, height) = (image.width, image.height);
    if width == 0 || height == 0 {
        return;
    }
    let grid = Grid::new(width, height, matrix);
    resample(image, |ox, oy| grid.source(ox, oy), interpolation, fill);
}

dispatched! {
    /// [`warp`] onto an output of `output` (width, height) pixels, about its centre: what
    /// torchvision's `rotate_image` with `expand=True` samples. `image.data` must hold the
    /// output's three planes; the image takes the output's size.
    pub(super) fn warp_onto(
        image: &mut Planes<'_>,
        output: (usize, usize),
        matrix: [f64; 6],
        interpolation: Interpolation,
        fill: Option<[f64; 3]>,
    )
        => warp_onto_body
}

#[inline(always)]
fn warp_onto_body(
    image: &mut Planes<'_>,
    output: (usize, usize),
    matrix: [f64; 6],
    interpolation: Interpolation,
    fill: Option<[f64; 3]>,
) {
    let input = (image.width, image.height);
    if input.0 == 0 || input.1 == 0 {
        return;
    }
    let grid = Grid::onto(input, output, matrix);
    resample_onto(
        image,
        output,
        |ox, oy| grid.source(ox, oy),
        interpolation,
        fill,
    );
}

/// The image resampled where `at(ox, oy)` says each output pixel (`ox`, `oy`) reads
/// (pixel coordinates), keeping its size, as torch's `grid_sample` (`align_corners=False`,
/// zeros outside) and torchvision's `_apply_grid_transform` on a uint8 image: sampled in
/// 32-bit floats, the fill blended in by a mask sampled alike (nearest: the fill where the
/// mask is under 0.5; bilinear: `(v − fill)·mask + fill`), rounded half to even; without a
/// fill, zeros from outside weighted as they are. Inlined into each kernel's dispatched
/// body, so that the grid's arithmetic is compiled with the sampling.
#[inline(always)]
pub(super) fn resample(
    image: &mut Planes<'_>,
    at: impl Fn(usize, usize) -> (f32, f32),
    interpolation: Interpolation,
    fill: Option<[f64; 3]>,
) {
    let output = (image.width, image.height);
    resample_onto(image, output, at, interpolation, fill);
}

/// [`resample`] onto an output of `output` (width, height) pixels, which `image.data`
/// must hold; the image takes its size.
#[inline(always)]
fn resample_onto(
    image: &mut Planes<'_>,
    (out_w, out_h): (usize, usize),
    at: impl Fn(usize, usize) -> (f32, f32),
    interpolation: Interpolation,
    fill: Option<[f64; 3]>,
) {
    let (width, height) = (image.width, image.height);
    let fill = fill.map(|fill| fill.map(|v| v as f32));
    let area = width * height;
    let source = image.data[..3 * area].to_vec();
    let planes: Vec<&[u8]> = source.chunks_exact(area).collect();
    let out_area = out_w * out_h;
    let out = &mut image.data[..3 * out_area];
    for oy in 0..out_h {
        for ox in 0..out_w {
            let (ix, iy) = at(ox, oy);
            let i = oy * out_w + ox;
            match interpolation {
                Interpolation::Nearest => {
                    let (nx, ny) = (ix.round_ties_even(), iy.round_ties_even());
                    let inside = nx >= 0.0 && ny >= 0.0 && nx < width as f32 && ny < height as f32;
                    let at = ny as usize * width + nx as usize;
                    for c in 0..3 {
                        out[c * out_area + i] = if inside {
                            planes[c][at]
                        } else {
                            fill.map_or(0, |fill| to_u8(fill[c]))
                        };
                    }
                }
                Interpolation::Bilinear => {
                    let (xw, yn) = (ix.floor(), iy.floor());
                    let w = ix - xw;
                    let e = 1.0 - w;
                    let n = iy - yn;
                    let s = 1.0 - n;
                    let weights = [s * e, s * w, n * e, n * w];
                    // The corners nw, ne, sw, se: their index, where inside.
                    let corner = |dx: f32, dy: f32| {
                        let (cx, cy) = (xw + dx, yn + dy);
                        (cx >= 0.0 && cy >= 0.0 && cx < width as f32 && cy < height as f32)
                            .then(|| cy as usize * width + cx as usize)
                    };
                    let corners = [
                        corner(0.0, 0.0),
                        corner(1.0, 0.0),
                        corner(0.0, 1.0),
                        corner(1.0, 1.0),
                    ];
                    // The mask: 1 sampled alike.
                    let mut mask = 0.0f32;
                    for (at, weight) in corners.iter().zip(weights) {
                        mask += if at.is_some() { weight } else { 0.0 };
                    }
                    for c in 0..3 {
                        let mut v = 0.0f32;
                        for (at, weight) in corners.iter().zip(weights) {
                            v += at.map_or(0.0, |at| f32::from(planes[c][at]) * weight);
                        }
                        out[c * out_area + i] = match fill {
                            Some(fill) => to_u8((v - fill[c]) * mask + fill[c]),
                            None => to_u8(v),
                        };
                    }
                }
            }
        }
    }
    (image.width, image.height) = (out_w, out_h);
}

/// torch's `round_().to(uint8)` of a value in range (clamped here, where torch's cast of
/// one outside is undefined).
fn to_u8(v: f32) -> u8 {
    cast_u8(v.round_ties_even())
}
