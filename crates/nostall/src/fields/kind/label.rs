//! The label field: the sample's `.cls` member (a manifest's `label`), read when the
//! shards are indexed and delivered as the batch's labels, so nothing of it is in the
//! slot.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Declaration, FieldKind, Kind, Role, Settings};
use crate::error::Cause;
use crate::sample::{PartForm, SampleLayout};

pub(super) const DECLARATION: Declaration = Declaration {
    name: "label",
    extensions: &["cls", "label"],
    settings: &[],
    make,
};

#[derive(Debug)]
struct Label;

impl FieldKind {
    /// The sample's label: the `.cls` member, read when the shards are indexed.
    pub fn label() -> FieldKind {
        FieldKind::of(Label)
    }
}

fn make(_: &mut Settings<'_>) -> Result<FieldKind, String> {
    Ok(FieldKind::label())
}

impl Kind for Label {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn role(&self) -> Role {
        Role::Label
    }

    fn check(&self, members: &[String]) -> Result<(), String> {
        if !matches!(members, [m] if DECLARATION.extensions.contains(&m.as_str())) {
            return Err(format!(
                "labels are read from .cls members (a manifest's label); read {:?} as text \
                 instead",
                members.join(";")
            ));
        }
        Ok(())
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Label
    }

    fn fingerprint(&self) -> String {
        "label".into()
    }

    fn prepare(&self, field: &str, _: &[u8], _: &mut [u8]) -> Result<(), Cause> {
        Err(Cause::Internal(format!(
            "field {field:?} is the label, not a member to prepare"
        )))
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::new()
    }
}
