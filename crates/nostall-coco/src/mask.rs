//! Instance masks exactly as pycocotools makes them (`common/maskApi.c` of cocoapi).
//!
//! COCO's run-length encoding counts alternating runs of 0 and 1 (starting with 0) over
//! the pixels in column-major order (Fortran order: down each column, then the next
//! column). Masks handed out here are row-major `height * width` bytes of 0 or 1.

use crate::CocoError;

/// pycocotools' `rleFrPoly` works on coordinates upsampled by this factor.
const SCALE: f64 = 5.0;

/// Upsampled coordinates are clamped to +-2^40 (2.2e11 pixels): far beyond where
/// pycocotools is defined (its `int` arithmetic overflows past about 2e8 pixels), and
/// small enough that every sum and product below is exact in `i64` and monotone in `f64`.
const FAR: i64 = 1 << 40;

/// Most characters one count takes in a compressed string: 7 carry 35 bits, enough for
/// any difference of two `u32` counts, which is all `rleToString` ever writes.
const MAX_CHARS_PER_COUNT: u32 = 7;

/// A run-length encoded mask as COCO stores it: alternating runs of 0 and 1, the first
/// a run of 0 (perhaps empty), over the pixels in column-major order. Its counts always
/// cover exactly `height * width` pixels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rle {
    height: u32,
    width: u32,
    counts: Vec<u32>,
}

impl Rle {
    /// An RLE of `counts` (uncompressed, as a COCO file's list), refused with
    /// [`CocoError::Mask`] unless they cover exactly `height * width` pixels.
    pub fn new(height: u32, width: u32, counts: Vec<u32>) -> Result<Rle, CocoError> {
        check_coverage(&counts, height, width).map_err(CocoError::Mask)?;
        Ok(Rle {
            height,
            width,
            counts,
        })
    }

    /// An RLE of COCO's compressed counts string (pycocotools' `rleFrString`), refused
    /// with [`CocoError::Mask`] if the string is malformed or its counts do not cover
    /// exactly `height * width` pixels.
    pub fn from_compressed(height: u32, width: u32, counts: &str) -> Result<Rle, CocoError> {
        let mut decoded = Vec::new();
        counts_from_string(counts.as_bytes(), usize::MAX, &mut decoded)
            .map_err(|e| CocoError::Mask(format!("compressed counts: {e}")))?;
        Rle::new(height, width, decoded)
    }

    /// Encodes a row-major `height * width` mask (any non-zero byte is 1), as
    /// pycocotools' `encode` does the same mask in column-major order. Refused with
    /// [`CocoError::Mask`] if `mask` is not `height * width` bytes.
    pub fn encode(mask: &[u8], height: u32, width: u32) -> Result<Rle, CocoError> {
        let (h, w) = (height as usize, width as usize);
        if u64::from(height) * u64::from(width) > u64::from(u32::MAX) {
            return Err(CocoError::Mask(format!(
                "a {height}x{width} mask has more pixels than COCO's counts can hold"
            )));
        }
        if mask.len() as u64 != u64::from(height) * u64::from(width) {
            return Err(CocoError::Mask(format!(
                "a {height}x{width} mask has {} bytes, not {}",
                mask.len(),
                u64::from(height) * u64::from(width)
            )));
        }
        let mut counts = Vec::new();
        let (mut value, mut run) = (false, 0u32);
        for x in 0..w {
            for y in 0..h {
                let v = mask[y * w + x] != 0;
                if v != value {
                    counts.push(run);
                    (value, run) = (v, 0);
                }
                run += 1;
            }
        }
        counts.push(run);
        Ok(Rle {
            height,
            width,
            counts,
        })
    }

    /// Height of the mask, in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Width of the mask, in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The run lengths, the first a run of 0.
    pub fn counts(&self) -> &[u32] {
        &self.counts
    }

    /// How many pixels are 1 (pycocotools' `area`).
    pub fn area(&self) -> u64 {
        area(&self.counts)
    }

    /// The mask, row-major: `height * width` bytes of 0 or 1.
    pub fn decode(&self) -> Vec<u8> {
        decode(&self.counts, self.height, self.width)
    }

    /// COCO's compressed counts string (pycocotools' `rleToString`), what its `encode`
    /// returns as `counts`.
    pub fn to_compressed(&self) -> String {
        counts_to_string(&self.counts)
    }
}

