//! Float32 samples sent as the bytes they were computed from.
//!
//! Receiving a float32 image batch was most of a trainer's CPU time in remote prep: four
//! bytes an element through TLS and the kernel. Where the loader's pipeline says which
//! value each byte of each channel becomes ([`ByteValues`]: `ToTensor` and `Normalize`),
//! a preparer sends one byte an element, and the trainer computes the values again
//! ([`ByteValues::write`]). Elements the table does not give back bit for bit (a
//! rectangle of noise from `RandomErasing`, two images mixed) travel as they are, in
//! runs, so the coding is exact whatever the pipeline did after the conversion; a sample
//! that would not come out smaller is sent whole.
//!
//! Per sample, integers big-endian:
//!
//! ```text
//! runs u32 = u32::MAX           then the sample's bytes as they are
//! runs u32 = n                  then one byte an element, then n times:
//!                                 start u32 | length u32 | length elements as they are
//! ```
//!
//! The runs are in order, do not touch, and stay inside the sample; anything else is
//! refused before a byte of the sample's slot is written past what was read.

use std::io::{self, BufRead, Read};

use nostall::prep::ByteValues;
use nostall::{Loader, Pipeline};

use crate::wire::invalid;

/// The mark of a sample sent as it is.
const WHOLE: u32 = u32::MAX;

/// Elements looked at together when coding: the byte of each is sought at once, and
/// the slower per-element path taken only where one misses.
const GROUP: usize = 8;

/// Elements looked at first, to find a sample not worth coding.
const PROBES: usize = 64;

/// How `loader`'s samples are coded, where they can be: its pipeline's
/// [`ByteValues`], where its samples are laid out as they say.
pub(crate) fn of(loader: &Loader) -> Option<ByteValues> {
    let pipeline = &loader.config().pipeline;
    let values = pipeline.prep().byte_values()?;
    fits(&values, pipeline.sample_bytes()).then_some(values)
}

/// `loader`'s pipeline as it makes its values' bytes ([`Prep::unconverted`]), for a
/// loader whose samples are coded ([`of`]), where nothing mixes them after (MixUp blends
/// the values) and no repeat of repeated augmentation shares a sample's id (the trainer
/// finishes each sample by its id): the preparer then neither converts nor codes, and
/// sends each sample as its bytes ([`unconverted_code`]); the trainer converts them and
/// runs what the recipe does after the conversion ([`Loader::finish_converted`]).
///
/// [`Prep::unconverted`]: nostall::prep::Prep::unconverted
pub(crate) fn unconverted(loader: &Loader) -> Option<Pipeline> {
    let config = loader.config();
    if config.mixup.is_some() || config.plan.repeats > 1 {
        return None;
    }
    let pipeline = config.pipeline.prep().unconverted()?;
    (pipeline.sample_bytes() * 4 == config.pipeline.sample_bytes()).then_some(pipeline)
}

/// Appends the code of an unconverted sample (one byte an element) to `out`: no runs.
pub(crate) fn unconverted_code(bytes: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Whether samples of `sample_bytes` bytes are laid out as `values` says: whole
/// elements, and in a planar layout, one plane a channel.
fn fits(values: &ByteValues, sample_bytes: usize) -> bool {
    let elements = sample_bytes / 4;
    sample_bytes.is_multiple_of(4)
        && elements > 0
        && match values.plane() {
            Some(plane) => plane * values.channels() == elements,
            None => elements.is_multiple_of(values.channels()),
        }
}

/// A sample's channel by element, whatever the layout (a sample that does not
/// [`fits`] is coded and decoded alike, with its last channel's table past its planes).
fn channel(values: &ByteValues, i: usize) -> usize {
    match values.plane() {
        Some(plane) => (i / plane).min(values.channels() - 1),
        None => i % values.channels(),
    }
}

/// One channel's table, with the line that nearly inverts it.
struct Channel<'a> {
    table: &'a [f32; 256],
    origin: f32,
    scale: f32,
}

