//! [`ParquetFiles`]: samples stored as the rows of Parquet files, as Hugging Face
//! publishes most image and audio datasets.
//!
//! Such a file holds a column of encoded samples (a JPEG's or a FLAC's bytes, alone or as
//! the `bytes` field of a `{bytes, path}` struct) and usually a column of labels, cut into
//! *row groups* of a few dozen to a few thousand rows; the file's `huggingface` metadata
//! names the features (`Image`, `Audio`, `ClassLabel` with its class names). Which columns
//! are read is found in [`columns`]: named by the user, described by that metadata, or by
//! their usual names.
//!
//! A sample cannot be read alone: its bytes lie in a page, compressed as one. Where the
//! file has an offset index (the page index: `datasets` 5 writes one, with pages of a few
//! photographs) and no dictionary page, each page of the sample column is a *group* read
//! alone; otherwise the row group's whole chunk of the sample column is. A read of a sample
//! reads and decodes its group once and keeps it in memory for the samples of it that
//! follow, up to a budget of bytes ([`ParquetFiles::with_memory`]): a group whose every
//! row has been read leaves first, then the least recently used. Only the sample column
//! is read, never the rest of the row (captions, paths, other features). The catalog's
//! groups ([`Catalog::groups`]) are these, so that the plan can read each once an epoch
//! ([`crate::plan::Blocks`]).
//!
//! A loader given fields reads each other field from a column of its name: binary (a
//! caption, a JSON document), or for a field that asks for them, the lists of a struct
//! column ([`lists`]: Hugging Face's detection `objects`), only those it asks for, each
//! row's handed to the field as one member.
//!
//! Opening reads each file's footer, its offset index and its label column (a few bytes
//! per row), so that the catalog has every sample with its label before the first epoch.
//! A sample's size in the catalog is its row group's share of the chunk's decompressed
//! size: the exact size is only known once its pages are decoded.
//!
//! Nothing from a file is trusted: the footer's length, every chunk's extent and every
//! page's declared size are checked against the file and bounded before anything is
//! allocated for them ([`pages`]); an offset index that does not tile the chunk is not
//! used; a damaged page that makes the decoder fail is an error of the samples of its
//! group, naming the file and the row.

mod chunk;
mod columns;
mod footer;
mod inflate;
mod lists;
mod pages;
mod thrift;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use parquet::basic::Compression;
use parquet::data_type::ByteArray;
use parquet::file::metadata::{ColumnChunkMetaData, FooterTail, ParquetMetaDataReader};
use parquet::schema::types::ColumnDescPtr;

use super::blob::{BlobInfo, BlobStore};
use super::{
    is_parquet_key, Served, Source, SourceStats, Tier, DEFAULT_GROUP_MEMORY, DEFAULT_MAX_BYTES,
};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;
use crate::storage::{encode_lists_member, record, Columns, Item, SubColumns};

/// The largest footer read: a footer describes row groups and columns, and even a file
/// of a million row groups has one of a few hundred megabytes; beyond this it is damage.
const MAX_FOOTER_BYTES: u64 = 256 << 20;

/// The most bytes a label column's chunk may decompress to (a label is a few bytes).
const MAX_LABEL_CHUNK_BYTES: u64 = 256 << 20;

/// `PAR1`, at both ends of a Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";

/// The samples of a set of Parquet files, read a page (or a row group's chunk) at a time.
pub struct ParquetFiles {
    store: Counted,
    files: Vec<File>,
    groups: Vec<Group>,
    /// Per sample: its group.
    group_of: Vec<u32>,
    catalog: Arc<Catalog>,
    max_bytes: u64,
    memory: AtomicU64,
    decoded: Mutex<Decoded>,
    served: Served,
}

impl std::fmt::Debug for ParquetFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetFiles")
            .field("root", &self.store.inner.root())
            .field("files", &self.files.len())
            .field("groups", &self.groups.len())
            .field("samples", &self.group_of.len())
            .finish_non_exhaustive()
    }
}

/// The store the files are in, with the bytes read from it counted.
struct Counted {
    inner: Arc<dyn BlobStore>,
    read: AtomicU64,
}