/// The mask of the union of `polygons` (each `[x1, y1, x2, y2, ...]` in pixels, as in a
/// COCO file), row-major `height * width` bytes of 0 or 1: bit-identical to
/// pycocotools' `decode(merge(frPyObjects(polygons, height, width)))`, which is what its
/// `annToMask` does with a polygon annotation.
///
/// The polygons may be anywhere, partly or wholly outside the mask, at any size: to make
/// the mask of a transformed image, transform the points and rasterise at the output's
/// size. A trailing odd coordinate is ignored, as pycocotools does. The result is
/// pycocotools' wherever pycocotools is defined (coordinates within about +-2e8 pixels);
/// beyond, points are clamped to +-2^40 pixels instead of overflowing. The cost grows with
/// the number of times the edges cross a pixel column of the mask, not with how far they
/// reach, and the memory it takes beside the mask stays below the mask's size.
pub fn polygons_to_mask<P: AsRef<[f64]>>(polygons: &[P], height: u32, width: u32) -> Vec<u8> {
    let mut mask = vec![0; height as usize * width as usize];
    let mut toggles = Vec::new();
    for polygon in polygons {
        fill_polygon(polygon.as_ref(), height, width, &mut toggles, &mut mask);
    }
    mask
}

/// Sets to 1 the pixels of `mask` (row-major `height * width`) inside the polygon
/// `coords`; `toggles` is scratch space.
pub(crate) fn fill_polygon(
    coords: &[f64],
    height: u32,
    width: u32,
    toggles: &mut Vec<u64>,
    mask: &mut [u8],
) {
    toggles.clear();
    let k = coords.len() / 2;
    if k == 0 || height == 0 || width == 0 {
        return;
    }
    let vertex = |j: usize| {
        (
            upsample(coords[2 * (j % k)]),
            upsample(coords[2 * (j % k) + 1]),
        )
    };
    // `rleFrPoly` walks every upsampled point of every edge in one sequence and makes a
    // boundary point wherever the x coordinate changes between consecutive points; the
    // last point of an edge and the first of the next are consecutive too.
    let total = u64::from(height) * u64::from(width);
    // A polygon crossing the columns very many times (a hostile zigzag) would make more
    // boundary points than the mask has pixels: past this many, they are folded into a
    // bit per pixel instead, so memory stays below the mask's own size.
    let most = (total / 16).max(1 << 12) as usize;
    let mut folded: Option<Vec<u64>> = None;
    let mut previous_end = None;
    for j in 0..k {
        let ((x0, y0), (x1, y1)) = (vertex(j), vertex(j + 1));
        let edge = Edge::new(x0, y0, x1, y1);
        if let Some(end) = previous_end {
            boundary_point(end, edge.point(0), height, width, toggles);
        }
        edge.boundary_points(height, width, toggles);
        previous_end = Some(edge.point(edge.len));
        if toggles.len() > most {
            let bits = folded.get_or_insert_with(|| vec![0; total as usize / 64 + 1]);
            fold(bits, toggles);
        }
    }
    // Each boundary point toggles the mask from there on (column-major); two at the same
    // pixel cancel, as `rleFrPoly` merges the empty run between them.
    if let Some(mut bits) = folded {
        fold(&mut bits, toggles);
        let mut inside = false;
        for i in 0..total {
            inside ^= bits[i as usize / 64] >> (i % 64) & 1 == 1;
            if inside {
                let (x, y) = (i / u64::from(height), i % u64::from(height));
                mask[y as usize * width as usize + x as usize] = 1;
            }
        }
        return;
    }
    toggles.sort_unstable();
    let mut start = None;
    let mut i = 0;
    while i < toggles.len() {
        let t = toggles[i];
        let same = toggles[i..].iter().take_while(|&&u| u == t).count();
        i += same;
        if same % 2 == 1 {
            start = match start {
                None => Some(t),
                Some(s) => {
                    fill_run(mask, height, width, s, t);
                    None
                }
            };
        }
    }
    if let Some(s) = start {
        fill_run(mask, height, width, s, total);
    }
}

/// Toggles the bits of `bits` at `toggles` (at most the mask's size), then empties it.
fn fold(bits: &mut [u64], toggles: &mut Vec<u64>) {
    for &t in toggles.iter() {
        bits[t as usize / 64] ^= 1 << (t % 64);
    }
    toggles.clear();
}

