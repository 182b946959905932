//! The index as bytes and back: a header, then each vector as its length (`u64`) and
//! its elements, little-endian. Reading checks every length against the bytes left
//! before allocating, then every offset and invariant the views rely on, so hostile
//! bytes give an error, never a panic or a large allocation.

use crate::index::{range, Annotations, Category, Shapes, CROWD, EXACT};
use crate::parse::{check_box_size, check_keypoints};
use crate::{CocoError, Limits};

const MAGIC: &[u8; 4] = b"NSCO";
const VERSION: u8 = 1;

/// A fixed-size little-endian element of a vector.
pub(crate) trait Element: Sized {
    const SIZE: usize;
    fn put(&self, out: &mut Vec<u8>);
    /// From exactly `SIZE` bytes.
    fn get(b: &[u8]) -> Self;
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("SIZE bytes"))
            }
        }
    )*};
}

element!(u8, u32, i32, u64, f32, f64);

impl<T: Element + Copy + Default, const N: usize> Element for [T; N] {
    const SIZE: usize = T::SIZE * N;
    fn put(&self, out: &mut Vec<u8>) {
        for v in self {
            v.put(out);
        }
    }
    fn get(b: &[u8]) -> Self {
        let mut a = [T::default(); N];
        for (v, chunk) in a.iter_mut().zip(b.chunks_exact(T::SIZE)) {
            *v = T::get(chunk);
        }
        a
    }
}

pub(crate) fn put<T: Element>(out: &mut Vec<u8>, items: &[T]) {
    out.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for v in items {
        v.put(out);
    }
}

pub(crate) fn corrupt(why: impl std::fmt::Display) -> CocoError {
    CocoError::Corrupt(format!(
        "{why} (the bytes were not written by `to_bytes` of this version, or \
         were damaged: index the JSON again)"
    ))
}

