//! `share=`: a loader whose batches come from the node agent's group (coordinated prep)
//! rather than from threads of its own. Figures, errors and how Python starts the agent
//! only: the job's assembly (attaching, whether it goes on alone if the agent is lost) is
//! `nostall_agent::job`'s, the protocol `nostall_agent::Client`'s, the batches' hand-off
//! [`crate::handoff`]'s.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nostall::metrics::EpochStats;
use nostall::Position;
use nostall_agent::job::StartAgent;
use nostall_agent::{AgentError, Attached, Client};
use nostall_peer::NodeStats;
use pyo3::prelude::*;

use crate::errors::{config_error, exception, sample_kwargs};
use crate::handoff::{Handoff, Made, Make, Received};

/// This loader's membership of a group.
pub(crate) struct Shared {
    stream: Stream,
    attached: Attached,
    make: Make,
    /// Batches of the current epoch from the group's stream, and from this job's own.
    pub(crate) from_group: u64,
    pub(crate) private: u64,
    /// The group's figures as the last batch brought them, and that batch's bytes
    /// (shared with the live metrics endpoint).
    pub(crate) last: GroupFigures,
    /// This job's figures of its current (or last) epoch: what it received and waited.
    pub(crate) epoch: EpochStats,
    started: Instant,
    /// For a rank of a partitioned cache, its node's counters in the agent as the last
    /// batch brought them (shared with the live metrics endpoint).
    pub(crate) node: Option<Arc<Mutex<NodeStats>>>,
}

/// The connection to the agent: idle (boxed: a client is ten times a hand-off's size),
/// or read by a hand-off thread.
enum Stream {
    Idle(Box<Client>),
    Handing(Handoff),
    /// A hand-off thread panicked with the client.
    Gone,
}

/// The group's figures as a job's last batch brought them, and that batch's bytes.
pub(crate) type GroupFigures = Arc<Mutex<Option<(nostall_agent::GroupStats, u64)>>>;

/// Batch bytes delivered beyond each batch's first delivery: fetch and prep this node
/// did not do again.
pub(crate) fn bytes_saved(group: &nostall_agent::GroupStats, batch_bytes: u64) -> u64 {
    group.delivered.saturating_sub(group.produced) * batch_bytes
}

impl Shared {
    /// Membership of the group `client` attached to; `make` makes the Python objects of
    /// each batch. A job that does not go on alone if the agent is lost is a rank of a
    /// partitioned cache, whose node the agent runs: its batches bring the node's
    /// counters.
    pub(crate) fn new(client: Client, make: Make, goes_alone: bool) -> Shared {
        Shared {
            attached: client.attached().clone(),
            stream: Stream::Idle(Box::new(client)),
            make,
            from_group: 0,
            private: 0,
            last: Default::default(),
            epoch: EpochStats::default(),
            started: Instant::now(),
            node: (!goes_alone).then(Default::default),
        }
    }

    /// Whether this loader goes on with threads of its own if the agent is lost
    /// ([`nostall_agent::Job::goes_alone`]): a job that does not is the one whose node
    /// the agent runs, the one given node counters.
    pub(crate) fn goes_alone(&self) -> bool {
        self.node.is_none()
    }

    /// Batches per epoch of the group's stream.
    pub(crate) fn batches_per_epoch(&self) -> usize {
        self.attached.batches_per_epoch as usize
    }

    /// The group's name and its members when this job attached.
    pub(crate) fn group(&self) -> (&str, u32) {
        (&self.attached.group, self.attached.members)
    }

    /// An epoch starts (its figures from zero).
    pub(crate) fn begin(&mut self, epoch: u64) {
        self.from_group = 0;
        self.private = 0;
        self.epoch = EpochStats {
            epoch,
            ..EpochStats::default()
        };
        self.started = Instant::now();
    }

