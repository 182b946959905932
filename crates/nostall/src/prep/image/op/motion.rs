//! [`Motion`]: how an operator on pixels moved them after the geometry (a vertical flip,
//! a rotation, an affine warp, a perspective), for the targets that follow the pixels.
//!
//! Each is torchvision.transforms.v2's kernel for the target's type, on the output's
//! canvas: a box's four corners through the forward matrix, the box around them, clamped
//! to the canvas (`_affine_bounding_boxes_with_expand`; a perspective's corners through
//! its inverse, `perspective_bounding_boxes`; a vertical flip neither turns nor clamps); a
//! point through the same map (a vertical flip takes it to `h - 1 - y`, a
//! pixel's index, as v2's horizontal flip does); a mask read where the image's pixels
//! were read, nearest (v2 moves a `Mask` with the image's kernel, `NEAREST`). A rotation
//! with `expand=True` moves the canvas too: boxes and points shifted by the turned
//! canvas's top left corner, boxes clamped to the canvas v2 computes for them, the mask
//! onto the image's grown size.

use super::affine::{forward_matrix, inverse_matrix, nearest_sources, nearest_sources_onto, Draw};
use super::random_perspective;
use super::rotation::{affine_output_size, expanded_turning, turning, Turning};
use crate::prep::image::OUTSIDE;

/// How an operator on pixels moved one sample's pixels, drawn as its kernel drew it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Motion {
    /// The rows in reverse order (`RandomVerticalFlip`).
    FlipRows,
    /// Turned anticlockwise by this many degrees about the centre (`RandomRotation`).
    Rotation(f64),
    /// Turned as [`Motion::Rotation`] onto a canvas grown to hold the whole turned image
    /// (`RandomRotation(expand=True)`).
    Expanded(f64),
    /// Warped by these draws about the centre (`RandomAffine`).
    Affine(Draw),
    /// Warped by the perspective of these coefficients, from an output point to its source
    /// (`RandomPerspective`: v2's `coefficients`).
    Perspective([f32; 8]),
}

/// How a motion maps a point of the canvas before it to the canvas after it, in 32-bit
/// floats as v2 moves float32 boxes and points.
enum Map {
    /// Through a 2 × 3 matrix.
    Affine([f32; 6]),
    /// Through a 2 × 3 matrix, then less this point (a grown canvas's top left corner).
    Shifted([f32; 6], [f32; 2]),
    /// Through a perspective's numerators (6) and denominator (2, and 1).
    Perspective([f32; 8]),
}

impl Map {
    /// Point `p` through the map, as v2's `matmul` of `(x, y, 1)` and its transpose sums it.
    fn apply(&self, [x, y]: [f32; 2]) -> [f32; 2] {
        match *self {
            Map::Affine(m) => [x * m[0] + y * m[1] + m[2], x * m[3] + y * m[4] + m[5]],
            Map::Shifted(m, [tx, ty]) => {
                let [x, y] = Map::Affine(m).apply([x, y]);
                [x - tx, y - ty]
            }
            Map::Perspective(t) => {
                let den = x * t[6] + y * t[7] + 1.0;
                let nx = x * t[0] + y * t[1] + t[2];
                let ny = x * t[3] + y * t[4] + t[5];
                [nx / den, ny / den]
            }
        }
    }
}

/// v2's `_compute_perspective_thetas`: the forward perspective (source point to output
/// point) of coefficients `c` (output to source), in 64-bit floats from the 32-bit
/// coefficients, rounded to 32 bits.
fn forward_perspective(c: [f32; 8]) -> [f32; 8] {
    let c = c.map(f64::from);
    let denom = c[0] * c[4] - c[1] * c[3];
    [
        (c[4] - c[5] * c[7]) / denom,
        (-c[1] + c[2] * c[7]) / denom,
        (c[1] * c[5] - c[2] * c[4]) / denom,
        (-c[3] + c[5] * c[6]) / denom,
        (c[0] - c[2] * c[6]) / denom,
        (-c[0] * c[5] + c[2] * c[3]) / denom,
        (-c[4] * c[6] + c[3] * c[7]) / denom,
        (-c[0] * c[7] + c[1] * c[6]) / denom,
    ]
    .map(|v| v as f32)
}

