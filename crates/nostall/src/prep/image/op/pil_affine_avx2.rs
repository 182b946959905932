//! PIL's affine transform ([`super::pil`]'s `affine`) in AVX2 intrinsics: four output
//! pixels at a time everywhere, each lane computed with PIL's arithmetic, so the bytes are
//! the portable kernel's.
//!
//! The portable kernel samples four pixels together only where all their taps lie inside
//! the image, and takes the others one at a time, clipping each tap as PIL does. Here the
//! source is first copied with its edges repeated [`PAD`] pixels past each side, which is
//! what that clipping reads: a column outside is its edge's (`XCLIP`); the first row is
//! clipped likewise (`YCLIP`), and a later row outside repeats the row before it, which by
//! induction is again the nearest edge's row (above the image every row before it is row
//! 0; below, the last row). So every point inside the image reads its taps unclipped from
//! the copy, and a group of four that is partly outside is computed at a harmless point in
//! its outside lanes, which then take the fill.
//!
//! The arithmetic is PIL's, operation by operation in its order, each rounded alone: no
//! instruction here fuses a multiply into an add (FMA is not enabled). The cubic's terms
//! along a row are sums of bytes with small whole weights, exact in any type, so they come
//! from integer multiply-adds of the bytes; the polynomial and the cubic down the columns
//! stay in 64-bit floats.
//!
//! The taps are read through raw pointers, four bytes a load: a bounds check on each of
//! the 48 loads of a group costs more than its arithmetic. [`First`] is the one check:
//! every window it points at lies inside the padded planes.

use std::arch::x86_64::*;

use super::pil::Resample;
use super::Planes;

/// Pixels of edge repeated past each side of the padded copy: a bicubic window starts at
/// most two columns (rows) before the image, for a point in its first half-pixel, and
/// ends at most two after it.
const PAD: usize = 2;

/// 2^52, the least `f64` whose neighbours are 1 apart.
const TWO_52: f64 = (1u64 << 52) as f64;

/// Proof that the CPU has AVX2: made only where it does, so that the kernel is safe to
/// run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Avx2(());

impl Avx2 {
    /// The proof, where the CPU has AVX2.
    pub(super) fn detect() -> Option<Avx2> {
        std::arch::is_x86_feature_detected!("avx2").then_some(Avx2(()))
    }
}

/// [`super::pil`]'s `affine` (`image.transform(image.size, Image.AFFINE, a, resample,
/// fillcolor=fill)`) on a CPU with AVX2, to the byte.
pub(super) fn affine(
    avx2: Avx2,
    image: &mut Planes<'_>,
    a: [f64; 6],
    resample: Resample,
    fill: [u8; 3],
) {
    let Avx2(()) = avx2;
    // SAFETY: an `Avx2` exists only where the CPU has AVX2, the one feature `kernel` is
    // compiled for; it is otherwise safe code.
    unsafe { kernel(image, a, resample, fill) }
}

/// The three planes with their edges repeated [`PAD`] pixels past each side.
struct Padded {
    data: Vec<u8>,
    /// Bytes a row.
    stride: usize,
    /// Bytes a plane.
    plane: usize,
}

impl Padded {
    /// The padded copy of the three `width` × `height` planes in `source`.
    fn new(source: &[u8], width: usize, height: usize) -> Padded {
        let stride = width + 2 * PAD;
        let plane = stride * (height + 2 * PAD);
        let mut data = Vec::with_capacity(3 * plane);
        for source in source.chunks_exact(width * height).take(3) {
            for y in 0..height + 2 * PAD {
                let y = y.saturating_sub(PAD).min(height - 1);
                let row = &source[y * width..(y + 1) * width];
                data.extend_from_slice(&[row[0]; PAD]);
                data.extend_from_slice(row);
                data.extend_from_slice(&[row[width - 1]; PAD]);
            }
        }
        assert_eq!(data.len(), 3 * plane, "three planes");
        // The spare byte that [`Padded::row`]'s one load of adjacent windows may read.
        data.push(0);
        // Offsets in a plane are below 2^52: exact in `f64`, and read back by [`First`].
        assert!((plane as f64) < TWO_52, "a plane of at most 2^52 bytes");
        Padded {
            data,
            stride,
            plane,
        }
    }

