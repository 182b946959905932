//! A COCO file's parsed index, kept between opens in the cache directory beside the
//! catalogs' indexes ([`crate::catalog::derived_index_path`]): an instances file's
//! ([`open`], [`open_blob`]) or a panoptic file's ([`open_panoptic`],
//! [`open_panoptic_blob`]).
//!
//! Parsing `instances_train2017.json` (450 MB) takes seconds; reading back its index,
//! `nostall-coco`'s [`Annotations::to_bytes`], takes milliseconds. The cached index is
//! used while the file is the one it was made from: the same canonical path, device,
//! inode, size and modification time (to the nanosecond). A file rewritten in place
//! within one timestamp tick at the same size is not seen: delete the cached index then.
//! Like the catalogs' indexes, a cached index is read only if this user owns it and no
//! one else may write it, and everything in it is checked as it is read
//! ([`Annotations::from_bytes`]): a damaged one is parsed again, never trusted.
//!
//! A file that is a blob of a store (an object in S3) is known by its location, size and
//! version (its ETag), and read only as that version: an object rewritten since is
//! parsed again. A blob whose store gives no version is parsed at every open, since
//! nothing would tell a rewrite of it at the same size from the one the index was made
//! from.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nostall_coco::{Annotations, CocoError, Limits, PanopticIndex};

use super::{BlobInfo, BlobStore};
use crate::catalog::{derived_index_path, read_own, write_private};
use crate::error::{Error, Result};

/// An index kept in the cache: its bytes and back.
trait Kept: Sized {
    /// The first bytes of its cached form.
    const MAGIC: &'static [u8; 8];
    /// The name its cache is derived with, from the file's.
    const NAME: &'static str;
    fn to_bytes(&self) -> Vec<u8>;
    /// `None` for bytes that do not read back.
    fn from_bytes(bytes: &[u8]) -> Option<Self>;
}

impl Kept for Annotations {
    const MAGIC: &'static [u8; 8] = b"NSCOCOX1";
    const NAME: &'static str = "coco";
    fn to_bytes(&self) -> Vec<u8> {
        Annotations::to_bytes(self)
    }
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Annotations::from_bytes(bytes, &Limits::default()).ok()
    }
}

impl Kept for PanopticIndex {
    const MAGIC: &'static [u8; 8] = b"NSCOPAN1";
    const NAME: &'static str = "coco-panoptic";
    fn to_bytes(&self) -> Vec<u8> {
        PanopticIndex::to_bytes(self)
    }
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        PanopticIndex::from_bytes(bytes, &Limits::default()).ok()
    }
}

/// An annotation left out of the index: its image's id, and why (in words).
pub(crate) type Problem = (u64, String);

/// The index of the COCO file at `path` and the problems found in it, from the cache at
/// `cache` (or the default place) when it was made from this very file, else parsed and
/// cached; whether it came from the cache.
///
/// # Errors
///
/// [`Error::Config`] when the file is not COCO's format (naming the place), or cannot be
/// read.
pub(crate) fn open(path: &Path, cache: Option<&Path>) -> Result<(Annotations, Vec<Problem>, bool)> {
    open_kept(path, cache, || {
        Annotations::open(path, &Limits::default())
            .map(|(index, problems)| (index, listed(&problems)))
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    })
}

/// The index of the COCO panoptic file at `path` and the images whose entries are
/// unsound, as [`open`] keeps an instances file's.
///
/// # Errors
///
/// [`Error::Config`] when the file is not COCO panoptic's format (naming the place), or
/// cannot be read.
pub(crate) fn open_panoptic(
    path: &Path,
    cache: Option<&Path>,
) -> Result<(PanopticIndex, Vec<Problem>, bool)> {
    open_kept(path, cache, || {
        let (index, problems) = PanopticIndex::open(path, &Limits::default())
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        let problems = problems
            .iter()
            .map(|p| (p.image_id, p.to_string()))
            .collect();
        Ok((index, problems))
    })
}

