//! Samples held in memory: the source that takes storage out of a measurement.

use super::{Served, Source, SourceStats, Tier};
use crate::error::Cause;
use crate::sample::SampleId;

/// Sample `i`'s bytes are `samples[i]`. DS-Analyzer measures prep over this source, so
/// that what it times is decoding and augmenting only.
#[derive(Debug, Default)]
pub struct Memory {
    samples: Vec<Vec<u8>>,
    served: Served,
}

impl Memory {
    /// A source serving `samples`, sample id `i` being `samples[i]`.
    pub fn new(samples: Vec<Vec<u8>>) -> Memory {
        Memory {
            samples,
            ..Memory::default()
        }
    }
}

impl Source for Memory {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        out.clear();
        let bytes = self.samples.get(id as usize).ok_or(Cause::Missing)?;
        if bytes.is_empty() {
            return Err(Cause::Empty);
        }
        out.extend_from_slice(bytes);
        self.served.count(bytes.len() as u64);
        Ok(())
    }

    fn tier(&self, _id: SampleId) -> Tier {
        Tier::Memory
    }

    fn location(&self, id: SampleId) -> String {
        format!("memory sample {id}")
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}