    /// The largest offset in a plane a 4 × 4 window of taps may start at.
    fn last_first(&self) -> usize {
        self.plane - 3 * self.stride - 4
    }

    /// The words (four taps, the lowest byte the leftmost) on row `r` of each lane's window
    /// in plane `c`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn row(&self, c: usize, first: &First, r: usize) -> __m128i {
        assert!(c < 3 && r < 4, "a window has 4 rows, the copy 3 planes");
        let at = c * self.plane + r * self.stride;
        let p = self.data.as_ptr();
        let [f0, f1, f2, f3] = first.offsets;
        if first.adjacent {
            // SAFETY: `f0 + 3` is `f3`, so the 8 bytes from `at + f0` end one byte past
            // lane 3's word, which ends inside the 3 planes (as below): at most at the
            // spare byte after them.
            let bytes = unsafe { _mm_loadl_epi64(p.add(at + f0).cast()) };
            return _mm_shuffle_epi8(
                bytes,
                _mm_setr_epi8(0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6),
            );
        }
        // SAFETY: each `f` is at most `last_first()`, so the word at `at + f` ends by `c ·
        // plane + 3 · stride + last_first() + 4 = (c + 1) · plane`, inside the 3 planes.
        let [w0, w1, w2, w3] = unsafe {
            [
                word(p, at + f0),
                word(p, at + f1),
                word(p, at + f2),
                word(p, at + f3),
            ]
        };
        _mm_setr_epi32(w0, w1, w2, w3)
    }

    /// Rows `r` and `r + 1` of [`Padded::row`] in one register, `r` in the low half.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn rows(&self, c: usize, first: &First, r: usize) -> __m256i {
        _mm256_set_m128i(self.row(c, first, r + 1), self.row(c, first, r))
    }
}

/// The four bytes at `p + at`, as a little-endian word.
///
/// # Safety
/// They must lie inside one allocation.
#[inline(always)]
unsafe fn word(p: *const u8, at: usize) -> i32 {
    // SAFETY: the caller's promise; the read is unaligned.
    unsafe { p.add(at).cast::<i32>().read_unaligned() }
}

/// Each lane's first tap: the offset in a padded plane of the top left of its bicubic
/// window (the bilinear filter's 2 × 2 taps are its second and third rows and columns).
struct First {
    /// The offsets, never past [`Padded::last_first`].
    offsets: [usize; 4],
    /// Whether each window is one column right of the one before: a row's taps of the four
    /// lanes are then 7 bytes in a row, one load (a translation's, a horizontal shear's).
    adjacent: bool,
}

impl First {
    /// The windows of the points whose floors are `(fx, fy)`, clamped into the planes: a
    /// point inside the image needs no clamping (its floors are at least −1 and below the
    /// size), and any other is still read safely. Adjacent windows are looked for only
    /// where `in_rows`: elsewhere they are too rare to be worth a branch.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn new(fx: __m256d, fy: __m256d, source: &Padded, in_rows: bool) -> First {
        // The window starts one before the floor, the copy `PAD` (2) before the image.
        let one = _mm256_set1_pd(1.0);
        let stride = _mm256_set1_pd(source.stride as f64);
        let first = _mm256_add_pd(
            _mm256_mul_pd(_mm256_add_pd(fy, one), stride),
            _mm256_add_pd(fx, one),
        );
        // `max` first, which takes its second operand (0) for a NaN.
        let first = _mm256_min_pd(
            _mm256_max_pd(first, _mm256_setzero_pd()),
            _mm256_set1_pd(source.last_first() as f64),
        );
        // Whole numbers in [0, 2^52): 2^52 added, their bits are 2^52's with the number in
        // the low 52 (one addition and one mask, where a conversion of each lane alone
        // takes a dozen instructions).
        let bits = _mm256_castpd_si256(_mm256_add_pd(first, _mm256_set1_pd(TWO_52)));
        let first = _mm256_and_si256(bits, _mm256_set1_epi64x((1 << 52) - 1));
        let adjacent = in_rows && {
            let steps = _mm256_add_epi64(
                _mm256_permute4x64_epi64::<0>(first),
                _mm256_setr_epi64x(0, 1, 2, 3),
            );
            _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(first, steps))) == 0b1111
        };
        First {
            offsets: [
                _mm256_extract_epi64::<0>(first) as usize,
                _mm256_extract_epi64::<1>(first) as usize,
                _mm256_extract_epi64::<2>(first) as usize,
                _mm256_extract_epi64::<3>(first) as usize,
            ],
            adjacent,
        }
    }
}

