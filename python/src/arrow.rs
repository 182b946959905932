//! A Hugging Face `datasets.Dataset`'s images read in place: its Arrow buffers
//! ([`nostall::storage::HeldSamples`] over the `bytes` and `path` children of its `Image`
//! column), so the engine reads them with no Python per sample.
//! `nostall._hf.arrow_columns` finds the columns and gives each chunk's buffers.

use std::path::Path;
use std::sync::Arc;

use nostall::dataset::{Dataset, Format};
use nostall::storage::{Held, HeldSample, HeldSamples};
use nostall::{Cause, Modality};
use pyo3::prelude::*;

use crate::errors::raise;

/// Bytes of a pyarrow `Buffer`, which stays alive (and unchanged: Arrow buffers are
/// immutable) as long as `_buffer` holds it.
struct Region {
    start: *const u8,
    len: usize,
    _buffer: Py<PyAny>,
}

// SAFETY: the region is only read, and the pyarrow buffer it points into is immutable and
// outlives it (the region holds a reference to it); reading it needs no interpreter.
unsafe impl Send for Region {}
// SAFETY: as for `Send`: shared reads of immutable memory.
unsafe impl Sync for Region {}

impl Region {
    /// The buffer `buffer` (a pyarrow `Buffer`, or `None`: no bytes).
    fn of(buffer: &Bound<'_, PyAny>) -> PyResult<Region> {
        if buffer.is_none() {
            return Ok(Region {
                start: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
                _buffer: buffer.clone().unbind(),
            });
        }
        let start = buffer.getattr("address")?.extract::<usize>()? as *const u8;
        let len = buffer.getattr("size")?.extract()?;
        Ok(Region {
            start,
            len,
            _buffer: buffer.clone().unbind(),
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `start` and `len` are those pyarrow gives for the buffer it keeps
        // alive and unchanged while `self` holds it (or dangling and 0 for none).
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// One Arrow binary or string array (32- or 64-bit offsets) of a chunk.
struct Binary {
    validity: Option<Region>,
    offsets: Region,
    wide: bool,
    data: Region,
    offset: usize,
    len: usize,
}

impl Binary {
    /// `(validity, offsets, wide, data, offset, length)` as `_hf` gives them, checked to
    /// hold every offset and validity bit of the array.
    fn of(py: Python<'_>, parts: &Bound<'_, PyAny>) -> PyResult<Binary> {
        let (validity, offsets, wide, data, offset, len): (
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            bool,
            Bound<'_, PyAny>,
            usize,
            usize,
        ) = parts.extract()?;
        let validity = (!validity.is_none())
            .then(|| Region::of(&validity))
            .transpose()?;
        let binary = Binary {
            validity,
            offsets: Region::of(&offsets)?,
            wide,
            data: Region::of(&data)?,
            offset,
            len,
        };
        let width = if wide { 8 } else { 4 };
        let end = offset.checked_add(len).and_then(|e| e.checked_add(1));
        let short = end.is_none_or(|e| e.saturating_mul(width) > binary.offsets.len)
            || binary
                .validity
                .as_ref()
                .is_some_and(|v| v.len * 8 < offset + len);
        if short {
            return Err(crate::errors::config_error(
                py,
                "a datasets.Dataset's Arrow array is shorter than its length".into(),
            ));
        }
        Ok(binary)
    }

    /// Value `i`, `None` where it is null.
    fn get(&self, i: usize) -> Result<Option<&[u8]>, Cause> {
        let at = self.offset + i;
        if let Some(validity) = &self.validity {
            if validity.bytes()[at / 8] >> (at % 8) & 1 == 0 {
                return Ok(None);
            }
        }
        let offsets = self.offsets.bytes();
        let offset = |k: usize| -> i64 {
            if self.wide {
                i64::from_le_bytes(offsets[k * 8..k * 8 + 8].try_into().expect("8 bytes"))
            } else {
                i32::from_le_bytes(offsets[k * 4..k * 4 + 4].try_into().expect("4 bytes")).into()
            }
        };
        let (start, end) = (offset(at), offset(at + 1));
        let data = self.data.bytes();
        match (usize::try_from(start), usize::try_from(end)) {
            (Ok(start), Ok(end)) if start <= end && end <= data.len() => {
                Ok(Some(&data[start..end]))
            }
            _ => Err(Cause::Corrupt(format!(
                "its Arrow offsets {start}..{end} lie outside the column's {} bytes",
                data.len()
            ))),
        }
    }
}

/// One chunk of the image column: its `bytes` and its `path`.
struct Chunk {
    bytes: Binary,
    paths: Option<Binary>,
}

/// The images of a `datasets.Dataset` in its Arrow chunks, in the dataset's order (its
/// indices mapping, after `select` or `shuffle`, applied).
pub(crate) struct ArrowImages {
    chunks: Vec<Chunk>,
    /// Each chunk's first row.
    starts: Vec<usize>,
    rows: Option<Vec<u64>>,
    len: u64,
}

impl ArrowImages {
    /// From `nostall._hf.arrow_columns(...)["chunks"]` and `["rows"]`.
    pub(crate) fn new(
        py: Python<'_>,
        chunks: &Bound<'_, PyAny>,
        rows: Option<Vec<u64>>,
    ) -> PyResult<ArrowImages> {
        let (mut made, mut starts, mut total) = (Vec::new(), Vec::new(), 0usize);
        for chunk in chunks.try_iter()? {
            let (bytes, paths): (Bound<'_, PyAny>, Bound<'_, PyAny>) = chunk?.extract()?;
            let bytes = Binary::of(py, &bytes)?;
            let paths = (!paths.is_none())
                .then(|| Binary::of(py, &paths))
                .transpose()?;
            if paths.as_ref().is_some_and(|p| p.len != bytes.len) {
                return Err(crate::errors::config_error(
                    py,
                    "a datasets.Dataset's image column has bytes and paths of other lengths".into(),
                ));
            }
            starts.push(total);
            total += bytes.len;
            made.push(Chunk { bytes, paths });
        }
        if let Some(bad) = rows
            .as_ref()
            .and_then(|r| r.iter().find(|&&r| r >= total as u64))
        {
            return Err(crate::errors::config_error(
                py,
                format!("a datasets.Dataset's indices name row {bad} of {total}"),
            ));
        }
        let len = rows.as_ref().map_or(total, Vec::len) as u64;
        Ok(ArrowImages {
            chunks: made,
            starts,
            rows,
            len,
        })
    }
}

impl HeldSamples for ArrowImages {
    fn len(&self) -> u64 {
        self.len
    }

    fn sample(&self, index: u64) -> Result<HeldSample<'_>, Cause> {
        let row = match &self.rows {
            Some(rows) => *rows.get(index as usize).ok_or(Cause::Missing)? as usize,
            None => index as usize,
        };
        let k = self.starts.partition_point(|&start| start <= row) - 1;
        let (chunk, i) = (&self.chunks[k], row - self.starts[k]);
        if let Some(bytes) = chunk.bytes.get(i)? {
            return Ok(HeldSample::Bytes(bytes));
        }
        match chunk
            .paths
            .as_ref()
            .map(|p| p.get(i))
            .transpose()?
            .flatten()
        {
            Some(path) => match std::str::from_utf8(path) {
                Ok(path) => Ok(HeldSample::File(Path::new(path))),
                Err(_) => Err(Cause::Corrupt("its image path is not UTF-8".into())),
            },
            None => Err(Cause::Missing),
        }
    }
}

/// The dataset the engine reads a `datasets.Dataset` as, from its `columns`
/// (`nostall._hf.arrow_columns`, which the front calls when it can be read natively).
pub(crate) fn held_dataset(py: Python<'_>, columns: &Bound<'_, PyAny>) -> PyResult<Dataset> {
    let item = |key: &str| columns.get_item(key);
    let images = ArrowImages::new(py, &item("chunks")?, item("rows")?.extract()?)?;
    let name: String = item("name")?.extract()?;
    let labels: Vec<u32> = item("labels")?.extract()?;
    let held = Held::new(name, Arc::new(images));
    let catalog = held
        .catalog(Modality::Image, item("classes")?.extract()?, &labels)
        .map_err(|e| raise(py, e))?;
    Ok(Dataset {
        catalog: Arc::new(catalog),
        source: Arc::new(held),
        format: Format::Held,
    })
}
