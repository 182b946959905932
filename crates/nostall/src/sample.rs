//! What a sample is, for every other module to name: its id in the catalog, its modality
//! (which files are samples, and how errors speak of them), and its layout in a batch
//! (shape and element type).
//!
//! This module depends on nothing else of the engine, so that the catalog, the errors
//! and prep can all use it without importing each other.

/// Identifies a sample: its index in the catalog, `0..len`.
pub type SampleId = u64;

/// A kind of data, with the files it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Modality {
    /// Photographs: JPEG and PNG.
    #[default]
    Image,
    /// Recorded sound: WAV, FLAC, Ogg Vorbis, Ogg Opus, MP3.
    Audio,
    /// Filmed video: MP4, MOV, MKV, WebM, AVI (H.264, HEVC, VP9, AV1, MPEG-4 Part 2).
    Video,
}

impl Modality {
    /// Every modality.
    pub const ALL: [Modality; 3] = [Modality::Image, Modality::Audio, Modality::Video];

    /// File name extensions of this modality's samples (lower case; names are compared
    /// case-insensitively).
    pub fn extensions(self) -> &'static [&'static str] {
        match self {
            Modality::Image => &["jpg", "jpeg", "png"],
            Modality::Audio => &["wav", "flac", "ogg", "oga", "opus", "mp3"],
            Modality::Video => &["mp4", "m4v", "mov", "mkv", "webm", "avi"],
        }
    }

    /// Whether a file named `name` holds a sample of this modality, by its extension.
    pub fn accepts(self, name: &str) -> bool {
        name.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty()
                && self
                    .extensions()
                    .iter()
                    .any(|known| ext.eq_ignore_ascii_case(known))
        })
    }

    /// The modality's name, as [`Modality::from_str`](std::str::FromStr) reads it.
    pub fn name(self) -> &'static str {
        match self {
            Modality::Image => "image",
            Modality::Audio => "audio",
            Modality::Video => "video",
        }
    }

    /// The formats it decodes, for error messages.
    pub fn formats(self) -> &'static str {
        match self {
            Modality::Image => "a JPEG or PNG image",
            Modality::Audio => "a WAV, FLAC, Ogg Vorbis, Ogg Opus or MP3 file",
            Modality::Video => "an MP4, MOV, MKV, WebM or AVI video",
        }
    }

    /// A noun for error messages ("images", "audio files").
    pub fn plural(self) -> &'static str {
        match self {
            Modality::Image => "images",
            Modality::Audio => "audio files",
            Modality::Video => "videos",
        }
    }
}

impl std::fmt::Display for Modality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Modality {
    type Err = UnknownName;

    /// `image`, `audio` or `video`.
    fn from_str(s: &str) -> std::result::Result<Modality, UnknownName> {
        Modality::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownName::new("modality", s, "\"image\", \"audio\" or \"video\""))
    }
}

/// A name a parse of this module's types does not know (a modality's, an element
/// type's): what it names, the name, and the names to use instead. A
/// [`crate::Error::Config`] where a loader's settings give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What the name names ("modality", "output dtype").
    pub kind: &'static str,
    /// The name given.
    pub name: String,
    /// The names known, in words.
    pub known: &'static str,
}

impl UnknownName {
    fn new(kind: &'static str, name: &str, known: &'static str) -> UnknownName {
        UnknownName {
            kind,
            name: name.to_string(),
            known,
        }
    }
}

impl std::fmt::Display for UnknownName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown {} {:?}: use {}",
            self.kind, self.name, self.known
        )
    }
}

impl std::error::Error for UnknownName {}

/// Element type of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DType {
    /// Bytes, 0–255 (normalise on the GPU).
    U8,
    /// 32-bit floats: [0, 1], or normalised when the pipeline has `Normalize`.
    #[default]
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F32 => 4,
        }
    }
}

impl std::str::FromStr for DType {
    type Err = UnknownName;

    /// `float32` (or `f32`), `uint8` (or `u8`): NumPy's and Rust's names.
    fn from_str(s: &str) -> std::result::Result<DType, UnknownName> {
        match s {
            "float32" | "f32" => Ok(DType::F32),
            "uint8" | "u8" => Ok(DType::U8),
            _ => Err(UnknownName::new(
                "output dtype",
                s,
                "\"float32\" or \"uint8\"",
            )),
        }
    }
}

/// NumPy's name: `float32` or `uint8` (what its `FromStr` reads).
impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DType::F32 => "float32",
            DType::U8 => "uint8",
        })
    }
}

/// The shape and element type of one prepared sample: a batch is `[len, ...shape]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleLayout {
    shape: Vec<usize>,
    dtype: DType,
    views: Vec<Vec<usize>>,
    /// Each view's image height and width, beside `views`.
    view_images: Vec<Option<(usize, usize)>>,
    parts: Vec<Part>,
    /// The image's height and width, where the sample is one image.
    image: Option<(usize, usize)>,
}

