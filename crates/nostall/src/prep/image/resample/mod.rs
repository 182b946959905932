//! The resize: a region of the decoded RGB image to the output size, with the
//! antialiased bilinear or bicubic filter of PIL and torchvision, or the nearest pixel,
//! as planar 8-bit rows.
//!
//! Like PIL the filter is separable and computed in fixed point, rounding to 8 bits after
//! each pass, and a fractional region reads the pixels around it as the filter needs
//! them, within a bound the caller gives: a crop's window where the crop came before the
//! resize, since torchvision resizes a crop alone and its filter stops at the crop's
//! edges. Unlike PIL the vertical pass comes first: a training crop is usually larger than
//! the output, so the second, harder pass then runs over output rows only.
//!
//! The output comes in blocks of [`BLOCK`] rows, three planes each, which the caller
//! turns into the sample's layout while they are still in cache. The block is the unit of
//! the AVX2 path, which vectorises both passes across *rows*: a vertical pass is easy to
//! vectorise along a row, but a horizontal one gathers each output pixel from a different
//! window of interleaved RGB, which is where general resizers (fast_image_resize among
//! them) spend most of their time. So the AVX2 path runs the vertical pass for 16 output
//! rows, transposes them (16×16 byte transposes in registers) so that each element of a
//! row holds its 16 rows side by side, runs the horizontal pass with one filter weight
//! for all 16 rows at once, and transposes back into planes. Both paths do the same
//! integer arithmetic, so they produce the same bytes; a test holds them to that.

#[cfg(target_arch = "x86_64")]
mod avx2;

use super::codec::Rect;

/// Output rows produced together.
pub(super) const BLOCK: usize = 16;

/// Fixed-point precision of the filter weights: each output's weights sum to `1 << BITS`.
/// With weights in `0..=1 << 14` and pixels in `0..=255` every sum fits an `i32`, and a
/// pair of weights times a pair of pixels is one `madd` of 16-bit lanes.
const BITS: u32 = 14;
const ONE: i32 = 1 << BITS;
const HALF: i32 = 1 << (BITS - 1);

/// How a resize weighs the source pixels around each output pixel (torchvision's
/// `interpolation`, with `antialias=True`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Filter {
    /// PIL's and torchvision's antialiased bilinear (triangle) filter.
    #[default]
    Bilinear,
    /// PIL's and torchvision's antialiased bicubic filter (Keys' cubic, a = -0.5).
    Bicubic,
    /// The nearest pixel, as torchvision's `nearest`: output `o` takes source pixel
    /// `floor(o * scale)`.
    Nearest,
    /// torch's bilinear interpolation without antialiasing (torchvision's
    /// `antialias=False`): the two pixels nearest each output's centre at any scale, so a
    /// large shrink skips pixels (and aliases) as `F.interpolate(mode="bilinear")` does.
    BilinearAliased,
}

impl Filter {
    /// torchvision's name of it (`interpolation=`; the antialiasing is [`Filter::antialias`]).
    pub fn name(self) -> &'static str {
        match self {
            Filter::Bilinear | Filter::BilinearAliased => "bilinear",
            Filter::Bicubic => "bicubic",
            Filter::Nearest => "nearest",
        }
    }

    /// Whether shrinking widens the filter over every source pixel (torchvision's
    /// `antialias`, which `nearest` ignores).
    pub fn antialias(self) -> bool {
        self != Filter::BilinearAliased
    }

    /// The antialiased filter named `name`.
    pub fn named(name: &str) -> Option<Filter> {
        [Filter::Bilinear, Filter::Bicubic, Filter::Nearest]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// Reach of the filter, in source pixels at scale 1.
    fn support(self) -> f64 {
        match self {
            Filter::Bicubic => 2.0,
            Filter::Bilinear | Filter::BilinearAliased | Filter::Nearest => 1.0,
        }
    }

    /// The filter's weight at distance `x` (in source pixels at scale 1).
    #[inline(always)]
    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Filter::Bicubic => {
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Bilinear | Filter::BilinearAliased | Filter::Nearest => (1.0 - x).max(0.0),
        }
    }
}

