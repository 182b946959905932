//! Blob stores (named objects with ranged reads) and [`Objects`], the source that reads
//! one blob per sample.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{NextRead, ReadDone, Served, Source, SourceStats, DEFAULT_MAX_BYTES};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// One blob of a [`BlobStore`] listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// The blob's name relative to the store's root, `/`-separated.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// What identifies this content of the blob, where the store tells (an object's ETag,
    /// when the listing has one; a file's inode and modification time): reads through
    /// [`BlobStore::read_version`] fail once the blob has changed since it was listed.
    pub version: Option<String>,
}

/// Named objects with ranged reads: a directory of files, or a bucket prefix in object
/// storage. Shared by all loader threads, so every method takes `&self`.
pub trait BlobStore: Send + Sync + fmt::Debug {
    /// Every blob under the root, recursively, with its size, sorted by key.
    ///
    /// # Errors
    ///
    /// When the root cannot be listed (missing directory or bucket, no access, server
    /// unreachable); the error names the root and says what to check.
    fn list(&self) -> Result<Vec<BlobInfo>>;

    /// Reads exactly `len` bytes from `offset` of blob `key` into `out`, replacing its
    /// contents. A blob that ends before `offset + len` is an error, never a short read.
    fn read_range(&self, key: &str, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<(), Cause> {
        self.read_version(key, None, offset, len, out)
    }

    /// Like [`BlobStore::read_range`], for the blob as it was listed with `version`
    /// (`None`: as it is now): a blob rewritten or replaced since is [`Cause::Io`], not
    /// other bytes under the same name. A store that cannot tell versions apart reads it
    /// as it is now.
    fn read_version(
        &self,
        key: &str,
        version: Option<&str>,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Cause>;

    /// Reads the ranges `next` gives (each into its own buffer) until it has none, calling
    /// `done` as each read ends, in any order; exactly once for each. A store over a
    /// network keeps up to [`reads_at_once`](BlobStore::reads_at_once) in flight, asking
    /// `next` for another whenever one ends, as [`Source::read_each`] does; the default
    /// reads one after another through [`read_version`](BlobStore::read_version).
    fn read_each_range<'a>(
        &self,
        next: &mut (dyn FnMut() -> Option<RangeRead<'a>> + '_),
        done: &mut ReadDone<'_>,
    ) {
        let mut number = 0;
        while let Some(read) = next() {
            let RangeRead {
                key,
                version,
                offset,
                len,
                mut out,
            } = read;
            let result = self.read_version(key, version, offset, len, &mut out);
            done(number, out, result);
            number += 1;
        }
    }

    /// How many reads one call of [`read_each_range`](BlobStore::read_each_range) keeps
    /// in flight at once: 1 (the default) for a store read one range after another.
    fn reads_at_once(&self) -> usize {
        1
    }

    /// The store's root as a user would write it: a path or a URL.
    fn root(&self) -> String;

    /// Blob `key`'s location as a user would write it.
    fn locate(&self, key: &str) -> String {
        format!("{}/{key}", self.root().trim_end_matches('/'))
    }
}

/// One ranged read of [`BlobStore::read_each_range`]: `len` bytes from `offset` of blob
/// `key` as listed with `version` (as [`BlobStore::read_version`] takes them), into `out`.
#[derive(Debug)]
pub struct RangeRead<'a> {
    /// The blob's key.
    pub key: &'a str,
    /// Its version when listed, if the store tells.
    pub version: Option<&'a str>,
    /// The first byte.
    pub offset: u64,
    /// Bytes to read.
    pub len: u64,
    /// The buffer to read into, replaced.
    pub out: Vec<u8>,
}

/// The files under a local directory, as blobs keyed by their relative paths.
#[derive(Debug, Clone)]
pub struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    /// The blobs under `root`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when `root` is not a readable directory.
    pub fn new(root: &Path) -> Result<LocalDir> {
        let root = fs::canonicalize(root).map_err(|e| Error::io(root, e))?;
        if !root.is_dir() {
            return Err(Error::Config(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        Ok(LocalDir { root })
    }
}

impl LocalDir {
    /// Blob `key`'s size and version (an absolute `key` is that file).
    pub(crate) fn info(&self, key: &str) -> std::result::Result<BlobInfo, Cause> {
        let meta = fs::metadata(self.root.join(key)).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Cause::Io(format!("no such file: {key}")),
            _ => Cause::from_io(&e),
        })?;
        if !meta.is_file() {
            return Err(Cause::Io(format!("{key} is not a file")));
        }
        Ok(BlobInfo {
            key: key.to_string(),
            size: meta.len(),
            version: Some(file_version(&meta)),
        })
    }
}