/// Sets to 1 the pixels of the column-major run `[start, end)` of a row-major mask.
fn fill_run(mask: &mut [u8], height: u32, width: u32, start: u64, end: u64) {
    let (h, w) = (u64::from(height), width as usize);
    let end = end.min(h * width as u64);
    let mut i = start;
    while i < end {
        let (x, y) = ((i / h) as usize, i % h);
        let rows = (h - y).min(end - i);
        for row in y..y + rows {
            mask[row as usize * w + x] = 1;
        }
        i += rows;
    }
}

/// `(int)(scale * c + .5)` of `rleFrPoly`: truncation toward zero, not rounding.
fn upsample(c: f64) -> i64 {
    truncate(SCALE * c + 0.5).clamp(-FAR, FAR)
}

/// C's conversion of a double to an integer (toward zero). NaN, which `rleFrPoly` meets
/// on an edge of length 0 (0/0), becomes what x86-64's conversion gives: the most
/// negative integer.
fn truncate(v: f64) -> i64 {
    if v.is_nan() {
        i64::MIN
    } else {
        v as i64
    }
}

/// One edge of a polygon as `rleFrPoly` walks it: `len + 1` points, one for each
/// upsampled unit along its longer axis, the other coordinate rounded its way.
struct Edge {
    /// Start after `rleFrPoly`'s flip (it walks from the smaller end of the longer axis).
    xs: i64,
    ys: i64,
    /// Whether x is the longer axis (`dx >= dy`).
    along_x: bool,
    /// Whether the ends were swapped; points are still numbered from the edge's first
    /// vertex, as `rleFrPoly` stores them.
    flip: bool,
    /// Steps along the longer axis.
    len: i64,
    /// Slope of the shorter axis against the longer.
    slope: f64,
}

impl Edge {
    fn new(x0: i64, y0: i64, x1: i64, y1: i64) -> Edge {
        let (dx, dy) = ((x1 - x0).abs(), (y1 - y0).abs());
        let along_x = dx >= dy;
        let flip = (along_x && x0 > x1) || (!along_x && y0 > y1);
        let (xs, ys, xe, ye) = if flip {
            (x1, y1, x0, y0)
        } else {
            (x0, y0, x1, y1)
        };
        let slope = if along_x {
            (ye - ys) as f64 / dx as f64
        } else {
            (xe - xs) as f64 / dy as f64
        };
        Edge {
            xs,
            ys,
            along_x,
            flip,
            len: dx.max(dy),
            slope,
        }
    }

    /// The `d`-th point from the edge's first vertex, as `rleFrPoly` computes it.
    fn point(&self, d: i64) -> (i64, i64) {
        let t = if self.flip { self.len - d } else { d };
        let across = |s: i64| truncate(s as f64 + self.slope * t as f64 + 0.5);
        if self.along_x {
            (t + self.xs, across(self.ys))
        } else {
            (across(self.xs), t + self.ys)
        }
    }

