//! Audio files to planar f32 samples, recognised by content and checked against what
//! their headers declare. One module per way in, each chosen by measurement against the
//! C reference decoders (docs/benchmarks.md, "Audio decoders against the C references"):
//!
//! - [`wav`]: RIFF/WAVE PCM, read in place (no decoder to speak of: the cost is touching
//!   the bytes once);
//! - [`mp3`]: MP3 through minimp3 (C, vendored in `csrc/`);
//! - [`opus`]: Ogg Opus through libopus (C, built from source by `libopus_sys`), its
//!   pages read here;
//! - [`flac`]: FLAC, its frames found here and decoded by symphonia's FLAC decoder;
//! - [`packets`]: Ogg Vorbis through symphonia (Rust), faster than libvorbis on these
//!   files.
//!
//! Integer PCM becomes [-1, 1) as torchaudio loads it (16-bit divided by 2¹⁵, 24-bit by
//! 2²³). A decoding error anywhere fails the file: training data with a damaged stretch
//! is not played around, as a media player would, but reported.
//!
//! **Windows.** A crop keeps a few seconds of a clip, so the caller may ask for a window
//! of frames once the stream's rate and exact length are known ([`Plan`]); each format
//! decodes only what that window needs (see its module), and the samples are those a
//! full decode gives (Opus: decoded from a 500 ms pre-roll, to within float rounding for
//! CELT-coded audio).
//! Formats whose headers state an exact length (WAV, FLAC, MP3 with a Xing/LAME tag, Ogg
//! Opus) are checked against it, so a file cut short is refused whatever window an epoch
//! asks of it.

mod flac;
mod mp3;
mod ogg;
mod opus;
mod packets;
mod segment;
mod wav;

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::Cause;
pub(crate) use flac::{
    find_sync as flac_find_sync, frame_header as flac_frame_header, StreamInfo as FlacStreamInfo,
};
pub(crate) use opus::PREROLL as OPUS_PREROLL;
pub(crate) use segment::{frame_at, Part, Segment, ENVELOPE, MAX_RECORDING_SECONDS};
pub(crate) use wav::data_layout as wav_data_layout;

/// Sample rates above this are not audio a model trains on; a header declaring one is
/// damaged or hostile.
pub(crate) const MAX_RATE: u32 = 768_000;
/// Channels beyond this likewise.
const MAX_CHANNELS: usize = 64;

/// Decoded audio: `planes[c]` holds channel `c` from frame `start` on, all of equal
/// length.
#[derive(Debug, Default)]
pub(crate) struct Waveform {
    pub(crate) rate: u32,
    pub(crate) planes: Vec<Vec<f32>>,
    /// The first frame held (0 unless a window was decoded).
    pub(crate) start: u64,
    /// Frames in the whole file.
    pub(crate) total: u64,
    /// Interleaved samples on their way to the planes, kept for the next file.
    scratch: Vec<f32>,
}

impl Waveform {
    /// Frames held (samples per channel).
    pub(crate) fn frames(&self) -> usize {
        self.planes.first().map_or(0, Vec::len)
    }

    /// Empties the planes, keeping their number and capacity.
    fn clear(&mut self) {
        for plane in &mut self.planes {
            plane.clear();
        }
    }
}

/// What [`decode`] does beyond decoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeOptions {
    /// Mix the channels to one (their mean, as torchaudio's `mean(dim=0)`).
    pub(crate) mono: bool,
    /// Files longer than this many seconds are refused, before decoding when the header
    /// says so and as soon as the decoded audio passes it otherwise.
    pub(crate) max_seconds: u32,
}

/// Chooses the frames to keep, given the rate and the exact number of frames; called
/// once per file.
pub(crate) type Plan<'a> = &'a mut dyn FnMut(u32, u64) -> Range<u64>;

/// Decodes `data` into `out`, re-using its buffers: the frames `plan` asks for (at
/// least), or all of them without a plan.
pub(crate) fn decode(
    data: &[u8],
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    out: &mut Waveform,
) -> Result<(), Cause> {
    // symphonia is safe Rust, but a malformed stream still trips assertions in it (a
    // header with a sample rate of 0 does): that is the file's fault, reported as such.
    let decode = || match Segment::read(data) {
        Some(segment) => {
            let (segment, carried) = segment?;
            segment::decode(segment, carried, options, plan, out)
        }
        None => by_format(data, options, plan, Part::WHOLE, out),
    };
    catch_unwind(AssertUnwindSafe(decode)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("no message");
        Err(Cause::Corrupt(format!(
            "the audio decoder failed on it ({message})"
        )))
    })
}

