//! Remote prep (`remote=`): a preparer's server (in a Ray actor) and a trainer's client of
//! its preparers; Ray itself is the front's (python/nostall/_remote.py).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use nostall_remote::{Remote, RemoteOptions, Server};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{config_error, raise_peer};

/// The job's secret, from `NOSTALL_PEER_SECRET`, as remote prep needs it on both ends.
pub(crate) fn secret(py: Python<'_>) -> PyResult<nostall_peer::Secret> {
    nostall_peer::Secret::from_env().map_err(|e| raise_peer(py, e))
}

/// A preparer serving `loader` on `host:port` (port 0: any free one).
pub(crate) fn serve(
    py: Python<'_>,
    loader: Arc<nostall::Loader>,
    host: &str,
    port: u16,
) -> PyResult<Server> {
    let secret = secret(py)?;
    let listener = TcpListener::bind((host, port))
        .map_err(|e| config_error(py, format!("cannot listen on {host}:{port}: {e}")))?;
    Server::serve(loader, listener, &secret).map_err(|e| config_error(py, e.to_string()))
}

/// A trainer's client of its preparers (`nostall._nostall.RemoteClient`): their
/// addresses, what they made, and what the consumer waited. Apart from the loader, so
/// that the front's thread that follows Ray's actors can reach it while an epoch runs.
#[pyclass(module = "nostall._nostall", frozen)]
pub(crate) struct RemoteClient {
    pub(crate) remote: Remote,
}

/// The options of a client: a dict of them, by the names the front gives them.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct ClientOptions {
    part_batches: u64,
    parts_per_preparer: usize,
    local: bool,
    ahead: Option<bool>,
    local_cpu: Option<f64>,
    stall_limit: f64,
    connect_limit: f64,
}

impl ClientOptions {
    /// The options for `loader`: its own ([`RemoteOptions::for_loader`]) but for those
    /// given.
    pub(crate) fn options(
        &self,
        py: Python<'_>,
        loader: &nostall::Loader,
    ) -> PyResult<RemoteOptions> {
        let seconds = |name: &str, value: f64| {
            if value.is_finite() && value > 0.0 && value <= 86_400.0 {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(config_error(
                    py,
                    format!(
                        "{name} must be a number of seconds above 0 and at most a day, not {value}"
                    ),
                ))
            }
        };
        let mut options = RemoteOptions::for_loader(loader);
        options.part_batches = self.part_batches;
        options.parts_per_preparer = self.parts_per_preparer;
        options.local = self.local;
        options.ahead = self.ahead.unwrap_or(options.ahead);
        if let Some(share) = self.local_cpu {
            if !(share > 0.0 && share.is_finite()) {
                return Err(config_error(
                    py,
                    format!(
                        "local_cpu must be a share of the trainer's CPU above 0 (1 or more: \
                         never held back), not {share}"
                    ),
                ));
            }
            options.local_cpu = share;
        }
        options.stall_limit = seconds("stall_limit", self.stall_limit)?;
        options.connect_limit = seconds("connect_limit", self.connect_limit)?;
        Ok(options)
    }
}

/// A client of the preparers at `addresses` for `loader`, checked against each of them.
pub(crate) fn connect(
    py: Python<'_>,
    loader: Arc<nostall::Loader>,
    addresses: Vec<String>,
    options: &ClientOptions,
) -> PyResult<Remote> {
    let secret = secret(py)?;
    let options = options.options(py, &loader)?;
    let remote = Remote::new(loader, &secret, addresses, options)
        .map_err(|e| config_error(py, e.to_string()))?;
    py.detach(|| remote.check())
        .map_err(|e| config_error(py, e.to_string()))?;
    Ok(remote)
}

#[pymethods]
impl RemoteClient {
    /// Replaces the preparers' addresses (an actor Ray restarted listens elsewhere).
    fn set_addresses(&self, addresses: Vec<String>) {
        self.remote.set_addresses(addresses);
    }

    /// The preparers' addresses.
    #[getter]
    fn addresses(&self) -> Vec<String> {
        self.remote.addresses()
    }

    /// Each preparer's figures: dicts with `name` (its address, or "local"), `batches`,
    /// `duplicates`, `bytes`, `parts`, `busy_s` (seconds on its parts: its rate is
    /// `batches / busy_s`), `waited_s` (seconds the loop waited for its batches),
    /// `failures`, `up`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        stats_list(py, &self.remote)
    }

    /// What the consumer got so far: `(batches, samples, seconds waited)`.
    fn delivered(&self) -> (u64, u64, f64) {
        let d = self.remote.delivered();
        (d.batches, d.samples, d.wait.as_secs_f64())
    }
}

/// Each preparer's figures as dicts (`RemoteClient.stats`, and `metrics["remote"]`).
pub(crate) fn stats_list<'py>(py: Python<'py>, remote: &Remote) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for s in remote.stats() {
        let d = PyDict::new(py);
        d.set_item("name", s.name)?;
        d.set_item("batches", s.batches)?;
        d.set_item("duplicates", s.duplicates)?;
        d.set_item("bytes", s.bytes)?;
        d.set_item("parts", s.parts)?;
        d.set_item("busy_s", s.busy.as_secs_f64())?;
        d.set_item("waited_s", s.waited.as_secs_f64())?;
        d.set_item("failures", s.failures)?;
        d.set_item("up", s.up)?;
        list.append(d)?;
    }
    Ok(list)
}
