//! `DetrRandomResize`: the shorter side to a size drawn among several, the longer at most
//! `max_size` (DETR's `RandomResize`, in its `datasets/transforms.py`: its own rounding,
//! not v2's `RandomShortestSize`'s).
//!
//! With `max_size`, each image keeps its size at the top left of a `max_size` square
//! canvas in the batch, as `RandomShortestSize`'s ([`super::Inset`], only for batching);
//! without, the output's size varies (DETR's first resize before its crop).

use super::random_shortest_size::BatchCanvas;
use super::{Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::Filter;
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "DetrRandomResize",
    doc: "Resizes the shorter side to a size drawn among `sizes`, the longer side at most \
          about `max_size`, as DETR's `RandomResize` rounds (bilinear, as PIL). With \
          `max_size`, each image keeps its size at the top left of a `max_size` square \
          canvas of 0 in the batch (a boxes field's `size` says where it ends; a side \
          DETR's rounding takes past `max_size` is cut to it); without, the output's size \
          varies, for a crop after it.",
    params: &[
        Param::required(
            "sizes",
            Kind::Sides,
            "the shorter side's sizes, drawn with equal chances",
        ),
        Param::with_default(
            "max_size",
            Kind::OptionalInt,
            "None",
            "the most the longer side may be, and the batch canvas's side (DETR's 1333)",
        ),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<Op> {
    Ok(Op::new(DetrRandomResize {
        sizes: args.sides("sizes")?,
        max_size: BatchCanvas::from_args(args)?,
    }))
}

struct DetrRandomResize {
    sizes: Vec<u32>,
    max_size: BatchCanvas,
}

/// DETR's `get_size_with_aspect_ratio`: the `(width, height)` a `w` × `h` image takes for
/// a shorter side of `size`, the longer at most about `max_size` (Python's `round`, half
/// to even, then `int`, truncation).
fn size_with_aspect_ratio(w: f64, h: f64, size: f64, max_size: Option<f64>) -> (f64, f64) {
    let mut size = size;
    if let Some(max_size) = max_size {
        let (short, long) = (w.min(h), w.max(h));
        if long / short * size > max_size {
            size = (max_size * short / long).round_ties_even();
        }
    }
    if (w <= h && w == size) || (h <= w && h == size) {
        return (w, h);
    }
    if w < h {
        (size, (size * h / w).trunc())
    } else {
        ((size * w / h).trunc(), size)
    }
}

impl Operator for DetrRandomResize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            Value::Tuple(self.sizes.iter().map(|&s| Value::Int(s.into())).collect()),
            self.max_size.value(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for DetrRandomResize {
    fn output_size(&self) -> OutputSize {
        self.max_size.output_size()
    }

    fn batch_canvas(&self) -> bool {
        self.max_size.is_some()
    }

    /// DETR's `random.choice(self.sizes)`, then its `resize` of the PIL image (whole
    /// pixels), each side at least one pixel.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let side = self.sizes[rng.below(self.sizes.len() as u64) as usize];
        let (w, h) = (view.w.round().max(1.0), view.h.round().max(1.0));
        let max = self.max_size.max_side();
        let (ow, oh) = size_with_aspect_ratio(w, h, side.into(), max);
        let bound = |v: f64| v.clamp(1.0, max.unwrap_or(f64::MAX));
        view.filter = Filter::Bilinear;
        (view.w, view.h) = (bound(ow), bound(oh));
        self.max_size.place(view, [0; 3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_as_detr() {
        // Python: get_size_with_aspect_ratio((w, h), size, max_size)[::-1].
        assert_eq!(
            size_with_aspect_ratio(640.0, 480.0, 800.0, Some(1333.0)),
            (1066.0, 800.0)
        );
        assert_eq!(
            size_with_aspect_ratio(480.0, 640.0, 480.0, None),
            (480.0, 640.0)
        );
        // 1333 * 500 / 1000 = 666.5, rounded half to even: 666, then 666 * 2 = 1332.
        assert_eq!(
            size_with_aspect_ratio(1000.0, 500.0, 800.0, Some(1333.0)),
            (1332.0, 666.0)
        );
        // 1333 * 501 / 1000 = 667.833: 668, and int(668 * 1000 / 501) = 1333.
        assert_eq!(
            size_with_aspect_ratio(1000.0, 501.0, 800.0, Some(1333.0)),
            (1333.0, 668.0)
        );
        assert_eq!(
            size_with_aspect_ratio(333.0, 500.0, 400.0, None),
            (400.0, 600.0)
        );
    }

    #[test]
    fn with_max_size_the_image_sits_on_a_batch_canvas() {
        let op = DetrRandomResize {
            sizes: vec![300, 400],
            max_size: BatchCanvas(Some(500)),
        };
        let mut seen = [0; 2];
        for seed in 0..200 {
            let mut view = View::whole(640, 480);
            op.plan(&mut view, &mut Rng::new(seed));
            match (view.w, view.h) {
                (400.0, 300.0) => seen[0] += 1,
                // 400 * 4 / 3 > 500: the shorter side round(500 * 480 / 640) = 375.
                (500.0, 375.0) => seen[1] += 1,
                other => panic!("{other:?}"),
            }
            let inset = view.inset.unwrap();
            assert!(inset.for_batching && (inset.width, inset.height) == (500.0, 500.0));
        }
        assert!(seen.iter().all(|n| *n > 70), "{seen:?}");
    }
}
