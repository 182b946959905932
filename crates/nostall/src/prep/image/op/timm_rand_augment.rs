//! `TimmRandAugment`: timm's RandAugment, as its config string (`rand-m9-mstd0.5-inc1`)
//! defines it, on PIL's kernels.
//!
//! As timm's `rand_augment_transform(config, hparams)` (timm 1.0's `auto_augment.py`):
//! the config string parsed as timm parses it, the same augmentation sets
//! (`_RAND_TRANSFORMS`, `_RAND_INCREASING_TRANSFORMS`, the weighted and 3-Augment sets),
//! the same draws (`RandAugment.__call__`'s choice of `n` augmentations, uniform with
//! replacement or weighted without; each `AugmentOp`'s probability, magnitude noise and
//! clip; its `LEVEL_TO_ARG` mapping, the sign drawn where timm draws it; the resampling
//! filter drawn where `interpolation` is random), and each augmentation's function of
//! `NAME_TO_OP` on the kernels of [`pil`](super::pil), Pillow's arithmetic reproduced.

use super::pil::{self, Resample};
use super::{Augmenter, Declaration, Op, Operator, Photometric, Planes, Stage, MAX_STEPS};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::Translation;
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "TimmRandAugment",
    doc: "Applies timm's RandAugment as its config string defines it (timm's \
          `rand_augment_transform(config, hparams)`, with its draws and PIL's kernels). The \
          string is `rand` then dash-separated sections, as timm reads them: `m` the \
          magnitude (an int, default 10), `n` the augmentations drawn per image (2), `p` the \
          probability of applying each (0.5), `mstd` the standard deviation of the Gaussian \
          noise added to the magnitude (0: none; above 100: the magnitude drawn uniformly in \
          [0, m]), `mmax` the magnitude's upper bound (10; 0 is 10), `inc1` the set whose strength \
          increases with the magnitude, and `t` a named set (`tweights` and `t3aw`, \
          weighted and drawn without replacement, or `t3a`); the first `mstd`, `mmax` and \
          `t` count, the last of the others. Each image gets `n` augmentations drawn \
          uniformly with replacement (a weighted set: without), each applied with \
          probability `p` at the magnitude, noised, clipped to [0, mmax], and mapped to its \
          argument by timm's `LEVEL_TO_ARG` (rotations, shears, translations and the \
          increasing enhancements negated with probability 1/2). The kernels are Pillow's \
          (`Image.transform` and `Image.rotate` with bilinear or bicubic resampling, \
          `ImageEnhance`, `ImageOps`, `ImageFilter.GaussianBlur`), their arithmetic \
          repeated to the byte. Differences from timm: the draws come from nostall's own \
          generator (timm's distributions, not Python's and NumPy's streams); posterizing \
          to 0 bits (timm's `Posterize` below magnitude 2.5, `PosterizeIncreasing` at 10) \
          gives black, as Pillow did before version 13, which raises instead; strings timm \
          would half ignore (a section without a number, an unknown `t` set) are errors; \
          only bilinear and bicubic resampling are offered.",
    params: &[
        Param::with_default(
            "config",
            Kind::Choice,
            "'rand-m9-mstd0.5-inc1'",
            "timm's RandAugment config string: 'rand', then sections m<int>, n<int>, \
             p<float>, mstd<float>, mmax<int>, inc<int>, t<set>, joined by '-'",
        ),
        Param::with_default(
            "interpolation",
            Kind::Choice,
            "'bilinear'",
            "how shears, translations and rotations resample the image: 'bilinear', \
             'bicubic', or 'random' (either, drawn for each augmentation); timm's \
             `interpolation` hparam, create_transform's 'bilinear' by default",
        ),
        Param::with_default(
            "fill",
            Kind::Fill,
            "(124, 116, 104)",
            "the colour of what comes from outside the image (timm's `img_mean` hparam): \
             an int in [0, 255] for every channel, or one per channel (R, G, B); by default \
             ImageNet's mean as timm rounds it",
        ),
        Param::with_default(
            "translate_pct",
            Kind::Float,
            "0.45",
            "the largest translation, at magnitude 10, as a fraction of the width or \
             height (timm's `translate_pct` hparam; non-negative)",
        ),
        Param::with_default(
            "magnitude_std",
            Kind::OptionalFloat,
            "None",
            "timm's `magnitude_std` hparam: where given, it wins over the config's mstd \
             (non-negative; 0 adds no noise)",
        ),
        Param::with_default(
            "magnitude_max",
            Kind::OptionalFloat,
            "None",
            "timm's `magnitude_max` hparam: where given, it wins over the config's mmax \
             (non-negative; 0 means 10, as in timm)",
        ),
    ],
    translates: &[
        // Its config string is not an attribute: the translator rebuilds it from the
        // augmentations timm made of it.
        Translation::timm("RandAugment", &[]).by("timm_rand_augment"),
    ],
    build,
};

/// timm's `_LEVEL_DENOM`: the magnitude of the strongest augmentation, and the default
/// upper bound of the magnitude.
const LEVEL_DENOM: f64 = 10.0;

/// One of timm's augmentations: an entry of its `NAME_TO_OP` and `LEVEL_TO_ARG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Augmentation {
    AutoContrast,
    Equalize,
    Invert,
    Rotate,
    Posterize,
    PosterizeIncreasing,
    Solarize,
    SolarizeIncreasing,
    SolarizeAdd,
    Color,
    ColorIncreasing,
    Contrast,
    ContrastIncreasing,
    Brightness,
    BrightnessIncreasing,
    Sharpness,
    SharpnessIncreasing,
    ShearX,
    ShearY,
    TranslateXRel,
    TranslateYRel,
    Desaturate,
    GaussianBlur,
}

