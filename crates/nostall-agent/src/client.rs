//! A job's side: attach to the agent, ask for batches, map their shared buffers.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::loader::LoaderSettings;
use nostall::Position;

use crate::attachment;
use crate::mapping::{Buffer, Mapping};
use crate::socket::{Channel, RecvError, MAX_MESSAGE};
use crate::wire::{
    BatchHeader, FieldsSent, JobNode, Reply, Request, StorageSettings, MAX_FIELDS_TEXT,
    MAX_SOURCES, MAX_TOKENIZERS, MAX_TOKENIZER_BYTES, NOSTALL_VERSION, PROTOCOL, VERSIONED,
};

/// What a job asks the agent for: the stream it reads, and with whom.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Reading {
    /// The dataset's location, as [`nostall::loader::LoaderBuilder::new`] takes it.
    pub location: String,
    /// The loader's settings (sent as their [text form](LoaderSettings::texts)).
    pub settings: LoaderSettings,
    /// The group's name; empty: the group of every job reading the same stream.
    pub group: String,
    /// For a rank of a job whose cache is partitioned across nodes, the rank's node as
    /// it would join: the agent joins once for all the node's local ranks (it runs the
    /// node's cache and peer service), so that their reads of the node's part stay in
    /// its memory instead of crossing loopback TCP.
    pub node: Option<nostall_peer::NodeConfig>,
    /// For one of several local ranks of a job (under torchrun), its place among them:
    /// the agent then shares its prep threads between their streams by the work each
    /// has next, as the ranks' own loaders would (`balance_ranks`). A rank of a
    /// partitioned cache needs none: its node says it.
    pub ranks: Option<nostall::env::LocalRanks>,
    /// Object storage's settings as this job has them (the variables of
    /// [`nostall::storage::S3_ENVIRONMENT`] that are set): the agent reads the job's
    /// dataset with them, and groups only jobs that read with the same.
    pub storage: Vec<(String, String)>,
    /// The datasets of a mixture with their weights (`None`: its length), as
    /// [`nostall::loader::LoaderBuilder::mixture`] takes them; empty: the one at
    /// `location`.
    pub sources: Vec<(String, Option<f64>)>,
    /// The fields of each sample, for a job that reads records
    /// ([`nostall::loader::LoaderBuilder::fields`]): sent with their tokenizers.
    pub fields: Option<nostall::fields::Fields>,
}

impl Reading {
    /// `location` read with `settings`, grouped by stream, not a rank of a partitioned
    /// cache, with object storage as this process's environment configures it. Paths (a
    /// local location, a `quarantine` file) are made absolute, and canonical where they
    /// exist: the agent runs in a working directory of its own, and jobs naming one
    /// dataset differently still read one stream.
    pub fn new(location: impl Into<String>, mut settings: LoaderSettings) -> Reading {
        let location = portable_location(location.into());
        if let Some(file) = &mut settings.quarantine {
            *file = absolute(file);
        }
        let storage = nostall::storage::S3_ENVIRONMENT
            .iter()
            .filter_map(|&name| {
                let value = std::env::var(name).ok().filter(|v| !v.is_empty())?;
                Some((name.to_string(), value))
            })
            .collect();
        Reading {
            location,
            settings,
            group: String::new(),
            node: None,
            ranks: None,
            storage,
            sources: Vec::new(),
            fields: None,
        }
    }

    /// Drawing from `sources` by weight (see [`Reading::sources`]); their local paths
    /// made absolute as the location's are.
    pub fn mixing(mut self, sources: Vec<(String, Option<f64>)>) -> Reading {
        self.sources = sources
            .into_iter()
            .map(|(location, weight)| (portable_location(location), weight))
            .collect();
        if !self.sources.is_empty() {
            let names: Vec<&str> = self.sources.iter().map(|(l, _)| l.as_str()).collect();
            self.location = names.join(" + ");
        }
        self
    }

    /// Reading records of `fields` (see [`Reading::fields`]).
    pub fn with_fields(mut self, fields: Option<nostall::fields::Fields>) -> Reading {
        self.fields = fields;
        self
    }