impl BlobStore for LocalDir {
    fn list(&self) -> Result<Vec<BlobInfo>> {
        let mut blobs = Vec::new();
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
                let entry = entry.map_err(|e| Error::io(&dir, e))?;
                let path = entry.path();
                let name = entry.file_name();
                if name.as_encoded_bytes().starts_with(b".") {
                    continue;
                }
                let meta = fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
                if meta.is_dir() {
                    dirs.push(path);
                } else if meta.is_file() {
                    let key = path
                        .strip_prefix(&self.root)
                        .expect("listed under the root");
                    if let Some(key) = key.to_str() {
                        blobs.push(BlobInfo {
                            key: key.to_string(),
                            size: meta.len(),
                            version: Some(file_version(&meta)),
                        });
                    }
                }
            }
        }
        blobs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(blobs)
    }

    fn read_version(
        &self,
        key: &str,
        version: Option<&str>,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Cause> {
        out.clear();
        let file = File::open(self.root.join(key)).map_err(|e| Cause::from_io(&e))?;
        if let Some(version) = version {
            let meta = file.metadata().map_err(|e| Cause::from_io(&e))?;
            if file_version(&meta) != version {
                return Err(changed(key));
            }
        }
        out.resize(len as usize, 0);
        let read = file.read_exact_at(out, offset);
        read.map_err(|e| {
            out.clear();
            match e.kind() {
                io::ErrorKind::UnexpectedEof => Cause::Io(format!(
                    "{key} ends before byte {} (changed since it was indexed?)",
                    offset + len
                )),
                _ => Cause::from_io(&e),
            }
        })
    }

    fn root(&self) -> String {
        self.root.display().to_string()
    }
}

/// Reads one blob per sample: images stored as separate objects under a prefix, laid out
/// like a local dataset (one sub-prefix per class, or flat).
#[derive(Debug)]
pub struct Objects {
    store: Arc<dyn BlobStore>,
    catalog: Arc<Catalog>,
    /// Each sample's version as listed.
    versions: Vec<Option<String>>,
    max_bytes: u64,
    served: Served,
}

impl Objects {
    /// Lists `store` and catalogs its images: `.jpg`, `.jpeg` and `.png` keys. When some
    /// key has a `/`, the first component is the class (sorted by name, numbered from 0,
    /// as torchvision's `ImageFolder` does) and keys without one are skipped; otherwise
    /// the dataset is flat. Samples come in the order a scan of the same tree on disk
    /// gives: by directory, then by name.
    ///
    /// # Errors
    ///
    /// When the store cannot be listed or holds no images.
    pub fn open(store: Arc<dyn BlobStore>, modality: Modality) -> Result<Objects> {
        let listing = store.list()?;
        Objects::from_listing(store, listing, modality)
    }

    /// Like [`Objects::open`], from a listing of `store` already made.
    ///
    /// # Errors
    ///
    /// When the listing holds no images.
    pub fn from_listing(
        store: Arc<dyn BlobStore>,
        listing: Vec<BlobInfo>,
        modality: Modality,
    ) -> Result<Objects> {
        let mut images: Vec<BlobInfo> = listing
            .into_iter()
            .filter(|b| is_sample_key(&b.key, modality))
            .collect();
        let foldered = images.iter().any(|b| b.key.contains('/'));
        if foldered {
            images.retain(|b| b.key.contains('/'));
        }
        images.sort_by(|a, b| scan_order(&a.key).cmp(&scan_order(&b.key)));
        let mut classes: Vec<String> = Vec::new();
        let mut samples = Vec::with_capacity(images.len());
        let mut versions = Vec::with_capacity(images.len());
        for blob in images {
            versions.push(blob.version);
            let label = if foldered {
                let class = blob.key.split('/').next().expect("split yields one item");
                if classes.last().map(String::as_str) != Some(class) {
                    classes.push(class.to_string());
                }
                Some(classes.len() as u32 - 1)
            } else {
                None
            };
            samples.push((blob.key, label, blob.size));
        }
        let catalog = Catalog::from_samples(store.root(), modality, classes, samples)?;
        Ok(Objects {
            store,
            catalog: Arc::new(catalog),
            versions,
            max_bytes: DEFAULT_MAX_BYTES,
            served: Served::default(),
        })
    }

