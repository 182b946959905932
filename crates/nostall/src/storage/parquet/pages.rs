//! A column chunk's pages, read, bounded and decompressed by nostall before the `parquet`
//! crate decodes them.
//!
//! The crate sizes its buffers from what the file declares: a page's decompressed size,
//! a dictionary page's number of values (a `Vec` of that many values), the number of
//! lengths a `DELTA_LENGTH_BYTE_ARRAY` page declares; a few crafted bytes would make it
//! allocate gigabytes. So nostall walks the chunk first ([`normalise`]): each page header
//! is read strictly (a field of the wrong type, or twice, is damage: the crate would read
//! another value than the one checked), each page decompressed to exactly its declared
//! size within a budget ([`super::inflate`]), and each count checked against the bytes
//! that hold it. What the crate is then handed is the chunk rewritten: uncompressed pages
//! behind headers nostall wrote, holding only the fields it checked. The crate never
//! reads a header or a codec stream from the file.

use bytes::Bytes;
use parquet::basic::{Compression, Type as PhysicalType};

use super::inflate::inflate_into;
use super::thrift::{Cursor, Writer, BOOL_FALSE, BOOL_TRUE, I32, STRUCT};

/// The most a page may grow when decompressed, as a multiple of its compressed size (plus
/// [`RATIO_SLACK`]): encoded images and audio barely compress, so a page declaring more is
/// damage or a bomb, and a small file must not make the decoder allocate gigabytes.
const MAX_RATIO: u64 = 256;

/// Bytes a page may decompress to beyond [`MAX_RATIO`] times its size: small pages.
const RATIO_SLACK: u64 = 64 << 10;

/// Parquet's page types.
const DATA_PAGE: i32 = 0;
const INDEX_PAGE: i32 = 1;
const DICTIONARY_PAGE: i32 = 2;
const DATA_PAGE_V2: i32 = 3;

/// The value encodings whose data begins with a count of its own, which the crate
/// allocates for.
const DELTA_LENGTH_BYTE_ARRAY: i32 = 6;
const DELTA_BYTE_ARRAY: i32 = 7;
/// The definition levels' encodings in a v1 data page.
const RLE: i32 = 3;
const BIT_PACKED: i32 = 4;

/// What a column's pages are decoded as.
#[derive(Debug, Clone, Copy)]
pub(super) struct Column {
    pub(super) codec: Compression,
    pub(super) physical: PhysicalType,
    /// The column's maximum definition level (0: no nulls, no levels stored).
    pub(super) max_def: i16,
    /// The fixed length of its values, for `FIXED_LEN_BYTE_ARRAY`.
    pub(super) type_length: i32,
    /// The most values a row may hold: 1, or for a list column the most its reader takes
    /// of a row (with its empty and null lists).
    pub(super) per_row: u64,
}

/// A chunk rewritten for the decoder: uncompressed pages behind canonical headers.
#[derive(Debug)]
pub(super) struct Normalised {
    pub(super) bytes: Bytes,
    /// Where its first data page starts (after the dictionary page, when it has one).
    pub(super) first_data_page: usize,
    pub(super) has_dictionary: bool,
    /// The values its data pages declare together (levels, for a list column).
    pub(super) values: u64,
}

