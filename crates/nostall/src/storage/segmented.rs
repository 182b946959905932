//! [`Segmented`]: images with their label maps as the semantic segmentation datasets lay
//! them out, each sample a record of the image and its `mask` member (a one-channel PNG,
//! as a mask field reads it).
//!
//! | layout | opened as | an image and its map |
//! |---|---|---|
//! | Pascal VOC | `VOC2012/ImageSets/Segmentation/train.txt` (a split: a stem a line), or `VOC2012` (every map) | `JPEGImages/<stem>.jpg`, `SegmentationClass/<stem>.png` |
//! | ADE20K (SceneParsing) | `ADEChallengeData2016/images/training` | `images/training/<name>.jpg`, `annotations/training/<name>.png` |
//! | Cityscapes | `cityscapes/leftImg8bit/train` | `leftImg8bit/train/<city>/<name>_leftImg8bit.png`, `gtFine/train/<city>/<name>_gtFine_labelIds.png` |
//!
//! Cityscapes' maps of its 19 training classes (`<name>_gtFine_labelTrainIds.png`, which
//! cityscapesscripts' `createTrainIdLabelImgs` writes beside the others) are read instead
//! when the field asks for the member `labelTrainIds` ([`TRAIN_IDS_MEMBER`], in any case)
//! rather than `mask`; the record's member is then named so.
//!
//! The layouts are the same in a blob store (an S3 prefix, [`Segmented::open_blob`]): the
//! folders are the prefixes, listed once when the dataset is opened (each blob read as it
//! was listed, [`super::Paired`]).
//!
//! The pairs are listed when the dataset is opened, sorted by the image's path; a file
//! missing or unreadable fails its sample when read, naming it. Names that leave their
//! folder (a split line with `/` or `..`) are refused when opened.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::read_regular_file;
use super::paired::{join, Blob, Paired, Pairing};
use super::record::write_frame;
use super::{BlobInfo, BlobStore, ReadMode};
use crate::catalog::SampleId;
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// The member name of a sample's label map in its record.
pub const MASK_MEMBER: &str = "mask";

/// The member name that asks for Cityscapes' maps of training ids
/// (`<name>_gtFine_labelTrainIds.png`) instead of its label ids: `labelTrainIds`, in
/// lower case as fields name members.
pub const TRAIN_IDS_MEMBER: &str = "labeltrainids";

/// The most bytes a VOC split file may have (VOC 2012's `trainval.txt` has 34 KB).
const MAX_SPLIT_BYTES: u64 = 64 << 20;

/// Images of a segmentation dataset with their label maps.
pub type Segmented = Paired<LabelMaps>;

/// A [`Segmented`] sample's record: its image, and its label map as the member the
/// field asked for.
#[derive(Debug)]
pub struct LabelMaps {
    member: &'static str,
}

impl Pairing for LabelMaps {
    fn member(&self) -> &str {
        self.member
    }

    fn noun(&self) -> &'static str {
        "label map"
    }

    fn frame(
        &self,
        _: SampleId,
        image: &[u8],
        (map, _): (&[u8], &str),
        out: &mut Vec<u8>,
    ) -> Result<(), Cause> {
        write_frame(&[(Modality::Image.name(), image), (self.member, map)], out);
        Ok(())
    }
}

/// The member of the label maps a record of fields reading `members` holds, if any of
/// them is one: [`MASK_MEMBER`], or [`TRAIN_IDS_MEMBER`] (Cityscapes' training ids).
pub fn label_map_member<'a>(members: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    members.into_iter().find_map(|m| {
        [MASK_MEMBER, TRAIN_IDS_MEMBER]
            .into_iter()
            .find(|k| *k == m)
    })
}

