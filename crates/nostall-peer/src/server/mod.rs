//! The peer service of one node: the data plane (framed TCP, see [`crate::wire`]) that
//! serves the node's cached samples by catalog id, and the control plane (gRPC) for the
//! handshake, the rendezvous and the epoch barrier.
//!
//! Every refusal is counted by kind, logged to stderr with its reason and the peer's
//! address, and kept among the last [`KEPT_REJECTIONS`]; none of them stops the service
//! from serving others.

mod admission;
mod control;
mod data;
#[cfg(test)]
mod tests;

use admission::{admit, Handshake, HandshakeBudget};
use control::{accept_control, ControlConnection, ControlService, Rendezvous};
use data::accept_loop;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tonic::{Request, Response};

use crate::auth::{self, Secret};
use crate::control::generated::control_server::{Control, ControlServer};
use crate::control::{
    message_limit, BarrierReply, BarrierRequest, HelloReply, HelloRequest, RegisterReply,
    RegisterRequest, MAX_ADDRESS_BYTES, MAX_CONTROL_MESSAGE_BYTES,
};
use crate::deadline::Deadline;
use crate::error::{network, Result};
use crate::node_cache::NodeCache;
use crate::wire::{self, Request as WireRequest, Status};

/// How long a data connection may idle between requests before the service closes it
/// (the client then opens a new one).
pub const IDLE_LIMIT: Duration = Duration::from_secs(120);

/// The most control connections a service holds in their TLS handshake at once (the
/// rest wait in the kernel's queue). Once a connection proves the job's secret it leaves
/// its place: the places bound only what strangers can hold, a descriptor and a task
/// each for up to the request timeout. With [`MAX_CONTROL_HANDSHAKES_PER_ADDRESS`], it
/// takes strangers at 16 addresses to hold them all (at 4 they held all 64 there were,
/// and the nodes' joins waited out their timeout).
pub const MAX_CONTROL_CONNECTIONS: usize = 256;

/// Completed epochs whose barrier node 0 remembers, so that a rank asking again (its
/// connection broke while it waited) is answered at once.
const KEPT_BARRIERS: usize = 4;

/// The most epochs whose barrier may be open at once. The ranks of a job are at most one
/// epoch apart; an arrival for yet another epoch is refused, never let to evict the
/// arrivals of an epoch still gathering.
const MAX_OPEN_BARRIERS: usize = 8;

/// Rejections of each kind logged in full before only one in a thousand is.
const LOGGED_REJECTIONS: u64 = 10;

/// How many recent rejections [`ServiceStats::recent`] keeps.
pub const KEPT_REJECTIONS: usize = 64;

/// The most data connections a node serves at once, by default. A node has a few peers
/// with a few fetch threads each; connections beyond the limit are refused, so that a
/// flood of them (each held for up to the I/O timeout before its handshake fails) cannot
/// exhaust threads or descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The most data connections from one address that may be in their TLS handshake at
/// once; more are closed at once. A node's fetch threads connect a few at a time and
/// prove the secret within a millisecond; a stranger holding connections open before the
/// handshake keeps at most this many threads and descriptors for the I/O timeout.
pub const MAX_HANDSHAKES_PER_ADDRESS: usize = 64;

/// The most control connections from one address that may be in their TLS handshake at
/// once (of [`MAX_CONTROL_CONNECTIONS`]): a stranger at one address cannot hold every
/// place. A node whose connection is closed for it tries again.
pub const MAX_CONTROL_HANDSHAKES_PER_ADDRESS: usize = 16;

/// How a node's service runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// This node's index.
    pub node: usize,
    /// Nodes in the job (for the rendezvous and the barrier).
    pub nodes: usize,
    /// Ranks per node: the barrier waits for every rank of every node, so that a node's
    /// service stays up until its own other ranks are done with it too.
    pub ranks_per_node: usize,
    /// Where the control plane listens; the data plane listens on the same IP address, on
    /// a port the system picks (peers learn it in the handshake).
    pub listen: SocketAddr,
    /// The job's secret.
    pub secret: Secret,
    /// What every node of the job must agree on (catalog and placement); see
    /// [`crate::fingerprint`].
    pub fingerprint: Vec<u8>,
    /// The largest sample served, in bytes; larger ones are refused.
    pub max_response_bytes: u64,
    /// Time a client gets to complete the handshake, and a send to a client to finish.
    pub io_timeout: Duration,
    /// How long the rendezvous and the barrier wait for every node.
    pub gather_timeout: Duration,
    /// The most data connections served at once ([`DEFAULT_MAX_CONNECTIONS`]). At the
    /// limit, a new connection takes the place of the one idle longest (its client opens
    /// another when it next needs one); it is refused only when none idles.
    pub max_connections: usize,
}