impl<'a> Channel<'a> {
    fn of(values: &'a ByteValues, c: usize) -> Channel<'a> {
        let table = values.table(c);
        Channel {
            table,
            origin: table[0],
            scale: 255.0 / (table[255] - table[0]),
        }
    }

    /// The byte whose value is nearest `value`, by the line: rounded by truncating a
    /// value made non-negative (one instruction, where `round` is a call to the C
    /// library on x86-64's baseline). A NaN gives 0, as `as` casts it.
    #[inline(always)]
    fn nearest(&self, value: f32) -> usize {
        let guess = (value - self.origin) * self.scale + 0.5;
        guess.clamp(0.0, 255.0) as usize
    }

    /// The byte whose value has exactly the bits of `value`, if one has: the nearest by
    /// the line, or one either side of it (the table is linear up to rounding).
    #[inline(always)]
    fn byte_of(&self, value: f32) -> Option<u8> {
        let (guess, bits) = (self.nearest(value), value.to_bits());
        [guess, guess.saturating_sub(1), (guess + 1).min(255)]
            .into_iter()
            .find(|&b| self.table[b].to_bits() == bits)
            .map(|b| b as u8)
    }
}

/// The elements a table does not give back, as runs: where each starts, how many.
#[derive(Default)]
struct Runs {
    runs: Vec<(usize, usize)>,
    /// Bytes they add to the code: their starts and lengths, and their values.
    extra: usize,
}

impl Runs {
    fn push(&mut self, element: usize) {
        match self.runs.last_mut() {
            Some((start, n)) if *start + *n == element => *n += 1,
            _ => {
                self.runs.push((element, 1));
                self.extra += 8;
            }
        }
        self.extra += 4;
    }
}

fn value(sample: &[u8], i: usize) -> f32 {
    f32::from_ne_bytes(sample[4 * i..4 * i + 4].try_into().expect("four bytes"))
}

/// Appends the code of `sample` (native-endian `f32`s, as a batch holds them) to `out`.
pub(crate) fn encode(values: &ByteValues, sample: &[u8], out: &mut Vec<u8>) {
    let elements = sample.len() / 4;
    let channels: Vec<Channel<'_>> = (0..values.channels())
        .map(|c| Channel::of(values, c))
        .collect();
    let start = out.len();
    // A sample blended with another (MixUp) is off the tables almost everywhere, where
    // erased rectangles cover a third of it at most: a look at a few elements spread
    // over it tells them apart before the work of coding it.
    let probes = PROBES.min(elements);
    let off = (0..probes)
        .map(|p| p * (elements / probes))
        .filter(|&k| {
            let c = channel(values, k);
            channels[c].byte_of(value(sample, k)).is_none()
        })
        .count();
    if 4 * off > 3 * probes {
        return whole(sample, start, out);
    }
    out.extend_from_slice(&0u32.to_be_bytes());
    let bytes_at = out.len();
    out.resize(bytes_at + elements, 0);
    let bytes = &mut out[bytes_at..];
    let mut runs = Runs::default();
    // The code is smaller than the sample while the runs add less than 3 bytes an element.
    let budget = 3 * elements;
    match values.plane() {
        Some(plane) => {
            for (p, (from, to)) in sample
                .chunks(4 * plane)
                .zip(bytes.chunks_mut(plane))
                .enumerate()
            {
                let channel = &channels[p.min(channels.len() - 1)];
                code_plane_dispatched(channel, from, to, p * plane, &mut runs);
                if runs.extra >= budget {
                    return whole(sample, start, out);
                }
            }
        }
        None => {
            for (i, byte) in bytes.iter_mut().enumerate() {
                match channels[i % channels.len()].byte_of(value(sample, i)) {
                    Some(b) => *byte = b,
                    None => runs.push(i),
                }
            }
            if runs.extra >= budget {
                return whole(sample, start, out);
            }
        }
    }
    out[start..bytes_at].copy_from_slice(&(runs.runs.len() as u32).to_be_bytes());
    for (s, n) in runs.runs {
        out.extend_from_slice(&(s as u32).to_be_bytes());
        out.extend_from_slice(&(n as u32).to_be_bytes());
        out.extend_from_slice(&sample[4 * s..4 * (s + n)]);
    }
}

/// [`code_plane`], with its groups of eight by AVX2 where the CPU has it.
fn code_plane_dispatched(
    channel: &Channel<'_>,
    from: &[u8],
    to: &mut [u8],
    first: usize,
    runs: &mut Runs,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { avx2::code_plane(channel, from, to, first, runs) };
    }
    code_plane(channel, from, to, first, runs)
}

