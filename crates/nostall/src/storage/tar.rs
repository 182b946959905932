//! [`TarShards`]: samples stored as members of tar shards in the WebDataset layout.
//!
//! Large datasets usually travel as a few hundred tar files ("shards") instead of
//! millions of small files, because object stores and network filesystems charge per
//! request. In the WebDataset layout a sample is the group of consecutive members that
//! share a *key*, the member name up to the first `.` of its last path component:
//!
//! ```text
//! train-000000.tar:  n01440764/000123.jpg  n01440764/000123.cls  000124.png  000124.cls …
//! ```
//!
//! The image member (`.jpg`, `.jpeg` or `.png`) holds the sample's bytes; an optional
//! `.cls` member holds its label as decimal text. Other members are ignored.
//!
//! Streaming readers must read shards front to back, so shuffling is limited to a buffer.
//! nostall instead indexes every shard once (member → offset and length) and then reads
//! each sample with one ranged read, so the plan's full random order applies, locally or
//! remotely. Indexing reads the headers (and the small `.cls` members) in chunks of
//! [`INDEX_CHUNK`] bytes, skipping large members without reading them.

use std::collections::HashMap;
use std::sync::Arc;

use super::blob::{is_sample_key, read_range, read_ranges, BlobInfo, BlobRange, BlobStore};
use super::DEFAULT_MAX_BYTES;
use super::{NextRead, ReadDone, Served, Source, SourceStats};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// Bytes read at a time while indexing a shard: large enough that the headers of small
/// members come in a few requests, small enough that large members are skipped.
pub(super) const INDEX_CHUNK: u64 = 256 << 10;

const BLOCK: u64 = 512;

/// The largest long-name (`L`) or pax (`x`) header body the indexer reads: such headers
/// hold a name and a few attributes, so anything larger is damage or an attack, not a
/// reason to read gigabytes while indexing.
const MAX_META_BYTES: u64 = 1 << 20;

/// The samples of a set of WebDataset tar shards, each read with one ranged read.
#[derive(Debug)]
pub struct TarShards {
    store: Arc<dyn BlobStore>,
    shards: Vec<String>,
    /// Each shard's version as listed: a shard rewritten since is an error, not other bytes.
    versions: Vec<Option<String>>,
    /// Per sample: shard index and the image member's data offset.
    extents: Vec<(u32, u64)>,
    catalog: Arc<Catalog>,
    max_bytes: u64,
    served: Served,
}

/// One member of a tar shard, as found by [`index_shard`] (or of a record, by
/// [`record_members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Member {
    /// Its name in the archive.
    pub(crate) name: String,
    /// Where its first header starts (a long-name or pax header before its own).
    header: u64,
    /// Where its data starts.
    pub(crate) offset: u64,
    /// Bytes of data.
    pub(crate) len: u64,
}

impl TarShards {
    /// Indexes every `.tar` blob of `store`, in key order, and catalogs its samples in
    /// shard order. Samples without a member of `modality` (an image, an audio file) are
    /// skipped; either every sample has a `.cls` label or none has.
    ///
    /// # Errors
    ///
    /// When the store cannot be listed or holds no `.tar` blob, a shard is not a valid
    /// tar file, a `.cls` member is not a number, or a key appears twice.
    pub fn open(store: Arc<dyn BlobStore>, modality: Modality) -> Result<TarShards> {
        let listing = store.list()?;
        TarShards::from_listing(store, listing, modality)
    }

    /// Like [`TarShards::open`], from a listing of `store` already made.
    ///
    /// # Errors
    ///
    /// As for [`TarShards::open`].
    pub fn from_listing(
        store: Arc<dyn BlobStore>,
        listing: Vec<BlobInfo>,
        modality: Modality,
    ) -> Result<TarShards> {
        TarShards::index(store, listing, modality, None)
    }

    /// Like [`TarShards::from_listing`], with each sample read as a *record*: the run of
    /// its key's members from its sample member to the last member whose extension is one
    /// of `extensions` (`txt`, `json`…; compared case-insensitively), headers included,
    /// in one ranged read. [`record_members`] splits it. A sample's relative path is then
    /// `shard/key`.
    ///
    /// # Errors
    ///
    /// As for [`TarShards::open`].
    pub fn records_from_listing(
        store: Arc<dyn BlobStore>,
        listing: Vec<BlobInfo>,
        modality: Modality,
        extensions: &[String],
    ) -> Result<TarShards> {
        TarShards::index(store, listing, modality, Some(extensions))
    }