impl Motion {
    /// v2's map of a rotation, a warp or a perspective on a canvas of `size` (width,
    /// height); `None` for a flip.
    fn map(&self, (w, h): (u32, u32)) -> Option<Map> {
        let center = [f64::from(w) * 0.5, f64::from(h) * 0.5];
        let m = match *self {
            Motion::FlipRows => return None,
            // v2's rotate_bounding_boxes: the affine one of `-angle`.
            Motion::Rotation(angle) => forward_matrix(center, -angle, [0.0; 2], 1.0, [0.0; 2]),
            Motion::Expanded(angle) => {
                // v2's `_affine_bounding_boxes_with_expand`: the canvas's corners through
                // the matrix, the least x and y its new origin.
                let m = forward_matrix(center, -angle, [0.0; 2], 1.0, [0.0; 2]).map(|v| v as f32);
                let (w, h) = (w as f32, h as f32);
                let corners =
                    [[0.0, 0.0], [0.0, h], [w, h], [w, 0.0]].map(|p| Map::Affine(m).apply(p));
                let least = |axis: usize| {
                    corners
                        .iter()
                        .map(|p| p[axis])
                        .fold(f32::INFINITY, f32::min)
                };
                return Some(Map::Shifted(m, [least(0), least(1)]));
            }
            Motion::Affine(d) => forward_matrix(center, d.angle, d.translate, d.scale, d.shear),
            Motion::Perspective(c) => return Some(Map::Perspective(forward_perspective(c))),
        };
        Some(Map::Affine(m.map(|v| v as f32)))
    }

    /// The width and height of the canvas after the motion, of one of `size` before it:
    /// the same, or a rotation's grown size.
    pub(crate) fn size_after(&self, size: (u32, u32)) -> (u32, u32) {
        match *self {
            Motion::Expanded(angle) => {
                let (_, (w, h)) = expanded_turning(angle, (size.0 as usize, size.1 as usize));
                (w as u32, h as u32)
            }
            _ => size,
        }
    }

    /// The canvas v2 clamps moved boxes to: the canvas after the motion, but for a
    /// rotation with `expand=True` the size v2 computes for boxes, from the inverse
    /// matrix about the canvas's centre in pixels (not about the origin, as for the
    /// image), which may differ from the image's by a pixel.
    pub(crate) fn box_canvas(&self, size: (u32, u32)) -> (u32, u32) {
        match *self {
            Motion::Expanded(angle) => {
                let (w, h) = (f64::from(size.0), f64::from(size.1));
                let m = inverse_matrix([w * 0.5, h * 0.5], -angle, [0.0; 2], 1.0, [0.0; 2]);
                let (w, h) = affine_output_size(m, size.0 as usize, size.1 as usize);
                (w as u32, h as u32)
            }
            _ => size,
        }
    }

    /// Box `[x0, y0, x1, y1]` on a canvas of `size` (width, height) as the motion moves it.
    pub(crate) fn move_box(&self, b: [f64; 4], size: (u32, u32)) -> [f64; 4] {
        let Some(m) = self.map(size) else {
            let h = f64::from(size.1);
            return [b[0], h - b[3], b[2], h - b[1]];
        };
        let [x0, y0, x1, y1] = b.map(|v| v as f32);
        let corners = [[x0, y0], [x1, y0], [x1, y1], [x0, y1]].map(|p| m.apply(p));
        let canvas = self.box_canvas(size);
        let (w, h) = (canvas.0 as f32, canvas.1 as f32);
        let low = |axis: usize| {
            corners
                .iter()
                .map(|p| p[axis])
                .fold(f32::INFINITY, f32::min)
        };
        let high = |axis: usize| {
            corners
                .iter()
                .map(|p| p[axis])
                .fold(f32::NEG_INFINITY, f32::max)
        };
        [
            low(0).clamp(0.0, w),
            low(1).clamp(0.0, h),
            high(0).clamp(0.0, w),
            high(1).clamp(0.0, h),
        ]
        .map(f64::from)
    }

    /// Point `[x, y]` on a canvas of `size` (width, height) as the motion moves it (not
    /// clamped: it may leave the canvas).
    pub(crate) fn move_point(&self, [x, y]: [f64; 2], size: (u32, u32)) -> [f64; 2] {
        match self.map(size) {
            None => [x, f64::from(size.1) - 1.0 - y],
            Some(m) => m.apply([x as f32, y as f32]).map(f64::from),
        }
    }

