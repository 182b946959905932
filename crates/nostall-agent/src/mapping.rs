//! A job's views of the agent's batch buffers: private, copy-on-write mappings of their
//! memfds, kept from one batch of a buffer to its next.
//!
//! A batch is read in place (no copy), and training code may change it in place
//! (`images.sub_(mean)`): a page it writes becomes its own, so the change never reaches
//! the agent or another job. Mapping a batch anew costs its page tables every time
//! (docs/agent.md has the figures), and every job pays it for each batch the agent made
//! once. So a buffer's mapping is kept while the job holds the buffer: when its batch is
//! dropped, the pages the job changed are found in `/proc/self/pagemap` (a changed page
//! is anonymous, an unchanged one the memfd's) and dropped with `MADV_DONTNEED`, after
//! which they read the memfd again, so that a change never shows in a later batch of the
//! same buffer. Where the page map cannot be read, each batch maps its buffer anew.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::Mutex;

/// One of the agent's batch buffers: its memfd (sealed by the agent: see
/// [`nostall::loader::SharedMemory`]), checked to hold `len` bytes, and its mapping
/// between batches.
#[derive(Debug)]
pub(crate) struct Buffer {
    fd: OwnedFd,
    pub(crate) len: usize,
    /// The whole buffer mapped, its pages as the agent wrote them; taken by the batch
    /// that reads the buffer (one at a time: the agent writes a buffer again only once
    /// every job released it).
    kept: Mutex<Option<Mapping>>,
}

impl Buffer {
    pub(crate) fn new(fd: OwnedFd, len: usize) -> io::Result<Buffer> {
        // The memfd must hold what the header claims, or reading it would fault; its
        // seals keep it so.
        // SAFETY: fstat fills a stat of a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as u64) < len as u64 || len == 0 {
            return Err(io::Error::other(format!(
                "a shared buffer of {} bytes announced as {len}",
                st.st_size
            )));
        }
        Ok(Buffer {
            fd,
            len,
            kept: Mutex::new(None),
        })
    }

    /// A mapping of the buffer for its next batch: the kept one, else a new one of all of
    /// it.
    pub(crate) fn take(&self) -> io::Result<Mapping> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner()).take();
        match kept {
            Some(mapping) => Ok(mapping),
            None => Mapping::private(self),
        }
    }

    /// Gives back the mapping of a batch of `len` bytes that is done with it: kept for the
    /// next batch once the pages the job changed read the memfd again, else unmapped.
    pub(crate) fn give_back(&self, mapping: Mapping, len: usize) {
        if mapping.restore(len).is_ok() {
            *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(mapping);
        }
    }
}

