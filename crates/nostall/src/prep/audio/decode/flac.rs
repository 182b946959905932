//! FLAC: frames found by nostall, each decoded by symphonia's FLAC decoder.
//!
//! symphonia's FLAC demuxer finds a frame's end by reading on until a CRC-16 matches,
//! copying the stream through its reader as it goes; on 24-bit files that framing cost a
//! tenth of the decode (docs/benchmarks.md). Here the frames are found in the file's
//! bytes where they lie: a frame header is recognised by its sync code, its CRC-8 and its
//! place in the sequence of sample numbers, the next header ends the frame, and only the
//! frames a window needs are checked (their CRC-16) and decoded.
//!
//! **Length.** The frames' samples, counted from their headers without decoding, give
//! the exact length, checked against what `STREAMINFO` declares: a file cut short is
//! refused whatever window is asked, and so is one whose last frame fails its checksum
//! (checked in every epoch, since a cut usually falls inside a frame).

use std::ops::Range;

use symphonia::core::audio::{AudioBufferRef, Signal};
use symphonia::core::codecs::{CodecParameters, Decoder, DecoderOptions, CODEC_TYPE_FLAC};
use symphonia::core::formats::Packet;
use symphonia::default::codecs::FlacDecoder;

use super::packets::{append, i32_to_f32};
use super::{check_stream, clamp, too_long, truncated, DecodeOptions, Part, Plan, Waveform};
use crate::error::Cause;

/// Whether `data` starts as a FLAC stream.
pub(super) fn is_flac(data: &[u8]) -> bool {
    data.starts_with(b"fLaC")
}

/// Where the FLAC stream of `data` begins: at its start, or after the ID3v2 tag some
/// taggers put before it (its length from its header: 10 bytes, the body's syncsafe
/// size, a footer when flagged). `None`: not FLAC.
pub(super) fn start(data: &[u8]) -> Option<usize> {
    if is_flac(data) {
        return Some(0);
    }
    let header = data.get(..10).filter(|h| h.starts_with(b"ID3"))?;
    let size = &header[6..10];
    if size.iter().any(|b| b & 0x80 != 0) {
        return None;
    }
    let body = size.iter().fold(0usize, |s, &b| s << 7 | usize::from(b));
    let footer = if header[5] & 0x10 != 0 { 10 } else { 0 };
    let at = 10 + body + footer;
    data.get(at..).filter(|rest| is_flac(rest)).map(|_| at)
}

/// What `STREAMINFO` declares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamInfo {
    /// The block as stored, 34 bytes (what symphonia's decoder is made from).
    pub(crate) block: [u8; 34],
    pub(crate) rate: u32,
    pub(crate) channels: usize,
    /// Frames are numbered rather than their first samples when the stream's block size
    /// is fixed: this one.
    pub(crate) fixed_block: Option<u64>,
    /// Samples per channel, when stated (0 in the header: unknown).
    pub(crate) total: Option<u64>,
}

impl StreamInfo {
    /// Reads the 34-byte block.
    pub(crate) fn read(block: [u8; 34]) -> StreamInfo {
        let min_block = u16::from_be_bytes([block[0], block[1]]);
        let max_block = u16::from_be_bytes([block[2], block[3]]);
        let packed = u64::from_be_bytes(block[10..18].try_into().expect("8 bytes"));
        StreamInfo {
            block,
            rate: (packed >> 44) as u32,
            channels: ((packed >> 41) & 7) as usize + 1,
            fixed_block: (min_block == max_block).then_some(u64::from(min_block)),
            total: Some(packed & ((1 << 36) - 1)).filter(|&n| n > 0),
        }
    }
}

/// The metadata blocks: `STREAMINFO`, and where the first frame starts.
fn metadata(data: &[u8]) -> Result<(StreamInfo, usize), Cause> {
    let cut = || Cause::Corrupt("its FLAC metadata is cut short".into());
    let mut at = 4;
    let mut info = None;
    loop {
        let header = data.get(at..at + 4).ok_or_else(cut)?;
        let (last, kind) = (header[0] & 0x80 != 0, header[0] & 0x7F);
        let len = u32::from_be_bytes([0, header[1], header[2], header[3]]) as usize;
        if kind == 0 {
            let block: [u8; 34] = data
                .get(at + 4..at + 4 + len)
                .filter(|_| len == 34)
                .ok_or_else(|| Cause::Corrupt("its FLAC STREAMINFO is malformed".into()))?
                .try_into()
                .expect("34 bytes");
            info = Some(StreamInfo::read(block));
        }
        at += 4 + len;
        if last {
            break;
        }
    }
    let info = info.ok_or_else(|| Cause::Corrupt("it has no FLAC STREAMINFO".into()))?;
    check_stream(info.rate, info.channels)?;
    Ok((info, at))
}