use Augmentation as A;

/// timm's `_RAND_TRANSFORMS`.
const RAND_TRANSFORMS: &[A] = &[
    A::AutoContrast,
    A::Equalize,
    A::Invert,
    A::Rotate,
    A::Posterize,
    A::Solarize,
    A::SolarizeAdd,
    A::Color,
    A::Contrast,
    A::Brightness,
    A::Sharpness,
    A::ShearX,
    A::ShearY,
    A::TranslateXRel,
    A::TranslateYRel,
];

/// timm's `_RAND_INCREASING_TRANSFORMS` (`inc1`).
const RAND_INCREASING_TRANSFORMS: &[A] = &[
    A::AutoContrast,
    A::Equalize,
    A::Invert,
    A::Rotate,
    A::PosterizeIncreasing,
    A::SolarizeIncreasing,
    A::SolarizeAdd,
    A::ColorIncreasing,
    A::ContrastIncreasing,
    A::BrightnessIncreasing,
    A::SharpnessIncreasing,
    A::ShearX,
    A::ShearY,
    A::TranslateXRel,
    A::TranslateYRel,
];

/// timm's `_RAND_3A` (`t3a`).
const RAND_3A: &[A] = &[A::SolarizeIncreasing, A::Desaturate, A::GaussianBlur];

/// timm's `_RAND_WEIGHTED_0` (`tweights`).
const RAND_WEIGHTED_0: &[(A, f64)] = &[
    (A::Rotate, 3.0),
    (A::ShearX, 2.0),
    (A::ShearY, 2.0),
    (A::TranslateXRel, 1.0),
    (A::TranslateYRel, 1.0),
    (A::ColorIncreasing, 0.25),
    (A::SharpnessIncreasing, 0.25),
    (A::AutoContrast, 0.25),
    (A::SolarizeIncreasing, 0.05),
    (A::SolarizeAdd, 0.05),
    (A::ContrastIncreasing, 0.05),
    (A::BrightnessIncreasing, 0.05),
    (A::Equalize, 0.05),
    (A::PosterizeIncreasing, 0.05),
    (A::Invert, 0.05),
];

/// timm's `_RAND_WEIGHTED_3A` (`t3aw`).
const RAND_WEIGHTED_3A: &[(A, f64)] = &[
    (A::SolarizeIncreasing, 6.0),
    (A::Desaturate, 6.0),
    (A::GaussianBlur, 6.0),
    (A::Rotate, 3.0),
    (A::ShearX, 2.0),
    (A::ShearY, 2.0),
    (A::PosterizeIncreasing, 1.0),
    (A::AutoContrast, 1.0),
    (A::ColorIncreasing, 1.0),
    (A::SharpnessIncreasing, 1.0),
    (A::ContrastIncreasing, 1.0),
    (A::BrightnessIncreasing, 1.0),
    (A::Equalize, 1.0),
    (A::Invert, 1.0),
];

impl Augmentation {
    /// timm's name for it.
    fn name(self) -> &'static str {
        match self {
            A::AutoContrast => "AutoContrast",
            A::Equalize => "Equalize",
            A::Invert => "Invert",
            A::Rotate => "Rotate",
            A::Posterize => "Posterize",
            A::PosterizeIncreasing => "PosterizeIncreasing",
            A::Solarize => "Solarize",
            A::SolarizeIncreasing => "SolarizeIncreasing",
            A::SolarizeAdd => "SolarizeAdd",
            A::Color => "Color",
            A::ColorIncreasing => "ColorIncreasing",
            A::Contrast => "Contrast",
            A::ContrastIncreasing => "ContrastIncreasing",
            A::Brightness => "Brightness",
            A::BrightnessIncreasing => "BrightnessIncreasing",
            A::Sharpness => "Sharpness",
            A::SharpnessIncreasing => "SharpnessIncreasing",
            A::ShearX => "ShearX",
            A::ShearY => "ShearY",
            A::TranslateXRel => "TranslateXRel",
            A::TranslateYRel => "TranslateYRel",
            A::Desaturate => "Desaturate",
            A::GaussianBlur => "GaussianBlur",
        }
    }

    /// timm's `LEVEL_TO_ARG[name](level, hparams)`: the argument its function takes at
    /// magnitude `level`, `rng` drawing the sign where timm's `_randomly_negate` does (and
    /// only there); 0 for those that take none.
    fn argument(self, level: f64, translate_pct: f64, rng: &mut Rng) -> f64 {
        // `-v if random.random() > 0.5 else v`.
        let mut negate = |v: f64| if rng.next_f64() > 0.5 { -v } else { v };
        // `int()` of a non-negative level: its whole part.
        let posterize = ((level / LEVEL_DENOM) * 4.0).trunc();
        let solarize = ((level / LEVEL_DENOM) * 256.0).trunc().min(256.0);
        match self {
            A::AutoContrast | A::Equalize | A::Invert => 0.0,
            A::Rotate => negate((level / LEVEL_DENOM) * 30.0),
            A::Posterize => posterize,
            A::PosterizeIncreasing => 4.0 - posterize,
            A::Solarize => solarize,
            A::SolarizeIncreasing => 256.0 - solarize,
            A::SolarizeAdd => ((level / LEVEL_DENOM) * 110.0).trunc().min(128.0),
            A::Color | A::Contrast | A::Brightness | A::Sharpness => {
                (level / LEVEL_DENOM) * 1.8 + 0.1
            }
            A::ColorIncreasing
            | A::ContrastIncreasing
            | A::BrightnessIncreasing
            | A::SharpnessIncreasing => (1.0 + negate((level / LEVEL_DENOM) * 0.9)).max(0.1),
            A::ShearX | A::ShearY => negate((level / LEVEL_DENOM) * 0.3),
            A::TranslateXRel | A::TranslateYRel => negate((level / LEVEL_DENOM) * translate_pct),
            A::Desaturate => min_max(level, 0.5, 1.0),
            A::GaussianBlur => min_max(level, 0.1, 2.0),
        }
    }
}

