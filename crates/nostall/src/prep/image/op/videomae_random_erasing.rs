//! `VideoMAERandomErasing`: VideoMAE's own `RandomErasing` (its `random_erasing.py`, a copy
//! of timm's with a `cube` mode), as its fine-tuning (`kinetics.py`,
//! `VideoClsDataset._aug_frame`) runs it on a clip's frames taken as a batch.
//!
//! With `cube=True` (VideoMAE's default, what `_aug_frame` makes) a clip draws once
//! whether it is erased, the count and each rectangle (a hundred tries at one that fits,
//! not timm's ten), and every frame is erased at those rectangles; the noise of `'rand'`
//! and `'pixel'` is drawn for each frame and rectangle. With `cube=False` each frame
//! draws its own erasing, timm's batch mode: its probability, count, rectangles (ten
//! tries) and noise.
//!
//! The clip's draws come from the operator's generator, which every frame of a clip is
//! handed alike; a frame's own draws come from a generator forked from it by the frame's
//! place in the clip ([`Sample::frame`]), so that they depend on the sample, the clip and
//! the frame, never on the thread that makes the frame or on the order frames are made.

use super::timm_random_erasing::{self, Mode, TimmRandomErasing};
use super::{Declaration, Op, Operator, Sample, Stage, Tensorial};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::DType;
use crate::rng::{derive, Rng};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "VideoMAERandomErasing",
    doc: "Erases random rectangles of a clip's frames with probability `probability`: \
          VideoMAE's own `RandomErasing` (its `random_erasing.py`), as its fine-tuning's \
          `_aug_frame` runs it on the clip's frames, after the crop, flip and normalisation \
          (write it last). The parameters are timm's `RandomErasing`'s \
          (`TimmRandomErasing`). With `cube=True`, VideoMAE's default and its recipe, the \
          clip draws once whether it is erased, the count, and each rectangle (a hundred \
          tries at one that fits, else none), and every frame is erased at those \
          rectangles, the noise of `'rand'` and `'pixel'` drawn for each frame. With \
          `cube=False` each frame draws its own erasing, as timm's erasing of a batch \
          does: whether, how many, where (ten tries) and the noise. The clip's draws come \
          first from the operator's generator; each frame's own come from a generator \
          forked from it by the frame's place in the clip, so they are the same for any \
          number of threads. On a still image it is one frame. VideoMAE's `num_splits` \
          above 1 (its `--recount` above 1, which leaves the clip's first frames clean) \
          is not offered.",
    params: &[
        Param::with_default("probability", Kind::Float, "0.5", "probability of erasing"),
        Param::with_default(
            "min_area",
            Kind::Float,
            "0.02",
            "smallest fraction of a frame's area erased (shared by the rectangles)",
        ),
        Param::with_default(
            "max_area",
            Kind::Float,
            "0.3333333333333333",
            "largest fraction of a frame's area erased (shared by the rectangles)",
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
            "fewest rectangles an erased clip (or frame) gets",
        ),
        Param::with_default(
            "max_count",
            Kind::OptionalInt,
            "None",
            "most rectangles an erased clip (or frame) gets, the count drawn uniformly; \
             `None`: `min_count`",
        ),
        Param::with_default(
            "cube",
            Kind::Bool,
            "True",
            "`True`: one erasing a clip, at the same rectangles in every frame (VideoMAE's \
             default); `False`: each frame draws its own",
        ),
    ],
    translates: &[],
    build,
};

/// VideoMAE's tries at a rectangle that fits, in `_erase_cube`.
const CUBE_TRIES: usize = 100;

/// The part a frame's generator is forked with, beside the frame's place.
const FRAME: u64 = 0x0046_5241_4d45;

fn build(args: &Args) -> Result<Op> {
    Ok(Op::new(VideoMaeRandomErasing {
        erasing: timm_random_erasing::read(args)?,
        cube: args.bool("cube")?,
    }))
}

/// The operator: timm's erasing's settings, and whether a clip draws one erasing for all
/// its frames.
struct VideoMaeRandomErasing {
    erasing: TimmRandomErasing,
    cube: bool,
}

impl Operator for VideoMaeRandomErasing {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let e = &self.erasing;
        vec![
            e.probability.into(),
            e.min_area.into(),
            e.max_area.into(),
            e.min_aspect.into(),
            e.max_aspect.into(),
            e.mode.name().into(),
            e.min_count.into(),
            e.max_count.into(),
            self.cube.into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Tensor(self)
    }
}

impl Tensorial for VideoMaeRandomErasing {
    fn check(&self, dtype: DType) -> Result<()> {
        let mode = self.erasing.mode;
        if mode != Mode::Const && dtype == DType::U8 {
            return Err(Error::Config(format!(
                "VideoMAERandomErasing: mode '{}' draws normal noise, which needs float32 \
                 output",
                mode.name()
            )));
        }
        Ok(())
    }

