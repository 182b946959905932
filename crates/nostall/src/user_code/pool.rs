//! Samples made by worker processes: code the loader cannot run well in its own threads
//! (a Python `Dataset`'s `__getitem__` under the GIL) runs in processes of its own, each
//! writing the sample it makes straight into a shared memory file that the prep thread
//! copies into the batch's slot: samples are never serialised.
//!
//! A [`WorkerPool`] keeps `workers` processes, started by a [`Spawn`] (the Python
//! bindings fork them from a process that already holds the dataset). Worker `k` connects
//! to the pool's socket in a private directory (mode 0700), says who it is with the token
//! it was given, and maps its memory file, one sample's bytes. A prep thread takes an idle
//! worker, sends it `(index, seed)` and waits for its answer:
//!
//! - **made**: the sample is in the worker's memory;
//! - **failed**: the user's code raised, and the answer says how (the sample's
//!   [`Cause::UserCode`], skipped or raised as the error policy says);
//! - **no answer, the worker gone** (killed, crashed): it is started again and asked the
//!   same sample; nothing is lost or made twice, for a sample reaches a batch only from
//!   its slot, once the worker said it was made;
//! - **no answer within the bound**: the worker is killed and started again, and the
//!   sample fails as hung, naming the bound.
//!
//! The seed is the sample's own (drawn from its generator), so what a worker makes does
//! not depend on which worker made it, nor on how many there are.
//!
//! A [`WorkerPool::transform`] is the same exchange over bytes the caller gives: written to
//! the worker's memory before it is asked, read back after (a function of the user's run
//! on a sample in a process).
//!
//! The wire is declared once, in [`wire`]: the engine reads and writes it with those
//! constants, and the Python workers (`nostall._user_code`) pack and unpack it with the same
//! ones, handed over by the bindings.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Cause, Error, Result};

pub use wire::MAX_MESSAGE;

/// The messages between the pool and a worker, little-endian, each a Python `struct`
/// format beside its size in bytes.
///
/// A worker says its hello (the [`MAGIC`](wire::MAGIC), its number and token), then an
/// answer once it is ready (its start, the user's `worker_init_fn`, done or failed). Then,
/// for each request (a sample's index and seed), an answer: a status (0 made, 1 failed)
/// and the length of the UTF-8 words that follow (the failure; at most
/// [`MAX_MESSAGE`](wire::MAX_MESSAGE)).
pub mod wire {
    /// A worker's first four bytes.
    pub const MAGIC: [u8; 4] = *b"NSWK";
    /// The hello: the magic, the worker's number (`u64`) and its token (`u64`).
    pub const HELLO: &str = "<4sQQ";
    /// Bytes of [`HELLO`].
    pub const HELLO_BYTES: usize = 20;
    /// A request: the sample's index (`u64`) and seed (`u64`).
    pub const REQUEST: &str = "<QQ";
    /// Bytes of [`REQUEST`].
    pub const REQUEST_BYTES: usize = 16;
    /// An answer's header: its status (`u8`) and the length of its words (`u32`).
    pub const ANSWER: &str = "<BI";
    /// Bytes of [`ANSWER`].
    pub const ANSWER_BYTES: usize = 5;
    /// The longest failure a worker may send, in bytes (a Python traceback is a few KiB).
    pub const MAX_MESSAGE: usize = 64 << 10;
}

/// How many times one sample is asked again of a worker started anew after the one
/// asked was lost: a sample that kills every worker that makes it is the sample's error,
/// not a loop.
const MAX_RETRIES: usize = 3;

/// Starts worker processes: the seam between the pool and whatever runs the user's code.
pub trait Spawn: Send + Sync + std::fmt::Debug {
    /// Starts worker `number`: a process that connects to `socket`, says `number` and
    /// `token`, maps `memory` (one sample's bytes) and answers requests. Returns its
    /// process id (killed with `SIGKILL` when it hangs).
    ///
    /// # Errors
    ///
    /// When no process can be started.
    fn spawn(&self, number: usize, socket: &Path, memory: &Path, token: u64) -> io::Result<u32>;
}

/// What a [`WorkerPool`] is asked to keep.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Worker processes, at least 1.
    pub workers: usize,
    /// Bytes of one sample.
    pub sample_bytes: usize,
    /// The longest a worker may take over a sample before it is killed and the sample
    /// fails as hung.
    pub timeout: Duration,
    /// The longest a worker may take to start and connect.
    pub start_timeout: Duration,
    /// What runs the user's code, in words (`"Dataset.__getitem__ of ImageFolder"`): named
    /// by each failure.
    pub code: String,
}

