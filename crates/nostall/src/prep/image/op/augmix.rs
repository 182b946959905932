//! `AugMix`: the image blended with several chains of augmentations of it, by random
//! weights.

use super::augment::{self, entry, Augmentation as A, Entry, Extent, Magnitudes as M, Settings};
use super::simd::cast_u8;
use super::{Augmenter, Declaration, Op, Operator, Photometric, Planes, Stage, MAX_STEPS};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "AugMix",
    doc: "Blends the image with `mixture_width` chains of augmentations of it (each chain \
          `chain_depth` augmentations, or 1 to 3 drawn when it is not positive, each drawn \
          uniformly at a magnitude bin drawn below `severity`, the sign of a signed one \
          drawn): the weight of the image from Beta(`alpha`, `alpha`), the chains' from \
          Dirichlet(`alpha`, ...) (torchvision.transforms.v2's `AugMix` on uint8 images: its \
          space, magnitudes, draws, kernels, and its 32-bit float sum truncated to 8 bits). \
          `all_ops=False` leaves out Brightness, Color, Contrast and Sharpness.",
    params: &[
        Param::with_default(
            "severity",
            Kind::Int,
            "3",
            "the magnitude bins drawn from: the lowest `severity` of 10 (1 to 10)",
        ),
        Param::with_default(
            "mixture_width",
            Kind::Int,
            "3",
            "how many chains are blended (at least 1)",
        ),
        Param::with_default(
            "chain_depth",
            Kind::Int,
            "-1",
            "augmentations a chain, or a depth drawn from 1 to 3 for each chain when not \
             positive",
        ),
        Param::with_default(
            "alpha",
            Kind::Float,
            "1.0",
            "the concentration of the Beta and Dirichlet weights (positive)",
        ),
        Param::with_default(
            "all_ops",
            Kind::Bool,
            "True",
            "whether Brightness, Color, Contrast and Sharpness are in the space",
        ),
        augment::interpolation_param("'bilinear'"),
        augment::FILL,
    ],
    translates: &[Translation::torchvision(
        "AugMix",
        &[
            ("severity", "severity", Conv::Int),
            ("mixture_width", "mixture_width", Conv::Int),
            ("chain_depth", "chain_depth", Conv::Int),
            ("alpha", "alpha", Conv::Float),
            ("all_ops", "all_ops", Conv::Bool),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("fill", "fill", Conv::OptionalFill),
        ],
    )],
    build,
};

/// torchvision's `AugMix._AUGMENTATION_SPACE` (10 bins); its first 9 are the partial
/// space (`all_ops=False`).
static SPACE: [Entry; 13] = [
    entry(A::ShearX, M::Linspace(0.0, 0.3), true),
    entry(A::ShearY, M::Linspace(0.0, 0.3), true),
    entry(A::TranslateX, M::OfWidth(Extent::Over(3.0)), true),
    entry(A::TranslateY, M::OfHeight(Extent::Over(3.0)), true),
    entry(A::Rotate, M::Linspace(0.0, 30.0), true),
    entry(
        A::Posterize,
        M::Bits {
            top: 4.0,
            steps: 4.0,
        },
        false,
    ),
    entry(A::Solarize, M::Linspace(1.0, 0.0), false),
    entry(A::AutoContrast, M::None, false),
    entry(A::Equalize, M::None, false),
    entry(A::Brightness, M::Linspace(0.0, 0.9), true),
    entry(A::Color, M::Linspace(0.0, 0.9), true),
    entry(A::Contrast, M::Linspace(0.0, 0.9), true),
    entry(A::Sharpness, M::Linspace(0.0, 0.9), true),
];

/// The partial space's size.
const PARTIAL: usize = 9;

/// The magnitudes' bins (torchvision's `_PARAMETER_MAX`).
const BINS: usize = 10;

/// A chain's depth where it is drawn: 1 to this many.
const DRAWN_DEPTHS: usize = 3;

