//! The messages between a job and the agent, and their bytes.
//!
//! Each message is one packet of the socket: a tag byte, then fields in little-endian,
//! strings and lists prefixed by their length. Decoding checks every length against what
//! is left and against the limits below, so that a malformed or hostile packet is an
//! error naming what is wrong, never a panic or an allocation it did not pay for.

use std::fmt;
use std::time::Duration;

use nostall::env::LocalRanks;
use nostall_peer::{
    Membership, NodeConfig, NodeStats, Secret, ServiceStats, SourceBreakdown, Timeouts,
};

/// The protocol's version: a job and an agent of different versions refuse each other.
///
/// Every version's hello starts alike: its tag (1) and the job's protocol (a u32,
/// little-endian), so that an agent tells a job of another version by its first five
/// bytes, before the rest, which that version lays out otherwise. From protocol 9 the
/// agent answers it with its own protocol and release (a reply laid out alike in every
/// version too); a job of an earlier protocol with a refusal in words, which they all
/// read.
/// The default socket is one per protocol ([`crate::default_socket`]): after an upgrade,
/// jobs meet an agent of their own version, not one still running from before.
pub const PROTOCOL: u32 = 9;

/// The first protocol whose jobs read [`Reply::Versions`].
pub(crate) const VERSIONED: u32 = 9;

/// This nostall's version, which the agent names to a job of another protocol.
pub(crate) const NOSTALL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The most samples in a batch served through the agent (labels and ids travel in the
/// message).
pub const MAX_BATCH: usize = 8192;

/// The most settings a job sends, and the longest text of one.
const MAX_SETTINGS: usize = 64;
const MAX_TEXT: usize = 4096;

/// The most datasets of a mixture a job names.
pub(crate) const MAX_SOURCES: usize = 256;

/// The longest text of a job's fields ([`nostall::fields::PortableFields::text`]), and
/// the most tokenizers and their bytes together that come with them (in a memfd sent
/// with the hello: a `tokenizer.json` is megabytes, more than a message holds). The agent
/// holds a job's tokenizers, parsed, for as long as a group reads them, shared by every
/// job and group that sends the same: a job names one or two (the largest in use are
/// 10–35 MB), and 64 jobs at these bounds hold a few GiB.
pub(crate) const MAX_FIELDS_TEXT: usize = 64 << 10;
pub(crate) const MAX_TOKENIZERS: usize = 4;
pub(crate) const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

/// The most nodes of a job, and the longest secret, a job's node may name. (A job's node
/// count sizes the placement and the rendezvous: unbounded, a member could make the
/// agent allocate without end.)
const MAX_NODES: usize = 1 << 16;
const MAX_SECRET: usize = 1024;

/// The most local ranks a job may say it has on a node (their table is sized by it).
const MAX_LOCAL_RANKS: usize = 1024;

/// The most batches a job may let the agent send ahead of its asking (see
/// [`Request::Next`]).
pub(crate) const MAX_CREDITS: u32 = 16;

/// The most buffers one [`Reply::Forget`] names (a session sends more as several).
pub(crate) const MAX_FORGET: usize = 1024;

/// The longest lease a welcome may announce (a job waits that long in silence before it
/// goes on without the agent).
const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// A malformed message: what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed message: {}", self.0)
    }
}

/// A job's object-storage settings: the variables of
/// [`nostall::storage::S3_ENVIRONMENT`] it has set, with their values. Shown by name only
/// (the values hold credentials).
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct StorageSettings(pub(crate) Vec<(String, String)>);

impl fmt::Debug for StorageSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// A job's fields as they travel: their text, and the length of each tokenizer's
/// `tokenizer.json` in the memfd sent with the hello, one after another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldsSent {
    pub(crate) text: String,
    pub(crate) tokenizers: Vec<u64>,
}

