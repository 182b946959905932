//! A bytes field: a member of at most `max_bytes` bytes, kept as it is. The kind of a
//! member no other kind is declared for.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{var, Declaration, FieldKind, Kind, Settings};
use crate::error::Cause;
use crate::sample::{Content, PartForm, SampleLayout};

/// Declared for no extension: the kind of any no other kind is declared for.
pub(super) const DECLARATION: Declaration = Declaration {
    name: "bytes",
    extensions: &[],
    settings: &["max_bytes"],
    make,
};

#[derive(Debug)]
struct Bytes {
    max_bytes: usize,
}

impl FieldKind {
    /// Bytes as they are, at most `max_bytes`.
    pub fn bytes(max_bytes: usize) -> FieldKind {
        FieldKind::of(Bytes { max_bytes })
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    Ok(FieldKind::bytes(settings.max_bytes()?))
}

impl Kind for Bytes {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        var::check_max_bytes(self.max_bytes)
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Var {
            capacity: self.max_bytes,
            content: Content::Bytes,
        }
    }

    fn fingerprint(&self) -> String {
        format!("bytes {}", self.max_bytes)
    }

    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        var::too_large(field, member, var::capacity(slot))?;
        var::put(member, slot);
        Ok(())
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::from_iter([("max_bytes".into(), json!(self.max_bytes))])
    }
}
