//! SSD's training targets, computed in the loader: torchvision's SSD computes them on
//! every training step from each image's boxes (`SSD.forward` matches the boxes to the
//! default boxes, `SSD.compute_loss` encodes them). Doing it here takes that work off
//! the training step: a batch can carry, for each default box (anchor), its class
//! target and its regression target.
//!
//! What it matches, operation for operation in `f32` as torch computes on the CPU:
//!
//! * [`DefaultBoxes`]: what `DefaultBoxGenerator(aspect_ratios, min_ratio, max_ratio,
//!   scales, steps, clip)` returns for one image (`forward`), xyxy in the pixels of the
//!   batch tensor, in its order: level by level, row-major over each feature map, and at
//!   each location the square box of scale `s_k`, the square box of scale
//!   `sqrt(s_k s_k+1)`, then a wide and a tall box for each aspect ratio. `clip` clamps the
//!   widths and heights to the image's (`[0, 1]` of it), not the boxes: a box near an edge
//!   reaches past it. The two presets, [`DefaultBoxes::ssd300_vgg16`] (8732 boxes) and
//!   [`DefaultBoxes::ssdlite320_mobilenet_v3_large`] (3234 boxes), carry the feature-map
//!   sizes their backbones give at their fixed input sizes.
//! * [`DefaultBoxes::encode`]: `box_iou(boxes, anchors)`, `SSDMatcher(0.5)`, then
//!   `BoxCoder(weights=(10, 10, 5, 5)).encode_single` of each foreground anchor's matched
//!   box and the matched box's label as its class. An anchor's best box is the first of
//!   equal IoUs (torch's CPU `max(dim=0)` returns the first maximal index), an anchor whose
//!   best IoU is below 0.5 is background, then each box takes its own best anchor (the
//!   first of equal IoUs again) whatever that anchor's IoU, in the boxes' order, so that of
//!   two boxes sharing a best anchor the later one keeps it (torch's CPU index assignment
//!   writes in order). Background anchors get class 0 and a zero regression target.
//!
//! Where torch's `float32` rounding shows, it is followed: a step's spacing is the image
//! over the step in `f64` (Python's), rounded to `f32` before the grid's centres are
//! divided by it; the scales and the boxes' widths and heights are `f64` rounded to `f32`;
//! the rest is `f32`. (Under autocast the feature maps are `float16`, and torchvision
//! rounds the centres to it: these are the boxes of `float32` feature maps.)
//!
//! The work is the anchors times the boxes IoUs (SSD300: 8732 anchors, a few hundred boxes
//! at most; some 4 ns a pair in a release build), computed anchor by anchor: nothing
//! larger than one entry a box is kept.
//!
//! Tested against torchvision itself: `crates/nostall/tests/reference/ssd_targets.py`
//! runs the models' own generators, matcher and coder on the feature maps of their own
//! backbones and writes `ssd_reference.json` beside this file (the default boxes' counts,
//! checksums and a sample of rows; the targets of fixed sets of boxes), which the tests
//! below compare with.

/// `SSDMatcher`'s IoU threshold in torchvision's SSD (`iou_thresh=0.5`): an anchor whose
/// best IoU is below it is background.
const IOU_THRESHOLD: f32 = 0.5;

/// `BoxCoder`'s weights in torchvision's SSD, for `(dx, dy, dw, dh)`.
const WEIGHTS: [f32; 4] = [10.0, 10.0, 5.0, 5.0];

/// The scales of the default boxes, one a level and one more (`s_k`), as
/// `DefaultBoxGenerator` takes them.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scales<'a> {
    /// `scales=None`: spaced evenly from `min_ratio` to `max_ratio` over the levels, then
    /// 1 (`[min_ratio, max_ratio]` for one level).
    Ratios {
        /// `min_ratio`.
        min: f64,
        /// `max_ratio`.
        max: f64,
    },
    /// Given: at least one more than the levels.
    Given(&'a [f64]),
}

