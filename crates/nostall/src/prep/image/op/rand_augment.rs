//! `RandAugment`: a number of augmentations drawn uniformly, each at one magnitude.

use super::augment::{
    self, entry, Augmentation as A, Entry, Magnitudes as M, Policy, Settings, FILL,
};
use super::{Augmenter, Declaration, Op, Operator, Stage, MAX_STEPS};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandAugment",
    doc: "Applies `num_ops` augmentations in turn, each drawn uniformly from 14 (Identity, \
          ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, \
          Sharpness, Posterize, Solarize, AutoContrast, Equalize) at bin `magnitude` of \
          `num_magnitude_bins`, the sign of a signed one drawn (torchvision.transforms.v2's \
          `RandAugment` on uint8 images: its space, magnitudes, draws and kernels). For \
          timm's RandAugment (`rand-m9-mstd0.5-inc1`) see `TimmRandAugment`.",
    params: &[
        Param::with_default(
            "num_ops",
            Kind::Int,
            "2",
            "augmentations applied in turn (non-negative)",
        ),
        Param::with_default(
            "magnitude",
            Kind::Int,
            "9",
            "the bin of every augmentation's magnitude, in [0, num_magnitude_bins)",
        ),
        augment::BINS,
        augment::interpolation_param("'nearest'"),
        FILL,
    ],
    translates: &[Translation::torchvision(
        "RandAugment",
        &[
            ("num_ops", "num_ops", Conv::Int),
            ("magnitude", "magnitude", Conv::Int),
            ("num_magnitude_bins", "num_magnitude_bins", Conv::Int),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("fill", "fill", Conv::OptionalFill),
        ],
    )],
    build,
};

/// torchvision's `RandAugment._AUGMENTATION_SPACE`.
pub(super) static SPACE: [Entry; 14] = [
    entry(A::Identity, M::None, false),
    entry(A::ShearX, M::Linspace(0.0, 0.3), true),
    entry(A::ShearY, M::Linspace(0.0, 0.3), true),
    entry(
        A::TranslateX,
        M::OfWidth(augment::Extent::Times(150.0 / 331.0)),
        true,
    ),
    entry(
        A::TranslateY,
        M::OfHeight(augment::Extent::Times(150.0 / 331.0)),
        true,
    ),
    entry(A::Rotate, M::Linspace(0.0, 30.0), true),
    entry(A::Brightness, M::Linspace(0.0, 0.9), true),
    entry(A::Color, M::Linspace(0.0, 0.9), true),
    entry(A::Contrast, M::Linspace(0.0, 0.9), true),
    entry(A::Sharpness, M::Linspace(0.0, 0.9), true),
    entry(
        A::Posterize,
        M::Bits {
            top: 8.0,
            steps: 4.0,
        },
        false,
    ),
    entry(A::Solarize, M::Linspace(1.0, 0.0), false),
    entry(A::AutoContrast, M::None, false),
    entry(A::Equalize, M::None, false),
];

fn build(args: &Args) -> Result<Op> {
    let num_ops: usize = args.int("num_ops")?;
    if num_ops > MAX_STEPS {
        return Err(args.error(
            "num_ops",
            format!(
                "{num_ops} is too many: at most {MAX_STEPS} augmentations a sample (each adds \
                 to its work; recipes apply 2 or 3); give a smaller num_ops"
            ),
        ));
    }
    let bins = augment::bins(args)?;
    let magnitude: usize = args.int("magnitude")?;
    if magnitude >= bins {
        return Err(args.error(
            "magnitude",
            format!("{magnitude}: must be a bin, in [0, num_magnitude_bins = {bins})"),
        ));
    }
    Ok(Op::new(RandAugment {
        num_ops,
        magnitude,
        bins,
        settings: Settings::read(args)?,
    }))
}

struct RandAugment {
    num_ops: usize,
    magnitude: usize,
    bins: usize,
    settings: Settings,
}

impl Policy for RandAugment {
    fn space(&self) -> &'static [Entry] {
        &SPACE
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    /// torchvision's `RandAugment.forward` draws: for each op, the augmentation, then
    /// the sign of its magnitude where signed.
    fn draw(&self, size: (usize, usize), rng: &mut Rng) -> Vec<(A, f64)> {
        (0..self.num_ops)
            .map(|_| {
                let entry = &SPACE[augment::index(rng, SPACE.len())];
                (
                    entry.what,
                    entry.magnitude(self.magnitude, self.bins, size, rng),
                )
            })
            .collect()
    }
}

impl Operator for RandAugment {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let [interpolation, fill] = self.settings.values();
        vec![
            Value::Int(self.num_ops as i64),
            Value::Int(self.magnitude as i64),
            Value::Int(self.bins as i64),
            interpolation,
            fill,
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    // Its space holds rotations, shears and translations.
    fn moves_pixels(&self) -> bool {
        true
    }

    fn augmenter(&self) -> Option<&dyn Augmenter> {
        Some(self)
    }
}
