//! Opening a dataset by where it lives: one string, as a user would type it.
//!
//! | location | format | source |
//! |---|---|---|
//! | a directory of samples (one sub-directory per class, or flat) | files | [`LocalFiles`], with a saved index |
//! | a directory holding `.tar` files and no sub-directory | WebDataset shards | [`TarShards`] over [`LocalDir`] |
//! | `s3://bucket/prefix` holding `.tar` objects | WebDataset shards | [`TarShards`] over [`S3Store`](crate::storage::S3Store) |
//! | `s3://bucket/prefix` holding samples | one object per sample | [`Objects`] over [`S3Store`](crate::storage::S3Store) |
//! | a `.parquet` file, a directory holding `.parquet` files and no sub-directory, or `s3://bucket/prefix` holding them | Parquet (Hugging Face datasets) | `ParquetFiles` over [`LocalDir`] or the S3 store |
//! | a manifest (`.jsonl`, `.json`, `.csv`), local or `s3://bucket/prefix/name.jsonl` | segments of long recordings (audio), or of videos | [`Segments`] over [`LocalDir`] or the S3 store |
//! | a COCO annotation file (`.json`), local or `s3://bucket/prefix/annotations/instances_val.json`, read with fields | images with their boxes (detection) | [`Annotated`], its images found beside it as COCO lays them out (in S3: over the S3 store) |
//! | a Pascal VOC split file or year folder, ADE20K's or Cityscapes' image folder, local or `s3://bucket/prefix/VOC2012`, read with a field of the member `mask` (Cityscapes' training ids: `labelTrainIds`) | images with their label maps (segmentation) | [`Segmented`] (in S3: over the S3 store) |
//! | a COCO panoptic file (`.json`), local or in S3, read with a field of the member `mask` | images with their semantic label maps | [`Panoptic`] (in S3: over the S3 store) |
//!
//! Samples are the files of one [`Modality`], chosen by the pipeline: images (`.jpg`,
//! `.jpeg`, `.png`) or audio (`.wav`, `.flac`, `.ogg`, `.oga`, `.opus`, `.mp3`); in shards, the
//! member of that kind beside an optional `.cls` label; in Parquet files, the column
//! [`Columns`] names or finds. The CLI and the Python package both open datasets through
//! [`open`], so a location means the same thing everywhere.

use std::path::Path;
use std::sync::Arc;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::sample::Modality;
use crate::storage::{
    is_manifest, is_parquet_key, is_sample_key, label_map_member, Annotated, BlobInfo, BlobStore,
    LocalDir, LocalFiles, Mixed, Objects, Panoptic, ReadMode, Segmented, Segments, Source,
    TarShards, MASK_MEMBER,
};
pub use crate::storage::{Columns, LabelColumn};

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
    /// Rows of Parquet files, locally or in object storage.
    Parquet,
    /// Segments of long recordings listed by a manifest.
    Segments,
    /// Several datasets, one after another ([`open_mixture`]).
    Mixture,
    /// Samples made by code from their index ([`crate::storage::Indexed`]).
    Indexed,
    /// Samples whose bytes the caller holds in memory ([`crate::storage::Held`]).
    Held,
    /// Images with the annotations of a COCO file ([`Annotated`]).
    Coco,
    /// Images with their label maps, as a segmentation dataset lays them out
    /// ([`Segmented`]), or as a COCO panoptic file gives them ([`Panoptic`]).
    Segmented,
}

impl Format {
    /// In words, for messages.
    fn describe(self) -> &'static str {
        match self {
            Format::Files => "one file per sample",
            Format::TarShards => "WebDataset shards",
            Format::Objects => "one object per sample",
            Format::Parquet => "Parquet files",
            Format::Segments => "a manifest of recordings",
            Format::Mixture => "several datasets",
            Format::Indexed => "samples made by code",
            Format::Held => "samples held in memory",
            Format::Coco => "images with COCO annotations",
            Format::Segmented => "images with label maps",
        }
    }
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
/// `mode` applies to plain files; cold reads of shards, objects or Parquet files are
/// refused, since only plain files can have their cached pages dropped one sample at a
/// time.
///
/// # Errors
///
/// When the location cannot be read, holds no samples, or `mode` is
/// [`ReadMode::Cold`] for shards, objects or Parquet files.
pub fn open(location: &str, mode: ReadMode, modality: Modality) -> Result<Dataset> {
    let var = |name: &str| std::env::var(name).ok();
    open_in(location, mode, modality, &Columns::default(), &var)
}

