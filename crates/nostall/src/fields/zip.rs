//! The entries of a ZIP archive, as an `.npz` member holds its arrays (`numpy.savez`
//! stores one `.npy` entry an array, `savez_compressed` deflates it), and an entry's
//! bytes, inflated to exactly the size the archive declares for it and never past a
//! bound its caller sets.
//!
//! The entries are found from the central directory at the archive's end, as `zipfile`
//! and `numpy.load` find them (the local headers NumPy writes declare no sizes: ZIP64
//! placeholders, the sizes in an extra field). Every offset and size read is checked
//! against the archive before it is used; the directory is walked once, keeping nothing;
//! an entry declaring more bytes than its caller's bound is refused before anything of
//! it is inflated, and one whose stream inflates past what it declares is refused at the
//! first byte past it. What an entry costs is its declared size, under that bound.
//!
//! Read: stored and deflated entries, their CRC-32 checked as `zipfile` checks it, ZIP64
//! sizes and offsets in an entry's extra field. Refused: a ZIP64 end of directory (an
//! archive of 65 535 entries or 4 GiB, past any field's arrays), archives split over
//! disks, encrypted entries, other compression methods.

use std::io::Read;

/// The signature of the end of the central directory.
const END: u32 = 0x0605_4b50;
/// The end of the central directory's bytes before its comment.
const END_BYTES: usize = 22;
/// The signature of an entry of the central directory.
const DIRECTORY_ENTRY: u32 = 0x0201_4b50;
/// An entry of the central directory's bytes before its name.
const DIRECTORY_ENTRY_BYTES: usize = 46;
/// The signature of an entry's local header.
const LOCAL: u32 = 0x0403_4b50;
/// A local header's bytes before its name.
const LOCAL_BYTES: usize = 30;
/// The extra field holding an entry's ZIP64 sizes and offset.
const ZIP64_EXTRA: u16 = 0x0001;
/// What a 32-bit size or offset holds when its value is in the ZIP64 extra field.
const IN_ZIP64: u32 = u32::MAX;

/// An archive's bytes and its central directory.
pub(super) struct Archive<'a> {
    bytes: &'a [u8],
    directory: &'a [u8],
    entries: usize,
}

/// One entry of the central directory.
pub(super) struct Entry<'a> {
    /// Its name, as the archive spells it.
    pub(super) name: &'a [u8],
    /// The bytes it inflates to, as the directory declares.
    pub(super) size: u64,
    /// Its bytes in the archive.
    packed: u64,
    /// Where its local header starts.
    offset: u64,
    flags: u16,
    method: u16,
    crc: u32,
}

