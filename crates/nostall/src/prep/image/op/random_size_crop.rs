//! `RandomSizeCrop`: a crop of a random size at a random place (DETR's, in its
//! `datasets/transforms.py`; not in torchvision).

use super::{Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomSizeCrop",
    doc: "Crops a window of a width drawn from `min_size` to the image's width (at most \
          `max_size`) and a height drawn likewise, at a place drawn (DETR's \
          `RandomSizeCrop`). The output's size varies: follow it with a resize to a canvas \
          (`DetrRandomResize(..., max_size=...)`, as DETR does). A side shorter than \
          `min_size` is kept whole (DETR raises).",
    params: &[
        Param::required("min_size", Kind::Int, "the least side drawn"),
        Param::required("max_size", Kind::Int, "the greatest side drawn"),
    ],
    translates: &[],
    build,
};

/// The longest side drawn: past a JPEG's largest (65 535).
const MAX_SIDE: u32 = 1 << 16;

fn build(args: &Args) -> Result<Op> {
    let min_size: u32 = args.int("min_size")?;
    let max_size: u32 = args.int("max_size")?;
    if !(1 <= min_size && min_size <= max_size && max_size <= MAX_SIDE) {
        return Err(args.error(
            "max_size",
            format!("({min_size}, {max_size}): use 1 <= min_size <= max_size <= {MAX_SIDE}"),
        ));
    }
    Ok(Op::new(RandomSizeCrop { min_size, max_size }))
}

struct RandomSizeCrop {
    min_size: u32,
    max_size: u32,
}

/// Python's `random.randint(lo, hi)`: from `lo` to `hi`, both included.
fn randint(lo: u64, hi: u64, rng: &mut Rng) -> u64 {
    lo + rng.below(hi - lo + 1)
}

impl Operator for RandomSizeCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            Value::Int(self.min_size.into()),
            Value::Int(self.max_size.into()),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for RandomSizeCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Varies
    }

    /// DETR's `__call__`: the width, then the height, each `randint(min_size, min(side,
    /// max_size))`; then `T.RandomCrop.get_params`: the top, then the left, each
    /// `randint(0, side - crop)`, unless the window is the whole image.
    fn plan(&self, view: &mut View, rng: &mut Rng) {
        // PIL's sizes are whole pixels: the view's, rounded as it is read.
        let (w, h) = (
            view.w.round().max(1.0) as u64,
            view.h.round().max(1.0) as u64,
        );
        let side = |whole: u64, rng: &mut Rng| {
            let hi = whole.min(self.max_size.into());
            randint(u64::from(self.min_size).min(hi), hi, rng)
        };
        let tw = side(w, rng);
        let th = side(h, rng);
        if (tw, th) == (w, h) {
            return;
        }
        let top = randint(0, h - th, rng);
        let left = randint(0, w - tw, rng);
        view.crop(left as f64, top as f64, tw as f64, th as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_drawn_within_the_image_and_the_sizes() {
        let op = RandomSizeCrop {
            min_size: 30,
            max_size: 50,
        };
        let (mut widths, mut lefts) = (Vec::new(), Vec::new());
        for seed in 0..500 {
            let mut view = View::whole(80, 40);
            op.plan(&mut view, &mut Rng::new(seed));
            // Wider than max_size: 30..=50; 40 high: 30..=40.
            assert!((30.0..=50.0).contains(&view.w), "{}", view.w);
            assert!((30.0..=40.0).contains(&view.h), "{}", view.h);
            let r = view.source;
            assert!(r.x >= 0.0 && r.x + r.w <= 80.0 && r.y >= 0.0 && r.y + r.h <= 40.0);
            assert_eq!((r.w, r.h), (view.w, view.h));
            widths.push(view.w as u32);
            lefts.push(r.x as u32);
        }
        assert_eq!(widths.iter().min(), Some(&30));
        assert_eq!(widths.iter().max(), Some(&50));
        assert_eq!(lefts.iter().min(), Some(&0));
    }

    #[test]
    fn a_side_shorter_than_min_size_is_kept_whole() {
        let op = RandomSizeCrop {
            min_size: 100,
            max_size: 200,
        };
        let mut view = View::whole(60, 40);
        op.plan(&mut view, &mut Rng::new(1));
        assert_eq!(
            (view.w, view.h, view.source.x, view.source.y),
            (60.0, 40.0, 0.0, 0.0)
        );
        assert!(view.clip.is_none());
    }
}
