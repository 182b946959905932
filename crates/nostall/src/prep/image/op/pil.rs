//! PIL's kernels on 8-bit RGB images, as Pillow computes them: the ones timm's
//! augmentations call (`Image.transform` and `Image.rotate`, `ImageEnhance`, `ImageOps`,
//! `ImageFilter.GaussianBlur`).
//!
//! Each repeats Pillow's arithmetic (its C library, libImaging, and the Python around it)
//! operation by operation, in the same types and order, so that its output is Pillow's
//! byte for byte: the affine sampling in 64-bit floats through `Geometry.c`'s bilinear
//! and bicubic filters, truncated; `Image.blend` (every `ImageEnhance`) in 32-bit floats,
//! truncated, clipped only when extrapolating (`Blend.c`); the RGB to L conversion in
//! 16.16 fixed point (`Convert.c`); the `SMOOTH` filter in 32-bit floats (`Filter.c`); the
//! Gaussian blur as three extended box blurs in 8.24 fixed point (`BoxBlur.c`); the
//! `ImageOps` functions as the lookup tables they build. Pillow works on interleaved
//! pixels and nostall on planes; every kernel here treats each channel alike, as Pillow
//! does, so the layout changes nothing.

#[cfg(target_arch = "x86_64")]
use super::pil_affine_avx2;
use super::simd::{cast_u8, cast_u8_f64, cast_u8_f64_lanes, dispatched};
use super::{equalize, Planes};

/// A resampling filter of PIL's `Image.transform` and `Image.rotate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resample {
    /// `Image.BILINEAR`: the 2 × 2 nearest pixels, weighted.
    Bilinear,
    /// `Image.BICUBIC`: the 4 × 4 nearest pixels, by PIL's cubic convolution.
    Bicubic,
}

/// `image.transform(image.size, Image.AFFINE, a, resample, fillcolor=fill)`: each output
/// pixel `(x, y)` takes the source at `(a0·(x + ½) + a1·(y + ½) + a2, a3·(x + ½) + a4·(y +
/// ½) + a5)` (PIL's `affine_transform`), sampled by `resample`; where that point is outside
/// the image, the pixel is `fill` (the colour the output image was made with). Written in
/// AVX2 intrinsics where the CPU has it ([`pil_affine_avx2`]), the same bytes.
pub(super) fn affine(image: &mut Planes<'_>, a: [f64; 6], resample: Resample, fill: [u8; 3]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(avx2) = pil_affine_avx2::Avx2::detect() {
        return pil_affine_avx2::affine(avx2, image, a, resample, fill);
    }
    affine_planes(image, a, resample, fill);
}

/// [`affine`] for any CPU, in plain loops written to be vectorised.
fn affine_planes(image: &mut Planes<'_>, a: [f64; 6], resample: Resample, fill: [u8; 3]) {
    let (width, height) = (image.width, image.height);
    let area = image.area();
    if area == 0 {
        return;
    }
    let source = image.data[..3 * area].to_vec();
    let planes: [&[u8]; 3] = [
        &source[..area],
        &source[area..2 * area],
        &source[2 * area..3 * area],
    ];
    let out = &mut image.data[..3 * area];
    for y in 0..height {
        let yin = y as f64 + 0.5;
        let mut x = 0;
        while x < width {
            // Four pixels at once where they all sample inside the image, away from its
            // edges (or all take the fill); one at a time where they do not.
            let lanes = if x + LANES <= width {
                let (mut sx, mut sy) = ([0.0; LANES], [0.0; LANES]);
                for k in 0..LANES {
                    let xin = (x + k) as f64 + 0.5;
                    sx[k] = a[0] * xin + a[1] * yin + a[2];
                    sy[k] = a[3] * xin + a[4] * yin + a[5];
                }
                Some(Quad::at(sx, sy, width, height, resample))
            } else {
                None
            };
            let i = y * width + x;
            match lanes {
                Some(Some(Quad::Outside)) => {
                    for (c, &value) in fill.iter().enumerate() {
                        out[c * area + i..][..LANES].fill(value);
                    }
                }
                Some(Some(Quad::Inside(quad))) => {
                    for (c, plane) in planes.iter().enumerate() {
                        out[c * area + i..][..LANES]
                            .copy_from_slice(&quad.of(plane, width, resample));
                    }
                }
                _ => {
                    let last = if lanes.is_some() { x + LANES } else { width };
                    for x in x..last {
                        pixel(out, &planes, a, [x, y, width, height], resample, fill);
                    }
                    x = last;
                    continue;
                }
            }
            x += LANES;
        }
    }
}

/// How many output pixels [`Quad`] samples at once: four 64-bit floats, one AVX2 vector.
const LANES: usize = 4;

