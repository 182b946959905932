//! The page headers of a column chunk, read before the decoder sees them: a header from a
//! file declares how large its page is once decompressed, and the decoder allocates that
//! much, so a crafted header could ask for gigabytes. Walking the headers first bounds
//! every page and the chunk as a whole.
//!
//! A page header is a Thrift struct in the compact protocol: fields 2 and 3 are the page's
//! uncompressed and compressed sizes; every other field is skipped by its type. The footer
//! is one too, and is walked the same way before the `parquet` crate parses it
//! ([`check_footer`]): that parser takes seconds over a few crafted bytes (collections
//! of more elements than bytes), this walk refuses them in a pass.

/// Deeper nesting than any page header has (a header nests three structs at most).
const MAX_DEPTH: usize = 16;

/// The most a page may grow when decompressed, as a multiple of its compressed size (plus
/// [`RATIO_SLACK`]): encoded images and audio barely compress, so a page declaring more is
/// damage or a bomb, and a small file must not make the decoder allocate gigabytes.
const MAX_RATIO: u64 = 256;

/// Bytes a page may decompress to beyond [`MAX_RATIO`] times its size: small pages.
const RATIO_SLACK: u64 = 64 << 10;

/// A page's sizes, as its header declares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Page {
    header: u64,
    compressed: u64,
    uncompressed: u64,
}

/// Walks the pages of a column chunk held in `chunk` (its whole extent) and returns the
/// bytes they decompress to, together: an error if a header is damaged, a page overruns
/// the chunk, or the pages would decompress to more than `limit` bytes.
pub(super) fn decompressed_size(chunk: &[u8], limit: u64) -> Result<u64, String> {
    let (mut at, mut total) = (0usize, 0u64);
    while at < chunk.len() {
        let page =
            page(&chunk[at..]).map_err(|e| format!("page header at chunk byte {at}: {e}"))?;
        if page.uncompressed > page.compressed.saturating_mul(MAX_RATIO) + RATIO_SLACK {
            return Err(format!(
                "the page at chunk byte {at} declares {} bytes decompressed from {}: more than \
                 {MAX_RATIO} times (damage, or a decompression bomb)",
                page.uncompressed, page.compressed
            ));
        }
        total = total.saturating_add(page.uncompressed);
        if total > limit {
            return Err(format!(
                "its pages decompress to more than {limit} bytes (a page at chunk byte {at} \
                 declares {} bytes)",
                page.uncompressed
            ));
        }
        let end = page
            .header
            .checked_add(page.compressed)
            .and_then(|len| u64::try_from(at).ok()?.checked_add(len))
            .filter(|&end| end <= chunk.len() as u64)
            .ok_or_else(|| {
                format!(
                    "the page at chunk byte {at} declares {} bytes, past the chunk's end ({})",
                    page.compressed,
                    chunk.len()
                )
            })?;
        at = end as usize;
    }
    Ok(total)
}

/// Walks a footer (a Thrift struct filling `bytes`) without keeping anything: an error if
/// it is cut off, nested too deep, or declares collections of more elements than bytes.
pub(super) fn check_footer(bytes: &[u8]) -> Result<(), String> {
    let mut cursor = Cursor { bytes, at: 0 };
    cursor.skip(STRUCT, 0)?;
    Ok(())
}

/// The header at the start of `bytes`.
fn page(bytes: &[u8]) -> Result<Page, String> {
    let mut cursor = Cursor { bytes, at: 0 };
    let (mut compressed, mut uncompressed) = (None, None);
    cursor.fields(0, &mut |cursor, id, kind| match (id, kind) {
        (2, I32) => {
            uncompressed = Some(cursor.size()?);
            Ok(())
        }
        (3, I32) => {
            compressed = Some(cursor.size()?);
            Ok(())
        }
        _ => cursor.skip(kind, 0),
    })?;
    match (uncompressed, compressed) {
        (Some(uncompressed), Some(compressed)) => Ok(Page {
            header: cursor.at as u64,
            compressed,
            uncompressed,
        }),
        _ => Err("no page sizes".into()),
    }
}

