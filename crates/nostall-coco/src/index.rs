//! The index: images, categories and annotations in flat vectors, and the views handed
//! out over them.

use std::fmt;
use std::path::Path;

use crate::mask::{self, Rle};
use crate::{parse, CocoError, Limits, Problem};

/// Annotation flag: `iscrowd`.
pub(crate) const CROWD: u8 = 1;
/// Annotation flag: its polygon coordinates are stored as `f64` bits (two `i32` slots
/// each, low half first), not as hundredths of a pixel.
pub(crate) const EXACT: u8 = 2;

/// The variable-length parts of annotations, each a range of a flat vector given by a
/// vector of starts with one more entry than there are annotations (or polygons).
#[derive(Clone, PartialEq)]
pub(crate) struct Shapes {
    /// Per annotation, its first polygon (an index of `coord_first`).
    pub(crate) poly_first: Vec<u32>,
    /// Per polygon, its first slot of `coords`.
    pub(crate) coord_first: Vec<u32>,
    pub(crate) coords: Vec<i32>,
    /// Per annotation, its first count of `rle_counts` (an RLE has its image's size).
    pub(crate) rle_first: Vec<u32>,
    pub(crate) rle_counts: Vec<u32>,
    /// Per annotation, its first number of `keypoints`.
    pub(crate) kp_first: Vec<u32>,
    pub(crate) keypoints: Vec<f32>,
}

impl Shapes {
    pub(crate) fn new() -> Shapes {
        Shapes {
            poly_first: vec![0],
            coord_first: vec![0],
            coords: Vec::new(),
            rle_first: vec![0],
            rle_counts: Vec::new(),
            kp_first: vec![0],
            keypoints: Vec::new(),
        }
    }

    /// The shapes of annotations `order` (indices into `self`), in that order.
    pub(crate) fn gather(&self, order: &[u32]) -> Shapes {
        let mut out = Shapes::new();
        for &a in order {
            let a = a as usize;
            let polygons = range(&self.poly_first, a);
            for p in polygons.clone() {
                out.coords
                    .extend_from_slice(&self.coords[range(&self.coord_first, p)]);
                out.coord_first.push(out.coords.len() as u32);
            }
            out.poly_first.push(out.coord_first.len() as u32 - 1);
            out.rle_counts
                .extend_from_slice(&self.rle_counts[range(&self.rle_first, a)]);
            out.rle_first.push(out.rle_counts.len() as u32);
            out.keypoints
                .extend_from_slice(&self.keypoints[range(&self.kp_first, a)]);
            out.kp_first.push(out.keypoints.len() as u32);
        }
        out
    }
}

/// Entry `i` of a vector of starts: `first[i]..first[i + 1]`.
pub(crate) fn range(first: &[u32], i: usize) -> std::ops::Range<usize> {
    first[i] as usize..first[i + 1] as usize
}

/// A category of the file, at its class index (see [`Annotations::categories`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Category {
    /// Its `id` in the file.
    pub id: u64,
    /// Its `name`.
    pub name: String,
    /// The names of its keypoints, in order (empty if it has none).
    pub keypoints: Vec<String>,
    /// Pairs of keypoints joined in drawings, numbered from 1 as in COCO.
    pub skeleton: Vec<[u32; 2]>,
}

/// The images, categories and sound annotations of a COCO file, in flat vectors.
///
/// Images are ordered by id; an image's annotations keep the file's order. Labels are
/// class indices: the position of the annotation's category among the file's categories
/// sorted by id (COCO's 80 categories, ids 1 to 90, become labels 0 to 79).
#[derive(Clone, PartialEq)]
pub struct Annotations {
    pub(crate) image_ids: Vec<u64>,
    /// Per image, (height, width).
    pub(crate) sizes: Vec<[u32; 2]>,
    /// File names, one after the other; `names_first` holds where each starts.
    pub(crate) names: String,
    pub(crate) names_first: Vec<u32>,
    /// Per image, its first annotation.
    pub(crate) image_first: Vec<u32>,
    pub(crate) categories: Vec<Category>,
    pub(crate) ann_ids: Vec<u64>,
    pub(crate) boxes: Vec<[f32; 4]>,
    pub(crate) areas: Vec<f64>,
    pub(crate) labels: Vec<u32>,
    /// [`CROWD`] and [`EXACT`].
    pub(crate) flags: Vec<u8>,
    pub(crate) shapes: Shapes,
}

impl fmt::Debug for Annotations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Annotations")
            .field("images", &self.image_count())
            .field("categories", &self.categories.len())
            .field("annotations", &self.annotation_count())
            .finish_non_exhaustive()
    }
}