/// One output pixel of [`affine`] alone (where its neighbours do not all sample inside).
#[inline(always)]
fn pixel(
    out: &mut [u8],
    planes: &[&[u8]; 3],
    a: [f64; 6],
    [x, y, width, height]: [usize; 4],
    resample: Resample,
    fill: [u8; 3],
) {
    let area = width * height;
    let (xin, yin) = (x as f64 + 0.5, y as f64 + 0.5);
    let sx = a[0] * xin + a[1] * yin + a[2];
    let sy = a[3] * xin + a[4] * yin + a[5];
    let i = y * width + x;
    // The filters refuse a point outside the image before moving it by half a pixel
    // (`xin < 0.0 || xin >= im->xsize`, likewise y).
    if !(sx >= 0.0 && sx < width as f64 && sy >= 0.0 && sy < height as f64) {
        for (c, &value) in fill.iter().enumerate() {
            out[c * area + i] = value;
        }
        return;
    }
    let taps = Taps::at(sx, sy, width, height, resample);
    for (c, plane) in planes.iter().enumerate() {
        out[c * area + i] = taps.of(plane, resample);
    }
}

/// Where [`LANES`] neighbouring output pixels sample the source, when they can be sampled
/// together.
enum Quad {
    /// Every one outside the image: the fill.
    Outside,
    /// Every one inside, its taps all inside too (none clipped to an edge).
    Inside(Lanes),
}

/// [`LANES`] pixels' first taps (the offset of their top-left source pixel) and their
/// distances from it, as [`Taps`] has them for one.
struct Lanes {
    first: [usize; LANES],
    dx: [f64; LANES],
    dy: [f64; LANES],
}

impl Quad {
    /// The pixels sampling the source at `(sx, sy)` (each before the half-pixel shift),
    /// or `None` where they must be taken one by one: some inside and some not, or a tap
    /// clipped to an edge. (Loops, not closures: a closure is not always inlined into the
    /// AVX2 copy of the kernel.)
    #[inline(always)]
    fn at(
        sx: [f64; LANES],
        sy: [f64; LANES],
        width: usize,
        height: usize,
        resample: Resample,
    ) -> Option<Quad> {
        let (w, h) = (width as f64, height as f64);
        let (mut inside, mut outside) = (true, true);
        for k in 0..LANES {
            // `&`, not `&&`: four comparisons of a vector each, no branch.
            let within = (sx[k] >= 0.0) & (sx[k] < w) & (sy[k] >= 0.0) & (sy[k] < h);
            inside &= within;
            outside &= !within;
        }
        if outside {
            return Some(Quad::Outside);
        }
        // The rows sampled; the columns are read as four-byte words, whichever the filter.
        let (back, rows) = match resample {
            Resample::Bilinear => (0.0, 2.0),
            Resample::Bicubic => (1.0, 4.0),
        };
        let mut lanes = Lanes {
            first: [0; LANES],
            dx: [0.0; LANES],
            dy: [0.0; LANES],
        };
        let mut fits = inside;
        for k in 0..LANES {
            let (px, py) = (sx[k] - 0.5, sy[k] - 0.5);
            let (fx, fy) = (px.floor(), py.floor());
            lanes.dx[k] = px - fx;
            lanes.dy[k] = py - fy;
            let (left, top) = (fx - back, fy - back);
            fits &= (left >= 0.0) & (left + 4.0 <= w) & (top >= 0.0) & (top + rows <= h);
            // A whole number below 2^53 (where it fits), exact; where it does not fit, never
            // read.
            lanes.first[k] = (top * w + left) as usize;
        }
        fits.then_some(Quad::Inside(lanes))
    }
}

impl Lanes {
    /// The four source values from each pixel's first tap on the row `r` rows below it, as
    /// one word a pixel (the lowest byte the leftmost value).
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    fn row(&self, plane: &[u8], width: usize, r: usize) -> [u32; LANES] {
        let mut words = [0; LANES];
        for k in 0..LANES {
            let at = self.first[k] + r * width;
            // One load and one bounds check (four bytes indexed alone take four of each).
            let word: [u8; 4] = plane[at..at + 4].try_into().expect("four bytes");
            words[k] = u32::from_le_bytes(word);
        }
        words
    }

    /// Each pixel's value `c` places into its word of [`Lanes::row`]. (Shifted out of
    /// words loaded together, not loaded one byte at a time: the shift, the mask and the
    /// conversion each take one instruction for every lane.)
    #[inline(always)]
    fn value(words: [u32; LANES], c: u32) -> [f64; LANES] {
        let mut v = [0.0; LANES];
        for k in 0..LANES {
            v[k] = f64::from(((words[k] >> (8 * c)) & 0xFF) as i32);
        }
        v
    }

