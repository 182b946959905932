//! `RandomIoUCrop`: SSD's crop, drawn against the sample's boxes (torchvision.transforms.v2's,
//! with the same random choices).
//!
//! Its draw needs the boxes as the operators before it left them ([`Geometric::
//! plan_targeted`]), so it runs only in a pipeline whose samples carry a boxes field
//! ([`ImagePipeline::needs_targets`](crate::prep::ImagePipeline)). The boxes whose centre
//! the crop leaves out are dropped, as v2 zeroes them for `SanitizeBoundingBoxes`
//! ([`View::within`]).

use super::{Declaration, Geometric, Op, Operator, OutputSize, Stage, View};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

/// v2's default `sampler_options`: the least IoU a crop must have with a box, one drawn a
/// try; 1 (or more) leaves the image as it is.
const OPTIONS: [f64; 7] = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0];

pub(super) static DECLARATION: Declaration = Declaration {
    name: "RandomIoUCrop",
    doc: "Crops a random window that overlaps the sample's boxes by at least a drawn IoU, \
          as SSD trains (torchvision.transforms.v2's `RandomIoUCrop`, with its random choices: \
          an IoU among 0, 0.1, 0.3, 0.5, 0.7, 0.9 or none, then up to `trials` windows). \
          Boxes whose centre falls outside the window are dropped. Needs a boxes field.",
    params: &[
        Param::with_default("min_scale", Kind::Float, "0.3", "least side, as a fraction"),
        Param::with_default(
            "max_scale",
            Kind::Float,
            "1.0",
            "greatest side, as a fraction",
        ),
        Param::with_default(
            "min_aspect_ratio",
            Kind::Float,
            "0.5",
            "least width / height",
        ),
        Param::with_default(
            "max_aspect_ratio",
            Kind::Float,
            "2.0",
            "greatest width / height",
        ),
        Param::with_default("trials", Kind::Int, "40", "windows tried an IoU drawn"),
    ],
    translates: &[Translation::torchvision(
        "RandomIoUCrop",
        &[
            ("min_scale", "min_scale", Conv::Float),
            ("max_scale", "max_scale", Conv::Float),
            ("min_aspect_ratio", "min_aspect_ratio", Conv::Float),
            ("max_aspect_ratio", "max_aspect_ratio", Conv::Float),
            ("trials", "trials", Conv::Int),
        ],
    )],
    build,
};

fn build(args: &Args) -> Result<Op> {
    let (min_scale, max_scale) = (args.float("min_scale")?, args.float("max_scale")?);
    if !(0.0 < min_scale && min_scale <= max_scale && max_scale <= 1.0) {
        return Err(args.error(
            "max_scale",
            format!("min_scale={min_scale}, max_scale={max_scale}: use 0 < min <= max <= 1"),
        ));
    }
    let (min_ratio, max_ratio) = (
        args.float("min_aspect_ratio")?,
        args.float("max_aspect_ratio")?,
    );
    if !(0.0 < min_ratio && min_ratio <= max_ratio && max_ratio.is_finite()) {
        return Err(args.error(
            "max_aspect_ratio",
            format!("{min_ratio} to {max_ratio}: use 0 < min <= max"),
        ));
    }
    let trials: u32 = args.int("trials")?;
    // Each trial is two draws and a pass over the boxes: bounded as every setting is.
    if !(1..=10_000).contains(&trials) {
        return Err(args.error("trials", format!("{trials}: use 1 to 10000")));
    }
    Ok(Op::new(RandomIoUCrop {
        scale: (min_scale, max_scale),
        ratio: (min_ratio, max_ratio),
        trials,
    }))
}

struct RandomIoUCrop {
    scale: (f64, f64),
    ratio: (f64, f64),
    trials: u32,
}

impl Operator for RandomIoUCrop {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        vec![
            self.scale.0.into(),
            self.scale.1.into(),
            self.ratio.0.into(),
            self.ratio.1.into(),
            self.trials.into(),
        ]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Geometry(self)
    }

    fn needs_targets(&self) -> bool {
        true
    }
}

impl Geometric for RandomIoUCrop {
    fn output_size(&self) -> OutputSize {
        OutputSize::Varies
    }

    fn plan(&self, view: &mut View, rng: &mut Rng) {
        self.plan_targeted(view, &[], rng);
    }

    fn plan_targeted(&self, view: &mut View, targets: &[[f64; 4]], rng: &mut Rng) {
        // The boxes as the view shows them (clamped by earlier crops).
        let boxes: Vec<[f64; 4]> = targets.iter().map(|b| view.seen_box(*b)).collect();
        if let Some((left, top, w, h)) = self.draw(view.w, view.h, &boxes, rng) {
            let clip = view.clip;
            view.crop(left, top, w, h);
            view.within = Some((view.source, clip));
        }
    }
}