    fn index(
        store: Arc<dyn BlobStore>,
        listing: Vec<BlobInfo>,
        modality: Modality,
        record: Option<&[String]>,
    ) -> Result<TarShards> {
        let shards: Vec<BlobInfo> = listing
            .into_iter()
            .filter(|b| b.key.ends_with(".tar"))
            .collect();
        if shards.is_empty() {
            return Err(Error::Config(format!(
                "found no .tar shards in {}",
                store.root()
            )));
        }
        let mut extents = Vec::new();
        let mut samples = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let shard_error = |shard: &str, message: String| Error::Storage {
            location: store.locate(shard),
            message,
        };
        for (shard_no, shard) in shards.iter().enumerate() {
            let members = index_shard(store.as_ref(), shard)
                .map_err(|cause| shard_error(&shard.key, cause.to_string()))?;
            for group in group_by_key(&members) {
                let Some(member) = group.iter().find(|m| is_sample_key(&m.name, modality)) else {
                    continue;
                };
                let key = sample_key(&member.name);
                if let Some(&other) = seen.get(key) {
                    return Err(shard_error(
                        &shard.key,
                        format!(
                            "sample key {key} appears again (first in {}); keys must be unique",
                            shards[other].key
                        ),
                    ));
                }
                seen.insert(key.to_string(), shard_no);
                let label = match group.iter().find(|m| member_ext(&m.name) == "cls") {
                    Some(cls) => Some(
                        read_label(store.as_ref(), shard, cls)
                            .map_err(|message| shard_error(&shard.key, message))?,
                    ),
                    None => None,
                };
                match record {
                    None => {
                        extents.push((shard_no as u32, member.offset));
                        samples.push((format!("{}/{}", shard.key, member.name), label, member.len));
                    }
                    Some(extensions) => {
                        let wanted = |m: &&Member| {
                            std::ptr::eq(*m, member)
                                || extensions
                                    .iter()
                                    .any(|e| member_ext(&m.name).eq_ignore_ascii_case(e))
                        };
                        let start = group.iter().filter(wanted).map(|m| m.header).min();
                        let end = group
                            .iter()
                            .filter(wanted)
                            .map(|m| padded_end(m, shard.size))
                            .max();
                        let (start, end) = (start.unwrap_or(member.header), end.unwrap_or(0));
                        extents.push((shard_no as u32, start));
                        samples.push((format!("{}/{key}", shard.key), label, end - start));
                    }
                }
            }
        }
        let catalog = Catalog::from_samples(store.root(), modality, Vec::new(), samples)?;
        Ok(TarShards {
            versions: shards.iter().map(|s| s.version.clone()).collect(),
            shards: shards.into_iter().map(|s| s.key).collect(),
            store,
            extents,
            catalog: Arc::new(catalog),
            max_bytes: DEFAULT_MAX_BYTES,
            served: Served::default(),
        })
    }

    /// The samples found. A sample's relative path is `shard/member`.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The shards indexed, in order.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// Where sample `id` lives: a member's data in its shard.
    fn range(&self, id: SampleId) -> BlobRange<'_> {
        let (shard, offset) = self.extents[id as usize];
        let version = self.versions[shard as usize].as_deref();
        let key = &self.shards[shard as usize];
        (key, version, offset, self.catalog.size(id))
    }

    /// Refuses samples larger than `limit` bytes with [`Cause::TooLarge`], before
    /// reading them, instead of the default limit of [`DEFAULT_MAX_BYTES`].
    pub fn with_max_bytes(self, limit: u64) -> TarShards {
        TarShards {
            max_bytes: limit,
            ..self
        }
    }
}

