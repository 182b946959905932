//! Ogg Opus (RFC 7845): pages read by [`super::ogg`], packets decoded by libopus (the
//! reference decoder, C, built from source by `libopus_sys`), always at 48 kHz as
//! opusfile and torchaudio decode it.
//!
//! **Length.** Every packet's duration follows from its table-of-contents byte, read
//! without decoding; the stream's length is the last page's granule position less the
//! first page's start and the header's pre-skip (the encoder's delay, dropped from the
//! front), as opusfile counts it. A stream whose last page is missing (no end-of-stream
//! flag) was cut, and is refused whatever window is asked.
//!
//! **Windows.** Decoding starts at the packet [`PREROLL`] before the window rather than
//! at the start, as opusfile's seek does (with RFC 7845's minimum of 80 ms): CELT-coded
//! audio then matches a full decode to within float rounding (checked by test), while
//! SILK (low-rate speech), whose state never quite reconverges, stays within about 1% of
//! full scale. A window within the first [`PREROLL`] is decoded from the start, exactly.
//!
//! Channel mapping families 0 (mono, stereo) and 1 (Vorbis order, up to 8) and 255 are
//! decoded with the multistream decoder; the header's output gain is applied.

use std::ffi::c_int;
use std::ptr::NonNull;

use libopus_sys as ffi;

use super::ogg::{self, Packets};
use super::{
    append_interleaved, check_stream, clamp, too_long, DecodeOptions, Part, Plan, Waveform,
};
use crate::error::Cause;

/// Opus decodes at 48 kHz whatever rate the input had.
const RATE: u32 = 48_000;
/// Decoding starts this many samples (500 ms) before a window. RFC 7845 asks for at
/// least 80 ms, after which CELT's state is close to a full decode's but not there (on
/// real music, windows differed by up to 8% of full scale); by 500 ms it is within float
/// rounding (docs/audio.md).
pub(crate) const PREROLL: u64 = 24_000;
/// The longest packet: 120 ms.
const MAX_PACKET_FRAMES: usize = 5_760;

/// Whether `data` is an Ogg stream whose first packet is an Opus header.
pub(super) fn is_opus(data: &[u8]) -> bool {
    if !ogg::is_ogg(data) || data.len() < 28 {
        return false;
    }
    let body = 27 + usize::from(data[26]);
    data.get(body..body + 8) == Some(b"OpusHead")
}

/// The identification header.
#[derive(Debug)]
struct Head {
    channels: usize,
    /// Samples the encoder put before the audio, dropped from the front.
    pre_skip: u64,
    /// The output gain as a factor (the header states dB in Q7.8).
    gain: f32,
    streams: u8,
    coupled: u8,
    mapping: Vec<u8>,
}

fn head(packet: &[u8]) -> Result<Head, Cause> {
    let bad = |what: &str| Cause::Corrupt(format!("its Opus header {what}"));
    if packet.len() < 19 {
        return Err(bad("is cut short"));
    }
    if packet[8] >> 4 != 0 {
        return Err(bad(&format!("has version {} (0.x is read)", packet[8])));
    }
    let channels = usize::from(packet[9]);
    let pre_skip = u64::from(u16::from_le_bytes([packet[10], packet[11]]));
    let gain_db = f32::from(i16::from_le_bytes([packet[16], packet[17]])) / 256.0;
    let (streams, coupled, mapping) = match packet[18] {
        0 if (1..=2).contains(&channels) => {
            (1, channels as u8 - 1, vec![0, 1][..channels].to_vec())
        }
        0 => {
            return Err(bad(&format!(
                "declares {channels} channels in mapping family 0"
            )))
        }
        1 | 255 => {
            let table = packet
                .get(19..21 + channels)
                .ok_or_else(|| bad("is cut short"))?;
            let (streams, coupled) = (table[0], table[1]);
            let coded = usize::from(streams) + usize::from(coupled);
            if streams == 0 || coupled > streams || coded > 255 {
                return Err(bad(&format!(
                    "declares {streams} streams of which {coupled} coupled"
                )));
            }
            let mapping = table[2..].to_vec();
            if let Some(m) = mapping
                .iter()
                .find(|&&m| m != 255 && usize::from(m) >= coded)
            {
                return Err(bad(&format!(
                    "maps a channel to stream channel {m} of {coded}"
                )));
            }
            (streams, coupled, mapping)
        }
        family => return Err(bad(&format!("has channel mapping family {family}"))),
    };
    check_stream(RATE, channels)?;
    Ok(Head {
        channels,
        pre_skip,
        gain: 10f32.powf(gain_db / 20.0),
        streams,
        coupled,
        mapping,
    })
}

