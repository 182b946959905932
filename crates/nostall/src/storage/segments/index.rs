//! Where a segment's bytes lie in its recording, found once when the dataset is opened.
//!
//! - **WAV**: by arithmetic from the header (the data chunk's start and the frame's
//!   size); the carried header is rewritten to declare the stretch's size, so the stretch
//!   reads as a WAV file of its own.
//! - **FLAC**: the frame headers are walked (each found by its sync code, its CRC-8 and
//!   its place in the sequence of sample numbers), once per recording; a segment's
//!   stretch runs from the frame holding its first sample to the frame after its last,
//!   behind the stream's `STREAMINFO` rewritten to declare where the stretch ends.
//! - **Ogg Opus**: the page headers are walked; a stretch runs from a page that begins a
//!   packet at least the decoder's pre-roll (500 ms) before the segment, to the page on
//!   which its last sample's packet ends, behind the stream's header pages.
//! - **Anything else** (MP3, Ogg Vorbis, a file that cannot be walked): the whole file
//!   is carried, and the decoder seeks in it as in a clip.
//!
//! A walk reads the recording once, in large sequential reads; only the stretches are
//! kept, not a table of every frame.

use std::ops::Range;
use std::sync::Arc;

use crate::error::Cause;
use crate::prep::audio::{
    flac_find_sync, flac_frame_header, frame_at, wav_data_layout, FlacStreamInfo, Part, ENVELOPE,
    OPUS_PREROLL,
};
use crate::storage::BlobStore;

/// Bytes read at once by a walk.
const CHUNK: u64 = 4 << 20;
/// The bytes a WAV header may take before its data (a header with larger chunks in front
/// of the data is carried whole).
const WAV_HEAD: u64 = 1 << 20;
/// The longest FLAC frame header: sync and fields (4), a 7-byte coded number, a 2-byte
/// block size, a 2-byte rate, the CRC-8.
const FLAC_FRAME_HEADER: usize = 16;

/// The bytes of a recording that one segment needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stretch {
    /// Carried first: the recording's header, as the stretch needs it.
    pub(crate) header: Arc<[u8]>,
    /// The recording's bytes carried after the header.
    pub(crate) body: Range<u64>,
    /// Where they lie in the recording.
    pub(crate) part: Part,
    /// Why the segment cannot be read, when the walk found it already (a segment after
    /// the recording's end, or past the point where a recording cut short stops).
    pub(crate) problem: Option<Cause>,
}

impl Stretch {
    /// The stretch of a recording that cannot be read: nothing.
    pub(crate) fn unreadable() -> Stretch {
        Stretch {
            header: Arc::from(&[][..]),
            body: 0..0,
            part: Part::WHOLE,
            problem: None,
        }
    }

    /// The bytes of a sample carrying it: the envelope, the header, the body.
    pub(crate) fn size(&self) -> u64 {
        (ENVELOPE + self.header.len()) as u64 + (self.body.end - self.body.start)
    }
}

/// A segment as the index takes it: start and duration in seconds (`None`: to the end).
pub(crate) type Span = (f64, Option<f64>);

/// The stretch of each of `spans` in recording `key` (of `size` bytes, at `version`).
///
/// # Errors
///
/// A read of the recording that fails; a recording its format's walk cannot follow is
/// carried whole instead.
pub(crate) fn stretches(
    store: &dyn BlobStore,
    (key, version, size): (&str, Option<&str>, u64),
    spans: &[Span],
) -> Result<Vec<Stretch>, Cause> {
    let mut walk = Walk {
        store,
        key,
        version,
        size,
        buffer: Vec::new(),
        at: 0,
    };
    let head = walk.get(0, 64)?.to_vec();
    let opus_head = head.get(26).map(|&n| 27 + usize::from(n));
    let found = if head.starts_with(b"RIFF") {
        wav(&mut walk, spans)?
    } else if head.starts_with(b"fLaC") {
        flac(&mut walk, spans)?
    } else if head.starts_with(b"OggS")
        && opus_head.and_then(|at| head.get(at..at + 8)) == Some(&b"OpusHead"[..])
    {
        opus(&mut walk, spans)?
    } else {
        None
    };
    Ok(found.unwrap_or_else(|| {
        let whole = Stretch {
            body: 0..size,
            ..Stretch::unreadable()
        };
        vec![whole; spans.len()]
    }))
}