/// Figures of a [`WorkerPool`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// The workers' process ids (0 for one not running).
    pub pids: Vec<u32>,
    /// Workers started again after one was lost or hung.
    pub restarts: u64,
    /// Samples asked again of a restarted worker.
    pub retried: u64,
}

/// Worker processes that make samples ([module doc](self)).
pub struct WorkerPool {
    config: WorkerConfig,
    spawn: Arc<dyn Spawn>,
    dir: PathBuf,
    listener: UnixListener,
    /// Each worker's place: busy, idle, or to be started (after a start failed).
    idle: Mutex<Vec<Place>>,
    returned: Condvar,
    /// Starting is one at a time: connections are matched to workers by their hello.
    starting: Mutex<()>,
    pids: Mutex<Vec<u32>>,
    restarts: AtomicU64,
    retried: AtomicU64,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("workers", &self.config.workers)
            .field("sample_bytes", &self.config.sample_bytes)
            .field("code", &self.config.code)
            .finish_non_exhaustive()
    }
}

/// One worker process: its connection and its memory.
struct Worker {
    number: usize,
    pid: u32,
    connection: UnixStream,
    memory: Mapping,
}

/// Where a worker is.
enum Place {
    /// Making a sample for a prep thread, which gives it back.
    Busy,
    Idle(Worker),
    /// To be started by the next prep thread that takes it.
    ToStart,
}

/// How a request ended without an answer.
enum Lost {
    /// The connection ended or broke: the worker is gone.
    Gone(io::Error),
    /// No answer within the bound.
    Hung,
}

impl WorkerPool {
    /// Starts `config.workers` workers with `spawn`, waiting until each has connected.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no worker or a sample of no bytes; [`Error::Io`] when the
    /// private directory cannot be made; [`Error::Config`] naming the worker when one
    /// cannot be started or does not connect within the start bound.
    pub fn start(config: WorkerConfig, spawn: Arc<dyn Spawn>) -> Result<WorkerPool> {
        if config.workers == 0 || config.sample_bytes == 0 {
            return Err(Error::Config(format!(
                "worker processes: {} workers for samples of {} bytes; give at least 1 of \
                 each",
                config.workers, config.sample_bytes
            )));
        }
        let dir = private_dir()?;
        let socket = dir.join("workers.sock");
        let listener = UnixListener::bind(&socket).map_err(|e| Error::Io {
            path: socket.clone(),
            source: e,
        })?;
        let pool = WorkerPool {
            idle: Mutex::new((0..config.workers).map(|_| Place::ToStart).collect()),
            pids: Mutex::new(vec![0; config.workers]),
            config,
            spawn,
            dir,
            listener,
            returned: Condvar::new(),
            starting: Mutex::new(()),
            restarts: AtomicU64::new(0),
            retried: AtomicU64::new(0),
        };
        // Started now, so that a dataset that cannot be made in a worker fails the
        // loader's making, not its first batch.
        for number in 0..pool.config.workers {
            let worker = pool.start_worker(number).map_err(|why| {
                Error::Config(format!("{}: worker {number}: {why}", pool.config.code))
            })?;
            pool.idle()[number] = Place::Idle(worker);
        }
        Ok(pool)
    }