/// The affine transform, four output pixels a group.
#[target_feature(enable = "avx2")]
fn kernel(image: &mut Planes<'_>, a: [f64; 6], resample: Resample, fill: [u8; 3]) {
    let (width, height) = (image.width, image.height);
    let area = image.area();
    if area == 0 {
        return;
    }
    let source = Padded::new(&image.data[..3 * area], width, height);
    let out = &mut image.data[..3 * area];
    let [a0, a1, a2, a3, a4, a5] = [
        _mm256_set1_pd(a[0]),
        _mm256_set1_pd(a[1]),
        _mm256_set1_pd(a[2]),
        _mm256_set1_pd(a[3]),
        _mm256_set1_pd(a[4]),
        _mm256_set1_pd(a[5]),
    ];
    let (zero, half) = (_mm256_setzero_pd(), _mm256_set1_pd(0.5));
    let (w, h) = (_mm256_set1_pd(width as f64), _mm256_set1_pd(height as f64));
    let lanes = _mm256_setr_pd(0.5, 1.5, 2.5, 3.5);
    // Neighbouring outputs sample neighbouring columns of one row (but where rounding steps
    // aside).
    let in_rows = a[0] == 1.0 && a[3] == 0.0;
    for y in 0..height {
        let yin = _mm256_set1_pd(y as f64 + 0.5);
        let (a1y, a4y) = (_mm256_mul_pd(a1, yin), _mm256_mul_pd(a4, yin));
        for x in (0..width).step_by(4) {
            let n = (width - x).min(4);
            let i = y * width + x;
            // `(x + k) as f64 + 0.5`, exactly.
            let xin = _mm256_add_pd(_mm256_set1_pd(x as f64), lanes);
            // `a0·xin + a1·yin + a2`, in that order.
            let sx = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(a0, xin), a1y), a2);
            let sy = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(a3, xin), a4y), a5);
            // As the filters test a point (a NaN is outside), and lanes past the row's end.
            let inside = _mm256_and_pd(
                _mm256_and_pd(
                    _mm256_cmp_pd::<_CMP_GE_OQ>(sx, zero),
                    _mm256_cmp_pd::<_CMP_LT_OQ>(sx, w),
                ),
                _mm256_and_pd(
                    _mm256_cmp_pd::<_CMP_GE_OQ>(sy, zero),
                    _mm256_cmp_pd::<_CMP_LT_OQ>(sy, h),
                ),
            );
            let inside = _mm256_and_pd(inside, _mm256_cmp_pd::<_CMP_LT_OQ>(xin, w));
            let mask = _mm256_movemask_pd(inside);
            if mask == 0 {
                for (c, &value) in fill.iter().enumerate() {
                    store(&mut out[c * area + i..][..n], [value; 4]);
                }
                continue;
            }
            // The lanes outside sample the first pixel's centre instead: distances 0, which
            // leave the one-axis paths open, and a window inside the copy.
            let sx = _mm256_blendv_pd(half, sx, inside);
            let sy = _mm256_blendv_pd(half, sy, inside);
            // `BILINEAR_HEAD` and `BICUBIC_HEAD`: the point less half a pixel, its floor
            // and its distance from it.
            let (px, py) = (_mm256_sub_pd(sx, half), _mm256_sub_pd(sy, half));
            let (fx, fy) = (_mm256_floor_pd(px), _mm256_floor_pd(py));
            let (dx, dy) = (_mm256_sub_pd(px, fx), _mm256_sub_pd(py, fy));
            let first = First::new(fx, fy, &source, in_rows);
            let values = match resample {
                Resample::Bilinear => bilinear(&source, &first, dx, dy),
                // As the portable kernel: along one axis where the other's distances are all
                // 0 (a cubic at 0 is its second value exactly, so either way the bytes are
                // the same).
                Resample::Bicubic if all_zero(dy) => along_row(&source, &first, dx),
                Resample::Bicubic if all_zero(dx) => along_column(&source, &first, dy),
                Resample::Bicubic => bicubic(&source, &first, dx, dy),
            };
            let mut bytes = to_bytes(values);
            if mask != 0b1111 {
                // The outside lanes' bytes, each `0xFF`.
                let outside = u32::from_le_bytes([0, 1, 2, 3].map(|k| {
                    if mask & (1 << k) == 0 {
                        0xFF
                    } else {
                        0
                    }
                }));
                for (bytes, &value) in bytes.iter_mut().zip(&fill) {
                    *bytes = (*bytes & !outside) | (u32::from_le_bytes([value; 4]) & outside);
                }
            }
            for (c, bytes) in bytes.iter().enumerate() {
                store(&mut out[c * area + i..][..n], bytes.to_le_bytes());
            }
        }
    }
}

