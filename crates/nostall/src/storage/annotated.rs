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
//! An image whose annotations the file holds a problem with (an annotation naming an
//! unknown category, a box outside the image: [`nostall_coco::Problem`]), or whose file
//! name leaves the image folder (absolute, or through `..`), fails when read, naming the
//! image and the annotation (`bad-targets`, of its `coco` member): skipped or raised as the
//! loader's error policy says, as any unreadable sample.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nostall_coco::Annotations;

use super::coco_index::{self, Problem};
use super::coco_member::{encode_coco_member, EncodedAnnotation};
use super::files::read_regular_file;
use super::record::write_frame;
use super::{ReadMode, Served, Source, SourceStats, DEFAULT_MAX_BYTES};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// The member name of a sample's annotations in its record.
pub const COCO_MEMBER: &str = "coco";

/// Images of a folder with the annotations a COCO file gives them.
#[derive(Debug)]
pub struct Annotated {
    catalog: Arc<Catalog>,
    mode: ReadMode,
    /// The file's annotations, each sample's `coco` member written from them.
    index: Annotations,
    /// Why a sample cannot be read, where the file says so (sorted by sample).
    problems: Vec<(SampleId, String)>,
    served: Served,
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
        if index.image_count() == 0 {
            return Err(Error::Config(format!(
                "{}: the COCO file lists no image",
                path.display()
            )));
        }
        let first_name = index.image(0).expect("an image").file_name.to_string();
        let root = match images {
            Some(images) => images.to_path_buf(),
            None => images_folder(path, &first_name)?,
        };
        Ok(Annotated::of(index, &problems, root, path))
    }

    fn of(index: Annotations, problems: &[Problem], root: PathBuf, path: &Path) -> Annotated {
        let mut samples = Vec::with_capacity(index.image_count());
        let mut refused = Vec::new();
        for i in 0..index.image_count() {
            let image = index.image(i).expect("within the count");
            let name = image.file_name;
            if !stays_inside(name) {
                refused.push((
                    i as SampleId,
                    format!(
                        "{}: image {} has file name {name:?}, which leaves the image folder",
                        path.display(),
                        image.id
                    ),
                ));
            }
            let size = std::fs::metadata(root.join(name)).map_or(0, |m| m.len());
            samples.push((name.to_string(), None, size));
        }
        for (image, problem) in problems {
            if let Some(i) = index.image_index(*image) {
                refused.push((i as SampleId, format!("{}: {problem}", path.display())));
            }
        }
        // One reason a sample, the first the file gives.
        refused.sort_by_key(|(id, _)| *id);
        refused.dedup_by_key(|(id, _)| *id);
        let catalog = Catalog::from_samples(root, Modality::Image, Vec::new(), samples)
            .expect("one sample at least, none labelled");
        Annotated {
            catalog: Arc::new(catalog),
            mode: ReadMode::Cached,
            index,
            problems: refused,
            served: Served::default(),
        }
    }

    /// Reads the images in `mode`.
    pub fn with_mode(self, mode: ReadMode) -> Annotated {
        Annotated { mode, ..self }
    }

    /// The catalog of its images, in the order of their ids.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn read_record(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        if let Ok(at) = self.problems.binary_search_by_key(&id, |(id, _)| *id) {
            return Err(Cause::BadTargets {
                field: COCO_MEMBER.to_string(),
                reason: self.problems[at].1.clone(),
            });
        }
        let mut image = Vec::new();
        read_regular_file(
            &self.catalog.path(id),
            DEFAULT_MAX_BYTES,
            self.mode,
            &mut image,
        )?;
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
            &[(Modality::Image.name(), &image), (COCO_MEMBER, &coco)],
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

    fn location(&self, id: SampleId) -> String {
        self.catalog.path(id).display().to_string()
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// Whether file name `name` stays inside the folder it is relative to.
fn stays_inside(name: &str) -> bool {
    Path::new(name)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
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
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let split = stem.rsplit_once('_').map_or(&*stem, |(_, split)| split);
    let up = dir.join("..");
    let candidates = [
        dir.join(split),
        up.join(split),
        dir.join("images").join(split),
        up.join("images").join(split),
        dir.join("images"),
        dir.to_path_buf(),
    ];
    candidates
        .iter()
        .find(|c| c.join(first_name).is_file())
        .cloned()
        .ok_or_else(|| {
            let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
            Error::Config(format!(
                "{}: its first image, {first_name:?}, is in none of {}: put the images \
                 beside the annotations as COCO lays them out",
                path.display(),
                looked.join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::coco_member::{decode_coco_member, MemberAnnotation, Shape};
    use crate::storage::record::members;

    fn coco(dir: &Path, json: &str) -> PathBuf {
        std::fs::create_dir_all(dir.join("annotations")).unwrap();
        let path = dir.join("annotations/instances_val.json");
        std::fs::write(&path, json).unwrap();
        path
    }

    #[test]
    fn records_hold_the_image_and_its_boxes_and_problems_name_the_image() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("val")).unwrap();
        for name in ["a.jpg", "b.jpg", "c.jpg"] {
            std::fs::write(dir.path().join("val").join(name), name.as_bytes()).unwrap();
        }
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
