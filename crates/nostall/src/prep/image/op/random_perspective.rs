//! `RandomPerspective`: the image's corners moved inwards by random amounts, and the image
//! warped by the perspective that takes them there.
//!
//! The kernel is torchvision.transforms.v2's on uint8 tensors: the eight coefficients of
//! the perspective taking the moved corners back to the image's (`_get_perspective_coeffs`,
//! solved in 64-bit floats, rounded to 32 bits), each output pixel's centre mapped through
//! them (`_perspective_grid`), and sampled as `grid_sample` does with
//! `align_corners=False` (`_apply_grid_transform`), all in 32-bit floats.

use super::affine::{
    fill, fill_value, interpolation, nearest_reads, resample, Interpolation, FILL,
};
use super::simd::dispatched;
use super::{Declaration, Motion, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomPerspective",
    doc: "With probability `p`, warps the image by a perspective, keeping its size: each \
          corner moves inwards by a whole number of pixels drawn uniformly, at most \
          `distortion_scale` × half the width across and × half the height down, and the \
          image follows its corners; what comes from outside the image is `fill` \
          (torchvision.transforms.v2's `RandomPerspective` on uint8 images: its draws, in \
          its order, its coefficients and its sampling, in 32-bit floats).",
    params: &[
        Param::with_default(
            "distortion_scale",
            Kind::Float,
            "0.5",
            "how far the corners may move, from 0 (not at all) to 1 (up to half the image)",
        ),
        Param::with_default("p", Kind::Float, "0.5", "probability of warping a sample"),
        INTERPOLATION,
        FILL,
    ],
    translates: &[Translation::torchvision(
        "RandomPerspective",
        &[
            ("distortion_scale", "distortion_scale", Conv::Float),
            ("p", "p", Conv::Float),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("fill", "fill", Conv::Fill),
        ],
    )],
    build,
};

/// The `interpolation` parameter, bilinear by default as torchvision's.
const INTERPOLATION: Param = Param::with_default(
    "interpolation",
    Kind::Choice,
    "'bilinear'",
    "how the image is sampled: 'nearest' or 'bilinear'",
);

fn build(args: &Args) -> Result<Op> {
    let distortion_scale = args.float("distortion_scale")?;
    if !(0.0..=1.0).contains(&distortion_scale) {
        return Err(args.error(
            "distortion_scale",
            format!("{distortion_scale}: the value should be between 0 and 1"),
        ));
    }
    Ok(Op::new(RandomPerspective {
        distortion_scale,
        p: args.probability("p")?,
        interpolation: interpolation(args)?,
        fill: fill(args)?,
    }))
}

struct RandomPerspective {
    distortion_scale: f64,
    p: f64,
    interpolation: Interpolation,
    fill: [f64; 3],
}

/// Where the image's corners go: top left, top right, bottom right, bottom left, each
/// `[x, y]` in pixel indices (v2's `endpoints`).
type Corners = [[i64; 2]; 4];

impl RandomPerspective {
    /// torchvision's draw for a `width` × `height` image: whether it warps
    /// (`_RandomApplyTransform`'s `rand < p`), then `make_params`' corners, each a
    /// `randint` in its order (x then y of the top left, top right, bottom right, bottom
    /// left corner); `None` where it does not warp.
    fn draw(&self, width: usize, height: usize, rng: &mut Rng) -> Option<Corners> {
        if rng.next_f64() >= self.p {
            return None;
        }
        let (w, h) = (width as i64, height as i64);
        // Python's `int(distortion_scale * half) + 1`: truncated.
        let bound_w = (self.distortion_scale * (w / 2) as f64) as i64 + 1;
        let bound_h = (self.distortion_scale * (h / 2) as f64) as i64 + 1;
        // torch's `randint(low, high)`: uniform in [low, high).
        let mut randint = |low: i64, high: i64| low + rng.below((high - low) as u64) as i64;
        let top_left = [randint(0, bound_w), randint(0, bound_h)];
        let top_right = [randint(w - bound_w, w), randint(0, bound_h)];
        let bottom_right = [randint(w - bound_w, w), randint(h - bound_h, h)];
        let bottom_left = [randint(0, bound_w), randint(h - bound_h, h)];
        Some([top_left, top_right, bottom_right, bottom_left])
    }
}

impl Operator for RandomPerspective {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.distortion_scale.into(),
            self.p.into(),
            self.interpolation.name().into(),
            fill_value(self.fill),
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

impl Photometric for RandomPerspective {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if let Some(corners) = self.draw(image.width, image.height, rng) {
            let c = coefficients(corners, image.width, image.height);
            perspective(image, c, self.interpolation, Some(self.fill));
        }
    }