    /// The group's figures as the last batch brought them, and that batch's bytes.
    pub(crate) fn last(&self) -> Option<(nostall_agent::GroupStats, u64)> {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The batch at `at` made into Python objects, by the hand-off thread (started here
    /// at `at` unless it runs there already), waiting with the GIL released; a signal
    /// (Ctrl-C) raises and leaves the thread receiving. The wait is counted in this
    /// epoch's figures and in `loader`'s live ones.
    pub(crate) fn next(
        &mut self,
        py: Python<'_>,
        at: Position,
        loader: &nostall::Loader,
    ) -> Result<Option<Received>, Failure> {
        let asked = Instant::now();
        let handoff = self.handoff_at(py, at)?;
        let taken = handoff.take(py).map_err(Failure::Interrupted)?;
        let made = match taken {
            Some(made) => made,
            None => {
                self.stream = Stream::Gone;
                return Err(Failure::Lost(
                    "its hand-off thread panicked (a bug: please report it)".into(),
                ));
            }
        };
        let batch = match made {
            Made::Batch(batch) => *batch,
            Made::End => {
                self.stop_handoff(py);
                return Ok(None);
            }
            Made::Failed(e) => {
                self.stop_handoff(py);
                return Err(match e {
                    e @ AgentError::Refused(_) => Failure::Refused(agent_error(py, e)),
                    AgentError::Sample { message, sample } => {
                        Failure::Refused(sample_error(py, message, &sample))
                    }
                    e => Failure::Lost(e.to_string()),
                });
            }
        };
        let wait = asked.elapsed();
        let e = &mut self.epoch;
        if e.batches == 0 {
            e.first_wait = wait;
        }
        e.batches += 1;
        e.samples += batch.len as u64;
        e.wait += wait;
        e.max_wait = e.max_wait.max(wait);
        e.wall = self.started.elapsed();
        loader.count_delivered(at.epoch, batch.len, wait);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(batch.group);
        if let (Some(node), Some(stats)) = (&self.node, &batch.node) {
            *node.lock().unwrap_or_else(|e| e.into_inner()) = stats.clone();
        }
        if batch.from_group {
            self.from_group += 1;
        } else {
            self.private += 1;
        }
        Ok(Some(batch))
    }

    /// The hand-off thread making the batches from `at`: the running one if it is
    /// there, else a new one (a thread elsewhere is stopped first).
    fn handoff_at(&mut self, py: Python<'_>, at: Position) -> Result<&mut Handoff, Failure> {
        if !matches!(&self.stream, Stream::Handing(h) if h.at == at) {
            self.stop_handoff(py);
            let Stream::Idle(client) = std::mem::replace(&mut self.stream, Stream::Gone) else {
                return Err(Failure::Lost(
                    "its hand-off thread panicked (a bug: please report it)".into(),
                ));
            };
            self.stream = match Handoff::start(py, *client, at, self.make.clone()) {
                Ok(handoff) => Stream::Handing(handoff),
                Err(refused) => {
                    let (client, why) = *refused;
                    self.stream = Stream::Idle(Box::new(client));
                    return Err(Failure::Refused(agent_error(
                        py,
                        AgentError::Refused(format!(
                            "this loader cannot receive shared batches: {why}"
                        )),
                    )));
                }
            };
        }
        match &mut self.stream {
            Stream::Handing(handoff) => Ok(handoff),
            _ => unreachable!("started above"),
        }
    }

    /// Stops the hand-off thread, if one runs (a batch it made and that was not taken
    /// is released), keeping the connection for the next.
    pub(crate) fn stop_handoff(&mut self, py: Python<'_>) {
        if let Stream::Handing(_) = &self.stream {
            let Stream::Handing(handoff) = std::mem::replace(&mut self.stream, Stream::Gone) else {
                unreachable!("matched above")
            };
            if let Some(client) = handoff.stop(py) {
                self.stream = Stream::Idle(Box::new(client));
            }
        }
    }
}

/// Why a shared batch did not come.
pub(crate) enum Failure {
    /// A signal (raise it; the hand-off thread goes on receiving, for the next call).
    Interrupted(PyErr),
    /// The group failed the request (a bad sample under `on_error="error"`: a
    /// `SampleError`, as from the job's own loader).
    Refused(PyErr),
    /// The agent is gone: the job goes on alone from where it stands.
    Lost(String),
}

/// A bad sample of the group's stream as `nostall.SampleError`, as the loader of the job's
/// own would have raised it.
fn sample_error(py: Python<'_>, message: String, sample: &nostall_agent::SampleFailure) -> PyErr {
    let kwargs = pyo3::types::PyDict::new(py);
    let filled = sample_kwargs(
        &kwargs,
        sample.sample_id,
        &sample.location,
        &sample.cause,
        &sample.detail,
    );
    match filled {
        Ok(()) => exception(py, "SampleError", message, Some(&kwargs)),
        Err(e) => e,
    }
}

/// An agent error as `nostall.AgentError`.
pub(crate) fn agent_error(py: Python<'_>, err: AgentError) -> PyErr {
    exception(py, "AgentError", err.to_string(), None)
}

/// Starts the node agent when a job finds none (`python -m nostall.agent --detach`, with
/// this interpreter), logging to `agent.log` beside its socket.
pub(crate) fn agent_starter(py: Python<'_>) -> PyResult<StartAgent> {
    let python: PathBuf = py.import("sys")?.getattr("executable")?.extract()?;
    Ok(Box::new(move |socket: &Path| start_agent(&python, socket)))
}

fn start_agent(python: &Path, socket: &Path) -> Result<(), AgentError> {
    let dir = nostall_agent::private_dir(socket).map_err(AgentError::Unreachable)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("agent.log"))
        .map_err(AgentError::Unreachable)?;
    let started = Command::new(python)
        .args(["-m", "nostall.agent", "--detach", "--socket"])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(AgentError::Unreachable)?)
        .stderr(log)
        .status();
    match started {
        // The first process only forks the agent off and exits.
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(AgentError::Refused(format!(
            "`{} -m nostall.agent` exited with {status}: see {}",
            python.display(),
            dir.join("agent.log").display()
        ))),
        Err(e) => Err(AgentError::Unreachable(e)),
    }
}

