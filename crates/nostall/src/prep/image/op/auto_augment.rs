//! `AutoAugment`: one of a policy's 25 sub-policies, each two augmentations applied with
//! their probabilities at their magnitudes.

use super::augment::{
    self, entry, Augmentation as A, Entry, Extent, Magnitudes as M, Policy, Settings,
};
use super::{Augmenter, Declaration, Op, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "AutoAugment",
    doc: "Applies one sub-policy drawn uniformly from the 25 of `policy`: two augmentations \
          in turn, each with its probability at its magnitude, the sign of a signed one \
          drawn (torchvision.transforms.v2's `AutoAugment` on uint8 images: its policies, \
          magnitudes, draws and kernels). `policy` is 'imagenet', 'cifar10' or 'svhn' \
          (torchvision's `AutoAugmentPolicy` values).",
    params: &[
        Param::with_default(
            "policy",
            Kind::Choice,
            "'imagenet'",
            "the learned policy: 'imagenet', 'cifar10' or 'svhn'",
        ),
        augment::interpolation_param("'nearest'"),
        augment::FILL,
    ],
    translates: &[Translation::torchvision(
        "AutoAugment",
        &[
            ("policy", "policy", Conv::EnumValue),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("fill", "fill", Conv::OptionalFill),
        ],
    )],
    build,
};