    /// The boundary points between consecutive points of the edge. Instead of walking
    /// every point (pycocotools does; an edge may be millions of points long), it finds
    /// the few that make one: x only ever moves one way along an edge (every
    /// rounding is monotone), and a change of x makes a boundary point only where the
    /// x it lands on maps to a whole pixel column of the mask. So for each column the
    /// edge crosses, the step onto it is found by bisection, then checked exactly.
    fn boundary_points(&self, height: u32, width: u32, out: &mut Vec<u64>) {
        if self.len == 0 {
            return;
        }
        let (first, last) = (self.point(0).0, self.point(self.len).0);
        if first == last {
            return;
        }
        let rising = last > first;
        // `rleFrPoly` takes x = u - 1 when u rises and x = u when it falls, and keeps it
        // if (x + .5) / 5 - .5 is a whole column n: x = 5n + 2. So the step lands on
        // 5n + 3 going right, on 5n + 2 going left.
        let (lowest, highest, offset) = if rising {
            (first + 1, last, 3)
        } else {
            (last, first - 1, 2)
        };
        let columns = (lowest - offset + 4).div_euclid(5).max(0)
            ..=(highest - offset).div_euclid(5).min(i64::from(width) - 1);
        for n in columns {
            let target = 5 * n + offset;
            let reached = |d: i64| {
                let u = self.point(d).0;
                if rising {
                    u >= target
                } else {
                    u <= target
                }
            };
            // The first point at or past the target: point 0 is before it, the last
            // point past it.
            let (mut lo, mut hi) = (1, self.len);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if reached(mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            if self.point(lo).0 == target {
                boundary_point(self.point(lo - 1), self.point(lo), height, width, out);
            }
        }
    }
}

/// The boundary point `rleFrPoly` makes between consecutive upsampled points `a` and
/// `b` (none unless x changes and lands on a column), as a column-major pixel index.
fn boundary_point(a: (i64, i64), b: (i64, i64), height: u32, width: u32, out: &mut Vec<u64>) {
    let ((u0, v0), (u1, v1)) = (a, b);
    if u1 == u0 {
        return;
    }
    let xd = (if u1 < u0 { u1 } else { u1 - 1 }) as f64;
    let xd = (xd + 0.5) / SCALE - 0.5;
    if xd.floor() != xd || xd < 0.0 || xd > f64::from(width - 1) {
        return;
    }
    let yd = (v0.min(v1) as f64 + 0.5) / SCALE - 0.5;
    let yd = yd.clamp(0.0, f64::from(height)).ceil();
    out.push(xd as u64 * u64::from(height) + yd as u64);
}

/// Pixels the counts cover must be exactly `height * width`.
pub(crate) fn check_coverage(counts: &[u32], height: u32, width: u32) -> Result<(), String> {
    let covered: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let pixels = u64::from(height) * u64::from(width);
    if covered != pixels {
        return Err(format!(
            "the counts cover {covered} pixels, a {height}x{width} mask has {pixels}"
        ));
    }
    Ok(())
}

/// Pixels that are 1: the odd runs.
pub(crate) fn area(counts: &[u32]) -> u64 {
    counts
        .iter()
        .skip(1)
        .step_by(2)
        .map(|&c| u64::from(c))
        .sum()
}

/// The row-major mask of counts that cover `height * width` pixels.
pub(crate) fn decode(counts: &[u32], height: u32, width: u32) -> Vec<u8> {
    let mut mask = vec![0; height as usize * width as usize];
    let mut at = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        let next = at + u64::from(c);
        if i % 2 == 1 {
            fill_run(&mut mask, height, width, at, next);
        }
        at = next;
    }
    mask
}

/// `rleToString`: each count (from the fourth on, its difference from the count two
/// before) in 5-bit groups, low first, as characters 48 to 111; bit 5 of a character
/// says another follows, bit 4 of the last is the sign.
pub(crate) fn counts_to_string(counts: &[u32]) -> String {
    let mut s = String::with_capacity(counts.len() * 2);
    for (i, &c) in counts.iter().enumerate() {
        let mut x = i64::from(c);
        if i > 2 {
            x -= i64::from(counts[i - 2]);
        }
        loop {
            let mut c = (x & 0x1f) as u8;
            x >>= 5;
            let more = if c & 0x10 != 0 { x != -1 } else { x != 0 };
            if more {
                c |= 0x20;
            }
            s.push(char::from(c + 48));
            if !more {
                break;
            }
        }
    }
    s
}

/// Why a compressed counts string was refused.
#[derive(Debug)]
pub(crate) enum BadCounts {
    /// More counts than allowed.
    TooMany,
    /// Not what `rleToString` writes (why).
    Malformed(String),
}

impl std::fmt::Display for BadCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadCounts::TooMany => f.write_str("too many counts"),
            BadCounts::Malformed(why) => f.write_str(why),
        }
    }
}

