//! `MultiScaleCrop`: a window whose sides are drawn from fractions of the image's short
//! side, placed on a grid of fixed places, resized to a size (TSN's `GroupMultiScaleCrop`,
//! as VideoMAE's pre-training recipe writes it).

use super::resize::{filter, ANTIALIAS, INTERPOLATION};
use super::{not_empty, Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::image::Filter;
use crate::rng::Rng;

/// The most scales a crop may draw among: each pair of them is a candidate.
const MAX_SCALES: usize = 64;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "MultiScaleCrop",
    doc: "Crops a window whose height and width are each `int(short side × scale)` for \
          scales at most `max_distort` places apart in `scales` (a side within 2 pixels of \
          the output's is the output's), at one of 5 fixed places (the corners and the \
          centre; 13 with `more_fix_crop`: the edges' middles and the quarters too) or, \
          without `fix_crop`, anywhere; then resizes it to `size` (TSN's and VideoMAE's \
          `GroupMultiScaleCrop`, with the same choices: the pair, then the place; in a \
          clip, one draw for every frame). `size` is `(height, width)`, as torchvision's; \
          VideoMAE's `input_size` list is `[width, height]`.",
    params: &[
        Param::required(
            "size",
            Kind::Square,
            "output size, an int (square) or `(height, width)`",
        ),
        Param::with_default(
            "scales",
            Kind::Weights,
            "(1.0, 0.875, 0.75, 0.66)",
            "fractions of the short side, each in (0, 1]",
        ),
        Param::with_default(
            "max_distort",
            Kind::Int,
            "1",
            "how many places apart in `scales` the height's and the width's scales may be",
        ),
        Param::with_default(
            "fix_crop",
            Kind::Bool,
            "True",
            "place the window at one of the fixed places, not anywhere",
        ),
        Param::with_default(
            "more_fix_crop",
            Kind::Bool,
            "True",
            "13 fixed places rather than 5",
        ),
        INTERPOLATION,
        ANTIALIAS,
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let size = args.square("size")?;
    not_empty(args, "size", size)?;
    let scales = args.weights("scales")?;
    let each = scales.iter().all(|s| *s > 0.0 && *s <= 1.0);
    if scales.is_empty() || scales.len() > MAX_SCALES || !each {
        return Err(args.error(
            "scales",
            format!("{scales:?}: give 1 to {MAX_SCALES} fractions, each in (0, 1]"),
        ));
    }
    let max_distort: u32 = args.int("max_distort")?;
    if max_distort as usize > MAX_SCALES {
        return Err(args.error(
            "max_distort",
            format!("{max_distort}: at most {MAX_SCALES}, as many as scales may be"),
        ));
    }
    Ok(Op::new(MultiScaleCrop {
        size,
        scales,
        max_distort,
        fix_crop: args.bool("fix_crop")?,
        more_fix_crop: args.bool("more_fix_crop")?,
        filter: filter(args)?,
    }))
}

struct MultiScaleCrop {
    size: (u32, u32),
    scales: Vec<f64>,
    max_distort: u32,
    fix_crop: bool,
    more_fix_crop: bool,
    filter: Filter,
}

impl Operator for MultiScaleCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.size.into(),
            Value::Tuple(self.scales.iter().map(|s| Value::Float(*s)).collect()),
            Value::Int(self.max_distort.into()),
            self.fix_crop.into(),
            self.more_fix_crop.into(),
            self.filter.name().into(),
            self.filter.antialias().into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }
}

impl Geometric for MultiScaleCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Fixed(self.size.0, self.size.1)
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        let (image_w, image_h) = (view.w.round() as u32, view.h.round() as u32);
        let (x, y, w, h) = self.window(image_w, image_h, rng);
        view.crop(x as f64, y as f64, w as f64, h as f64);
        (view.w, view.h) = (self.size.1 as f64, self.size.0 as f64);
        view.filter = self.filter;
    }
}

