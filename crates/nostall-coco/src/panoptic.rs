//! COCO panoptic files (`panoptic_val2017.json`): each image's PNG of segment ids and
//! its table of segments, read into a compact, bounded index as instances files are.
//!
//! The file lists `images` and `categories` as an instances file does (categories also
//! say `isthing`), and one entry of `annotations` an image: the PNG's `file_name` (in
//! the folder named as the file, beside it) and its `segments_info`, each segment's `id`
//! (the PNG's pixels are `R + 256 G + 256² B`) and `category_id`; their other fields
//! (`iscrowd`, `bbox`, `area`) are not kept. The JSON is streamed through serde
//! visitors into flat vectors, one image's segments at most
//! [`Limits::max_annotations_per_image`].
//!
//! As for instances files, a file that is not this format (or over a limit) is refused
//! ([`CocoError`]), and an image whose entry is unsound is reported as a
//! [`PanopticProblem`] and kept without segments: an entry naming no image, a second entry
//! for one image, an image without an entry, a segment of an unknown category, a segment
//! id that no RGB pixel can hold (0, or over 2²⁴ − 1) or that the image lists twice.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::index::range;
use crate::parse::{check_file_size, sort_images, FileSeed, ImageEntry, TopLevel};
use crate::serial::{check_starts, corrupt, put, Element, Reader};
use crate::{CocoError, Limits};

/// The largest segment id an RGB pixel holds.
pub const MAX_SEGMENT_ID: u32 = (1 << 24) - 1;

const MAGIC: &[u8; 4] = b"NSCP";
const VERSION: u8 = 1;

/// A category of a panoptic file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PanopticCategory {
    /// Its `id` in the file.
    pub id: u64,
    /// Its `name`.
    pub name: String,
    /// Whether it is a thing (countable objects) rather than stuff (`isthing`, 0 unless
    /// given).
    pub isthing: bool,
}

/// A segment of an image: its id in the PNG and its category's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The id its pixels hold (`R + 256 G + 256² B`), 1 to [`MAX_SEGMENT_ID`].
    pub id: u32,
    /// Its `category_id`, one of the file's categories.
    pub category_id: u64,
}

/// An image of a panoptic file with its PNG and segments.
#[derive(Debug, Clone, Copy)]
pub struct PanopticImage<'a> {
    /// Its `id`.
    pub id: u64,
    /// Its `file_name`.
    pub file_name: &'a str,
    /// The `file_name` of its PNG of segment ids (empty when it has no sound entry).
    pub png: &'a str,
    /// Its width in pixels.
    pub width: u32,
    /// Its height in pixels.
    pub height: u32,
    /// Its segments, in the file's order (none when its entry is unsound).
    pub segments: &'a [Segment],
}

/// The images, categories and segments of a COCO panoptic file, in flat vectors; images
/// ordered by id, categories by id.
#[derive(Clone, PartialEq)]
pub struct PanopticIndex {
    image_ids: Vec<u64>,
    /// Per image, (height, width).
    sizes: Vec<[u32; 2]>,
    /// Images' file names one after the other; `names_first` holds where each starts.
    names: String,
    names_first: Vec<u32>,
    /// The PNGs' file names, as the images'.
    pngs: String,
    pngs_first: Vec<u32>,
    /// Per image, its first segment.
    segments_first: Vec<u32>,
    segments: Vec<Segment>,
    categories: Vec<PanopticCategory>,
}

impl fmt::Debug for PanopticIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PanopticIndex")
            .field("images", &self.image_ids.len())
            .field("categories", &self.categories.len())
            .field("segments", &self.segments.len())
            .finish_non_exhaustive()
    }
}

/// An image whose panoptic entry was left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PanopticProblem {
    /// The image's id (the entry's `image_id`).
    pub image_id: u64,
    /// What is wrong.
    pub kind: PanopticProblemKind,
}

