//! A vector field: a member of numbers as `float32` (a NumPy `.npy` array or a JSON
//! array of numbers: what webdataset's decoders and a CLIP embedding dump give), its
//! element count checked against the field's length.
//!
//! A `.npy` array is read as [`crate::fields::npy`] reads one, its elements written if
//! they are the field's count. A JSON array is read once, its numbers written as they
//! come (none past the field's length), keeping nothing: the member's bytes are all it
//! costs. Before either, the member's size is checked against the most that `length`
//! numbers take in either form ([`most_bytes`]): a member of gigabytes is refused for
//! its size, not read to find out that it holds too many numbers.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{Declaration, FieldKind, Kind, Settings};
use crate::error::Cause;
use crate::fields::{json, npy, MAX_VECTOR};
use crate::sample::{PartForm, SampleLayout};

/// Declared for no extension: a vector has the length its field gives (a bare `npy`
/// member is bytes).
pub(super) const DECLARATION: Declaration = Declaration {
    name: "vector",
    extensions: &[],
    settings: &["length"],
    make,
};

#[derive(Debug)]
struct Vector {
    length: usize,
}

impl FieldKind {
    /// A vector of `length` numbers as `float32`: a NumPy `.npy` array (`float16/32/64`,
    /// `int8/16/32/64`, `uint8`, `bool`, little-endian, any shape of `length` elements) or
    /// a JSON array of numbers. A member larger than either form of `length` numbers can
    /// be (64 bytes a number and 64 KiB besides) is refused unread; a member of another
    /// count is the sample's error.
    pub fn vector(length: usize) -> FieldKind {
        FieldKind::of(Vector { length })
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    let length = settings.number("length")?.ok_or(
        "a vector has a fixed length: give length= (Field(\"npy\", kind=\"vector\", \
         length=512))",
    )?;
    Ok(FieldKind::vector(length))
}

impl Kind for Vector {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        if self.length == 0 || self.length > MAX_VECTOR {
            return Err(format!(
                "length={} is out of bounds: use 1 to {MAX_VECTOR}",
                self.length
            ));
        }
        Ok(())
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Floats {
            length: self.length,
        }
    }

    fn fingerprint(&self) -> String {
        format!("vector {}", self.length)
    }

    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        put(member, self.length, slot).map_err(|reason| Cause::BadVector {
            field: field.to_string(),
            reason,
        })
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::from_iter([("length".into(), json!(self.length))])
    }
}

/// The most bytes one number of a vector takes: 8 in a `.npy` array (`float64`); in JSON,
/// 17 significant digits with a sign, a point and an exponent (24 characters), its comma,
/// and the indentation of a pretty-printed array, with room to spare.
const MOST_PER_NUMBER: usize = 64;

/// The most bytes a member of a vector of `length` numbers may take: a `.npy` array's
/// preamble, its longest header and its elements, or a JSON array of as many numbers
/// (and as much whitespace as that header).
pub(in crate::fields) fn most_bytes(length: usize) -> usize {
    npy::most_bytes(0) + length.saturating_mul(MOST_PER_NUMBER)
}

