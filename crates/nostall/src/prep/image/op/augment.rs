//! The augmentations torchvision's automatic augmentations draw from (AutoAugment,
//! RandAugment, TrivialAugmentWide, AugMix): each one's kernel, the magnitudes its bins
//! hold, and the settings the four operators share (interpolation, fill).
//!
//! As torchvision.transforms.v2's `_AutoAugmentBase._apply_image_or_video_transform` on
//! uint8 images: the shears and translations through the affine kernel of
//! [`RandomAffine`](super::affine), rotations through `RandomRotation`'s, and the colour
//! operations through the kernels of `ColorJitter`, `RandomAdjustSharpness`,
//! `RandomPosterize`, `RandomSolarize`, `RandomAutocontrast`, `RandomEqualize` and
//! `RandomInvert`, with torchvision's arguments (a factor of `1 + magnitude`, a threshold
//! of `255 · magnitude`, ...).

use super::affine::{self, inverse_matrix, warp, Interpolation};
use super::{
    autocontrast, color_jitter, equalize, posterize, rotation, sharpness, solarize, Augmenter,
    Operator, Photometric, Planes,
};
use crate::error::Result;
use crate::prep::args::{number, Args, Kind, Param, Value};
use crate::rng::Rng;

/// One augmentation, by torchvision's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Augmentation {
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
    Invert,
}

impl Augmentation {
    /// Every augmentation.
    const ALL: [Augmentation; 15] = [
        Augmentation::Identity,
        Augmentation::ShearX,
        Augmentation::ShearY,
        Augmentation::TranslateX,
        Augmentation::TranslateY,
        Augmentation::Rotate,
        Augmentation::Brightness,
        Augmentation::Color,
        Augmentation::Contrast,
        Augmentation::Sharpness,
        Augmentation::Posterize,
        Augmentation::Solarize,
        Augmentation::AutoContrast,
        Augmentation::Equalize,
        Augmentation::Invert,
    ];

    /// torchvision's name for it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Augmentation::Identity => "Identity",
            Augmentation::ShearX => "ShearX",
            Augmentation::ShearY => "ShearY",
            Augmentation::TranslateX => "TranslateX",
            Augmentation::TranslateY => "TranslateY",
            Augmentation::Rotate => "Rotate",
            Augmentation::Brightness => "Brightness",
            Augmentation::Color => "Color",
            Augmentation::Contrast => "Contrast",
            Augmentation::Sharpness => "Sharpness",
            Augmentation::Posterize => "Posterize",
            Augmentation::Solarize => "Solarize",
            Augmentation::AutoContrast => "AutoContrast",
            Augmentation::Equalize => "Equalize",
            Augmentation::Invert => "Invert",
        }
    }

    /// The augmentation torchvision names `name`.
    pub(super) fn named(name: &str) -> Option<Augmentation> {
        Augmentation::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The end of a translation's range, from the image's size along its axis.
#[derive(Debug, Clone, Copy)]
pub(super) enum Extent {
    /// A fixed number of pixels.
    Pixels(f64),
    /// `factor · size` (AutoAugment's `150 / 331 · width`).
    Times(f64),
    /// `size / divisor` (AugMix's `width / 3`).
    Over(f64),
}

impl Extent {
    fn of(self, size: usize) -> f64 {
        match self {
            Extent::Pixels(v) => v,
            Extent::Times(factor) => factor * size as f64,
            Extent::Over(divisor) => size as f64 / divisor,
        }
    }
}

/// The magnitudes an augmentation's bins hold, as torchvision's `_AUGMENTATION_SPACE`
/// makes them for `bins` bins.
#[derive(Debug, Clone, Copy)]
pub(super) enum Magnitudes {
    /// It takes none.
    None,
    /// `torch.linspace(start, end, bins)`.
    Linspace(f64, f64),
    /// `torch.linspace(0, extent, bins)` of the width.
    OfWidth(Extent),
    /// `torch.linspace(0, extent, bins)` of the height.
    OfHeight(Extent),
    /// Posterize's bits: `(top - arange(bins) / ((bins - 1) / steps)).round().int()`.
    Bits {
        /// The bits of the first bin.
        top: f32,
        /// How many bits the last bin has fewer.
        steps: f64,
    },
}

impl Magnitudes {
    /// The magnitude of bin `index` of `bins` for a `width` × `height` image; `None` for
    /// an augmentation that takes none.
    pub(super) fn at(self, index: usize, bins: usize, width: usize, height: usize) -> Option<f64> {
        match self {
            Magnitudes::None => None,
            Magnitudes::Linspace(start, end) => Some(linspace(start, end, bins, index)),
            Magnitudes::OfWidth(extent) => Some(linspace(0.0, extent.of(width), bins, index)),
            Magnitudes::OfHeight(extent) => Some(linspace(0.0, extent.of(height), bins, index)),
            Magnitudes::Bits { top, steps } => {
                // An int64 arange over a Python float: float32 arithmetic, the float
                // rounded to 32 bits.
                let divisor = ((bins as f64 - 1.0) / steps) as f32;
                let bits = (top - index as f32 / divisor).round_ties_even();
                Some(f64::from(bits as i32))
            }
        }
    }
}

/// Item `index` of torch's float32 `linspace(start, end, steps)` on the CPU: the step in
/// 32 bits, the first half counted up from `start`, the second down from `end`.
fn linspace(start: f64, end: f64, steps: usize, index: usize) -> f64 {
    let (start, end) = (start as f32, end as f32);
    if steps == 1 {
        return f64::from(start);
    }
    let step = (end - start) / (steps - 1) as f32;
    let value = if index < steps / 2 {
        start + step * index as f32
    } else {
        end - step * (steps - index - 1) as f32
    };
    f64::from(value)
}

/// One augmentation of a space, with its magnitudes and whether their sign is drawn.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) what: Augmentation,
    pub(super) magnitudes: Magnitudes,
    pub(super) signed: bool,
}