/// A frame header's first sample, samples and length in bytes, if `bytes` starts with
/// one (its fields allowed and its CRC-8 right). Fixed-size frames are numbered, and
/// their first sample is the number times the stream's block size, as symphonia counts.
pub(crate) fn frame_header(bytes: &[u8], fixed_block: Option<u64>) -> Option<(u64, u64, usize)> {
    if bytes.len() < 6 || bytes[0] != 0xFF || bytes[1] & 0xFE != 0xF8 {
        return None;
    }
    let variable = bytes[1] & 1 == 1;
    let (size_code, rate_code) = (bytes[2] >> 4, bytes[2] & 0x0F);
    let (channels, bits) = (bytes[3] >> 4, (bytes[3] >> 1) & 7);
    if size_code == 0 || rate_code == 15 || channels > 10 || bits == 3 || bytes[3] & 1 != 0 {
        return None;
    }
    // The coded number: UTF-8's scheme stretched to 7 bytes.
    let lead = bytes[4];
    let extra = match lead.leading_ones() {
        0 => 0,
        n @ 2..=7 => n as usize - 1,
        _ => return None,
    };
    let mut number = u64::from(lead & (0x7F >> extra));
    let mut at = 5;
    for _ in 0..extra {
        let b = *bytes.get(at)?;
        if b & 0xC0 != 0x80 {
            return None;
        }
        number = (number << 6) | u64::from(b & 0x3F);
        at += 1;
    }
    let samples = match size_code {
        1 => 192,
        2..=5 => 576 << (size_code - 2),
        6 => {
            at += 1;
            u64::from(*bytes.get(at - 1)?) + 1
        }
        7 => {
            at += 2;
            u64::from(u16::from_be_bytes([
                *bytes.get(at - 2)?,
                *bytes.get(at - 1)?,
            ])) + 1
        }
        _ => 256 << (size_code - 8),
    };
    at += match rate_code {
        12 => 1,
        13 | 14 => 2,
        _ => 0,
    };
    if crc8(bytes.get(..at)?) != *bytes.get(at)? {
        return None;
    }
    let first = match (variable, fixed_block) {
        (true, _) => number,
        (false, Some(block)) => number * block,
        (false, None) => number * samples,
    };
    Some((first, samples, at + 1))
}

/// A frame of the file.
#[derive(Debug, Clone)]
struct Frame {
    bytes: Range<usize>,
    /// Its first sample, counted from the stream's (or the stretch's) first.
    first: u64,
    samples: u64,
}

/// The frames of `data` from byte `from`, counted from sample `origin` (`None`: from the
/// first frame's, so that a stream cut from a longer one starts at 0); `None` past
/// `max_samples` (the length limit).
fn frames(
    data: &[u8],
    from: usize,
    info: &StreamInfo,
    (origin, max_samples): (Option<u64>, u64),
) -> Result<Option<Vec<Frame>>, Cause> {
    let mut frames = Vec::new();
    let mut at = from;
    let mut expected = None;
    let mut origin = origin;
    while at < data.len() {
        let (first, samples, header) = frame_header(&data[at..], info.fixed_block)
            .filter(|&(first, _, _)| expected.is_none_or(|e| e == first))
            .ok_or_else(|| {
                Cause::Corrupt(format!(
                    "it holds no FLAC frame where one begins, at byte {at}"
                ))
            })?;
        let origin = *origin.get_or_insert(first);
        let Some(first) = first.checked_sub(origin) else {
            return Err(Cause::Corrupt(format!(
                "its FLAC frame at byte {at} starts before the stream does"
            )));
        };
        if first + samples > max_samples {
            return Ok(None);
        }
        let next = next_frame(
            data,
            at + header,
            info.fixed_block,
            origin + first + samples,
        );
        frames.push(Frame {
            bytes: at..next,
            first,
            samples,
        });
        expected = Some(origin + first + samples);
        at = next;
    }
    Ok(Some(frames))
}

