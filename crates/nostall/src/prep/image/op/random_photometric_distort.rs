//! `RandomPhotometricDistort`: SSD's colour distortion (torchvision.transforms.v2's, with
//! the same random choices and `ColorJitter`'s kernels).

use super::color_jitter::{brightness, contrast, hue, saturation};
use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomPhotometricDistort",
    doc: "Distorts brightness, contrast, saturation and hue, each with probability `p` and \
          a factor drawn from its range, contrast before or after the other two, then \
          permutes the channels with probability `p` (torchvision.transforms.v2's \
          `RandomPhotometricDistort`, as SSD trains).",
    params: &[
        Param::with_default(
            "brightness",
            Kind::Range,
            "(0.875, 1.125)",
            "range of the brightness factor",
        ),
        Param::with_default(
            "contrast",
            Kind::Range,
            "(0.5, 1.5)",
            "range of the contrast factor",
        ),
        Param::with_default(
            "saturation",
            Kind::Range,
            "(0.5, 1.5)",
            "range of the saturation factor",
        ),
        Param::with_default(
            "hue",
            Kind::Range,
            "(-0.05, 0.05)",
            "range of the hue shift",
        ),
        Param::with_default("p", Kind::Float, "0.5", "probability of each distortion"),
    ],
    translates: &[Translation::torchvision(
        "RandomPhotometricDistort",
        &[
            ("brightness", "brightness", Conv::Floats),
            ("contrast", "contrast", Conv::Floats),
            ("saturation", "saturation", Conv::Floats),
            ("hue", "hue", Conv::Floats),
            ("p", "p", Conv::Float),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let mut ranges = [(0.0, 0.0); 4];
    for (range, name) in ranges
        .iter_mut()
        .zip(["brightness", "contrast", "saturation"])
    {
        let (lo, hi) = args.range(name)?;
        if !(0.0 <= lo && lo <= hi && hi.is_finite()) {
            return Err(args.error(name, format!("({lo}, {hi}): use 0 <= lo <= hi")));
        }
        *range = (lo, hi);
    }
    let (lo, hi) = args.range("hue")?;
    if !(-0.5 <= lo && lo <= hi && hi <= 0.5) {
        return Err(args.error("hue", format!("({lo}, {hi}): use -0.5 <= lo <= hi <= 0.5")));
    }
    ranges[3] = (lo, hi);
    Ok(Op::new(RandomPhotometricDistort {
        ranges,
        p: args.probability("p")?,
    }))
}

struct RandomPhotometricDistort {
    /// Brightness, contrast, saturation and hue.
    ranges: [(f64, f64); 4],
    p: f64,
}

/// One sample's draws: each factor (`None` where off), whether contrast comes first, and
/// the channels' order (`None` where kept).
type Draw = ([Option<f32>; 4], bool, Option<[usize; 3]>);

impl RandomPhotometricDistort {
    /// v2's `make_params`: for each of the four in order, a draw against `p`, then its
    /// factor (rounded to 32 bits, as torch's `uniform_` gives it); then contrast's place;
    /// then a draw against `p` and a permutation of the channels.
    fn draw(&self, rng: &mut Rng) -> Draw {
        let factors = self
            .ranges
            .map(|(lo, hi)| (rng.next_f64() < self.p).then(|| rng.uniform(lo, hi) as f32));
        let contrast_first = rng.next_f64() < 0.5;
        let permutation = (rng.next_f64() < self.p).then(|| {
            let mut order = [0, 1, 2];
            rng.shuffle(&mut order);
            order
        });
        (factors, contrast_first, permutation)
    }
}

impl Operator for RandomPhotometricDistort {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let mut args: Vec<Value> = self.ranges.iter().map(|&r| r.into()).collect();
        args.push(self.p.into());
        args
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for RandomPhotometricDistort {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let ([bright, contrast_by, saturate, hue_by], contrast_first, permutation) = self.draw(rng);
        if let Some(factor) = bright {
            let area = image.area();
            brightness(&mut image.data[..3 * area], factor);
        }
        if let (Some(factor), true) = (contrast_by, contrast_first) {
            contrast(image, f64::from(factor));
        }
        if let Some(factor) = saturate {
            saturation(image, f64::from(factor));
        }
        if let Some(factor) = hue_by {
            hue(image, factor);
        }
        if let (Some(factor), false) = (contrast_by, contrast_first) {
            contrast(image, f64::from(factor));
        }
        if let Some(order) = permutation {
            // Output channel c is input channel order[c] (v2's `permute_channels`).
            let area = image.area();
            let copy = image.data[..3 * area].to_vec();
            for (c, &from) in order.iter().enumerate() {
                image.data[c * area..(c + 1) * area]
                    .copy_from_slice(&copy[from * area..(from + 1) * area]);
            }
        }
    }
}