impl Annotations {
    /// Indexes a COCO annotation file held in memory (`instances_*.json`,
    /// `person_keypoints_*.json`, or any file of that format), returning the index and
    /// the annotations left out of it, in the file's order.
    ///
    /// Fails with [`CocoError::Format`] if the file is not COCO's format,
    /// [`CocoError::TooLarge`] if it passes one of `limits`; see the crate's
    /// documentation for which faults refuse the file and which leave one annotation out.
    pub fn parse(json: &[u8], limits: &Limits) -> Result<(Annotations, Vec<Problem>), CocoError> {
        parse::parse(json, limits)
    }

    /// Reads and indexes the COCO annotation file at `path`, as [`Annotations::parse`];
    /// a file over `limits.max_file_bytes` is refused before it is read.
    pub fn open(path: &Path, limits: &Limits) -> Result<(Annotations, Vec<Problem>), CocoError> {
        let io = |e: std::io::Error| CocoError::Io(format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(io)?.len();
        parse::check_file_size(len, limits)?;
        Annotations::parse(&std::fs::read(path).map_err(io)?, limits)
    }

    /// How many images the file lists (with or without annotations).
    pub fn image_count(&self) -> usize {
        self.image_ids.len()
    }

    /// How many annotations the index holds (the sound ones).
    pub fn annotation_count(&self) -> usize {
        self.ann_ids.len()
    }

    /// Image `index` (`0..image_count()`, ordered by id), or `None` past the end.
    pub fn image(&self, index: usize) -> Option<Image<'_>> {
        let id = *self.image_ids.get(index)?;
        let [height, width] = self.sizes[index];
        Some(Image {
            id,
            file_name: &self.names[range(&self.names_first, index)],
            height,
            width,
            index: self,
            annotations: self.image_first[index]..self.image_first[index + 1],
        })
    }

    /// The index of the image with `id`, if the file lists one.
    pub fn image_index(&self, id: u64) -> Option<usize> {
        self.image_ids.binary_search(&id).ok()
    }

    /// The categories sorted by id: the category of label `l` is `categories()[l]`.
    pub fn categories(&self) -> &[Category] {
        &self.categories
    }

    fn annotation(&self, a: usize, height: u32, width: u32) -> Annotation<'_> {
        let s = &self.shapes;
        let label = self.labels[a];
        let polygons = range(&s.poly_first, a);
        let rle = range(&s.rle_first, a);
        let segmentation = if !polygons.is_empty() {
            Segmentation::Polygons(Polygons {
                coord_first: &s.coord_first[polygons.start..=polygons.end],
                coords: &s.coords,
                exact: self.flags[a] & EXACT != 0,
            })
        } else if !rle.is_empty() {
            Segmentation::Rle(RleRef {
                height,
                width,
                counts: &s.rle_counts[rle],
            })
        } else {
            Segmentation::None
        };
        Annotation {
            id: self.ann_ids[a],
            bbox: self.boxes[a],
            label,
            category_id: self.categories[label as usize].id,
            iscrowd: self.flags[a] & CROWD != 0,
            area: self.areas[a],
            segmentation,
            keypoints: &s.keypoints[range(&s.kp_first, a)],
            height,
            width,
        }
    }
}

/// One image of an [`Annotations`] index.
#[derive(Debug, Clone)]
pub struct Image<'a> {
    /// Its `id` in the file.
    pub id: u64,
    /// Its `file_name`.
    pub file_name: &'a str,
    /// Its height, in pixels.
    pub height: u32,
    /// Its width, in pixels.
    pub width: u32,
    index: &'a Annotations,
    annotations: std::ops::Range<u32>,
}

impl<'a> Image<'a> {
    /// How many (sound) annotations it has.
    pub fn annotation_count(&self) -> usize {
        self.annotations.len()
    }

    /// Its annotations, in the file's order.
    pub fn annotations(&self) -> impl ExactSizeIterator<Item = Annotation<'a>> + 'a {
        let (index, height, width) = (self.index, self.height, self.width);
        (self.annotations.start as usize..self.annotations.end as usize)
            .map(move |a| index.annotation(a, height, width))
    }
}

/// One annotation of an image.
#[derive(Debug, Clone, Copy)]
pub struct Annotation<'a> {
    /// Its `id` in the file.
    pub id: u64,
    /// Its box: x, y (top left), width, height, in pixels, as the file gives it.
    pub bbox: [f32; 4],
    /// Its class index: its category is [`Annotations::categories`]`()[label]`.
    pub label: u32,
    /// Its `category_id` in the file.
    pub category_id: u64,
    /// Whether it marks a crowd (`iscrowd`).
    pub iscrowd: bool,
    /// Its `area` in the file (the box's width times height when it has none).
    pub area: f64,
    /// Its mask, as the file gives it.
    pub segmentation: Segmentation<'a>,
    /// Its keypoints, (x, y, v) triples (as many as its category names, or none).
    pub keypoints: &'a [f32],
    height: u32,
    width: u32,
}