    /// For each pixel of the canvas after the motion (row-major, [`Motion::size_after`]
    /// of `size`, width and height), the index of the pixel of the canvas of `size`
    /// before it that it shows, [`OUTSIDE`] where it shows none (the fill): the image's
    /// kernel, read nearest.
    pub(crate) fn sources(&self, (width, height): (u32, u32)) -> Vec<u32> {
        let (w, h) = (width as usize, height as usize);
        let exact = |at: fn(usize, usize, usize, usize) -> (usize, usize),
                     (ow, oh): (usize, usize)| {
            (0..oh)
                .flat_map(|y| (0..ow).map(move |x| (x, y)))
                .map(|(x, y)| {
                    let (sx, sy) = at(x, y, w, h);
                    (sy * w + sx) as u32
                })
                .collect()
        };
        match *self {
            Motion::FlipRows => exact(|x, y, _, h| (x, h - 1 - y), (w, h)),
            Motion::Rotation(angle) => match turning(angle, w == h) {
                None => (0..(w * h) as u32).collect(),
                Some(Turning::Exact(at)) => exact(at, (w, h)),
                Some(Turning::Warp(matrix)) => nearest_sources(w, h, matrix),
            },
            Motion::Expanded(angle) => match expanded_turning(angle, (w, h)) {
                (None, _) => (0..(w * h) as u32).collect(),
                (Some(Turning::Exact(at)), size) => exact(at, size),
                (Some(Turning::Warp(matrix)), size) => nearest_sources_onto((w, h), size, matrix),
            },
            Motion::Affine(d) => {
                let matrix = inverse_matrix([0.0, 0.0], d.angle, d.translate, d.scale, d.shear);
                nearest_sources(w, h, matrix)
            }
            Motion::Perspective(c) => random_perspective::nearest_sources(w, h, c),
        }
    }
}

/// Each pixel of a mask moved by `motions` in turn from a canvas of `size`: for each pixel
/// after them (on the canvas they leave, [`Motion::size_after`]), the index of the pixel
/// before them it shows, [`OUTSIDE`] where none; `None` without a motion.
pub(crate) fn composed_sources(motions: &[Motion], size: (u32, u32)) -> Option<Vec<u32>> {
    let (first, rest) = motions.split_first()?;
    let mut shown = first.sources(size);
    let mut size = first.size_after(size);
    for motion in rest {
        let before = size;
        size = motion.size_after(size);
        shown = motion
            .sources(before)
            .iter()
            .map(|&i| {
                if i == OUTSIDE {
                    OUTSIDE
                } else {
                    shown[i as usize]
                }
            })
            .collect();
    }
    Some(shown)
}

#[cfg(test)]
mod tests {
    use super::super::affine::{warp, Interpolation};
    use super::super::rotation::rotate;
    use super::super::Planes;
    use super::*;

    #[test]
    fn a_vertical_flip_mirrors_box_edges_at_h_and_points_at_h_minus_1() {
        let flip = Motion::FlipRows;
        assert_eq!(
            flip.move_box([1.0, 2.0, 5.0, 7.0], (10, 20)),
            [1.0, 13.0, 5.0, 18.0]
        );
        assert_eq!(flip.move_point([3.0, 4.0], (10, 20)), [3.0, 15.0]);
        assert_eq!(flip.sources((2, 3)), [4, 5, 2, 3, 0, 1]);
    }

    #[test]
    fn a_quarter_turn_moves_corners_about_the_centre_and_clamps_to_the_canvas() {
        // 100x100, 90 degrees anticlockwise: (x, y) -> (y, 100 - x).
        let turn = Motion::Rotation(90.0);
        let b = turn.move_box([10.0, 20.0, 30.0, 60.0], (100, 100));
        let want = [20.0, 70.0, 60.0, 90.0];
        assert!(
            b.iter().zip(want).all(|(a, w)| (a - w).abs() < 1e-4),
            "{b:?}"
        );
        let p = turn.move_point([10.0, 20.0], (100, 100));
        assert!(
            (p[0] - 20.0).abs() < 1e-4 && (p[1] - 90.0).abs() < 1e-4,
            "{p:?}"
        );
        // Turned past the canvas: clamped to it.
        let b = turn.move_box([-10.0, 20.0, 30.0, 60.0], (100, 100));
        assert!((b[3] - 100.0).abs() < 1e-9, "{b:?}");
        // 30 degrees: the box around the turned corners is larger than the box.
        let b = Motion::Rotation(30.0).move_box([40.0, 40.0, 60.0, 60.0], (100, 100));
        let side = 20.0 * (30f64.to_radians().cos() + 30f64.to_radians().sin());
        assert!(((b[2] - b[0]) - side).abs() < 1e-3, "{b:?}");
    }

