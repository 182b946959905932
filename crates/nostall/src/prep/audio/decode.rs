//! Audio files to planar f32 samples, through symphonia (WAV, FLAC, Ogg Vorbis, MP3),
//! recognised by content and checked against what their headers declare.
//!
//! Integer PCM becomes [-1, 1) as torchaudio loads it (16-bit divided by 2¹⁵, 24-bit by
//! 2²³). A decoding error anywhere fails the file: training data with a damaged stretch
//! is not played around, as a media player would, but reported.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_MP3, CODEC_TYPE_NULL, CODEC_TYPE_VORBIS};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use crate::error::Cause;
use crate::prep::Modality;

/// Sample rates above this are not audio a model trains on; a header declaring one is
/// damaged or hostile.
const MAX_RATE: u32 = 768_000;
/// Channels beyond this likewise.
const MAX_CHANNELS: usize = 64;

/// Decoded audio: `planes[c]` holds channel `c`, all of equal length.
#[derive(Debug, Default)]
pub(crate) struct Waveform {
    pub(crate) rate: u32,
    pub(crate) planes: Vec<Vec<f32>>,
}

impl Waveform {
    /// Frames (samples per channel).
    pub(crate) fn frames(&self) -> usize {
        self.planes.first().map_or(0, Vec::len)
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

/// Decodes `data` into `out`, re-using its buffers.
pub(crate) fn decode(data: &[u8], options: DecodeOptions, out: &mut Waveform) -> Result<(), Cause> {
    // symphonia is safe Rust, but a malformed stream still trips assertions in it (a
    // header with a sample rate of 0 does): that is the file's fault, reported as such.
    catch_unwind(AssertUnwindSafe(|| decode_unguarded(data, options, out))).unwrap_or_else(
        |panic| {
            let message = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("no message");
            Err(Cause::Corrupt(format!(
                "the audio decoder failed on it ({message})"
            )))
        },
    )
}

fn decode_unguarded(data: &[u8], options: DecodeOptions, out: &mut Waveform) -> Result<(), Cause> {
    // symphonia reads from an owned source; a copy costs far less than decoding.
    let stream = MediaSourceStream::new(Box::new(Cursor::new(data.to_vec())), Default::default());
    let probed = symphonia::default::get_probe()
        .format(
            &Hint::new(),
            stream,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(|e| match e {
            SymphoniaError::Unsupported(_) => Cause::UnknownFormat(Modality::Audio),
            other => corrupt("its header", &other),
        })?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| Cause::Corrupt("it holds no audio track".into()))?;
    let params = track.codec_params.clone();
    let track_id = track.id;
    let rate = params.sample_rate.unwrap_or(0);
    if rate == 0 || rate > MAX_RATE {
        return Err(Cause::Corrupt(format!(
            "it declares a sample rate of {rate} Hz"
        )));
    }
    let channels = params.channels.map_or(0, |c| c.count());
    if channels == 0 || channels > MAX_CHANNELS {
        return Err(Cause::Corrupt(format!("it declares {channels} channels")));
    }
    let limit = u64::from(options.max_seconds) * u64::from(rate);
    if let Some(declared) = params.n_frames.filter(|&n| n > limit) {
        return Err(too_long(declared, rate, options.max_seconds));
    }
    let mut decoder = symphonia::default::get_codecs()
        .make(&params, &DecoderOptions::default())
        .map_err(|e| match e {
            SymphoniaError::Unsupported(_) => Cause::UnknownFormat(Modality::Audio),
            other => corrupt("its codec parameters", &other),
        })?;

    let planes = if options.mono { 1 } else { channels };
    out.rate = rate;
    out.planes.resize_with(planes, Vec::new);
    for plane in &mut out.planes {
        plane.clear();
    }
    let mut buffer: Option<SampleBuffer<f32>> = None;
    loop {
        let packet = match format.next_packet() {
            Ok(packet) => packet,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break
            }
            Err(SymphoniaError::ResetRequired) => {
                return Err(Cause::Corrupt(
                    "its stream changes format midway (chained streams are not supported)".into(),
                ))
            }
            Err(e) => return Err(corrupt("its container", &e)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = decoder
            .decode(&packet)
            .map_err(|e| corrupt("its audio data", &e))?;
        let spec = *decoded.spec();
        if spec.rate != rate || spec.channels.count() != channels {
            return Err(Cause::Corrupt(format!(
                "its stream changes from {rate} Hz × {channels} channels to {} Hz × {} \
                 channels midway",
                spec.rate,
                spec.channels.count()
            )));
        }
        let frames = decoded.frames();
        if frames == 0 {
            continue;
        }
        let buffer = match &mut buffer {
            Some(b) if b.capacity() >= frames => b,
            _ => buffer.insert(SampleBuffer::new(decoded.capacity() as u64, spec)),
        };
        buffer.copy_planar_ref(decoded);
        let samples = buffer.samples();
        if options.mono {
            mix_into(&mut out.planes[0], samples, channels, frames);
        } else {
            for (plane, samples) in out.planes.iter_mut().zip(samples.chunks_exact(frames)) {
                plane.extend_from_slice(samples);
            }
        }
        if out.frames() as u64 > limit {
            return Err(too_long(out.frames() as u64, rate, options.max_seconds));
        }
    }
    let frames = out.frames() as u64;
    if frames == 0 {
        return Err(Cause::Corrupt("it holds no audio".into()));
    }
    // PCM and FLAC headers state the length exactly; a file that holds less was cut.
    // (MP3 and Vorbis headers, when they state one, may count encoder padding.)
    let exact = params.codec != CODEC_TYPE_MP3 && params.codec != CODEC_TYPE_VORBIS;
    if let Some(declared) = params.n_frames.filter(|&n| exact && frames < n) {
        return Err(Cause::Corrupt(format!(
            "it is truncated: its header declares {declared} frames, it holds {frames}"
        )));
    }
    if out.planes.iter().flatten().any(|s| !s.is_finite()) {
        return Err(Cause::Corrupt("it holds NaN or infinite samples".into()));
    }
    Ok(())
}

/// Appends the mean of `channels` planar channels of `frames` each to `mono`.
fn mix_into(mono: &mut Vec<f32>, planar: &[f32], channels: usize, frames: usize) {
    let start = mono.len();
    mono.extend_from_slice(&planar[..frames]);
    let mixed = &mut mono[start..];
    for plane in planar.chunks_exact(frames).skip(1) {
        for (m, s) in mixed.iter_mut().zip(plane) {
            *m += s;
        }
    }
    if channels > 1 {
        let scale = 1.0 / channels as f32;
        for m in mixed {
            *m *= scale;
        }
    }
}

fn too_long(frames: u64, rate: u32, limit: u32) -> Cause {
    Cause::TooLong {
        seconds: frames.div_ceil(u64::from(rate)),
        limit: u64::from(limit),
    }
}

fn corrupt(part: &str, error: &SymphoniaError) -> Cause {
    Cause::Corrupt(format!("{part} cannot be decoded: {error}"))
}
