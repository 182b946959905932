//! A member held in a variable-length slot (text, JSON, bytes): a little-endian `u32`
//! length, the bytes, then zeros; and the bounds such a member is held to.

use crate::error::Cause;
use crate::fields::MAX_FIELD_BYTES;

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