/// What a job asks of the agent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// The first message: which stream the job reads.
    Hello {
        protocol: u32,
        /// The dataset's location, as `Loader` takes it.
        location: String,
        /// The loader's settings as text (`LoaderSettings::texts`).
        settings: Vec<(String, String)>,
        /// A group name given by the job; empty to group by stream.
        group: String,
        /// The job's node, for a rank of a job whose cache is partitioned across nodes.
        node: Option<Box<JobNode>>,
        /// The job's place among the local ranks of its node, when it is one of several
        /// and balances its threads with them.
        ranks: Option<LocalRanks>,
        /// The job's object-storage settings.
        storage: StorageSettings,
        /// The datasets of a mixture, with their weights; empty: the one at `location`.
        sources: Vec<(String, Option<f64>)>,
        /// The fields of each sample, if the job reads records.
        fields: Option<FieldsSent>,
    },
    /// The next batch: the job stands at this position (after its last batch). The
    /// agent answers, then goes on sending the batches after it unasked while the job
    /// holds fewer than `credits` of its batches (sent and not released), up to the
    /// epoch's end or a failure: a job in step sends no request per batch, its releases
    /// are its credit. Every answer carries `ask`, which grows with each request, so that
    /// a job that moved elsewhere tells the batches sent for an earlier request apart.
    Next {
        at: nostall::Position,
        ask: u64,
        credits: u32,
    },
    /// The job is done with the batch of this ticket.
    Release { ticket: u64 },
}

/// The agent's answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The job is attached: its group and what it reads.
    Welcome(crate::Attached),
    /// A batch, in the shared buffer named by `buffer` (its memfd comes with the message
    /// the first time this job is sent that buffer).
    Batch(BatchHeader),
    /// The epoch has no more batches.
    End { epoch: u64, ask: u64 },
    /// The request failed (`ask` 0: a refusal outside any request for batches).
    Failed { failure: Failure, ask: u64 },
    /// Still making the batch asked for by request `ask`: sent every quarter of the
    /// lease while a job waits, so that the job tells a slow batch from a stopped agent
    /// (whose silence outlasts the lease).
    Working { ask: u64 },
    /// The job speaks another protocol: this agent's, and the nostall release it runs.
    /// Sent only to a job of protocol [`VERSIONED`] or later, and laid out alike in every
    /// version from it.
    Versions { protocol: u32, release: String },
    /// These buffers carry no more batches to this job: it closes their memfds (a batch
    /// it holds keeps its own mapping). Sent when the stream that owned them ends (a
    /// private one, once the job is back in its group), before any later answer, so that
    /// a job that falls out of its group every epoch keeps no buffer of the streams it
    /// left.
    Forget { buffers: Vec<u64> },
}

/// Why a request failed: the text says why and what to do; a bad sample is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) sample: Option<SampleFailure>,
}

/// A sample that could not be read or prepared, as the loader names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampleFailure {
    /// The sample's id in the catalog.
    pub sample_id: u64,
    /// Where its bytes live (a path).
    pub location: String,
    /// The cause's stable name (`"corrupt"`, `"missing"`, ...).
    pub cause: String,
    /// The cause in words.
    pub detail: String,
}

impl Failure {
    /// A failure in words only.
    pub(crate) fn text(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            sample: None,
        }
    }

    /// The loader's error, with the sample it names.
    pub(crate) fn of(err: &nostall::Error) -> Failure {
        let sample = match err {
            nostall::Error::Sample(e) => Some(SampleFailure {
                sample_id: e.id,
                location: e.location.clone(),
                cause: e.cause.kind().to_string(),
                detail: e.cause.to_string(),
            }),
            _ => None,
        };
        Failure {
            message: err.to_string(),
            sample,
        }
    }
}

/// The job's peer secret as it travels to the agent: shown by `Debug` as its length only,
/// so that a logged request never carries it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SecretBytes(pub(crate) Vec<u8>);

impl std::fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretBytes({} bytes, not shown)", self.0.len())
    }
}

/// A rank's node of a job whose cache is partitioned across nodes: the
/// [`NodeConfig`] it would join with, the secret as bytes. The agent joins the job once
/// for the node and plans each local rank's stream over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobNode {
    pub(crate) node: u32,
    pub(crate) nodes: u32,
    pub(crate) local_rank: u32,
    pub(crate) ranks_per_node: u32,
    pub(crate) membership: Membership,
    pub(crate) capacity: String,
    pub(crate) seed: u64,
    pub(crate) secret: SecretBytes,
    /// [`nostall_peer::Timeouts`] and the gather timeout, in milliseconds.
    pub(crate) request_ms: u64,
    pub(crate) retry_ms: u64,
    pub(crate) join_ms: u64,
    pub(crate) gather_ms: u64,
    pub(crate) max_sample_bytes: u64,
}

