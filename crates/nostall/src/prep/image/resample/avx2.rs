//! The AVX2 path of the resampler: both passes vectorised across rows (see the parent
//! module's doc).
//!
//! The inner loops load through raw pointers: a bounds check per 16-byte load costs as
//! much as the arithmetic it feeds. Each function checks once, up front, that every
//! address its loops form lies inside its slices; the comments at the loads say which
//! check covers them.

use std::arch::x86_64::*;

use super::{vertical_elements, Axis, Image, Resampler, BITS, BLOCK, HALF};

/// Output rows `y0..y0 + BLOCK` (rows past `height` repeat the last one and are not
/// used) into `r.block`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn block(
    r: &mut Resampler,
    src: Image<'_>,
    y0: usize,
    height: usize,
    width: usize,
) {
    let (bytes, stride) = (r.cols.span() * 3, r.stride);
    for i in 0..BLOCK {
        let y = (y0 + i).min(height - 1);
        let line = &mut r.vertical[i * stride..i * stride + bytes];
        vertical_row(&r.rows, &r.cols, src, y, &mut r.offsets, line);
    }
    to_columns(&r.vertical, stride, &mut r.columns);
    horizontal(&r.cols, &r.columns, &mut r.staged, width);
    to_rows(&r.staged, width, &mut r.block);
}

/// The vertical pass for output row `y`, 32 elements at a time.
#[inline(always)]
unsafe fn vertical_row(
    rows: &Axis,
    cols: &Axis,
    src: Image<'_>,
    y: usize,
    offsets: &mut Vec<usize>,
    line: &mut [u8],
) {
    let stride = src.width * 3;
    let left = cols.first * 3;
    let start = rows.first + rows.starts[y];
    let last = src.height - 1;
    // Where each tap's row begins; padded taps (zero weight) reread the last row.
    offsets.clear();
    offsets.extend((0..rows.taps).map(|k| (start + k).min(last) * stride + left));
    let bytes = line.len();
    if bytes < 32 {
        return vertical_elements(rows, cols, src, y, 0, line);
    }
    // Every offset is at most `last * stride + left`, and the loads below read at most
    // `bytes` from an offset.
    assert!(last * stride + left + bytes <= src.pixels.len());
    let pixels = src.pixels.as_ptr();
    let zero = _mm256_setzero_si256();
    let mut next = 0;
    loop {
        // The last chunk ends at `bytes`, overlapping the one before: recomputing a few
        // elements is cheaper than a scalar tail.
        let e = next.min(bytes - 32);
        next += 32;
        let mut sums = [_mm256_set1_epi32(HALF); 4];
        for (pair, at) in rows.weights(y).chunks_exact(2).zip(offsets.chunks_exact(2)) {
            let w = pair_weights(pair);
            // SAFETY: `e + 32 <= bytes`, and the assertion above.
            let (a, b) = (
                _mm256_loadu_si256(pixels.add(at[0] + e).cast()),
                _mm256_loadu_si256(pixels.add(at[1] + e).cast()),
            );
            // 16-bit elements 0–7 | 16–23 and 8–15 | 24–31 of each row, then paired.
            let (a_lo, a_hi) = (_mm256_unpacklo_epi8(a, zero), _mm256_unpackhi_epi8(a, zero));
            let (b_lo, b_hi) = (_mm256_unpacklo_epi8(b, zero), _mm256_unpackhi_epi8(b, zero));
            let pairs = [
                _mm256_unpacklo_epi16(a_lo, b_lo),
                _mm256_unpackhi_epi16(a_lo, b_lo),
                _mm256_unpacklo_epi16(a_hi, b_hi),
                _mm256_unpackhi_epi16(a_hi, b_hi),
            ];
            for (sum, pair) in sums.iter_mut().zip(pairs) {
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pair, w));
            }
        }
        let [s0, s1, s2, s3] = sums;
        // `packs` then `packus` undo the unpacking's order: elements 0–31 in order.
        let packed = _mm256_packus_epi16(
            _mm256_packs_epi32(descale(s0), descale(s1)),
            _mm256_packs_epi32(descale(s2), descale(s3)),
        );
        store32(&mut line[e..], packed);
        if e == bytes - 32 {
            break;
        }
    }
}