/// An entry of a space (for the tables of the four operators).
pub(super) const fn entry(what: Augmentation, magnitudes: Magnitudes, signed: bool) -> Entry {
    Entry {
        what,
        magnitudes,
        signed,
    }
}

impl Entry {
    /// torchvision's magnitude for bin `index` of `bins`: the bin's value, negated when
    /// the augmentation is signed and `torch.rand(()) <= 0.5`; 0 for one that takes none
    /// (which draws nothing).
    pub(super) fn magnitude(
        &self,
        index: usize,
        bins: usize,
        (width, height): (usize, usize),
        rng: &mut Rng,
    ) -> f64 {
        match self.magnitudes.at(index, bins, width, height) {
            None => 0.0,
            Some(m) if self.signed && rng.next_f64() <= 0.5 => -m,
            Some(m) => m,
        }
    }
}

/// A uniform index into `n` items, as `int(torch.randint(n, ()))` gives it.
pub(super) fn index(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// The settings the four operators share: how shears, translations and rotations sample
/// the image, and what comes in from outside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Settings {
    pub(super) interpolation: Interpolation,
    /// `None`: zeros, unmasked (torchvision's `fill=None`, the default).
    pub(super) fill: Option<[f64; 3]>,
}

/// The `interpolation` parameter, with its default as the operator has it.
pub(super) const fn interpolation_param(default: &'static str) -> Param {
    Param::with_default(
        "interpolation",
        Kind::Choice,
        default,
        "how shears, translations and rotations sample the image: 'nearest' or 'bilinear'",
    )
}

/// The `num_magnitude_bins` parameter of RandAugment and TrivialAugmentWide.
pub(super) const BINS: Param = Param::with_default(
    "num_magnitude_bins",
    Kind::Int,
    "31",
    "how many magnitudes each augmentation's range is split into (at least 2)",
);

/// The most magnitude bins: torch computes a bin's magnitude from its index in 32-bit
/// floats, which hold every index exactly only up to 2^24 (and torchvision allocates a
/// table of the bins for each augmentation).
const MAX_BINS: usize = 1 << 24;