    /// The samples found.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Where sample `id` lives: a whole blob.
    fn range(&self, id: SampleId) -> BlobRange<'_> {
        let version = self.versions[id as usize].as_deref();
        (
            self.catalog.relative_path(id),
            version,
            0,
            self.catalog.size(id),
        )
    }

    /// Refuses samples larger than `limit` bytes with [`Cause::TooLarge`], before
    /// reading them, instead of the default limit of [`DEFAULT_MAX_BYTES`].
    pub fn with_max_bytes(self, limit: u64) -> Objects {
        Objects {
            max_bytes: limit,
            ..self
        }
    }
}

/// A local file's version: its inode (a replacement is another file) and modification
/// time (a rewrite in place changes it).
fn file_version(meta: &fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}:{}.{:09}", meta.ino(), meta.mtime(), meta.mtime_nsec())
}

/// A blob that is no longer what was listed.
pub(super) fn changed(key: &str) -> Cause {
    Cause::Io(format!(
        "{key} changed since the dataset was indexed (open the dataset again to read it as \
         it is now)"
    ))
}

/// Refuses a blob sample by its catalog size before any byte is read: empty, or over the
/// per-sample limit.
pub(super) fn check_sample_size(size: u64, limit: u64, out: &mut Vec<u8>) -> Result<(), Cause> {
    out.clear();
    match size {
        0 => Err(Cause::Empty),
        bytes if bytes > limit => Err(Cause::TooLarge {
            bytes,
            limit,
            field: None,
        }),
        _ => Ok(()),
    }
}

/// Where a sample of a source whose samples are ranges of blobs lives: its blob's key and
/// version, its offset and its length.
pub(super) type BlobRange<'a> = (&'a str, Option<&'a str>, u64, u64);

/// [`Source::read`] for a source whose samples are ranges of blobs: a sample refused by
/// its size (empty, over `max_bytes`) is not read; `count` gets the bytes of one read.
pub(super) fn read_range(
    store: &dyn BlobStore,
    (key, version, offset, len): BlobRange<'_>,
    max_bytes: u64,
    out: &mut Vec<u8>,
    count: &dyn Fn(u64),
) -> Result<(), Cause> {
    check_sample_size(len, max_bytes, out)?;
    store.read_version(key, version, offset, len, out)?;
    count(len);
    Ok(())
}

/// [`Source::read_each`] for a source whose samples are ranges of blobs (`range` of a
/// sample: where it lives, or why it cannot be read): a sample refused by its range or
/// its size (empty, over `max_bytes`) ends at once, the rest go to `store`, which keeps
/// them in flight together if it can. `count` gets the bytes of each read that succeeded.
pub(super) fn read_ranges<'a>(
    store: &dyn BlobStore,
    (next, done): (&mut NextRead<'_>, &mut ReadDone<'_>),
    max_bytes: u64,
    range: impl Fn(SampleId) -> Result<BlobRange<'a>, Cause>,
    count: &dyn Fn(u64),
) {
    // The store numbers the reads it is given; a refused one is numbered here only.
    let numbers = RefCell::new(Numbering::default());
    let done = RefCell::new(done);
    let mut next_range = || loop {
        let (id, mut out) = next()?;
        let number = numbers.borrow_mut().given();
        let read = range(id).and_then(|r| check_sample_size(r.3, max_bytes, &mut out).map(|()| r));
        match read {
            Err(cause) => {
                out.clear();
                (*done.borrow_mut())(number, out, Err(cause));
            }
            Ok((key, version, offset, len)) => {
                numbers.borrow_mut().pass(number, ());
                return Some(RangeRead {
                    key,
                    version,
                    offset,
                    len,
                    out,
                });
            }
        }
    };
    store.read_each_range(&mut next_range, &mut |below, out, result| {
        let Some((number, ())) = numbers.borrow_mut().ended(below) else {
            return; // a store that ended it twice, or never was given it
        };
        if result.is_ok() {
            count(out.len() as u64);
        }
        (*done.borrow_mut())(number, out, result);
    });
}