impl JobNode {
    pub(crate) fn of(c: &NodeConfig) -> JobNode {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        JobNode {
            node: c.node as u32,
            nodes: c.nodes as u32,
            local_rank: c.local_rank as u32,
            ranks_per_node: c.ranks_per_node as u32,
            membership: c.membership.clone(),
            capacity: c.capacity.to_string(),
            seed: c.seed,
            secret: SecretBytes(c.secret.bytes().to_vec()),
            request_ms: ms(c.timeouts.request),
            retry_ms: ms(c.timeouts.retry_after),
            join_ms: ms(c.timeouts.join),
            gather_ms: ms(c.gather_timeout),
            max_sample_bytes: c.max_sample_bytes,
        }
    }

    /// The configuration to join with as the node's first local rank (which runs the
    /// node's cache and service).
    pub(crate) fn config(&self) -> Result<NodeConfig, String> {
        let capacity = self.capacity.parse().map_err(|e| format!("{e}"))?;
        let secret = Secret::new(&self.secret.0).map_err(|e| e.to_string())?;
        let mut c = NodeConfig::new(self.node as usize, Vec::new(), capacity, secret);
        c.nodes = self.nodes as usize;
        c.ranks_per_node = self.ranks_per_node as usize;
        c.membership = self.membership.clone();
        c.seed = self.seed;
        c.timeouts = Timeouts::new(
            Duration::from_millis(self.request_ms),
            Duration::from_millis(self.retry_ms),
            Duration::from_millis(self.join_ms),
        );
        c.gather_timeout = Duration::from_millis(self.gather_ms);
        c.max_sample_bytes = self.max_sample_bytes;
        Ok(c)
    }

    /// The job's node in words, the local rank and the secret left out: the local ranks
    /// of one node of one job say the same.
    pub(crate) fn describe(&self) -> String {
        let peers = match &self.membership {
            Membership::Peers(peers) => format!("peers {}", peers.join(",")),
            Membership::Rendezvous { at, own } => format!("rendezvous at {at} as {own}"),
            Membership::Store { store, own } => format!("store {} as {own}", store.prefix()),
        };
        format!(
            "node {} of {} ({} ranks each), {peers}, cache {} seed {}",
            self.node, self.nodes, self.ranks_per_node, self.capacity, self.seed
        )
    }

    fn write(&self, w: &mut Writer) {
        w.u32(self.node)
            .u32(self.nodes)
            .u32(self.local_rank)
            .u32(self.ranks_per_node);
        match &self.membership {
            Membership::Peers(peers) => {
                w.u8(0).u32(peers.len() as u32);
                for p in peers {
                    w.text(p);
                }
            }
            Membership::Rendezvous { at, own } => {
                w.u8(1).text(at).text(own);
            }
            Membership::Store { .. } => {
                unreachable!("JobBuilder::attach keeps a store's membership from the agent")
            }
        }
        w.text(&self.capacity).u64(self.seed);
        w.u32(self.secret.0.len() as u32);
        w.0.extend_from_slice(&self.secret.0);
        w.u64(self.request_ms)
            .u64(self.retry_ms)
            .u64(self.join_ms)
            .u64(self.gather_ms)
            .u64(self.max_sample_bytes);
    }

