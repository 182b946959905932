//! The frame index: every packet of the video stream, made by demuxing alone.

use crate::ffi::{self, Demuxer, PacketInfo, NO_TS};
use crate::{Limits, VideoError};

/// One packet of the video stream (one frame), in decode order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Presentation time, in the stream's time base: the container's, or reconstructed
    /// where the container stores none (see `presentation_times`). Unique.
    pub(crate) key: i64,
    /// The demuxer's timestamps, what a seek is asked for ([`NO_TS`] when absent).
    pub(crate) pts: i64,
    pub(crate) dts: i64,
    /// Byte position in the file (-1 when the demuxer gives none): with the timestamps,
    /// how a packet read after a seek is recognised.
    pub(crate) pos: i64,
    pub(crate) is_key: bool,
    /// False for a packet the container says to decode but not show (cut by an MP4
    /// edit list): it has no frame number, and FFmpeg's decoder drops its frame.
    pub(crate) shown: bool,
}

impl Entry {
    /// Whether `p` is this packet.
    pub(crate) fn matches(&self, p: &PacketInfo) -> bool {
        if self.pos >= 0 && p.pos >= 0 {
            p.pos == self.pos && p.key == self.is_key
        } else {
            p.pts == self.pts && p.dts == self.dts && p.key == self.is_key
        }
    }
}

/// What clip sampling and exact seeking need to know about one video, made once by
/// demuxing its packets (nothing is decoded).
///
/// Frame `k` is the `k`-th frame in presentation order. The index counts the packets
/// the container really holds (never the frame count a header declares), and can be kept
/// with [`FrameIndex::to_bytes`] and restored with [`FrameIndex::from_bytes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameIndex {
    codec: String,
    width: u32,
    height: u32,
    time_base: (i32, i32),
    /// How long the last frame is shown, in the time base (0 when unknown).
    last_duration: i64,
    /// Decode order.
    entries: Vec<Entry>,
    /// Presentation index -> decode index, of the shown packets.
    order: Vec<u32>,
    /// Decode index -> presentation index ([`HIDDEN`] for packets not shown).
    rank: Vec<u32>,
    /// Decode indices of the key frames, ascending.
    keys: Vec<u32>,
}

/// The rank of a packet that is not shown.
const HIDDEN: u32 = u32::MAX;

const MAGIC: &[u8; 4] = b"NSVI";
const VERSION: u8 = 1;
/// Bytes of one serialised entry: key, pts, dts, pos (i64 each) and flags (u8).
const ENTRY_BYTES: usize = 33;
/// Longest codec name kept (FFmpeg's are under 32 bytes).
const MAX_CODEC_NAME: usize = 64;

