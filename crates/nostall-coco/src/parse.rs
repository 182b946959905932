//! Reading a COCO file: serde visitors that stream `annotations` into flat vectors (in
//! the file's order), then the checks that need the whole file, and the index in image
//! order.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::index::{range, Annotations, Category, Shapes, CROWD, EXACT};
use crate::mask::{self, BadCounts};
use crate::{CocoError, Limits, Problem, ProblemKind};

pub(crate) fn check_file_size(len: u64, limits: &Limits) -> Result<(), CocoError> {
    if len > limits.max_file_bytes {
        return Err(CocoError::TooLarge(format!(
            "the file has {len} bytes, over the limit of {} (raise Limits::max_file_bytes)",
            limits.max_file_bytes
        )));
    }
    Ok(())
}

pub(crate) fn parse(
    json: &[u8],
    limits: &Limits,
) -> Result<(Annotations, Vec<Problem>), CocoError> {
    check_file_size(json.len() as u64, limits)?;
    let mut b = Builder::new(limits);
    let mut de = serde_json::Deserializer::from_slice(json);
    let top = FileSeed(&mut b)
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top));
    match top {
        Ok((images, categories)) => b.finish(images, categories),
        Err(e) => Err(b.fatal.take().unwrap_or_else(|| {
            let place = b.place();
            CocoError::Format(if place.is_empty() {
                e.to_string()
            } else {
                format!("{e}, in {place}")
            })
        })),
    }
}

#[derive(Deserialize)]
pub(crate) struct ImageEntry<'a> {
    pub(crate) id: u64,
    #[serde(borrow)]
    pub(crate) file_name: Cow<'a, str>,
    pub(crate) width: i64,
    pub(crate) height: i64,
}

#[derive(Deserialize)]
struct CategoryEntry {
    id: u64,
    name: String,
    #[serde(default)]
    keypoints: Vec<String>,
    #[serde(default)]
    skeleton: Vec<[u32; 2]>,
}

/// Where the parser is, for error messages.
#[derive(Clone, Copy)]
enum Place {
    Top,
    Image(usize),
    Category(usize),
    Annotation(usize),
}

/// The annotation being read.
#[derive(Default)]
struct Current {
    id: Option<u64>,
    image_id: Option<u64>,
    category_id: Option<u64>,
    /// The box, or how many numbers `bbox` has when not 4.
    bbox: Option<Result<[f64; 4], usize>>,
    area: Option<f64>,
    crowd: bool,
    problem: Option<ProblemKind>,
    /// Coordinates of each polygon read so far.
    polygon_lens: Vec<u32>,
    /// Coordinates read, all polygons together (counted past the limit, not stored).
    numbers: u64,
    exact: bool,
    rle_size: Option<[u64; 2]>,
    rle: bool,
    /// Which limit the annotation passed, and by how much.
    over: Option<String>,
}

impl Current {
    /// Keeps the first problem found.
    fn problem(&mut self, kind: ProblemKind) {
        self.problem.get_or_insert(kind);
    }
}

/// The annotations of the file, in its order, before the checks that need `images` and
/// `categories` (which may come after them).
struct Builder<'l> {
    limits: &'l Limits,
    place: Place,
    /// A refusal found inside a visitor (over a limit), which serde's error would lose.
    fatal: Option<CocoError>,
    /// Annotations seen per image id, to stop at the limit.
    per_image: HashMap<u64, u32>,
    cur: Current,
    ids: Vec<u64>,
    image_ids: Vec<u64>,
    category_ids: Vec<u64>,
    boxes: Vec<[f64; 4]>,
    areas: Vec<f64>,
    crowd: Vec<bool>,
    exact: Vec<bool>,
    rle_sizes: Vec<Option<[u64; 2]>>,
    problems: Vec<Option<ProblemKind>>,
    shapes: Shapes,
}