/// timm's `_minmax_level_to_arg`: the level mapped onto [`low`, `high`], clamped.
fn min_max(level: f64, low: f64, high: f64) -> f64 {
    let level = low + (high - low) * (level / LEVEL_DENOM);
    level.min(high).max(low)
}

/// The set the augmentations are drawn from, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Space {
    /// Uniformly, with replacement (`np.random.choice(ops, n)`).
    Uniform(&'static [A]),
    /// By weight, without replacement (`np.random.choice(ops, n, replace=False, p=...)`,
    /// which draws as one weighted draw after another from those left).
    Weighted(&'static [(A, f64)]),
}

impl Space {
    /// Its augmentations.
    fn augmentations(self) -> Vec<A> {
        match self {
            Space::Uniform(set) => set.to_vec(),
            Space::Weighted(set) => set.iter().map(|(a, _)| *a).collect(),
        }
    }

    /// `n` augmentations, in the order they are applied.
    fn choose(self, n: usize, rng: &mut Rng) -> Vec<A> {
        match self {
            Space::Uniform(set) => (0..n)
                .map(|_| set[rng.below(set.len() as u64) as usize])
                .collect(),
            Space::Weighted(set) => {
                let mut left = set.to_vec();
                (0..n)
                    .map(|_| {
                        let total: f64 = left.iter().map(|(_, w)| w).sum();
                        let mut u = rng.next_f64() * total;
                        // The last one also takes what rounding leaves past the end.
                        let i = left
                            .iter()
                            .position(|(_, w)| {
                                let here = u < *w;
                                u -= w;
                                here
                            })
                            .unwrap_or(left.len() - 1);
                        left.remove(i).0
                    })
                    .collect()
            }
        }
    }
}

/// A config string as timm's `rand_augment_transform` reads it.
#[derive(Debug, Clone, PartialEq)]
struct Config {
    /// `m`: the magnitude.
    magnitude: f64,
    /// `n`: the augmentations drawn per image.
    num_layers: usize,
    /// `p`: the probability of applying each.
    prob: f64,
    /// `mstd`: the magnitude noise's standard deviation (infinite: uniform).
    magnitude_std: Option<f64>,
    /// `mmax`: the magnitude's upper bound.
    magnitude_max: Option<f64>,
    /// The set drawn from (`inc` and `t`).
    space: Space,
}

impl Config {
    /// Parses `config` as timm does: `rand`, then sections split at `-`; a section
    /// starting with `t` names a set, any other is a key and the number from its first
    /// digit on. What timm would assert on, or silently skip, is an error saying which
    /// part is wrong.
    fn parse(config: &str) -> std::result::Result<Config, String> {
        let mut sections = config.split('-');
        let first = sections.next().unwrap_or_default();
        if first != "rand" {
            return Err(format!(
                "must start with 'rand' (timm's RandAugment), not {first:?}"
            ));
        }
        let mut parsed = Config {
            magnitude: LEVEL_DENOM,
            num_layers: 2,
            prob: 0.5,
            magnitude_std: None,
            magnitude_max: None,
            space: Space::Uniform(RAND_TRANSFORMS),
        };
        let (mut increasing, mut set) = (false, None);
        for section in sections {
            if let Some(name) = section.strip_prefix('t') {
                let named = match name {
                    "weights" => Space::Weighted(RAND_WEIGHTED_0),
                    "3aw" => Space::Weighted(RAND_WEIGHTED_3A),
                    "3a" => Space::Uniform(RAND_3A),
                    _ => {
                        return Err(format!(
                            "section {section:?}: no transform set {name:?} (timm's are \
                             tweights, t3a and t3aw)"
                        ))
                    }
                };
                // timm keeps the first.
                set.get_or_insert(named);
                continue;
            }
            let Some(at) = section.find(|c: char| c.is_ascii_digit()) else {
                return Err(format!(
                    "section {section:?} has no number (timm would ignore it)"
                ));
            };
            let (key, value) = section.split_at(at);
            let int = || {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("section {section:?}: {value:?} is not an int"))
            };
            let float = || {
                value
                    .parse::<f64>()
                    .map_err(|_| format!("section {section:?}: {value:?} is not a number"))
            };
            match key {
                // timm's `hparams.setdefault`: the first one counts.
                "mstd" => {
                    let std = float()?;
                    let std = if std > 100.0 { f64::INFINITY } else { std };
                    parsed.magnitude_std.get_or_insert(std);
                }
                "mmax" => {
                    let max = f64::from(int()?);
                    parsed.magnitude_max.get_or_insert(max);
                }
                "inc" => increasing = int()? != 0,
                "m" => parsed.magnitude = f64::from(int()?),
                "n" => parsed.num_layers = int()? as usize,
                "p" => parsed.prob = float()?,
                _ => {
                    return Err(format!(
                        "unknown section {section:?} (timm's are m, n, p, mstd, mmax, inc \
                         and t)"
                    ))
                }
            }
        }
        if parsed.num_layers > MAX_STEPS {
            return Err(format!(
                "n{} is too many: at most {MAX_STEPS} augmentations an image (each adds to a \
                 sample's work; timm's recipes draw 2 to 4); give a smaller n",
                parsed.num_layers
            ));
        }
        parsed.space = set.unwrap_or(Space::Uniform(if increasing {
            RAND_INCREASING_TRANSFORMS
        } else {
            RAND_TRANSFORMS
        }));
        if let Space::Weighted(weighted) = parsed.space {
            if parsed.num_layers > weighted.len() {
                return Err(format!(
                    "n{}: a weighted set is drawn without replacement, and this one has {} \
                     augmentations",
                    parsed.num_layers,
                    weighted.len()
                ));
            }
        }
        Ok(parsed)
    }
}

