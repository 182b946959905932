//! The epoch a `Loader` iterates: made by its own threads, or in parts by its preparers
//! (`remote=`), behind one face.

use std::time::Duration;

use nostall::loader::Next;
use nostall::{Checkpoint, EpochStats, Position, SampleError};

/// An epoch in progress, wherever its batches are made.
pub(crate) enum Run {
    /// The loader's own threads.
    Local(nostall::Epoch),
    /// Parts made by the trainer's own loader and remote preparers.
    Remote(nostall_remote::RemoteRun),
}

impl Run {
    pub(crate) fn next_within(&mut self, limit: Duration) -> Next {
        match self {
            Run::Local(epoch) => epoch.next_within(limit),
            Run::Remote(run) => run.next_within(limit),
        }
    }

    pub(crate) fn position(&self) -> Position {
        match self {
            Run::Local(epoch) => epoch.position(),
            Run::Remote(run) => run.position(),
        }
    }

    /// The state to resume exactly here.
    pub(crate) fn checkpoint(&self, loader: &nostall::Loader) -> Checkpoint {
        match self {
            Run::Local(epoch) => loader.checkpoint(epoch),
            Run::Remote(run) => run.checkpoint(),
        }
    }

    pub(crate) fn stats(&self) -> EpochStats {
        match self {
            Run::Local(epoch) => epoch.stats(),
            Run::Remote(run) => run.stats(),
        }
    }

    pub(crate) fn skipped(&self) -> Vec<SampleError> {
        match self {
            Run::Local(epoch) => epoch.skipped(),
            Run::Remote(run) => run.skipped().to_vec(),
        }
    }
}
