//! The fused last pass: mirror, convert, normalise and lay out resampled pixels into
//! the sample's slot of the batch.
//!
//! This pass touches every output byte (600 kB for a 224×224 f32 sample), so it must cost
//! little next to decoding. It reads the resampler's planar rows while they are still in
//! cache, a mirrored row is read backwards rather than written backwards, and the value
//! is computed, not looked up (a table lookup per element does not vectorise). The loops
//! are written for the compiler to vectorise, and on x86-64 they are also compiled for
//! AVX2 and FMA and chosen at run time.
//!
//! The value of a byte `v` in channel `c` is `(v / 255 − mean[c]) / std[c]` in f32, the
//! operations torchvision's `ToTensor` and `Normalize` perform, so for the same resized
//! bytes the output matches theirs bit for bit. Vector division is slow (it bounded this
//! pass), so the AVX2 path divides with Markstein's sequence instead: a product by the
//! rounded reciprocal, its residual by a fused multiply-add, and a corrected product,
//! which rounds as a division does. Whether it does for a given mean and std is checked
//! when the pipeline is built, over all 256 values of each channel ([`fused_is_exact`]);
//! where it would not, the AVX2 path divides too. Either way every path gives the same
//! bytes.

use super::resample::Block;
use super::{DType, ImagePipeline, Layout};

/// Writes `block`, rows `y0..` of a `height`-row sample, into `out`
/// (`pipeline.sample_bytes()` bytes), mirrored left–right when `flip`.
pub(super) fn write_block(
    block: &Block<'_>,
    y0: usize,
    height: usize,
    flip: bool,
    pipeline: &ImagePipeline,
    out: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above; the function is
        // otherwise safe code compiled with those features enabled.
        return unsafe { write_block_avx2(block, y0, height, flip, pipeline, out) };
    }
    write_rows(block, y0, height, flip, pipeline, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn write_block_avx2(
    block: &Block<'_>,
    y0: usize,
    height: usize,
    flip: bool,
    pipeline: &ImagePipeline,
    out: &mut [u8],
) {
    if pipeline.fused_exact && pipeline.dtype == DType::F32 && pipeline.layout == Layout::Chw {
        return stream_planes(block, y0, height, flip, pipeline, out);
    }
    write_rows(block, y0, height, flip, pipeline, out);
}

/// The training case, f32 planes, with explicit intrinsics: [`Normalize::fused`] on 8
/// values at a time, stored with non-temporal stores where the row is aligned for them.
/// The batch (38 MB for 64 samples) does not stay in cache for its consumer anyway, and
/// ordinary stores would first read every line they write.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn stream_planes(
    block: &Block<'_>,
    y0: usize,
    height: usize,
    flip: bool,
    pipeline: &ImagePipeline,
    out: &mut [u8],
) {
    let value = Normalize::new(pipeline.mean, pipeline.std);
    let w = block.width;
    for c in 0..3 {
        let fused = Fused::of(&value, c);
        for r in 0..block.rows {
            let at = (c * height + y0 + r) * w * 4;
            fused.stream_row(block.row(c, r), &mut out[at..at + w * 4], flip);
        }
    }
    // Non-temporal stores are weakly ordered: fence them before the batch is handed on.
    std::arch::x86_64::_mm_sfence();
}

/// Writes the values of `bytes`, all of channel `c`, into `out` (four native-endian
/// bytes each): the bits of [`values_of_bytes`]' tables for `mean` and `std`, computed
/// as the pass computes them. `None` where no vector path is exact here (no AVX2 and FMA,
/// or statistics for which [`Normalize::fused`] is not `fused_exact`): the caller looks
/// the values up instead.
///
/// A receiver of bytes ([`crate::prep::ByteValues::write`]) spends most of its CPU here,
/// so it gets the pass's kernel rather than a lookup per element.
pub(crate) fn write_values(
    (mean, std): ([f32; 3], [f32; 3]),
    fused_exact: bool,
    c: usize,
    bytes: &[u8],
    out: &mut [u8],
) -> Option<()> {
    assert_eq!(bytes.len() * 4, out.len(), "four bytes out a byte in");
    #[cfg(target_arch = "x86_64")]
    if fused_exact
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above; the functions are
        // otherwise safe code compiled with those features enabled.
        unsafe {
            let value = Normalize::new(mean, std);
            let fused = Fused::of(&value, c);
            // The elements before the first 32-byte line, one at a time, so that the
            // rest is streamed (a reader's chunks start anywhere in a sample).
            let head = match out.as_ptr().align_offset(32) {
                skip if skip % 4 == 0 => (skip / 4).min(bytes.len()),
                _ => 0,
            };
            let (out_head, out_rest) = out.split_at_mut(4 * head);
            fused.stream_row(&bytes[..head], out_head, false);
            fused.stream_row(&bytes[head..], out_rest, false);
            std::arch::x86_64::_mm_sfence();
        }
        return Some(());
    }
    let _ = (mean, std, fused_exact, c);
    None
}

