//! WAV (RIFF/WAVE) read in place: the header's chunks walked, then only the frames a
//! window asks for converted, straight from the file's bytes into the output planes.
//!
//! PCM needs no decoder: what costs is walking the samples, so this reader touches each
//! byte of the window once (converting, and mixing to mono, in one pass) where a
//! general demuxer and decoder copy packets through buffers. Integer, float, A-law and
//! µ-law samples, plain or in `WAVE_FORMAT_EXTENSIBLE`; other codecs are refused by name.
//!
//! The header's length is exact, so a file that holds fewer bytes than its data chunk
//! declares was cut, and is refused whatever window is asked. Float samples are checked
//! for NaN and infinities over the whole file (a cheap scan) so that such a file is
//! refused in every epoch, not only when a crop meets the bad sample.

use std::ops::Range;

use super::{check_stream, fill_planes, too_long, truncated, DecodeOptions, Plan, Waveform};
use crate::error::Cause;

/// How one sample is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// Unsigned 8-bit, centred on 128.
    U8,
    /// Signed little-endian integers of 2, 3 or 4 bytes.
    I16,
    I24,
    I32,
    F32,
    F64,
    /// G.711 companded 8-bit.
    ALaw,
    MuLaw,
}

impl Encoding {
    fn bytes(self) -> usize {
        match self {
            Encoding::U8 | Encoding::ALaw | Encoding::MuLaw => 1,
            Encoding::I16 => 2,
            Encoding::I24 => 3,
            Encoding::I32 | Encoding::F32 => 4,
            Encoding::F64 => 8,
        }
    }

    /// Sample `i` of `bytes` (which holds at least `i + 1` samples), scaled as torchaudio
    /// loads it: integers divided by 2^(bits - 1).
    #[inline(always)]
    fn read(self, bytes: &[u8], at: usize) -> f32 {
        match self {
            Encoding::U8 => (f32::from(bytes[at]) - 128.0) / 128.0,
            Encoding::I16 => i16_sample([bytes[at], bytes[at + 1]]),
            Encoding::I24 => i24_sample([bytes[at], bytes[at + 1], bytes[at + 2]]),
            Encoding::I32 => {
                let v = i32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
                (f64::from(v) / 2_147_483_648.0) as f32
            }
            Encoding::F32 => f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")),
            Encoding::F64 => {
                f64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes")) as f32
            }
            Encoding::ALaw => f32::from(alaw(bytes[at])) / 32_768.0,
            Encoding::MuLaw => f32::from(mulaw(bytes[at])) / 32_768.0,
        }
    }
}

/// A little-endian 16-bit sample, scaled by 2^-15.
#[inline(always)]
fn i16_sample(bytes: [u8; 2]) -> f32 {
    f32::from(i16::from_le_bytes(bytes)) / 32_768.0
}

/// A little-endian 24-bit sample, scaled by 2^-23.
#[inline(always)]
fn i24_sample(bytes: [u8; 3]) -> f32 {
    (i32::from_le_bytes([0, bytes[0], bytes[1], bytes[2]]) >> 8) as f32 / 8_388_608.0
}

/// G.711 A-law to linear 16-bit.
fn alaw(byte: u8) -> i16 {
    let a = byte ^ 0x55;
    let exponent = (a >> 4) & 7;
    let mantissa = i16::from(a & 0x0F);
    let magnitude = if exponent == 0 {
        (mantissa << 4) + 8
    } else {
        ((mantissa << 4) + 0x108) << (exponent - 1)
    };
    if a & 0x80 != 0 {
        magnitude
    } else {
        -magnitude
    }
}

