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
//! The file, its PNGs and its images may be blobs of a store instead (an S3 bucket,
//! [`Panoptic::open_blob`]), found as a local file's: the images' prefix and the PNGs'
//! are each listed once, and each pair is read as it was listed ([`super::Paired`]).
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

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use nostall_coco::PanopticIndex;

use super::annotated::{images_prefix, inside};
use super::coco_index::{self, Problem};
use super::paired::{join, Blob, Paired, Pairing};
use super::panoptic_member::encode_panoptic_member;
use super::record::write_frame;
use super::{images_folder, BlobInfo, BlobStore, MASK_MEMBER};
use crate::catalog::SampleId;
use crate::error::{Cause, Error, Result};
use crate::sample::Modality;

/// The label of unlabelled pixels (segment id 0) and of segments an image does not list:
/// panopticapi's (COCO's category ids start at 1).
pub const UNLABELLED: u8 = 0;

/// Images with the semantic label maps a COCO panoptic file gives them.
pub type Panoptic = Paired<PanopticMaps>;

/// A [`Panoptic`] sample's record: its image, and its PNG of segment ids with the table
/// of its segments' labels as the `mask` member.
#[derive(Debug)]
pub struct PanopticMaps {
    index: PanopticIndex,
}

impl Pairing for PanopticMaps {
    fn member(&self) -> &str {
        MASK_MEMBER
    }

    fn noun(&self) -> &'static str {
        "PNG of segment ids"
    }

    fn frame(
        &self,
        id: SampleId,
        pixels: &[u8],
        (png, location): (&[u8], &str),
        out: &mut Vec<u8>,
    ) -> Result<(), Cause> {
        let image = self.index.image(id as usize).ok_or_else(|| {
            Cause::Internal(format!("sample {id} is past the panoptic file's images"))
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
            location,
            &segments,
            png,
            &mut member,
        );
        write_frame(
            &[(Modality::Image.name(), pixels), (MASK_MEMBER, &member)],
            out,
        );
        Ok(())
    }
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
        let root = images_folder(path, first_image(&index, &file)?)?;
        let pngs = path.with_extension("");
        if !pngs.is_dir() {
            return Err(no_pngs(&file, &pngs.display().to_string()));
        }
        let refused = refusals(&index, &problems, &file);
        let pairs = (0..index.image_count())
            .map(|i| {
                let image = index.image(i).expect("within the count");
                (image.file_name.to_string(), pngs.join(image.png))
            })
            .collect();
        Ok(Paired::in_folder(
            root,
            pairs,
            refused,
            PanopticMaps { index },
        ))
    }

    /// The images of the COCO panoptic file `file`, a blob of `store` (a bucket: its keys
    /// are whole object names), with their PNGs of segment ids under the prefix named as
    /// the file beside it, and the images where COCO lays them out (as
    /// [`super::Annotated::open_blob`] finds them); `open` opens the store of a prefix of
    /// it, to list the images and the PNGs once.
    ///
    /// # Errors
    ///
    /// As [`Panoptic::open`], naming the blobs; what `open`, a listing or the read of the
    /// file fail with.
    pub fn open_blob(
        store: Arc<dyn BlobStore>,
        file: &BlobInfo,
        open: &dyn Fn(&str) -> Result<Arc<dyn BlobStore>>,
    ) -> Result<Panoptic> {
        let (index, problems, _) = coco_index::open_panoptic_blob(&*store, file, None)?;
        let location = store.locate(&file.key);
        let first = first_image(&index, &location)?;
        let images = images_prefix(&*store, &file.key, first)?;
        // The folder named as the file, beside it, as a local file's.
        let (dir, name) = file.key.rsplit_once('/').unwrap_or(("", file.key.as_str()));
        let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
        let pngs = &join(dir, stem);
        let listed = |prefix: &str| -> Result<HashMap<String, Blob>> {
            Ok((open)(prefix)?
                .list()?
                .into_iter()
                .map(|b| {
                    let key = join(prefix, &b.key);
                    (
                        b.key,
                        Blob {
                            key,
                            size: b.size,
                            version: b.version,
                        },
                    )
                })
                .collect())
        };
        let (image_blobs, png_blobs) = (listed(&images)?, listed(pngs)?);
        if png_blobs.is_empty() {
            return Err(no_pngs(&location, &store.locate(pngs)));
        }
        let refused = refusals(&index, &problems, &location);
        let pairs = (0..index.image_count())
            .map(|i| {
                let image = index.image(i).expect("within the count");
                let name = inside(image.file_name).unwrap_or_else(|| image.file_name.to_string());
                let png = inside(image.png).unwrap_or_else(|| image.png.to_string());
                let pair = match (image_blobs.get(&name), png_blobs.get(&png)) {
                    (None, _) => Err(Cause::Io(format!(
                        "{}: no such object: {location} names it, and {} holds none by \
                         that name (upload it, or take the image out of the panoptic file)",
                        store.locate(&join(&images, &name)),
                        store.locate(&images)
                    ))),
                    (_, None) => Err(Cause::BadTargets {
                        field: MASK_MEMBER.to_string(),
                        reason: format!(
                            "its PNG of segment ids {}: no such object (upload it)",
                            store.locate(&join(pngs, &png))
                        ),
                    }),
                    (Some(image), Some(png)) => Ok([image.clone(), png.clone()]),
                };
                (name, pair)
            })
            .collect();
        Ok(Paired::in_store(
            store.clone(),
            &images,
            pairs,
            refused,
            PanopticMaps { index },
        ))
    }
}