/// A recording read forward in large pieces.
struct Walk<'a> {
    store: &'a dyn BlobStore,
    key: &'a str,
    version: Option<&'a str>,
    size: u64,
    /// Bytes from `at` on.
    buffer: Vec<u8>,
    at: u64,
}

impl Walk<'_> {
    /// Bytes `offset..offset + len`, or fewer where the recording ends first.
    fn get(&mut self, offset: u64, len: usize) -> Result<&[u8], Cause> {
        let end = (offset + len as u64).min(self.size);
        self.hold(offset, end)?;
        let from = (offset - self.at) as usize;
        Ok(&self.buffer[from..from + (end - offset) as usize])
    }

    /// The bytes from `offset` to the end of those held (at least two, unless the
    /// recording ends first).
    fn rest(&mut self, offset: u64) -> Result<&[u8], Cause> {
        self.hold(offset, (offset + 2).min(self.size))?;
        Ok(&self.buffer[(offset - self.at) as usize..])
    }

    /// Reads from `offset` on unless `offset..end` is held.
    fn hold(&mut self, offset: u64, end: u64) -> Result<(), Cause> {
        let held = self.at..self.at + self.buffer.len() as u64;
        if offset < held.start || end > held.end {
            let read = (end - offset)
                .max(CHUNK)
                .min(self.size.saturating_sub(offset));
            self.store
                .read_version(self.key, self.version, offset, read, &mut self.buffer)?;
            self.at = offset;
        }
        Ok(())
    }
}

/// WAV: the frames of each span, by arithmetic.
fn wav(walk: &mut Walk<'_>, spans: &[Span]) -> Result<Option<Vec<Stretch>>, Cause> {
    let size = walk.size;
    let head = walk.get(0, WAV_HEAD as usize)?;
    let Ok((data, frame_bytes, rate)) = wav_data_layout(head) else {
        return Ok(None);
    };
    let header = &head[..data.start];
    let data_start = data.start as u64;
    let declared = (data.end - data.start) as u64 / frame_bytes as u64;
    let held = size.saturating_sub(data_start) / frame_bytes as u64;
    let total = declared.min(held);
    let stretches = spans
        .iter()
        .map(|&(start, duration)| {
            let first = frame_at(start, rate).min(total);
            let end = duration.map_or(total, |d| (first + frame_at(d, rate)).min(total));
            let body_len = (end - first) * frame_bytes as u64;
            let mut header = header.to_vec();
            // The RIFF chunk's size and the data chunk's, for the stretch alone.
            let riff = (header.len() as u64 - 8 + body_len).min(u64::from(u32::MAX)) as u32;
            header[4..8].copy_from_slice(&riff.to_le_bytes());
            let at = header.len() - 4;
            header[at..].copy_from_slice(&(body_len as u32).to_le_bytes());
            let problem = (first == total).then(|| {
                Cause::Corrupt(format!(
                    "its segment starts at or after the end of the recording, which lasts \
                     {:.3} s",
                    total as f64 / f64::from(rate)
                ))
            });
            Stretch {
                header: header.into(),
                body: data_start + first * frame_bytes as u64
                    ..data_start + end * frame_bytes as u64,
                part: Part {
                    first,
                    to_end: true,
                },
                problem,
            }
        })
        .collect();
    Ok(Some(stretches))
}