/// The first `out.len()` (at most 4) of `bytes` into `out`: a whole group one store, a
/// short one byte by byte (a copy of a length not known would call `memcpy`).
#[inline(always)]
fn store(out: &mut [u8], bytes: [u8; 4]) {
    if let Ok(out) = <&mut [u8; 4]>::try_from(&mut *out) {
        *out = bytes;
    } else {
        for (out, byte) in out.iter_mut().zip(bytes) {
            *out = byte;
        }
    }
}

/// Whether all four lanes of `v` are 0.
#[target_feature(enable = "avx2")]
#[inline]
fn all_zero(v: __m256d) -> bool {
    _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_EQ_OQ>(v, _mm256_setzero_pd())) == 0b1111
}

/// The bilinear filter (`bilinear_filter32RGB`): `v1 + (v2 − v1)·dy`, each row's `a + (b −
/// a)·dx`; `b − a`, a difference of bytes, is exact in integers.
#[target_feature(enable = "avx2")]
#[inline]
fn bilinear(source: &Padded, first: &First, dx: __m256d, dy: __m256d) -> [__m256d; 3] {
    let mut values = [_mm256_setzero_pd(); 3];
    for (c, value) in values.iter_mut().enumerate() {
        let words = source.rows(c, first, 1);
        let a = byte::<1>(words);
        let b = byte::<2>(words);
        let step = _mm256_sub_epi32(b, a);
        let [a1, a2] = halves(a);
        let [s1, s2] = halves(step);
        let v1 = _mm256_add_pd(a1, _mm256_mul_pd(s1, dx));
        let v2 = _mm256_add_pd(a2, _mm256_mul_pd(s2, dx));
        *value = _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), dy));
    }
    values
}

/// The bicubic filter where every `dy` is 0: the cubic along the window's second row.
#[target_feature(enable = "avx2")]
#[inline]
fn along_row(source: &Padded, first: &First, dx: __m256d) -> [__m256d; 3] {
    let pair = row_terms(_mm256_set_m128i(
        source.row(1, first, 1),
        source.row(0, first, 1),
    ));
    // The third channel's alone, in the low half.
    let third = row_terms(_mm256_castsi128_si256(source.row(2, first, 1)));
    let mut terms = [[_mm256_setzero_pd(); 3]; 4];
    for (t, terms) in terms.iter_mut().enumerate() {
        [terms[0], terms[1]] = halves(pair[t]);
        terms[2] = _mm256_cvtepi32_pd(_mm256_castsi256_si128(third[t]));
    }
    polynomials(terms, dx)
}

