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
//! The pairs are listed when the dataset is opened, sorted by the image's path; a file
//! missing or unreadable fails its sample when read, naming it. Names that leave their
//! folder (a split line with `/` or `..`) are refused when opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::read_regular_file;
use super::record::write_frame;
use super::{ReadMode, Served, Source, SourceStats, DEFAULT_MAX_BYTES};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// The member name of a sample's label map in its record.
pub const MASK_MEMBER: &str = "mask";

/// The most bytes a VOC split file may have (VOC 2012's `trainval.txt` has 34 KB).
const MAX_SPLIT_BYTES: u64 = 64 << 20;

/// Images of a segmentation dataset with their label maps.
#[derive(Debug)]
pub struct Segmented {
    catalog: Arc<Catalog>,
    mode: ReadMode,
    /// Each sample's label map, by id.
    masks: Vec<PathBuf>,
    served: Served,
}

impl Segmented {
    /// The pairs of the segmentation dataset at `path`, if it is laid out as one of the
    /// module's table (`None` otherwise: another kind of dataset).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a layout that lists no pair or a split naming a file outside
    /// its folder; [`Error::Io`] for a folder or split that cannot be read.
    pub fn open(path: &Path) -> Result<Option<Segmented>> {
        let Some((images, pairs)) = pairs(path)? else {
            return Ok(None);
        };
        if pairs.is_empty() {
            return Err(Error::Config(format!(
                "{}: a segmentation dataset with no image and label map pair",
                path.display()
            )));
        }
        let mut samples = Vec::with_capacity(pairs.len());
        let mut masks = Vec::with_capacity(pairs.len());
        for (image, mask) in pairs {
            let size = std::fs::metadata(images.join(&image)).map_or(0, |m| m.len());
            samples.push((image, None, size));
            masks.push(mask);
        }
        let catalog = Catalog::from_samples(images, Modality::Image, Vec::new(), samples)
            .expect("one sample at least, none labelled");
        Ok(Some(Segmented {
            catalog: Arc::new(catalog),
            mode: ReadMode::Cached,
            masks,
            served: Served::default(),
        }))
    }

    /// Reads the files in `mode`.
    pub fn with_mode(self, mode: ReadMode) -> Segmented {
        Segmented { mode, ..self }
    }

    /// The catalog of its images.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn read_record(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        let mask_path = self.masks.get(id as usize).ok_or_else(|| {
            Cause::Internal(format!("sample {id} is past the dataset's label maps"))
        })?;
        let (mut image, mut mask) = (Vec::new(), Vec::new());
        read_regular_file(
            &self.catalog.path(id),
            DEFAULT_MAX_BYTES,
            self.mode,
            &mut image,
        )?;
        // The sample's location names its image: the cause names the map.
        read_regular_file(mask_path, DEFAULT_MAX_BYTES, self.mode, &mut mask).map_err(|cause| {
            Cause::BadTargets {
                field: MASK_MEMBER.to_string(),
                reason: format!("its label map {}: {cause}", mask_path.display()),
            }
        })?;
        write_frame(
            &[(Modality::Image.name(), &image), (MASK_MEMBER, &mask)],
            out,
        );
        Ok(())
    }
}

