//! Ogg Vorbis through symphonia: its Ogg demuxer hands over packets, a decoder turns each
//! into planes. (FLAC is read by nostall's own reader, `flac.rs`; symphonia's FLAC
//! demuxer is not used, nor FLAC in Ogg: see [`probe`].)
//!
//! A window is reached by reading every packet without decoding it, counting each one's
//! frames (a Vorbis packet's frame count follows from its mode and the previous one's):
//! the exact length, and each packet's place, from which the window is decoded from the
//! packet before it on. Ogg granule positions are not used
//! to place frames: encoders write some that disagree with the frames their pages hold
//! (448 too many over a few pages of a benchmark clip), while a full decode,
//! torchaudio's included, places frames by count. When the packets do not cover a
//! window where their counts said, the file is decoded whole. Damage after the window
//! of a Vorbis stream goes unnoticed that epoch.

use std::io::Cursor;
use std::ops::Range;
use std::sync::OnceLock;

use symphonia::core::audio::{AudioBufferRef, SampleBuffer, Signal};
use symphonia::core::codecs::{Decoder, DecoderOptions, CODEC_TYPE_NULL, CODEC_TYPE_VORBIS};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::{FormatOptions, FormatReader, Packet};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::{Hint, Probe};
use symphonia::default::formats::OggReader;

use super::{check_stream, clamp, too_long, DecodeOptions, Plan, Waveform};
use crate::error::Cause;
use crate::prep::Modality;

/// An opened stream: its reader and decoder, and what its header declares.
struct Stream {
    format: Box<dyn FormatReader>,
    decoder: Box<dyn Decoder>,
    track_id: u32,
    rate: u32,
    channels: usize,
    /// The timestamp of the first frame: packets and seeks count from it, and it is not
    /// 0 in an Ogg stream cut from a longer one (its granule positions continue).
    start_ts: u64,
    /// Reused across packets.
    buffer: Option<SampleBuffer<f32>>,
}

/// The one container symphonia reads here: Ogg. WAV, FLAC, Opus and MP3 are read by
/// nostall's own readers; symphonia's FLAC reader (which its default probe runs on a
/// `fLaC` found anywhere in bytes no other reader took) sizes buffers from metadata
/// lengths it has not checked: a picture or comment block declaring a gigabyte is
/// allocated before it is read.
fn probe() -> &'static Probe {
    static PROBE: OnceLock<Probe> = OnceLock::new();
    PROBE.get_or_init(|| {
        let mut probe = Probe::default();
        probe.register_all::<OggReader>();
        probe
    })
}

/// Whether `data` is an Ogg stream whose first packet is FLAC's: symphonia's Ogg reader
/// reads its metadata blocks as its FLAC reader does (see [`probe`]).
fn is_ogg_flac(data: &[u8]) -> bool {
    let segments = data.get(26).map_or(0, |&n| usize::from(n));
    data.starts_with(b"OggS")
        && data
            .get(27 + segments..)
            .is_some_and(|packet| packet.starts_with(b"\x7fFLAC"))
}

/// Checks the lengths a Vorbis comment header (the stream's second packet) declares
/// against the bytes it holds: symphonia's reader allocates each declared length before
/// reading it, so a 60-byte header could ask for gigabytes.
fn check_vorbis_comments(data: &[u8]) -> Result<(), Cause> {
    if !super::ogg::is_ogg(data) {
        return Ok(());
    }
    let headers = super::ogg::first_packets(data, 2)?;
    if headers.packets.len() < 2 {
        return Ok(());
    }
    let comments = headers.bytes(data, 1);
    let Some(mut rest) = comments.strip_prefix(b"\x03vorbis") else {
        return Ok(());
    };
    let size = comments.len();
    let past = |what: &str| {
        Cause::Corrupt(format!(
            "its Vorbis comment header declares a {what} past the header's {size} bytes"
        ))
    };
    // A 32-bit little-endian number, then (for a string) that many bytes.
    let number = |rest: &mut &[u8], what: &str| -> Result<usize, Cause> {
        let (head, tail) = rest.split_at_checked(4).ok_or_else(|| past(what))?;
        *rest = tail;
        Ok(u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize)
    };
    let string = |rest: &mut &[u8], what: &str| -> Result<(), Cause> {
        let len = number(rest, what)?;
        *rest = rest.get(len..).ok_or_else(|| past(what))?;
        Ok(())
    };
    string(&mut rest, "vendor string")?;
    let count = number(&mut rest, "comment count")?;
    // Each comment takes at least its 4-byte length.
    if count > rest.len() / 4 {
        return Err(Cause::Corrupt(format!(
            "its Vorbis comment header declares {count} comments in {size} bytes"
        )));
    }
    for _ in 0..count {
        string(&mut rest, "comment")?;
    }
    Ok(())
}

