//! Samples with named fields: an image (or a recording) with its caption, its metadata,
//! its label, read together and prepared in the engine.
//!
//! A loader given [`Fields`] ([`LoaderBuilder::fields`](crate::pipeline::LoaderBuilder::fields))
//! reads each sample as a *record*: in WebDataset shards, the run of its key's members
//! (`000123.jpg`, `000123.txt`, `000123.json`), one ranged read from the shard
//! ([`TarShards::records_from_listing`](crate::storage::TarShards::records_from_listing)).
//! Each [`Field`] names the members it is read from by extension, as webdataset's keys do,
//! and how it is prepared ([`FieldKind`]): through the loader's pipeline (the one field
//! of the loader's modality), tokenized, checked as text or JSON, or kept as bytes; or it
//! is the sample's label (its `.cls` member, read when the shards are indexed).
//!
//! Prepared, a record is one slot of the batch buffer like any sample, its fields one
//! after another ([`SampleLayout::of_record`]): the batch stays one buffer that the
//! pipeline moves, orders and compacts without knowing what it holds, and each field of
//! a batch is a view of it. Variable-length fields (text, JSON, bytes) are bounded by
//! their `max_bytes` and stored with their length. A field that is missing, or that is
//! not what its kind says (bad UTF-8, JSON nested past 128 levels, a text longer than
//! its field), is the sample's [`Cause`](crate::Cause) naming the field, skipped or raised
//! as the error policy says; the image field keeps the sample's own generator, so the
//! pixels are those of a loader without fields.
//!
//! A member's size is compared with its field's bound before anything of it is read
//! (`max_bytes`, a tokenizer's `max_bytes`, the most bytes a vector's `length` numbers
//! take): JSON, bytes and tokens over it are `too-large`, text `bad-text`, a vector
//! `bad-vector`. What reads a member then (UTF-8, a JSON document's grammar and depth, a
//! vector's numbers) walks it once and allocates nothing sized by it: a hostile member
//! costs the bytes the record holds, never a multiple of them.
//!
//! Adding a kind of field is a variant of [`FieldKind`], its slot form in
//! [`FieldKind::form`] and its preparation in `record.rs`.

mod fuzz;
mod json;
mod portable;
mod record;
#[cfg(test)]
mod tests;
mod vector;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sample::{Content, Modality, PartForm, SampleLayout};

#[doc(hidden)]
pub use fuzz::prepare_for_fuzzing;
pub use portable::PortableFields;
pub use record::RecordPrep;

#[cfg(feature = "tokenize")]
use crate::prep::tokens::Tokenizer;

/// The most bytes a variable-length field may be given ([`FieldKind::Text`]'s
/// `max_bytes`…): every sample of a batch reserves that much for it.
pub const MAX_FIELD_BYTES: usize = 16 << 20;

/// The most elements a vector field ([`FieldKind::Vector`]) may hold.
pub const MAX_VECTOR: usize = 1 << 20;

/// `max_bytes` of a text, JSON or bytes field unless set: 16 KiB, beyond a caption or a
/// metadata record, small enough that a batch's reserve stays small.
pub const DEFAULT_FIELD_BYTES: usize = 16 << 10;

/// How a field is prepared.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum FieldKind {
    /// The loader's pipeline (an image's or a recording's): the record's one field of the
    /// loader's modality.
    Sample,
    /// The sample's label: the `.cls` member, read when the shards are indexed.
    Label,
    /// UTF-8 text of at most `max_bytes` bytes.
    Text {
        /// The longest text the field holds.
        max_bytes: usize,
    },
    /// A JSON document (UTF-8, nested at most 128 deep) of at most `max_bytes` bytes;
    /// with `keys`, an object holding each of them.
    Json {
        /// The longest document the field holds.
        max_bytes: usize,
        /// Keys the document must have (chosen by the consumer); empty: any document.
        keys: Vec<String>,
    },
    /// Bytes as they are, at most `max_bytes`.
    Bytes {
        /// The most bytes the field holds.
        max_bytes: usize,
    },
    /// UTF-8 text tokenized: `input_ids` and `attention_mask` of the tokenizer's length.
    #[cfg(feature = "tokenize")]
    Tokens(Arc<Tokenizer>),
    /// A vector of `length` numbers as `float32`: a NumPy `.npy` array (`float16/32/64`,
    /// `int8/16/32/64`, `uint8`, little-endian, any shape of `length` elements) or a JSON
    /// array of numbers. A member larger than either form of `length` numbers can be
    /// (64 bytes a number and 64 KiB besides) is refused unread.
    Vector {
        /// Its elements: a member of another count is the sample's error.
        length: usize,
    },
}