/// As [`open`], with a Parquet dataset's `columns`, and object storage configured by `var`
/// (the values of [`crate::storage::S3_ENVIRONMENT`] another job has) instead of this
/// process's environment.
///
/// # Errors
///
/// As for [`open`].
pub fn open_in(
    location: &str,
    mode: ReadMode,
    modality: Modality,
    columns: &Columns,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Dataset> {
    let dataset = open_any(location, mode, modality, columns, var)?;
    let records = matches!(
        dataset.format,
        Format::TarShards
            | Format::Segments
            | Format::Parquet
            | Format::Files
            | Format::Coco
            | Format::Segmented
    );
    if columns.record.is_some() && !records {
        return Err(Error::Config(format!(
            "fields= reads samples as records of WebDataset shards (.tar), Parquet files, \
             a manifest of recordings or a local folder, and {location} holds {}",
            dataset.format.describe()
        )));
    }
    Ok(dataset)
}

/// Several datasets opened as [`open_in`] opens each, their samples one after another
/// ([`Catalog::concat`], [`Mixed`]): what a mixture by weight draws from.
///
/// # Errors
///
/// As [`open_in`] for each, and as [`Catalog::concat`].
pub fn open_mixture(
    locations: &[String],
    mode: ReadMode,
    modality: Modality,
    columns: &Columns,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Dataset> {
    let parts = locations
        .iter()
        .map(|location| open_in(location, mode, modality, columns, var))
        .collect::<Result<Vec<Dataset>>>()?;
    let catalogs: Vec<&Catalog> = parts.iter().map(|d| &*d.catalog).collect();
    let catalog = Catalog::concat(&catalogs)?;
    let lens: Vec<usize> = catalogs.iter().map(|c| c.len()).collect();
    let shards: Vec<u32> = parts
        .iter()
        .map(|d| {
            (0..d.catalog.len() as u64)
                .filter_map(|id| d.source.shard(id))
                .max()
                .map_or(0, |s| s + 1)
        })
        .collect();
    let sources = parts.into_iter().map(|d| d.source).collect();
    Ok(Dataset {
        catalog: Arc::new(catalog),
        source: Arc::new(Mixed::new(sources, &lens, &shards)),
        format: Format::Mixture,
    })
}

fn open_any(
    location: &str,
    mode: ReadMode,
    modality: Modality,
    columns: &Columns,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Dataset> {
    // The member of label maps a field reads, if any: images read so are a segmentation
    // dataset's (or a panoptic file's).
    let label_map = match modality {
        Modality::Image => label_map_member(
            columns
                .record
                .iter()
                .flatten()
                .flatten()
                .map(String::as_str),
        ),
        _ => None,
    };
    if let Some(rest) = location.strip_prefix("s3://") {
        if rest.is_empty() {
            return Err(Error::Config(
                "an S3 location needs a bucket: s3://bucket/prefix".into(),
            ));
        }
        // One Parquet object: the store of its prefix, listing only it.
        if let Some((prefix, name)) = location
            .rsplit_once('/')
            .filter(|(prefix, name)| *prefix != "s3:/" && is_parquet_key(name))
        {
            let store = Arc::new(open_s3(prefix, var)?);
            return open_parquet_file(store, name, mode, modality, columns);
        }
        // As for a local file: images read with a `.json` are a COCO file's (a manifest
        // lists audio or videos).
        if let Some((bucket, key)) = rest
            .split_once('/')
            .filter(|(_, key)| modality == Modality::Image && key.ends_with(".json"))
        {
            refuse_cold(mode, location)?;
            return coco_in_s3(bucket, key, (columns, label_map), var);
        }
        if let Some((prefix, name)) = location
            .rsplit_once('/')
            .filter(|(prefix, name)| *prefix != "s3:/" && is_manifest(name))
        {
            let store: Arc<dyn BlobStore> = Arc::new(open_s3(prefix, var)?);
            refuse_cold(mode, location)?;
            let listing = store.list()?;
            let text = read_manifest(&*store, &listing, name)?;
            let listed: std::collections::HashMap<_, _> =
                listing.into_iter().map(|b| (b.key.clone(), b)).collect();
            let info = |key: &str| {
                listed
                    .get(key)
                    .cloned()
                    .ok_or_else(|| crate::error::Cause::Io(format!("{key} is not under {prefix}")))
            };
            return segments(store.clone(), name, &text, &info, modality, columns);
        }
        if let Some(member) = label_map {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            let bucket_store: Arc<dyn BlobStore> =
                Arc::new(open_s3(&format!("s3://{bucket}"), var)?);
            let open = prefix_stores(bucket, var);
            if let Some(segmented) = Segmented::open_blob(bucket_store, key, &open, member)? {
                refuse_cold(mode, location)?;
                return Ok(segmentation(segmented));
            }
        }
        let store = Arc::new(open_s3(location, var)?);
        return open_store(store, mode, modality, columns);
    }
    let path = Path::new(location);
    if path.is_file() && modality == Modality::Image && location.ends_with(".json") {
        // A label map of a COCO file is a panoptic file's: instances files give boxes.
        if let Some(member) = label_map {
            panoptic_member(location, member)?;
            return Ok(segmentation(Panoptic::open(path)?.with_mode(mode)));
        }
        return coco(path, mode, columns);
    }
    if let Some(member) = label_map {
        if let Some(segmented) = Segmented::open(path, member)? {
            return Ok(segmentation(segmented.with_mode(mode)));
        }
    }
    if path.is_file() && is_manifest(location) {
        refuse_cold(mode, location)?;
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = LocalDir::new(parent.unwrap_or(Path::new(".")))?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let info = |key: &str| dir.info(key);
        return segments(
            Arc::new(dir.clone()),
            &name,
            &text,
            &info,
            modality,
            columns,
        );
    }
    if path.is_file() && is_parquet_key(location) {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        let store = Arc::new(LocalDir::new(parent.unwrap_or(Path::new(".")))?);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        return open_parquet_file(store, &name, mode, modality, columns);
    }
    let (mut tars, mut dirs, mut parquets) = (0, 0, 0);
    for entry in std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .flatten()
    {
        if entry.path().is_dir() {
            dirs += 1;
        } else if entry.file_name().as_encoded_bytes().ends_with(b".tar") {
            tars += 1;
        } else if is_parquet_key(&entry.file_name().to_string_lossy()) {
            parquets += 1;
        }
    }
    if parquets > 0 && dirs == 0 && tars == 0 {
        return open_store(Arc::new(LocalDir::new(path)?), mode, modality, columns);
    }
    // A folder of shards holds shards; a `backup.tar` beside class directories does not
    // make an image folder one.
    if tars > 0 && dirs == 0 {
        return open_store(Arc::new(LocalDir::new(path)?), mode, modality, columns);
    }
    if tars > 0 {
        eprintln!(
            "nostall: {location} has class directories, so it is read as a class folder; \
             its {tars} top-level .tar file(s) are not read (a folder of shards holds only \
             .tar files)"
        );
    }
    let (catalog, _) = Catalog::open(path, None, modality)?;
    // A record's bytes are its files', sidecars and all: the catalog's are the sample's.
    let catalog = match columns.record.is_some() {
        true => Arc::new(catalog.with_estimated_sizes()),
        false => Arc::new(catalog),
    };
    let files = LocalFiles::new(catalog.clone(), mode);
    let files = match &columns.record {
        Some(others) => files.with_sidecars(others.concat()),
        None => files,
    };
    Ok(Dataset {
        source: Arc::new(files),
        catalog,
        format: Format::Files,
    })
}

/// The images of the COCO annotation file at `path`, read as records of the image and its
/// `coco` member.
fn coco(path: &Path, mode: ReadMode, columns: &Columns) -> Result<Dataset> {
    needs_fields(&path.display().to_string(), columns)?;
    Ok(annotated(Annotated::open(path, None)?.with_mode(mode)))
}

/// Opens the store of a prefix of S3 bucket `bucket`: how a file's readers reach the
/// folders its layout names beside it.
fn prefix_stores<'a>(
    bucket: &'a str,
    var: &'a dyn Fn(&str) -> Option<String>,
) -> impl Fn(&str) -> Result<Arc<dyn BlobStore>> + 'a {
    move |prefix| Ok(Arc::new(open_s3(&format!("s3://{bucket}/{prefix}"), var)?))
}

/// The images of the COCO annotation file `key` of S3 bucket `bucket`, found beside it as
/// for a local file, read as records of the image and its `coco` member; or, read with a
/// field of the member of label maps `label_map`, of a panoptic file's, as records of the
/// image and its `mask` member.
#[cfg(feature = "s3")]
fn coco_in_s3(
    bucket: &str,
    key: &str,
    (columns, label_map): (&Columns, Option<&str>),
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Dataset> {
    let location = format!("s3://{bucket}/{key}");
    needs_fields(&location, columns)?;
    // The bucket's store reads the file and looks for its images' folder; the folder's
    // store, listed once, reads the images. A panoptic file's images and PNGs are each
    // listed once by their folder's store, and read in pairs by the bucket's.
    let store = open_s3(&format!("s3://{bucket}"), var)?;
    let file = store.info(key)?;
    let open = prefix_stores(bucket, var);
    if let Some(member) = label_map {
        panoptic_member(&location, member)?;
        return Ok(segmentation(Panoptic::open_blob(
            Arc::new(store),
            &file,
            &open,
        )?));
    }
    Ok(annotated(Annotated::open_blob(&store, &file, &open)?))
}

#[cfg(not(feature = "s3"))]
fn coco_in_s3(
    bucket: &str,
    key: &str,
    _: (&Columns, Option<&str>),
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Dataset> {
    Err(open_s3(&format!("s3://{bucket}/{key}"), var).expect_err("a build without S3"))
}

/// A COCO file's images are read as records: refused without fields.
fn needs_fields(location: &str, columns: &Columns) -> Result<()> {
    if columns.record.is_none() {
        return Err(Error::Config(format!(
            "{location}: a COCO annotation file gives each image its boxes: read it with \
             fields, e.g. {{\"image\": \"image\", \"boxes\": \"coco\"}}"
        )));
    }
    Ok(())
}

/// A panoptic file's label maps are its records' `mask` members: refused for another
/// member of label maps (Cityscapes' training ids).
fn panoptic_member(location: &str, member: &str) -> Result<()> {
    if member != MASK_MEMBER {
        return Err(Error::Config(format!(
            "{location}: a COCO panoptic file's label maps are the member {MASK_MEMBER}, not \
             labelTrainIds (Cityscapes' training ids)"
        )));
    }
    Ok(())
}

/// The dataset of a segmentation dataset's images with their label maps.
fn segmentation<P: crate::storage::Pairing + 'static>(
    paired: crate::storage::Paired<P>,
) -> Dataset {
    Dataset {
        catalog: paired.catalog().clone(),
        source: Arc::new(paired),
        format: Format::Segmented,
    }
}

/// The dataset of a COCO file's images.
fn annotated(annotated: Annotated) -> Dataset {
    Dataset {
        catalog: annotated.catalog().clone(),
        source: Arc::new(annotated),
        format: Format::Coco,
    }
}

/// The Parquet file `name` of `store` (a directory or an S3 prefix), as the store
/// listing only it.
fn open_parquet_file(
    store: Arc<dyn BlobStore>,
    name: &str,
    mode: ReadMode,
    modality: Modality,
    columns: &Columns,
) -> Result<Dataset> {
    refuse_cold(mode, &format!("{}/{name}", store.root()))?;
    let listing: Vec<_> = store
        .list()?
        .into_iter()
        .filter(|b| b.key == name)
        .collect();
    if listing.is_empty() {
        return Err(Error::Config(format!(
            "{}/{name}: no such file (it is not in the listing of {})",
            store.root(),
            store.root()
        )));
    }
    parquet_dataset(store, listing, modality, columns)
}

/// The segments manifest `name` lists, read from `store`.
fn segments(
    store: Arc<dyn BlobStore>,
    name: &str,
    text: &[u8],
    info: &dyn Fn(&str) -> std::result::Result<BlobInfo, crate::error::Cause>,
    modality: Modality,
    columns: &Columns,
) -> Result<Dataset> {
    if modality == Modality::Image {
        return Err(Error::Config(format!(
            "{name}: a manifest lists segments of audio recordings or videos; read it with \
             an audio or a video pipeline"
        )));
    }
    let records = columns.record.is_some();
    let segments = Segments::from_manifest(store, name, text, info, (modality, records))?;
    Ok(Dataset {
        catalog: segments.catalog().clone(),
        source: Arc::new(segments),
        format: Format::Segments,
    })
}

/// The manifest `name` of `store`, as `listing` lists it.
fn read_manifest(store: &dyn BlobStore, listing: &[BlobInfo], name: &str) -> Result<Vec<u8>> {
    let blob = listing
        .iter()
        .find(|b| b.key == name)
        .ok_or_else(|| Error::Config(format!("{}: no such manifest", store.locate(name))))?;
    let mut text = Vec::new();
    store
        .read_version(name, blob.version.as_deref(), 0, blob.size, &mut text)
        .map_err(|cause| Error::Config(format!("{}: {cause}", store.locate(name))))?;
    Ok(text)
}

/// Cold reads drop a plain file's cached pages one sample at a time: not possible for
/// samples that share a blob.
fn refuse_cold(mode: ReadMode, root: &str) -> Result<()> {
    if mode == ReadMode::Cold {
        return Err(Error::Config(format!(
            "cold reads work on plain files only, not on {root}; throttle the source or \
             limit the page cache instead"
        )));
    }
    Ok(())
}

#[cfg(feature = "parquet")]
fn parquet_dataset(
    store: Arc<dyn BlobStore>,
    listing: Vec<crate::storage::BlobInfo>,
    modality: Modality,
    columns: &Columns,
) -> Result<Dataset> {
    let files = crate::storage::ParquetFiles::from_listing(store, listing, modality, columns)?;
    Ok(Dataset {
        catalog: files.catalog().clone(),
        source: Arc::new(files),
        format: Format::Parquet,
    })
}

#[cfg(not(feature = "parquet"))]
fn parquet_dataset(
    store: Arc<dyn BlobStore>,
    _: Vec<crate::storage::BlobInfo>,
    _: Modality,
    _: &Columns,
) -> Result<Dataset> {
    Err(Error::Config(format!(
        "{}: this build of nostall reads no Parquet; rebuild with the `parquet` feature",
        store.root()
    )))
}

/// Parquet when the store holds `.parquet` blobs and nothing else it reads; shards when
/// it holds `.tar` blobs and no samples; one object per sample otherwise.
fn open_store(
    store: Arc<dyn BlobStore>,
    mode: ReadMode,
    modality: Modality,
    columns: &Columns,
) -> Result<Dataset> {
    refuse_cold(mode, &store.root())?;
    let listing = store.list()?;
    let tars = listing.iter().filter(|b| b.key.ends_with(".tar")).count();
    let samples = listing.iter().any(|b| is_sample_key(&b.key, modality));
    if tars == 0 && !samples && listing.iter().any(|b| is_parquet_key(&b.key)) {
        return parquet_dataset(store, listing, modality, columns);
    }
    if tars > 0 && samples {
        eprintln!(
            "nostall: {} holds {}, so they are read one object each; its {tars} .tar \
             object(s) are not read (shards alone make a dataset of shards)",
            store.root(),
            modality.plural()
        );
    }
    if tars > 0 && !samples {
        let shards = match &columns.record {
            Some(others) => {
                let extensions: Vec<String> = others.concat();
                TarShards::records_from_listing(store, listing, modality, &extensions)?
            }
            None => TarShards::from_listing(store, listing, modality)?,
        };
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