/// Codes the values `from` of one channel into `to`, one byte each, adding those the
/// table does not give back to `runs` (numbered from `first`). Eight at a time by the
/// line alone, with no branch inside (the common case, where none is off the table);
/// one at a time where one of the eight is.
#[inline(always)]
fn code_plane(channel: &Channel<'_>, from: &[u8], to: &mut [u8], first: usize, runs: &mut Runs) {
    let mut groups = from.chunks_exact(4 * GROUP).zip(to.chunks_exact_mut(GROUP));
    for (g, (from, to)) in groups.by_ref().enumerate() {
        let mut hit = true;
        for (k, byte) in to.iter_mut().enumerate() {
            let v = value(from, k);
            let b = channel.nearest(v);
            hit &= channel.table[b].to_bits() == v.to_bits();
            *byte = b as u8;
        }
        if !hit {
            code_slowly(channel, from, to, first + g * GROUP, runs);
        }
    }
    code_past_groups(channel, from, to, first, runs);
}

/// [`code_plane`]'s values past its last whole group of eight.
fn code_past_groups(
    channel: &Channel<'_>,
    from: &[u8],
    to: &mut [u8],
    first: usize,
    runs: &mut Runs,
) {
    let done = from.len() / 4 / GROUP * GROUP;
    code_slowly(
        channel,
        &from[4 * done..],
        &mut to[done..],
        first + done,
        runs,
    );
}

/// [`code_plane`]'s values one at a time, each off the table added to `runs` (its byte
/// 0, whichever path coded it).
fn code_slowly(channel: &Channel<'_>, from: &[u8], to: &mut [u8], first: usize, runs: &mut Runs) {
    for (k, byte) in to.iter_mut().enumerate() {
        *byte = channel.byte_of(value(from, k)).unwrap_or_else(|| {
            runs.push(first + k);
            0
        });
    }
}

/// The groups of eight in AVX2 intrinsics: the compiler does not make the table lookups
/// one gather by itself.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{code_past_groups, code_slowly, Channel, Runs, GROUP};

    /// [`super::code_plane`], the same bytes and runs.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn code_plane(
        channel: &Channel<'_>,
        from: &[u8],
        to: &mut [u8],
        first: usize,
        runs: &mut Runs,
    ) {
        let origin = _mm256_set1_ps(channel.origin);
        let scale = _mm256_set1_ps(channel.scale);
        let (half, zero, top) = (
            _mm256_set1_ps(0.5),
            _mm256_setzero_ps(),
            _mm256_set1_ps(255.0),
        );
        // Byte 0 of each 32-bit lane to the lane's first four bytes.
        let low = _mm256_setr_epi8(
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1,
            -1, -1, -1, -1, -1, -1, -1, -1, -1,
        );
        let table = channel.table.as_ptr().cast::<i32>();
        let mut groups = from.chunks_exact(4 * GROUP).zip(to.chunks_exact_mut(GROUP));
        for (g, (from, to)) in groups.by_ref().enumerate() {
            // SAFETY: `from` holds 32 bytes, read unaligned.
            let x = unsafe { _mm256_loadu_ps(from.as_ptr().cast::<f32>()) };
            let guess = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, origin), scale), half);
            // `max` returns its second operand for a NaN: 0, as `Channel::nearest` gives.
            let guess = _mm256_min_ps(_mm256_max_ps(guess, zero), top);
            let bytes = _mm256_cvttps_epi32(guess);
            // SAFETY: every index is in 0..=255 (clamped above), inside the table's 256
            // values of 4 bytes.
            let found = unsafe { _mm256_i32gather_epi32::<4>(table, bytes) };
            let same = _mm256_cmpeq_epi32(found, _mm256_castps_si256(x));
            if _mm256_movemask_epi8(same) == -1 {
                let packed = _mm256_shuffle_epi8(bytes, low);
                let lo = _mm256_extract_epi32::<0>(packed) as u32;
                let hi = _mm256_extract_epi32::<4>(packed) as u32;
                to[..4].copy_from_slice(&lo.to_le_bytes());
                to[4..].copy_from_slice(&hi.to_le_bytes());
            } else {
                code_slowly(channel, from, to, first + g * GROUP, runs);
            }
        }
        code_past_groups(channel, from, to, first, runs);
    }
}