impl Counted {
    /// [`BlobStore::read_version`], counted.
    fn read(
        &self,
        key: &str,
        version: Option<&str>,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), Cause> {
        self.read.fetch_add(len, Ordering::Relaxed);
        self.inner.read_version(key, version, offset, len, out)
    }
}

/// One file of the dataset.
struct File {
    key: String,
    version: Option<String>,
    /// Its sample column.
    descr: ColumnDescPtr,
    /// The other columns each sample's record holds (a loader's fields), by name.
    extras: Vec<(String, Extra)>,
}

/// A column a record's field is read from.
enum Extra {
    /// A binary column: its value is the member.
    Binary(ColumnDescPtr),
    /// A struct's lists, each its name, leaf and marks: the row's lists are the member
    /// ([`crate::storage::encode_lists_member`]), each holding at most `most` values.
    Lists {
        lists: Vec<(String, ColumnDescPtr, lists::Marks)>,
        most: usize,
    },
}

/// Where in the schema a record's field is read from: leaf indexes.
enum ExtraLeaves {
    Binary(usize),
    Lists { leaves: Vec<usize>, most: usize },
}

impl ExtraLeaves {
    fn leaves(&self) -> &[usize] {
        match self {
            ExtraLeaves::Binary(leaf) => std::slice::from_ref(leaf),
            ExtraLeaves::Lists { leaves, .. } => leaves,
        }
    }
}

/// One group of one file: a page of the sample column, or a row group's whole chunk.
struct Group {
    file: u32,
    /// How its row group's chunk of the sample column is compressed.
    codec: Compression,
    /// Where it lies in the file: `(offset, length)`.
    extent: (u64, u64),
    rows: usize,
    /// Its first row's number in the file, and its first sample.
    first_row: u64,
    first_sample: SampleId,
    /// The row group's chunks of the file's other columns (`File::extras`, a struct's
    /// lists one after another): codec and extent each.
    extras: Vec<(Compression, (u64, u64))>,
}

/// The groups decoded, by group.
#[derive(Default)]
struct Decoded {
    slots: HashMap<u32, Slot>,
    used: u64,
    tick: u64,
}

/// A group being decoded or decoded: threads that want it meanwhile wait on the cell.
struct Slot {
    cell: Arc<OnceLock<std::result::Result<Arc<Values>, Cause>>>,
    bytes: u64,
    /// When it was last asked for, on the clock of `Decoded::tick`.
    used: u64,
    /// Reads of its samples since it was decoded, and its rows: once every row has been
    /// read (a whole number of times: a pass of an epoch), the plan needs it no more this
    /// epoch, and it leaves memory first.
    reads: u64,
    rows: u64,
}

impl Slot {
    fn finished(&self) -> bool {
        self.reads > 0 && self.reads.is_multiple_of(self.rows.max(1))
    }
}

/// A decoded group's values: its samples by row, then each other column's.
type Values = Vec<Vec<Option<ByteArray>>>;