fn open(data: &[u8], options: DecodeOptions) -> Result<Stream, Cause> {
    check_vorbis_comments(data)?;
    if is_ogg_flac(data) {
        return Err(Cause::Corrupt(
            "it is FLAC in an Ogg stream, which nostall does not read (store FLAC as .flac \
             files)"
                .into(),
        ));
    }
    // symphonia reads from an owned source; a copy costs far less than decoding.
    let stream = MediaSourceStream::new(Box::new(Cursor::new(data.to_vec())), Default::default());
    let probed = probe()
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
    let format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| Cause::Corrupt("it holds no audio track".into()))?;
    let params = track.codec_params.clone();
    let track_id = track.id;
    let rate = params.sample_rate.unwrap_or(0);
    let channels = params.channels.map_or(0, |c| c.count());
    check_stream(rate, channels)?;
    let limit = u64::from(options.max_seconds) * u64::from(rate);
    if let Some(declared) = params.n_frames.filter(|&n| n > limit) {
        return Err(too_long(declared, rate, options.max_seconds));
    }
    // Vorbis is the one codec nostall leaves to symphonia (Opus and FLAC have readers
    // of their own; FLAC in Ogg is refused above).
    if params.codec != CODEC_TYPE_VORBIS {
        return Err(Cause::UnknownFormat(Modality::Audio));
    }
    let decoder = symphonia::default::get_codecs()
        .make(&params, &DecoderOptions::default())
        .map_err(|e| match e {
            SymphoniaError::Unsupported(_) => Cause::UnknownFormat(Modality::Audio),
            other => corrupt("its codec parameters", &other),
        })?;
    Ok(Stream {
        format,
        decoder,
        track_id,
        rate,
        channels,
        start_ts: params.start_ts,
        buffer: None,
    })
}

impl Stream {
    /// Decodes the next packet of the track that holds frames: its first frame (counted
    /// from the stream's first, by its timestamp) and its frames (`None` at the end of the
    /// stream); [`Stream::append_to`] then takes them.
    fn next(&mut self) -> Result<Option<(u64, u64)>, Cause> {
        loop {
            let Some(packet) = self.read()? else {
                return Ok(None);
            };
            let frames = self.decode(&packet)?;
            if frames > 0 {
                return Ok(Some((packet.ts().saturating_sub(self.start_ts), frames)));
            }
        }
    }

    /// Reads the track's next packet without decoding it (`None` at the end).
    fn read(&mut self) -> Result<Option<Packet>, Cause> {
        loop {
            let packet = match self.format.next_packet() {
                Ok(packet) => packet,
                Err(SymphoniaError::IoError(e))
                    if e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    return Ok(None)
                }
                Err(SymphoniaError::ResetRequired) => {
                    return Err(Cause::Corrupt(
                        "its stream changes format midway (chained streams are not supported)"
                            .into(),
                    ))
                }
                Err(e) => return Err(corrupt("its container", &e)),
            };
            if packet.track_id() == self.track_id {
                return Ok(Some(packet));
            }
        }
    }

    /// Decodes a packet; returns its frames, which [`Stream::append_to`] then takes.
    fn decode(&mut self, packet: &Packet) -> Result<u64, Cause> {
        let decoded = self
            .decoder
            .decode(packet)
            .map_err(|e| corrupt("its audio data", &e))?;
        let spec = *decoded.spec();
        if spec.rate != self.rate || spec.channels.count() != self.channels {
            return Err(Cause::Corrupt(format!(
                "its stream changes from {} Hz × {} channels to {} Hz × {} channels \
                 midway",
                self.rate,
                self.channels,
                spec.rate,
                spec.channels.count()
            )));
        }
        let frames = decoded.frames() as u64;
        if frames == 0 || matches!(decoded, AudioBufferRef::F32(_) | AudioBufferRef::S32(_)) {
            // f32 and i32 planes (Vorbis's, FLAC's) are read where the decoder left them.
            return Ok(frames);
        }
        // Capacity counts samples of all channels.
        let samples = frames as usize * self.channels;
        if self.buffer.as_ref().is_none_or(|b| b.capacity() < samples) {
            self.buffer = Some(SampleBuffer::new(decoded.capacity() as u64, spec));
        }
        let buffer = self.buffer.as_mut().expect("made above");
        buffer.copy_planar_ref(decoded);
        Ok(frames)
    }

    /// Appends frames `keep` of the packet last decoded (which held frames) to `out`'s
    /// planes, mixed to mono or not.
    fn append_to(&self, out: &mut [Vec<f32>], keep: Range<usize>) {
        let channels = self.channels;
        match self.decoder.last_decoded() {
            AudioBufferRef::F32(decoded) => {
                append(out, channels, |c| decoded.chan(c), keep, |s| s);
            }
            AudioBufferRef::S32(decoded) => {
                append(out, channels, |c| decoded.chan(c), keep, i32_to_f32);
            }
            _ => {
                let planar = self.buffer.as_ref().map_or(&[][..], SampleBuffer::samples);
                let frames = planar.len() / channels;
                append(
                    out,
                    channels,
                    |c| &planar[c * frames..][..frames],
                    keep,
                    |s| s,
                );
            }
        }
    }
}