/// RGB pixels, packed, row after row.
#[derive(Debug, Clone, Copy)]
pub(super) struct Image<'a> {
    pub pixels: &'a [u8],
    pub width: usize,
    pub height: usize,
}

/// A block of output rows: three planes of `rows` rows of `width` bytes, one plane every
/// `plane` bytes.
#[derive(Debug)]
pub(super) struct Block<'a> {
    pub data: &'a [u8],
    pub width: usize,
    pub rows: usize,
    pub plane: usize,
}

impl Block<'_> {
    /// Row `r` of channel `c`.
    #[inline(always)]
    pub(super) fn row(&self, c: usize, r: usize) -> &[u8] {
        let at = c * self.plane + r * self.width;
        &self.data[at..at + self.width]
    }
}

/// The filter along one axis.
#[derive(Debug, Default)]
struct Axis {
    /// For each output index, its first input index, counted from `first`.
    starts: Vec<usize>,
    /// `taps` weights for each output index, zero-padded, summing to `ONE`.
    weights: Vec<i16>,
    /// Weights per output index: an even number, so that they go in pairs.
    taps: usize,
    /// The first input index any output reads, and one past the last.
    first: usize,
    end: usize,
    /// Unquantised weights while planning, `window` per output index, and how many.
    scratch: Vec<f64>,
    lens: Vec<usize>,
}

impl Axis {
    /// Plans resampling `len` input pixels starting at `in0` (fractional: a region of the
    /// input) to `out_size` pixels, reading input pixels `lo..hi` at most.
    fn plan(
        &mut self,
        (lo, hi): (usize, usize),
        in0: f64,
        len: f64,
        out_size: usize,
        filter: Filter,
    ) {
        let scale = len / out_size as f64;
        if filter == Filter::Nearest {
            return self.plan_nearest((lo, hi), in0, scale, out_size);
        }
        // Downscaling widens the filter to cover every input pixel (antialiasing).
        let stretch = if filter.antialias() {
            scale.max(1.0)
        } else {
            1.0
        };
        let reach = filter.support() * stretch;
        let window = reach.ceil() as usize * 2 + 1;
        let inverse = 1.0 / stretch;
        self.scratch.clear();
        self.scratch.resize(window * out_size, 0.0);
        self.starts.clear();
        self.lens.clear();
        // The pixels whose centres lie strictly within `reach` of an output's centre,
        // the ones with a weight, found directly: trimming zero weights afterwards costs
        // mispredicted branches, and this runs per sample. `as usize` truncates, the
        // floor of the non-negative values here (`floor` and `ceil` are library calls
        // on baseline x86-64).
        for (o, weights) in self.scratch.chunks_exact_mut(window).enumerate() {
            let center = in0 + (o as f64 + 0.5) * scale;
            let (after, before) = (center - reach - 0.5, center + reach - 0.5);
            let first = if after < 0.0 {
                0
            } else {
                after as u32 as usize + 1
            };
            let before = before.max(0.0);
            let end = before as u32 as usize + usize::from(((before as u32) as f64) < before);
            let mut start = first.clamp(lo, hi - 1);
            let mut n = end.clamp(start + 1, hi) - start;
            let mut total = 0.0;
            let mut distance = (start as f64 + 0.5 - center) * inverse;
            for w in &mut weights[..n] {
                *w = filter.weight(distance);
                total += *w;
                distance += inverse;
            }
            if total == 0.0 {
                // A region thinner than a pixel that falls between centres: nearest pixel.
                start = (center.max(0.0) as u32 as usize).clamp(lo, hi - 1);
                weights[0] = 1.0;
                n = 1;
            }
            self.starts.push(start);
            self.lens.push(n);
        }
        self.quantize(out_size, window);
    }