    /// In the group named `name` (empty: by stream).
    pub fn in_group(mut self, name: impl Into<String>) -> Reading {
        self.group = name.into();
        self
    }

    /// As a rank of `node`'s job (see [`Reading::node`]).
    pub fn on_node(mut self, node: nostall_peer::NodeConfig) -> Reading {
        self.node = Some(node);
        self
    }

    /// As one of the local `ranks` of its job (see [`Reading::ranks`]).
    pub fn among(mut self, ranks: nostall::env::LocalRanks) -> Reading {
        self.ranks = Some(ranks);
        self
    }
}

/// Whether an agent's refusal of this job's hello is that of an agent from before
/// protocol 9 meeting a job of another protocol, and its protocol if it says it. Such an
/// agent read a hello whole before its protocol: a hello laid out otherwise was a
/// "malformed message" to it (this version's agent reads a hello's protocol first and
/// words a malformed hello otherwise, and the job checks its hello's bounds before
/// sending it); one laid out alike got the protocols in words.
fn earlier_agent(refusal: &str) -> Option<Option<u32>> {
    if refusal.starts_with("malformed message: ") {
        return Some(None);
    }
    let (_, theirs) = refusal.split_once("the job speaks protocol ")?;
    let (_, theirs) = theirs.split_once(", this agent ")?;
    let digits = theirs.split(|c: char| !c.is_ascii_digit()).next()?;
    Some(digits.parse().ok())
}

/// A dataset's location as the agent, in a working directory of its own, reads it: a
/// local path made absolute, a URL as it is.
fn portable_location(location: String) -> String {
    if location.contains("://") {
        return location;
    }
    absolute(Path::new(&location))
        .to_string_lossy()
        .into_owned()
}

