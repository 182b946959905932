//! `TimmRandomErasing`: timm's `RandomErasing` (`timm.data.random_erasing`), one to
//! several random rectangles of the delivered sample set to zeros or normal noise, with a
//! probability.
//!
//! It differs from torchvision's (`RandomErasing`, [`super::random_erasing`]) in its
//! draws: a number of rectangles, each taking its share of the area drawn; the aspect
//! ratio's range given as its lower end (the upper its inverse by default); and the fill,
//! zeros or noise drawn per channel (`'rand'`) or per value (`'pixel'`).

use super::{Declaration, Op, Operator, Sample, Stage, Tensorial, MAX_STEPS};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::prep::DType;
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "TimmRandomErasing",
    doc: "Erases `min_count` to `max_count` random rectangles of the sample with \
          probability `probability`: timm's `RandomErasing` (`timm.data.random_erasing`, what \
          `create_transform`'s `re_prob`, `re_mode` and `re_count` make), the same \
          parameters and draws: the count, then per rectangle ten tries at an area (its \
          share of the drawn fraction) and a log-uniform aspect ratio that fit, else none. \
          `mode='const'` sets it to zeros, `'rand'` to one standard normal value per \
          channel, `'pixel'` to standard normal noise, each value drawn. It erases the \
          sample as delivered, so it comes last, after `Normalize` (zeros and noise are in \
          the normalised units, as in timm's recipes). `num_splits` > 1 (timm's \
          `re_split`, which leaves a batch's first split clean for AugMix's split \
          training) is refused: nostall prepares each sample without knowing its place in \
          the batch.",
    params: &[
        Param::with_default("probability", Kind::Float, "0.5", "probability of erasing"),
        Param::with_default(
            "min_area",
            Kind::Float,
            "0.02",
            "smallest fraction of the sample's area erased (shared by the rectangles)",
        ),
        Param::with_default(
            "max_area",
            Kind::Float,
            "0.3333333333333333",
            "largest fraction of the sample's area erased (shared by the rectangles)",
        ),
        Param::with_default(
            "min_aspect",
            Kind::Float,
            "0.3",
            "one end of the rectangles' aspect ratio (height / width), drawn log-uniformly",
        ),
        Param::with_default(
            "max_aspect",
            Kind::OptionalFloat,
            "None",
            "the other end of the aspect ratio's range; `None`: 1 / `min_aspect`",
        ),
        Param::with_default(
            "mode",
            Kind::Choice,
            "'const'",
            "what the rectangles are set to: `'const'` (zeros), `'rand'` (a standard normal \
             value per channel) or `'pixel'` (standard normal noise)",
        ),
        Param::with_default(
            "min_count",
            Kind::Int,
            "1",
            "fewest rectangles a sample erased gets",
        ),
        Param::with_default(
            "max_count",
            Kind::OptionalInt,
            "None",
            "most rectangles a sample erased gets (an int), the count drawn uniformly; \
             `None`: `min_count`",
        ),
        Param::with_default(
            "num_splits",
            Kind::Int,
            "0",
            "timm's batch splits: 0 or 1 (erase every sample); more is refused",
        ),
    ],
    translates: &[Translation::timm(
        "RandomErasing",
        &[
            ("probability", "probability", Conv::Float),
            ("min_area", "min_area", Conv::Float),
            ("max_area", "max_area", Conv::Float),
            // timm keeps the aspect ratio's range as logarithms.
            ("min_aspect", "log_aspect_ratio", Conv::ExpLow),
            ("max_aspect", "log_aspect_ratio", Conv::ExpHighOrNone),
            ("mode", "mode", Conv::Str),
            ("min_count", "min_count", Conv::Int),
            ("max_count", "max_count", Conv::Int),
            ("num_splits", "num_splits", Conv::Int),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let erasing = read(args)?;
    let num_splits: u32 = args.int("num_splits")?;
    if num_splits > 1 {
        return Err(args.error(
            "num_splits",
            format!(
                "{num_splits} is not supported: timm's num_splits (re_split, AugMix's split \
                 training) leaves the first 1/{num_splits} of each batch clean, and nostall \
                 prepares each sample without knowing its place in its batch; give 0 or 1 \
                 (erase every sample)"
            ),
        ));
    }
    Ok(Op::new(TimmRandomErasing {
        num_splits,
        ..erasing
    }))
}

/// Reads and checks the parameters timm's `RandomErasing` and VideoMAE's copy of it
/// share (all but `num_splits`, left 0).
pub(super) fn read(args: &Args) -> Result<TimmRandomErasing> {
    let probability = args.probability("probability")?;
    let min_area = args.float("min_area")?;
    let max_area = args.float("max_area")?;
    if !(0.0 < min_area && min_area <= 1.0) {
        return Err(args.error("min_area", format!("{min_area} must be in (0, 1]")));
    }
    if !(min_area <= max_area && max_area <= 1.0) {
        return Err(args.error(
            "max_area",
            format!("{max_area} must be in [min_area, 1], min_area being {min_area}"),
        ));
    }
    let min_aspect = args.float("min_aspect")?;
    if !(min_aspect > 0.0 && min_aspect.is_finite()) {
        return Err(args.error("min_aspect", format!("{min_aspect} must be positive")));
    }
    // Either end may be the larger, as in timm, whose log-uniform draw spans the two ends
    // in either order.
    let max_aspect = args.optional_float("max_aspect")?;
    if let Some(max_aspect) = max_aspect {
        if !(max_aspect > 0.0 && max_aspect.is_finite()) {
            return Err(args.error("max_aspect", format!("{max_aspect} must be positive")));
        }
    }
    let mode = match args.text("mode")?.map(str::to_lowercase).as_deref() {
        // timm lowercases the mode and takes '' as 'const'.
        Some("const" | "") => Mode::Const,
        Some("rand") => Mode::Rand,
        Some("pixel") => Mode::Pixel,
        _ => {
            return Err(args.error(
                "mode",
                format!(
                    "takes one of 'const', 'rand', 'pixel', not {}",
                    args.value("mode")
                ),
            ))
        }
    };
    let min_count: u32 = args.int("min_count")?;
    let max_count = match args.value("max_count") {
        Value::None => None,
        Value::Int(_) => Some(args.int::<u32>("max_count")?),
        other => return Err(args.error("max_count", format!("takes an int or None, not {other}"))),
    };
    for (param, count) in [("min_count", Some(min_count)), ("max_count", max_count)] {
        if let Some(count) = count.filter(|&count| count as usize > MAX_STEPS) {
            return Err(args.error(
                param,
                format!(
                    "{count} is too many: at most {MAX_STEPS} rectangles a sample (each adds \
                     ten tries to its work; timm's recipes erase 1 to 3); give a smaller \
                     {param}"
                ),
            ));
        }
    }
    if let Some(max_count) = max_count.filter(|&max| max < min_count) {
        return Err(args.error(
            "max_count",
            format!("{max_count} is fewer than min_count, {min_count}"),
        ));
    }
    Ok(TimmRandomErasing {
        probability,
        min_area,
        max_area,
        min_aspect,
        max_aspect,
        mode,
        min_count,
        max_count,
        num_splits: 0,
    })
}

/// What the rectangles are set to (timm's `_get_pixels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Zeros.
    Const,
    /// One standard normal value per channel, drawn per rectangle.
    Rand,
    /// Standard normal noise, one value drawn per element.
    Pixel,
}

impl Mode {
    /// Its name, as timm writes it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Const => "const",
            Mode::Rand => "rand",
            Mode::Pixel => "pixel",
        }
    }
}

