//! [`Annotated`]: images with their COCO annotations, each sample a record of the image
//! and its `coco` member (its boxes, as a boxes field reads them).
//!
//! A COCO annotation file (`instances_val2017.json`) lists the images of a folder by
//! file name and their annotations. It is parsed once when the dataset is opened
//! (`nostall-coco`: bounded, no tree of JSON values, polygons and RLEs kept compact; the
//! index is kept between opens, [`super::coco_index`]), and
//! a sample's member is written from that index when the sample is read
//! ([`super::coco_member`]: boxes, categories, crowd flags and masks).
//!
//! The file and its images may be blobs of a [`BlobStore`] instead (S3-compatible object
//! storage, [`Annotated::open_blob`]): the file is fetched once, within the limits a local
//! one is read within, and its index kept by the object's key, size and version; the
//! images' folder is found where COCO lays it out, as for a local file, and listed once
//! for the images' sizes and versions; the images are read as [`super::Objects`] reads its
//! blobs (whole, many in flight, retried by the store).
//!
//! An image whose annotations the file holds a problem with (an annotation naming an
//! unknown category, a box outside the image: [`nostall_coco::Problem`]), or whose file
//! name leaves the image folder (absolute, or through `..`), fails when read, naming the
//! image and the annotation (`bad-targets`, of its `coco` member): skipped or raised as the
//! loader's error policy says, as any unreadable sample. So does an image a store does
//! not hold (`io`, naming its key).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nostall_coco::Annotations;

use super::blob::{read_range, read_ranges, BlobRange};
use super::coco_index::{self, Problem};
use super::coco_member::{encode_coco_member, EncodedAnnotation};
use super::files::read_regular_file;
use super::record::write_frame;
use super::{
    BlobInfo, BlobStore, NextRead, ReadDone, ReadMode, Served, Source, SourceStats,
    DEFAULT_MAX_BYTES,
};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// The member name of a sample's annotations in its record.
pub const COCO_MEMBER: &str = "coco";

/// Images with the annotations a COCO file gives them.
#[derive(Debug)]
pub struct Annotated {
    catalog: Arc<Catalog>,
    images: Images,
    /// The file's annotations, each sample's `coco` member written from them.
    index: Annotations,
    /// Why a sample cannot be read, where that is known when the dataset is opened
    /// (sorted by sample).
    refused: Vec<(SampleId, Cause)>,
    served: Served,
}

/// Where an [`Annotated`]'s images are read from.
#[derive(Debug)]
enum Images {
    /// Files of a local folder (the catalog's root), read in this mode.
    Folder(ReadMode),
    /// Blobs of a store, keyed by their file names, each read as it was listed (its
    /// version, by sample): an image replaced since is an error, not another image.
    Store {
        store: Arc<dyn BlobStore>,
        versions: Vec<Option<String>>,
    },
}

impl Annotated {
    /// The images of the COCO annotation file at `path`, found in `images` (the folder
    /// its file names are relative to; `None`: found beside the file, see
    /// [`images_folder`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the file is not COCO's format (naming the place), lists no
    /// image, or its images are in none of the folders looked in (naming them).
    pub fn open(path: &Path, images: Option<&Path>) -> Result<Annotated> {
        let (index, problems, _) = coco_index::open(path, None)?;
        let file = path.display().to_string();
        let first_name = first_image(&index, &file)?;
        let root = match images {
            Some(images) => images.to_path_buf(),
            None => images_folder(path, &first_name)?,
        };
        // A missing file is not refused here: its read fails, naming the path.
        let size = |name: &str| {
            Ok((
                std::fs::metadata(root.join(name)).map_or(0, |m| m.len()),
                None,
            ))
        };
        Ok(Annotated::of(
            index,
            &problems,
            &file,
            (root.clone(), None),
            size,
        ))
    }

    /// The images of the COCO annotation file `file`, a blob of `store` (a bucket: its
    /// keys are whole object names), found where COCO lays them out beside it (the places
    /// [`images_folder`] looks in, relative to its key; none above the store's root).
    /// `images` opens the store of the images' prefix (its keys their file names), which
    /// is listed once for their sizes and versions.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the file is not COCO's format or is over the limits a local
    /// one is read within (naming its location), lists no image, or its first image is in
    /// none of the places looked in (naming them); what `images`, the listing or the
    /// read of the file fail with.
    pub fn open_blob(
        store: &dyn BlobStore,
        file: &BlobInfo,
        images: &dyn Fn(&str) -> Result<Arc<dyn BlobStore>>,
    ) -> Result<Annotated> {
        let (index, problems, _) = coco_index::open_blob(store, file, None)?;
        let location = store.locate(&file.key);
        let first_name = first_image(&index, &location)?;
        let images = images(&images_prefix(store, &file.key, &first_name)?)?;
        let listed: HashMap<String, (u64, Option<String>)> = images
            .list()?
            .into_iter()
            .map(|b| (b.key, (b.size, b.version)))
            .collect();
        let root = images.root();
        let blob = |name: &str| {
            listed.get(name).cloned().ok_or_else(|| {
                Cause::Io(format!(
                    "{}: no such object: {location} names it, and {root} holds none by \
                     that name (upload it, or take the image out of the annotation file)",
                    images.locate(name)
                ))
            })
        };
        let place = (PathBuf::from(&root), Some(images.clone()));
        Ok(Annotated::of(index, &problems, &location, place, blob))
    }

