//! Batch buffers: aligned, pooled, and written by several threads at once.
//!
//! A batch buffer is one allocation holding `batch_size` prepared samples back to back.
//! Prep threads write different samples of the same buffer concurrently, so the buffer
//! hands out raw slot pointers rather than `&mut` slices (which would alias). All `unsafe`
//! of the pipeline is in this file; the invariant that makes it sound is stated once, on
//! [`Slot`], and upheld by the claim protocol in `loader::order`.
//!
//! Buffers come from an arena: the process's own memory, or shared memory (a memfd each)
//! that another process can map, for the node agent, which hands batches to the
//! processes of several jobs without copying them. A [`PageLock`] pins a private buffer's
//! pages for as long as it lives, so that a device copies from it without a bounce.

use std::alloc::{self, Layout};
#[cfg(test)]
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// Where batch buffers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Arena {
    /// This process's memory.
    #[default]
    Private,
    /// Shared memory: each buffer a memfd that other processes can map
    /// ([`Batch::shared_memory`](super::Batch::shared_memory)).
    Shared,
}

/// A batch buffer in shared memory, as another process maps it.
#[derive(Debug, Clone, Copy)]
pub struct SharedMemory<'a> {
    /// The memfd holding the buffer; map it from offset 0.
    pub fd: BorrowedFd<'a>,
    /// The buffer's number, unique in this process: the same buffer carries later
    /// batches once this one is dropped, so a process that received its descriptor can
    /// keep it. The memfd is sealed: map it privately (`MAP_PRIVATE`) to read a batch
    /// and change it in place; a shared writable mapping, a write or a resize is refused.
    pub id: u64,
    /// The buffer's length in bytes (the batch's data is at its start).
    pub len: usize,
}

/// Page-locks batch buffers for a device's copy engine (CUDA's `cudaHostRegister`, say):
/// the seam between the pipeline and a device runtime, which the engine loads only when a
/// consumer asks for a device.
pub trait PageLock: Send + Sync + std::fmt::Debug {
    /// Locks the `len` bytes at `ptr` (page-aligned, a whole mapping); whether it did. A
    /// buffer that could not be locked is still used, and copied more slowly.
    fn lock(&self, ptr: NonNull<u8>, len: usize) -> bool;

    /// Unlocks what [`lock`](PageLock::lock) locked at `ptr`, before its memory is
    /// freed.
    fn unlock(&self, ptr: NonNull<u8>);
}

/// Seals a shared buffer's memfd once this process has mapped it writable: no one it is
/// sent to can shrink or grow it (a fault in every process that maps it), write it, or map
/// it writable and shared; the mapping made here keeps writing. Readers map it privately
/// (copy-on-write), so that changing a batch in place changes their copy alone. Kernels
/// before 5.1 lack `F_SEAL_FUTURE_WRITE`: the size seals are set alone there.
fn seal(fd: libc::c_int) -> std::io::Result<()> {
    let size = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    for seals in [size | libc::F_SEAL_FUTURE_WRITE, size] {
        // SAFETY: fcntl on a descriptor this process owns, with a valid command and seals.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } == 0 {
            return Ok(());
        }
    }
    Err(std::io::Error::last_os_error())
}

/// Numbers shared buffers, for processes that keep their mappings by buffer.
static NEXT_SHARED_ID: AtomicU64 = AtomicU64::new(1);

/// One batch's worth of bytes, 64-byte aligned (page-aligned when mapped),
/// zero-initialised once at allocation.
#[derive(Debug)]
pub(crate) struct BatchBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// The memfd behind a shared buffer, and its number.
    shared: Option<(OwnedFd, u64)>,
    /// What locked its pages, to unlock them before they are freed.
    locked: Option<Arc<dyn PageLock>>,
}

// SAFETY: BatchBuffer owns its allocation like a Box<[u8]>; shared access goes through
// `&self` methods that either read (after all writers are done) or hand out slot pointers
// whose disjointness the claim protocol guarantees.
unsafe impl Send for BatchBuffer {}
// SAFETY: as for `Send`.
unsafe impl Sync for BatchBuffer {}

impl BatchBuffer {
    fn new(len: usize, arena: Arena, page_lock: Option<&Arc<dyn PageLock>>) -> BatchBuffer {
        match arena {
            Arena::Private => match page_lock {
                None => Self::private(len),
                Some(lock) => Self::locked(len, lock),
            },
            Arena::Shared => Self::shared(len).unwrap_or_else(|e| {
                // As the heap does when memory runs out: the pipeline has no way on.
                panic!("cannot make a shared batch buffer of {len} bytes: {e}")
            }),
        }
    }