/// `_run_agent(socket, staging, lease, idle)`: serves as the node agent until idle
/// (`python -m nostall.agent`); returns False if another agent serves the socket.
#[pyfunction]
#[pyo3(signature = (socket=None, staging="512MiB", lease=2.0, idle=60.0))]
pub(crate) fn _run_agent(
    py: Python<'_>,
    socket: Option<PathBuf>,
    staging: &str,
    lease: f64,
    idle: f64,
) -> PyResult<bool> {
    let mut config = nostall_agent::AgentConfig::new();
    if let Some(socket) = socket {
        config.socket = socket;
    }
    config.staging = nostall::loader::parse_bytes(staging).map_err(|_| {
        config_error(
            py,
            format!("staging={staging:?}: give bytes (512MiB, 2GiB)"),
        )
    })?;
    let seconds = |name: &str, s: f64| {
        Duration::try_from_secs_f64(s)
            .map_err(|_| config_error(py, format!("{name}={s}: give seconds, 0 or more")))
    };
    config.lease = seconds("lease", lease)?;
    config.idle = seconds("idle", idle)?;
    let agent = std::sync::Arc::new(nostall_agent::Agent::new(config));
    let mut signal = None;
    let served = py.detach(|| {
        agent.serve_while(|| {
            Python::attach(|py| match py.check_signals() {
                Ok(()) => true,
                Err(e) => {
                    signal = Some(e);
                    false
                }
            })
        })
    });
    if let Some(signal) = signal {
        return Err(signal); // Ctrl-C: KeyboardInterrupt, the socket removed
    }
    served.map_err(|e| agent_error(py, AgentError::Unreachable(e)))
}

/// `_default_agent_socket()`: where this user's agent listens (`NOSTALL_AGENT_SOCKET`,
/// else `$XDG_RUNTIME_DIR/nostall/agent-p9.sock`, else `/tmp/nostall-<uid>/agent-p9.sock`).
#[pyfunction]
pub(crate) fn _default_agent_socket() -> PathBuf {
    nostall_agent::default_socket()
}