/// What is wrong with an image's panoptic entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PanopticProblemKind {
    /// The entry's `image_id` names no image of `images`.
    UnknownImage,
    /// An earlier entry of `annotations` is for the same image.
    SecondEntry,
    /// No entry of `annotations` is for the image.
    NoEntry,
    /// Segment `segment`'s `category_id` (`category`) names no category.
    UnknownCategory {
        /// The segment's id.
        segment: u64,
        /// Its `category_id`.
        category: u64,
    },
    /// Segment id `segment` is 0 or over [`MAX_SEGMENT_ID`]: no RGB pixel holds it.
    SegmentId(u64),
    /// Two segments of the image have id `segment`.
    DuplicateSegment(u64),
}

impl fmt::Display for PanopticProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the panoptic entry of image {}: ", self.image_id)?;
        match self.kind {
            PanopticProblemKind::UnknownImage => write!(f, "no image has that id"),
            PanopticProblemKind::SecondEntry => {
                write!(f, "an earlier entry is for the same image")
            }
            PanopticProblemKind::NoEntry => write!(f, "`annotations` has none"),
            PanopticProblemKind::UnknownCategory { segment, category } => write!(
                f,
                "segment {segment} has category {category}, which is not one of `categories`"
            ),
            PanopticProblemKind::SegmentId(segment) => write!(
                f,
                "segment id {segment} is not 1 to {MAX_SEGMENT_ID} (R + 256 G + 65536 B)"
            ),
            PanopticProblemKind::DuplicateSegment(segment) => {
                write!(f, "two segments have id {segment}")
            }
        }
    }
}

impl PanopticIndex {
    /// Indexes a COCO panoptic file held in memory, returning the index and the images
    /// whose entries were left out (in image order).
    ///
    /// Fails with [`CocoError::Format`] if the file is not that format (an entry without
    /// `image_id` or `file_name`, a segment without `id` or `category_id`),
    /// [`CocoError::TooLarge`] if it passes one of `limits`.
    pub fn parse(
        json: &[u8],
        limits: &Limits,
    ) -> Result<(PanopticIndex, Vec<PanopticProblem>), CocoError> {
        check_file_size(json.len() as u64, limits)?;
        let mut entries = Entries::default();
        let mut de = serde_json::Deserializer::from_slice(json);
        let mut state = Top {
            entries: &mut entries,
            limits,
        };
        let top = FileSeed(&mut state)
            .deserialize(&mut de)
            .and_then(|top| de.end().map(|()| top));
        match top {
            Ok((images, categories)) => entries.finish(images, categories, limits),
            Err(e) => Err(entries
                .fatal
                .take()
                .unwrap_or_else(|| CocoError::Format(e.to_string()))),
        }
    }

    /// Reads and indexes the panoptic file at `path`, as [`PanopticIndex::parse`]; a
    /// file over `limits.max_file_bytes` is refused before it is read.
    pub fn open(
        path: &Path,
        limits: &Limits,
    ) -> Result<(PanopticIndex, Vec<PanopticProblem>), CocoError> {
        let io = |e: std::io::Error| CocoError::Io(format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(io)?.len();
        check_file_size(len, limits)?;
        PanopticIndex::parse(&std::fs::read(path).map_err(io)?, limits)
    }

    /// How many images the file lists.
    pub fn image_count(&self) -> usize {
        self.image_ids.len()
    }

    /// Image `index` (`0..image_count()`, ordered by id), or `None` past the end.
    pub fn image(&self, index: usize) -> Option<PanopticImage<'_>> {
        let id = *self.image_ids.get(index)?;
        let [height, width] = self.sizes[index];
        Some(PanopticImage {
            id,
            file_name: &self.names[range(&self.names_first, index)],
            png: &self.pngs[range(&self.pngs_first, index)],
            width,
            height,
            segments: &self.segments[range(&self.segments_first, index)],
        })
    }

    /// The index of the image with `id`, if the file lists one.
    pub fn image_index(&self, id: u64) -> Option<usize> {
        self.image_ids.binary_search(&id).ok()
    }

    /// The categories, sorted by id.
    pub fn categories(&self) -> &[PanopticCategory] {
        &self.categories
    }