/// How shears, translations and rotations resample the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpolation {
    /// Always this filter.
    Fixed(Resample),
    /// Bilinear or bicubic, drawn for each augmentation (timm's `_RANDOM_INTERPOLATION`).
    Random,
}

impl Interpolation {
    fn name(self) -> &'static str {
        match self {
            Interpolation::Fixed(Resample::Bilinear) => "bilinear",
            Interpolation::Fixed(Resample::Bicubic) => "bicubic",
            Interpolation::Random => "random",
        }
    }

    /// The filter for one augmentation (`random.choice` of the two where random).
    fn filter(self, rng: &mut Rng) -> Resample {
        match self {
            Interpolation::Fixed(filter) => filter,
            Interpolation::Random if rng.below(2) == 0 => Resample::Bilinear,
            Interpolation::Random => Resample::Bicubic,
        }
    }
}

fn build(args: &Args) -> Result<Op> {
    read(args).map(Op::new)
}

/// The operator its arguments make, each checked.
fn read(args: &Args) -> Result<TimmRandAugment> {
    let config = args
        .text("config")?
        .ok_or_else(|| args.error("config", "takes a string, not None"))?
        .to_owned();
    let parsed =
        Config::parse(&config).map_err(|e| args.error("config", format!("{config:?}: {e}")))?;
    let interpolation = match args.choice("interpolation", &["bilinear", "bicubic", "random"])? {
        "bilinear" => Interpolation::Fixed(Resample::Bilinear),
        "bicubic" => Interpolation::Fixed(Resample::Bicubic),
        _ => Interpolation::Random,
    };
    let fill = args.fill("fill")?;
    if !fill
        .iter()
        .all(|v| (0.0..=255.0).contains(v) && v.fract() == 0.0)
    {
        return Err(args.error(
            "fill",
            format!("{fill:?}: a colour's values are ints in [0, 255]"),
        ));
    }
    let non_negative = |param: &str, v: f64| {
        if v >= 0.0 && v.is_finite() {
            Ok(v)
        } else {
            Err(args.error(param, format!("{v} must be a non-negative number")))
        }
    };
    let optional = |param: &str| {
        args.optional_float(param)?
            .map(|v| non_negative(param, v))
            .transpose()
    };
    Ok(TimmRandAugment {
        translate_pct: non_negative("translate_pct", args.float("translate_pct")?)?,
        magnitude_std: optional("magnitude_std")?,
        magnitude_max: optional("magnitude_max")?,
        config,
        interpolation,
        fill: fill.map(|v| v as u8),
        parsed,
    })
}

struct TimmRandAugment {
    /// The config string as given.
    config: String,
    interpolation: Interpolation,
    fill: [u8; 3],
    translate_pct: f64,
    /// The hparams as given (`None` where the config's count).
    magnitude_std: Option<f64>,
    magnitude_max: Option<f64>,
    parsed: Config,
}

impl TimmRandAugment {
    /// timm's `RandAugment.__call__` draws, without the image: the augmentations, then
    /// for each, as its `AugmentOp.__call__`: whether it is applied (`random.random() >
    /// prob` skips it), its magnitude (noised where `magnitude_std` is positive: uniform in
    /// [0, m] where infinite, else Gaussian), clipped to [0, `magnitude_max or 10`], and
    /// its argument.
    fn draw(&self, rng: &mut Rng) -> Vec<(A, f64)> {
        let c = &self.parsed;
        let std = self.magnitude_std.or(c.magnitude_std).unwrap_or(0.0);
        // `self.magnitude_max or _LEVEL_DENOM`: none, or 0, is 10.
        let upper = match self.magnitude_max.or(c.magnitude_max) {
            Some(max) if max != 0.0 => max,
            _ => LEVEL_DENOM,
        };
        let chosen = c.space.choose(c.num_layers, rng);
        chosen
            .into_iter()
            .filter_map(|what| {
                if c.prob < 1.0 && rng.next_f64() > c.prob {
                    return None;
                }
                let magnitude = if std == f64::INFINITY {
                    rng.uniform(0.0, c.magnitude)
                } else if std > 0.0 {
                    c.magnitude + rng.normal() * std
                } else {
                    c.magnitude
                };
                let level = magnitude.min(upper).max(0.0);
                Some((what, what.argument(level, self.translate_pct, rng)))
            })
            .collect()
    }

