//! Decoding one column chunk of one row group (or one of its pages), from its bytes as
//! read from the file.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use parquet::basic::Compression;
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{
    ByteArray, ByteArrayType, DataType, DoubleType, FloatType, Int32Type, Int64Type,
};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::ColumnDescPtr;

use super::lists::{self, Marks};
use super::{footer, pages};
use crate::storage::Item;

/// Where a column chunk lies in its file, checked against the file: `(offset, length)`.
pub(super) fn extent(meta: &ColumnChunkMetaData, file_size: u64) -> Result<(u64, u64), String> {
    let start = meta
        .dictionary_page_offset()
        .unwrap_or(meta.data_page_offset());
    let len = meta.compressed_size();
    match (u64::try_from(start), u64::try_from(len)) {
        (Ok(start), Ok(len)) if start.checked_add(len).is_some_and(|end| end <= file_size) => {
            Ok((start, len))
        }
        _ => Err(format!(
            "column chunk {} declares {len} bytes at byte {start}, outside the file's {file_size}",
            meta.column_path()
        )),
    }
}

/// A run of a row group's rows whose sample bytes can be read and decoded alone: one of
/// the chunk's pages, or the whole chunk.
pub(super) struct Unit {
    /// Where it lies in the file: `(offset, length)`.
    pub(super) extent: (u64, u64),
    /// Its first row within the row group, and its rows.
    pub(super) first_row: usize,
    pub(super) rows: usize,
}

/// The units of a row group's chunk of `rows` rows: its pages, as the file's offset index
/// lists them (`offset_index`, the index's bytes), when that index is whole and
/// consistent and no dictionary page comes first; else the chunk as one unit.
pub(super) fn units(
    meta: &ColumnChunkMetaData,
    rows: usize,
    file_size: u64,
    offset_index: Option<&[u8]>,
) -> Result<Vec<Unit>, String> {
    let extent = extent(meta, file_size)?;
    let whole = || {
        vec![Unit {
            extent,
            first_row: 0,
            rows,
        }]
    };
    // The crate's parser sizes its list of pages from the count the index declares.
    let Some(index) = offset_index.and_then(|index| footer::check_offset_index(index).ok()) else {
        return Ok(whole());
    };
    let decoded = catch_unwind(AssertUnwindSafe(|| {
        parquet::file::page_index::index_reader::decode_offset_index(&index)
    }));
    let Ok(Ok(index)) = decoded else {
        return Ok(whole());
    };
    let pages = index.page_locations();
    let (start, len) = extent;
    let end = start + len;
    // Pages that tile the chunk from its start, each with rows of its own.
    let consistent = meta.dictionary_page_offset().is_none()
        && pages
            .first()
            .is_some_and(|p| p.offset as u64 == start && p.first_row_index == 0)
        && pages.windows(2).all(|w| {
            w[1].first_row_index > w[0].first_row_index
                && w[1].offset
                    >= w[0]
                        .offset
                        .saturating_add(i64::from(w[0].compressed_page_size))
        })
        && pages.iter().all(|p| {
            p.compressed_page_size > 0
                && p.offset >= 0
                && (p.offset as u64).saturating_add(p.compressed_page_size as u64) <= end
                && usize::try_from(p.first_row_index).is_ok_and(|r| r < rows)
        });
    if !consistent || pages.len() < 2 {
        return Ok(whole());
    }
    Ok(pages
        .iter()
        .enumerate()
        .map(|(i, page)| {
            let first_row = page.first_row_index as usize;
            let next = pages
                .get(i + 1)
                .map_or(rows, |n| n.first_row_index as usize);
            Unit {
                extent: (page.offset as u64, page.compressed_page_size as u64),
                first_row,
                rows: next - first_row,
            }
        })
        .collect())
}

/// Refuses a chunk compressed with a codec this build does not decode (Brotli, LZO), at
/// once rather than at each of its samples.
pub(super) fn check_codec(meta: &ColumnChunkMetaData) -> Result<(), String> {
    use parquet::basic::Compression::{BROTLI, LZO};
    match meta.compression() {
        codec @ (BROTLI(_) | LZO) => Err(format!(
            "column {} is compressed with {codec}, which nostall does not read (it reads \
             Snappy, gzip, LZ4 and Zstandard: rewrite the files with one of them)",
            meta.column_path()
        )),
        _ => Ok(()),
    }
}

