//! `Loader(dataset)`: a map-style `Dataset`'s `__getitem__` run for the engine, under
//! nostall's plan. Its samples are made in worker processes
//! ([`nostall::user_code::pool`], forked by `nostall._user_code.Zygote`) or in the engine's
//! threads ([`InProcess`], for a free-threaded interpreter); `nostall._user_code.Spec` lays
//! each sample's leaves in its slot and gives the batch back with the sample's structure.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nostall::prep::processes::{self, WorkerPrep};
use nostall::prep::{Prep, Prepared, Preparer};
use nostall::rng::Rng;
use nostall::storage::Indexed;
use nostall::user_code::pool::{Spawn, WorkerConfig, WorkerPool};
use nostall::{Cause, Modality, Pipeline, SampleLayout};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyMemoryView, PyString};

use crate::errors::{config_error, raise};

/// How the user's code runs (`workers=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Processes under the GIL, threads on a free-threaded interpreter.
    Auto,
    Threads,
    Processes,
}

impl<'py> FromPyObject<'_, 'py> for Mode {
    type Error = PyErr;

    fn extract(ob: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        match ob.extract::<&str>()? {
            "auto" => Ok(Mode::Auto),
            "threads" => Ok(Mode::Threads),
            "processes" => Ok(Mode::Processes),
            other => Err(config_error(
                ob.py(),
                format!("workers={other:?}: use \"auto\", \"threads\" or \"processes\""),
            )),
        }
    }
}

/// What `Loader(dataset, ...)` is given besides the plan's settings.
pub(crate) struct UserArgs {
    pub(crate) mode: Mode,
    pub(crate) workers: usize,
    pub(crate) timeout: Option<f64>,
    pub(crate) worker_init_fn: Option<Py<PyAny>>,
    pub(crate) seed: u64,
}

/// A loader's user dataset: how its batches are given back, and what runs it.
pub(crate) struct UserSamples {
    /// `nostall._user_code.Spec` of its samples.
    pub(crate) spec: Py<PyAny>,
    /// `"processes"` or `"threads"`.
    mode: &'static str,
    why: &'static str,
    workers: Option<Workers>,
}

/// Worker processes forked from a zygote (`nostall._user_code.Zygote`) that holds the
/// user's code: their pool, and the zygote, closed with them.
pub(crate) struct Workers {
    pub(crate) pool: Arc<WorkerPool>,
    spawn: Arc<ZygoteSpawn>,
}

impl Workers {
    /// Forks a zygote holding `job` (`job(index, seed, memory)`, what a worker runs for
    /// each request) and starts the pool `config` asks for over it.
    pub(crate) fn start(
        py: Python<'_>,
        job: &Bound<'_, PyAny>,
        config: WorkerConfig,
        worker_init_fn: Option<Py<PyAny>>,
    ) -> PyResult<Workers> {
        let spawn = Arc::new(ZygoteSpawn::start(
            py,
            job.clone().unbind(),
            config.sample_bytes,
            worker_init_fn,
        )?);
        let pool_spawn: Arc<dyn Spawn> = spawn.clone();
        match py.detach(|| WorkerPool::start(config, pool_spawn)) {
            Ok(pool) => Ok(Workers {
                pool: Arc::new(pool),
                spawn,
            }),
            Err(e) => {
                spawn.close(py);
                Err(raise(py, e))
            }
        }
    }

    /// `metrics["workers"]`: processes, `why`, their ids, restarts, samples asked again,
    /// and the zygote's restarts.
    pub(crate) fn metrics<'py>(&self, py: Python<'py>, why: &str) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("mode", "processes")?;
        d.set_item("why", why)?;
        let stats = self.pool.stats();
        d.set_item("pids", stats.pids)?;
        d.set_item("restarts", stats.restarts)?;
        d.set_item("retried", stats.retried)?;
        d.set_item(
            "zygote_restarts",
            self.spawn.restarts.load(Ordering::Relaxed),
        )?;
        Ok(d)
    }
}

/// Runs `fork` (Python that forks this process) with no sample being made in this
/// process's threads: a lock that one of them held (torch's generator, say) would stay
/// held for ever in the child. The GIL is released while in-flight samples end.
fn with_no_sample_in_flight<T>(py: Python<'_>, fork: impl FnOnce() -> T) -> T {
    py.detach(|| FORK_GUARD.stop_samples());
    let forked = fork();
    FORK_GUARD.resume_samples();
    forked
}

impl Drop for Workers {
    fn drop(&mut self) {
        let _ = Python::try_attach(|py| self.spawn.close(py));
    }
}