    /// The pool's figures.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            pids: self.pids.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            restarts: self.restarts.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
        }
    }

    /// What the pool was started with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Bytes of one sample.
    pub fn sample_bytes(&self) -> usize {
        self.config.sample_bytes
    }

    /// Has a worker make sample `index` with `seed` into `out` (exactly
    /// [`sample_bytes`](Self::sample_bytes) long).
    ///
    /// # Errors
    ///
    /// [`Cause::UserCode`]: the user's code failed on it (its words), hung past the bound,
    /// or every worker asked was lost.
    pub fn make(&self, index: u64, seed: u64, out: &mut [u8]) -> std::result::Result<(), Cause> {
        assert_eq!(out.len(), self.config.sample_bytes, "a sample's slot");
        self.run(index, seed, out, false)
    }

    /// Has a worker run request `request` with `seed` over `io`: `io` is written to the
    /// start of the worker's memory, and read back from it once the worker is done (the
    /// caller's bytes changed by code in a process: `ops.Python` under the GIL).
    ///
    /// # Errors
    ///
    /// As [`make`](Self::make).
    ///
    /// # Panics
    ///
    /// When `io` is longer than [`sample_bytes`](Self::sample_bytes).
    pub fn transform(
        &self,
        request: u64,
        seed: u64,
        io: &mut [u8],
    ) -> std::result::Result<(), Cause> {
        assert!(
            io.len() <= self.config.sample_bytes,
            "more than a worker's memory"
        );
        self.run(request, seed, io, true)
    }

    /// [`make`](Self::make) (`input` false) or [`transform`](Self::transform).
    fn run(
        &self,
        index: u64,
        seed: u64,
        out: &mut [u8],
        input: bool,
    ) -> std::result::Result<(), Cause> {
        let (number, mut worker) = self.take();
        let mut retries = 0;
        let result = loop {
            let current = match worker.take() {
                Some(w) => w,
                None => match self.start_worker(number) {
                    Ok(w) => w,
                    Err(why) => break Err(self.cause(format!("its worker cannot start: {why}"))),
                },
            };
            let mut current = current;
            if input {
                current.memory.bytes_mut()[..out.len()].copy_from_slice(out);
            }
            match current.ask(index, seed, self.config.timeout) {
                Ok(None) => {
                    out.copy_from_slice(&current.memory.bytes()[..out.len()]);
                    worker = Some(current);
                    break Ok(());
                }
                Ok(Some(failure)) => {
                    worker = Some(current);
                    break Err(self.cause(failure));
                }
                Err(Lost::Hung) => {
                    // SAFETY: kill takes any pid; a hung worker has not ended (its
                    // connection is open, so its pid is not another process's yet).
                    unsafe { libc::kill(current.pid as libc::pid_t, libc::SIGKILL) };
                    self.lost(current);
                    break Err(self.cause(format!(
                        "it did not return within {:.1} s (timeout): its worker was killed \
                         and started again",
                        self.config.timeout.as_secs_f64()
                    )));
                }
                Err(Lost::Gone(e)) => {
                    self.lost(current);
                    retries += 1;
                    if retries > MAX_RETRIES {
                        break Err(self.cause(format!(
                            "{retries} workers were lost making it (the last: {e})"
                        )));
                    }
                    self.retried.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        self.give(number, worker);
        result
    }

    fn cause(&self, message: String) -> Cause {
        Cause::UserCode {
            code: self.config.code.clone(),
            message,
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Place>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle worker's number and the worker (`None` for one to start), waiting for one.
    fn take(&self) -> (usize, Option<Worker>) {
        let mut idle = self.idle();
        loop {
            if let Some(number) = idle.iter().position(|w| !matches!(w, Place::Busy)) {
                return match std::mem::replace(&mut idle[number], Place::Busy) {
                    Place::Idle(worker) => (number, Some(worker)),
                    _ => (number, None),
                };
            }
            idle = self.returned.wait(idle).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn give(&self, number: usize, worker: Option<Worker>) {
        self.idle()[number] = worker.map_or(Place::ToStart, Place::Idle);
        self.returned.notify_one();
    }

    /// A worker that hung (killed by the caller) or is gone: forgotten, its connection
    /// closed. A gone worker is not signalled: its pid may already be another process's.
    fn lost(&self, worker: Worker) {
        self.pids.lock().unwrap_or_else(|e| e.into_inner())[worker.number] = 0;
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts worker `number` and waits for its connection.
    fn start_worker(&self, number: usize) -> std::result::Result<Worker, String> {
        let _one_at_a_time = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        let token = random_u64().map_err(|e| format!("no random token: {e}"))?;
        // A file of its own each start: a worker killed as hung may still hold the last.
        let memory_path = self.dir.join(format!("memory-{number}-{token:016x}"));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&memory_path)
            .map_err(|e| format!("its memory {}: {e}", memory_path.display()))?;
        let memory = allocate(&file, self.config.sample_bytes)
            .and_then(|()| Mapping::of(&file, self.config.sample_bytes));
        let memory = memory.map_err(|e| {
            let _ = std::fs::remove_file(&memory_path);
            format!(
                "its memory of {} bytes in {}: {e}",
                self.config.sample_bytes,
                self.dir.display()
            )
        })?;
        let socket = self.dir.join("workers.sock");
        let started = self
            .spawn
            .spawn(number, &socket, &memory_path, token)
            .map_err(|e| format!("cannot be started: {e}"))
            .and_then(|pid| Ok((pid, self.accept(number, token, pid)?)));
        // Mapped by both once connected (or never to be): nothing left behind in /dev/shm
        // by a process that ends without dropping the pool.
        let _ = std::fs::remove_file(&memory_path);
        let (pid, connection) = started?;
        self.pids.lock().unwrap_or_else(|e| e.into_inner())[number] = pid;
        Ok(Worker {
            number,
            pid,
            connection,
            memory,
        })
    }

    /// The connection of worker `number` (process `pid`), which must say `token`.
    fn accept(
        &self,
        number: usize,
        token: u64,
        pid: u32,
    ) -> std::result::Result<UnixStream, String> {
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // SAFETY: as in `lost`.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return Err(format!(
                    "process {pid} did not connect within {:.0} s",
                    self.config.start_timeout.as_secs_f64()
                ));
            }
            if !readable(self.listener.as_raw_fd(), left) {
                continue;
            }
            let Ok((connection, _)) = self.listener.accept() else {
                continue;
            };
            // A connection that does not say the token at once is not one of ours.
            let _ = connection.set_read_timeout(Some(left.max(Duration::from_millis(1))));
            let mut hello = [0u8; wire::HELLO_BYTES];
            if (&connection).read_exact(&mut hello).is_err() {
                continue;
            }
            let said = u64::from_le_bytes(hello[4..12].try_into().expect("8 bytes"));
            let said_token = u64::from_le_bytes(hello[12..20].try_into().expect("8 bytes"));
            if hello[..4] != wire::MAGIC || said != number as u64 || said_token != token {
                continue;
            }
            // Then its start (the user's worker_init_fn): ready, or why not.
            let worker = Worker {
                number,
                pid,
                connection,
                memory: Mapping::empty(),
            };
            return match worker.answer(deadline) {
                Ok(None) => Ok(worker.connection),
                Ok(Some(failure)) => Err(format!("its start failed: {failure}")),
                Err(Lost::Hung) => {
                    // SAFETY: as in `lost`: it has not answered, so it still runs.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    Err(format!(
                        "process {pid} did not start within {:.0} s",
                        self.config.start_timeout.as_secs_f64()
                    ))
                }
                Err(Lost::Gone(e)) => Err(format!("process {pid} ended while starting: {e}")),
            };
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // An idle worker ends when its connection closes (it waits for a request); none
        // is signalled, for one that ended since it was last asked may have left its pid
        // to another process. A busy one is its prep thread's, which the loader stopped.
        self.idle().clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Worker {
    /// Asks for sample `index`: `Ok(None)` made, `Ok(Some(words))` failed.
    fn ask(
        &self,
        index: u64,
        seed: u64,
        timeout: Duration,
    ) -> std::result::Result<Option<String>, Lost> {
        let mut request = [0u8; wire::REQUEST_BYTES];
        request[..8].copy_from_slice(&index.to_le_bytes());
        request[8..].copy_from_slice(&seed.to_le_bytes());
        send_all(&self.connection, &request).map_err(Lost::Gone)?;
        self.answer(Instant::now() + timeout)
    }

    /// The worker's next answer, by `deadline`: `Ok(None)` done, `Ok(Some(words))`
    /// failed.
    fn answer(&self, deadline: Instant) -> std::result::Result<Option<String>, Lost> {
        let mut header = [0u8; wire::ANSWER_BYTES];
        self.read_within(&mut header, deadline)?;
        let len = u32::from_le_bytes(header[1..].try_into().expect("4 bytes")) as usize;
        if len > MAX_MESSAGE || header[0] > 1 {
            return Err(Lost::Gone(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "an answer out of protocol (status {}, {len} bytes)",
                    header[0]
                ),
            )));
        }
        let mut words = vec![0u8; len];
        self.read_within(&mut words, deadline)?;
        Ok(match header[0] {
            0 => None,
            _ => Some(String::from_utf8_lossy(&words).into_owned()),
        })
    }

    fn read_within(&self, buf: &mut [u8], deadline: Instant) -> std::result::Result<(), Lost> {
        let mut at = 0;
        while at < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !readable(self.connection.as_raw_fd(), left) {
                if Instant::now() >= deadline {
                    return Err(Lost::Hung);
                }
                continue;
            }
            match (&self.connection).read(&mut buf[at..]) {
                Ok(0) => {
                    return Err(Lost::Gone(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the worker closed its connection",
                    )))
                }
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Lost::Gone(e)),
            }
        }
        Ok(())
    }
}

