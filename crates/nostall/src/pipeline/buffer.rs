//! Batch buffers: aligned, pooled, and written by several threads at once.
//!
//! A batch buffer is one allocation holding `batch_size` prepared samples back to back.
//! Prep threads write different samples of the same buffer concurrently, so the buffer
//! hands out raw slot pointers rather than `&mut` slices (which would alias). All `unsafe`
//! of the pipeline is in this file; the invariant that makes it sound is stated once, on
//! [`Slot`], and upheld by the claim protocol in `pipeline::mod`.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Alignment of every buffer: a cache line, and enough for any SIMD load or DLPack user.
const ALIGN: usize = 64;

/// Buffers this large or larger are mapped from the kernel rather than the heap: its
/// pages arrive zeroed, on first touch, so that a fresh buffer costs a system call and
/// no pass over its bytes. The heap's aligned allocation zeroes them itself, in the
/// thread that claimed the first sample of the batch while it holds the claim lock: for a
/// batch of 224² float images (38.5 MB) that pass, page faults included, made a loader's
/// first batch several times slower than the next.
const MAPPED: usize = 1 << 20;

/// One batch's worth of bytes, 64-byte aligned (page-aligned when mapped),
/// zero-initialised once at allocation.
#[derive(Debug)]
pub(crate) struct BatchBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: BatchBuffer owns its allocation like a Box<[u8]>; shared access goes through
// `&self` methods that either read (after all writers are done) or hand out slot pointers
// whose disjointness the claim protocol guarantees.
unsafe impl Send for BatchBuffer {}
// SAFETY: as for `Send`.
unsafe impl Sync for BatchBuffer {}

impl BatchBuffer {
    fn new(len: usize) -> BatchBuffer {
        let layout = Self::layout_for(len);
        if len >= MAPPED {
            // SAFETY: an anonymous private mapping of `len` bytes at an address the kernel
            // chooses: it aliases nothing, and its pages read as zero.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if ptr != libc::MAP_FAILED {
                if let Some(ptr) = NonNull::new(ptr.cast()) {
                    return BatchBuffer { ptr, len };
                }
            }
            alloc::handle_alloc_error(layout);
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        BatchBuffer { ptr, len }
    }

    fn layout_for(len: usize) -> Layout {
        Layout::from_size_align(len.max(1), ALIGN).expect("batch size overflows memory")
    }

    /// The bytes. Only call when no slot of this buffer is being written.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the allocation holds `len` initialised bytes; the caller guarantees no
        // concurrent writer (batches are read only after all their samples completed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable. Only call when no slot of this buffer is being written.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`; `&mut self` rules out any other reference through it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// A writable view of sample `index` of `sample_bytes` bytes.
    pub(crate) fn slot(&self, index: usize, sample_bytes: usize) -> Slot {
        assert!(
            (index + 1) * sample_bytes <= self.len,
            "slot {index} outside the batch buffer"
        );
        // SAFETY: in bounds, checked above.
        let ptr = unsafe { self.ptr.as_ptr().add(index * sample_bytes) };
        Slot {
            ptr,
            len: sample_bytes,
        }
    }

    /// Copies slot `from` of `src` to slot `to` of `self` (a compaction after a skip).
    pub(crate) fn copy_slot(&self, to: usize, src: &BatchBuffer, from: usize, sample_bytes: usize) {
        let (dst, src) = (self.slot(to, sample_bytes), src.slot(from, sample_bytes));
        if dst.ptr != src.ptr {
            // SAFETY: both slots are in bounds and distinct (so they do not overlap, being
            // whole slots of equal size); neither is being written, as both samples have
            // completed (see `Slot`).
            unsafe { std::ptr::copy_nonoverlapping(src.ptr, dst.ptr, sample_bytes) }
        }
    }
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        if self.len >= MAPPED {
            // SAFETY: mapped in `new` with this length, unmapped once. A failure would
            // leave the mapping in place (a leak), never free anything else.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        } else {
            // SAFETY: allocated in `new` with the same layout, freed once.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout_for(self.len)) }
        }
    }
}

/// Where one sample is written.
///
/// Invariant: at most one thread holds a given slot at a time (the claim protocol gives
/// each in-flight sample its own position), and the buffer outlives the slot (a buffer
/// leaves the pipeline only after every sample written into it has completed).
#[derive(Debug)]
pub(crate) struct Slot {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a slot is exclusive to its holder (see the invariant above).
unsafe impl Send for Slot {}

impl Slot {
    /// The slot's bytes, for the one thread preparing its sample.
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: exclusive by the invariant on `Slot`; in bounds by construction.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Recycles batch buffers so that steady state allocates nothing.
#[derive(Debug)]
pub(crate) struct Pool {
    buffer_bytes: usize,
    free: Mutex<Vec<BatchBuffer>>,
    allocated: AtomicUsize,
}

impl Pool {
    pub(crate) fn new(buffer_bytes: usize) -> Arc<Pool> {
        Arc::new(Pool {
            buffer_bytes,
            free: Mutex::new(Vec::new()),
            allocated: AtomicUsize::new(0),
        })
    }

    pub(crate) fn take(&self) -> BatchBuffer {
        let recycled = self.free.lock().expect("pool lock").pop();
        recycled.unwrap_or_else(|| {
            self.allocated.fetch_add(1, Ordering::Relaxed);
            BatchBuffer::new(self.buffer_bytes)
        })
    }

    pub(crate) fn give(&self, buffer: BatchBuffer) {
        self.free.lock().expect("pool lock").push(buffer);
    }

    /// Buffers allocated so far (in use or idle).
    pub(crate) fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
}