    fn shared(len: usize) -> std::io::Result<BatchBuffer> {
        let len = len.max(1);
        // SAFETY: a NUL-terminated name; the flags are valid for memfd_create.
        let raw = unsafe {
            libc::memfd_create(
                c"nostall-batch".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned to us, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len).map_err(std::io::Error::other)?;
        // SAFETY: a valid descriptor; a memfd grows to `size` bytes of zeros.
        if unsafe { libc::ftruncate(raw, size) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a shared mapping of the whole memfd at an address the kernel chooses:
        // it aliases nothing in this process.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(std::io::Error::last_os_error)?;
        seal(raw)?;
        let id = NEXT_SHARED_ID.fetch_add(1, Ordering::Relaxed);
        Ok(BatchBuffer {
            ptr,
            len,
            shared: Some((fd, id)),
            locked: None,
        })
    }

    /// A mapped buffer (whole pages of its own, whatever its size, so that no other
    /// allocation shares a locked page), locked by `lock`.
    fn locked(len: usize, lock: &Arc<dyn PageLock>) -> BatchBuffer {
        let mut buffer = Self::mapped(len.max(MAPPED));
        if lock.lock(buffer.ptr, buffer.len) {
            buffer.locked = Some(lock.clone());
        }
        buffer
    }

    fn private(len: usize) -> BatchBuffer {
        if len >= MAPPED {
            return Self::mapped(len);
        }
        let layout = Self::layout_for(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        BatchBuffer {
            ptr,
            len,
            shared: None,
            locked: None,
        }
    }

    fn mapped(len: usize) -> BatchBuffer {
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
        match NonNull::new(ptr.cast()) {
            Some(ptr) if ptr.as_ptr() != libc::MAP_FAILED.cast() => BatchBuffer {
                ptr,
                len,
                shared: None,
                locked: None,
            },
            _ => alloc::handle_alloc_error(Self::layout_for(len)),
        }
    }

    /// The memfd behind a shared buffer.
    pub(crate) fn shared_memory(&self) -> Option<SharedMemory<'_>> {
        self.shared.as_ref().map(|(fd, id)| SharedMemory {
            fd: fd.as_fd(),
            id: *id,
            len: self.len,
        })
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
        if let Some(lock) = self.locked.take() {
            lock.unlock(self.ptr);
        }
        // A shared buffer is a mapping whatever its size; its memfd closes with it.
        if self.len >= MAPPED || self.shared.is_some() {
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
    arena: Arena,
    page_lock: Option<Arc<dyn PageLock>>,
    free: Mutex<Vec<BatchBuffer>>,
    allocated: AtomicUsize,
}

impl Pool {
    pub(crate) fn new(
        buffer_bytes: usize,
        arena: Arena,
        page_lock: Option<Arc<dyn PageLock>>,
    ) -> Arc<Pool> {
        Arc::new(Pool {
            buffer_bytes,
            arena,
            page_lock,
            free: Mutex::new(Vec::new()),
            allocated: AtomicUsize::new(0),
        })
    }

    pub(crate) fn take(&self) -> BatchBuffer {
        let recycled = self.free.lock().expect("pool lock").pop();
        recycled.unwrap_or_else(|| {
            self.allocated.fetch_add(1, Ordering::Relaxed);
            BatchBuffer::new(self.buffer_bytes, self.arena, self.page_lock.as_ref())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `errno` of a libc call that failed, `None` for one that succeeded.
    fn errno_of(result: libc::c_int) -> Option<i32> {
        (result != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// A page of `fd` mapped readable and writable with `flags`, as a member might try.
    fn map_page(fd: libc::c_int, flags: libc::c_int) -> Option<&'static mut [u8]> {
        // SAFETY: a new mapping of one page at an address the kernel chooses, never
        // unmapped (the test's few pages live until the process ends).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        // SAFETY: a mapping of 4096 bytes just made, referenced only through this slice.
        (ptr != libc::MAP_FAILED)
            .then(|| unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), 4096) })
    }

    #[test]
    fn a_shared_buffer_is_sealed_against_its_readers_and_private_to_each_mapping() {
        let pool = Pool::new(3 * 4096, Arena::Shared, None);
        let mut buffer = pool.take();
        buffer.bytes_mut().fill(7);
        let fd = buffer
            .shared_memory()
            .expect("a shared buffer")
            .fd
            .as_raw_fd();
        for size in [0, 1 << 20] {
            // SAFETY: ftruncate on a descriptor of this test.
            let resized = unsafe { libc::ftruncate(fd, size) };
            assert_eq!(errno_of(resized), Some(libc::EPERM), "resized to {size}");
        }
        // SAFETY: pwrite of one byte from a live array to a descriptor of this test.
        let written = unsafe { libc::pwrite(fd, [1u8].as_ptr().cast(), 1, 0) };
        assert_eq!(written, -1, "a write() through the descriptor is refused");
        assert!(
            map_page(fd, libc::MAP_SHARED).is_none(),
            "no shared writable mapping"
        );
        let page = map_page(fd, libc::MAP_PRIVATE).expect("a private mapping");
        assert!(page.iter().all(|&b| b == 7));
        page.fill(9);
        // The reader's change is its own; the owner's later writes still land.
        assert!(buffer.bytes().iter().all(|&b| b == 7));
        buffer.bytes_mut()[..4096].fill(8);
        let other = map_page(fd, libc::MAP_PRIVATE).expect("a private mapping");
        assert!(other.iter().all(|&b| b == 8));
        assert!(page.iter().all(|&b| b == 9));
    }
}