impl Source for Segmented {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        out.clear();
        let read = self.read_record(id, out);
        self.served.settle(read, out)
    }

    fn location(&self, id: SampleId) -> String {
        self.catalog.path(id).display().to_string()
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// The image folder and the pairs (the image's name in it, the label map's path) of the
/// layout `path` is, if any.
type Pairs = Option<(PathBuf, Vec<(String, PathBuf)>)>;

fn pairs(path: &Path) -> Result<Pairs> {
    let is_dir = |p: &Path| p.is_dir();
    // VOC: a split file, or the year's folder.
    if path.is_file() {
        let split_dir = path
            .parent()
            .filter(|p| p.ends_with("ImageSets/Segmentation"));
        let Some(root) = split_dir.and_then(|p| p.parent()).and_then(Path::parent) else {
            return Ok(None);
        };
        if !is_dir(&root.join("JPEGImages")) || !is_dir(&root.join("SegmentationClass")) {
            return Ok(None);
        }
        return voc_split(path, root).map(Some);
    }
    if is_dir(&path.join("JPEGImages")) && is_dir(&path.join("SegmentationClass")) {
        let maps = files(&path.join("SegmentationClass"), ".png")?;
        let pairs = maps
            .into_iter()
            .map(|map| {
                let stem = map.strip_suffix(".png").unwrap_or(&map);
                (
                    format!("{stem}.jpg"),
                    path.join("SegmentationClass").join(&map),
                )
            })
            .collect();
        return Ok(Some((path.join("JPEGImages"), pairs)));
    }
    let (Some(split), Some(parent)) = (path.file_name(), path.parent()) else {
        return Ok(None);
    };
    let (Some(kind), Some(root)) = (parent.file_name(), parent.parent()) else {
        return Ok(None);
    };
    // ADE20K: images/<split> beside annotations/<split>.
    let annotations = root.join("annotations").join(split);
    if kind == "images" && is_dir(&annotations) {
        let pairs = files(path, ".jpg")?
            .into_iter()
            .map(|image| {
                let stem = image.strip_suffix(".jpg").unwrap_or(&image);
                let map = annotations.join(format!("{stem}.png"));
                (image, map)
            })
            .collect();
        return Ok(Some((path.to_path_buf(), pairs)));
    }
    // Cityscapes: leftImg8bit/<split>/<city> beside gtFine/<split>/<city>.
    let fine = root.join("gtFine").join(split);
    if kind == "leftImg8bit" && is_dir(&fine) {
        let mut pairs = Vec::new();
        for city in dirs(path)? {
            for image in files(&path.join(&city), "_leftImg8bit.png")? {
                let stem = image.strip_suffix("_leftImg8bit.png").unwrap_or(&image);
                let map = fine.join(&city).join(format!("{stem}_gtFine_labelIds.png"));
                pairs.push((format!("{city}/{image}"), map));
            }
        }
        return Ok(Some((path.to_path_buf(), pairs)));
    }
    Ok(None)
}

/// The pairs of VOC split file `split` of the year's folder `root`.
fn voc_split(split: &Path, root: &Path) -> Result<(PathBuf, Vec<(String, PathBuf)>)> {
    let mut text = Vec::new();
    read_regular_file(split, MAX_SPLIT_BYTES, ReadMode::Cached, &mut text)
        .map_err(|cause| Error::Config(format!("{}: {cause}", split.display())))?;
    let text = String::from_utf8(text)
        .map_err(|_| Error::Config(format!("{}: not UTF-8 text", split.display())))?;
    let mut pairs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        // VOC's classification splits add a label after the stem; the stem comes first.
        let Some(stem) = line.split_whitespace().next() else {
            continue;
        };
        if stem.contains(['/', '\\']) || stem.starts_with('.') {
            return Err(Error::Config(format!(
                "{} line {}: {stem:?} is not a file stem of JPEGImages",
                split.display(),
                n + 1
            )));
        }
        let map = root.join("SegmentationClass").join(format!("{stem}.png"));
        pairs.push((format!("{stem}.jpg"), map));
    }
    Ok((root.join("JPEGImages"), pairs))
}

/// The names of the regular files of `dir` ending with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.ends_with(suffix) && name.len() > suffix.len())
        .collect();
    names.sort();
    Ok(names)
}

/// The names of the folders in `dir`, sorted.
fn dirs(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::members;

    fn touch(path: &Path, data: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
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
                assert_eq!((&*parts[0].ext, &*parts[1].ext), ("image", MASK_MEMBER));
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
        for stem in ["b", "a", "c"] {
            touch(&voc.join(format!("JPEGImages/{stem}.jpg")), stem.as_bytes());
        }
        for stem in ["a", "b"] {
            touch(
                &voc.join(format!("SegmentationClass/{stem}.png")),
                format!("map {stem}").as_bytes(),
            );
        }
        touch(&voc.join("ImageSets/Segmentation/train.txt"), b"b\nc\n\n");
        let all = Segmented::open(&voc).unwrap().unwrap();
        assert_eq!(
            records(&all),
            [
                Ok((b"a".to_vec(), b"map a".to_vec())),
                Ok((b"b".to_vec(), b"map b".to_vec()))
            ]
        );
        let split = Segmented::open(&voc.join("ImageSets/Segmentation/train.txt"))
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
        let why = Segmented::open(&voc.join("ImageSets/Segmentation/bad.txt")).unwrap_err();
        assert!(why.to_string().contains("line 1"), "{why}");
    }

    #[test]
    fn ade20k_and_cityscapes_pair_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let ade = dir.path().join("ADEChallengeData2016");
        touch(&ade.join("images/training/x.jpg"), b"x");
        touch(&ade.join("annotations/training/x.png"), b"map x");
        let source = Segmented::open(&ade.join("images/training"))
            .unwrap()
            .unwrap();
        assert_eq!(records(&source), [Ok((b"x".to_vec(), b"map x".to_vec()))]);
        let city = dir.path().join("cityscapes");
        for (town, name) in [("ulm", "ulm_1"), ("aachen", "aachen_2")] {
            touch(
                &city.join(format!("leftImg8bit/val/{town}/{name}_leftImg8bit.png")),
                name.as_bytes(),
            );
            touch(
                &city.join(format!("gtFine/val/{town}/{name}_gtFine_labelIds.png")),
                format!("ids {name}").as_bytes(),
            );
            touch(
                &city.join(format!("gtFine/val/{town}/{name}_gtFine_color.png")),
                b"colour",
            );
        }
        let source = Segmented::open(&city.join("leftImg8bit/val"))
            .unwrap()
            .unwrap();
        assert_eq!(
            records(&source),
            [
                Ok((b"aachen_2".to_vec(), b"ids aachen_2".to_vec())),
                Ok((b"ulm_1".to_vec(), b"ids ulm_1".to_vec()))
            ]
        );
        // Another folder is no segmentation dataset.
        assert!(Segmented::open(&city.join("gtFine")).unwrap().is_none());
        assert!(Segmented::open(dir.path()).unwrap().is_none());
    }
}