    /// The cubic along the row `r` rows below each pixel's first tap.
    #[inline(always)]
    fn along(&self, plane: &[u8], width: usize, r: usize) -> [f64; LANES] {
        let words = self.row(plane, width, r);
        cubic_lanes(
            Self::value(words, 0),
            Self::value(words, 1),
            Self::value(words, 2),
            Self::value(words, 3),
            self.dx,
        )
    }

    /// The pixels' values in `plane` (of `width` columns), each as [`Taps::of`] computes
    /// it, lane by lane.
    #[inline(always)]
    fn of(&self, plane: &[u8], width: usize, resample: Resample) -> [u8; LANES] {
        let mut v = [0.0; LANES];
        match resample {
            Resample::Bilinear => {
                // Two taps a row: the words' first two bytes.
                let (a, b) = (self.row(plane, width, 0), self.row(plane, width, 1));
                let (a0, a1) = (Self::value(a, 0), Self::value(a, 1));
                let (b0, b1) = (Self::value(b, 0), Self::value(b, 1));
                for k in 0..LANES {
                    let v1 = a0[k] + (a1[k] - a0[k]) * self.dx[k];
                    let v2 = b0[k] + (b1[k] - b0[k]) * self.dx[k];
                    v[k] = v1 + (v2 - v1) * self.dy[k];
                }
            }
            // As in `Taps::of`: along one axis only when the other's distances are all 0.
            Resample::Bicubic if self.dy == [0.0; LANES] => v = self.along(plane, width, 1),
            Resample::Bicubic if self.dx == [0.0; LANES] => {
                v = cubic_lanes(
                    Self::value(self.row(plane, width, 0), 1),
                    Self::value(self.row(plane, width, 1), 1),
                    Self::value(self.row(plane, width, 2), 1),
                    Self::value(self.row(plane, width, 3), 1),
                    self.dy,
                );
            }
            Resample::Bicubic => {
                v = cubic_lanes(
                    self.along(plane, width, 0),
                    self.along(plane, width, 1),
                    self.along(plane, width, 2),
                    self.along(plane, width, 3),
                    self.dy,
                );
            }
        }
        cast_u8_f64_lanes(v)
    }
}

/// [`cubic`] on [`LANES`] values at once, each at its own distance.
#[inline(always)]
fn cubic_lanes(
    v1: [f64; LANES],
    v2: [f64; LANES],
    v3: [f64; LANES],
    v4: [f64; LANES],
    d: [f64; LANES],
) -> [f64; LANES] {
    let mut out = [0.0; LANES];
    for k in 0..LANES {
        out[k] = cubic(v1[k], v2[k], v3[k], v4[k], d[k]);
    }
    out
}

/// Where one output pixel samples the source (`BILINEAR_HEAD` and `BICUBIC_HEAD`): the
/// offsets of the rows and columns it reads (2 or 4 of each) and the point's distances
/// from the first pixel's. A column outside the image is its edge's (`XCLIP`); the first
/// row is clipped likewise (`YCLIP`), and a later row outside the image repeats the row
/// before it (the filters reuse the value they computed for that row).
struct Taps {
    rows: [usize; 4],
    columns: [usize; 4],
    dx: f64,
    dy: f64,
}

impl Taps {
    #[inline(always)]
    fn at(sx: f64, sy: f64, width: usize, height: usize, resample: Resample) -> Taps {
        let (sx, sy) = (sx - 0.5, sy - 0.5);
        let (fx, fy) = (sx.floor(), sy.floor());
        let back = match resample {
            Resample::Bilinear => 0,
            Resample::Bicubic => 1,
        };
        let (x, y) = (fx as i64 - back, fy as i64 - back);
        let (w, h) = (width as i64, height as i64);
        let columns = [0, 1, 2, 3].map(|k| (x + k).clamp(0, w - 1) as usize);
        let mut rows = [y.clamp(0, h - 1) as usize * width; 4];
        for k in 1..4 {
            let row = y + k as i64;
            rows[k] = if (0..h).contains(&row) {
                row as usize * width
            } else {
                rows[k - 1]
            };
        }
        Taps {
            rows,
            columns,
            dx: sx - fx,
            dy: sy - fy,
        }
    }

