//! The sample index: which files make up a dataset, their labels and their sizes.
//!
//! [`Catalog::scan`] walks a dataset root once and understands two layouts:
//!
//! * [`DatasetLayout::ImageFolder`]: the root holds one sub-directory per class. Classes are
//!   sorted by name and numbered `0..k`, and every class directory is searched
//!   recursively, exactly like torchvision's `ImageFolder`, so that labels and sample order
//!   match a PyTorch reference run on the same tree. Files directly in the root are not
//!   part of any class and are skipped.
//! * [`DatasetLayout::Flat`]: the root holds only files; samples have no labels.
//!
//! Image files are recognised by their extension (`.jpg`, `.jpeg`, `.png`, in any case).
//! Whether the bytes really are an image is the decoder's business, checked later by
//! content. Everything else is skipped and counted in [`ScanReport::ignored`]; hidden
//! entries (names starting with `.`) are skipped without being counted, because tools
//! leave them everywhere (`.DS_Store`, `.ipynb_checkpoints`) and they are never data.
//!
//! # Memory
//!
//! ImageNet has 1.28 million files, and datasets ten times larger are common, so a
//! catalog holds no `String` or `PathBuf` per sample: all relative paths live in one
//! string arena addressed by offsets, and labels and sizes are plain vectors. A sample
//! costs its path's bytes plus 20 bytes (16 for a flat dataset).
//!
//! # The saved index and its freshness
//!
//! Scanning a large tree stats every file and can take minutes on a network filesystem,
//! so [`Catalog::open`] keeps the result in an index file and re-uses it while it is
//! fresh. Deciding freshness must not stat every file again, so the index records the
//! modification time of every directory it scanned. Adding, removing or renaming an
//! entry changes the modification time of the directory holding it, so a changed
//! directory means a re-scan, and a second start costs one `stat` per directory.
//!
//! What this cannot see: a file rewritten in place (its directory does not change; the
//! sizes in the catalog are then stale, which is harmless because readers check the real
//! size), and a change made within the same filesystem timestamp tick as the scan read
//! that directory. Delete the index to force a re-scan after such changes.
//!
//! The index format (version 2, all integers little-endian):
//!
//! ```text
//! "NSTLCAT" version:u8
//! layout:u8                      0 = ImageFolder, 1 = Flat
//! modality:u8                    0 = Image, 1 = Audio (which files are samples)
//! root_len:u64 root bytes        the canonical root path
//! table   class names
//! table   scanned directories    relative to the root, "" is the root itself
//! i64 × directories              their modification times, in ns since the epoch
//! table   sample paths           relative to the root, '/'-separated
//! u32 × samples                  labels (ImageFolder only)
//! u64 × samples                  sizes in bytes
//! checksum:u64                   of every byte before it
//!
//! table = count:u64, end offset:u64 × count, UTF-8 text of length (last end offset)
//! ```

use std::env;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;

use crate::error::{Error, Result};
use crate::rng;
use crate::sample::Modality;

pub use crate::sample::SampleId;

const MAGIC: &[u8; 7] = b"NSTLCAT";
const VERSION: u8 = 2;

/// How many class directories are scanned at once. Scanning waits on the filesystem far
/// more than it computes (on a network filesystem each `stat` is a round trip), so this
/// is more than the core count of small machines, but small enough not to swamp a
/// shared file server.
const SCAN_THREADS: usize = 8;

/// How the files under a dataset root are organised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatasetLayout {
    /// One sub-directory per class, searched recursively; labels are class indices.
    ImageFolder,
    /// Images directly in the root; no labels.
    Flat,
}

/// What a scan skipped and what it found.
#[derive(Debug, Clone)]
pub struct ScanReport {
    /// Entries skipped because they are not image files: other extensions, names that
    /// are not UTF-8, symlinks that cannot be followed, files directly in the root of an
    /// ImageFolder tree. Hidden entries are not counted.
    pub ignored: u64,
    /// The layout the scan recognised.
    pub layout: DatasetLayout,
}

/// How [`Catalog::open`] obtained its catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// From a fresh index file; nothing was scanned.
    Loaded,
    /// By scanning the root, because the index was missing, stale or damaged. The new
    /// index is saved when possible; a failure to save is not reported, since the
    /// catalog is complete either way and the next start will simply scan again.
    Scanned,
}

/// The index of a dataset: every sample's path relative to the root, label and size.
///
/// Build one with [`Catalog::scan`] or, to re-use a saved index, [`Catalog::open`].
/// Sample accessors take a [`SampleId`] and panic if it is out of range, like slice
/// indexing.
#[derive(Clone, PartialEq, Eq)]
pub struct Catalog {
    /// Canonical: symlinks resolved, so equal roots compare equal.
    root: PathBuf,
    /// The kind of files listed.
    modality: Modality,
    layout: DatasetLayout,
    classes: Vec<String>,
    paths: Strings,
    /// One per sample for ImageFolder, empty for Flat.
    labels: Vec<u32>,
    sizes: Vec<u64>,
    total_bytes: u64,
    /// Every directory scanned, relative to the root ("" is the root), with its
    /// modification time as seen before it was listed: what decides freshness.
    dirs: Strings,
    mtimes: Vec<i64>,
}