    /// The index as bytes, for [`PanopticIndex::from_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(64 + self.names.len() + self.pngs.len() + 24 * self.image_ids.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        put(&mut out, &self.image_ids);
        put(&mut out, &self.sizes);
        put(&mut out, self.names.as_bytes());
        put(&mut out, &self.names_first);
        put(&mut out, self.pngs.as_bytes());
        put(&mut out, &self.pngs_first);
        put(&mut out, &self.segments_first);
        put(&mut out, &self.segments);
        out.extend_from_slice(&(self.categories.len() as u64).to_le_bytes());
        for c in &self.categories {
            c.id.put(&mut out);
            put(&mut out, c.name.as_bytes());
            out.push(u8::from(c.isthing));
        }
        out
    }

    /// Restores an index written by [`PanopticIndex::to_bytes`], checking it against
    /// `limits`: another version, a truncated or overlong record, or vectors that do not
    /// fit together are [`CocoError::Corrupt`]; sizes over the limits
    /// [`CocoError::TooLarge`].
    pub fn from_bytes(bytes: &[u8], limits: &Limits) -> Result<PanopticIndex, CocoError> {
        let mut r = Reader::after_header(bytes, MAGIC, VERSION, "a COCO panoptic index")?;
        let image_ids = r.vec()?;
        let sizes = r.vec()?;
        let names = r.string()?;
        let names_first = r.vec()?;
        let pngs = r.string()?;
        let pngs_first = r.vec()?;
        let segments_first = r.vec()?;
        let segments = r.vec()?;
        let n = r.len()?;
        // Each category takes at least 17 bytes: no more can be listed than fit.
        if n > r.0.len() / 17 {
            return Err(corrupt("truncated"));
        }
        let mut categories = Vec::with_capacity(n);
        for _ in 0..n {
            let id = u64::get(r.take(8)?);
            let name = r.string()?;
            let isthing = match r.take(1)?[0] {
                0 => false,
                1 => true,
                _ => return Err(corrupt("a category's isthing is not 0 or 1")),
            };
            categories.push(PanopticCategory { id, name, isthing });
        }
        if !r.0.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        let index = PanopticIndex {
            image_ids,
            sizes,
            names,
            names_first,
            pngs,
            pngs_first,
            segments_first,
            segments,
            categories,
        };
        index.validate(limits)?;
        Ok(index)
    }

    /// Everything the views rely on, and the limits.
    fn validate(&self, limits: &Limits) -> Result<(), CocoError> {
        let images = self.image_ids.len();
        if self.sizes.len() != images {
            return Err(corrupt("image sizes do not fit the images"));
        }
        if !self.image_ids.windows(2).all(|w| w[0] < w[1]) {
            return Err(corrupt("image ids are not in order"));
        }
        for (text, first) in [
            (&self.names, &self.names_first),
            (&self.pngs, &self.pngs_first),
        ] {
            check_starts(first, images, text.len(), "file names")?;
            if !first.iter().all(|&i| text.is_char_boundary(i as usize)) {
                return Err(corrupt("a file name is cut inside a character"));
            }
        }
        let side = limits.max_image_side;
        if let Some([h, w]) = self.sizes.iter().find(|[h, w]| *h > side || *w > side) {
            return Err(CocoError::TooLarge(format!(
                "index: an image is {w}x{h}, over the limit of {side} a side"
            )));
        }
        if self.sizes.iter().any(|&[h, w]| h == 0 || w == 0) {
            return Err(corrupt("an image has no pixels"));
        }
        check_starts(
            &self.segments_first,
            images,
            self.segments.len(),
            "images' segments",
        )?;
        let most = limits.max_annotations_per_image as usize;
        if (0..images).any(|i| range(&self.segments_first, i).len() > most) {
            return Err(CocoError::TooLarge(format!(
                "index: an image has more than {most} segments"
            )));
        }
        if !self.categories.windows(2).all(|w| w[0].id < w[1].id) {
            return Err(corrupt("category ids are not in order"));
        }
        let known = |id| self.categories.binary_search_by_key(&id, |c| c.id).is_ok();
        let sound = |s: &Segment| s.id != 0 && s.id <= MAX_SEGMENT_ID && known(s.category_id);
        if !self.segments.iter().all(sound) {
            return Err(corrupt("a segment has a bad id or an unknown category"));
        }
        Ok(())
    }
}

