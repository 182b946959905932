//! A member held in a variable-length slot (text, JSON, bytes): a little-endian `u32`
//! length, the bytes, then zeros; the bounds such a member is held to; and the [`Kind`]
//! of each kind held so ([`VarKind`]), alike but for what a member must be.

use std::fmt;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{Declaration, Kind};
use crate::error::Cause;
use crate::fields::MAX_FIELD_BYTES;
use crate::sample::{Content, PartForm, SampleLayout};

/// A kind whose member is held, as it is, in a var slot of at most `max_bytes` bytes
/// (text, JSON, bytes): what sets it apart; its [`Kind`] is the one below.
pub(super) trait VarKind: fmt::Debug + Send + Sync + 'static {
    /// Its declaration.
    fn declaration(&self) -> &'static Declaration;

    /// The most bytes a member may have.
    fn max_bytes(&self) -> usize;

    /// What its slot holds.
    fn content(&self) -> Content;

    /// What changes the field's output, for the loader's fingerprint.
    fn fingerprint(&self) -> String {
        format!("{} {}", self.declaration().name, self.max_bytes())
    }

    /// Its settings as the portable text sends them.
    fn settings(&self) -> Map<String, Value> {
        Map::from_iter([("max_bytes".into(), json!(self.max_bytes()))])
    }

    /// Whether `member`, for field `field`, fits the `capacity` bytes of its slot.
    fn fits(&self, field: &str, member: &[u8], capacity: usize) -> Result<(), Cause> {
        too_large(field, member, capacity)
    }

    /// Whether `member`, which fits, is one the kind holds (by default any).
    fn check(&self, _field: &str, _member: &[u8]) -> Result<(), Cause> {
        Ok(())
    }
}

impl<T: VarKind> Kind for T {
    fn declaration(&self) -> &'static Declaration {
        VarKind::declaration(self)
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        check_max_bytes(self.max_bytes())
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Var {
            capacity: self.max_bytes(),
            content: self.content(),
        }
    }

    fn fingerprint(&self) -> String {
        VarKind::fingerprint(self)
    }

    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        self.fits(field, member, capacity(slot))?;
        VarKind::check(self, field, member)?;
        put(member, slot);
        Ok(())
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        VarKind::settings(self)
    }
}

/// Whether `max_bytes` is one a field may be given, in words if not.
pub(super) fn check_max_bytes(max_bytes: usize) -> Result<(), String> {
    if max_bytes == 0 || max_bytes > MAX_FIELD_BYTES {
        return Err(format!(
            "max_bytes={max_bytes} is out of bounds: use 1 to {MAX_FIELD_BYTES}"
        ));
    }
    Ok(())
}

/// [`Cause::TooLarge`], naming `field`, for a member of more than `limit` bytes.
pub(super) fn too_large(field: &str, bytes: &[u8], limit: usize) -> Result<(), Cause> {
    if bytes.len() > limit {
        return Err(Cause::TooLarge {
            bytes: bytes.len() as u64,
            limit: limit as u64,
            field: Some(field.to_string()),
        });
    }
    Ok(())
}

/// The bytes a var slot holds after its length.
pub(super) fn capacity(slot: &[u8]) -> usize {
    slot.len() - 4
}

/// Writes `bytes`, checked to fit, into a var slot: its length, then the bytes, then zeros
/// (nothing of the slot's last sample stays).
pub(super) fn put(bytes: &[u8], slot: &mut [u8]) {
    let (len, rest) = slot.split_at_mut(4);
    len.copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    rest[..bytes.len()].copy_from_slice(bytes);
    rest[bytes.len()..].fill(0);
}