impl Catalog {
    /// Scans `root` and builds a catalog of the files of `modality` found under it (by
    /// their extensions: [`Modality::extensions`]).
    ///
    /// The layout is [`DatasetLayout::ImageFolder`] when the root contains sub-directories and
    /// [`DatasetLayout::Flat`] when it holds only files; see the [module docs](self) for the
    /// rules. Symlinks are followed; a symlink leading back to a directory that contains
    /// it is skipped rather than followed forever.
    ///
    /// Within a class, samples come in torchvision's order: directories sorted by path,
    /// and within each directory, files sorted by name. Names are compared as bytes,
    /// which for UTF-8 is the code point order Python uses.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the root or a directory under it cannot be read, and
    /// [`Error::Config`] if the root is not a directory, holds no images, or has a class
    /// directory whose name is not UTF-8.
    pub fn scan(root: &Path, modality: Modality) -> Result<(Catalog, ScanReport)> {
        let (root, root_meta) = canonical_root(root)?;
        let listing = list_dir(&root, modality)?;
        let mut ignored = listing.ignored;
        let mut catalog = Catalog {
            root,
            modality,
            layout: DatasetLayout::Flat,
            classes: Vec::new(),
            paths: Strings::default(),
            labels: Vec::new(),
            sizes: Vec::new(),
            total_bytes: 0,
            dirs: Strings::default(),
            mtimes: Vec::new(),
        };
        catalog.dirs.push("");
        catalog.mtimes.push(mtime_ns(&root_meta));

        if listing.dirs.is_empty() {
            let mut files = listing.files;
            files.sort_unstable();
            for (name, size) in files {
                catalog.push_sample("", &name, None, size);
            }
        } else {
            catalog.layout = DatasetLayout::ImageFolder;
            // torchvision ignores files beside the class directories; so do we, but we
            // count them so that a user who meant a flat dataset sees something is off.
            ignored += listing.files.len() as u64;
            let mut classes = Vec::with_capacity(listing.dirs.len());
            for (name, meta) in listing.dirs {
                let name = name.into_string().map_err(|name| {
                    Error::Config(format!(
                        "class directory {name:?} in {} has a name that is not valid UTF-8; \
                         rename it (class names must be text)",
                        catalog.root.display()
                    ))
                })?;
                classes.push((name, meta));
            }
            classes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let root_id = (root_meta.dev(), root_meta.ino());
            let scans = scan_classes(&catalog.root, &classes, root_id, modality)?;
            for (label, scan) in scans.into_iter().enumerate() {
                let label = u32::try_from(label).map_err(|_| {
                    Error::Config(format!(
                        "{} has more class directories than nostall can label ({})",
                        catalog.root.display(),
                        u32::MAX
                    ))
                })?;
                ignored += scan.ignored;
                for dir in scan.dirs {
                    catalog.dirs.push(&dir.rel);
                    catalog.mtimes.push(dir.mtime);
                    for (name, size) in dir.files {
                        catalog.push_sample(&dir.rel, &name, Some(label), size);
                    }
                }
            }
            catalog.classes = classes.into_iter().map(|(name, _)| name).collect();
        }

        if catalog.is_empty() {
            return Err(Error::Config(format!(
                "found no {} in {}: nostall reads {} files for this pipeline, either \
                 directly in the root (no labels) or in one sub-directory per class \
                 (labels); {ignored} other entries were skipped",
                modality.plural(),
                catalog.root.display(),
                extension_list(modality)
            )));
        }
        let layout = catalog.layout;
        Ok((catalog, ScanReport { ignored, layout }))
    }

    /// A catalog of samples listed by another indexer (tar shards, an object-store
    /// prefix), in the given order: `(relative path, label, size)` each.
    ///
    /// `root` names the dataset in messages (a directory, or a URL such as
    /// `s3://bucket/prefix`). Either every sample has a label or none has: the layout is
    /// [`DatasetLayout::ImageFolder`] or [`DatasetLayout::Flat`] accordingly. `classes`
    /// may be empty when labels are bare numbers. Such a catalog has no directories to
    /// check for freshness, so it is not meant for [`Catalog::save`] and `open`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if there are no samples, or if some have labels and others not.
    pub fn from_samples(
        root: impl Into<PathBuf>,
        modality: Modality,
        classes: Vec<String>,
        samples: impl IntoIterator<Item = (String, Option<u32>, u64)>,
    ) -> Result<Catalog> {
        let mut catalog = Catalog {
            root: root.into(),
            modality,
            layout: DatasetLayout::Flat,
            classes,
            paths: Strings::default(),
            labels: Vec::new(),
            sizes: Vec::new(),
            total_bytes: 0,
            dirs: Strings::default(),
            mtimes: Vec::new(),
        };
        for (path, label, size) in samples {
            catalog.push_sample("", &path, label, size);
            if catalog.labels.len() != catalog.sizes.len() && !catalog.labels.is_empty() {
                return Err(Error::Config(format!(
                    "{}: sample {path} has {} but earlier samples have {}; give every \
                     sample a label, or none",
                    catalog.root.display(),
                    if label.is_some() {
                        "a label"
                    } else {
                        "no label"
                    },
                    if label.is_some() { "none" } else { "labels" },
                )));
            }
        }
        if catalog.is_empty() {
            return Err(Error::Config(format!(
                "found no samples in {}",
                catalog.root.display()
            )));
        }
        if !catalog.labels.is_empty() {
            catalog.layout = DatasetLayout::ImageFolder;
        }
        Ok(catalog)
    }