/// The operator, its arguments as given (the optional ones `None` where left to timm's
/// defaults).
pub(super) struct TimmRandomErasing {
    pub(super) probability: f64,
    pub(super) min_area: f64,
    pub(super) max_area: f64,
    pub(super) min_aspect: f64,
    pub(super) max_aspect: Option<f64>,
    pub(super) mode: Mode,
    pub(super) min_count: u32,
    pub(super) max_count: Option<u32>,
    num_splits: u32,
}

impl TimmRandomErasing {
    /// The number of rectangles of a sample erased: timm's `random.randint(min_count,
    /// max_count)`, both ends included (no draw where they are equal, as in timm).
    pub(super) fn count(&self, rng: &mut Rng) -> u32 {
        let max_count = self.max_count.unwrap_or(self.min_count);
        if max_count == self.min_count {
            return max_count;
        }
        self.min_count + rng.below(u64::from(max_count - self.min_count) + 1) as u32
    }

    /// One of `count` rectangles of a `height` × `width` sample, as (top, left, height,
    /// width), or `None` where none of `tries` tries fits: timm's `_erase` loop (ten
    /// tries).
    pub(super) fn rectangle(
        &self,
        (height, width): (usize, usize),
        count: u32,
        tries: usize,
        rng: &mut Rng,
    ) -> Option<(usize, usize, usize, usize)> {
        let area = (height * width) as f64;
        let max_aspect = self.max_aspect.unwrap_or(1.0 / self.min_aspect);
        let (log_lo, log_hi) = (self.min_aspect.ln(), max_aspect.ln());
        for _ in 0..tries {
            let target = rng.uniform(self.min_area, self.max_area) * area / f64::from(count);
            let aspect = rng.uniform(log_lo, log_hi).exp();
            // Python's round: half to even.
            let h = (target * aspect).sqrt().round_ties_even() as usize;
            let w = (target / aspect).sqrt().round_ties_even() as usize;
            if w < width && h < height {
                // random.randint: both ends included.
                let top = rng.below((height - h + 1) as u64) as usize;
                let left = rng.below((width - w + 1) as u64) as usize;
                return Some((top, left, h, w));
            }
        }
        None
    }
}