/// Reads the pages of a column chunk of `rows` rows held in `chunk` (its whole extent)
/// and rewrites them uncompressed: an error if a header is damaged, a page overruns the
/// chunk or does not decompress to its declared size, a count is more than the page's
/// bytes or the chunk's rows can hold, or the pages would decompress to more than
/// `limit` bytes together.
///
/// A list column's page may declare `per_row` values a row, and beyond that as many as
/// eight a byte of the pages so far (its levels take at least a bit each unless run
/// together: a row holding more values than the field takes is that row's error, and
/// must not be the whole chunk's).
pub(super) fn normalise(
    chunk: &[u8],
    column: Column,
    rows: usize,
    limit: u64,
) -> Result<Normalised, String> {
    let (mut at, mut total) = (0usize, 0u64);
    let mut out = Vec::new();
    let (mut first_data_page, mut has_dictionary, mut values_seen) = (None, false, 0u64);
    while at < chunk.len() {
        let fail = |e: String| format!("the page at chunk byte {at}: {e}");
        let header = PageHeader::read(&chunk[at..]).map_err(fail)?;
        if header.uncompressed > header.compressed.saturating_mul(MAX_RATIO) + RATIO_SLACK {
            return Err(fail(format!(
                "it declares {} bytes decompressed from {}: more than {MAX_RATIO} times \
                 (damage, or a decompression bomb)",
                header.uncompressed, header.compressed
            )));
        }
        total = total.saturating_add(header.uncompressed);
        if total > limit {
            return Err(format!(
                "its pages decompress to more than {limit} bytes (the page at chunk byte \
                 {at} declares {} bytes)",
                header.uncompressed
            ));
        }
        let body = at
            .checked_add(header.len)
            .and_then(|from| Some(from..from.checked_add(header.compressed as usize)?))
            .and_then(|range| chunk.get(range))
            .ok_or_else(|| {
                fail(format!(
                    "it declares {} bytes, past the chunk's end ({})",
                    header.compressed,
                    chunk.len()
                ))
            })?;
        let page_start = out.len();
        match header.kind {
            Kind::Dictionary { values, encoding } => {
                if has_dictionary || first_data_page.is_some() {
                    return Err(fail("a dictionary page after the first page".into()));
                }
                let size = header.uncompressed as usize;
                // A dictionary's values are plain: each takes at least this many bytes.
                let least = match column.physical {
                    PhysicalType::BYTE_ARRAY | PhysicalType::INT32 | PhysicalType::FLOAT => 4,
                    PhysicalType::INT64 | PhysicalType::DOUBLE => 8,
                    PhysicalType::INT96 => 12,
                    PhysicalType::FIXED_LEN_BYTE_ARRAY => column.type_length.max(1) as u64,
                    PhysicalType::BOOLEAN => 1,
                };
                if values as u64 > size as u64 / least {
                    return Err(fail(format!(
                        "a dictionary of {values} values in {size} bytes"
                    )));
                }
                write_dictionary_header(&mut out, size, values, encoding);
                inflate_into(column.codec, body, size, &mut out).map_err(fail)?;
                has_dictionary = true;
            }
            Kind::Data(page) => {
                values_seen += page.values as u64;
                let slack = match column.per_row > 1 {
                    true => total.saturating_mul(8),
                    false => 0,
                };
                if values_seen > (rows as u64).saturating_mul(column.per_row) + slack {
                    return Err(fail(format!(
                        "its pages hold more values than the chunk's {rows} rows"
                    )));
                }
                let size = header.uncompressed as usize;
                write_data_header(&mut out, size, &page);
                let payload = out.len();
                data_payload(&page, column, body, size, &mut out).map_err(fail)?;
                check_counts(&page, column, &out[payload..]).map_err(fail)?;
                first_data_page.get_or_insert(page_start);
            }
            // An index page is never read (no writer we know writes one): dropped.
            Kind::Index => {}
        }
        at += header.len + header.compressed as usize;
    }
    Ok(Normalised {
        first_data_page: first_data_page.unwrap_or(out.len()),
        bytes: Bytes::from(out),
        has_dictionary,
        values: values_seen,
    })
}

/// A page's header, as read from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageHeader {
    kind: Kind,
    /// The header's own length in bytes.
    len: usize,
    compressed: u64,
    uncompressed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dictionary { values: i32, encoding: i32 },
    Data(DataPage),
    Index,
}

/// A data page's header (v1 or v2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DataPage {
    values: i32,
    encoding: i32,
    levels: Levels,
}

/// Where a data page keeps its levels, by the page's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Levels {
    /// In front of its values, compressed with them, in these encodings.
    V1 { def: i32, rep: i32 },
    /// Uncompressed in front of its values, which may be compressed or not.
    V2(V2),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct V2 {
    nulls: i32,
    rows: i32,
    def_bytes: i32,
    rep_bytes: i32,
    compressed: bool,
}