/// A libopus multistream decoder, destroyed on drop.
struct Decoder(NonNull<ffi::OpusMSDecoder>);

impl Decoder {
    fn new(head: &Head) -> Result<Self, Cause> {
        let mut error: c_int = 0;
        // SAFETY: `mapping` holds `channels` entries, as the call reads; the other
        // arguments are plain values, checked by libopus (an error comes back in `error`).
        let raw = unsafe {
            ffi::opus_multistream_decoder_create(
                RATE as i32,
                head.channels as c_int,
                c_int::from(head.streams),
                c_int::from(head.coupled),
                head.mapping.as_ptr(),
                &mut error,
            )
        };
        NonNull::new(raw)
            .filter(|_| error == 0)
            .map(Decoder)
            .ok_or_else(|| {
                Cause::Corrupt(format!(
                    "its Opus header is refused by the decoder (libopus error {error})"
                ))
            })
    }

    /// Decodes `packet` into `pcm` (interleaved, room for the longest packet): the
    /// frames decoded.
    fn decode(&mut self, packet: &[u8], pcm: &mut [f32], channels: usize) -> Result<usize, c_int> {
        let frames = (pcm.len() / channels).min(MAX_PACKET_FRAMES);
        // SAFETY: `packet` is readable for its length; `pcm` has room for `frames` frames
        // of `channels` samples, which bounds what libopus writes.
        let n = unsafe {
            ffi::opus_multistream_decode_float(
                self.0.as_ptr(),
                packet.as_ptr(),
                packet.len() as i32,
                pcm.as_mut_ptr(),
                frames as c_int,
                0,
            )
        };
        usize::try_from(n).map_err(|_| n)
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: made by opus_multistream_decoder_create, destroyed once, here.
        unsafe { ffi::opus_multistream_decoder_destroy(self.0.as_ptr()) }
    }
}

/// A packet's duration at 48 kHz from its table of contents, without decoding it.
fn duration(packet: &[u8]) -> Option<u64> {
    let len = i32::try_from(packet.len()).ok()?;
    // SAFETY: `packet` is readable for `len` bytes.
    let n = unsafe { ffi::opus_packet_get_nb_samples(packet.as_ptr(), len, RATE as i32) };
    u64::try_from(n).ok().filter(|&n| n > 0)
}

