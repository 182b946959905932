//! [`Placement`]: where a prepared image's pixels came from, for the targets that must
//! follow them (a detection sample's boxes).
//!
//! The geometric operators leave one mapping from the source image to the output (the
//! module doc of [`super`]): a region, read at the output's size, mirrored or not. A box
//! follows the pixels by the same mapping, so no operator has a second code path for
//! targets. What the mapping alone does not say is torchvision's clamping: every crop of
//! `transforms.v2` clamps the boxes to the crop's canvas, a resize or a flip does not. The
//! crops' windows are kept, as their intersection in source coordinates ([`View::crop`]
//! narrows it), and a box is clamped to it before it is mapped: a clamp then an
//! increasing affine map per axis is the map then the clamp to the window's image, so
//! this is v2's crop-by-crop clamping however many crops and resizes came between.
//!
//! Masks follow the same mapping, read nearest ([`Placement::nearest`]): torch's
//! `nearest` resize, which v2 applies to a `Mask`, reads output pixel `o` of a window `n`
//! pixels long resized to `m` at `floor(o · (n / m))` (the ratio in `f32`), which is what a
//! crop then a resize of v2 gives; a flip before the resize is a flip of the source, one
//! after it a flip of the output. Where the geometry chains several resizes, v2 rounds at
//! each step and the mapping once, so an edge pixel may differ.
//!
//! Operators on pixels that move them after the geometry (a vertical flip, a rotation,
//! an affine warp) leave their [`Motion`]s, in order, drawn as their pixels' were: each
//! moves what the geometry placed, as v2 moves each target type (the boxes' corners,
//! clamped to the canvas; the points; the masks read nearest where the pixels were
//! read), one after the other on the output's canvas. A rotation with `expand=True`
//! grows the canvas: each image its own size at the top left of the sample's canvas
//! ([`Placement::on_canvas`]).

use super::codec::Rect;
use super::op::{clamp_box, composed_sources, Motion, View};

/// The mapping of one sample's geometry from source pixel coordinates to the output's.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The source image's width and height, as decoded.
    image: (u32, u32),
    /// The region of the source read.
    source: Rect,
    /// The crops' windows, intersected, in source coordinates; `None` without a crop.
    clip: Option<Rect>,
    /// The output's width and height, as the geometry makes it.
    output: (u32, u32),
    /// The sample's width and height: the output's, or the canvas an operator on pixels
    /// grew each image onto ([`Placement::on_canvas`]).
    canvas: (u32, u32),
    /// The width and height the source region is read at: the output's, or less where
    /// the view is placed on a canvas of the output's size ([`View::inset`]).
    part: (u32, u32),
    /// Whether the canvas was mirrored after the view was placed on it.
    canvas_flip: bool,
    /// Whether the canvas is only room for the batch
    /// ([`Inset::for_batching`](super::op::Inset::for_batching)).
    batch_canvas: bool,
    flip: bool,
    /// [`View::flip_unscaled`].
    flip_unscaled: bool,
    /// [`View::point_shift`].
    point_shift: f64,
    /// [`View::resize_bound`].
    resize_bound: Option<Rect>,
    /// [`View::within`].
    within: Option<(Rect, Option<Rect>)>,
    /// The region of the source a zoom-out still shows ([`View::fill`]).
    shown: Option<Rect>,
    /// How operators on the output's pixels moved them after the geometry, in order.
    motions: Vec<Motion>,
}

impl Placement {
    /// The placement of `view`, drawn for a source image of `image` (width, height) and
    /// read at `output` (width, height).
    pub(crate) fn new(view: &View, image: (u32, u32), output: (u32, u32)) -> Placement {
        Placement {
            image,
            source: view.source,
            clip: view.clip,
            output,
            canvas: output,
            part: view.read_size(output),
            canvas_flip: view.inset.is_some_and(|inset| inset.flip),
            batch_canvas: view.inset.is_some_and(|inset| inset.for_batching),
            flip: view.flip,
            flip_unscaled: view.flip_unscaled,
            point_shift: view.point_shift,
            resize_bound: view.resize_bound,
            within: view.within,
            shown: view.fill.map(|(shown, _)| shown),
            motions: Vec::new(),
        }
    }

