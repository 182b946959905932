//! Records: how a source hands over a sample of several members (an image and its
//! caption, a segment of a recording and its transcript), for a loader given fields
//! ([`crate::fields`]).
//!
//! A record comes in one of two forms, told apart by its first bytes:
//! - **a tar member run**: WebDataset shards' own bytes, the run of a key's members read
//!   as one range ([`TarShards::records_from_listing`](super::TarShards::records_from_listing));
//!   a member's extension is what follows its key (`000123.seg.png`: `seg.png`).
//! - **a frame**, for sources whose members are not stored together (a manifest's
//!   recording and its `text`): [`FRAME_MAGIC`], a little-endian `u32` count, each
//!   member's name (a `u8` length, then the name, its extension) and data length (`u64`),
//!   then the data of each in order, filling the record exactly.
//!
//! Both are parsed as bytes nobody checked: every length is bounded by what is left.

use std::ops::Range;

use super::tar;
use crate::error::Cause;

/// The first bytes of a framed record (a tar header starts with a member's name, which
/// holds no newline).
pub(crate) const FRAME_MAGIC: &[u8; 8] = b"NSREC1\n\0";

/// The most members a frame holds.
const MAX_FRAME_MEMBERS: u32 = 256;

/// One member of a record: its extension, and where its data lies in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordMember {
    /// What a field's `members` name it by (`jpg`, `txt`, `text`).
    pub(crate) ext: String,
    /// Its data's extent in the record.
    pub(crate) data: Range<usize>,
}

/// The members of `record`, in either form.
///
/// # Errors
///
/// [`Cause::Corrupt`] for a damaged header or frame, or a member past the record's end.
pub(crate) fn members(record: &[u8]) -> Result<Vec<RecordMember>, Cause> {
    if let Some(frame) = record.strip_prefix(FRAME_MAGIC) {
        return frame_members(frame, FRAME_MAGIC.len());
    }
    Ok(tar::record_members(record)?
        .into_iter()
        .map(|m| RecordMember {
            ext: tar::member_ext(&m.name).to_string(),
            data: m.offset as usize..(m.offset + m.len) as usize,
        })
        .collect())
}

/// Appends the frame of `members` (extension, data) to `out`.
pub(crate) fn write_frame(members: &[(&str, &[u8])], out: &mut Vec<u8>) {
    out.extend_from_slice(FRAME_MAGIC);
    out.extend_from_slice(&(members.len() as u32).to_le_bytes());
    for (ext, data) in members {
        debug_assert!(ext.len() <= usize::from(u8::MAX));
        out.push(ext.len() as u8);
        out.extend_from_slice(ext.as_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    }
    for (_, data) in members {
        out.extend_from_slice(data);
    }
}

/// Bytes of the frame of members of these extensions and data lengths.
pub(crate) fn frame_len<'a>(members: impl IntoIterator<Item = (&'a str, u64)>) -> u64 {
    let mut len = FRAME_MAGIC.len() as u64 + 4;
    for (ext, data) in members {
        len += 1 + ext.len() as u64 + 8 + data;
    }
    len
}

fn frame_members(frame: &[u8], base: usize) -> Result<Vec<RecordMember>, Cause> {
    let corrupt = |what: &str| Cause::Corrupt(format!("the record's frame {what}"));
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], Cause> {
        let bytes = frame
            .get(at..at.checked_add(n).ok_or_else(|| corrupt("overflows"))?)
            .ok_or_else(|| corrupt("ends inside its table of members"))?;
        at += n;
        Ok(bytes)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    if count > MAX_FRAME_MEMBERS {
        return Err(corrupt(&format!(
            "lists {count} members (at most {MAX_FRAME_MEMBERS})"
        )));
    }
    let mut table = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let name_len = usize::from(take(1)?[0]);
        let ext = String::from_utf8_lossy(take(name_len)?).into_owned();
        let len = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        table.push((ext, len));
    }
    let mut start = at;
    let mut members = Vec::with_capacity(table.len());
    for (ext, len) in table {
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= frame.len())
            .ok_or_else(|| corrupt(&format!("says member {ext:?} runs past its end")))?;
        members.push(RecordMember {
            ext,
            data: base + start..base + end,
        });
        start = end;
    }
    if start != frame.len() {
        return Err(corrupt("holds bytes after its last member"));
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_and_every_damage_is_corrupt() {
        let mut record = Vec::new();
        write_frame(
            &[("audio", b"RIFF...."), ("text", b"hello"), ("x", b"")],
            &mut record,
        );
        assert_eq!(
            record.len() as u64,
            frame_len([("audio", 8), ("text", 5), ("x", 0)])
        );
        let found = members(&record).unwrap();
        let exts: Vec<&str> = found.iter().map(|m| m.ext.as_str()).collect();
        assert_eq!(exts, ["audio", "text", "x"]);
        assert_eq!(&record[found[1].data.clone()], b"hello");
        assert!(found[2].data.is_empty());
        for cut in 1..record.len() {
            let got = members(&record[..cut]);
            assert!(
                matches!(got, Err(Cause::Corrupt(_))),
                "cut at {cut}: {got:?}"
            );
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(members(&longer).is_err());
        let mut huge = record.clone();
        let len_at = FRAME_MAGIC.len() + 4 + 1 + 5;
        huge[len_at..len_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(members(&huge).is_err());
        let mut many = FRAME_MAGIC.to_vec();
        many.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(members(&many).is_err());
    }
}