/// Decodes an Ogg Opus file: the frames `plan` asks for, or all of them. `part` places
/// `data` in its recording: a stretch that begins midway (its headers, then pages from
/// one that begins a packet) starts at frame `part.first`, past the pre-skip, and one
/// that ends midway has no last page.
pub(super) fn decode(
    data: &[u8],
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    part: Part,
    out: &mut Waveform,
) -> Result<(), Cause> {
    // Packets last at least 2.5 ms: a stream within the limit holds at most this many.
    let max_packets = options.max_seconds as usize * 400 + 2;
    let Some(stream) = ogg::packets(data, max_packets)? else {
        return Err(too_long(
            max_packets as u64 * 120,
            RATE,
            options.max_seconds,
        ));
    };
    if part.to_end && !stream.complete {
        return Err(Cause::Corrupt(
            "it is truncated: its stream has no last page".into(),
        ));
    }
    if stream.packets.len() < 2 || !stream.bytes(data, 1).starts_with(b"OpusTags") {
        return Err(Cause::Corrupt("its Opus comment header is missing".into()));
    }
    let head = head(stream.bytes(data, 0))?;
    // Where each audio packet starts, in samples decoded (before the pre-skip).
    let mut starts = Vec::with_capacity(stream.packets.len() - 1);
    let mut decoded = 0u64;
    for i in 2..stream.packets.len() {
        starts.push(decoded);
        decoded += duration(stream.bytes(data, i))
            .ok_or_else(|| Cause::Corrupt(format!("its packet {i} is not an Opus packet")))?;
    }
    // The samples dropped from the front: the pre-skip, unless the stretch begins past it.
    let skip = if part.first == 0 { head.pre_skip } else { 0 };
    let length = if part.to_end {
        length(&stream, &starts, decoded)
    } else {
        decoded
    };
    let total = length.saturating_sub(skip);
    if total == 0 {
        return Err(Cause::Corrupt("it holds no audio".into()));
    }
    let limit = u64::from(options.max_seconds) * u64::from(RATE);
    if total > limit {
        return Err(too_long(total, RATE, options.max_seconds));
    }
    let window = match plan {
        Some(plan) => clamp(plan(RATE, total), total),
        None => 0..total,
    };
    out.rate = RATE;
    out.planes
        .resize_with(if options.mono { 1 } else { head.channels }, Vec::new);
    out.clear();
    (out.start, out.total) = (window.start, total);
    // The window in samples decoded, and the packet decoding starts from.
    let (from, to) = (window.start + skip, window.end + skip);
    let first = starts
        .partition_point(|&s| s + PREROLL <= from)
        .saturating_sub(1);
    let mut decoder = Decoder::new(&head)?;
    let mut pcm = std::mem::take(&mut out.scratch);
    pcm.resize(MAX_PACKET_FRAMES * head.channels, 0.0);
    let result = (|| {
        for (i, &start) in starts.iter().enumerate().skip(first) {
            if start >= to {
                break;
            }
            let packet = stream.bytes(data, i + 2);
            let n = decoder
                .decode(packet, &mut pcm, head.channels)
                .map_err(|code| {
                    Cause::Corrupt(format!(
                        "its packet {} cannot be decoded (libopus error {code})",
                        i + 2
                    ))
                })?;
            let counted = starts.get(i + 1).copied().unwrap_or(decoded) - start;
            if n as u64 != counted {
                return Err(Cause::Corrupt(format!(
                    "its packet {} decodes to {n} samples where its table of contents \
                     counts {counted}",
                    i + 2
                )));
            }
            let (keep_from, keep_to) = (from.max(start), to.min(start + n as u64));
            if keep_from < keep_to {
                let samples = &mut pcm[(keep_from - start) as usize * head.channels
                    ..(keep_to - start) as usize * head.channels];
                if head.gain != 1.0 {
                    samples.iter_mut().for_each(|s| *s *= head.gain);
                }
                append_interleaved(&mut out.planes, head.channels, samples);
            }
        }
        Ok(())
    })();
    out.scratch = pcm;
    result
}

/// The samples the stream holds before the pre-skip is dropped: the granule span from
/// the first audio page's start to the last page, when the granules agree with the
/// packets (within the end's trim, at most a packet); otherwise the packets' sum.
fn length(stream: &Packets, starts: &[u64], decoded: u64) -> u64 {
    // The first audio packet that ends a page, and the samples up to its end.
    let first_granule = stream.packets[2..].iter().enumerate().find_map(|(i, p)| {
        p.granule
            .map(|g| (g, starts.get(i + 1).copied().unwrap_or(decoded)))
    });
    let last_granule = stream.packets.last().and_then(|p| p.granule);
    match (first_granule, last_granule) {
        (Some((first, through)), Some(last)) if first >= through && last >= first - through => {
            let span = last - (first - through);
            if span <= decoded && decoded - span <= MAX_PACKET_FRAMES as u64 {
                span
            } else {
                decoded
            }
        }
        _ => decoded,
    }
}