impl Annotation<'_> {
    /// Its mask at its image's size, row-major `height * width` bytes of 0 or 1, as
    /// pycocotools' `annToMask` makes it (all 0 without a segmentation).
    pub fn mask(&self) -> Vec<u8> {
        match &self.segmentation {
            Segmentation::None => vec![0; self.height as usize * self.width as usize],
            Segmentation::Polygons(p) => p.to_mask(self.height, self.width),
            Segmentation::Rle(r) => mask::decode(r.counts, r.height, r.width),
        }
    }

    /// Its mask as an RLE at its image's size, as pycocotools' `annToRLE` (whose counts
    /// are the runs of [`Annotation::mask`]).
    pub fn rle(&self) -> Rle {
        match &self.segmentation {
            Segmentation::Rle(r) => r.to_rle(),
            _ => Rle::encode(&self.mask(), self.height, self.width)
                .expect("the mask has the image's size, which fits COCO's counts"),
        }
    }
}

/// The mask of an annotation, as its file gives it.
#[derive(Debug, Clone, Copy)]
pub enum Segmentation<'a> {
    /// No mask (no `segmentation`, `null` or `[]`).
    None,
    /// Polygons in pixel coordinates of the image.
    Polygons(Polygons<'a>),
    /// A run-length encoding at the image's size.
    Rle(RleRef<'a>),
}

/// The polygons of one annotation.
#[derive(Debug, Clone, Copy)]
pub struct Polygons<'a> {
    /// The first slot of each polygon, and the end of the last.
    coord_first: &'a [u32],
    coords: &'a [i32],
    exact: bool,
}

impl<'a> Polygons<'a> {
    /// How many polygons (at least one).
    pub fn len(&self) -> usize {
        self.coord_first.len() - 1
    }

    /// Always false: an annotation without polygons has [`Segmentation::None`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Polygon `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Polygon<'a>> {
        (i < self.len()).then(|| Polygon {
            slots: &self.coords[range(self.coord_first, i)],
            exact: self.exact,
        })
    }

    /// The polygons, in the file's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Polygon<'a>> + 'a {
        let (coord_first, coords, exact) = (self.coord_first, self.coords, self.exact);
        (0..self.len()).map(move |i| Polygon {
            slots: &coords[range(coord_first, i)],
            exact,
        })
    }

    /// The mask of their union at `height` x `width` (see [`polygons_to_mask`]), from
    /// the coordinates as the file gives them.
    ///
    /// [`polygons_to_mask`]: crate::polygons_to_mask
    pub fn to_mask(&self, height: u32, width: u32) -> Vec<u8> {
        let mut mask = vec![0; height as usize * width as usize];
        let (mut toggles, mut coords) = (Vec::new(), Vec::new());
        for polygon in self.iter() {
            coords.clear();
            coords.extend(polygon.coords());
            mask::fill_polygon(&coords, height, width, &mut toggles, &mut mask);
        }
        mask
    }
}

/// One polygon: x1, y1, x2, y2, ... in pixels, exactly the `f64` the file gives.
#[derive(Debug, Clone, Copy)]
pub struct Polygon<'a> {
    slots: &'a [i32],
    exact: bool,
}

impl<'a> Polygon<'a> {
    /// How many coordinates (twice its points, at least 6).
    pub fn len(&self) -> usize {
        if self.exact {
            self.slots.len() / 2
        } else {
            self.slots.len()
        }
    }

    /// Always false: polygons have at least 3 points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The coordinates, x1, y1, x2, y2, ...
    pub fn coords(&self) -> impl ExactSizeIterator<Item = f64> + 'a {
        let (slots, exact) = (self.slots, self.exact);
        (0..self.len()).map(move |i| {
            if exact {
                let bits =
                    u64::from(slots[2 * i] as u32) | u64::from(slots[2 * i + 1] as u32) << 32;
                f64::from_bits(bits)
            } else {
                f64::from(slots[i]) / 100.0
            }
        })
    }

    /// The coordinates in a vector.
    pub fn to_vec(&self) -> Vec<f64> {
        self.coords().collect()
    }
}

/// The run-length encoding of one annotation (its counts cover its image exactly).
#[derive(Debug, Clone, Copy)]
pub struct RleRef<'a> {
    height: u32,
    width: u32,
    counts: &'a [u32],
}

impl<'a> RleRef<'a> {
    /// Height of the mask (its image's), in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Width of the mask (its image's), in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The run lengths, column-major, the first a run of 0.
    pub fn counts(&self) -> &'a [u32] {
        self.counts
    }

    /// An owned [`Rle`] of the same counts.
    pub fn to_rle(&self) -> Rle {
        Rle::new(self.height, self.width, self.counts.to_vec())
            .expect("the index holds only RLEs that cover their image")
    }
}