    /// The placement after `motions` moved the output's pixels, in order.
    pub(crate) fn moved(self, motions: Vec<Motion>) -> Placement {
        Placement { motions, ..self }
    }

    /// The placement in a sample of `canvas` (width, height), where an operator on pixels
    /// grew each image to its own size at the canvas's top left
    /// (`RandomRotation(expand=True)`, [`Motion::size_after`]).
    pub(crate) fn on_canvas(self, canvas: (u32, u32)) -> Placement {
        Placement { canvas, ..self }
    }

    /// The width and height of the image once the motions moved it.
    fn moved_size(&self) -> (u32, u32) {
        self.motions
            .iter()
            .fold(self.output, |size, motion| motion.size_after(size))
    }

    /// Whether box `b` (source pixels) is kept: not left out by a crop that drops the
    /// boxes whose centre it leaves out (`RandomIoUCrop`: v2 zeroes them, and its
    /// `SanitizeBoundingBoxes` drops them), the centre taken as that crop saw the box.
    pub fn keeps(&self, b: [f64; 4]) -> bool {
        let Some((window, clip)) = self.within else {
            return true;
        };
        let [x0, y0, x1, y1] = clamp_box(b, clip);
        let (cx, cy) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
        window.x < cx && cx < window.x + window.w && window.y < cy && cy < window.y + window.h
    }

    /// The source image's width and height.
    pub fn image_size(&self) -> (u32, u32) {
        self.image
    }

    /// The sample's width and height.
    pub fn output_size(&self) -> (u32, u32) {
        self.canvas
    }

    /// The width and height of the image in the output: the output's, or the resized
    /// view's where the canvas is only room for the batch (`RandomShortestSize`), or the
    /// size a rotation with `expand=True` grew it to, at the output's top left. What
    /// boxes are sanitised against, as v2 sees the image.
    pub fn image_extent(&self) -> (u32, u32) {
        match self.batch_canvas {
            true => self.part,
            false => self.moved_size(),
        }
    }

    /// The canvas v2 clamps and sanitises boxes against: the image's extent, but after a
    /// rotation with `expand=True` the canvas v2 computes for the boxes
    /// ([`Motion::box_canvas`]), at some angles a pixel larger than the image.
    pub fn box_extent(&self) -> (u32, u32) {
        let (mut size, mut canvas) = (self.output, self.image_extent());
        for motion in &self.motions {
            if matches!(motion, Motion::Expanded(_)) {
                canvas = motion.box_canvas(size);
            }
            size = motion.size_after(size);
        }
        canvas
    }

    /// Box `[x0, y0, x1, y1]` (source pixels, `x0 <= x1`, `y0 <= y1`) in output pixels,
    /// clamped to the crops' windows as torchvision's crops clamp it (module doc). A box
    /// the crops leave nothing of comes out empty (zero width or height), for
    /// [`sanitize`] to drop.
    ///
    /// In `f32`, as v2 computes a crop then a resize (`f32(x - left) * f32(new / old)`):
    /// whether a box clamped at a crop's far edge lands on the output's edge or a hair
    /// past it (and is sanitised away) is v2's rounding, not another. Where a crop came
    /// after the last resize, v2 clamped the box last, exactly at that crop's edges: so
    /// is it here. Then each motion moves it ([`Motion::move_box`]).
    pub fn place_box(&self, b: [f64; 4]) -> [f64; 4] {
        let mut size = self.output;
        self.motions
            .iter()
            .fold(self.place_box_unmoved(b), |b, motion| {
                let moved = motion.move_box(b, size);
                size = motion.size_after(size);
                moved
            })
    }