impl Segmented {
    /// The pairs of the segmentation dataset at `path`, if it is laid out as one of the
    /// module's table (`None` otherwise: another kind of dataset), each record's map the
    /// member `member` ([`MASK_MEMBER`] or [`TRAIN_IDS_MEMBER`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a layout that lists no pair, a split naming a file outside
    /// its folder, or maps of training ids asked of another layout than Cityscapes';
    /// [`Error::Io`] for a folder or split that cannot be read.
    pub fn open(path: &Path, member: &'static str) -> Result<Option<Segmented>> {
        let Some(location) = path.to_str() else {
            return Ok(None);
        };
        let Some((images, pairs)) = pairs(&Folder, location, member)? else {
            return Ok(None);
        };
        let pairs = pairs
            .into_iter()
            .map(|(image, map)| (image, PathBuf::from(map)))
            .collect();
        let maps = LabelMaps { member };
        Ok(Some(Paired::in_folder(
            PathBuf::from(images),
            pairs,
            Vec::new(),
            maps,
        )))
    }

    /// The pairs of the segmentation dataset at key `prefix` of `store` (a bucket: its
    /// keys are whole object names), laid out as a local one, as [`Segmented::open`]
    /// finds them; `open` opens the store of a prefix of it, to list it. Each folder is
    /// listed once; an image or map the listings lack fails its sample when read, naming
    /// it.
    ///
    /// # Errors
    ///
    /// As [`Segmented::open`], naming the blobs; what `open` or a listing fails with.
    pub fn open_blob(
        store: Arc<dyn BlobStore>,
        prefix: &str,
        open: &dyn Fn(&str) -> Result<Arc<dyn BlobStore>>,
        member: &'static str,
    ) -> Result<Option<Segmented>> {
        let tree = Listed {
            store: &*store,
            open,
            listings: RefCell::default(),
            blobs: RefCell::default(),
        };
        let Some((images, pairs)) = pairs(&tree, prefix.trim_matches('/'), member)? else {
            return Ok(None);
        };
        let mut blobs = Vec::with_capacity(pairs.len());
        for (name, map) in pairs {
            let image = join(&images, &name);
            let pair = match (tree.blob(&image)?, tree.blob(&map)?) {
                (None, _) => Err(Cause::Io(format!(
                    "{}: no such object (upload it, or take its label map out of {})",
                    store.locate(&image),
                    store.locate(parent(&map))
                ))),
                (_, None) => Err(Cause::BadTargets {
                    field: member.to_string(),
                    reason: format!(
                        "its label map {}: no such object (upload it)",
                        store.locate(&map)
                    ),
                }),
                (Some(image), Some(map)) => Ok([image, map]),
            };
            blobs.push((name, pair));
        }
        let maps = LabelMaps { member };
        Ok(Some(Paired::in_store(
            store.clone(),
            &images,
            blobs,
            Vec::new(),
            maps,
        )))
    }
}

/// Where a layout's pairs are listed from: local folders, or the prefixes of a store.
/// Paths are `/`-separated.
trait Tree {
    /// Path `path` as a user would write it.
    fn locate(&self, path: &str) -> String;
    fn is_file(&self, path: &str) -> Result<bool>;
    fn is_dir(&self, path: &str) -> Result<bool>;
    /// The names of the files of `dir` (not below it) ending with `suffix`, sorted.
    fn files(&self, dir: &str, suffix: &str) -> Result<Vec<String>>;
    /// The names of the folders of `dir`, sorted.
    fn dirs(&self, dir: &str) -> Result<Vec<String>>;
    /// The bytes of file `path`, at most `max_bytes` of them.
    fn read(&self, path: &str, max_bytes: u64) -> std::result::Result<Vec<u8>, Cause>;
}

/// Local folders.
struct Folder;

impl Tree for Folder {
    fn locate(&self, path: &str) -> String {
        path.to_string()
    }

    fn is_file(&self, path: &str) -> Result<bool> {
        Ok(Path::new(path).is_file())
    }

    fn is_dir(&self, path: &str) -> Result<bool> {
        Ok(Path::new(path).is_dir())
    }

    fn files(&self, dir: &str, suffix: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = entries(Path::new(dir), |t| t.is_file())?
            .into_iter()
            .filter(|name| name.ends_with(suffix) && name.len() > suffix.len())
            .collect();
        names.sort();
        Ok(names)
    }

    fn dirs(&self, dir: &str) -> Result<Vec<String>> {
        let mut names = entries(Path::new(dir), |t| t.is_dir())?;
        names.sort();
        Ok(names)
    }