impl<'l> Builder<'l> {
    fn new(limits: &'l Limits) -> Builder<'l> {
        Builder {
            limits,
            place: Place::Top,
            fatal: None,
            per_image: HashMap::new(),
            cur: Current::default(),
            ids: Vec::new(),
            image_ids: Vec::new(),
            category_ids: Vec::new(),
            boxes: Vec::new(),
            areas: Vec::new(),
            crowd: Vec::new(),
            exact: Vec::new(),
            rle_sizes: Vec::new(),
            problems: Vec::new(),
            shapes: Shapes::new(),
        }
    }

    /// Where the parser is, for a message ("" at the top level).
    fn place(&self) -> String {
        match self.place {
            Place::Top => String::new(),
            Place::Image(i) => format!("image #{i} of `images` (counted from 0)"),
            Place::Category(i) => format!("category #{i} of `categories` (counted from 0)"),
            Place::Annotation(i) => match self.cur.id {
                Some(id) => format!("annotation #{i} of `annotations` (counted from 0), id {id}"),
                None => format!("annotation #{i} of `annotations` (counted from 0)"),
            },
        }
    }

    /// Refuses the file (over a limit): kept for [`parse`], serde is told to stop.
    fn refuse<E: de::Error>(&mut self, e: CocoError) -> E {
        self.fatal = Some(e);
        E::custom("over a limit")
    }

    fn push_coord(&mut self, v: f64) {
        let cur = &mut self.cur;
        cur.numbers += 1;
        // Capped at u32::MAX so that a polygon's length always fits its offsets.
        let max = (2 * u64::from(self.limits.max_polygon_points)).min(u64::from(u32::MAX));
        if cur.numbers > max {
            cur.over = Some(format!(
                "more than {} polygon points (raise Limits::max_polygon_points to accept it)",
                self.limits.max_polygon_points
            ));
            return;
        }
        let coords = &mut self.shapes.coords;
        if !cur.exact {
            if let Some(k) = centi(v) {
                coords.push(k);
                return;
            }
            // The first coordinate hundredths cannot hold: the annotation's others are
            // stored again as f64 (exactly: they are hundredths).
            let start = *self.shapes.coord_first.last().expect("starts at 0") as usize;
            let held: Vec<i32> = coords.drain(start..).collect();
            for k in held {
                push_exact(coords, f64::from(k) / 100.0);
            }
            cur.exact = true;
        }
        push_exact(coords, v);
    }

    /// The end of a polygon of `numbers` coordinates.
    fn end_polygon(&mut self, numbers: u64) {
        let polygon = self.cur.polygon_lens.len();
        let n = usize::try_from(numbers).unwrap_or(usize::MAX);
        if n % 2 == 1 {
            self.cur.problem(ProblemKind::OddPolygon {
                polygon,
                numbers: n,
            });
        } else if n < 6 {
            self.cur.problem(ProblemKind::ShortPolygon {
                polygon,
                points: n / 2,
            });
        }
        // Past the limit nothing more is stored and the file will be refused.
        if self.cur.over.is_none() {
            self.cur.polygon_lens.push(numbers as u32);
        }
    }

    fn push_keypoint(&mut self, v: f64) {
        let n = self.shapes.keypoints.len()
            - *self.shapes.kp_first.last().expect("starts at 0") as usize;
        if n as u64 >= 3 * u64::from(self.limits.max_keypoints) {
            self.cur.over = Some(format!(
                "more than {} keypoints (raise Limits::max_keypoints to accept it)",
                self.limits.max_keypoints
            ));
            return;
        }
        self.shapes.keypoints.push(v as f32);
    }

    fn push_count(&mut self, c: u64) {
        let n = self.shapes.rle_counts.len()
            - *self.shapes.rle_first.last().expect("starts at 0") as usize;
        if n as u64 >= u64::from(self.limits.max_rle_counts) {
            self.cur.over = Some(self.too_many_counts());
            return;
        }
        match u32::try_from(c) {
            Ok(c) => self.shapes.rle_counts.push(c),
            Err(_) => self
                .cur
                .problem(ProblemKind::BadRle(format!("count {n} is {c}, over u32"))),
        }
    }

    fn too_many_counts(&self) -> String {
        format!(
            "more than {} RLE counts (raise Limits::max_rle_counts to accept it)",
            self.limits.max_rle_counts
        )
    }

    fn push_compressed(&mut self, s: &str) {
        let start = *self.shapes.rle_first.last().expect("starts at 0") as usize;
        let room = (self.limits.max_rle_counts as usize)
            .saturating_sub(self.shapes.rle_counts.len() - start);
        match mask::counts_from_string(s.as_bytes(), room, &mut self.shapes.rle_counts) {
            Ok(()) => {}
            Err(BadCounts::TooMany) => self.cur.over = Some(self.too_many_counts()),
            Err(e) => self
                .cur
                .problem(ProblemKind::BadRle(format!("compressed counts: {e}"))),
        }
    }

    /// Files the annotation just read (or refuses the file).
    fn end_annotation<E: de::Error>(&mut self) -> Result<(), E> {
        let cur = std::mem::take(&mut self.cur);
        if let Some(over) = &cur.over {
            let who = match (cur.id, cur.image_id) {
                (Some(id), Some(image)) => format!("annotation id {id} of image {image}"),
                (Some(id), None) => format!("annotation id {id}"),
                (None, _) => "an annotation without `id`".into(),
            };
            return Err(self.refuse(CocoError::TooLarge(format!("{who} has {over}"))));
        }
        let (Some(id), Some(image_id), Some(category_id)) = (cur.id, cur.image_id, cur.category_id)
        else {
            let missing = [
                ("id", cur.id),
                ("image_id", cur.image_id),
                ("category_id", cur.category_id),
            ]
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(" and ");
            self.cur.id = cur.id;
            return Err(E::custom(format!(
                "missing {missing}; every annotation needs id, image_id and category_id"
            )));
        };
        let seen = self.per_image.entry(image_id).or_insert(0);
        *seen += 1;
        if *seen > self.limits.max_annotations_per_image {
            let e = CocoError::TooLarge(format!(
                "image {image_id} has more than {} annotations (annotation id {id} is one \
                 more; raise Limits::max_annotations_per_image to accept it)",
                self.limits.max_annotations_per_image
            ));
            return Err(self.refuse(e));
        }
        let mut problem = cur.problem;
        let bbox = match cur.bbox {
            Some(Ok(b)) => b,
            Some(Err(n)) => {
                problem.get_or_insert(ProblemKind::BoxShape(n));
                [0.0; 4]
            }
            None => {
                problem.get_or_insert(ProblemKind::BoxShape(0));
                [0.0; 4]
            }
        };
        let s = &mut self.shapes;
        let too_many = self.ids.len() >= u32::MAX as usize
            || s.coords.len() > u32::MAX as usize
            || s.coord_first.len() + cur.polygon_lens.len() > u32::MAX as usize
            || s.rle_counts.len() > u32::MAX as usize
            || s.keypoints.len() > u32::MAX as usize;
        if too_many {
            let e = CocoError::TooLarge(
                "over 2^32 annotations, polygon coordinates, polygons, RLE counts or keypoints \
                 in one file (split the file)"
                    .into(),
            );
            return Err(self.refuse(e));
        }
        let mut end = *s.coord_first.last().expect("starts at 0");
        for &len in &cur.polygon_lens {
            end += if cur.exact { 2 * len } else { len };
            s.coord_first.push(end);
        }
        s.poly_first.push(s.coord_first.len() as u32 - 1);
        s.rle_first.push(s.rle_counts.len() as u32);
        s.kp_first.push(s.keypoints.len() as u32);
        if cur.rle && cur.rle_size.is_none() {
            problem.get_or_insert(ProblemKind::BadRle("no `size`".into()));
        }
        self.ids.push(id);
        self.image_ids.push(image_id);
        self.category_ids.push(category_id);
        self.boxes.push(bbox);
        self.areas.push(cur.area.unwrap_or(bbox[2] * bbox[3]));
        self.crowd.push(cur.crowd);
        self.exact.push(cur.exact);
        self.rle_sizes.push(cur.rle_size);
        self.problems.push(problem);
        Ok(())
    }

    /// The checks that need the whole file, then the index in image order.
    fn finish(
        self,
        mut images: Vec<ImageEntry<'_>>,
        mut categories: Vec<CategoryEntry>,
    ) -> Result<(Annotations, Vec<Problem>), CocoError> {
        let limits = self.limits;
        sort_images(&mut images, limits)?;
        categories.sort_unstable_by_key(|c| c.id);
        if let Some(w) = categories.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(CocoError::Format(format!(
                "two categories have id {} ({} and {}); category ids must be unique",
                w[0].id, w[0].name, w[1].name
            )));
        }
        if let Some(c) = categories
            .iter()
            .find(|c| c.keypoints.len() as u64 > u64::from(limits.max_keypoints))
        {
            return Err(CocoError::TooLarge(format!(
                "category {} ({}) names {} keypoints, over the limit of {} (raise \
                 Limits::max_keypoints to accept it)",
                c.id,
                c.name,
                c.keypoints.len(),
                limits.max_keypoints
            )));
        }
        let names_len: usize = images.iter().map(|im| im.file_name.len()).sum();
        if names_len > u32::MAX as usize {
            return Err(CocoError::TooLarge("over 4 GiB of file names".into()));
        }

        let n = self.ids.len();
        let mut problems = Vec::new();
        let mut seen = HashSet::with_capacity(n);
        // Per kept annotation: (image index, annotation index), in the file's order.
        let mut kept: Vec<(u32, u32)> = Vec::with_capacity(n);
        let mut labels = vec![0u32; n];
        for (a, label_of) in labels.iter_mut().enumerate() {
            let (id, image_id) = (self.ids[a], self.image_ids[a]);
            let first = seen.insert(id);
            let problem = (|| {
                let Ok(image) = images.binary_search_by_key(&image_id, |im| im.id) else {
                    return Err(ProblemKind::UnknownImage);
                };
                if !first {
                    return Err(ProblemKind::DuplicateId);
                }
                let category_id = self.category_ids[a];
                let Ok(label) = categories.binary_search_by_key(&category_id, |c| c.id) else {
                    return Err(ProblemKind::UnknownCategory(category_id));
                };
                if let Some(p) = &self.problems[a] {
                    return Err(p.clone());
                }
                let im = &images[image];
                let (h, w) = (im.height as u32, im.width as u32);
                check_box(self.boxes[a], h, w)?;
                if let Some(size) = self.rle_sizes[a] {
                    if size != [u64::from(h), u64::from(w)] {
                        return Err(ProblemKind::RleSize {
                            rle: size,
                            image: [h, w],
                        });
                    }
                    let counts = &self.shapes.rle_counts[range(&self.shapes.rle_first, a)];
                    let covered: u64 = counts.iter().map(|&c| u64::from(c)).sum();
                    let pixels = u64::from(h) * u64::from(w);
                    if covered != pixels {
                        return Err(ProblemKind::RleCoverage { covered, pixels });
                    }
                }
                let kps = &self.shapes.keypoints[range(&self.shapes.kp_first, a)];
                check_keypoints(kps, categories[label].keypoints.len())?;
                *label_of = label as u32;
                Ok(image as u32)
            })();
            match problem {
                Ok(image) => kept.push((image, a as u32)),
                Err(kind) => problems.push(Problem {
                    image_id,
                    annotation_id: id,
                    kind,
                }),
            }
        }
        drop(seen);

        // Counting sort by image, keeping the file's order within an image.
        let mut image_first = vec![0u32; images.len() + 1];
        for &(image, _) in &kept {
            image_first[image as usize + 1] += 1;
        }
        for i in 0..images.len() {
            image_first[i + 1] += image_first[i];
        }
        let mut next = image_first.clone();
        let mut order = vec![0u32; kept.len()];
        for &(image, a) in &kept {
            order[next[image as usize] as usize] = a;
            next[image as usize] += 1;
        }
        drop(kept);

        let pick = |a: &u32| *a as usize;
        let mut names = String::with_capacity(names_len);
        let mut names_first = Vec::with_capacity(images.len() + 1);
        names_first.push(0);
        for im in &images {
            names.push_str(&im.file_name);
            names_first.push(names.len() as u32);
        }
        let index = Annotations {
            image_ids: images.iter().map(|im| im.id).collect(),
            sizes: images
                .iter()
                .map(|im| [im.height as u32, im.width as u32])
                .collect(),
            names,
            names_first,
            image_first,
            categories: categories
                .into_iter()
                .map(|c| Category {
                    id: c.id,
                    name: c.name,
                    keypoints: c.keypoints,
                    skeleton: c.skeleton,
                })
                .collect(),
            ann_ids: order.iter().map(|a| self.ids[pick(a)]).collect(),
            boxes: order
                .iter()
                .map(|a| self.boxes[pick(a)].map(|v| v as f32))
                .collect(),
            areas: order.iter().map(|a| self.areas[pick(a)]).collect(),
            labels: order.iter().map(|a| labels[pick(a)]).collect(),
            flags: order
                .iter()
                .map(|a| {
                    (u8::from(self.crowd[pick(a)]) * CROWD)
                        | (u8::from(self.exact[pick(a)]) * EXACT)
                })
                .collect(),
            shapes: self.shapes.gather(&order),
        };
        Ok((index, problems))
    }
}