    fn motion(&self, width: usize, height: usize, rng: &mut Rng) -> Option<Motion> {
        let corners = self.draw(width, height, rng)?;
        Some(Motion::Perspective(coefficients(corners, width, height)))
    }
}

/// A perspective whose corners are given, not drawn: v2's functional `perspective` with
/// `startpoints` the image's corners, what the tests pin the draw of `RandomPerspective`
/// to. Not among [`DECLARATIONS`](super::DECLARATIONS): made by [`pinned_perspective`].
static PINNED: Declaration = Declaration {
    name: "Perspective",
    doc: "Warps the image by the perspective taking its corners to `endpoints` (test only).",
    params: &[
        Param::required(
            "endpoints",
            Kind::Sides,
            "where the corners go, x then y of the top left, top right, bottom right and \
             bottom left corner, in pixel indices",
        ),
        INTERPOLATION,
        FILL,
    ],
    translates: &[],
    build: build_pinned,
};

fn build_pinned(args: &Args) -> Result<Op> {
    let v = args.floats::<8>("endpoints")?;
    if v.iter().any(|x| x.fract() != 0.0 || x.abs() > 1e9) {
        return Err(args.error("endpoints", format!("{v:?}: takes 8 ints")));
    }
    let corners = [0, 1, 2, 3].map(|k| [v[2 * k] as i64, v[2 * k + 1] as i64]);
    Ok(Op::new(Pinned {
        corners,
        interpolation: interpolation(args)?,
        fill: fill(args)?,
    }))
}

struct Pinned {
    corners: Corners,
    interpolation: Interpolation,
    fill: [f64; 3],
}