/// Held (shared) by every thread while it makes a sample in this process, and
/// (exclusively) while a zygote is forked: a fork copies the locks other threads hold,
/// and one held then stays held in the child.
static FORK_GUARD: ForkGuard = ForkGuard {
    state: Mutex::new((0, false)),
    changed: std::sync::Condvar::new(),
};

/// Samples being made in this process, and whether a fork waits for them to end.
struct ForkGuard {
    /// `(samples being made, a fork waits or runs)`.
    state: Mutex<(usize, bool)>,
    changed: std::sync::Condvar,
}

/// A sample being made: ends with the guard.
struct Making;

impl ForkGuard {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Begins a sample, once no fork waits or runs.
    fn sample(&self) -> Making {
        let mut state = self.lock();
        while state.1 {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.0 += 1;
        Making
    }

    /// Stops new samples and waits for those being made to end.
    fn stop_samples(&self) {
        let mut state = self.lock();
        while state.1 {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.1 = true;
        while state.0 > 0 {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn resume_samples(&self) {
        self.lock().1 = false;
        self.changed.notify_all();
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        FORK_GUARD.lock().0 -= 1;
        FORK_GUARD.changed.notify_all();
    }
}

/// Whether this interpreter has the GIL (every one but a free-threaded one with it off).
/// The worker processes' wire ([`nostall::user_code::pool::wire`]) for `nostall._user_code`: the magic, the
/// `struct` formats of the hello, a request and an answer, and the longest failure.
pub(crate) fn worker_wire(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use nostall::user_code::pool::wire;

    let dict = PyDict::new(py);
    dict.set_item("magic", pyo3::types::PyBytes::new(py, &wire::MAGIC))?;
    dict.set_item("hello", wire::HELLO)?;
    dict.set_item("request", wire::REQUEST)?;
    dict.set_item("answer", wire::ANSWER)?;
    dict.set_item("max_message", wire::MAX_MESSAGE)?;
    Ok(dict)
}

pub(crate) fn gil_enabled(py: Python<'_>) -> PyResult<bool> {
    match py.import("sys")?.getattr("_is_gil_enabled") {
        Ok(enabled) => enabled.call0()?.extract::<bool>(),
        Err(_) => Ok(true),
    }
}

/// The default bound on one sample's `__getitem__` (and one `ops.Python` call).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a worker may take to start (fork, connect, its `worker_init_fn`).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);

impl UserSamples {
    /// The pipeline and dataset that run `dataset`'s `__getitem__` for the engine.
    pub(crate) fn new(
        py: Python<'_>,
        dataset: &Bound<'_, PyAny>,
        args: UserArgs,
    ) -> PyResult<(Pipeline, nostall::dataset::Dataset, UserSamples)> {
        let len = dataset.len()?;
        let name = dataset.get_type().name()?.to_string();
        let module = crate::front::front(py)?.user_code.bind(py);
        let code = format!("{name}.__getitem__");
        let gil = gil_enabled(py)?;
        let (mode, why) = match (args.mode, gil) {
            (Mode::Threads, _) => ("threads", "workers=\"threads\""),
            (Mode::Processes, _) => ("processes", "workers=\"processes\""),
            (Mode::Auto, true) => ("processes", "the GIL is enabled"),
            (Mode::Auto, false) => ("threads", "the interpreter is free-threaded"),
        };
        if mode == "threads" && (args.timeout.is_some() || args.worker_init_fn.is_some()) {
            return Err(config_error(
                py,
                format!(
                    "timeout= and worker_init_fn= are for worker processes, and {name}'s \
                     __getitem__ runs in the loader's threads ({why})"
                ),
            ));
        }
        // For worker processes, the first sample is read in a process forked for it (as
        // the zygote is), so that what `__getitem__` opens is not shared by the workers.
        let in_child = mode == "processes";
        let timeout = args.timeout.unwrap_or(DEFAULT_TIMEOUT.as_secs_f64());
        let probe = || module.call_method1("probe", (dataset, args.seed, in_child, timeout));
        let spec = match in_child {
            true => with_no_sample_in_flight(py, probe),
            false => probe(),
        }?;
        let bytes: usize = spec.getattr("bytes")?.extract()?;
        let described: String = spec.call_method0("describe")?.extract()?;
        let fingerprint = format!("{name} of {len} samples, {described}");
        let (prep, workers): (Pipeline, _) = match mode {
            "threads" => {
                let runner = module.call_method1("Runner", (dataset, &spec))?;
                let prep = InProcess {
                    runner: Arc::new(runner.unbind()),
                    bytes,
                    code,
                    fingerprint,
                };
                (Pipeline::new(prep), None)
            }
            _ => {
                let config = WorkerConfig {
                    workers: args.workers.max(1),
                    sample_bytes: bytes,
                    timeout: args
                        .timeout
                        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64),
                    start_timeout: START_TIMEOUT,
                    code,
                };
                let job = module.call_method1("dataset_job", (dataset, &spec))?;
                let workers = Workers::start(py, &job, config, args.worker_init_fn)?;
                let prep = WorkerPrep::new(workers.pool.clone(), fingerprint);
                (Pipeline::new(prep), Some(workers))
            }
        };
        let indexed = Indexed::new(name, len);
        let catalog = indexed.catalog().map_err(|e| raise(py, e))?;
        let dataset = nostall::dataset::Dataset {
            catalog: Arc::new(catalog),
            source: Arc::new(indexed),
            format: nostall::dataset::Format::Indexed,
        };
        let user = UserSamples {
            spec: spec.unbind(),
            mode,
            why,
            workers,
        };
        Ok((prep, dataset, user))
    }

    /// The batch's structure from its record (`[n, bytes]` uint8).
    pub(crate) fn batch(&self, py: Python<'_>, record: Py<PyAny>, n: usize) -> PyResult<Py<PyAny>> {
        Ok(self
            .spec
            .bind(py)
            .call_method1("batch", (record, n))?
            .unbind())
    }

    /// `metrics["workers"]`: how the user's code runs and why; with processes, their ids
    /// and restarts.
    pub(crate) fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(workers) = &self.workers {
            return workers.metrics(py, self.why);
        }
        let d = PyDict::new(py);
        d.set_item("mode", self.mode)?;
        d.set_item("why", self.why)?;
        Ok(d)
    }
}

/// Starts workers by asking the zygote on its pipe: `"number socket memory token"`, to
/// which it answers the worker's process id (or `error ...`). A zygote that is gone (the
/// OOM killer may choose it) is forked again from what made it, once per request: every
/// later start would fail without it.
struct ZygoteSpawn {
    job: Py<PyAny>,
    memory_bytes: usize,
    worker_init_fn: Option<Py<PyAny>>,
    /// The zygote; `None` once closed.
    current: Mutex<Option<Zygote>>,
    /// Zygotes forked again.
    restarts: AtomicU64,
}

/// A zygote: its Python object (`close` ends it) and the engine's ends of its pipes.
struct Zygote {
    object: Py<PyAny>,
    requests: File,
    answers: BufReader<File>,
}

impl std::fmt::Debug for ZygoteSpawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZygoteSpawn")
    }
}