/// Checks the images' sizes against `limits` and sorts them by id, refusing two with
/// one id.
pub(crate) fn sort_images(images: &mut [ImageEntry<'_>], limits: &Limits) -> Result<(), CocoError> {
    for im in images.iter() {
        if im.width < 1 || im.height < 1 {
            return Err(CocoError::Format(format!(
                "image {} ({}) is {}x{} (width x height); sizes must be at least 1x1",
                im.id, im.file_name, im.width, im.height
            )));
        }
        if im.width > i64::from(limits.max_image_side)
            || im.height > i64::from(limits.max_image_side)
        {
            return Err(CocoError::TooLarge(format!(
                "image {} ({}) is {}x{} (width x height), over the limit of {} a side \
                 (raise Limits::max_image_side to accept it)",
                im.id, im.file_name, im.width, im.height, limits.max_image_side
            )));
        }
    }
    if let Some(im) = images
        .iter()
        .find(|im| im.width * im.height > i64::from(u32::MAX))
    {
        return Err(CocoError::TooLarge(format!(
            "image {} ({}) is {}x{}: more pixels than COCO's run lengths (u32) can count",
            im.id, im.file_name, im.width, im.height
        )));
    }
    images.sort_unstable_by_key(|im| im.id);
    if let Some(w) = images.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(CocoError::Format(format!(
            "two images have id {} ({} and {}); image ids must be unique",
            w[0].id, w[0].file_name, w[1].file_name
        )));
    }
    Ok(())
}