    /// The value of `plane` there.
    #[inline(always)]
    fn of(&self, plane: &[u8], resample: Resample) -> u8 {
        let [c0, c1, c2, c3] = self.columns;
        let value = |row: usize, column: usize| f64::from(plane[row + column]);
        match resample {
            Resample::Bilinear => {
                let along = |row: usize| {
                    let a = value(row, c0);
                    a + (value(row, c1) - a) * self.dx
                };
                let (v1, v2) = (along(self.rows[0]), along(self.rows[1]));
                // In [0, 255]: truncated.
                cast_u8_f64(v1 + (v2 - v1) * self.dy)
            }
            // A shear or translation along one axis leaves the other's distance 0, and a
            // cubic at 0 is its second value exactly (`p1 + 0·(…)`): one row's cubic, or
            // one column's, gives what the sixteen taps would.
            Resample::Bicubic if self.dy == 0.0 => {
                let row = self.rows[1];
                let v = cubic(
                    value(row, c0),
                    value(row, c1),
                    value(row, c2),
                    value(row, c3),
                    self.dx,
                );
                cast_u8_f64(v)
            }
            Resample::Bicubic if self.dx == 0.0 => {
                let [r0, r1, r2, r3] = self.rows;
                let v = cubic(
                    value(r0, c1),
                    value(r1, c1),
                    value(r2, c1),
                    value(r3, c1),
                    self.dy,
                );
                cast_u8_f64(v)
            }
            Resample::Bicubic => {
                // The four rows' cubics along x, lane by lane (each lane PIL's arithmetic).
                let v = cubic_lanes(
                    self.rows.map(|r| value(r, c0)),
                    self.rows.map(|r| value(r, c1)),
                    self.rows.map(|r| value(r, c2)),
                    self.rows.map(|r| value(r, c3)),
                    [self.dx; 4],
                );
                let v = cubic(v[0], v[1], v[2], v[3], self.dy);
                // `bicubic_filter32RGB`: clipped, else truncated.
                cast_u8_f64(v)
            }
        }
    }
}

/// PIL's `BICUBIC` macro: the cubic through `v1..v4` at `d` past `v2`, its terms in PIL's
/// order (exact for the first pass, whose inputs are bytes, as PIL's integer terms are).
#[inline(always)]
fn cubic(v1: f64, v2: f64, v3: f64, v4: f64, d: f64) -> f64 {
    let p1 = v2;
    let p2 = -v1 + v3;
    let p3 = 2.0 * (v1 - v2) + v3 - v4;
    let p4 = -v1 + v2 - v3 + v4;
    p1 + d * (p2 + d * (p3 + d * p4))
}

/// `image.rotate(degrees, resample, fillcolor=fill)`: anticlockwise by `degrees` about
/// the image's centre, keeping its size. As `Image.rotate`: the angle taken modulo 360;
/// 0 a copy, 180 (and 90 and 270 on a square image) exact turns; else the affine
/// transform of the inverse rotation, each coefficient rounded to 15 decimals.
pub(super) fn rotate(image: &mut Planes<'_>, degrees: f64, resample: Resample, fill: [u8; 3]) {
    // Python's `angle % 360.0`, rounding alike (a tiny negative angle is 360.0).
    let angle = degrees.rem_euclid(360.0);
    let (width, height) = (image.width, image.height);
    let square = width == height;
    if angle == 0.0 {
        return;
    }
    if angle == 180.0 {
        return image.turn(|x, y, w, h| (w - 1 - x, h - 1 - y));
    }
    if angle == 90.0 && square {
        // `Transpose.ROTATE_90`: out[y][x] = in[x][w - 1 - y].
        return image.turn(|x, y, w, _| (w - 1 - y, x));
    }
    if angle == 270.0 && square {
        // `Transpose.ROTATE_270`: out[y][x] = in[h - 1 - x][y].
        return image.turn(|x, y, _, h| (y, h - 1 - x));
    }
    let (cx, cy) = (width as f64 / 2.0, height as f64 / 2.0);
    let angle = -angle.to_radians();
    let (cos, sin) = (round15(angle.cos()), round15(angle.sin()));
    let (a, b, d, e) = (cos, sin, round15(-angle.sin()), cos);
    // `transform(-cx, -cy, matrix)`, `a·x + b·y + 0.0` (the 0.0 changes no value the
    // centre, added next, can tell apart), then the centre added back.
    let c = (a * -cx + b * -cy) + cx;
    let f = (d * -cx + e * -cy) + cy;
    affine(image, [a, b, c, d, e, f], resample, fill);
}

/// Python's `round(v, 15)`: the nearest decimal with 15 digits after the point (correctly
/// rounded both ways, as CPython's dtoa and Rust's formatting and parsing are).
fn round15(v: f64) -> f64 {
    format!("{v:.15}").parse().unwrap_or(v)
}

/// `Image.blend(degenerate, image, factor)` for one value (`Blend.c`): `d + α·(v − d)` in
/// 32-bit floats (α the factor rounded to 32 bits), truncated; clipped to [0, 255] when α
/// is outside [0, 1] (inside, the value cannot leave it): [`cast_u8`] is both the
/// truncation and the clipping.
#[inline(always)]
fn blend(degenerate: u8, value: u8, alpha: f32) -> u8 {
    let d = f32::from(degenerate);
    cast_u8(d + alpha * (i32::from(value) - i32::from(degenerate)) as f32)
}

/// PIL's RGB to L conversion (`Convert.c`'s `L24`): `(19595·r + 38470·g + 7471·b +
/// 0x8000) >> 16`.
#[inline(always)]
pub(super) fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