    /// Writes the catalog as a compact binary index to `path`, creating its directory.
    ///
    /// The index is written to a temporary file beside `path` and renamed over it, so a
    /// reader never sees a half-written index, and concurrent writers of the same index
    /// leave one complete file.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the directory or the file cannot be written.
    pub fn save(&self, path: &Path) -> Result<()> {
        let Some(name) = path.file_name() else {
            return Err(Error::Config(format!(
                "index path {} does not name a file",
                path.display()
            )));
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        // Only this user may list or write the index directory (it names the dataset's
        // files), and only this user may write the index.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::io(dir, e))?;
        // The process id keeps concurrent processes apart; the counter, threads.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        // No fsync: the index is a cache. If a crash leaves it empty or torn, loading it
        // fails its checksum and `open` scans again.
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut file| io::Write::write_all(&mut file, &self.encode()))
            .and_then(|()| fs::rename(&tmp, path));
        if let Err(err) = written {
            // Best effort: the error worth reporting is the one we already have.
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(path, err));
        }
        Ok(())
    }

    /// Reads an index written by [`Catalog::save`].
    ///
    /// The whole file is read at once and every length in it is checked against the
    /// file's size before anything is allocated, so a damaged or hostile index cannot
    /// cause a panic or a huge allocation.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be read, [`Error::BadIndex`] if it is not a
    /// nostall index, is from another format version, or is truncated or damaged.
    pub fn load(path: &Path) -> Result<Catalog> {
        let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
        Catalog::from_index_bytes(&bytes, path)
    }

    /// Returns the catalog of `root`, from its index when that is fresh, else by scanning.
    ///
    /// An index is used only if this user owns it and no one else may write it: one that
    /// another user could have written (in a shared temporary directory, say) could map
    /// the dataset's files to other labels.
    ///
    /// The index lives at `index_path`, or at [`Catalog::default_index_path`] when that
    /// is `None`. It is used when it was made for the same canonical root and no scanned
    /// directory has changed since (one `stat` per directory, none per file). Otherwise
    /// the root is scanned and the index rewritten; a missing, stale or damaged index is
    /// not an error.
    ///
    /// # Errors
    ///
    /// Those of [`Catalog::scan`], and [`Error::Config`] if the index would be inside
    /// the dataset root: writing it there would change the directory it sits in and
    /// force a re-scan on every start.
    pub fn open(
        root: &Path,
        index_path: Option<&Path>,
        modality: Modality,
    ) -> Result<(Catalog, Opened)> {
        let (root, _) = canonical_root(root)?;
        let default_path;
        let index_path = match index_path {
            Some(path) => path,
            None => {
                default_path = Catalog::default_index_path(&root, modality);
                &default_path
            }
        };
        if is_inside(&root, index_path) {
            return Err(Error::Config(format!(
                "the index {} is inside the dataset root {}; writing it there changes the \
                 dataset's directories and forces a re-scan on every start, so choose an \
                 index path outside the dataset (or set NOSTALL_CACHE_DIR)",
                index_path.display(),
                root.display()
            )));
        }
        if let Some(catalog) = load_own(index_path) {
            if catalog.root == root && catalog.modality == modality && catalog.is_fresh() {
                return Ok((catalog, Opened::Loaded));
            }
        }
        let (catalog, _) = Catalog::scan(&root, modality)?;
        // Not fatal: see `Opened::Scanned`.
        let _ = catalog.save(index_path);
        Ok((catalog, Opened::Scanned))
    }

    /// Where [`Catalog::open`] keeps the index of `root` unless told otherwise.
    ///
    /// The directory is `$NOSTALL_CACHE_DIR` if set, else `$XDG_CACHE_HOME/nostall`, else
    /// `$HOME/.cache/nostall` (else a `nostall-UID` directory of this user's in the system's
    /// temporary directory). The file is named by a hash of the canonical root path, so every
    /// spelling of the same root shares one index, and by the modality, so that the images
    /// and the audio files of one folder have an index each.
    pub fn default_index_path(root: &Path, modality: Modality) -> PathBuf {
        let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let dir = cache_dir(
            env::var_os("NOSTALL_CACHE_DIR"),
            env::var_os("XDG_CACHE_HOME"),
            env::var_os("HOME"),
        );
        match modality {
            Modality::Image => dir.join(format!("{:016x}.idx", path_hash(&root))),
            other => dir.join(format!("{:016x}.{other}.idx", path_hash(&root))),
        }
    }

    /// The kind of files it lists.
    pub fn modality(&self) -> Modality {
        self.modality
    }

    /// The number of samples.
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether the catalog has no samples. A scanned or loaded catalog never is: a
    /// dataset without images is an error.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// The dataset root, canonical (absolute, symlinks resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The layout the scan recognised.
    pub fn layout(&self) -> DatasetLayout {
        self.layout
    }

    /// The class names, sorted; a sample's label indexes this. Empty for a flat dataset.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The sample's class index, or `None` for a flat dataset.
    pub fn label(&self, id: SampleId) -> Option<u32> {
        let i = self.index(id);
        self.labels.get(i).copied()
    }

    /// The sample's path relative to the root, with `/` between components.
    pub fn relative_path(&self, id: SampleId) -> &str {
        self.paths.get(self.index(id))
    }

    /// The sample's full path: the root joined with its relative path.
    pub fn path(&self, id: SampleId) -> PathBuf {
        self.root.join(self.relative_path(id))
    }

    /// The sample's size in bytes when it was scanned.
    pub fn size(&self, id: SampleId) -> u64 {
        self.sizes[self.index(id)]
    }

    /// The sum of all sample sizes, as scanned.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    fn index(&self, id: SampleId) -> usize {
        match usize::try_from(id) {
            Ok(i) if i < self.len() => i,
            _ => panic!(
                "sample id {id} is out of range: the catalog holds {} samples",
                self.len()
            ),
        }
    }

    fn push_sample(&mut self, dir: &str, name: &str, label: Option<u32>, size: u64) {
        self.paths.push_joined(dir, name);
        self.labels.extend(label);
        self.sizes.push(size);
        self.total_bytes += size;
    }

    /// Whether every scanned directory still has the modification time it had.
    fn is_fresh(&self) -> bool {
        self.dirs.iter().zip(&self.mtimes).all(|(dir, &mtime)| {
            fs::metadata(self.root.join(dir)).is_ok_and(|m| m.is_dir() && mtime_ns(&m) == mtime)
        })
    }

    fn encode(&self) -> Vec<u8> {
        let n = self.len();
        let mut out = Vec::with_capacity(
            64 + self.root.as_os_str().len()
                + self.paths.text.len()
                + 20 * n
                + 16 * self.dirs.len()
                + self.dirs.text.len(),
        );
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(match self.layout {
            DatasetLayout::ImageFolder => 0,
            DatasetLayout::Flat => 1,
        });
        out.push(match self.modality {
            Modality::Image => 0,
            Modality::Audio => 1,
        });
        let root = self.root.as_os_str().as_bytes();
        put_u64(&mut out, root.len() as u64);
        out.extend_from_slice(root);
        put_table(&mut out, self.classes.iter().map(String::as_str));
        put_table(&mut out, self.dirs.iter());
        for &mtime in &self.mtimes {
            out.extend_from_slice(&mtime.to_le_bytes());
        }
        put_table(&mut out, self.paths.iter());
        for &label in &self.labels {
            out.extend_from_slice(&label.to_le_bytes());
        }
        for &size in &self.sizes {
            put_u64(&mut out, size);
        }
        let sum = checksum(&out);
        put_u64(&mut out, sum);
        out
    }

    /// A catalog from the bytes of an index file (as [`Catalog::load`] reads it), e.g. one
    /// fetched from object storage beside the dataset; `origin` names it in errors.
    ///
    /// # Errors
    ///
    /// [`Error::BadIndex`] as for [`Catalog::load`].
    pub fn from_index_bytes(bytes: &[u8], origin: &Path) -> Result<Catalog> {
        Catalog::decode(bytes).map_err(|reason| Error::BadIndex {
            path: origin.to_path_buf(),
            reason,
        })
    }

    /// Parses an index, returning why it is unusable on failure.
    fn decode(bytes: &[u8]) -> std::result::Result<Catalog, String> {
        if bytes.len() < MAGIC.len() + 1 + 8 {
            return Err(format!(
                "the file is {} bytes, too short to be an index",
                bytes.len()
            ));
        }
        if &bytes[..MAGIC.len()] != MAGIC {
            return Err("not a nostall index (wrong magic bytes)".to_string());
        }
        let version = bytes[MAGIC.len()];
        if version != VERSION {
            return Err(format!(
                "written in index format version {version}, but this nostall reads version \
                 {VERSION}"
            ));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if checksum(body) != le_u64(sum) {
            return Err("checksum mismatch: the file is truncated or damaged".to_string());
        }

        let mut r = Reader {
            rest: &body[MAGIC.len() + 1..],
        };
        let layout = match r.u8("layout")? {
            0 => DatasetLayout::ImageFolder,
            1 => DatasetLayout::Flat,
            other => return Err(format!("unknown layout code {other}")),
        };
        let modality = match r.u8("modality")? {
            0 => Modality::Image,
            1 => Modality::Audio,
            other => return Err(format!("unknown modality code {other}")),
        };
        let root_len = r.u64("root path length")?;
        let root = PathBuf::from(OsString::from_vec(r.take(root_len, "root path")?.to_vec()));
        if !root.is_absolute() {
            return Err(format!("root path {} is not absolute", root.display()));
        }
        let classes: Vec<String> = r.table("class names")?.iter().map(String::from).collect();
        let dirs = r.table("directories")?;
        let mtimes = r
            .u64s(dirs.len(), "directory times")?
            .into_iter()
            .map(|t| t as i64)
            .collect();
        let paths = r.table("sample paths")?;
        let n = paths.len();
        let labels = match layout {
            DatasetLayout::ImageFolder => r.u32s(n, "labels")?,
            DatasetLayout::Flat => Vec::new(),
        };
        let sizes = r.u64s(n, "sizes")?;
        if !r.rest.is_empty() {
            return Err(format!("{} unexpected bytes after the sizes", r.rest.len()));
        }

        if n == 0 {
            return Err("the index lists no samples".to_string());
        }
        if (layout == DatasetLayout::Flat) != classes.is_empty() {
            return Err("the class names do not match the layout".to_string());
        }
        if let Some(&label) = labels.iter().find(|&&l| l as usize >= classes.len()) {
            return Err(format!(
                "label {label} is out of range for {} classes",
                classes.len()
            ));
        }
        if dirs.iter().next() != Some("") {
            return Err("the root directory's time is missing".to_string());
        }
        // The paths are joined to the root and opened, so a damaged or hostile index
        // must not be able to name files outside it.
        if let Some(bad) = dirs
            .iter()
            .skip(1)
            .chain(paths.iter())
            .find(|p| !is_clean_relative(p))
        {
            return Err(format!("path {bad:?} is not a plain path inside the root"));
        }
        let total_bytes = sizes
            .iter()
            .try_fold(0u64, |sum, &size| sum.checked_add(size))
            .ok_or("the sizes add up to more than 2^64 bytes")?;
        Ok(Catalog {
            root,
            modality,
            layout,
            classes,
            paths,
            labels,
            sizes,
            total_bytes,
            dirs,
            mtimes,
        })
    }
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A summary: a derived Debug would print millions of paths.
        f.debug_struct("Catalog")
            .field("root", &self.root)
            .field("modality", &self.modality)
            .field("layout", &self.layout)
            .field("samples", &self.len())
            .field("classes", &self.classes.len())
            .field("total_bytes", &self.total_bytes)
            .finish_non_exhaustive()
    }
}