/// torchvision's `AutoAugment._AUGMENTATION_SPACE` (10 bins).
static SPACE: [Entry; 14] = [
    entry(A::ShearX, M::Linspace(0.0, 0.3), true),
    entry(A::ShearY, M::Linspace(0.0, 0.3), true),
    entry(
        A::TranslateX,
        M::OfWidth(Extent::Times(150.0 / 331.0)),
        true,
    ),
    entry(
        A::TranslateY,
        M::OfHeight(Extent::Times(150.0 / 331.0)),
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
    entry(A::Invert, M::None, false),
];

/// The magnitudes' bins.
const BINS: usize = 10;

/// One augmentation of a sub-policy: what, its probability, its magnitude's bin.
type Step = (A, f64, Option<usize>);

/// torchvision's `_get_policies(AutoAugmentPolicy.IMAGENET)`.
static IMAGENET: [[Step; 2]; 25] = [
    [(A::Posterize, 0.4, Some(8)), (A::Rotate, 0.6, Some(9))],
    [(A::Solarize, 0.6, Some(5)), (A::AutoContrast, 0.6, None)],
    [(A::Equalize, 0.8, None), (A::Equalize, 0.6, None)],
    [(A::Posterize, 0.6, Some(7)), (A::Posterize, 0.6, Some(6))],
    [(A::Equalize, 0.4, None), (A::Solarize, 0.2, Some(4))],
    [(A::Equalize, 0.4, None), (A::Rotate, 0.8, Some(8))],
    [(A::Solarize, 0.6, Some(3)), (A::Equalize, 0.6, None)],
    [(A::Posterize, 0.8, Some(5)), (A::Equalize, 1.0, None)],
    [(A::Rotate, 0.2, Some(3)), (A::Solarize, 0.6, Some(8))],
    [(A::Equalize, 0.6, None), (A::Posterize, 0.4, Some(6))],
    [(A::Rotate, 0.8, Some(8)), (A::Color, 0.4, Some(0))],
    [(A::Rotate, 0.4, Some(9)), (A::Equalize, 0.6, None)],
    [(A::Equalize, 0.0, None), (A::Equalize, 0.8, None)],
    [(A::Invert, 0.6, None), (A::Equalize, 1.0, None)],
    [(A::Color, 0.6, Some(4)), (A::Contrast, 1.0, Some(8))],
    [(A::Rotate, 0.8, Some(8)), (A::Color, 1.0, Some(2))],
    [(A::Color, 0.8, Some(8)), (A::Solarize, 0.8, Some(7))],
    [(A::Sharpness, 0.4, Some(7)), (A::Invert, 0.6, None)],
    [(A::ShearX, 0.6, Some(5)), (A::Equalize, 1.0, None)],
    [(A::Color, 0.4, Some(0)), (A::Equalize, 0.6, None)],
    [(A::Equalize, 0.4, None), (A::Solarize, 0.2, Some(4))],
    [(A::Solarize, 0.6, Some(5)), (A::AutoContrast, 0.6, None)],
    [(A::Invert, 0.6, None), (A::Equalize, 1.0, None)],
    [(A::Color, 0.6, Some(4)), (A::Contrast, 1.0, Some(8))],
    [(A::Equalize, 0.8, None), (A::Equalize, 0.6, None)],
];

/// torchvision's `_get_policies(AutoAugmentPolicy.CIFAR10)`.
static CIFAR10: [[Step; 2]; 25] = [
    [(A::Invert, 0.1, None), (A::Contrast, 0.2, Some(6))],
    [(A::Rotate, 0.7, Some(2)), (A::TranslateX, 0.3, Some(9))],
    [(A::Sharpness, 0.8, Some(1)), (A::Sharpness, 0.9, Some(3))],
    [(A::ShearY, 0.5, Some(8)), (A::TranslateY, 0.7, Some(9))],
    [(A::AutoContrast, 0.5, None), (A::Equalize, 0.9, None)],
    [(A::ShearY, 0.2, Some(7)), (A::Posterize, 0.3, Some(7))],
    [(A::Color, 0.4, Some(3)), (A::Brightness, 0.6, Some(7))],
    [(A::Sharpness, 0.3, Some(9)), (A::Brightness, 0.7, Some(9))],
    [(A::Equalize, 0.6, None), (A::Equalize, 0.5, None)],
    [(A::Contrast, 0.6, Some(7)), (A::Sharpness, 0.6, Some(5))],
    [(A::Color, 0.7, Some(7)), (A::TranslateX, 0.5, Some(8))],
    [(A::Equalize, 0.3, None), (A::AutoContrast, 0.4, None)],
    [(A::TranslateY, 0.4, Some(3)), (A::Sharpness, 0.2, Some(6))],
    [(A::Brightness, 0.9, Some(6)), (A::Color, 0.2, Some(8))],
    [(A::Solarize, 0.5, Some(2)), (A::Invert, 0.0, None)],
    [(A::Equalize, 0.2, None), (A::AutoContrast, 0.6, None)],
    [(A::Equalize, 0.2, None), (A::Equalize, 0.6, None)],
    [(A::Color, 0.9, Some(9)), (A::Equalize, 0.6, None)],
    [(A::AutoContrast, 0.8, None), (A::Solarize, 0.2, Some(8))],
    [(A::Brightness, 0.1, Some(3)), (A::Color, 0.7, Some(0))],
    [(A::Solarize, 0.4, Some(5)), (A::AutoContrast, 0.9, None)],
    [(A::TranslateY, 0.9, Some(9)), (A::TranslateY, 0.7, Some(9))],
    [(A::AutoContrast, 0.9, None), (A::Solarize, 0.8, Some(3))],
    [(A::Equalize, 0.8, None), (A::Invert, 0.1, None)],
    [(A::TranslateY, 0.7, Some(9)), (A::AutoContrast, 0.9, None)],
];

/// torchvision's `_get_policies(AutoAugmentPolicy.SVHN)`.
static SVHN: [[Step; 2]; 25] = [
    [(A::ShearX, 0.9, Some(4)), (A::Invert, 0.2, None)],
    [(A::ShearY, 0.9, Some(8)), (A::Invert, 0.7, None)],
    [(A::Equalize, 0.6, None), (A::Solarize, 0.6, Some(6))],
    [(A::Invert, 0.9, None), (A::Equalize, 0.6, None)],
    [(A::Equalize, 0.6, None), (A::Rotate, 0.9, Some(3))],
    [(A::ShearX, 0.9, Some(4)), (A::AutoContrast, 0.8, None)],
    [(A::ShearY, 0.9, Some(8)), (A::Invert, 0.4, None)],
    [(A::ShearY, 0.9, Some(5)), (A::Solarize, 0.2, Some(6))],
    [(A::Invert, 0.9, None), (A::AutoContrast, 0.8, None)],
    [(A::Equalize, 0.6, None), (A::Rotate, 0.9, Some(3))],
    [(A::ShearX, 0.9, Some(4)), (A::Solarize, 0.3, Some(3))],
    [(A::ShearY, 0.8, Some(8)), (A::Invert, 0.7, None)],
    [(A::Equalize, 0.9, None), (A::TranslateY, 0.6, Some(6))],
    [(A::Invert, 0.9, None), (A::Equalize, 0.6, None)],
    [(A::Contrast, 0.3, Some(3)), (A::Rotate, 0.8, Some(4))],
    [(A::Invert, 0.8, None), (A::TranslateY, 0.0, Some(2))],
    [(A::ShearY, 0.7, Some(6)), (A::Solarize, 0.4, Some(8))],
    [(A::Invert, 0.6, None), (A::Rotate, 0.8, Some(4))],
    [(A::ShearY, 0.3, Some(7)), (A::TranslateX, 0.9, Some(3))],
    [(A::ShearX, 0.1, Some(6)), (A::Invert, 0.6, None)],
    [(A::Solarize, 0.7, Some(2)), (A::TranslateY, 0.6, Some(7))],
    [(A::ShearY, 0.8, Some(4)), (A::Invert, 0.8, None)],
    [(A::ShearX, 0.7, Some(9)), (A::TranslateY, 0.8, Some(3))],
    [(A::ShearY, 0.8, Some(5)), (A::AutoContrast, 0.7, None)],
    [(A::ShearX, 0.7, Some(2)), (A::Invert, 0.1, None)],
];

fn build(args: &Args) -> Result<Op> {
    let policy = args.choice("policy", &["imagenet", "cifar10", "svhn"])?;
    Ok(Op::new(AutoAugment {
        policy,
        settings: Settings::read(args)?,
    }))
}

struct AutoAugment {
    policy: &'static str,
    settings: Settings,
}

impl AutoAugment {
    fn sub_policies(&self) -> &'static [[Step; 2]; 25] {
        match self.policy {
            "cifar10" => &CIFAR10,
            "svhn" => &SVHN,
            _ => &IMAGENET,
        }
    }
}