    fn read(&self, path: &str, max_bytes: u64) -> std::result::Result<Vec<u8>, Cause> {
        let mut bytes = Vec::new();
        read_regular_file(Path::new(path), max_bytes, ReadMode::Cached, &mut bytes)?;
        Ok(bytes)
    }
}

/// The names of the entries of `dir` of a kind `keep` keeps (names that are not UTF-8
/// are left out).
fn entries(dir: &Path, keep: impl Fn(std::fs::FileType) -> bool) -> Result<Vec<String>> {
    Ok(std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(&keep))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// The prefixes of a store (keys its paths), each listed once, when first asked about.
struct Listed<'a> {
    store: &'a dyn BlobStore,
    open: &'a dyn Fn(&str) -> Result<Arc<dyn BlobStore>>,
    /// The prefixes listed, each with its keys relative to it.
    listings: RefCell<Vec<(String, Arc<Vec<BlobInfo>>)>>,
    /// Every blob listed, by its whole key.
    blobs: RefCell<HashMap<String, BlobInfo>>,
}

impl Listed<'_> {
    /// Whether `dir` or a prefix above it was listed.
    fn covered(&self, dir: &str) -> bool {
        self.listings
            .borrow()
            .iter()
            .any(|(listed, _)| within(dir, listed).is_some())
    }

    /// The blobs under prefix `dir`, keyed relative to it: from the listing of `dir` or
    /// of a prefix above it, else listed now.
    fn under(&self, dir: &str) -> Result<Vec<BlobInfo>> {
        if !self.covered(dir) {
            let blobs = (self.open)(dir)?.list()?;
            let mut known = self.blobs.borrow_mut();
            for b in &blobs {
                let key = join(dir, &b.key);
                known.insert(key.clone(), BlobInfo { key, ..b.clone() });
            }
            self.listings
                .borrow_mut()
                .push((dir.to_string(), Arc::new(blobs)));
        }
        let listings = self.listings.borrow();
        let (rest, blobs) = listings
            .iter()
            .find_map(|(listed, blobs)| Some((within(dir, listed)?, blobs)))
            .expect("listed above");
        Ok(blobs
            .iter()
            .filter_map(|b| {
                let key = match rest {
                    "" => b.key.as_str(),
                    rest => b.key.strip_prefix(rest)?.strip_prefix('/')?,
                };
                Some(BlobInfo {
                    key: key.to_string(),
                    size: b.size,
                    version: b.version.clone(),
                })
            })
            .collect())
    }

    /// Blob `key`, as the listing of its prefix has it (`None`: not listed).
    fn blob(&self, key: &str) -> Result<Option<Blob>> {
        if !self.covered(parent(key)) {
            self.under(parent(key))?;
        }
        Ok(self.blobs.borrow().get(key).map(|b| Blob {
            key: b.key.clone(),
            size: b.size,
            version: b.version.clone(),
        }))
    }
}

/// Prefix `dir` relative to prefix `listed`, if it is `listed` or below it.
fn within<'a>(dir: &'a str, listed: &str) -> Option<&'a str> {
    match listed {
        "" => Some(dir),
        listed if listed == dir => Some(""),
        listed => dir.strip_prefix(listed)?.strip_prefix('/'),
    }
}

impl Tree for Listed<'_> {
    fn locate(&self, path: &str) -> String {
        self.store.locate(path)
    }

    fn is_file(&self, path: &str) -> Result<bool> {
        // Its first byte: one request, however large the prefix above it.
        let mut byte = Vec::new();
        Ok(self.store.read_range(path, 0, 1, &mut byte).is_ok())
    }

    fn is_dir(&self, path: &str) -> Result<bool> {
        Ok(!self.under(path)?.is_empty())
    }

    fn files(&self, dir: &str, suffix: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .under(dir)?
            .into_iter()
            .map(|b| b.key)
            .filter(|k| !k.contains('/') && k.ends_with(suffix) && k.len() > suffix.len())
            .collect();
        names.sort();
        Ok(names)
    }

    fn dirs(&self, dir: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .under(dir)?
            .into_iter()
            .filter_map(|b| Some(b.key.split_once('/')?.0.to_string()))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn read(&self, path: &str, max_bytes: u64) -> std::result::Result<Vec<u8>, Cause> {
        let Some(blob) = self.blob(path).map_err(|e| Cause::Io(e.to_string()))? else {
            return Err(Cause::Io("no such object".to_string()));
        };
        if blob.size > max_bytes {
            return Err(Cause::TooLarge {
                bytes: blob.size,
                limit: max_bytes,
                field: None,
            });
        }
        let mut bytes = Vec::new();
        let version = blob.version.as_deref();
        self.store
            .read_version(path, version, 0, blob.size, &mut bytes)?;
        Ok(bytes)
    }
}