    fn read(r: &mut Reader<'_>) -> Result<JobNode, Malformed> {
        let node = r.u32("the node")?;
        let nodes = r.u32("the nodes")?;
        let local_rank = r.u32("the local rank")?;
        let ranks_per_node = r.u32("the ranks per node")?;
        if node >= nodes
            || nodes as usize > MAX_NODES
            || local_rank >= ranks_per_node
            || ranks_per_node as usize > MAX_LOCAL_RANKS
        {
            return Err(Malformed(format!(
                "node {node} of {nodes}, local rank {local_rank} of {ranks_per_node} (at \
                 most {MAX_NODES} nodes of {MAX_LOCAL_RANKS} local ranks)"
            )));
        }
        let membership = match r.u8("the membership")? {
            0 => {
                let n = r.count("the peers", MAX_NODES)?;
                Membership::Peers((0..n).map(|_| r.text("a peer")).collect::<Result<_, _>>()?)
            }
            1 => Membership::Rendezvous {
                at: r.text("the rendezvous")?,
                own: r.text("the node's address")?,
            },
            other => return Err(Malformed(format!("unknown membership {other}"))),
        };
        let capacity = r.text("the capacity")?;
        let seed = r.u64("the seed")?;
        let n = r.count("the secret", MAX_SECRET)?;
        let secret = SecretBytes(r.take(n, "the secret")?.to_vec());
        Ok(JobNode {
            node,
            nodes,
            local_rank,
            ranks_per_node,
            membership,
            capacity,
            seed,
            secret,
            request_ms: r.u64("the request timeout")?,
            retry_ms: r.u64("the retry time")?,
            join_ms: r.u64("the join timeout")?,
            gather_ms: r.u64("the gather timeout")?,
            max_sample_bytes: r.u64("the largest sample")?,
        })
    }
}

/// Where a batch is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    /// The request it answers or follows.
    pub(crate) ask: u64,
    /// Names this delivery in [`Request::Release`].
    pub(crate) ticket: u64,
    /// The shared buffer holding the batch, and its length.
    pub(crate) buffer: u64,
    pub(crate) buffer_len: u64,
    /// Bytes of the batch's data at the buffer's start.
    pub(crate) data_len: u64,
    /// The batch's number within its epoch.
    pub(crate) index: u64,
    /// The position just after the batch.
    pub(crate) epoch: u64,
    pub(crate) batch: u64,
    pub(crate) sample: u64,
    /// Whether the batch came from the group's shared stream (else from this job's own).
    pub(crate) shared: bool,
    pub(crate) labels: Vec<i64>,
    pub(crate) ids: Vec<u64>,
    /// The group's figures when the batch was sent.
    pub(crate) group: crate::GroupStats,
    /// The figures of the job's node, for a rank of a job with a partitioned cache.
    pub(crate) node: Option<NodeFigures>,
}

/// What the agent's node of a job has read and served, for all its local ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeFigures {
    pub(crate) source: SourceBreakdown,
    pub(crate) served_samples: u64,
    pub(crate) served_bytes: u64,
    pub(crate) served_local_bytes: u64,
}

impl NodeFigures {
    pub(crate) fn of(stats: &NodeStats) -> NodeFigures {
        let service = stats.service.clone().unwrap_or_default();
        NodeFigures {
            source: stats.source,
            served_samples: service.served_samples,
            served_bytes: service.served_bytes,
            served_local_bytes: service.served_local_bytes,
        }
    }

    /// As the node's own counters would say (the service's refusals left out).
    pub(crate) fn stats(&self) -> NodeStats {
        let mut service = ServiceStats::default();
        service.served_samples = self.served_samples;
        service.served_bytes = self.served_bytes;
        service.served_local_bytes = self.served_local_bytes;
        let mut stats = NodeStats::default();
        stats.source = self.source;
        stats.service = Some(service);
        stats
    }

    fn fields(&self) -> [u64; 11] {
        let s = &self.source;
        [
            s.local_samples,
            s.local_bytes,
            s.peer_samples,
            s.peer_bytes,
            s.storage_bytes,
            s.fallbacks,
            s.peer_downs,
            s.peer_mismatches,
            self.served_samples,
            self.served_bytes,
            self.served_local_bytes,
        ]
    }

    fn read(r: &mut Reader<'_>) -> Result<NodeFigures, Malformed> {
        let mut f = [0u64; 11];
        for v in &mut f {
            *v = r.u64("a node figure")?;
        }
        let [local_samples, local_bytes, peer_samples, peer_bytes, storage_bytes, fallbacks, peer_downs, peer_mismatches, served_samples, served_bytes, served_local_bytes] =
            f;
        let mut source = SourceBreakdown::default();
        source.local_samples = local_samples;
        source.local_bytes = local_bytes;
        source.peer_samples = peer_samples;
        source.peer_bytes = peer_bytes;
        source.storage_bytes = storage_bytes;
        source.fallbacks = fallbacks;
        source.peer_downs = peer_downs;
        source.peer_mismatches = peer_mismatches;
        Ok(NodeFigures {
            source,
            served_samples,
            served_bytes,
            served_local_bytes,
        })
    }
}