impl FieldKind {
    /// The kind webdataset's decoders give a member of extension `ext`: the loader's
    /// modality's own (`jpg`, `wav`…, or its name: a manifest's `audio`) through its
    /// pipeline, `cls` (or a manifest's `label`) the label, `txt`, `text` (and the
    /// usual names of text columns: `caption`, `transcript`, `sentence`) text, `json`
    /// JSON, anything else bytes.
    pub fn for_extension(ext: &str, modality: Modality) -> FieldKind {
        let ext = ext.to_ascii_lowercase();
        if ext == modality.name() || modality.accepts(&format!("x.{ext}")) {
            return FieldKind::Sample;
        }
        let max_bytes = DEFAULT_FIELD_BYTES;
        match ext.as_str() {
            "cls" | "label" => FieldKind::Label,
            "txt" | "text" | "caption" | "transcript" | "sentence" => FieldKind::Text { max_bytes },
            "json" => FieldKind::Json {
                max_bytes,
                keys: Vec::new(),
            },
            _ => FieldKind::Bytes { max_bytes },
        }
    }

    /// Its form in a slot, given the layout of the loader's pipeline.
    fn form(&self, sample: &SampleLayout) -> PartForm {
        let var = |capacity, content| PartForm::Var { capacity, content };
        match self {
            FieldKind::Sample => PartForm::Tensor {
                shape: sample.shape().to_vec(),
                dtype: sample.dtype(),
            },
            FieldKind::Label => PartForm::Label,
            FieldKind::Text { max_bytes } => var(*max_bytes, Content::Text),
            FieldKind::Json { max_bytes, .. } => var(*max_bytes, Content::Json),
            FieldKind::Bytes { max_bytes } => var(*max_bytes, Content::Bytes),
            #[cfg(feature = "tokenize")]
            FieldKind::Tokens(tokenizer) => PartForm::Tokens {
                length: tokenizer.length(),
            },
            FieldKind::Vector { length } => PartForm::Floats { length: *length },
        }
    }

    /// What changes the field's output, for the loader's fingerprint.
    fn fingerprint(&self) -> String {
        match self {
            FieldKind::Sample => "sample".into(),
            FieldKind::Label => "label".into(),
            FieldKind::Text { max_bytes } => format!("text {max_bytes}"),
            FieldKind::Json { max_bytes, keys } => format!("json {max_bytes} {keys:?}"),
            FieldKind::Bytes { max_bytes } => format!("bytes {max_bytes}"),
            #[cfg(feature = "tokenize")]
            FieldKind::Tokens(tokenizer) => tokenizer.fingerprint(),
            FieldKind::Vector { length } => format!("vector {length}"),
        }
    }

    fn max_bytes(&self) -> Option<usize> {
        match self {
            FieldKind::Text { max_bytes }
            | FieldKind::Json { max_bytes, .. }
            | FieldKind::Bytes { max_bytes } => Some(*max_bytes),
            _ => None,
        }
    }
}

/// One named field of a sample.
#[derive(Debug, Clone)]
pub struct Field {
    /// Its name: the key of the batch's dictionary.
    pub name: String,
    /// The extensions of the members it is read from, in order of preference (`jpg`,
    /// `png`): the first the record has is read.
    pub members: Vec<String>,
    /// How it is prepared.
    pub kind: FieldKind,
}

impl Field {
    /// The field `name` read from `members` (extensions, as in webdataset's `"jpg;png"`),
    /// of the kind its first extension implies ([`FieldKind::for_extension`]).
    ///
    /// # Errors
    ///
    /// When `members` names no extension.
    pub fn new(name: &str, members: &str, modality: Modality) -> Result<Field> {
        let members = parse_members(name, members)?;
        let kind = FieldKind::for_extension(&members[0], modality);
        Ok(Field {
            name: name.to_string(),
            members,
            kind,
        })
    }

    /// The same field, prepared as `kind`.
    pub fn with_kind(self, kind: FieldKind) -> Field {
        Field { kind, ..self }
    }
}

/// The longest member name (an extension, a column's name): a record's frame writes it
/// in a byte.
const MAX_MEMBER_NAME: usize = 255;

/// The extensions of `"jpg;png"`, lower case.
fn parse_members(name: &str, members: &str) -> Result<Vec<String>> {
    let list: Vec<String> = members
        .split(';')
        .map(|m| m.trim().trim_start_matches('.').to_ascii_lowercase())
        .collect();
    if let Some(long) = list.iter().find(|m| m.len() > MAX_MEMBER_NAME) {
        return Err(Error::Config(format!(
            "field {name:?}: a member's name of {} bytes (at most {MAX_MEMBER_NAME})",
            long.len()
        )));
    }
    if list.iter().any(String::is_empty) {
        return Err(Error::Config(format!(
            "field {name:?} is read from {members:?}: give the members' extensions, such as \
             \"jpg;png\" or \"txt\""
        )));
    }
    Ok(list)
}

