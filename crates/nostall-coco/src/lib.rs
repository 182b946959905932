//! COCO annotation files read once into a compact, bounded index, and instance masks
//! exactly as pycocotools makes them.
//!
//! A detection or segmentation loader needs, for each image it samples, the boxes,
//! labels, masks and keypoints of that image. COCO keeps them in one JSON file for the
//! whole dataset (`instances_train2017.json` is about 450 MB: 118 000 images, 860 000
//! annotations), which Python loaders parse into a tree of dicts in every worker. This
//! crate reads such a file once:
//!
//! 1. [`Annotations::parse`] streams the JSON through serde visitors straight into flat
//!    vectors: no tree of values is built, and `images`, `annotations` and `categories`
//!    may come in any order. Boxes are `f32`, labels the class indices of the categories
//!    sorted by id (the original ids are kept), and an image's annotations are
//!    contiguous, images ordered by id. Polygon coordinates are kept exactly, since
//!    pycocotools rasterises the `f64` the JSON says and one ulp can move a boundary:
//!    as hundredths of a pixel in an `i32` where that gives back the very same `f64`
//!    (COCO writes two decimals), as the `f64` itself otherwise. RLE counts are kept
//!    decoded (`u32`), keypoints as `f32` triples.
//! 2. [`Annotations::to_bytes`] writes the index as versioned little-endian vectors,
//!    which [`Annotations::from_bytes`] reads back with every length and offset checked
//!    (a 100 000-annotation index reopens in milliseconds), so the JSON is parsed once
//!    per dataset, not once per worker and epoch.
//! 3. Masks are made on demand, as pycocotools' `annToMask` makes them:
//!    [`polygons_to_mask`] is a port of `rleFrPoly` (coordinates upsampled by 5, edges
//!    walked, boundary points downsampled), bit-identical to it, checked against masks
//!    pycocotools made (`tests/reference`); [`Rle`] decodes and encodes COCO's
//!    run-length encoding (both the uncompressed counts list and the compressed string of
//!    `rleToString`) and gives the area as pycocotools does. The rasteriser takes any
//!    size and coordinates anywhere, so a transformed polygon is rasterised at its
//!    output size; its cost follows the columns the edges cross, not their length.
//!
//! Files are untrusted. Everything that sizes an allocation is bounded by [`Limits`],
//! checked while parsing, before the data is stored: the file's bytes, image sides,
//! annotations per image, polygon points, RLE counts and keypoints per annotation.
//! Neither parsing nor [`Annotations::from_bytes`] panics on any input; a mask is as
//! large as its image (`height * width` bytes), which the limits bound.
//!
//! What is wrong with a file is handled in one of two ways:
//!
//! - **The whole file is refused** ([`CocoError`]) when it is not a COCO file whose
//!   meaning can be trusted: not JSON (including Python's `NaN` and `Infinity`, and
//!   numbers out of range such as `1e400`), not an object, no `images`, a field of the
//!   wrong JSON type anywhere (a string where a number belongs, a negative or fractional
//!   id), an annotation without `id`, `image_id` or `category_id`, a key twice in one
//!   object, two images or two categories with one id, an image smaller than 1x1, or
//!   anything over the [`Limits`]. The message names the place (line and column, the
//!   annotation's position in `annotations` and its id when read) and what to change.
//! - **One annotation is left out** and reported as a [`Problem`] (its image id, its id
//!   and a [`ProblemKind`]) when the file is sound but the annotation is not: an
//!   `image_id` or `category_id` naming nothing, an id an earlier annotation has, a
//!   missing box or one that is not four numbers, a box with a negative size or a value
//!   too large for `f32`, a box sharing no point with its image, a flat list of numbers
//!   where polygons belong, a polygon with an odd number of coordinates or fewer than 3
//!   points, an RLE without `size` or `counts`, with a malformed compressed string or a
//!   count over `u32`, an RLE whose size is not its image's or whose counts cover more
//!   or fewer pixels than its size, and keypoints that are not whole triples, not as
//!   many as its category names, or too large for `f32`. The index holds only sound
//!   annotations, so everything it hands out is usable as is; the caller counts the
//!   problems, logs them or refuses the file. One problem is reported per annotation
//!   (the first found).
//!
//! Missing optional fields take their usual meaning: no `iscrowd` is 0 (any non-zero
//! integer or `true` is 1), no `segmentation` (or `null`, or `[]`) is no mask, no
//! `keypoints` is none, no `area` is the box's width times height (as pycocotools'
//! `loadRes` sets it). `num_keypoints` and unknown fields are ignored.
//!
//! COCO panoptic files (`panoptic_train2017.json`: each image's PNG of segment ids and
//! its `segments_info`) are read the same way into a [`PanopticIndex`], bounded by the
//! same limits (an image's segments by `max_annotations_per_image`).

