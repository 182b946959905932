//! `FixedSizeCrop`: a random crop of at most a size, then padding at the right and the
//! bottom up to it (torchvision's detection references, `references/detection/
//! transforms.py`, after `ScaleJitter` in large-scale jitter).
//!
//! The padding comes after the resize: the view, resized, is placed on a canvas of the
//! size ([`super::Inset`]), so nothing outside the image is decoded or resized.

use super::{
    canvas_fill, canvas_fill_value, not_empty, Declaration, Geometric, Inset, Op, Operator,
    OutputSize, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "FixedSizeCrop",
    doc: "Crops a random window of at most `size`, then pads at the right and the bottom \
          with `fill` up to `size` (torchvision's detection references' `FixedSizeCrop`). \
          Boxes are clamped to the window; only `RandomHorizontalFlip` may follow it among \
          the geometric operators.",
    params: &[
        Param::required(
            "size",
            Kind::Square,
            "an int (a square) or `(height, width)`",
        ),
        Param::with_default(
            "fill",
            Kind::Fill,
            "0",
            "the padding's colour, one or 3 numbers",
        ),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let size = args.square("size")?;
    not_empty(args, "size", size)?;
    Ok(Op::new(FixedSizeCrop {
        size,
        fill: canvas_fill(args)?,
    }))
}

struct FixedSizeCrop {
    /// `(height, width)`.
    size: (u32, u32),
    fill: [u8; 3],
}

impl Operator for FixedSizeCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.size.into(), canvas_fill_value(self.fill)]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for FixedSizeCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Canvas(self.size.0, self.size.1)
    }

    /// The references' `forward`: one draw places the window along both axes (each offset
    /// truncated), and the crop is skipped where the view fits.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let (w, h) = (view.w.round(), view.h.round());
        let (cw, ch) = (f64::from(self.size.1), f64::from(self.size.0));
        let (new_w, new_h) = (w.min(cw), h.min(ch));
        if (new_w, new_h) != (w, h) {
            let r = rng.next_f64() as f32;
            let top = ((h - ch).max(0.0) as f32 * r).trunc() as f64;
            let left = ((w - cw).max(0.0) as f32 * r).trunc() as f64;
            view.crop(left, top, new_w, new_h);
        }
        if (new_w, new_h) != (cw, ch) {
            view.inset = Some(Inset {
                width: cw,
                height: ch,
                fill: self.fill,
                flip: false,
                for_batching: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> FixedSizeCrop {
        FixedSizeCrop {
            size: (100, 120),
            fill: [1, 2, 3],
        }
    }

    #[test]
    fn a_larger_view_is_cropped_and_a_smaller_one_placed_on_the_canvas() {
        for seed in 0..200 {
            let mut view = View::whole(300, 80);
            op().plan(&mut view, &mut Rng::new(seed));
            // Cropped to 120 wide, kept 80 high, then placed on 120x100.
            assert_eq!((view.w, view.h), (120.0, 80.0));
            let r = view.source;
            assert!(r.x >= 0.0 && r.x + r.w <= 300.0 && r.x.fract() == 0.0 && r.y == 0.0);
            assert_eq!(view.inset.unwrap().height, 100.0);
        }
        // A view that fits exactly: neither.
        let mut view = View::whole(120, 100);
        op().plan(&mut view, &mut Rng::new(1));
        assert!(view.inset.is_none() && view.clip.is_none());
        // A mirror after it mirrors the canvas, not the view.
        let mut view = View::whole(60, 50);
        op().plan(&mut view, &mut Rng::new(1));
        view.mirror();
        assert!(!view.flip && view.inset.unwrap().flip);
    }
}