    /// [`Placement::place_box`] before the motions.
    fn place_box_unmoved(&self, b: [f64; 4]) -> [f64; 4] {
        let (part_w, part_h) = (self.part.0 as f64, self.part.1 as f64);
        let s = self.source;
        let [x0, y0, x1, y1] = clamp_box(b, self.clip);
        let (sx, sy) = ((part_w / s.w) as f32, (part_h / s.h) as f32);
        let x = |v: f64| f64::from((v - s.x) as f32 * sx);
        let y = |v: f64| f64::from((v - s.y) as f32 * sy);
        let (mut a, mut c) = (x(x0), x(x1));
        if self.flip {
            (a, c) = (
                f64::from((part_w - c) as f32),
                f64::from((part_w - a) as f32),
            );
        }
        let [mut x0, mut y0, mut x1, mut y1] = [a, y(y0), c, y(y1)];
        if let Some([lx, ly, hx, hy]) = self.last_crop() {
            [x0, x1] = [x0.clamp(lx, hx), x1.clamp(lx, hx)];
            [y0, y1] = [y0.clamp(ly, hy), y1.clamp(ly, hy)];
        }
        match self.canvas_flip {
            false => [x0, y0, x1, y1],
            true => {
                let w = self.output.0 as f64;
                [w - x1, y0, w - x0, y1]
            }
        }
    }

    /// The window of a crop that came after the last resize, in the pixels the view is
    /// read at (the whole of them where that crop made the region read).
    fn last_crop(&self) -> Option<[f64; 4]> {
        let clip = self.clip.filter(|clip| Some(*clip) != self.resize_bound)?;
        let (part_w, part_h) = (self.part.0 as f64, self.part.1 as f64);
        if clip == self.source {
            return Some([0.0, 0.0, part_w, part_h]);
        }
        let s = self.source;
        let (sx, sy) = (part_w / s.w, part_h / s.h);
        let (mut lx, mut hx) = ((clip.x - s.x) * sx, (clip.x + clip.w - s.x) * sx);
        if self.flip {
            (lx, hx) = (part_w - hx, part_w - lx);
        }
        Some([lx, (clip.y - s.y) * sy, hx, (clip.y + clip.h - s.y) * sy])
    }

    /// Point (`x`, `y`) (source pixels) in output pixels, as torchvision.transforms.v2
    /// moves a `KeyPoints`: as a box's corner, except that a mirroring takes a point to
    /// `w - 1 - x` (a pixel's index) where it takes a box's edge to `w - x`. Crops do not
    /// clamp points; one may land outside the output. Then each motion moves it
    /// ([`Motion::move_point`]).
    pub fn place_point(&self, x: f64, y: f64) -> [f64; 2] {
        let mut size = self.output;
        self.motions
            .iter()
            .fold(self.place_point_unmoved(x, y), |p, motion| {
                let moved = motion.move_point(p, size);
                size = motion.size_after(size);
                moved
            })
    }

    /// [`Placement::place_point`] before the motions.
    fn place_point_unmoved(&self, x: f64, y: f64) -> [f64; 2] {
        let (part_w, part_h) = (self.part.0 as f64, self.part.1 as f64);
        let (s, sx) = (self.source, part_w / self.source.w);
        let mut at = (x - s.x) * sx;
        if self.flip {
            at = part_w - at;
        }
        at += self.point_shift * sx;
        if self.canvas_flip {
            at = self.output.0 as f64 - 1.0 - at;
        }
        [at, (y - s.y) * (part_h / s.h)]
    }

    /// For each pixel of the sample (row-major, [`Placement::output_size`]), the pixel of
    /// the output as the geometry left it (row-major, its own width a row: what
    /// [`Placement::nearest`] reads) that it shows once the motions moved the pixels,
    /// [`OUTSIDE`] where it shows none (a rotation's corners, the canvas around a grown
    /// image); `None` without a motion: what a mask reads after [`Placement::nearest`]
    /// ([`follow_motions`]).
    pub fn moved_pixels(&self) -> Option<Vec<u32>> {
        let moved = composed_sources(&self.motions, self.output)?;
        let (w, h) = self.moved_size();
        if (w, h) == self.canvas {
            return Some(moved);
        }
        // A grown image at the top left of the canvas.
        let (cw, ch) = (self.canvas.0 as usize, self.canvas.1 as usize);
        let mut shown = vec![OUTSIDE; cw * ch];
        for (row, line) in moved.chunks_exact(w as usize).take(ch).enumerate() {
            let n = line.len().min(cw);
            shown[row * cw..row * cw + n].copy_from_slice(&line[..n]);
        }
        Some(shown)
    }

