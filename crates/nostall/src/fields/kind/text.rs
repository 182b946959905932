//! A text field: a member of UTF-8 text of at most `max_bytes` bytes, kept as it is.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{var, Declaration, FieldKind, Kind, Settings};
use crate::error::Cause;
use crate::sample::{Content, PartForm, SampleLayout};

pub(super) const DECLARATION: Declaration = Declaration {
    name: "text",
    // The usual names of text columns besides webdataset's extensions.
    extensions: &["txt", "text", "caption", "transcript", "sentence"],
    settings: &["max_bytes"],
    make,
};

#[derive(Debug)]
struct Text {
    max_bytes: usize,
}

impl FieldKind {
    /// UTF-8 text of at most `max_bytes` bytes.
    pub fn text(max_bytes: usize) -> FieldKind {
        FieldKind::of(Text { max_bytes })
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    Ok(FieldKind::text(settings.max_bytes()?))
}

impl Kind for Text {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        var::check_max_bytes(self.max_bytes)
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Var {
            capacity: self.max_bytes,
            content: Content::Text,
        }
    }

    fn fingerprint(&self) -> String {
        format!("text {}", self.max_bytes)
    }

    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        // `bad-text` (not `too-large`) as it always was: users' skip counts and tests
        // read it so.
        let capacity = var::capacity(slot);
        if member.len() > capacity {
            return Err(bad_text(
                field,
                format!(
                    "{} bytes, more than the field holds (max_bytes={capacity}; raise it for \
                     field {field:?})",
                    member.len()
                ),
            ));
        }
        let text = utf8(field, member)?;
        var::put(text.as_bytes(), slot);
        Ok(())
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::from_iter([("max_bytes".into(), json!(self.max_bytes))])
    }
}

/// `member` as text, or field `field`'s `bad-text`.
pub(super) fn utf8<'a>(field: &str, member: &'a [u8]) -> Result<&'a str, Cause> {
    std::str::from_utf8(member).map_err(|e| {
        bad_text(
            field,
            format!("not UTF-8 text ({e}); read the field as bytes to take it as it is"),
        )
    })
}

/// Field `field`'s `bad-text`, for `reason`.
pub(super) fn bad_text(field: &str, reason: impl ToString) -> Cause {
    Cause::BadText {
        field: field.to_string(),
        reason: reason.to_string(),
    }
}