/// One named field of a record's slot ([`SampleLayout::of_record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The field's name, as the batch's dictionary keys it.
    pub name: String,
    /// Where it starts in the slot, in bytes (a multiple of 8).
    pub offset: usize,
    /// What it holds.
    pub form: PartForm,
}

/// What one field of a record holds in its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartForm {
    /// A tensor: `shape` elements of `dtype` (an image or audio pipeline's output).
    Tensor {
        /// Its dimensions.
        shape: Vec<usize>,
        /// Its element type.
        dtype: DType,
    },
    /// Token ids then their attention mask, `2 × length` native-endian `i64`.
    Tokens {
        /// Ids a text.
        length: usize,
    },
    /// Bytes of varying length: a little-endian `u32` length, then up to `capacity`
    /// bytes (zeros after the length).
    Var {
        /// The most bytes it holds.
        capacity: usize,
        /// What the bytes are.
        content: Content,
    },
    /// The sample's label (the batch's labels): no bytes in the slot.
    Label,
    /// A vector of `length` native-endian `f32` (an embedding, a float feature).
    Floats {
        /// Its elements.
        length: usize,
    },
    /// Named arrays of native-endian `f32`, one after another, each of its shape's
    /// elements in C order (an `.npz` archive's).
    Arrays {
        /// Each array's name and shape, in order.
        arrays: Vec<(String, Vec<usize>)>,
    },
    /// A detection sample's boxes: their count (`i64`), the image's height and width
    /// (`i64` each), `capacity` boxes of four `f32`,
    /// then `capacity` labels (`i64`), all native-endian, then where asked each of
    /// `anchors` default boxes' class (`i64`) and regression target (four `f32`), each
    /// box's `keypoints` (x, y, visibility: three `f32` each) and each box's mask; zeros
    /// past the count.
    Boxes {
        /// The most boxes it holds.
        capacity: usize,
        /// Keypoints a box (0: none).
        keypoints: usize,
        /// Default boxes its boxes are encoded against (0: none).
        anchors: usize,
        /// The boxes' instance masks, `capacity` of them after the keypoints.
        masks: Option<MaskForm>,
    },
    /// One form a view of the sample (a field that follows each view of a list of
    /// pipelines: the views' images, each view's boxes), each at its offset in the part.
    Views {
        /// Each view's offset in the part (bytes) and form, in the views' order.
        views: Vec<(usize, PartForm)>,
    },
}

/// How a boxes field holds its instance masks: each `height` rows of `row_bytes`, a byte
/// a pixel (0 or 1) or, packed, a bit a pixel (the leftmost pixel the highest bit of its
/// byte, as NumPy's `packbits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskForm {
    /// Rows of a mask: the image's height.
    pub height: usize,
    /// Pixels a row: the image's width.
    pub width: usize,
    /// Whether a pixel is a bit.
    pub packed: bool,
}

impl MaskForm {
    /// Bytes of a mask's row.
    pub fn row_bytes(&self) -> usize {
        match self.packed {
            true => self.width.div_ceil(8),
            false => self.width,
        }
    }

    /// Bytes of one mask.
    pub fn bytes(&self) -> usize {
        self.height.saturating_mul(self.row_bytes())
    }
}

/// What the bytes of a [`PartForm::Var`] field are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// UTF-8 text.
    Text,
    /// A JSON document (UTF-8, checked, nested at most 128 deep).
    Json,
    /// Bytes as they are.
    Bytes,
}

impl PartForm {
    /// Bytes it takes in a slot.
    pub fn bytes(&self) -> usize {
        match self {
            // Saturating: a size past memory is refused by the batch's bound, not wrapped.
            PartForm::Tensor { shape, dtype } => shape
                .iter()
                .fold(dtype.size(), |bytes, &d| bytes.saturating_mul(d)),
            PartForm::Tokens { length } => length.saturating_mul(16),
            PartForm::Var { capacity, .. } => capacity.saturating_add(4),
            PartForm::Label => 0,
            PartForm::Floats { length } => length.saturating_mul(4),
            PartForm::Arrays { arrays } => arrays.iter().fold(0, |bytes, (_, shape)| {
                let array = shape.iter().fold(4, |n: usize, &d| n.saturating_mul(d));
                bytes.saturating_add(array)
            }),
            PartForm::Boxes {
                capacity,
                keypoints,
                anchors,
                masks,
            } => {
                let per_box = keypoints
                    .saturating_mul(12)
                    .saturating_add(24)
                    .saturating_add(masks.map_or(0, |m| m.bytes()));
                capacity
                    .saturating_mul(per_box)
                    .saturating_add(anchors.saturating_mul(24))
                    .saturating_add(24)
            }
            PartForm::Views { views } => views
                .last()
                .map_or(0, |(at, form)| at.saturating_add(form.bytes())),
        }
    }