/// The folder of `path` (`""` at the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The image folder and the pairs (the image's name in it, the label map's path) of the
/// layout `path` of `tree` is, if any.
type Pairs = Option<(String, Vec<(String, String)>)>;

fn pairs(tree: &dyn Tree, path: &str, member: &'static str) -> Result<Pairs> {
    let Some(pairs) = layout_pairs(tree, path, member)? else {
        return Ok(None);
    };
    if pairs.1.is_empty() {
        return Err(Error::Config(format!(
            "{}: a segmentation dataset with no image and label map pair",
            tree.locate(path)
        )));
    }
    Ok(Some(pairs))
}

fn layout_pairs(tree: &dyn Tree, path: &str, member: &'static str) -> Result<Pairs> {
    let at = Path::new(path);
    let (file_name, parent) = (at.file_name(), at.parent());
    let name = |p: &Path| p.to_str().unwrap_or_default().to_string();
    // Maps of training ids are Cityscapes' alone.
    let only_cityscapes = |layout: &str| match member {
        TRAIN_IDS_MEMBER => Err(Error::Config(format!(
            "{}: labelTrainIds maps are Cityscapes' (<name>_gtFine_labelTrainIds.png, \
             which cityscapesscripts' createTrainIdLabelImgs writes), and this is {layout}: \
             read its label maps as the member {MASK_MEMBER}",
            tree.locate(path)
        ))),
        _ => Ok(()),
    };
    // VOC: a split file, or the year's folder.
    let split_dir = parent.filter(|p| p.ends_with("ImageSets/Segmentation"));
    if let Some(root) = split_dir.and_then(Path::parent).and_then(Path::parent) {
        let root = name(root);
        if tree.is_file(path)?
            && tree.is_dir(&join(&root, "JPEGImages"))?
            && tree.is_dir(&join(&root, "SegmentationClass"))?
        {
            only_cityscapes("Pascal VOC")?;
            return voc_split(tree, path, &root).map(Some);
        }
    }
    if tree.is_dir(&join(path, "SegmentationClass"))? && tree.is_dir(&join(path, "JPEGImages"))? {
        only_cityscapes("Pascal VOC")?;
        let maps = tree.files(&join(path, "SegmentationClass"), ".png")?;
        let pairs = maps
            .into_iter()
            .map(|map| {
                let stem = map.strip_suffix(".png").unwrap_or(&map);
                let image = format!("{stem}.jpg");
                (image, join(&join(path, "SegmentationClass"), &map))
            })
            .collect();
        return Ok(Some((join(path, "JPEGImages"), pairs)));
    }
    let (Some(split), Some(parent)) = (file_name.and_then(|s| s.to_str()), parent) else {
        return Ok(None);
    };
    let (Some(kind), Some(root)) = (parent.file_name(), parent.parent()) else {
        return Ok(None);
    };
    let root = name(root);
    // ADE20K: images/<split> beside annotations/<split>.
    let annotations = join(&join(&root, "annotations"), split);
    if kind == "images" && tree.is_dir(&annotations)? {
        only_cityscapes("ADE20K")?;
        let pairs = tree
            .files(path, ".jpg")?
            .into_iter()
            .map(|image| {
                let stem = image.strip_suffix(".jpg").unwrap_or(&image);
                let map = join(&annotations, &format!("{stem}.png"));
                (image, map)
            })
            .collect();
        return Ok(Some((path.to_string(), pairs)));
    }
    // Cityscapes: leftImg8bit/<split>/<city> beside gtFine/<split>/<city>.
    let fine = join(&join(&root, "gtFine"), split);
    if kind == "leftImg8bit" && tree.is_dir(&fine)? {
        let maps = match member {
            TRAIN_IDS_MEMBER => "_gtFine_labelTrainIds.png",
            _ => "_gtFine_labelIds.png",
        };
        let mut pairs = Vec::new();
        for city in tree.dirs(path)? {
            for image in tree.files(&join(path, &city), "_leftImg8bit.png")? {
                let stem = image.strip_suffix("_leftImg8bit.png").unwrap_or(&image);
                let map = join(&join(&fine, &city), &format!("{stem}{maps}"));
                pairs.push((format!("{city}/{image}"), map));
            }
        }
        return Ok(Some((path.to_string(), pairs)));
    }
    Ok(None)
}