impl Operator for TimmRandomErasing {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.probability.into(),
            self.min_area.into(),
            self.max_area.into(),
            self.min_aspect.into(),
            self.max_aspect.into(),
            self.mode.name().into(),
            self.min_count.into(),
            self.max_count.into(),
            self.num_splits.into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Tensor(self)
    }
}

impl Tensorial for TimmRandomErasing {
    fn check(&self, dtype: DType) -> Result<()> {
        if self.mode != Mode::Const && dtype == DType::U8 {
            return Err(Error::Config(format!(
                "TimmRandomErasing: mode '{}' draws normal noise, which needs float32 output",
                self.mode.name()
            )));
        }
        Ok(())
    }

    fn apply(&self, sample: &mut Sample<'_>, rng: &mut Rng) {
        // timm skips where random.random() > probability: erases with probability
        // `probability`, as this does with a draw in [0, 1).
        if rng.next_f64() >= self.probability {
            return;
        }
        let count = self.count(rng);
        for _ in 0..count {
            let size = (sample.height, sample.width);
            if let Some(rectangle) = self.rectangle(size, count, TRIES, rng) {
                self.fill(sample, rectangle, rng);
            }
        }
    }
}

/// The tries at a rectangle that fits, in timm's `_erase`.
const TRIES: usize = 10;