/// Writes all of `bytes`, without the `SIGPIPE` a gone peer would raise.
fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: a valid socket and a buffer of `bytes.len()` readable bytes.
        let sent = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[sent as usize..];
    }
    Ok(())
}

/// Whether `fd` becomes readable within `wait` (false on a timeout or an interruption).
fn readable(fd: i32, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut poll, 1, ms) > 0 }
}

/// A private directory (mode 0700) for the pool's socket and memory files: in
/// `/dev/shm` (memory, not disk) where there is one, else the temporary directory.
fn private_dir() -> Result<PathBuf> {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let mut n = random_u64().map_err(|e| Error::Io {
        path: base.clone(),
        source: e,
    })?;
    loop {
        let dir = base.join(format!("nostall-workers-{}-{n:016x}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n = n.wrapping_add(1),
            Err(e) => {
                return Err(Error::Io {
                    path: dir,
                    source: e,
                })
            }
        }
    }
}

/// 8 bytes from the kernel's random source.
fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: a buffer of 8 writable bytes.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_le_bytes(bytes))
}

/// A shared mapping of a memory file: what its worker wrote, and what a transform gives
/// it.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; it is read or written only
// between requests (before asking its worker, after the worker said it finished), by the
// one thread that holds its worker.
unsafe impl Send for Mapping {}

