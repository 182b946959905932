//! [`Panoptic`]: images with their COCO panoptic segmentations as semantic label maps,
//! each sample a record of the image and its `mask` member (the PNG of segment ids and
//! the table that labels them, [`super::panoptic_member`]), which a mask field reads as
//! it reads a one-channel label map.
//!
//! A panoptic file (`annotations/panoptic_val2017.json`) lists the images and, for
//! each, its PNG of segment ids (in `annotations/panoptic_val2017/`: the folder named
//! as the file, beside it) and its segments. It is parsed once, bounded, and its index
//! kept between opens as an instances file's ([`super::coco_index::open_panoptic`]);
//! the images are found as an instances file's ([`super::images_folder`]).
//!
//! Each pixel's label is its segment's `category_id`; pixels of id 0 (unlabelled) and of
//! a segment the image's `segments_info` does not list are [`UNLABELLED`], as panopticapi's
//! `converters/panoptic2semantic_segmentation.py` leaves them. A label is a byte: a file
//! with a category id over 255 (or 0, the unlabelled value) is refused when opened.
//!
//! An image whose entry is unsound (a segment of an unknown category, no entry:
//! [`nostall_coco::PanopticProblem`]) or whose file names leave their folder fails when
//! read, naming the file and the image (`bad-targets`, of its `mask` member); so does a
//! PNG that is missing, or (when the mask field decodes it) not RGB or not the image's
//! size.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nostall_coco::PanopticIndex;

use super::annotated::inside;
use super::coco_index;
use super::files::read_regular_file;
use super::panoptic_member::encode_panoptic_member;
use super::record::write_frame;
use super::{images_folder, ReadMode, Served, Source, SourceStats, DEFAULT_MAX_BYTES, MASK_MEMBER};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// The label of unlabelled pixels (segment id 0) and of segments an image does not list:
/// panopticapi's (COCO's category ids start at 1).
pub const UNLABELLED: u8 = 0;

/// Images with the semantic label maps a COCO panoptic file gives them.
#[derive(Debug)]
pub struct Panoptic {
    catalog: Arc<Catalog>,
    mode: ReadMode,
    index: PanopticIndex,
    /// The folder of the PNGs of segment ids.
    pngs: PathBuf,
    /// Why a sample cannot be read, where that is known when the dataset is opened
    /// (sorted by sample).
    refused: Vec<(SampleId, Cause)>,
    served: Served,
}

impl Panoptic {
    /// The images of the COCO panoptic file at `path`, with their PNGs of segment ids in
    /// the folder beside it named as the file (`panoptic_val2017.json`,
    /// `panoptic_val2017/`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the file is not COCO panoptic's format (naming the place),
    /// lists no image, has a category id a label byte cannot hold, or its images or PNGs
    /// are in none of the folders looked in (naming them).
    pub fn open(path: &Path) -> Result<Panoptic> {
        let (index, problems, _) = coco_index::open_panoptic(path, None)?;
        let file = path.display().to_string();
        let Some(first) = index.image(0) else {
            return Err(Error::Config(format!(
                "{file}: the COCO panoptic file lists no image"
            )));
        };
        if let Some(c) = index.categories().iter().find(|c| c.id == 0 || c.id > 255) {
            return Err(Error::Config(format!(
                "{file}: category {} ({}) has id {}: a label map holds a byte a pixel, the \
                 category ids 1 to 255 (0 is unlabelled)",
                c.id, c.name, c.id
            )));
        }
        let root = images_folder(path, first.file_name)?;
        let pngs = path.with_extension("");
        if !pngs.is_dir() {
            return Err(Error::Config(format!(
                "{file}: its PNGs of segment ids are not in {}: put them beside the file as \
                 COCO lays them out (annotations/panoptic_val2017/)",
                pngs.display()
            )));
        }
        let mut samples = Vec::with_capacity(index.image_count());
        let mut refused = Vec::new();
        let refuse = |reason: String| Cause::BadTargets {
            field: MASK_MEMBER.to_string(),
            reason: format!("{file}: {reason}"),
        };
        for i in 0..index.image_count() {
            let image = index.image(i).expect("within the count");
            let leaves = [image.file_name, image.png]
                .into_iter()
                .find(|name| inside(name).is_none());
            if let Some(name) = leaves {
                refused.push((
                    i as SampleId,
                    refuse(format!(
                        "image {} has file name {name:?}, which leaves its folder",
                        image.id
                    )),
                ));
            }
            // A missing file is not refused here: its read fails, naming the path.
            let size = std::fs::metadata(root.join(image.file_name)).map_or(0, |m| m.len());
            samples.push((image.file_name.to_string(), None, size));
        }
        for (image, problem) in &problems {
            if let Some(i) = index.image_index(*image) {
                refused.push((i as SampleId, refuse(problem.clone())));
            }
        }
        // One reason a sample, the first found.
        refused.sort_by_key(|(id, _)| *id);
        refused.dedup_by_key(|(id, _)| *id);
        let catalog = Catalog::from_samples(root, Modality::Image, Vec::new(), samples)
            .expect("one sample at least, none labelled");
        Ok(Panoptic {
            catalog: Arc::new(catalog),
            mode: ReadMode::Cached,
            index,
            pngs,
            refused,
            served: Served::default(),
        })
    }

    /// Reads the files in `mode`.
    pub fn with_mode(self, mode: ReadMode) -> Panoptic {
        Panoptic { mode, ..self }
    }