/// Where the frame after the one whose header ends at `from` begins: the next header that
/// starts at sample `expected`, or the end of the data.
fn next_frame(data: &[u8], from: usize, fixed_block: Option<u64>, expected: u64) -> usize {
    let mut at = from;
    while let Some(i) = find_sync(&data[at..]) {
        let candidate = at + i;
        if frame_header(&data[candidate..], fixed_block).is_some_and(|(f, _, _)| f == expected) {
            return candidate;
        }
        at = candidate + 1;
    }
    data.len()
}

/// The offset of the first `0xFF 0xF8` or `0xFF 0xF9` in `bytes`.
pub(crate) fn find_sync(bytes: &[u8]) -> Option<usize> {
    let mut base = 0;
    // 32 bytes at a time, tested without an early exit so that the test vectorises.
    for chunk in bytes.chunks(32) {
        if chunk.iter().fold(false, |any, &b| any | (b == 0xFF)) {
            for (i, w) in chunk.iter().enumerate() {
                if *w == 0xFF && bytes.get(base + i + 1).is_some_and(|&b| b & 0xFE == 0xF8) {
                    return Some(base + i);
                }
            }
        }
        base += chunk.len();
    }
    None
}

/// Decodes a FLAC file: the frames `plan` asks for, or all of them. `part` places `data`
/// in its recording: a stretch's frames are numbered from the recording's start, and its
/// header declares where the stretch ends.
pub(super) fn decode(
    data: &[u8],
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    part: Part,
    out: &mut Waveform,
) -> Result<(), Cause> {
    let (info, from) = metadata(data)?;
    let limit = u64::from(options.max_seconds) * u64::from(info.rate);
    let declared = match info.total.map(|n| n.checked_sub(part.first)) {
        Some(Some(n)) => Some(n),
        Some(None) => {
            return Err(Cause::Corrupt(
                "its segment's bytes end before they begin".into(),
            ))
        }
        None => None,
    };
    if let Some(declared) = declared.filter(|&n| n > limit) {
        return Err(too_long(declared, info.rate, options.max_seconds));
    }
    // A file counts from its first frame; a stretch of a recording from where it lies.
    let origin = (part != Part::WHOLE).then_some(part.first);
    let Some(frames) = frames(data, from, &info, (origin, limit))? else {
        return Err(too_long(limit + 1, info.rate, options.max_seconds));
    };
    let Some(last) = frames.last() else {
        return Err(Cause::Corrupt("it holds no audio".into()));
    };
    let total = last.first + last.samples;
    if let Some(declared) = declared {
        if total < declared {
            return Err(truncated(declared, total));
        }
    }
    let window = match plan {
        Some(plan) => clamp(plan(info.rate, total), total),
        None => 0..total,
    };
    let mut decoder = Frames::new(&info, data)?;
    // A cut usually falls inside the last frame: checked whatever the window.
    let mut frames = frames;
    let last = frames.len() - 1;
    frames[last].bytes.end = decoder.last_end(last, &frames[last])?;
    out.rate = info.rate;
    out.planes
        .resize_with(if options.mono { 1 } else { info.channels }, Vec::new);
    out.clear();
    (out.start, out.total) = (window.start, total);
    let first = frames.partition_point(|f| f.first + f.samples <= window.start);
    for (i, frame) in frames.iter().enumerate().skip(first) {
        if frame.first >= window.end {
            break;
        }
        let keep = (window.start.max(frame.first) - frame.first) as usize
            ..(window.end.min(frame.first + frame.samples) - frame.first) as usize;
        decoder.append(i, frame, &mut out.planes, keep)?;
    }
    Ok(())
}

/// symphonia's decoder over the frames of one file.
struct Frames<'a> {
    data: &'a [u8],
    decoder: FlacDecoder,
    channels: usize,
}

