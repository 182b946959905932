//! Ogg pages (RFC 3533) read from bytes in memory: the packets of the first logical
//! stream, each with the granule position of the page it ends on.
//!
//! Every page's CRC is checked: a damaged page fails the file rather than being skipped
//! as a player would skip it. Pages of other logical streams (a multiplexed file) are
//! passed over; a second stream chained after the first is refused, as the symphonia path
//! refuses one.

use std::ops::Range;

use crate::error::Cause;

/// Whether `data` starts with an Ogg page.
pub(super) fn is_ogg(data: &[u8]) -> bool {
    data.starts_with(b"OggS")
}

/// A packet: where its bytes lie, and the granule position of the page it ends on
/// (`None` for a packet that does not end its page, whose granule is someone else's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Packet {
    /// Its bytes, when contiguous in the file (the usual case); otherwise gathered into
    /// [`Packets::joined`].
    pub(super) bytes: PacketBytes,
    pub(super) granule: Option<u64>,
}

/// Where a packet's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PacketBytes {
    /// One range of the file.
    InFile(Range<usize>),
    /// Split across pages: a range of [`Packets::joined`].
    Joined(Range<usize>),
}

/// The packets of a stream, and the bytes of those split across pages.
#[derive(Debug, Default)]
pub(super) struct Packets {
    pub(super) packets: Vec<Packet>,
    /// Whether the stream's last page (its end-of-stream flag) was read.
    pub(super) complete: bool,
    joined: Vec<u8>,
}

impl Packets {
    /// The bytes of packet `i`.
    pub(super) fn bytes<'a>(&'a self, data: &'a [u8], i: usize) -> &'a [u8] {
        match &self.packets[i].bytes {
            PacketBytes::InFile(range) => &data[range.clone()],
            PacketBytes::Joined(range) => &self.joined[range.clone()],
        }
    }
}

/// A page's fixed header: 27 bytes, then the segment table.
const HEADER: usize = 27;

/// Reads the packets of the first logical stream of `data`; `None` if there are more than
/// `max_packets` (which bounds the memory a hostile file of tiny packets can ask for).
pub(super) fn packets(data: &[u8], max_packets: usize) -> Result<Option<Packets>, Cause> {
    read(data, max_packets, usize::MAX)
}

/// The first `count` packets of the first logical stream of `data` (its headers), or
/// fewer where the stream has fewer; the pages after them are not read.
pub(super) fn first_packets(data: &[u8], count: usize) -> Result<Packets, Cause> {
    Ok(read(data, usize::MAX, count)?.unwrap_or_default())
}

/// [`packets`], stopping once `stop_after` packets are read.
fn read(data: &[u8], max_packets: usize, stop_after: usize) -> Result<Option<Packets>, Cause> {
    let mut out = Packets::default();
    let mut serial = None;
    let mut ended = false;
    // The packet being gathered across pages: its pieces' ranges in the file.
    let mut pending: Vec<Range<usize>> = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let page = data.get(at..at + HEADER).ok_or_else(cut)?;
        if &page[..4] != b"OggS" {
            return Err(Cause::Corrupt(format!(
                "it holds bytes that are not an Ogg page at byte {at}"
            )));
        }
        if page[4] != 0 {
            return Err(Cause::Corrupt(format!(
                "its Ogg page at byte {at} has version {}",
                page[4]
            )));
        }
        let flags = page[5];
        let granule = u64::from_le_bytes(page[6..14].try_into().expect("8 bytes"));
        let page_serial = u32::from_le_bytes(page[14..18].try_into().expect("4 bytes"));
        let segments = usize::from(page[26]);
        let table = data
            .get(at + HEADER..at + HEADER + segments)
            .ok_or_else(cut)?;
        let body_len: usize = table.iter().map(|&s| usize::from(s)).sum();
        let body_start = at + HEADER + segments;
        let end = body_start + body_len;
        let whole = data.get(at..end).ok_or_else(cut)?;
        if crc(whole) != u32::from_le_bytes(page[22..26].try_into().expect("4 bytes")) {
            return Err(Cause::Corrupt(format!(
                "its Ogg page at byte {at} fails its checksum"
            )));
        }
        let first_page = flags & 0x02 != 0;
        match serial {
            None if first_page => serial = Some(page_serial),
            None => {
                return Err(Cause::Corrupt(
                    "its first Ogg page does not begin a stream".into(),
                ))
            }
            Some(s) if s != page_serial => {
                if first_page && ended {
                    return Err(Cause::Corrupt(
                        "it chains a second stream after the first (not supported)".into(),
                    ));
                }
                at = end;
                continue;
            }
            Some(_) => {}
        }
        if ended {
            return Err(Cause::Corrupt(
                "its stream continues after its last page".into(),
            ));
        }
        // A page continues a packet exactly when one is left unfinished.
        let continued = flags & 0x01 != 0;
        if continued == pending.is_empty() {
            return Err(Cause::Corrupt(format!(
                "its Ogg page at byte {at} breaks the packet before it"
            )));
        }
        let mut from = body_start;
        // Granule positions of -1 mark pages on which no packet ends.
        let page_granule = (granule != u64::MAX).then_some(granule);
        let last_end = table.iter().rposition(|&s| s < 255);
        for (i, &size) in table.iter().enumerate() {
            let to = from + usize::from(size);
            pending.push(from..to);
            from = to;
            if size < 255 {
                let granule = if Some(i) == last_end {
                    page_granule
                } else {
                    None
                };
                let bytes = if pending.len() == 1 || contiguous(&pending) {
                    PacketBytes::InFile(pending[0].start..pending[pending.len() - 1].end)
                } else {
                    let start = out.joined.len();
                    for piece in &pending {
                        out.joined.extend_from_slice(&data[piece.clone()]);
                    }
                    PacketBytes::Joined(start..out.joined.len())
                };
                if out.packets.len() == max_packets {
                    return Ok(None);
                }
                out.packets.push(Packet { bytes, granule });
                pending.clear();
                if out.packets.len() == stop_after {
                    return Ok(Some(out));
                }
            }
        }
        ended = flags & 0x04 != 0;
        at = end;
    }
    if !pending.is_empty() {
        return Err(cut());
    }
    out.complete = ended;
    Ok(Some(out))
}

/// Whether `pieces` follow one another in the file (a packet's segments within a page).
fn contiguous(pieces: &[Range<usize>]) -> bool {
    pieces.windows(2).all(|w| w[0].end == w[1].start)
}

fn cut() -> Cause {
    Cause::Corrupt("it is truncated: its last Ogg page is cut short".into())
}

/// Ogg's CRC-32 (polynomial 0x04C11DB7, not reflected, no final xor) of a page with its
/// checksum field taken as zero.
fn crc(page: &[u8]) -> u32 {
    let mut crc = 0u32;
    for (i, &byte) in page.iter().enumerate() {
        let byte = if (22..26).contains(&i) { 0 } else { byte };
        crc = (crc << 8) ^ CRC_TABLE[((crc >> 24) as u8 ^ byte) as usize];
    }
    crc
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            r = if r & 0x8000_0000 != 0 {
                (r << 1) ^ 0x04C1_1DB7
            } else {
                r << 1
            };
            bit += 1;
        }
        table[i] = r;
        i += 1;
    }
    table
};
