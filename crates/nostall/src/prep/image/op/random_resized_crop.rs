//! `RandomResizedCrop`: a random area and aspect ratio of the image, resized to a size
//! (torchvision's, with the same random choices).

use super::resize::{filter, ANTIALIAS, INTERPOLATION};
use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::Filter;
use crate::prep::translation::{Arg, Conv, Translation};
use crate::rng::Rng;

/// RandomResizedCrop's default range of the crop's area (torchvision's).
pub const DEFAULT_CROP_SCALE: (f64, f64) = (0.08, 1.0);
/// RandomResizedCrop's default range of the crop's aspect ratio (torchvision's).
pub const DEFAULT_CROP_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomResizedCrop",
    doc: "Crops a random area and aspect ratio of the image and resizes it to `size` \
          (torchvision's `RandomResizedCrop`, with the same random choices: ten tries, then \
          the centre). nostall decodes only the cropped region of a JPEG, at the smallest \
          sufficient scale.",
    params: &[
        Param::required(
            "size",
            Kind::Square,
            "output size, an int (square) or `(height, width)`",
        ),
        Param::with_default(
            "scale",
            Kind::Range,
            "(0.08, 1.0)",
            "range of the crop's area, as a fraction of the image's",
        ),
        Param::with_default(
            "ratio",
            Kind::Range,
            "(0.75, 1.3333333333333333)",
            "range of the crop's aspect ratio (width / height)",
        ),
        INTERPOLATION,
        ANTIALIAS,
    ],
    translates: &[
        Translation::torchvision("RandomResizedCrop", READ_TORCHVISION),
        Translation::timm("RandomResizedCropAndInterpolation", READ),
    ],
    build,
};

/// The arguments of torchvision's `RandomResizedCrop` and timm's
/// `RandomResizedCropAndInterpolation`, whose attributes name alike.
const READ: &[Arg] = &[
    ("size", "size", Conv::Size),
    ("scale", "scale", Conv::Floats),
    ("ratio", "ratio", Conv::Floats),
    ("interpolation", "interpolation", Conv::Interpolation),
];

/// torchvision's, which also says whether it antialiases (timm's always does).
const READ_TORCHVISION: &[Arg] = &[
    ("size", "size", Conv::Size),
    ("scale", "scale", Conv::Floats),
    ("ratio", "ratio", Conv::Floats),
    ("interpolation", "interpolation", Conv::Interpolation),
    ("antialias", "antialias", Conv::Same),
];

fn build(args: &Args) -> Result<Op> {
    let size = args.square("size")?;
    not_empty(args, "size", size)?;
    let scale = args.range("scale")?;
    if !(0.0 < scale.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
        return Err(args.error("scale", format!("{scale:?} must satisfy 0 < lo <= hi <= 1")));
    }
    let ratio = args.range("ratio")?;
    if !(0.0 < ratio.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
        return Err(args.error("ratio", format!("{ratio:?} must satisfy 0 < lo <= hi")));
    }
    Ok(Op::new(RandomResizedCrop {
        size,
        scale,
        ratio,
        filter: filter(args)?,
    }))
}

struct RandomResizedCrop {
    size: (u32, u32),
    scale: (f64, f64),
    ratio: (f64, f64),
    filter: Filter,
}

impl Operator for RandomResizedCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.size.into(),
            self.scale.into(),
            self.ratio.into(),
            self.filter.name().into(),
            self.filter.antialias().into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for RandomResizedCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Fixed(self.size.0, self.size.1)
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let (x, y, w, h) = random_crop(
            view.w.round() as u32,
            view.h.round() as u32,
            self.scale,
            self.ratio,
            rng,
        );
        view.crop(x, y, w, h);
        (view.w, view.h) = (self.size.1 as f64, self.size.0 as f64);
        view.filter = self.filter;
    }
}

/// torchvision's `RandomResizedCrop.get_params`: (left, top, width, height).
pub(super) fn random_crop(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut Rng,
) -> (f64, f64, f64, f64) {
    let (w_img, h_img) = (width as f64, height as f64);
    let area = w_img * h_img;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_lo, log_hi).exp();
        let w = (target * aspect).sqrt().round_ties_even();
        let h = (target / aspect).sqrt().round_ties_even();
        if 0.0 < w && w <= w_img && 0.0 < h && h <= h_img {
            let top = rng.below((h_img - h) as u64 + 1) as f64;
            let left = rng.below((w_img - w) as u64 + 1) as f64;
            return (left, top, w, h);
        }
    }
    let in_ratio = w_img / h_img;
    let (w, h) = if in_ratio < ratio.0 {
        (w_img, (w_img / ratio.0).round_ties_even())
    } else if in_ratio > ratio.1 {
        ((h_img * ratio.1).round_ties_even(), h_img)
    } else {
        (w_img, h_img)
    };
    (
        ((w_img - w) / 2.0).floor(),
        ((h_img - h) / 2.0).floor(),
        w,
        h,
    )
}