/// The `num_magnitude_bins` argument.
pub(super) fn bins(args: &Args) -> Result<usize> {
    let bins: usize = args.int("num_magnitude_bins")?;
    if !(2..=MAX_BINS).contains(&bins) {
        return Err(args.error(
            "num_magnitude_bins",
            format!(
                "{bins}: must be at least 2 and at most 2^24 (where float32, in which torch \
                 computes the magnitudes, stops holding every bin's index)"
            ),
        ));
    }
    Ok(bins)
}

/// An automatic augmentation that draws augmentations from its space and applies them in
/// turn (AutoAugment, RandAugment, TrivialAugmentWide): its work on pixels and its
/// [`Augmenter`] follow from its draw.
pub(super) trait Policy: Operator {
    /// The augmentations it draws from.
    fn space(&self) -> &'static [Entry];

    /// Its interpolation and fill.
    fn settings(&self) -> &Settings;

    /// One sample's augmentations, in order, with their magnitudes as drawn, for an image
    /// of `(width, height)`.
    fn draw(&self, size: (usize, usize), rng: &mut Rng) -> Vec<(Augmentation, f64)>;
}

impl<T: Policy> Photometric for T {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        for (what, magnitude) in self.draw((image.width, image.height), rng) {
            self.settings().apply(image, what, magnitude);
        }
    }
}

impl<T: Policy> Augmenter for T {
    fn draw_steps(&self, width: usize, height: usize, rng: &mut Rng) -> Vec<(&'static str, f64)> {
        let steps = self.draw((width, height), rng);
        steps.into_iter().map(|(a, m)| (a.name(), m)).collect()
    }

    fn apply_step(
        &self,
        name: &str,
        value: f64,
        image: &mut Planes<'_>,
        _: &mut Rng,
    ) -> Result<()> {
        let operator = self.declaration().name;
        self.settings()
            .apply_named(operator, self.space(), name, value, image)
    }
}

/// The `fill` parameter of the four operators.
pub(super) const FILL: Param = Param::with_default(
    "fill",
    Kind::OptionalFill,
    "None",
    "the value of what comes in from outside the image in shears, translations and \
     rotations: one number, one per channel (R, G, B), or None (zeros, torchvision's default)",
);

impl Settings {
    /// The `interpolation` and `fill` arguments.
    pub(super) fn read(args: &Args) -> Result<Settings> {
        let interpolation = affine::interpolation(args)?;
        let fill = match args.value("fill") {
            Value::None => None,
            Value::Tuple(items) if items.len() == 1 => match number(&items[0]) {
                Some(v) => Some([v; 3]),
                None => return Err(args.error("fill", "takes a number, 3 numbers or None")),
            },
            _ => Some(affine::fill(args)?),
        };
        Ok(Settings {
            interpolation,
            fill,
        })
    }

    /// The arguments as they are given back: `interpolation`, `fill`.
    pub(super) fn values(&self) -> [Value; 2] {
        [
            self.interpolation.name().into(),
            self.fill.map_or(Value::None, affine::fill_value),
        ]
    }

