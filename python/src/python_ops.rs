//! `nostall.ops.Python(fn)`: the user's function as an operator of the engine's pipeline
//! ([`nostall::user_code::function::UserFn`]). Each call gets the part of the sample's slot the
//! engine gives it, as a tensor or array (`nostall._python_ops.Python._apply`): in the
//! loader's prep threads (a free-threaded interpreter, or `workers="threads"`), or, under
//! the GIL, in worker processes ([`PythonOps::start_workers`]), where the sample travels
//! through the worker's memory file behind a header of its shape and type
//! (`nostall._python_ops.OpsJob`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nostall::prep::DType;
use nostall::user_code::function::{UserFn, UserOp, UserSample};
use nostall::user_code::pool::WorkerConfig;
use nostall::Cause;
use pyo3::prelude::*;

use crate::user_code::{call_on_slot, Workers, START_TIMEOUT};

/// Bytes before a sample in a worker's memory: `ndim`, [`MAX_DIMS`] dims, the type's
/// number (`HEADER_BYTES` of `_python_ops`).
const HEADER_BYTES: usize = 64;
/// The most dimensions a sample sent to a worker has (a video sample of several clips:
/// `[clips, T, C, H, W]`); the header holds `ndim`, these and the element type.
const MAX_DIMS: usize = 6;

/// The `ops.Python` of one loader's pipeline, in the order they were converted, and the
/// worker processes that run them when there are some.
pub(crate) struct PythonOps {
    torch: bool,
    ops: Mutex<Vec<Py<PyAny>>>,
    workers: OnceLock<Workers>,
}

impl PythonOps {
    /// For a pipeline whose functions get torch tensors when `torch`, else NumPy arrays.
    pub(crate) fn new(torch: bool) -> Arc<PythonOps> {
        Arc::new(PythonOps {
            torch,
            ops: Mutex::new(Vec::new()),
            workers: OnceLock::new(),
        })
    }

    /// Whether the pipeline has any.
    pub(crate) fn is_empty(&self) -> bool {
        self.ops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// `item` as an engine operator when it is an `ops.Python`.
    pub(crate) fn user_op(self: &Arc<Self>, item: &Bound<'_, PyAny>) -> PyResult<Option<UserOp>> {
        let py = item.py();
        let class = crate::front::front(py)?
            .python_ops
            .bind(py)
            .getattr("Python")?;
        if !item.is_instance(&class)? {
            return Ok(None);
        }
        let name = item.getattr("name")?.extract()?;
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        ops.push(item.clone().unbind());
        Ok(Some(UserOp::new(Arc::new(PythonFn {
            op: item.clone().unbind(),
            name,
            index: ops.len() as u64 - 1,
            ops: self.clone(),
        }))))
    }

    /// Runs the functions in `count` worker processes from now on, each with memory for
    /// `bytes` of sample (at least the largest any function is given), a call bounded by
    /// `timeout`.
    pub(crate) fn start_workers(
        &self,
        py: Python<'_>,
        count: usize,
        bytes: usize,
        timeout: Duration,
    ) -> PyResult<()> {
        let ops: Vec<Py<PyAny>> = self
            .ops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|op| op.clone_ref(py))
            .collect();
        let job = crate::front::front(py)?
            .python_ops
            .bind(py)
            .getattr("OpsJob")?
            .call1((ops, self.torch))?;
        let config = WorkerConfig {
            workers: count.max(1),
            sample_bytes: HEADER_BYTES + bytes,
            timeout,
            start_timeout: START_TIMEOUT,
            code: "ops.Python".into(),
        };
        let workers = Workers::start(py, &job, config, None)?;
        let _ = self.workers.set(workers);
        Ok(())
    }

    /// `metrics["workers"]` of a loader whose functions run in processes.
    pub(crate) fn workers(&self) -> Option<&Workers> {
        self.workers.get()
    }
}

/// One `ops.Python` of a pipeline.
struct PythonFn {
    op: Py<PyAny>,
    name: String,
    /// Its place among the loader's (`OpsJob`'s request).
    index: u64,
    ops: Arc<PythonOps>,
}

impl PythonFn {
    fn in_thread(&self, sample: UserSample<'_>, seed: u64, code: &str) -> Result<(), Cause> {
        let dtype = sample.dtype.to_string();
        call_on_slot(sample.data, code, |view| {
            let args = (seed, view, sample.shape.to_vec(), &dtype, self.ops.torch);
            self.op
                .bind(view.py())
                .call_method1("_apply", args)
                .map(drop)
        })
    }

    fn in_worker(
        &self,
        workers: &Workers,
        sample: UserSample<'_>,
        seed: u64,
        code: &str,
    ) -> Result<(), Cause> {
        let mut header = [0u64; 8];
        if sample.shape.len() > MAX_DIMS {
            return Err(Cause::Internal(format!(
                "a sample of {:?} for {code}",
                sample.shape
            )));
        }
        header[0] = sample.shape.len() as u64;
        for (at, &dim) in sample.shape.iter().enumerate() {
            header[1 + at] = dim as u64;
        }
        header[1 + MAX_DIMS] = match sample.dtype {
            DType::U8 => 0,
            DType::F32 => 1,
        };
        let mut io = vec![0u8; HEADER_BYTES + sample.data.len()];
        for (at, value) in header.iter().enumerate() {
            io[at * 8..at * 8 + 8].copy_from_slice(&value.to_le_bytes());
        }
        io[HEADER_BYTES..].copy_from_slice(sample.data);
        workers
            .pool
            .transform(self.index, seed, &mut io)
            .map_err(|cause| match cause {
                Cause::UserCode { message, .. } => Cause::UserCode {
                    code: code.to_string(),
                    message,
                },
                other => other,
            })?;
        sample.data.copy_from_slice(&io[HEADER_BYTES..]);
        Ok(())
    }
}

impl UserFn for PythonFn {
    fn name(&self) -> &str {
        &self.name
    }

    fn apply(&self, sample: UserSample<'_>, seed: u64) -> Result<(), Cause> {
        let code = format!("ops.Python({})", self.name);
        match self.ops.workers.get() {
            Some(workers) => self.in_worker(workers, sample, seed, &code),
            None => self.in_thread(sample, seed, &code),
        }
    }
}