/// Channel `c`'s [`Normalize::fused`], eight values at a time.
#[cfg(target_arch = "x86_64")]
struct Fused<'a> {
    value: &'a Normalize,
    c: usize,
    mean: std::arch::x86_64::__m256,
    std: std::arch::x86_64::__m256,
    inverse_std: std::arch::x86_64::__m256,
}

#[cfg(target_arch = "x86_64")]
impl Fused<'_> {
    #[target_feature(enable = "avx2,fma")]
    fn of(value: &Normalize, c: usize) -> Fused<'_> {
        use std::arch::x86_64::*;
        Fused {
            value,
            c,
            mean: _mm256_set1_ps(value.mean[c]),
            std: _mm256_set1_ps(value.std[c]),
            inverse_std: _mm256_set1_ps(value.inverse_std[c]),
        }
    }

    /// The values of `src` (read backwards when `flip`) into `dst`, non-temporal where
    /// `dst` is aligned for it: the caller fences before handing `dst` on.
    #[target_feature(enable = "avx2,fma")]
    fn stream_row(&self, src: &[u8], dst: &mut [u8], flip: bool) {
        use std::arch::x86_64::*;
        let w = src.len();
        let whole = w - w % 8;
        let reverse = _mm_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
        let (divisor, inverse) = (_mm256_set1_ps(255.0), _mm256_set1_ps(INVERSE_255));
        let aligned = (dst.as_ptr() as usize).is_multiple_of(32);
        for x in (0..whole).step_by(8) {
            let bytes: &[u8; 8] = if flip {
                src[w - 8 - x..w - x].try_into().unwrap()
            } else {
                src[x..x + 8].try_into().unwrap()
            };
            // SAFETY: `bytes` holds the 8 bytes read.
            let mut v = unsafe { _mm_loadl_epi64(bytes.as_ptr().cast()) };
            if flip {
                v = _mm_shuffle_epi8(v, reverse);
            }
            let v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            let q = _mm256_mul_ps(v, inverse);
            let v = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, divisor, v), inverse, q);
            let v = _mm256_sub_ps(v, self.mean);
            let q = _mm256_mul_ps(v, self.inverse_std);
            let v = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, self.std, v), self.inverse_std, q);
            let to: &mut [u8; 32] = (&mut dst[x * 4..x * 4 + 32]).try_into().unwrap();
            // SAFETY: `to` holds the 32 bytes written, 32-aligned where streamed.
            unsafe {
                if aligned {
                    _mm256_stream_ps(to.as_mut_ptr().cast(), v);
                } else {
                    _mm256_storeu_ps(to.as_mut_ptr().cast(), v);
                }
            }
        }
        for x in whole..w {
            let v = src[if flip { w - 1 - x } else { x }];
            dst[x * 4..x * 4 + 4].copy_from_slice(&self.value.fused(v, self.c).to_ne_bytes());
        }
    }
}

/// The value the pass writes for each byte of each channel, with `mean` and `std`.
pub(crate) fn values_of_bytes(mean: [f32; 3], std: [f32; 3]) -> Vec<[f32; 256]> {
    let value = Normalize::new(mean, std);
    (0..3)
        .map(|c| std::array::from_fn(|v| value.exact(v as u8, c)))
        .collect()
}

/// Whether [`Normalize::fused`] equals [`Normalize::exact`] for every byte value of
/// every channel.
pub(crate) fn fused_is_exact(mean: [f32; 3], std: [f32; 3]) -> bool {
    let value = Normalize::new(mean, std);
    (0..3).all(|c| (0..=255u8).all(|v| value.fused(v, c).to_bits() == value.exact(v, c).to_bits()))
}