    /// The catalog of its images, in the order of their ids.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn read_record(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        if let Ok(at) = self.refused.binary_search_by_key(&id, |(id, _)| *id) {
            return Err(self.refused[at].1.clone());
        }
        let image = self.index.image(id as usize).ok_or_else(|| {
            Cause::Internal(format!("sample {id} is past the panoptic file's images"))
        })?;
        let (mut pixels, mut png) = (Vec::new(), Vec::new());
        read_regular_file(
            &self.catalog.path(id),
            DEFAULT_MAX_BYTES,
            self.mode,
            &mut pixels,
        )?;
        let png_path = self.pngs.join(image.png);
        // The sample's location names its image: the cause names the PNG.
        read_regular_file(&png_path, DEFAULT_MAX_BYTES, self.mode, &mut png).map_err(|cause| {
            Cause::BadTargets {
                field: MASK_MEMBER.to_string(),
                reason: format!("its PNG of segment ids {}: {cause}", png_path.display()),
            }
        })?;
        // Category ids are 1 to 255, checked when opened.
        let segments: Vec<(u32, u8)> = image
            .segments
            .iter()
            .map(|s| (s.id, s.category_id as u8))
            .collect();
        let mut member = Vec::new();
        encode_panoptic_member(
            (image.width, image.height),
            &png_path.display().to_string(),
            &segments,
            &png,
            &mut member,
        );
        write_frame(
            &[(Modality::Image.name(), &pixels), (MASK_MEMBER, &member)],
            out,
        );
        Ok(())
    }
}

impl Source for Panoptic {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::panoptic_member::decode_panoptic_member;
    use crate::storage::record::members;

    fn touch(path: &Path, data: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }

    fn file(dir: &Path, categories: &str) -> PathBuf {
        let path = dir.join("annotations/panoptic_val.json");
        touch(
            &path,
            format!(
                r#"{{"images": [{{"id": 1, "file_name": "a.jpg", "width": 4, "height": 3}},
                               {{"id": 2, "file_name": "b.jpg", "width": 4, "height": 3}},
                               {{"id": 3, "file_name": "c.jpg", "width": 4, "height": 3}},
                               {{"id": 4, "file_name": "d.jpg", "width": 4, "height": 3}}],
                    "categories": {categories},
                    "annotations": [
                        {{"image_id": 1, "file_name": "a.png", "segments_info": [
                            {{"id": 5, "category_id": 7}}, {{"id": 70000, "category_id": 200}}]}},
                        {{"image_id": 2, "file_name": "b.png",
                          "segments_info": [{{"id": 5, "category_id": 8}}]}},
                        {{"image_id": 3, "file_name": "../c.png", "segments_info": []}}]}}"#
            )
            .as_bytes(),
        );
        path
    }

    #[test]
    fn records_hold_the_image_and_its_segments_and_problems_name_the_image() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c", "d"] {
            touch(&dir.path().join(format!("val/{name}.jpg")), name.as_bytes());
        }
        touch(&dir.path().join("annotations/panoptic_val/a.png"), b"ids a");
        let path = file(
            dir.path(),
            r#"[{"id": 7, "name": "cat", "isthing": 1}, {"id": 200, "name": "wall"}]"#,
        );
        let source = Panoptic::open(&path).unwrap();
        assert_eq!(source.catalog().len(), 4);
        let mut out = Vec::new();
        source.read(0, &mut out).unwrap();
        let parts = members(&out).unwrap();
        assert_eq!((&*parts[0].ext, &*parts[1].ext), ("image", MASK_MEMBER));
        assert_eq!(&out[parts[0].data.clone()], b"a");
        let member = decode_panoptic_member(&out[parts[1].data.clone()])
            .unwrap()
            .unwrap();
        assert_eq!(member.size, (4, 3));
        assert_eq!(member.segments, [(5, 7), (70000, 200)]);
        assert_eq!(member.png, b"ids a");
        assert!(member.png_path.ends_with("annotations/panoptic_val/a.png"));
        // An unknown category, a PNG out of its folder, no entry: named; a missing PNG too.
        let why = |id| {
            let mut out = Vec::new();
            source.read(id, &mut out).unwrap_err().to_string()
        };
        assert!(
            why(1).contains("panoptic_val.json") && why(1).contains("category 8"),
            "{}",
            why(1)
        );
        assert!(why(2).contains("\"../c.png\""), "{}", why(2));
        assert!(why(3).contains("image 4"), "{}", why(3));
        std::fs::remove_file(dir.path().join("annotations/panoptic_val/a.png")).unwrap();
        assert!(why(0).contains("panoptic_val/a.png"), "{}", why(0));
    }

    #[test]
    fn categories_a_byte_cannot_hold_and_missing_folders_are_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("val/a.jpg"), b"a");
        let path = file(dir.path(), r#"[{"id": 7, "name": "cat"}]"#);
        let why = Panoptic::open(&path).unwrap_err().to_string();
        assert!(
            why.contains("annotations/panoptic_val") && why.contains("PNGs"),
            "{why}"
        );
        std::fs::create_dir_all(dir.path().join("annotations/panoptic_val")).unwrap();
        assert!(Panoptic::open(&path).is_ok());
        let path = file(
            dir.path(),
            r#"[{"id": 7, "name": "cat"}, {"id": 256, "name": "x"}]"#,
        );
        let why = Panoptic::open(&path).unwrap_err().to_string();
        assert!(
            why.contains("category 256") && why.contains("1 to 255"),
            "{why}"
        );
    }
}