/// The parameters of torchvision's `DefaultBoxGenerator`.
#[derive(Debug, Clone, Copy)]
pub(super) struct DefaultBoxGenerator<'a> {
    /// Each level's aspect ratios (besides 1): each adds a wide and a tall box.
    pub(super) aspect_ratios: &'a [&'a [f64]],
    /// The boxes' scales.
    pub(super) scales: Scales<'a>,
    /// Each level's step in pixels (the grid's spacing is the image's size over it), or
    /// `None` for the feature map's own spacing.
    pub(super) steps: Option<&'a [u32]>,
    /// Whether the boxes' widths and heights are clamped to the image's.
    pub(super) clip: bool,
}

/// `ssd300_vgg16`'s generator.
const SSD300_VGG16: DefaultBoxGenerator<'static> = DefaultBoxGenerator {
    aspect_ratios: &[
        &[2.0],
        &[2.0, 3.0],
        &[2.0, 3.0],
        &[2.0, 3.0],
        &[2.0],
        &[2.0],
    ],
    scales: Scales::Given(&[0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05]),
    steps: Some(&[8, 16, 32, 64, 100, 300]),
    clip: true,
};

/// The feature maps (height, width) of `ssd300_vgg16`'s backbone at 300 x 300.
const SSD300_GRIDS: [[usize; 2]; 6] = [[38, 38], [19, 19], [10, 10], [5, 5], [3, 3], [1, 1]];

/// `ssdlite320_mobilenet_v3_large`'s aspect ratios, the same at each of its 6 levels.
const SSDLITE320_RATIOS: &[f64] = &[2.0, 3.0];

/// `ssdlite320_mobilenet_v3_large`'s generator.
const SSDLITE320: DefaultBoxGenerator<'static> = DefaultBoxGenerator {
    aspect_ratios: &[SSDLITE320_RATIOS; 6],
    scales: Scales::Ratios {
        min: 0.2,
        max: 0.95,
    },
    steps: None,
    clip: true,
};

/// The feature maps (height, width) of `ssdlite320_mobilenet_v3_large`'s backbone at
/// 320 x 320.
const SSDLITE320_GRIDS: [[usize; 2]; 6] = [[20, 20], [10, 10], [5, 5], [3, 3], [2, 2], [1, 1]];

impl DefaultBoxGenerator<'_> {
    /// `self.scales`, as `__init__` estimates them (in `f64`, Python's floats).
    fn scales(&self, levels: usize) -> Vec<f64> {
        match self.scales {
            Scales::Given(scales) => {
                assert!(
                    scales.len() > levels,
                    "{} scales for {levels} levels: one more than the levels are needed",
                    scales.len()
                );
                scales.to_vec()
            }
            Scales::Ratios { min, max } if levels > 1 => {
                let range = max - min;
                let last = levels as f64 - 1.0;
                (0..levels)
                    .map(|k| min + range * k as f64 / last)
                    .chain([1.0])
                    .collect()
            }
            Scales::Ratios { min, max } => vec![min, max],
        }
    }

    /// `_generate_wh_pairs` for level `k` (in `f64`, then `float32`), clamped to `[0, 1]`
    /// where `clip` is set.
    fn wh_pairs(&self, k: usize, scales: &[f64]) -> Vec<[f32; 2]> {
        let s_k = scales[k];
        let s_prime_k = (scales[k] * scales[k + 1]).sqrt();
        let mut pairs = vec![[s_k, s_k], [s_prime_k, s_prime_k]];
        for ar in self.aspect_ratios[k] {
            let sq_ar = ar.sqrt();
            let (w, h) = (s_k * sq_ar, s_k / sq_ar);
            pairs.extend([[w, h], [h, w]]);
        }
        pairs
            .into_iter()
            .map(|pair| {
                pair.map(|v| {
                    let v = v as f32;
                    if self.clip {
                        v.clamp(0.0, 1.0)
                    } else {
                        v
                    }
                })
            })
            .collect()
    }
}

/// The default boxes (anchors) of an SSD for one image: xyxy, in the batch tensor's
/// pixels, in torchvision's order.
#[derive(Debug, Clone)]
pub(super) struct DefaultBoxes {
    boxes: Vec<[f32; 4]>,
    /// The batch tensor's height and width they are made for.
    image_size: [usize; 2],
}

