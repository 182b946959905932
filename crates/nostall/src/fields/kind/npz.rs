//! An npz field: named arrays of a NumPy `.npz` member (`numpy.savez` and
//! `savez_compressed` write one, webdataset's `.npz`), each as `float32` of the shape
//! the field declares, one after another in the slot.
//!
//! The archive's entries are found in one walk of its central directory
//! ([`crate::fields::zip`]); only the entries of the declared arrays (`<array>.npy`) are
//! read, each inflated to at most the bytes a `.npy` array of its shape's elements takes
//! ([`npy::most_bytes`]): an entry declaring more is refused before anything of it is
//! inflated, one inflating past what it declares at the first byte past it. So a member's
//! cost is its bytes and its declared arrays', whatever else the archive holds.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{Declaration, FieldKind, Kind, Settings};
use crate::error::Cause;
use crate::fields::{npy, zip, MAX_VECTOR};
use crate::sample::{PartForm, SampleLayout};

pub(super) const DECLARATION: Declaration = Declaration {
    name: "npz",
    extensions: &["npz"],
    settings: &["arrays"],
    make,
};

/// The most arrays an npz field names.
const MAX_ARRAYS: usize = 256;

/// The longest name of an array.
const MAX_NAME: usize = 255;

#[derive(Debug)]
struct Npz {
    arrays: Vec<(String, Vec<usize>)>,
}

impl FieldKind {
    /// The arrays of a NumPy `.npz` archive named in `arrays` (each a name and a shape),
    /// as `float32`: each the archive's entry `<name>.npy` (stored or deflated), a `.npy`
    /// array of any type a vector reads and any shape of as many elements as its own.
    /// Other entries are not read; a missing array, another count, a damaged archive are
    /// the sample's `bad-vector`.
    pub fn npz(arrays: Vec<(String, Vec<usize>)>) -> FieldKind {
        FieldKind::of(Npz { arrays })
    }
}

/// `arrays` as `[[name, [dims...]], ...]`; none unless given (a bare `npz` member, which
/// [`Kind::check`] refuses, naming what to give).
fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    let not = || "arrays= is not a list of [name, [dims...]]".to_string();
    let arrays = match settings.value("arrays") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|pair| {
                let [name, Value::Array(dims)] = pair.as_array()?.as_slice() else {
                    return None;
                };
                let dims = dims
                    .iter()
                    .map(|d| usize::try_from(d.as_u64()?).ok())
                    .collect::<Option<Vec<_>>>()?;
                Some((name.as_str()?.to_string(), dims))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(not)?,
        Some(_) => return Err(not()),
    };
    Ok(FieldKind::npz(arrays))
}

