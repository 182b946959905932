//! [`Held`]: samples whose bytes the caller keeps in memory, such as the Arrow buffers of
//! a Hugging Face `datasets.Dataset` (which the Python bindings read in place), or the
//! local files they name instead.
//!
//! The caller implements [`HeldSamples`]: sample `i`'s bytes, or the path of its file.
//! A read copies them into the sample's buffer (decoding costs far more than the copy),
//! so nothing the pipeline keeps refers to the caller's memory.

use std::path::Path;
use std::sync::Arc;

use super::files::read_regular_file;
use super::{ReadMode, Served, Source, SourceStats, Tier, DEFAULT_MAX_BYTES};
use crate::catalog::Catalog;
use crate::error::{Cause, Error, Result};
use crate::sample::{Modality, SampleId};

/// Where one held sample's bytes are.
#[derive(Debug)]
#[non_exhaustive]
pub enum HeldSample<'a> {
    /// In memory.
    Bytes(&'a [u8]),
    /// In the local file at this path.
    File(&'a Path),
}

/// The samples a caller holds, by index.
pub trait HeldSamples: Send + Sync {
    /// How many.
    fn len(&self) -> u64;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sample `index`'s bytes or file.
    ///
    /// # Errors
    ///
    /// [`Cause::Missing`] where it has neither; [`Cause::Corrupt`] where the caller's data
    /// does not hold it whole (offsets past the end of a buffer).
    fn sample(&self, index: u64) -> std::result::Result<HeldSample<'_>, Cause>;
}

/// A source over [`HeldSamples`], its samples named `name[i]`.
pub struct Held {
    name: String,
    samples: Arc<dyn HeldSamples>,
    max_bytes: u64,
    served: Served,
}

impl Held {
    /// The samples `samples` of the dataset `name` (how messages name it).
    pub fn new(name: impl Into<String>, samples: Arc<dyn HeldSamples>) -> Held {
        Held {
            name: name.into(),
            samples,
            max_bytes: DEFAULT_MAX_BYTES,
            served: Served::default(),
        }
    }

    /// Its catalog: one sample per index, with `labels` (one per sample, or none) among
    /// `classes`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Config`] for no sample, or labels that are not one per sample.
    pub fn catalog(
        &self,
        modality: Modality,
        classes: Vec<String>,
        labels: &[u32],
    ) -> Result<Catalog> {
        let len = self.samples.len();
        if !labels.is_empty() && labels.len() as u64 != len {
            return Err(Error::Config(format!(
                "{}: {} labels for {len} samples",
                self.name,
                labels.len()
            )));
        }
        let size = |i: u64| match self.samples.sample(i) {
            Ok(HeldSample::Bytes(bytes)) => bytes.len() as u64,
            _ => 0,
        };
        Catalog::from_samples(
            self.name.clone(),
            modality,
            classes,
            (0..len).map(|i| (i.to_string(), labels.get(i as usize).copied(), size(i))),
        )
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("name", &self.name)
            .field("len", &self.samples.len())
            .finish_non_exhaustive()
    }
}

impl Source for Held {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
        out.clear();
        if id >= self.samples.len() {
            return Err(Cause::Missing);
        }
        let read = match self.samples.sample(id)? {
            HeldSample::Bytes([]) => Err(Cause::Empty),
            HeldSample::Bytes(bytes) if bytes.len() as u64 > self.max_bytes => {
                Err(Cause::TooLarge {
                    bytes: bytes.len() as u64,
                    limit: self.max_bytes,
                    field: None,
                })
            }
            HeldSample::Bytes(bytes) => {
                out.extend_from_slice(bytes);
                Ok(())
            }
            HeldSample::File(path) => {
                read_regular_file(path, self.max_bytes, ReadMode::Cached, out)
            }
        };
        self.served.settle(read, out)
    }

    fn tier(&self, _id: SampleId) -> Tier {
        Tier::Memory
    }

    fn location(&self, id: SampleId) -> String {
        format!("{}[{id}]", self.name)
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two(Vec<Option<Vec<u8>>>);

    impl HeldSamples for Two {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }

        fn sample(&self, index: u64) -> std::result::Result<HeldSample<'_>, Cause> {
            match &self.0[index as usize] {
                Some(bytes) => Ok(HeldSample::Bytes(bytes)),
                None => Err(Cause::Missing),
            }
        }
    }

    #[test]
    fn held_bytes_are_read_and_missing_empty_or_huge_ones_refused() {
        let big = vec![1u8; 64];
        let samples = Two(vec![
            Some(b"abc".to_vec()),
            None,
            Some(Vec::new()),
            Some(big),
        ]);
        let mut held = Held::new("ds", Arc::new(samples));
        held.max_bytes = 16;
        let mut out = vec![9];
        held.read(0, &mut out).unwrap();
        assert_eq!(out, b"abc");
        assert!(matches!(held.read(1, &mut out), Err(Cause::Missing)));
        assert!(matches!(held.read(2, &mut out), Err(Cause::Empty)));
        assert!(matches!(
            held.read(3, &mut out),
            Err(Cause::TooLarge { .. })
        ));
        assert!(matches!(held.read(4, &mut out), Err(Cause::Missing)));
        assert!(out.is_empty());
        assert_eq!(held.location(2), "ds[2]");
        let catalog = held
            .catalog(Modality::Image, vec![], &[0, 1, 0, 1])
            .unwrap();
        assert_eq!(catalog.len(), 4);
        assert!(held.catalog(Modality::Image, vec![], &[0]).is_err());
    }
}