/// The fields of a struct read so far, by id: each at most once, and of the type the
/// format gives it.
#[derive(Default)]
struct Seen(u64);

impl Seen {
    fn first(&mut self, id: i64, kind: u8, expected: u8) -> Result<(), String> {
        let is_bool = |k| k == BOOL_TRUE || k == BOOL_FALSE;
        if kind != expected && !(is_bool(kind) && is_bool(expected)) {
            return Err(format!("field {id} has type {kind}, not {expected}"));
        }
        let bit = 1u64 << id;
        if self.0 & bit != 0 {
            return Err(format!("field {id} twice"));
        }
        self.0 |= bit;
        Ok(())
    }

    fn has(&self, id: i64) -> bool {
        self.0 & (1 << id) != 0
    }
}

/// An `i32` count or size: not negative.
fn count(cursor: &mut Cursor<'_>, what: &str) -> Result<i32, String> {
    let v = cursor.i32()?;
    match v >= 0 {
        true => Ok(v),
        false => Err(format!("{what} {v}")),
    }
}

impl PageHeader {
    /// The header at the start of `bytes`.
    fn read(bytes: &[u8]) -> Result<PageHeader, String> {
        let mut cursor = Cursor::new(bytes);
        let mut seen = Seen::default();
        let (mut kind, mut uncompressed, mut compressed) = (0, 0, 0);
        let (mut dictionary, mut data, mut v2) = (None, None, None);
        cursor.fields(0, &mut |c, id, t| match id {
            1 => {
                seen.first(id, t, I32)?;
                kind = c.i32()?;
                Ok(())
            }
            2 => {
                seen.first(id, t, I32)?;
                uncompressed = count(c, "size")?;
                Ok(())
            }
            3 => {
                seen.first(id, t, I32)?;
                compressed = count(c, "size")?;
                Ok(())
            }
            5 => {
                seen.first(id, t, STRUCT)?;
                data = Some(read_v1(c)?);
                Ok(())
            }
            7 => {
                seen.first(id, t, STRUCT)?;
                dictionary = Some(read_dictionary(c)?);
                Ok(())
            }
            8 => {
                seen.first(id, t, STRUCT)?;
                v2 = Some(read_v2(c)?);
                Ok(())
            }
            // The CRC, the index page's header, and fields added since: not read.
            _ => c.skip(t, 0),
        })?;
        if !(seen.has(1) && seen.has(2) && seen.has(3)) {
            return Err("its type or sizes are missing".into());
        }
        let kind = match (kind, dictionary, data, v2) {
            (DICTIONARY_PAGE, Some((values, encoding)), None, None) => {
                Kind::Dictionary { values, encoding }
            }
            (DATA_PAGE, None, Some(page), None) | (DATA_PAGE_V2, None, None, Some(page)) => {
                Kind::Data(page)
            }
            (INDEX_PAGE, None, None, None) => Kind::Index,
            (kind, ..) => return Err(format!("a page of type {kind} with another's header")),
        };
        Ok(PageHeader {
            kind,
            len: cursor.position(),
            compressed: compressed as u64,
            uncompressed: uncompressed as u64,
        })
    }
}

/// A v1 data page's header (its statistics are not read).
fn read_v1(c: &mut Cursor<'_>) -> Result<DataPage, String> {
    let mut seen = Seen::default();
    let mut f = [0i32; 4];
    c.fields(1, &mut |c, id, t| match id {
        1..=4 => {
            seen.first(id, t, I32)?;
            f[id as usize - 1] = if id == 1 {
                count(c, "values")?
            } else {
                c.i32()?
            };
            Ok(())
        }
        _ => c.skip(t, 1),
    })?;
    if !(1..=4).all(|id| seen.has(id)) {
        return Err("its data page header lacks a field".into());
    }
    Ok(DataPage {
        values: f[0],
        encoding: f[1],
        levels: Levels::V1 {
            def: f[2],
            rep: f[3],
        },
    })
}