impl Kind for Npz {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        if self.arrays.is_empty() {
            return Err("an npz field names the arrays it reads and their shapes: \
                        Field(\"npz\", arrays={\"embedding\": 512, \"mask\": (16, 16)}) (or \
                        kind=\"bytes\" for the archive as it is)"
                .into());
        }
        if self.arrays.len() > MAX_ARRAYS {
            return Err(format!(
                "arrays= names {} arrays (at most {MAX_ARRAYS})",
                self.arrays.len()
            ));
        }
        let mut total = 0usize;
        for (i, (name, shape)) in self.arrays.iter().enumerate() {
            if name.is_empty() || name.len() > MAX_NAME {
                return Err(format!(
                    "an array's name of {} bytes (1 to {MAX_NAME})",
                    name.len()
                ));
            }
            if self.arrays[..i].iter().any(|(other, _)| other == name) {
                return Err(format!("arrays= names {name:?} twice"));
            }
            let elements = elements(shape)
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("array {name:?} of shape {shape:?} holds no number"))?;
            total = total.saturating_add(elements);
        }
        if total > MAX_VECTOR {
            return Err(format!(
                "arrays of {total} numbers in all: use at most {MAX_VECTOR}"
            ));
        }
        Ok(())
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Arrays {
            arrays: self.arrays.clone(),
        }
    }

    fn fingerprint(&self) -> String {
        format!("npz {:?}", self.arrays)
    }

    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        let bad = |reason: String| Cause::BadVector {
            field: field.to_string(),
            reason,
        };
        let damaged = |why: String| bad(format!("not an .npz archive: {why}"));
        let archive = zip::Archive::open(member).map_err(damaged)?;
        // The entry of each array, found in one walk of the directory (kept: as many as
        // the field names, not as the archive holds).
        let mut found: Vec<Option<zip::Entry<'_>>> = self.arrays.iter().map(|_| None).collect();
        for entry in archive.entries() {
            let entry = entry.map_err(damaged)?;
            let Some(stem) = entry.name.strip_suffix(b".npy") else {
                continue;
            };
            let Some(i) = self.arrays.iter().position(|(n, _)| n.as_bytes() == stem) else {
                continue;
            };
            if found[i].is_some() {
                return Err(bad(format!(
                    "the archive holds two entries {:?}",
                    String::from_utf8_lossy(entry.name)
                )));
            }
            found[i] = Some(entry);
        }
        let mut buffer = Vec::new();
        let mut rest = slot;
        for ((name, shape), entry) in self.arrays.iter().zip(found) {
            let entry = entry.ok_or_else(|| {
                bad(format!(
                    "the archive has no array {name:?} (an entry {name}.npy)"
                ))
            })?;
            let elements = elements(shape).expect("checked by Fields::new");
            let in_array = |why: String| bad(format!("array {name:?}: {why}"));
            let bytes = archive
                .contents(&entry, npy::most_bytes(elements), &mut buffer)
                .map_err(in_array)?;
            let array = npy::read(bytes).map_err(in_array)?;
            if array.count() != elements {
                return Err(in_array(format!(
                    "{} numbers, its shape {shape:?} holds {elements}",
                    array.count()
                )));
            }
            let (out, after) = std::mem::take(&mut rest).split_at_mut(elements * 4);
            for (out, value) in out.chunks_exact_mut(4).zip(array.values()) {
                out.copy_from_slice(&(value as f32).to_ne_bytes());
            }
            rest = after;
        }
        Ok(())
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::from_iter([("arrays".into(), json!(self.arrays))])
    }
}

