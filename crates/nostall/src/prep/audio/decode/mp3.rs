//! MP3 (and MPEG layers 1 and 2) through minimp3, the vendored C decoder of `csrc/`.
//!
//! minimp3 was chosen by measurement: it decodes these files at nearly the rate of
//! libmpg123, the decoder soundfile and torchaudio call, where symphonia's was markedly
//! slower (docs/benchmarks.md). Its extension does what a window needs: the exact
//! length (from the Xing/LAME tag, or by scanning every frame's header), the encoder's
//! delay and padding trimmed as the tag states (so lengths and sample positions match
//! libmpg123's), and a seek to any frame that first decodes enough earlier frames to
//! fill the bit reservoir, so a window holds the samples a full decode gives.
//!
//! A file whose tag declares more frames than it holds was cut, and is refused whatever
//! window is asked, as WAV and FLAC files are. Without a tag there is no stated length
//! to check; bytes that are not frames are skipped by the decoder, as every MP3 decoder
//! does (symphonia's included).

use std::ffi::c_int;
use std::ptr::NonNull;

use super::{
    append_interleaved, check_stream, clamp, too_long, truncated, DecodeOptions, Plan, Waveform,
};
use crate::error::Cause;

/// The C side's state (`csrc/mp3.c`): opaque here.
#[repr(C)]
struct RawMp3 {
    _private: [u8; 0],
}

extern "C" {
    fn nostall_mp3_open(buf: *const u8, len: usize, error: *mut c_int) -> *mut RawMp3;
    fn nostall_mp3_info(
        h: *const RawMp3,
        rate: *mut u32,
        channels: *mut u32,
        frames: *mut u64,
        present: *mut u64,
        declared: *mut u64,
    );
    fn nostall_mp3_seek(h: *mut RawMp3, frame: u64) -> c_int;
    fn nostall_mp3_read_frame(
        h: *mut RawMp3,
        out: *mut *const f32,
        max: usize,
        error: *mut c_int,
    ) -> usize;
    fn nostall_mp3_close(h: *mut RawMp3);
}

/// An open MP3 stream over borrowed bytes.
pub(super) struct Mp3<'a> {
    raw: NonNull<RawMp3>,
    rate: u32,
    channels: usize,
    /// Frames (samples per channel), after the encoder's delay and padding.
    frames: u64,
    /// Audio frames (MPEG frames of 1 152 or 576 samples) present (counted only when a
    /// tag declares some), and those a tag declares (0 without one).
    present: u64,
    declared: u64,
    _data: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Mp3<'a> {
    /// Opens `data`; `None` when it holds no MP3 frames.
    pub(super) fn open(data: &'a [u8]) -> Result<Option<Self>, Cause> {
        let mut error = 0;
        // SAFETY: `data` outlives the handle (the lifetime `'a`), which only reads it.
        let raw = unsafe { nostall_mp3_open(data.as_ptr(), data.len(), &mut error) };
        let Some(raw) = NonNull::new(raw) else {
            return if error == 2 {
                Err(Cause::Corrupt("decoding it ran out of memory".into()))
            } else {
                Ok(None)
            };
        };
        let (mut rate, mut channels, mut frames, mut present, mut declared) = (0, 0, 0, 0, 0);
        // SAFETY: `raw` is a live handle; the pointers are to locals.
        unsafe {
            nostall_mp3_info(
                raw.as_ptr(),
                &mut rate,
                &mut channels,
                &mut frames,
                &mut present,
                &mut declared,
            );
        }
        Ok(Some(Mp3 {
            raw,
            rate,
            channels: channels as usize,
            frames,
            present,
            declared,
            _data: std::marker::PhantomData,
        }))
    }

    fn seek(&mut self, frame: u64) -> Result<(), Cause> {
        // SAFETY: `self.raw` is a live handle.
        match unsafe { nostall_mp3_seek(self.raw.as_ptr(), frame) } {
            0 => Ok(()),
            code => Err(Cause::Corrupt(format!(
                "seeking in it failed (minimp3 error {code})"
            ))),
        }
    }

    /// The next frame's interleaved samples (at most `max`; none at the end), where the
    /// decoder holds them until the next call.
    fn read_frame(&mut self, max: usize) -> Result<&[f32], Cause> {
        let mut error = 0;
        let mut samples: *const f32 = std::ptr::null();
        // SAFETY: `self.raw` is a live handle; it sets `samples` to its own buffer of
        // `n` samples (or leaves it null with `n` 0).
        let n = unsafe { nostall_mp3_read_frame(self.raw.as_ptr(), &mut samples, max, &mut error) };
        if error != 0 {
            return Err(Cause::Corrupt(
                "its stream changes rate, layer or channels midway".into(),
            ));
        }
        if samples.is_null() || n == 0 {
            return Ok(&[]);
        }
        // SAFETY: the decoder's buffer holds `n` samples and is not touched until the next
        // call, which needs `&mut self` and so ends this borrow first.
        Ok(unsafe { std::slice::from_raw_parts(samples, n) })
    }
}

impl Drop for Mp3<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle is live and closed once, here.
        unsafe { nostall_mp3_close(self.raw.as_ptr()) }
    }
}

/// Decodes an opened MP3 stream: the frames `plan` asks for, or all of them.
pub(super) fn decode(
    mut stream: Mp3<'_>,
    options: DecodeOptions,
    plan: Option<Plan<'_>>,
    out: &mut Waveform,
) -> Result<(), Cause> {
    check_stream(stream.rate, stream.channels)?;
    let limit = u64::from(options.max_seconds) * u64::from(stream.rate);
    if stream.frames > limit {
        return Err(too_long(stream.frames, stream.rate, options.max_seconds));
    }
    if stream.declared > stream.present {
        // Frames, not samples: what the tag counts.
        return Err(truncated(stream.declared, stream.present));
    }
    let total = stream.frames;
    let window = match plan {
        Some(plan) => clamp(plan(stream.rate, total), total),
        None => 0..total,
    };
    out.rate = stream.rate;
    out.planes
        .resize_with(if options.mono { 1 } else { stream.channels }, Vec::new);
    out.clear();
    (out.start, out.total) = (window.start, total);
    if window.start > 0 {
        stream.seek(window.start)?;
    }
    let channels = stream.channels;
    let mut left = (window.end - window.start) as usize * channels;
    while left > 0 {
        let samples = stream.read_frame(left)?;
        if samples.is_empty() {
            break;
        }
        append_interleaved(
            &mut out.planes,
            channels,
            &samples[..samples.len() - samples.len() % channels],
        );
        left -= samples.len();
    }
    if left > 0 {
        // The frames did not decode to what their headers count (the first ones could
        // not be decoded, or a tag understated the padding).
        return Err(Cause::Corrupt(format!(
            "it decodes to {} frames where its frames' headers state {total}",
            total - (left / channels) as u64
        )));
    }
    Ok(())
}