/// A private, copy-on-write mapping of a whole buffer.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a private mapping owned by one batch (or its buffer between batches), unmapped
// once, on its drop.
unsafe impl Send for Mapping {}
// SAFETY: shared access only reads (writes need the batch's `&mut`).
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the buffer read-only with its page tables filled in one call, then makes it
    /// writable (a page fault per page costs more). Kernels that refuse to make a sealed
    /// memfd's private mapping writable later get the mapping writable at once.
    fn private(buffer: &Buffer) -> io::Result<Mapping> {
        let len = buffer.len;
        let map = |prot, flags| {
            // SAFETY: a private mapping of `len` bytes of the memfd (checked to hold them)
            // at an address the kernel chooses: it aliases nothing of this process.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_PRIVATE | flags,
                    buffer.fd.as_raw_fd(),
                    0,
                )
            };
            match NonNull::new(ptr.cast::<u8>()) {
                Some(ptr) if ptr.as_ptr() != libc::MAP_FAILED.cast() => Ok(Mapping { ptr, len }),
                _ => Err(io::Error::last_os_error()),
            }
        };
        let read = libc::PROT_READ;
        let write = libc::PROT_READ | libc::PROT_WRITE;
        let populated = map(read, libc::MAP_POPULATE)?;
        // SAFETY: the whole of a mapping made just above.
        if unsafe { libc::mprotect(populated.ptr.as_ptr().cast(), len, write) } == 0 {
            return Ok(populated);
        }
        drop(populated);
        map(write, 0)
    }

    /// The mapping's first `len` bytes (at most all of it).
    pub(crate) fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: the mapping holds `self.len` bytes, mapped until its drop; the agent
        // writes the buffer only after every job holding it released it.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len.min(self.len)) }
    }

    /// As [`bytes`](Self::bytes), writable: a page changed here is copied first, for this
    /// mapping alone.
    pub(crate) fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: as for `bytes`; `&mut self` rules out any other reference into it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len.min(self.len)) }
    }

    /// Drops the pages of the first `len` bytes (a batch reaches no further) that this
    /// process changed, so that every page reads the memfd again.
    ///
    /// # Errors
    ///
    /// When the page map cannot be read: the mapping must not be kept then.
    fn restore(&self, len: usize) -> io::Result<()> {
        // SAFETY: sysconf reads a constant of the system.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            size if size > 0 => size as usize,
            _ => return Err(io::Error::other("no page size")),
        };
        // Opened for each batch (a few microseconds): "self" is the process that opens it,
        // and a descriptor kept across a fork would read the parent's pages.
        let pagemap = File::open("/proc/self/pagemap")?;
        let start = self.ptr.as_ptr() as usize;
        let pages = len.min(self.len).div_ceil(page);
        let mut entries = vec![0u8; pages * 8];
        pagemap.read_exact_at(&mut entries, (start / page * 8) as u64)?;
        let changed = |i: usize| {
            let entry = u64::from_le_bytes(entries[i * 8..i * 8 + 8].try_into().expect("8"));
            // Present and not the file's (an anonymous copy), or swapped out (only an
            // anonymous copy can be: a file page is dropped, not swapped, from here).
            (entry >> 63 & 1 == 1 && entry >> 61 & 1 == 0) || entry >> 62 & 1 == 1
        };
        let mut i = 0;
        while i < pages {
            if !changed(i) {
                i += 1;
                continue;
            }
            let first = i;
            while i < pages && changed(i) {
                i += 1;
            }
            // SAFETY: pages of this mapping, which no batch reads now (it is being given
            // back); dropping them makes them read the memfd again.
            let done = unsafe {
                libc::madvise(
                    (start + first * page) as *mut libc::c_void,
                    (i - first) * page,
                    libc::MADV_DONTNEED,
                )
            };
            if done != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `private` with this length, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A memfd of `len` bytes, each `fill`.
    fn memfd(len: usize, fill: u8) -> File {
        // SAFETY: a name that is a C string; the descriptor is new and owned below.
        let fd = unsafe { libc::memfd_create(c"test".as_ptr(), 0) };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a descriptor just made, owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.write_all_at(&vec![fill; len], 0).unwrap();
        file
    }

    #[test]
    fn a_kept_mapping_reads_the_buffer_again_where_the_job_changed_it() {
        let len = 5 * 4096 + 100;
        let file = memfd(len, 1);
        let buffer = Buffer::new(OwnedFd::from(file.try_clone().unwrap()), len).unwrap();
        let mut mapping = buffer.take().unwrap();
        let first = mapping.bytes(len).as_ptr();
        // The job changes pages 0, 2 and the last (partly), as training code would.
        for page in [0, 2, 5] {
            mapping.bytes_mut(len)[page * 4096 + 7] = 0xAA;
        }
        buffer.give_back(mapping, len);
        // The agent writes the buffer's next batch.
        file.write_all_at(&vec![2; len], 0).unwrap();
        let mapping = buffer.take().unwrap();
        assert_eq!(mapping.bytes(len).as_ptr(), first, "the mapping is kept");
        assert!(mapping.bytes(len).iter().all(|&b| b == 2));
        // A batch shorter than its buffer reads its own length.
        assert_eq!(mapping.bytes(10).len(), 10);
    }

    #[test]
    fn a_buffer_shorter_than_announced_is_refused() {
        let file = memfd(4096, 0);
        assert!(Buffer::new(OwnedFd::from(file), 8192).is_err());
    }
}