/// The fields of every sample, in the order a batch's dictionary lists them. At least one
/// is the loader's modality's (its pipeline's output); the first of them is the record's
/// sample, prepared with the sample's own generator (its pixels those of a loader without
/// fields), each later one (a second image of the sample) with a generator of its own.
#[derive(Debug, Clone)]
pub struct Fields {
    fields: Arc<[Field]>,
}

impl Fields {
    /// `fields`, checked.
    ///
    /// # Errors
    ///
    /// [`Error::Config`]: no field, two fields of one name, no field of the loader's
    /// modality, a label read from other than `cls`, a `max_bytes` of 0 or over
    /// [`MAX_FIELD_BYTES`].
    pub fn new(fields: Vec<Field>) -> Result<Fields> {
        if fields.is_empty() {
            return Err(Error::Config(
                "fields= names no field: give at least the sample's, e.g. {\"image\": \"jpg\"}"
                    .into(),
            ));
        }
        for (i, field) in fields.iter().enumerate() {
            if field.name.is_empty() {
                return Err(Error::Config("a field's name is empty".into()));
            }
            if fields[..i].iter().any(|f| f.name == field.name) {
                return Err(Error::Config(format!(
                    "two fields are named {:?}",
                    field.name
                )));
            }
            if field.members.is_empty() {
                return Err(Error::Config(format!(
                    "field {:?} is read from no member",
                    field.name
                )));
            }
            let label_member =
                matches!(field.members.as_slice(), [m] if m == "cls" || m == "label");
            if matches!(field.kind, FieldKind::Label) && !label_member {
                return Err(Error::Config(format!(
                    "field {:?}: labels are read from .cls members (a manifest's label); read \
                     {:?} as text instead",
                    field.name,
                    field.members.join(";")
                )));
            }
            if let FieldKind::Vector { length } = field.kind {
                if length == 0 || length > MAX_VECTOR {
                    return Err(Error::Config(format!(
                        "field {:?}: length={length} is out of bounds: use 1 to {MAX_VECTOR}",
                        field.name
                    )));
                }
            }
            if let Some(max) = field.kind.max_bytes() {
                if max == 0 || max > MAX_FIELD_BYTES {
                    return Err(Error::Config(format!(
                        "field {:?}: max_bytes={max} is out of bounds: use 1 to \
                         {MAX_FIELD_BYTES}",
                        field.name
                    )));
                }
            }
        }
        if !fields.iter().any(|f| matches!(f.kind, FieldKind::Sample)) {
            return Err(Error::Config(
                "fields= has no field of the pipeline's modality: name the image or audio \
                 member, e.g. {\"image\": \"jpg;png\", ...}"
                    .into(),
            ));
        }
        Ok(Fields {
            fields: fields.into(),
        })
    }

    /// The fields, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Field> {
        self.fields.iter()
    }

    /// The members of each field other than the sample's and the label, in order of
    /// preference: what a source reads into a record beside the sample
    /// ([`Columns::record`](crate::storage::Columns::record)).
    pub fn others(&self) -> Vec<Vec<String>> {
        let first = self.first_sample();
        self.iter()
            .enumerate()
            .filter(|&(i, f)| !matches!(f.kind, FieldKind::Label) && i != first)
            .map(|(_, f)| f.members.clone())
            .collect()
    }

    /// The index of the first field of the loader's modality: the record's sample, which
    /// the sample's own generator prepares (each later one draws from one of its own).
    pub fn first_sample(&self) -> usize {
        self.iter()
            .position(|f| matches!(f.kind, FieldKind::Sample))
            .expect("Fields::new checked one")
    }

    /// How many fields the loader's pipeline prepares (two images of a sample: two).
    pub fn samples(&self) -> usize {
        self.iter()
            .filter(|f| matches!(f.kind, FieldKind::Sample))
            .count()
    }

    /// Whether a field is the sample's label.
    pub fn has_label(&self) -> bool {
        self.iter().any(|f| matches!(f.kind, FieldKind::Label))
    }

    /// The layout of a record whose sample field has `sample`'s.
    pub fn layout(&self, sample: &SampleLayout) -> SampleLayout {
        SampleLayout::of_record(
            self.iter()
                .map(|f| (f.name.clone(), f.kind.form(sample)))
                .collect(),
        )
    }

    /// What changes a record's output besides the pipeline, for the loader's fingerprint.
    pub fn fingerprint(&self) -> String {
        self.iter()
            .map(|f| {
                format!(
                    "{}={}:{}",
                    f.name,
                    f.members.join(";"),
                    f.kind.fingerprint()
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}