    /// The order of the draws. `cube=True`: from `rng` (the clip's), a uniform draw in
    /// [0, 1) (erased where it is below `probability`), the count (where `min_count` and
    /// `max_count` differ), then for each rectangle up to a hundred tries of (area, log
    /// aspect ratio), and where one fits, its top and left; then, from the frame's
    /// generator, each rectangle's noise in turn ('rand': three values; 'pixel': channel
    /// by channel, row by row). `cube=False`: all of `TimmRandomErasing`'s draws, in its
    /// order, from the frame's generator.
    fn apply(&self, sample: &mut Sample<'_>, rng: &mut Rng) {
        let mut frame_rng = rng.fork(derive(&[FRAME, sample.frame as u64]));
        if !self.cube {
            self.erasing.apply(sample, &mut frame_rng);
            return;
        }
        let e = &self.erasing;
        // VideoMAE skips where random.random() > probability.
        if rng.next_f64() >= e.probability {
            return;
        }
        let count = e.count(rng);
        let size = (sample.height, sample.width);
        let rectangles: Vec<_> = (0..count)
            .filter_map(|_| e.rectangle(size, count, CUBE_TRIES, rng))
            .collect();
        for rectangle in rectangles {
            e.fill(sample, rectangle, &mut frame_rng);
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

    /// The operator with `probability` 1 and `mode` and `cube`, timm's defaults else.
    fn operator(mode: &str, cube: bool) -> Op {
        erasing(&[
            ("probability", Value::Float(1.0)),
            ("mode", mode.into()),
            ("cube", cube.into()),
        ])
        .unwrap()
    }

    /// Frame `frame` of a clip: a `height` × `width` float CHW sample of 9s, erased by
    /// `op` with the clip's generator `seed`.
    fn frame(op: &Op, (height, width): (usize, usize), seed: u64, frame: usize) -> Vec<f32> {
        let mut data: Vec<u8> = (0..3 * height * width)
            .flat_map(|_| 9f32.to_ne_bytes())
            .collect();
        let mut sample = Sample {
            data: &mut data,
            height,
            width,
            layout: Layout::Chw,
            dtype: DType::F32,
            frame,
        };
        let Stage::Tensor(tensorial) = op.stage() else {
            unreachable!("an operator on the delivered sample")
        };
        tensorial.apply(&mut sample, &mut Rng::new(seed));
        data.chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect()
    }

    /// Which cells (of the first channel) a frame has erased.
    fn erased(values: &[f32], area: usize) -> Vec<bool> {
        values[..area].iter().map(|&v| v != 9.0).collect()
    }

    #[test]
    fn a_cube_erases_every_frame_at_the_clips_rectangles_with_each_frames_noise() {
        let op = operator("pixel", true);
        for seed in 0..30 {
            let first = frame(&op, (32, 40), seed, 0);
            let cells = erased(&first, 32 * 40);
            assert!(cells.contains(&true));
            for t in 1..4 {
                let other = frame(&op, (32, 40), seed, t);
                assert_eq!(erased(&other, 32 * 40), cells, "seed {seed}, frame {t}");
                assert_ne!(other, first, "the noise is each frame's own");
                // The same frame again is the same bytes: nothing but its place keys it.
                assert_eq!(frame(&op, (32, 40), seed, t), other);
            }
        }
        // 'const' frames are all alike.
        let op = operator("const", true);
        assert_eq!(frame(&op, (16, 16), 3, 0), frame(&op, (16, 16), 3, 5));
    }

    #[test]
    fn without_cube_each_frame_draws_its_own_erasing_with_probability_p() {
        let op = erasing(&[("probability", Value::Float(0.25)), ("cube", false.into())]).unwrap();
        let (mut erased_frames, mut differing) = (0, 0);
        for seed in 0..400 {
            let frames: Vec<_> = (0..8)
                .map(|t| erased(&frame(&op, (16, 16), seed, t), 256))
                .collect();
            erased_frames += frames.iter().filter(|f| f.contains(&true)).count();
            differing += usize::from(frames.iter().any(|f| f != &frames[0]));
        }
        // 3 200 frames each erased with probability 1/4: 800, sd 24.5; ±6 sd.
        assert!((653..947).contains(&erased_frames), "{erased_frames}");
        assert!(differing > 300, "{differing}");
    }

    #[test]
    fn a_cube_tries_a_hundred_times() {
        // Areas of about 0.9 of a 10 × 10 frame with aspect ratios far from 1 seldom fit
        // in ten tries: the cube's hundred find one far more often.
        let tight = |cube: bool| {
            let op = erasing(&[
                ("probability", Value::Float(1.0)),
                ("min_area", Value::Float(0.6)),
                ("max_area", Value::Float(0.9)),
                ("min_aspect", Value::Float(0.2)),
                ("cube", cube.into()),
            ])
            .unwrap();
            (0..2000)
                .filter(|&seed| erased(&frame(&op, (10, 10), seed, 0), 100).contains(&true))
                .count()
        };
        let (cube, single) = (tight(true), tight(false));
        assert!(cube > single + 200, "{cube} {single}");
    }

    #[test]
    fn arguments_are_checked_and_written_back() {
        let op = erasing(&[]).unwrap();
        assert_eq!(
            op.to_string(),
            "VideoMAERandomErasing(probability=0.5, min_area=0.02, \
             max_area=0.3333333333333333, min_aspect=0.3, max_aspect=None, mode='const', \
             min_count=1, max_count=None, cube=True)"
        );
        assert_eq!(op.to_string().parse::<Op>().unwrap(), op);
        for (keywords, says) in [
            (vec![("probability", Value::Float(1.5))], "probability"),
            (vec![("min_area", Value::Float(0.0))], "min_area"),
            (vec![("max_area", Value::Float(1.5))], "max_area"),
            (vec![("min_aspect", Value::Float(-1.0))], "min_aspect"),
            (vec![("mode", "noise".into())], "mode"),
            (vec![("max_count", Value::Int(100))], "max_count"),
            (vec![("cube", Value::Int(2))], "cube"),
        ] {
            let got = erasing(&keywords).unwrap_err().to_string();
            assert!(
                got.contains(&format!("VideoMAERandomErasing: {says}")),
                "{keywords:?}: {got}"
            );
        }
        let pixel = operator("pixel", true);
        let Stage::Tensor(pixel) = pixel.stage() else {
            unreachable!()
        };
        let refused = pixel.check(DType::U8).unwrap_err().to_string();
        assert!(refused.contains("VideoMAERandomErasing"), "{refused}");
    }
}