    /// The forms of a field's views one after another, each at a multiple of `align`
    /// bytes: 1 for the images a list of pipelines writes back to back, 8 for targets,
    /// whose `i64`s are aligned as a record's fields are.
    pub fn of_views(forms: Vec<PartForm>, align: usize) -> PartForm {
        let mut at = 0usize;
        let views = forms
            .into_iter()
            .map(|form| {
                // Saturating: a size past memory is refused by the batch's bound.
                let start = at.checked_next_multiple_of(align).unwrap_or(usize::MAX);
                at = start.saturating_add(form.bytes());
                (start, form)
            })
            .collect();
        PartForm::Views { views }
    }
}

impl SampleLayout {
    /// A sample of `shape` elements of `dtype`, native endianness, C order.
    pub fn new(shape: Vec<usize>, dtype: DType) -> SampleLayout {
        SampleLayout {
            shape,
            dtype,
            views: Vec::new(),
            view_images: Vec::new(),
            parts: Vec::new(),
            image: None,
        }
    }

    /// It, saying that the sample is an image of `height` × `width` pixels (what a
    /// field following the image's geometry sizes its masks by).
    pub fn with_image(self, height: usize, width: usize) -> SampleLayout {
        SampleLayout {
            image: Some((height, width)),
            ..self
        }
    }

    /// The image's height and width, where the sample is one image.
    pub fn image(&self) -> Option<(usize, usize)> {
        self.image
    }

    /// A record: named fields one after another in each sample's slot, each starting at a
    /// multiple of 8 bytes (so that an `i64` field of a batch is aligned), the slot a
    /// multiple of 8 bytes too. Its shape is `[bytes]` of `uint8`; [`SampleLayout::parts`]
    /// says where each field lies.
    pub fn of_record(fields: Vec<(String, PartForm)>) -> SampleLayout {
        let mut at = 0;
        let parts = fields
            .into_iter()
            .map(|(name, form)| {
                let part = Part {
                    name,
                    offset: at,
                    form,
                };
                let size = part.form.bytes();
                at = at.saturating_add(size.checked_next_multiple_of(8).unwrap_or(size));
                part
            })
            .collect();
        SampleLayout {
            shape: vec![at],
            dtype: DType::U8,
            views: Vec::new(),
            view_images: Vec::new(),
            parts,
            image: None,
        }
    }

    /// Where the sample's tensor lies in its slot, with its shape and element type: the
    /// whole slot, or a record's tensor field (`None` for a record without one).
    pub fn tensor(&self) -> Option<(std::ops::Range<usize>, &[usize], DType)> {
        if self.parts.is_empty() {
            return Some((0..self.bytes(), &self.shape, self.dtype));
        }
        self.parts.iter().find_map(|p| match &p.form {
            PartForm::Tensor { shape, dtype } => Some((
                p.offset..p.offset + p.form.bytes(),
                shape.as_slice(),
                *dtype,
            )),
            _ => None,
        })
    }

    /// The fields of a record ([`SampleLayout::of_record`]); empty for a sample of one
    /// tensor.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// A sample made of several views, each of its layout (a shape of `dtype`, an image's
    /// size), one after another: its shape is their elements all together, `[sum of their
    /// products]`.
    pub fn of_views(views: &[SampleLayout], dtype: DType) -> SampleLayout {
        let elements = views
            .iter()
            .map(|v| v.shape.iter().product::<usize>())
            .sum();
        SampleLayout {
            shape: vec![elements],
            dtype,
            views: views.iter().map(|v| v.shape.clone()).collect(),
            view_images: views.iter().map(|v| v.image).collect(),
            parts: Vec::new(),
            image: None,
        }
    }

    /// Each view's layout, with its image's size where the views are images ([`Self::of_views`]);
    /// empty for a sample of one part.
    pub fn view_layouts(&self) -> Vec<SampleLayout> {
        self.views
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let view = SampleLayout::new(shape.clone(), self.dtype);
                SampleLayout {
                    image: self.view_images.get(i).copied().flatten(),
                    ..view
                }
            })
            .collect()
    }

    /// The shapes of the views a sample is made of, in order; empty for a sample of one
    /// part (of [`SampleLayout::shape`]).
    pub fn views(&self) -> &[Vec<usize>] {
        &self.views
    }

    /// The sample's dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of one sample (of a layout a loader accepted: see
    /// [`SampleLayout::checked_bytes`]).
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }

    /// Bytes of one sample, `None` where they overflow a `usize`.
    pub fn checked_bytes(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(self.dtype.size(), |bytes, &d| bytes.checked_mul(d))
    }
}