impl Element for Segment {
    const SIZE: usize = 12;
    fn put(&self, out: &mut Vec<u8>) {
        self.id.put(out);
        self.category_id.put(out);
    }
    fn get(b: &[u8]) -> Self {
        Segment {
            id: u32::get(&b[..4]),
            category_id: u64::get(&b[4..]),
        }
    }
}

#[derive(Deserialize)]
struct CategoryEntry {
    id: u64,
    name: String,
    #[serde(default)]
    isthing: u8,
}

#[derive(Deserialize)]
struct SegmentEntry {
    id: u64,
    category_id: u64,
}

/// The entries of `annotations` in the file's order, before `images` and `categories`
/// (which may come after them) are known.
#[derive(Default)]
struct Entries {
    /// A refusal found inside a visitor (over a limit), which serde's error would lose.
    fatal: Option<CocoError>,
    image_ids: Vec<u64>,
    pngs: String,
    pngs_first: Vec<u32>,
    /// Per entry, its first segment (one more than the entries).
    segments_first: Vec<u32>,
    /// Segments as the file gives them, ids unchecked.
    segments: Vec<(u64, u64)>,
}

impl Entries {
    /// The checks that need the whole file, then the index in image order.
    fn finish(
        self,
        mut images: Vec<ImageEntry<'_>>,
        mut categories: Vec<CategoryEntry>,
        limits: &Limits,
    ) -> Result<(PanopticIndex, Vec<PanopticProblem>), CocoError> {
        sort_images(&mut images, limits)?;
        categories.sort_unstable_by_key(|c| c.id);
        if let Some(w) = categories.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(CocoError::Format(format!(
                "two categories have id {} ({} and {}); category ids must be unique",
                w[0].id, w[0].name, w[1].name
            )));
        }
        let text: usize =
            images.iter().map(|im| im.file_name.len()).sum::<usize>() + self.pngs.len();
        if text > u32::MAX as usize || self.segments.len() > u32::MAX as usize {
            return Err(CocoError::TooLarge(
                "over 4 GiB of file names or 2^32 segments in one file (split the file)".into(),
            ));
        }
        let mut problems = Vec::new();
        // Per image, its entry (when sound).
        let mut entry_of: Vec<Option<usize>> = vec![None; images.len()];
        let mut taken = vec![false; images.len()];
        for (e, &image_id) in self.image_ids.iter().enumerate() {
            let problem = |kind| PanopticProblem { image_id, kind };
            let Ok(image) = images.binary_search_by_key(&image_id, |im| im.id) else {
                problems.push(problem(PanopticProblemKind::UnknownImage));
                continue;
            };
            if std::mem::replace(&mut taken[image], true) {
                entry_of[image] = None;
                problems.push(problem(PanopticProblemKind::SecondEntry));
                continue;
            }
            match self.check_segments(e, &categories) {
                Ok(()) => entry_of[image] = Some(e),
                Err(kind) => problems.push(problem(kind)),
            }
        }
        for (image, im) in images.iter().enumerate() {
            if !taken[image] {
                problems.push(PanopticProblem {
                    image_id: im.id,
                    kind: PanopticProblemKind::NoEntry,
                });
            }
        }
        let mut index = PanopticIndex {
            image_ids: images.iter().map(|im| im.id).collect(),
            sizes: images
                .iter()
                .map(|im| [im.height as u32, im.width as u32])
                .collect(),
            names: String::new(),
            names_first: vec![0],
            pngs: String::new(),
            pngs_first: vec![0],
            segments_first: vec![0],
            segments: Vec::new(),
            categories: categories
                .into_iter()
                .map(|c| PanopticCategory {
                    id: c.id,
                    name: c.name,
                    isthing: c.isthing != 0,
                })
                .collect(),
        };
        for (im, entry) in images.iter().zip(&entry_of) {
            index.names.push_str(&im.file_name);
            index.names_first.push(index.names.len() as u32);
            if let Some(e) = *entry {
                index.pngs.push_str(&self.pngs[range(&self.pngs_first, e)]);
                let segments = &self.segments[range(&self.segments_first, e)];
                index
                    .segments
                    .extend(segments.iter().map(|&(id, category_id)| Segment {
                        id: id as u32,
                        category_id,
                    }));
            }
            index.pngs_first.push(index.pngs.len() as u32);
            index.segments_first.push(index.segments.len() as u32);
        }
        problems.sort_by_key(|p| p.image_id);
        Ok((index, problems))
    }

    /// Entry `e`'s segments must have ids a pixel holds, once each, of known categories.
    fn check_segments(
        &self,
        e: usize,
        categories: &[CategoryEntry],
    ) -> Result<(), PanopticProblemKind> {
        let segments = &self.segments[range(&self.segments_first, e)];
        let mut seen = HashSet::with_capacity(segments.len());
        for &(id, category) in segments {
            if id == 0 || id > u64::from(MAX_SEGMENT_ID) {
                return Err(PanopticProblemKind::SegmentId(id));
            }
            if !seen.insert(id) {
                return Err(PanopticProblemKind::DuplicateSegment(id));
            }
            if categories
                .binary_search_by_key(&category, |c| c.id)
                .is_err()
            {
                return Err(PanopticProblemKind::UnknownCategory {
                    segment: id,
                    category,
                });
            }
        }
        Ok(())
    }
}