/// Appends frames `keep` of a packet's `channels` planes (`plane(c)`, whose samples
/// `to_f32` converts) to `out`'s planes, mixed to mono or not: the channels summed in
/// order, then scaled, as every decoder's path mixes them.
pub(super) fn append<'a, T: Copy + 'a>(
    out: &mut [Vec<f32>],
    channels: usize,
    plane: impl Fn(usize) -> &'a [T],
    keep: Range<usize>,
    to_f32: impl Fn(T) -> f32,
) {
    let converted = |c: usize| plane(c)[keep.clone()].iter().map(|&s| to_f32(s));
    if out.len() == 1 && channels > 1 {
        let mono = &mut out[0];
        let start = mono.len();
        mono.extend(converted(0));
        let mixed = &mut mono[start..];
        for c in 1..channels {
            for (m, s) in mixed.iter_mut().zip(converted(c)) {
                *m += s;
            }
        }
        let scale = 1.0 / channels as f32;
        for m in mixed {
            *m *= scale;
        }
    } else {
        for (c, out) in out.iter_mut().enumerate() {
            out.extend(converted(c));
        }
    }
}

/// FLAC's i32 samples (left-aligned to the full 32 bits) to f32, as symphonia converts
/// them (to within its f64 rounding, which for samples of up to 24 bits is exact either
/// way).
pub(super) fn i32_to_f32(sample: i32) -> f32 {
    sample as f32 * (1.0 / 2_147_483_648.0)
}

/// Decodes a FLAC or Ogg Vorbis file: the frames `plan` asks for, or all of them.
pub(super) fn decode(
    data: &[u8],
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    out: &mut Waveform,
) -> Result<(), Cause> {
    let mut stream = open(data, options)?;
    let planes = if options.mono { 1 } else { stream.channels };
    out.rate = stream.rate;
    out.planes.resize_with(planes, Vec::new);
    out.clear();
    let windowed = match plan {
        Some(plan) => {
            let (packets, total) = read_counted(&mut stream, options)?;
            let window = clamp(plan(stream.rate, total), total);
            (out.start, out.total) = (window.start, total);
            decode_counted(&mut stream, &packets, window, out)?
        }
        None => {
            decode_all(&mut stream, options, out)?;
            true
        }
    };
    if !windowed {
        // The packets did not hold the window where their timestamps or counts said:
        // decode it all. The plan is not asked again (its choice may draw random numbers).
        out.clear();
        decode_all(&mut open(data, options)?, options, out)?;
    }
    Ok(())
}

/// Reads every packet of the track without decoding it, and their frames: the exact
/// length, as a full decode counts it.
fn read_counted(stream: &mut Stream, options: DecodeOptions) -> Result<(Vec<Packet>, u64), Cause> {
    let limit = u64::from(options.max_seconds) * u64::from(stream.rate);
    let mut packets = Vec::new();
    let mut total = 0u64;
    while let Some(packet) = stream.read()? {
        total += packet.dur;
        if total > limit {
            return Err(too_long(total, stream.rate, options.max_seconds));
        }
        packets.push(packet);
    }
    if total == 0 {
        return Err(Cause::Corrupt("it holds no audio".into()));
    }
    Ok((packets, total))
}

/// Decodes frames `window` of `packets` (all of a stream, [`read_counted`]) from the
/// packet before the window (whose output overlaps the window's first) on; `Ok(false)` if
/// a packet decodes to other than the frames it was counted for.
fn decode_counted(
    stream: &mut Stream,
    packets: &[Packet],
    window: Range<u64>,
    out: &mut Waveform,
) -> Result<bool, Cause> {
    // The packet holding the window's first frame, and that packet's first frame.
    let mut at = 0u64;
    let mut first = 0;
    while first + 1 < packets.len() && at + packets[first].dur <= window.start {
        at += packets[first].dur;
        first += 1;
    }
    // A decoder without the previous packet outputs nothing for its first one.
    if first > 0 && stream.decode(&packets[first - 1])? > 0 {
        return Ok(false);
    }
    for packet in &packets[first..] {
        if at >= window.end {
            break;
        }
        if stream.decode(packet)? != packet.dur {
            return Ok(false);
        }
        let (from, to) = (at.max(window.start), (at + packet.dur).min(window.end));
        if from < to {
            let keep = (from - at) as usize..(to - at) as usize;
            stream.append_to(&mut out.planes, keep);
        }
        at += packet.dur;
    }
    Ok(true)
}

fn decode_all(
    stream: &mut Stream,
    options: DecodeOptions,
    out: &mut Waveform,
) -> Result<(), Cause> {
    let limit = u64::from(options.max_seconds) * u64::from(stream.rate);
    while let Some((_, frames)) = stream.next()? {
        stream.append_to(&mut out.planes, 0..frames as usize);
        if out.frames() as u64 > limit {
            return Err(too_long(
                out.frames() as u64,
                stream.rate,
                options.max_seconds,
            ));
        }
    }
    let frames = out.frames() as u64;
    if frames == 0 {
        return Err(Cause::Corrupt("it holds no audio".into()));
    }
    out.start = 0;
    out.total = frames;
    Ok(())
}

fn corrupt(part: &str, error: &SymphoniaError) -> Cause {
    Cause::Corrupt(format!("{part} cannot be decoded: {error}"))
}
