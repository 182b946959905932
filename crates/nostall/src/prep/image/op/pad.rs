//! `Pad`: the image on a larger canvas of one colour, each side padded by a number of
//! pixels (torchvision's `Pad` and v2's, `padding_mode="constant"`).
//!
//! Like `RandomZoomOut` it moves the view's region past the image ([`View::pad`]), and
//! boxes, masks and keypoints follow. Exact where no resize comes before it (the
//! canvas's edges then fall on whole source pixels); after a resize the image is placed
//! to the nearest source pixel, and the resize blends its edge with the fill.

use super::{
    canvas_fill, canvas_fill_value, Declaration, Geometric, Op, Operator, OutputSize, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Pad",
    doc: "Pads each side of the image by `padding` pixels of `fill` (torchvision's `Pad`: one \
          int for every side, two for left and right then top and bottom, or four for left, \
          top, right, bottom). Boxes, masks and keypoints move with the image.",
    params: &[
        Param::required(
            "padding",
            Kind::Padding,
            "pixels: one int, two (left/right, top/bottom) or four (left, top, right, bottom)",
        ),
        FILL,
        PADDING_MODE,
    ],
    translates: &[Translation::torchvision(
        "Pad",
        &[
            ("padding", "padding", Conv::Padding),
            ("fill", "fill", Conv::Fill),
            ("padding_mode", "padding_mode", Conv::Str),
        ],
    )],
    build,
};

/// The padding's `fill` parameter (`Pad`'s and `RandomCrop`'s).
pub(super) const FILL: Param = Param::with_default(
    "fill",
    Kind::Fill,
    "0",
    "the padding's colour, one or 3 numbers",
);

/// The `padding_mode` parameter (`Pad`'s and `RandomCrop`'s), read by [`constant_only`].
pub(super) const PADDING_MODE: Param = Param::with_default(
    "padding_mode",
    Kind::Choice,
    "'constant'",
    "'constant' (the others, which repeat the image's edge, are not supported)",
);

/// The most pixels a side is padded by: the canvas is decoded whole (its pixels are also
/// bounded by the decoder's limit).
pub(super) const MAX_PADDING: u32 = 1024;

/// `padding_mode`, read: only `"constant"`, the others named in the refusal.
pub(super) fn constant_only(args: &Args) -> Result<()> {
    match args.value("padding_mode") {
        Value::Str(mode) if mode == "constant" => Ok(()),
        Value::Str(mode) if ["edge", "reflect", "symmetric"].contains(&mode.as_str()) => Err(args
            .error(
                "padding_mode",
                format!("{mode:?} is not supported: only \"constant\" (pad with `fill`)"),
            )),
        _ => args.choice("padding_mode", &["constant"]).map(|_| ()),
    }
}

fn build(args: &Args) -> Result<Op> {
    constant_only(args)?;
    let Some(padding) = args.padding("padding", MAX_PADDING)? else {
        return Err(args.error("padding", "is required: how many pixels to pad"));
    };
    Ok(Op::new(Pad {
        padding,
        fill: canvas_fill(args)?,
    }))
}

struct Pad {
    /// Left, top, right, bottom.
    padding: [u32; 4],
    fill: [u8; 3],
}

impl Operator for Pad {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            padding_value(self.padding),
            canvas_fill_value(self.fill),
            "constant".into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

/// Padding as its operator's argument gives it back: the four sides.
pub(super) fn padding_value(padding: [u32; 4]) -> Value {
    Value::Tuple(padding.iter().map(|&v| Value::Int(v.into())).collect())
}

/// Whole pixels `seen` (a view's side, rounded as [`pad`] rounds it) falls short of
/// `kept`, 0 where it does not.
pub(super) fn shortfall(seen: f64, kept: f64) -> u32 {
    (kept - seen.round()).max(0.0) as u32
}

/// Pads `view` by `padding` (left, top, right, bottom) of `fill`, as torchvision pads
/// the image it sees (whole pixels: the view's size is rounded, as a resize's output
/// is).
pub(super) fn pad(view: &mut View, [left, top, right, bottom]: [u32; 4], fill: [u8; 3]) {
    if [left, top, right, bottom] == [0; 4] {
        return;
    }
    let (w, h) = (view.w.round(), view.h.round());
    let (left, top) = (f64::from(left), f64::from(top));
    view.pad(
        left,
        top,
        w + left + f64::from(right),
        h + top + f64::from(bottom),
        fill,
    );
}

impl Geometric for Pad {
    fn output_size(&self) -> OutputSize {
        OutputSize::Varies
    }

    fn plan(&self, view: &mut View, _rng: &mut Rng) {
        pad(view, self.padding, self.fill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::codec::Rect;

    #[test]
    fn each_side_is_padded_by_its_own_pixels() {
        for (given, sides) in [
            ("Pad(3)", [3, 3, 3, 3]),
            ("Pad([1, 2])", [1, 2, 1, 2]),
            ("Pad([1, 2, 3, 4], fill=7)", [1, 2, 3, 4]),
        ] {
            let op: Op = given.parse().unwrap();
            let mut view = View::whole(200, 100);
            let Stage::Geometry(g) = op.stage() else {
                panic!("geometric")
            };
            g.plan(&mut view, &mut Rng::new(0));
            let [l, t, r, b] = sides.map(f64::from);
            assert_eq!((view.w, view.h), (200.0 + l + r, 100.0 + t + b), "{given}");
            assert_eq!(view.source.x, -l);
            assert_eq!(view.source.y, -t);
            assert_eq!(view.fill.unwrap().0, Rect::full(200, 100));
        }
        for (bad, says) in [
            (
                "Pad(1, padding_mode='reflect')",
                "\"reflect\" is not supported",
            ),
            ("Pad([1, 2, 3])", "2 or 4 of them"),
            ("Pad(-1)", "from 0 to 1024"),
            ("Pad(1025)", "from 0 to 1024"),
            ("Pad(None)", "is required"),
        ] {
            let error = bad.parse::<Op>().unwrap_err().to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