    /// timm's function of `NAME_TO_OP` for `what`, on its argument `arg`, with this
    /// operator's resampling and fill (`AugmentOp.kwargs`).
    fn augment(&self, what: A, arg: f64, image: &mut Planes<'_>, rng: &mut Rng) {
        let (width, height) = (image.width as f64, image.height as f64);
        let mut transform = |a: [f64; 6], rng: &mut Rng| {
            pil::affine(image, a, self.interpolation.filter(rng), self.fill);
        };
        match what {
            A::ShearX => transform([1.0, arg, 0.0, 0.0, 1.0, 0.0], rng),
            A::ShearY => transform([1.0, 0.0, 0.0, arg, 1.0, 0.0], rng),
            // `pixels = pct * img.size[0]` (or `[1]`).
            A::TranslateXRel => transform([1.0, 0.0, arg * width, 0.0, 1.0, 0.0], rng),
            A::TranslateYRel => transform([1.0, 0.0, 0.0, 0.0, 1.0, arg * height], rng),
            A::Rotate => {
                let filter = self.interpolation.filter(rng);
                pil::rotate(image, arg, filter, self.fill);
            }
            A::AutoContrast => pil::autocontrast(image),
            A::Equalize => pil::equalize(image),
            A::Invert => pil::invert(image),
            A::Posterize | A::PosterizeIncreasing => pil::posterize(image, arg as i64),
            A::Solarize | A::SolarizeIncreasing => pil::solarize(image, arg),
            A::SolarizeAdd => solarize_add(image, arg),
            A::Color | A::ColorIncreasing => pil::color(image, arg),
            A::Contrast | A::ContrastIncreasing => pil::contrast(image, arg),
            A::Brightness | A::BrightnessIncreasing => pil::brightness(image, arg),
            A::Sharpness | A::SharpnessIncreasing => pil::sharpness(image, arg),
            // `min(1., max(0., 1. - factor))` of grayness becomes the colour factor.
            A::Desaturate => pil::color(image, (1.0 - arg).clamp(0.0, 1.0)),
            A::GaussianBlur => pil::gaussian_blur(image, arg),
        }
    }
}

/// timm's `solarize_add(img, add)`: values under 128 raised by `add`, to at most 255 (the
/// table rounded and clipped as `Image.point` takes it).
fn solarize_add(image: &mut Planes<'_>, add: f64) {
    let lut = std::array::from_fn(|i| {
        if i < 128 {
            (i as f64 + add)
                .min(255.0)
                .round_ties_even()
                .clamp(0.0, 255.0) as u8
        } else {
            i as u8
        }
    });
    pil::point(image, &lut);
}

impl Operator for TimmRandAugment {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let fill = match self.fill.map(|v| Value::Int(v.into())) {
            [a, b, c] if a == b && b == c => a,
            values => Value::Tuple(values.to_vec()),
        };
        vec![
            self.config.as_str().into(),
            self.interpolation.name().into(),
            fill,
            self.translate_pct.into(),
            self.magnitude_std.into(),
            self.magnitude_max.into(),
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

impl Photometric for TimmRandAugment {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        for (what, arg) in self.draw(rng) {
            self.augment(what, arg, image, rng);
        }
    }
}

impl Augmenter for TimmRandAugment {
    fn draw_steps(&self, _: usize, _: usize, rng: &mut Rng) -> Vec<(&'static str, f64)> {
        let steps = self.draw(rng);
        steps.into_iter().map(|(a, arg)| (a.name(), arg)).collect()
    }