    /// The source of the images `index` lists, found in `root` (a folder, or the root of
    /// `store`), each sized and versioned by `blob` of its file name; an image `blob`
    /// refuses, `problems` name or whose file name leaves the folder fails when read.
    /// `file`: the annotation file's location, for messages.
    fn of(
        index: Annotations,
        problems: &[Problem],
        file: &str,
        (root, store): (PathBuf, Option<Arc<dyn BlobStore>>),
        blob: impl Fn(&str) -> std::result::Result<(u64, Option<String>), Cause>,
    ) -> Annotated {
        let mut samples = Vec::with_capacity(index.image_count());
        let mut versions = Vec::with_capacity(index.image_count());
        let mut refused = Vec::new();
        for i in 0..index.image_count() {
            let image = index.image(i).expect("within the count");
            let name = image.file_name;
            let (key, size, version) = match inside(name) {
                Some(key) => match blob(&key) {
                    Ok((size, version)) => (key, size, version),
                    Err(cause) => {
                        refused.push((i as SampleId, cause));
                        (key, 0, None)
                    }
                },
                None => {
                    refused.push((
                        i as SampleId,
                        bad_targets(format!(
                            "{file}: image {} has file name {name:?}, which leaves the image \
                             folder",
                            image.id
                        )),
                    ));
                    (name.to_string(), 0, None)
                }
            };
            samples.push((key, None, size));
            versions.push(version);
        }
        for (image, problem) in problems {
            if let Some(i) = index.image_index(*image) {
                refused.push((i as SampleId, bad_targets(format!("{file}: {problem}"))));
            }
        }
        // One reason a sample, the first found.
        refused.sort_by_key(|(id, _)| *id);
        refused.dedup_by_key(|(id, _)| *id);
        let catalog = Catalog::from_samples(root, Modality::Image, Vec::new(), samples)
            .expect("one sample at least, none labelled");
        let images = match store {
            Some(store) => Images::Store { store, versions },
            None => Images::Folder(ReadMode::Cached),
        };
        Annotated {
            catalog: Arc::new(catalog),
            images,
            index,
            refused,
            served: Served::default(),
        }
    }

    /// Reads local images in `mode`; a store's are read as the store reads them.
    pub fn with_mode(mut self, mode: ReadMode) -> Annotated {
        if let Images::Folder(read) = &mut self.images {
            *read = mode;
        }
        self
    }

    /// The catalog of its images, in the order of their ids.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Why sample `id` cannot be read, where that was known at open.
    fn refusal(&self, id: SampleId) -> Result<(), Cause> {
        match self.refused.binary_search_by_key(&id, |(id, _)| *id) {
            Ok(at) => Err(self.refused[at].1.clone()),
            Err(_) => Ok(()),
        }
    }

    /// Where sample `id`'s image lives in a store whose images have `versions`.
    fn range<'a>(&'a self, id: SampleId, versions: &'a [Option<String>]) -> BlobRange<'a> {
        let version = versions[id as usize].as_deref();
        (
            self.catalog.relative_path(id),
            version,
            0,
            self.catalog.size(id),
        )
    }

    fn read_record(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        self.refusal(id)?;
        let mut image = Vec::new();
        match &self.images {
            Images::Folder(mode) => {
                read_regular_file(&self.catalog.path(id), DEFAULT_MAX_BYTES, *mode, &mut image)?
            }
            Images::Store { store, versions } => read_range(
                &**store,
                self.range(id, versions),
                DEFAULT_MAX_BYTES,
                &mut image,
                &|_| {},
            )?,
        }
        self.frame(id, &image, out)
    }