impl TimmRandomErasing {
    /// Sets `rectangle` of `sample` as the mode says, its noise drawn from `rng`.
    pub(super) fn fill(
        &self,
        sample: &mut Sample<'_>,
        rectangle: (usize, usize, usize, usize),
        rng: &mut Rng,
    ) {
        match self.mode {
            Mode::Const => sample.fill(rectangle, |_| 0.0),
            Mode::Rand => {
                let colour: [f32; 3] = std::array::from_fn(|_| rng.normal() as f32);
                sample.fill(rectangle, |c| colour[c]);
            }
            // `fill` visits channel by channel, row by row, in either layout: the
            // noise is the same values, laid out as the sample is.
            Mode::Pixel => sample.fill(rectangle, |_| rng.normal() as f32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::Layout;

    fn erasing(keywords: &[(&str, Value)]) -> Result<Op> {
        let keywords = keywords
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        DECLARATION.call(Vec::new(), keywords)
    }

    /// The operator's type, with the defaults but these fields.
    fn operator(mode: Mode, min_count: u32, max_count: Option<u32>) -> TimmRandomErasing {
        TimmRandomErasing {
            probability: 1.0,
            min_area: 0.02,
            max_area: 1.0 / 3.0,
            min_aspect: 0.3,
            max_aspect: None,
            mode,
            min_count,
            max_count,
            num_splits: 0,
        }
    }

    /// Runs `op` over a `height` × `width` sample of `dtype` and `layout` filled with
    /// `background`, returning its values as floats, in the sample's order.
    fn run(
        op: &TimmRandomErasing,
        (height, width): (usize, usize),
        dtype: DType,
        layout: Layout,
        background: f32,
        seed: u64,
    ) -> Vec<f32> {
        let n = 3 * height * width;
        let mut data: Vec<u8> = match dtype {
            DType::F32 => (0..n).flat_map(|_| background.to_ne_bytes()).collect(),
            DType::U8 => vec![background as u8; n],
        };
        let mut sample = Sample {
            data: &mut data,
            height,
            width,
            layout,
            dtype,
            frame: 0,
        };
        op.apply(&mut sample, &mut Rng::new(seed));
        match dtype {
            DType::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
                .collect(),
            DType::U8 => data.iter().map(|&v| f32::from(v)).collect(),
        }
    }

    /// The bounding box (top, left, height, width) of the values of a CHW sample that
    /// differ from `background`, if any.
    fn changed(
        values: &[f32],
        (height, width): (usize, usize),
        background: f32,
    ) -> Option<(usize, usize, usize, usize)> {
        let mut cells = (0..height * width)
            .filter(|&i| (0..3).any(|c| values[c * height * width + i] != background));
        let first = cells.next()?;
        let (mut top, mut bottom) = (first / width, first / width);
        let (mut left, mut right) = (first % width, first % width);
        for i in cells {
            (top, bottom) = (top.min(i / width), bottom.max(i / width));
            (left, right) = (left.min(i % width), right.max(i % width));
        }
        Some((top, left, bottom - top + 1, right - left + 1))
    }

    #[test]
    fn the_rectangles_stay_inside_and_follow_the_ranges() {
        let op = operator(Mode::Const, 1, Some(4));
        let mut rng = Rng::new(1);
        let (height, width) = (40, 70);
        let (mut tops, mut lefts) = (0, 0);
        for _ in 0..5000 {
            let count = op.count(&mut rng);
            assert!((1..=4).contains(&count), "{count}");
            let Some((top, left, h, w)) = op.rectangle((height, width), count, TRIES, &mut rng)
            else {
                continue;
            };
            assert!(h < height && w < width && top + h <= height && left + w <= width);
            // Some area in its share of min_area..max_area and some aspect ratio in
            // 0.3..1/0.3 round to these sides: sqrt(area * aspect) within 0.5 of h,
            // sqrt(area / aspect) within 0.5 of w.
            let share = (height * width) as f64 / f64::from(count);
            let (hf, wf) = (h as f64, w as f64);
            assert!((hf + 0.5) * (wf + 0.5) >= 0.02 * share, "{h}x{w}");
            assert!(
                (hf - 0.5).max(0.0) * (wf - 0.5).max(0.0) <= share / 3.0,
                "{h}x{w}"
            );
            assert!((hf - 0.5) / (wf + 0.5) <= 1.0 / 0.3, "{h}x{w}");
            assert!(hf + 0.5 >= 0.3 * (wf - 0.5), "{h}x{w}");
            tops += usize::from(top == height - h);
            lefts += usize::from(left == 0);
        }
        // Both ends of the position are drawn.
        assert!(tops > 0 && lefts > 0, "{tops} {lefts}");
    }

    #[test]
    fn the_count_is_uniform_from_min_to_max() {
        let op = operator(Mode::Const, 2, Some(5));
        let mut rng = Rng::new(2);
        let mut counts = [0u32; 6];
        for _ in 0..40_000 {
            counts[op.count(&mut rng) as usize] += 1;
        }
        assert_eq!(counts[..2], [0, 0]);
        for &c in &counts[2..] {
            assert!((9_400..10_600).contains(&c), "{counts:?}");
        }
        // Equal ends draw nothing, as timm.
        let fixed = operator(Mode::Const, 3, None);
        let mut rng = Rng::new(2);
        assert_eq!(fixed.count(&mut rng), 3);
        assert_eq!(rng.next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn pinned_draws_give_timms_size_and_the_modes_values() {
        // min_area == max_area and max_aspect == min_aspect: timm's h = round(sqrt(area *
        // aspect)), w = round(sqrt(area / aspect)) of 0.1 * 48 * 64 at aspect 0.5.
        let (height, width) = (48, 64);
        let (h, w) = (
            (0.1 * 3072.0 * 0.5_f64).sqrt().round_ties_even() as usize,
            (0.1 * 3072.0 / 0.5_f64).sqrt().round_ties_even() as usize,
        );
        assert_eq!((h, w), (12, 25));
        for mode in [Mode::Const, Mode::Rand, Mode::Pixel] {
            let op = TimmRandomErasing {
                min_area: 0.1,
                max_area: 0.1,
                min_aspect: 0.5,
                max_aspect: Some(0.5),
                ..operator(mode, 1, None)
            };
            for seed in 0..20 {
                let values = run(&op, (height, width), DType::F32, Layout::Chw, 9.0, seed);
                let (top, left, rh, rw) = changed(&values, (height, width), 9.0).unwrap();
                assert_eq!((rh, rw), (h, w), "{mode:?}");
                let region = |c: usize| {
                    let values = &values;
                    (top..top + h).flat_map(move |y| {
                        (left..left + w).map(move |x| values[(c * height + y) * width + x])
                    })
                };
                for c in 0..3 {
                    let first = region(c).next().unwrap();
                    match mode {
                        Mode::Const => assert!(region(c).all(|v| v == 0.0)),
                        Mode::Rand => assert!(region(c).all(|v| v == first)),
                        Mode::Pixel => {
                            let distinct = region(c).filter(|&v| v != first).count();
                            assert_eq!(distinct, h * w - 1);
                        }
                    }
                }
                // Nothing else changed.
                let outside = values.iter().filter(|&&v| v == 9.0).count();
                assert_eq!(outside, 3 * (height * width - h * w));
            }
        }
    }

    #[test]
    fn the_noise_is_standard_normal() {
        let op = TimmRandomErasing {
            min_area: 0.5,
            max_area: 0.5,
            ..operator(Mode::Pixel, 1, None)
        };
        let mut noise = Vec::new();
        for seed in 0..20 {
            let values = run(&op, (64, 64), DType::F32, Layout::Chw, 99.0, seed);
            noise.extend(values.into_iter().filter(|&v| v != 99.0).map(f64::from));
        }
        let n = noise.len() as f64;
        let mean = noise.iter().sum::<f64>() / n;
        let std = (noise.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(n > 100_000.0 && mean.abs() < 0.01 && (std - 1.0).abs() < 0.01);
        // 'rand': one value per channel and rectangle, standard normal over samples.
        let op = TimmRandomErasing {
            min_aspect: 1.0,
            ..operator(Mode::Rand, 1, None)
        };
        let colours: Vec<f64> = (0..4000)
            .flat_map(|seed| {
                let values = run(&op, (16, 16), DType::F32, Layout::Chw, 99.0, seed);
                (0..3).map(move |c| {
                    let plane = &values[c * 256..(c + 1) * 256];
                    f64::from(*plane.iter().find(|&&v| v != 99.0).unwrap())
                })
            })
            .collect();
        let n = colours.len() as f64;
        let mean = colours.iter().sum::<f64>() / n;
        let std = (colours.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(
            mean.abs() < 0.05 && (std - 1.0).abs() < 0.05,
            "{mean} {std}"
        );
    }

    #[test]
    fn uint8_samples_take_zeros_and_hwc_is_chw_transposed() {
        let op = operator(Mode::Const, 1, Some(3));
        let mut erased = 0;
        for seed in 0..50 {
            let values = run(&op, (32, 40), DType::U8, Layout::Chw, 200.0, seed);
            assert!(values.iter().all(|&v| v == 0.0 || v == 200.0));
            erased += usize::from(values.contains(&0.0));
        }
        assert_eq!(erased, 50);
        for mode in [Mode::Const, Mode::Rand, Mode::Pixel] {
            let op = operator(mode, 1, Some(3));
            for seed in 0..20 {
                let chw = run(&op, (24, 30), DType::F32, Layout::Chw, 5.0, seed);
                let hwc = run(&op, (24, 30), DType::F32, Layout::Hwc, 5.0, seed);
                for c in 0..3 {
                    for i in 0..24 * 30 {
                        assert_eq!(hwc[i * 3 + c], chw[c * 24 * 30 + i], "{mode:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_same_seed_erases_the_same_and_probability_is_kept() {
        let op = operator(Mode::Pixel, 1, Some(3));
        let one = run(&op, (32, 32), DType::F32, Layout::Chw, 1.0, 7);
        assert_eq!(one, run(&op, (32, 32), DType::F32, Layout::Chw, 1.0, 7));
        assert_ne!(one, run(&op, (32, 32), DType::F32, Layout::Chw, 1.0, 8));
        let never = TimmRandomErasing {
            probability: 0.0,
            ..operator(Mode::Pixel, 1, None)
        };
        let values = run(&never, (8, 8), DType::F32, Layout::Chw, 1.0, 3);
        assert!(values.iter().all(|&v| v == 1.0));
        let half = TimmRandomErasing {
            probability: 0.5,
            ..operator(Mode::Const, 1, None)
        };
        let erased = (0..2000)
            .filter(|&seed| run(&half, (16, 16), DType::F32, Layout::Chw, 1.0, seed).contains(&0.0))
            .count();
        assert!((900..1100).contains(&erased), "{erased}");
    }

    #[test]
    fn arguments_are_timms_and_checked() {
        let op = erasing(&[]).unwrap();
        assert_eq!(
            op.to_string(),
            "TimmRandomErasing(probability=0.5, min_area=0.02, max_area=0.3333333333333333, \
             min_aspect=0.3, max_aspect=None, mode='const', min_count=1, max_count=None, \
             num_splits=0)"
        );
        let op = erasing(&[("mode", "PIXEL".into()), ("max_count", Value::Int(3))]).unwrap();
        assert_eq!(op.arg("mode"), Some("pixel".into()));
        assert_eq!(op.arg("max_count"), Some(Value::Int(3)));
        assert_eq!(op.to_string().parse::<Op>().unwrap(), op);
        assert!(erasing(&[("num_splits", Value::Int(1))]).is_ok());
        let message = |keywords: &[(&str, Value)]| erasing(keywords).unwrap_err().to_string();
        for (keywords, says) in [
            (vec![("probability", Value::Float(1.5))], "probability"),
            (vec![("min_area", Value::Float(0.0))], "min_area"),
            (vec![("max_area", Value::Float(1.5))], "max_area"),
            (
                vec![("min_area", 0.5.into()), ("max_area", 0.25.into())],
                "max_area",
            ),
            (vec![("min_aspect", Value::Float(-1.0))], "min_aspect"),
            (vec![("max_aspect", Value::Float(0.0))], "max_aspect"),
            (vec![("mode", "noise".into())], "mode"),
            (
                vec![("min_count", Value::Int(3)), ("max_count", Value::Int(2))],
                "max_count",
            ),
            (vec![("max_count", Value::Float(2.5))], "max_count"),
            (vec![("num_splits", Value::Int(2))], "num_splits"),
        ] {
            let got = message(&keywords);
            assert!(
                got.contains(&format!("TimmRandomErasing: {says}")),
                "{keywords:?}: {got}"
            );
        }
        assert!(message(&[("num_splits", Value::Int(2))]).contains("AugMix"));
        let pixel = operator(Mode::Pixel, 1, None);
        assert!(pixel.check(DType::U8).is_err() && pixel.check(DType::F32).is_ok());
        assert!(operator(Mode::Const, 1, None).check(DType::U8).is_ok());
    }
}