/// Transposes `BLOCK` rows of `stride` bytes so that element `e` of every row lies at
/// `columns[e * 16..e * 16 + 16]`.
#[inline(always)]
unsafe fn to_columns(rows: &[u8], stride: usize, columns: &mut [u8]) {
    assert!(
        stride.is_multiple_of(32) && rows.len() >= BLOCK * stride && columns.len() >= stride * 16
    );
    for e in (0..stride).step_by(32) {
        // Each register holds elements e..e+16 of a row in its low lane, e+16..e+32 in
        // its high lane: two 16×16 transposes at once.
        let mut t = [_mm256_setzero_si256(); 16];
        for (i, t) in t.iter_mut().enumerate() {
            *t = load32(&rows[i * stride + e..]);
        }
        transpose(&mut t);
        for (j, v) in t.iter().enumerate() {
            store16(&mut columns[(e + j) * 16..], _mm256_castsi256_si128(*v));
            store16(
                &mut columns[(e + 16 + j) * 16..],
                _mm256_extracti128_si256::<1>(*v),
            );
        }
    }
}

/// The horizontal pass over the transposed rows: for each output pixel, the three
/// channels of its 16 rows, at `staged[(c * width + x) * 16..]`.
#[inline(always)]
unsafe fn horizontal(cols: &Axis, columns: &[u8], staged: &mut [u8], width: usize) {
    // Pixel p's channel c starts at byte (p * 3 + c) * 16; output x reads pixels
    // starts[x]..starts[x] + taps, and every start is at most `span`.
    assert!((cols.span() + cols.taps) * 48 <= columns.len());
    assert!(cols.starts.len() == width && staged.len() >= 3 * width * 16);
    let base = columns.as_ptr();
    for (x, &start) in cols.starts.iter().enumerate() {
        let mut sums = [_mm256_set1_epi32(HALF); 6];
        for (k, pair) in cols.weights(x).chunks_exact(2).enumerate() {
            let w = pair_weights(pair);
            // SAFETY: pixels start + 2k and start + 2k + 1 are below span + taps, the
            // first assertion above.
            let a = base.add((start + 2 * k) * 48);
            for c in 0..3 {
                let pa = _mm256_cvtepu8_epi16(_mm_loadu_si128(a.add(c * 16).cast()));
                let pb = _mm256_cvtepu8_epi16(_mm_loadu_si128(a.add(48 + c * 16).cast()));
                let (lo, hi) = (_mm256_unpacklo_epi16(pa, pb), _mm256_unpackhi_epi16(pa, pb));
                sums[2 * c] = _mm256_add_epi32(sums[2 * c], _mm256_madd_epi16(lo, w));
                sums[2 * c + 1] = _mm256_add_epi32(sums[2 * c + 1], _mm256_madd_epi16(hi, w));
            }
        }
        for c in 0..3 {
            // Within each lane `packs` restores the order: rows 0–7, then 8–15.
            let words = _mm256_packs_epi32(descale(sums[2 * c]), descale(sums[2 * c + 1]));
            let bytes =
                _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi16(words, words));
            store16(
                &mut staged[(c * width + x) * 16..],
                _mm256_castsi256_si128(bytes),
            );
        }
    }
}

/// Transposes the staged columns back into three planes of `BLOCK` rows.
#[inline(always)]
unsafe fn to_rows(staged: &[u8], width: usize, block: &mut [u8]) {
    let plane = BLOCK * width;
    let whole = width - width % 32;
    for c in 0..3 {
        let staged = &staged[c * width * 16..(c + 1) * width * 16];
        let out = &mut block[c * plane..(c + 1) * plane];
        for x in (0..whole).step_by(32) {
            // Pixels x..x+16 in the low lanes, x+16..x+32 in the high ones.
            let mut t = [_mm256_setzero_si256(); 16];
            for (j, t) in t.iter_mut().enumerate() {
                let (lo, hi) = (&staged[(x + j) * 16..], &staged[(x + 16 + j) * 16..]);
                *t = _mm256_set_m128i(load16(hi), load16(lo));
            }
            transpose(&mut t);
            for (i, v) in t.iter().enumerate() {
                store32(&mut out[i * width + x..], *v);
            }
        }
        for x in whole..width {
            for i in 0..BLOCK {
                out[i * width + x] = staged[x * 16 + i];
            }
        }
    }
}

