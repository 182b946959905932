//! The `mask` member of a COCO panoptic image ([`super::Panoptic`]): its PNG of segment
//! ids with the table that labels them, which a mask field turns into the label map
//! (`fields/kind/mask.rs`), so that decoding stays with the other decoding, in the
//! preparing threads.
//!
//! It is also bytes nobody checked (a WebDataset shard may hold a member that starts
//! alike), so [`decode_panoptic_member`] checks every length against the member before
//! it allocates.
//!
//! Layout, little-endian: [`PANOPTIC_MAGIC`]; the image's width and height as the file
//! gives them (`u32` each); the PNG's path (its length, `u32`, then UTF-8), for messages;
//! the segment count (`u32`), then each segment's id (`u32`) and label (`u8`); then the
//! PNG's bytes, to the member's end.

/// The first bytes of a panoptic `mask` member.
const PANOPTIC_MAGIC: &[u8; 8] = b"NSPANO01";

/// Bytes of a segment in the table.
const SEGMENT: usize = 5;

/// A panoptic image's member, read.
#[derive(Debug, PartialEq)]
pub(crate) struct PanopticMember<'a> {
    /// The image's (width, height), as the annotation file gives it.
    pub(crate) size: (u32, u32),
    /// Where the PNG was read from.
    pub(crate) png_path: &'a str,
    /// (segment id, label), sorted by id.
    pub(crate) segments: Vec<(u32, u8)>,
    /// The PNG of segment ids.
    pub(crate) png: &'a [u8],
}

impl PanopticMember<'_> {
    /// The label of the pixels of segment `id`: its segment's, `unlisted` for an id the
    /// table does not list (0 included).
    pub(crate) fn label(&self, id: u32, unlisted: u8) -> u8 {
        match self.segments.binary_search_by_key(&id, |s| s.0) {
            Ok(at) => self.segments[at].1,
            Err(_) => unlisted,
        }
    }
}

/// Writes the member of an image of `size` whose segments are `segments` (id, label)
/// and whose PNG, read from `png_path`, is `png`, into `out`.
pub(crate) fn encode_panoptic_member(
    size: (u32, u32),
    png_path: &str,
    segments: &[(u32, u8)],
    png: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.reserve(28 + png_path.len() + SEGMENT * segments.len() + png.len());
    out.extend_from_slice(PANOPTIC_MAGIC);
    for v in [size.0, size.1, png_path.len() as u32] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(png_path.as_bytes());
    out.extend_from_slice(&(segments.len() as u32).to_le_bytes());
    for &(id, label) in segments {
        out.extend_from_slice(&id.to_le_bytes());
        out.push(label);
    }
    out.extend_from_slice(png);
}

/// The member `member` holds, or `None` when it is not a panoptic member (no
/// [`PANOPTIC_MAGIC`]).
///
/// # Errors
///
/// In words, what does not fit: a length past the member's end, a path that is not
/// UTF-8.
pub(crate) fn decode_panoptic_member(member: &[u8]) -> Option<Result<PanopticMember<'_>, String>> {
    let rest = member.strip_prefix(PANOPTIC_MAGIC)?;
    Some(decode(rest))
}

fn decode(mut rest: &[u8]) -> Result<PanopticMember<'_>, String> {
    let rest = &mut rest;
    let size = (word(rest)?, word(rest)?);
    let len = word(rest)? as usize;
    let png_path = std::str::from_utf8(take(rest, len)?)
        .map_err(|_| "a panoptic member whose PNG path is not UTF-8".to_string())?;
    let count = word(rest)? as usize;
    // The table's length is checked against the bytes left before it is allocated.
    let table = take(rest, count.saturating_mul(SEGMENT))?;
    let mut segments: Vec<(u32, u8)> = table
        .chunks_exact(SEGMENT)
        .map(|s| (u32::from_le_bytes([s[0], s[1], s[2], s[3]]), s[4]))
        .collect();
    segments.sort_unstable_by_key(|s| s.0);
    Ok(PanopticMember {
        size,
        png_path,
        segments,
        png: rest,
    })
}

/// The next `n` bytes of `rest`.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if rest.len() < n {
        return Err("a panoptic member cut short".to_string());
    }
    let (taken, after) = rest.split_at(n);
    *rest = after;
    Ok(taken)
}

/// The next `u32` of `rest`.
fn word(rest: &mut &[u8]) -> Result<u32, String> {
    let b = take(rest, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_back_and_every_cut_is_refused() {
        let mut member = Vec::new();
        encode_panoptic_member(
            (4, 3),
            "pan/a.png",
            &[(70, 9), (5, 1)],
            b"png bytes",
            &mut member,
        );
        let read = decode_panoptic_member(&member).unwrap().unwrap();
        assert_eq!(
            read,
            PanopticMember {
                size: (4, 3),
                png_path: "pan/a.png",
                segments: vec![(5, 1), (70, 9)],
                png: b"png bytes",
            }
        );
        assert_eq!(
            (read.label(70, 0), read.label(5, 0), read.label(0, 0)),
            (9, 1, 0)
        );
        assert_eq!(read.label(6, 255), 255);
        assert!(decode_panoptic_member(b"\x89PNG\r\n").is_none());
        // Cut anywhere before the PNG: refused, never a panic.
        let png_at = member.len() - b"png bytes".len();
        for end in PANOPTIC_MAGIC.len()..png_at {
            assert!(decode_panoptic_member(&member[..end]).unwrap().is_err());
        }
        // A table longer than the member: refused before allocating.
        let mut huge = member.clone();
        let count_at = 8 + 12 + "pan/a.png".len();
        huge[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_panoptic_member(&huge).unwrap().is_err());
    }
}
