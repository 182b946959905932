//! Where a segment's bytes lie in its recording, found once when the dataset is opened.
//!
//! - **WAV**: by arithmetic from the header (the data chunk's start and the frame's
//!   size); the carried header is rewritten to declare the stretch's size, so the stretch
//!   reads as a WAV file of its own. The data runs to the file's end where the header
//!   leaves its size unknown (a file written to a pipe) or declares more than the file
//!   holds.
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
//! A walk reads the recording once, in large sequential reads; a FLAC walk keeps its
//! frames' places (16 bytes a frame, bounded by the file) only while the recording is
//! indexed, and only the stretches are kept after. Every length read from the recording is checked
//! against its size: a block or page that runs past the end is a recording cut short.
//!
//! A recording's header is held once, shared by all its stretches (a WAV header may
//! carry a megabyte of tags, and a manifest thousands of segments of one recording);
//! the few fields that differ by stretch are written when a sample is read.

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
    /// Carried first: the recording's header, shared by its stretches, rewritten as
    /// `fit` says for this one.
    header: Arc<[u8]>,
    fit: Fit,
    /// The recording's bytes carried after the header.
    pub(crate) body: Range<u64>,
    /// Where they lie in the recording.
    pub(crate) part: Part,
    /// Why the segment cannot be read, when the walk found it already (a segment after
    /// the recording's end, or past the point where a recording cut short stops).
    pub(crate) problem: Option<Cause>,
}

/// How a stretch's header is made from its recording's when a sample is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// Carried as it is.
    AsIs,
    /// A WAV header ending with the data chunk's: the RIFF and data chunks' sizes
    /// declare the stretch alone.
    Wav,
    /// `fLaC` and a `STREAMINFO` block: its stated length is `declared` samples.
    Flac { declared: u64 },
}

impl Stretch {
    /// The stretch of a recording that cannot be read: nothing.
    pub(crate) fn unreadable() -> Stretch {
        Stretch {
            header: Arc::from(&[][..]),
            fit: Fit::AsIs,
            body: 0..0,
            part: Part::WHOLE,
            problem: None,
        }
    }

    /// A file carried whole, as it is: what a format with no way into its middle gets
    /// (MP3, Vorbis, every video).
    pub(crate) fn whole(size: u64) -> Stretch {
        Stretch {
            body: 0..size,
            ..Stretch::unreadable()
        }
    }

    /// The bytes of a sample carrying it: the envelope, the header, the body.
    pub(crate) fn size(&self) -> u64 {
        (ENVELOPE + self.header.len()) as u64 + (self.body.end - self.body.start)
    }

    /// Appends the header, as this stretch carries it, to `out`.
    pub(crate) fn write_header(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&self.header);
        let header = &mut out[at..];
        match self.fit {
            Fit::AsIs => {}
            Fit::Wav => {
                // A stretch of 4 GiB or more declares its sizes unknown: to the end of
                // its bytes, which is where it ends.
                let body = self.body.end - self.body.start;
                let riff = (header.len() as u64 - 8 + body).min(u64::from(u32::MAX)) as u32;
                header[4..8].copy_from_slice(&riff.to_le_bytes());
                let data = body.min(u64::from(u32::MAX)) as u32;
                let at = header.len() - 4;
                header[at..].copy_from_slice(&data.to_le_bytes());
            }
            Fit::Flac { declared } => {
                // The total: the low 36 bits of bytes 10..18 of the block, after `fLaC`
                // and the block's own header.
                let field = &mut header[18..26];
                let packed = u64::from_be_bytes((&*field).try_into().expect("8 bytes"));
                let packed = (packed & !((1 << 36) - 1)) | (declared & ((1 << 36) - 1));
                field.copy_from_slice(&packed.to_be_bytes());
            }
        }
    }
}

/// A segment as the index takes it: start and duration in seconds (`None`: to the end),
/// finite and at or after 0.
pub(crate) type Span = (f64, Option<f64>);

