//! `RandomRotation`: the image rotated about its centre by a random angle.

use super::affine::{
    angle_range, fill, fill_value, interpolation, inverse_matrix, only_the_centre, uniform32, warp,
    warp_onto, Interpolation, CENTER, FILL, INTERPOLATION,
};
use super::{Declaration, Grown, Motion, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomRotation",
    doc: "Rotates the image anticlockwise about its centre by an angle in degrees drawn \
          uniformly from `degrees` for each sample, keeping its size; what comes from \
          outside the image is `fill` (torchvision.transforms.v2's `RandomRotation` on uint8 \
          images: its draw, its inverse matrix and its sampling, in 32-bit floats, and its \
          exact turns by 0 and 180 degrees, and by 90 and 270 on square images). With \
          `expand=True` each image grows to hold the whole turned image (v2's size, its \
          quarter turns exact on any image), at the top left of a canvas of `fill` as large \
          as the largest `degrees` allows; a boxes field's `size` says where it ends. Only \
          operators on pixels that do not move them, and `Normalize`, may follow it. Only \
          `center=None` is taken.",
    params: &[
        Param::required(
            "degrees",
            Kind::Angle,
            "range of the angle in degrees: a non-negative number `d` (`(-d, d)`) or a \
             (min, max) pair",
        ),
        INTERPOLATION,
        Param::with_default(
            "expand",
            Kind::Bool,
            "False",
            "whether each image grows to hold the whole rotated image, on a canvas that \
             holds the largest",
        ),
        CENTER,
        FILL,
    ],
    translates: &[Translation::torchvision(
        "RandomRotation",
        &[
            ("degrees", "degrees", Conv::Floats),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("expand", "expand", Conv::Bool),
            ("center", "center", Conv::Same),
            ("fill", "fill", Conv::Fill),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let degrees = angle_range(args, "degrees")?;
    let interpolation = interpolation(args)?;
    let expand = args.bool("expand")?;
    only_the_centre(args)?;
    let fill = fill(args)?;
    if expand && fill.iter().any(|v| !(0.0..=255.0).contains(v)) {
        // The canvas around each grown image is bytes of this colour.
        return Err(args.error(
            "fill",
            format!("{fill:?}: with expand=True use values from 0 to 255"),
        ));
    }
    Ok(Op::new(RandomRotation {
        degrees,
        interpolation,
        expand,
        fill,
    }))
}

pub(super) struct RandomRotation {
    pub(super) degrees: (f64, f64),
    pub(super) interpolation: Interpolation,
    /// Whether each image grows to hold the whole turned image.
    pub(super) expand: bool,
    pub(super) fill: [f64; 3],
}

impl RandomRotation {
    /// torchvision's `RandomRotation.make_params`: one angle, as torch's float32
    /// `uniform_` gives it.
    pub(super) fn draw(&self, rng: &mut Rng) -> f64 {
        uniform32(rng, self.degrees)
    }
}

impl Operator for RandomRotation {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.degrees.into(),
            self.interpolation.name().into(),
            self.expand.into(),
            Value::None,
            fill_value(self.fill),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    // Its turn moves every pixel.
    fn moves_pixels(&self) -> bool {
        true
    }

    fn moves_targets(&self) -> bool {
        true
    }
}

impl Photometric for RandomRotation {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let angle = self.draw(rng);
        match self.expand {
            false => rotate(image, angle, self.interpolation, Some(self.fill)),
            true => rotate_expanded(image, angle, self.interpolation, self.fill),
        }
    }

    fn motion(&self, _width: usize, _height: usize, rng: &mut Rng) -> Option<Motion> {
        let angle = self.draw(rng);
        Some(match self.expand {
            false => Motion::Rotation(angle),
            true => Motion::Expanded(angle),
        })
    }

    fn grows(&self, width: usize, height: usize) -> Option<Grown> {
        self.expand.then(|| {
            let (width, height) = largest_expanded(self.degrees, (width, height));
            Grown {
                width,
                height,
                fill: self.fill.map(|v| v.round() as u8),
            }
        })
    }
}

/// How torchvision's `rotate_image` (`expand=False`, `center=None`) turns an image.
pub(super) enum Turning {
    /// Exactly (its `torch.rot90` fast path): output pixel `(x, y)` of a `w` × `h` image
    /// takes the source pixel `at(x, y, w, h)`, an `(x, y)` pair.
    Exact(fn(usize, usize, usize, usize) -> (usize, usize)),
    /// Through the affine kernel, with this inverse matrix ([`inverse_matrix`]).
    Warp([f64; 6]),
}

/// How torchvision's `rotate_image` turns an image by `angle` degrees, `square` or not:
/// the angle taken modulo 360; 0 degrees not at all (`None`); 180, and 90 and 270 on a
/// square image, exactly; else the affine kernel with the angle negated.
pub(super) fn turning(angle: f64, square: bool) -> Option<Turning> {
    // Python's `angle % 360`: in [0, 360).
    let angle = angle.rem_euclid(360.0);
    if angle == 0.0 {
        return None;
    }
    Some(if angle == 180.0 {
        Turning::Exact(|x, y, w, h| (w - 1 - x, h - 1 - y))
    } else if angle == 90.0 && square {
        // torch.rot90(k=1): out[y][x] = in[x][w - 1 - y].
        Turning::Exact(|x, y, w, _| (w - 1 - y, x))
    } else if angle == 270.0 && square {
        // torch.rot90(k=3): out[y][x] = in[h - 1 - x][y].
        Turning::Exact(|x, y, _, h| (y, h - 1 - x))
    } else {
        Turning::Warp(inverse_matrix(
            [0.0, 0.0],
            -angle,
            [0.0, 0.0],
            1.0,
            [0.0, 0.0],
        ))
    })
}

/// torchvision's `rotate_image` (`expand=False`, `center=None`), as [`turning`] says.
pub(super) fn rotate(
    image: &mut Planes<'_>,
    angle: f64,
    interpolation: Interpolation,
    fill: Option<[f64; 3]>,
) {
    match turning(angle, image.width == image.height) {
        None => {}
        Some(Turning::Exact(at)) => image.turn(at),
        Some(Turning::Warp(matrix)) => warp(image, matrix, interpolation, fill),
    }
}

/// How torchvision's `rotate_image` with `expand=True` (`center=None`) turns a `width` ×
/// `height` image by `angle` degrees, and the output's width and height: as [`turning`]
/// turns a square image (with `expand`, v2 takes its quarter turns exactly whatever the
/// sides, swapping them), else the affine kernel onto the size
/// [`affine_output_size`] gives for its matrix.
pub(super) fn expanded_turning(
    angle: f64,
    (width, height): (usize, usize),
) -> (Option<Turning>, (usize, usize)) {
    let turn = turning(angle, true);
    let size = match &turn {
        None => (width, height),
        Some(Turning::Exact(_)) if angle.rem_euclid(360.0) == 180.0 => (width, height),
        Some(Turning::Exact(_)) => (height, width),
        Some(Turning::Warp(matrix)) => affine_output_size(*matrix, width, height),
    };
    (turn, size)
}

/// torchvision's `_compute_affine_output_size` (its tensor form, what eager code runs):
/// the width and height that hold a `width` × `height` image moved by the inverse
/// matrix `matrix` (about the image's centre), in 32-bit floats: the corners through
/// the matrix, their extent truncated to 1e-4 before the ceiling and floor, so that a
/// corner a rounding error past a whole pixel does not add one.
pub(super) fn affine_output_size(matrix: [f64; 6], width: usize, height: usize) -> (usize, usize) {
    let theta = matrix.map(|v| v as f32);
    let (half_w, half_h) = ((0.5 * width as f64) as f32, (0.5 * height as f64) as f32);
    let corners = [
        [-half_w, -half_h],
        [-half_w, half_h],
        [half_w, half_h],
        [half_w, -half_h],
    ]
    .map(|[x, y]| {
        [
            x * theta[0] + y * theta[1] + theta[2],
            x * theta[3] + y * theta[4] + theta[5],
        ]
    });
    // Python's 1 / 1e-4 and 1e-4, as torch takes a scalar into a float32 product.
    let (inv_tol, tol) = ((1.0 / 1e-4) as f32, 1e-4f32);
    let side = |axis: usize, half: f32| {
        let values = corners.iter().map(|p| p[axis]);
        let low = values.clone().fold(f32::INFINITY, f32::min) + half;
        let high = values.fold(f32::NEG_INFINITY, f32::max) + half;
        let high = ((high * inv_tol).trunc() * tol).ceil();
        let low = ((low * inv_tol).trunc() * tol).floor();
        // A rotation's extent is at most the diagonal: never negative, never huge.
        (high - low).max(0.0) as usize
    };
    (side(0, half_w), side(1, half_h))
}

/// torchvision's `rotate_image` with `expand=True` (`center=None`): the image turned onto
/// its own grown size ([`expanded_turning`]). `image.data` must hold the grown image's
/// planes (the pipeline hands the room of its canvas, [`Grown`]); where it cannot, the
/// image is left unturned at the grown size, which the pipeline reports.
pub(super) fn rotate_expanded(
    image: &mut Planes<'_>,
    angle: f64,
    interpolation: Interpolation,
    fill: [f64; 3],
) {
    let (turn, size) = expanded_turning(angle, (image.width, image.height));
    if image.data.len() < 3 * size.0 * size.1 {
        (image.width, image.height) = size;
        return;
    }
    match turn {
        None => {}
        Some(Turning::Exact(at)) => image.turn_onto(size, at),
        Some(Turning::Warp(matrix)) => warp_onto(image, size, matrix, interpolation, Some(fill)),
    }
}

/// The width and height of the canvas that holds every image `RandomRotation(expand=True)`
/// makes of a `width` × `height` one for the angles of `degrees`: the largest of v2's
/// sizes at the angles where an extent peaks (the range's ends, the multiples of 90, and
/// where the turned diagonals lie along an axis), each with the 32-bit angles around it,
/// as the draw gives them.
pub(super) fn largest_expanded(degrees: (f64, f64), size: (usize, usize)) -> (u32, u32) {
    let (lo, hi) = degrees;
    let (w, h) = (size.0 as f64, size.1 as f64);
    let diagonal = h.atan2(w).to_degrees();
    let mut peaks = vec![lo, hi];
    let first = (lo / 90.0).floor() as i64 - 1;
    let last = (hi / 90.0).ceil() as i64 + 1;
    for quarter in first..=last {
        let base = quarter as f64 * 90.0;
        peaks.extend([base, base + diagonal, base + 90.0 - diagonal]);
    }
    // The range's ends are among the peaks: at least one size is taken.
    let (mut width, mut height) = (0, 0);
    for peak in peaks.into_iter().filter(|a| (lo..=hi).contains(a)) {
        let at = peak as f32;
        for step in -8i32..=8 {
            let angle = f64::from(f32::from_bits(at.to_bits().wrapping_add_signed(step)));
            if !(lo..=hi).contains(&angle) {
                continue;
            }
            let (_, (w, h)) = expanded_turning(angle, size);
            (width, height) = (width.max(w), height.max(h));
        }
    }
    let side = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    (side(width), side(height))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grown_size_is_v2s_with_its_rounding_and_exact_quarter_turns() {
        // Each (angle, width x height) as v2's `rotate_image(expand=True)` sizes it.
        for (angle, size, want) in [
            (0.0, (640, 480), (640, 480)),
            (90.0, (640, 480), (480, 640)),
            (45.0, (640, 480), (792, 792)),
            (-30.0, (640, 480), (796, 736)),
            (180.0, (640, 480), (640, 480)),
            (270.0, (333, 500), (500, 333)),
            (-30.0, (333, 500), (539, 600)),
            (30.5, (7, 5), (9, 9)),
        ] {
            assert_eq!(expanded_turning(angle, size).1, want, "{angle} {size:?}");
        }
        // v2's formula itself, at 90 degrees on odd sides: cos(90°) is 6e-17, not 0,
        // and the truncation to 1e-4 does not hide the half pixel of an odd side.
        let m = inverse_matrix([0.0; 2], -90.0, [0.0; 2], 1.0, [0.0; 2]);
        assert_eq!(affine_output_size(m, 333, 500), (501, 334));
        assert_eq!(affine_output_size(m, 640, 480), (480, 640));
    }

    #[test]
    fn the_canvas_holds_the_largest_size_the_degrees_allow() {
        // The largest of 200,000 of v2's draws, sized by v2.
        assert_eq!(largest_expanded((-30.0, 30.0), (640, 480)), (796, 736));
        assert_eq!(largest_expanded((-90.0, 90.0), (640, 480)), (800, 800));
        assert_eq!(largest_expanded((10.0, 20.0), (333, 500)), (485, 584));
        assert_eq!(largest_expanded((0.0, 0.0), (333, 500)), (333, 500));
        // One angle: that angle's size, a quarter turn's sides swapped.
        assert_eq!(largest_expanded((90.0, 90.0), (120, 90)), (90, 120));
    }

    #[test]
    fn a_grown_quarter_turn_is_torch_rot90_on_any_image() {
        // 3x2 [[0, 1, 2], [3, 4, 5]] by rot90(k=1): [[2, 5], [1, 4], [0, 3]].
        let mut data: Vec<u8> = (0..18).map(|i| i % 6).collect();
        let mut image = Planes {
            data: &mut data,
            width: 3,
            height: 2,
        };
        rotate_expanded(&mut image, 90.0, Interpolation::Nearest, [0.0; 3]);
        assert_eq!((image.width, image.height), (2, 3));
        assert_eq!(&data[..6], [2, 5, 1, 4, 0, 3]);
    }

    #[test]
    fn a_grown_image_without_room_keeps_its_pixels_at_the_grown_size() {
        let mut data = vec![7u8; 3 * 20 * 10];
        let mut image = Planes {
            data: &mut data,
            width: 20,
            height: 10,
        };
        rotate_expanded(&mut image, 30.0, Interpolation::Bilinear, [0.0; 3]);
        assert!(image.width * image.height > 200);
        assert!(data.iter().all(|v| *v == 7));
    }
}