    #[test]
    fn a_square_quarter_turn_reads_masks_as_torch_rot90() {
        // 2x2: rot90(k=1) of [[0, 1], [2, 3]] is [[1, 3], [0, 2]].
        assert_eq!(Motion::Rotation(90.0).sources((2, 2)), [1, 3, 0, 2]);
        // A flip then the turn: the turn reads the flipped mask.
        let both = composed_sources(&[Motion::FlipRows, Motion::Rotation(90.0)], (2, 2));
        assert_eq!(both.unwrap(), [3, 1, 2, 0]);
        assert_eq!(composed_sources(&[], (2, 2)), None);
    }

    /// The image's pixels moved by `motion` as its operator moves them: `kernel` on three
    /// planes of `width` × `height`, each pixel's value its index (mod 251), fill 255.
    fn kernel_reads(width: usize, height: usize, kernel: impl Fn(&mut Planes<'_>)) -> Vec<u8> {
        let mut data: Vec<u8> = (0..3 * width * height).map(|i| (i % 251) as u8).collect();
        kernel(&mut Planes {
            data: &mut data,
            width,
            height,
        });
        data.truncate(width * height);
        data
    }

    /// What a mask of the same values reads through `motion`'s sources.
    fn mask_reads(width: usize, height: usize, motion: Motion) -> Vec<u8> {
        let sources = motion.sources((width as u32, height as u32));
        sources
            .iter()
            .map(|&i| if i == OUTSIDE { 255 } else { (i % 251) as u8 })
            .collect()
    }

    #[test]
    fn a_mask_reads_exactly_where_the_nearest_kernel_read_its_image() {
        let nearest = Interpolation::Nearest;
        for (width, height, angle) in [
            (37, 23, 30.0),
            (23, 23, 90.0),
            (23, 23, -90.0),
            (37, 23, 90.0),
            (16, 9, 180.0),
        ] {
            let pixels = kernel_reads(width, height, |image| {
                rotate(image, angle, nearest, Some([255.0; 3]))
            });
            let mask = mask_reads(width, height, Motion::Rotation(angle));
            assert_eq!(pixels, mask, "{width}x{height} by {angle}");
        }
        let draw = Draw {
            angle: -17.5,
            translate: [3.0, -2.0],
            scale: 0.8,
            shear: [6.0, -4.0],
        };
        let pixels = kernel_reads(41, 29, |image| {
            let m = inverse_matrix(
                [0.0, 0.0],
                draw.angle,
                draw.translate,
                draw.scale,
                draw.shear,
            );
            warp(image, m, nearest, Some([255.0; 3]))
        });
        assert_eq!(pixels, mask_reads(41, 29, Motion::Affine(draw)));
        let c = random_perspective::coefficients([[5, 2], [38, 6], [35, 27], [1, 24]], 41, 29);
        let pixels = kernel_reads(41, 29, |image| {
            random_perspective::perspective(image, c, nearest, Some([255.0; 3]))
        });
        assert_eq!(pixels, mask_reads(41, 29, Motion::Perspective(c)));
        let flipped = kernel_reads(5, 4, |image| image.turn(|x, y, _, h| (x, h - 1 - y)));
        assert_eq!(flipped, mask_reads(5, 4, Motion::FlipRows));
    }

    #[test]
    fn an_affine_moves_a_box_by_v2s_forward_matrix() {
        // Scale 2 about the centre of 100x60, translated by (5, -3): x -> 2x - 50 + 5.
        let draw = Draw {
            angle: 0.0,
            translate: [5.0, -3.0],
            scale: 2.0,
            shear: [0.0, 0.0],
        };
        let b = Motion::Affine(draw).move_box([30.0, 20.0, 60.0, 50.0], (100, 60));
        assert_eq!(b, [15.0, 7.0, 75.0, 60.0]);
        let p = Motion::Affine(draw).move_point([30.0, 20.0], (100, 60));
        assert_eq!(p, [15.0, 7.0]);
    }

    #[test]
    fn a_perspective_takes_box_corners_to_the_moved_image_corners() {
        // The corners of a 50 x 34 image go to these points: a box on the image's corner
        // pixels lands on the box around them.
        let corners = [[3, 1], [40, 4], [45, 30], [2, 27]];
        let c = random_perspective::coefficients(corners, 50, 34);
        let b = Motion::Perspective(c).move_box([0.0, 0.0, 49.0, 33.0], (50, 34));
        let want = [2.0, 1.0, 45.0, 30.0];
        assert!(
            b.iter().zip(want).all(|(a, w)| (a - w).abs() < 1e-3),
            "{b:?}"
        );
        let p = Motion::Perspective(c).move_point([49.0, 0.0], (50, 34));
        assert!(
            (p[0] - 40.0).abs() < 1e-3 && (p[1] - 4.0).abs() < 1e-3,
            "{p:?}"
        );
    }
}
