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
    /// Recorded sound: WAV, FLAC, Ogg Vorbis, MP3.
    Audio,
}

impl Modality {
    /// Every modality.
    pub const ALL: [Modality; 2] = [Modality::Image, Modality::Audio];

    /// File name extensions of this modality's samples (lower case; names are compared
    /// case-insensitively).
    pub fn extensions(self) -> &'static [&'static str] {
        match self {
            Modality::Image => &["jpg", "jpeg", "png"],
            Modality::Audio => &["wav", "flac", "ogg", "oga", "opus", "mp3"],
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
        }
    }

    /// The formats it decodes, for error messages.
    pub fn formats(self) -> &'static str {
        match self {
            Modality::Image => "a JPEG or PNG image",
            Modality::Audio => "a WAV, FLAC, Ogg Vorbis or MP3 file",
        }
    }

    /// A noun for error messages ("images", "audio files").
    pub fn plural(self) -> &'static str {
        match self {
            Modality::Image => "images",
            Modality::Audio => "audio files",
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

    /// `image` or `audio`.
    fn from_str(s: &str) -> std::result::Result<Modality, UnknownName> {
        Modality::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownName::new("modality", s, "\"image\" or \"audio\""))
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
}

impl SampleLayout {
    /// A sample of `shape` elements of `dtype`, native endianness, C order.
    pub fn new(shape: Vec<usize>, dtype: DType) -> SampleLayout {
        SampleLayout {
            shape,
            dtype,
            views: Vec::new(),
        }
    }

    /// A sample made of several views, each of its shape, one after another: its shape
    /// is their elements all together, `[sum of their products]`.
    pub fn of_views(views: Vec<Vec<usize>>, dtype: DType) -> SampleLayout {
        let elements = views.iter().map(|v| v.iter().product::<usize>()).sum();
        SampleLayout {
            shape: vec![elements],
            dtype,
            views,
        }
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