/// Replaces the code begun at `start` of `out` with `sample` sent whole.
fn whole(sample: &[u8], start: usize, out: &mut Vec<u8>) {
    out.truncate(start);
    out.extend_from_slice(&WHOLE.to_be_bytes());
    out.extend_from_slice(sample);
}

/// Reads one sample's code from `from` into `slot` (its native-endian `f32`s). The
/// element bytes are converted where `from` holds them, not copied out first.
///
/// # Errors
///
/// What `from` gives, or [`io::ErrorKind::InvalidData`] for a code that is not one.
pub(crate) fn decode(
    values: &ByteValues,
    from: &mut impl BufRead,
    slot: &mut [u8],
) -> io::Result<()> {
    let elements = slot.len() / 4;
    let runs = read_u32(from)?;
    if runs == WHOLE {
        return from.read_exact(slot);
    }
    // A run is at least one element and runs do not touch: at most one every two.
    if runs as usize > elements.div_ceil(2) {
        return Err(invalid(format!(
            "{runs} runs in a sample of {elements} elements"
        )));
    }
    let mut at = 0;
    while at < elements {
        let held = from.fill_buf()?;
        if held.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let n = held.len().min(elements - at);
        write_elements(values, at, &held[..n], slot);
        from.consume(n);
        at += n;
    }
    let mut next = 0usize;
    for _ in 0..runs {
        let (start, length) = (read_u32(from)? as usize, read_u32(from)? as usize);
        let end = start.checked_add(length).filter(|&end| end <= elements);
        let Some(end) = end.filter(|_| length > 0 && start >= next) else {
            return Err(invalid(format!(
                "a run of {length} elements at {start} in a sample of {elements} \
                 (the last run ended at {next})"
            )));
        };
        from.read_exact(&mut slot[4 * start..4 * end])?;
        // Runs that touch would have been one run.
        next = end + 1;
    }
    Ok(())
}

/// Writes the values of `bytes`, the sample's elements from `first` on, into `slot`.
fn write_elements(values: &ByteValues, first: usize, bytes: &[u8], slot: &mut [u8]) {
    let last = values.channels() - 1;
    let Some(plane) = values.plane() else {
        for (i, &b) in (first..).zip(bytes) {
            let value = values.table(i % values.channels())[b as usize];
            slot[4 * i..4 * i + 4].copy_from_slice(&value.to_ne_bytes());
        }
        return;
    };
    let end = first + bytes.len();
    let mut i = first;
    while i < end {
        let c = (i / plane).min(last);
        // A sample's last channel takes what lies past its planes (one that does not
        // `fits`).
        let upto = if c == last {
            end
        } else {
            ((c + 1) * plane).min(end)
        };
        values.write(
            c,
            &bytes[i - first..upto - first],
            &mut slot[4 * i..4 * upto],
        );
        i = upto;
    }
}

fn read_u32(from: &mut impl Read) -> io::Result<u32> {
    let mut word = [0; 4];
    from.read_exact(&mut word)?;
    Ok(u32::from_be_bytes(word))
}