    fn apply_step(
        &self,
        name: &str,
        value: f64,
        image: &mut Planes<'_>,
        rng: &mut Rng,
    ) -> Result<()> {
        let space = self.parsed.space.augmentations();
        let Some(what) = space.iter().copied().find(|a| a.name() == name) else {
            let names: Vec<_> = space.iter().map(|a| a.name()).collect();
            return Err(Error::Config(format!(
                "{}: no augmentation {name:?}: it has {}",
                DECLARATION.name,
                names.join(", ")
            )));
        };
        self.augment(what, value, image, rng);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(config: &str) -> Result<Op> {
        Op::call("TimmRandAugment", vec![config.into()], vec![])
    }

    fn operator(keywords: Vec<(&str, Value)>) -> TimmRandAugment {
        let keywords = keywords
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        read(&Args::bind(DECLARATION.name, DECLARATION.params, vec![], keywords).unwrap()).unwrap()
    }

    #[test]
    fn config_strings_read_as_timm_reads_them() {
        let c = Config::parse("rand-m9-mstd0.5-inc1").unwrap();
        assert_eq!(c.magnitude, 9.0);
        assert_eq!(c.num_layers, 2);
        assert_eq!(c.prob, 0.5);
        assert_eq!(c.magnitude_std, Some(0.5));
        assert_eq!(c.magnitude_max, None);
        assert_eq!(c.space, Space::Uniform(RAND_INCREASING_TRANSFORMS));
        let c = Config::parse("rand").unwrap();
        assert_eq!((c.magnitude, c.num_layers, c.prob), (10.0, 2, 0.5));
        assert_eq!(c.space, Space::Uniform(RAND_TRANSFORMS));
        // mstd over 100 is uniform; the first mstd and mmax count, the last m and n.
        let c =
            Config::parse("rand-mstd101-mstd1-mmax15-mmax20-m3-m7-n1-n4-p0.25-inc1-inc0").unwrap();
        assert_eq!(c.magnitude_std, Some(f64::INFINITY));
        assert_eq!(c.magnitude_max, Some(15.0));
        assert_eq!((c.magnitude, c.num_layers, c.prob), (7.0, 4, 0.25));
        assert_eq!(c.space, Space::Uniform(RAND_TRANSFORMS));
        // The first t counts; inc does not change a named set.
        let c = Config::parse("rand-t3a-tweights-inc1").unwrap();
        assert_eq!(c.space, Space::Uniform(RAND_3A));
        let c = Config::parse("rand-n15-tweights").unwrap();
        assert_eq!(c.space, Space::Weighted(RAND_WEIGHTED_0));
        let c = Config::parse("rand-t3aw").unwrap();
        assert_eq!(c.space, Space::Weighted(RAND_WEIGHTED_3A));
    }

    #[test]
    fn bad_config_strings_are_errors_naming_the_part() {
        for (config, part) in [
            ("rnd-m9", "\"rnd\""),
            ("", "\"\""),
            ("rand-m9-x3", "\"x3\""),
            ("rand-m9-mstd", "\"mstd\""),
            ("rand-m9-", "\"\""),
            ("rand-m9.5", "\"9.5\""),
            ("rand-mmax1.5", "\"1.5\""),
            ("rand-p0.5.1", "\"0.5.1\""),
            ("rand-m9-tfoo", "\"foo\""),
            ("rand-n16-tweights", "n16"),
            ("rand-n15-t3aw", "n15"),
            ("rand-n99999999999", "\"99999999999\""),
        ] {
            let e = op(config).unwrap_err().to_string();
            assert!(e.contains("TimmRandAugment: config"), "{config}: {e}");
            assert!(e.contains(part), "{config}: {e}");
        }
    }

    #[test]
    fn bad_arguments_are_errors_naming_them() {
        let call = |keyword: &str, value: Value| {
            Op::call("TimmRandAugment", vec![], vec![(keyword.into(), value)])
                .unwrap_err()
                .to_string()
        };
        assert!(call("interpolation", "nearest".into()).contains("TimmRandAugment: interpolation"));
        assert!(call("fill", Value::Int(256)).contains("TimmRandAugment: fill"));
        assert!(call("fill", [1.5, 2.0, 3.0].into()).contains("TimmRandAugment: fill"));
        assert!(call("fill", [1.0, 2.0].into()).contains("TimmRandAugment: fill"));
        assert!(call("translate_pct", (-0.1).into()).contains("TimmRandAugment: translate_pct"));
        assert!(call("magnitude_std", (-1.0).into()).contains("TimmRandAugment: magnitude_std"));
        assert!(call("magnitude_max", f64::NAN.into()).contains("TimmRandAugment: magnitude_max"));
        assert!(call("config", Value::None).contains("TimmRandAugment: config"));
    }

    #[test]
    fn it_writes_itself_as_a_call_that_reads_back() {
        let made = Op::call(
            "TimmRandAugment",
            vec!["rand-m7-n3-tweights".into()],
            vec![
                ("fill".into(), Value::Int(128)),
                ("interpolation".into(), "random".into()),
                ("magnitude_max".into(), 12.0.into()),
            ],
        )
        .unwrap();
        let again: Op = made.to_string().parse().unwrap();
        assert_eq!(again, made);
        assert_eq!(made.arg("fill"), Some(Value::Int(128)));
        let default = op("rand-m9-mstd0.5-inc1").unwrap();
        assert_eq!(
            default.arg("fill"),
            Some(Value::Tuple(vec![
                Value::Int(124),
                Value::Int(116),
                Value::Int(104)
            ]))
        );
    }

    #[test]
    fn draws_are_fixed_by_the_seed_and_follow_the_config() {
        let op = op("rand-m9-mstd0.5-inc1").unwrap();
        let draws = |seed| super::super::augmentation_draws(&op, seed, 200, 32, 32).unwrap();
        assert_eq!(draws(1), draws(1));
        assert_ne!(draws(1), draws(2));
        for (name, arg) in draws(3).into_iter().flatten() {
            assert!(
                RAND_INCREASING_TRANSFORMS.iter().any(|a| a.name() == name),
                "{name}"
            );
            match name {
                "Rotate" => assert!(arg.abs() <= 30.0),
                "PosterizeIncreasing" => assert!((0.0..=4.0).contains(&arg) && arg.fract() == 0.0),
                "SolarizeIncreasing" => assert!((0.0..=256.0).contains(&arg)),
                "TranslateXRel" | "TranslateYRel" => assert!(arg.abs() <= 0.45),
                _ => {}
            }
        }
        // No noise, every augmentation applied: two steps at timm's level 9 arguments.
        let fixed = operator(vec![("config", "rand-m9-p1".into())]);
        let mut rng = Rng::new(4);
        for _ in 0..200 {
            let steps = fixed.draw(&mut rng);
            assert_eq!(steps.len(), 2);
            for (what, arg) in steps {
                let want = match what {
                    A::Rotate => 27.0,
                    A::Posterize => 3.0,
                    A::Solarize => 230.0,
                    A::SolarizeAdd => 99.0,
                    A::ShearX | A::ShearY => 0.3 * 0.9,
                    A::TranslateXRel | A::TranslateYRel => 0.9 * 0.45,
                    A::Color | A::Contrast | A::Brightness | A::Sharpness => 0.9 * 1.8 + 0.1,
                    _ => 0.0,
                };
                assert!((arg.abs() - want).abs() < 1e-12, "{what:?} {arg}");
            }
        }
        // p0 applies nothing; a weighted set never draws one twice.
        let none = operator(vec![("config", "rand-p0".into())]);
        assert!((0..100).all(|_| none.draw(&mut rng).is_empty()));
        let weighted = operator(vec![("config", "rand-n14-p1-t3aw".into())]);
        let steps = weighted.draw(&mut rng);
        let mut names: Vec<_> = steps.iter().map(|(a, _)| a.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 14);
    }

    #[test]
    fn magnitude_noise_is_clipped_to_the_bound() {
        let mut rng = Rng::new(5);
        // Magnitude 30 clipped to 10: Rotate at 30 degrees at most.
        let clipped = operator(vec![("config", "rand-m30-p1-mstd101".into())]);
        let uniform: Vec<f64> = (0..2000)
            .flat_map(|_| clipped.draw(&mut rng))
            .filter(|(a, _)| *a == A::Rotate)
            .map(|(_, arg)| arg.abs())
            .collect();
        assert!(uniform.iter().all(|a| *a <= 30.0));
        // Uniform in [0, 30], clipped at 10: two thirds at the bound.
        let at_bound = uniform.iter().filter(|a| **a == 30.0).count() as f64;
        assert!((at_bound / uniform.len() as f64 - 2.0 / 3.0).abs() < 0.08);
        // The hparam wins over mmax; 0 means 10.
        let raised = operator(vec![
            ("config", "rand-m30-p1-mmax15".into()),
            ("magnitude_max", 20.0.into()),
        ]);
        let zero = operator(vec![("config", "rand-m30-p1-mmax0".into())]);
        for (op, want) in [(&raised, 60.0), (&zero, 30.0)] {
            for (what, arg) in (0..100).flat_map(|_| op.draw(&mut rng)) {
                if what == A::Rotate {
                    assert_eq!(arg.abs(), want);
                }
            }
        }
    }

    /// A 3-plane image of `width` × `height` whose values run over every byte.
    fn pattern(width: usize, height: usize) -> Vec<u8> {
        (0..3 * width * height)
            .map(|i| ((i * 37 + i / 7) % 256) as u8)
            .collect()
    }

    fn planes(data: &mut [u8], width: usize, height: usize) -> Planes<'_> {
        Planes {
            data,
            width,
            height,
        }
    }