    /// Writes sample `id`'s record, of its `image` and its `coco` member, into `out`.
    fn frame(&self, id: SampleId, image: &[u8], out: &mut Vec<u8>) -> Result<(), Cause> {
        let annotated = self.index.image(id as usize).ok_or_else(|| {
            Cause::Internal(format!("sample {id} is past the COCO file's images"))
        })?;
        let mut coco = Vec::new();
        encode_coco_member(
            (annotated.width, annotated.height),
            annotated.annotations().map(|a| EncodedAnnotation {
                bbox: a.bbox,
                category: a.category_id,
                crowd: a.iscrowd,
                segmentation: a.segmentation,
                keypoints: a.keypoints,
            }),
            &mut coco,
        );
        write_frame(
            &[(Modality::Image.name(), image), (COCO_MEMBER, &coco)],
            out,
        );
        Ok(())
    }
}

impl Source for Annotated {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        out.clear();
        let read = self.read_record(id, out);
        self.served.settle(read, out)
    }

    /// A store's images are read many at once, as [`super::Objects`] reads its blobs,
    /// each framed with its `coco` member as it arrives.
    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        let Images::Store { store, versions } = &self.images else {
            // Local files, one after another: as the trait's default reads them.
            return super::read_one_after_another(self, next, done);
        };
        // The reads are numbered in the order they are given: which sample each is.
        let ids = RefCell::new(HashMap::new());
        let given = Cell::new(0);
        let mut give = || {
            let (id, out) = next()?;
            ids.borrow_mut().insert(given.get(), id);
            given.set(given.get() + 1);
            Some((id, out))
        };
        let mut framed = |number, image: Vec<u8>, read: Result<(), Cause>| {
            let mut out = Vec::new();
            let read = read.and_then(|()| match ids.borrow_mut().remove(&number) {
                Some(id) => self.frame(id, &image, &mut out),
                None => Err(Cause::Internal(format!(
                    "read {number} ended but was never given"
                ))),
            });
            let read = self.served.settle(read, &mut out);
            done(number, out, read);
        };
        let range = |id| self.refusal(id).map(|()| self.range(id, versions));
        read_ranges(
            &**store,
            (&mut give, &mut framed),
            DEFAULT_MAX_BYTES,
            range,
            &|_| {},
        );
    }

    fn reads_at_once(&self) -> usize {
        match &self.images {
            Images::Folder(_) => 1,
            Images::Store { store, .. } => store.reads_at_once(),
        }
    }

    fn location(&self, id: SampleId) -> String {
        match &self.images {
            Images::Folder(_) => self.catalog.path(id).display().to_string(),
            Images::Store { store, .. } => store.locate(self.catalog.relative_path(id)),
        }
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// A fault of an image's annotations, as its `coco` member's.
fn bad_targets(reason: String) -> Cause {
    Cause::BadTargets {
        field: COCO_MEMBER.to_string(),
        reason,
    }
}

/// The file name of a COCO file's first image.
///
/// # Errors
///
/// [`Error::Config`] naming `file` when it lists no image.
fn first_image(index: &Annotations, file: &str) -> Result<String> {
    match index.image(0) {
        Some(image) => Ok(image.file_name.to_string()),
        None => Err(Error::Config(format!(
            "{file}: the COCO file lists no image"
        ))),
    }
}

/// File name `name` as a key relative to the folder it names a file of (`/`-separated,
/// without `.`), or `None` when it leaves the folder (absolute, or through `..`).
pub(super) fn inside(name: &str) -> Option<String> {
    let mut parts = Vec::new();
    for part in Path::new(name).components() {
        match part {
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(parts.join("/"))
}

/// Where COCO lays out the images of an annotation file whose stem is `stem`, relative to
/// the file's folder, most likely first: whether from the folder's parent, and the
/// sub-folder (`<split>` is the stem after its last `_`).
fn layouts(stem: &str) -> [(bool, String); 6] {
    let split = stem.rsplit_once('_').map_or(stem, |(_, split)| split);
    [
        (false, split.to_string()),
        (true, split.to_string()),
        (false, format!("images/{split}")),
        (true, format!("images/{split}")),
        (false, "images".to_string()),
        (false, String::new()),
    ]
}

/// The folder of a COCO file's images, found from the file's place as COCO lays it out
/// (`annotations/instances_val2017.json` beside `val2017/`): the first of `<dir>/<split>`,
/// `<dir>/../<split>`, `<dir>/images/<split>`, `<dir>/../images/<split>`, `<dir>/images`
/// and `<dir>` (`<split>` is the file's stem after its last `_`) that holds the first
/// image, `first_name`.
///
/// # Errors
///
/// [`Error::Config`] naming each folder looked in.
pub fn images_folder(path: &Path, first_name: &str) -> Result<PathBuf> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let up = dir.join("..");
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let candidates: Vec<PathBuf> = layouts(&stem)
        .iter()
        .map(|(above, sub)| {
            let base = if *above { &up } else { dir };
            match sub.as_str() {
                "" => base.to_path_buf(),
                sub => base.join(sub),
            }
        })
        .collect();
    candidates
        .iter()
        .find(|c| c.join(first_name).is_file())
        .cloned()
        .ok_or_else(|| {
            let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
            not_found(&path.display().to_string(), first_name, &looked)
        })
}

/// The prefix of `store` holding the images of its COCO file `key`, found as
/// [`images_folder`] finds a local file's: the first place that holds the first image,
/// `first_name` (asked for its first byte: one request a place). A file at the store's
/// root has no folder above it: those places are not looked in.
///
/// # Errors
///
/// [`Error::Config`] naming each place looked in.
pub(super) fn images_prefix(store: &dyn BlobStore, key: &str, first_name: &str) -> Result<String> {
    let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
    let up = match dir.rsplit_once('/') {
        Some((up, _)) => Some(up),
        None => (!dir.is_empty()).then_some(""),
    };
    let join = |a: &str, b: &str| match (a, b) {
        ("", b) => b.to_string(),
        (a, "") => a.to_string(),
        (a, b) => format!("{a}/{b}"),
    };
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    let places: Vec<String> = layouts(stem)
        .iter()
        .filter_map(|(above, sub)| Some(join(if *above { up? } else { dir }, sub)))
        .collect();
    let first = inside(first_name).unwrap_or_else(|| first_name.to_string());
    let mut byte = Vec::new();
    places
        .iter()
        .find(|place| {
            store
                .read_range(&join(place, &first), 0, 1, &mut byte)
                .is_ok()
        })
        .cloned()
        .ok_or_else(|| {
            let looked: Vec<String> = places.iter().map(|p| store.locate(p)).collect();
            not_found(&store.locate(key), first_name, &looked)
        })
}

/// A COCO file's first image is in none of the folders `looked` in.
fn not_found(file: &str, first_name: &str, looked: &[String]) -> Error {
    Error::Config(format!(
        "{file}: its first image, {first_name:?}, is in none of {}: put the images beside \
         the annotations as COCO lays them out",
        looked.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::coco_member::{decode_coco_member, MemberAnnotation, Shape};
    use crate::storage::record::members;
    use crate::storage::LocalDir;

    /// Images in `dir/val` whose bytes are their names.
    fn images(dir: &Path, names: &[&str]) {
        std::fs::create_dir_all(dir.join("val")).unwrap();
        for name in names {
            std::fs::write(dir.join("val").join(name), name.as_bytes()).unwrap();
        }
    }

    fn coco(dir: &Path, json: &str) -> PathBuf {
        std::fs::create_dir_all(dir.join("annotations")).unwrap();
        let path = dir.join("annotations/instances_val.json");
        std::fs::write(&path, json).unwrap();
        path
    }

    #[test]
    fn records_hold_the_image_and_its_boxes_and_problems_name_the_image() {
        let dir = tempfile::tempdir().unwrap();
        images(dir.path(), &["a.jpg", "b.jpg", "c.jpg"]);
        let path = coco(
            dir.path(),
            r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 8},
                           {"id": 2, "file_name": "b.jpg", "width": 10, "height": 8},
                           {"id": 3, "file_name": "../c.jpg", "width": 10, "height": 8}],
                "categories": [{"id": 7, "name": "cat"}],
                "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 2, 3, 4]},
                                {"id": 2, "image_id": 2, "category_id": 9, "bbox": [1, 2, 3, 4]}]}"#,
        );
        let source = Annotated::open(&path, None).unwrap();
        assert_eq!(source.catalog().len(), 3);
        let mut out = Vec::new();
        source.read(0, &mut out).unwrap();
        let parts = members(&out).unwrap();
        assert_eq!(parts[0].ext, "image");
        assert_eq!(&out[parts[0].data.clone()], b"a.jpg");
        assert_eq!(parts[1].ext, COCO_MEMBER);
        let (size, annotations) = decode_coco_member(&out[parts[1].data.clone()], 8, true).unwrap();
        assert_eq!(size, (10, 8));
        assert_eq!(
            annotations,
            [MemberAnnotation {
                bbox: [1.0, 2.0, 3.0, 4.0],
                category: 7,
                crowd: false,
                shape: Shape::None,
                keypoints: Vec::new(),
            }]
        );
        // An unknown category: the image fails, naming the annotation.
        let why = source.read(1, &mut out).unwrap_err().to_string();
        assert!(
            why.contains("instances_val.json") && why.contains("annotation 2"),
            "{why}"
        );
        // A file name out of the folder is never read.
        let why = source.read(2, &mut out).unwrap_err().to_string();
        assert!(why.contains("leaves the image folder"), "{why}");
    }

    #[test]
    fn a_coco_file_in_a_store_reads_as_the_local_file_and_names_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        images(dir.path(), &["a.jpg", "b.jpg", "c.jpg"]);
        let path = coco(
            dir.path(),
            r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 8},
                           {"id": 2, "file_name": "./b.jpg", "width": 10, "height": 8},
                           {"id": 3, "file_name": "../val/c.jpg", "width": 10, "height": 8},
                           {"id": 4, "file_name": "d.jpg", "width": 10, "height": 8}],
                "categories": [{"id": 7, "name": "cat"}],
                "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 2, 3, 4],
                                 "segmentation": [[1, 2, 4, 2, 4, 6]]},
                                {"id": 2, "image_id": 2, "category_id": 7, "bbox": [2, 2, 3, 4]}]}"#,
        );
        let local = Annotated::open(&path, None).unwrap();
        let store = LocalDir::new(dir.path()).unwrap();
        let root = store.root();
        let file = store.info("annotations/instances_val.json").unwrap();
        let images = |prefix: &str| -> Result<Arc<dyn BlobStore>> {
            Ok(Arc::new(LocalDir::new(&Path::new(&root).join(prefix))?))
        };
        let blobs = Annotated::open_blob(&store, &file, &images).unwrap();
        assert_eq!(blobs.catalog().len(), 4);
        assert_eq!(blobs.location(1), format!("{root}/val/b.jpg"));
        // Read one at a time and as the loader reads many: the local file's records.
        let (mut expected, mut got) = (Vec::new(), Vec::new());
        for id in 0..2 {
            local.read(id, &mut expected).unwrap();
            blobs.read(id, &mut got).unwrap();
            assert_eq!(got, expected);
        }
        let mut order = [1, 3, 0, 2].into_iter();
        let mut ended = Vec::new();
        blobs.read_each(
            &mut || order.next().map(|id| (id, Vec::new())),
            &mut |number, out, read| ended.push((number, out, read)),
        );
        ended.sort_by_key(|(number, ..)| *number);
        local.read(1, &mut expected).unwrap();
        assert_eq!((&ended[0].1, &ended[0].2), (&expected, &Ok(())));
        local.read(0, &mut expected).unwrap();
        assert_eq!((&ended[2].1, &ended[2].2), (&expected, &Ok(())));
        // An image the store lacks names its key; one out of the folder is never read.
        let why = ended[1].2.clone().unwrap_err().to_string();
        assert!(
            why.contains(&format!("{root}/val/d.jpg")) && why.contains("no such object"),
            "{why}"
        );
        let why = ended[3].2.clone().unwrap_err().to_string();
        assert!(why.contains("leaves the image folder"), "{why}");
        assert!(ended
            .iter()
            .all(|(_, out, read)| read.is_ok() || out.is_empty()));
        assert_eq!(blobs.stats().requests, 4);
        // A blob that is not COCO's format, or whose images are nowhere, is refused, named.
        std::fs::write(dir.path().join("annotations/x.json"), b"[1, 2]").unwrap();
        let x = store.info("annotations/x.json").unwrap();
        let why = Annotated::open_blob(&store, &x, &images)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains(&format!("{root}/annotations/x.json")) && why.contains("not a COCO"),
            "{why}"
        );
        std::fs::rename(dir.path().join("val"), dir.path().join("elsewhere")).unwrap();
        let why = Annotated::open_blob(&store, &file, &images)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("\"a.jpg\"") && why.contains(&format!("{root}/annotations/val")),
            "{why}"
        );
    }

    #[test]
    fn the_image_folder_is_found_as_coco_lays_it_out_or_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = coco(
            dir.path(),
            r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 8}]}"#,
        );
        let why = Annotated::open(&path, None).unwrap_err().to_string();
        assert!(
            why.contains("\"a.jpg\"") && why.contains("annotations/val"),
            "{why}"
        );
        std::fs::create_dir_all(dir.path().join("val")).unwrap();
        std::fs::write(dir.path().join("val/a.jpg"), b"x").unwrap();
        let source = Annotated::open(&path, None).unwrap();
        assert_eq!(
            source.catalog().path(0),
            dir.path().join("annotations/../val/a.jpg")
        );
        let why = Annotated::open(&dir.path().join("annotations/none.json"), None)
            .unwrap_err()
            .to_string();
        assert!(why.contains("none.json"), "{why}");
    }
}