fn build(args: &Args) -> Result<Op> {
    let severity: usize = args.int("severity")?;
    if !(1..=BINS).contains(&severity) {
        return Err(args.error("severity", format!("{severity}: must be in [1, {BINS}]")));
    }
    let width: usize = args.int("mixture_width")?;
    if width == 0 {
        return Err(args.error("mixture_width", "0: must be at least 1"));
    }
    let depth: i64 = args.int("chain_depth")?;
    // A chain's depth, or the most a drawn one has.
    let deepest = match usize::try_from(depth) {
        Ok(depth) if depth > 0 => depth,
        _ => DRAWN_DEPTHS,
    };
    if width.saturating_mul(deepest) > MAX_STEPS {
        let (param, value) = if deepest > width {
            ("chain_depth", depth.to_string())
        } else {
            ("mixture_width", width.to_string())
        };
        return Err(args.error(
            param,
            format!(
                "{value}: {width} chains of up to {deepest} augmentations are more than the \
                 {MAX_STEPS} a sample takes (each adds to its work; recipes take 3 chains of \
                 at most 3); give a smaller mixture_width or chain_depth"
            ),
        ));
    }
    let alpha = args.float("alpha")?;
    if !(alpha > 0.0 && alpha.is_finite()) {
        return Err(args.error("alpha", format!("{alpha}: must be positive")));
    }
    Ok(Op::new(AugMix {
        severity,
        width,
        depth,
        alpha,
        all_ops: args.bool("all_ops")?,
        settings: Settings::read(args)?,
    }))
}

struct AugMix {
    severity: usize,
    width: usize,
    depth: i64,
    alpha: f64,
    all_ops: bool,
    settings: Settings,
}

/// One sample's draws: the weight of the image, and each chain's weight and augmentations.
struct Draw {
    original: f32,
    chains: Vec<(f32, Vec<(A, f64)>)>,
}

impl AugMix {
    fn space(&self) -> &'static [Entry] {
        if self.all_ops {
            &SPACE
        } else {
            &SPACE[..PARTIAL]
        }
    }

    /// A Dirichlet(`alpha`, ...) draw of `n` weights in 32 bits, as torch's
    /// `_sample_dirichlet` gives them.
    fn dirichlet(&self, n: usize, rng: &mut Rng) -> Vec<f32> {
        let weights = rng.dirichlet(self.alpha, n);
        weights.into_iter().map(|w| w as f32).collect()
    }

    /// torchvision's `AugMix.forward` draws, in its order: the Beta weights of the image
    /// and the chains, the chains' Dirichlet weights, then each chain's depth (where drawn)
    /// and each augmentation with its bin and sign.
    fn draw(&self, size: (usize, usize), rng: &mut Rng) -> Draw {
        let beta = self.dirichlet(2, rng);
        let weights = self.dirichlet(self.width, rng);
        let space = self.space();
        let chains = weights
            .into_iter()
            .map(|w| {
                let depth = match usize::try_from(self.depth) {
                    Ok(depth) if depth > 0 => depth,
                    _ => 1 + augment::index(rng, DRAWN_DEPTHS),
                };
                let steps = (0..depth)
                    .map(|_| {
                        let entry = &space[augment::index(rng, space.len())];
                        let magnitude = match entry.magnitudes {
                            M::None => 0.0,
                            _ => {
                                let bin = augment::index(rng, self.severity);
                                entry.magnitude(bin, BINS, size, rng)
                            }
                        };
                        (entry.what, magnitude)
                    })
                    .collect();
                // `combined_weights = dirichlet(...) * m[:, 1]`, in 32 bits.
                (w * beta[1], steps)
            })
            .collect();
        Draw {
            original: beta[0],
            chains,
        }
    }
}

impl Operator for AugMix {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let [interpolation, fill] = self.settings.values();
        vec![
            Value::Int(self.severity as i64),
            Value::Int(self.width as i64),
            Value::Int(self.depth),
            self.alpha.into(),
            self.all_ops.into(),
            interpolation,
            fill,
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    // Its chains hold rotations, shears and translations.
    fn moves_pixels(&self) -> bool {
        true
    }

    fn augmenter(&self) -> Option<&dyn Augmenter> {
        Some(self)
    }
}

impl Photometric for AugMix {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let draw = self.draw((image.width, image.height), rng);
        self.blend(image, &draw);
    }
}