impl FrameIndex {
    /// Indexes the video in `data` (a whole file in memory) by reading its packets.
    ///
    /// Fails with [`VideoError::UnknownFormat`] if FFmpeg cannot demux it or it has no
    /// video stream, [`VideoError::UnsupportedCodec`] if FFmpeg has no decoder for its
    /// codec, [`VideoError::TooLarge`] if its frame size or packet count exceeds
    /// `limits` (checked before anything sized by them is allocated), and
    /// [`VideoError::Corrupt`] if demuxing fails, a packet is truncated, no frame is
    /// found or two frames share a presentation time.
    pub fn scan(data: &[u8], limits: &Limits) -> Result<FrameIndex, VideoError> {
        let mut demux = Demuxer::open(data)?;
        check_complete(data)?;
        let info = demux.info();
        if !demux.has_decoder() {
            return Err(VideoError::UnsupportedCodec(info.codec));
        }
        limits.check_size(info.width, info.height)?;
        check_time_base(info.time_base)?;
        let mut packets: Vec<PacketInfo> = Vec::new();
        loop {
            let p = match demux.read() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(code) => {
                    return Err(VideoError::Corrupt(format!(
                        "demuxing failed after {} packets ({})",
                        packets.len(),
                        ffi::error_text(code)
                    )))
                }
            };
            // An empty packet carries no frame (and would read as end-of-stream to a
            // decoder): it is left out here and skipped when decoding.
            if p.size == 0 {
                continue;
            }
            if p.corrupt {
                return Err(VideoError::Corrupt(format!(
                    "packet {} (decode order) is truncated or damaged",
                    packets.len()
                )));
            }
            if packets.len() >= limits.max_frames as usize {
                return Err(VideoError::TooLarge(format!(
                    "more than {} frames",
                    limits.max_frames
                )));
            }
            packets.push(p);
        }
        if packets.is_empty() {
            return Err(VideoError::Corrupt("the video stream has no frames".into()));
        }
        let keys = presentation_times(&packets);
        let entries: Vec<Entry> = packets
            .iter()
            .zip(keys)
            .map(|(p, key)| Entry {
                key,
                pts: p.pts,
                dts: p.dts,
                pos: p.pos,
                is_key: p.key,
                shown: !p.discard,
            })
            .collect();
        let last = entries
            .iter()
            .zip(&packets)
            .filter(|(e, _)| e.shown)
            .max_by_key(|(e, _)| e.key)
            .map(|(_, p)| p.duration)
            .unwrap_or(0);
        FrameIndex::build(
            info.codec,
            info.width,
            info.height,
            info.time_base,
            last,
            entries,
        )
    }

    /// Derives the orders from the entries, refusing two frames at one time.
    fn build(
        codec: String,
        width: u32,
        height: u32,
        time_base: (i32, i32),
        last_duration: i64,
        entries: Vec<Entry>,
    ) -> Result<FrameIndex, VideoError> {
        let mut order: Vec<u32> = (0..entries.len() as u32)
            .filter(|&d| entries[d as usize].shown)
            .collect();
        if order.is_empty() {
            return Err(VideoError::Corrupt("no frame is shown".into()));
        }
        order.sort_by_key(|&d| entries[d as usize].key);
        if let Some(w) = order
            .windows(2)
            .find(|w| entries[w[0] as usize].key == entries[w[1] as usize].key)
        {
            return Err(VideoError::Corrupt(format!(
                "two frames share the presentation time {}",
                entries[w[0] as usize].key
            )));
        }
        let mut rank = vec![HIDDEN; entries.len()];
        for (p, &d) in order.iter().enumerate() {
            rank[d as usize] = p as u32;
        }
        let keys = (0..entries.len() as u32)
            .filter(|&d| entries[d as usize].is_key)
            .collect();
        Ok(FrameIndex {
            codec,
            width,
            height,
            time_base,
            last_duration: last_duration.max(0),
            entries,
            order,
            rank,
            keys,
        })
    }

    /// Number of frames (the packets of the video stream, less any the container says
    /// not to show).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are no frames (never true of an index that exists).
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Number of packets, shown or not.
    pub(crate) fn packets(&self) -> usize {
        self.entries.len()
    }

    /// Frame width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Frame height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// FFmpeg's name of the codec (`h264`, `hevc`, `vp9`, `av1`, `mpeg4`, ...).
    pub fn codec(&self) -> &str {
        &self.codec
    }

    /// The time base of [`FrameIndex::pts`], as (numerator, denominator) of seconds.
    pub fn time_base(&self) -> (i32, i32) {
        self.time_base
    }

    /// Presentation time of `frame` in the time base.
    ///
    /// # Panics
    /// If `frame >= self.len()`.
    pub fn pts(&self, frame: usize) -> i64 {
        self.entries[self.order[frame] as usize].key
    }

    /// Presentation time of `frame` in seconds, counted from the first frame's (so frame 0
    /// is at 0.0 whatever the stream's first timestamp).
    ///
    /// # Panics
    /// If `frame >= self.len()`.
    pub fn seconds(&self, frame: usize) -> f64 {
        self.ticks_to_seconds(self.pts(frame) - self.pts(0))
    }

    /// The frame shown at `seconds` (counted as in [`FrameIndex::seconds`]): the last one
    /// whose time is not after it; frame 0 before the start, the last frame after the
    /// end. For sampling clips at a fixed rate from variable-frame-rate videos.
    pub fn frame_at(&self, seconds: f64) -> usize {
        // Frames whose time is <= seconds form a prefix of presentation order.
        let n = self.order.partition_point(|&d| {
            self.ticks_to_seconds(self.entries[d as usize].key - self.pts(0)) <= seconds
        });
        n.saturating_sub(1)
    }

    /// How many frames are shown before `seconds` (counted as in [`FrameIndex::seconds`]):
    /// the first frame at or after it, or the count when none is. A time span
    /// `[start, end)` shows frames `frames_before(start)..frames_before(end)`.
    pub fn frames_before(&self, seconds: f64) -> usize {
        self.order.partition_point(|&d| {
            self.ticks_to_seconds(self.entries[d as usize].key - self.pts(0)) < seconds
        })
    }

    /// From the first frame's time to the end of the last frame's (its duration from the
    /// container, or the mean frame interval when the container gives none).
    pub fn duration_seconds(&self) -> f64 {
        let n = self.len();
        self.ticks_to_seconds(self.end(n - 1).saturating_sub(self.pts(0)))
    }

    /// When `frame` stops being shown, in the time base: the next frame's time, or for the
    /// last frame its time plus its duration (the container's, or the mean frame interval
    /// when the container gives none).
    ///
    /// # Panics
    /// If `frame >= self.len()`.
    pub fn end(&self, frame: usize) -> i64 {
        let n = self.len();
        if frame + 1 < n {
            return self.pts(frame + 1);
        }
        let span = self.pts(n - 1) - self.pts(0);
        let last = if self.last_duration > 0 {
            self.last_duration
        } else if n > 1 {
            span / (n as i64 - 1)
        } else {
            0
        };
        self.pts(frame).saturating_add(last)
    }

    fn ticks_to_seconds(&self, ticks: i64) -> f64 {
        ticks as f64 * f64::from(self.time_base.0) / f64::from(self.time_base.1)
    }

    /// The frames that are key frames (decoding can start there), ascending.
    pub fn key_frames(&self) -> impl Iterator<Item = usize> + '_ {
        let mut frames: Vec<usize> = self
            .keys
            .iter()
            .filter_map(|&d| self.rank(d as usize))
            .collect();
        frames.sort_unstable();
        frames.into_iter()
    }

    pub(crate) fn entry(&self, decode: usize) -> &Entry {
        &self.entries[decode]
    }

    /// Presentation index of the packet at decode index `decode`, if it is shown.
    pub(crate) fn rank(&self, decode: usize) -> Option<usize> {
        let r = self.rank[decode];
        (r != HIDDEN).then_some(r as usize)
    }

    /// Decode index of frame `frame`.
    pub(crate) fn decode_index(&self, frame: usize) -> usize {
        self.order[frame] as usize
    }

    /// The frame presented at exactly `key` (a time the index gave a packet).
    pub(crate) fn frame_of_key(&self, key: i64) -> Option<usize> {
        let i = self
            .order
            .partition_point(|&d| self.entries[d as usize].key < key);
        (i < self.order.len() && self.entries[self.order[i] as usize].key == key).then_some(i)
    }

    /// Where to start decoding for `frame`: the last key frame at or before it in decode
    /// order that it does not precede in presentation order (a frame that does is a
    /// leading picture of an open GOP and may reference the GOP before); the first
    /// packet if there is none.
    pub(crate) fn start_for(&self, frame: usize) -> usize {
        let d = self.order[frame];
        let below = self.keys.partition_point(|&k| k <= d);
        self.keys[..below]
            .iter()
            .rev()
            .find(|&&k| self.rank[k as usize] as usize <= frame)
            .map_or(0, |&k| k as usize)
    }

    /// The key frame before decode index `decode` (the first packet if there is none).
    pub(crate) fn key_before(&self, decode: usize) -> usize {
        let below = self.keys.partition_point(|&k| (k as usize) < decode);
        below.checked_sub(1).map_or(0, |i| self.keys[i] as usize)
    }

    /// The index as bytes, for [`FrameIndex::from_bytes`]: a versioned little-endian
    /// record of the stream's properties and each packet's timestamps, position and key
    /// and shown flags (33 bytes a packet).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(40 + self.codec.len() + ENTRY_BYTES * self.entries.len());
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.extend_from_slice(&self.width.to_le_bytes());
        b.extend_from_slice(&self.height.to_le_bytes());
        b.extend_from_slice(&self.time_base.0.to_le_bytes());
        b.extend_from_slice(&self.time_base.1.to_le_bytes());
        b.extend_from_slice(&self.last_duration.to_le_bytes());
        b.push(self.codec.len() as u8);
        b.extend_from_slice(self.codec.as_bytes());
        b.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            for v in [e.key, e.pts, e.dts, e.pos] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.push(u8::from(e.is_key) | u8::from(!e.shown) << 1);
        }
        b
    }

    /// Restores an index written by [`FrameIndex::to_bytes`], checking it against
    /// `limits`. Any other version, a truncated or overlong record, or values no scan
    /// makes are [`VideoError::Corrupt`]; sizes over the limits are
    /// [`VideoError::TooLarge`].
    pub fn from_bytes(bytes: &[u8], limits: &Limits) -> Result<FrameIndex, VideoError> {
        let bad = |why: &str| VideoError::Corrupt(format!("frame index: {why}"));
        let mut r = Bytes(bytes);
        if r.take(4).ok_or_else(|| bad("truncated"))? != MAGIC {
            return Err(bad("not a frame index"));
        }
        if r.u8().ok_or_else(|| bad("truncated"))? != VERSION {
            return Err(bad("unknown version"));
        }
        let head = (|| {
            let width = u32::from_le_bytes(r.array()?);
            let height = u32::from_le_bytes(r.array()?);
            let tb = (
                i32::from_le_bytes(r.array()?),
                i32::from_le_bytes(r.array()?),
            );
            let last = i64::from_le_bytes(r.array()?);
            let name_len = r.u8()? as usize;
            let name = r.take(name_len)?;
            let n = u32::from_le_bytes(r.array()?);
            Some((width, height, tb, last, name, n))
        })();
        let (width, height, time_base, last, name, n) = head.ok_or_else(|| bad("truncated"))?;
        limits.check_size(width, height)?;
        check_time_base(time_base)?;
        if last < 0 {
            return Err(bad("negative duration"));
        }
        let codec = match std::str::from_utf8(name) {
            Ok(s) if !s.is_empty() && s.len() <= MAX_CODEC_NAME => s.to_owned(),
            _ => return Err(bad("bad codec name")),
        };
        if n == 0 {
            return Err(bad("no frames"));
        }
        if n > limits.max_frames {
            return Err(VideoError::TooLarge(format!(
                "{n} frames, over the limit of {}",
                limits.max_frames
            )));
        }
        // Exact length before allocating anything sized by n.
        if r.0.len() != n as usize * ENTRY_BYTES {
            return Err(bad(if r.0.len() < n as usize * ENTRY_BYTES {
                "truncated"
            } else {
                "trailing bytes"
            }));
        }
        let mut entries = Vec::with_capacity(n as usize);
        for chunk in r.0.chunks_exact(ENTRY_BYTES) {
            let v = |i: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&chunk[i * 8..i * 8 + 8]);
                i64::from_le_bytes(a)
            };
            let flags = chunk[32];
            if flags > 3 || v(0) == NO_TS || v(3) < -1 {
                return Err(bad("bad entry"));
            }
            entries.push(Entry {
                key: v(0),
                pts: v(1),
                dts: v(2),
                pos: v(3),
                is_key: flags & 1 != 0,
                shown: flags & 2 == 0,
            });
        }
        FrameIndex::build(codec, width, height, time_base, last, entries)
    }
}