/// The file name of the first image of the panoptic file `file` indexes, once its
/// categories are known to fit a label byte.
///
/// # Errors
///
/// [`Error::Config`] naming `file` when it lists no image, or a category id over 255.
fn first_image<'a>(index: &'a PanopticIndex, file: &str) -> Result<&'a str> {
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
    Ok(first.file_name)
}

/// The panoptic file `file`'s PNGs are not where COCO lays them out, `pngs`.
fn no_pngs(file: &str, pngs: &str) -> Error {
    Error::Config(format!(
        "{file}: its PNGs of segment ids are not in {pngs}: put them beside the file as \
         COCO lays them out (annotations/panoptic_val2017/)"
    ))
}

/// Why the images of `index` cannot be read, known when it is opened: a file name that
/// leaves its folder, an entry `problems` names. `file`: the panoptic file's location.
fn refusals(index: &PanopticIndex, problems: &[Problem], file: &str) -> Vec<(SampleId, Cause)> {
    let refuse = |reason: String| Cause::BadTargets {
        field: MASK_MEMBER.to_string(),
        reason: format!("{file}: {reason}"),
    };
    let mut refused = Vec::new();
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
    }
    for (image, problem) in problems {
        if let Some(i) = index.image_index(*image) {
            refused.push((i as SampleId, refuse(problem.clone())));
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::storage::paired::tests::bucket;
    use crate::storage::panoptic_member::decode_panoptic_member;
    use crate::storage::record::members;
    use crate::storage::{LocalDir, Source};

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

    #[test]
    fn a_panoptic_file_in_a_store_reads_as_the_local_file_and_names_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c", "d"] {
            touch(&dir.path().join(format!("val/{name}.jpg")), name.as_bytes());
        }
        touch(&dir.path().join("annotations/panoptic_val/a.png"), b"ids a");
        let categories = r#"[{"id": 7, "name": "cat"}, {"id": 8, "name": "dog"},
                             {"id": 200, "name": "wall"}]"#;
        let path = file(dir.path(), categories);
        let local = Panoptic::open(&path).unwrap();
        let (store, open) = bucket(dir.path());
        let json = LocalDir::new(dir.path())
            .unwrap()
            .info("annotations/panoptic_val.json")
            .unwrap();
        let blobs = Panoptic::open_blob(store.clone(), &json, &open).unwrap();
        assert_eq!(blobs.catalog().len(), 4);
        assert_eq!(blobs.location(0), store.locate("val/a.jpg"));
        let mut order = [0, 1, 2, 3].into_iter();
        let mut ended = Vec::new();
        blobs.read_each(
            &mut || order.next().map(|id| (id, Vec::new())),
            &mut |number, out, read| ended.push((number, out, read)),
        );
        ended.sort_by_key(|(number, ..)| *number);
        let (mut expected, mut got) = (Vec::new(), Vec::new());
        local.read(0, &mut expected).unwrap();
        let one = blobs.read(0, &mut got);
        for (out, read) in [(&ended[0].1, ended[0].2.clone()), (&got, one)] {
            read.unwrap();
            // The same image and member, but for the PNG's location.
            let (theirs, ours) = (members(&expected).unwrap(), members(out).unwrap());
            assert_eq!(out[ours[0].data.clone()], expected[theirs[0].data.clone()]);
            let ours = decode_panoptic_member(&out[ours[1].data.clone()])
                .unwrap()
                .unwrap();
            let theirs = decode_panoptic_member(&expected[theirs[1].data.clone()]);
            let theirs = theirs.unwrap().unwrap();
            assert_eq!(
                (ours.size, &ours.segments, ours.png),
                (theirs.size, &theirs.segments, theirs.png)
            );
            assert_eq!(
                ours.png_path,
                store.locate("annotations/panoptic_val/a.png")
            );
        }
        // b's PNG is missing, c's name leaves its folder, d has no entry: named.
        let why = |k: usize| ended[k].2.clone().unwrap_err().to_string();
        assert!(
            why(1).contains(&store.locate("annotations/panoptic_val/b.png")),
            "{}",
            why(1)
        );
        assert!(why(2).contains("\"../c.png\""), "{}", why(2));
        assert!(why(3).contains("image 4"), "{}", why(3));
        assert!(ended[1..].iter().all(|(_, out, _)| out.is_empty()));
        // PNGs not beside the file: refused, naming where they were looked for.
        std::fs::remove_file(dir.path().join("annotations/panoptic_val/a.png")).unwrap();
        let why = Panoptic::open_blob(store.clone(), &json, &open)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains(&store.locate("annotations/panoptic_val")) && why.contains("PNGs"),
            "{why}"
        );
    }
}