dispatched! {
    /// `ImageEnhance.Color(image).enhance(factor)`: each value blended with its pixel's L
    /// (the image converted to L and back).
    pub(super) fn color(image: &mut Planes<'_>, factor: f64)
        => color_body
}

#[inline(always)]
fn color_body(image: &mut Planes<'_>, factor: f64) {
    let alpha = factor as f32;
    image.map_pixels(|r, g, b| {
        let gray = luma(r, g, b);
        [r, g, b].map(|v| blend(gray, v, alpha))
    });
}

dispatched! {
    /// `ImageEnhance.Contrast(image).enhance(factor)`: each value blended with the mean of the
    /// image's L, `int(mean + 0.5)` (`ImageStat`'s mean: the exact sum over the count,
    /// correctly rounded).
    pub(super) fn contrast(image: &mut Planes<'_>, factor: f64)
        => contrast_body
}

#[inline(always)]
fn contrast_body(image: &mut Planes<'_>, factor: f64) {
    let area = image.area();
    let [r, g, b] = image.rgb_mut();
    let sum: u64 = r
        .iter()
        .zip(g.iter())
        .zip(b.iter())
        .map(|((r, g), b)| u64::from(luma(*r, *g, *b)))
        .sum();
    let mean = if area == 0 {
        0.0
    } else {
        sum as f64 / area as f64
    };
    // `int(mean + 0.5)` of a mean in [0, 255].
    let gray = (mean + 0.5) as u8;
    let alpha = factor as f32;
    for plane in [r, g, b] {
        for v in plane.iter_mut() {
            *v = blend(gray, *v, alpha);
        }
    }
}

/// `ImageEnhance.Brightness(image).enhance(factor)`: each value blended with black.
pub(super) fn brightness(image: &mut Planes<'_>, factor: f64) {
    let alpha = factor as f32;
    let area = image.area();
    for v in &mut image.data[..3 * area] {
        *v = blend(0, *v, alpha);
    }
}

dispatched! {
    /// `ImageEnhance.Sharpness(image).enhance(factor)`: each value blended with the image
    /// smoothed by `ImageFilter.SMOOTH`.
    pub(super) fn sharpness(image: &mut Planes<'_>, factor: f64)
        => sharpness_body
}

#[inline(always)]
fn sharpness_body(image: &mut Planes<'_>, factor: f64) {
    let (width, height) = (image.width, image.height);
    let alpha = factor as f32;
    for plane in image.rgb_mut() {
        let smooth = smoothed(plane, width, height);
        for (v, d) in plane.iter_mut().zip(smooth) {
            *v = blend(d, *v, alpha);
        }
    }
}

/// One channel through `ImageFilter.SMOOTH` (`ImagingFilter3x3` with the kernel `[[1, 1,
/// 1], [1, 5, 1], [1, 1, 1]]`, each weight divided by 13 in 32-bit floats): inside the
/// border, `0.5` plus the weighted rows below, at and above the pixel, each row summed left
/// to right, in 32-bit floats, truncated; the border, and images under 3 pixels a side,
/// as they were.
#[inline(always)]
fn smoothed(plane: &[u8], width: usize, height: usize) -> Vec<u8> {
    let mut out = plane.to_vec();
    if width < 3 || height < 3 {
        return out;
    }
    let (side, centre) = (1.0f32 / 13.0, 5.0f32 / 13.0);
    let row = |y: usize| &plane[y * width..(y + 1) * width];
    for y in 1..height - 1 {
        let (below, at, above) = (row(y + 1), row(y), row(y - 1));
        let inner = &mut out[y * width + 1..(y + 1) * width - 1];
        // `x` the pixel left of the one written.
        for (x, out) in inner.iter_mut().enumerate() {
            let mut sum = 0.5f32;
            sum += three(below, x, side, side);
            sum += three(at, x, side, centre);
            sum += three(above, x, side, side);
            // `clip8`: clamped, truncated.
            *out = cast_u8(sum);
        }
    }
    out
}

/// `row[x]`, `row[x + 1]` and `row[x + 2]` weighted by `side`, `middle` and `side`, summed
/// left to right in 32-bit floats (one row of `SMOOTH`'s kernel).
#[inline(always)]
fn three(row: &[u8], x: usize, side: f32, middle: f32) -> f32 {
    f32::from(row[x]) * side + f32::from(row[x + 1]) * middle + f32::from(row[x + 2]) * side
}

/// `image.point(lut)` with one table for every channel (`ImageOps._lut` of an RGB image).
pub(super) fn point(image: &mut Planes<'_>, lut: &[u8; 256]) {
    let area = image.area();
    for v in &mut image.data[..3 * area] {
        *v = lut[usize::from(*v)];
    }
}

/// `ImageOps.autocontrast(image)` (no cutoff): each channel's values mapped by
/// `int(v · scale + offset)`, clipped, with `scale = 255 / (hi − lo)` and `offset =
/// −lo · scale` in 64-bit floats, `lo` and `hi` its lowest and highest values; a channel
/// of one value kept.
pub(super) fn autocontrast(image: &mut Planes<'_>) {
    for plane in image.rgb_mut() {
        let (Some(&lo), Some(&hi)) = (plane.iter().min(), plane.iter().max()) else {
            continue;
        };
        if hi <= lo {
            continue;
        }
        let scale = 255.0 / f64::from(hi - lo);
        let offset = -f64::from(lo) * scale;
        let lut: [u8; 256] = std::array::from_fn(|i| {
            // `int()` truncates toward zero; the clip to [0, 255] follows, as `as` does.
            (i as f64 * scale + offset) as u8
        });
        for v in plane.iter_mut() {
            *v = lut[usize::from(*v)];
        }
    }
}

/// `ImageOps.equalize(image)`: each channel through the table from its cumulative
/// histogram, `(step // 2 + cumulative) // step`, clipped to 255 (the table's values as
/// `Image.point` takes them), `step` the pixels not of the highest value over 255; a
/// channel whose `step` is 0 kept. The same table as torchvision's, so its kernel.
pub(super) fn equalize(image: &mut Planes<'_>) {
    image.rgb_mut().into_iter().for_each(equalize::equalize);
}

/// `ImageOps.invert(image)`: `255 − v`.
pub(super) fn invert(image: &mut Planes<'_>) {
    let lut = std::array::from_fn(|i| 255 - i as u8);
    point(image, &lut);
}

/// `ImageOps.posterize(image, bits)` for `bits` in 1 to 7: each value's `bits` high bits
/// kept (`v & ~(2 ** (8 − bits) − 1)`); 8 or more keeps every value (timm returns the
/// image); 0 or fewer keeps no bit, all values 0, as PIL's mask gives it before Pillow 13,
/// which refuses them.
pub(super) fn posterize(image: &mut Planes<'_>, bits: i64) {
    if bits >= 8 {
        return;
    }
    let mask = if bits <= 0 {
        0
    } else {
        (0xFF00u16 >> bits) as u8
    };
    let lut = std::array::from_fn(|i| i as u8 & mask);
    point(image, &lut);
}

/// `ImageOps.solarize(image, threshold)`: values under `threshold` kept, the others `255 −
/// v`.
pub(super) fn solarize(image: &mut Planes<'_>, threshold: f64) {
    let lut = std::array::from_fn(|i| {
        let v = i as u8;
        if (i as f64) < threshold {
            v
        } else {
            255 - v
        }
    });
    point(image, &lut);
}

dispatched! {
    /// `image.filter(ImageFilter.GaussianBlur(radius))`: PIL's approximation of a Gaussian of
    /// standard deviation `radius` by three passes of an extended box blur along the rows,
    /// then three down the columns (`ImagingGaussianBlur`); radius 0 keeps the image.
    pub(super) fn gaussian_blur(image: &mut Planes<'_>, radius: f64)
        => gaussian_blur_body
}

#[inline(always)]
fn gaussian_blur_body(image: &mut Planes<'_>, radius: f64) {
    if radius == 0.0 {
        return;
    }
    const PASSES: u32 = 3;
    let box_radius = box_radius(radius as f32, PASSES);
    let (width, height) = (image.width, image.height);
    if width == 0 || height == 0 || box_radius == 0.0 {
        return;
    }
    let weights = BoxWeights::new(box_radius);
    let mut line = Vec::new();
    let mut blurred = Vec::new();
    for plane in image.rgb_mut() {
        for y in 0..height {
            line.clear();
            line.extend_from_slice(&plane[y * width..(y + 1) * width]);
            for _ in 0..PASSES {
                weights.blur(&line, &mut blurred);
                std::mem::swap(&mut line, &mut blurred);
            }
            plane[y * width..(y + 1) * width].copy_from_slice(&line);
        }
        for x in 0..width {
            line.clear();
            line.extend((0..height).map(|y| plane[y * width + x]));
            for _ in 0..PASSES {
                weights.blur(&line, &mut blurred);
                std::mem::swap(&mut line, &mut blurred);
            }
            for (y, v) in line.iter().enumerate() {
                plane[y * width + x] = *v;
            }
        }
    }
}

/// `_gaussian_blur_radius`: the extended box's radius whose `passes` passes have the
/// variance of a Gaussian of standard deviation `radius` (Gwosdek et al.), in PIL's mix of
/// 32- and 64-bit floats.
fn box_radius(radius: f32, passes: u32) -> f32 {
    let sigma2 = radius * radius / passes as f32;
    let length = (12.0 * f64::from(sigma2) + 1.0).sqrt() as f32;
    let l = ((f64::from(length) - 1.0) / 2.0).floor() as f32;
    let mut a = (2.0 * l + 1.0) * (l * (l + 1.0) - 3.0 * sigma2);
    a /= 6.0 * (sigma2 - (l + 1.0) * (l + 1.0));
    l + a
}

/// One pass of PIL's extended box blur of a fractional radius (`ImagingHorizontalBoxBlur`):
/// its whole radius, and the 8.24 fixed-point weights of the whole box and of its two
/// fractional ends.
struct BoxWeights {
    radius: usize,
    whole: u32,
    fraction: u32,
}

impl BoxWeights {
    fn new(radius: f32) -> BoxWeights {
        let whole = ((1u32 << 24) as f32 / (radius * 2.0 + 1.0)) as u32;
        // `(int)floatRadius` (saturating where C's cast would be undefined).
        let r = radius as u32;
        let box_width = r.wrapping_mul(2).wrapping_add(1);
        let fraction = (1u32 << 24).wrapping_sub(box_width.wrapping_mul(whole)) / 2;
        BoxWeights {
            radius: r as usize,
            whole,
            fraction,
        }
    }

    /// `ImagingLineBoxBlur8` of `line` into `out`: each value the box's weighted sum, the
    /// line extended by its end values, in wrapping 32-bit arithmetic, rounded from 8.24.
    fn blur(&self, line: &[u8], out: &mut Vec<u8>) {
        let n = line.len();
        let last = n - 1;
        let r = self.radius;
        // Past either end, the line repeats its end value.
        let at = |i: isize| u32::from(line[i.clamp(0, last as isize) as usize]);
        // The box of radius r before the first value: r + 1 copies of the first value,
        // then the values up to r − 1 (the last one past the end).
        let mut acc: u32 = 0;
        for i in -(r as isize) - 1..r as isize {
            acc = acc.wrapping_add(at(i));
        }
        out.clear();
        for x in 0..n as isize {
            let r = r as isize;
            // Move the box one along: the value leaving at its left, the one entering
            // at its right.
            acc = acc.wrapping_add(at(x + r)).wrapping_sub(at(x - r - 1));
            let ends = at(x - r - 1) + at(x + r + 1);
            let bulk = acc
                .wrapping_mul(self.whole)
                .wrapping_add(ends.wrapping_mul(self.fraction));
            out.push((bulk.wrapping_add(1 << 23) >> 24) as u8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: deterministic draws, without a dependency.
    struct Draws(u64);

    impl Draws {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// In `lo..=hi`.
        fn int(&mut self, lo: usize, hi: usize) -> usize {
            lo + (self.next() % (hi - lo + 1) as u64) as usize
        }

        /// In [lo, hi).
        fn float(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
        }

        fn byte(&mut self) -> u8 {
            self.next() as u8
        }
    }

    /// Three planes with a photograph's kinds of content, in patches: noise, smooth
    /// shading, and hard black and white edges (which the cubic overshoots past 0 and 255).
    fn image(width: usize, height: usize, draws: &mut Draws) -> Vec<u8> {
        let shift = draws.int(0, 6);
        let mut data = Vec::with_capacity(3 * width * height);
        for c in 0..3 {
            for y in 0..height {
                for x in 0..width {
                    data.push(match (x / 7 + y / 5 + c + shift) % 3 {
                        0 => draws.byte(),
                        1 => ((x * 3 + y * 2 + c * 40) % 256) as u8,
                        _ if (x + y) % 2 == 0 => 0,
                        _ => 255,
                    });
                }
            }
        }
        data
    }

    /// A matrix of kind `kind` for a `width` × `height` image.
    fn matrix(kind: usize, width: usize, height: usize, draws: &mut Draws) -> [f64; 6] {
        let (w, h) = (width as f64, height as f64);
        let (cx, cy) = (w / 2.0, h / 2.0);
        // About the centre, as `Image.rotate` builds it.
        let rotation = |degrees: f64| {
            let angle = -degrees.to_radians();
            let (cos, sin) = (angle.cos(), angle.sin());
            let c = (cos * -cx + sin * -cy) + cx;
            let f = (-sin * -cx + cos * -cy) + cy;
            [cos, sin, c, -sin, cos, f]
        };
        let sign = if draws.next() & 1 == 0 { 1.0 } else { -1.0 };
        match kind {
            0 => rotation(draws.float(-180.0, 180.0)),
            // Tiny angles, and near quarter and half turns: distances near 0 and 1.
            1 => rotation(sign * 10f64.powf(draws.float(-12.0, -2.0))),
            2 => {
                let turn = [90.0, 180.0, 270.0][draws.int(0, 2)];
                rotation(turn + sign * 10f64.powf(draws.float(-12.0, -3.0)))
            }
            // Shears along x and along y (the one-axis paths), with and without offsets.
            3 => {
                let s = draws.float(-0.6, 0.6);
                let t = [0.0, -s * cy, draws.float(-w, w)][draws.int(0, 2)];
                [1.0, s, t, 0.0, 1.0, 0.0]
            }
            4 => {
                let s = draws.float(-0.6, 0.6);
                let t = [0.0, -s * cx, draws.float(-h, h)][draws.int(0, 2)];
                [1.0, 0.0, 0.0, s, 1.0, t]
            }
            // Translations, whole and fractional, along x, y or both.
            5 => {
                let mut t = || match draws.int(0, 3) {
                    0 => 0.0,
                    1 => draws.int(0, 20) as f64 - 10.0,
                    2 => draws.float(-1.0, 1.0),
                    _ => draws.float(-w.max(h), w.max(h)),
                };
                [1.0, 0.0, t(), 0.0, 1.0, t()]
            }
            // Scales about the centre, up and down.
            6 => {
                let s = [draws.float(0.2, 1.0), draws.float(1.0, 4.0), 0.5, 2.0][draws.int(0, 3)];
                let t = draws.float(-2.0, 2.0);
                [s, 0.0, cx - s * cx + t, 0.0, s, cy - s * cy + t]
            }
            // Partly or wholly outside.
            7 => {
                let r = rotation(draws.float(-30.0, 30.0));
                let mut far = || sign * draws.float(0.3, 2.0) * w.max(h);
                [r[0], r[1], r[2] + far(), r[3], r[4], r[5] + far()]
            }
            // Any matrix.
            8 => [
                draws.float(-2.0, 2.0),
                draws.float(-2.0, 2.0),
                draws.float(-w, 2.0 * w),
                draws.float(-2.0, 2.0),
                draws.float(-2.0, 2.0),
                draws.float(-h, 2.0 * h),
            ],
            // Degenerate: a NaN, infinite or huge coefficients, every pixel the same point.
            _ => [
                [f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0],
                [1.0, 0.0, f64::INFINITY, 0.0, 1.0, 0.0],
                [1e300, 0.0, 0.0, 0.0, 1e300, 0.0],
                [1.0, 0.0, 0.0, 0.0, 1.0, -1e-300],
                [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ][draws.int(0, 4)],
        }
    }

    /// An implementation of [`affine`].
    type Kernel = fn(&mut Planes<'_>, [f64; 6], Resample, [u8; 3]);

    /// The transform pixel by pixel ([`pixel`]), each clipping its taps as PIL does.
    fn pixel_by_pixel(
        source: &[u8],
        [width, height]: [usize; 2],
        a: [f64; 6],
        resample: Resample,
        fill: [u8; 3],
    ) -> Vec<u8> {
        let area = width * height;
        let planes = [
            &source[..area],
            &source[area..2 * area],
            &source[2 * area..],
        ];
        let mut out = vec![0; 3 * area];
        for y in 0..height {
            for x in 0..width {
                pixel(&mut out, &planes, a, [x, y, width, height], resample, fill);
            }
        }
        out
    }

    /// The kernels that sample four pixels at once (the portable one, and the AVX2 one where
    /// the CPU has it) against the pixel-by-pixel path, PIL's clipping tap by tap: the same
    /// bytes, over 400 matrices of every kind, on images of 1 × 1 to 300 × 200.
    #[test]
    fn every_kernel_gives_the_bytes_of_the_pixel_by_pixel_path() {
        let mut draws = Draws(7);
        for case in 0..400 {
            let mut side = |most: usize| match draws.int(0, 3) {
                0 => draws.int(1, 8),
                _ => draws.int(1, most),
            };
            let (width, height) = (side(300), side(200));
            let source = image(width, height, &mut draws);
            let a = matrix(case % 10, width, height, &mut draws);
            for resample in [Resample::Bilinear, Resample::Bicubic] {
                let fill = [draws.byte(), draws.byte(), draws.byte()];
                let want = pixel_by_pixel(&source, [width, height], a, resample, fill);
                // `affine` runs the AVX2 kernel where the CPU has it.
                for (name, kernel) in [("portable", affine_planes as Kernel), ("affine", affine)] {
                    let mut data = source.clone();
                    kernel(
                        &mut Planes {
                            data: &mut data,
                            width,
                            height,
                        },
                        a,
                        resample,
                        fill,
                    );
                    if let Some(i) = (0..data.len()).find(|&i| data[i] != want[i]) {
                        let (c, x, y) = (i / (width * height), i % width, i / width % height);
                        panic!(
                            "case {case}, {name}, {resample:?}, {width}x{height}, {a:?}: \
                             channel {c} at ({x}, {y}) is {}, not {}",
                            data[i], want[i]
                        );
                    }
                }
            }
        }
    }
}