/// The bicubic filter where every `dx` is 0: the cubic down the window's second column.
#[target_feature(enable = "avx2")]
#[inline]
fn along_column(source: &Padded, first: &First, dy: __m256d) -> [__m256d; 3] {
    let mut terms = [[_mm256_setzero_pd(); 3]; 4];
    for c in 0..3 {
        let (upper, lower) = (source.rows(c, first, 0), source.rows(c, first, 2));
        let (v12, v34) = (byte::<1>(upper), byte::<1>(lower));
        // Lanes 0–3 of the first register hold v1, 4–7 v2; likewise v3 and v4.
        let [v1, v2] = [
            _mm256_castsi256_si128(v12),
            _mm256_extracti128_si256::<1>(v12),
        ];
        let [v3, v4] = [
            _mm256_castsi256_si128(v34),
            _mm256_extracti128_si256::<1>(v34),
        ];
        // PIL's terms of bytes, whole numbers: exact.
        let p2 = _mm_sub_epi32(v3, v1);
        let p3 = _mm_sub_epi32(
            _mm_add_epi32(_mm_slli_epi32::<1>(_mm_sub_epi32(v1, v2)), v3),
            v4,
        );
        let p4 = _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(v2, v1), v3), v4);
        for (terms, p) in terms.iter_mut().zip([v2, p2, p3, p4]) {
            terms[c] = _mm256_cvtepi32_pd(p);
        }
    }
    polynomials(terms, dy)
}

/// The general bicubic filter (`bicubic_filter32RGB`): the cubic along each of the
/// window's four rows, then down them.
///
/// Each value is a long chain of dependent operations, too long for the processor to
/// overlap one channel's with the next's when they follow each other: so each step is
/// taken for every channel before the next.
#[target_feature(enable = "avx2")]
#[inline]
fn bicubic(source: &Padded, first: &First, dx: __m256d, dy: __m256d) -> [__m256d; 3] {
    // Channel c's rows 0 and 1 in `words[2c]`, 2 and 3 in `words[2c + 1]`.
    let mut words = [_mm256_setzero_si256(); 6];
    for (c, pair) in words.chunks_exact_mut(2).enumerate() {
        pair[0] = source.rows(c, first, 0);
        pair[1] = source.rows(c, first, 2);
    }
    // `terms[t][4c + r]`: term t + 1 of channel c's row r.
    let mut terms = [[_mm256_setzero_pd(); 12]; 4];
    for (i, words) in words.into_iter().enumerate() {
        for (t, term) in row_terms(words).into_iter().enumerate() {
            [terms[t][2 * i], terms[t][2 * i + 1]] = halves(term);
        }
    }
    let rows = polynomials(terms, dx);
    let mut column = [[_mm256_setzero_pd(); 3]; 4];
    for (c, v) in rows.chunks_exact(4).enumerate() {
        let [v1, v2, v3, v4] = [v[0], v[1], v[2], v[3]];
        // `−v1 + v3` is `v3 − v1` exactly, as is `−v1 + v2` `v2 − v1`.
        let twice = _mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2));
        column[0][c] = v2;
        column[1][c] = _mm256_sub_pd(v3, v1);
        column[2][c] = _mm256_sub_pd(_mm256_add_pd(twice, v3), v4);
        column[3][c] = _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(v2, v1), v3), v4);
    }
    polynomials(column, dy)
}

