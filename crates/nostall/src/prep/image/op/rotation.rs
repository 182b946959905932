//! `RandomRotation`: the image rotated about its centre by a random angle.

use super::affine::{
    angle_range, fill, fill_value, interpolation, inverse_matrix, only_the_centre, uniform32, warp,
    Interpolation, CENTER, FILL, INTERPOLATION,
};
use super::{Declaration, Motion, Op, Operator, Photometric, Planes, Stage};
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
          exact turns by 0 and 180 degrees, and by 90 and 270 on square images). Only \
          `expand=False` and `center=None` are taken.",
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
            "whether the output grows to hold the whole rotated image: only False is taken",
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
    if args.bool("expand")? {
        return Err(args.error(
            "expand",
            "True is not supported: the output keeps the image's size (expand=False)",
        ));
    }
    only_the_centre(args)?;
    let fill = fill(args)?;
    Ok(Op::new(RandomRotation {
        degrees,
        interpolation,
        fill,
    }))
}

pub(super) struct RandomRotation {
    pub(super) degrees: (f64, f64),
    pub(super) interpolation: Interpolation,
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
            false.into(),
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
        rotate(image, angle, self.interpolation, Some(self.fill));
    }

    fn motion(&self, _width: usize, _height: usize, rng: &mut Rng) -> Option<Motion> {
        Some(Motion::Rotation(self.draw(rng)))
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