/// `v` as hundredths of a pixel, if that gives back exactly `v`.
fn centi(v: f64) -> Option<i32> {
    let k = (v * 100.0).round();
    if k.is_nan() || k.abs() > f64::from(i32::MAX) {
        return None;
    }
    let k = k as i32;
    (f64::from(k) / 100.0)
        .to_bits()
        .eq(&v.to_bits())
        .then_some(k)
}

fn push_exact(coords: &mut Vec<i32>, v: f64) {
    let bits = v.to_bits();
    coords.push(bits as u32 as i32);
    coords.push((bits >> 32) as u32 as i32);
}

/// A box must have a size of at least 0 and values finite as `f32`.
pub(crate) fn check_box_size(b: [f64; 4]) -> Result<(), ProblemKind> {
    if b.iter().any(|&v| !(v as f32).is_finite()) || b[2] < 0.0 || b[3] < 0.0 {
        return Err(ProblemKind::BadBox(b));
    }
    Ok(())
}

/// A box must also have a point in common with its image (borders included).
fn check_box(b: [f64; 4], height: u32, width: u32) -> Result<(), ProblemKind> {
    check_box_size(b)?;
    let [x, y, w, h] = b;
    if x > f64::from(width) || y > f64::from(height) || x + w < 0.0 || y + h < 0.0 {
        return Err(ProblemKind::BoxOutside(b));
    }
    Ok(())
}