/// Many strings in one allocation: `ends[i]` is where string `i` stops in `text`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Strings {
    text: String,
    ends: Vec<u64>,
}

impl Strings {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    fn push(&mut self, s: &str) {
        self.push_joined("", s);
    }

    /// Pushes `dir/name`, or `name` when `dir` is empty.
    fn push_joined(&mut self, dir: &str, name: &str) {
        if !dir.is_empty() {
            self.text.push_str(dir);
            self.text.push('/');
        }
        self.text.push_str(name);
        self.ends.push(self.text.len() as u64);
    }
}

/// The non-hidden entries of one directory that matter to a scan.
#[derive(Default)]
struct Listing {
    /// Image files, with their sizes.
    files: Vec<(String, u64)>,
    /// Sub-directories (symlinks followed), with their metadata.
    dirs: Vec<(OsString, Metadata)>,
    /// Entries skipped and counted.
    ignored: u64,
}

/// Lists `dir`, statting only what must be: sub-directories, sample files and symlinks.
fn list_dir(dir: &Path, modality: Modality) -> Result<Listing> {
    let mut listing = Listing::default();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if name.as_bytes().starts_with(b".") {
            continue;
        }
        let file_type = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        let meta = if file_type.is_symlink() {
            // A link we cannot follow (dangling, looping, target unreadable) is not an
            // image we could read later either.
            match fs::metadata(entry.path()) {
                Ok(meta) => meta,
                Err(_) => {
                    listing.ignored += 1;
                    continue;
                }
            }
        } else if file_type.is_dir() || is_sample_name(&name, modality) {
            match entry.metadata() {
                Ok(meta) => meta,
                // Deleted since the directory was read: as if it never was.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(Error::io(entry.path(), err)),
            }
        } else {
            listing.ignored += 1;
            continue;
        };
        if meta.is_dir() {
            listing.dirs.push((name, meta));
        } else if meta.is_file() && is_sample_name(&name, modality) {
            match name.into_string() {
                Ok(name) => listing.files.push((name, meta.len())),
                // Catalog paths are text; such a file is reported through the count.
                Err(_) => listing.ignored += 1,
            }
        } else {
            listing.ignored += 1;
        }
    }
    Ok(listing)
}

/// One class directory, scanned recursively.
#[derive(Default)]
struct ClassScan {
    /// In torchvision's order: sorted by relative path, files sorted by name.
    dirs: Vec<DirScan>,
    ignored: u64,
}

struct DirScan {
    /// Relative to the dataset root.
    rel: String,
    mtime: i64,
    files: Vec<(String, u64)>,
}

/// Scans the class directories in parallel, returning their scans in class order.
fn scan_classes(
    root: &Path,
    classes: &[(String, Metadata)],
    root_id: (u64, u64),
    modality: Modality,
) -> Result<Vec<ClassScan>> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let mut slots: Vec<Option<Result<ClassScan>>> = classes.iter().map(|_| None).collect();
    thread::scope(|scope| {
        let workers: Vec<_> = (0..SCAN_THREADS.min(classes.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((name, meta)) = classes.get(i) else {
                            break;
                        };
                        let scan = scan_class(root, name, meta, root_id, modality);
                        failed.fetch_or(scan.is_err(), Ordering::Relaxed);
                        done.push((i, scan));
                    }
                    done
                })
            })
            .collect();
        for worker in workers {
            let done = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (i, scan) in done {
                slots[i] = Some(scan);
            }
        }
    });
    // Classes are claimed in order and claiming stops only after an error, so the
    // scanned classes form a prefix that holds every error: the first error in class
    // order is reported, and without one, every class was scanned.
    let scans = slots
        .into_iter()
        .map_while(|slot| slot)
        .collect::<Result<Vec<_>>>()?;
    debug_assert_eq!(scans.len(), classes.len());
    Ok(scans)
}