impl ParquetFiles {
    /// Indexes every `.parquet` blob of `listing` (from `store`), in key order: the sample
    /// and label columns are found as `columns` asks, each file's labels read.
    ///
    /// # Errors
    ///
    /// When no `.parquet` blob is listed, a file is not Parquet (truncated, a damaged
    /// footer), has no column of `modality`'s samples or a label that is not a class, or
    /// the files disagree on their columns or classes; the error names the file.
    pub fn from_listing(
        store: Arc<dyn BlobStore>,
        listing: Vec<BlobInfo>,
        modality: Modality,
        columns: &Columns,
    ) -> Result<ParquetFiles> {
        let blobs: Vec<BlobInfo> = listing
            .into_iter()
            .filter(|b| is_parquet_key(&b.key))
            .collect();
        if blobs.is_empty() {
            return Err(Error::Config(format!(
                "found no .parquet files in {}",
                store.root()
            )));
        }
        let store = Counted {
            inner: store,
            read: AtomicU64::new(0),
        };
        let mut index = Index::default();
        for blob in &blobs {
            let location = store.inner.locate(&blob.key);
            index
                .add(&store, blob, modality, columns)
                .map_err(|problem| match problem {
                    Problem::File(message) => Error::Storage { location, message },
                    Problem::Columns(why) => Error::Config(format!("{location}: {why}")),
                })?;
        }
        let Index {
            files,
            groups,
            samples,
            names,
            named_labels,
            ..
        } = index;
        let mut classes = names.unwrap_or_default();
        let labels = match named_labels {
            Some(names) if names.len() != samples.len() => {
                return Err(Error::Config(format!(
                    "{}: some files label their rows with class names and others with \
                     numbers; give every file the same label column",
                    store.inner.root()
                )))
            }
            Some(names) => {
                // Class names as labels: numbered in sorted order, as class folders are.
                let mut sorted: Vec<&String> = names.iter().collect();
                sorted.sort();
                sorted.dedup();
                classes = sorted.iter().map(|s| s.to_string()).collect();
                names
                    .iter()
                    .map(|n| Some(classes.binary_search(n).expect("listed above") as u32))
                    .collect()
            }
            None => samples.iter().map(|s| s.1).collect::<Vec<_>>(),
        };
        let group_of: Vec<u32> = samples.iter().map(|s| s.0).collect();
        let lengths: Vec<u32> = groups
            .iter()
            .filter(|g| g.rows > 0)
            .map(|g| g.rows as u32)
            .collect();
        let catalog = Catalog::from_samples(
            store.inner.root(),
            modality,
            classes,
            samples
                .iter()
                .zip(labels)
                .enumerate()
                .map(|(id, (s, label))| {
                    let group = &groups[s.0 as usize];
                    let row = group.first_row + (id as u64 - group.first_sample);
                    let key = &files[group.file as usize].key;
                    (format!("{key}#{row}"), label, s.2)
                }),
        )?
        .with_groups(lengths)?
        .with_estimated_sizes();
        Ok(ParquetFiles {
            store,
            files,
            groups,
            group_of,
            catalog: Arc::new(catalog),
            max_bytes: DEFAULT_MAX_BYTES,
            memory: AtomicU64::new(DEFAULT_GROUP_MEMORY),
            decoded: Mutex::default(),
            served: Served::default(),
        })
    }

    /// The samples found. A sample's relative path is `file#row`.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Bytes read from the store so far: footers, labels and the sample column's chunks
    /// (what [`Source::stats`] counts is the samples' bytes served).
    pub fn storage_bytes(&self) -> u64 {
        self.store.read.load(Ordering::Relaxed)
    }

    /// Keeps at most `bytes` of decoded groups in memory (at least the groups
    /// being read), instead of [`DEFAULT_GROUP_MEMORY`].
    pub fn with_memory(self, bytes: u64) -> ParquetFiles {
        self.set_group_memory(bytes);
        self
    }

    /// Refuses samples larger than `limit` bytes with [`Cause::TooLarge`] instead of the
    /// default limit of [`DEFAULT_MAX_BYTES`].
    pub fn with_max_bytes(self, limit: u64) -> ParquetFiles {
        ParquetFiles {
            max_bytes: limit,
            ..self
        }
    }

    /// Group `group`'s values: decoded now, or by another thread (waited for), or kept
    /// from before.
    fn values(&self, group: u32) -> std::result::Result<Arc<Values>, Cause> {
        let cell = {
            let mut decoded = self.decoded.lock().unwrap_or_else(|e| e.into_inner());
            decoded.tick += 1;
            let tick = decoded.tick;
            let rows = self.groups[group as usize].rows as u64;
            let slot = decoded.slots.entry(group).or_insert_with(|| Slot {
                cell: Arc::default(),
                bytes: 0,
                used: tick,
                reads: 0,
                rows,
            });
            slot.used = tick;
            slot.cell.clone()
        };
        let mut decoded_here = None;
        let values = cell.get_or_init(|| {
            let values = self.decode(group).map(Arc::new);
            if let Ok(values) = &values {
                decoded_here = Some(
                    values
                        .iter()
                        .flatten()
                        .flatten()
                        .map(|v| v.len() as u64)
                        .sum(),
                );
            }
            values
        });
        let mut decoded = self.decoded.lock().unwrap_or_else(|e| e.into_inner());
        let decoded = &mut *decoded;
        // The slot is ours while decoding (eviction skips slots of no bytes yet).
        let Some(slot) = decoded
            .slots
            .get_mut(&group)
            .filter(|slot| Arc::ptr_eq(&slot.cell, &cell))
        else {
            return values.clone();
        };
        slot.reads += 1;
        if let Err(cause) = &values {
            // Damage is remembered until each of the group's rows has been refused once
            // (a pass of the epoch), so that its other rows are not read and decompressed
            // again; a failure of the storage may pass, and is retried at the next row.
            if !matches!(cause, Cause::Corrupt(_)) || slot.finished() {
                decoded.slots.remove(&group);
            }
            return values.clone();
        }
        if let Some(bytes) = decoded_here {
            slot.bytes = bytes;
            decoded.used += bytes;
            decoded.evict(self.memory.load(Ordering::Relaxed), group);
        }
        values.clone()
    }

