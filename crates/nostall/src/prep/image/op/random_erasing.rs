//! `RandomErasing`: a random rectangle of the delivered sample set to a value or to
//! noise, with a probability.

use super::{Declaration, Op, Operator, Sample, Stage, Tensorial};
use crate::error::{Error, Result};
use crate::prep::args::{number, Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::prep::DType;
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomErasing",
    doc: "Sets a random rectangle of the sample to `value`, with probability `p` \
          (torchvision.transforms.v2's `RandomErasing`, the same draws: ten tries at an \
          area and aspect ratio that fit, else nothing). It erases the sample as delivered, \
          so it comes last, after `Normalize` (values are in the normalised units, as in \
          torchvision's recipes). `value='random'` fills each value with standard normal \
          noise (timm's `re_mode='pixel'`).",
    params: &[
        Param::with_default("p", Kind::Float, "0.5", "probability of erasing"),
        Param::with_default(
            "scale",
            Kind::Range,
            "(0.02, 0.33)",
            "range of the erased area, as a fraction of the sample's",
        ),
        Param::with_default(
            "ratio",
            Kind::Range,
            "(0.3, 3.3)",
            "range of the erased rectangle's aspect ratio (height / width)",
        ),
        Param::with_default(
            "value",
            Kind::Erase,
            "0",
            "the value erased to: one number, one per channel, or `'random'` (standard \
             normal noise, each value drawn)",
        ),
    ],
    translates: &[Translation::torchvision(
        "RandomErasing",
        &[
            ("p", "p", Conv::Float),
            ("scale", "scale", Conv::Floats),
            ("ratio", "ratio", Conv::Floats),
            ("value", "value", Conv::ErasingValue),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let p = args.probability("p")?;
    let scale = args.range("scale")?;
    if !(0.0 <= scale.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
        return Err(args.error(
            "scale",
            format!("{scale:?} must satisfy 0 <= lo <= hi <= 1"),
        ));
    }
    let ratio = args.range("ratio")?;
    if !(0.0 < ratio.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
        return Err(args.error("ratio", format!("{ratio:?} must satisfy 0 < lo <= hi")));
    }
    let fill = match args.value("value") {
        Value::Str(s) if s == "random" => Fill::Noise,
        Value::Str(_) => return Err(args.error("value", "takes a number, 3 numbers or 'random'")),
        Value::Tuple(items) if items.len() == 1 => match number(&items[0]) {
            Some(v) => Fill::Constant([v; 3]),
            None => return Err(args.error("value", "takes a number, 3 numbers or 'random'")),
        },
        _ => Fill::Constant(args.fill("value")?),
    };
    if let Fill::Constant(values) = fill {
        if !values.iter().all(|v| v.is_finite()) {
            return Err(args.error("value", format!("{values:?} must be finite")));
        }
    }
    Ok(Op::new(RandomErasing {
        p,
        scale,
        ratio,
        fill,
    }))
}

/// What the rectangle is set to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fill {
    Constant([f64; 3]),
    Noise,
}

struct RandomErasing {
    p: f64,
    scale: (f64, f64),
    ratio: (f64, f64),
    fill: Fill,
}

impl RandomErasing {
    /// torchvision's `RandomErasing._get_params`: (top, left, height, width), or `None`
    /// where no try fits.
    fn rectangle(&self, height: usize, width: usize, rng: &mut Rng) -> Option<[usize; 4]> {
        let area = (height * width) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let erase = area * rng.uniform(self.scale.0, self.scale.1);
            let aspect = rng.uniform(log_lo, log_hi).exp();
            let h = (erase * aspect).sqrt().round_ties_even() as usize;
            let w = (erase / aspect).sqrt().round_ties_even() as usize;
            if !(h < height && w < width) {
                continue;
            }
            let top = rng.below((height - h + 1) as u64) as usize;
            let left = rng.below((width - w + 1) as u64) as usize;
            return Some([top, left, h, w]);
        }
        None
    }
}

impl Operator for RandomErasing {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let value = match self.fill {
            Fill::Constant([a, b, c]) if a == b && b == c => Value::Float(a),
            Fill::Constant(values) => values.into(),
            Fill::Noise => "random".into(),
        };
        vec![self.p.into(), self.scale.into(), self.ratio.into(), value]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Tensor(self)
    }
}

impl Tensorial for RandomErasing {
    fn check(&self, dtype: DType) -> Result<()> {
        if self.fill == Fill::Noise && dtype == DType::U8 {
            return Err(Error::Config(
                "RandomErasing: value 'random' draws normal noise, which needs float32 output"
                    .into(),
            ));
        }
        Ok(())
    }

    fn apply(&self, sample: &mut Sample<'_>, rng: &mut Rng) {
        if rng.next_f64() >= self.p {
            return;
        }
        let Some([top, left, h, w]) = self.rectangle(sample.height, sample.width, rng) else {
            return;
        };
        match self.fill {
            Fill::Constant(values) => sample.fill((top, left, h, w), |c| values[c] as f32),
            Fill::Noise => sample.fill((top, left, h, w), |_| rng.normal() as f32),
        }
    }
}