const HELLO: u8 = 1;
const NEXT: u8 = 2;
const RELEASE: u8 = 3;
const WELCOME: u8 = 11;
const BATCH: u8 = 12;
const END: u8 = 13;
const FAILED: u8 = 14;
const WORKING: u8 = 15;
const FORGET: u8 = 16;
const VERSIONS: u8 = 17;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn text(&mut self, s: &str) -> &mut Self {
        // Longer texts are cut (at a character boundary) rather than refused by the
        // reader: an error message must arrive.
        let mut end = s.len().min(MAX_TEXT);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u32(end as u32);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
    /// A text whole, whatever its length (the reader bounds it).
    fn whole_text(&mut self, s: &str) -> &mut Self {
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(s.as_bytes());
        self
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Malformed> {
        if self.bytes.len() < n {
            return Err(Malformed(format!(
                "{what} runs past the end of the message"
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8, Malformed> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32, Malformed> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, Malformed> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn count(&mut self, what: &str, max: usize) -> Result<usize, Malformed> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(Malformed(format!(
                "{what}: {n} is more than the {max} allowed"
            )));
        }
        Ok(n)
    }
    fn text(&mut self, what: &str) -> Result<String, Malformed> {
        self.text_within(what, MAX_TEXT)
    }
    fn text_within(&mut self, what: &str, max: usize) -> Result<String, Malformed> {
        let n = self.count(what, max)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed(format!("{what} is not UTF-8")))
    }
    fn end(&self) -> Result<(), Malformed> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Malformed(format!(
                "{} bytes after the end",
                self.bytes.len()
            )))
        }
    }
}

/// Reads a whole message with `read`: bytes left over are malformed too.
fn read_whole<T>(
    bytes: &[u8],
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, Malformed>,
) -> Result<T, Malformed> {
    let mut r = Reader { bytes };
    let value = read(&mut r)?;
    r.end()?;
    Ok(value)
}