impl Policy for AutoAugment {
    fn space(&self) -> &'static [Entry] {
        &SPACE
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    /// torchvision's `AutoAugment.forward` draws: the sub-policy, then for each of its
    /// two augmentations whether it runs (`torch.rand(()) <= probability`) and, where it
    /// runs signed, the sign.
    fn draw(&self, size: (usize, usize), rng: &mut Rng) -> Vec<(A, f64)> {
        let policies = self.sub_policies();
        let policy = &policies[augment::index(rng, policies.len())];
        let mut steps = Vec::with_capacity(2);
        for &(what, probability, bin) in policy {
            if rng.next_f64() > probability {
                continue;
            }
            let entry = SPACE
                .iter()
                .find(|e| e.what == what)
                .expect("every policy's augmentation is in the space");
            steps.push((what, entry.magnitude(bin.unwrap_or(0), BINS, size, rng)));
        }
        steps
    }
}

impl Operator for AutoAugment {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let [interpolation, fill] = self.settings.values();
        vec![self.policy.into(), interpolation, fill]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    // Its policies hold rotations, shears and translations.
    fn moves_pixels(&self) -> bool {
        true
    }

    fn augmenter(&self) -> Option<&dyn Augmenter> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_magnitude_is_a_bin_of_an_augmentation_that_takes_one() {
        for policy in [&IMAGENET, &CIFAR10, &SVHN] {
            for &(what, probability, bin) in policy.iter().flatten() {
                let entry = SPACE.iter().find(|e| e.what == what).unwrap();
                assert!((0.0..=1.0).contains(&probability));
                match entry.magnitudes {
                    M::None => assert_eq!(bin, None, "{what:?}"),
                    _ => assert!(bin.is_some_and(|b| b < BINS), "{what:?}"),
                }
            }
        }
    }
}
