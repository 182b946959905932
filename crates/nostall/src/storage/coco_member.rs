//! The `coco` member: one image's annotations as a COCO dataset's records carry them
//! ([`super::Annotated`]) and a boxes field reads them.
//!
//! The member is binary, made from the dataset's parsed index, so that no JSON is read
//! per sample. It is also bytes nobody checked (a WebDataset shard may hold a member of
//! that name), so [`decode_coco_member`] checks every length against the member and
//! every count against a bound before it allocates.
//!
//! Layout, little-endian: [`COCO_MAGIC`]; the image's width, height and annotation count
//! (`u32` each); then each annotation: its box (x, y, width, height: `f32`), category id
//! (`u64`), flags (`u32`: bit 0 a crowd, bits 1–2 its mask's form: none, polygons, RLE,
//! bit 3 keypoints), the mask's bytes (`u32`) and the mask: polygons as their count
//! (`u32`) then each polygon's coordinate count (`u32`) and coordinates (`f64`, exactly
//! the file's); an RLE as its height, width and count of runs (`u32` each), then the runs
//! (`u32`). With keypoints, then their count (`u32`) and each point's x, y and
//! visibility (`f32`).

use nostall_coco::{Rle, Segmentation};

/// The first bytes of a `coco` member.
pub(crate) const COCO_MAGIC: &[u8; 8] = b"NSCOCO03";

/// Bytes before the annotations: the magic, width, height and count.
const HEADER: usize = 8 + 12;

/// Bytes of an annotation before its mask.
const FIXED: usize = 16 + 8 + 4 + 4;

/// The most coordinates one annotation's polygons may have together, and runs its RLE:
/// `nostall-coco`'s default limits (100 000 points, 1 048 576 runs), which the index the
/// members are made from already holds to.
const MAX_COORDS: usize = 200_000;
const MAX_RUNS: usize = 1 << 20;

/// The most keypoints one annotation may have: `nostall-coco`'s default limit.
pub(crate) const MAX_KEYPOINTS: usize = 1_000;

/// A flag's bit: the annotation has keypoints.
const KEYPOINTS: u32 = 1 << 3;

/// Whether a polygon of `coords` coordinates, bringing its annotation's polygons to
/// `total` together, is one a mask can be made of within the bound; why not, in words.
pub(crate) fn check_polygon(coords: usize, total: usize) -> Result<(), String> {
    if total > MAX_COORDS {
        return Err(format!(
            "polygons of more than {MAX_COORDS} coordinates together"
        ));
    }
    if coords < 6 || coords % 2 == 1 {
        return Err(format!(
            "a polygon of {coords} coordinates: give 3 points or more, x and y each"
        ));
    }
    Ok(())
}

/// An annotation's mask, as its member gives it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    /// None given (or not asked for: [`decode_coco_member`]'s `shapes`).
    None,
    /// Polygons, each `x1, y1, x2, y2, ...` in source pixels.
    Polygons(Vec<Vec<f64>>),
    /// A run-length encoding at the image's size.
    Rle(Rle),
}

/// One annotation of a `coco` member.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemberAnnotation {
    /// x, y (top left), width, height, in source pixels.
    pub(crate) bbox: [f32; 4],
    /// Its `category_id` in the file.
    pub(crate) category: u64,
    /// Whether it marks a crowd.
    pub(crate) crowd: bool,
    pub(crate) shape: Shape,
    /// Its keypoints, (x, y, visibility) triples as the file gives them (none: empty).
    pub(crate) keypoints: Vec<f32>,
}

/// One annotation as [`encode_coco_member`] writes it.
pub(crate) struct EncodedAnnotation<'a> {
    pub(crate) bbox: [f32; 4],
    pub(crate) category: u64,
    pub(crate) crowd: bool,
    pub(crate) segmentation: Segmentation<'a>,
    /// (x, y, visibility) triples.
    pub(crate) keypoints: &'a [f32],
}