/// Keypoints must be whole triples, as many as the category names, finite as `f32`.
pub(crate) fn check_keypoints(kps: &[f32], names: usize) -> Result<(), ProblemKind> {
    if kps.is_empty() {
        return Ok(());
    }
    if !kps.len().is_multiple_of(3) {
        return Err(ProblemKind::KeypointsNotTriples(kps.len()));
    }
    if kps.len() / 3 != names {
        return Err(ProblemKind::KeypointsCount {
            got: kps.len() / 3,
            expected: names,
        });
    }
    if kps.iter().any(|v| !v.is_finite()) {
        return Err(ProblemKind::KeypointsNotFinite);
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum TopKey {
    Images,
    Annotations,
    Categories,
    #[serde(other)]
    Other,
}

/// How a kind of COCO file's top-level object is read: its `images` and `categories`
/// returned, its `annotations` streamed into the parser's state. Instances files
/// ([`Builder`]) and panoptic files (`panoptic::Top`) differ in their annotations and
/// categories; [`FileSeed`] reads the object around them for both.
pub(crate) trait TopLevel<'de> {
    /// An entry of `categories`.
    type Category: Deserialize<'de>;
    /// The file, for serde's message when it is not an object.
    const EXPECTING: &'static str;
    /// Why a file without `annotations` is refused (`None`: it may have none).
    const NO_ANNOTATIONS: Option<&'static str>;

    /// Reads the value of `images`.
    fn images<A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<Vec<ImageEntry<'de>>, A::Error>;

    /// Reads the value of `categories`.
    fn categories<A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
    ) -> Result<Vec<Self::Category>, A::Error>;

    /// Streams the value of `annotations` into the state.
    fn annotations<A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error>;

    /// Called after each key's value is read.
    fn after_key(&mut self) {}
}