impl<'a> Archive<'a> {
    /// The archive `bytes`, its central directory found.
    ///
    /// # Errors
    ///
    /// What is wrong, in words: no end of central directory (not a ZIP archive, or one
    /// cut short), a ZIP64 or multi-disk archive, a directory outside the archive.
    pub(super) fn open(bytes: &'a [u8]) -> Result<Archive<'a>, String> {
        // The end record is the archive's last 22 bytes but for a comment of at most
        // 65 535 bytes after it: the last signature in that reach whose comment fits.
        let last = bytes
            .len()
            .checked_sub(END_BYTES)
            .ok_or("not a ZIP archive (shorter than its end record)")?;
        let first = last.saturating_sub(u16::MAX as usize);
        let at = (first..=last)
            .rev()
            .find(|&at| {
                u32_at(bytes, at) == Some(END)
                    && u16_at(bytes, at + 20)
                        .is_some_and(|c| at + END_BYTES + c as usize <= bytes.len())
            })
            .ok_or("not a ZIP archive (no end of central directory: cut short?)")?;
        let field = |offset| u16_at(bytes, at + offset).expect("within the end record");
        let (disk, directory_disk, here, entries) = (field(4), field(6), field(8), field(10));
        let size = u32_at(bytes, at + 12).expect("within the end record");
        let offset = u32_at(bytes, at + 16).expect("within the end record");
        if entries == u16::MAX || size == IN_ZIP64 || offset == IN_ZIP64 {
            return Err(
                "a ZIP64 archive (65 535 entries or 4 GiB and more), past any \
                        field's arrays"
                    .into(),
            );
        }
        if disk != 0 || directory_disk != 0 || here != entries {
            return Err("an archive split over disks".into());
        }
        let directory = (offset as usize)
            .checked_add(size as usize)
            .filter(|&end| end <= at)
            .map(|end| &bytes[offset as usize..end])
            .ok_or("a central directory outside the archive")?;
        Ok(Archive {
            bytes,
            directory,
            entries: entries.into(),
        })
    }

    /// The entries of the central directory, in order; an error ends them.
    pub(super) fn entries(&self) -> impl Iterator<Item = Result<Entry<'a>, String>> {
        let mut rest = self.directory;
        let mut left = self.entries;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let entry = entry(&mut rest);
            if entry.is_err() {
                left = 0;
            }
            Some(entry)
        })
    }

    /// `entry`'s bytes: the archive's own for a stored entry, inflated into `buffer` for a
    /// deflated one; at most `limit` bytes.
    ///
    /// # Errors
    ///
    /// What is wrong, in words: it declares more than `limit` bytes (refused before
    /// anything is inflated), it is encrypted or compressed otherwise, its local header
    /// or its bytes lie outside the archive, its stream is damaged or inflates to other
    /// than it declares, its CRC-32 is not that of its bytes.
    pub(super) fn contents<'s>(
        &'s self,
        entry: &Entry<'_>,
        limit: usize,
        buffer: &'s mut Vec<u8>,
    ) -> Result<&'s [u8], String> {
        let size = usize::try_from(entry.size)
            .ok()
            .filter(|&size| size <= limit)
            .ok_or_else(|| {
                format!(
                    "it declares {} bytes, more than its array takes (at most {limit})",
                    entry.size
                )
            })?;
        if entry.flags & 1 == 1 {
            return Err("it is encrypted".into());
        }
        let packed = self.local_data(entry)?;
        let bytes = match entry.method {
            0 if packed.len() == size => packed,
            0 => {
                return Err(format!(
                    "it is stored in {} bytes and declares {size}",
                    packed.len()
                ))
            }
            8 => {
                buffer.clear();
                buffer.resize(size, 0);
                let mut stream = flate2::bufread::DeflateDecoder::new(packed);
                stream
                    .read_exact(buffer)
                    .map_err(|e| format!("its deflate stream: {e}, short of {size} bytes"))?;
                // One byte more than it declares is enough to refuse it: nothing past it
                // is inflated.
                if stream.read(&mut [0]).map_err(|e| e.to_string())? != 0 {
                    return Err(format!(
                        "it inflates to more than the {size} bytes it declares"
                    ));
                }
                buffer.as_slice()
            }
            m => {
                return Err(format!(
                    "it is compressed with method {m} (stored and deflate are read)"
                ))
            }
        };
        let mut crc = flate2::Crc::new();
        crc.update(bytes);
        if crc.sum() != entry.crc {
            return Err("its CRC-32 is not that of its bytes (damaged)".into());
        }
        Ok(bytes)
    }

    /// The bytes of `entry` after its local header, which must name it as the directory
    /// does.
    fn local_data(&self, entry: &Entry<'_>) -> Result<&'a [u8], String> {
        let outside = || "its local header lies outside the archive".to_string();
        let at = usize::try_from(entry.offset).map_err(|_| outside())?;
        if u32_at(self.bytes, at) != Some(LOCAL) {
            return Err("no local header where the directory says".into());
        }
        let name_len = u16_at(self.bytes, at + 26).ok_or_else(outside)? as usize;
        let extra_len = u16_at(self.bytes, at + 28).ok_or_else(outside)? as usize;
        let name = at + LOCAL_BYTES;
        if self.bytes.get(name..name + name_len) != Some(entry.name) {
            return Err("its local header names another entry".into());
        }
        let start = name + name_len + extra_len;
        usize::try_from(entry.packed)
            .ok()
            .and_then(|packed| self.bytes.get(start..start.checked_add(packed)?))
            .ok_or_else(|| "its bytes run past the archive's end".into())
    }
}

/// The entry of the central directory at the start of `rest`, which is moved past it.
fn entry<'a>(rest: &mut &'a [u8]) -> Result<Entry<'a>, String> {
    let bytes = *rest;
    let short = || "a central directory cut short".to_string();
    if u32_at(bytes, 0) != Some(DIRECTORY_ENTRY) {
        return Err("a central directory entry without its signature".into());
    }
    let field16 = |at| u16_at(bytes, at).ok_or_else(short);
    let field32 = |at| u32_at(bytes, at).ok_or_else(short);
    let (flags, method) = (field16(8)?, field16(10)?);
    let (crc, packed, size) = (field32(16)?, field32(20)?, field32(24)?);
    let (name_len, extra_len, comment_len) = (
        field16(28)? as usize,
        field16(30)? as usize,
        field16(32)? as usize,
    );
    let disk = field16(34)?;
    let offset = field32(42)?;
    let name = DIRECTORY_ENTRY_BYTES;
    let extra = name + name_len;
    let end = extra + extra_len + comment_len;
    if bytes.len() < end {
        return Err(short());
    }
    // ZIP64: each value too large for its field is in the extra field, in this order.
    let mut wide = Zip64::find(&bytes[extra..extra + extra_len]);
    let mut value = |narrow: u32| match narrow {
        IN_ZIP64 => wide
            .next()
            .ok_or("a ZIP64 value missing from its extra field"),
        n => Ok(n.into()),
    };
    let size = value(size)?;
    let packed = value(packed)?;
    let offset = value(offset)?;
    if disk != 0 {
        return Err("an entry on another disk".into());
    }
    *rest = &bytes[end..];
    Ok(Entry {
        name: &bytes[name..extra],
        size,
        packed,
        offset,
        flags,
        method,
        crc,
    })
}