    #[test]
    fn whole_pixel_translations_copy_and_fill() {
        let source = pattern(6, 5);
        for filter in [Resample::Bilinear, Resample::Bicubic] {
            let mut data = source.clone();
            // The source x is x + 2: the image moves 2 to the left.
            pil::affine(
                &mut planes(&mut data, 6, 5),
                [1.0, 0.0, 2.0, 0.0, 1.0, 0.0],
                filter,
                [1, 2, 3],
            );
            for c in 0..3 {
                for y in 0..5 {
                    for x in 0..6 {
                        let want = if x < 4 {
                            source[c * 30 + y * 6 + x + 2]
                        } else {
                            [1, 2, 3][c]
                        };
                        assert_eq!(data[c * 30 + y * 6 + x], want, "{filter:?} {c} {x} {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn bicubic_overshoot_is_clipped() {
        // A hard edge sampled half-way overshoots both ways; the bytes do not wrap.
        let mut data: Vec<u8> = (0..3 * 8 * 2)
            .map(|i| if i % 8 < 4 { 0 } else { 255 })
            .collect();
        pil::affine(
            &mut planes(&mut data, 8, 2),
            [1.0, 0.0, 0.5, 0.0, 1.0, 0.0],
            Resample::Bicubic,
            [0; 3],
        );
        let row = &data[..8];
        assert!(row.windows(2).take(6).all(|w| w[0] <= w[1]), "{row:?}");
        assert_eq!((row[0], row[6]), (0, 255));
    }

    #[test]
    fn rotations_by_quarter_turns_are_exact() {
        let source = pattern(4, 4);
        let at = |data: &[u8], x: usize, y: usize| data[y * 4 + x];
        for (degrees, source_of) in [
            (
                90.0,
                (|x, y| (3 - y, x)) as fn(usize, usize) -> (usize, usize),
            ),
            (-270.0, |x, y| (3 - y, x)),
            (180.0, |x, y| (3 - x, 3 - y)),
            (270.0, |x, y| (y, 3 - x)),
            (360.0, |x, y| (x, y)),
        ] {
            let mut data = source.clone();
            pil::rotate(
                &mut planes(&mut data, 4, 4),
                degrees,
                Resample::Bicubic,
                [0; 3],
            );
            for y in 0..4 {
                for x in 0..4 {
                    let (sx, sy) = source_of(x, y);
                    assert_eq!(at(&data, x, y), at(&source, sx, sy), "{degrees} {x} {y}");
                }
            }
        }
        // Not square: the quarter turn samples, and the corners are the fill.
        let mut data = pattern(6, 2);
        pil::rotate(
            &mut planes(&mut data, 6, 2),
            90.0,
            Resample::Bilinear,
            [7, 8, 9],
        );
        assert_eq!([data[0], data[12], data[24]], [7, 8, 9]);
    }

    #[test]
    fn enhancements_blend_truncate_and_clip() {
        let mut data = vec![200, 100, 0, 10, 20, 30];
        let mut image = planes(&mut data, 2, 1);
        // Extrapolating clips; interpolating truncates (100 · 0.5 = 50, 20 · 0.5 = 10).
        pil::brightness(&mut image, 2.0);
        assert_eq!(image.data, [255, 200, 0, 20, 40, 60]);
        pil::brightness(&mut image, 0.5);
        assert_eq!(image.data, [127, 100, 0, 10, 20, 30]);
        // A grey image has no colour to change; white's L is 255.
        let mut grey = vec![90, 255, 90, 255, 90, 255];
        pil::color(&mut planes(&mut grey, 2, 1), 1.7);
        assert_eq!(grey, [90, 255, 90, 255, 90, 255]);
        // Contrast 0 is the mean of L, rounded half up: (0 + 255) / 2 = 127.5 → 128.
        let mut halves = vec![0, 255, 0, 255, 0, 255];
        pil::contrast(&mut planes(&mut halves, 2, 1), 0.0);
        assert_eq!(halves, [128; 6]);
        // Sharpness 1 keeps; a 2-row image is its own smoothing.
        let source = pattern(5, 4);
        let mut data = source.clone();
        pil::sharpness(&mut planes(&mut data, 5, 4), 1.0);
        assert_eq!(data, source);
        let small = pattern(5, 2);
        let mut data = small.clone();
        pil::sharpness(&mut planes(&mut data, 5, 2), 0.0);
        assert_eq!(data, small);
        // Smoothed fully (factor 0): the border is kept, the inside averaged.
        let mut dot = vec![0u8; 27];
        dot[4] = 130;
        pil::sharpness(&mut planes(&mut dot, 3, 3), 0.0);
        // 0.5 + 130 · 5/13 in 32-bit floats: 50.5, truncated.
        assert_eq!(dot[..9], [0, 0, 0, 0, 50, 0, 0, 0, 0]);
    }

    #[test]
    fn lookup_tables_match_image_ops() {
        let mut values: Vec<u8> = (0..=255).chain(0..=255).chain(0..=255).collect();
        let source = values.clone();
        let mut image = planes(&mut values, 256, 1);
        pil::posterize(&mut image, 8);
        assert_eq!(image.data, source);
        pil::posterize(&mut image, 3);
        assert!(image.data.iter().zip(&source).all(|(v, s)| *v == s & 0xE0));
        pil::posterize(&mut image, 0);
        assert!(image.data.iter().all(|v| *v == 0));
        image.data.copy_from_slice(&source);
        pil::posterize(&mut image, -6);
        assert!(image.data.iter().all(|v| *v == 0));
        image.data.copy_from_slice(&source);
        pil::solarize(&mut image, 256.0);
        assert_eq!(image.data, source);
        pil::solarize(&mut image, 128.0);
        assert_eq!(
            (image.data[127], image.data[128], image.data[255]),
            (127, 127, 0)
        );
        image.data.copy_from_slice(&source);
        solarize_add(&mut image, 110.0);
        assert_eq!(
            (
                image.data[0],
                image.data[127],
                image.data[128],
                image.data[145]
            ),
            (110, 237, 128, 145)
        );
        image.data.copy_from_slice(&source);
        pil::invert(&mut image);
        assert!(image.data.iter().zip(&source).all(|(v, s)| *v == 255 - s));
    }

    #[test]
    fn autocontrast_stretches_each_channel_and_keeps_flat_ones() {
        let mut data = vec![50, 100, 150, 7, 7, 7, 0, 128, 255];
        pil::autocontrast(&mut planes(&mut data, 3, 1));
        // 255 / 100 · (v − 50), truncated: 0, 127, 255.
        assert_eq!(data, [0, 127, 255, 7, 7, 7, 0, 128, 255]);
    }

    #[test]
    fn gaussian_blur_keeps_flat_images_and_takes_any_size() {
        let mut flat = vec![77u8; 3 * 9 * 4];
        pil::gaussian_blur(&mut planes(&mut flat, 9, 4), 2.0);
        assert!(flat.iter().all(|v| *v == 77));
        for (w, h) in [(1, 1), (1, 5), (7, 1), (3, 2)] {
            let mut data = pattern(w, h);
            pil::gaussian_blur(&mut planes(&mut data, w, h), 1.5);
        }
        // An impulse spreads evenly both ways and keeps about its sum.
        let mut dot = vec![0u8; 3 * 15];
        dot[7] = 255;
        pil::gaussian_blur(&mut planes(&mut dot, 15, 1), 2.0);
        let row = &dot[..15];
        assert!(
            (0..7).all(|i| row[i] == row[14 - i] && row[i] <= row[i + 1]),
            "{row:?}"
        );
        let sum: u32 = row.iter().map(|v| u32::from(*v)).sum();
        assert!((250..=260).contains(&sum), "{row:?}");
    }

    #[test]
    fn steps_apply_by_name_within_the_set() {
        let op = op("rand-m9-inc1").unwrap();
        let mut data = pattern(4, 4);
        let err = super::super::apply_augmentation(&op, "Posterize", 2.0, &mut data, 4, 4, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no augmentation \"Posterize\""), "{err}");
        super::super::apply_augmentation(&op, "PosterizeIncreasing", 2.0, &mut data, 4, 4, 0)
            .unwrap();
        assert!(data.iter().all(|v| v & 0x3F == 0));
    }
}
