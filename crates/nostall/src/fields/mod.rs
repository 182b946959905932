//! Samples with named fields: an image (or a recording) with its caption, its metadata,
//! its label, read together and prepared in the engine.
//!
//! A loader given [`Fields`] ([`LoaderBuilder::fields`](crate::loader::LoaderBuilder::fields))
//! reads each sample as a *record*: in WebDataset shards, the run of its key's members
//! (`000123.jpg`, `000123.txt`, `000123.json`), one ranged read from the shard
//! ([`TarShards::records_from_listing`](crate::storage::TarShards::records_from_listing)).
//! Each [`Field`] names the members it is read from by extension, as webdataset's keys do,
//! and how it is prepared ([`FieldKind`]): through the loader's pipeline (the one field
//! of the loader's modality), tokenized, checked as text or JSON, kept as bytes, read as a
//! vector of numbers or as the arrays of an `.npz` archive; or it is the sample's label
//! (its `.cls` member, read when the shards are indexed).
//!
//! Prepared, a record is one slot of the batch buffer like any sample, its fields one
//! after another ([`SampleLayout::of_record`]): the batch stays one buffer that the
//! pipeline moves, orders and compacts without knowing what it holds, and each field of
//! a batch is a view of it. Variable-length fields (text, JSON, bytes) are bounded by
//! their `max_bytes` and stored with their length. A field that is missing, or that is
//! not what its kind says (bad UTF-8, JSON nested past 128 levels, a text longer than
//! its field), is the sample's [`Cause`](crate::error::Cause) naming the field, skipped or raised
//! as the error policy says; the image field keeps the sample's own generator, so the
//! pixels are those of a loader without fields.
//!
//! A member's size is compared with its field's bound before anything of it is read
//! (`max_bytes`, a tokenizer's `max_bytes`, the most bytes a vector's `length` numbers
//! take, the most an `.npz` archive's entry of a declared array takes): JSON, bytes and
//! tokens over it are `too-large`, text `bad-text`, a vector or an archive's array
//! `bad-vector`. What reads a member then (UTF-8, a JSON document's grammar and depth, a
//! vector's numbers, an archive's directory) walks it once and allocates nothing sized by
//! it: a hostile member costs the bytes the record holds (and an archive's declared
//! arrays), never a multiple of them.
//!
//! Each kind of field is one file of `kind/`: adding one is its file, its line in the
//! list of kinds there, its test and its line in the fields guide (docs/python.md).

mod fuzz;
mod json;
mod kind;
mod npy;
mod portable;
mod record;
#[cfg(test)]
mod tests;
mod zip;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sample::{Modality, PartForm, SampleLayout};

#[doc(hidden)]
pub use fuzz::prepare_for_fuzzing;
pub use kind::FieldKind;
use kind::Role;
pub use portable::PortableFields;
pub use record::RecordPrep;

/// The most bytes a variable-length field may be given ([`FieldKind::text`]'s
/// `max_bytes`…): every sample of a batch reserves that much for it.
pub const MAX_FIELD_BYTES: usize = 16 << 20;

/// The most elements a vector field ([`FieldKind::vector`]) may hold, and the arrays of an
/// npz field ([`FieldKind::npz`]) together.
pub const MAX_VECTOR: usize = 1 << 20;

/// `max_bytes` of a text, JSON or bytes field unless set: 16 KiB, beyond a caption or a
/// metadata record, small enough that a batch's reserve stays small.
pub const DEFAULT_FIELD_BYTES: usize = 16 << 10;

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

    /// Prepares `member`, the record's member for this field, into its slot (of its
    /// kind's form's bytes).
    fn prepare(&self, member: &[u8], slot: &mut [u8]) -> Result<(), crate::error::Cause> {
        self.kind.prepare(&self.name, member, slot)
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
    /// modality, a label read from other than `cls`, a setting out of its kind's bounds
    /// (a `max_bytes` of 0 or over [`MAX_FIELD_BYTES`], a vector's `length` or an npz
    /// field's arrays of 0 or over [`MAX_VECTOR`] numbers).
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
            field
                .kind
                .check(&field.members)
                .map_err(|why| Error::Config(format!("field {:?}: {why}", field.name)))?;
        }
        if !fields.iter().any(|f| f.kind.role() == Role::Sample) {
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
            .filter(|&(i, f)| f.kind.role() != Role::Label && i != first)
            .map(|(_, f)| f.members.clone())
            .collect()
    }

    /// Beside [`Fields::others`], field by field: the lists each reads of a column that
    /// is a struct of lists, where it reads one
    /// ([`Columns::sub_columns`](crate::storage::Columns::sub_columns)).
    pub fn sub_columns(&self) -> Vec<Option<crate::storage::SubColumns>> {
        let first = self.first_sample();
        self.iter()
            .enumerate()
            .filter(|&(i, f)| f.kind.role() != Role::Label && i != first)
            .map(|(_, f)| f.kind.sub_columns())
            .collect()
    }

    /// The index of the first field of the loader's modality: the record's sample, which
    /// the sample's own generator prepares (each later one draws from one of its own).
    pub fn first_sample(&self) -> usize {
        self.iter()
            .position(|f| f.kind.role() == Role::Sample)
            .expect("Fields::new checked one")
    }

    /// How many fields the loader's pipeline prepares (two images of a sample: two).
    pub fn samples(&self) -> usize {
        self.iter()
            .filter(|f| f.kind.role() == Role::Sample)
            .count()
    }

    /// Whether a field follows the sample's geometry (boxes, a label map).
    pub fn has_targets(&self) -> bool {
        self.iter().any(|f| f.kind.role() == Role::Target)
    }

    /// Whether a field holds boxes, which some operators draw against.
    pub fn has_boxes(&self) -> bool {
        self.iter().any(|f| f.kind.name() == "boxes")
    }

    /// Whether a field is the sample's label.
    pub fn has_label(&self) -> bool {
        self.iter().any(|f| f.kind.role() == Role::Label)
    }

    /// The layout of a record whose sample field has `sample`'s. Of a sample made of
    /// views, the sample's field and each target field hold one form a view (in a
    /// [`PartForm::Views`]), the others one a sample.
    pub fn layout(&self, sample: &SampleLayout) -> SampleLayout {
        let views = sample.view_layouts();
        SampleLayout::of_record(
            self.iter()
                .map(|f| {
                    let form = match f.kind.role() {
                        _ if views.is_empty() => f.kind.form(sample),
                        // Back to back, as the pipeline writes its views.
                        Role::Sample => {
                            PartForm::of_views(views.iter().map(|v| f.kind.form(v)).collect(), 1)
                        }
                        Role::Target => {
                            PartForm::of_views(views.iter().map(|v| f.kind.form(v)).collect(), 8)
                        }
                        _ => f.kind.form(sample),
                    };
                    (f.name.clone(), form)
                })
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
