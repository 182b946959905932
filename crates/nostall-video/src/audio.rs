//! The audio track of a video, over a span of its timeline.
//!
//! The track is read from the start of the file, packet after packet of its audio stream
//! only, until the span is decoded: audio codecs carry state from frame to frame (MDCT
//! overlap in AAC, Vorbis and Opus, MP3's bit reservoir, Opus's predictors), so a
//! decoder started at a seek point gives other samples than one that decoded the track
//! from its start, and only the latter is exact. The first decoded frame's presentation
//! time places the track on the video's timeline (after the decoder has dropped the
//! encoder's priming samples, which FFmpeg does from the container's edit list or
//! headers), and every later frame's samples follow the previous frame's, as FFmpeg's
//! own tools join them.

use std::ops::Range;

use crate::ffi::{self, AudioDecoder, AudioReceived, Demuxer, Media};
use crate::VideoError;

/// The highest sample rate a track may declare.
const MAX_RATE: u32 = 768_000;

/// The most channels a track may declare.
const MAX_CHANNELS: usize = 64;

/// A span of a video's timeline: presentation times `start..end` in `time_base`
/// (`(numerator, denominator)` of a second), such as a clip's first frame's time to its
/// last frame's end in the video stream's time base ([`FrameIndex::time_base`]).
///
/// [`FrameIndex::time_base`]: crate::FrameIndex::time_base
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first instant in the span.
    pub start: i64,
    /// The first instant after it.
    pub end: i64,
    /// The unit of `start` and `end`.
    pub time_base: (i32, i32),
}

/// Samples of a video's audio track at the track's own rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// The track's sample rate, in Hz.
    pub rate: u32,
    /// The timeline index of the planes' first sample: sample `k` of the timeline is shown
    /// at `k / rate` seconds.
    pub first: i64,
    /// One plane per channel (or a single one, the mean of the channels), of equal length.
    pub planes: Vec<Vec<f32>>,
}

/// The timeline samples of `span` at `rate`: those whose time `k / rate` lies in the span.
pub fn span_samples(span: &Span, rate: u32) -> Range<i64> {
    let (num, den) = (i128::from(span.time_base.0), i128::from(span.time_base.1));
    let at = |ts: i64| -> i64 {
        let n = i128::from(ts) * num * i128::from(rate);
        let q = n.div_euclid(den) + i128::from(n.rem_euclid(den) != 0);
        i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
    };
    let (start, end) = (at(span.start), at(span.end));
    start..end.max(start)
}

/// Decodes the audio track of the video `data`: the samples of `span` (its
/// [`span_samples`], zeros where the track has none), or with `span` `None` the whole
/// track from its first sample. `mono` mixes the channels to their mean (a single
/// plane); otherwise each channel is a plane.
///
/// At most `max_samples` samples (over all planes) are held: a span over it is refused
/// before anything is allocated for it, and so is a whole track once it grows past it.
///
/// # Errors
///
/// [`VideoError::NoAudio`] for a video without an audio stream; [`VideoError::TooLarge`]
/// over `max_samples`; [`VideoError::UnsupportedCodec`] for a codec this FFmpeg does not
/// decode; [`VideoError::Corrupt`] for damaged or truncated audio, a rate or channel
/// count no recording has or that changes within the track, and FFmpeg's failures.
pub fn decode_audio(
    data: &[u8],
    span: Option<&Span>,
    mono: bool,
    max_samples: u64,
) -> Result<Audio, VideoError> {
    let mut demux = Demuxer::open_media(data, Media::Audio)?;
    let info = demux.audio_info();
    if info.time_base.0 <= 0 || info.time_base.1 <= 0 {
        return Err(VideoError::Corrupt(format!(
            "the audio stream's time base is {}/{}",
            info.time_base.0, info.time_base.1
        )));
    }
    let mut decoder = AudioDecoder::new(&demux)?;
    let mut track = Track {
        span: span.copied(),
        mono,
        max_samples,
        shape: None,
        wanted: 0..0,
        next: 0,
        audio: Audio {
            rate: 0,
            first: 0,
            planes: Vec::new(),
        },
        time_base: info.time_base,
    };
    let corrupt = |what: &str, code| {
        VideoError::Corrupt(format!(
            "{what} the audio failed ({})",
            ffi::error_text(code)
        ))
    };
    'packets: loop {
        match demux.read().map_err(|c| corrupt("reading", c))? {
            Some(packet) => {
                if packet.corrupt {
                    return Err(VideoError::Corrupt(
                        "an audio packet is damaged or truncated".into(),
                    ));
                }
                loop {
                    let sent = decoder
                        .send(&mut demux)
                        .map_err(|c| corrupt("decoding", c))?;
                    if track.receive(&mut decoder)? {
                        break 'packets;
                    }
                    if sent {
                        break;
                    }
                }
            }
            None => {
                decoder.send_end().map_err(|c| corrupt("decoding", c))?;
                track.receive(&mut decoder)?;
                break;
            }
        }
    }
    track.finish()
}