/// The elements of an array of `shape`, `None` past any size.
fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::npy::tests::npy_file;
    use crate::fields::zip::tests::{zip, Method};

    /// Archives NumPy 2.4 wrote (`tests/npz`): `embedding` `arange(8) / 4`, `mask`
    /// `eye(3)` and `ids` `[[1, -2], [3, -4]]`, by `numpy.savez` as float32, bool and
    /// int64, by `numpy.savez_compressed` as float16, uint8 and int16.
    const STORED: &[u8] = include_bytes!("../../../tests/npz/stored.npz");
    const COMPRESSED: &[u8] = include_bytes!("../../../tests/npz/compressed.npz");

    fn field(arrays: &[(&str, &[usize])]) -> FieldKind {
        let kind = FieldKind::npz(
            arrays
                .iter()
                .map(|(name, shape)| (name.to_string(), shape.to_vec()))
                .collect(),
        );
        kind.check(&[]).unwrap();
        kind
    }

    /// What `kind` makes of `member`, as floats.
    fn prepare(kind: &FieldKind, member: &[u8]) -> Result<Vec<f32>, Cause> {
        let form = kind.form(&SampleLayout::new(vec![1], crate::sample::DType::U8));
        let mut slot = vec![0xAB; form.bytes()];
        kind.prepare("feat", member, &mut slot)?;
        Ok(slot
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect())
    }

    fn reason(got: Result<Vec<f32>, Cause>) -> String {
        match got {
            Err(Cause::BadVector { field, reason }) if field == "feat" => reason,
            other => panic!("not the field's bad-vector: {other:?}"),
        }
    }

    #[test]
    fn numpys_archives_give_each_declared_array_in_order() {
        let kind = field(&[("mask", &[3, 3]), ("embedding", &[8]), ("ids", &[4])]);
        let want: Vec<f32> = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
            .into_iter()
            .chain((0..8).map(|i| i as f32 / 4.0))
            .chain([1.0, -2.0, 3.0, -4.0])
            .collect();
        assert_eq!(prepare(&kind, STORED).unwrap(), want);
        assert_eq!(prepare(&kind, COMPRESSED).unwrap(), want);
        // Arrays the field does not name are not read.
        let one = field(&[("ids", &[2, 2])]);
        assert_eq!(prepare(&one, COMPRESSED).unwrap(), [1.0, -2.0, 3.0, -4.0]);
        assert_eq!(
            kind.fingerprint(),
            r#"npz [("mask", [3, 3]), ("embedding", [8]), ("ids", [4])]"#
        );
    }

    #[test]
    fn a_missing_array_another_count_or_a_damaged_archive_is_bad_vector() {
        let kind = field(&[("embedding", &[8]), ("mask", &[3, 3])]);
        let why = reason(prepare(&field(&[("scores", &[2])]), STORED));
        assert!(
            why.contains("no array \"scores\" (an entry scores.npy)"),
            "{why}"
        );
        let why = reason(prepare(&field(&[("embedding", &[2, 2])]), COMPRESSED));
        assert_eq!(
            why,
            "array \"embedding\": 8 numbers, its shape [2, 2] holds 4"
        );
        let why = reason(prepare(&kind, b"[1, 2, 3]"));
        assert!(why.starts_with("not an .npz archive"), "{why}");
        let eight: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let embedding = npy_file("<f4", "(8,)", &eight);
        let twice = zip(&[
            ("embedding.npy", &embedding, Method::Stored),
            ("embedding.npy", &embedding, Method::Deflated),
        ]);
        assert!(reason(prepare(&kind, &twice)).contains("two entries \"embedding.npy\""));
        let not_npy = zip(&[
            ("embedding.npy", b"[0, 1, 2, 3, 4, 5, 6, 7]", Method::Stored),
            ("mask.npy", &embedding, Method::Stored),
        ]);
        let why = reason(prepare(&kind, &not_npy));
        assert!(
            why.starts_with("array \"embedding\": not a .npy array"),
            "{why}"
        );
        let big_endian = zip(&[(
            "embedding.npy",
            &npy_file(">f4", "(8,)", &eight),
            Method::Stored,
        )]);
        let why = reason(prepare(&field(&[("embedding", &[8])]), &big_endian));
        assert!(why.contains("are read"), "{why}");
        // Every cut of a real archive is the field's error, never a panic.
        for archive in [STORED, COMPRESSED] {
            for cut in 0..archive.len() {
                reason(prepare(&kind, &archive[..cut]));
            }
        }
    }

    #[test]
    fn an_array_declaring_more_than_its_shape_takes_is_refused_before_it_is_inflated() {
        // 64 MiB of a float64 array's zeros, deflated to about 64 KiB, where the field's
        // array holds 8 numbers (at most 12 + 64 KiB + 64 bytes as a .npy file).
        let zeros = npy_file("<f8", "(8388608,)", &vec![0; 64 << 20]);
        let bomb = zip(&[("embedding.npy", &zeros, Method::Deflated)]);
        drop(zeros);
        let kind = field(&[("embedding", &[8])]);
        let why = reason(prepare(&kind, &bomb));
        assert!(
            why.starts_with(
                "array \"embedding\": it declares 67108992 bytes, more than its \
                             array takes (at most 65612)"
            ),
            "{why}"
        );
        // The same stream declaring what the field's array takes: refused at the first
        // byte past it.
        let mut lying = bomb;
        let directory = lying.len() - 22 - (46 + "embedding.npy".len());
        lying[directory + 24..directory + 28].copy_from_slice(&160u32.to_le_bytes());
        let why = reason(prepare(&kind, &lying));
        assert_eq!(
            why,
            "array \"embedding\": it inflates to more than the 160 bytes it declares"
        );
    }

    #[test]
    fn arrays_that_cannot_be_held_are_refused() {
        let why =
            |arrays: Vec<(String, Vec<usize>)>| FieldKind::npz(arrays).check(&[]).unwrap_err();
        let one = |name: &str, shape: &[usize]| (name.to_string(), shape.to_vec());
        assert!(why(vec![]).contains("arrays={\"embedding\": 512"));
        assert!(why(vec![one("a", &[2]), one("a", &[3])]).contains("\"a\" twice"));
        assert!(why(vec![one("a", &[2, 0])]).contains("holds no number"));
        assert!(why(vec![one("a", &[usize::MAX, 2])]).contains("holds no number"));
        assert!(why(vec![one("", &[2])]).contains("name of 0 bytes"));
        assert!(why(vec![one("a", &[1024, 1025])]).contains("at most 1048576"));
        let many = (0..300).map(|i| one(&i.to_string(), &[1])).collect();
        assert!(why(many).contains("300 arrays"));
        // A scalar is one number.
        assert!(FieldKind::npz(vec![one("s", &[])]).check(&[]).is_ok());
    }
}
