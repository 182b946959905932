//! torch.distributed's key-value store as the peer plane's [`Store`]: the nodes of a
//! partitioned cache meet in the store torchrun already runs (the front's
//! `nostall._store.TorchStore` picks it and names the job's key space).

use std::sync::Arc;
use std::time::Duration;

use nostall_peer::{JobStore, Store};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The front's `TorchStore`: its key space as the engine's nodes use it.
pub(crate) struct NodeStore(pub JobStore);

impl<'py> FromPyObject<'_, 'py> for NodeStore {
    type Error = PyErr;

    fn extract(store: Borrowed<'_, 'py, PyAny>) -> PyResult<NodeStore> {
        let prefix: String = store.getattr("prefix")?.extract()?;
        let calls: Arc<dyn Store> = Arc::new(Calls(store.to_owned().unbind()));
        Ok(NodeStore(JobStore::new(calls, prefix)))
    }
}

/// The store's methods, called with the GIL from the thread that joins the job.
struct Calls(Py<PyAny>);

/// A failed call as the peer plane's error: the store could not be reached.
fn unreachable(e: PyErr) -> nostall_peer::Error {
    nostall_peer::Error::Network {
        context: "torch.distributed's store".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

impl Store for Calls {
    fn set(&self, key: &str, value: &[u8]) -> nostall_peer::Result<()> {
        Python::attach(|py| {
            self.0
                .call_method1(py, "set", (key, PyBytes::new(py, value)))
                .map(drop)
        })
        .map_err(unreachable)
    }

    fn get(&self, key: &str, timeout: Duration) -> nostall_peer::Result<Option<Vec<u8>>> {
        Python::attach(|py| {
            let value = self
                .0
                .call_method1(py, "get", (key, timeout.as_secs_f64()))?;
            let value = value.bind(py);
            if value.is_none() {
                return Ok(None);
            }
            Ok(Some(value.cast::<PyBytes>()?.as_bytes().to_vec()))
        })
        .map_err(unreachable)
    }

    fn add(&self, key: &str, amount: i64) -> nostall_peer::Result<i64> {
        Python::attach(|py| {
            self.0
                .call_method1(py, "add", (key, amount))?
                .extract::<i64>(py)
        })
        .map_err(unreachable)
    }
}