/// A dictionary page's header: its values and their encoding (whether they are sorted
/// is not read: the decoder does not use it).
fn read_dictionary(c: &mut Cursor<'_>) -> Result<(i32, i32), String> {
    let mut seen = Seen::default();
    let (mut values, mut encoding) = (0, 0);
    c.fields(1, &mut |c, id, t| match id {
        1 => {
            seen.first(id, t, I32)?;
            values = count(c, "values")?;
            Ok(())
        }
        2 => {
            seen.first(id, t, I32)?;
            encoding = c.i32()?;
            Ok(())
        }
        _ => c.skip(t, 1),
    })?;
    match seen.has(1) && seen.has(2) {
        true => Ok((values, encoding)),
        false => Err("its dictionary page header lacks a field".into()),
    }
}

/// A v2 data page's header (its statistics are not read).
fn read_v2(c: &mut Cursor<'_>) -> Result<DataPage, String> {
    let mut seen = Seen::default();
    let mut f = [0i32; 6];
    let mut compressed = true;
    c.fields(1, &mut |c, id, t| match id {
        1..=6 => {
            seen.first(id, t, I32)?;
            f[id as usize - 1] = if id == 4 {
                c.i32()?
            } else {
                count(c, "count")?
            };
            Ok(())
        }
        7 => {
            seen.first(id, t, BOOL_TRUE)?;
            compressed = t == BOOL_TRUE;
            Ok(())
        }
        _ => c.skip(t, 1),
    })?;
    if !(1..=6).all(|id| seen.has(id)) {
        return Err("its v2 data page header lacks a field".into());
    }
    Ok(DataPage {
        values: f[0],
        encoding: f[3],
        levels: Levels::V2(V2 {
            nulls: f[1],
            rows: f[2],
            def_bytes: f[4],
            rep_bytes: f[5],
            compressed,
        }),
    })
}

/// Appends a data page's bytes, decompressed to `size` bytes, to `out`: a v2 page's
/// levels are stored uncompressed in front of its values, which may be compressed or not.
fn data_payload(
    page: &DataPage,
    column: Column,
    body: &[u8],
    size: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let Levels::V2(v2) = page.levels else {
        return inflate_into(column.codec, body, size, out);
    };
    if v2.nulls > page.values || v2.rows > page.values {
        return Err(format!(
            "{} nulls and {} rows among {} values",
            v2.nulls, v2.rows, page.values
        ));
    }
    let levels = v2.def_bytes as usize + v2.rep_bytes as usize;
    if levels > body.len() || levels > size {
        return Err(format!("{levels} bytes of levels in a smaller page"));
    }
    out.extend_from_slice(&body[..levels]);
    // As the crate reads it: no values' bytes is a page of nulls, whatever the codec.
    if size > levels {
        let codec = match v2.compressed {
            true => column.codec,
            false => Compression::UNCOMPRESSED,
        };
        inflate_into(codec, &body[levels..], size - levels, out)?;
    }
    Ok(())
}

/// Checks the counts a page's values begin with, for the encodings whose decoder
/// allocates for them: a delta encoding declares how many values follow, which may not
/// be more than the page holds.
fn check_counts(page: &DataPage, column: Column, payload: &[u8]) -> Result<(), String> {
    if !matches!(page.encoding, DELTA_LENGTH_BYTE_ARRAY | DELTA_BYTE_ARRAY) {
        return Ok(());
    }
    let values_at = match page.levels {
        Levels::V2(v2) => v2.def_bytes as usize + v2.rep_bytes as usize,
        Levels::V1 { .. } if column.max_def == 0 => 0,
        Levels::V1 { def: RLE, .. } => {
            let len = payload.get(..4).ok_or("its levels are cut off")?;
            4 + u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize
        }
        Levels::V1 {
            def: BIT_PACKED, ..
        } => {
            let width = 16 - (column.max_def as u16).leading_zeros() as usize;
            (page.values as usize * width).div_ceil(8)
        }
        Levels::V1 { def, .. } => return Err(format!("definition levels in encoding {def}")),
    };
    let values = payload.get(values_at..).ok_or("its levels overrun it")?;
    let most = page.values as u64;
    let prefixes_end = delta_end(values, most)?;
    if page.encoding == DELTA_BYTE_ARRAY {
        // Prefix lengths, then the suffixes as DELTA_LENGTH_BYTE_ARRAY.
        delta_end(&values[prefixes_end..], most)?;
    }
    Ok(())
}