/// The pass itself, inlined into each instruction-set variant (the f32 CHW case with
/// the fused form has [`stream_planes`] instead).
#[inline(always)]
fn write_rows(
    block: &Block<'_>,
    y0: usize,
    height: usize,
    flip: bool,
    pipeline: &ImagePipeline,
    out: &mut [u8],
) {
    let value = Normalize::new(pipeline.mean, pipeline.std);
    let (dtype, w) = (pipeline.dtype, block.width);
    let line = w * dtype.size();
    match pipeline.layout {
        Layout::Chw => {
            for c in 0..3 {
                for r in 0..block.rows {
                    let at = (c * height + y0 + r) * line;
                    let (src, dst) = (block.row(c, r), &mut out[at..at + line]);
                    match (dtype, flip) {
                        (DType::U8, false) => dst.copy_from_slice(src),
                        (DType::U8, true) => {
                            for (d, v) in dst.iter_mut().zip(src.iter().rev()) {
                                *d = *v;
                            }
                        }
                        (DType::F32, false) => plane_row(src.iter(), dst, |v| value.exact(v, c)),
                        (DType::F32, true) => {
                            plane_row(src.iter().rev(), dst, |v| value.exact(v, c))
                        }
                    }
                }
            }
        }
        Layout::Hwc => {
            for r in 0..block.rows {
                let at = (y0 + r) * line * 3;
                let dst = &mut out[at..at + line * 3];
                let pixels = block
                    .row(0, r)
                    .iter()
                    .zip(block.row(1, r))
                    .zip(block.row(2, r))
                    .map(|((&r, &g), &b)| [r, g, b]);
                if flip {
                    packed_row(pixels.rev(), dst, dtype, &value);
                } else {
                    packed_row(pixels, dst, dtype, &value);
                }
            }
        }
    }
}

/// `(v / 255 − mean) / std` per channel (mean 0 and std 1 without `Normalize`).
struct Normalize {
    mean: [f32; 3],
    std: [f32; 3],
    inverse_std: [f32; 3],
}

/// 1/255, rounded to f32.
const INVERSE_255: f32 = 1.0 / 255.0;

impl Normalize {
    fn new(mean: [f32; 3], std: [f32; 3]) -> Normalize {
        Normalize {
            mean,
            std,
            inverse_std: std.map(|s| 1.0 / s),
        }
    }

    /// The value as torchvision computes it.
    #[inline(always)]
    fn exact(&self, v: u8, c: usize) -> f32 {
        (v as f32 / 255.0 - self.mean[c]) / self.std[c]
    }

    /// The same value with both divisions as Markstein's sequence (see the module doc).
    #[inline(always)]
    fn fused(&self, v: u8, c: usize) -> f32 {
        let divide = |a: f32, b: f32, inverse: f32| {
            let q = a * inverse;
            (-q).mul_add(b, a).mul_add(inverse, q)
        };
        let x = divide(v as f32, 255.0, INVERSE_255) - self.mean[c];
        divide(x, self.std[c], self.inverse_std[c])
    }

    /// [`Normalize::exact`], as bytes.
    #[inline(always)]
    fn bytes(&self, v: u8, c: usize) -> [u8; 4] {
        self.exact(v, c).to_ne_bytes()
    }
}

/// One row of a channel into its plane.
#[inline(always)]
fn plane_row<'a>(values: impl Iterator<Item = &'a u8>, dst: &mut [u8], value: impl Fn(u8) -> f32) {
    for (v, d) in values.zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&value(*v).to_ne_bytes());
    }
}

