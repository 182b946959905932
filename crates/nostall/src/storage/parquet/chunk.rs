//! Decoding one column chunk of one row group (or one of its pages), from its bytes as
//! read from the file.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use parquet::basic::Compression;
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::ColumnDescPtr;

use super::{footer, pages};

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

/// The values of a chunk of `rows` rows, one per row (`None` where the row has none).
///
/// `bytes` is the chunk (or one of its pages) as read from its file, compressed with
/// `codec`; its pages may decompress to at most `limit` bytes together. They are
/// decompressed and checked here ([`pages::normalise`]), and the decoder is handed them
/// uncompressed. A damaged chunk (even one that makes the decoder panic) is an error.
fn decode<T: DataType>(
    descr: &ColumnDescPtr,
    codec: Compression,
    bytes: &[u8],
    rows: usize,
    limit: u64,
) -> Result<Vec<Option<T::T>>, String> {
    let column = pages::Column {
        codec,
        physical: descr.physical_type(),
        max_def: descr.max_def_level(),
        type_length: descr.type_length(),
    };
    let pages = pages::normalise(bytes, column, rows, limit)?;
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
        let (mut values, mut defs) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
        let (records, _, _) = reader.read_records(rows, Some(&mut defs), None, &mut values)?;
        Ok::<_, parquet::errors::ParquetError>((records, defs, values))
    }));
    let (records, defs, values) = match decoded {
        Ok(Ok(decoded)) => decoded,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("the Parquet decoder failed on it (damaged pages)".into()),
    };
    if records != rows {
        return Err(format!(
            "its pages hold {records} rows where the footer declares {rows}"
        ));
    }
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