/// Refuses a file shorter than its container says it is. FFmpeg's Matroska and AVI
/// demuxers end quietly where a cut file ends, so a truncated download would otherwise
/// index as a shorter video. Checked where the container declares its length: the
/// Matroska/WebM segment's size, the AVI RIFF chunk's, and MP4/MOV's top-level boxes.
fn check_complete(data: &[u8]) -> Result<(), VideoError> {
    let declared = if data.starts_with(b"RIFF") && data.len() >= 12 {
        let size = u32::from_le_bytes([data[4], data[5], data[6], data[7]]);
        Some(8 + u64::from(size))
    } else if data.starts_with(&[0x1a, 0x45, 0xdf, 0xa3]) {
        matroska_end(data)
    } else if data.get(4..8) == Some(b"ftyp") {
        boxes_end(data)
    } else {
        None
    };
    match declared {
        Some(end) if end > data.len() as u64 => Err(VideoError::Corrupt(format!(
            "the file is truncated: its container declares {end} bytes, it has {}",
            data.len()
        ))),
        _ => Ok(()),
    }
}

/// Reads an EBML variable-length integer: (value, length, whether it is "unknown").
fn ebml_vint(b: &[u8], keep_marker: bool) -> Option<(u64, usize, bool)> {
    let first = *b.first()?;
    let len = first.leading_zeros() as usize + 1;
    if len > 8 || b.len() < len {
        return None;
    }
    // The bits after the length marker (none when it is 8 bytes long).
    let bits = (0xffu16 >> len) as u8;
    let mut v = u64::from(if keep_marker { first } else { first & bits });
    let mut all_ones = first & bits == bits;
    for &x in &b[1..len] {
        v = (v << 8) | u64::from(x);
        all_ones &= x == 0xff;
    }
    Some((v, len, all_ones))
}