mod index;
mod mask;
mod panoptic;
mod parse;
mod serial;

pub use index::{
    Annotation, Annotations, Category, Image, Polygon, Polygons, RleRef, Segmentation,
};
pub use mask::{polygons_to_mask, Rle};
pub use panoptic::{
    PanopticCategory, PanopticImage, PanopticIndex, PanopticProblem, PanopticProblemKind, Segment,
    MAX_SEGMENT_ID,
};

use std::fmt;

/// Bounds on what a COCO file may make this crate allocate, checked while parsing,
/// before the data they bound is stored. A file over one is refused with
/// [`CocoError::TooLarge`], naming the limit and where it was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest file, in bytes.
    pub max_file_bytes: u64,
    /// Largest image width or height, in pixels. Whatever it is, an image's width times
    /// height must fit in a `u32`, as COCO's run lengths do.
    pub max_image_side: u32,
    /// Most annotations one image may have (in a panoptic file, most segments).
    pub max_annotations_per_image: u32,
    /// Most polygon points of one annotation, all its polygons together.
    pub max_polygon_points: u32,
    /// Most run lengths in one annotation's RLE.
    pub max_rle_counts: u32,
    /// Most keypoints of one annotation, and keypoint names of one category.
    pub max_keypoints: u32,
}

impl Default for Limits {
    /// 4 GiB files (COCO's `instances_train2017.json` is about 450 MB), sides of 65 535
    /// pixels, 10 000 annotations an image, 100 000 polygon points and 1 048 576 RLE
    /// counts an annotation, 1 000 keypoints (COCO's people have 17): far above what
    /// COCO-style datasets hold, far below what would exhaust a loader's memory.
    fn default() -> Limits {
        Limits {
            max_file_bytes: 4 << 30,
            max_image_side: 65_535,
            max_annotations_per_image: 10_000,
            max_polygon_points: 100_000,
            max_rle_counts: 1 << 20,
            max_keypoints: 1_000,
        }
    }
}

/// Why a COCO file or an index could not be read, or a mask not made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CocoError {
    /// The file could not be read (the path and the system's reason).
    Io(String),
    /// Not JSON, or JSON that is not a COCO annotation file: says what and where.
    Format(String),
    /// Over one of the [`Limits`]: which, by how much, and where.
    TooLarge(String),
    /// Bytes that are not an index [`Annotations::to_bytes`] wrote (damaged, cut, or
    /// another version).
    Corrupt(String),
    /// Counts or a mask that do not fit the size given to [`Rle`].
    Mask(String),
}

impl fmt::Display for CocoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CocoError::Io(m) => write!(f, "cannot read COCO annotations: {m}"),
            CocoError::Format(m) => write!(f, "not a COCO annotation file: {m}"),
            CocoError::TooLarge(m) => write!(f, "COCO annotations too large: {m}"),
            CocoError::Corrupt(m) => write!(f, "corrupt COCO index: {m}"),
            CocoError::Mask(m) => write!(f, "bad COCO mask: {m}"),
        }
    }
}

impl std::error::Error for CocoError {}

/// An annotation left out of the index, and why.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Problem {
    /// The `image_id` the annotation gives.
    pub image_id: u64,
    /// The annotation's `id`.
    pub annotation_id: u64,
    /// What is wrong with it.
    pub kind: ProblemKind,
}

