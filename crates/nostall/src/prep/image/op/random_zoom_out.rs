//! `RandomZoomOut`: the image placed at random on a larger canvas of one colour, as SSD
//! trains (torchvision.transforms.v2's, with the same random choices).
//!
//! It moves the view's region past the image ([`View::pad`]); the preparer then reads the
//! image at full resolution onto a canvas of the fill colour that covers the region, and
//! resizes that canvas as it resizes any region, so the pixels are v2's `pad` then its
//! resize. Exact where it comes first in the recipe, as SSD writes it (after a resize the
//! canvas's edges fall between source pixels, and the image is placed to the nearest).

use super::{
    canvas_fill, canvas_fill_value, Declaration, Geometric, Op, Operator, OutputSize, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomZoomOut",
    doc: "With probability `p`, places the image on a canvas `side_range` times its size \
          (drawn), at a random place, the rest `fill` (torchvision.transforms.v2's \
          `RandomZoomOut`). Boxes move with the image.",
    params: &[
        Param::with_default(
            "fill",
            Kind::Fill,
            "0",
            "the canvas's colour, one or 3 numbers",
        ),
        Param::with_default(
            "side_range",
            Kind::Range,
            "(1.0, 4.0)",
            "range of the canvas's side, in the image's",
        ),
        Param::with_default("p", Kind::Float, "0.5", "probability of zooming out"),
    ],
    translates: &[Translation::torchvision(
        "RandomZoomOut",
        &[
            ("fill", "_fill", Conv::Fill),
            ("side_range", "side_range", Conv::Floats),
            ("p", "p", Conv::Float),
        ],
    )],
    build,
};

/// The largest canvas side, in the image's: the canvas is decoded whole, and its pixels
/// are also bounded by the decoder's limit.
const MAX_SIDE: f64 = 16.0;

fn build(args: &Args) -> Result<Op> {
    let fill = canvas_fill(args)?;
    let (lo, hi) = args.range("side_range")?;
    if !(1.0 <= lo && lo <= hi && hi <= MAX_SIDE) {
        return Err(args.error(
            "side_range",
            format!("({lo}, {hi}): use 1 <= lo <= hi <= {MAX_SIDE}"),
        ));
    }
    Ok(Op::new(RandomZoomOut {
        fill,
        side_range: (lo, hi),
        p: args.probability("p")?,
    }))
}

struct RandomZoomOut {
    fill: [u8; 3],
    side_range: (f64, f64),
    p: f64,
}

impl Operator for RandomZoomOut {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            canvas_fill_value(self.fill),
            self.side_range.into(),
            self.p.into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for RandomZoomOut {
    fn output_size(&self) -> OutputSize {
        OutputSize::Varies
    }

    /// v2's `_RandomApplyTransform` draw against `p`, then `make_params`: the side's factor
    /// (a float32, as torch's `rand` gives it), the canvas's whole size, then its place.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        if rng.next_f64() >= self.p {
            return;
        }
        let (lo, hi) = self.side_range;
        let r = (lo as f32 + rng.next_f64() as f32 * (hi - lo) as f32) as f64;
        let (w, h) = (view.w.round(), view.h.round());
        let (canvas_w, canvas_h) = ((w * r).trunc(), (h * r).trunc());
        let (r0, r1) = (rng.next_f64(), rng.next_f64());
        let left = ((canvas_w - w) * r0).trunc();
        let top = ((canvas_h - h) * r1).trunc();
        view.pad(left, top, canvas_w, canvas_h, self.fill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::codec::Rect;

    #[test]
    fn the_canvas_holds_the_image_where_it_was_drawn() {
        let op = RandomZoomOut {
            fill: [1, 2, 3],
            side_range: (1.0, 4.0),
            p: 1.0,
        };
        for seed in 0..100 {
            let mut view = View::whole(200, 100);
            op.plan(&mut view, &mut Rng::new(seed));
            let (shown, fill) = view.fill.expect("p = 1");
            assert_eq!((shown, fill), (Rect::full(200, 100), [1, 2, 3]));
            // The region holds the image: it starts left of it and ends right of it, at
            // whole pixels, and is at most 4 times as large.
            let r = view.source;
            assert!(r.x <= 0.0 && r.y <= 0.0 && r.x.fract() == 0.0 && r.y.fract() == 0.0);
            assert!(r.x + r.w >= 200.0 && r.y + r.h >= 100.0);
            assert!(r.w <= 800.0 && r.h <= 400.0 && (view.w, view.h) == (r.w, r.h));
            // Boxes are clamped to the canvas, as v2's `pad` clamps them.
            assert_eq!(view.clip, Some(r));
        }
        let mut view = View::whole(200, 100);
        RandomZoomOut { p: 0.0, ..op }.plan(&mut view, &mut Rng::new(1));
        assert!(view.fill.is_none() && view.source == Rect::full(200, 100));
    }
}