/// Where the Matroska segment after the EBML header ends, if its size is known.
fn matroska_end(data: &[u8]) -> Option<u64> {
    let (_, id_len, _) = ebml_vint(data, true)?;
    let (size, size_len, _) = ebml_vint(&data[id_len..], false)?;
    let seg = ((id_len + size_len) as u64).checked_add(size)?;
    let rest = data.get(usize::try_from(seg).ok()?..)?;
    let (id, id_len, _) = ebml_vint(rest, true)?;
    if id != 0x1853_8067 {
        return None;
    }
    let (size, size_len, unknown) = ebml_vint(&rest[id_len..], false)?;
    let end = seg
        .checked_add((id_len + size_len) as u64)?
        .checked_add(size)?;
    (!unknown).then_some(end)
}

/// Where the last top-level MP4 box ends (as far as the boxes can be walked).
fn boxes_end(data: &[u8]) -> Option<u64> {
    let mut at = 0u64;
    while let Some(head) = data.get(at as usize..(at as usize).checked_add(16)?.min(data.len())) {
        if head.len() < 8 {
            break;
        }
        let size = match u32::from_be_bytes([head[0], head[1], head[2], head[3]]) {
            // The last box, to the end of the file.
            0 => return None,
            1 if head.len() >= 16 => u64::from_be_bytes(head[8..16].try_into().ok()?),
            1 => return Some(at + 16),
            s => u64::from(s),
        };
        if size < 8 {
            return None;
        }
        at = at.checked_add(size)?;
        if at >= data.len() as u64 {
            break;
        }
    }
    Some(at)
}

