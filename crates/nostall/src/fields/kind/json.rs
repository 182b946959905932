//! A JSON field: a member holding one JSON document (UTF-8, nested at most 128 deep) of
//! at most `max_bytes` bytes, with `keys`, an object holding each of them; checked in one
//! walk that builds nothing ([`crate::fields::json`]), and kept as it is.

use serde_json::{json, Map, Value};

use super::var::VarKind;
use super::{Declaration, FieldKind, Settings};
use crate::error::Cause;
use crate::fields::json::check;
use crate::sample::Content;

pub(super) const DECLARATION: Declaration = Declaration {
    name: "json",
    extensions: &["json"],
    settings: &["max_bytes", "keys"],
    make,
};

#[derive(Debug)]
struct Json {
    max_bytes: usize,
    keys: Vec<String>,
}

impl FieldKind {
    /// A JSON document (UTF-8, nested at most 128 deep) of at most `max_bytes` bytes;
    /// with `keys` (chosen by the consumer), an object holding each of them; empty: any
    /// document.
    pub fn json(max_bytes: usize, keys: Vec<String>) -> FieldKind {
        FieldKind::of(Json { max_bytes, keys })
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    Ok(FieldKind::json(
        settings.max_bytes()?,
        settings.strings("keys")?,
    ))
}

impl VarKind for Json {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn content(&self) -> Content {
        Content::Json
    }

    fn fingerprint(&self) -> String {
        format!("json {} {:?}", self.max_bytes, self.keys)
    }

    fn settings(&self) -> Map<String, Value> {
        Map::from_iter([
            ("max_bytes".into(), json!(self.max_bytes)),
            ("keys".into(), json!(self.keys)),
        ])
    }

    fn check(&self, field: &str, member: &[u8]) -> Result<(), Cause> {
        check(member, &self.keys).map_err(|reason| Cause::BadJson {
            field: field.to_string(),
            reason,
        })
    }
}