/// How a layer of [`Source::read_each`] numbers reads: those it is given, in order, and
/// those it passes to the layer below, which numbers them again in the order it gets
/// them. Only the reads under way below are kept, each with what the layer needs at its
/// end (`T`), so a call that streams a whole epoch holds no more than its reads in flight.
#[derive(Debug)]
pub(crate) struct Numbering<T> {
    given: usize,
    passed: usize,
    below: HashMap<usize, (usize, T)>,
}

impl<T> Default for Numbering<T> {
    fn default() -> Numbering<T> {
        Numbering {
            given: 0,
            passed: 0,
            below: HashMap::new(),
        }
    }
}

impl<T> Numbering<T> {
    /// The number of the read given now.
    pub(crate) fn given(&mut self) -> usize {
        self.given += 1;
        self.given - 1
    }

    /// Read `number` goes below, keeping `kept` for its end.
    pub(crate) fn pass(&mut self, number: usize, kept: T) {
        self.below.insert(self.passed, (number, kept));
        self.passed += 1;
    }

    /// The read below numbered `below` ended: its number here and what was kept. `None`
    /// for one that had ended already or was never passed.
    pub(crate) fn ended(&mut self, below: usize) -> Option<(usize, T)> {
        self.below.remove(&below)
    }
}

impl Source for Objects {
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
        self.store.locate(self.catalog.relative_path(id))
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// Whether a key names a sample of `modality` by its extension, as the catalog's scan
/// decides.
pub(crate) fn is_sample_key(key: &str, modality: Modality) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    !name.starts_with('.') && modality.accepts(name)
}

/// `(class, directory, name)`: the order in which a scan of a directory tree visits
/// files. The class comes first because a plain path order would put `a-b/x` between
/// `a/x` and `a/sub/x` (`-` sorts before `/`), splitting class `a` in two.
fn scan_order(key: &str) -> (&str, &str, &str) {
    let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
    (key.split('/').next().unwrap_or(""), dir, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_match_a_scan_of_the_same_tree() {
        let dir = tempfile::tempdir().unwrap();
        for (path, bytes) in [
            ("b/x.jpg", &b"bx"[..]),
            ("a/z.png", b"az"),
            ("a/sub/y.jpg", b"asy"),
            ("a/b.JPEG", b"ab"),
            ("a-b/c.jpg", b"a-bc"),
            ("a/notes.txt", b"no"),
            ("top.jpg", b"skipped: not in a class"),
        ] {
            let path = dir.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, bytes).unwrap();
        }
        let objects = Objects::open(
            Arc::new(LocalDir::new(dir.path()).unwrap()),
            crate::sample::Modality::Image,
        )
        .unwrap();
        let (scanned, _) = Catalog::scan(dir.path(), crate::sample::Modality::Image).unwrap();
        let listed = objects.catalog();
        assert_eq!(listed.len(), scanned.len());
        assert_eq!(listed.classes(), scanned.classes());
        let mut out = Vec::new();
        for id in 0..scanned.len() as u64 {
            assert_eq!(listed.relative_path(id), scanned.relative_path(id));
            assert_eq!(listed.label(id), scanned.label(id));
            objects.read(id, &mut out).unwrap();
            assert_eq!(out, fs::read(scanned.path(id)).unwrap());
        }
        assert_eq!(objects.stats().requests, scanned.len() as u64);
    }

    #[test]
    fn a_range_past_the_end_is_an_error_not_a_short_read() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.tar"), b"0123456789").unwrap();
        let store = LocalDir::new(dir.path()).unwrap();
        let mut out = Vec::new();
        store.read_range("a.tar", 2, 3, &mut out).unwrap();
        assert_eq!(out, b"234");
        assert!(matches!(
            store.read_range("a.tar", 8, 3, &mut out),
            Err(Cause::Io(_))
        ));
        assert!(out.is_empty());
        assert_eq!(
            store.read_range("gone.tar", 0, 1, &mut out),
            Err(Cause::Missing)
        );
    }
}
