//! Opening a dataset by where it lives: one string, as a user would type it.
//!
//! | location | format | source |
//! |---|---|---|
//! | a directory of samples (one sub-directory per class, or flat) | files | [`LocalFiles`], with a saved index |
//! | a directory holding `.tar` files and no sub-directory | WebDataset shards | [`TarShards`] over [`LocalDir`] |
//! | `s3://bucket/prefix` holding `.tar` objects | WebDataset shards | [`TarShards`] over [`S3Store`](crate::storage::S3Store) |
//! | `s3://bucket/prefix` holding samples | one object per sample | [`Objects`] over [`S3Store`](crate::storage::S3Store) |
//!
//! Samples are the files of one [`Modality`], chosen by the pipeline: images (`.jpg`,
//! `.jpeg`, `.png`) or audio (`.wav`, `.flac`, `.ogg`, `.oga`, `.mp3`); in shards, the
//! member of that kind beside an optional `.cls` label. The CLI and the Python package
//! both open datasets through [`open`], so a location means the same thing everywhere.

use std::path::Path;
use std::sync::Arc;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::sample::Modality;
use crate::storage::{
    is_sample_key, BlobStore, LocalDir, LocalFiles, Objects, ReadMode, Source, TarShards,
};

/// How a dataset's samples are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// One file per sample in a local directory tree.
    Files,
    /// WebDataset tar shards, locally or in object storage.
    TarShards,
    /// One object per sample in object storage.
    Objects,
}

/// An opened dataset: its catalog and the source of its bytes.
#[derive(Clone)]
pub struct Dataset {
    /// Every sample once, with labels and sizes.
    pub catalog: Arc<Catalog>,
    /// Where the bytes come from.
    pub source: Arc<dyn Source>,
    /// How the samples are stored.
    pub format: Format,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("catalog", &self.catalog)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// Opens the dataset at `location` (see the [module docs](self) for what is understood).
///
/// `mode` applies to plain files; cold reads of shards or objects are refused, since
/// only plain files can have their cached pages dropped one sample at a time.
///
/// # Errors
///
/// When the location cannot be read, holds no samples, or `mode` is
/// [`ReadMode::Cold`] for shards or objects.
pub fn open(location: &str, mode: ReadMode, modality: Modality) -> Result<Dataset> {
    open_in(location, mode, modality, &|name| std::env::var(name).ok())
}

/// As [`open`], with object storage configured by `var` (the values of
/// [`crate::storage::S3_ENVIRONMENT`] another job has) instead of this process's
/// environment.
///
/// # Errors
///
/// As for [`open`].
pub fn open_in(
    location: &str,
    mode: ReadMode,
    modality: Modality,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Dataset> {
    if let Some(rest) = location.strip_prefix("s3://") {
        if rest.is_empty() {
            return Err(Error::Config(
                "an S3 location needs a bucket: s3://bucket/prefix".into(),
            ));
        }
        return open_store(Arc::new(open_s3(location, var)?), mode, modality);
    }
    let path = Path::new(location);
    let (mut tars, mut dirs) = (0, 0);
    for entry in std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .flatten()
    {
        if entry.path().is_dir() {
            dirs += 1;
        } else if entry.file_name().as_encoded_bytes().ends_with(b".tar") {
            tars += 1;
        }
    }
    // A folder of shards holds shards; a `backup.tar` beside class directories does not
    // make an image folder one.
    if tars > 0 && dirs == 0 {
        return open_store(Arc::new(LocalDir::new(path)?), mode, modality);
    }
    if tars > 0 {
        eprintln!(
            "nostall: {location} has class directories, so it is read as a class folder; \
             its {tars} top-level .tar file(s) are not read (a folder of shards holds only \
             .tar files)"
        );
    }
    let (catalog, _) = Catalog::open(path, None, modality)?;
    let catalog = Arc::new(catalog);
    Ok(Dataset {
        source: Arc::new(LocalFiles::new(catalog.clone(), mode)),
        catalog,
        format: Format::Files,
    })
}

/// Shards when the store holds `.tar` blobs and no samples, one object per sample
/// otherwise.
fn open_store(store: Arc<dyn BlobStore>, mode: ReadMode, modality: Modality) -> Result<Dataset> {
    if mode == ReadMode::Cold {
        return Err(Error::Config(format!(
            "cold reads work on plain files only, not on {}; throttle the source or \
             limit the page cache instead",
            store.root()
        )));
    }
    let listing = store.list()?;
    let tars = listing.iter().filter(|b| b.key.ends_with(".tar")).count();
    let samples = listing.iter().any(|b| is_sample_key(&b.key, modality));
    if tars > 0 && samples {
        eprintln!(
            "nostall: {} holds {}, so they are read one object each; its {tars} .tar \
             object(s) are not read (shards alone make a dataset of shards)",
            store.root(),
            modality.plural()
        );
    }
    if tars > 0 && !samples {
        let shards = TarShards::from_listing(store, listing, modality)?;
        return Ok(Dataset {
            catalog: shards.catalog().clone(),
            source: Arc::new(shards),
            format: Format::TarShards,
        });
    }
    let objects = Objects::from_listing(store, listing, modality)?;
    Ok(Dataset {
        catalog: objects.catalog().clone(),
        source: Arc::new(objects),
        format: Format::Objects,
    })
}

#[cfg(feature = "s3")]
fn open_s3(url: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<crate::storage::S3Store> {
    crate::storage::S3Store::new(crate::storage::S3Config::from_url_in(url, var)?)
}

#[cfg(not(feature = "s3"))]
fn open_s3(url: &str, _: &dyn Fn(&str) -> Option<String>) -> Result<LocalDir> {
    Err(Error::Config(format!(
        "{url}: this build of nostall has no S3 support; rebuild with the `s3` feature"
    )))
}