    /// Applies `what` with `magnitude` (signed, as drawn) to `image`, as torchvision's
    /// `_apply_image_or_video_transform` does.
    pub(super) fn apply(&self, image: &mut Planes<'_>, what: Augmentation, magnitude: f64) {
        let (width, height) = (image.width, image.height);
        let area = image.area();
        let shear = |image: &mut Planes<'_>, shear: [f64; 2]| {
            // About the top-left corner (`center=[0, 0]`), in coordinates relative to the
            // image's centre; the shear's angle is `atan(magnitude)` in degrees.
            let corner = [-0.5 * width as f64, -0.5 * height as f64];
            let matrix = inverse_matrix(corner, 0.0, [0.0, 0.0], 1.0, shear);
            warp(image, matrix, self.interpolation, self.fill);
        };
        let translate = |image: &mut Planes<'_>, by: [f64; 2]| {
            let matrix = inverse_matrix([0.0, 0.0], 0.0, by, 1.0, [0.0, 0.0]);
            warp(image, matrix, self.interpolation, self.fill);
        };
        match what {
            Augmentation::Identity => {}
            Augmentation::ShearX => shear(image, [magnitude.atan().to_degrees(), 0.0]),
            Augmentation::ShearY => shear(image, [0.0, magnitude.atan().to_degrees()]),
            // Python's int(): towards zero.
            Augmentation::TranslateX => translate(image, [magnitude.trunc(), 0.0]),
            Augmentation::TranslateY => translate(image, [0.0, magnitude.trunc()]),
            Augmentation::Rotate => {
                rotation::rotate(image, magnitude, self.interpolation, self.fill)
            }
            Augmentation::Brightness => {
                color_jitter::brightness(&mut image.data[..3 * area], (1.0 + magnitude) as f32)
            }
            Augmentation::Color => color_jitter::saturation(image, 1.0 + magnitude),
            Augmentation::Contrast => color_jitter::contrast(image, 1.0 + magnitude),
            Augmentation::Sharpness => {
                for plane in image.rgb_mut() {
                    sharpness::sharpen(plane, width, height, 1.0 + magnitude);
                }
            }
            Augmentation::Posterize => {
                posterize::posterize(&mut image.data[..3 * area], magnitude.trunc() as u8)
            }
            Augmentation::Solarize => {
                solarize::solarize(&mut image.data[..3 * area], 255.0 * magnitude)
            }
            Augmentation::AutoContrast => image
                .rgb_mut()
                .into_iter()
                .for_each(autocontrast::autocontrast),
            Augmentation::Equalize => image.rgb_mut().into_iter().for_each(equalize::equalize),
            Augmentation::Invert => image.data[..3 * area]
                .iter_mut()
                .for_each(|v| *v = 255 - *v),
        }
    }

    /// [`Settings::apply`] for the augmentation named `name`, if `space` holds it (the
    /// operators' [`Augmenter::apply_step`](super::Augmenter::apply_step)).
    pub(super) fn apply_named(
        &self,
        operator: &str,
        space: &[Entry],
        name: &str,
        magnitude: f64,
        image: &mut Planes<'_>,
    ) -> Result<()> {
        match Augmentation::named(name).filter(|a| space.iter().any(|e| e.what == *a)) {
            Some(what) => {
                self.apply(image, what, magnitude);
                Ok(())
            }
            None => {
                let names: Vec<_> = space.iter().map(|e| e.what.name()).collect();
                Err(crate::error::Error::Config(format!(
                    "{operator}: no augmentation {name:?}: it has {}",
                    names.join(", ")
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_has_torchs_ends_and_middle() {
        assert_eq!(linspace(0.0, 0.3, 31, 0), 0.0);
        assert_eq!(linspace(0.0, 0.3, 31, 30), f64::from(0.3f32));
        assert_eq!(linspace(1.0, 0.0, 10, 9), 0.0);
        assert_eq!(linspace(0.0, 32.0, 31, 15), 16.0);
        assert_eq!(linspace(0.0, 30.0, 31, 9), 9.0);
    }

    #[test]
    fn posterize_bits_are_torchvisions() {
        let bits = |top, steps, bins| -> Vec<f64> {
            (0..bins)
                .map(|i| Magnitudes::Bits { top, steps }.at(i, bins, 1, 1).unwrap())
                .collect()
        };
        // (8 - arange(31) / 7.5).round(): 8 until 3.75, then down to 4.
        let rand = bits(8.0, 4.0, 31);
        assert_eq!(
            (rand[0], rand[3], rand[4], rand[9], rand[30]),
            (8.0, 8.0, 7.0, 7.0, 4.0)
        );
        // AugMix: (4 - arange(10) / 2.25).round().
        assert_eq!(
            bits(4.0, 4.0, 10),
            [4.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0, 0.0, 0.0]
        );
    }

    #[test]
    fn every_name_reads_back() {
        for a in Augmentation::ALL {
            assert_eq!(Augmentation::named(a.name()), Some(a));
        }
        assert_eq!(Augmentation::named("Cutout"), None);
    }
}