/// A ground-truth box `SSD.forward` refuses (not a positive width and height), or one
/// that is not four finite numbers (which torchvision would turn into NaN targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct InvalidBox {
    /// The box's index among the image's boxes.
    pub(super) index: usize,
}

impl DefaultBoxes {
    /// What `generator` gives for feature maps of `grid_sizes` (height, width each, one a
    /// level) in a batch tensor of `image_size` (height, width) pixels: the boxes of
    /// `_grid_default_boxes`, in `[0, 1]` units of the image, made xyxy pixels as `forward`
    /// does.
    ///
    /// # Panics
    ///
    /// Where torchvision raises: steps of another count than the levels, a zero step,
    /// given scales not one more than the levels. Also where the feature maps are not one
    /// a level (torchvision uses the first levels of more, and fails on fewer).
    pub(super) fn new(
        generator: &DefaultBoxGenerator<'_>,
        grid_sizes: &[[usize; 2]],
        image_size: [usize; 2],
    ) -> Self {
        let levels = generator.aspect_ratios.len();
        assert_eq!(grid_sizes.len(), levels, "one feature map a level");
        if let Some(steps) = generator.steps {
            assert_eq!(steps.len(), levels, "one step a level");
            assert!(!steps.contains(&0), "steps must be positive");
        }
        let scales = generator.scales(levels);
        let [height, width] = image_size;
        let mut boxes = Vec::new();
        for (k, &[rows, cols]) in grid_sizes.iter().enumerate() {
            // The grid's spacing: a Python float (the image over the step, in `f64`) or
            // the feature map's size, which torch makes `float32` before it divides.
            let (x_f_k, y_f_k) = match generator.steps {
                Some(steps) => {
                    let step = f64::from(steps[k]);
                    ((width as f64 / step) as f32, (height as f64 / step) as f32)
                }
                None => (cols as f32, rows as f32),
            };
            let pairs = generator.wh_pairs(k, &scales);
            for y in 0..rows {
                let cy = (y as f32 + 0.5) / y_f_k;
                for x in 0..cols {
                    let cx = (x as f32 + 0.5) / x_f_k;
                    boxes.extend(pairs.iter().map(|&[w, h]| {
                        [
                            (cx - 0.5 * w) * width as f32,
                            (cy - 0.5 * h) * height as f32,
                            (cx + 0.5 * w) * width as f32,
                            (cy + 0.5 * h) * height as f32,
                        ]
                    }));
                }
            }
        }
        DefaultBoxes { boxes, image_size }
    }

    /// `ssd300_vgg16`'s default boxes at its input size, 300 x 300: 8732.
    pub(super) fn ssd300_vgg16() -> Self {
        DefaultBoxes::new(&SSD300_VGG16, &SSD300_GRIDS, [300, 300])
    }

    /// `ssdlite320_mobilenet_v3_large`'s default boxes at its input size, 320 x 320: 3234.
    pub(super) fn ssdlite320_mobilenet_v3_large() -> Self {
        DefaultBoxes::new(&SSDLITE320, &SSDLITE320_GRIDS, [320, 320])
    }

    /// The batch tensor's height and width the boxes are made for.
    pub(super) fn image_size(&self) -> [usize; 2] {
        self.image_size
    }

    /// The boxes, xyxy pixels.
    pub(super) fn boxes(&self) -> &[[f32; 4]] {
        &self.boxes
    }

