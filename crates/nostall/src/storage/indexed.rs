//! [`Indexed`]: the samples of a dataset that is code, not files (a Python `Dataset`):
//! a sample's bytes are its index, which the pipeline's preparer hands to that code
//! ([`crate::user_code::pool`]).

use super::{Source, SourceStats};
use crate::catalog::Catalog;
use crate::error::{Cause, Result};
use crate::sample::{Modality, SampleId};

/// `len` samples named `name[i]`: reading sample `i` gives `i` as 8 little-endian bytes.
#[derive(Debug)]
pub struct Indexed {
    name: String,
    len: u64,
}

impl Indexed {
    /// The `len` samples of the dataset `name` (how messages name it).
    pub fn new(name: impl Into<String>, len: usize) -> Indexed {
        Indexed {
            name: name.into(),
            len: len as u64,
        }
    }

    /// Its catalog: `len` samples without labels (their code gives any), of 8 bytes each.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Config`] for no sample.
    pub fn catalog(&self) -> Result<Catalog> {
        Catalog::from_samples(
            self.name.clone(),
            Modality::Image,
            Vec::new(),
            (0..self.len).map(|i| (i.to_string(), None, 8)),
        )
    }
}

impl Source for Indexed {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
        out.clear();
        if id >= self.len {
            return Err(Cause::Missing);
        }
        out.extend_from_slice(&id.to_le_bytes());
        Ok(())
    }

    fn location(&self, id: SampleId) -> String {
        format!("{}[{id}]", self.name)
    }

    fn stats(&self) -> SourceStats {
        SourceStats::default()
    }
}