    /// Whether the output is the source mirrored left–right (an odd number of horizontal
    /// flips; a motion after the geometry mirrors nothing, as v2 swaps no points):
    /// where a keypoint field swaps its left and right points.
    pub fn mirrored(&self) -> bool {
        self.flip != self.canvas_flip
    }

    /// The source row of each output row and the source column of each output column, as
    /// a mask is read (module doc); [`OUTSIDE`] where the output pixel lies outside the
    /// source image (a zoom-out's canvas), which a mask reads as 0.
    pub fn nearest(&self) -> (Vec<u32>, Vec<u32>) {
        let (s, image) = (self.source, (self.image.0 as f64, self.image.1 as f64));
        // A zoom-out's canvas shows the image only where it still shows.
        let shown = self.shown.unwrap_or(Rect::full(self.image.0, self.image.1));
        let rows = (shown.y.max(0.0), (shown.y + shown.h).min(image.1));
        let columns = (shown.x.max(0.0), (shown.x + shown.w).min(image.0));
        let (part_w, part_h) = self.part;
        let mut rows = nearest_axis(s.y, s.h, part_h, rows);
        let mut columns = match (self.flip, self.flip_unscaled) {
            (false, _) => nearest_axis(s.x, s.w, part_w, columns),
            // Flipped, then resized: read in the mirrored source, mirrored back.
            (true, true) => {
                let last = self.image.0 - 1;
                let mirrored = (image.0 - columns.1, image.0 - columns.0);
                let mut read = nearest_axis(image.0 - s.x - s.w, s.w, part_w, mirrored);
                for c in read.iter_mut().filter(|c| **c != OUTSIDE) {
                    *c = last - *c;
                }
                read
            }
            // Resized, then flipped: the output mirrored.
            (true, false) => {
                let mut read = nearest_axis(s.x, s.w, part_w, columns);
                read.reverse();
                read
            }
        };
        // On a canvas: the part at its top left, the rest read as nothing.
        rows.resize(self.output.1 as usize, OUTSIDE);
        columns.resize(self.output.0 as usize, OUTSIDE);
        if self.canvas_flip {
            columns.reverse();
        }
        (rows, columns)
    }
}

/// A pixel of the output that no pixel of the source image gives ([`Placement::nearest`]).
pub const OUTSIDE: u32 = u32::MAX;

/// Writes `source` (row-major bytes, `width` a row) read at `rows` and `columns`
/// ([`Placement::nearest`]) into `out`, a row of `columns.len()` bytes for each of
/// `rows`, `fill` where either is [`OUTSIDE`]: a mask or a label map moved as v2 moves a
/// `Mask`.
pub(crate) fn read_nearest(
    source: &[u8],
    width: usize,
    (rows, columns): (&[u32], &[u32]),
    fill: u8,
    out: &mut [u8],
) {
    for (&row, line) in rows.iter().zip(out.chunks_exact_mut(columns.len())) {
        if row == OUTSIDE {
            line.fill(fill);
            continue;
        }
        let from = &source[row as usize * width..][..width];
        for (v, &c) in line.iter_mut().zip(columns) {
            *v = if c == OUTSIDE { fill } else { from[c as usize] };
        }
    }
}

/// Moves `mask` (row-major bytes, as the geometry placed it at its start, the output's
/// width a row) by the motions after it: each of the sample's pixels takes the one
/// `moved` ([`Placement::moved_pixels`]) says it shows, `fill` where it shows none, as v2
/// moves a `Mask` (nearest). `mask` holds the sample's pixels, at least the output's.
pub(crate) fn follow_motions(moved: &[u32], fill: u8, mask: &mut [u8]) {
    let placed = mask.to_vec();
    for (v, &from) in mask.iter_mut().zip(moved) {
        *v = if from == OUTSIDE {
            fill
        } else {
            placed[from as usize]
        };
    }
}