impl ZygoteSpawn {
    fn start(
        py: Python<'_>,
        job: Py<PyAny>,
        memory_bytes: usize,
        worker_init_fn: Option<Py<PyAny>>,
    ) -> PyResult<ZygoteSpawn> {
        let spawn = ZygoteSpawn {
            job,
            memory_bytes,
            worker_init_fn,
            current: Mutex::new(None),
            restarts: AtomicU64::new(0),
        };
        let zygote = spawn.fork(py)?;
        *spawn.lock() = Some(zygote);
        Ok(spawn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Zygote>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forks a zygote holding the job.
    fn fork(&self, py: Python<'_>) -> PyResult<Zygote> {
        let module = crate::front::front(py)?.user_code.bind(py);
        let init = self.worker_init_fn.as_ref().map(|f| f.clone_ref(py));
        let object = with_no_sample_in_flight(py, || {
            module.call_method1("Zygote", (self.job.bind(py), self.memory_bytes, init))
        })?;
        let (requests, answers): (i32, i32) = object.call_method0("engine_fds")?.extract()?;
        // SAFETY: descriptors Python duplicated for us and no longer refers to.
        let own = |fd: i32| File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(Zygote {
            object: object.unbind(),
            requests: own(requests),
            answers: BufReader::new(own(answers)),
        })
    }

    /// Ends the zygote. Taken out of its lock without the GIL: a pool thread may hold
    /// the lock while it waits for the GIL to fork another.
    fn close(&self, py: Python<'_>) {
        if let Some(zygote) = py.detach(|| self.lock().take()) {
            let _ = zygote.object.bind(py).call_method0("close");
        }
    }
}

impl Zygote {
    fn spawn(&mut self, request: &str) -> std::io::Result<u32> {
        self.requests.write_all(request.as_bytes())?;
        self.requests.flush()?;
        let mut line = String::new();
        if self.answers.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the zygote is gone",
            ));
        }
        line.trim()
            .parse()
            .map_err(|_| std::io::Error::other(format!("the zygote answered {:?}", line.trim())))
    }
}

