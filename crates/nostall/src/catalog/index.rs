//! The saved index: a catalog written as one compact binary file, and read back without
//! trusting a byte of it.
//!
//! The format (version 2, all integers little-endian):
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

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Catalog, DatasetLayout, Strings};
use crate::error::{Error, Result};
use crate::rng;
use crate::sample::Modality;

pub(super) const MAGIC: &[u8; 7] = b"NSTLCAT";
pub(super) const VERSION: u8 = 2;

impl Catalog {
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
        write_private(path, &self.encode())
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
    pub(super) fn encode(&self) -> Vec<u8> {
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
            Modality::Video => 2,
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
    pub(super) fn decode(bytes: &[u8]) -> std::result::Result<Catalog, String> {
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
            2 => Modality::Video,
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
            groups: Vec::new(),
            estimated_sizes: false,
            sources: Vec::new(),
            dirs,
            mtimes,
        })
    }
}

/// Whether `path` is a non-empty relative path without `.`, `..` or empty components.
fn is_clean_relative(path: &str) -> bool {
    !path.is_empty()
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Appends the checksum an index ends with: fuzzers mutate index bodies and seal them,
/// so that their inputs reach the parser behind the checksum.
#[doc(hidden)]
pub fn seal_index(mut body: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&body);
    put_u64(&mut body, sum);
    body
}

/// A 64-bit checksum that detects damage to an index, fast enough for tens of megabytes
/// on every start: four independent lanes (so the multiplies overlap) of
/// xor-multiply-rotate over 8-byte words, then mixed together with the length and tail.
/// Every step is a bijection of its lane, so any change to a single word is detected.
pub(super) fn checksum(bytes: &[u8]) -> u64 {
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
pub(super) fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

pub(super) fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

pub(super) fn put_table<'a>(
    out: &mut Vec<u8>,
    items: impl ExactSizeIterator<Item = &'a str> + Clone,
) {
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

/// Writes `bytes` to `path` as a private cache file: its directory made for this user
/// alone, the file this user's alone (mode 0600), written whole under a temporary name
/// and renamed into place, so that a reader never sees it half written.
///
/// # Errors
///
/// [`Error::Config`] where `path` names no file; the file system's error otherwise.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
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
        .and_then(|mut file| io::Write::write_all(&mut file, bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(err) = written {
        // Best effort: the error worth reporting is the one we already have.
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, err));
    }
    Ok(())
}
