//! [`RecordPrep`]: a record's members into its fields' parts of a slot.

use super::{Field, FieldKind, Fields};
use crate::error::{Cause, Result};
use crate::prep::{Pipeline, Prep, Prepared, Preparer};
use crate::rng::Rng;
use crate::sample::{Modality, Part, SampleLayout};
use crate::storage::record::{members, RecordMember};

/// A loader's pipeline with the other fields of each sample: the [`Prep`] of a loader
/// given [`Fields`]. Its samples are records read as
/// [`TarShards::records_from_listing`](crate::storage::TarShards::records_from_listing)
/// reads them.
#[derive(Debug)]
pub struct RecordPrep {
    sample: Pipeline,
    fields: Fields,
    layout: SampleLayout,
}

impl RecordPrep {
    /// `fields`, the sample's prepared by `sample`.
    pub fn new(sample: Pipeline, fields: Fields) -> RecordPrep {
        let layout = fields.layout(sample.layout());
        RecordPrep {
            sample,
            fields,
            layout,
        }
    }
}

impl std::fmt::Display for RecordPrep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} with fields ", self.sample)?;
        let names: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        f.write_str(&names.join(", "))
    }
}

impl Prep for RecordPrep {
    fn modality(&self) -> Modality {
        self.sample.modality()
    }

    fn layout(&self) -> SampleLayout {
        self.layout.clone()
    }

    fn fingerprint(&self) -> String {
        format!(
            "{} fields [{}]",
            self.sample.prep().fingerprint(),
            self.fields.fingerprint()
        )
    }

    fn decode_route(&self) -> Option<&crate::prep::route::DecodeRoute> {
        self.sample.prep().decode_route()
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(RecordPreparer {
            sample: self.sample.prep().preparer()?,
            modality: self.sample.modality(),
            fields: self.fields.clone(),
            parts: self.layout.parts().to_vec(),
        }))
    }
}

/// Parts of the sample's generator for its later fields of the loader's modality.
const OTHER_SAMPLES: u64 = 0x5345_434f_4e44_0000;

struct RecordPreparer {
    sample: Box<dyn Preparer>,
    modality: Modality,
    fields: Fields,
    parts: Vec<Part>,
}

impl Preparer for RecordPreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let members = members(data)?;
        let mut prepared = Prepared::InSlot;
        let first = self.fields.first_sample();
        for (i, (field, part)) in self.fields.iter().zip(&self.parts).enumerate() {
            let slot = &mut out[part.offset..part.offset + part.form.bytes()];
            if matches!(field.kind, FieldKind::Label) {
                continue;
            }
            let bytes = member(data, &members, field, (i == first).then_some(self.modality))?;
            match &field.kind {
                FieldKind::Label => {}
                FieldKind::Sample if i == first => {
                    prepared = self.sample.prepare(bytes, rng, slot)?;
                }
                FieldKind::Sample => {
                    // A second image of the sample: draws of its own, the first's unchanged.
                    let mut own = rng.fork(OTHER_SAMPLES + i as u64);
                    if let Prepared::Deferred(_) = self.sample.prepare(bytes, &mut own, slot)? {
                        return Err(Cause::Internal(format!(
                            "field {:?} was left to a device, which decodes one image a sample",
                            field.name
                        )));
                    }
                }
                _ => put_field(field, bytes, slot)?,
            }
        }
        Ok(prepared)
    }
}

/// The data of the record's member for `field`: of its first extension the record has.
///
/// The record's sample field (`record_sample`: the first field of the loader's modality)
/// also finds the member named by its modality (`image`, `audio`): a record
/// that is not a tar run (a Parquet row, a manifest's segment, a file and its sidecars)
/// names its sample so, whatever its file's extension or column's name.
pub(super) fn member<'a>(
    data: &'a [u8],
    members: &[RecordMember],
    field: &Field,
    record_sample: Option<Modality>,
) -> Result<&'a [u8], Cause> {
    let own = record_sample.map(Modality::name);
    let found = field
        .members
        .iter()
        .map(String::as_str)
        .chain(own)
        .find_map(|ext| members.iter().find(|m| m.ext.eq_ignore_ascii_case(ext)));
    let member = found.ok_or_else(|| Cause::MissingField {
        field: field.name.clone(),
        members: field.members.join(";"),
    })?;
    // `members` checked every extent against the record.
    Ok(&data[member.data.clone()])
}

