//! `Resize`: the shorter side to a length, or the image to an exact size.

use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::Filter;
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

/// A target size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Scale so that the shorter side has this length, keeping the aspect ratio.
    Shorter(u32),
    /// Exactly this height and width.
    Exact {
        /// Height in pixels.
        height: u32,
        /// Width in pixels.
        width: u32,
    },
}

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Resize",
    doc: "Resizes the image (torchvision.transforms.v2's `Resize`, antialiased when \
          shrinking). Like the crops it only plans the geometry: the one resize of a sample \
          happens once the crop is known, with the last resizing operator's interpolation.",
    params: &[
        Param::required(
            "size",
            Kind::Size,
            "an int resizes the shorter side to it, keeping the aspect ratio (follow it \
             with `CenterCrop` for batches of one shape); `(height, width)` resizes to \
             exactly that",
        ),
        INTERPOLATION,
        ANTIALIAS,
    ],
    translates: &[Translation::torchvision(
        "Resize",
        &[
            ("size", "size", Conv::Size),
            ("interpolation", "interpolation", Conv::Interpolation),
            ("antialias", "antialias", Conv::Same),
        ],
    )
    .refusing(&["max_size"])],
    build,
};

/// The `interpolation` parameter of the resizing operators.
pub(super) const INTERPOLATION: Param = Param::with_default(
    "interpolation",
    Kind::Choice,
    "'bilinear'",
    "`'bilinear'`, `'bicubic'` (PIL's and torchvision's antialiased filters) or \
     `'nearest'`",
);

/// The `antialias` parameter of the resizing operators.
pub(super) const ANTIALIAS: Param = Param::with_default(
    "antialias",
    Kind::Bool,
    "True",
    "antialiasing when shrinking (torchvision.transforms.v2's default); `False` with \
     `'bilinear'` interpolates the two nearest pixels at any scale, as torch's \
     `F.interpolate` (torchvision's video classification recipe)",
);

/// The filter `interpolation` and `antialias` ask for.
pub(super) fn filter(args: &Args) -> Result<Filter> {
    let name = args.choice("interpolation", &["bilinear", "bicubic", "nearest"])?;
    let filter = Filter::named(name).expect("the choices are the filters' names");
    match (filter, args.bool("antialias")?) {
        (Filter::Bilinear, false) => Ok(Filter::BilinearAliased),
        (Filter::Bicubic, false) => Err(args.error(
            "antialias",
            "False is not supported with 'bicubic' (torch's cubic without antialiasing is \
             another kernel, a = -0.75); use antialias=True or 'bilinear'",
        )),
        _ => Ok(filter),
    }
}

fn build(args: &Args) -> Result<Op> {
    let size = args.size("size")?;
    match size {
        Size::Shorter(side) => not_empty(args, "size", (side, side))?,
        Size::Exact { height, width } => not_empty(args, "size", (height, width))?,
    }
    Ok(Op::new(Resize {
        size,
        filter: filter(args)?,
    }))
}

struct Resize {
    size: Size,
    filter: Filter,
}

impl Operator for Resize {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.size.into(),
            self.filter.name().into(),
            self.filter.antialias().into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for Resize {
    fn output_size(&self) -> OutputSize {
        match self.size {
            Size::Shorter(_) => OutputSize::Varies,
            Size::Exact { height, width } => OutputSize::Fixed(height, width),
        }
    }

    fn plan(&self, view: &mut View, _: &mut Rng) {
        view.filter = self.filter;
        match self.size {
            Size::Shorter(s) => shorter_to(view, s),
            Size::Exact { height, width } => (view.w, view.h) = (width as f64, height as f64),
        }
    }
}

/// Resizes `view` so that its shorter side is `s`, keeping the aspect ratio as
/// torchvision does (the longer side truncated).
pub(super) fn shorter_to(view: &mut View, s: u32) {
    let portrait = view.w <= view.h;
    let (short, long) = if portrait {
        (view.w, view.h)
    } else {
        (view.h, view.w)
    };
    let new_long = (s as f64 * long / short).floor();
    (view.w, view.h) = if portrait {
        (s as f64, new_long)
    } else {
        (new_long, s as f64)
    };
}