impl ServiceConfig {
    /// Node `node` of a job of `nodes` (one rank each), listening at `listen` with the
    /// job's `secret`; no fingerprint to agree on, samples up to
    /// [`nostall::storage::DEFAULT_MAX_BYTES`], a request's 5 s, 10 minutes for a
    /// meeting, [`DEFAULT_MAX_CONNECTIONS`]. Change the fields for the rest.
    pub fn new(node: usize, nodes: usize, listen: SocketAddr, secret: Secret) -> ServiceConfig {
        ServiceConfig {
            node,
            nodes,
            ranks_per_node: 1,
            listen,
            secret,
            fingerprint: Vec::new(),
            max_response_bytes: nostall::storage::DEFAULT_MAX_BYTES,
            io_timeout: Duration::from_secs(5),
            gather_timeout: Duration::from_secs(600),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// One refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rejection {
    /// A short kind: `unauthorized`, `bad-request`, `unknown-id`, `not-held`,
    /// `too-large`, `mismatch`, `duplicate`, `too-many-connections`,
    /// `too-many-handshakes`, `not-a-peer`, `idle`.
    pub kind: &'static str,
    /// The peer's address.
    pub peer: String,
    /// Why, in words.
    pub reason: String,
}

/// What the service has done since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceStats {
    /// Samples sent to peers.
    pub served_samples: u64,
    /// Bytes of samples sent to peers.
    pub served_bytes: u64,
    /// Of `served_bytes`, those sent to this node's own other ranks (processes that read
    /// their node's part over TCP; none do when the node agent serves the ranks).
    pub served_local_bytes: u64,
    /// Refusals by kind.
    pub rejected: BTreeMap<&'static str, u64>,
    /// The most recent refusals, oldest first.
    pub recent: Vec<Rejection>,
    /// Data connections open now.
    pub open_connections: usize,
    /// Control connections in their TLS handshake now (at most
    /// [`MAX_CONTROL_CONNECTIONS`]).
    pub control_handshakes: usize,
    /// Authenticated control connections open now: about one per process of the job that
    /// calls this node (every rank calls node 0).
    pub control_sessions: usize,
    /// Of `open_connections`, those authenticated and waiting for a request.
    pub idle_connections: usize,
    /// Idle data connections closed to make room for new ones at the limit.
    pub evicted_idle: u64,
}

/// State shared by the service's threads and tasks.
struct Shared {
    config: ServiceConfig,
    cache: Arc<NodeCache>,
    /// Catalog size: ids at or beyond it are unknown.
    samples: u64,
    data_port: u16,
    stop: AtomicBool,
    served_samples: AtomicU64,
    served_bytes: AtomicU64,
    served_local_bytes: AtomicU64,
    rejections: Mutex<(BTreeMap<&'static str, u64>, VecDeque<Rejection>)>,
    /// Open data connections by number, shut down when the service stops; each
    /// connection's thread removes its own when it ends. The same descriptor as the
    /// thread's: one per connection.
    connections: Mutex<BTreeMap<u64, Open>>,
    /// Data connections closed at the limit because they idled longest.
    evicted_idle: AtomicU64,
    /// The service's clock for idle stamps.
    started: Instant,
    /// Data connections in their handshake, by source address.
    data_handshakes: Arc<HandshakeBudget>,
    /// Control connections in their handshake, by source address.
    control_handshakes_by_address: Arc<HandshakeBudget>,
    /// Once the job's peers are known, the only addresses either plane serves.
    admitted: RwLock<Option<HashSet<IpAddr>>>,
    /// TLS for both planes, from the job's secret.
    tls: Arc<rustls::ServerConfig>,
    /// Places for control connections in their handshake ([`MAX_CONTROL_CONNECTIONS`]),
    /// and how many are taken.
    control_places: Arc<tokio::sync::Semaphore>,
    control_handshakes: Arc<AtomicUsize>,
    /// Places for authenticated control connections (one per process of the job, and
    /// [`MAX_CONTROL_CONNECTIONS`] more), and how many are taken.
    control_sessions: Arc<tokio::sync::Semaphore>,
    control_sessions_open: Arc<AtomicUsize>,
    rendezvous: Rendezvous,
}

/// An open data connection, as the service's table holds it.
struct Open {
    stream: Arc<TcpStream>,
    idle: Arc<IdleSince>,
}

/// Since when an authenticated connection waits for its client's next request: the
/// service's clock in milliseconds, plus one (zero: in its handshake or in a request,
/// never evicted).
#[derive(Default)]
struct IdleSince(AtomicU64);

impl IdleSince {
    fn set(&self, shared: &Shared) {
        let ms = u64::try_from(shared.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.0.store(ms + 1, Ordering::Release);
    }

    fn clear(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Since when, if it idles.
    fn since(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Acquire)).filter(|&stamp| stamp != 0)
    }
}

impl Shared {
    /// At the connection limit: closes the authenticated connection idle longest and
    /// drops it from `open`, so that a new one may take its place; whether one idled.
    /// Its client loses nothing: a pooled connection closed by the peer costs it a retry
    /// on a new one. (Refusing instead marks this node down at its peers: at scale, a
    /// job's processes keep more pooled connections to a node than it serves at once.)
    fn evict_idlest(&self, open: &mut BTreeMap<u64, Open>) -> bool {
        let idlest = open
            .iter()
            .filter_map(|(number, o)| Some((o.idle.since()?, *number)))
            .min();
        let Some((_, number)) = idlest else {
            return false;
        };
        if let Some(evicted) = open.remove(&number) {
            // Wakes its thread from its wait for a request: it ends, and forgets nothing.
            let _ = evicted.stream.shutdown(std::net::Shutdown::Both);
        }
        self.evicted_idle.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Drops connection `number` from the open ones (closing it, once its thread's
    /// halves are gone too).
    fn forget(&self, number: u64) {
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&number);
    }

    fn reject(&self, kind: &'static str, peer: &str, reason: String) {
        let mut guard = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        let count = guard.0.entry(kind).or_default();
        *count += 1;
        // A flood must not flood the log too: the first few of each kind, then one in a
        // thousand (all are counted).
        if *count <= LOGGED_REJECTIONS || (*count).is_multiple_of(1000) {
            eprintln!(
                "nostall-peer: node {}: refused {peer} ({kind}, {count} so far): {reason}",
                self.config.node
            );
        }
        if guard.1.len() == KEPT_REJECTIONS {
            guard.1.pop_front();
        }
        guard.1.push_back(Rejection {
            kind,
            peer: peer.to_string(),
            reason,
        });
    }
}

/// A node's running peer service. Dropping it stops it.
pub struct Service {
    shared: Arc<Shared>,
    control_addr: SocketAddr,
    data_addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// Told when the control plane has stopped, every call answered.
    all_answered: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("node", &self.shared.config.node)
            .field("control", &self.control_addr)
            .field("data", &self.data_addr)
            .finish()
    }
}

impl Service {
    /// Starts serving `cache` as configured.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Network`] when an address cannot be bound, [`crate::Error::Config`]
    /// if the TLS identity cannot be made.
    pub fn start(config: ServiceConfig, cache: Arc<NodeCache>, samples: u64) -> Result<Service> {
        let data = TcpListener::bind(SocketAddr::new(config.listen.ip(), 0)).map_err(network(
            format!("cannot listen on {} for data", config.listen.ip()),
        ))?;
        let data_addr = data.local_addr().map_err(network("data listener"))?;
        let control = std::net::TcpListener::bind(config.listen).map_err(network(format!(
            "cannot listen on {} for the peer service (is another node or job using it?)",
            config.listen
        )))?;
        let control_addr = control.local_addr().map_err(network("control listener"))?;
        let tls = config.secret.identity()?.server;
        // Every process of the job may hold a control connection here, and each data
        // connection is a descriptor: the default soft limit (1 024) is the first thing a
        // large job runs out of.
        nostall::net::raise_descriptor_limit();
        let sessions = config.nodes.saturating_mul(config.ranks_per_node.max(1));
        let shared = Arc::new(Shared {
            tls,
            rendezvous: Rendezvous::new(config.nodes, config.ranks_per_node),
            control_sessions: Arc::new(tokio::sync::Semaphore::new(
                sessions.saturating_add(MAX_CONTROL_CONNECTIONS),
            )),
            control_sessions_open: Arc::default(),
            config,
            cache,
            samples,
            data_port: data_addr.port(),
            stop: AtomicBool::new(false),
            served_samples: AtomicU64::new(0),
            served_bytes: AtomicU64::new(0),
            served_local_bytes: AtomicU64::new(0),
            rejections: Mutex::default(),
            connections: Mutex::default(),
            evicted_idle: AtomicU64::new(0),
            started: Instant::now(),
            data_handshakes: HandshakeBudget::new(MAX_HANDSHAKES_PER_ADDRESS),
            control_handshakes_by_address: HandshakeBudget::new(MAX_CONTROL_HANDSHAKES_PER_ADDRESS),
            admitted: RwLock::default(),
            control_places: Arc::new(tokio::sync::Semaphore::new(MAX_CONTROL_CONNECTIONS)),
            control_handshakes: Arc::default(),
        });

        data.set_nonblocking(true)
            .map_err(network("data listener"))?;
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("nostall-peer-accept".into())
                .spawn(move || accept_loop(&data, &shared))
                .map_err(network("cannot start the accept thread"))?
        };

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("nostall-peer-control")
            .enable_all()
            .build()
            .map_err(network("cannot start the control runtime"))?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = ControlService {
            shared: shared.clone(),
        };
        let server = ControlServer::new(service)
            .max_decoding_message_size(MAX_CONTROL_MESSAGE_BYTES)
            .max_encoding_message_size(message_limit(shared.config.nodes));
        control
            .set_nonblocking(true)
            .map_err(network("control listener"))?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(control).map_err(network("control listener"))?
        };
        let (connections, incoming) = tokio::sync::mpsc::channel(MAX_CONTROL_CONNECTIONS);
        runtime.spawn(accept_control(listener, shared.clone(), connections));
        let (answered, all_answered) = std::sync::mpsc::sync_channel::<()>(1);
        runtime.spawn(async move {
            let incoming = futures_util::stream::unfold(incoming, |mut incoming| async move {
                let connection: ControlConnection = incoming.recv().await?;
                Some((Ok::<_, std::io::Error>(connection), incoming))
            });
            let result = tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(err) = result {
                eprintln!("nostall-peer: control plane stopped: {err}");
            }
            let _ = answered.send(());
        });
        Ok(Service {
            shared,
            control_addr,
            data_addr,
            accept: Some(accept),
            runtime: Some(runtime),
            shutdown: Some(shutdown),
            all_answered: Mutex::new(all_answered),
        })
    }

