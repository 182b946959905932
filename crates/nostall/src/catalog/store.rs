//! Where a catalog's index is kept, and whether it is still fresh.
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

use std::env;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::index::le_u64;
use super::scan::{canonical_root, mtime_ns};
use super::{Catalog, Opened};
use crate::error::{Error, Result};
use crate::rng;
use crate::sample::Modality;

impl Catalog {
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

    /// Whether every scanned directory still has the modification time it had.
    fn is_fresh(&self) -> bool {
        self.dirs.iter().zip(&self.mtimes).all(|(dir, &mtime)| {
            fs::metadata(self.root.join(dir)).is_ok_and(|m| m.is_dir() && mtime_ns(&m) == mtime)
        })
    }
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

/// The index at `path` if this user owns it and no one else may write it.
fn load_own(path: &Path) -> Option<Catalog> {
    Catalog::decode(&read_own(path)?).ok()
}

/// The bytes of the cache file at `path` if this user owns it and no one else may write
/// it (checked on the open file, so that it cannot be swapped between the check and the
/// read): a file another user could have written could say anything about the dataset.
pub(crate) fn read_own(path: &Path) -> Option<Vec<u8>> {
    read_own_within(path, u64::MAX)
}

/// The first `limit` bytes of the cache file at `path`, under [`read_own`]'s checks: what
/// a cache of a bounded size reads, whatever length the file has.
pub(crate) fn read_own_within(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let mut file = fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        eprintln!(
            "nostall: ignoring the cached index {}: it is not this user's or others may \
             write it; reading the dataset instead",
            path.display()
        );
        return None;
    }
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&mut file, limit), &mut bytes).ok()?;
    Some(bytes)
}

/// Where an index derived from the file at `path` (an annotation file's parse) is kept:
/// the directory of [`Catalog::default_index_path`], the name a hash of the file's
/// canonical path, then `kind`.
pub(crate) fn derived_index_path(path: &Path, kind: &str) -> PathBuf {
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = cache_dir(
        env::var_os("NOSTALL_CACHE_DIR"),
        env::var_os("XDG_CACHE_HOME"),
        env::var_os("HOME"),
    );
    dir.join(format!("{:016x}.{kind}.idx", path_hash(&path)))
}

pub(super) fn cache_dir(
    nostall: Option<OsString>,
    xdg: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
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