/// The index of the file at `path`, from the cache at `cache` (or the default place)
/// when it was made from this very file, else `parse`d and cached.
fn open_kept<T: Kept>(
    path: &Path,
    cache: Option<&Path>,
    parse: impl FnOnce() -> Result<(T, Vec<Problem>)>,
) -> Result<(T, Vec<Problem>, bool)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    let mut identity = Vec::new();
    let bytes = canonical.as_os_str().as_bytes();
    identity.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    identity.extend_from_slice(bytes);
    for v in [
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime() as u64,
        meta.mtime_nsec() as u64,
    ] {
        identity.extend_from_slice(&v.to_le_bytes());
    }
    let cache = cache.map_or_else(|| derived_index_path(path, T::NAME), Path::to_path_buf);
    kept_or_parsed(&cache, &identity, parse)
}

/// The index of the COCO file `file`, a blob of `store` (fetched whole, as listed, once
/// its size is known to be within the limits a local file is read within), and the
/// problems found in it, from the cache at `cache` (or the default place, by the blob's
/// location) when it was made from this very version of the blob, else parsed and
/// cached; whether it came from the cache.
///
/// # Errors
///
/// [`Error::Config`] naming the blob's location when it is not COCO's format or is over
/// the limits; [`Error::Storage`] when it cannot be read.
pub(crate) fn open_blob(
    store: &dyn BlobStore,
    file: &BlobInfo,
    cache: Option<&Path>,
) -> Result<(Annotations, Vec<Problem>, bool)> {
    open_blob_kept(store, file, cache, |json, limits| {
        Annotations::parse(json, limits).map(|(index, problems)| (index, listed(&problems)))
    })
}

/// The index of the COCO panoptic file `file`, a blob of `store`, and the images whose
/// entries are unsound, as [`open_blob`] keeps an instances file's.
///
/// # Errors
///
/// As [`open_blob`], for COCO panoptic's format.
pub(crate) fn open_panoptic_blob(
    store: &dyn BlobStore,
    file: &BlobInfo,
    cache: Option<&Path>,
) -> Result<(PanopticIndex, Vec<Problem>, bool)> {
    open_blob_kept(store, file, cache, |json, limits| {
        let (index, problems) = PanopticIndex::parse(json, limits)?;
        let problems = problems
            .iter()
            .map(|p| (p.image_id, p.to_string()))
            .collect();
        Ok((index, problems))
    })
}

/// The index of the blob `file` of `store`, from the cache at `cache` (or the default
/// place) when it was made from this very version of the blob, else `parse`d and cached.
fn open_blob_kept<T: Kept>(
    store: &dyn BlobStore,
    file: &BlobInfo,
    cache: Option<&Path>,
    parse: impl FnOnce(&[u8], &Limits) -> std::result::Result<(T, Vec<Problem>), CocoError>,
) -> Result<(T, Vec<Problem>, bool)> {
    let location = store.locate(&file.key);
    let parse = || {
        let limits = Limits::default();
        if file.size > limits.max_file_bytes {
            return Err(Error::Config(format!(
                "{location}: COCO annotations too large: the object has {} bytes, over the \
                 limit of {}",
                file.size, limits.max_file_bytes
            )));
        }
        let mut json = Vec::new();
        store
            .read_version(&file.key, file.version.as_deref(), 0, file.size, &mut json)
            .map_err(|cause| Error::Storage {
                location: location.clone(),
                message: format!("cannot read the COCO annotation file: {cause}"),
            })?;
        parse(&json, &limits).map_err(|e| Error::Config(format!("{location}: {e}")))
    };
    let Some(version) = &file.version else {
        let (index, problems) = parse()?;
        return Ok((index, problems, false));
    };
    let mut identity = Vec::new();
    for part in [location.as_bytes(), version.as_bytes()] {
        identity.extend_from_slice(&(part.len() as u64).to_le_bytes());
        identity.extend_from_slice(part);
    }
    identity.extend_from_slice(&file.size.to_le_bytes());
    let cache = cache.map_or_else(
        // Not the name a local file's index has: a blob of a local directory is both.
        || derived_index_path(Path::new(&location), &format!("{}-blob", T::NAME)),
        Path::to_path_buf,
    );
    kept_or_parsed(&cache, &identity, parse)
}

