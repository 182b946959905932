//! `RandomCrop`: a window of the image at a size, placed at random (torchvision's,
//! without padding).

use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomCrop",
    doc: "Crops a window of `size` at a random place (torchvision's `RandomCrop`: the top row, \
          then the left column, each uniform over the places the window fits). An image \
          smaller than the window is cropped at its centre, as `CenterCrop` does. Padding is \
          not supported: `padding` and `pad_if_needed` are refused.",
    params: &[
        Param::required("size", Kind::Square, "an int (square) or `(height, width)`"),
        Param::with_default(
            "padding",
            Kind::OptionalInt,
            "None",
            "refused unless None (padding is not supported)",
        ),
        Param::with_default(
            "pad_if_needed",
            Kind::Bool,
            "False",
            "refused unless False (padding is not supported)",
        ),
    ],
    translates: &[Translation::torchvision(
        "RandomCrop",
        &[
            ("size", "size", Conv::Size),
            ("padding", "padding", Conv::Same),
            ("pad_if_needed", "pad_if_needed", Conv::Bool),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let size = args.square("size")?;
    not_empty(args, "size", size)?;
    if args.optional_int::<i64>("padding")?.is_some() {
        return Err(args.error(
            "padding",
            "padding is not supported: pad the crop's source, or crop without it",
        ));
    }
    if args.bool("pad_if_needed")? {
        return Err(args.error(
            "pad_if_needed",
            "padding is not supported: crop a size the images have",
        ));
    }
    Ok(Op::new(RandomCrop { size }))
}

struct RandomCrop {
    size: (u32, u32),
}

impl Operator for RandomCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![self.size.into(), Value::None, false.into()]
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