/// Scans one class directory and everything below it.
fn scan_class(
    root: &Path,
    class: &str,
    meta: &Metadata,
    root_id: (u64, u64),
    modality: Modality,
) -> Result<ClassScan> {
    let mut scan = ClassScan::default();
    // Each pending directory carries the (device, inode) of the directories above it,
    // to recognise a symlink that leads back up the tree.
    let mut pending = vec![(class.to_string(), meta.clone(), vec![root_id])];
    while let Some((rel, meta, mut above)) = pending.pop() {
        let id = (meta.dev(), meta.ino());
        if above.contains(&id) {
            scan.ignored += 1;
            continue;
        }
        above.push(id);
        let listing = list_dir(&root.join(&rel), modality)?;
        scan.ignored += listing.ignored;
        for (name, meta) in listing.dirs {
            match name.into_string() {
                Ok(name) => pending.push((format!("{rel}/{name}"), meta, above.clone())),
                Err(_) => scan.ignored += 1,
            }
        }
        let mut files = listing.files;
        files.sort_unstable();
        scan.dirs.push(DirScan {
            rel,
            mtime: mtime_ns(&meta),
            files,
        });
    }
    scan.dirs.sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    Ok(scan)
}

/// Canonicalises `root` and checks that it is a directory.
fn canonical_root(root: &Path) -> Result<(PathBuf, Metadata)> {
    let canonical = fs::canonicalize(root).map_err(|e| Error::io(root, e))?;
    let meta = fs::metadata(&canonical).map_err(|e| Error::io(&canonical, e))?;
    if !meta.is_dir() {
        return Err(Error::Config(format!(
            "dataset root {} is not a directory; pass the directory that holds the images \
             (or one sub-directory per class)",
            root.display()
        )));
    }
    Ok((canonical, meta))
}

fn is_sample_name(name: &OsStr, modality: Modality) -> bool {
    name.to_str().is_some_and(|name| modality.accepts(name))
}

/// `.jpg, .jpeg and .png`, for messages.
fn extension_list(modality: Modality) -> String {
    let dotted: Vec<String> = modality
        .extensions()
        .iter()
        .map(|e| format!(".{e}"))
        .collect();
    match dotted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Whether `path` is a non-empty relative path without `.`, `..` or empty components.
fn is_clean_relative(path: &str) -> bool {
    !path.is_empty()
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Whether `path` is, or would be once its directories are created, inside `root`.
fn is_inside(root: &Path, path: &Path) -> bool {
    let Ok(path) = std::path::absolute(path) else {
        return false;
    };
    // The file need not exist yet, nor its directory: the nearest existing ancestor
    // decides, after resolving symlinks as `root` was.
    path.ancestors()
        .skip(1)
        .find_map(|dir| fs::canonicalize(dir).ok())
        .is_some_and(|dir| dir.starts_with(root))
}

fn mtime_ns(meta: &Metadata) -> i64 {
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}

/// The index at `path` if this user owns it and no one else may write it (checked on the
/// open file, so that it cannot be swapped between the check and the read).
fn load_own(path: &Path) -> Option<Catalog> {
    let mut file = fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        eprintln!(
            "nostall: ignoring the index {}: it is not this user's or others may write it; \
             scanning the dataset instead",
            path.display()
        );
        return None;
    }
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file, &mut bytes).ok()?;
    Catalog::decode(&bytes).ok()
}

fn cache_dir(nostall: Option<OsString>, xdg: Option<OsString>, home: Option<OsString>) -> PathBuf {
    let set = |var: Option<OsString>| var.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(nostall) {
        return dir;
    }
    // The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
    if let Some(dir) = set(xdg).filter(|dir| dir.is_absolute()) {
        return dir.join("nostall");
    }
    if let Some(home) = set(home) {
        return home.join(".cache").join("nostall");
    }
    // A directory of this user's own in the shared temporary directory.
    // SAFETY: geteuid has no preconditions and cannot fail.
    env::temp_dir().join(format!("nostall-{}", unsafe { libc::geteuid() }))
}

fn path_hash(path: &Path) -> u64 {
    let bytes = path.as_os_str().as_bytes();
    // The length first, so that trailing zero padding of the last word is unambiguous.
    let parts: Vec<u64> = std::iter::once(bytes.len() as u64)
        .chain(bytes.chunks(8).map(le_u64))
        .collect();
    rng::derive(&parts)
}

/// A 64-bit checksum that detects damage to an index, fast enough for tens of megabytes
/// on every start: four independent lanes (so the multiplies overlap) of
/// xor-multiply-rotate over 8-byte words, then mixed together with the length and tail.
/// Every step is a bijection of its lane, so any change to a single word is detected.
/// Appends the checksum an index ends with: fuzzers mutate index bodies and seal them,
/// so that their inputs reach the parser behind the checksum.
#[doc(hidden)]
pub fn seal_index(mut body: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&body);
    put_u64(&mut body, sum);
    body
}

fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [1u64, 2, 3, 4];
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = (*lane ^ le_u64(word)).wrapping_mul(K).rotate_left(31);
        }
    }
    let mut sum = rng::derive(&[lanes[0], lanes[1], lanes[2], lanes[3], bytes.len() as u64]);
    for word in blocks.remainder().chunks(8) {
        sum = rng::mix64(sum ^ le_u64(word));
    }
    sum
}

/// Reads up to 8 bytes as a little-endian integer, zero-padded.
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_table<'a>(out: &mut Vec<u8>, items: impl ExactSizeIterator<Item = &'a str> + Clone) {
    put_u64(out, items.len() as u64);
    let mut end = 0u64;
    for item in items.clone() {
        end += item.len() as u64;
        put_u64(out, end);
    }
    for item in items {
        out.extend_from_slice(item.as_bytes());
    }
}