impl Source for TarShards {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        let count = |bytes| self.served.count(bytes);
        read_range(&*self.store, self.range(id), self.max_bytes, out, &count)
    }

    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        let count = |bytes| self.served.count(bytes);
        let range = |id| Ok(self.range(id));
        read_ranges(&*self.store, (next, done), self.max_bytes, range, &count);
    }

    fn reads_at_once(&self) -> usize {
        self.store.reads_at_once()
    }

    fn location(&self, id: SampleId) -> String {
        let (shard, _) = self.extents[id as usize];
        let shard = &self.shards[shard as usize];
        let member = &self.catalog.relative_path(id)[shard.len() + 1..];
        format!("{}:{member}", self.store.locate(shard))
    }

    fn shard(&self, id: SampleId) -> Option<u32> {
        Some(self.extents[id as usize].0)
    }

    fn shard_location(&self, shard: u32) -> String {
        self.shards
            .get(shard as usize)
            .map_or_else(|| format!("shard {shard}"), |s| self.store.locate(s))
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// Bytes of a tar archive, asked for by extent.
trait TarBytes {
    /// Bytes in all.
    fn size(&self) -> u64;
    /// `len` bytes at `offset`.
    fn bytes(&mut self, offset: u64, len: u64) -> Result<&[u8], Cause>;
}

/// Reads a blob front to back in chunks, fetching only the chunks asked for.
struct ChunkReader<'a> {
    store: &'a dyn BlobStore,
    blob: &'a BlobInfo,
    chunk: Vec<u8>,
    chunk_start: u64,
}

impl TarBytes for ChunkReader<'_> {
    fn size(&self) -> u64 {
        self.blob.size
    }

    fn bytes(&mut self, offset: u64, len: u64) -> Result<&[u8], Cause> {
        let end = offset + len;
        if end > self.blob.size {
            return Err(truncated(self.blob.size));
        }
        let have = self.chunk_start..self.chunk_start + self.chunk.len() as u64;
        if !(have.contains(&offset) && end <= have.end) {
            let want = len.max(INDEX_CHUNK).min(self.blob.size - offset);
            let version = self.blob.version.as_deref();
            self.store
                .read_version(&self.blob.key, version, offset, want, &mut self.chunk)?;
            self.chunk_start = offset;
        }
        let at = (offset - self.chunk_start) as usize;
        Ok(&self.chunk[at..at + len as usize])
    }
}

impl TarBytes for &[u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn bytes(&mut self, offset: u64, len: u64) -> Result<&[u8], Cause> {
        let end = offset.checked_add(len).filter(|&end| end <= self.size());
        let end = end.ok_or_else(|| truncated(self.size()))?;
        Ok(&self[offset as usize..end as usize])
    }
}

/// The regular-file members of one tar shard, in order, with their data extents.
fn index_shard(store: &dyn BlobStore, blob: &BlobInfo) -> Result<Vec<Member>, Cause> {
    walk(&mut ChunkReader {
        store,
        blob,
        chunk: Vec::new(),
        chunk_start: 0,
    })
}

/// The members of a record: the run of a sample key's members read from its shard as one
/// range ([`TarShards::records_from_listing`]), each member's extent within `record`.
///
/// # Errors
///
/// A damaged header, or a member that runs past the record's end.
pub(super) fn record_members(record: &[u8]) -> Result<Vec<Member>, Cause> {
    walk(&mut { record })
}

/// The regular-file members of a tar archive, in order, with their data extents.
/// Understands ustar, GNU long names (`L`) and pax headers (`x`: `path` and `size`).
fn walk(reader: &mut impl TarBytes) -> Result<Vec<Member>, Cause> {
    let size_of_all = reader.size();
    let mut members = Vec::new();
    let mut offset = 0;
    let mut long_name: Option<String> = None;
    let mut pax: HashMap<String, String> = HashMap::new();
    let mut first_header = None;
    let mut ended = false;
    while offset + BLOCK <= size_of_all {
        let header = reader.bytes(offset, BLOCK)?.to_vec();
        if header.iter().all(|&b| b == 0) {
            ended = true; // end-of-archive marker
            break;
        }
        check_header_checksum(&header, offset)?;
        let data = offset + BLOCK;
        let size = match pax.remove("size") {
            Some(size) => size
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| size.parse().ok())
                .flatten()
                .ok_or_else(|| Cause::Corrupt(format!("bad pax size {size:?} at byte {offset}")))?,
            None => parse_size(&header[124..136], offset)?,
        };
        // Sizes come from the file: a crafted one must not wrap the arithmetic (a wrapped
        // end passes the bounds check and sends the offset back to the start, forever).
        if size > size_of_all - data {
            return Err(truncated(size_of_all));
        }
        let next = size
            .div_ceil(BLOCK)
            .checked_mul(BLOCK)
            .and_then(|padded| data.checked_add(padded))
            .ok_or_else(|| truncated(size_of_all))?;
        let kind = header[156];
        let header_at = *first_header.get_or_insert(offset);
        if matches!(kind, b'L' | b'x') && size > MAX_META_BYTES {
            return Err(Cause::Corrupt(format!(
                "a {size}-byte tar extension header at byte {offset} (at most {MAX_META_BYTES} \
                 bytes are read)"
            )));
        }
        match kind {
            b'L' => long_name = Some(c_string(reader.bytes(data, size)?)),
            b'x' => pax.extend(parse_pax(reader.bytes(data, size)?)),
            b'0' | 0 | b'7' => {
                let name = match (pax.remove("path"), long_name.take()) {
                    (Some(path), _) => path,
                    (None, Some(long)) => long,
                    (None, None) => ustar_name(&header),
                };
                members.push(Member {
                    name,
                    header: header_at,
                    offset: data,
                    len: size,
                });
                first_header = None;
            }
            _ => {
                // Directories, links, global pax headers: not samples.
                long_name = None;
                pax.clear();
                first_header = None;
            }
        }
        offset = next;
    }
    // Without the end marker, a tar file ends exactly after its last member's padding;
    // anything else is a cut-off copy.
    if !ended && offset != size_of_all {
        return Err(truncated(size_of_all));
    }
    Ok(members)
}