/// The whole file: `images` and `categories` are returned, `annotations` streamed into
/// the state `T` keeps. A key given twice is refused; so is a file without `images`.
pub(crate) struct FileSeed<'b, T>(pub(crate) &'b mut T);

/// A file's `images` and `categories`.
pub(crate) type Tops<'de, C> = (Vec<ImageEntry<'de>>, Vec<C>);

impl<'de, T: TopLevel<'de>> DeserializeSeed<'de> for FileSeed<'_, T> {
    type Value = Tops<'de, T::Category>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: TopLevel<'de>> Visitor<'de> for FileSeed<'_, T> {
    type Value = Tops<'de, T::Category>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let top = self.0;
        let (mut images, mut categories, mut annotations) = (None, None, false);
        while let Some(key) = map.next_key::<TopKey>()? {
            let repeated = match key {
                TopKey::Images => images.is_some(),
                TopKey::Categories => categories.is_some(),
                TopKey::Annotations => annotations,
                TopKey::Other => false,
            };
            if repeated {
                return Err(de::Error::custom(
                    "a key of the top-level object appears twice",
                ));
            }
            match key {
                TopKey::Images => images = Some(top.images(&mut map)?),
                TopKey::Categories => categories = Some(top.categories(&mut map)?),
                TopKey::Annotations => {
                    top.annotations(&mut map)?;
                    annotations = true;
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            top.after_key();
        }
        let images = images.ok_or_else(|| {
            de::Error::custom(
                "no `images` (a COCO file lists its images: id, file_name, width, height)",
            )
        })?;
        if let (false, Some(why)) = (annotations, T::NO_ANNOTATIONS) {
            return Err(de::Error::custom(why));
        }
        Ok((images, categories.unwrap_or_default()))
    }
}

impl<'de> TopLevel<'de> for Builder<'_> {
    type Category = CategoryEntry;
    const EXPECTING: &'static str =
        "a COCO annotation file (an object with `images`, `annotations`, `categories`)";
    const NO_ANNOTATIONS: Option<&'static str> = None;

    fn images<A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<Vec<ImageEntry<'de>>, A::Error> {
        map.next_value_seed(List::new(self, Place::Image))
    }

    fn categories<A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
    ) -> Result<Vec<CategoryEntry>, A::Error> {
        map.next_value_seed(List::new(self, Place::Category))
    }

    fn annotations<A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error> {
        map.next_value_seed(AnnotationsSeed(self))
    }

    fn after_key(&mut self) {
        self.place = Place::Top;
    }
}

/// A list of `images` or `categories`, keeping count for error messages.
struct List<'b, 'l, T> {
    b: &'b mut Builder<'l>,
    place: fn(usize) -> Place,
    item: PhantomData<T>,
}

