//! `Normalize`: subtracts a mean and divides by a standard deviation, per channel.

use super::{Declaration, Op, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};

/// ImageNet channel means, in [0, 1] units (torchvision's convention).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations, in [0, 1] units.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Normalize",
    doc: "Subtracts `mean` and divides by `std`, per RGB channel, in [0, 1] units \
          (pixel / 255), as torchvision's `ToTensor` then `Normalize` do, in 32-bit floats. \
          Needs `dtype=\"float32\"`. ImageNet's: `Normalize(mean=(0.485, 0.456, 0.406), \
          std=(0.229, 0.224, 0.225))`.",
    params: &[
        Param::required("mean", Kind::Rgb, "per-channel mean (R, G, B)"),
        Param::required("std", Kind::Rgb, "per-channel standard deviation (R, G, B)"),
    ],
    translates: &[Translation::torchvision(
        "Normalize",
        &[("mean", "mean", Conv::Floats), ("std", "std", Conv::Floats)],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let (mean, std) = (args.floats("mean")?, args.floats("std")?);
    if !mean
        .iter()
        .all(|v| v.is_finite() && (*v as f32).is_finite())
    {
        return Err(args.error("mean", format!("{mean:?} must be finite")));
    }
    let positive = |v: &f64| *v > 0.0 && (*v as f32) > 0.0 && (*v as f32).is_finite();
    if !std.iter().all(positive) {
        return Err(args.error("std", format!("{std:?} must be positive and finite")));
    }
    Ok(Op::new(Normalize { mean, std }))
}

/// The values as given: the engine computes in 32-bit floats, as torchvision does.
struct Normalize {
    mean: [f64; 3],
    std: [f64; 3],
}

impl Operator for Normalize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.mean.into(), self.std.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Normalize {
            mean: self.mean.map(|v| v as f32),
            std: self.std.map(|v| v as f32),
        }
    }
}