/// Where a member's data and its padding end (the archive's end, if that comes first).
fn padded_end(member: &Member, archive: u64) -> u64 {
    (member.offset + member.len.div_ceil(BLOCK) * BLOCK).min(archive)
}

fn truncated(size: u64) -> Cause {
    Cause::Corrupt(format!(
        "the tar file ends at byte {size} inside a member or header (truncated?)"
    ))
}

fn check_header_checksum(header: &[u8], offset: u64) -> Result<(), Cause> {
    let stored = parse_octal(&header[148..156]);
    // The checksum is computed with its own field taken as eight spaces.
    let sum: u64 = header
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(b)
            }
        })
        .sum();
    if stored != Some(sum) {
        return Err(Cause::Corrupt(format!(
            "bad tar header checksum at byte {offset} (not a tar file, or damaged)"
        )));
    }
    Ok(())
}

/// A size field: octal text, or base-256 when the high bit of the first byte is set.
fn parse_size(field: &[u8], offset: u64) -> Result<u64, Cause> {
    if field[0] & 0x80 != 0 {
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            value = value
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(b)))
                .ok_or_else(|| Cause::Corrupt(format!("member size overflows at byte {offset}")))?;
        }
        return Ok(value);
    }
    parse_octal(field).ok_or_else(|| Cause::Corrupt(format!("bad size field at byte {offset}")))
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The name of a ustar header: `prefix/name` when the ustar prefix field is used.
fn ustar_name(header: &[u8]) -> String {
    let name = c_string(&header[0..100]);
    if &header[257..262] == b"ustar" {
        let prefix = c_string(&header[345..500]);
        if !prefix.is_empty() {
            return format!("{prefix}/{name}");
        }
    }
    name
}

/// Pax records: `"<length> <key>=<value>\n"` each.
fn parse_pax(mut bytes: &[u8]) -> Vec<(String, String)> {
    let mut records = Vec::new();
    while let Some(space) = bytes.iter().position(|&b| b == b' ') {
        let Some(len) = std::str::from_utf8(&bytes[..space])
            .ok()
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|&l| l > space && l <= bytes.len())
        else {
            break;
        };
        let record = &bytes[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(eq) = record.iter().position(|&b| b == b'=') {
            records.push((
                String::from_utf8_lossy(&record[..eq]).into_owned(),
                String::from_utf8_lossy(&record[eq + 1..]).into_owned(),
            ));
        }
        bytes = &bytes[len..];
    }
    records
}

/// A member's sample key: its name up to the first `.` of the last path component.
fn sample_key(name: &str) -> &str {
    let base = name.rfind('/').map_or(0, |i| i + 1);
    match name[base..].find('.') {
        Some(dot) => &name[..base + dot],
        None => name,
    }
}

/// A member's extension as WebDataset sees it: everything after the key's `.`.
pub(super) fn member_ext(name: &str) -> &str {
    name[sample_key(name).len()..].trim_start_matches('.')
}

