//! `RandomCrop`: a window of the image at a size, placed at random, the image padded
//! first where asked (torchvision's, `padding_mode="constant"`; the padding as `Pad`'s).

use super::{
    canvas_fill, canvas_fill_value, not_empty, pad, Declaration, Geometric, Op, Operator,
    OutputSize, Stage, View,
};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomCrop",
    doc: "Crops a window of `size` at a random place (torchvision's `RandomCrop`: the image \
          padded by `padding` first, then, with `pad_if_needed`, each side of a dimension \
          shorter than the window by the shortfall; then the top row, then the left column, \
          each uniform over the places the window fits). An image still smaller than the \
          window is cropped at its centre, as `CenterCrop` does.",
    params: &[
        Param::required("size", Kind::Square, "an int (square) or `(height, width)`"),
        Param::with_default(
            "padding",
            Kind::Padding,
            "None",
            "pixels padded first: one int, two (left/right, top/bottom) or four",
        ),
        Param::with_default(
            "pad_if_needed",
            Kind::Bool,
            "False",
            "pad a dimension shorter than the window, both its sides by the shortfall",
        ),
        pad::FILL,
        pad::PADDING_MODE,
    ],
    translates: &[Translation::torchvision(
        "RandomCrop",
        &[
            ("size", "size", Conv::Size),
            ("padding", "padding", Conv::Padding),
            ("pad_if_needed", "pad_if_needed", Conv::Bool),
            ("fill", "fill", Conv::Fill),
            ("padding_mode", "padding_mode", Conv::Str),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let size = args.square("size")?;
    not_empty(args, "size", size)?;
    pad::constant_only(args)?;
    Ok(Op::new(RandomCrop {
        size,
        padding: args.padding("padding", pad::MAX_PADDING)?.unwrap_or([0; 4]),
        pad_if_needed: args.bool("pad_if_needed")?,
        fill: canvas_fill(args)?,
    }))
}

struct RandomCrop {
    size: (u32, u32),
    /// Left, top, right, bottom.
    padding: [u32; 4],
    pad_if_needed: bool,
    fill: [u8; 3],
}

impl Operator for RandomCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let padding = match self.padding {
            [0, 0, 0, 0] => Value::None,
            sides => pad::padding_value(sides),
        };
        vec![
            self.size.into(),
            padding,
            self.pad_if_needed.into(),
            canvas_fill_value(self.fill),
            "constant".into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for RandomCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Fixed(self.size.0, self.size.1)
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let (w, h) = (self.size.1 as f64, self.size.0 as f64);
        let [mut left, mut top, mut right, mut bottom] = self.padding;
        if self.pad_if_needed {
            // torchvision pads both sides of a short dimension by the whole shortfall
            // (`padding` is whole pixels: added before or after the rounding, the same).
            let across = pad::shortfall(view.w + f64::from(left + right), w);
            let down = pad::shortfall(view.h + f64::from(top + bottom), h);
            (left, right, top, bottom) = (left + across, right + across, top + down, bottom + down);
        }
        pad::pad(view, [left, top, right, bottom], self.fill);
        // Seen sizes are whole after the resizes that precede a crop in practice; floor
        // them so that a window that fits has a place.
        let place = |seen: f64, kept: f64, rng: &mut Rng| {
            let room = seen.floor() - kept;
            if room < 0.0 {
                ((seen - kept) / 2.0).round_ties_even()
            } else {
                rng.below(room as u64 + 1) as f64
            }
        };
        let y = place(view.h, h, rng);
        let x = place(view.w, w, rng);
        view.crop(x, y, w, h);
    }
}