fn utf8<'a>(field: &Field, bytes: &'a [u8]) -> Result<&'a str, Cause> {
    std::str::from_utf8(bytes).map_err(|e| {
        bad_text(
            field,
            format!("not UTF-8 text ({e}); read the field as bytes to take it as it is"),
        )
    })
}

fn bad_text(field: &Field, reason: impl ToString) -> Cause {
    Cause::BadText {
        field: field.name.clone(),
        reason: reason.to_string(),
    }
}

/// Prepares `bytes`, the member of a field other than a sample's or the label, into the
/// field's `slot`. Each kind checks the member's size against its bound before it reads
/// anything of it (a member of gigabytes costs a comparison, not a parse), then reads it
/// once, allocating nothing sized by it.
pub(super) fn put_field(field: &Field, bytes: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
    match &field.kind {
        FieldKind::Text { .. } => {
            // `bad-text` (not `too-large`) as it always was: users' skip counts and tests
            // read it so.
            fits(field, bytes, slot).map_err(|reason| bad_text(field, reason))?;
            let text = utf8(field, bytes)?;
            put_var(text.as_bytes(), slot);
        }
        FieldKind::Json { keys, .. } => {
            too_large(field, bytes, slot_capacity(slot))?;
            super::json::check(bytes, keys).map_err(|reason| Cause::BadJson {
                field: field.name.clone(),
                reason,
            })?;
            put_var(bytes, slot);
        }
        FieldKind::Bytes { .. } => {
            too_large(field, bytes, slot_capacity(slot))?;
            put_var(bytes, slot);
        }
        FieldKind::Vector { length } => {
            super::vector::put(bytes, *length, slot).map_err(|reason| Cause::BadVector {
                field: field.name.clone(),
                reason,
            })?;
        }
        #[cfg(feature = "tokenize")]
        FieldKind::Tokens(tokenizer) => {
            too_large(field, bytes, tokenizer.args().max_bytes)?;
            let text = utf8(field, bytes)?;
            put_tokens(tokenizer, text, slot).map_err(|cause| bad_text(field, cause))?;
        }
        FieldKind::Sample | FieldKind::Label => {
            return Err(Cause::Internal(format!(
                "field {:?} is the pipeline's or the label, not a member to prepare",
                field.name
            )))
        }
    }
    Ok(())
}

/// [`Cause::TooLarge`], naming `field`, for a member of more than `limit` bytes.
fn too_large(field: &Field, bytes: &[u8], limit: usize) -> Result<(), Cause> {
    if bytes.len() > limit {
        return Err(Cause::TooLarge {
            bytes: bytes.len() as u64,
            limit: limit as u64,
            field: Some(field.name.clone()),
        });
    }
    Ok(())
}

/// The bytes a var slot holds after its length.
fn slot_capacity(slot: &[u8]) -> usize {
    slot.len() - 4
}

/// Whether `bytes` fit `field`'s var slot, in words if not.
fn fits(field: &Field, bytes: &[u8], slot: &[u8]) -> std::result::Result<(), String> {
    let capacity = slot_capacity(slot);
    if bytes.len() > capacity {
        return Err(format!(
            "{} bytes, more than the field holds (max_bytes={capacity}; raise it for field \
             {:?})",
            bytes.len(),
            field.name
        ));
    }
    Ok(())
}

/// Writes `bytes`, checked to fit, into a var slot: its length, then the bytes, then zeros
/// (nothing of the slot's last sample stays).
fn put_var(bytes: &[u8], slot: &mut [u8]) {
    let (len, rest) = slot.split_at_mut(4);
    len.copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    rest[..bytes.len()].copy_from_slice(bytes);
    rest[bytes.len()..].fill(0);
}

/// Tokenizes `text` into a tokens slot: the ids, then the mask, native-endian `i64`.
#[cfg(feature = "tokenize")]
fn put_tokens(
    tokenizer: &crate::prep::tokens::Tokenizer,
    text: &str,
    slot: &mut [u8],
) -> std::result::Result<(), Cause> {
    let length = tokenizer.length();
    let mut ids = vec![0i64; length];
    let mut mask = vec![0i64; length];
    tokenizer.encode_into(text, &mut ids, &mut mask)?;
    for (chunk, v) in slot.chunks_exact_mut(8).zip(ids.iter().chain(&mask)) {
        chunk.copy_from_slice(&v.to_ne_bytes());
    }
    Ok(())
}