/// What is wrong with an annotation that was left out.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// Its `image_id` names no image of `images`.
    UnknownImage,
    /// Its `category_id` (given) names no category of `categories`.
    UnknownCategory(u64),
    /// An earlier annotation of the file has the same `id`.
    DuplicateId,
    /// Its `bbox` is missing (0) or is not 4 numbers (how many it has).
    BoxShape(usize),
    /// Its box (x, y, width, height) has a negative width or height, or a value too
    /// large for `f32`.
    BadBox([f64; 4]),
    /// Its box (x, y, width, height) shares no point with its image.
    BoxOutside([f64; 4]),
    /// Its `segmentation` is a flat list of numbers, not a list of polygons.
    FlatPolygon,
    /// Polygon `polygon` (counted from 0) has an odd number of coordinates.
    OddPolygon {
        /// Which polygon of the annotation.
        polygon: usize,
        /// How many coordinates it has.
        numbers: usize,
    },
    /// Polygon `polygon` (counted from 0) has fewer than 3 points.
    ShortPolygon {
        /// Which polygon of the annotation.
        polygon: usize,
        /// How many points it has.
        points: usize,
    },
    /// Its RLE has no `size` or no `counts`, a malformed compressed `counts` string, or
    /// a count over `u32` (which).
    BadRle(String),
    /// Its RLE's `size` (height, width) differs from its image's (height, width).
    RleSize {
        /// The RLE's `size`.
        rle: [u64; 2],
        /// The image's height and width.
        image: [u32; 2],
    },
    /// Its RLE's counts cover `covered` pixels, its size has `pixels`.
    RleCoverage {
        /// The sum of the counts.
        covered: u64,
        /// Height times width.
        pixels: u64,
    },
    /// Its keypoints are not whole (x, y, v) triples (how many numbers).
    KeypointsNotTriples(usize),
    /// It has `got` keypoints, its category names `expected`.
    KeypointsCount {
        /// Keypoints of the annotation.
        got: usize,
        /// Keypoint names of its category.
        expected: usize,
    },
    /// A keypoint value is too large for `f32`.
    KeypointsNotFinite,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "annotation {} of image {}: ",
            self.annotation_id, self.image_id
        )?;
        match &self.kind {
            ProblemKind::UnknownImage => write!(f, "no image has id {}", self.image_id),
            ProblemKind::UnknownCategory(c) => {
                write!(f, "category {c} is not one of `categories`")
            }
            ProblemKind::DuplicateId => {
                write!(
                    f,
                    "an earlier annotation has the same id; ids must be unique"
                )
            }
            ProblemKind::BoxShape(0) => write!(f, "no `bbox`"),
            ProblemKind::BoxShape(n) => write!(f, "`bbox` has {n} numbers, not 4 (x, y, w, h)"),
            ProblemKind::BadBox(b) => write!(
                f,
                "box {b:?} has a negative size or a value too large for f32"
            ),
            ProblemKind::BoxOutside(b) => {
                write!(f, "box {b:?} lies wholly outside its image")
            }
            ProblemKind::FlatPolygon => write!(
                f,
                "`segmentation` is a flat list of numbers; COCO's is a list of polygons \
                 (wrap it in another list)"
            ),
            ProblemKind::OddPolygon { polygon, numbers } => write!(
                f,
                "polygon {polygon} has {numbers} coordinates, an odd number (x, y pairs)"
            ),
            ProblemKind::ShortPolygon { polygon, points } => write!(
                f,
                "polygon {polygon} has {points} points; a polygon needs at least 3"
            ),
            ProblemKind::BadRle(why) => write!(f, "bad RLE: {why}"),
            ProblemKind::RleSize { rle, image } => write!(
                f,
                "the RLE's size is {}x{} (height x width), its image is {}x{}",
                rle[0], rle[1], image[0], image[1]
            ),
            ProblemKind::RleCoverage { covered, pixels } => write!(
                f,
                "the RLE's counts cover {covered} pixels, its size has {pixels}"
            ),
            ProblemKind::KeypointsNotTriples(n) => write!(
                f,
                "{n} keypoint numbers, not a whole number of (x, y, v) triples"
            ),
            ProblemKind::KeypointsCount { got, expected } => {
                write!(f, "{got} keypoints, its category names {expected}")
            }
            ProblemKind::KeypointsNotFinite => {
                write!(f, "a keypoint value is too large for f32")
            }
        }
    }
}