impl<'b, 'l, T> List<'b, 'l, T> {
    fn new(b: &'b mut Builder<'l>, place: fn(usize) -> Place) -> Self {
        List {
            b,
            place,
            item: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for List<'_, '_, T> {
    type Value = Vec<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for List<'_, '_, T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Vec<T>, S::Error> {
        let mut items = Vec::new();
        loop {
            self.b.place = (self.place)(items.len());
            match seq.next_element()? {
                Some(item) => items.push(item),
                None => return Ok(items),
            }
        }
    }
}

struct AnnotationsSeed<'b, 'l>(&'b mut Builder<'l>);

impl<'de> DeserializeSeed<'de> for AnnotationsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for AnnotationsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of annotations")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let b = self.0;
        let mut i = 0;
        loop {
            b.place = Place::Annotation(i);
            if seq.next_element_seed(AnnotationSeed(&mut *b))?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum AnnotationKey {
    Id,
    ImageId,
    CategoryId,
    Bbox,
    Area,
    Iscrowd,
    Segmentation,
    Keypoints,
    #[serde(other)]
    Other,
}

struct AnnotationSeed<'b, 'l>(&'b mut Builder<'l>);

impl<'de> DeserializeSeed<'de> for AnnotationSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnnotationSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an annotation (an object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        let mut seen = 0u16;
        while let Some(key) = map.next_key::<AnnotationKey>()? {
            if key != AnnotationKey::Other {
                let bit = 1 << key as u16;
                if seen & bit != 0 {
                    return Err(de::Error::custom("a key of the annotation appears twice"));
                }
                seen |= bit;
            }
            match key {
                AnnotationKey::Id => b.cur.id = Some(map.next_value()?),
                AnnotationKey::ImageId => b.cur.image_id = Some(map.next_value()?),
                AnnotationKey::CategoryId => b.cur.category_id = Some(map.next_value()?),
                AnnotationKey::Area => b.cur.area = Some(map.next_value()?),
                AnnotationKey::Bbox => b.cur.bbox = Some(map.next_value_seed(BoxSeed)?),
                AnnotationKey::Iscrowd => b.cur.crowd = map.next_value_seed(FlagSeed)?,
                AnnotationKey::Segmentation => map.next_value_seed(SegmentationSeed(&mut *b))?,
                AnnotationKey::Keypoints => map.next_value_seed(KeypointsSeed(&mut *b))?,
                AnnotationKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        b.end_annotation()
    }
}

/// `bbox`: 4 numbers, or how many there are.
struct BoxSeed;

impl<'de> DeserializeSeed<'de> for BoxSeed {
    type Value = Result<[f64; 4], usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BoxSeed {
    type Value = Result<[f64; 4], usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a box [x, y, width, height]")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let (mut b, mut n) = ([0.0; 4], 0);
        while let Some(v) = seq.next_element::<f64>()? {
            if n < 4 {
                b[n] = v;
            }
            n += 1;
        }
        Ok(if n == 4 { Ok(b) } else { Err(n) })
    }
}

/// `iscrowd`: 0 or 1 (any non-zero integer, or a boolean).
struct FlagSeed;

impl<'de> DeserializeSeed<'de> for FlagSeed {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FlagSeed {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("0 or 1")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        Ok(v != 0)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        Ok(v != 0)
    }
}

/// `segmentation`: a list of polygons, an RLE object, or null.
struct SegmentationSeed<'b, 'l>(&'b mut Builder<'l>);

impl<'de> DeserializeSeed<'de> for SegmentationSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "lowercase")]
enum RleKey {
    Size,
    Counts,
    #[serde(other)]
    Other,
}

impl<'de> Visitor<'de> for SegmentationSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of polygons or an RLE object ({\"size\": [h, w], \"counts\": ...})")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let b = self.0;
        while seq.next_element_seed(PolygonSeed(&mut *b))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        let (mut size, mut counts) = (false, false);
        while let Some(key) = map.next_key::<RleKey>()? {
            match key {
                RleKey::Size if !size => {
                    size = true;
                    b.cur.rle_size = Some(map.next_value::<[u64; 2]>()?);
                }
                RleKey::Counts if !counts => {
                    counts = true;
                    map.next_value_seed(CountsSeed(&mut *b))?;
                }
                RleKey::Size | RleKey::Counts => {
                    return Err(de::Error::custom("a key of the RLE appears twice"));
                }
                RleKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        b.cur.rle = true;
        if !counts {
            b.cur.problem(ProblemKind::BadRle("no `counts`".into()));
        }
        Ok(())
    }
}

/// One polygon of `segmentation` (or, in a flat list, one number).
struct PolygonSeed<'b, 'l>(&'b mut Builder<'l>);

impl<'de> DeserializeSeed<'de> for PolygonSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PolygonSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a polygon [x1, y1, x2, y2, ...]")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let b = self.0;
        let mut n = 0u64;
        while let Some(v) = seq.next_element::<f64>()? {
            b.push_coord(v);
            n += 1;
        }
        b.end_polygon(n);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.0.cur.problem(ProblemKind::FlatPolygon);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.visit_f64(v as f64)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.visit_f64(v as f64)
    }
}

/// An RLE's `counts`: a list of run lengths or a compressed string.
struct CountsSeed<'b, 'l>(&'b mut Builder<'l>);

impl<'de> DeserializeSeed<'de> for CountsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CountsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RLE counts (a list of integers or a compressed string)")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.push_compressed(s);
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let b = self.0;
        while let Some(c) = seq.next_element::<u64>()? {
            b.push_count(c);
        }
        Ok(())
    }
}

/// `keypoints`: x, y, v, ... (or null).
struct KeypointsSeed<'b, 'l>(&'b mut Builder<'l>);

impl<'de> DeserializeSeed<'de> for KeypointsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeypointsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("keypoints [x1, y1, v1, ...]")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let b = self.0;
        while let Some(v) = seq.next_element::<f64>()? {
            b.push_keypoint(v);
        }
        Ok(())
    }
}