/// A panoptic file's state while its top-level object is read ([`FileSeed`]): the
/// entries of `annotations`, streamed in.
struct Top<'a> {
    entries: &'a mut Entries,
    limits: &'a Limits,
}

impl<'de> TopLevel<'de> for Top<'_> {
    type Category = CategoryEntry;
    const EXPECTING: &'static str =
        "a COCO panoptic file (an object with `images`, `annotations`, `categories`)";
    const NO_ANNOTATIONS: Option<&'static str> =
        Some("no `annotations` (a panoptic file gives each image its PNG and segments_info)");

    fn images<A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<Vec<ImageEntry<'de>>, A::Error> {
        map.next_value()
    }

    fn categories<A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
    ) -> Result<Vec<CategoryEntry>, A::Error> {
        map.next_value()
    }

    fn annotations<A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error> {
        map.next_value_seed(EntriesSeed {
            entries: &mut *self.entries,
            limits: self.limits,
        })
    }
}

struct EntriesSeed<'a> {
    entries: &'a mut Entries,
    limits: &'a Limits,
}

impl<'de> DeserializeSeed<'de> for EntriesSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of panoptic entries")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let e = self.entries;
        e.segments_first.push(0);
        e.pngs_first.push(0);
        let mut i = 0usize;
        loop {
            let seed = EntrySeed {
                entries: &mut *e,
                limits: self.limits,
                at: i,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum EntryKey {
    ImageId,
    FileName,
    SegmentsInfo,
    #[serde(other)]
    Other,
}

/// One entry of `annotations`, the `at`-th.
struct EntrySeed<'a> {
    entries: &'a mut Entries,
    limits: &'a Limits,
    at: usize,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a panoptic entry (an object of image_id, file_name, segments_info)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let e = self.entries;
        let place = format!("entry #{} of `annotations` (counted from 0)", self.at);
        let (mut image_id, mut file_name, mut segments) = (None, None, false);
        while let Some(key) = map.next_key::<EntryKey>()? {
            let repeated = match key {
                EntryKey::ImageId => image_id.is_some(),
                EntryKey::FileName => file_name.is_some(),
                EntryKey::SegmentsInfo => segments,
                EntryKey::Other => false,
            };
            if repeated {
                return Err(de::Error::custom(format!("a key of {place} appears twice")));
            }
            match key {
                EntryKey::ImageId => image_id = Some(map.next_value::<u64>()?),
                EntryKey::FileName => file_name = Some(map.next_value::<Cow<'de, str>>()?),
                EntryKey::SegmentsInfo => {
                    map.next_value_seed(SegmentsSeed {
                        segments: &mut e.segments,
                        fatal: &mut e.fatal,
                        most: self.limits.max_annotations_per_image,
                        place: &place,
                    })?;
                    segments = true;
                }
                EntryKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (Some(image_id), Some(file_name)) = (image_id, file_name) else {
            return Err(de::Error::custom(format!(
                "{place} lacks `image_id` or `file_name`: a COCO panoptic file's entries \
                 name each image's PNG of segment ids"
            )));
        };
        e.image_ids.push(image_id);
        e.pngs.push_str(&file_name);
        // Past 4 GiB the offsets are refused whole by `finish`; saturated meanwhile.
        e.pngs_first
            .push(u32::try_from(e.pngs.len()).unwrap_or(u32::MAX));
        e.segments_first
            .push(u32::try_from(e.segments.len()).unwrap_or(u32::MAX));
        Ok(())
    }
}

/// An entry's `segments_info`, at most `most` segments (more refuse the file).
struct SegmentsSeed<'a> {
    segments: &'a mut Vec<(u64, u64)>,
    /// Where the refusal is kept, which serde's error would lose.
    fatal: &'a mut Option<CocoError>,
    most: u32,
    /// The entry, for the message.
    place: &'a str,
}

impl<'de> DeserializeSeed<'de> for SegmentsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SegmentsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of segments (id, category_id)")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let mut n = 0u32;
        while let Some(s) = seq.next_element::<SegmentEntry>()? {
            if n == self.most {
                *self.fatal = Some(CocoError::TooLarge(format!(
                    "{} has more than {} segments (raise Limits::max_annotations_per_image \
                     to accept it)",
                    self.place, self.most
                )));
                return Err(de::Error::custom("over a limit"));
            }
            n += 1;
            self.segments.push((s.id, s.category_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{
        "info": {"year": 2017},
        "annotations": [
            {"image_id": 2, "file_name": "b.png", "segments_info": [
                {"id": 5, "category_id": 1, "iscrowd": 0, "bbox": [0, 0, 1, 1], "area": 1},
                {"id": 65536, "category_id": 200}]},
            {"image_id": 1, "file_name": "a.png", "segments_info": []},
            {"image_id": 3, "file_name": "c.png", "segments_info": [{"id": 7, "category_id": 9}]},
            {"image_id": 9, "file_name": "z.png", "segments_info": []},
            {"image_id": 1, "file_name": "a2.png", "segments_info": []}
        ],
        "images": [{"id": 2, "file_name": "b.jpg", "width": 4, "height": 3},
                   {"id": 1, "file_name": "a.jpg", "width": 2, "height": 2},
                   {"id": 3, "file_name": "c.jpg", "width": 2, "height": 2},
                   {"id": 4, "file_name": "d.jpg", "width": 2, "height": 2}],
        "categories": [{"id": 200, "name": "wall", "isthing": 0},
                       {"id": 1, "name": "person", "isthing": 1, "color": [220, 20, 60]}]
    }"#;

    #[test]
    fn entries_are_indexed_by_image_and_unsound_ones_named() {
        let (index, problems) = PanopticIndex::parse(FILE.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(index.image_count(), 4);
        let b = index.image(1).unwrap();
        assert_eq!((b.id, b.file_name, b.png), (2, "b.jpg", "b.png"));
        assert_eq!((b.width, b.height), (4, 3));
        assert_eq!(
            b.segments,
            [
                Segment {
                    id: 5,
                    category_id: 1
                },
                Segment {
                    id: 65536,
                    category_id: 200
                }
            ]
        );
        assert_eq!(index.categories()[0].id, 1);
        assert!(index.categories()[0].isthing && !index.categories()[1].isthing);
        let kinds: Vec<(u64, PanopticProblemKind)> = problems
            .iter()
            .map(|p| (p.image_id, p.kind.clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                (1, PanopticProblemKind::SecondEntry),
                (
                    3,
                    PanopticProblemKind::UnknownCategory {
                        segment: 7,
                        category: 9
                    }
                ),
                (4, PanopticProblemKind::NoEntry),
                (9, PanopticProblemKind::UnknownImage),
            ]
        );
        // An image with a problem is kept without its PNG or segments.
        for i in [0, 2, 3] {
            let im = index.image(i).unwrap();
            assert!(im.png.is_empty() && im.segments.is_empty(), "{im:?}");
        }
        assert!(problems[1].to_string().contains("category 9"));
        // The index reads back (cuts and damage: tests/hostile.rs).
        let bytes = index.to_bytes();
        assert_eq!(
            PanopticIndex::from_bytes(&bytes, &Limits::default()).unwrap(),
            index
        );
    }

    #[test]
    fn segment_ids_a_pixel_cannot_hold_and_repeats_are_problems() {
        let file = |segments: &str| {
            format!(
                r#"{{"images": [{{"id": 1, "file_name": "a.jpg", "width": 2, "height": 2}}],
                    "categories": [{{"id": 1, "name": "x"}}],
                    "annotations": [{{"image_id": 1, "file_name": "a.png",
                                      "segments_info": {segments}}}]}}"#
            )
        };
        let kind = |segments: &str| {
            let (_, problems) =
                PanopticIndex::parse(file(segments).as_bytes(), &Limits::default()).unwrap();
            problems.first().map(|p| p.kind.clone())
        };
        assert_eq!(kind(r#"[{"id": 16777215, "category_id": 1}]"#), None);
        assert_eq!(
            kind(r#"[{"id": 16777216, "category_id": 1}]"#),
            Some(PanopticProblemKind::SegmentId(1 << 24))
        );
        assert_eq!(
            kind(r#"[{"id": 0, "category_id": 1}]"#),
            Some(PanopticProblemKind::SegmentId(0))
        );
        assert_eq!(
            kind(r#"[{"id": 3, "category_id": 1}, {"id": 3, "category_id": 1}]"#),
            Some(PanopticProblemKind::DuplicateSegment(3))
        );
    }

    #[test]
    fn files_not_of_the_format_or_over_the_limits_are_refused_naming_the_place() {
        let why = |json: &str, limits: &Limits| {
            PanopticIndex::parse(json.as_bytes(), limits)
                .unwrap_err()
                .to_string()
        };
        let limits = Limits::default();
        let images = r#""images": [{"id": 1, "file_name": "a.jpg", "width": 2, "height": 2}]"#;
        assert!(why("[1]", &limits).contains("not a COCO"));
        assert!(why(&format!("{{{images}}}"), &limits).contains("no `annotations`"));
        // An instances file: its annotations have no PNG.
        let instances = format!(
            r#"{{{images}, "annotations": [{{"id": 1, "image_id": 1, "category_id": 1}}]}}"#
        );
        assert!(why(&instances, &limits).contains("entry #0"));
        let entry = |n: usize| {
            let segments: Vec<String> = (1..=n)
                .map(|id| format!(r#"{{"id": {id}, "category_id": 1}}"#))
                .collect();
            format!(
                r#"{{{images}, "categories": [{{"id": 1, "name": "x"}}],
                    "annotations": [{{"image_id": 1, "file_name": "a.png",
                    "segments_info": [{}]}}]}}"#,
                segments.join(", ")
            )
        };
        let small = Limits {
            max_annotations_per_image: 3,
            ..Limits::default()
        };
        assert!(PanopticIndex::parse(entry(3).as_bytes(), &small).is_ok());
        let over = why(&entry(4), &small);
        assert!(
            over.contains("entry #0") && over.contains("more than 3 segments"),
            "{over}"
        );
        let tiny = Limits {
            max_file_bytes: 10,
            ..Limits::default()
        };
        assert!(why(&entry(1), &tiny).contains("too large"));
        let wide = entry(1).replace("\"width\": 2", "\"width\": 70000");
        assert!(why(&wide, &limits).contains("over the limit"));
        let index = PanopticIndex::parse(entry(3).as_bytes(), &limits)
            .unwrap()
            .0
            .to_bytes();
        assert!(PanopticIndex::from_bytes(&index, &small).is_ok());
        let smaller = Limits {
            max_annotations_per_image: 2,
            ..Limits::default()
        };
        assert!(PanopticIndex::from_bytes(&index, &smaller).is_err());
    }
}