/// Consecutive members with the same key.
fn group_by_key(members: &[Member]) -> impl Iterator<Item = &[Member]> {
    members.chunk_by(|a, b| sample_key(&a.name) == sample_key(&b.name))
}

fn read_label(store: &dyn BlobStore, shard: &BlobInfo, cls: &Member) -> Result<u32, String> {
    if cls.len > 64 {
        return Err(format!(
            "{} is {} bytes, too long for a label",
            cls.name, cls.len
        ));
    }
    let mut text = Vec::new();
    store
        .read_version(
            &shard.key,
            shard.version.as_deref(),
            cls.offset,
            cls.len,
            &mut text,
        )
        .map_err(|cause| format!("{}: {cause}", cls.name))?;
    let text = String::from_utf8_lossy(&text);
    text.trim().parse().map_err(|_| {
        format!(
            "{} holds {:?}, not a class number (WebDataset .cls members are decimal text)",
            cls.name,
            text.trim()
        )
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::storage::LocalDir;
    use std::fs;

    /// A tar file of `(name, data)` members in ustar format, written the way GNU tar does:
    /// a name over 100 bytes in a GNU long-name header before its member's.
    pub(crate) fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
        fn header(out: &mut Vec<u8>, name: &[u8], size: usize, kind: u8) {
            let mut header = [0u8; 512];
            let shown = name.len().min(100);
            header[..shown].copy_from_slice(&name[..shown]);
            header[100..108].copy_from_slice(b"0000644\0");
            header[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
            header[136..148].copy_from_slice(b"00000000000\0");
            header[156] = kind;
            header[257..263].copy_from_slice(b"ustar\0");
            header[263..265].copy_from_slice(b"00");
            header[148..156].copy_from_slice(b"        ");
            let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
            header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            out.extend_from_slice(&header);
        }
        let mut out = Vec::new();
        for (name, data) in members {
            if name.len() > 100 {
                header(&mut out, b"././@LongLink", name.len() + 1, b'L');
                out.extend_from_slice(name.as_bytes());
                out.push(0);
                out.resize(out.len().div_ceil(512) * 512, 0);
            }
            header(&mut out, name.as_bytes(), data.len(), b'0');
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    fn shards(files: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, Result<TarShards>) {
        shards_in(tempfile::tempdir().unwrap(), files)
    }

    /// Writes `files` into `dir` and opens its shards.
    fn shards_in(
        dir: tempfile::TempDir,
        files: &[(&str, Vec<u8>)],
    ) -> (tempfile::TempDir, Result<TarShards>) {
        for (name, bytes) in files {
            fs::write(dir.path().join(name), bytes).unwrap();
        }
        let store = Arc::new(LocalDir::new(dir.path()).unwrap());
        (dir, TarShards::open(store, crate::sample::Modality::Image))
    }

    #[test]
    fn groups_members_by_key_and_reads_each_image_with_labels() {
        let big = vec![7u8; 600_000]; // larger than a chunk: skipped while indexing
        let (_dir, opened) = shards(&[
            (
                "a.tar",
                tar(&[
                    ("c1/000001.jpg", b"one"),
                    ("c1/000001.cls", b"3\n"),
                    ("000002.png", &big),
                    ("000002.cls", b"1"),
                ]),
            ),
            (
                "b.tar",
                tar(&[("v1.0/x.jpg", b"three"), ("v1.0/x.cls", b" 0 ")]),
            ),
            ("readme.txt", b"not a shard".to_vec()),
        ]);
        let shards = opened.unwrap();
        let catalog = shards.catalog();
        assert_eq!(catalog.len(), 3);
        let mut out = Vec::new();
        let expected: [(&[u8], u32, &str); 3] = [
            (b"one", 3, "a.tar/c1/000001.jpg"),
            (&big, 1, "a.tar/000002.png"),
            (b"three", 0, "b.tar/v1.0/x.jpg"),
        ];
        for (id, (bytes, label, path)) in expected.into_iter().enumerate() {
            shards.read(id as u64, &mut out).unwrap();
            assert_eq!(out, bytes);
            assert_eq!(catalog.label(id as u64), Some(label));
            assert_eq!(catalog.relative_path(id as u64), path);
        }
        assert!(shards.location(2).ends_with("b.tar:v1.0/x.jpg"));
        assert_eq!(shards.stats().bytes, 3 + big.len() as u64 + 5);
    }

    #[test]
    fn long_names_from_gnu_and_pax_headers() {
        let long = format!("{}/000001.jpg", "d".repeat(120));
        let mut gnu = tar(&[("././@LongLink", format!("{long}\0").as_bytes())]);
        gnu[156] = b'L';
        fix_checksum(&mut gnu[..512]);
        gnu.truncate(gnu.len() - 1024);
        gnu.extend(tar(&[("truncated-name.jpg", b"gnu")]));
        let record = " path=p/000002.jpg\n";
        let record = format!("{}{record}", record.len() + 2);
        let mut pax = tar(&[("PaxHeaders/x", record.as_bytes())]);
        pax[156] = b'x';
        fix_checksum(&mut pax[..512]);
        pax.truncate(pax.len() - 1024);
        pax.extend(tar(&[("short.jpg", b"pax")]));
        let (_dir, opened) = shards(&[("a.tar", gnu), ("b.tar", pax)]);
        let shards = opened.unwrap();
        assert_eq!(shards.catalog().relative_path(0), format!("a.tar/{long}"));
        assert_eq!(shards.catalog().relative_path(1), "b.tar/p/000002.jpg");
        let mut out = Vec::new();
        shards.read(1, &mut out).unwrap();
        assert_eq!(out, b"pax");
    }

    fn fix_checksum(header: &mut [u8]) {
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }

    #[test]
    fn damaged_shards_and_bad_labels_are_clear_errors() {
        let good = tar(&[("1.jpg", b"x"), ("1.cls", b"2")]);
        let mut truncated = good.clone();
        truncated.truncate(600);
        let (_d, r) = shards(&[("a.tar", truncated)]);
        assert!(r.unwrap_err().to_string().contains("truncated"));

        let (_d, r) = shards(&[("a.tar", b"random bytes, not a tar".repeat(40))]);
        assert!(r.unwrap_err().to_string().contains("checksum"));

        let (_d, r) = shards(&[("a.tar", tar(&[("1.jpg", b"x"), ("1.cls", b"dog")]))]);
        assert!(r.unwrap_err().to_string().contains("not a class number"));

        let (_d, r) = shards(&[("a.tar", good.clone()), ("b.tar", good)]);
        assert!(r.unwrap_err().to_string().contains("appears again"));

        let (_d, r) = shards(&[("a.txt", b"x".to_vec())]);
        assert!(r.unwrap_err().to_string().contains("no .tar shards"));
    }

    /// One good member, then a member whose size field is `field`.
    fn with_size_field(field: [u8; 12]) -> Vec<u8> {
        let mut out = tar(&[("0.jpg", b"ok"), ("1.jpg", b"x")]);
        out[1024 + 124..1024 + 136].copy_from_slice(&field);
        fix_checksum(&mut out[1024..1536]);
        out
    }

    /// One good member, then a pax header setting `size`, then a member.
    fn with_pax(size: &str) -> Vec<u8> {
        let record = format!(" size={size}\n");
        let digits = (record.len() + 2).to_string().len();
        let records = format!("{}{record}", record.len() + digits);
        let mut out = tar(&[("0.jpg", b"ok")]);
        out.truncate(out.len() - 1024);
        let mut pax = tar(&[("PaxHeaders/x", records.as_bytes())]);
        pax[156] = b'x';
        fix_checksum(&mut pax[..512]);
        out.extend(&pax[..pax.len() - 1024]);
        out.extend(tar(&[("1.jpg", b"x")]));
        out
    }

    /// Indexes `bytes` as a shard on a thread, failing the test if that takes a minute.
    fn index_within_a_minute(bytes: Vec<u8>) -> std::result::Result<usize, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (_dir, opened) = shards(&[("a.tar", bytes)]);
            let _ = tx.send(opened.map(|s| s.catalog().len()).map_err(|e| e.to_string()));
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("indexing the shard hung")
    }

    /// A size field in GNU tar's base-256 form.
    fn base256(size: u64) -> [u8; 12] {
        let mut field = [0u8; 12];
        field[0] = 0x80;
        field[4..].copy_from_slice(&size.to_be_bytes());
        field
    }

    #[test]
    fn crafted_sizes_are_refused_without_wrapping() {
        let wraps_back = base256(u64::MAX - 511);
        let mut huge = [0u8; 12];
        huge[0] = 0xFF;
        huge[1..].fill(0xFF);
        for (what, shard) in [
            ("base-256 size 2^64 - 512", with_size_field(wraps_back)),
            ("base-256 size beyond 2^64", with_size_field(huge)),
            ("non-octal size", with_size_field(*b"0000000009z\0")),
            ("pax size 2^64 - 1", with_pax("18446744073709551615")),
            ("pax size 2^64 - 1536", with_pax("18446744073709550080")),
            ("pax size -1", with_pax("-1")),
            ("pax size +5", with_pax("+5")),
        ] {
            let result = index_within_a_minute(shard);
            assert!(result.is_err(), "{what}: {result:?}");
        }
        // The well-formed pax size is still honoured.
        assert_eq!(index_within_a_minute(with_pax("1")), Ok(2));
    }

    /// Writes `head`, then extends the file to `len` bytes without writing them.
    fn sparse(path: &std::path::Path, head: &[u8], len: u64) {
        fs::write(path, head).unwrap();
        fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_len(len)
            .unwrap();
    }

    #[test]
    fn oversized_extension_headers_and_members_are_not_read() {
        // Sparse files: the sizes are real, the disk blocks are not.
        let dir = tempfile::tempdir().unwrap();
        let mut pax = tar(&[("PaxHeaders/x", b"")]);
        pax.truncate(512);
        pax[156] = b'x';
        pax[124..136].copy_from_slice(format!("{:011o}\0", 1u64 << 30).as_bytes());
        fix_checksum(&mut pax[..512]);
        let file = dir.path().join("pax.tar");
        sparse(&file, &pax, 512 + (1 << 30) + 1024);
        let err = TarShards::open(
            Arc::new(LocalDir::new(dir.path()).unwrap()),
            crate::sample::Modality::Image,
        )
        .unwrap_err();
        assert!(err.to_string().contains("extension header"), "{err}");
        fs::remove_file(&file).unwrap();

        let mut member = tar(&[("big.jpg", b"")]);
        member.truncate(512);
        let size = 8u64 << 30;
        member[124..136].copy_from_slice(&base256(size));
        fix_checksum(&mut member[..512]);
        sparse(&dir.path().join("big.tar"), &member, 512 + size + 1024);
        let shards = TarShards::open(
            Arc::new(LocalDir::new(dir.path()).unwrap()),
            crate::sample::Modality::Image,
        )
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(
            shards.read(0, &mut out),
            Err(Cause::TooLarge {
                bytes: size,
                limit: crate::storage::DEFAULT_MAX_BYTES,
                field: None,
            })
        );
        assert!(out.capacity() < 1 << 20);
    }

    #[test]
    fn a_shard_rewritten_or_replaced_after_indexing_is_refused_not_misread() {
        let (dir, opened) = shards(&[("a.tar", tar(&[("1.jpg", b"one"), ("2.jpg", b"two")]))]);
        let shards = opened.unwrap();
        let mut out = Vec::new();
        shards.read(0, &mut out).unwrap();
        assert_eq!(out, b"one");
        // Rewritten in place, same size, other bytes (dated a second later, so that a
        // coarse clock cannot hide the change).
        let file = dir.path().join("a.tar");
        fs::write(&file, tar(&[("1.jpg", b"ONE"), ("2.jpg", b"TWO")])).unwrap();
        let later =
            fs::metadata(&file).unwrap().modified().unwrap() + std::time::Duration::from_secs(1);
        fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let err = shards.read(1, &mut out).unwrap_err();
        assert!(err.to_string().contains("changed since"), "{err}");
        // Replaced by another file.
        let (dir, opened) = shards_in(dir, &[]);
        let shards = opened.unwrap();
        let replacement = dir.path().join("new.tar");
        fs::write(&replacement, tar(&[("1.jpg", b"xyz"), ("2.jpg", b"uvw")])).unwrap();
        fs::rename(&replacement, dir.path().join("a.tar")).unwrap();
        let err = shards.read(0, &mut out).unwrap_err();
        assert!(err.to_string().contains("changed since"), "{err}");
    }

    #[test]
    fn sample_keys_follow_webdataset() {
        assert_eq!(sample_key("dir/000123.jpg"), "dir/000123");
        assert_eq!(sample_key("a.b/c.d.cls"), "a.b/c");
        assert_eq!(member_ext("a.b/c.d.cls"), "d.cls");
        assert_eq!(member_ext("x.cls"), "cls");
    }
}