/// G.711 µ-law to linear 16-bit.
fn mulaw(byte: u8) -> i16 {
    let u = !byte;
    let exponent = (u >> 4) & 7;
    let mantissa = i16::from(u & 0x0F);
    let magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84;
    if u & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// What the header declares.
#[derive(Debug)]
struct Header {
    encoding: Encoding,
    channels: usize,
    rate: u32,
    /// The data chunk's bytes in the file, as declared (it may run past the file's end);
    /// to the end of the bytes read when its size is unknown.
    data: Range<usize>,
    /// Whether the data chunk's size is unknown, as a writer to a pipe leaves it: the
    /// data runs to the file's end.
    size_unknown: bool,
}

/// Whether `data` is a RIFF/WAVE file (little-endian: `RIFX` and `RF64` are not read).
pub(super) fn is_wav(data: &[u8]) -> bool {
    data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WAVE"
}

fn u16_at(data: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([data[at], data[at + 1]])
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

fn cut_short() -> Cause {
    Cause::Corrupt("its header is cut short".into())
}

/// Walks the chunks up to `data`, reading `fmt ` on the way.
fn header(data: &[u8]) -> Result<Header, Cause> {
    // A RIFF size of 0 or 2^32 - 1 is what streaming writers leave: unknown.
    let riff_end = match u32_at(data, 4) {
        0 | u32::MAX => None,
        size => Some(8 + size as usize),
    };
    let mut format = None;
    let mut at = 12;
    loop {
        let Some(chunk) = data.get(at..at + 8) else {
            return Err(if format.is_some() {
                Cause::Corrupt("it has no data chunk".into())
            } else {
                cut_short()
            });
        };
        let size = u32_at(chunk, 4);
        let body = at + 8;
        match &chunk[..4] {
            b"fmt " => {
                let fmt = data.get(body..body + size as usize).ok_or_else(cut_short)?;
                format = Some(parse_format(fmt)?);
            }
            b"data" => {
                let (encoding, channels, rate) = format.ok_or_else(|| {
                    Cause::Corrupt("its data chunk comes before its format chunk".into())
                })?;
                // Streaming writers leave the data size unknown too (2^32 - 1, or 0 beside
                // an unknown RIFF size, as ffmpeg and sox write to a pipe): the rest of the
                // file.
                let size_unknown = size == u32::MAX || (size == 0 && riff_end.is_none());
                let end = if size_unknown {
                    data.len()
                } else {
                    body + size as usize
                };
                if riff_end.is_some_and(|riff_end| end > riff_end) {
                    return Err(Cause::Corrupt(format!(
                        "its data chunk ({size} bytes) runs past the end of its RIFF chunk"
                    )));
                }
                return Ok(Header {
                    encoding,
                    channels,
                    rate,
                    data: body..end,
                    size_unknown,
                });
            }
            _ => {}
        }
        // Chunks are padded to an even size.
        at = body + size as usize + (size as usize & 1);
    }
}

/// The `fmt ` chunk: the encoding, channels and rate.
fn parse_format(fmt: &[u8]) -> Result<(Encoding, usize, u32), Cause> {
    if fmt.len() < 16 {
        return Err(cut_short());
    }
    let mut tag = u16_at(fmt, 0);
    let channels = usize::from(u16_at(fmt, 2));
    let rate = u32_at(fmt, 4);
    let block = usize::from(u16_at(fmt, 12));
    let bits = u16_at(fmt, 14);
    if tag == 0xFFFE {
        // WAVE_FORMAT_EXTENSIBLE: the codec is the sub-format GUID's first two bytes.
        if fmt.len() < 40 {
            return Err(cut_short());
        }
        tag = u16_at(fmt, 24);
    }
    let encoding = match (tag, bits) {
        (1, 8) => Encoding::U8,
        (1, 16) => Encoding::I16,
        (1, 24) => Encoding::I24,
        (1, 32) => Encoding::I32,
        (3, 32) => Encoding::F32,
        (3, 64) => Encoding::F64,
        (6, 8) => Encoding::ALaw,
        (7, 8) => Encoding::MuLaw,
        (1 | 3 | 6 | 7, _) => {
            return Err(Cause::Corrupt(format!(
                "its WAV codec 0x{tag:04x} at {bits} bits per sample is not supported"
            )))
        }
        _ => {
            return Err(Cause::Corrupt(format!(
                "its WAV codec 0x{tag:04x} is not supported (PCM, float, A-law and µ-law are)"
            )))
        }
    };
    check_stream(rate, channels)?;
    if block != channels * encoding.bytes() {
        return Err(Cause::Corrupt(format!(
            "its frames are declared {block} bytes long, where {channels} channels of \
             {bits}-bit samples take {}",
            channels * encoding.bytes()
        )));
    }
    Ok((encoding, channels, rate))
}

/// Where a WAV file's frames lie, as its header declares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataLayout {
    /// The data chunk's first byte.
    pub(crate) start: usize,
    /// The data chunk's length in bytes as declared (it may run past the file's end);
    /// `None` when unknown, as a writer to a pipe leaves it: to the file's end.
    pub(crate) len: Option<u64>,
    /// The bytes of one frame.
    pub(crate) frame_bytes: usize,
    pub(crate) rate: u32,
}

/// Where a WAV file's frames lie, from its first bytes (enough to hold the chunks before
/// the data). A recording's segments are cut from it by arithmetic.
pub(crate) fn data_layout(head: &[u8]) -> Result<DataLayout, Cause> {
    if !is_wav(head) {
        return Err(Cause::UnknownFormat(crate::sample::Modality::Audio));
    }
    let header = header(head)?;
    Ok(DataLayout {
        start: header.data.start,
        len: (!header.size_unknown).then_some((header.data.end - header.data.start) as u64),
        frame_bytes: header.channels * header.encoding.bytes(),
        rate: header.rate,
    })
}

/// Decodes a WAV file: the frames `plan` asks for, or all of them.
pub(super) fn decode(
    data: &[u8],
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    out: &mut Waveform,
) -> Result<(), Cause> {
    let header = header(data)?;
    let frame_bytes = header.channels * header.encoding.bytes();
    let declared = ((header.data.end - header.data.start) / frame_bytes) as u64;
    let limit = u64::from(options.max_seconds) * u64::from(header.rate);
    if declared > limit {
        return Err(too_long(declared, header.rate, options.max_seconds));
    }
    let held = data.len().saturating_sub(header.data.start) / frame_bytes;
    if (held as u64) < declared {
        return Err(truncated(declared, held as u64));
    }
    if declared == 0 {
        return Err(Cause::Corrupt("it holds no audio".into()));
    }
    let samples = &data[header.data.start..header.data.start + declared as usize * frame_bytes];
    if matches!(header.encoding, Encoding::F32 | Encoding::F64) {
        let bytes = header.encoding.bytes();
        if (0..samples.len() / bytes).any(|i| !header.encoding.read(samples, i * bytes).is_finite())
        {
            return Err(Cause::Corrupt("it holds NaN or infinite samples".into()));
        }
    }
    let window = match plan {
        Some(plan) => {
            let window = plan(header.rate, declared);
            window.start.min(declared)..window.end.min(declared)
        }
        None => 0..declared,
    };
    out.rate = header.rate;
    out.start = window.start;
    out.total = declared;
    let frames = &samples[window.start as usize * frame_bytes..window.end as usize * frame_bytes];
    convert(frames, header.encoding, header.channels, options.mono, out);
    Ok(())
}

/// Converts interleaved `frames` into `out`'s planes (one, the channels' mean, if `mono`).
fn convert(frames: &[u8], encoding: Encoding, channels: usize, mono: bool, out: &mut Waveform) {
    // The common layouts get a loop each with the frame's size known at compile time (no
    // bounds checks, so the compiler vectorises it); the rest share one loop.
    match (encoding, channels) {
        (Encoding::I16, 1) => fixed::<1, 2>(frames, mono, out, i16_sample),
        (Encoding::I16, 2) => fixed::<2, 2>(frames, mono, out, i16_sample),
        (Encoding::I24, 1) => fixed::<1, 3>(frames, mono, out, i24_sample),
        (Encoding::I24, 2) => fixed::<2, 3>(frames, mono, out, i24_sample),
        (Encoding::F32, 1) => fixed::<1, 4>(frames, mono, out, f32::from_le_bytes),
        (Encoding::F32, 2) => fixed::<2, 4>(frames, mono, out, f32::from_le_bytes),
        _ => {
            let width = encoding.bytes();
            any(frames, width, channels, mono, out, |b| encoding.read(b, 0));
        }
    }
}

/// [`convert`] for `CH` channels of `W`-byte samples.
fn fixed<const CH: usize, const W: usize>(
    frames: &[u8],
    mono: bool,
    out: &mut Waveform,
    sample: impl Fn([u8; W]) -> f32,
) {
    let at = |frame: &[u8], c: usize| sample(frame[c * W..][..W].try_into().expect("W bytes"));
    let n = frames.len() / (CH * W);
    let planes = start_planes(out, if mono { 1 } else { CH }, n);
    fill_planes::<CH, _>(planes, frames.chunks_exact(CH * W), n, at);
}

/// [`convert`] for any layout: `sample` reads one sample of `width` bytes.
fn any(
    frames: &[u8],
    width: usize,
    channels: usize,
    mono: bool,
    out: &mut Waveform,
    sample: impl Fn(&[u8]) -> f32,
) {
    let frame = width * channels;
    let planes = start_planes(out, if mono { 1 } else { channels }, frames.len() / frame);
    if let [plane] = planes {
        let scale = 1.0 / channels as f32;
        plane.extend(frames.chunks_exact(frame).map(|f| {
            let mut sum = sample(f);
            for c in 1..channels {
                sum += sample(&f[c * width..]);
            }
            sum * scale
        }));
    } else {
        for (c, plane) in planes.iter_mut().enumerate() {
            plane.extend(frames.chunks_exact(frame).map(|f| sample(&f[c * width..])));
        }
    }
}

/// `out`'s planes, `count` of them, emptied with room for `frames` each.
fn start_planes(out: &mut Waveform, count: usize, frames: usize) -> &mut [Vec<f32>] {
    out.planes.resize_with(count, Vec::new);
    for plane in &mut out.planes {
        plane.clear();
        plane.reserve(frames);
    }
    &mut out.planes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g711_decodes_as_the_reference_tables() {
        // Values from ITU-T G.711's tables (as libsndfile's and ffmpeg's decoders give).
        assert_eq!(alaw(0xD5), 8);
        assert_eq!(alaw(0x55), -8);
        assert_eq!(alaw(0xAA), 32_256);
        assert_eq!(alaw(0x2A), -32_256);
        assert_eq!(mulaw(0xFF), 0);
        assert_eq!(mulaw(0x7F), 0);
        assert_eq!(mulaw(0x80), 32_124);
        assert_eq!(mulaw(0x00), -32_124);
    }
}