/// FLAC: the frames walked, then each span's stretch.
fn flac(walk: &mut Walk<'_>, spans: &[Span]) -> Result<Option<Vec<Stretch>>, Cause> {
    let mut at = 4u64;
    let mut info = None;
    loop {
        let block = walk.get(at, 4)?;
        if block.len() < 4 {
            return Ok(None);
        }
        let (last, kind) = (block[0] & 0x80 != 0, block[0] & 0x7f);
        let len = u64::from(u32::from_be_bytes([0, block[1], block[2], block[3]]));
        if kind == 0 && len == 34 {
            let block: [u8; 34] = walk.get(at + 4, 34)?.try_into().map_err(|_| cut())?;
            info = Some(FlacStreamInfo::read(block));
        }
        at += 4 + len;
        if last {
            break;
        }
    }
    let Some(info) = info.filter(|i: &FlacStreamInfo| i.rate > 0) else {
        return Ok(None);
    };
    // Every frame's first sample and offset, and the stream's end.
    let mut frames: Vec<(u64, u64)> = Vec::new();
    let mut expected = None;
    let mut offset = at;
    while offset < walk.size {
        let bytes = walk.get(offset, FLAC_FRAME_HEADER)?;
        match flac_frame_header(bytes, info.fixed_block) {
            Some((ts, len, _)) if expected.is_none_or(|e| e == ts) => {
                frames.push((ts, offset));
                expected = Some(ts + len);
                offset += 2;
            }
            _ if frames.is_empty() => return Ok(None),
            _ => offset += 1,
        }
        // On to the next byte that may begin a frame.
        let Some(next) = next_sync(walk, offset)? else {
            break;
        };
        offset = next;
    }
    if frames.is_empty() {
        return Ok(None);
    }
    let end_ts = expected.expect("set with the first frame");
    let stretches = spans
        .iter()
        .map(|&(start, duration)| {
            let first_sample = frame_at(start, info.rate);
            let end_sample = duration.map_or(end_ts, |d| first_sample + frame_at(d, info.rate));
            // The frame holding the first sample, and the first frame past the last.
            let from = frames
                .partition_point(|&(ts, _)| ts <= first_sample)
                .saturating_sub(1);
            let to = frames.partition_point(|&(ts, _)| ts < end_sample);
            let to_end = to == frames.len();
            let (body_end, stretch_end) = match frames.get(to) {
                Some(&(ts, offset)) => (offset, ts),
                None => (walk.size, end_ts),
            };
            let mut header = Vec::with_capacity(42);
            header.extend_from_slice(b"fLaC\x80\x00\x00\x22");
            let mut block = info.block;
            // The stated length: where the stretch ends (the recording's own, at its end,
            // so that a recording cut short is still found so). No MD5 for a stretch.
            let declared = if to_end {
                info.total.unwrap_or(0)
            } else {
                stretch_end
            };
            let packed = u64::from_be_bytes(block[10..18].try_into().expect("8 bytes"));
            let packed = (packed & !((1 << 36) - 1)) | (declared & ((1 << 36) - 1));
            block[10..18].copy_from_slice(&packed.to_be_bytes());
            block[18..].fill(0);
            header.extend_from_slice(&block);
            // A recording cut short: its last frame found may be cut too.
            let held = frames.last().expect("one frame at least").0;
            let declared_total = info.total.unwrap_or(0);
            let problem = (declared_total > end_ts && end_sample > held).then(|| {
                Cause::Corrupt(format!(
                    "the recording is truncated: its header declares {} frames, its frames \
                     stop at {held}",
                    declared_total
                ))
            });
            Stretch {
                header: header.into(),
                body: frames[from].1..body_end,
                part: Part {
                    first: frames[from].0,
                    to_end,
                },
                problem,
            }
        })
        .collect();
    Ok(Some(stretches))
}

/// The offset of the next `0xFF 0xF8` or `0xFF 0xF9` (a FLAC frame's sync code) at or
/// after `from`.
fn next_sync(walk: &mut Walk<'_>, mut from: u64) -> Result<Option<u64>, Cause> {
    while from + 1 < walk.size {
        let bytes = walk.rest(from)?;
        if let Some(i) = flac_find_sync(bytes) {
            return Ok(Some(from + i as u64));
        }
        from += bytes.len().saturating_sub(1).max(1) as u64;
    }
    Ok(None)
}