impl Mapping {
    /// No memory (a worker while it starts).
    fn empty() -> Mapping {
        Mapping {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    fn of(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: a shared mapping of a file of `len` bytes at an address the kernel
        // chooses: it aliases nothing of this process.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(io::Error::last_os_error)?;
        let mapping = Mapping { ptr, len };
        // Not inherited by a process forked later (another loader's zygote): it would keep
        // this memory alive after this pool is gone, for as long as that loader lives.
        // SAFETY: advice on the range mapped just above, owned by `mapping`.
        if unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTFORK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(mapping)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` mapped bytes, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` mapped writable bytes, alive as long as `self`, borrowed once; the
        // worker does not touch them until it is asked.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len == 0 {
            return; // `empty`: nothing mapped
        }
        // SAFETY: the mapping made in `of`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Gives `file` `len` bytes of memory now: a full `/dev/shm` is then this error, not a
/// `SIGBUS` when the bytes are first written.
fn allocate(file: &File, len: usize) -> io::Result<()> {
    // SAFETY: a valid descriptor of a file opened for writing.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) } {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a `struct` format of the kinds [`wire`] uses.
    fn struct_size(format: &str) -> usize {
        let (mut size, mut count) = (0, String::new());
        for c in format.trim_start_matches('<').chars() {
            if c.is_ascii_digit() {
                count.push(c);
                continue;
            }
            let n: usize = if count.is_empty() {
                1
            } else {
                count.parse().unwrap()
            };
            count.clear();
            size += n * match c {
                's' | 'B' => 1,
                'I' => 4,
                'Q' => 8,
                other => panic!("a format char the wire does not use: {other}"),
            };
        }
        size
    }

    #[test]
    fn each_wire_format_is_its_size() {
        assert_eq!(struct_size(wire::HELLO), wire::HELLO_BYTES);
        assert_eq!(struct_size(wire::REQUEST), wire::REQUEST_BYTES);
        assert_eq!(struct_size(wire::ANSWER), wire::ANSWER_BYTES);
        assert!(wire::HELLO.starts_with(&format!("<{}s", wire::MAGIC.len())));
    }

    /// A worker in Python (the interpreter the tests' machine has): sample `i` is `i`
    /// written in its first 8 bytes; sample 1 fails, 2 kills its worker, 3 hangs, 4 is
    /// answered out of protocol, 5 reverses the first 8 bytes it was given.
    const WORKER: &str = r#"
import mmap, os, socket, struct, sys, time
number, path, memory, token = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
c = socket.socket(socket.AF_UNIX); c.connect(path)
m = mmap.mmap(os.open(memory, os.O_RDWR), 0)
c.sendall(b"NSWK" + struct.pack("<QQ", number, token))
c.sendall(struct.pack("<BI", 0, 0))
while True:
    r = b""
    while len(r) < 16:
        got = c.recv(16 - len(r))
        if not got: sys.exit(0)
        r += got
    i, seed = struct.unpack("<QQ", r)
    if i == 1: w = b"boom"; c.sendall(struct.pack("<BI", 1, len(w)) + w); continue
    if i == 2: os._exit(1)
    if i == 3: time.sleep(3600)
    if i == 4: c.sendall(struct.pack("<BI", 7, 0)); continue
    if i == 5: m[:8] = bytes(reversed(m[:8])); c.sendall(struct.pack("<BI", 0, 0)); continue
    m[:16] = struct.pack("<QQ", i, seed)
    c.sendall(struct.pack("<BI", 0, 0))
"#;

    #[derive(Debug)]
    struct Python;

    impl Spawn for Python {
        fn spawn(
            &self,
            number: usize,
            socket: &Path,
            memory: &Path,
            token: u64,
        ) -> io::Result<u32> {
            let child = std::process::Command::new("python3")
                .args(["-c", WORKER, &number.to_string()])
                .arg(socket)
                .arg(memory)
                .arg(token.to_string())
                .spawn()?;
            Ok(child.id())
        }
    }

    /// A pool whose samples may take `timeout` (the answers the tests wait for come in
    /// microseconds: a bound far above them unless a test wants it met).
    fn pool(workers: usize, timeout: Duration) -> WorkerPool {
        let config = WorkerConfig {
            workers,
            sample_bytes: 16,
            timeout,
            start_timeout: Duration::from_secs(30),
            code: "Test.__getitem__".into(),
        };
        WorkerPool::start(config, Arc::new(Python)).unwrap()
    }

    #[test]
    fn workers_make_fail_die_and_hang_each_as_the_pool_says() {
        let pool = pool(2, Duration::from_secs(60));
        let mut out = [0u8; 16];
        pool.make(9, 77, &mut out).unwrap();
        assert_eq!(out[..8], 9u64.to_le_bytes());
        assert_eq!(out[8..], 77u64.to_le_bytes());
        let words = |c: Cause| match c {
            Cause::UserCode { code, message } => format!("{code}: {message}"),
            other => panic!("{other:?}"),
        };
        let failed = words(pool.make(1, 0, &mut out).unwrap_err());
        assert_eq!(failed, "Test.__getitem__: boom");
        // A sample that kills every worker asked: asked again of new ones, then its error.
        let lost = words(pool.make(2, 0, &mut out).unwrap_err());
        assert!(lost.contains("4 workers were lost"), "{lost}");
        assert_eq!(pool.stats().retried, 3);
        // A sample that never returns, in a pool of its own whose bound it meets.
        let short = super::tests::pool(1, Duration::from_millis(500));
        let hung = words(short.make(3, 0, &mut out).unwrap_err());
        assert!(hung.contains("did not return within 0.5 s"), "{hung}");
        short.make(11, 0, &mut out).unwrap();
        assert_eq!(short.stats().restarts, 1);
        let garbled = words(pool.make(4, 0, &mut out).unwrap_err());
        assert!(garbled.contains("lost"), "{garbled}");
        // And every worker is there for the next samples.
        for i in 10..20 {
            pool.make(i, i, &mut out).unwrap();
            assert_eq!(out[..8], i.to_le_bytes());
        }
        let stats = pool.stats();
        assert!(stats.pids.iter().all(|&p| p > 0), "{stats:?}");
        assert_eq!(stats.restarts, 8, "{stats:?}"); // 4 lost on sample 2, 4 on sample 4
    }

    #[test]
    fn a_transform_gives_the_worker_the_callers_bytes_and_takes_back_its_own() {
        let pool = pool(1, Duration::from_secs(60));
        for round in 0..3u8 {
            let mut io: Vec<u8> = (1..=8).map(|b| b + round).collect();
            pool.transform(5, 0, &mut io).unwrap();
            assert_eq!(io, (1..=8).rev().map(|b| b + round).collect::<Vec<u8>>());
        }
        let mut out = [0u8; 16];
        pool.make(9, 1, &mut out).unwrap();
        assert_eq!(out[..8], 9u64.to_le_bytes());
    }

    #[test]
    fn a_pool_of_no_worker_or_no_bytes_is_refused() {
        let config = WorkerConfig {
            workers: 0,
            sample_bytes: 16,
            timeout: Duration::from_secs(1),
            start_timeout: Duration::from_secs(1),
            code: "x".into(),
        };
        assert!(WorkerPool::start(config, Arc::new(Python)).is_err());
    }
}
