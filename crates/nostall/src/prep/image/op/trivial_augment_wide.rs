//! `TrivialAugmentWide`: one augmentation drawn uniformly, at a magnitude drawn uniformly.

use super::augment::{
    self, entry, Augmentation as A, Entry, Extent, Magnitudes as M, Policy, Settings,
};
use super::{Augmenter, Declaration, Op, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "TrivialAugmentWide",
    doc: "Applies one augmentation drawn uniformly from 14 (Identity, ShearX, ShearY, \
          TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, Sharpness, Posterize, \
          Solarize, AutoContrast, Equalize) at a magnitude bin drawn uniformly, the sign of a \
          signed one drawn, with the wide ranges (torchvision.transforms.v2's \
          `TrivialAugmentWide` on uint8 images: its space, magnitudes, draws and kernels).",
    params: &[
        augment::BINS,
        augment::interpolation_param("'nearest'"),
        augment::FILL,
    ],
    translates: &[Translation::torchvision(
        "TrivialAugmentWide",
        &[
            ("num_magnitude_bins", "num_magnitude_bins", Conv::Int),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("fill", "fill", Conv::OptionalFill),
        ],
    )],
    build,
};

/// torchvision's `TrivialAugmentWide._AUGMENTATION_SPACE`.
static SPACE: [Entry; 14] = [
    entry(A::Identity, M::None, false),
    entry(A::ShearX, M::Linspace(0.0, 0.99), true),
    entry(A::ShearY, M::Linspace(0.0, 0.99), true),
    entry(A::TranslateX, M::OfWidth(Extent::Pixels(32.0)), true),
    entry(A::TranslateY, M::OfHeight(Extent::Pixels(32.0)), true),
    entry(A::Rotate, M::Linspace(0.0, 135.0), true),
    entry(A::Brightness, M::Linspace(0.0, 0.99), true),
    entry(A::Color, M::Linspace(0.0, 0.99), true),
    entry(A::Contrast, M::Linspace(0.0, 0.99), true),
    entry(A::Sharpness, M::Linspace(0.0, 0.99), true),
    entry(
        A::Posterize,
        M::Bits {
            top: 8.0,
            steps: 6.0,
        },
        false,
    ),
    entry(A::Solarize, M::Linspace(1.0, 0.0), false),
    entry(A::AutoContrast, M::None, false),
    entry(A::Equalize, M::None, false),
];

fn build(args: &Args) -> Result<Op> {
    let bins = augment::bins(args)?;
    Ok(Op::new(TrivialAugmentWide {
        bins,
        settings: Settings::read(args)?,
    }))
}

struct TrivialAugmentWide {
    bins: usize,
    settings: Settings,
}

impl Policy for TrivialAugmentWide {
    fn space(&self) -> &'static [Entry] {
        &SPACE
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    /// torchvision's `TrivialAugmentWide.forward` draws: the augmentation, then (where it
    /// takes a magnitude) the bin and the sign.
    fn draw(&self, size: (usize, usize), rng: &mut Rng) -> Vec<(A, f64)> {
        let entry = &SPACE[augment::index(rng, SPACE.len())];
        let magnitude = match entry.magnitudes {
            M::None => 0.0,
            _ => {
                let bin = augment::index(rng, self.bins);
                entry.magnitude(bin, self.bins, size, rng)
            }
        };
        vec![(entry.what, magnitude)]
    }
}

impl Operator for TrivialAugmentWide {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let [interpolation, fill] = self.settings.values();
        vec![Value::Int(self.bins as i64), interpolation, fill]
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