/// An Ogg page as a walk sees it.
struct Page {
    offset: u64,
    len: u64,
    /// Where the first packet that begins on it begins, in samples (its granule terms).
    start: u64,
    /// It continues a packet begun on the page before.
    continued: bool,
    /// Its granule position (`None`: no packet ends on it).
    granule: Option<u64>,
}

/// Ogg Opus: the pages walked, then each span's stretch.
fn opus(walk: &mut Walk<'_>, spans: &[Span]) -> Result<Option<Vec<Stretch>>, Cause> {
    let mut pages = Vec::new();
    let (mut offset, mut packets, mut serial, mut pre_skip) = (0u64, 0usize, None, 0u64);
    // The granule at which the packets ended so far end.
    let mut ended = 0u64;
    let mut audio_from = None;
    while offset < walk.size {
        let header = walk.get(offset, 27 + 255)?;
        if header.len() < 27 || &header[..4] != b"OggS" {
            return Ok(None);
        }
        let segments = usize::from(header[26]);
        let Some(table) = header.get(27..27 + segments) else {
            return Ok(None);
        };
        let body: u64 = table.iter().map(|&s| u64::from(s)).sum();
        let page_serial = u32::from_le_bytes(header[14..18].try_into().expect("4 bytes"));
        // A multiplexed or chained file is carried whole.
        if *serial.get_or_insert(page_serial) != page_serial {
            return Ok(None);
        }
        let granule = u64::from_le_bytes(header[6..14].try_into().expect("8 bytes"));
        let granule = (granule != u64::MAX).then_some(granule);
        let continued = header[5] & 0x01 != 0;
        let completed = table.iter().filter(|&&s| s < 255).count();
        let len = 27 + segments as u64 + body;
        if offset == 0 {
            let head = walk.get(27 + segments as u64, 19)?;
            if head.len() < 19 || &head[..8] != b"OpusHead" {
                return Ok(None);
            }
            pre_skip = u64::from(u16::from_le_bytes([head[10], head[11]]));
        }
        if packets >= 2 {
            audio_from.get_or_insert(offset);
            pages.push(Page {
                offset,
                len,
                start: ended,
                continued,
                granule,
            });
            if let Some(granule) = granule {
                ended = granule;
            }
        }
        packets += completed;
        offset += len;
    }
    let (Some(audio_from), Some(last)) = (audio_from, pages.last()) else {
        return Ok(None);
    };
    let file_end = last.offset + last.len;
    let header: Arc<[u8]> = walk.get(0, audio_from as usize)?.into();
    let stretches = spans
        .iter()
        .map(|&(start, duration)| {
            let first_sample = frame_at(start, 48_000) + pre_skip;
            let from_sample = first_sample.saturating_sub(OPUS_PREROLL);
            // The last page at or before the pre-roll that begins a packet past the
            // pre-skip (its start is then a frame of the output); the first page always
            // does, decoded with its pre-skip.
            let from = pages
                .iter()
                .enumerate()
                .rev()
                .find(|(i, p)| {
                    *i == 0 || (!p.continued && p.start > pre_skip && p.start <= from_sample)
                })
                .map_or(0, |(i, _)| i);
            let end_sample = duration.map(|d| first_sample + frame_at(d, 48_000));
            let to = end_sample.and_then(|end| {
                pages[from..]
                    .iter()
                    .position(|p| p.granule.is_some_and(|g| g >= end))
                    .map(|i| from + i)
                    .filter(|&i| i + 1 < pages.len())
            });
            let first = if from == 0 {
                0
            } else {
                pages[from].start - pre_skip
            };
            Stretch {
                header: header.clone(),
                body: pages[from].offset..to.map_or(file_end, |i| pages[i].offset + pages[i].len),
                part: Part {
                    first,
                    to_end: to.is_none(),
                },
                problem: None,
            }
        })
        .collect();
    Ok(Some(stretches))
}

fn cut() -> Cause {
    Cause::Corrupt("its header is cut short".into())
}