    /// One image's SSD targets from its ground-truth `boxes` (xyxy, in the same pixels as
    /// the default boxes) and their `labels`: into `classes`, each anchor's class target
    /// (its matched box's label, 0 for background), and into `regression`, each anchor's
    /// regression target (`BoxCoder((10, 10, 5, 5)).encode_single` of its matched box,
    /// zeros for background). Returns the number of foreground anchors. An image without
    /// boxes is all background.
    ///
    /// # Errors
    ///
    /// The first box that is not four finite numbers with `x1 > x0` and `y1 > y0`; the
    /// outputs are then left as they were.
    ///
    /// # Panics
    ///
    /// Where `labels` are not one a box, or `classes` and `regression` not one an anchor.
    pub(super) fn encode(
        &self,
        boxes: &[[f32; 4]],
        labels: &[i64],
        classes: &mut [i64],
        regression: &mut [[f32; 4]],
    ) -> Result<usize, InvalidBox> {
        assert_eq!(labels.len(), boxes.len(), "one label a box");
        assert_eq!(
            classes.len(),
            self.boxes.len(),
            "one class target an anchor"
        );
        assert_eq!(
            regression.len(),
            self.boxes.len(),
            "one regression an anchor"
        );
        if let Some(index) = boxes
            .iter()
            .position(|b| !(b.iter().all(|v| v.is_finite()) && b[2] > b[0] && b[3] > b[1]))
        {
            return Err(InvalidBox { index });
        }
        let areas: Vec<f32> = boxes.iter().map(area).collect();
        // Each box's best anchor, as `match_quality_matrix.max(dim=1)` finds it.
        let mut best_anchor = vec![ArgMax::new(); boxes.len()];
        // First each anchor's matched box's index (-1 for background) in `classes`.
        for (j, (anchor, matched)) in self.boxes.iter().zip(classes.iter_mut()).enumerate() {
            let anchor_area = area(anchor);
            let mut best_box = ArgMax::new();
            for (i, (gt, gt_area)) in boxes.iter().zip(&areas).enumerate() {
                let iou = iou(gt, *gt_area, anchor, anchor_area);
                best_box.offer(iou, i);
                best_anchor[i].offer(iou, j);
            }
            // `matched_vals < threshold` is background, a NaN is not; without boxes the
            // best stays -inf, background.
            *matched = if best_box.value >= IOU_THRESHOLD || best_box.value.is_nan() {
                best_box.index as i64
            } else {
                -1
            };
        }
        // `matches[highest_quality_pred_foreach_gt] = arange(M)`: in order, the last wins.
        for (i, best) in best_anchor.iter().enumerate() {
            classes[best.index] = i as i64;
        }
        let mut foreground = 0;
        for ((anchor, class), target) in self.boxes.iter().zip(classes).zip(regression) {
            match usize::try_from(*class) {
                Ok(i) => {
                    *class = labels[i];
                    *target = encode_box(&boxes[i], anchor);
                    foreground += 1;
                }
                Err(_) => {
                    *class = 0;
                    *target = [0.0; 4];
                }
            }
        }
        Ok(foreground)
    }
}

/// `box_area` of an xyxy box.
fn area(b: &[f32; 4]) -> f32 {
    (b[2] - b[0]) * (b[3] - b[1])
}

/// `box_iou` of a ground-truth box and an anchor, with their areas.
fn iou(gt: &[f32; 4], gt_area: f32, anchor: &[f32; 4], anchor_area: f32) -> f32 {
    let w = (gt[2].min(anchor[2]) - gt[0].max(anchor[0])).max(0.0);
    let h = (gt[3].min(anchor[3]) - gt[1].max(anchor[1])).max(0.0);
    let inter = w * h;
    inter / (gt_area + anchor_area - inter)
}

/// `encode_boxes` of a ground-truth box with respect to an anchor, with SSD's weights.
fn encode_box(gt: &[f32; 4], anchor: &[f32; 4]) -> [f32; 4] {
    let [wx, wy, ww, wh] = WEIGHTS;
    let ex_width = anchor[2] - anchor[0];
    let ex_height = anchor[3] - anchor[1];
    let ex_ctr_x = anchor[0] + 0.5 * ex_width;
    let ex_ctr_y = anchor[1] + 0.5 * ex_height;
    let gt_width = gt[2] - gt[0];
    let gt_height = gt[3] - gt[1];
    let gt_ctr_x = gt[0] + 0.5 * gt_width;
    let gt_ctr_y = gt[1] + 0.5 * gt_height;
    [
        wx * (gt_ctr_x - ex_ctr_x) / ex_width,
        wy * (gt_ctr_y - ex_ctr_y) / ex_height,
        ww * (gt_width / ex_width).ln(),
        wh * (gt_height / ex_height).ln(),
    ]
}