impl Request {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Request::Hello {
                protocol,
                location,
                settings,
                group,
                node,
                ranks,
                storage,
                sources,
                fields,
            } => {
                w.u8(HELLO).u32(*protocol).text(location).text(group);
                w.u32(settings.len() as u32);
                for (name, value) in settings {
                    w.text(name).text(value);
                }
                match node {
                    None => {
                        w.u8(0);
                    }
                    Some(node) => {
                        w.u8(1);
                        node.write(&mut w);
                    }
                }
                match ranks {
                    None => {
                        w.u8(0);
                    }
                    Some(ranks) => {
                        w.u8(1).u64(ranks.job);
                        w.u32(ranks.local_rank as u32).u32(ranks.local_world as u32);
                    }
                }
                w.u32(storage.0.len() as u32);
                for (name, value) in &storage.0 {
                    w.text(name).text(value);
                }
                w.u32(sources.len() as u32);
                for (location, weight) in sources {
                    w.text(location);
                    match weight {
                        None => w.u8(0),
                        Some(weight) => w.u8(1).u64(weight.to_bits()),
                    };
                }
                match fields {
                    None => {
                        w.u8(0);
                    }
                    Some(fields) => {
                        w.u8(1).whole_text(&fields.text);
                        w.u32(fields.tokenizers.len() as u32);
                        for len in &fields.tokenizers {
                            w.u64(*len);
                        }
                    }
                }
            }
            Request::Next { at, ask, credits } => {
                w.u8(NEXT).u64(at.epoch).u64(at.batch).u64(at.sample);
                w.u64(*ask).u32(*credits);
            }
            Request::Release { ticket } => {
                w.u8(RELEASE).u64(*ticket);
            }
        }
        w.0
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Request, Malformed> {
        read_whole(bytes, Self::read)
    }

    /// A request read from the start of `bytes`, and the bytes after it.
    fn read_prefix(bytes: &[u8]) -> Result<(Request, &[u8]), Malformed> {
        let mut r = Reader { bytes };
        let request = Self::read(&mut r)?;
        Ok((request, r.bytes))
    }

    fn read(r: &mut Reader<'_>) -> Result<Request, Malformed> {
        Ok(match r.u8("the tag")? {
            HELLO => {
                let protocol = r.u32("the protocol")?;
                let location = r.text("the location")?;
                let group = r.text("the group")?;
                let n = r.count("the settings", MAX_SETTINGS)?;
                let mut settings = Vec::with_capacity(n);
                for _ in 0..n {
                    settings.push((r.text("a setting's name")?, r.text("a setting's value")?));
                }
                let node = match r.u8("the node flag")? {
                    0 => None,
                    _ => Some(Box::new(JobNode::read(r)?)),
                };
                let ranks = match r.u8("the ranks flag")? {
                    0 => None,
                    _ => Some(read_ranks(r)?),
                };
                let known = &nostall::storage::S3_ENVIRONMENT;
                let n = r.count("the storage settings", known.len())?;
                let mut storage = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = r.text("a storage setting's name")?;
                    if !known.contains(&name.as_str()) {
                        return Err(Malformed(format!("{name:?} is not a storage setting")));
                    }
                    storage.push((name, r.text("a storage setting's value")?));
                }
                let n = r.count("the datasets", MAX_SOURCES)?;
                let mut sources = Vec::with_capacity(n);
                for _ in 0..n {
                    let location = r.text("a dataset's location")?;
                    let weight = match r.u8("the weight flag")? {
                        0 => None,
                        _ => Some(f64::from_bits(r.u64("a weight")?)),
                    };
                    sources.push((location, weight));
                }
                let fields = match r.u8("the fields flag")? {
                    0 => None,
                    _ => {
                        let text = r.text_within("the fields", MAX_FIELDS_TEXT)?;
                        let n = r.count("the tokenizers", MAX_TOKENIZERS)?;
                        let mut tokenizers = Vec::with_capacity(n);
                        let mut total = 0u64;
                        for _ in 0..n {
                            let len = r.u64("a tokenizer's length")?;
                            total = total.saturating_add(len);
                            tokenizers.push(len);
                        }
                        if total > MAX_TOKENIZER_BYTES {
                            return Err(Malformed(format!(
                                "tokenizers of {total} bytes: at most {MAX_TOKENIZER_BYTES}"
                            )));
                        }
                        Some(FieldsSent { text, tokenizers })
                    }
                };
                Request::Hello {
                    protocol,
                    location,
                    settings,
                    group,
                    node,
                    ranks,
                    storage: StorageSettings(storage),
                    sources,
                    fields,
                }
            }
            NEXT => Request::Next {
                at: nostall::Position {
                    epoch: r.u64("the epoch")?,
                    batch: r.u64("the batch")?,
                    sample: r.u64("the sample")?,
                },
                ask: r.u64("the ask")?,
                credits: match r.u32("the credits")? {
                    c @ 1..=MAX_CREDITS => c,
                    c => {
                        return Err(Malformed(format!(
                            "{c} credits: a job lets the agent send 1 to {MAX_CREDITS} \
                             batches ahead"
                        )))
                    }
                },
            },
            RELEASE => Request::Release {
                ticket: r.u64("the ticket")?,
            },
            tag => return Err(Malformed(format!("unknown request {tag}"))),
        })
    }
}