impl<'a> Frames<'a> {
    fn new(info: &StreamInfo, data: &'a [u8]) -> Result<Frames<'a>, Cause> {
        let mut params = CodecParameters::new();
        params
            .for_codec(CODEC_TYPE_FLAC)
            .with_extra_data(Box::new(info.block));
        let decoder = FlacDecoder::try_new(&params, &DecoderOptions::default())
            .map_err(|e| Cause::Corrupt(format!("its FLAC STREAMINFO is refused ({e})")))?;
        Ok(Frames {
            data,
            decoder,
            channels: info.channels,
        })
    }

    /// Checks frame `i`'s CRC-16 (its last two bytes, over the rest).
    fn check(&self, i: usize, frame: &Frame) -> Result<(), Cause> {
        let bytes = &self.data[frame.bytes.clone()];
        let ok = bytes.len() > 2 && {
            let (body, crc) = bytes.split_at(bytes.len() - 2);
            crc16(body) == u16::from_be_bytes([crc[0], crc[1]])
        };
        if ok {
            Ok(())
        } else {
            Err(Cause::Corrupt(format!(
                "its FLAC frame {i} (at byte {}) fails its checksum",
                frame.bytes.start
            )))
        }
    }

    /// Where the last frame, `i`, ends: where the file does when its CRC-16 holds there,
    /// else the furthest point at which it holds (a tag may follow the audio).
    fn last_end(&self, i: usize, frame: &Frame) -> Result<usize, Cause> {
        if self.check(i, frame).is_ok() {
            return Ok(frame.bytes.end);
        }
        let bytes = &self.data[frame.bytes.clone()];
        let mut crc = 0u16;
        let mut end = None;
        for (at, &b) in bytes.iter().enumerate() {
            if bytes.get(at..at + 2) == Some(&crc.to_be_bytes()[..]) {
                end = Some(frame.bytes.start + at + 2);
            }
            crc = (crc << 8) ^ CRC16[0][usize::from((crc >> 8) as u8 ^ b)];
        }
        end.ok_or_else(|| {
            Cause::Corrupt(format!(
                "it is truncated: its last FLAC frame (at byte {}) fails its checksum",
                frame.bytes.start
            ))
        })
    }

    /// Decodes frame `i` and appends its samples `keep` to `out`'s planes.
    fn append(
        &mut self,
        i: usize,
        frame: &Frame,
        out: &mut [Vec<f32>],
        keep: Range<usize>,
    ) -> Result<(), Cause> {
        self.check(i, frame)?;
        let packet = Packet::new_from_slice(
            0,
            frame.first,
            frame.samples,
            &self.data[frame.bytes.clone()],
        );
        let decoded = self
            .decoder
            .decode(&packet)
            .map_err(|e| Cause::Corrupt(format!("its FLAC frame {i} cannot be decoded: {e}")))?;
        let AudioBufferRef::S32(decoded) = decoded else {
            return Err(Cause::Corrupt(format!(
                "its FLAC frame {i} decodes to no samples"
            )));
        };
        if decoded.frames() as u64 != frame.samples
            || decoded.spec().channels.count() != self.channels
        {
            return Err(Cause::Corrupt(format!(
                "its FLAC frame {i} decodes to {} samples of {} channels where its header \
                 and the stream declare {} of {}",
                decoded.frames(),
                decoded.spec().channels.count(),
                frame.samples,
                self.channels
            )));
        }
        append(out, self.channels, |c| decoded.chan(c), keep, i32_to_f32);
        Ok(())
    }
}

/// FLAC's header CRC-8 (polynomial 0x07).
pub(crate) fn crc8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |crc, &b| CRC8[usize::from(crc ^ b)])
}

const CRC8: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x80 != 0 {
                (crc << 1) ^ 0x07
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// FLAC's frame CRC-16 (polynomial 0x8005, not reflected), eight bytes a step.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc = 0u16;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let high = crc ^ u16::from_be_bytes([c[0], c[1]]);
        crc = CRC16[7][usize::from(high >> 8)]
            ^ CRC16[6][usize::from(high & 0xFF)]
            ^ CRC16[5][usize::from(c[2])]
            ^ CRC16[4][usize::from(c[3])]
            ^ CRC16[3][usize::from(c[4])]
            ^ CRC16[2][usize::from(c[5])]
            ^ CRC16[1][usize::from(c[6])]
            ^ CRC16[0][usize::from(c[7])];
    }
    for &b in chunks.remainder() {
        crc = (crc << 8) ^ CRC16[0][usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// `CRC16[k][b]`: the CRC of byte `b` followed by `k` zero bytes.
const CRC16: [[u16; 256]; 8] = {
    let mut tables = [[0u16; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x8005
            } else {
                crc << 1
            };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let previous = tables[k - 1][i];
            tables[k][i] = (previous << 8) ^ tables[0][(previous >> 8) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC-16 one bit at a time, as the format defines it.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in bytes {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x8005
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn the_crcs_are_the_formats() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7919 % 251) as u8).collect();
        for len in [0, 1, 2, 7, 8, 9, 15, 16, 17, 999, 1000] {
            assert_eq!(crc16(&bytes[..len]), crc16_bitwise(&bytes[..len]), "{len}");
        }
        // A frame header of the test clips: sync, codes, frame number 0, CRC-8.
        assert_eq!(crc8(b"123456789"), 0xF4);
    }
}