/// Dispatches on the content: WAV and Ogg Opus by their headers, then MP3 if minimp3
/// finds frames, then symphonia's probe (FLAC, Ogg Vorbis; anything else is refused
/// there as not audio). `part` says where `data`'s audio lies in its recording: WAV
/// carried from a segment is a file of its own, FLAC and Opus may begin and end midway,
/// the other formats are carried whole.
fn by_format(
    data: &[u8],
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    part: Part,
    out: &mut Waveform,
) -> Result<(), Cause> {
    if wav::is_wav(data) {
        // Integer PCM is finite by construction, and float PCM is checked whole there.
        return wav::decode(data, options, plan, out);
    }
    if let Some(start) = flac::start(data) {
        if start > 0 && part != Part::WHOLE {
            return Err(Cause::Corrupt(
                "its segment's bytes hold an ID3 tag before the FLAC stream".into(),
            ));
        }
        flac::decode(&data[start..], options, plan, part, out)?;
    } else if opus::is_opus(data) {
        opus::decode(data, options, plan, part, out)?;
    } else {
        if part != Part::WHOLE {
            return Err(Cause::Corrupt(
                "its segment's bytes begin or end midway through a format read only whole".into(),
            ));
        }
        if ogg::is_ogg(data) {
            packets::decode(data, options, plan, out)?;
        } else if let Some(stream) = mp3::Mp3::open(data)? {
            mp3::decode(stream, options, plan, out)?;
        } else {
            packets::decode(data, options, plan, out)?;
        }
    }
    check_values(out)
}

/// Refuses a stream whose header declares a rate or channel count no recording has.
fn check_stream(rate: u32, channels: usize) -> Result<(), Cause> {
    if rate == 0 || rate > MAX_RATE {
        return Err(Cause::Corrupt(format!(
            "it declares a sample rate of {rate} Hz"
        )));
    }
    if channels == 0 || channels > MAX_CHANNELS {
        return Err(Cause::Corrupt(format!("it declares {channels} channels")));
    }
    Ok(())
}

/// Appends interleaved `samples` of `channels` to `out`'s planes (one plane: their mean).
fn append_interleaved(out: &mut [Vec<f32>], channels: usize, samples: &[f32]) {
    match channels {
        1 => out[0].extend_from_slice(samples),
        // Stereo, the common case, with the frame's size known (vectorised).
        2 => append_frames::<2>(out, samples),
        _ => {
            if let [mono] = out {
                let scale = 1.0 / channels as f32;
                mono.extend(
                    samples
                        .chunks_exact(channels)
                        .map(|frame| frame.iter().skip(1).fold(frame[0], |sum, s| sum + s) * scale),
                );
            } else {
                for (c, plane) in out.iter_mut().enumerate() {
                    plane.extend(samples.chunks_exact(channels).map(|frame| frame[c]));
                }
            }
        }
    }
}

/// [`append_interleaved`] for `CH` channels.
fn append_frames<const CH: usize>(out: &mut [Vec<f32>], samples: &[f32]) {
    let frames = samples
        .chunks_exact(CH)
        .map(|f| <[f32; CH]>::try_from(f).expect("CH"));
    fill_planes::<CH, _>(out, frames, samples.len() / CH, |f, c| f[c]);
}

/// Appends `n` frames of `CH` channels to `out`'s planes (one plane: their mean, the
/// channels summed in order, then scaled, as every decoder's path mixes them), channel
/// `c` of a frame read by `sample`. The planes are sized first, then filled in one pass
/// over the frames: a loop the compiler vectorises, where `extend` from the frames
/// pushes a sample at a time.
fn fill_planes<const CH: usize, F: Copy>(
    out: &mut [Vec<f32>],
    frames: impl Iterator<Item = F> + Clone,
    n: usize,
    sample: impl Fn(F, usize) -> f32,
) {
    let grown = |plane: &mut Vec<f32>| {
        let base = plane.len();
        plane.resize(base + n, 0.0);
        base
    };
    if let [mono] = out {
        let scale = 1.0 / CH as f32;
        let base = grown(mono);
        for (value, f) in mono[base..].iter_mut().zip(frames) {
            let mut sum = sample(f, 0);
            for c in 1..CH {
                sum += sample(f, c);
            }
            *value = sum * scale;
        }
    } else if let [left, right] = out {
        let (from_left, from_right) = (grown(left), grown(right));
        let pairs = left[from_left..].iter_mut().zip(&mut right[from_right..]);
        for ((l, r), f) in pairs.zip(frames) {
            (*l, *r) = (sample(f, 0), sample(f, 1));
        }
    } else {
        for (c, plane) in out.iter_mut().enumerate() {
            plane.extend(frames.clone().map(|f| sample(f, c)));
        }
    }
}

/// `window` within a stream of `total` frames.
fn clamp(window: Range<u64>, total: u64) -> Range<u64> {
    window.start.min(total)..window.end.min(total)
}

/// Refuses NaN and infinities, which no decoder should give and a float WAV may hold.
fn check_values(out: &Waveform) -> Result<(), Cause> {
    // Without an early exit, block by block, so that the compiler vectorises the test.
    let finite = |block: &[f32]| block.iter().fold(true, |ok, s| ok & s.is_finite());
    if !out
        .planes
        .iter()
        .all(|plane| plane.chunks(4_096).all(finite))
    {
        return Err(Cause::Corrupt("it holds NaN or infinite samples".into()));
    }
    Ok(())
}

fn truncated(declared: u64, holds: u64) -> Cause {
    Cause::Corrupt(format!(
        "it is truncated: its header declares {declared} frames, it holds {holds}"
    ))
}

fn too_long(frames: u64, rate: u32, limit: u32) -> Cause {
    Cause::TooLong {
        seconds: frames.div_ceil(u64::from(rate)),
        limit: u64::from(limit),
    }
}