impl AugMix {
    /// torchvision's blend of the image with its chains by the drawn weights.
    fn blend(&self, image: &mut Planes<'_>, draw: &Draw) {
        let (width, height) = (image.width, image.height);
        let values = 3 * image.area();
        let original = image.data[..values].to_vec();
        // `mix = m[:, 0] * batch`, then each chain's weighted image added, in 32 bits.
        let mut mix: Vec<f32> = original
            .iter()
            .map(|&v| draw.original * f32::from(v))
            .collect();
        let mut chain = original.clone();
        for (weight, steps) in &draw.chains {
            chain.copy_from_slice(&original);
            let mut planes = Planes {
                data: &mut chain,
                width,
                height,
            };
            for &(what, magnitude) in steps {
                self.settings.apply(&mut planes, what, magnitude);
            }
            for (m, &v) in mix.iter_mut().zip(chain.iter()) {
                *m += weight * f32::from(v);
            }
        }
        // `.to(uint8)`: truncated (the weights sum to 1, so the values stay in range).
        for (out, m) in image.data[..values].iter_mut().zip(mix) {
            *out = cast_u8(m);
        }
    }
}

impl Augmenter for AugMix {
    /// Each chain as `("Chain", depth)` followed by its augmentations.
    fn draw_steps(&self, width: usize, height: usize, rng: &mut Rng) -> Vec<(&'static str, f64)> {
        let draw = self.draw((width, height), rng);
        let mut steps = Vec::new();
        for (_, chain) in draw.chains {
            steps.push(("Chain", chain.len() as f64));
            steps.extend(chain.into_iter().map(|(a, m)| (a.name(), m)));
        }
        steps
    }

    fn apply_step(
        &self,
        name: &str,
        value: f64,
        image: &mut Planes<'_>,
        _: &mut Rng,
    ) -> Result<()> {
        self.settings
            .apply_named(DECLARATION.name, self.space(), name, value, image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> AugMix {
        let defaults = Args::bind("AugMix", DECLARATION.params, vec![], vec![]).unwrap();
        AugMix {
            severity: 3,
            width: 3,
            depth: -1,
            alpha: 1.0,
            all_ops: true,
            settings: Settings::read(&defaults).unwrap(),
        }
    }

    #[test]
    fn the_blend_is_torchvisions_sum_in_32_bits_truncated() {
        let (width, height) = (16, 16);
        let original: Vec<u8> = (0..3 * width * height)
            .map(|i| (i * 37 % 256) as u8)
            .collect();
        let draw = Draw {
            original: 0.3,
            chains: vec![
                (0.45, vec![(A::Invert, 0.0)]),
                (0.25, vec![(A::Posterize, 2.0), (A::Solarize, 0.5)]),
            ],
        };
        let mut image = original.clone();
        let planes = &mut Planes {
            data: &mut image,
            width,
            height,
        };
        defaults().blend(planes, &draw);
        for (i, (&v, &got)) in original.iter().zip(&image).enumerate() {
            let inverted = 255 - v;
            let posterized = v & 0b1100_0000;
            let solarized = if f32::from(posterized) >= 127.5 {
                255 - posterized
            } else {
                posterized
            };
            // `m0 * x`, then `mix.add_(w * aug)` for each chain: each product and sum
            // rounded to 32 bits, the total truncated.
            let mut want = 0.3f32 * f32::from(v);
            want += 0.45f32 * f32::from(inverted);
            want += 0.25f32 * f32::from(solarized);
            assert_eq!(got, want as u8, "value {i}");
        }
    }

    #[test]
    fn the_weights_sum_to_one_and_the_image_keeps_its_share_on_average() {
        let mix = defaults();
        let mut rng = Rng::new(7);
        let (mut original, n) = (0.0, 4000);
        for _ in 0..n {
            let draw = mix.draw((32, 32), &mut rng);
            let total: f32 = draw.original + draw.chains.iter().map(|c| c.0).sum::<f32>();
            assert!((total - 1.0).abs() < 1e-5, "{total}");
            assert!(draw.chains.iter().all(|c| (1..=3).contains(&c.1.len())));
            original += f64::from(draw.original);
        }
        // Beta(1, 1): a mean of 1/2 (its standard error over 4000 draws is 0.0046).
        assert!((original / n as f64 - 0.5).abs() < 0.03);
    }
}