/// The most bytes the codes of `samples` samples of `sample_bytes` each take.
pub(crate) fn bound(samples: usize, sample_bytes: usize) -> u64 {
    samples as u64 * (4 + sample_bytes as u64)
}

/// Decodes `data` as one sample's code (12 elements, ImageNet's tables), for the
/// fuzzer: it must never panic or write past the sample.
pub(crate) fn decode_for_fuzzing(data: &[u8]) {
    let values = imagenet(Some(4));
    let mut slot = vec![0; 48];
    let _ = decode(&values, &mut &data[..], &mut slot);
}

/// ImageNet's `ToTensor` and `Normalize` over 3 channels, planar or not.
pub(crate) fn imagenet(plane: Option<usize>) -> ByteValues {
    const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
    const STD: [f32; 3] = [0.229, 0.224, 0.225];
    ByteValues::normalizing(MEAN, STD, plane).expect("monotonic tables")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of `elements` values, each its channel's value of a drawn byte.
    fn sample(values: &ByteValues, elements: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..elements)
            .map(|i| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                values.table(channel(values, i))[(state >> 56) as usize]
            })
            .collect()
    }

    fn bytes(sample: &[f32]) -> Vec<u8> {
        sample.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    fn round_trip(values: &ByteValues, sample: &[u8]) -> Vec<u8> {
        let mut code = Vec::new();
        encode(values, sample, &mut code);
        let mut slot = vec![0xAB; sample.len()];
        let mut from = &code[..];
        decode(values, &mut from, &mut slot).unwrap();
        assert!(from.is_empty(), "the code read to its end");
        assert_eq!(slot, sample);
        // A socket's reader holds a few bytes at a time, cutting planes anywhere.
        for capacity in [1, 7, 64] {
            let mut slot = vec![0xAB; sample.len()];
            let mut from = io::BufReader::with_capacity(capacity, &code[..]);
            decode(values, &mut from, &mut slot).unwrap();
            assert_eq!(slot, sample, "read {capacity} bytes at a time");
        }
        code
    }

    #[test]
    fn samples_come_back_bit_for_bit_whatever_ran_after_the_conversion() {
        for plane in [Some(100), None] {
            let values = imagenet(plane);
            let clean = sample(&values, 300, 1);
            let code = round_trip(&values, &bytes(&clean));
            assert_eq!(code.len(), 4 + 300, "one byte an element");
            // An erased rectangle: rows of noise, and values a table cannot give.
            let mut erased = clean.clone();
            for row in 0..5 {
                for x in 10..17 {
                    erased[row * 20 + x] = (row * x) as f32 * 0.37 - 1.0;
                }
            }
            erased[299] = f32::NAN;
            erased[0] = -0.0;
            erased[150] = f32::from_bits(clean[150].to_bits() ^ 1);
            let code = round_trip(&values, &bytes(&erased));
            assert!(code.len() < 4 * 300 / 2, "{} bytes", code.len());
            // A mix of two images: every value off the tables, sent as it is.
            let other = sample(&values, 300, 2);
            let mixed: Vec<f32> = clean
                .iter()
                .zip(&other)
                .map(|(a, b)| 0.3 * a + 0.7 * b)
                .collect();
            let code = round_trip(&values, &bytes(&mixed));
            assert_eq!(code.len(), 4 + 4 * 300, "whole");
        }
    }

    #[test]
    fn every_path_codes_a_plane_alike() {
        let values = imagenet(Some(1000));
        let mut plane = sample(&values, 1000, 4);
        // Off the table: alone, in runs, across groups of eight, at the end.
        for k in [3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 500, 998, 999] {
            plane[k] += 1e-3;
        }
        let plane = bytes(&plane);
        let channel = Channel::of(&values, 0);
        let mut portable = (vec![0; 1000], Runs::default());
        code_plane(&channel, &plane, &mut portable.0, 0, &mut portable.1);
        assert_eq!(portable.1.runs, [(3, 1), (8, 9), (500, 1), (998, 2)]);
        let mut chosen = (vec![0; 1000], Runs::default());
        code_plane_dispatched(&channel, &plane, &mut chosen.0, 0, &mut chosen.1);
        assert_eq!(chosen.0, portable.0);
        assert_eq!(chosen.1.runs, portable.1.runs);
    }

    #[test]
    fn a_pipeline_whose_values_come_from_bytes_before_what_the_trainer_runs_is_made_unconverted() {
        use nostall::loader::{LoaderBuilder, LoaderSettings, PipelineSetting};
        use nostall::prep::mixup::MixupArgs;
        use nostall::DType;

        let dir = tempfile::tempdir().unwrap();
        let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
        let loader = |ops: &str, dtype: DType, mixup: Option<MixupArgs>, repeats: u32| {
            let mut s = LoaderSettings::default();
            s.pipeline = PipelineSetting::Operators(ops.parse().unwrap());
            s.dtype = dtype;
            s.plan.repeats = repeats;
            let mut builder = LoaderBuilder::with_settings(photos.to_string_lossy(), s);
            builder.mixup(mixup);
            builder.open().unwrap().0
        };
        let plain = "[RandomResizedCrop(32), Normalize(mean=[0.5, 0.5, 0.5], std=[0.2, 0.2, 0.2])";
        let erased = format!("{plain}, RandomErasing(p=1.0)]");
        let mixup = MixupArgs {
            num_classes: 1000,
            ..MixupArgs::default()
        };
        // The trainer erases with the sample's draws, known from its id: not under
        // repeated augmentation, whose repeats share it. MixUp blends whole batches.
        for (ops, dtype, mixup, repeats, made) in [
            (format!("{plain}]"), DType::F32, None, 1, true),
            (erased.clone(), DType::F32, None, 1, true),
            (erased, DType::F32, None, 2, false),
            (format!("{plain}]"), DType::F32, Some(mixup), 1, false),
            (
                "[RandomResizedCrop(32)]".to_owned(),
                DType::U8,
                None,
                1,
                false,
            ),
        ] {
            let loader = loader(&ops, dtype, mixup, repeats);
            let pipeline = of(&loader).and_then(|_| unconverted(&loader));
            assert_eq!(pipeline.is_some(), made, "{ops} {dtype:?} {repeats}");
            if let Some(pipeline) = pipeline {
                let bytes = loader.with_pipeline(pipeline).unwrap();
                assert_eq!(bytes.identity(), loader.identity(), "the same run");
            }
        }
    }

    #[test]
    fn codes_that_lie_are_refused_without_writing_past_the_sample() {
        let values = imagenet(Some(4));
        let clean = bytes(&sample(&values, 12, 3));
        let mut code = Vec::new();
        encode(&values, &clean, &mut code);
        let with_runs = |runs: &[(u32, u32)]| {
            let mut code = (runs.len() as u32).to_be_bytes().to_vec();
            code.extend_from_slice(&[0; 12]);
            for &(s, n) in runs {
                code.extend_from_slice(&s.to_be_bytes());
                code.extend_from_slice(&n.to_be_bytes());
                code.extend(std::iter::repeat_n(0, 4 * n.min(100) as usize));
            }
            code
        };
        for (code, why) in [
            (with_runs(&[(10, 3)]), "past the end"),
            (with_runs(&[(2, 0)]), "empty"),
            (with_runs(&[(4, 2), (5, 1)]), "overlapping"),
            (with_runs(&[(4, 2), (6, 1)]), "touching"),
            (with_runs(&[(u32::MAX, 2)]), "overflowing"),
            (with_runs(&[(0, 1); 7]), "more runs than fit"),
            (code[..code.len() - 1].to_vec(), "cut short"),
            (WHOLE.to_be_bytes().to_vec(), "whole, but cut"),
        ] {
            let mut slot = vec![0; 48];
            let got = decode(&values, &mut &code[..], &mut slot);
            assert!(got.is_err(), "{why}");
        }
    }
}
