//! A bytes field: a member of at most `max_bytes` bytes, kept as it is. The kind of a
//! member no other kind is declared for.

use super::var::VarKind;
use super::{Declaration, FieldKind, Settings};
use crate::sample::Content;

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

impl VarKind for Bytes {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn content(&self) -> Content {
        Content::Bytes
    }
}