/// `path` made absolute (and canonical when it exists), as text; as given if neither
/// can be done.
fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Why the agent could not serve a job.
#[derive(Debug)]
#[non_exhaustive]
pub enum AgentError {
    /// No agent answers at the socket (or the connection broke).
    Unreachable(io::Error),
    /// The agent refused the job or failed its request; the text says why.
    Refused(String),
    /// The agent answered out of protocol (not an agent).
    Protocol(String),
    /// The agent speaks another protocol: it runs another nostall version (one still
    /// running after an upgrade, at a socket the job was given).
    Versions {
        /// Where it listens.
        socket: PathBuf,
        /// Its process.
        pid: i32,
        /// Its protocol and release, when it says them; `None`: an agent from before
        /// protocol 9 that could not read this job's hello.
        agent: Option<(u32, Option<String>)>,
    },
    /// The wait for a reply was given up (a signal): the request is dropped, and the
    /// next one is answered as if it had never been made.
    Interrupted,
    /// The agent said nothing for longer than its lease while the job waited for a
    /// batch: it is stopped (SIGSTOP) or stuck. The job should go on without it.
    Silent(Duration),
    /// A sample of the stream could not be read or prepared (under `on_error="error"`):
    /// the loader's message, and the sample.
    Sample {
        /// The loader's message.
        message: String,
        /// The sample it names.
        sample: crate::SampleFailure,
    },
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::Unreachable(e) => write!(f, "the nostall agent cannot be reached: {e}"),
            AgentError::Refused(why) => write!(f, "the nostall agent refused: {why}"),
            AgentError::Protocol(why) => {
                write!(f, "the nostall agent answered out of protocol: {why}")
            }
            AgentError::Versions { socket, pid, agent } => {
                let theirs = match agent {
                    Some((protocol, Some(release))) => {
                        format!("protocol {protocol} (nostall {release})")
                    }
                    Some((protocol, None)) => format!("protocol {protocol}"),
                    None => {
                        format!("a protocol before {VERSIONED} (it cannot read this job's hello)")
                    }
                };
                write!(
                    f,
                    "the nostall agent at {} (pid {pid}) speaks {theirs}, this job protocol \
                     {PROTOCOL} (nostall {NOSTALL_VERSION}): another nostall version runs it. Stop it \
                     once its jobs are done (kill {pid}), or leave NOSTALL_AGENT_SOCKET unset \
                     (each version's agent has a socket of its own there) or set it to another \
                     path",
                    socket.display()
                )
            }
            AgentError::Interrupted => write!(f, "the wait for the nostall agent was interrupted"),
            AgentError::Silent(limit) => write!(
                f,
                "the nostall agent said nothing for {:.1} s (its lease) while this job \
                 waited for a batch: it is stopped or stuck",
                limit.as_secs_f64()
            ),
            AgentError::Sample { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for AgentError {}

/// What the agent said when the job attached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attached {
    /// The group's name.
    pub group: String,
    /// Jobs in the group when this one attached, itself included.
    pub members: u32,
    /// Batches per epoch.
    pub batches_per_epoch: u64,
    /// Samples in the dataset.
    pub dataset_len: u64,
    /// One sample's shape.
    pub sample_shape: Vec<usize>,
    /// The element type's name.
    pub dtype: String,
    /// Class names, in label order.
    pub classes: Vec<String>,
    /// The agent's lease: how long it waits for a silent member before going on without
    /// it, and how long this job waits for a silent agent (it says it is still working
    /// every quarter of it) before going on without the agent.
    pub lease: Duration,
}

/// A job attached to the agent.
#[derive(Debug)]
pub struct Client {
    pub(crate) channel: Arc<Channel>,
    buf: Vec<u8>,
    /// The descriptors of the agent's buffers, by number, until it says to forget them
    /// (each batch maps its own).
    buffers: HashMap<u64, Arc<Buffer>>,
    attached: Attached,
    /// The number of the job's latest request for batches (answers to earlier ones are
    /// stale), and the position the agent sends next unasked for it, if it does.
    pub(crate) ask: u64,
    pushing: Option<Position>,
    /// This job's batches not dropped yet.
    live: Arc<AtomicUsize>,
    /// When the agent last spoke while the job waited for it.
    heard: Instant,
}

/// How many of its batches a job lets the agent send ahead of its asking: the one it
/// trains on, the next (made into tensors ahead by the Python loader's hand-off thread)
/// and the one after, waiting in the socket. A job that holds more (it keeps tensors)
/// asks for each batch, a round trip.
const CREDITS: u32 = 3;

/// An answer to a request for batches.
enum Answer {
    Batch(SharedBatch),
    End,
    Failed(AgentError),
}

/// How often a wait for the agent's reply asks whether to go on.
const POLL: Duration = Duration::from_millis(100);

/// How long a job waits for the agent to welcome it.
const WELCOME_PATIENCE: Duration = Duration::from_secs(600);

impl Client {
    /// Attaches to the agent at `socket` to read what `reading` says.
    ///
    /// # Errors
    ///
    /// [`AgentError::Unreachable`] when no agent listens there,
    /// [`AgentError::Refused`] when it refuses (settings, another group's stream),
    /// [`AgentError::Versions`] when it runs another nostall version,
    /// [`AgentError::Protocol`] when what answers is not an agent.
    pub fn attach(socket: &Path, reading: &Reading) -> Result<Client, AgentError> {
        let channel = Channel::connect(socket).map_err(AgentError::Unreachable)?;
        // Both ends check who is at the other: a socket of another user is not ours.
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let peer = channel.peer().map_err(AgentError::Unreachable)?;
        if peer.uid != uid {
            return Err(AgentError::Refused(format!(
                "the process at {} (pid {}) runs as user {}, not as this user ({uid})",
                socket.display(),
                peer.pid,
                peer.uid
            )));
        }
        channel
            .set_timeouts(Duration::from_secs(10), Some(POLL))
            .map_err(AgentError::Unreachable)?;
        if reading.sources.len() > MAX_SOURCES {
            return Err(AgentError::Refused(format!(
                "a mixture of {} datasets: the agent mixes at most {MAX_SOURCES}; leave \
                 sharing off",
                reading.sources.len()
            )));
        }
        let fields = reading.fields.as_ref().map(|f| f.portable());
        if let Some(f) = &fields {
            let bytes: usize = f.tokenizers.iter().map(|t| t.len()).sum();
            if f.text.len() > MAX_FIELDS_TEXT
                || f.tokenizers.len() > MAX_TOKENIZERS
                || bytes as u64 > MAX_TOKENIZER_BYTES
            {
                return Err(AgentError::Refused(format!(
                    "the fields are too large to send to the agent ({} bytes of text, at \
                     most {MAX_FIELDS_TEXT}; {} tokenizers of {bytes} bytes, at most \
                     {MAX_TOKENIZERS} of {MAX_TOKENIZER_BYTES}): leave sharing off",
                    f.text.len(),
                    f.tokenizers.len()
                )));
            }
        }
        let hello = Request::Hello {
            protocol: PROTOCOL,
            location: reading.location.clone(),
            settings: reading.settings.texts(),
            group: reading.group.clone(),
            node: reading.node.as_ref().map(|n| Box::new(JobNode::of(n))),
            ranks: reading.ranks,
            storage: StorageSettings(reading.storage.clone()),
            sources: reading.sources.clone(),
            fields: fields.as_ref().map(|f| FieldsSent {
                text: f.text.clone(),
                tokenizers: f.tokenizers.iter().map(|t| t.len() as u64).collect(),
            }),
        };
        let tokenizers = fields
            .filter(|f| !f.tokenizers.is_empty())
            .map(|f| attachment::write(&f.tokenizers))
            .transpose()
            .map_err(AgentError::Unreachable)?;
        channel
            .send(&hello.encode(), tokenizers.as_ref().map(AsFd::as_fd))
            .map_err(AgentError::Unreachable)?;
        let mut client = Client {
            channel: Arc::new(channel),
            buf: vec![0u8; MAX_MESSAGE],
            buffers: HashMap::new(),
            attached: Attached::default(), // until the welcome
            ask: 0,
            pushing: None,
            live: Arc::new(AtomicUsize::new(0)),
            heard: Instant::now(),
        };
        // Making a new group opens the dataset (its index: seconds for a large one).
        let deadline = std::time::Instant::now() + WELCOME_PATIENCE;
        let versions = |agent| AgentError::Versions {
            socket: socket.to_path_buf(),
            pid: peer.pid,
            agent,
        };
        match client.receive(&mut || std::time::Instant::now() < deadline)? {
            (Reply::Welcome(attached), None) => {
                client.attached = attached;
                Ok(client)
            }
            (Reply::Versions { protocol, release }, _) => {
                Err(versions(Some((protocol, Some(release)))))
            }
            (Reply::Failed { failure, .. }, _) => match earlier_agent(&failure.message) {
                Some(agent) => Err(versions(agent.map(|protocol| (protocol, None)))),
                None => Err(AgentError::Refused(failure.message)),
            },
            (other, _) => Err(AgentError::Protocol(format!(
                "expected a welcome, got {other:?}"
            ))),
        }
    }