    /// Reads and decodes group `group` of the sample column, and of the other columns a
    /// record holds.
    fn decode(&self, group: u32) -> std::result::Result<Values, Cause> {
        let g = &self.groups[group as usize];
        let file = &self.files[g.file as usize];
        let limit = self.memory.load(Ordering::Relaxed).max(self.max_bytes);
        let damaged = |e: String| {
            Cause::Corrupt(format!(
                "rows {}..{}: {e}",
                g.first_row,
                g.first_row + g.rows as u64
            ))
        };
        let mut values = Vec::with_capacity(1 + file.extras.len());
        let mut bytes = Vec::new();
        let sample = (g.codec, g.extent);
        let mut chunks = std::iter::once(&sample).chain(&g.extras);
        let mut read = |bytes: &mut Vec<u8>| -> std::result::Result<Compression, Cause> {
            let (codec, (start, len)) = chunks
                .next()
                .ok_or_else(|| Cause::Internal("a record's column without its chunk".into()))?;
            self.store
                .read(&file.key, file.version.as_deref(), *start, *len, bytes)?;
            Ok(*codec)
        };
        let codec = read(&mut bytes)?;
        values.push(chunk::binary(&file.descr, codec, &bytes, g.rows, limit).map_err(damaged)?);
        for (_, extra) in &file.extras {
            match extra {
                Extra::Binary(descr) => {
                    let codec = read(&mut bytes)?;
                    values
                        .push(chunk::binary(descr, codec, &bytes, g.rows, limit).map_err(damaged)?);
                }
                Extra::Lists { lists, most } => {
                    let mut columns = Vec::with_capacity(lists.len());
                    for (_, descr, marks) in lists {
                        let codec = read(&mut bytes)?;
                        columns.push(
                            chunk::lists(descr, codec, &bytes, g.rows, limit, marks, *most)
                                .map_err(damaged)?,
                        );
                    }
                    let mut members = Vec::with_capacity(g.rows);
                    for row in 0..g.rows {
                        let each: Vec<(&str, &Item)> = lists
                            .iter()
                            .zip(&columns)
                            .map(|((name, _, _), column)| (name.as_str(), &column[row]))
                            .collect();
                        let mut member = Vec::new();
                        encode_lists_member(&each, &mut member);
                        members.push(Some(ByteArray::from(member)));
                    }
                    values.push(members);
                }
            }
        }
        Ok(values)
    }
}

impl Decoded {
    /// Lets groups go until `budget` holds, keeping `keep` and those still being
    /// decoded: first those whose every row has been read, then the least recently used.
    fn evict(&mut self, budget: u64, keep: u32) {
        while self.used > budget {
            let oldest = self
                .slots
                .iter()
                .filter(|(&g, slot)| g != keep && slot.bytes > 0)
                .min_by_key(|(_, slot)| (!slot.finished(), slot.used))
                .map(|(&g, _)| g);
            let Some(group) = oldest else { return };
            let slot = self.slots.remove(&group).expect("found above");
            self.used -= slot.bytes;
        }
    }
}