/// Writes `member`'s numbers into `slot` (`length` native-endian `f32`s).
///
/// # Errors
///
/// What is wrong with the member, in words: larger than any form of `length` numbers,
/// not a `.npy` array nor a JSON array of numbers, an element type not read, a count
/// other than `length`.
fn put(member: &[u8], length: usize, slot: &mut [u8]) -> Result<(), String> {
    debug_assert_eq!(slot.len(), length * 4);
    let most = most_bytes(length);
    if member.len() > most {
        return Err(format!(
            "a member of {} bytes, more than a .npy array or a JSON array of {length} numbers \
             takes (at most {most} bytes): a vector of another length?",
            member.len()
        ));
    }
    let mut out = slot.chunks_exact_mut(4);
    let write = |value: f64| {
        if let Some(out) = out.next() {
            out.copy_from_slice(&(value as f32).to_ne_bytes());
        }
    };
    let count = if member.starts_with(npy::MAGIC) {
        let array = npy::read(member)?;
        let count = array.count();
        if count == length {
            array.values().for_each(write);
        }
        count
    } else {
        json::numbers(member, write)
            .map_err(|e| format!("not a .npy array nor a JSON array of numbers ({e})"))?
    };
    if count != length {
        return Err(format!("{count} numbers, the field holds {length}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::npy::tests::npy_file;

    fn floats(slot: &[u8]) -> Vec<f32> {
        slot.chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn npy_arrays_and_json_arrays_become_float32() {
        let mut slot = vec![0u8; 12];
        let data: Vec<u8> = [1.5f32, -2.0, 3.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        put(&npy_file("<f4", "(3,)", &data), 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [1.5, -2.0, 3.25]);
        let data: Vec<u8> = [7i64, -8, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        put(&npy_file("<i8", "(1, 3)", &data), 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [7.0, -8.0, 9.0]);
        let data: Vec<u8> = [0x3c00u16, 0xc000, 0x3800]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        put(&npy_file("<f2", "(3,)", &data), 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [1.0, -2.0, 0.5]);
        put(b"[0.5, 1e2, -3]", 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [0.5, 100.0, -3.0]);
    }

    #[test]
    fn hostile_members_are_reasons_not_panics() {
        let mut slot = vec![0u8; 8];
        let two: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"[1, 2, 3]".to_vec(), "3 numbers, the field holds 2"),
            (b"{\"a\": 1}".to_vec(), "not a .npy array"),
            (
                format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
                "not a .npy",
            ),
            (npy_file("<f4", "(3,)", &two), "holding 8 bytes"),
            (npy_file("<f4", "(2,)", &two[..7]), "holding 7 bytes"),
            (npy_file("<f8", "(2,)", &[0; 12]), "holding 12 bytes"),
            (
                format!("[{}1]", "1,".repeat(most_bytes(2))).into_bytes(),
                "more than a .npy array or a JSON array of 2 numbers takes",
            ),
            (
                npy_file("<f4", "(2,)", &vec![0; most_bytes(2)]),
                "more than a .npy array",
            ),
            (b"[1e999, 2]".to_vec(), "out of range"),
            (b"[1, 2".to_vec(), "expected ',' or ']'"),
            (npy_file(">f4", "(2,)", &two), "are read"),
            (
                npy_file("<f4", "(99999999999999999, 99999999999)", &two),
                "past any size",
            ),
            (npy_file("<f4", "(x,)", &two), "dimension"),
            (b"\x93NUMPY\x01".to_vec(), "cut short"),
            (b"\x93NUMPY\x09\x00\x00\x00".to_vec(), "version 9"),
            (
                [b"\x93NUMPY\x02\x00".as_slice(), &u32::MAX.to_le_bytes()].concat(),
                "header of",
            ),
        ];
        for (member, expect) in cases {
            let why = put(&member, 2, &mut slot).unwrap_err();
            assert!(why.contains(expect), "{expect}: {why}");
        }
        // Numbers past the field's length are counted, not written past its slot.
        let why = put(b"[1, 2, 3, 4, 5]", 2, &mut slot).unwrap_err();
        assert_eq!(why, "5 numbers, the field holds 2");
        // A member of exactly the most bytes is read.
        let padded = format!("[1, 2{}]", " ".repeat(most_bytes(2) - 6));
        assert_eq!(padded.len(), most_bytes(2));
        put(padded.as_bytes(), 2, &mut slot).unwrap();
        assert_eq!(floats(&slot), [1.0, 2.0]);
        // Every cut of a good array is an error, never a panic.
        let good = npy_file("<f4", "(2,)", &two);
        for cut in 0..good.len() {
            assert!(put(&good[..cut], 2, &mut slot).is_err(), "cut at {cut}");
        }
    }
}