    /// Where the control plane listens (the address peers are given).
    pub fn control_addr(&self) -> SocketAddr {
        self.control_addr
    }

    /// Where the data plane listens.
    pub fn data_addr(&self) -> SocketAddr {
        self.data_addr
    }

    /// From now on, serves connections (data and control) only from these addresses: the
    /// job's nodes, once the rendezvous (or the peer list) has named them. Others are
    /// closed before their handshake and counted as `not-a-peer`.
    pub fn admit_only(&self, addresses: impl IntoIterator<Item = IpAddr>) {
        let admitted = addresses.into_iter().map(|ip| ip.to_canonical()).collect();
        *self
            .shared
            .admitted
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(admitted);
    }

    /// Answers this node's other ranks' registrations with `list`: the node list (see
    /// [`crate::control`]) as node 0 answered this node's first rank. They ask here, on
    /// their own host, instead of node 0, which then answers one rank per node, not every
    /// rank of the job. Node 0's own service gathers the list itself: there, this does
    /// nothing.
    pub fn serve_node_list(&self, list: bytes::Bytes) {
        if self.shared.config.node != 0 {
            self.shared.rendezvous.hold(list);
        }
    }

    /// The counters.
    pub fn stats(&self) -> ServiceStats {
        let guard = self
            .shared
            .rejections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let open = self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        ServiceStats {
            served_samples: self.shared.served_samples.load(Ordering::Relaxed),
            served_bytes: self.shared.served_bytes.load(Ordering::Relaxed),
            served_local_bytes: self.shared.served_local_bytes.load(Ordering::Relaxed),
            rejected: guard.0.clone(),
            recent: guard.1.iter().cloned().collect(),
            open_connections: open.len(),
            control_handshakes: self.shared.control_handshakes.load(Ordering::Relaxed),
            control_sessions: self.shared.control_sessions_open.load(Ordering::Relaxed),
            evicted_idle: self.shared.evicted_idle.load(Ordering::Relaxed),
            idle_connections: open.values().filter(|o| o.idle.since().is_some()).count(),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        for conn in self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // The control plane stops gracefully: calls in flight are answered first. It
        // matters at the end of a job, when node 0 leaves the last barrier as soon as its
        // own call is answered, while the answers to every other rank are on their way
        // (a rank that missed its answer would wait for node 0 until its deadline).
        let _ = self
            .all_answered
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(self.shared.config.io_timeout);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}