impl Spawn for ZygoteSpawn {
    fn spawn(
        &self,
        number: usize,
        socket: &Path,
        memory: &Path,
        token: u64,
    ) -> std::io::Result<u32> {
        let request = format!(
            "{number} {} {} {token}\n",
            socket.display(),
            memory.display()
        );
        let mut current = self.lock();
        let Some(zygote) = current.as_mut() else {
            return Err(std::io::Error::other("the loader is closing"));
        };
        match zygote.spawn(&request) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::BrokenPipe
                ) => {}
            answered => return answered,
        }
        let gone = current.take();
        let forked = Python::try_attach(|py| {
            if let Some(gone) = gone {
                let _ = gone.object.bind(py).call_method0("close"); // reaps it
            }
            self.fork(py)
        });
        let mut zygote = match forked {
            Some(Ok(zygote)) => zygote,
            Some(Err(e)) => {
                return Err(std::io::Error::other(format!(
                    "the zygote is gone, and forking another failed: {e}"
                )))
            }
            None => return Err(std::io::Error::other("the interpreter is ending")),
        };
        self.restarts.fetch_add(1, Ordering::Relaxed);
        let answered = zygote.spawn(&request);
        *current = Some(zygote);
        answered
    }
}

/// Samples made in the engine's threads by `nostall._user_code.Runner.fill`: in parallel
/// on a free-threaded interpreter, one at a time under the GIL.
struct InProcess {
    runner: Arc<Py<PyAny>>,
    bytes: usize,
    code: String,
    fingerprint: String,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess")
            .field("code", &self.code)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} in the loader's threads", self.code)
    }
}

impl Prep for InProcess {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(vec![self.bytes], nostall::DType::U8)
    }

    fn fingerprint(&self) -> String {
        format!("in process {}", self.fingerprint)
    }

    fn preparer(&self) -> nostall::Result<Box<dyn Preparer>> {
        Ok(Box::new(InProcessPreparer {
            runner: self.runner.clone(),
            code: self.code.clone(),
        }))
    }
}

struct InProcessPreparer {
    runner: Arc<Py<PyAny>>,
    code: String,
}

impl Preparer for InProcessPreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let index = processes::index_of(data)?;
        let seed = rng.next_u64();
        call_on_slot(out, &self.code, |view| {
            let runner = self.runner.bind(view.py());
            runner.call_method1("fill", (index, seed, view)).map(drop)
        })?;
        Ok(Prepared::InSlot)
    }
}

/// Runs `call(view)` in this prep thread, `view` a writable memoryview of a copy of `out`
/// (the sample's slot, or the part of it the user's code is given) that is copied back
/// after, the user's code's failure its sample's [`Cause::UserCode`] naming `code`.
pub(crate) fn call_on_slot(
    out: &mut [u8],
    code: &str,
    call: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<()>,
) -> Result<(), Cause> {
    // Taken before the GIL, so that a fork waiting for it with the GIL released cannot
    // deadlock with this thread.
    let _not_forking = FORK_GUARD.sample();
    let made = Python::try_attach(|py| -> PyResult<()> {
        // The user's code is given memory Python owns, a copy of `out` copied back after:
        // a tensor or array it keeps (a cache, a list) then stays valid, as one of the
        // batch buffer, which the loader reuses and frees, would not.
        let buffer = PyByteArray::new(py, out);
        call(PyMemoryView::from(buffer.as_any())?.as_any())?;
        let made = buffer.to_vec();
        if made.len() != out.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "the sample's {} bytes became {}: change its values, not its size",
                out.len(),
                made.len()
            )));
        }
        out.copy_from_slice(&made);
        Ok(())
    });
    let message = match made {
        Some(Ok(())) => return Ok(()),
        Some(Err(e)) => {
            Python::try_attach(|py| traceback_of(py, &e)).unwrap_or_else(|| e.to_string())
        }
        None => "the interpreter is shutting down".into(),
    };
    Err(Cause::UserCode {
        code: code.to_string(),
        message,
    })
}

/// The exception with its traceback, as Python prints it.
fn traceback_of(py: Python<'_>, e: &PyErr) -> String {
    let formatted = py
        .import("traceback")
        .and_then(|t| t.call_method1("format_exception", (e.value(py),)))
        .and_then(|lines| PyString::new(py, "").call_method1("join", (lines,)))
        .and_then(|s| s.extract::<String>());
    formatted.unwrap_or_else(|_| e.to_string())
}