/// A reader over a byte slice that fails (None) instead of reading past its end.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)
            .map(|b| b.try_into().expect("take returned N bytes"))
    }
}

fn check_time_base((num, den): (i32, i32)) -> Result<(), VideoError> {
    if num <= 0 || den <= 0 {
        return Err(VideoError::Corrupt(format!("bad time base {num}/{den}")));
    }
    Ok(())
}

/// The presentation time of each packet (decode order).
///
/// Where every packet has a pts, that is it. Some containers store none: AVI stores only
/// the decode clock, and FFmpeg's parser then gives a pts to B-frames only (shown as soon
/// as decoded) and none to the reference frames, which MPEG-style decoders show when the
/// next reference frame arrives. The presentation order is rebuilt from that rule, and
/// where no packet has a pts, presentation order is taken to be decode order (a stream
/// without reordering). The decode clock (dts, or the packet count when the dts are
/// missing or not increasing) then gives the frames, in presentation order, their times.
fn presentation_times(packets: &[PacketInfo]) -> Vec<i64> {
    if packets.iter().all(|p| p.pts != NO_TS) {
        return packets.iter().map(|p| p.pts).collect();
    }
    let mut shown: Vec<usize> = Vec::with_capacity(packets.len());
    let mut held: Option<usize> = None;
    for (d, p) in packets.iter().enumerate() {
        if p.pts != NO_TS {
            shown.push(d);
        } else if let Some(r) = held.replace(d) {
            shown.push(r);
        }
    }
    shown.extend(held);
    let clock_ok =
        packets.iter().all(|p| p.dts != NO_TS) && packets.windows(2).all(|w| w[0].dts < w[1].dts);
    let mut keys = vec![0i64; packets.len()];
    for (q, &d) in shown.iter().enumerate() {
        keys[d] = if clock_ok { packets[q].dts } else { q as i64 };
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(pts: i64, dts: i64, key: bool) -> PacketInfo {
        PacketInfo {
            pts,
            dts,
            pos: -1,
            duration: 1,
            size: 1,
            key,
            corrupt: false,
            discard: false,
        }
    }

    /// AVI's MPEG-4 with B-frames: I0 P1 B2 B3 P4 B5 in decode order, the B-frames
    /// timed by the parser, the references not; shown as I0 B2 B3 P1 B5 P4.
    #[test]
    fn presentation_is_rebuilt_where_references_have_no_pts() {
        let n = NO_TS;
        let packets = [
            packet(n, 0, true),
            packet(n, 1, false),
            packet(2, 2, false),
            packet(3, 3, false),
            packet(n, 4, false),
            packet(5, 5, false),
        ];
        assert_eq!(presentation_times(&packets), [0, 3, 1, 2, 5, 4]);
        // Without any pts or a usable clock: decode order, counted.
        let bare = [packet(n, n, true), packet(n, n, false)];
        assert_eq!(presentation_times(&bare), [0, 1]);
    }

    fn index(entries: &[(i64, bool)]) -> FrameIndex {
        let entries = entries
            .iter()
            .map(|&(key, is_key)| Entry {
                key,
                pts: key,
                dts: NO_TS,
                pos: -1,
                is_key,
                shown: true,
            })
            .collect();
        FrameIndex::build("h264".into(), 2, 2, (1, 1), 0, entries).unwrap()
    }

    /// An open GOP in decode order: I0 P3 B1 B2 | I6 B4 B5 P9 B7 B8. B4 and B5 are
    /// leading pictures of I6: they start at I0.
    #[test]
    fn leading_pictures_start_a_key_frame_earlier() {
        let ix = index(&[
            (0, true),
            (3, false),
            (1, false),
            (2, false),
            (6, true),
            (4, false),
            (5, false),
            (9, false),
            (7, false),
            (8, false),
        ]);
        let starts: Vec<usize> = (0..ix.len()).map(|k| ix.start_for(k)).collect();
        assert_eq!(starts, [0, 0, 0, 0, 0, 0, 4, 4, 4, 4]);
        assert_eq!(ix.key_before(4), 0);
        assert_eq!(ix.key_before(0), 0);
        assert_eq!(ix.key_frames().collect::<Vec<_>>(), [0, 6]);
    }

    #[test]
    fn duplicate_times_are_refused() {
        let entries = vec![
            Entry {
                key: 5,
                pts: 5,
                dts: 5,
                pos: 0,
                is_key: true,
                shown: true,
            };
            2
        ];
        assert!(FrameIndex::build("h264".into(), 2, 2, (1, 1), 0, entries).is_err());
    }

    #[test]
    fn declared_lengths() {
        // EBML header of 4 bytes of payload, then a segment of 100 bytes.
        let mut mkv = vec![0x1a, 0x45, 0xdf, 0xa3, 0x84, 0, 0, 0, 0];
        mkv.extend([0x18, 0x53, 0x80, 0x67, 0x80 | 100]);
        assert_eq!(matroska_end(&mkv), Some(14 + 100));
        assert!(check_complete(&mkv).is_err());
        // An unknown segment size (all ones) declares nothing.
        mkv[13] = 0xff;
        assert_eq!(matroska_end(&mkv), None);
        // An 8-byte length marker, and a first byte of zero, never overflow.
        assert_eq!(
            ebml_vint(&[1, 0, 0, 0, 0, 0, 0, 5], false),
            Some((5, 8, false))
        );
        assert_eq!(ebml_vint(&[0, 1], false), None);
        // MP4: an 8-byte ftyp, then an mdat declaring 1000 bytes.
        let mut mp4 = vec![0, 0, 0, 8, b'f', b't', b'y', b'p'];
        mp4.extend([0, 0, 0x03, 0xe8, b'm', b'd', b'a', b't', 0, 0]);
        assert_eq!(boxes_end(&mp4), Some(1008));
        assert!(check_complete(&mp4).is_err());
        let riff = [b"RIFF".as_slice(), &4u32.to_le_bytes(), b"AVI "].concat();
        assert!(check_complete(&riff).is_ok());
    }
}