    /// One tap an output, weight one: source pixel `floor(in0 + o * scale)`.
    fn plan_nearest(&mut self, (lo, hi): (usize, usize), in0: f64, scale: f64, out_size: usize) {
        self.scratch.clear();
        self.scratch.resize(out_size, 1.0);
        self.starts.clear();
        self.starts.extend((0..out_size).map(|o| {
            let at = (in0 + o as f64 * scale).max(0.0);
            (at as u32 as usize).clamp(lo, hi - 1)
        }));
        self.lens.clear();
        self.lens.resize(out_size, 1);
        self.quantize(out_size, 1);
    }

    /// From the planned starts, lengths and unquantised weights (`window` an output):
    /// the taps, the span read, and the fixed-point weights.
    fn quantize(&mut self, out_size: usize, window: usize) {
        let lens = &self.lens;
        self.taps = (lens.iter().copied().max().unwrap_or(1) + 1) & !1;
        self.first = *self.starts.iter().min().unwrap_or(&0);
        self.end = self
            .starts
            .iter()
            .zip(lens)
            .map(|(s, n)| s + n)
            .max()
            .unwrap_or(1);
        self.weights.clear();
        self.weights.resize(self.taps * out_size, 0);
        let outputs = self
            .starts
            .iter_mut()
            .zip(lens)
            .zip(self.scratch.chunks_exact(window))
            .zip(self.weights.chunks_exact_mut(self.taps));
        for (((start, &n), f), q) in outputs {
            *start -= self.first;
            quantize_weights(&f[..n], &mut q[..n]);
        }
    }

    /// Input pixels the planned outputs read.
    fn span(&self) -> usize {
        self.end - self.first
    }

    fn weights(&self, o: usize) -> &[i16] {
        &self.weights[o * self.taps..(o + 1) * self.taps]
    }
}

/// Fixed-point weights proportional to `f`, summing to exactly `ONE` so that a flat
/// region stays flat.
fn quantize_weights(f: &[f64], q: &mut [i16]) {
    let unit = ONE as f64 / f.iter().sum::<f64>();
    let mut sum = 0;
    for (q, f) in q.iter_mut().zip(f) {
        // Half away from zero, as PIL rounds (a cubic's weights go below zero).
        let v = f * unit;
        *q = (if v < 0.0 { v - 0.5 } else { v + 0.5 }) as i32 as i16;
        sum += *q as i32;
    }
    let largest = (0..q.len()).max_by_key(|&i| q[i]).unwrap_or(0);
    q[largest] += (ONE - sum) as i16;
}

/// Per-thread resampling state: the plan and scratch buffers, reused.
#[derive(Debug, Default)]
pub(super) struct Resampler {
    rows: Axis,
    cols: Axis,
    /// The vertical pass's rows: `BLOCK` of them, `stride` bytes apart.
    vertical: Vec<u8>,
    stride: usize,
    /// Where the current output row's taps begin in the source (AVX2 path).
    offsets: Vec<usize>,
    /// The AVX2 path's transposed rows and horizontal results (see the module doc).
    columns: Vec<u8>,
    staged: Vec<u8>,
    /// Planar output of one block.
    block: Vec<u8>,
}