/// The bytes not read yet.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    /// The record in `bytes` after its header, `magic` then `version`: another magic is
    /// not `what`, another version an index this code does not read.
    pub(crate) fn after_header(
        bytes: &'a [u8],
        magic: &[u8; 4],
        version: u8,
        what: &str,
    ) -> Result<Reader<'a>, CocoError> {
        let mut r = Reader(bytes);
        if r.take(4)? != magic {
            return Err(corrupt(format!("not {what}")));
        }
        if r.take(1)?[0] != version {
            return Err(corrupt("another version of the index"));
        }
        Ok(r)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CocoError> {
        if self.0.len() < n {
            return Err(corrupt("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    pub(crate) fn len(&mut self) -> Result<usize, CocoError> {
        let n = u64::get(self.take(8)?);
        usize::try_from(n).map_err(|_| corrupt("truncated"))
    }

    pub(crate) fn vec<T: Element>(&mut self) -> Result<Vec<T>, CocoError> {
        let n = self.len()?;
        // The length is checked against the bytes left before anything is allocated.
        let bytes = n.checked_mul(T::SIZE).ok_or_else(|| corrupt("truncated"))?;
        Ok(self
            .take(bytes)?
            .chunks_exact(T::SIZE)
            .map(T::get)
            .collect())
    }

    pub(crate) fn string(&mut self) -> Result<String, CocoError> {
        String::from_utf8(self.vec::<u8>()?).map_err(|_| corrupt("a name is not UTF-8"))
    }
}

impl Annotations {
    /// The index as bytes, for [`Annotations::from_bytes`]: a versioned little-endian
    /// record of its vectors (about the size of the vectors themselves).
    pub fn to_bytes(&self) -> Vec<u8> {
        let s = &self.shapes;
        let mut out = Vec::with_capacity(
            64 + self.names.len()
                + 8 * self.image_ids.len()
                + 40 * self.ann_ids.len()
                + 4 * (s.coords.len() + s.rle_counts.len() + s.keypoints.len()),
        );
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        put(&mut out, &self.image_ids);
        put(&mut out, &self.sizes);
        put(&mut out, self.names.as_bytes());
        put(&mut out, &self.names_first);
        put(&mut out, &self.image_first);
        out.extend_from_slice(&(self.categories.len() as u64).to_le_bytes());
        for c in &self.categories {
            c.id.put(&mut out);
            put(&mut out, c.name.as_bytes());
            out.extend_from_slice(&(c.keypoints.len() as u64).to_le_bytes());
            for k in &c.keypoints {
                put(&mut out, k.as_bytes());
            }
            put(&mut out, &c.skeleton);
        }
        put(&mut out, &self.ann_ids);
        put(&mut out, &self.boxes);
        put(&mut out, &self.areas);
        put(&mut out, &self.labels);
        put(&mut out, &self.flags);
        put(&mut out, &s.poly_first);
        put(&mut out, &s.coord_first);
        put(&mut out, &s.coords);
        put(&mut out, &s.rle_first);
        put(&mut out, &s.rle_counts);
        put(&mut out, &s.kp_first);
        put(&mut out, &s.keypoints);
        out
    }

    /// Restores an index written by [`Annotations::to_bytes`], checking it against
    /// `limits`. Another version, a truncated or overlong record, or vectors that do not
    /// fit together are [`CocoError::Corrupt`]; sizes over the limits are
    /// [`CocoError::TooLarge`].
    pub fn from_bytes(bytes: &[u8], limits: &Limits) -> Result<Annotations, CocoError> {
        let mut r = Reader::after_header(bytes, MAGIC, VERSION, "a COCO index")?;
        let image_ids = r.vec()?;
        let sizes = r.vec()?;
        let names = r.string()?;
        let names_first = r.vec()?;
        let image_first = r.vec()?;
        let n = r.len()?;
        // Each category takes at least 32 bytes: no more can be listed than fit.
        if n > r.0.len() / 32 {
            return Err(corrupt("truncated"));
        }
        let mut categories = Vec::with_capacity(n);
        for _ in 0..n {
            let id = u64::get(r.take(8)?);
            let name = r.string()?;
            let k = r.len()?;
            if k > r.0.len() / 8 {
                return Err(corrupt("truncated"));
            }
            let keypoints = (0..k).map(|_| r.string()).collect::<Result<_, _>>()?;
            let skeleton = r.vec()?;
            categories.push(Category {
                id,
                name,
                keypoints,
                skeleton,
            });
        }
        let index = Annotations {
            image_ids,
            sizes,
            names,
            names_first,
            image_first,
            categories,
            ann_ids: r.vec()?,
            boxes: r.vec()?,
            areas: r.vec()?,
            labels: r.vec()?,
            flags: r.vec()?,
            shapes: Shapes {
                poly_first: r.vec()?,
                coord_first: r.vec()?,
                coords: r.vec()?,
                rle_first: r.vec()?,
                rle_counts: r.vec()?,
                kp_first: r.vec()?,
                keypoints: r.vec()?,
            },
        };
        if !r.0.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        validate(&index, limits)?;
        Ok(index)
    }
}

/// A vector of starts: one more than `n`, from 0, never decreasing, ending at `total`.
pub(crate) fn check_starts(
    first: &[u32],
    n: usize,
    total: usize,
    what: &str,
) -> Result<(), CocoError> {
    let fits = first.len() == n + 1
        && first[0] == 0
        && first.windows(2).all(|w| w[0] <= w[1])
        && first[n] as usize == total;
    if !fits {
        return Err(corrupt(format!("the offsets of {what} do not fit")));
    }
    Ok(())
}

/// Everything the views rely on, and the limits.
fn validate(x: &Annotations, limits: &Limits) -> Result<(), CocoError> {
    let too_large = |what: String| Err(CocoError::TooLarge(format!("index: {what}")));
    let images = x.image_ids.len();
    let count = x.ann_ids.len();
    let s = &x.shapes;
    if x.sizes.len() != images {
        return Err(corrupt("image sizes do not fit the images"));
    }
    if !x.image_ids.windows(2).all(|w| w[0] < w[1]) {
        return Err(corrupt("image ids are not in order"));
    }
    check_starts(&x.names_first, images, x.names.len(), "file names")?;
    if !x
        .names_first
        .iter()
        .all(|&i| x.names.is_char_boundary(i as usize))
    {
        return Err(corrupt("a file name is cut inside a character"));
    }
    let side = limits.max_image_side;
    if let Some([h, w]) = x.sizes.iter().find(|[h, w]| *h > side || *w > side) {
        return too_large(format!(
            "an image is {w}x{h}, over the limit of {side} a side"
        ));
    }
    if x.sizes.iter().any(|&[h, w]| h == 0 || w == 0) {
        return Err(corrupt("an image has no pixels"));
    }
    if x.sizes
        .iter()
        .any(|&[h, w]| u64::from(h) * u64::from(w) > u64::from(u32::MAX))
    {
        return too_large("an image has more pixels than COCO's run lengths can count".into());
    }
    check_starts(&x.image_first, images, count, "images' annotations")?;
    if (0..images)
        .any(|i| range(&x.image_first, i).len() > limits.max_annotations_per_image as usize)
    {
        return too_large(format!(
            "an image has more than {} annotations",
            limits.max_annotations_per_image
        ));
    }
    if !x.categories.windows(2).all(|w| w[0].id < w[1].id) {
        return Err(corrupt("category ids are not in order"));
    }
    if x.categories
        .iter()
        .any(|c| c.keypoints.len() > limits.max_keypoints as usize)
    {
        return too_large(format!(
            "a category names more than {} keypoints",
            limits.max_keypoints
        ));
    }
    let lengths = [x.boxes.len(), x.areas.len(), x.labels.len(), x.flags.len()];
    if lengths.iter().any(|&l| l != count) {
        return Err(corrupt("annotation vectors of different lengths"));
    }
    if x.labels.iter().any(|&l| l as usize >= x.categories.len()) {
        return Err(corrupt("a label has no category"));
    }
    if x.flags.iter().any(|&f| f & !(CROWD | EXACT) != 0) {
        return Err(corrupt("unknown annotation flags"));
    }
    if x.boxes
        .iter()
        .any(|&b| check_box_size(b.map(f64::from)).is_err())
    {
        return Err(corrupt("a box has a negative or infinite size"));
    }
    check_starts(
        &s.poly_first,
        count,
        s.coord_first.len().saturating_sub(1),
        "polygons",
    )?;
    check_starts(
        &s.coord_first,
        s.coord_first.len().saturating_sub(1),
        s.coords.len(),
        "polygon coordinates",
    )?;
    check_starts(&s.rle_first, count, s.rle_counts.len(), "RLE counts")?;
    check_starts(&s.kp_first, count, s.keypoints.len(), "keypoints")?;
    for image in 0..images {
        let [h, w] = x.sizes[image];
        for a in range(&x.image_first, image) {
            let polygons = range(&s.poly_first, a);
            let rle = &s.rle_counts[range(&s.rle_first, a)];
            if !polygons.is_empty() && !rle.is_empty() {
                return Err(corrupt(format!(
                    "annotation {} has polygons and an RLE",
                    x.ann_ids[a]
                )));
            }
            let exact = x.flags[a] & EXACT != 0;
            let mut points = 0;
            for p in polygons {
                let slots = range(&s.coord_first, p).len();
                let numbers = if exact { slots / 2 } else { slots };
                if (exact && slots % 2 == 1) || numbers % 2 == 1 || numbers < 6 {
                    return Err(corrupt(format!(
                        "annotation {} has a bad polygon",
                        x.ann_ids[a]
                    )));
                }
                points += numbers / 2;
            }
            if points > limits.max_polygon_points as usize {
                return too_large(format!(
                    "annotation {} has more than {} polygon points",
                    x.ann_ids[a], limits.max_polygon_points
                ));
            }
            if rle.len() > limits.max_rle_counts as usize {
                return too_large(format!(
                    "annotation {} has more than {} RLE counts",
                    x.ann_ids[a], limits.max_rle_counts
                ));
            }
            if !rle.is_empty() && crate::mask::check_coverage(rle, h, w).is_err() {
                return Err(corrupt(format!(
                    "annotation {}'s RLE does not cover its image",
                    x.ann_ids[a]
                )));
            }
            let kps = &s.keypoints[range(&s.kp_first, a)];
            let names = x.categories[x.labels[a] as usize].keypoints.len();
            if check_keypoints(kps, names).is_err() {
                return Err(corrupt(format!(
                    "annotation {} has bad keypoints",
                    x.ann_ids[a]
                )));
            }
        }
    }
    Ok(())
}