/// Takes fields off the front of an index, checking each length against what is left.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: u64, what: &str) -> std::result::Result<&'a [u8], String> {
        match usize::try_from(len) {
            Ok(len) if len <= self.rest.len() => {
                let (head, rest) = self.rest.split_at(len);
                self.rest = rest;
                Ok(head)
            }
            _ => Err(format!(
                "{what} needs {len} bytes but only {} are left",
                self.rest.len()
            )),
        }
    }

    /// Takes `count` items of `width` bytes each.
    fn take_items(
        &mut self,
        count: usize,
        width: usize,
        what: &str,
    ) -> std::result::Result<&'a [u8], String> {
        let len = count.checked_mul(width).map_or(u64::MAX, |len| len as u64);
        self.take(len, what)
    }

    fn u8(&mut self, what: &str) -> std::result::Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u64(&mut self, what: &str) -> std::result::Result<u64, String> {
        Ok(le_u64(self.take(8, what)?))
    }

    fn u64s(&mut self, count: usize, what: &str) -> std::result::Result<Vec<u64>, String> {
        Ok(self
            .take_items(count, 8, what)?
            .chunks_exact(8)
            .map(le_u64)
            .collect())
    }

    fn u32s(&mut self, count: usize, what: &str) -> std::result::Result<Vec<u32>, String> {
        let bytes = self.take_items(count, 4, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn table(&mut self, what: &str) -> std::result::Result<Strings, String> {
        let count = self.u64(what)?;
        // Checked against the bytes left before anything is allocated.
        let count = match usize::try_from(count) {
            Ok(count) if count <= self.rest.len() / 8 => count,
            _ => return Err(format!("{what}: a count of {count} cannot fit in the file")),
        };
        let ends = self.u64s(count, what)?;
        if ends.windows(2).any(|w| w[0] > w[1]) {
            return Err(format!("{what}: offsets out of order"));
        }
        let len = ends.last().copied().unwrap_or(0);
        let text = std::str::from_utf8(self.take(len, what)?)
            .map_err(|_| format!("{what}: text is not valid UTF-8"))?;
        // Ends are at most `len`, which fit in memory, since they are ordered.
        if !ends.iter().all(|&end| text.is_char_boundary(end as usize)) {
            return Err(format!("{what}: an offset splits a character"));
        }
        Ok(Strings {
            text: text.to_string(),
            ends,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::symlink;
    use std::time::{Duration, SystemTime};

    /// Creates `files` (relative paths) under `root`, each holding its own path as bytes.
    fn tree(root: &Path, files: &[&str]) {
        for file in files {
            let path = root.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, file.as_bytes()).unwrap();
        }
    }

    fn rel_paths(catalog: &Catalog) -> Vec<&str> {
        (0..catalog.len() as u64)
            .map(|id| catalog.relative_path(id))
            .collect()
    }

    fn labels(catalog: &Catalog) -> Vec<Option<u32>> {
        (0..catalog.len() as u64)
            .map(|id| catalog.label(id))
            .collect()
    }

    /// Sets a directory's modification time far in the past, so that a change made now
    /// is seen as a change even on filesystems with coarse timestamps.
    fn backdate(dir: &Path) {
        let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        File::open(dir).unwrap().set_modified(past).unwrap();
    }

    fn backdate_all(root: &Path) {
        backdate(root);
        for entry in fs::read_dir(root).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                backdate_all(&path);
            }
        }
    }

    fn scan(root: &Path) -> (Catalog, ScanReport) {
        Catalog::scan(root, crate::sample::Modality::Image).unwrap()
    }

    #[test]
    fn image_folder_labels_follow_sorted_class_names() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "dog/1.jpg",
                "cat/2.png",
                "cat/1.jpeg",
                "zebra/deep/er/3.jpg",
                "zebra/0.JPG",
            ],
        );
        let (catalog, report) = scan(dir.path());
        assert_eq!(report.layout, DatasetLayout::ImageFolder);
        assert_eq!(catalog.layout(), DatasetLayout::ImageFolder);
        assert_eq!(catalog.classes(), ["cat", "dog", "zebra"]);
        assert_eq!(
            rel_paths(&catalog),
            [
                "cat/1.jpeg",
                "cat/2.png",
                "dog/1.jpg",
                "zebra/0.JPG",
                "zebra/deep/er/3.jpg"
            ]
        );
        assert_eq!(
            labels(&catalog),
            [Some(0), Some(0), Some(1), Some(2), Some(2)]
        );
        assert_eq!(report.ignored, 0);
    }

    #[test]
    fn order_within_a_class_matches_torchvision() {
        // torchvision sorts os.walk's directories by path, then files by name within each:
        // "a/b-c" sorts before "a/b/deep" because '-' < '/', but "a/x.jpg" comes first
        // because its directory "a" is a prefix of the others.
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "a/x.jpg",
                "a/b/y.jpg",
                "a/b/deep/w.jpg",
                "a/b-c/z.jpg",
                "a/b/a.jpg",
            ],
        );
        let (catalog, _) = scan(dir.path());
        assert_eq!(
            rel_paths(&catalog),
            [
                "a/x.jpg",
                "a/b/a.jpg",
                "a/b/y.jpg",
                "a/b-c/z.jpg",
                "a/b/deep/w.jpg"
            ]
        );
    }

    #[test]
    fn empty_class_keeps_its_label() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["a/1.jpg", "c/1.jpg"]);
        fs::create_dir(dir.path().join("b")).unwrap();
        let (catalog, _) = scan(dir.path());
        assert_eq!(catalog.classes(), ["a", "b", "c"]);
        assert_eq!(labels(&catalog), [Some(0), Some(2)]);
    }

    #[test]
    fn flat_layout_has_no_labels() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["b.png", "a.jpg", "c.jpeg"]);
        let (catalog, report) = scan(dir.path());
        assert_eq!(report.layout, DatasetLayout::Flat);
        assert!(catalog.classes().is_empty());
        assert_eq!(rel_paths(&catalog), ["a.jpg", "b.png", "c.jpeg"]);
        assert_eq!(labels(&catalog), [None, None, None]);
    }

    #[test]
    fn accessors_report_paths_and_sizes() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["cls/one.jpg", "cls/three.png"]);
        let (catalog, _) = scan(dir.path());
        let root = fs::canonicalize(dir.path()).unwrap();
        assert_eq!(catalog.root(), root);
        assert_eq!(catalog.path(0), root.join("cls/one.jpg"));
        assert_eq!(catalog.size(0), "cls/one.jpg".len() as u64);
        assert_eq!(catalog.size(1), "cls/three.png".len() as u64);
        assert_eq!(
            catalog.total_bytes(),
            ("cls/one.jpg".len() + "cls/three.png".len()) as u64
        );
        assert_eq!(catalog.len(), 2);
        assert!(!catalog.is_empty());
    }

    #[test]
    #[should_panic(expected = "sample id 2 is out of range")]
    fn out_of_range_id_panics_with_a_message() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["a.jpg", "b.jpg"]);
        scan(dir.path()).0.relative_path(2);
    }

    #[test]
    fn other_files_are_counted_and_extensions_ignore_case() {
        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &[
                "A.JPG",
                "b.Jpeg",
                "c.pNg",
                "d.txt",
                "e.gif",
                "noext",
                "f.jpg.bak",
            ],
        );
        let (catalog, report) = scan(dir.path());
        assert_eq!(rel_paths(&catalog), ["A.JPG", "b.Jpeg", "c.pNg"]);
        assert_eq!(report.ignored, 4);
    }

    #[test]
    fn files_beside_class_directories_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["cls/1.jpg", "stray.jpg", "README"]);
        let (catalog, report) = scan(dir.path());
        assert_eq!(rel_paths(&catalog), ["cls/1.jpg"]);
        assert_eq!(report.ignored, 2);
    }

    #[test]
    fn hidden_entries_are_skipped_without_counting() {
        let dir = tempfile::tempdir().unwrap();
        // The hidden directory at the root must not turn the layout into ImageFolder.
        tree(
            dir.path(),
            &["a.jpg", ".DS_Store", ".hidden.jpg", ".git/x.jpg"],
        );
        let (catalog, report) = scan(dir.path());
        assert_eq!(report.layout, DatasetLayout::Flat);
        assert_eq!(rel_paths(&catalog), ["a.jpg"]);
        assert_eq!(report.ignored, 0);

        let dir = tempfile::tempdir().unwrap();
        tree(
            dir.path(),
            &["cls/a.jpg", "cls/.cache/b.jpg", ".ipynb_checkpoints/c.jpg"],
        );
        let (catalog, report) = scan(dir.path());
        assert_eq!(catalog.classes(), ["cls"]);
        assert_eq!(rel_paths(&catalog), ["cls/a.jpg"]);
        assert_eq!(report.ignored, 0);
    }

    #[test]
    fn non_utf8_names_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["cls/ok.jpg"]);
        let bad = OsStr::from_bytes(b"caf\xe9.jpg");
        fs::write(dir.path().join("cls").join(bad), b"x").unwrap();
        fs::create_dir(dir.path().join("cls").join(OsStr::from_bytes(b"sub\xff"))).unwrap();
        let (catalog, report) = scan(dir.path());
        assert_eq!(rel_paths(&catalog), ["cls/ok.jpg"]);
        assert_eq!(report.ignored, 2);
    }

    #[test]
    fn non_utf8_class_name_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["cls/ok.jpg"]);
        fs::create_dir(dir.path().join(OsStr::from_bytes(b"b\xffd"))).unwrap();
        let err = Catalog::scan(dir.path(), crate::sample::Modality::Image).unwrap_err();
        assert!(
            matches!(&err, Error::Config(msg) if msg.contains("rename")),
            "{err}"
        );
    }

    #[test]
    fn symlinks_are_followed_and_loops_cut() {
        let data = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        tree(elsewhere.path(), &["linked/1.jpg", "file.jpg"]);
        tree(data.path(), &["real/1.jpg"]);
        let root = data.path();
        symlink(elsewhere.path().join("linked"), root.join("via_link")).unwrap();
        symlink(elsewhere.path().join("file.jpg"), root.join("real/2.jpg")).unwrap();
        symlink(root.join("nowhere.jpg"), root.join("real/dangling.jpg")).unwrap();
        symlink(root.join("real"), root.join("real/loop")).unwrap();
        let (catalog, report) = scan(root);
        assert_eq!(catalog.classes(), ["real", "via_link"]);
        assert_eq!(
            rel_paths(&catalog),
            ["real/1.jpg", "real/2.jpg", "via_link/1.jpg"]
        );
        // The dangling link and the loop.
        assert_eq!(report.ignored, 2);
        assert_eq!(catalog.size(1), "file.jpg".len() as u64);
    }

    #[test]
    fn empty_dataset_is_a_config_error_naming_the_root() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["notes.txt", "cls/readme.md"]);
        let err = Catalog::scan(dir.path(), crate::sample::Modality::Image).unwrap_err();
        let root = fs::canonicalize(dir.path()).unwrap();
        assert!(
            matches!(&err, Error::Config(msg) if msg.contains(&*root.to_string_lossy())
                && msg.contains("2 other entries")),
            "{err}"
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            Catalog::scan(empty.path(), crate::sample::Modality::Image),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn bad_roots_are_errors_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        match Catalog::scan(&missing, crate::sample::Modality::Image) {
            Err(Error::Io { path, source }) => {
                assert_eq!(path, missing);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
        let file = dir.path().join("file.jpg");
        fs::write(&file, b"x").unwrap();
        let err = Catalog::scan(&file, crate::sample::Modality::Image).unwrap_err();
        assert!(
            matches!(&err, Error::Config(msg) if msg.contains("file.jpg") && msg.contains("not a directory")),
            "{err}"
        );
    }

    #[test]
    fn save_then_load_round_trips() {
        for files in [
            &["b/2.jpg", "a/1.png", "a/sub/3.jpeg"][..],
            &["x.jpg", "y.png"][..],
        ] {
            let data = tempfile::tempdir().unwrap();
            let out = tempfile::tempdir().unwrap();
            tree(data.path(), files);
            let (catalog, _) = scan(data.path());
            let index = out.path().join("new/dir/cat.idx");
            catalog.save(&index).unwrap();
            let loaded = Catalog::load(&index).unwrap();
            assert_eq!(loaded, catalog);
            assert_eq!(rel_paths(&loaded), rel_paths(&catalog));
            // No temporary files are left behind.
            assert_eq!(fs::read_dir(index.parent().unwrap()).unwrap().count(), 1);
        }
    }

    fn saved_index() -> Vec<u8> {
        let data = tempfile::tempdir().unwrap();
        tree(data.path(), &["b/2.jpg", "a/1.png", "a/sub/3.jpeg"]);
        scan(data.path()).0.encode()
    }

    fn bad_index_reason(bytes: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cat.idx");
        fs::write(&path, bytes).unwrap();
        match Catalog::load(&path) {
            Err(Error::BadIndex { path: p, reason }) => {
                assert_eq!(p, path);
                reason
            }
            other => panic!("expected BadIndex, got {other:?}"),
        }
    }

    #[test]
    fn every_truncation_is_a_bad_index() {
        let bytes = saved_index();
        for len in 0..bytes.len() {
            bad_index_reason(&bytes[..len]);
        }
    }

    #[test]
    fn every_flipped_byte_is_a_bad_index() {
        let bytes = saved_index();
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x10;
            bad_index_reason(&damaged);
        }
    }

    #[test]
    fn wrong_magic_and_version_say_so() {
        let mut bytes = saved_index();
        bytes[0] = b'X';
        assert!(bad_index_reason(&bytes).contains("magic"));
        let mut bytes = saved_index();
        bytes[MAGIC.len()] = VERSION + 1;
        assert!(bad_index_reason(&bytes).contains("version 2"));
    }

    /// Builds an index body field by field and seals it with a valid checksum, as a
    /// hostile writer would.
    fn sealed(build: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.push(VERSION);
        build(&mut out);
        let sum = checksum(&out);
        put_u64(&mut out, sum);
        out
    }

    fn flat_header(out: &mut Vec<u8>) {
        out.push(1);
        out.push(0);
        put_u64(out, 4);
        out.extend_from_slice(b"/tmp");
        put_table(out, std::iter::empty());
        put_table(out, [""].into_iter());
        put_u64(out, 0);
    }

    #[test]
    fn hostile_lengths_are_bad_index_without_allocating() {
        let huge_table = sealed(|out| {
            flat_header(out);
            put_u64(out, u64::MAX / 8);
        });
        assert!(bad_index_reason(&huge_table).contains("cannot fit"));
        let huge_root = sealed(|out| {
            out.push(1);
            out.push(0);
            put_u64(out, u64::MAX);
        });
        assert!(bad_index_reason(&huge_root).contains("root path"));
        let unordered = sealed(|out| {
            flat_header(out);
            put_u64(out, 2);
            put_u64(out, 5);
            put_u64(out, 3);
            out.extend_from_slice(b"a.jpgb");
        });
        assert!(bad_index_reason(&unordered).contains("out of order"));
    }

    #[test]
    fn paths_escaping_the_root_are_bad_index() {
        for path in ["../x.jpg", "a/../../x.jpg", "/etc/x.jpg", "a//b.jpg", ""] {
            let bytes = sealed(|out| {
                flat_header(out);
                put_table(out, [path].into_iter());
                put_u64(out, 1);
            });
            assert!(
                bad_index_reason(&bytes).contains("not a plain path"),
                "{path}"
            );
        }
    }

    #[test]
    fn a_well_formed_hand_built_index_loads() {
        // Pins the format: the hostile-index tests above are only meaningful if a
        // hand-built index with honest fields is accepted.
        let bytes = sealed(|out| {
            flat_header(out);
            put_table(out, ["a.jpg"].into_iter());
            put_u64(out, 7);
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cat.idx");
        fs::write(&path, bytes).unwrap();
        let catalog = Catalog::load(&path).unwrap();
        assert_eq!(catalog.root(), Path::new("/tmp"));
        assert_eq!(catalog.relative_path(0), "a.jpg");
        assert_eq!(catalog.size(0), 7);
    }

    #[test]
    fn open_loads_a_fresh_index_and_rescans_a_stale_one() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let root = data.path();
        tree(root, &["a/1.jpg", "b/nested/2.jpg"]);
        backdate_all(root);
        let index = out.path().join("cat.idx");
        let open = || Catalog::open(root, Some(&index), crate::sample::Modality::Image).unwrap();

        let (first, how) = open();
        assert_eq!(how, Opened::Scanned);
        let (second, how) = open();
        assert_eq!(how, Opened::Loaded);
        assert_eq!(second, first);

        // A file added to a class directory.
        tree(root, &["a/3.jpg"]);
        let (third, how) = open();
        assert_eq!(how, Opened::Scanned);
        assert_eq!(third.len(), 3);
        assert_eq!(open().1, Opened::Loaded);

        // A file added in a nested directory.
        backdate_all(root);
        let _ = open();
        tree(root, &["b/nested/4.jpg"]);
        let (fourth, how) = open();
        assert_eq!(how, Opened::Scanned);
        assert_eq!(fourth.len(), 4);

        // A new class.
        backdate_all(root);
        let _ = open();
        tree(root, &["c/5.jpg"]);
        let (fifth, how) = open();
        assert_eq!(how, Opened::Scanned);
        assert_eq!(fifth.classes(), ["a", "b", "c"]);
    }

    #[test]
    fn open_rescans_over_a_damaged_or_foreign_index() {
        let data = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        tree(data.path(), &["a.jpg"]);
        tree(other.path(), &["b.jpg", "c.jpg"]);
        let index = out.path().join("cat.idx");

        fs::write(&index, b"garbage").unwrap();
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Scanned
        );
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Loaded
        );

        // The same index file, asked about another root.
        let (catalog, how) =
            Catalog::open(other.path(), Some(&index), crate::sample::Modality::Image).unwrap();
        assert_eq!(how, Opened::Scanned);
        assert_eq!(rel_paths(&catalog), ["b.jpg", "c.jpg"]);
    }

    #[test]
    fn open_ignores_an_index_others_could_have_written() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        tree(data.path(), &["a/1.jpg", "b/2.jpg"]);
        backdate_all(data.path());
        let index = out.path().join("cat.idx");
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Scanned
        );
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&index), 0o600);
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Loaded
        );
        // Writable by others: it could map the files to other labels.
        fs::set_permissions(&index, fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Scanned
        );
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Loaded
        );
        // Another user's (as root, hand it to `nobody`).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&index, Some(65534), None).unwrap();
            assert_eq!(
                Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                    .unwrap()
                    .1,
                Opened::Scanned
            );
        }
    }

    #[test]
    fn open_survives_an_index_it_cannot_write() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        tree(data.path(), &["a.jpg"]);
        // The index's directory would have to be created where a file is.
        fs::write(out.path().join("file"), b"").unwrap();
        let index = out.path().join("file/cat.idx");
        let (catalog, how) =
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image).unwrap();
        assert_eq!(how, Opened::Scanned);
        assert_eq!(catalog.len(), 1);
        assert!(catalog.save(&index).is_err());
    }

    #[test]
    fn open_refuses_an_index_inside_the_dataset() {
        let data = tempfile::tempdir().unwrap();
        tree(data.path(), &["a.jpg"]);
        for index in ["cat.idx", "not/yet/there/cat.idx"] {
            let err = Catalog::open(
                data.path(),
                Some(&data.path().join(index)),
                crate::sample::Modality::Image,
            )
            .unwrap_err();
            assert!(
                matches!(&err, Error::Config(msg) if msg.contains("inside")),
                "{err}"
            );
        }
    }

    #[test]
    fn default_index_path_is_keyed_by_the_canonical_root() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let path = Catalog::default_index_path(a.path(), crate::sample::Modality::Image);
        assert_eq!(path.extension().unwrap(), "idx");
        assert_eq!(
            path,
            Catalog::default_index_path(&a.path().join("."), crate::sample::Modality::Image)
        );
        assert_ne!(
            path,
            Catalog::default_index_path(b.path(), crate::sample::Modality::Image)
        );
    }

    #[test]
    fn cache_dir_follows_the_environment_in_order() {
        let var = |s: &str| Some(OsString::from(s));
        assert_eq!(cache_dir(var("/n"), var("/x"), var("/h")), Path::new("/n"));
        assert_eq!(
            cache_dir(var(""), var("/x"), var("/h")),
            Path::new("/x/nostall")
        );
        assert_eq!(
            cache_dir(None, var("rel"), var("/h")),
            Path::new("/h/.cache/nostall")
        );
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(
            cache_dir(None, None, None),
            env::temp_dir().join(format!("nostall-{uid}"))
        );
    }

    #[test]
    fn debug_is_a_summary() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path(), &["cls/a.jpg"]);
        let text = format!("{:?}", scan(dir.path()).0);
        assert!(
            text.contains("samples: 1") && !text.contains("a.jpg"),
            "{text}"
        );
    }
}