/// PIL's `p1 + d·(p2 + d·(p3 + d·p4))`, each operation rounded alone, for `N` sets of
/// terms at once (`terms[t][i]` term t + 1 of set i), each step taken for every set before
/// the next.
#[target_feature(enable = "avx2")]
#[inline]
fn polynomials<const N: usize>([p1, p2, p3, p4]: [[__m256d; N]; 4], d: __m256d) -> [__m256d; N] {
    let mut v = [_mm256_setzero_pd(); N];
    for i in 0..N {
        v[i] = _mm256_add_pd(p3[i], _mm256_mul_pd(d, p4[i]));
    }
    for i in 0..N {
        v[i] = _mm256_add_pd(p2[i], _mm256_mul_pd(d, v[i]));
    }
    for i in 0..N {
        v[i] = _mm256_add_pd(p1[i], _mm256_mul_pd(d, v[i]));
    }
    v
}

/// The terms `p1..p4` of PIL's cubic along the rows of `words` (eight words, each a row's
/// four taps, the lowest byte the first): `v2`, `−v1 + v3`, `2·(v1 − v2) + v3 − v4` and
/// `−v1 + v2 − v3 + v4`, whole numbers far inside 16 bits, so exact, as PIL's are.
#[target_feature(enable = "avx2")]
#[inline]
fn row_terms(words: __m256i) -> [__m256i; 4] {
    // The bytes' weights, in pairs summed to 16 bits, then the pairs' to 32.
    let p1 = byte::<1>(words);
    let ends = _mm256_maddubs_epi16(words, _mm256_set1_epi32(0x0001_00FF));
    let p2 = _mm256_madd_epi16(ends, _mm256_set1_epi32(0x0001_0001));
    // (v1 − v2, v3 − v4).
    let differences = _mm256_maddubs_epi16(words, _mm256_set1_epi32(0xFF01_FF01_u32 as i32));
    let p3 = _mm256_madd_epi16(differences, _mm256_set1_epi32(0x0001_0002));
    let p4 = _mm256_madd_epi16(differences, _mm256_set1_epi32(-1));
    [p1, p2, p3, p4]
}

/// Byte `K` of each word.
#[target_feature(enable = "avx2")]
#[inline]
fn byte<const K: i32>(words: __m256i) -> __m256i {
    match K {
        1 => _mm256_and_si256(_mm256_srli_epi32::<8>(words), _mm256_set1_epi32(0xFF)),
        2 => _mm256_and_si256(_mm256_srli_epi32::<16>(words), _mm256_set1_epi32(0xFF)),
        _ => unreachable!("only the middle bytes are read alone"),
    }
}

/// The eight 32-bit integers of `v` as two vectors of floats, the low four first.
#[target_feature(enable = "avx2")]
#[inline]
fn halves(v: __m256i) -> [__m256d; 2] {
    [
        _mm256_cvtepi32_pd(_mm256_castsi256_si128(v)),
        _mm256_cvtepi32_pd(_mm256_extracti128_si256::<1>(v)),
    ]
}

/// Each channel's four values as `cast_u8_f64` makes them (clamped to [0, 255], a NaN to
/// 0, truncated), packed into a word, the first lane's the lowest byte.
#[target_feature(enable = "avx2")]
#[inline]
fn to_bytes(values: [__m256d; 3]) -> [u32; 3] {
    let (zero, top) = (_mm256_setzero_pd(), _mm256_set1_pd(255.0));
    // `max` first, which takes its second operand (0) for a NaN, as `f64::max` its other.
    let mut ints = [_mm_setzero_si128(); 3];
    for (int, v) in ints.iter_mut().zip(values) {
        *int = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(v, zero), top));
    }
    // In [0, 255]: packing with unsigned saturation keeps each value.
    let bytes = _mm_packus_epi16(
        _mm_packus_epi32(ints[0], ints[1]),
        _mm_packus_epi32(ints[2], ints[2]),
    );
    [
        _mm_cvtsi128_si32(bytes) as u32,
        _mm_extract_epi32::<1>(bytes) as u32,
        _mm_extract_epi32::<2>(bytes) as u32,
    ]
}
