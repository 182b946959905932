//! `ScaleJitter`: large-scale jitter, a resize by a random factor of the scale that fits
//! the image in a target size (torchvision.transforms.v2's, as Mask R-CNN's and ViTDet's
//! recipes run it, followed by `FixedSizeCrop`).

use super::resize::{filter, ANTIALIAS, INTERPOLATION};
use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::Filter;
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "ScaleJitter",
    doc: "Resizes the image by `scale` drawn from `scale_range` times the factor that fits \
          it in `target_size` (torchvision.transforms.v2's `ScaleJitter`). The size varies \
          with the image: follow it with `FixedSizeCrop`.",
    params: &[
        Param::required(
            "target_size",
            Kind::Square,
            "an int (a square) or a pair, read as v2 reads it: the first number against \
             the width, the second against the height",
        ),
        Param::with_default(
            "scale_range",
            Kind::Range,
            "(0.1, 2.0)",
            "range of the factor drawn",
        ),
        INTERPOLATION,
        ANTIALIAS,
    ],
    translates: &[Translation::torchvision(
        "ScaleJitter",
        &[
            ("target_size", "target_size", Conv::Size),
            ("scale_range", "scale_range", Conv::Floats),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("antialias", "antialias", Conv::Same),
        ],
    )],
    build,
};

/// The largest factor drawn: the image is resized once, from the source, but a factor
/// past this is no jitter, and the output's pixels are bounded by the decoder's limit.
const MAX_SCALE: f64 = 16.0;

fn build(args: &Args) -> Result<Op> {
    let target = args.square("target_size")?;
    not_empty(args, "target_size", target)?;
    let (lo, hi) = args.range("scale_range")?;
    if !(0.0 < lo && lo <= hi && hi <= MAX_SCALE) {
        return Err(args.error(
            "scale_range",
            format!("({lo}, {hi}): use 0 < lo <= hi <= {MAX_SCALE}"),
        ));
    }
    Ok(Op::new(ScaleJitter {
        target,
        scale_range: (lo, hi),
        filter: filter(args)?,
    }))
}

struct ScaleJitter {
    /// The pair as given: v2 sets its first number against the width.
    target: (u32, u32),
    scale_range: (f64, f64),
    filter: Filter,
}

impl Operator for ScaleJitter {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.target.into(),
            self.scale_range.into(),
            self.filter.name().into(),
            self.filter.antialias().into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for ScaleJitter {
    fn output_size(&self) -> OutputSize {
        OutputSize::Varies
    }

    /// v2's `make_params`: the factor a float32 (`torch.rand`), the fitting scale a
    /// Python float taken to float32 by the product, each side truncated. As v2 writes it,
    /// the target's first number is set against the width and its second the height.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let (lo, hi) = self.scale_range;
        let scale = lo as f32 + rng.next_f64() as f32 * (hi - lo) as f32;
        let (w, h) = (view.w.round(), view.h.round());
        let fit = (f64::from(self.target.1) / h).min(f64::from(self.target.0) / w);
        let r = fit as f32 * scale;
        let side = |v: f64| ((v as f32 * r) as i64).max(1) as f64;
        view.filter = self.filter;
        (view.w, view.h) = (side(w), side(h));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_a_factor_of_the_fitting_scale_in_the_range() {
        let op = ScaleJitter {
            target: (1024, 1024),
            scale_range: (0.1, 2.0),
            filter: Filter::Bilinear,
        };
        let mut seen = (f64::MAX, 0.0f64);
        for seed in 0..2000 {
            let mut view = View::whole(640, 480);
            op.plan(&mut view, &mut Rng::new(seed));
            // The longer side fits 1024 at scale 1: 640 -> 1024, times 0.1..2.
            assert!((102.0..=2048.0).contains(&view.w), "{}", view.w);
            // Each side is the same factor of its own, truncated.
            let r = view.w / 640.0;
            assert!((view.h - 480.0 * r).abs() <= 1.0, "{} {}", view.w, view.h);
            seen = (seen.0.min(view.w), seen.1.max(view.w));
        }
        assert!(seen.0 < 150.0 && seen.1 > 1950.0, "{seen:?}");
    }
}