/// A running argmax as torch's CPU `max(dim)` keeps one: the first of equal values
/// stays, and a NaN, once met, stays.
#[derive(Debug, Clone, Copy)]
struct ArgMax {
    value: f32,
    index: usize,
}

impl ArgMax {
    /// Nothing offered yet: -inf, which the first value offered replaces (an IoU is never
    /// -inf).
    fn new() -> Self {
        ArgMax {
            value: f32::NEG_INFINITY,
            index: 0,
        }
    }

    /// `value`, at `index`, after those offered before it.
    fn offer(&mut self, value: f32, index: usize) {
        if value > self.value || (value.is_nan() && !self.value.is_nan()) {
            self.value = value;
            self.index = index;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Written by `crates/nostall/tests/reference/ssd_targets.py` with torchvision.
    const REFERENCE: &str = include_str!("ssd_reference.json");

    /// Largest difference allowed, in pixels for boxes and in the regression's units.
    const TOLERANCE: f32 = 1e-4;

    fn reference() -> Value {
        serde_json::from_str(REFERENCE).unwrap()
    }

    fn floats(v: &Value) -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    }

    fn quads(v: &Value) -> Vec<[f32; 4]> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|q| floats(q).try_into().unwrap())
            .collect()
    }

    fn sizes(v: &Value) -> Vec<[usize; 2]> {
        serde_json::from_value(v.clone()).unwrap()
    }

    /// A preset's default boxes: a model's, or those of the generator the reference gives
    /// (`DefaultBoxGenerator`'s keyword arguments).
    fn preset(name: &str, reference: &Value) -> DefaultBoxes {
        let reference = &reference["presets"][name];
        match name {
            "ssd300_vgg16" => return DefaultBoxes::ssd300_vgg16(),
            "ssdlite320_mobilenet_v3_large" => {
                return DefaultBoxes::ssdlite320_mobilenet_v3_large()
            }
            _ => {}
        }
        let generator = &reference["generator"];
        let ratios: Vec<Vec<f64>> = serde_json::from_value(generator["aspect_ratios"].clone())
            .unwrap_or_else(|_| panic!("no preset {name}"));
        let ratios: Vec<&[f64]> = ratios.iter().map(Vec::as_slice).collect();
        let given: Option<Vec<f64>> = serde_json::from_value(generator["scales"].clone()).unwrap();
        let steps: Option<Vec<u32>> = serde_json::from_value(generator["steps"].clone()).unwrap();
        let scales = match &given {
            Some(scales) => Scales::Given(scales),
            None => Scales::Ratios {
                min: generator["min_ratio"].as_f64().unwrap(),
                max: generator["max_ratio"].as_f64().unwrap(),
            },
        };
        let image_size: [usize; 2] =
            serde_json::from_value(reference["image_size"].clone()).unwrap();
        DefaultBoxes::new(
            &DefaultBoxGenerator {
                aspect_ratios: &ratios,
                scales,
                steps: steps.as_deref(),
                clip: generator["clip"].as_bool().unwrap(),
            },
            &sizes(&reference["grid_sizes"]),
            image_size,
        )
    }

    /// Compares default boxes with a preset's reference; the largest difference of a
    /// sampled coordinate.
    fn check_boxes(anchors: &DefaultBoxes, reference: &Value) -> Result<f32, String> {
        let boxes = anchors.boxes();
        let count = reference["count"].as_u64().unwrap() as usize;
        if boxes.len() != count {
            return Err(format!(
                "{} default boxes, torchvision has {count}",
                boxes.len()
            ));
        }
        let (mut sum, mut weighted) = (0.0, 0.0);
        for (i, b) in boxes.iter().enumerate() {
            for (c, v) in b.iter().enumerate() {
                sum += f64::from(*v);
                weighted += f64::from(*v) * ((i % 97) as f64 + 1.0) * (c as f64 + 1.0);
            }
        }
        for (name, ours) in [("sum", sum), ("weighted_sum", weighted)] {
            let theirs = reference[name].as_f64().unwrap();
            if (ours - theirs).abs() > 1e-9 * theirs.abs().max(1.0) {
                return Err(format!("{name} {ours}, torchvision's {theirs}"));
            }
        }
        let mut max_diff = 0.0f32;
        for row in reference["sample"].as_array().unwrap() {
            let row = floats(row);
            let i = row[0] as usize;
            for (ours, theirs) in boxes[i].iter().zip(&row[1..]) {
                let diff = (ours - theirs).abs();
                if diff > TOLERANCE {
                    return Err(format!(
                        "box {i}: {:?}, torchvision's {:?}",
                        boxes[i],
                        &row[1..]
                    ));
                }
                max_diff = max_diff.max(diff);
            }
        }
        Ok(max_diff)
    }

    /// Compares the targets of a case's boxes with torchvision's; the largest difference
    /// of a regression target.
    fn check_targets(anchors: &DefaultBoxes, case: &Value) -> Result<f32, String> {
        let name = case["name"].as_str().unwrap();
        let boxes = quads(&case["boxes"]);
        let labels: Vec<i64> = case["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_i64().unwrap())
            .collect();
        let n = anchors.boxes().len();
        let (mut classes, mut regression) = (vec![-7; n], vec![[f32::NAN; 4]; n]);
        let count = anchors
            .encode(&boxes, &labels, &mut classes, &mut regression)
            .unwrap();
        let foreground: Vec<usize> = (0..n).filter(|&j| classes[j] != 0).collect();
        let expected: Vec<usize> = case["foreground"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j.as_u64().unwrap() as usize)
            .collect();
        if foreground != expected || count != expected.len() {
            return Err(format!(
                "{name}: foreground {foreground:?} ({count}), torchvision's {expected:?}"
            ));
        }
        let expected_classes = case["classes"].as_array().unwrap();
        let expected_regression = quads(&case["regression"]);
        let mut max_diff = 0.0f32;
        for (k, &j) in foreground.iter().enumerate() {
            if classes[j] != expected_classes[k].as_i64().unwrap() {
                return Err(format!(
                    "{name}: anchor {j} class {}, torchvision's {}",
                    classes[j], expected_classes[k]
                ));
            }
            for (ours, theirs) in regression[j].iter().zip(&expected_regression[k]) {
                let diff = (ours - theirs).abs();
                if diff.is_nan() || diff > TOLERANCE {
                    return Err(format!(
                        "{name}: anchor {j} regression {:?}, torchvision's {:?}",
                        regression[j], expected_regression[k]
                    ));
                }
                max_diff = max_diff.max(diff);
            }
        }
        for j in (0..n).filter(|&j| classes[j] == 0) {
            if regression[j] != [0.0; 4] {
                return Err(format!("{name}: background anchor {j} {:?}", regression[j]));
            }
        }
        Ok(max_diff)
    }

    #[test]
    fn presets_are_torchvisions_default_boxes() {
        let reference = reference();
        let presets = reference["presets"].as_object().unwrap();
        assert_eq!(presets.len(), 4);
        for (name, preset_reference) in presets {
            let anchors = preset(name, &reference);
            let model = match name.as_str() {
                "ssd300_vgg16" => Some(SSD300_GRIDS),
                "ssdlite320_mobilenet_v3_large" => Some(SSDLITE320_GRIDS),
                _ => None,
            };
            if let Some(grids) = model {
                let theirs = sizes(&preset_reference["grid_sizes"]);
                assert_eq!(grids[..], theirs, "{name}'s feature maps");
            }
            let max_diff = check_boxes(&anchors, preset_reference).unwrap();
            eprintln!(
                "{name}: {} default boxes, sampled coordinates within {max_diff} px",
                anchors.boxes().len()
            );
        }
    }

    #[test]
    fn targets_are_torchvisions() {
        let reference = reference();
        let mut checked = 0;
        for case in reference["cases"].as_array().unwrap() {
            let name = case["preset"].as_str().unwrap();
            let max_diff = check_targets(&preset(name, &reference), case).unwrap();
            eprintln!("{name} {}: regression within {max_diff}", case["name"]);
            checked += 1;
        }
        assert_eq!(checked, 22);
    }

    #[test]
    fn a_wrong_preset_fails_the_comparison() {
        let reference = reference();
        // SSD300 with its first scale off by 0.01: as many boxes, the first level's differ.
        let wrong = DefaultBoxes::new(
            &DefaultBoxGenerator {
                scales: Scales::Given(&[0.08, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05]),
                ..SSD300_VGG16
            },
            &SSD300_GRIDS,
            [300, 300],
        );
        assert_eq!(wrong.boxes().len(), 8732);
        assert!(check_boxes(&wrong, &reference["presets"]["ssd300_vgg16"]).is_err());
        let random = reference["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["preset"] == "ssd300_vgg16" && c["name"] == "random_50")
            .unwrap();
        assert!(check_targets(&wrong, random).is_err());
        // SSDlite's boxes are not SSD300's.
        let lite = DefaultBoxes::ssdlite320_mobilenet_v3_large();
        assert!(check_boxes(&lite, &reference["presets"]["ssd300_vgg16"]).is_err());
    }

    #[test]
    fn an_image_without_boxes_is_all_background() {
        let anchors = DefaultBoxes::ssdlite320_mobilenet_v3_large();
        let n = anchors.boxes().len();
        let (mut classes, mut regression) = (vec![5; n], vec![[1.0; 4]; n]);
        assert_eq!(
            anchors.encode(&[], &[], &mut classes, &mut regression),
            Ok(0)
        );
        assert!(classes.iter().all(|&c| c == 0));
        assert!(regression.iter().all(|r| *r == [0.0; 4]));
    }

    #[test]
    fn boxes_ssd_refuses_are_errors_and_leave_the_outputs() {
        let anchors = DefaultBoxes::ssd300_vgg16();
        let n = anchors.boxes().len();
        let (mut classes, mut regression) = (vec![5; n], vec![[1.0; 4]; n]);
        let good = [10.0, 10.0, 20.0, 20.0];
        for (bad, index) in [
            ([10.0, 10.0, 10.0, 20.0], 1),
            ([10.0, 20.0, 20.0, 19.0], 1),
            ([f32::NAN, 10.0, 20.0, 20.0], 1),
            ([10.0, 10.0, f32::INFINITY, 20.0], 1),
        ] {
            assert_eq!(
                anchors.encode(&[good, bad], &[1, 2], &mut classes, &mut regression),
                Err(InvalidBox { index })
            );
        }
        assert!(classes.iter().all(|&c| c == 5));
        assert!(regression.iter().all(|r| *r == [1.0; 4]));
    }

    #[test]
    fn scales_from_ratios_are_torchvisions() {
        // `DefaultBoxGenerator([[2, 3]] * 6, min_ratio=0.2, max_ratio=0.95).scales`.
        let scales = SSDLITE320.scales(6);
        let theirs = [0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.0];
        assert_eq!(scales.len(), theirs.len());
        for (ours, theirs) in scales.iter().zip(theirs) {
            assert!((ours - theirs).abs() < 1e-12, "{scales:?}");
        }
        // One level: `[min_ratio, max_ratio]`.
        let one = DefaultBoxGenerator {
            aspect_ratios: &[&[2.0]],
            ..SSDLITE320
        };
        assert_eq!(one.scales(1), vec![0.2, 0.95]);
    }

    #[test]
    fn the_first_of_equal_values_wins_and_a_nan_stays() {
        let mut best = ArgMax::new();
        for (i, v) in [0.25, 0.5, 0.5, 0.25].into_iter().enumerate() {
            best.offer(v, i);
        }
        assert_eq!((best.value, best.index), (0.5, 1));
        let mut best = ArgMax::new();
        for (i, v) in [0.25, f32::NAN, 0.9, f32::NAN].into_iter().enumerate() {
            best.offer(v, i);
        }
        assert_eq!(best.index, 1);
    }
}
