//! Test sources.

use std::sync::atomic::{AtomicU64, Ordering};

use nostall::storage::{Source, SourceStats};
use nostall::{Cause, SampleId};

/// A source of `len` samples of `size` bytes each, with recognisable contents, that
/// counts its reads.
#[derive(Debug)]
pub(crate) struct Counting {
    len: u64,
    size: usize,
    reads: AtomicU64,
}

impl Counting {
    pub(crate) fn new(len: u64, size: usize) -> Counting {
        Counting {
            len,
            size,
            reads: AtomicU64::new(0),
        }
    }

    /// Sample `id`'s contents.
    pub(crate) fn bytes(id: SampleId, size: usize) -> Vec<u8> {
        (0..size).map(|i| (id as usize * 31 + i) as u8).collect()
    }

    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Source for Counting {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        if id >= self.len {
            return Err(Cause::Missing);
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        *out = Counting::bytes(id, self.size);
        Ok(())
    }

    fn location(&self, id: SampleId) -> String {
        format!("sample-{id}")
    }

    fn stats(&self) -> SourceStats {
        let requests = self.reads();
        SourceStats {
            requests,
            bytes: requests * self.size as u64,
        }
    }
}