/// One row, channels interleaved.
#[inline(always)]
fn packed_row(
    pixels: impl Iterator<Item = [u8; 3]>,
    dst: &mut [u8],
    dtype: DType,
    value: &Normalize,
) {
    match dtype {
        DType::U8 => {
            for (p, d) in pixels.zip(dst.chunks_exact_mut(3)) {
                d.copy_from_slice(&p);
            }
        }
        DType::F32 => {
            for (p, d) in pixels.zip(dst.chunks_exact_mut(12)) {
                d[0..4].copy_from_slice(&value.bytes(p[0], 0));
                d[4..8].copy_from_slice(&value.bytes(p[1], 1));
                d[8..12].copy_from_slice(&value.bytes(p[2], 2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::resample::BLOCK;
    use crate::prep::image::{Op, IMAGENET_MEAN, IMAGENET_STD};

    /// Element (c, y, x) the slow, obvious way, from planar bytes.
    fn reference(
        planes: &[u8],
        (w, h): (usize, usize),
        flip: bool,
        pipeline: &ImagePipeline,
        (c, y, x): (usize, usize, usize),
    ) -> f32 {
        let sx = if flip { w - 1 - x } else { x };
        let v = planes[(c * h + y) * w + sx];
        match pipeline.dtype {
            DType::U8 => v as f32,
            DType::F32 => (v as f32 / 255.0 - pipeline.mean[c]) / pipeline.std[c],
        }
    }

    /// Both paths over `planes`, cut into blocks of `BLOCK` rows as the resampler
    /// hands them out.
    fn write_both(
        planes: &[u8],
        (w, h): (usize, usize),
        flip: bool,
        pipeline: &ImagePipeline,
    ) -> (Vec<u8>, Vec<u8>) {
        let mut portable = vec![0u8; pipeline.sample_bytes()];
        // 32-byte aligned, as a batch buffer is, so that non-temporal stores are tested.
        let mut buffer = vec![0u8; pipeline.sample_bytes() + 32];
        let skip = buffer.as_ptr().align_offset(32);
        let chosen = &mut buffer[skip..skip + pipeline.sample_bytes()];
        for y0 in (0..h).step_by(BLOCK) {
            let rows = BLOCK.min(h - y0);
            let mut data = vec![0u8; 3 * BLOCK * w];
            for (c, r) in (0..3).flat_map(|c| (0..rows).map(move |r| (c, r))) {
                let from = (c * h + y0 + r) * w;
                let to = (c * BLOCK + r) * w;
                data[to..to + w].copy_from_slice(&planes[from..from + w]);
            }
            let block = Block {
                data: &data,
                width: w,
                rows,
                plane: BLOCK * w,
            };
            write_rows(&block, y0, h, flip, pipeline, &mut portable);
            write_block(&block, y0, h, flip, pipeline, chosen);
        }
        (portable, chosen.to_vec())
    }

    #[test]
    fn the_fused_form_is_exact_for_the_usual_statistics() {
        assert!(fused_is_exact(IMAGENET_MEAN, IMAGENET_STD));
        assert!(fused_is_exact([0.0; 3], [1.0; 3]));
        assert!(fused_is_exact([0.5; 3], [0.5; 3]));
    }

    #[test]
    fn every_layout_type_and_mirror_matches_the_reference_on_every_path() {
        for (w, h) in [(37usize, 21usize), (40, 17)] {
            every_layout_type_and_mirror_at(w, h);
        }
    }

    fn every_layout_type_and_mirror_at(w: usize, h: usize) {
        let planes: Vec<u8> = (0..w * h * 3).map(|i| (i * 97 % 256) as u8).collect();
        let crop = Op::center_crop(h as u32, w as u32);
        let normalize = Op::normalize_imagenet();
        for (ops, dtype) in [
            (vec![crop.clone()], DType::U8),
            (vec![crop.clone()], DType::F32),
            (vec![crop.clone(), normalize], DType::F32),
        ] {
            for layout in [Layout::Chw, Layout::Hwc] {
                let pipeline = ImagePipeline::new(ops.clone(), dtype, layout).unwrap();
                for flip in [false, true] {
                    let (portable, chosen) = write_both(&planes, (w, h), flip, &pipeline);
                    assert_eq!(portable, chosen, "{pipeline} flip {flip}");
                    let size = dtype.size();
                    for (y, x, c) in (0..h)
                        .flat_map(|y| (0..w).flat_map(move |x| (0..3).map(move |c| (y, x, c))))
                    {
                        let i = match layout {
                            Layout::Chw => (c * h + y) * w + x,
                            Layout::Hwc => (y * w + x) * 3 + c,
                        } * size;
                        let got = match dtype {
                            DType::U8 => chosen[i] as f32,
                            DType::F32 => f32::from_ne_bytes(chosen[i..i + 4].try_into().unwrap()),
                        };
                        let want = reference(&planes, (w, h), flip, &pipeline, (c, y, x));
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{pipeline} flip {flip} at {c},{y},{x}"
                        );
                    }
                }
            }
        }
    }
}