impl Source for ParquetFiles {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
        out.clear();
        let group = self.group_of[id as usize];
        let values = self.values(group)?;
        let g = &self.groups[group as usize];
        let row = (id - g.first_sample) as usize;
        let value = values[0][row]
            .as_ref()
            .ok_or_else(|| Cause::Corrupt("the row holds no sample (null)".into()))?;
        match value.len() as u64 {
            0 => return Err(Cause::Empty),
            bytes if bytes > self.max_bytes => {
                return Err(Cause::TooLarge {
                    bytes,
                    limit: self.max_bytes,
                    field: None,
                })
            }
            _ => {}
        }
        let file = &self.files[g.file as usize];
        if file.extras.is_empty() {
            out.extend_from_slice(value.data());
        } else {
            // A record: the sample under its modality's name, then each other column's
            // value of the row (a null one left out: a missing field).
            let mut members: Vec<(&str, &[u8])> =
                vec![(self.catalog.modality().name(), value.data())];
            for ((name, _), column) in file.extras.iter().zip(&values[1..]) {
                if let Some(v) = &column[row] {
                    members.push((name, v.data()));
                }
            }
            record::write_frame(&members, out);
        }
        self.served.count(out.len() as u64);
        Ok(())
    }

    fn tier(&self, id: SampleId) -> Tier {
        let group = self.group_of[id as usize];
        let decoded = self.decoded.lock().unwrap_or_else(|e| e.into_inner());
        match decoded.slots.get(&group) {
            Some(slot) if slot.bytes > 0 => Tier::Memory,
            _ => Tier::Storage,
        }
    }

    fn location(&self, id: SampleId) -> String {
        let g = &self.groups[self.group_of[id as usize] as usize];
        let row = g.first_row + (id - g.first_sample);
        let file = &self.files[g.file as usize];
        format!("{}, row {row}", self.store.inner.locate(&file.key))
    }

    fn shard(&self, id: SampleId) -> Option<u32> {
        Some(self.groups[self.group_of[id as usize] as usize].file)
    }

    fn shard_location(&self, shard: u32) -> String {
        self.files.get(shard as usize).map_or_else(
            || format!("file {shard}"),
            |f| self.store.inner.locate(&f.key),
        )
    }

    fn set_group_memory(&self, bytes: u64) {
        self.memory.store(bytes, Ordering::Relaxed);
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// What indexing the files has found so far.
#[derive(Default)]
struct Index {
    files: Vec<File>,
    groups: Vec<Group>,
    /// Per sample: its group, its label (numbered), its estimated size.
    samples: Vec<(u32, Option<u32>, u64)>,
    /// The class names of the first file's metadata, which every file must share.
    names: Option<Vec<String>>,
    /// Per sample, its class name, when labels are names.
    named_labels: Option<Vec<String>>,
    /// The first file's sample and label columns, by path, which every file must share.
    layout: Option<(String, Option<String>)>,
}

/// What is wrong with a file: its content, or the columns asked of it.
enum Problem {
    File(String),
    Columns(String),
}

impl From<String> for Problem {
    fn from(message: String) -> Problem {
        Problem::File(message)
    }
}

impl Index {
    /// Indexes one file: its footer, its groups, its labels.
    fn add(
        &mut self,
        store: &Counted,
        blob: &BlobInfo,
        modality: Modality,
        columns: &Columns,
    ) -> std::result::Result<(), Problem> {
        let meta = footer(store, blob)?;
        let found =
            columns::find(meta.file_metadata(), modality, columns).map_err(Problem::Columns)?;
        let schema = meta.file_metadata().schema_descr();
        let descr = schema.column(found.sample);
        // A record's other members are columns by name; its sample is `image` (`audio`),
        // whichever column holds it.
        // Each field's first column the file has.
        let extras = match &columns.record {
            None => Vec::new(),
            Some(fields) => fields
                .iter()
                .enumerate()
                .map(|(field, names)| {
                    let sub = columns.sub_columns.get(field).and_then(Option::as_ref);
                    let mut why = String::new();
                    for name in names {
                        match record_column(schema.columns(), name, sub) {
                            Ok(leaves) => return Ok((name.clone(), leaves)),
                            Err(e) if why.is_empty() => why = e,
                            Err(_) => {}
                        }
                    }
                    Err(Problem::Columns(format!(
                        "a field's column ({}): {why}",
                        names.join(" or ")
                    )))
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
        };
        let layout = (
            descr.path().string(),
            found.label.map(|l| schema.column(l.leaf).path().string()),
        );
        match &self.layout {
            None => self.layout = Some(layout.clone()),
            Some(first) if *first != layout => {
                return Err(Problem::Columns(format!(
                    "its columns ({}, label {}) differ from the first file's ({}, label {})",
                    layout.0,
                    layout.1.as_deref().unwrap_or("none"),
                    first.0,
                    first.1.as_deref().unwrap_or("none")
                )))
            }
            Some(_) => {}
        }
        match &self.names {
            None => self.names = Some(found.names.clone()),
            Some(names) if *names != found.names => {
                return Err(Problem::Columns(
                    "its class names differ from the first file's".into(),
                ))
            }
            Some(_) => {}
        }
        // Every sample takes at least a byte of the file (an empty or missing one is an
        // error): more rows than bytes is a crafted footer, which must not make the
        // catalog hold billions of rows.
        let declared: u64 = meta
            .row_groups()
            .iter()
            .map(|g| u64::try_from(g.num_rows()).unwrap_or(u64::MAX))
            .fold(0, u64::saturating_add);
        if declared > blob.size {
            return Err(Problem::File(format!(
                "its footer declares {declared} rows in {} bytes",
                blob.size
            )));
        }
        let file = self.files.len() as u32;
        // A record's columns are read a row group at a time, all alike.
        let offset_indexes = match extras.is_empty() {
            true => offset_indexes(store, blob, &meta, found.sample),
            false => None,
        };
        let mut first_row = 0u64;
        for (g, group) in meta.row_groups().iter().enumerate() {
            let rows = usize::try_from(group.num_rows())
                .ok()
                .filter(|&rows| rows <= u32::MAX as usize)
                .ok_or_else(|| format!("row group {g} declares {} rows", group.num_rows()))?;
            let chunk = group.column(found.sample);
            chunk::check_codec(chunk)?;
            let index = offset_indexes
                .as_ref()
                .map(|(at, bytes)| &bytes[at[g].clone()]);
            let units = chunk::units(chunk, rows, blob.size, index)?;
            let labels = match found.label {
                Some(label) => Some(read_labels(
                    store,
                    blob,
                    group.column(label.leaf),
                    &schema.column(label.leaf),
                    rows,
                    label.numbered,
                )?),
                None => None,
            };
            let mut extra_chunks = Vec::with_capacity(extras.len());
            let mut uncompressed = u64::try_from(chunk.uncompressed_size()).unwrap_or(0);
            for leaf in extras.iter().flat_map(|(_, e)| e.leaves()) {
                let extra = group.column(*leaf);
                chunk::check_codec(extra)?;
                extra_chunks.push((extra.compression(), chunk::extent(extra, blob.size)?));
                uncompressed = uncompressed
                    .saturating_add(u64::try_from(extra.uncompressed_size()).unwrap_or(0));
            }
            // A sample's size: its row group's share of the decompressed chunks.
            let size = uncompressed / rows.max(1) as u64;
            for unit in units {
                let first_sample = self.samples.len() as SampleId;
                let index = self.groups.len() as u32;
                for row in unit.first_row..unit.first_row + unit.rows {
                    let label = match &labels {
                        None => None,
                        Some(Labels::Numbered(values)) => Some(
                            class_number(values[row], &found.names)
                                .map_err(|e| format!("row {}: {e}", first_row + row as u64))?,
                        ),
                        Some(Labels::Named(names)) => {
                            let name = names[row].clone().ok_or_else(|| {
                                format!("row {} has no label (null)", first_row + row as u64)
                            })?;
                            self.named_labels.get_or_insert_with(Vec::new).push(name);
                            None
                        }
                    };
                    self.samples.push((index, label, size.max(1)));
                }
                self.groups.push(Group {
                    file,
                    codec: chunk.compression(),
                    extent: unit.extent,
                    rows: unit.rows,
                    first_row: first_row + unit.first_row as u64,
                    first_sample,
                    extras: extra_chunks.clone(),
                });
            }
            first_row += rows as u64;
        }
        self.files.push(File {
            key: blob.key.clone(),
            version: blob.version.clone(),
            descr,
            extras: extras
                .into_iter()
                .map(|(name, leaves)| {
                    let extra = match leaves {
                        ExtraLeaves::Binary(leaf) => Extra::Binary(schema.column(leaf)),
                        ExtraLeaves::Lists { leaves, most } => Extra::Lists {
                            lists: leaves
                                .into_iter()
                                .map(|leaf| {
                                    let descr = schema.column(leaf);
                                    let parts = descr.path().parts();
                                    let marks =
                                        lists::Marks::of(schema.get_column_root(leaf), parts)?;
                                    // Named by the struct's field: `bbox`, `category`.
                                    let at = match parts.len() > 3 && parts[1] == "list" {
                                        true => 3,
                                        false => 1,
                                    };
                                    Ok((parts[at].clone(), descr.clone(), marks))
                                })
                                .collect::<std::result::Result<_, String>>()?,
                            most,
                        },
                    };
                    Ok((name, extra))
                })
                .collect::<std::result::Result<_, String>>()?,
        });
        Ok(())
    }
}

/// Where a record's field named `name` is read from: binary column `name` (or its
/// `bytes` field), or where the field reads a struct of lists (`sub`), the lists it asks
/// for of struct column `name`.
fn record_column(
    leaves: &[ColumnDescPtr],
    name: &str,
    sub: Option<&SubColumns>,
) -> std::result::Result<ExtraLeaves, String> {
    let why = match columns::sample_leaf(leaves, name) {
        Ok(leaf) => return Ok(ExtraLeaves::Binary(leaf)),
        Err(why) => why,
    };
    let nested = leaves.iter().any(|l| {
        let parts = l.path().parts();
        parts.len() > 1 && parts[0] == name
    });
    match (nested, sub) {
        (false, _) => Err(why),
        (true, None) => Err(format!(
            "{why} (a boxes field reads a struct of lists, as Hugging Face's detection \
             datasets store their objects)"
        )),
        (true, Some(sub)) => {
            if let Some(refused) = &sub.refused {
                return Err(format!("column {name:?} is a struct of lists: {refused}"));
            }
            Ok(ExtraLeaves::Lists {
                leaves: sub
                    .lists
                    .iter()
                    .map(|names| lists::sub_leaf(leaves, name, names))
                    .collect::<std::result::Result<_, _>>()?,
                most: sub.most,
            })
        }
    }
}

/// The most bytes read for a file's offset indexes of the sample column (a page's entry
/// is a few bytes: this is millions of pages).
const MAX_OFFSET_INDEX_BYTES: u64 = 64 << 20;

/// The offset index of every row group's chunk of the sample column, read together (a
/// writer puts them side by side before the footer): the bytes, and each row group's
/// range in them. `None` when the file has none for some row group, or they are not
/// where a file's bytes are: the row groups are then read whole.
fn offset_indexes(
    store: &Counted,
    blob: &BlobInfo,
    meta: &parquet::file::metadata::ParquetMetaData,
    sample: usize,
) -> Option<(Vec<std::ops::Range<usize>>, Vec<u8>)> {
    let ranges: Vec<std::ops::Range<u64>> = meta
        .row_groups()
        .iter()
        .map(|g| {
            let chunk = g.column(sample);
            let (at, len) = (chunk.offset_index_offset()?, chunk.offset_index_length()?);
            let (at, len) = (u64::try_from(at).ok()?, u64::try_from(len).ok()?);
            Some(at..at.checked_add(len)?)
        })
        .collect::<Option<_>>()?;
    let start = ranges.iter().map(|r| r.start).min()?;
    let end = ranges.iter().map(|r| r.end).max()?;
    if end > blob.size || end - start > MAX_OFFSET_INDEX_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    store
        .read(
            &blob.key,
            blob.version.as_deref(),
            start,
            end - start,
            &mut bytes,
        )
        .ok()?;
    let at = ranges
        .iter()
        .map(|r| (r.start - start) as usize..(r.end - start) as usize)
        .collect();
    Some((at, bytes))
}

/// A label column's values in one row group.
enum Labels {
    Numbered(Vec<Option<i64>>),
    Named(Vec<Option<String>>),
}

/// Reads and decodes a row group's chunk of the label column.
fn read_labels(
    store: &Counted,
    blob: &BlobInfo,
    meta: &ColumnChunkMetaData,
    descr: &ColumnDescPtr,
    rows: usize,
    numbered: bool,
) -> std::result::Result<Labels, String> {
    let (start, len) = chunk::extent(meta, blob.size)?;
    if len > MAX_LABEL_CHUNK_BYTES {
        return Err(format!(
            "its label column chunk is {len} bytes (labels take a few bytes a row)"
        ));
    }
    let mut bytes = Vec::new();
    store
        .read(&blob.key, blob.version.as_deref(), start, len, &mut bytes)
        .map_err(|e| e.to_string())?;
    let codec = meta.compression();
    let labels = if numbered {
        Labels::Numbered(chunk::integers(
            descr,
            codec,
            &bytes,
            rows,
            MAX_LABEL_CHUNK_BYTES,
        )?)
    } else {
        Labels::Named(
            chunk::binary(descr, codec, &bytes, rows, MAX_LABEL_CHUNK_BYTES)?
                .into_iter()
                .map(|v| v.map(|v| String::from_utf8_lossy(v.data()).into_owned()))
                .collect(),
        )
    };
    Ok(labels)
}

/// A class number as a label: within the class names where the file names them.
fn class_number(value: Option<i64>, names: &[String]) -> std::result::Result<u32, String> {
    let value = value.ok_or("no label (null)")?;
    match u32::try_from(value) {
        Ok(label) if names.is_empty() || (label as usize) < names.len() => Ok(label),
        Ok(label) => Err(format!(
            "label {label}, but the file names {} classes",
            names.len()
        )),
        Err(_) => Err(format!(
            "label {value}, not a class (Hugging Face writes -1 for \"no label\": read such a \
             split with label_column=none)"
        )),
    }
}

/// The footer of a Parquet file: its metadata, read with two ranged reads and checked.
fn footer(
    store: &Counted,
    blob: &BlobInfo,
) -> std::result::Result<parquet::file::metadata::ParquetMetaData, String> {
    let not_parquet = |why: &str| format!("not a Parquet file: {why}");
    if blob.size < 12 {
        return Err(not_parquet(&format!("{} bytes", blob.size)));
    }
    let version = blob.version.as_deref();
    let mut tail = Vec::new();
    store
        .read(&blob.key, version, blob.size - 8, 8, &mut tail)
        .map_err(|e| e.to_string())?;
    let tail: [u8; 8] = tail.try_into().map_err(|_| not_parquet("a short read"))?;
    if &tail[4..] != MAGIC {
        return Err(not_parquet(
            "it does not end in PAR1 (truncated, or another format)",
        ));
    }
    let tail = FooterTail::try_new(&tail).map_err(|e| not_parquet(&e.to_string()))?;
    if tail.is_encrypted_footer() {
        return Err("its footer is encrypted, which nostall does not read".into());
    }
    let len = tail.metadata_length() as u64;
    if len > MAX_FOOTER_BYTES || len > blob.size - 12 {
        return Err(not_parquet(&format!(
            "its footer declares {len} bytes in a file of {}",
            blob.size
        )));
    }
    let mut bytes = Vec::new();
    store
        .read(&blob.key, version, blob.size - 8 - len, len, &mut bytes)
        .map_err(|e| e.to_string())?;
    let bytes = footer::check_footer(&bytes)
        .map_err(|e| not_parquet(&format!("a damaged footer ({e})")))?;
    match catch_unwind(AssertUnwindSafe(|| {
        ParquetMetaDataReader::decode_metadata(&bytes)
    })) {
        Ok(Ok(meta)) => Ok(meta),
        Ok(Err(e)) => Err(not_parquet(&format!("a damaged footer ({e})"))),
        Err(_) => Err(not_parquet("a damaged footer")),
    }
}
