//! A text field: a member of UTF-8 text of at most `max_bytes` bytes, kept as it is.

use super::var::VarKind;
use super::{Declaration, FieldKind, Settings};
use crate::error::Cause;
use crate::sample::Content;

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

impl VarKind for Text {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn content(&self) -> Content {
        Content::Text
    }

    fn fits(&self, field: &str, member: &[u8], capacity: usize) -> Result<(), Cause> {
        // `bad-text` (not `too-large`) as it always was: users' skip counts and tests
        // read it so.
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
        Ok(())
    }

    fn check(&self, field: &str, member: &[u8]) -> Result<(), Cause> {
        utf8(field, member).map(drop)
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