/// Two weights, repeated in every pair of 16-bit lanes for `madd`.
#[inline(always)]
unsafe fn pair_weights(pair: &[i16]) -> __m256i {
    _mm256_set1_epi32((pair[0] as u16 as i32) | ((pair[1] as i32) << 16))
}

/// Fixed-point sums back to pixel values (the rounding term is in the initial sum).
#[inline(always)]
unsafe fn descale(v: __m256i) -> __m256i {
    _mm256_srai_epi32::<{ BITS as i32 }>(v)
}

/// Transposes two 16×16 matrices of bytes at once, one in each 128-bit lane, one row
/// per register.
///
/// Written as loops over arrays rather than with `array::from_fn`: a closure does not
/// inherit the caller's `target_feature`, and intrinsics in it would not be inlined.
#[inline(always)]
unsafe fn transpose(r: &mut [__m256i; 16]) {
    let mut t = [_mm256_setzero_si256(); 16];
    // Rows 2i and 2i+1, interleaved: columns 0–7 in t[i], 8–15 in t[8 + i].
    for i in 0..8 {
        t[i] = _mm256_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        t[8 + i] = _mm256_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    // r[4g + i]: rows 4i..4i+4 of columns 4g..4g+4.
    for h in 0..2 {
        for i in 0..4 {
            let (p, q) = (t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
            r[8 * h + i] = _mm256_unpacklo_epi16(p, q);
            r[8 * h + 4 + i] = _mm256_unpackhi_epi16(p, q);
        }
    }
    // t[4g + 2s + i]: rows 8i..8i+8 of columns 4g+2s, 4g+2s+1.
    for g in 0..4 {
        for i in 0..2 {
            let (p, q) = (r[4 * g + 2 * i], r[4 * g + 2 * i + 1]);
            t[4 * g + i] = _mm256_unpacklo_epi32(p, q);
            t[4 * g + 2 + i] = _mm256_unpackhi_epi32(p, q);
        }
    }
    // Column n: rows 0–7 from one register, 8–15 from the next.
    for n in (0..16).step_by(2) {
        r[n] = _mm256_unpacklo_epi64(t[n], t[n + 1]);
        r[n + 1] = _mm256_unpackhi_epi64(t[n], t[n + 1]);
    }
}

/// The first 16 bytes of `s` (bounds-checked).
#[inline(always)]
unsafe fn load16(s: &[u8]) -> __m128i {
    let s: &[u8; 16] = s[..16].try_into().unwrap();
    _mm_loadu_si128(s.as_ptr().cast())
}

/// The first 32 bytes of `s` (bounds-checked).
#[inline(always)]
unsafe fn load32(s: &[u8]) -> __m256i {
    let s: &[u8; 32] = s[..32].try_into().unwrap();
    _mm256_loadu_si256(s.as_ptr().cast())
}

/// `v` into the first 16 bytes of `s` (bounds-checked).
#[inline(always)]
unsafe fn store16(s: &mut [u8], v: __m128i) {
    let s: &mut [u8; 16] = (&mut s[..16]).try_into().unwrap();
    _mm_storeu_si128(s.as_mut_ptr().cast(), v)
}

/// `v` into the first 32 bytes of `s` (bounds-checked).
#[inline(always)]
unsafe fn store32(s: &mut [u8], v: __m256i) {
    let s: &mut [u8; 32] = (&mut s[..32]).try_into().unwrap();
    _mm256_storeu_si256(s.as_mut_ptr().cast(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_swaps_rows_and_columns_in_each_lane() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        // Two matrices: row i holds 32 bytes, 16 of each.
        let m: Vec<u8> = (0..512).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = vec![0u8; 512];
        // SAFETY: AVX2 is present, checked above.
        unsafe {
            let mut t = [_mm256_setzero_si256(); 16];
            for (i, t) in t.iter_mut().enumerate() {
                *t = load32(&m[i * 32..]);
            }
            transpose(&mut t);
            for (j, v) in t.iter().enumerate() {
                store32(&mut out[j * 32..], *v);
            }
        }
        for (j, i, lane) in
            (0..16).flat_map(|j| (0..16).flat_map(move |i| (0..2).map(move |l| (j, i, l))))
        {
            assert_eq!(
                out[j * 32 + lane * 16 + i],
                m[i * 32 + lane * 16 + j],
                "{j} {i} {lane}"
            );
        }
    }
}
