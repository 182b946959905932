//! The sample's field: the member of the loader's modality (an image, a recording),
//! prepared by the loader's pipeline, not by its kind.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Declaration, FieldKind, Kind, Role, Settings};
use crate::error::Cause;
use crate::sample::{PartForm, SampleLayout};

/// Its extensions are the modality's ([`FieldKind::for_extension`]), not a list.
pub(super) const DECLARATION: Declaration = Declaration {
    name: "sample",
    extensions: &[],
    settings: &[],
    make,
};

#[derive(Debug)]
struct Sample;

impl FieldKind {
    /// The loader's pipeline (an image's or a recording's): a field of the loader's
    /// modality. The first is the record's sample; each later one (a second image of the
    /// sample) draws its own augmentations.
    pub fn sample() -> FieldKind {
        FieldKind::of(Sample)
    }
}

fn make(_: &mut Settings<'_>) -> Result<FieldKind, String> {
    Ok(FieldKind::sample())
}

impl Kind for Sample {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn role(&self) -> Role {
        Role::Sample
    }

    fn form(&self, sample: &SampleLayout) -> PartForm {
        PartForm::Tensor {
            shape: sample.shape().to_vec(),
            dtype: sample.dtype(),
        }
    }

    fn fingerprint(&self) -> String {
        "sample".into()
    }

    fn prepare(&self, field: &str, _: &[u8], _: &mut [u8]) -> Result<(), Cause> {
        Err(Cause::Internal(format!(
            "field {field:?} is the pipeline's, not a member to prepare"
        )))
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::new()
    }
}