/// Appends the `coco` member of an image of `width` × `height` with `annotations` to
/// `out`.
pub(crate) fn encode_coco_member<'a>(
    (width, height): (u32, u32),
    annotations: impl ExactSizeIterator<Item = EncodedAnnotation<'a>>,
    out: &mut Vec<u8>,
) {
    let word = |out: &mut Vec<u8>, v: usize| out.extend_from_slice(&(v as u32).to_le_bytes());
    out.extend_from_slice(COCO_MAGIC);
    word(out, width as usize);
    word(out, height as usize);
    word(out, annotations.len());
    for EncodedAnnotation {
        bbox,
        category,
        crowd,
        segmentation,
        keypoints,
    } in annotations
    {
        for v in bbox {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&category.to_le_bytes());
        let form = match segmentation {
            Segmentation::None => 0,
            Segmentation::Polygons(_) => 1,
            Segmentation::Rle(_) => 2,
        };
        let points = if keypoints.is_empty() { 0 } else { KEYPOINTS };
        word(out, usize::from(crowd) | form << 1 | points as usize);
        let length_at = out.len();
        word(out, 0);
        match segmentation {
            Segmentation::None => {}
            Segmentation::Polygons(polygons) => {
                word(out, polygons.len());
                for polygon in polygons.iter() {
                    word(out, polygon.len());
                    for v in polygon.coords() {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
            Segmentation::Rle(rle) => {
                word(out, rle.height() as usize);
                word(out, rle.width() as usize);
                word(out, rle.counts().len());
                for &run in rle.counts() {
                    word(out, run as usize);
                }
            }
        }
        let length = (out.len() - length_at - 4) as u32;
        out[length_at..length_at + 4].copy_from_slice(&length.to_le_bytes());
        if !keypoints.is_empty() {
            word(out, keypoints.len() / 3);
            for v in keypoints {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// The image size (width, height) and annotations of a `coco` member, at most `max` of
/// them; their masks read only where `shapes` asks (else each is [`Shape::None`], its
/// bytes skipped).
///
/// # Errors
///
/// What is wrong with the member, in words: a length that is not its content's, a count
/// over its bound (annotations, keypoints), a polygon of fewer than 3 points or an odd number of coordinates, an
/// RLE whose size is not the image's or whose runs do not cover it.
pub(crate) fn decode_coco_member(
    member: &[u8],
    max: usize,
    shapes: bool,
) -> Result<((u32, u32), Vec<MemberAnnotation>), String> {
    if member.len() < HEADER || !member.starts_with(COCO_MAGIC) {
        return Err("the coco member is truncated".into());
    }
    let mut at = Cursor {
        bytes: member,
        at: COCO_MAGIC.len(),
    };
    let (width, height, count) = (at.word()?, at.word()?, at.word()? as usize);
    if count > max {
        return Err(format!("{count} annotations, more than max_boxes={max}"));
    }
    let mut annotations = Vec::with_capacity(count);
    for i in 0..count {
        let fixed = at.take(FIXED)?;
        let f = |k: usize| f32::from_le_bytes(fixed[4 * k..4 * k + 4].try_into().expect("4"));
        let category = u64::from_le_bytes(fixed[16..24].try_into().expect("8 bytes"));
        let flags = u32::from_le_bytes(fixed[24..28].try_into().expect("4 bytes"));
        let length = u32::from_le_bytes(fixed[28..32].try_into().expect("4 bytes")) as usize;
        let mask = at.take(length)?;
        let shape = match ((flags >> 1) & 3, shapes) {
            (0, _) if length == 0 => Shape::None,
            (1 | 2, false) => Shape::None,
            (1, true) => polygons(mask).map_err(|why| format!("annotation {i}: {why}"))?,
            (2, true) => {
                rle(mask, (width, height)).map_err(|why| format!("annotation {i}: {why}"))?
            }
            _ => return Err(format!("annotation {i}: an unknown mask form")),
        };
        if flags >> 4 != 0 {
            return Err(format!("annotation {i}: unknown flags"));
        }
        let keypoints = match flags & KEYPOINTS {
            0 => Vec::new(),
            _ => {
                let n = at.word()? as usize;
                if n == 0 || n > MAX_KEYPOINTS {
                    return Err(format!(
                        "annotation {i}: {n} keypoints, not 1 to {MAX_KEYPOINTS}"
                    ));
                }
                let points: Vec<f32> = at
                    .take(12 * n)?
                    .chunks_exact(4)
                    .map(|v| f32::from_le_bytes(v.try_into().expect("4 bytes")))
                    .collect();
                if !points.iter().all(|v| v.is_finite()) {
                    return Err(format!("annotation {i}: a keypoint that is not finite"));
                }
                points
            }
        };
        annotations.push(MemberAnnotation {
            bbox: [f(0), f(1), f(2), f(3)],
            category,
            crowd: flags & 1 != 0,
            shape,
            keypoints,
        });
    }
    if at.at != member.len() {
        return Err("the coco member's length is not its annotations'".into());
    }
    Ok(((width, height), annotations))
}

/// Reads a member front to back, every read checked against its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or("the coco member's length is not its annotations'")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn word(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

fn polygons(mask: &[u8]) -> Result<Shape, String> {
    let mut at = Cursor { bytes: mask, at: 0 };
    let count = at.word()? as usize;
    let mut polygons = Vec::new();
    let mut total = 0usize;
    for _ in 0..count {
        let n = at.word()? as usize;
        total = total.saturating_add(n);
        check_polygon(n, total)?;
        let coords = at.take(8 * n)?;
        polygons.push(
            coords
                .chunks_exact(8)
                .map(|v| f64::from_le_bytes(v.try_into().expect("8 bytes")))
                .collect(),
        );
    }
    if at.at != mask.len() {
        return Err("its polygons' length is not their coordinates'".into());
    }
    Ok(Shape::Polygons(polygons))
}

fn rle(mask: &[u8], (width, height): (u32, u32)) -> Result<Shape, String> {
    let mut at = Cursor { bytes: mask, at: 0 };
    let (h, w, n) = (at.word()?, at.word()?, at.word()? as usize);
    if (w, h) != (width, height) {
        return Err(format!(
            "an RLE of {w}x{h} for an image of {width}x{height}"
        ));
    }
    if n > MAX_RUNS {
        return Err(format!("an RLE of {n} runs, more than {MAX_RUNS}"));
    }
    let runs = at.take(4 * n)?;
    if at.at != mask.len() {
        return Err("its RLE's length is not its runs'".into());
    }
    let runs = runs
        .chunks_exact(4)
        .map(|v| u32::from_le_bytes(v.try_into().expect("4 bytes")))
        .collect();
    Rle::new(h, w, runs)
        .map(Shape::Rle)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostall_coco::{Annotations, Limits};

    const FILE: &str = r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 3}],
        "categories": [{"id": 7, "name": "cat", "keypoints": ["nose", "tail"]}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "bbox": [0, 0, 2, 2],
             "keypoints": [1, 1.5, 2, 0, 0, 0],
             "segmentation": [[0, 0, 2, 0, 2, 2], [1.25, 1, 3, 1, 3, 2.5]]},
            {"id": 2, "image_id": 1, "category_id": 7, "bbox": [1, 1, 2, 2], "iscrowd": 1,
             "segmentation": {"size": [3, 4], "counts": [4, 2, 6]}},
            {"id": 3, "image_id": 1, "category_id": 7, "bbox": [0, 1, 1, 1]}]}"#;

    fn encoded() -> Vec<u8> {
        let (index, problems) = Annotations::parse(FILE.as_bytes(), &Limits::default()).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let image = index.image(0).unwrap();
        let mut out = Vec::new();
        encode_coco_member(
            (4, 3),
            image.annotations().map(|a| EncodedAnnotation {
                bbox: a.bbox,
                category: a.category_id,
                crowd: a.iscrowd,
                segmentation: a.segmentation,
                keypoints: a.keypoints,
            }),
            &mut out,
        );
        out
    }

    #[test]
    fn masks_come_back_as_the_file_gives_them_or_are_skipped() {
        let member = encoded();
        let (size, annotations) = decode_coco_member(&member, 3, true).unwrap();
        assert_eq!(size, (4, 3));
        assert_eq!(annotations[0].bbox, [0.0, 0.0, 2.0, 2.0]);
        assert_eq!(
            annotations[0].shape,
            Shape::Polygons(vec![
                vec![0.0, 0.0, 2.0, 0.0, 2.0, 2.0],
                vec![1.25, 1.0, 3.0, 1.0, 3.0, 2.5]
            ])
        );
        assert!(annotations[1].crowd);
        assert_eq!(
            annotations[1].shape,
            Shape::Rle(Rle::new(3, 4, vec![4, 2, 6]).unwrap())
        );
        assert_eq!(annotations[2].shape, Shape::None);
        assert_eq!(annotations[0].keypoints, [1.0, 1.5, 2.0, 0.0, 0.0, 0.0]);
        assert!(annotations[1].keypoints.is_empty());
        let (_, plain) = decode_coco_member(&member, 3, false).unwrap();
        assert!(plain.iter().all(|a| a.shape == Shape::None));
        assert_eq!(plain[1].category, 7);
        assert!(decode_coco_member(&member, 2, false)
            .unwrap_err()
            .contains("more than max_boxes=2"));
    }

    #[test]
    fn every_cut_and_every_flipped_length_is_an_error_not_a_panic() {
        let member = encoded();
        for end in 0..member.len() {
            assert!(decode_coco_member(&member[..end], 8, true).is_err());
        }
        let mut longer = member.clone();
        longer.push(0);
        assert!(decode_coco_member(&longer, 8, true).is_err());
        for at in 0..member.len() {
            for v in [0, 1, 0x7F, 0xFF] {
                let mut bent = member.clone();
                bent[at] = v;
                // Decodes or says why; never panics or allocates past the bounds.
                let _ = decode_coco_member(&bent, 8, true);
            }
        }
    }

    #[test]
    fn an_rle_of_another_size_and_a_short_polygon_are_refused() {
        let mut member = encoded();
        // The RLE's width (4) names another image (5).
        let rle = member
            .windows(12)
            .position(|w| w == [3, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0])
            .unwrap();
        member[rle + 4] = 5;
        let why = decode_coco_member(&member, 3, true).unwrap_err();
        assert!(why.contains("annotation 1") && why.contains("5x3"), "{why}");
        let mut member = encoded();
        // The first polygon's coordinate count (6) made 4.
        let first = HEADER + FIXED + 4;
        assert_eq!(member[first], 6);
        member[first] = 4;
        let why = decode_coco_member(&member, 3, true).unwrap_err();
        assert!(why.contains("annotation 0"), "{why}");
    }
}