/// The source index of each of `out` output pixels along one axis, for a window of the
/// source starting at `start`, `length` long, where the pixels from `shown.0` to `shown.1`
/// show the image.
fn nearest_axis(start: f64, length: f64, out: u32, shown: (f64, f64)) -> Vec<u32> {
    let whole = start.fract() == 0.0 && length.fract() == 0.0 && length >= 1.0;
    (0..out)
        .map(|o| {
            let at = if whole {
                start as i64 + torch_nearest(o, length as u32, out)
            } else {
                (start + f64::from(o) * length / f64::from(out)).floor() as i64
            };
            let at_f = at as f64;
            if at_f >= shown.0.floor() && at_f < shown.1.ceil() {
                at as u32
            } else {
                OUTSIDE
            }
        })
        .collect()
}

/// torch's `nearest_idx` (`UpSample.h`): the input index of output index `o` of an axis
/// resized from `input` to `output` pixels.
fn torch_nearest(o: u32, input: u32, output: u32) -> i64 {
    if input == output {
        i64::from(o)
    } else if output == 2 * input {
        i64::from(o >> 1)
    } else {
        let scale = input as f32 / output as f32;
        ((o as f32 * scale).floor() as i64).min(i64::from(input) - 1)
    }
}

/// Whether box `b` (`[x0, y0, x1, y1]` on a canvas of `canvas` (width, height)) is kept
/// by torchvision.transforms.v2's `SanitizeBoundingBoxes(min_size, min_area)`: each side
/// at least `min_size`, the area at least `min_area`, every coordinate finite, at least
/// 0 and within the canvas.
pub fn sanitize(b: [f64; 4], canvas: (u32, u32), min_size: f64, min_area: f64) -> bool {
    let [x0, y0, x1, y1] = b;
    let (w, h) = (x1 - x0, y1 - y0);
    let (cw, ch) = (canvas.0 as f64, canvas.1 as f64);
    // Written so that a NaN anywhere fails a comparison.
    w >= min_size
        && h >= min_size
        && w * h >= min_area
        && b.iter().all(|v| *v >= 0.0)
        && x0 <= cw
        && x1 <= cw
        && y0 <= ch
        && y1 <= ch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::Filter;

    fn view(width: u32, height: u32) -> View {
        View::whole(width, height)
    }

    #[test]
    fn a_resize_scales_and_a_flip_mirrors_without_clamping() {
        // Resize 200x100 to 100x50: half.
        let mut v = view(200, 100);
        (v.w, v.h) = (100.0, 50.0);
        let p = Placement::new(&v, (200, 100), (100, 50));
        assert_eq!(
            p.place_box([10.0, 20.0, 50.0, 60.0]),
            [5.0, 10.0, 25.0, 30.0]
        );
        // Outside the image stays outside: a resize does not clamp.
        assert_eq!(
            p.place_box([-10.0, 0.0, 250.0, 10.0]),
            [-5.0, 0.0, 125.0, 5.0]
        );
        v.flip = true;
        let p = Placement::new(&v, (200, 100), (100, 50));
        assert_eq!(
            p.place_box([10.0, 20.0, 50.0, 60.0]),
            [75.0, 10.0, 95.0, 30.0]
        );
    }

    #[test]
    fn crops_clamp_to_each_window_as_v2_does_crop_by_crop() {
        // Crop (20, 10) 100x50 of 200x100, then resize to 50x25, then a centre crop of
        // 40x20 (x 5, y 2.5 of the resized view).
        let mut v = view(200, 100);
        v.crop(20.0, 10.0, 100.0, 50.0);
        (v.w, v.h) = (50.0, 25.0);
        v.crop(5.0, 2.5, 40.0, 20.0);
        v.filter = Filter::Bilinear;
        let p = Placement::new(&v, (200, 100), (40, 20));
        // v2: crop 1 -> [0, 0, 100, 50] clamped (from [-20, -10, 180, 90]), resize by
        // 1/2 -> [0, 0, 50, 25], crop 2 -> [-5, -2.5, 45, 22.5] clamped -> [0, 0, 40, 20].
        assert_eq!(
            p.place_box([0.0, 0.0, 200.0, 100.0]),
            [0.0, 0.0, 40.0, 20.0]
        );
        // Inside both windows: mapped only. Source (60, 30) -> (40, 20) -> (20, 10) -> (15, 7.5).
        assert_eq!(
            p.place_box([60.0, 30.0, 70.0, 40.0]),
            [15.0, 7.5, 20.0, 12.5]
        );
        // Left of the first window: clamped to its edge, then mapped: empty.
        let b = p.place_box([0.0, 30.0, 10.0, 40.0]);
        assert_eq!(b[2] - b[0], 0.0);
        assert!(!sanitize(b, (40, 20), 1.0, 1.0));
    }

    #[test]
    fn a_point_is_mirrored_as_a_pixel_index_at_the_scale_it_was_seen_at() {
        // v2 on a 200x100 image, point (30, 40): flip -> 169; resize by 1/2 -> 84.5.
        let mut v = view(200, 100);
        v.mirror();
        (v.w, v.h) = (100.0, 50.0);
        let p = Placement::new(&v, (200, 100), (100, 50));
        assert_eq!(p.place_point(30.0, 40.0), [84.5, 20.0]);
        assert!(p.mirrored());
        // Resize by 1/2 -> 15, then flip -> 100 - 1 - 15 = 84.
        let mut v = view(200, 100);
        (v.w, v.h) = (100.0, 50.0);
        v.mirror();
        let p = Placement::new(&v, (200, 100), (100, 50));
        assert_eq!(p.place_point(30.0, 40.0), [84.0, 20.0]);
        // Flip, crop 20 from the left, resize by 2, flip: 169 -> 149 -> 298 -> 360 - 1 - 298.
        let mut v = view(200, 100);
        v.mirror();
        v.crop(20.0, 0.0, 180.0, 100.0);
        (v.w, v.h) = (360.0, 200.0);
        v.mirror();
        let p = Placement::new(&v, (200, 100), (360, 200));
        assert_eq!(p.place_point(30.0, 40.0), [61.0, 80.0]);
        assert!(!p.mirrored());
        // Crops do not clamp points.
        assert_eq!(p.place_point(-10.0, -5.0)[1], -10.0);
    }

    #[test]
    fn a_flip_before_a_crop_crops_the_mirrored_image() {
        // Flip a 100x10 image, then crop its left 30 columns: source columns 70..100.
        let mut v = view(100, 10);
        v.flip = true;
        v.crop(0.0, 0.0, 30.0, 10.0);
        let p = Placement::new(&v, (100, 10), (30, 10));
        // Source [80, 2, 90, 8] mirrored is [10, 2, 20, 8].
        assert_eq!(p.place_box([80.0, 2.0, 90.0, 8.0]), [10.0, 2.0, 20.0, 8.0]);
        // Source [50, 2, 90, 8] is clamped to the window's 70 first.
        assert_eq!(p.place_box([50.0, 2.0, 90.0, 8.0]), [10.0, 2.0, 30.0, 8.0]);
    }

    #[test]
    fn masks_are_read_as_torchs_nearest_resize_reads_a_crop() {
        // Crop (3, 2) 10x5 of 20x10, resized to 4x3, flipped.
        let mut v = view(20, 10);
        v.crop(3.0, 2.0, 10.0, 5.0);
        (v.w, v.h) = (4.0, 3.0);
        let p = Placement::new(&v, (20, 10), (4, 3));
        // Columns: floor(o * 2.5) = 0, 2, 5, 7 past 3; rows: floor(o * 5/3) = 0, 1, 3 past 2.
        assert_eq!(p.nearest(), (vec![2, 3, 5], vec![3, 5, 8, 10]));
        v.mirror();
        let p = Placement::new(&v, (20, 10), (4, 3));
        assert_eq!(p.nearest().1, vec![10, 8, 5, 3]);
        // Flipped first: columns 16..7 of the mirrored image's 7..16, read at 0, 2, 5, 7.
        let mut v = view(20, 10);
        v.mirror();
        v.crop(7.0, 2.0, 10.0, 5.0);
        (v.w, v.h) = (4.0, 3.0);
        let p = Placement::new(&v, (20, 10), (4, 3));
        assert_eq!(p.nearest().1, vec![12, 10, 7, 5]);
        // A canvas larger than the image (a zoom-out): outside reads nothing.
        let mut v = view(4, 2);
        v.crop(-2.0, 0.0, 8.0, 2.0);
        let p = Placement::new(&v, (4, 2), (8, 2));
        assert_eq!(
            p.nearest().1,
            [OUTSIDE, OUTSIDE, 0, 1, 2, 3, OUTSIDE, OUTSIDE]
        );
    }

    #[test]
    fn a_view_on_a_canvas_keeps_its_pixels_and_a_mirror_moves_it_across() {
        // 60x50 read at its size on a 120x100 canvas, then the canvas mirrored.
        let mut v = view(60, 50);
        v.inset = Some(crate::prep::image::op::Inset {
            width: 120.0,
            height: 100.0,
            fill: [0; 3],
            flip: false,
            for_batching: false,
        });
        let p = Placement::new(&v, (60, 50), (120, 100));
        assert_eq!(p.image_extent(), (120, 100));
        assert_eq!(
            p.place_box([10.0, 5.0, 20.0, 15.0]),
            [10.0, 5.0, 20.0, 15.0]
        );
        let (rows, columns) = p.nearest();
        assert_eq!((rows.len(), columns.len()), (100, 120));
        assert_eq!(
            (rows[49], rows[50], columns[59], columns[60]),
            (49, OUTSIDE, 59, OUTSIDE)
        );
        v.mirror();
        let p = Placement::new(&v, (60, 50), (120, 100));
        assert_eq!(
            p.place_box([10.0, 5.0, 20.0, 15.0]),
            [100.0, 5.0, 110.0, 15.0]
        );
        let (_, columns) = p.nearest();
        assert_eq!((columns[59], columns[60], columns[119]), (OUTSIDE, 59, 0));
    }

    #[test]
    fn motions_move_what_the_geometry_placed_in_order() {
        // 200x100 resized to 100x50, then flipped upside down, then turned by 180.
        let mut v = view(200, 100);
        (v.w, v.h) = (100.0, 50.0);
        let p = Placement::new(&v, (200, 100), (100, 50));
        assert_eq!(p.moved_pixels(), None);
        let flipped = p.clone().moved(vec![Motion::FlipRows]);
        assert_eq!(
            flipped.place_box([10.0, 20.0, 50.0, 60.0]),
            [5.0, 20.0, 25.0, 40.0]
        );
        assert_eq!(flipped.place_point(30.0, 40.0), [15.0, 29.0]);
        let moved = flipped.moved_pixels().unwrap();
        assert_eq!((moved[0], moved[49 * 100 + 3]), (49 * 100, 3));
        // The flip then a half turn: a mirror left-right of the geometry's output.
        let turned = p.moved(vec![Motion::FlipRows, Motion::Rotation(180.0)]);
        let b = turned.place_box([10.0, 20.0, 50.0, 60.0]);
        let want = [75.0, 10.0, 95.0, 30.0];
        assert!(
            b.iter().zip(want).all(|(a, w)| (a - w).abs() < 1e-4),
            "{b:?}"
        );
        let moved = turned.moved_pixels().unwrap();
        assert_eq!((moved[0], moved[101]), (99, 198));
        let mut mask: Vec<u8> = (0..5000).map(|i| (i % 100) as u8).collect();
        follow_motions(&moved, 7, &mut mask);
        assert_eq!(&mask[..3], &[99, 98, 97]);
    }

    #[test]
    fn sanitize_keeps_what_v2_keeps() {
        let canvas = (100, 50);
        assert!(sanitize([0.0, 0.0, 100.0, 50.0], canvas, 1.0, 1.0));
        assert!(!sanitize([0.0, 0.0, 0.5, 50.0], canvas, 1.0, 1.0));
        assert!(!sanitize([0.0, 0.0, 101.0, 50.0], canvas, 1.0, 1.0));
        assert!(!sanitize([-1.0, 0.0, 10.0, 10.0], canvas, 1.0, 1.0));
        assert!(!sanitize([0.0, 0.0, f64::NAN, 10.0], canvas, 1.0, 1.0));
        assert!(!sanitize([0.0, 0.0, 3.0, 3.0], canvas, 1.0, 10.0));
        assert!(sanitize([0.0, 0.0, 4.0, 3.0], canvas, 3.0, 10.0));
    }
}