/// A chunk as [`pages::normalise`] rewrote it, read by the page reader.
struct Chunk(Bytes);

impl Length for Chunk {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

impl ChunkReader for Chunk {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let rest = self.len().saturating_sub(start) as usize;
        Ok(self.get_bytes(start, rest)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match usize::try_from(start)
            .ok()
            .and_then(|at| Some(at..at.checked_add(length)?))
            .filter(|range| range.end <= self.0.len())
        {
            Some(range) => Ok(self.0.slice(range)),
            None => Err(parquet::errors::ParquetError::EOF(format!(
                "{length} bytes at byte {start}, outside the column chunk"
            ))),
        }
    }
}

/// A chunk's values as the decoder reads them: its rows' definition levels, repetition
/// levels (of a list column: empty otherwise) and the values that are there.
struct Levels<T> {
    defs: Vec<i16>,
    reps: Vec<i16>,
    values: Vec<T>,
}

/// The levels and values of a chunk of `rows` rows.
///
/// `bytes` is the chunk (or one of its pages) as read from its file, compressed with
/// `codec`; its pages may decompress to at most `limit` bytes together, and hold at most
/// `per_row` values a row (1 for a column of one value a row). They are decompressed and
/// checked here ([`pages::normalise`]), and the decoder is handed them uncompressed. A
/// damaged chunk (even one that makes the decoder panic) is an error.
fn decode_levels<T: DataType>(
    descr: &ColumnDescPtr,
    codec: Compression,
    bytes: &[u8],
    rows: usize,
    limit: u64,
    per_row: u64,
) -> Result<Levels<T::T>, String> {
    let column = pages::Column {
        codec,
        physical: descr.physical_type(),
        max_def: descr.max_def_level(),
        type_length: descr.type_length(),
        per_row,
    };
    let pages = pages::normalise(bytes, column, rows, limit)?;
    let declared = pages.values;
    let repeated = descr.max_rep_level() > 0;
    let decoded = catch_unwind(AssertUnwindSafe(|| {
        let len = pages.bytes.len() as i64;
        let meta = ColumnChunkMetaData::builder(descr.clone())
            .set_compression(Compression::UNCOMPRESSED)
            .set_dictionary_page_offset(pages.has_dictionary.then_some(0))
            .set_data_page_offset(pages.first_data_page as i64)
            .set_total_compressed_size(len)
            .set_total_uncompressed_size(len)
            .set_num_values(rows as i64)
            .build()?;
        let chunk = Arc::new(Chunk(pages.bytes));
        let pages = SerializedPageReader::new(chunk, &meta, rows, None)?;
        let mut reader = ColumnReaderImpl::<T>::new(descr.clone(), Box::new(pages));
        let (mut values, mut defs, mut reps) = (
            Vec::with_capacity(rows),
            Vec::with_capacity(rows),
            Vec::new(),
        );
        let (records, _, _) = reader.read_records(
            rows,
            Some(&mut defs),
            repeated.then_some(&mut reps),
            &mut values,
        )?;
        Ok::<_, parquet::errors::ParquetError>((records, Levels { defs, reps, values }))
    }));
    let (records, levels) = match decoded {
        Ok(Ok(decoded)) => decoded,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("the Parquet decoder failed on it (damaged pages)".into()),
    };
    if records != rows {
        return Err(format!(
            "its pages hold {records} rows where the footer declares {rows}"
        ));
    }
    // A list column's rows end where its levels do: levels left over are damage.
    if repeated && levels.defs.len() as u64 != declared {
        return Err(format!(
            "its pages declare {declared} levels, and {rows} rows take {}",
            levels.defs.len()
        ));
    }
    Ok(levels)
}

/// The values of a chunk of `rows` rows, one per row (`None` where the row has none), as
/// [`decode_levels`] reads them.
fn decode<T: DataType>(
    descr: &ColumnDescPtr,
    codec: Compression,
    bytes: &[u8],
    rows: usize,
    limit: u64,
) -> Result<Vec<Option<T::T>>, String> {
    let Levels { defs, values, .. } = decode_levels::<T>(descr, codec, bytes, rows, limit, 1)?;
    let max = descr.max_def_level();
    if max == 0 {
        return match values.len() == rows {
            true => Ok(values.into_iter().map(Some).collect()),
            false => Err(format!("{} values for {rows} rows", values.len())),
        };
    }
    if defs.len() != rows || defs.iter().filter(|&&d| d == max).count() != values.len() {
        return Err(format!(
            "{} values and {} levels for {rows} rows",
            values.len(),
            defs.len()
        ));
    }
    let mut values = values.into_iter();
    Ok(defs
        .iter()
        .map(|&d| if d == max { values.next() } else { None })
        .collect())
}

/// A binary column's values, each row's sharing the decompressed page it lies in.
pub(super) fn binary(
    descr: &ColumnDescPtr,
    codec: Compression,
    chunk: &[u8],
    rows: usize,
    limit: u64,
) -> Result<Vec<Option<ByteArray>>, String> {
    decode::<ByteArrayType>(descr, codec, chunk, rows, limit)
}

/// An integer column's values (`INT32` or `INT64`), widened.
pub(super) fn integers(
    descr: &ColumnDescPtr,
    codec: Compression,
    chunk: &[u8],
    rows: usize,
    limit: u64,
) -> Result<Vec<Option<i64>>, String> {
    match descr.physical_type() {
        parquet::basic::Type::INT32 => Ok(decode::<Int32Type>(descr, codec, chunk, rows, limit)?
            .into_iter()
            .map(|v| v.map(i64::from))
            .collect()),
        _ => decode::<Int64Type>(descr, codec, chunk, rows, limit),
    }
}

/// A list column's lists, one per row (the row's list, or [`Item::TooMany`] where it
/// holds more than `most` values): an integer or floating-point column (`INT32`,
/// `INT64`, `FLOAT`, `DOUBLE`) of lists, or of lists of lists, nested as `marks` says.
pub(super) fn lists(
    descr: &ColumnDescPtr,
    codec: Compression,
    chunk: &[u8],
    rows: usize,
    limit: u64,
    marks: &Marks,
    most: usize,
) -> Result<Vec<Item>, String> {
    // Besides its values, each row's list may end in an empty or null list a level.
    let per_row = (most as u64).saturating_add(1 + marks.depth() as u64);
    let max_def = descr.max_def_level();
    macro_rules! assemble {
        ($kind:ty, $item:expr) => {{
            let levels = decode_levels::<$kind>(descr, codec, chunk, rows, limit, per_row)?;
            let values: Vec<Item> = levels.values.into_iter().map($item).collect();
            lists::assemble(
                &levels.defs,
                &levels.reps,
                values,
                rows,
                max_def,
                marks,
                most,
            )
        }};
    }
    match descr.physical_type() {
        parquet::basic::Type::INT32 => assemble!(Int32Type, |v| Item::Int(i64::from(v))),
        parquet::basic::Type::INT64 => assemble!(Int64Type, Item::Int),
        parquet::basic::Type::FLOAT => assemble!(FloatType, |v| Item::Float(f64::from(v))),
        parquet::basic::Type::DOUBLE => assemble!(DoubleType, Item::Float),
        other => Err(format!(
            "column {} holds {other:?} values, not numbers",
            descr.path()
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parquet::schema::parser::parse_message_type;
    use parquet::schema::types::SchemaDescriptor;

    use super::super::pages::tests::{data_header, dictionary_header};
    use super::*;

    const PLAIN: i64 = 0;
    const RLE_DICTIONARY: i64 = 8;

    /// `datasets`' `category: list<int64>` under a struct column.
    fn column() -> (ColumnDescPtr, Marks) {
        let schema = parse_message_type(
            "message m { optional group objects { optional group category (LIST) { \
             repeated group list { optional int64 element; } } } }",
        )
        .unwrap();
        let schema = SchemaDescriptor::new(Arc::new(schema));
        let descr = schema.column(0);
        let marks = Marks::of(schema.get_column_root(0), descr.path().parts()).unwrap();
        (descr, marks)
    }

    /// A v1 data page of `values` levels: repetition and definition levels (each behind
    /// its length), then the values' bytes.
    fn page(values: i64, encoding: i64, reps: &[u8], defs: &[u8], data: &[u8]) -> Vec<u8> {
        let mut body = (reps.len() as u32).to_le_bytes().to_vec();
        body.extend(reps);
        body.extend((defs.len() as u32).to_le_bytes());
        body.extend(defs);
        body.extend(data);
        let mut chunk = data_header(body.len() as i64, body.len() as i64, values, encoding);
        chunk.extend(body);
        chunk
    }

    // Rows [5, 6] and []: repetition levels 0, 1, 0 and definition levels 4, 4, 2, as
    // runs of the RLE/bit-packed hybrid (a run's header is its count << 1, then its value).
    const REPS: [u8; 6] = [0x02, 0, 0x02, 1, 0x02, 0];
    const DEFS: [u8; 4] = [0x04, 4, 0x02, 2];

    fn read(chunk: &[u8]) -> Result<Vec<Item>, String> {
        let (descr, marks) = column();
        lists(
            &descr,
            Compression::UNCOMPRESSED,
            chunk,
            2,
            1 << 20,
            &marks,
            16,
        )
    }

    fn plain_values() -> Vec<u8> {
        [5i64, 6].iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn levels_and_values_make_each_rows_list() {
        let chunk = page(3, PLAIN, &REPS, &DEFS, &plain_values());
        let want = [
            Item::List(vec![Item::Int(5), Item::Int(6)]),
            Item::List(vec![]),
        ];
        assert_eq!(read(&chunk).unwrap(), want);
        // The same values from a dictionary, indexes of 1 bit: a bit-packed group of 8.
        let mut chunk = dictionary_header(16, 2);
        chunk.extend(plain_values());
        chunk.extend(page(3, RLE_DICTIONARY, &REPS, &DEFS, &[1, 0x03, 0b10]));
        assert_eq!(read(&chunk).unwrap(), want);
    }

    #[test]
    fn hostile_levels_are_errors_not_panics() {
        let values = plain_values();
        let good = page(3, PLAIN, &REPS, &DEFS, &values);
        // Cut anywhere.
        for cut in 0..good.len() {
            assert!(read(&good[..cut]).is_err(), "{cut}");
        }
        // A run's header of 2^28 levels; levels declaring more bytes than the page has;
        // a bit-packed run of 5 groups (40 levels) in no bytes, or in one (levels 0: a
        // row each, more than the footer's); a run of 2^30 levels where the page has 3.
        assert!(read(&page(3, PLAIN, &REPS, &[0xff, 0xff, 0xff, 0x7f], &values)).is_err());
        let mut body = (REPS.len() as u32).to_le_bytes().to_vec();
        body.extend(REPS);
        body.extend(1000u32.to_le_bytes());
        body.extend(DEFS);
        body.extend(&values);
        let mut long = data_header(body.len() as i64, body.len() as i64, 3, PLAIN);
        long.extend(body);
        assert!(read(&long).is_err());
        assert!(read(&page(3, PLAIN, &[0x0b], &DEFS, &values)).is_err());
        assert!(read(&page(3, PLAIN, &[0x0b, 0], &DEFS, &values)).is_err());
        let endless = [0x80, 0x80, 0x80, 0x80, 0x08, 0];
        assert!(read(&page(3, PLAIN, &endless, &DEFS, &values)).is_err());
        // A page declaring more levels than rows of the field's lists may hold.
        let why = read(&page(1 << 30, PLAIN, &REPS, &DEFS, &values)).unwrap_err();
        assert!(why.contains("more values"), "{why}");
        // Dictionary indexes of 40 and of 255 bits.
        for width in [40, 255] {
            let mut chunk = dictionary_header(16, 2);
            chunk.extend(&values);
            chunk.extend(page(3, RLE_DICTIONARY, &REPS, &DEFS, &[width, 0x03, 0b10]));
            assert!(read(&chunk).is_err(), "{width}");
        }
        // Any byte of the page's body changed: an error or some lists, never a panic.
        let body = good.len() - (4 + REPS.len() + 4 + DEFS.len() + values.len());
        for at in body..good.len() {
            for byte in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] = byte;
                let _ = read(&bad);
            }
        }
    }
}
