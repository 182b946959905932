//! Waits that Ctrl-C interrupts: the GIL released, signals checked between slices.

use pyo3::prelude::*;

/// Runs `work` (listing a bucket, joining peers: calls that may wait on the network for
/// long) on a thread of its own and waits for it with the GIL released, checking for
/// signals every [`SIGNAL_CHECK`]: Ctrl-C raises at once, and the abandoned work finishes
/// or fails on its own, its result dropped.
pub(crate) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    let (done, mut result) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("nostall-open".into())
        .spawn(move || {
            let _ = done.send(work());
        })
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot start a thread: {e}")))?;
    loop {
        let waited = py.detach(move || (result.recv_timeout(SIGNAL_CHECK), result));
        result = waited.1;
        match waited.0 {
            Ok(value) => return Ok(value),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "nostall: starting the job panicked (a bug: please report it)",
                ))
            }
        }
    }
}

/// How often a wait for a batch checks for signals (Ctrl-C).
pub(crate) const SIGNAL_CHECK: std::time::Duration = std::time::Duration::from_millis(100);
