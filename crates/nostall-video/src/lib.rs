//! Exact frames of video clips, decoding only what a clip needs.
//!
//! A training loader samples clips (say 16 frames at a stride) from videos it holds in
//! memory. Decoding a clip from the start of its video wastes most of the work, and the
//! usual shortcut (seek to a time, decode until the timestamp looks right) hands out the
//! wrong frames on streams with B-frames, open GOPs, variable frame rates or timestamps
//! that do not start at zero. This crate does it in two steps:
//!
//! 1. [`FrameIndex::scan`] demuxes the video once, reading packets only (nothing is
//!    decoded), and records each packet in decode order: its presentation time, its byte
//!    position and whether it is a key frame. Frame `k` is the `k`-th frame in
//!    presentation order (the packets sorted by presentation time). The index is small,
//!    serialisable ([`FrameIndex::to_bytes`]) and meant to be kept in the loader's
//!    dataset index, so that sampling a clip (by frame number or by time, see
//!    [`FrameIndex::frame_at`]) never touches the video.
//! 2. [`ClipDecoder::decode`] decodes a set of frames. For each wanted frame it finds the
//!    key frame to start from: the last key frame before it in decode order that it does
//!    not precede in presentation order (a frame shown before its key frame is a leading
//!    picture of an open GOP, which may reference the previous GOP, so decoding starts
//!    one key frame earlier). It seeks once per run of frames, checks that the demuxer
//!    landed on the packet the index expects (falling back to earlier key frames, then
//!    to the start), and decodes forward. Packets whose frames nobody wants are decoded
//!    with `skip_frame = AVDISCARD_NONREF`, so frames that no other frame references are
//!    not decoded at all; the decision is made per packet from the index, before the
//!    packet is sent, since a frame leaves the decoder only after its reordering delay.
//!    Frames are recognised on the way out by the presentation time the index gave their
//!    packet, and only wanted ones are converted to RGB.
//!
//! Where the plan meets a decoder's own caution, exactness wins over speed: a wanted
//! frame the decoder does not produce from the planned key frame (FFmpeg's H.264 decoder
//! drops the frames it decodes after a seek to a non-IDR key frame until it has output
//! that key frame) is decoded again from the key frame before, then from the start; if
//! the demuxer lands elsewhere than the index expects, or packets or frame times differ
//! from it, decoding restarts from the first packet. Packets an MP4 edit list cuts are
//! decoded but have no frame number, and H.264 streams that do not declare their
//! reordering depth are decoded with the largest the standard allows (FFmpeg's guess
//! drops frames while it grows).
//!
//! [`decode_all`] decodes every frame from the start with the same conversion: the
//! frames [`ClipDecoder::decode`] hands out are byte-equal to its frames at the same
//! index, which the tests check on real footage of every supported codec (H.264, HEVC,
//! VP9, AV1, MPEG-4 Part 2) and container (MP4/MOV, Matroska/WebM, AVI).
//!
//! Inputs are untrusted. Sizes and frame counts are checked against [`Limits`] before
//! anything sized by them is allocated (the index counts the packets it reads and never
//! trusts a header's frame count), a decoded frame whose size differs from the header's
//! is refused, and every FFmpeg failure, damaged frame or frame the decoder never
//! produced is a [`VideoError`] naming the frame. FFmpeg is called with one thread per
//! decoder (the loader runs many decoders in parallel) and its logging is turned off.
//! All FFmpeg calls live in one private module, behind owners that free on every path.
//!
//! [`decode_audio`] decodes a video's audio track over a span of its timeline (a clip's
//! first frame's time to its last frame's end), with the same bounds and errors.

mod audio;
mod decode;
mod ffi;
mod index;

pub use audio::{decode_audio, span_samples, Audio, Span};
pub use decode::{decode_all, ClipDecoder, DecodeStats, Frame};
pub use index::FrameIndex;

use std::fmt;

/// Bounds on what a video may make this crate allocate, checked before anything sized by
/// the file is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest frame width, in pixels.
    pub max_width: u32,
    /// Largest frame height, in pixels.
    pub max_height: u32,
    /// Largest width * height of a frame.
    pub max_pixels: u64,
    /// Most frames (packets of the video stream) a [`FrameIndex`] may hold.
    pub max_frames: u32,
}

impl Default for Limits {
    /// 8192 x 8192, 36 megapixels (8K UHD is 33), 2^20 frames (about 9.7 hours at 30 fps).
    fn default() -> Limits {
        Limits {
            max_width: 8192,
            max_height: 8192,
            max_pixels: 36_000_000,
            max_frames: 1 << 20,
        }
    }
}

impl Limits {
    /// Limits of at most `max_width` x `max_height` pixels a frame and `max_frames`
    /// frames a video.
    pub fn new(max_width: u32, max_height: u32, max_frames: u32) -> Limits {
        Limits {
            max_width,
            max_height,
            max_pixels: u64::from(max_width) * u64::from(max_height),
            max_frames,
        }
    }

    /// Refuses a frame size over the limits (or an empty one).
    fn check_size(&self, width: u32, height: u32) -> Result<(), VideoError> {
        if width == 0 || height == 0 {
            return Err(VideoError::Corrupt(format!(
                "the header declares no frame size ({width}x{height})"
            )));
        }
        if width > self.max_width || height > self.max_height {
            return Err(VideoError::TooLarge(format!(
                "frames are {width}x{height}, over the limit of {}x{}",
                self.max_width, self.max_height
            )));
        }
        let pixels = u64::from(width) * u64::from(height);
        if pixels > self.max_pixels {
            return Err(VideoError::TooLarge(format!(
                "frames have {pixels} pixels, over the limit of {}",
                self.max_pixels
            )));
        }
        Ok(())
    }
}

/// Why a video could not be indexed or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VideoError {
    /// Not a container FFmpeg demuxes, or one without a video stream.
    UnknownFormat(String),
    /// A video stream whose codec this FFmpeg cannot decode (named).
    UnsupportedCodec(String),
    /// Frame size or frame count over the [`Limits`] (which, and the limit).
    TooLarge(String),
    /// Demuxing or decoding failed, the data is damaged or truncated, or an index does
    /// not fit the video; names the frame (presentation index) when known.
    Corrupt(String),
    /// The container has no audio stream ([`decode_audio`]).
    NoAudio,
}

impl fmt::Display for VideoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VideoError::UnknownFormat(m) => write!(f, "unknown video format: {m}"),
            VideoError::UnsupportedCodec(m) => write!(f, "unsupported video codec: {m}"),
            VideoError::TooLarge(m) => write!(f, "video too large: {m}"),
            VideoError::Corrupt(m) => write!(f, "corrupt video: {m}"),
            VideoError::NoAudio => write!(f, "the video has no audio track"),
        }
    }
}

impl std::error::Error for VideoError {}