impl Resampler {
    /// Resamples `region` of `src` to `width` × `height`, the filter reading within
    /// `bound` (`None`: all of `src`), handing each block of output rows, top to bottom,
    /// to `sink` with the index of its first row.
    pub(super) fn run(
        &mut self,
        (src, region, bound): (Image<'_>, Rect, Option<Rect>),
        (width, height, filter): (usize, usize, Filter),
        sink: impl FnMut(usize, &Block<'_>),
    ) {
        self.run_on(
            (src, region, bound),
            (width, height, filter),
            has_avx2(),
            sink,
        );
    }

    /// [`Resampler::run`] on the AVX2 path or the portable one.
    fn run_on(
        &mut self,
        (src, region, bound): (Image<'_>, Rect, Option<Rect>),
        (width, height, filter): (usize, usize, Filter),
        avx2: bool,
        mut sink: impl FnMut(usize, &Block<'_>),
    ) {
        assert!(src.pixels.len() >= src.width * src.height * 3 && width > 0 && height > 0);
        if let Some((x0, y0)) = unscaled(src, region, width, height) {
            return self.copy(src, (x0, y0), width, height, sink);
        }
        let within = |size: usize, at: Option<(f64, f64)>| match at {
            None => (0, size),
            Some((start, len)) => {
                // Whole pixels; a bound mapped from another scale may be off by a hair.
                let lo = ((start + 1e-6).floor().max(0.0) as usize).min(size - 1);
                let hi = ((start + len - 1e-6).ceil() as usize).clamp(lo + 1, size);
                (lo, hi)
            }
        };
        let rows = within(src.height, bound.map(|b| (b.y, b.h)));
        let cols = within(src.width, bound.map(|b| (b.x, b.w)));
        self.rows.plan(rows, region.y, region.h, height, filter);
        self.cols.plan(cols, region.x, region.w, width, filter);
        let bytes = self.cols.span() * 3;
        self.stride = bytes.next_multiple_of(32);
        self.vertical.resize(BLOCK * self.stride, 0);
        let plane = BLOCK * width;
        self.block.resize(3 * plane, 0);
        if avx2 {
            // Room for the padded taps past the last pixel; they carry zero weight.
            let elements = self.stride.max((self.cols.span() + self.cols.taps) * 3);
            self.columns.resize(elements * BLOCK, 0);
            self.staged.resize(3 * width * BLOCK, 0);
        }
        for y0 in (0..height).step_by(BLOCK) {
            let rows = BLOCK.min(height - y0);
            if avx2 {
                // SAFETY: `avx2` is true only where the CPU supports AVX2 (`has_avx2`),
                // the one requirement; the function checks its own bounds.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    avx2::block(self, src, y0, height, width)
                };
            } else {
                self.block_portable(src, y0, rows, width);
            }
            let block = Block {
                data: &self.block,
                width,
                rows,
                plane,
            };
            sink(y0, &block);
        }
    }

    /// A window of `src` at its own size, whose top left corner is pixel `(x0, y0)`: every
    /// filter gives each output its one source pixel there (the neighbours lie a whole
    /// pixel away, where the triangle and Keys' cubic weigh zero), so the planes are the
    /// window's pixels, copied. A video's frames at their decoded size come this way.
    fn copy(
        &mut self,
        src: Image<'_>,
        (x0, y0): (usize, usize),
        width: usize,
        height: usize,
        mut sink: impl FnMut(usize, &Block<'_>),
    ) {
        let plane = BLOCK * width;
        self.block.resize(3 * plane, 0);
        for top in (0..height).step_by(BLOCK) {
            let rows = BLOCK.min(height - top);
            let (red, rest) = self.block.split_at_mut(plane);
            let (green, blue) = rest.split_at_mut(plane);
            for r in 0..rows {
                let at = ((y0 + top + r) * src.width + x0) * 3;
                let pixels = src.pixels[at..at + width * 3].chunks_exact(3);
                let row = r * width..(r + 1) * width;
                let planes = red[row.clone()]
                    .iter_mut()
                    .zip(&mut green[row.clone()])
                    .zip(&mut blue[row]);
                for (((r, g), b), p) in planes.zip(pixels) {
                    (*r, *g, *b) = (p[0], p[1], p[2]);
                }
            }
            let block = Block {
                data: &self.block,
                width,
                rows,
                plane,
            };
            sink(top, &block);
        }
    }

    /// Output rows `y0..y0 + rows` into `block`, one row at a time.
    fn block_portable(&mut self, src: Image<'_>, y0: usize, rows: usize, width: usize) {
        let plane = BLOCK * width;
        let line = &mut self.vertical[..self.cols.span() * 3];
        for r in 0..rows {
            vertical_elements(&self.rows, &self.cols, src, y0 + r, 0, line);
            for (x, c) in (0..width).flat_map(|x| (0..3).map(move |c| (x, c))) {
                let start = self.cols.starts[x];
                let mut acc = HALF;
                for (k, &w) in self.cols.weights(x).iter().enumerate() {
                    if let Some(&v) = line.get((start + k) * 3 + c) {
                        acc += w as i32 * v as i32;
                    }
                }
                self.block[c * plane + r * width + x] = (acc >> BITS).clamp(0, 255) as u8;
            }
        }
    }
}

/// Where `region` is a whole-pixel window of `src` as large as the output, its top left
/// pixel: the resize is then a copy ([`Resampler::copy`]).
fn unscaled(src: Image<'_>, region: Rect, width: usize, height: usize) -> Option<(usize, usize)> {
    let whole = |v: f64| v >= 0.0 && v.fract() == 0.0;
    let fits = whole(region.x)
        && whole(region.y)
        && region.w == width as f64
        && region.h == height as f64
        && region.x as usize + width <= src.width
        && region.y as usize + height <= src.height;
    fits.then_some((region.x as usize, region.y as usize))
}

/// Whether this CPU runs the AVX2 path.
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The vertical pass for output row `y`, over the columns the horizontal pass reads:
/// elements `from..` of the row, written to `line[from..]`.
#[inline(always)]
fn vertical_elements(
    rows: &Axis,
    cols: &Axis,
    src: Image<'_>,
    y: usize,
    from: usize,
    line: &mut [u8],
) {
    let stride = src.width * 3;
    let left = cols.first * 3;
    let start = rows.first + rows.starts[y];
    for (e, out) in line.iter_mut().enumerate().skip(from) {
        let mut acc = HALF;
        for (k, &w) in rows.weights(y).iter().enumerate() {
            let row = (start + k).min(src.height - 1);
            acc += w as i32 * src.pixels[row * stride + left + e] as i32;
        }
        *out = (acc >> BITS).clamp(0, 255) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter in floating point, for each output index along one axis: the input
    /// indices with a weight, and the weights (PIL's definition; torchvision's nearest).
    fn exact_weights(
        in_size: usize,
        in0: f64,
        len: f64,
        out: usize,
        filter: Filter,
    ) -> Vec<Vec<(usize, f64)>> {
        let scale = len / out as f64;
        let stretch = scale.max(1.0);
        (0..out)
            .map(|o| {
                if filter == Filter::Nearest {
                    let at = ((in0 + o as f64 * scale).floor() as usize).min(in_size - 1);
                    return vec![(at, 1.0)];
                }
                if filter == Filter::BilinearAliased {
                    // torch's `area_pixel_compute_source_index` and its two neighbours.
                    let src = (in0 + (o as f64 + 0.5) * scale - 0.5).max(0.0);
                    let (i0, frac) = (src.floor() as usize, src.fract());
                    let (i0, i1) = (i0.min(in_size - 1), (i0 + 1).min(in_size - 1));
                    return if i0 == i1 {
                        vec![(i0, 1.0)]
                    } else {
                        vec![(i0, 1.0 - frac), (i1, frac)]
                    };
                }
                let center = in0 + (o as f64 + 0.5) * scale;
                let ws: Vec<(usize, f64)> = (0..in_size)
                    .map(|i| (i, filter.weight((i as f64 + 0.5 - center) / stretch)))
                    .filter(|&(_, w)| w != 0.0)
                    .collect();
                let total: f64 = ws.iter().map(|p| p.1).sum();
                ws.into_iter().map(|(i, w)| (i, w / total)).collect()
            })
            .collect()
    }

    fn photo_like(w: usize, h: usize, seed: usize) -> Vec<u8> {
        // Smooth gradients with some texture, so that rounding differences show.
        (0..w * h * 3)
            .map(|i| {
                let (p, c) = (i / 3, i % 3);
                let (x, y) = (p % w, p / w);
                ((x * 7 + y * 3 + c * 50 + seed) % 256) as u8 ^ ((x * y + seed) % 5) as u8
            })
            .collect()
    }

    #[test]
    fn a_bounded_resize_is_the_resize_of_the_window_cut_out() {
        // torchvision crops, then resizes the crop alone: its filter stops at the crop's
        // edges. A 64x48 image, the window (9, 5) 37x29, to sizes down and up.
        let (sw, sh) = (64usize, 48usize);
        let pixels: Vec<u8> = (0..sw * sh * 3).map(|i| (i * 37 % 251) as u8).collect();
        let src = Image {
            pixels: &pixels,
            width: sw,
            height: sh,
        };
        let window = Rect {
            x: 9.0,
            y: 5.0,
            w: 37.0,
            h: 29.0,
        };
        let cut: Vec<u8> = (5..34)
            .flat_map(|y| pixels[(y * sw + 9) * 3..(y * sw + 46) * 3].to_vec())
            .collect();
        let alone = Image {
            pixels: &cut,
            width: 37,
            height: 29,
        };
        for (w, h) in [(12, 10), (37, 11), (80, 61)] {
            for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Nearest] {
                for avx2 in [false, has_avx2()] {
                    let mut bounded = vec![0u8; 3 * w * h];
                    Resampler::default().run_on(
                        (src, window, Some(window)),
                        (w, h, filter),
                        avx2,
                        |y0, b| {
                            for c in 0..3 {
                                for r in 0..b.rows {
                                    let at = (c * h + y0 + r) * w;
                                    bounded[at..at + w].copy_from_slice(b.row(c, r));
                                }
                            }
                        },
                    );
                    let whole = Rect::full(37, 29);
                    let want = collect(
                        &mut Resampler::default(),
                        alone,
                        whole,
                        (w, h, filter),
                        avx2,
                    );
                    assert_eq!(bounded, want, "{w}x{h} {filter:?}");
                    // Unbounded, the border reads past the window.
                    if filter != Filter::Nearest {
                        let free =
                            collect(&mut Resampler::default(), src, window, (w, h, filter), avx2);
                        assert_ne!(free, want, "{w}x{h} {filter:?}");
                    }
                }
            }
        }
    }

    fn collect(
        resampler: &mut Resampler,
        src: Image<'_>,
        region: Rect,
        (w, h, filter): (usize, usize, Filter),
        avx2: bool,
    ) -> Vec<u8> {
        let mut out = vec![0u8; 3 * w * h];
        resampler.run_on((src, region, None), (w, h, filter), avx2, |y0, b| {
            for c in 0..3 {
                for r in 0..b.rows {
                    let at = (c * h + y0 + r) * w;
                    out[at..at + w].copy_from_slice(b.row(c, r));
                }
            }
        });
        out
    }

    #[test]
    fn both_paths_agree_and_stay_within_one_level_of_the_exact_filter() {
        let mut resampler = Resampler::default();
        let cases = [
            // (source w, h, region x, y, w, h, output w, h)
            (500, 375, 37.0, 12.0, 301.0, 277.0, 224, 224), // a typical training crop
            (500, 375, 0.0, 0.0, 500.0, 375.0, 224, 224),
            (200, 150, 20.25, 10.5, 100.5, 90.25, 224, 224), // upscaling, fractional region
            (64, 48, 0.0, 0.0, 64.0, 48.0, 16, 16),
            (33, 17, 3.0, 2.0, 20.0, 11.0, 37, 5), // sizes off every vector width
            (1, 1, 0.0, 0.0, 1.0, 1.0, 3, 2),      // a single pixel
            (9, 300, 0.0, 0.0, 9.0, 300.0, 1, 7),  // extreme aspect ratios
            (700, 3, 0.0, 0.0, 700.0, 3.0, 19, 1),
        ];
        let filters = [
            Filter::Bilinear,
            Filter::Bicubic,
            Filter::Nearest,
            Filter::BilinearAliased,
        ];
        for (i, &(sw, sh, rx, ry, rw, rh, w, h)) in cases.iter().enumerate() {
            let pixels = photo_like(sw, sh, i);
            let src = Image {
                pixels: &pixels,
                width: sw,
                height: sh,
            };
            let region = Rect {
                x: rx,
                y: ry,
                w: rw,
                h: rh,
            };
            for filter in filters {
                let portable = collect(&mut resampler, src, region, (w, h, filter), false);
                let chosen = collect(&mut resampler, src, region, (w, h, filter), has_avx2());
                assert_eq!(portable, chosen, "case {i} {filter:?}");
                let rows = exact_weights(sh, ry, rh, h, filter);
                let cols = exact_weights(sw, rx, rw, w, filter);
                // Each pass rounds to 8 bits and clamps, as PIL's (the vertical one first
                // here): the cubic's overshoot is clamped between the passes, so the
                // exact value is too.
                for (y, x, c) in
                    (0..h).flat_map(|y| (0..w).flat_map(move |x| (0..3).map(move |c| (y, x, c))))
                {
                    let want: f64 = cols[x]
                        .iter()
                        .map(|&(sx, wx)| {
                            let column: f64 = rows[y]
                                .iter()
                                .map(|&(sy, wy)| wy * pixels[(sy * sw + sx) * 3 + c] as f64)
                                .sum();
                            wx * column.clamp(0.0, 255.0)
                        })
                        .sum::<f64>()
                        .clamp(0.0, 255.0);
                    let got = portable[(c * h + y) * w + x] as f64;
                    let bound = if filter == Filter::Bicubic { 2.0 } else { 1.0 };
                    assert!(
                        (got - want).abs() <= bound,
                        "case {i} {filter:?} at {c},{y},{x}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_window_at_its_own_size_is_copied_as_every_filter_would_make_it() {
        let (sw, sh) = (70, 45);
        let pixels = photo_like(sw, sh, 3);
        let src = Image {
            pixels: &pixels,
            width: sw,
            height: sh,
        };
        for (x, y, w, h) in [
            (0, 0, 70, 45),
            (5, 17, 33, 20),
            (69, 44, 1, 1),
            (0, 3, 70, 40),
        ] {
            let region = Rect {
                x: x as f64,
                y: y as f64,
                w: w as f64,
                h: h as f64,
            };
            assert_eq!(unscaled(src, region, w, h), Some((x, y)));
            let mut want = vec![0u8; 3 * w * h];
            for (c, row, col) in
                (0..3).flat_map(|c| (0..h).flat_map(move |r| (0..w).map(move |k| (c, r, k))))
            {
                want[(c * h + row) * w + col] = pixels[((y + row) * sw + x + col) * 3 + c];
            }
            for filter in [
                Filter::Bilinear,
                Filter::Bicubic,
                Filter::Nearest,
                Filter::BilinearAliased,
            ] {
                let got = collect(&mut Resampler::default(), src, region, (w, h, filter), true);
                assert_eq!(got, want, "{filter:?} {region:?}");
                // The filter itself, planned for the same window, gives the same bytes.
                let mut resampler = Resampler::default();
                resampler.rows.plan((0, sh), region.y, region.h, h, filter);
                resampler.cols.plan((0, sw), region.x, region.w, w, filter);
                for (axis, from) in [(&resampler.rows, y), (&resampler.cols, x)] {
                    for (o, &start) in axis.starts.iter().enumerate() {
                        for (k, &weight) in axis.weights(o).iter().enumerate() {
                            let own = axis.first + start + k == from + o;
                            assert_eq!(weight, if own { ONE as i16 } else { 0 }, "{filter:?}");
                        }
                    }
                }
            }
        }
        // A fractional corner or another size is resampled.
        let region = |x: f64, w: f64| Rect {
            x,
            y: 0.0,
            w,
            h: 10.0,
        };
        assert_eq!(unscaled(src, region(0.5, 10.0), 10, 10), None);
        assert_eq!(unscaled(src, region(0.0, 10.0), 11, 10), None);
        assert_eq!(unscaled(src, region(65.0, 10.0), 10, 10), None);
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let pixels = vec![200u8; 90 * 70 * 3];
        let src = Image {
            pixels: &pixels,
            width: 90,
            height: 70,
        };
        for (w, h) in [(224, 224), (13, 9)] {
            let region = Rect {
                x: 3.3,
                y: 1.7,
                w: 80.1,
                h: 60.2,
            };
            for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Nearest] {
                let out = collect(
                    &mut Resampler::default(),
                    src,
                    region,
                    (w, h, filter),
                    has_avx2(),
                );
                assert!(out.iter().all(|&v| v == 200), "{filter:?}");
            }
        }
    }
}
