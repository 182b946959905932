//! A batch handed to the consumer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::plan::Position;
use crate::prep::{DType, Deferred, SampleLayout};
use crate::sample::SampleId;

use super::buffer::{BatchBuffer, Pool};

/// A batch of prepared samples, in one buffer that returns to the loader when dropped.
pub struct Batch {
    pub(super) buffer: Option<BatchBuffer>,
    pub(super) pool: Arc<Pool>,
    pub(super) len: usize,
    pub(super) layout: SampleLayout,
    pub(super) sample_bytes: usize,
    pub(super) labels: Vec<i64>,
    pub(super) soft_labels: Option<Vec<f32>>,
    pub(super) ids: Vec<SampleId>,
    pub(super) index: u64,
    pub(super) position: Position,
    pub(super) wait: Duration,
    pub(super) deferred: Vec<(usize, Deferred)>,
    /// Freed, not recycled, when dropped ([`Batch::retire`]).
    pub(super) retired: AtomicBool,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("index", &self.index)
            .field("shape", &self.shape())
            .finish_non_exhaustive()
    }
}

impl Batch {
    /// Number of samples (the batch size, except perhaps for the last batch).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no sample (never true for a delivered batch).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Shape: the number of samples, then the sample's ([`SampleLayout::shape`]), e.g.
    /// `[len, 3, h, w]` for CHW images or `[len, channels, samples]` for audio.
    pub fn shape(&self) -> Vec<usize> {
        let mut shape = Vec::with_capacity(1 + self.layout.shape().len());
        shape.push(self.len);
        shape.extend_from_slice(self.layout.shape());
        shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype()
    }

    /// The samples' bytes, back to back, native endianness.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref().expect("present until drop").bytes()[..self.len * self.sample_bytes]
    }

    /// The samples' bytes, writable (for handing the batch to a framework that may
    /// change its tensors in place).
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len * self.sample_bytes;
        &mut self
            .buffer
            .as_mut()
            .expect("present until drop")
            .bytes_mut()[..len]
    }

    /// The buffer holding the data, when the loader's [`Arena`](super::Arena) is shared
    /// memory: another process maps it to read the batch without a copy. Its bytes stay
    /// this batch's until the batch is dropped.
    pub fn shared_memory(&self) -> Option<super::SharedMemory<'_>> {
        self.buffer.as_ref().and_then(|b| b.shared_memory())
    }

    /// The data as f32 values, when the dtype is f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        if self.layout.dtype() != DType::F32 {
            return None;
        }
        let data = self.data();
        // SAFETY: the buffer is 64-byte aligned and was written as f32 values; every
        // bit pattern is a valid f32; the length is a multiple of 4 (whole samples).
        Some(unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<f32>(), data.len() / 4) })
    }

    /// One label per sample (the class index; -1 for unlabelled data).
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// The mixed labels where the loader mixes batches ([`Mixup`](crate::prep::mixup::Mixup)):
    /// a row of [`num_classes`](crate::prep::mixup::Mixup::num_classes) per sample.
    pub fn soft_labels(&self) -> Option<&[f32]> {
        self.soft_labels.as_deref()
    }

    /// The samples' catalog ids, in batch order.
    pub fn ids(&self) -> &[SampleId] {
        &self.ids
    }

    /// This batch's number within the epoch.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The position just after this batch: resuming there yields the next batch.
    pub fn position(&self) -> Position {
        self.position
    }

    /// How long the consumer waited for this batch: the data stall it caused.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The samples left for a device to decode, each with its slot in the batch (which
    /// holds zeros until the device writes it): none unless the pipeline has a
    /// [`DecodeRoute`](crate::prep::route::DecodeRoute).
    pub fn deferred(&self) -> &[(usize, Deferred)] {
        &self.deferred
    }
}

/// What a batch carries besides its samples' bytes: what a preparer in another process
/// sends with them ([`Batch::header`]), and what [`Loader::receive`] makes a batch of
/// again.
///
/// [`Loader::receive`]: super::Loader::receive
#[derive(Debug, Clone, PartialEq)]
pub struct BatchHeader {
    /// The batch's number in its epoch ([`Batch::index`]).
    pub index: u64,
    /// Where the epoch stands once the batch is delivered ([`Batch::position`]).
    pub position: Position,
    /// One label per sample.
    pub labels: Vec<i64>,
    /// The mixed labels, `len × classes`, under MixUp/CutMix.
    pub soft_labels: Option<Vec<f32>>,
    /// The samples' catalog ids.
    pub ids: Vec<SampleId>,
}

impl Batch {
    /// The same batch numbered `index` in its epoch (its position after it, one more):
    /// for batches made in ranges of a run ([`Loader::batches`]) where a range that
    /// lost whole batches to skips leaves the numbers after it to be closed up.
    ///
    /// [`Loader::batches`]: super::Loader::batches
    pub fn renumber(&mut self, index: u64) {
        self.index = index;
        self.position.batch = index + 1;
    }

    /// Everything but the bytes, for sending the batch elsewhere.
    pub fn header(&self) -> BatchHeader {
        BatchHeader {
            index: self.index,
            position: self.position,
            labels: self.labels.clone(),
            soft_labels: self.soft_labels.clone(),
            ids: self.ids.clone(),
        }
    }

    /// Keeps this batch's buffer from ever carrying another batch: when the batch drops,
    /// its memory is freed instead of returning to the loader's pool (which makes a new
    /// buffer when it needs one).
    ///
    /// For a batch in shared memory that another process may still map after it can no
    /// longer say it is done with it (the node agent, when a job's connection ends while
    /// the job holds batches): a later batch written into the buffer would show through
    /// that process's copy-on-write mapping, in every page it has not written. Freed, the
    /// memory lives on in that process's mapping alone.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            if !self.retired.load(Ordering::Acquire) {
                self.pool.give(buffer);
            }
        }
    }
}
