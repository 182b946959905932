//! What the `fields` fuzz target (`fuzz/src/bin/fields.rs`) runs: arbitrary bytes as the
//! member of each kind of field a record's preparation reads, with small settings the
//! input chooses, checked against `serde_json` where a field reads JSON.

use super::{Field, FieldKind};
use crate::sample::{DType, SampleLayout};
use crate::storage::record::members;

/// The keys a JSON field may be asked for, each chosen by a bit of the input.
const KEYS: [&str; 3] = ["w", "h", "\u{e9}"];

/// Prepares `data` as fields' members are prepared: its first three bytes choose a
/// `max_bytes` (1 to 16 321), a vector's length (1 to 64, also the length of an npz
/// field's array `a`, beside its `2 × 2` array `b`) and the keys asked of a JSON
/// document; the rest is a member, prepared as text, JSON, bytes, a vector and an `.npz`
/// archive, then read as a record (a tar run, a frame) whose members those fields are
/// read from.
///
/// # Panics
///
/// Where a field takes or refuses its member otherwise than it should: a JSON document
/// judged otherwise than `serde_json` judges it, a vector's numbers other than
/// `serde_json`'s, text or bytes kept when over their `max_bytes` (or refused under it),
/// an archive taken that is not one.
#[doc(hidden)]
pub fn prepare_for_fuzzing(data: &[u8]) {
    let (settings, member) = data.split_at(data.len().min(3));
    let setting = |i: usize| settings.get(i).copied().unwrap_or(0);
    let max_bytes = 1 + usize::from(setting(0)) * 64;
    let length = 1 + usize::from(setting(1) % 64);
    let keys: Vec<String> = KEYS
        .iter()
        .enumerate()
        .filter(|&(i, _)| setting(2) >> i & 1 == 1)
        .map(|(_, k)| k.to_string())
        .collect();
    let field = |name: &str, ext: &str, kind| Field {
        name: name.into(),
        members: vec![ext.into()],
        kind,
    };
    let arrays = vec![
        ("a".to_string(), vec![length]),
        ("b".to_string(), vec![2, 2]),
    ];
    let fields = [
        field("text", "txt", FieldKind::text(max_bytes)),
        field("json", "json", FieldKind::json(max_bytes, keys.clone())),
        field("bytes", "bin", FieldKind::bytes(max_bytes)),
        field("vector", "npy", FieldKind::vector(length)),
        field("npz", "npz", FieldKind::npz(arrays)),
    ];
    let sample = SampleLayout::new(vec![1], DType::U8);
    let mut slots: Vec<Vec<u8>> = fields
        .iter()
        .map(|f| vec![0xAB; f.kind.form(&sample).bytes()])
        .collect();

    for (field, slot) in fields.iter().zip(&mut slots) {
        let got = field.prepare(member, slot);
        let fits = member.len() <= max_bytes;
        match field.name.as_str() {
            "text" => {
                let text = fits && std::str::from_utf8(member).is_ok();
                assert_eq!(got.is_ok(), text, "text: {got:?}");
            }
            "json" => {
                let document = fits && serde_says(member, &keys);
                assert_eq!(got.is_ok(), document, "JSON: {got:?}");
                if !fits {
                    assert_eq!(got.map_err(|c| c.kind()), Err("too-large"));
                }
            }
            "bytes" => assert_eq!(got.is_ok(), fits, "bytes: {got:?}"),
            "vector" => {
                let json = !member.starts_with(b"\x93NUMPY")
                    && member.len() <= super::kind::vector::most_bytes(length);
                if json {
                    let theirs = serde_json::from_slice::<Vec<f64>>(member)
                        .ok()
                        .filter(|v| v.len() == length);
                    assert_eq!(got.is_ok(), theirs.is_some(), "vector: {got:?}");
                    if let Some(theirs) = theirs {
                        let ours = slot
                            .chunks_exact(4)
                            .map(|b| f32::from_ne_bytes(b.try_into().expect("4 bytes")));
                        assert!(ours.eq(theirs.iter().map(|&v| v as f32)), "vector values");
                    }
                }
            }
            // An archive ends with its directory's end record (22 bytes, "PK\5\6").
            _ => assert!(
                got.is_err() || member.len() >= 22 && member.windows(4).any(|w| w == b"PK\x05\x06"),
                "npz: {got:?}"
            ),
        }
    }

    if let Ok(found) = members(member) {
        for (field, slot) in fields.iter().zip(&mut slots) {
            if let Ok(bytes) = super::record::member(member, &found, field, None) {
                let _ = field.prepare(bytes, slot);
            }
        }
    }
}

/// Whether `serde_json` reads `text` as a document holding `keys` (an object with each).
pub(super) fn serde_says(text: &[u8], keys: &[String]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(text) {
        Ok(value) => {
            keys.is_empty()
                || value
                    .as_object()
                    .is_some_and(|o| keys.iter().all(|k| o.contains_key(k)))
        }
        Err(_) => false,
    }
}
