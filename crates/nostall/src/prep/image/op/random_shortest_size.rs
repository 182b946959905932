//! `RandomShortestSize`: a resize of the shorter side to a size drawn among several, the
//! longer side at most `max_size` (torchvision.transforms.v2's, the multi-scale training
//! of Faster and Mask R-CNN in torchvision's detection references).
//!
//! Each image comes out at its own size; a batch holds them on canvases of `max_size` ×
//! `max_size`, each image at the top left and the rest `fill` ([`super::Inset`], made
//! only for batching: a flip after it mirrors the image, not the canvas). A boxes field
//! gives each image's `size` to cut it out, as torchvision's detection models take
//! images of different sizes. Without `max_size`, the output's size varies, for a crop
//! after it (DETR's second choice resizes, crops, then resizes to the canvas).

use super::resize::{filter, ANTIALIAS, INTERPOLATION};
use super::{
    canvas_fill, canvas_fill_value, Declaration, Geometric, Inset, Op, Operator, OutputSize, Stage,
    View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::codec::DEFAULT_MAX_PIXELS;
use crate::prep::image::Filter;
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomShortestSize",
    doc: "Resizes the shorter side to a size drawn among `min_size`, the longer side at \
          most `max_size` (torchvision.transforms.v2's `RandomShortestSize`). Each image \
          keeps its size, at the top left of a `max_size` square canvas of `fill` in the \
          batch; a boxes field's `size` says where it ends. Without `max_size` the \
          output's size varies, for a crop after it.",
    params: &[
        Param::required(
            "min_size",
            Kind::Sides,
            "the shorter side's sizes, drawn with equal chances",
        ),
        Param::with_default(
            "max_size",
            Kind::OptionalInt,
            "None",
            "the most the longer side may be, and the batch canvas's side (the references \
             use 1333); `None`: no bound and no canvas, the output's size varies (for a \
             crop after it)",
        ),
        INTERPOLATION,
        ANTIALIAS,
        Param::with_default(
            "fill",
            Kind::Fill,
            "0",
            "the canvas's colour around each image, one or 3 numbers",
        ),
    ],
    translates: &[Translation::torchvision(
        "RandomShortestSize",
        &[
            ("min_size", "min_size", Conv::Ints),
            ("max_size", "max_size", Conv::Same),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("antialias", "antialias", Conv::Same),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    Ok(Op::new(RandomShortestSize {
        min_size: args.sides("min_size")?,
        max_size: BatchCanvas::from_args(args)?,
        filter: filter(args)?,
        fill: canvas_fill(args)?,
    }))
}

/// A multi-scale resize's `max_size` (`RandomShortestSize`'s, `DetrRandomResize`'s): the
/// longer side's bound and the side of the square canvas each image keeps its size on, at
/// the top left, in the batch ([`Inset::for_batching`]); without it, the output's size
/// varies (a crop after it fixes it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct BatchCanvas(pub(super) Option<u32>);

impl BatchCanvas {
    /// The `max_size` argument, its square bounded as a decoded image is.
    pub(super) fn from_args(args: &Args) -> Result<BatchCanvas> {
        let max_size = args.optional_int::<u32>("max_size")?;
        if let Some(max) = max_size {
            if max == 0 || u64::from(max).pow(2) > DEFAULT_MAX_PIXELS {
                return Err(args.error(
                    "max_size",
                    format!(
                        "{max}: the canvas is max_size square, from 1 pixel to \
                         {DEFAULT_MAX_PIXELS} pixels"
                    ),
                ));
            }
        }
        Ok(BatchCanvas(max_size))
    }

    /// The `max_size` argument's value.
    pub(super) fn value(self) -> Value {
        self.0.map_or(Value::None, |m| Value::Int(m.into()))
    }

    /// The longer side's bound, if any.
    pub(super) fn max_side(self) -> Option<f64> {
        self.0.map(f64::from)
    }

    pub(super) fn output_size(self) -> OutputSize {
        match self.0 {
            Some(max) => OutputSize::Canvas(max, max),
            None => OutputSize::Varies,
        }
    }

    pub(super) fn is_some(self) -> bool {
        self.0.is_some()
    }

    /// Places `view`, resized, on the canvas of `fill` (nothing without `max_size`).
    pub(super) fn place(self, view: &mut View, fill: [u8; 3]) {
        if let Some(side) = self.max_side() {
            view.inset = Some(Inset {
                width: side,
                height: side,
                fill,
                flip: false,
                for_batching: true,
            });
        }
    }
}

struct RandomShortestSize {
    min_size: Vec<u32>,
    max_size: BatchCanvas,
    filter: Filter,
    fill: [u8; 3],
}

impl Operator for RandomShortestSize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            Value::Tuple(
                self.min_size
                    .iter()
                    .map(|&s| Value::Int(s.into()))
                    .collect(),
            ),
            self.max_size.value(),
            self.filter.name().into(),
            self.filter.antialias().into(),
            canvas_fill_value(self.fill),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for RandomShortestSize {
    fn output_size(&self) -> OutputSize {
        self.max_size.output_size()
    }

    fn batch_canvas(&self) -> bool {
        self.max_size.is_some()
    }

    /// v2's `make_params`: a size drawn with equal chances, the ratio a Python float, each
    /// side truncated.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let pick = (rng.next_f64() * self.min_size.len() as f64) as usize;
        let side = f64::from(self.min_size[pick.min(self.min_size.len() - 1)]);
        let (w, h) = (view.w.round(), view.h.round());
        let max = self.max_size.max_side().unwrap_or(f64::INFINITY);
        let r = (side / w.min(h)).min(max / w.max(h));
        let scaled = |v: f64| (v * r).trunc().clamp(1.0, max);
        view.filter = self.filter;
        (view.w, view.h) = (scaled(w), scaled(h));
        self.max_size.place(view, self.fill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shorter_side_is_drawn_and_the_longer_bounded() {
        let op = RandomShortestSize {
            min_size: vec![480, 800],
            max_size: BatchCanvas(Some(1000)),
            filter: Filter::Bilinear,
            fill: [0; 3],
        };
        let mut seen = [0; 2];
        for seed in 0..400 {
            let mut view = View::whole(640, 400);
            op.plan(&mut view, &mut Rng::new(seed));
            match (view.w, view.h) {
                // 480 / 400 = 1.2: 768 x 480.
                (768.0, 480.0) => seen[0] += 1,
                // 800 / 400 = 2, but 1000 / 640 = 1.5625 is less: 1000 x 625.
                (1000.0, 625.0) => seen[1] += 1,
                other => panic!("{other:?}"),
            }
            let inset = view.inset.unwrap();
            assert_eq!((inset.width, inset.height), (1000.0, 1000.0));
            // A mirror after it mirrors the image on the canvas.
            view.mirror();
            assert!(view.flip && !view.inset.unwrap().flip);
        }
        assert!(seen.iter().all(|n| *n > 150), "{seen:?}");
    }
}