impl Operator for Pinned {
    fn declaration(&self) -> &'static Declaration {
        &PINNED
    }

    fn args(&self) -> Vec<Value> {
        let flat = self
            .corners
            .iter()
            .flatten()
            .map(|&v| Value::Int(v))
            .collect();
        vec![
            Value::Tuple(flat),
            self.interpolation.name().into(),
            fill_value(self.fill),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    fn moves_pixels(&self) -> bool {
        true
    }

    fn moves_targets(&self) -> bool {
        true
    }
}

impl Photometric for Pinned {
    fn apply(&self, image: &mut Planes<'_>, _rng: &mut Rng) {
        let c = coefficients(self.corners, image.width, image.height);
        perspective(image, c, self.interpolation, Some(self.fill));
    }

    fn motion(&self, width: usize, height: usize, _rng: &mut Rng) -> Option<Motion> {
        Some(Motion::Perspective(coefficients(
            self.corners,
            width,
            height,
        )))
    }
}

/// The perspective taking the image's corners to `endpoints` (8 ints: x then y of the
/// top left, top right, bottom right and bottom left corner), sampled `interpolation`
/// (`'nearest'` or `'bilinear'`) with `fill` outside: v2's functional `perspective`, for
/// the tests against it. Not a stable interface.
///
/// # Errors
///
/// [`Error::Config`](crate::error::Error::Config) for endpoints that are not 8 ints, an
/// interpolation or a fill it does not take.
#[doc(hidden)]
pub fn pinned_perspective(endpoints: [i64; 8], interpolation: &str, fill: [f64; 3]) -> Result<Op> {
    PINNED.call(
        vec![
            Value::Tuple(endpoints.iter().map(|&v| Value::Int(v)).collect()),
            interpolation.into(),
            fill.into(),
        ],
        Vec::new(),
    )
}

/// torchvision's `_get_perspective_coeffs` for a `width` × `height` image whose corners
/// go to `endpoints`: the coefficients `a … h` of the map from an output point `(x, y)` to
/// its source, `((a·x + b·y + c) / (g·x + h·y + 1), (d·x + e·y + f) / (g·x + h·y + 1))`,
/// solved in 64-bit floats and rounded to 32 bits. torchvision solves its eight equations
/// by least squares (LAPACK's `gels`); they are square and, for corners in their own
/// quarters, regular, so elimination gives the same solution but for the last bits
/// of 64, which the rounding to 32 drops. A singular system gives non-finite
/// coefficients, which sample nothing but the fill.
pub(super) fn coefficients(endpoints: Corners, width: usize, height: usize) -> [f32; 8] {
    let (w, h) = (width as f64, height as f64);
    let startpoints = [
        [0.0, 0.0],
        [w - 1.0, 0.0],
        [w - 1.0, h - 1.0],
        [0.0, h - 1.0],
    ];
    let mut a = [[0.0f64; 9]; 8];
    for (i, (end, start)) in endpoints.iter().zip(startpoints).enumerate() {
        let [x, y] = end.map(|v| v as f64);
        a[2 * i] = [
            x,
            y,
            1.0,
            0.0,
            0.0,
            0.0,
            -start[0] * x,
            -start[0] * y,
            start[0],
        ];
        a[2 * i + 1] = [
            0.0,
            0.0,
            0.0,
            x,
            y,
            1.0,
            -start[1] * x,
            -start[1] * y,
            start[1],
        ];
    }
    // Gaussian elimination with partial pivoting, the right-hand side in column 8.
    for col in 0..8 {
        let pivot = (col..8)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        let pivot_row = a[col];
        for row in a.iter_mut().skip(col + 1) {
            let factor = row[col] / pivot_row[col];
            for (v, p) in row.iter_mut().zip(pivot_row).skip(col) {
                *v -= factor * p;
            }
        }
    }
    let mut solution = [0.0f64; 8];
    for (row, equation) in a.iter().enumerate().rev() {
        let known: f64 = (row + 1..8).map(|k| equation[k] * solution[k]).sum();
        solution[row] = (equation[8] - known) / equation[row];
    }
    solution.map(|v| v as f32)
}

/// Where the perspective of coefficients `c` ([`coefficients`]) reads each output pixel
/// of a `width` × `height` image: torchvision's `_perspective_grid`, in 32-bit floats,
/// each pixel's centre `(x + 0.5, y + 0.5)` mapped to the normalised source point
/// `(x·a + y·b + c) / (w/2) / (x·g + y·h + 1) − 1` (and `d`, `e`, `f` over `h/2` for y),
/// unnormalised as `grid_sample` does with `align_corners=False`. One computation for the
/// pixels and the masks that follow them.
struct PerspectiveGrid {
    r: [f32; 6],
    g: [f32; 2],
    scale: (f32, f32),
}

impl PerspectiveGrid {
    #[inline(always)]
    fn new(width: usize, height: usize, c: [f32; 8]) -> PerspectiveGrid {
        let (half_w, half_h) = ((0.5 * width as f64) as f32, (0.5 * height as f64) as f32);
        PerspectiveGrid {
            r: [
                c[0] / half_w,
                c[1] / half_w,
                c[2] / half_w,
                c[3] / half_h,
                c[4] / half_h,
                c[5] / half_h,
            ],
            g: [c[6], c[7]],
            scale: (width as f32 / 2.0, height as f32 / 2.0),
        }
    }

    /// The source point (pixel coordinates) output pixel (`ox`, `oy`) samples.
    #[inline(always)]
    fn source(&self, ox: usize, oy: usize) -> (f32, f32) {
        let [r0, r1, r2, r3, r4, r5] = self.r;
        // `linspace(0.5, n - 0.5, n)`: exact.
        let (x, y) = (ox as f32 + 0.5, oy as f32 + 0.5);
        // torch's `bmm` sums the three products in order, unfused (as measured against it).
        let den = x * self.g[0] + y * self.g[1] + 1.0;
        let gx = (x * r0 + y * r1 + r2) / den - 1.0;
        let gy = (x * r3 + y * r4 + r5) / den - 1.0;
        (
            (gx + 1.0) * self.scale.0 - 0.5,
            (gy + 1.0) * self.scale.1 - 0.5,
        )
    }
}

/// The pixel [`perspective`] reads, nearest, for each output pixel of a `width` × `height`
/// image (row-major indices), [`OUTSIDE`](crate::prep::image::OUTSIDE) where it reads the
/// fill: where a mask moved with the image reads.
pub(super) fn nearest_sources(width: usize, height: usize, c: [f32; 8]) -> Vec<u32> {
    let grid = PerspectiveGrid::new(width, height, c);
    nearest_reads(width, height, |ox, oy| grid.source(ox, oy))
}

dispatched! {
    /// The image warped by the perspective of coefficients `c` ([`coefficients`]), keeping
    /// its size: torchvision's `perspective_image` on a uint8 image, its grid
    /// ([`PerspectiveGrid`]) sampled as its `_apply_grid_transform` samples.
    pub(super) fn perspective(
        image: &mut Planes<'_>,
        c: [f32; 8],
        interpolation: Interpolation,
        fill: Option<[f64; 3]>,
    )
        => perspective_body
}

#[inline(always)]
fn perspective_body(
    image: &mut Planes<'_>,
    c: [f32; 8],
    interpolation: Interpolation,
    fill: Option<[f64; 3]>,
) {
    if image.width == 0 || image.height == 0 {
        return;
    }
    let grid = PerspectiveGrid::new(image.width, image.height, c);
    resample(image, |ox, oy| grid.source(ox, oy), interpolation, fill);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmoved_corners_give_the_identity_and_moved_ones_map_back_to_the_image_corners() {
        let c = coefficients([[0, 0], [9, 0], [9, 6], [0, 6]], 10, 7);
        let identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        assert!(
            c.iter().zip(identity).all(|(a, b)| (a - b).abs() < 1e-6),
            "{c:?}"
        );
        let corners = [[3, 1], [40, 4], [45, 30], [2, 27]];
        let c = coefficients(corners, 50, 34).map(f64::from);
        let starts = [[0.0, 0.0], [49.0, 0.0], [49.0, 33.0], [0.0, 33.0]];
        for (end, start) in corners.iter().zip(starts) {
            let [x, y] = end.map(|v| v as f64);
            let den = c[6] * x + c[7] * y + 1.0;
            let sx = (c[0] * x + c[1] * y + c[2]) / den;
            let sy = (c[3] * x + c[4] * y + c[5]) / den;
            assert!((sx - start[0]).abs() < 1e-3 && (sy - start[1]).abs() < 1e-3);
        }
    }

    #[test]
    fn draws_stay_in_their_corners_and_p_0_leaves_the_image() {
        let op = RandomPerspective {
            distortion_scale: 0.5,
            p: 1.0,
            interpolation: Interpolation::Bilinear,
            fill: [0.0; 3],
        };
        let mut rng = Rng::new(3);
        let mut counts = [0usize; 11];
        for _ in 0..11_000 {
            let [tl, tr, br, bl] = op.draw(41, 30, &mut rng).unwrap();
            // Half of 41 is 20, of 30 is 15: corners within 11 and 8 pixels.
            assert!(
                (0..11).contains(&tl[0]) && (0..8).contains(&tl[1]),
                "{tl:?}"
            );
            assert!(
                (30..41).contains(&tr[0]) && (0..8).contains(&tr[1]),
                "{tr:?}"
            );
            assert!(
                (30..41).contains(&br[0]) && (22..30).contains(&br[1]),
                "{br:?}"
            );
            assert!(
                (0..11).contains(&bl[0]) && (22..30).contains(&bl[1]),
                "{bl:?}"
            );
            counts[tl[0] as usize] += 1;
        }
        // Each of the 11 values 1000 times, give or take 5 standard deviations (~150).
        assert!(counts.iter().all(|&n| n.abs_diff(1000) < 150), "{counts:?}");
        let sometimes = RandomPerspective { p: 0.3, ..op };
        let drawn = (0..10_000)
            .filter(|_| sometimes.motion(41, 30, &mut rng).is_some())
            .count();
        assert!(drawn.abs_diff(3000) < 230, "{drawn}");
        let never = RandomPerspective { p: 0.0, ..op };
        assert_eq!(never.motion(41, 30, &mut rng), None);
    }

    #[test]
    fn the_same_generator_warps_alike_and_others_otherwise() {
        let op: Op = "RandomPerspective(0.8, p=1.0, interpolation='nearest', fill=(1, 2, 3))"
            .parse()
            .unwrap();
        let Stage::Pixels(pixels) = op.stage() else {
            panic!("{op} runs on pixels")
        };
        let original: Vec<u8> = (0..3 * 24 * 16).map(|i| (i * 37 % 251) as u8).collect();
        let warped = |seed| {
            let mut data = original.clone();
            let mut image = Planes {
                data: &mut data,
                width: 24,
                height: 16,
            };
            pixels.apply(&mut image, &mut Rng::new(seed));
            data
        };
        let outputs: std::collections::HashSet<_> = (0..50).map(&warped).collect();
        assert!(outputs.len() > 40);
        assert_eq!(warped(7), warped(7));
    }

    #[test]
    fn a_singular_draw_fills_without_panicking() {
        // All four corners on one point: no perspective takes them back to the image's.
        let c = coefficients([[1, 1]; 4], 4, 4);
        let mut data = vec![7u8; 48];
        let mut image = Planes {
            data: &mut data,
            width: 4,
            height: 4,
        };
        perspective(&mut image, c, Interpolation::Bilinear, Some([9.0; 3]));
        assert!(nearest_sources(4, 4, c).len() == 16);
    }
}