/// The index kept at `cache` when it was made from the file of `identity`, else the one
/// `parse` makes, kept there; whether it was the kept one.
fn kept_or_parsed<T: Kept>(
    cache: &Path,
    identity: &[u8],
    parse: impl FnOnce() -> Result<(T, Vec<Problem>)>,
) -> Result<(T, Vec<Problem>, bool)> {
    if let Some((index, problems)) = read_own(cache).and_then(|b| decode(&b, identity)) {
        return Ok((index, problems, true));
    }
    let (index, problems) = parse()?;
    // Not fatal: the index is a cache, made again at the next open.
    let _ = write_private(cache, &encode(identity, &index, &problems));
    Ok((index, problems, false))
}

/// The problems `nostall-coco` found, as the index keeps them.
fn listed(problems: &[nostall_coco::Problem]) -> Vec<Problem> {
    problems
        .iter()
        .map(|p| (p.image_id, p.to_string()))
        .collect()
}

/// The cached index: its kind's magic, the identity's length and bytes, the problems
/// (count, then each image id, text length and text), then the index; little-endian.
fn encode<T: Kept>(identity: &[u8], index: &T, problems: &[Problem]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(T::MAGIC);
    out.extend_from_slice(&(identity.len() as u64).to_le_bytes());
    out.extend_from_slice(identity);
    out.extend_from_slice(&(problems.len() as u64).to_le_bytes());
    for (image, text) in problems {
        out.extend_from_slice(&image.to_le_bytes());
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(&index.to_bytes());
    out
}

/// The index and problems of a cached index made from the file of `identity`; `None`
/// for another file's, another kind's, or bytes that do not read back.
fn decode<T: Kept>(bytes: &[u8], identity: &[u8]) -> Option<(T, Vec<Problem>)> {
    let mut rest = bytes.strip_prefix(T::MAGIC)?;
    let mut take = |n: usize| -> Option<&[u8]> {
        (rest.len() >= n).then(|| {
            let (taken, after) = rest.split_at(n);
            rest = after;
            taken
        })
    };
    let len = u64::from_le_bytes(take(8)?.try_into().ok()?) as usize;
    if take(len)? != identity {
        return None;
    }
    let count = u64::from_le_bytes(take(8)?.try_into().ok()?) as usize;
    let mut problems = Vec::new();
    for _ in 0..count {
        let image = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let len = u64::from_le_bytes(take(8)?.try_into().ok()?) as usize;
        let text = String::from_utf8(take(len)?.to_vec()).ok()?;
        problems.push((image, text));
    }
    let index = T::from_bytes(rest)?;
    Some((index, problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 8}],
        "categories": [{"id": 7, "name": "cat"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 2, 3, 4],
                         "segmentation": [[1, 2, 4, 2, 4, 6]]},
                        {"id": 2, "image_id": 1, "category_id": 9, "bbox": [1, 2, 3, 4]}]}"#;

    #[test]
    fn a_second_open_reads_the_cache_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, cache) = (dir.path().join("i.json"), dir.path().join("cache/c.idx"));
        std::fs::write(&path, FILE).unwrap();
        let (first, problems, cached) = open(&path, Some(&cache)).unwrap();
        assert!(!cached && problems.len() == 1 && problems[0].0 == 1);
        let (again, problems_again, cached) = open(&path, Some(&cache)).unwrap();
        assert!(cached);
        assert_eq!(again.to_bytes(), first.to_bytes());
        assert_eq!(problems_again, problems);
        // Another file at the same path (another inode, size): parsed again.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, FILE.replace("\"cat\"", "\"dog\"")).unwrap();
        let (changed, _, cached) = open(&path, Some(&cache)).unwrap();
        assert!(!cached);
        assert_eq!(changed.categories()[0].name, "dog");
        // A damaged cache, or another user's writable one, is parsed again.
        let mut bytes = std::fs::read(&cache).unwrap();
        let end = bytes.len() - 3;
        bytes[end] ^= 0xFF;
        std::fs::write(&cache, &bytes).unwrap();
        let _ = open(&path, Some(&cache)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!open(&path, Some(&cache)).unwrap().2);
    }

    #[test]
    fn a_blobs_index_is_kept_until_its_version_changes_and_bounded_as_a_files() {
        let dir = tempfile::tempdir().unwrap();
        let (path, cache) = (dir.path().join("i.json"), dir.path().join("cache/b.idx"));
        std::fs::write(&path, FILE).unwrap();
        let store = super::super::LocalDir::new(dir.path()).unwrap();
        let file = store.info("i.json").unwrap();
        let (first, problems, cached) = open_blob(&store, &file, Some(&cache)).unwrap();
        assert!(!cached);
        let (local, local_problems, _) = open(&path, Some(&dir.path().join("l.idx"))).unwrap();
        assert_eq!(first.to_bytes(), local.to_bytes());
        assert_eq!(problems, local_problems);
        let (again, _, cached) = open_blob(&store, &file, Some(&cache)).unwrap();
        assert!(cached);
        assert_eq!(again.to_bytes(), first.to_bytes());
        // Another version of the blob: parsed again, and the old version no longer read.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, FILE.replace("\"cat\"", "\"dog\"")).unwrap();
        let changed = store.info("i.json").unwrap();
        let (index, _, cached) = open_blob(&store, &changed, Some(&cache)).unwrap();
        assert!(!cached);
        assert_eq!(index.categories()[0].name, "dog");
        let stale = BlobInfo {
            size: changed.size,
            ..file
        };
        let why = open_blob(&store, &stale, Some(&dir.path().join("s.idx")))
            .unwrap_err()
            .to_string();
        assert!(why.contains("i.json") && why.contains("changed"), "{why}");
        // Without a version nothing tells a rewrite apart: parsed at every open.
        let unversioned = BlobInfo {
            version: None,
            ..changed.clone()
        };
        for _ in 0..2 {
            assert!(!open_blob(&store, &unversioned, Some(&cache)).unwrap().2);
        }
        // Over the limit: refused before a byte is read; not COCO: refused, named.
        let huge = BlobInfo {
            size: Limits::default().max_file_bytes + 1,
            ..changed
        };
        let why = open_blob(&store, &huge, None).unwrap_err().to_string();
        assert!(why.contains("i.json") && why.contains("too large"), "{why}");
        std::fs::write(dir.path().join("n.json"), b"[1, 2]").unwrap();
        let not_coco = store.info("n.json").unwrap();
        let why = open_blob(&store, &not_coco, Some(&cache))
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("n.json") && why.contains("not a COCO"),
            "{why}"
        );
    }

    #[test]
    fn every_cut_of_a_cached_index_is_refused_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let (path, cache) = (dir.path().join("i.json"), dir.path().join("c.idx"));
        std::fs::write(&path, FILE).unwrap();
        let _ = open(&path, Some(&cache)).unwrap();
        let bytes = std::fs::read(&cache).unwrap();
        let identity =
            &bytes[16..16 + u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize];
        assert!(decode::<Annotations>(&bytes, identity).is_some());
        for end in 0..bytes.len() {
            assert!(
                decode::<Annotations>(&bytes[..end], identity).is_none(),
                "{end}"
            );
        }
    }

    #[test]
    fn a_panoptic_files_index_is_kept_as_an_instances_files() {
        let dir = tempfile::tempdir().unwrap();
        let (path, cache) = (dir.path().join("p.json"), dir.path().join("c.idx"));
        std::fs::write(
            &path,
            r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 2, "height": 2},
                           {"id": 2, "file_name": "b.jpg", "width": 2, "height": 2}],
                "categories": [{"id": 7, "name": "cat"}],
                "annotations": [{"image_id": 1, "file_name": "a.png",
                                 "segments_info": [{"id": 3, "category_id": 7}]}]}"#,
        )
        .unwrap();
        let (first, problems, cached) = open_panoptic(&path, Some(&cache)).unwrap();
        assert!(!cached && problems.len() == 1 && problems[0].0 == 2);
        let (again, problems_again, cached) = open_panoptic(&path, Some(&cache)).unwrap();
        assert!(cached && again == first && problems_again == problems);
        // An instances file's cache is not a panoptic one's, nor the other way round.
        assert!(decode::<Annotations>(&std::fs::read(&cache).unwrap(), b"").is_none());
        let why = open(&path, Some(&dir.path().join("i.idx"))).unwrap_err();
        assert!(why.to_string().contains("p.json"), "{why}");
    }
}