    /// As [`Client::attach`], trying again until `patience` has passed while no agent
    /// answers (one being started, say).
    ///
    /// # Errors
    ///
    /// As for [`Client::attach`]; [`AgentError::Unreachable`] once `patience` is spent.
    pub fn attach_within(
        patience: Duration,
        socket: &Path,
        reading: &Reading,
    ) -> Result<Client, AgentError> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            match Client::attach(socket, reading) {
                Err(AgentError::Unreachable(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    /// What the agent said when the job attached.
    pub fn attached(&self) -> &Attached {
        &self.attached
    }

    /// The next reply but the agent's "still working" and "forget", waiting while
    /// `keep_waiting` says so (asked every [`POLL`]) and, once attached, while the agent
    /// has spoken within its lease. Buffers to forget are closed here (a batch mapped
    /// from one keeps its own mapping): the job holds the buffers the agent may still
    /// send batches in, no more.
    fn receive(
        &mut self,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<(Reply, Option<OwnedFd>), AgentError> {
        loop {
            let (reply, fd) = self.receive_any(keep_waiting)?;
            self.heard = Instant::now();
            match reply {
                Reply::Working { .. } => {}
                Reply::Forget { buffers } => {
                    for buffer in buffers {
                        self.buffers.remove(&buffer);
                    }
                }
                reply => return Ok((reply, fd)),
            }
        }
    }

    /// The buffers whose memfd the job holds now.
    #[cfg(test)]
    pub(crate) fn buffers_held(&self) -> std::collections::HashSet<u64> {
        self.buffers.keys().copied().collect()
    }

    fn receive_any(
        &mut self,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<(Reply, Option<OwnedFd>), AgentError> {
        // Before the welcome the lease is not known (zero): joining may take minutes.
        let lease = self.attached.lease;
        let received = loop {
            match self.channel.recv(&mut self.buf) {
                Ok(received) => break received,
                Err(RecvError::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if !lease.is_zero() && self.heard.elapsed() > lease {
                        self.pushing = None;
                        return Err(AgentError::Silent(lease));
                    }
                    if !keep_waiting() {
                        // The request is given up: the next one is asked anew, and the
                        // answer to this one, when it comes, is stale by its number.
                        self.pushing = None;
                        return Err(AgentError::Interrupted);
                    }
                }
                Err(RecvError::Closed) => {
                    return Err(AgentError::Unreachable(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "the agent closed the connection",
                    )))
                }
                Err(RecvError::Oversized) => {
                    return Err(AgentError::Protocol("an oversized message".into()))
                }
                Err(RecvError::Io(e)) => return Err(AgentError::Unreachable(e)),
            }
        };
        let reply = Reply::decode(&self.buf[..received.len])
            .map_err(|e| AgentError::Protocol(e.to_string()))?;
        Ok((reply, received.fd))
    }

    /// The batch at `at` (the position after the job's last batch), or `None` at the end
    /// of the epoch.
    ///
    /// # Errors
    ///
    /// As for [`Client::attach`]; [`AgentError::Refused`] carries a failed sample's
    /// error as the loader words it.
    pub fn next(&mut self, at: Position) -> Result<Option<SharedBatch>, AgentError> {
        self.next_while(at, &mut || true)
    }

    /// As [`Client::next`], giving up (with [`AgentError::Interrupted`]) when
    /// `keep_waiting`, asked every 100 ms while the batch is not there, says so: a
    /// training loop's Ctrl-C.
    ///
    /// # Errors
    ///
    /// As for [`Client::next`].
    pub fn next_while(
        &mut self,
        at: Position,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<Option<SharedBatch>, AgentError> {
        // In step, the agent sends this batch unasked once the job holds fewer batches
        // than its credit (it waits in the socket already, unless the agent is slower):
        // taking it costs no round trip and no request (on a machine whose cores sleep
        // when idle, waking the agent and back is ~0.1 ms).
        let in_step =
            self.pushing == Some(at) && self.live.load(Ordering::Acquire) < CREDITS as usize;
        // The agent had nothing to say before now.
        self.heard = Instant::now();
        if !in_step {
            self.ask(at)?;
        }
        loop {
            let (ask, answer) = self.answer(keep_waiting)?;
            if ask != self.ask {
                // Sent for an earlier request (the job moved elsewhere): a batch is
                // released as it drops.
                continue;
            }
            return match answer {
                Answer::Batch(batch) => {
                    self.pushing = Some(batch.position());
                    Ok(Some(batch))
                }
                Answer::End => {
                    self.pushing = None;
                    Ok(None)
                }
                Answer::Failed(e) => {
                    self.pushing = None;
                    Err(e)
                }
            };
        }
    }

    fn ask(&mut self, at: Position) -> Result<(), AgentError> {
        self.ask += 1;
        let request = Request::Next {
            at,
            ask: self.ask,
            credits: CREDITS,
        };
        self.channel
            .send(&request.encode(), None)
            .map_err(AgentError::Unreachable)
    }

    /// The agent's next answer to a request for batches, and the request's number.
    fn answer(
        &mut self,
        keep_waiting: &mut dyn FnMut() -> bool,
    ) -> Result<(u64, Answer), AgentError> {
        match self.receive(keep_waiting)? {
            (Reply::Batch(header), fd) => {
                let buffer = match fd {
                    Some(fd) => {
                        let buffer = Arc::new(
                            Buffer::new(fd, header.buffer_len as usize)
                                .map_err(|e| AgentError::Protocol(e.to_string()))?,
                        );
                        self.buffers.insert(header.buffer, buffer.clone());
                        buffer
                    }
                    None => self.buffers.get(&header.buffer).cloned().ok_or_else(|| {
                        AgentError::Protocol(format!("buffer {} was never sent", header.buffer))
                    })?,
                };
                if header.data_len as usize > buffer.len {
                    return Err(AgentError::Protocol(
                        "a batch larger than its buffer".into(),
                    ));
                }
                let mapping = buffer
                    .take()
                    .map_err(|e| AgentError::Protocol(format!("mapping a batch: {e}")))?;
                self.live.fetch_add(1, Ordering::AcqRel);
                let ask = header.ask;
                let batch = SharedBatch {
                    mapping: Some(mapping),
                    buffer,
                    header,
                    channel: self.channel.clone(),
                    live: self.live.clone(),
                };
                Ok((ask, Answer::Batch(batch)))
            }
            (Reply::End { ask, .. }, _) => Ok((ask, Answer::End)),
            (Reply::Failed { failure, ask }, _) => Ok((
                ask,
                Answer::Failed(match failure.sample {
                    Some(sample) => AgentError::Sample {
                        message: failure.message,
                        sample,
                    },
                    None => AgentError::Refused(failure.message),
                }),
            )),
            (other, _) => Err(AgentError::Protocol(format!(
                "expected a batch, got {other:?}"
            ))),
        }
    }
}

/// A batch in the agent's shared memory, mapped copy-on-write: changes made here stay
/// here. Released to the agent (for its next batch) when dropped.
#[derive(Debug)]
pub struct SharedBatch {
    /// Its buffer's mapping, given back to the buffer on drop.
    mapping: Option<Mapping>,
    buffer: Arc<Buffer>,
    header: BatchHeader,
    channel: Arc<Channel>,
    /// Its job's count of batches not dropped.
    live: Arc<AtomicUsize>,
}

impl SharedBatch {
    /// The samples' bytes, back to back: the agent's memory, shared with every job of
    /// the group until changed.
    pub fn data(&self) -> &[u8] {
        self.mapping
            .as_ref()
            .expect("mapped until dropped")
            .bytes(self.header.data_len as usize)
    }

    /// The samples' bytes, writable: a page changed here is copied first, for this batch
    /// alone (copy-on-write), and the rest stays shared.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.mapping
            .as_mut()
            .expect("mapped until dropped")
            .bytes_mut(self.header.data_len as usize)
    }

    /// One label per sample.
    pub fn labels(&self) -> &[i64] {
        &self.header.labels
    }

    /// The samples' catalog ids, in batch order.
    pub fn ids(&self) -> &[u64] {
        &self.header.ids
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.header.labels.len()
    }

    /// Whether the batch has no sample (never true for a delivered batch).
    pub fn is_empty(&self) -> bool {
        self.header.labels.is_empty()
    }

    /// The batch's number within its epoch.
    pub fn index(&self) -> u64 {
        self.header.index
    }

    /// The agent's buffer it is in.
    #[cfg(test)]
    pub(crate) fn buffer(&self) -> u64 {
        self.header.buffer
    }

    /// The position just after this batch: ask for it next.
    pub fn position(&self) -> Position {
        Position {
            epoch: self.header.epoch,
            batch: self.header.batch,
            sample: self.header.sample,
        }
    }

    /// The group's figures when the agent sent the batch (`ahead`: batches it had
    /// staged past this one).
    pub fn group(&self) -> &crate::GroupStats {
        &self.header.group
    }

    /// Whether the batch came from the group's shared stream (else from this job's own,
    /// for a position the group could not serve).
    pub fn from_group(&self) -> bool {
        self.header.shared
    }

    /// The counters of the job's node in the agent, when this job is a rank of a
    /// partitioned cache: what all its local ranks read and what the node served.
    pub fn node(&self) -> Option<nostall_peer::NodeStats> {
        self.header.node.map(|n| n.stats())
    }
}

impl Drop for SharedBatch {
    fn drop(&mut self) {
        if let Some(mapping) = self.mapping.take() {
            self.buffer
                .give_back(mapping, self.header.data_len as usize);
        }
        self.live.fetch_sub(1, Ordering::AcqRel);
        // The agent may be gone already: nothing to release then.
        let _ = self.channel.send(
            &Request::Release {
                ticket: self.header.ticket,
            }
            .encode(),
            None,
        );
    }
}