/// The stretch of each of `spans` in recording `key` (of `size` bytes, at `version`).
///
/// # Errors
///
/// A read of the recording that fails, or a FLAC recording whose metadata runs past its
/// end (a download cut short); a recording its format's walk cannot follow is carried
/// whole instead.
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
    Ok(found.unwrap_or_else(|| vec![Stretch::whole(size); spans.len()]))
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
    /// Bytes `offset..offset + len`, or fewer where the recording ends first (none
    /// from past its end, where a length read from the recording may point).
    fn get(&mut self, offset: u64, len: usize) -> Result<&[u8], Cause> {
        let end = offset.saturating_add(len as u64).min(self.size);
        if offset >= end {
            return Ok(&[]);
        }
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
    let Ok(layout) = wav_data_layout(head) else {
        return Ok(None);
    };
    let header: Arc<[u8]> = head[..layout.start].into();
    let (data_start, frame_bytes, rate) =
        (layout.start as u64, layout.frame_bytes as u64, layout.rate);
    // The data runs to the end the header declares, or to the file's where it declares
    // none (a pipe's writer cannot go back to write it) or more than the file holds.
    let data_end = layout
        .len
        .map_or(size, |len| data_start.saturating_add(len).min(size));
    let total = data_end.saturating_sub(data_start) / frame_bytes;
    let stretches = spans
        .iter()
        .map(|&(start, duration)| {
            let first = frame_at(start, rate).min(total);
            let end = duration.map_or(total, |d| {
                first.saturating_add(frame_at(d, rate)).min(total)
            });
            let problem = (first == total).then(|| {
                Cause::Corrupt(format!(
                    "its segment starts at or after the end of the recording, which lasts \
                     {:.3} s",
                    total as f64 / f64::from(rate)
                ))
            });
            Stretch {
                header: header.clone(),
                fit: Fit::Wav,
                body: data_start + first * frame_bytes..data_start + end * frame_bytes,
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
        let &[flags, a, b, c] = block else {
            return Err(metadata_cut(at, 4, walk.size));
        };
        let (last, kind) = (flags & 0x80 != 0, flags & 0x7f);
        let len = u64::from(u32::from_be_bytes([0, a, b, c]));
        // A block (a cover picture, often) that runs past the end: a download cut short.
        if at + 4 + len > walk.size {
            return Err(metadata_cut(at, 4 + len, walk.size));
        }
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
    // The stream's header, the last metadata block `STREAMINFO` (no MD5 for a stretch).
    let mut block = info.block;
    block[18..].fill(0);
    let header: Arc<[u8]> = [&b"fLaC\x80\x00\x00\x22"[..], &block].concat().into();
    let stretches = spans
        .iter()
        .map(|&(start, duration)| {
            let first_sample = frame_at(start, info.rate);
            let end_sample = duration.map_or(end_ts, |d| {
                first_sample.saturating_add(frame_at(d, info.rate))
            });
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
            // The stated length: where the stretch ends (the recording's own, at its end,
            // so that a recording cut short is still found so).
            let declared = if to_end {
                info.total.unwrap_or(0)
            } else {
                stretch_end
            };
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
                header: header.clone(),
                fit: Fit::Flac { declared },
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
    let size = walk.size;
    while offset < size {
        let header = walk.get(offset, 27 + 255)?;
        // A page cut by the recording's end (its header here, its body below) ends the
        // walk: the recording is what its whole pages hold.
        let Some(table) = header
            .get(26)
            .and_then(|&n| header.get(27..27 + usize::from(n)))
        else {
            break;
        };
        if &header[..4] != b"OggS" {
            return Ok(None);
        }
        let segments = table.len();
        let body: u64 = table.iter().map(|&s| u64::from(s)).sum();
        let len = 27 + segments as u64 + body;
        if offset + len > size {
            break;
        }
        let page_serial = u32::from_le_bytes(header[14..18].try_into().expect("4 bytes"));
        // A multiplexed or chained file is carried whole.
        if *serial.get_or_insert(page_serial) != page_serial {
            return Ok(None);
        }
        let granule = u64::from_le_bytes(header[6..14].try_into().expect("8 bytes"));
        let granule = (granule != u64::MAX).then_some(granule);
        let continued = header[5] & 0x01 != 0;
        let completed = table.iter().filter(|&&s| s < 255).count();
        if offset == 0 {
            let head = walk.get(27 + segments as u64, 19)?;
            if head.len() < 19 || &head[..8] != b"OpusHead" {
                return Ok(None);
            }
            pre_skip = u64::from(u16::from_le_bytes([head[10], head[11]]));
        }
        if packets >= 2 {
            // Granules only go forward in a stream the stretches can be found in by search.
            if granule.is_some_and(|g| g < ended) {
                return Ok(None);
            }
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
    // The pages a stretch may begin at: the first, decoded with its pre-skip, and those
    // that begin a packet past the pre-skip (its start is then a frame of the output).
    // Their starts go forward, as granules do, so each span's is found by search.
    let entries: Vec<usize> = (0..pages.len())
        .filter(|&i| i == 0 || (!pages[i].continued && pages[i].start > pre_skip))
        .collect();
    // The pages on which a packet ends, and its granule: both go forward.
    let ends: Vec<(usize, u64)> = pages
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.granule.map(|g| (i, g)))
        .collect();
    let stretches = spans
        .iter()
        .map(|&(start, duration)| {
            let first_sample = frame_at(start, 48_000).saturating_add(pre_skip);
            let from_sample = first_sample.saturating_sub(OPUS_PREROLL);
            // The last page that may begin a stretch at or before the pre-roll.
            let from = entries
                .partition_point(|&i| i == 0 || pages[i].start <= from_sample)
                .checked_sub(1)
                .map_or(0, |k| entries[k]);
            // The page on which the last sample's packet ends (none: the last page).
            let end_sample = duration.map(|d| first_sample.saturating_add(frame_at(d, 48_000)));
            let to = end_sample.and_then(|end| {
                let k = ends.partition_point(|&(i, g)| i < from || g < end);
                ends.get(k)
                    .map(|&(i, _)| i)
                    .filter(|&i| i + 1 < pages.len())
            });
            let first = if from == 0 {
                0
            } else {
                pages[from].start - pre_skip
            };
            Stretch {
                header: header.clone(),
                fit: Fit::AsIs,
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

/// A FLAC recording whose metadata block at `at`, of `len` bytes with its header, runs
/// past the recording's `size`.
fn metadata_cut(at: u64, len: u64, size: u64) -> Cause {
    Cause::Corrupt(format!(
        "its FLAC metadata is cut short: the block at byte {at} runs to byte {}, past the \
         file's end at byte {size} (a download cut short?)",
        at + len
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::storage::BlobInfo;

    /// A recording held in memory.
    #[derive(Debug)]
    struct Memory<'a>(&'a [u8]);

    impl BlobStore for Memory<'_> {
        fn list(&self) -> crate::error::Result<Vec<BlobInfo>> {
            Ok(Vec::new())
        }

        fn read_version(
            &self,
            _: &str,
            _: Option<&str>,
            offset: u64,
            len: u64,
            out: &mut Vec<u8>,
        ) -> Result<(), Cause> {
            let bytes = self.0.get(offset as usize..(offset + len) as usize);
            *out = bytes
                .ok_or_else(|| Cause::Io("past the end".into()))?
                .to_vec();
            Ok(())
        }

        fn root(&self) -> String {
            "memory".into()
        }
    }

    fn index(file: &[u8], spans: &[Span]) -> Result<Vec<Stretch>, Cause> {
        stretches(&Memory(file), ("r", None, file.len() as u64), spans)
    }

    fn recording(dir: &str, name: &str) -> Vec<u8> {
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(name)).unwrap()
    }

    /// A 15 s recording of the 48 kHz stereo WAV clip's frames twelve times over, with a
    /// `LIST` chunk holding a comment of `tags` bytes in front of the data, and the RIFF
    /// and data chunks' sizes given (`None`: the true ones).
    fn wav(tags: usize, sizes: Option<(u32, u32)>) -> Vec<u8> {
        let clip = recording("tests/audio", "wanderer.wav");
        let at = clip.windows(4).position(|w| w == b"data").unwrap() + 8;
        let pcm = clip[at..].repeat(12);
        let mut file = b"RIFF\0\0\0\0WAVE".to_vec();
        // Its `fmt ` chunk, 16 bytes long.
        file.extend_from_slice(&clip[12..36]);
        if tags > 0 {
            file.extend_from_slice(b"LIST");
            file.extend_from_slice(&(tags as u32 + 12).to_le_bytes());
            file.extend_from_slice(b"INFOICMT");
            file.extend_from_slice(&(tags as u32).to_le_bytes());
            file.resize(file.len() + tags, b'~');
        }
        let riff = (file.len() + 8 + pcm.len() - 8) as u32;
        let (riff, data) = sizes.unwrap_or((riff, pcm.len() as u32));
        file[4..8].copy_from_slice(&riff.to_le_bytes());
        file.extend_from_slice(b"data");
        file.extend_from_slice(&data.to_le_bytes());
        file.extend_from_slice(&pcm);
        file
    }

    fn header(stretch: &Stretch) -> Vec<u8> {
        let mut out = Vec::new();
        stretch.write_header(&mut out);
        out
    }

    #[test]
    fn a_wav_written_to_a_pipe_runs_to_the_end_of_the_file() {
        // Past the first MiB (5.46 s at 48 kHz stereo), to the end, after the end.
        let spans = [(8.0, Some(1.5)), (12.0, None), (40.0, Some(1.0))];
        let sized = wav(0, None);
        let known = index(&sized, &spans).unwrap();
        assert!(known[..2].iter().all(|s| s.problem.is_none()));
        assert_eq!(known[1].body.end, sized.len() as u64);
        // ffmpeg's and sox's sizes for a pipe (unknown), and sox's guess that runs past
        // the end: the same stretches, the same headers once fitted.
        for sizes in [(u32::MAX, u32::MAX), (0, 0), (0x7FFF_F024, 0x7FFF_F000)] {
            let piped = index(&wav(0, Some(sizes)), &spans).unwrap();
            for (piped, known) in piped.iter().zip(&known) {
                assert_eq!(
                    (&piped.body, piped.part, &piped.problem),
                    (&known.body, known.part, &known.problem),
                    "{sizes:x?}"
                );
                assert_eq!(header(piped), header(known), "{sizes:x?}");
            }
            let after = piped[2].problem.as_ref().unwrap().to_string();
            assert!(
                after.contains("which lasts 15.000 s"),
                "{sizes:x?}: {after}"
            );
        }
        // An empty data chunk in a file whose RIFF size is known is empty.
        let riff = sized.len() as u32 - 8;
        let empty = index(&wav(0, Some((riff, 0))), &spans).unwrap();
        let problem = empty[0].problem.as_ref().unwrap().to_string();
        assert!(problem.contains("which lasts 0.000 s"), "{problem}");
    }

    #[test]
    fn the_stretches_of_a_recording_share_its_header() {
        // Two thousand segments of a recording with a megabyte of tags hold one copy.
        let file = wav(1_000_000, None);
        let spans: Vec<Span> = (0..2_000)
            .map(|i| (f64::from(i) * 0.007, Some(0.5)))
            .collect();
        let stretches = index(&file, &spans).unwrap();
        let data_start = file.windows(4).rposition(|w| w == b"data").unwrap() + 8;
        for stretch in &stretches {
            assert!(Arc::ptr_eq(&stretch.header, &stretches[0].header));
            assert_eq!(stretch.header.len(), data_start);
            // Each carries its own sizes: the RIFF chunk's, the data chunk's.
            let header = header(stretch);
            let body = stretch.body.end - stretch.body.start;
            assert_eq!(body, 24_000 * 4);
            let size =
                |at: usize| u64::from(u32::from_le_bytes(header[at..at + 4].try_into().unwrap()));
            assert_eq!(size(4), data_start as u64 - 8 + body);
            assert_eq!(size(data_start - 4), body);
            assert_eq!(stretch.size(), (ENVELOPE + data_start) as u64 + body);
        }
        let flac = recording("tests/recordings", "battle.flac");
        let stretches = index(&flac, &spans).unwrap();
        assert!(stretches
            .iter()
            .all(|s| Arc::ptr_eq(&s.header, &stretches[0].header)));
    }

    /// `battle.flac`'s first bytes, `fLaC` and `STREAMINFO`, then a picture block that
    /// declares `declared` bytes (and is not the last block), then the recording's frames.
    fn cover_art(declared: u32) -> Vec<u8> {
        let flac = recording("tests/recordings", "battle.flac");
        let mut file = flac[..42].to_vec();
        file.push(0x06);
        file.extend_from_slice(&declared.to_be_bytes()[1..]);
        // Its frames start after the two other blocks.
        file.extend_from_slice(&flac[8_288..]);
        file
    }

    #[test]
    fn a_flac_recording_whose_metadata_runs_past_its_end_is_refused() {
        let spans = [(1.0, Some(2.0))];
        // A picture block a download cut short: its declared bytes never came.
        let error = index(&cover_art(1 << 20), &spans).unwrap_err().to_string();
        assert!(
            error.contains("metadata is cut short")
                && error.contains("the block at byte 42 runs to byte 1048622"),
            "{error}"
        );
        // The file ends within a block's header.
        let flac = recording("tests/recordings", "battle.flac");
        let error = index(&flac[..44], &spans).unwrap_err().to_string();
        assert!(error.contains("metadata is cut short"), "{error}");
        // The file ends within the picture block.
        let error = index(&cover_art(2_000)[..1_000], &spans)
            .unwrap_err()
            .to_string();
        assert!(error.contains("metadata is cut short"), "{error}");
    }

    #[test]
    fn recordings_cut_or_lying_anywhere_are_indexed_without_a_panic() {
        let spans = [
            (0.0, None),
            (1.0, Some(2.0)),
            (86_400.0, Some(86_400.0)),
            (1e300, Some(1e300)),
            (0.0, Some(f64::MAX)),
        ];
        let mut files = vec![
            recording("tests/recordings", "battle.flac"),
            recording("tests/recordings", "battle.opus"),
            wav(100, None),
            cover_art(20_000),
        ];
        // Each size field of the WAV header (the RIFF, `fmt `, `LIST`, comment and data
        // chunks') and each of the first Ogg page's lengths at its extremes.
        for at in [4, 16, 40, 52, 160] {
            for value in [0u32, 1, u32::MAX] {
                let mut file = wav(100, None);
                file[at..at + 4].copy_from_slice(&value.to_le_bytes());
                files.push(file);
            }
        }
        for at in [26, 27, 28] {
            let mut file = recording("tests/recordings", "battle.opus");
            file[at] = 0xFF;
            files.push(file);
        }
        for file in &files {
            let step = (file.len() / 97).max(1);
            for cut in (0..300).chain((300..=file.len()).step_by(step)) {
                let cut = cut.min(file.len());
                if let Ok(stretches) = index(&file[..cut], &spans) {
                    assert_eq!(stretches.len(), spans.len());
                    for stretch in &stretches {
                        assert!(stretch.body.start <= stretch.body.end);
                        assert!(stretch.body.end <= cut as u64, "{cut}: {stretch:?}");
                        header(stretch);
                    }
                }
            }
        }
    }
}
