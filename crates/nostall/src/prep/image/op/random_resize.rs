//! `RandomResize`: the shorter side to a length drawn for each sample
//! (torchvision.transforms.v2's, the segmentation references' scale augmentation).

use super::resize::{filter, shorter_to, ANTIALIAS, INTERPOLATION};
use super::{Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::Filter;
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomResize",
    doc: "Resizes the shorter side to a length drawn uniformly from `min_size` to \
          `max_size - 1` for each sample, keeping the aspect ratio \
          (torchvision.transforms.v2's `RandomResize`). The output's size varies: follow it \
          with a crop of a fixed size (`RandomCrop(size, pad_if_needed=True)`, as the \
          segmentation references do).",
    params: &[
        Param::required("min_size", Kind::Int, "the least length drawn"),
        Param::required("max_size", Kind::Int, "one past the greatest length drawn"),
        INTERPOLATION,
        ANTIALIAS,
    ],
    translates: &[Translation::torchvision(
        "RandomResize",
        &[
            ("min_size", "min_size", Conv::Int),
            ("max_size", "max_size", Conv::Int),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("antialias", "antialias", Conv::Same),
        ],
    )],
    build,
};

/// The longest shorter side drawn: the resized image is made whole before its crop.
const MAX_SIDE: u32 = 10_000;

fn build(args: &Args) -> Result<Op> {
    let min_size: u32 = args.int("min_size")?;
    let max_size: u32 = args.int("max_size")?;
    if !(1 <= min_size && min_size < max_size && max_size <= MAX_SIDE + 1) {
        return Err(args.error(
            "max_size",
            format!(
                "({min_size}, {max_size}): the lengths drawn are min_size to max_size - 1, \
                 so use 1 <= min_size < max_size <= {}",
                MAX_SIDE + 1
            ),
        ));
    }
    Ok(Op::new(RandomResize {
        sizes: (min_size, max_size),
        filter: filter(args)?,
    }))
}

struct RandomResize {
    /// The least length drawn, and one past the greatest.
    sizes: (u32, u32),
    filter: Filter,
}

impl Operator for RandomResize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            Value::Int(self.sizes.0.into()),
            Value::Int(self.sizes.1.into()),
            self.filter.name().into(),
            self.filter.antialias().into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for RandomResize {
    fn output_size(&self) -> OutputSize {
        OutputSize::Varies
    }

    /// v2's `torch.randint(min_size, max_size, ())`: uniform over the lengths.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let (lo, hi) = self.sizes;
        let side = lo + rng.below(u64::from(hi - lo)) as u32;
        view.filter = self.filter;
        shorter_to(view, side);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_is_drawn_and_none_past_the_range() {
        let op: Op = "RandomResize(100, 105)".parse().unwrap();
        let Stage::Geometry(g) = op.stage() else {
            panic!("geometric")
        };
        let mut counts = [0u32; 5];
        for seed in 0..5_000 {
            let mut view = View::whole(400, 300);
            g.plan(&mut view, &mut Rng::new(seed));
            // Landscape: the height is the length drawn, the width floor(len · 4 / 3).
            let side = view.h as u32;
            assert_eq!(view.w, (side as f64 * 400.0 / 300.0).floor());
            counts[(side - 100) as usize] += 1;
        }
        // 1 000 expected each: 5 standard deviations is about 140.
        assert!(
            counts.iter().all(|&c| (860..=1140).contains(&c)),
            "{counts:?}"
        );
        for (bad, says) in [
            ("RandomResize(100, 100)", "min_size < max_size"),
            ("RandomResize(0, 5)", "1 <= min_size"),
            ("RandomResize(5, 20000)", "max_size <= 10001"),
        ] {
            let error = bad.parse::<Op>().unwrap_err().to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