/// The pairs of VOC split file `split` of the year's folder `root`.
fn voc_split(tree: &dyn Tree, split: &str, root: &str) -> Result<(String, Vec<(String, String)>)> {
    let location = tree.locate(split);
    let text = tree
        .read(split, MAX_SPLIT_BYTES)
        .map_err(|cause| Error::Config(format!("{location}: {cause}")))?;
    let text = String::from_utf8(text)
        .map_err(|_| Error::Config(format!("{location}: not UTF-8 text")))?;
    let mut pairs = Vec::new();
    let maps = join(root, "SegmentationClass");
    for (n, line) in text.lines().enumerate() {
        // VOC's classification splits add a label after the stem; the stem comes first.
        let Some(stem) = line.split_whitespace().next() else {
            continue;
        };
        if stem.contains(['/', '\\']) || stem.starts_with('.') {
            return Err(Error::Config(format!(
                "{location} line {}: {stem:?} is not a file stem of JPEGImages",
                n + 1
            )));
        }
        pairs.push((format!("{stem}.jpg"), join(&maps, &format!("{stem}.png"))));
    }
    Ok((join(root, "JPEGImages"), pairs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::paired::tests::bucket;
    use crate::storage::record::members;
    use crate::storage::Source;

    fn touch(path: &Path, data: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }

    /// VOC's images `a`, `b` and `c` under `root`, the label maps of `maps` (each map's
    /// bytes naming it) and the split `train.txt` of `split`.
    fn write_voc(root: &Path, maps: &[&str], split: &[u8]) {
        for stem in ["b", "a", "c"] {
            touch(
                &root.join(format!("JPEGImages/{stem}.jpg")),
                stem.as_bytes(),
            );
        }
        for stem in maps {
            touch(
                &root.join(format!("SegmentationClass/{stem}.png")),
                format!("map {stem}").as_bytes(),
            );
        }
        touch(&root.join("ImageSets/Segmentation/train.txt"), split);
    }

    /// ADE20K's one pair under `root`: the image `x` and its map.
    fn write_ade20k(root: &Path) {
        touch(&root.join("images/training/x.jpg"), b"x");
        touch(&root.join("annotations/training/x.png"), b"map x");
    }

    /// Cityscapes' images of two towns under `root`, each with the maps of `maps` (each
    /// map's bytes naming it and its image).
    fn write_cityscapes(root: &Path, maps: &[&str]) {
        for (town, name) in [("ulm", "ulm_1"), ("aachen", "aachen_2")] {
            touch(
                &root.join(format!("leftImg8bit/val/{town}/{name}_leftImg8bit.png")),
                name.as_bytes(),
            );
            for map in maps {
                touch(
                    &root.join(format!("gtFine/val/{town}/{name}_gtFine_{map}.png")),
                    format!("{map} {name}").as_bytes(),
                );
            }
        }
    }

    /// A record's image and label map, or why it was not read.
    type Record = Result<(Vec<u8>, Vec<u8>), String>;

    /// The (image, mask) members of each record of `source`.
    fn records(source: &Segmented) -> Vec<Record> {
        (0..source.catalog().len() as SampleId)
            .map(|id| {
                let mut out = Vec::new();
                source.read(id, &mut out).map_err(|e| e.to_string())?;
                let parts = members(&out).unwrap();
                let member = source.pairing().member();
                assert_eq!((&*parts[0].ext, &*parts[1].ext), ("image", member));
                Ok((
                    out[parts[0].data.clone()].to_vec(),
                    out[parts[1].data.clone()].to_vec(),
                ))
            })
            .collect()
    }

    #[test]
    fn voc_pairs_by_split_or_every_map() {
        let dir = tempfile::tempdir().unwrap();
        let voc = dir.path().join("VOC2012");
        write_voc(&voc, &["a", "b"], b"b\nc\n\n");
        let all = Segmented::open(&voc, MASK_MEMBER).unwrap().unwrap();
        assert_eq!(
            records(&all),
            [
                Ok((b"a".to_vec(), b"map a".to_vec())),
                Ok((b"b".to_vec(), b"map b".to_vec()))
            ]
        );
        let split = Segmented::open(&voc.join("ImageSets/Segmentation/train.txt"), MASK_MEMBER)
            .unwrap()
            .unwrap();
        let read = records(&split);
        assert_eq!(read[0], Ok((b"b".to_vec(), b"map b".to_vec())));
        // c has no label map: its sample fails, naming the file.
        assert!(
            read[1]
                .as_ref()
                .unwrap_err()
                .contains("SegmentationClass/c.png"),
            "{read:?}"
        );
        touch(
            &voc.join("ImageSets/Segmentation/bad.txt"),
            b"../../etc/passwd\n",
        );
        let why =
            Segmented::open(&voc.join("ImageSets/Segmentation/bad.txt"), MASK_MEMBER).unwrap_err();
        assert!(why.to_string().contains("line 1"), "{why}");
    }

    #[test]
    fn ade20k_and_cityscapes_pair_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let ade = dir.path().join("ADEChallengeData2016");
        write_ade20k(&ade);
        let source = Segmented::open(&ade.join("images/training"), MASK_MEMBER)
            .unwrap()
            .unwrap();
        assert_eq!(records(&source), [Ok((b"x".to_vec(), b"map x".to_vec()))]);
        let city = dir.path().join("cityscapes");
        write_cityscapes(&city, &["labelIds", "color"]);
        let source = Segmented::open(&city.join("leftImg8bit/val"), MASK_MEMBER)
            .unwrap()
            .unwrap();
        assert_eq!(
            records(&source),
            [
                Ok((b"aachen_2".to_vec(), b"labelIds aachen_2".to_vec())),
                Ok((b"ulm_1".to_vec(), b"labelIds ulm_1".to_vec()))
            ]
        );
        // Another folder is no segmentation dataset.
        assert!(Segmented::open(&city.join("gtFine"), MASK_MEMBER)
            .unwrap()
            .is_none());
        assert!(Segmented::open(dir.path(), MASK_MEMBER).unwrap().is_none());
    }

    #[test]
    fn cityscapes_training_ids_are_read_when_asked_for_and_only_there() {
        let dir = tempfile::tempdir().unwrap();
        let city = dir.path().join("cityscapes");
        write_cityscapes(&city, &["labelIds"]);
        touch(
            &city.join("gtFine/val/aachen/aachen_2_gtFine_labelTrainIds.png"),
            b"train ids",
        );
        let source = Segmented::open(&city.join("leftImg8bit/val"), TRAIN_IDS_MEMBER)
            .unwrap()
            .unwrap();
        let read = records(&source);
        assert_eq!(read[0], Ok((b"aachen_2".to_vec(), b"train ids".to_vec())));
        // A map cityscapesscripts did not write fails its sample, naming the file.
        assert!(
            read[1]
                .as_ref()
                .unwrap_err()
                .contains("gtFine/val/ulm/ulm_1_gtFine_labelTrainIds.png"),
            "{read:?}"
        );
        // Another layout has no training ids: refused, naming the member to read.
        let ade = dir.path().join("ADE");
        write_ade20k(&ade);
        let why = Segmented::open(&ade.join("images/training"), TRAIN_IDS_MEMBER).unwrap_err();
        assert!(
            why.to_string().contains("ADE20K") && why.to_string().contains("member mask"),
            "{why}"
        );
        assert_eq!(
            label_map_member(["txt", "labeltrainids"]),
            Some(TRAIN_IDS_MEMBER)
        );
        assert_eq!(label_map_member(["mask"]), Some(MASK_MEMBER));
        assert_eq!(label_map_member(["seg.png"]), None);
    }

    #[test]
    fn layouts_in_a_store_read_as_their_local_copies_and_name_what_they_lack() {
        let dir = tempfile::tempdir().unwrap();
        write_voc(&dir.path().join("VOC2012"), &["a", "b", "d"], b"b\nc\n");
        write_cityscapes(
            &dir.path().join("cs"),
            &["labelIds", "labelTrainIds", "color"],
        );
        let ade = dir.path().join("ADE");
        write_ade20k(&ade);
        let (store, open) = bucket(dir.path());
        for (prefix, member) in [
            ("VOC2012", MASK_MEMBER),
            ("VOC2012/ImageSets/Segmentation/train.txt", MASK_MEMBER),
            ("cs/leftImg8bit/val", MASK_MEMBER),
            ("cs/leftImg8bit/val/", TRAIN_IDS_MEMBER),
            ("ADE/images/training", MASK_MEMBER),
        ] {
            let local = Segmented::open(&dir.path().join(prefix), member)
                .unwrap()
                .unwrap();
            let blobs = Segmented::open_blob(store.clone(), prefix, &open, member)
                .unwrap()
                .unwrap();
            let (local_read, read) = (records(&local), records(&blobs));
            assert_eq!(read.len(), local_read.len(), "{prefix}");
            for (got, expected) in read.iter().zip(&local_read) {
                match (got, expected) {
                    (Ok(got), Ok(expected)) => assert_eq!(got, expected, "{prefix}"),
                    (Err(why), Err(_)) => assert!(why.contains("no such object"), "{why}"),
                    _ => panic!("{prefix}: {got:?} where the local copy reads {expected:?}"),
                }
            }
            // Read as the loader reads many: the same records, each framed whole.
            let mut order = (0..blobs.catalog().len() as SampleId).rev();
            let mut ended = Vec::new();
            blobs.read_each(
                &mut || order.next().map(|id| (id, Vec::new())),
                &mut |number, out, read| ended.push((number, out, read)),
            );
            ended.sort_by_key(|(number, ..)| *number);
            assert_eq!(ended.len(), read.len());
            for (number, out, result) in ended {
                let id = (read.len() - 1 - number) as SampleId;
                let mut expected = Vec::new();
                let one = blobs.read(id, &mut expected);
                assert_eq!((out, result.is_ok()), (expected, one.is_ok()), "{prefix}");
            }
        }
        let blobs = Segmented::open_blob(store.clone(), "cs/leftImg8bit/val", &open, MASK_MEMBER)
            .unwrap()
            .unwrap();
        assert_eq!(
            blobs.location(0),
            store.locate("cs/leftImg8bit/val/aachen/aachen_2_leftImg8bit.png")
        );
        // VOC's split names c, whose map is missing; its folder names d, whose image is.
        let blobs = Segmented::open_blob(store.clone(), "VOC2012", &open, MASK_MEMBER)
            .unwrap()
            .unwrap();
        let why = records(&blobs)[2].clone().unwrap_err();
        assert!(
            why.contains(&store.locate("VOC2012/JPEGImages/d.jpg")),
            "{why}"
        );
        let split = "VOC2012/ImageSets/Segmentation/train.txt";
        let blobs = Segmented::open_blob(store.clone(), split, &open, MASK_MEMBER)
            .unwrap()
            .unwrap();
        let why = records(&blobs)[1].clone().unwrap_err();
        assert!(
            why.contains(&store.locate("VOC2012/SegmentationClass/c.png")),
            "{why}"
        );
        // Another prefix is no segmentation dataset; training ids are Cityscapes' alone.
        assert!(
            Segmented::open_blob(store.clone(), "cs/gtFine", &open, MASK_MEMBER)
                .unwrap()
                .is_none()
        );
        let why = Segmented::open_blob(store.clone(), "VOC2012", &open, TRAIN_IDS_MEMBER)
            .unwrap_err()
            .to_string();
        assert!(why.contains(&store.locate("VOC2012")), "{why}");
    }
}
