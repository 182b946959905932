//! The allocator of the fuzz targets and of the corpus replay: the system's, counting the
//! bytes the process holds and ending it when an input makes it ask for more than a
//! limit.
//!
//! Without it, an input that makes a parser size a buffer from a count it read (a page
//! declaring 2^31 values) is no finding: the operating system hands out the address
//! space, the target touches a little of it, and the fuzzer moves on; with one, such an
//! input aborts the process, which AFL++ records as a crash and `cargo test` as a failed
//! test binary, both naming the sizes (and, in the replay, the input).
//!
//! Memory that C libraries take from `malloc` themselves (libjpeg-turbo's, libopus's,
//! zstd's) is not seen here: AFL's own limit on the address space (`-m` in
//! `bench/fuzz.sh`) bounds it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The most a target may hold at once, and so the largest single allocation: 512 MiB.
/// A target's input is at most 1 MB (AFL's default) and what it may legitimately make
/// of it is bounded by the targets' own limits (4 megapixels, 20 s of audio) and the
/// loader's (a sample's bytes): tens of megabytes. Half a gibibyte is an order of
/// magnitude above that and far below this machine's memory, so an input over it has
/// asked by a count it declares, not by what it holds (the crafted Parquet pages of
/// issue 50 asked 32 and 64 GiB).
pub const LIMIT: usize = 512 << 20;

/// The variable that sets another limit for a fuzzing run, in MiB (`bench/fuzz.sh`
/// passes it through).
pub const LIMIT_VAR: &str = "NOSTALL_FUZZ_ALLOC_MIB";

/// The global allocator of a target's binary or of a test: `#[global_allocator] static
/// ALLOCATOR: Counting = Counting;`.
#[derive(Debug)]
pub struct Counting;

/// Bytes allocated and not yet freed, by every thread of the process.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The limit in force.
static LIMIT_NOW: AtomicUsize = AtomicUsize::new(LIMIT);
/// What the process is running, told when it is ended (the replay names its input).
static RUNNING: Mutex<String> = Mutex::new(String::new());

/// Sets the limit from [`LIMIT_VAR`], if set. Call it first in `main`, before the fuzz
/// loop.
///
/// # Panics
///
/// When the variable is set to something other than a positive number of MiB.
pub fn limit_from_env() {
    if let Ok(value) = std::env::var(LIMIT_VAR) {
        let mib: usize = value
            .parse()
            .ok()
            .filter(|&mib| mib > 0)
            .unwrap_or_else(|| panic!("{LIMIT_VAR}={value:?} is not a positive number of MiB"));
        LIMIT_NOW.store(mib << 20, Ordering::Relaxed);
    }
}

/// Bytes the process holds now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Says what the process runs from now on (an input's name), for the message that ends
/// it if the input asks for too much.
pub fn running(what: String) {
    // The old name is freed under the lock: freeing never reads it, so never waits on it.
    *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) = what;
}

/// Counts `bytes` more; ends the process when that passes the limit (so does a single
/// allocation over it, before anything is asked of the system).
fn charge(bytes: usize) {
    let limit = LIMIT_NOW.load(Ordering::Relaxed);
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    if live > limit {
        over(bytes, live, limit);
    }
}

fn release(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

/// Writes why to stderr and aborts: a crash to AFL++, whatever the target does with
/// panics. Nothing here allocates (the allocator is what called it).
fn over(bytes: usize, live: usize, limit: usize) -> ! {
    let mut message = Message::default();
    let _ = write!(
        message,
        "nostall-fuzz: an allocation of {bytes} bytes makes {live} live, over the limit of \
         {limit} bytes"
    );
    if let Ok(running) = RUNNING.try_lock() {
        if !running.is_empty() {
            let _ = write!(message, " ({running})");
        }
    }
    let _ = writeln!(message);
    // SAFETY: the pointer and length are those of the message's initialised bytes.
    unsafe { libc::write(2, message.bytes.as_ptr().cast(), message.len) };
    std::process::abort()
}

/// A message in a fixed buffer, cut at its end.
struct Message {
    bytes: [u8; 512],
    len: usize,
}

impl Default for Message {
    fn default() -> Message {
        Message {
            bytes: [0; 512],
            len: 0,
        }
    }
}

impl std::fmt::Write for Message {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

// SAFETY: every call is forwarded to the system allocator with the caller's arguments;
// the counting around it neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: the caller's layout, as the caller guarantees it.
        let block = unsafe { System.alloc(layout) };
        if block.is_null() {
            release(layout.size());
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: as for `alloc`.
        let block = unsafe { System.alloc_zeroed(layout) };
        if block.is_null() {
            release(layout.size());
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: a block this allocator gave, with its layout, as the caller guarantees.
        unsafe { System.dealloc(block, layout) };
        release(layout.size());
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old {
            charge(new_size - old);
        }
        // SAFETY: as for `dealloc`, with the caller's new size.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if moved.is_null() {
            // The old block is still held, as it was.
            if new_size > old {
                release(new_size - old);
            }
        } else if new_size < old {
            release(old - new_size);
        }
        moved
    }
}