const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const I8: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// A reader of the Thrift compact protocol over bytes from a file: every length is
/// checked against what is left.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("cut off")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// A size field: a non-negative i32.
    fn size(&mut self) -> Result<u64, String> {
        let v = self.zigzag()?;
        u64::try_from(v)
            .ok()
            .filter(|&v| v <= i32::MAX as u64)
            .ok_or_else(|| format!("size {v}"))
    }

    fn advance(&mut self, n: u64) -> Result<(), String> {
        let end = (self.at as u64)
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len() as u64)
            .ok_or("cut off")?;
        self.at = end as usize;
        Ok(())
    }

    /// The fields of a struct, each handed to `field` with its id and type, to its stop.
    fn fields(
        &mut self,
        depth: usize,
        field: &mut dyn FnMut(&mut Self, i64, u8) -> Result<(), String>,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("nested too deep".into());
        }
        let mut id = 0i64;
        loop {
            let b = self.byte()?;
            if b == 0 {
                return Ok(());
            }
            let (delta, kind) = (b >> 4, b & 0x0f);
            id = if delta == 0 {
                self.zigzag()?
            } else {
                id + i64::from(delta)
            };
            field(self, id, kind)?;
        }
    }

    /// Skips a value of type `kind` (a struct field's: booleans carry their value in the
    /// type).
    fn skip(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        match kind {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            I8 => self.advance(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.advance(8),
            BINARY => {
                let len = self.varint()?;
                self.advance(len)
            }
            LIST | SET => {
                let b = self.byte()?;
                let (count, element) = match b >> 4 {
                    15 => (self.varint()?, b & 0x0f),
                    n => (u64::from(n), b & 0x0f),
                };
                self.elements(count, &[element], depth)
            }
            MAP => {
                let count = self.varint()?;
                if count == 0 {
                    return Ok(());
                }
                let b = self.byte()?;
                self.elements(count, &[b >> 4, b & 0x0f], depth)
            }
            STRUCT => self.fields(depth + 1, &mut |c, _, kind| c.skip(kind, depth + 1)),
            other => Err(format!("unknown field type {other}")),
        }
    }

    /// Skips `count` elements of a list, set or map, each of `kinds` in turn.
    fn elements(&mut self, count: u64, kinds: &[u8], depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("nested too deep".into());
        }
        // Each element takes at least a byte: a count beyond what is left is damage.
        if count > (self.bytes.len() - self.at) as u64 {
            return Err(format!("{count} elements in a few bytes"));
        }
        for _ in 0..count {
            for &kind in kinds {
                match kind {
                    // In a collection a boolean is a byte of its own.
                    BOOL_TRUE | BOOL_FALSE => self.advance(1)?,
                    kind => self.skip(kind, depth + 1)?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as a writer makes one: type, sizes, a data page header with statistics.
    fn header(uncompressed: i32, compressed: i32) -> Vec<u8> {
        let zigzag = |v: i64| -> Vec<u8> {
            let mut v = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let b = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        };
        let mut h = vec![0x15];
        h.extend(zigzag(0)); // 1: type DATA_PAGE
        h.push(0x15);
        h.extend(zigzag(uncompressed.into()));
        h.push(0x15);
        h.extend(zigzag(compressed.into()));
        h.push(0x2c); // 5: data_page_header, a struct
        h.push(0x15);
        h.extend(zigzag(3)); // num_values
        h.push(0x48); // 4 (after 0): statistics? no: field 4 binary
        h.push(2);
        h.extend([7, 7]);
        h.push(0x19); // a list of 2 i32
        h.push(0x25);
        h.extend(zigzag(1));
        h.extend(zigzag(2));
        h.push(0x11); // a boolean field, true
        h.push(0); // end of data_page_header
        h.push(0); // end of the page header
        h
    }

    #[test]
    fn pages_are_walked_and_their_sizes_summed() {
        let mut chunk = header(10, 4);
        chunk.extend([1, 2, 3, 4]);
        chunk.extend(header(20, 2));
        chunk.extend([5, 6]);
        assert_eq!(decompressed_size(&chunk, 100), Ok(30));
        assert!(decompressed_size(&chunk, 29)
            .unwrap_err()
            .contains("more than 29"));
    }

    #[test]
    fn a_footer_is_walked_and_collections_larger_than_it_refused() {
        // A struct with a list of two i32 and a binary, then its end.
        let footer = [0x19, 0x25, 0x02, 0x04, 0x18, 0x01, 0x61, 0x00];
        assert_eq!(check_footer(&footer), Ok(()));
        assert!(check_footer(&footer[..5]).is_err());
        // A list of 2^31 elements of a type that takes no bytes.
        assert!(check_footer(&[0x19, 0xf0, 0xff, 0xff, 0xff, 0x07, 0x00]).is_err());
        assert!(check_footer(&[0x19, 0xf1, 0xff, 0xff, 0xff, 0x07, 0x00]).is_err());
    }

    #[test]
    fn damaged_headers_are_errors_not_panics() {
        let mut chunk = header(10, 4);
        chunk.extend([1, 2, 3]); // one byte short
        assert!(decompressed_size(&chunk, 100)
            .unwrap_err()
            .contains("past the chunk"));
        let mut huge = header(i32::MAX, 4);
        huge.extend([1, 2, 3, 4]);
        assert!(decompressed_size(&huge, 1 << 30)
            .unwrap_err()
            .contains("more than"));
        // A bomb within the limit: 20 MB from 4 bytes.
        let mut bomb = header(20_000_000, 4);
        bomb.extend([1, 2, 3, 4]);
        assert!(decompressed_size(&bomb, 1 << 30)
            .unwrap_err()
            .contains("256 times"));
        let negative = header(-5, 4);
        assert!(decompressed_size(&negative, 100)
            .unwrap_err()
            .contains("size -5"));
        for cut in 0..header(10, 4).len() {
            assert!(decompressed_size(&header(10, 4)[..cut], 100).is_err() || cut == 0);
        }
        // A list claiming more elements than bytes, and deep nesting.
        assert!(decompressed_size(&[0x19, 0xf5, 0xff, 0xff, 0xff, 0x0f], 100).is_err());
        assert!(decompressed_size(&[0x1c; 64], 100).is_err());
    }
}