/// The 64-bit values of an entry's ZIP64 extra field, in order.
struct Zip64<'a>(&'a [u8]);

impl<'a> Zip64<'a> {
    /// The ZIP64 field among `extra`'s fields (none: no values).
    fn find(mut extra: &'a [u8]) -> Zip64<'a> {
        while let (Some(id), Some(len)) = (u16_at(extra, 0), u16_at(extra, 2)) {
            let Some(data) = extra.get(4..4 + len as usize) else {
                break;
            };
            if id == ZIP64_EXTRA {
                return Zip64(data);
            }
            extra = &extra[4 + len as usize..];
        }
        Zip64(&[])
    }
}

impl Iterator for Zip64<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let (value, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_le_bytes(*value))
    }
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::Write;

    use super::*;

    /// How [`zip`] writes an entry.
    #[derive(Clone, Copy, PartialEq)]
    pub(in crate::fields) enum Method {
        Stored,
        Deflated,
        /// Stored, its sizes and offset in the directory as ZIP64 values.
        Zip64,
    }

    /// A ZIP archive of `entries` as `zipfile` writes one.
    pub(in crate::fields) fn zip(entries: &[(&str, &[u8], Method)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut directory = Vec::new();
        for &(name, data, method) in entries {
            let mut crc = flate2::Crc::new();
            crc.update(data);
            let packed = match method {
                Method::Deflated => {
                    let mut encoder = flate2::write::DeflateEncoder::new(
                        Vec::new(),
                        flate2::Compression::default(),
                    );
                    encoder.write_all(data).unwrap();
                    encoder.finish().unwrap()
                }
                _ => data.to_vec(),
            };
            let code: u16 = if method == Method::Deflated { 8 } else { 0 };
            let offset = out.len() as u32;
            let common = |out: &mut Vec<u8>| {
                out.extend_from_slice(&20u16.to_le_bytes()); // version needed
                out.extend_from_slice(&0u16.to_le_bytes()); // flags
                out.extend_from_slice(&code.to_le_bytes());
                out.extend_from_slice(&[0; 4]); // time, date
                out.extend_from_slice(&crc.sum().to_le_bytes());
            };
            out.extend_from_slice(&LOCAL.to_le_bytes());
            common(&mut out);
            out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&packed);

            let wide = method == Method::Zip64;
            let narrow = |value: u32| if wide { IN_ZIP64 } else { value };
            directory.extend_from_slice(&DIRECTORY_ENTRY.to_le_bytes());
            directory.extend_from_slice(&20u16.to_le_bytes()); // version made by
            common(&mut directory);
            directory.extend_from_slice(&narrow(packed.len() as u32).to_le_bytes());
            directory.extend_from_slice(&narrow(data.len() as u32).to_le_bytes());
            directory.extend_from_slice(&(name.len() as u16).to_le_bytes());
            directory.extend_from_slice(&(if wide { 28u16 } else { 0 }).to_le_bytes());
            directory.extend_from_slice(&[0; 10]); // comment, disk, attributes
            directory.extend_from_slice(&narrow(offset).to_le_bytes());
            directory.extend_from_slice(name.as_bytes());
            if wide {
                directory.extend_from_slice(&ZIP64_EXTRA.to_le_bytes());
                directory.extend_from_slice(&24u16.to_le_bytes());
                for value in [data.len(), packed.len(), offset as usize] {
                    directory.extend_from_slice(&(value as u64).to_le_bytes());
                }
            }
        }
        let start = out.len() as u32;
        out.extend_from_slice(&directory);
        out.extend_from_slice(&END.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // disks
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&(directory.len() as u32).to_le_bytes());
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    }

    /// Each entry's name and bytes, read with a bound of `limit`.
    fn read(archive: &[u8], limit: usize) -> Result<Vec<(String, Vec<u8>)>, String> {
        let archive = Archive::open(archive)?;
        let mut buffer = Vec::new();
        let mut read = Vec::new();
        for entry in archive.entries() {
            let entry = entry?;
            let bytes = archive.contents(&entry, limit, &mut buffer)?.to_vec();
            read.push((String::from_utf8_lossy(entry.name).into_owned(), bytes));
        }
        Ok(read)
    }

    #[test]
    fn stored_deflated_and_zip64_entries_read_as_written() {
        let text = b"the same words again and again and again".repeat(20);
        let entries = [
            ("a.npy", b"stored bytes".as_slice(), Method::Stored),
            ("b.npy", &text, Method::Deflated),
            ("c.npy", b"", Method::Deflated),
            ("d.npy", b"wide", Method::Zip64),
        ];
        let mut archive = zip(&entries);
        let want: Vec<(String, Vec<u8>)> = entries
            .iter()
            .map(|(name, data, _)| (name.to_string(), data.to_vec()))
            .collect();
        assert_eq!(read(&archive, 1 << 20).unwrap(), want);
        // A comment after the end record.
        let len = archive.len();
        archive[len - 2..].copy_from_slice(&5u16.to_le_bytes());
        archive.extend_from_slice(b"notes");
        assert_eq!(read(&archive, 1 << 20).unwrap(), want);
    }

    #[test]
    fn an_entry_over_its_bound_is_refused_before_it_is_inflated() {
        // 64 MiB of zeros deflate to 64 KiB: declared, it is refused for its size.
        let zeros = vec![0u8; 64 << 20];
        let bomb = zip(&[("a.npy", &zeros, Method::Deflated)]);
        assert!(bomb.len() < 1 << 20);
        let why = read(&bomb, 4096).unwrap_err();
        assert!(why.contains("declares 67108864 bytes"), "{why}");
        assert!(why.contains("at most 4096"), "{why}");
        drop(zeros);
        // Declaring 100 of its bytes: refused at the 101st, nothing past it inflated.
        let mut lying = bomb.clone();
        let directory = lying.len() - END_BYTES - (DIRECTORY_ENTRY_BYTES + 5);
        lying[directory + 24..directory + 28].copy_from_slice(&100u32.to_le_bytes());
        let why = read(&lying, 4096).unwrap_err();
        assert_eq!(why, "it inflates to more than the 100 bytes it declares");
        // Declaring more than it holds.
        let short = zip(&[("a.npy", b"abc".as_slice(), Method::Deflated)]);
        let mut long = short.clone();
        let directory = long.len() - END_BYTES - (DIRECTORY_ENTRY_BYTES + 5);
        long[directory + 24..directory + 28].copy_from_slice(&4u32.to_le_bytes());
        assert!(read(&long, 4096).unwrap_err().contains("short of 4 bytes"));
    }

    #[test]
    fn damaged_and_unread_archives_are_reasons_not_panics() {
        let good = zip(&[
            ("a.npy", b"first".as_slice(), Method::Deflated),
            ("b.npy", b"second".as_slice(), Method::Stored),
        ]);
        let set = |at: usize, bytes: &[u8]| {
            let mut archive = good.clone();
            archive[at..at + bytes.len()].copy_from_slice(bytes);
            archive
        };
        let end = good.len() - END_BYTES;
        let cases = [
            (
                b"PK\x03\x04, and nothing else of an archive".to_vec(),
                "no end of central directory",
            ),
            (Vec::new(), "shorter than its end record"),
            (set(end + 10, &[0xff, 0xff]), "ZIP64"),
            (set(end + 4, &[1, 0]), "split over disks"),
            (set(end + 16, &[0xfe, 0xff, 0, 0]), "outside the archive"),
            (set(0, b"PK\x05\x05"), "no local header"),
            (set(LOCAL_BYTES, b"x"), "names another entry"),
        ];
        for (archive, expect) in cases {
            let why = read(&archive, 1 << 10).unwrap_err();
            assert!(why.contains(expect), "{expect}: {why}");
        }
        let directory = end - 2 * DIRECTORY_ENTRY_BYTES - 10;
        for (at, value, expect) in [
            (directory + 8, 1u32, "encrypted"),
            (directory + 10, 12, "method 12"),
            (directory + 16, 1, "CRC-32"),
            (directory + 42, 3, "no local header"),
            (directory + 20, 9999, "past the archive's end"),
            (directory + 28, 0xffff, "cut short"),
            (directory + 34, 1, "another disk"),
            (
                directory + DIRECTORY_ENTRY_BYTES + 5 + 20,
                4,
                "stored in 4 bytes",
            ),
            (
                directory + DIRECTORY_ENTRY_BYTES + 5 + 24,
                IN_ZIP64,
                "ZIP64 value missing",
            ),
        ] {
            let mut archive = good.clone();
            let bytes = value.to_le_bytes();
            // The disk and the name's length are 16-bit fields; the rest, 32-bit (a
            // flag or method written with the 16 bits after it, zeros).
            let width = if [28, 34].contains(&(at - directory)) {
                2
            } else {
                4
            };
            archive[at..at + width].copy_from_slice(&bytes[..width]);
            let why = read(&archive, 1 << 10).unwrap_err();
            assert!(why.contains(expect), "{expect} (at {at}): {why}");
        }
        // Every cut of the archive is an error, never a panic.
        for cut in 0..good.len() {
            assert!(read(&good[..cut], 1 << 10).is_err(), "cut at {cut}");
        }
    }
}
