//! Scanning a dataset root ([`Catalog::scan`]), in parallel over class directories; the
//! layouts it understands are described in the [catalog's docs](super).

use std::ffi::{OsStr, OsString};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use super::{Catalog, DatasetLayout, ScanReport};
use crate::error::{Error, Result};
use crate::sample::Modality;

/// How many class directories are scanned at once. Scanning waits on the filesystem far
/// more than it computes (on a network filesystem each `stat` is a round trip), so this
/// is more than the core count of small machines, but small enough not to swamp a
/// shared file server.
const SCAN_THREADS: usize = 8;

impl Catalog {
    /// Scans `root` and builds a catalog of the files of `modality` found under it (by
    /// their extensions: [`Modality::extensions`]).
    ///
    /// The layout is [`DatasetLayout::ImageFolder`] when the root contains sub-directories and
    /// [`DatasetLayout::Flat`] when it holds only files; see the [catalog's docs](super) for the
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
        let mut catalog = Catalog::empty(root, modality);
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
pub(super) fn canonical_root(root: &Path) -> Result<(PathBuf, Metadata)> {
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

pub(super) fn mtime_ns(meta: &Metadata) -> i64 {
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}