impl RandomIoUCrop {
    /// v2's `make_params` for an image seen at `width` × `height` with `boxes` (x0, y0,
    /// x1, y1 as seen): the window (left, top, width, height), or `None` to leave it.
    /// Without boxes no window qualifies, and the draws go on until "leave it" is drawn,
    /// as v2's loop does.
    fn draw(
        &self,
        width: f64,
        height: f64,
        boxes: &[[f64; 4]],
        rng: &mut Rng,
    ) -> Option<(f64, f64, f64, f64)> {
        // v2's sizes are ints, read from the image's.
        let (orig_w, orig_h) = (width.round(), height.round());
        loop {
            let least = OPTIONS[rng.below(OPTIONS.len() as u64) as usize];
            if least >= 1.0 {
                return None;
            }
            for _ in 0..self.trials {
                let (r0, r1) = (rng.next_f64(), rng.next_f64());
                let new_w = (orig_w * (self.scale.0 + (self.scale.1 - self.scale.0) * r0)).trunc();
                let new_h = (orig_h * (self.scale.0 + (self.scale.1 - self.scale.0) * r1)).trunc();
                let aspect = new_w / new_h;
                if !(self.ratio.0 <= aspect && aspect <= self.ratio.1) {
                    continue;
                }
                let (r0, r1) = (rng.next_f64(), rng.next_f64());
                let left = ((orig_w - new_w) * r0).trunc();
                let top = ((orig_h - new_h) * r1).trunc();
                let (right, bottom) = (left + new_w, top + new_h);
                if left == right || top == bottom {
                    continue;
                }
                let inside = |b: &&[f64; 4]| {
                    let (cx, cy) = (0.5 * (b[0] + b[2]), 0.5 * (b[1] + b[3]));
                    left < cx && cx < right && top < cy && cy < bottom
                };
                let best = boxes
                    .iter()
                    .filter(inside)
                    .map(|b| iou(b, &[left, top, right, bottom]))
                    .fold(None, |best: Option<f64>, v| {
                        Some(best.map_or(v, |m| m.max(v)))
                    });
                match best {
                    Some(best) if best >= least => return Some((left, top, new_w, new_h)),
                    _ => continue,
                }
            }
        }
    }
}

/// Intersection over union of two boxes (x0, y0, x1, y1), as torchvision's `box_iou`.
fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    let area = |b: &[f64; 4]| (b[2] - b[0]) * (b[3] - b[1]);
    inter / (area(a) + area(b) - inter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> RandomIoUCrop {
        RandomIoUCrop {
            scale: (0.3, 1.0),
            ratio: (0.5, 2.0),
            trials: 40,
        }
    }

    #[test]
    fn a_window_holds_a_box_centre_and_its_least_iou() {
        let boxes = [[10.0, 10.0, 60.0, 40.0], [150.0, 80.0, 190.0, 120.0]];
        let (mut crops, mut left_alone) = (0, 0);
        for seed in 0..500 {
            let mut rng = Rng::new(seed);
            match op().draw(200.0, 150.0, &boxes, &mut rng) {
                None => left_alone += 1,
                Some((left, top, w, h)) => {
                    crops += 1;
                    assert!((60.0..=200.0).contains(&w) && (45.0..=150.0).contains(&h));
                    assert!((0.5..=2.0).contains(&(w / h)));
                    assert!(left + w <= 200.0 && top + h <= 150.0);
                    let window = [left, top, left + w, top + h];
                    assert!(boxes.iter().any(|b| {
                        let (cx, cy) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
                        window[0] < cx && cx < window[2] && window[1] < cy && cy < window[3]
                    }));
                }
            }
        }
        // "Leave it" is one option of seven, drawn again when no window qualifies.
        assert!(left_alone > 40 && crops > 300, "{left_alone} {crops}");
    }

    #[test]
    fn without_boxes_it_leaves_the_image_and_the_view_drops_boxes_left_out() {
        let mut rng = Rng::new(1);
        assert_eq!(op().draw(200.0, 150.0, &[], &mut rng), None);
        let boxes = [[10.0, 10.0, 60.0, 40.0]];
        let mut cropped = 0;
        for seed in 0..50 {
            let mut view = View::whole(200, 150);
            op().plan_targeted(&mut view, &boxes, &mut Rng::new(seed));
            if let Some((window, clip)) = view.within {
                assert_eq!((window, clip), (view.source, None));
                cropped += 1;
            }
        }
        assert!(cropped > 0);
    }

    #[test]
    fn iou_is_torchvisions() {
        assert_eq!(iou(&[0.0, 0.0, 2.0, 2.0], &[1.0, 1.0, 3.0, 3.0]), 1.0 / 7.0);
        assert_eq!(iou(&[0.0, 0.0, 1.0, 1.0], &[2.0, 2.0, 3.0, 3.0]), 0.0);
    }
}