/// The decoding of one track: where its samples land.
struct Track {
    span: Option<Span>,
    mono: bool,
    max_samples: u64,
    /// The rate and channel count of the first frame, which every frame must keep.
    shape: Option<(u32, usize)>,
    /// The timeline samples kept (once the rate is known).
    wanted: Range<i64>,
    /// The timeline index of the next decoded sample.
    next: i64,
    audio: Audio,
    time_base: (i32, i32),
}

impl Track {
    /// Takes the frames the decoder holds; `true` once the span is complete.
    fn receive(&mut self, decoder: &mut AudioDecoder) -> Result<bool, VideoError> {
        loop {
            let frame = match decoder.receive() {
                Ok(AudioReceived::Frame(frame)) => frame,
                Ok(AudioReceived::Again | AudioReceived::End) => return Ok(false),
                Err(code) => {
                    return Err(VideoError::Corrupt(format!(
                        "decoding the audio failed ({})",
                        ffi::error_text(code)
                    )))
                }
            };
            if frame.damaged {
                return Err(VideoError::Corrupt(format!(
                    "the audio frame at sample {} is damaged",
                    self.next
                )));
            }
            if frame.samples == 0 {
                continue;
            }
            match self.shape {
                None => self.start(frame.rate, frame.channels, frame.pts)?,
                Some(shape) if shape != (frame.rate, frame.channels) => {
                    return Err(VideoError::Corrupt(format!(
                        "the audio changes from {} Hz, {} channels to {} Hz, {} channels",
                        shape.0, shape.1, frame.rate, frame.channels
                    )));
                }
                Some(_) => {}
            }
            let at = self.next;
            self.next = at.saturating_add(frame.samples as i64);
            let kept = at.max(self.wanted.start)..self.next.min(self.wanted.end);
            if !kept.is_empty() {
                let held = self.audio.first + self.audio.planes[0].len() as i64;
                if self.span.is_none() {
                    let planes = self.audio.planes.len() as u64;
                    let after = kept.end.saturating_sub(self.audio.first) as u64;
                    if after.saturating_mul(planes) > self.max_samples {
                        return Err(too_large(planes, after, self.max_samples));
                    }
                }
                if kept.start > held {
                    // A frame after a gap of the timeline the track leaves silent.
                    let pad = (kept.start - held) as usize;
                    for plane in &mut self.audio.planes {
                        plane.resize(plane.len() + pad, 0.0);
                    }
                }
                let from = kept.start.max(held);
                if from < kept.end {
                    let range = (from - at) as usize..(kept.end - at) as usize;
                    decoder
                        .append(range, &mut self.audio.planes)
                        .map_err(VideoError::Corrupt)?;
                }
            }
            if self.next >= self.wanted.end {
                return Ok(true);
            }
        }
    }

    /// Places the track by its first frame, and sizes what it keeps.
    fn start(&mut self, rate: u32, channels: usize, pts: i64) -> Result<(), VideoError> {
        if rate == 0 || rate > MAX_RATE {
            return Err(VideoError::Corrupt(format!(
                "the audio has a sample rate of {rate} Hz"
            )));
        }
        if channels == 0 || channels > MAX_CHANNELS {
            return Err(VideoError::Corrupt(format!(
                "the audio has {channels} channels"
            )));
        }
        self.shape = Some((rate, channels));
        let pts = if pts == ffi::NO_TS { 0 } else { pts };
        let (num, den) = (i128::from(self.time_base.0), i128::from(self.time_base.1));
        let n = i128::from(pts) * num * i128::from(rate);
        let first = (2 * n + den).div_euclid(2 * den);
        self.next = i64::try_from(first)
            .map_err(|_| VideoError::Corrupt(format!("the audio starts at pts {pts}")))?;
        let planes = if self.mono { 1 } else { channels };
        self.wanted = match &self.span {
            Some(span) => {
                let wanted = span_samples(span, rate);
                let len = wanted.end.saturating_sub(wanted.start) as u64;
                if len.saturating_mul(planes as u64) > self.max_samples {
                    return Err(too_large(planes as u64, len, self.max_samples));
                }
                self.audio.planes = vec![Vec::with_capacity(len as usize); planes];
                wanted
            }
            None => {
                self.audio.planes = vec![Vec::new(); planes];
                self.next..i64::MAX
            }
        };
        self.audio.rate = rate;
        self.audio.first = self.wanted.start;
        Ok(())
    }

    /// The kept samples, padded with zeros to the span's end.
    fn finish(mut self) -> Result<Audio, VideoError> {
        if self.shape.is_none() {
            return Err(VideoError::Corrupt(
                "the audio stream gave no sample".into(),
            ));
        }
        if self.span.is_some() {
            let len = (self.wanted.end - self.wanted.start) as usize;
            for plane in &mut self.audio.planes {
                plane.resize(len, 0.0);
            }
        }
        Ok(self.audio)
    }
}

fn too_large(planes: u64, samples: u64, limit: u64) -> VideoError {
    VideoError::TooLarge(format!(
        "the audio holds {planes} × {samples} samples, over the limit of {limit}"
    ))
}