/// `rleFrString`, appending the counts to `out`; refuses characters outside 48..=111, a
/// count cut off at the end, a count of more than 7 characters and a count outside
/// `u32` (all of which pycocotools reads past or wraps), and more than `max_counts`
/// counts.
pub(crate) fn counts_from_string(
    s: &[u8],
    max_counts: usize,
    out: &mut Vec<u32>,
) -> Result<(), BadCounts> {
    let bad = |why: String| Err(BadCounts::Malformed(why));
    let start = out.len();
    let mut p = 0;
    while p < s.len() {
        if out.len() - start >= max_counts {
            return Err(BadCounts::TooMany);
        }
        let (mut x, mut k) = (0i64, 0u32);
        loop {
            let Some(&byte) = s.get(p) else {
                return bad("the string ends inside a count".into());
            };
            if !(48..=111).contains(&byte) {
                return bad(format!(
                    "character {:?} at {p} is not one of COCO's ('0' to 'o')",
                    char::from(byte)
                ));
            }
            if k == MAX_CHARS_PER_COUNT {
                return bad(format!("the count ending at {p} is too long"));
            }
            let c = i64::from(byte - 48);
            x |= (c & 0x1f) << (5 * k);
            p += 1;
            k += 1;
            if c & 0x20 == 0 {
                if c & 0x10 != 0 {
                    x |= -1i64 << (5 * k);
                }
                break;
            }
        }
        let n = out.len() - start;
        if n > 2 {
            x += i64::from(out[out.len() - 2]);
        }
        match u32::try_from(x) {
            Ok(count) => out.push(count),
            Err(_) => return bad(format!("count {n} is {x}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line-for-line port of pycocotools' `rleFrPoly` (every point of every edge
    /// stored, then sorted), the reference the fast walk is checked against.
    fn rle_fr_poly(xy: &[f64], h: u32, w: u32) -> Vec<u32> {
        let k = xy.len() / 2;
        let (hs, ws) = (i64::from(h), i64::from(w));
        let mut x: Vec<i64> = (0..k).map(|j| upsample(xy[2 * j])).collect();
        let mut y: Vec<i64> = (0..k).map(|j| upsample(xy[2 * j + 1])).collect();
        x.push(x[0]);
        y.push(y[0]);
        let (mut u, mut v) = (Vec::new(), Vec::new());
        for j in 0..k {
            let (mut xs, mut xe, mut ys, mut ye) = (x[j], x[j + 1], y[j], y[j + 1]);
            let (dx, dy) = ((xe - xs).abs(), (ys - ye).abs());
            let flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
            if flip {
                std::mem::swap(&mut xs, &mut xe);
                std::mem::swap(&mut ys, &mut ye);
            }
            let s = if dx >= dy {
                (ye - ys) as f64 / dx as f64
            } else {
                (xe - xs) as f64 / dy as f64
            };
            if dx >= dy {
                for d in 0..=dx {
                    let t = if flip { dx - d } else { d };
                    u.push(t + xs);
                    v.push(truncate(ys as f64 + s * t as f64 + 0.5));
                }
            } else {
                for d in 0..=dy {
                    let t = if flip { dy - d } else { d };
                    v.push(t + ys);
                    u.push(truncate(xs as f64 + s * t as f64 + 0.5));
                }
            }
        }
        let mut a = Vec::new();
        for j in 1..u.len() {
            if u[j] != u[j - 1] {
                let xd = (if u[j] < u[j - 1] { u[j] } else { u[j] - 1 }) as f64;
                let xd = (xd + 0.5) / 5.0 - 0.5;
                if xd.floor() != xd || xd < 0.0 || xd > (ws - 1) as f64 {
                    continue;
                }
                let mut yd = (v[j].min(v[j - 1]) as f64 + 0.5) / 5.0 - 0.5;
                if yd < 0.0 {
                    yd = 0.0;
                } else if yd > hs as f64 {
                    yd = hs as f64;
                }
                a.push((xd as i64 * hs + yd.ceil() as i64) as u32);
            }
        }
        a.push(h * w);
        a.sort_unstable();
        let mut p = 0;
        for t in a.iter_mut() {
            let was = *t;
            *t -= p;
            p = was;
        }
        let mut b = vec![a[0]];
        let mut j = 1;
        while j < a.len() {
            if a[j] > 0 {
                b.push(a[j]);
                j += 1;
            } else {
                j += 1;
                if j < a.len() {
                    *b.last_mut().unwrap() += a[j];
                    j += 1;
                }
            }
        }
        b
    }

    /// A fixed-seed generator (splitmix64) for the tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Uniform in [lo, hi), on a grid of `step` (0: any double).
        fn coord(&mut self, lo: f64, hi: f64, step: f64) -> f64 {
            let v = lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64;
            if step > 0.0 {
                (v / step).round() * step
            } else {
                v
            }
        }
    }

    #[test]
    fn fast_walk_matches_the_literal_port() {
        let mut rng = Rng(7);
        for case in 0..4000 {
            let h = 1 + rng.below(40) as u32;
            let w = 1 + rng.below(40) as u32;
            let points = 1 + rng.below(9) as usize;
            let (reach, step) = match case % 4 {
                0 => (1.5, 0.0),
                1 => (1.5, 0.1),
                2 => (3.0, 0.2),
                _ => (1.2, 0.5),
            };
            let (lo_x, hi_x) = (-reach * f64::from(w) / 2.0, reach * f64::from(w));
            let (lo_y, hi_y) = (-reach * f64::from(h) / 2.0, reach * f64::from(h));
            let mut poly = Vec::new();
            for _ in 0..points {
                poly.push(rng.coord(lo_x, hi_x, step));
                poly.push(rng.coord(lo_y, hi_y, step));
            }
            if case % 7 == 0 {
                // A repeated vertex (an edge of length 0).
                let first = [poly[0], poly[1]];
                poly.extend_from_slice(&first);
            }
            let want = decode(&rle_fr_poly(&poly, h, w), h, w);
            let got = polygons_to_mask(&[&poly], h, w);
            assert_eq!(got, want, "case {case}: {h}x{w} {poly:?}");
        }
    }

    #[test]
    fn a_zigzag_crossing_the_columns_thousands_of_times_is_exact() {
        // 2 000 vertices alternating between the left and right borders: about 70 000
        // boundary points on a 35-pixel-wide mask, folded into bits past 4 096.
        let mut rng = Rng(5);
        let (h, w) = (23, 35);
        let zigzag: Vec<f64> = (0..2_000)
            .flat_map(|i| {
                let x = if i % 2 == 0 { -3.0 } else { 38.0 };
                [x + rng.coord(0.0, 1.0, 0.0), rng.coord(-2.0, 25.0, 0.1)]
            })
            .collect();
        let want = decode(&rle_fr_poly(&zigzag, h, w), h, w);
        assert!(want.contains(&0) && want.contains(&1));
        assert_eq!(polygons_to_mask(&[&zigzag], h, w), want);
    }

    #[test]
    fn far_points_cost_nothing_and_stay_exact() {
        // Reaching 10^6 pixels away: the literal port walks 5 million points an edge.
        let poly = [-1.0e6, 3.3, 7.7, -2.0e6, 1.0e6 + 0.3, 9.9];
        assert_eq!(
            polygons_to_mask(&[&poly], 13, 17),
            decode(&rle_fr_poly(&poly, 13, 17), 13, 17)
        );
        // Far past where pycocotools is defined: clamped, no overflow, no hang.
        let poly = [-1e300, 0.0, 1e300, 5.0, 3.0, 1e300, f64::NAN, 2.0];
        let mask = polygons_to_mask(&[&poly], 9, 11);
        assert_eq!(mask.len(), 99);
    }

    #[test]
    fn string_codec_round_trips() {
        let mut rng = Rng(3);
        for _ in 0..2000 {
            let n = rng.below(12) as usize;
            let counts: Vec<u32> = (0..n)
                .map(|_| match rng.below(4) {
                    0 => rng.next() as u32,
                    1 => rng.below(32) as u32,
                    _ => rng.below(100_000) as u32,
                })
                .collect();
            let s = counts_to_string(&counts);
            let mut back = Vec::new();
            counts_from_string(s.as_bytes(), usize::MAX, &mut back).unwrap();
            assert_eq!(back, counts, "{s}");
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut rng = Rng(11);
        for _ in 0..300 {
            let (h, w) = (rng.below(9) as u32, rng.below(9) as u32);
            let mask: Vec<u8> = (0..h * w).map(|_| (rng.below(3) == 0) as u8).collect();
            let rle = Rle::encode(&mask, h, w).unwrap();
            assert_eq!(rle.decode(), mask);
            assert_eq!(rle.area(), mask.iter().map(|&b| u64::from(b)).sum::<u64>());
            let again = Rle::from_compressed(h, w, &rle.to_compressed()).unwrap();
            assert_eq!(again, rle);
        }
    }

    #[test]
    fn malformed_strings_are_refused() {
        let mut out = Vec::new();
        for bad in ["p", " ", "0`", "ooooooo0", "1\u{7f}"] {
            out.clear();
            assert!(
                counts_from_string(bad.as_bytes(), 100, &mut out).is_err(),
                "{bad}"
            );
        }
        assert!(counts_from_string(b"1111", 3, &mut out).is_err());
        assert!(Rle::from_compressed(2, 2, "15").is_err());
        assert!(Rle::from_compressed(2, 2, "13").is_ok());
        assert!(Rle::encode(&[0; 3], 2, 2).is_err());
    }
}