/// Where a `DELTA_BINARY_PACKED` run of integers at the start of `bytes` ends, found as
/// the crate's decoder finds it, after checking that it declares at most `most` values.
fn delta_end(bytes: &[u8], most: u64) -> Result<usize, String> {
    let mut r = Uleb { bytes, at: 0 };
    let block = r.next()?;
    let miniblocks = r.next()?;
    let total = r.next()?;
    r.next()?; // the first value
    if total > most {
        return Err(format!(
            "its delta encoding declares {total} values in a page of {most}"
        ));
    }
    if miniblocks == 0 || block == 0 || block % 128 != 0 || block % miniblocks != 0 {
        return Err(format!(
            "a delta block of {block} values in {miniblocks} miniblocks"
        ));
    }
    let per_miniblock = block / miniblocks;
    let mut left = total.saturating_sub(1);
    while left > 0 {
        r.next()?; // the block's least delta
        let widths = r
            .bytes
            .get(r.at..)
            .and_then(|rest| rest.get(..miniblocks as usize))
            .ok_or("a delta block cut off")?;
        r.at += widths.len();
        for &width in widths {
            // Miniblocks past the last value may declare any width: they take no bytes.
            if left > 0 {
                r.at =
                    r.at.checked_add((u64::from(width) * per_miniblock / 8) as usize)
                        .filter(|&end| end <= bytes.len())
                        .ok_or("a delta miniblock cut off")?;
            }
            left = left.saturating_sub(per_miniblock);
        }
    }
    Ok(r.at)
}

/// Unsigned LEB128 integers, as the delta encodings write their headers.
struct Uleb<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Uleb<'_> {
    fn next(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or("a delta header cut off")?;
            self.at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a delta header's integer longer than 64 bits".into())
    }
}

/// A dictionary page's header, for `size` bytes uncompressed.
fn write_dictionary_header(out: &mut Vec<u8>, size: usize, values: i32, encoding: i32) {
    let mut w = Writer::default();
    w.begin();
    w.i32(1, DICTIONARY_PAGE);
    w.i32(2, size as i32);
    w.i32(3, size as i32);
    w.begin_struct(7);
    w.i32(1, values);
    w.i32(2, encoding);
    w.end();
    w.end();
    out.extend(w.bytes);
}

/// A data page's header, for `size` bytes uncompressed.
fn write_data_header(out: &mut Vec<u8>, size: usize, page: &DataPage) {
    let mut w = Writer::default();
    w.begin();
    match page.levels {
        Levels::V2(v2) => {
            w.i32(1, DATA_PAGE_V2);
            w.i32(2, size as i32);
            w.i32(3, size as i32);
            w.begin_struct(8);
            w.i32(1, page.values);
            w.i32(2, v2.nulls);
            w.i32(3, v2.rows);
            w.i32(4, page.encoding);
            w.i32(5, v2.def_bytes);
            w.i32(6, v2.rep_bytes);
            w.bool(7, false);
        }
        Levels::V1 { def, rep } => {
            w.i32(1, DATA_PAGE);
            w.i32(2, size as i32);
            w.i32(3, size as i32);
            w.begin_struct(5);
            w.i32(1, page.values);
            w.i32(2, page.encoding);
            w.i32(3, def);
            w.i32(4, rep);
        }
    }
    w.end();
    w.end();
    out.extend(w.bytes);
}

#[cfg(test)]
pub(super) mod tests;