/// The protocol of the job whose hello `bytes` holds, by its first five bytes: the same in
/// every version (see [`PROTOCOL`]). `None`: not a hello.
pub(crate) fn hello_protocol(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [HELLO, a, b, c, d, ..] => Some(u32::from_le_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// A job's local ranks: several, and its own among them.
fn read_ranks(r: &mut Reader<'_>) -> Result<LocalRanks, Malformed> {
    let job = r.u64("the ranks' job")?;
    let local_rank = r.u32("the local rank")? as usize;
    let local_world = r.u32("the local ranks")? as usize;
    if !(2..=MAX_LOCAL_RANKS).contains(&local_world) || local_rank >= local_world {
        return Err(Malformed(format!(
            "local rank {local_rank} of {local_world}: a job balances with 2 to \
             {MAX_LOCAL_RANKS} local ranks, its own below their number"
        )));
    }
    Ok(LocalRanks {
        job,
        local_rank,
        local_world,
    })
}

impl Reply {
    /// A refusal outside any request for batches: the text says why.
    pub(crate) fn refusal(why: impl Into<String>) -> Reply {
        Reply::Failed {
            failure: Failure::text(why),
            ask: 0,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Reply::Welcome(a) => {
                w.u8(WELCOME).text(&a.group).u32(a.members);
                w.u64(a.batches_per_epoch).u64(a.dataset_len);
                w.u32(a.sample_shape.len() as u32);
                for d in &a.sample_shape {
                    w.u64(*d as u64);
                }
                w.text(&a.dtype);
                // Only as many class names as fit a message; the rest are left out.
                let mut budget = crate::socket::MAX_MESSAGE / 2;
                let kept: Vec<&String> = a
                    .classes
                    .iter()
                    .take_while(|c| {
                        budget = budget.saturating_sub(c.len() + 4);
                        budget > 0
                    })
                    .collect();
                w.u32(kept.len() as u32);
                for c in kept {
                    w.text(c);
                }
                let lease = a.lease.clamp(Duration::from_millis(1), MAX_LEASE);
                w.u64(lease.as_millis() as u64);
            }
            Reply::Batch(h) => {
                w.u8(BATCH).u64(h.ask).u64(h.ticket).u64(h.buffer);
                w.u64(h.buffer_len);
                w.u64(h.data_len)
                    .u64(h.index)
                    .u64(h.epoch)
                    .u64(h.batch)
                    .u64(h.sample);
                let g = &h.group;
                w.u32(g.members as u32).u64(g.produced).u64(g.delivered);
                w.u64(g.detached).u64(g.ahead);
                w.u8(u8::from(h.shared)).u32(h.labels.len() as u32);
                for l in &h.labels {
                    w.u64(*l as u64);
                }
                for id in &h.ids {
                    w.u64(*id);
                }
                match &h.node {
                    None => {
                        w.u8(0);
                    }
                    Some(node) => {
                        w.u8(1);
                        for v in node.fields() {
                            w.u64(v);
                        }
                    }
                }
            }
            Reply::End { epoch, ask } => {
                w.u8(END).u64(*epoch).u64(*ask);
            }
            Reply::Working { ask } => {
                w.u8(WORKING).u64(*ask);
            }
            Reply::Versions { protocol, release } => {
                w.u8(VERSIONS).u32(*protocol).text(release);
            }
            Reply::Forget { buffers } => {
                w.u8(FORGET).u32(buffers.len() as u32);
                for b in buffers {
                    w.u64(*b);
                }
            }
            Reply::Failed { failure, ask } => {
                w.u8(FAILED).u64(*ask).text(&failure.message);
                match &failure.sample {
                    None => {
                        w.u8(0);
                    }
                    Some(f) => {
                        w.u8(1).u64(f.sample_id).text(&f.location);
                        w.text(&f.cause).text(&f.detail);
                    }
                }
            }
        }
        w.0
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Reply, Malformed> {
        read_whole(bytes, Self::read)
    }

    fn read(r: &mut Reader<'_>) -> Result<Reply, Malformed> {
        Ok(match r.u8("the tag")? {
            WELCOME => {
                let group = r.text("the group")?;
                let members = r.u32("the members")?;
                let batches_per_epoch = r.u64("the batches per epoch")?;
                let dataset_len = r.u64("the dataset's length")?;
                let dims = r.count("the shape", 8)?;
                let sample_shape = (0..dims)
                    .map(|_| r.u64("a dimension").map(|d| d as usize))
                    .collect::<Result<_, _>>()?;
                let dtype = r.text("the dtype")?;
                let n = r.count("the classes", crate::socket::MAX_MESSAGE)?;
                let classes = (0..n)
                    .map(|_| r.text("a class"))
                    .collect::<Result<_, _>>()?;
                let lease = Duration::from_millis(r.u64("the lease")?);
                if lease.is_zero() || lease > MAX_LEASE {
                    return Err(Malformed(format!(
                        "a lease of {lease:?}: an agent's lease is above zero and at most \
                         {MAX_LEASE:?}"
                    )));
                }
                Reply::Welcome(crate::Attached {
                    group,
                    members,
                    batches_per_epoch,
                    dataset_len,
                    sample_shape,
                    dtype,
                    classes,
                    lease,
                })
            }
            BATCH => {
                let ask = r.u64("the ask")?;
                let ticket = r.u64("the ticket")?;
                let buffer = r.u64("the buffer")?;
                let buffer_len = r.u64("the buffer's length")?;
                let data_len = r.u64("the data's length")?;
                if data_len > buffer_len {
                    return Err(Malformed(format!(
                        "{data_len} bytes of data in a buffer of {buffer_len}"
                    )));
                }
                let index = r.u64("the index")?;
                let epoch = r.u64("the epoch")?;
                let batch = r.u64("the batch")?;
                let sample = r.u64("the sample")?;
                let group = crate::GroupStats {
                    members: r.u32("the members")? as usize,
                    produced: r.u64("the batches produced")?,
                    delivered: r.u64("the batches delivered")?,
                    detached: r.u64("the members detached")?,
                    ahead: r.u64("the batches ahead")?,
                };
                let shared = r.u8("the stream")? != 0;
                let n = r.count("the labels", MAX_BATCH)?;
                let labels = (0..n)
                    .map(|_| r.u64("a label").map(|l| l as i64))
                    .collect::<Result<_, _>>()?;
                let ids = (0..n).map(|_| r.u64("an id")).collect::<Result<_, _>>()?;
                let node = match r.u8("the node flag")? {
                    0 => None,
                    _ => Some(NodeFigures::read(r)?),
                };
                Reply::Batch(BatchHeader {
                    ask,
                    ticket,
                    buffer,
                    buffer_len,
                    data_len,
                    index,
                    epoch,
                    batch,
                    sample,
                    shared,
                    labels,
                    ids,
                    group,
                    node,
                })
            }
            END => Reply::End {
                epoch: r.u64("the epoch")?,
                ask: r.u64("the ask")?,
            },
            WORKING => Reply::Working {
                ask: r.u64("the ask")?,
            },
            VERSIONS => Reply::Versions {
                protocol: r.u32("the agent's protocol")?,
                release: r.text("the agent's release")?,
            },
            FORGET => {
                let n = r.count("the buffers to forget", MAX_FORGET)?;
                let buffers = (0..n)
                    .map(|_| r.u64("a buffer"))
                    .collect::<Result<_, _>>()?;
                Reply::Forget { buffers }
            }
            FAILED => {
                let ask = r.u64("the ask")?;
                let message = r.text("the message")?;
                let sample = match r.u8("the sample flag")? {
                    0 => None,
                    _ => Some(SampleFailure {
                        sample_id: r.u64("the sample's id")?,
                        location: r.text("the sample's location")?,
                        cause: r.text("the cause")?,
                        detail: r.text("the detail")?,
                    }),
                };
                Reply::Failed {
                    failure: Failure { message, sample },
                    ask,
                }
            }
            tag => return Err(Malformed(format!("unknown reply {tag}"))),
        })
    }
}

/// Reads `data` as the agent reads what a job sends and as a job reads the agent's
/// messages: what fuzzers run, so that no byte sequence on the socket panics or allocates
/// beyond the limits. A hello is read as the agent reads it before opening anything: its
/// protocol by its first bytes, its tokenizers from the memfd beside it (the bytes after
/// the hello, if any, are that memfd's), its fields made with them, and its settings and
/// fields applied to a loader's configuration.
#[doc(hidden)]
pub fn parse_for_fuzzing(data: &[u8]) {
    let _ = hello_protocol(data);
    if let Ok((
        Request::Hello {
            location,
            settings,
            fields,
            ..
        },
        attached,
    )) = Request::read_prefix(data)
    {
        let fd = match attached {
            [] => None,
            bytes => match crate::attachment::write(&[bytes.into()]) {
                Ok(fd) => Some(fd),
                Err(_) => return, // out of descriptors or memory: nothing read
            },
        };
        let lens = fields.as_ref().map_or(&[][..], |f| &f.tokenizers[..]);
        let tokenizers = crate::attachment::received(fd, lens);
        let fields = fields
            .zip(tokenizers.ok())
            .and_then(|(f, t)| nostall::fields::Fields::from_portable(&f.text, &t).ok());
        let texts = settings.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        if let Ok(settings) = nostall::loader::LoaderSettings::from_texts(texts) {
            let mut builder = nostall::loader::LoaderBuilder::with_settings(location, settings);
            let _ = builder.fields(fields).config();
        }
    }
    let _ = Reply::decode(data);
}

#[cfg(test)]
mod tests;