impl MultiScaleCrop {
    /// `_sample_crop_size`: (left, top, width, height) of the window in an image of
    /// `image_w` × `image_h`.
    fn window(&self, image_w: u32, image_h: u32, rng: &mut Rng) -> (u32, u32, u32, u32) {
        let base = image_w.min(image_h);
        // A side within 2 pixels of the output's is the output's: the window is then
        // taken at the output's size and not resized by a hair.
        let snap = |side: u32, output: u32| {
            if side.abs_diff(output) < 3 {
                output
            } else {
                side
            }
        };
        let sides: Vec<u32> = self
            .scales
            .iter()
            .map(|s| (f64::from(base) * s) as u32)
            .collect();
        let mut pairs = Vec::new();
        for (i, &h) in sides.iter().enumerate() {
            for (j, &w) in sides.iter().enumerate() {
                if i.abs_diff(j) <= self.max_distort as usize {
                    pairs.push((snap(w, self.size.1), snap(h, self.size.0)));
                }
            }
        }
        let (w, h) = pairs[rng.below(pairs.len() as u64) as usize];
        // A snapped side may pass the image's (an image within 2 pixels of the output):
        // PIL would pad it with black; the window keeps to the image instead.
        let (w, h) = (w.clamp(1, image_w.max(1)), h.clamp(1, image_h.max(1)));
        if !self.fix_crop {
            let x = rng.below(u64::from(image_w - w) + 1) as u32;
            let y = rng.below(u64::from(image_h - h) + 1) as u32;
            return (x, y, w, h);
        }
        let places = fixed_places(self.more_fix_crop, (image_w - w) / 4, (image_h - h) / 4);
        let (x, y) = places[rng.below(places.len() as u64) as usize];
        (x, y, w, h)
    }
}

/// `fill_fix_offset`'s places, in its order, for steps of a quarter of the room.
fn fixed_places(more: bool, w_step: u32, h_step: u32) -> Vec<(u32, u32)> {
    let mut quarters = vec![(0, 0), (4, 0), (0, 4), (4, 4), (2, 2)];
    if more {
        quarters.extend([
            (0, 2),
            (4, 2),
            (2, 4),
            (2, 0),
            (1, 1),
            (3, 1),
            (1, 3),
            (3, 3),
        ]);
    }
    quarters
        .into_iter()
        .map(|(x, y)| (x * w_step, y * h_step))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crop(scales: &[f64], max_distort: u32, fix: bool, more: bool) -> MultiScaleCrop {
        MultiScaleCrop {
            size: (224, 224),
            scales: scales.to_vec(),
            max_distort,
            fix_crop: fix,
            more_fix_crop: more,
            filter: Filter::Bilinear,
        }
    }

    #[test]
    fn windows_are_the_pairs_and_places_of_the_reference() {
        // 320 × 240: sides 240, 210, 180, 158 (int(240 × 0.66) = 158); 240 - 224 > 2.
        let op = crop(&[1.0, 0.875, 0.75, 0.66], 1, true, true);
        let mut rng = Rng::new(7);
        let mut seen = std::collections::BTreeSet::new();
        let mut pairs = std::collections::BTreeMap::<_, u32>::new();
        for _ in 0..20_000 {
            let (x, y, w, h) = op.window(320, 240, &mut rng);
            assert!(x + w <= 320 && y + h <= 240, "{x} {y} {w} {h}");
            let (wi, hi) = (
                [240, 210, 180, 158].iter().position(|s| *s == w).unwrap(),
                [240, 210, 180, 158].iter().position(|s| *s == h).unwrap(),
            );
            assert!(wi.abs_diff(hi) <= 1, "{w} × {h}");
            let places = fixed_places(true, (320 - w) / 4, (240 - h) / 4);
            assert!(places.contains(&(x, y)), "{x}, {y} for {w} × {h}");
            seen.insert((w, h, x, y));
            *pairs.entry((w, h)).or_default() += 1;
        }
        // 10 pairs (4 + 3 + 3 on the diagonals), each drawn alike: 2 000 expected of each,
        // 42 the standard deviation (a fixed seed: the counts never change).
        assert_eq!(pairs.len(), 10);
        assert!(
            pairs.values().all(|n| (1_800..2_200).contains(n)),
            "{pairs:?}"
        );
        // At 13 places each, a few of which coincide (a room of 0).
        assert!(seen.len() > 100, "{} windows", seen.len());
    }

    #[test]
    fn a_side_near_the_output_is_the_output_and_stays_in_the_image() {
        // 226 × 300: the short side 226 is within 2 of 224; 0.875 → 197.
        let op = crop(&[1.0, 0.875], 0, false, false);
        let mut rng = Rng::new(1);
        for _ in 0..1000 {
            let (x, y, w, h) = op.window(226, 300, &mut rng);
            assert!(matches!((w, h), (224, 224) | (197, 197)), "{w} × {h}");
            assert!(x + w <= 226 && y + h <= 300);
        }
        // 223 wide: 223 snaps to 224, kept to the image's 223.
        let (_, _, w, h) = crop(&[1.0], 0, true, false).window(223, 400, &mut rng);
        assert_eq!((w, h), (223, 224));
    }
}
