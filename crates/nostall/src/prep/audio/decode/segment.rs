//! A segment of a long recording: the bytes a manifest's source reads for one sample
//! ([`crate::storage::Segments`]), and how they are decoded.
//!
//! A segment's bytes are an envelope and a *carried file*: the recording's header (for
//! some formats rewritten to fit) followed by the stretch of its audio that holds the
//! segment, from a frame (FLAC) or page (Opus) boundary, or the whole file where the
//! format gives no way in (MP3, Vorbis). The envelope says where the segment lies in the
//! recording, in seconds, and which frame of the recording the carried file begins at, so
//! the crop is chosen within the segment and decoded from the carried bytes as from a
//! file of its own.
//!
//! The layout (little-endian, [`ENVELOPE`] bytes, then the carried file):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | `MAGIC` |
//! | 8..16 | the segment's start, seconds (f64) |
//! | 16..24 | its duration, seconds (f64; negative: to the end of the recording) |
//! | 24..32 | the frame of the recording the carried audio begins at |
//! | 32..40 | flags: bit 0 set when the carried audio ends before the recording does |

use std::ops::Range;

use super::{by_format, too_long, DecodeOptions, Plan, Waveform};
use crate::error::Cause;

/// The envelope's first bytes. No audio format starts so.
const MAGIC: &[u8; 8] = b"nstlSEG1";
/// The envelope's length; the carried file follows.
pub(crate) const ENVELOPE: usize = 40;
/// The flag of a carried stretch that stops before the recording's end.
const ENDS_EARLY: u64 = 1;
/// The longest recording a segment may be cut from (a day): it bounds what a damaged
/// header can make a decoder expect, as the per-file limit does for clips, and the times
/// a manifest may give.
pub(crate) const MAX_RECORDING_SECONDS: u32 = 86_400;

/// Where the carried audio lies in its recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    /// The recording's frame (at its decoded rate) that the carried audio begins at.
    pub(crate) first: u64,
    /// Whether the carried audio runs to the recording's end (so that its end can be
    /// checked against what the header declares).
    pub(crate) to_end: bool,
}

impl Part {
    /// A file read whole.
    pub(crate) const WHOLE: Part = Part {
        first: 0,
        to_end: true,
    };
}

/// A segment of a recording, as its envelope states it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Segment {
    /// Seconds from the recording's start.
    pub(crate) start: f64,
    /// Seconds, or `None`: to the recording's end.
    pub(crate) duration: Option<f64>,
    /// Where the carried audio lies.
    pub(crate) part: Part,
}

impl Segment {
    /// Appends the envelope to `out`; the carried file is to follow it.
    pub(crate) fn write_envelope(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.duration.unwrap_or(-1.0).to_le_bytes());
        out.extend_from_slice(&self.part.first.to_le_bytes());
        let flags = if self.part.to_end { 0 } else { ENDS_EARLY };
        out.extend_from_slice(&flags.to_le_bytes());
    }

    /// The segment and its carried file, if `data` is an envelope.
    pub(crate) fn read(data: &[u8]) -> Option<Result<(Segment, &[u8]), Cause>> {
        if !data.starts_with(MAGIC) {
            return None;
        }
        let Some((envelope, carried)) = data.split_at_checked(ENVELOPE) else {
            return Some(Err(Cause::Corrupt(
                "its segment envelope is cut short".into(),
            )));
        };
        let field = |i: usize| <[u8; 8]>::try_from(&envelope[8 * i..8 * i + 8]).expect("8");
        let (start, duration) = (f64::from_le_bytes(field(1)), f64::from_le_bytes(field(2)));
        let first = u64::from_le_bytes(field(3));
        let flags = u64::from_le_bytes(field(4));
        let seconds = 0.0..=f64::from(MAX_RECORDING_SECONDS);
        if !seconds.contains(&start)
            || !(duration < 0.0 || seconds.contains(&duration))
            || flags & !ENDS_EARLY != 0
        {
            return Some(Err(Cause::Corrupt(
                "its segment envelope is not one nostall writes".into(),
            )));
        }
        let segment = Segment {
            start,
            duration: (duration >= 0.0).then_some(duration),
            part: Part {
                first,
                to_end: flags & ENDS_EARLY == 0,
            },
        };
        Some(Ok((segment, carried)))
    }
}

/// The frame at `seconds` of a recording at `rate` Hz: the nearest. A manifest's times
/// become frames here, in the source that cuts a recording and in the decoder alike.
pub(crate) fn frame_at(seconds: f64, rate: u32) -> u64 {
    (seconds * f64::from(rate)).round() as u64
}

/// Decodes the frames of `segment` that `plan` asks for (on the segment's own timeline:
/// frame 0 is its start) from its `carried` file. The segment is refused when it lasts
/// longer than the options allow, holds no audio, or lies outside its recording or its
/// carried bytes.
pub(super) fn decode(
    segment: Segment,
    carried: &[u8],
    options: DecodeOptions,
    mut plan: Option<Plan<'_>>,
    out: &mut Waveform,
) -> Result<(), Cause> {
    if let Some(duration) = segment.duration {
        if duration > f64::from(options.max_seconds) {
            return Err(Cause::TooLong {
                seconds: duration.ceil() as u64,
                limit: u64::from(options.max_seconds),
            });
        }
    }
    // Where the segment lies in the carried file's frames: its first frame, and its length.
    let mut placed: Option<(Result<u64, u64>, u64)> = None;
    let mut within = |rate: u32, carried_frames: u64| -> Range<u64> {
        let frame = |seconds| frame_at(seconds, rate);
        let start = frame(segment.start);
        // A start before the carried audio (bytes not those of this segment) is an error.
        let Some(offset) = start.checked_sub(segment.part.first) else {
            placed = Some((Err(start), 0));
            return 0..0;
        };
        let length = match segment.duration {
            Some(duration) => frame(duration),
            None => carried_frames.saturating_sub(offset),
        };
        placed = Some((Ok(offset), length));
        let window = match plan.as_mut() {
            Some(plan) => plan(rate, length),
            None => 0..length,
        };
        offset + window.start.min(length)..offset + window.end.min(length)
    };
    let recording = DecodeOptions {
        max_seconds: MAX_RECORDING_SECONDS,
        ..options
    };
    by_format(carried, recording, Some(&mut within), segment.part, out)?;
    let Some((offset, length)) = placed else {
        return Err(Cause::Corrupt("its segment holds no audio".into()));
    };
    let offset = offset.map_err(|start| {
        Cause::Corrupt(format!(
            "its segment's bytes begin at frame {} of the recording, after the segment's \
             start (frame {start})",
            segment.part.first
        ))
    })?;
    if length == 0 {
        return Err(Cause::Corrupt("its segment holds no audio".into()));
    }
    if offset + length > out.total {
        let seconds = (segment.part.first + out.total) as f64 / f64::from(out.rate);
        return Err(Cause::Corrupt(if segment.part.to_end {
            format!("its segment runs past the end of the recording, which lasts {seconds:.3} s")
        } else {
            format!("its segment runs past the end of its bytes, at {seconds:.3} s")
        }));
    }
    if length > u64::from(options.max_seconds) * u64::from(out.rate) {
        return Err(too_long(length, out.rate, options.max_seconds));
    }
    // A decoder that fell back to decoding everything holds frames before the segment.
    if out.start < offset {
        let before = (offset - out.start) as usize;
        for plane in &mut out.planes {
            plane.drain(..before.min(plane.len()));
        }
        out.start = offset;
    }
    out.start -= offset;
    out.total = length;
    Ok(())
}
