//! The peer service of one node: the data plane (framed TCP, see [`crate::wire`]) that
//! serves the node's cached samples by catalog id, and the control plane (gRPC) for the
//! handshake, the rendezvous and the epoch barrier.
//!
//! Every refusal is counted by kind, logged to stderr with its reason and the peer's
//! address, and kept among the last [`KEPT_REJECTIONS`]; none of them stops the service
//! from serving others.

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
        if *count <= LOGGED_REJECTIONS || *count % 1000 == 0 {
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

/// Accepts data connections until the service stops, one thread each: a node has few
/// peers, each with a few fetch threads, so threads are cheap and keep the hot path
/// blocking and simple.
fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let Some(handshake) = admit(shared, peer, &shared.data_handshakes) else {
                    continue;
                };
                let stream = Arc::new(stream);
                let idle = Arc::new(IdleSince::default());
                let number = next;
                next += 1;
                {
                    let mut open = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
                    let limit = shared.config.max_connections;
                    if open.len() >= limit && !shared.evict_idlest(&mut open) {
                        drop(open);
                        let reason = format!("{limit} data connections already open, none idle");
                        shared.reject("too-many-connections", &peer.to_string(), reason);
                        continue;
                    }
                    let open_one = Open {
                        stream: stream.clone(),
                        idle: idle.clone(),
                    };
                    open.insert(number, open_one);
                }
                let serving = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("nostall-peer-conn".into())
                    .spawn(move || {
                        serve_connection(stream, peer, &serving, handshake, &idle);
                        serving.forget(number);
                    });
                if let Err(err) = spawned {
                    eprintln!("nostall-peer: cannot serve {peer}: {err}");
                    shared.forget(number);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(err) => match nostall::net::accept_failed(&err) {
                nostall::net::AcceptFailure::Retry => {}
                nostall::net::AcceptFailure::BackOff => {
                    eprintln!("nostall-peer: data accept failed: {err}; backing off");
                    std::thread::sleep(nostall::net::ACCEPT_BACKOFF);
                }
                nostall::net::AcceptFailure::Fatal => {
                    eprintln!("nostall-peer: data listener broken: {err}");
                    return;
                }
            },
        }
    }
}

/// Whether a connection from `peer` may start its handshake: from an address of the job
/// (once its peers are known), and one with fewer handshakes under way than `budget`
/// allows. The place it takes, given back when the handshake ends.
fn admit(shared: &Shared, peer: SocketAddr, budget: &Arc<HandshakeBudget>) -> Option<Handshake> {
    let ip = peer.ip().to_canonical();
    let known = shared
        .admitted
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_none_or(|admitted| admitted.contains(&ip));
    if !known {
        let reason = format!("{ip} is not the address of a node of the job");
        shared.reject("not-a-peer", &peer.to_string(), reason);
        return None;
    }
    let taken = budget.take(ip);
    if taken.is_none() {
        let reason = format!(
            "{} handshakes from {ip} already under way",
            budget.per_address
        );
        shared.reject("too-many-handshakes", &peer.to_string(), reason);
    }
    taken
}

/// How many connections from each address may be in their handshake at once.
struct HandshakeBudget {
    per_address: usize,
    under_way: Mutex<HashMap<IpAddr, usize>>,
}

impl HandshakeBudget {
    fn new(per_address: usize) -> Arc<HandshakeBudget> {
        Arc::new(HandshakeBudget {
            per_address,
            under_way: Mutex::default(),
        })
    }

    /// A place for a handshake from `ip`, if it has one left.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Handshake> {
        let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
        let count = under_way.entry(ip).or_default();
        if *count >= self.per_address {
            return None;
        }
        *count += 1;
        Some(Handshake {
            budget: self.clone(),
            ip,
        })
    }
}

/// A connection's place among its address's handshakes under way.
struct Handshake {
    budget: Arc<HandshakeBudget>,
    ip: IpAddr,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut under_way = self
            .budget
            .under_way
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = under_way.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                under_way.remove(&self.ip);
            }
        }
    }
}

/// An authenticated control connection, holding one of the service's places for
/// sessions until it closes.
struct ControlConnection {
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    _session: Place,
}

/// One place of a bounded kind (handshakes, sessions), held until dropped.
struct Place {
    _permit: tokio::sync::OwnedSemaphorePermit,
    open: Arc<AtomicUsize>,
}

impl Place {
    fn taken(permit: tokio::sync::OwnedSemaphorePermit, open: &Arc<AtomicUsize>) -> Place {
        open.fetch_add(1, Ordering::Relaxed);
        Place {
            _permit: permit,
            open: open.clone(),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl tonic::transport::server::Connected for ControlConnection {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.get_ref().0.connect_info()
    }
}

impl tokio::io::AsyncRead for ControlConnection {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ControlConnection {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Accepts control connections while one of [`MAX_CONTROL_CONNECTIONS`] places for
/// handshakes is free (the rest wait in the kernel's queue, costing this process no
/// descriptor), and hands each to the gRPC server once its TLS handshake proved the job's
/// secret, moving it from its handshake place to a session place; one that does not prove
/// it within the I/O timeout is closed, so that idle or foreign connections cannot keep
/// the places. An authenticated connection may then wait as long as its calls do (at the
/// rendezvous, at a barrier) without keeping anyone else out.
async fn accept_control(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    connections: tokio::sync::mpsc::Sender<ControlConnection>,
) {
    let timeout = shared.config.io_timeout;
    loop {
        let Ok(permit) = shared.control_places.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => match nostall::net::accept_failed(&err) {
                nostall::net::AcceptFailure::Retry => continue,
                nostall::net::AcceptFailure::BackOff => {
                    eprintln!("nostall-peer: control accept failed: {err}; backing off");
                    tokio::time::sleep(nostall::net::ACCEPT_BACKOFF).await;
                    continue;
                }
                nostall::net::AcceptFailure::Fatal => {
                    eprintln!("nostall-peer: control listener broken: {err}");
                    return;
                }
            },
        };
        let Some(handshake) = admit(&shared, peer, &shared.control_handshakes_by_address) else {
            continue;
        };
        let place = Place::taken(permit, &shared.control_handshakes);
        let (shared, connections) = (shared.clone(), connections.clone());
        let acceptor = tokio_rustls::TlsAcceptor::from(shared.tls.clone());
        tokio::spawn(async move {
            let peer = peer.to_string();
            match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    drop((place, handshake));
                    let Ok(session) = shared.control_sessions.clone().try_acquire_owned() else {
                        let reason = "every place for an authenticated control connection is \
                                      taken (more connections than the job has processes)";
                        shared.reject("too-many-connections", &peer, reason.to_string());
                        return;
                    };
                    let session = Place::taken(session, &shared.control_sessions_open);
                    let _ = connections
                        .send(ControlConnection {
                            stream,
                            _session: session,
                        })
                        .await;
                }
                Ok(Err(err)) => shared.reject(
                    "unauthorized",
                    &peer,
                    format!(
                        "no TLS handshake with the job's identity ({err}); a node with another \
                         {}, or not a node",
                        auth::SECRET_VAR
                    ),
                ),
                Err(_) => shared.reject(
                    "idle",
                    &peer,
                    format!("no TLS handshake within {timeout:?}"),
                ),
            }
        });
    }
}

/// Handshake, then requests until the client leaves or breaks the protocol.
fn serve_connection(
    stream: Arc<TcpStream>,
    peer: SocketAddr,
    shared: &Shared,
    handshake: Handshake,
    idle: &IdleSince,
) {
    let peer = peer.to_string();
    let timeout = shared.config.io_timeout;
    if stream.set_nonblocking(false).is_err() || stream.set_nodelay(true).is_err() {
        return;
    }
    let Ok(tls) = rustls::ServerConnection::new(shared.tls.clone()) else {
        return;
    };
    let mut conn = rustls::StreamOwned::new(tls, Deadline::new(stream));
    // The whole handshake within one request's time: TLS, which proves that each end
    // knows the job's secret, then the client's hello.
    conn.sock.within(timeout);
    if let Err(err) = auth::handshake(&mut conn) {
        let reason = format!(
            "no TLS handshake with the job's identity ({err}); a node with another {}, or \
             not a node",
            auth::SECRET_VAR
        );
        shared.reject("unauthorized", &peer, reason);
        return;
    }
    // The node the client says it is: the secret does not prove which, so this only
    // counts bytes, it grants nothing.
    let from_own_node = match wire::read_hello(&mut conn) {
        Ok(node) => node as usize == shared.config.node,
        Err(err) => {
            let reason = format!("bad hello: {err}");
            shared.reject("bad-request", &peer, reason.clone());
            let _ = wire::write_response(&mut conn, Status::BadRequest, reason.as_bytes());
            return;
        }
    };
    if wire::write_response(&mut conn, Status::Ok, &[]).is_err() {
        return;
    }
    // Authenticated: no longer among its address's handshakes.
    drop(handshake);

    let mut bytes = Vec::new();
    loop {
        // A connection may idle between requests (between epochs, say), up to a limit
        // (and, at the connection limit, until a new one needs its place); once a request
        // starts, it and its answer must finish within the timeout.
        if conn.sock.idle(IDLE_LIMIT).is_err() {
            return;
        }
        idle.set(shared);
        let requested = matches!(conn.fill_buf(), Ok(buffered) if !buffered.is_empty());
        idle.clear();
        if !requested {
            return;
        }
        conn.sock.within(timeout);
        let request = match wire::read_request(&mut conn) {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => return,
        };
        let id = match request {
            WireRequest::Fetch(id) => id,
            WireRequest::Bad(reason) => {
                shared.reject("bad-request", &peer, reason.clone());
                let _ = wire::write_response(&mut conn, Status::BadRequest, reason.as_bytes());
                return;
            }
        };
        let (status, payload): (Status, &[u8]) = if id >= shared.samples {
            let reason = format!("no sample {id}: the catalog has {}", shared.samples);
            shared.reject("unknown-id", &peer, reason);
            (Status::UnknownId, b"unknown id")
        } else if !shared.cache.holds(id) {
            let reason = format!("sample {id} is not node {}'s to serve", shared.config.node);
            shared.reject("not-held", &peer, reason);
            (Status::NotHeld, b"not held here")
        } else {
            match shared.cache.read(id, &mut bytes) {
                Ok(()) if bytes.len() as u64 > shared.config.max_response_bytes => {
                    let reason = format!(
                        "sample {id} is {} bytes, over the limit of {}",
                        bytes.len(),
                        shared.config.max_response_bytes
                    );
                    shared.reject("too-large", &peer, reason);
                    (Status::TooLarge, b"over the size limit")
                }
                Ok(()) => {
                    shared.served_samples.fetch_add(1, Ordering::Relaxed);
                    shared
                        .served_bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    if from_own_node {
                        shared
                            .served_local_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    }
                    (Status::Ok, &bytes)
                }
                Err(cause) => {
                    bytes = cause.to_string().into_bytes();
                    (Status::Unavailable, &bytes)
                }
            }
        };
        if wire::write_response(&mut conn, status, payload).is_err() {
            return;
        }
    }
}

/// Where a registered node is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    addr: String,
    data_port: u16,
}

/// Who has registered, and who has reached which epoch's barrier; node 0's copy is the
/// one that counts. Each wait subscribes to one flag that flips once, when what it waits
/// for is complete: n waiters cost n wake-ups, not n per arrival.
struct Rendezvous {
    nodes: usize,
    ranks_per_node: usize,
    state: Mutex<Gathering>,
    /// Set once every node has registered.
    registered: watch::Sender<bool>,
}

struct Gathering {
    members: Vec<Option<Member>>,
    missing: usize,
    barriers: BTreeMap<u64, Barrier>,
}

/// One epoch's barrier.
struct Barrier {
    /// Whether each rank (by global rank) has arrived.
    arrived: Vec<bool>,
    count: usize,
    /// When the last rank arrived: a barrier still open a gather timeout later has
    /// answered every waiter, and may go.
    last_arrival: tokio::time::Instant,
    /// Set once every rank has arrived.
    complete: watch::Sender<bool>,
}

impl Barrier {
    fn is_complete(&self) -> bool {
        *self.complete.borrow()
    }
}

/// Why an arrival at a barrier was refused.
enum Refusal {
    TooManyOpen(Vec<u64>),
}

impl Rendezvous {
    fn new(nodes: usize, ranks_per_node: usize) -> Rendezvous {
        Rendezvous {
            nodes,
            ranks_per_node: ranks_per_node.max(1),
            state: Mutex::new(Gathering {
                members: vec![None; nodes],
                missing: nodes,
                barriers: BTreeMap::new(),
            }),
            registered: watch::Sender::new(nodes == 0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gathering> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records node `node` at `member`; `Err` with the address it already has when that
    /// is another one.
    fn register(&self, node: usize, member: Member) -> std::result::Result<(), String> {
        let mut state = self.lock();
        match &state.members[node] {
            Some(known) if known.addr != member.addr => return Err(known.addr.clone()),
            Some(_) => state.members[node] = Some(member),
            None => {
                state.members[node] = Some(member);
                state.missing -= 1;
                if state.missing == 0 {
                    self.registered.send_replace(true);
                }
            }
        }
        Ok(())
    }

    /// Every node's member once all have registered, waiting up to `timeout`; else the
    /// nodes still missing.
    async fn members(&self, timeout: Duration) -> std::result::Result<Vec<Member>, Vec<usize>> {
        let mut registered = self.registered.subscribe();
        let _ = tokio::time::timeout(timeout, registered.wait_for(|all| *all)).await;
        let state = self.lock();
        let members: Option<Vec<Member>> = state.members.iter().cloned().collect();
        members.ok_or_else(|| {
            (0..self.nodes)
                .filter(|&n| state.members[n].is_none())
                .collect()
        })
    }

    /// Records `rank`'s arrival at `epoch`'s barrier and waits up to `timeout` for the
    /// others: whether all arrived, and how many had.
    async fn barrier(
        &self,
        epoch: u64,
        rank: usize,
        timeout: Duration,
    ) -> std::result::Result<(bool, usize), Refusal> {
        let world = self.nodes * self.ranks_per_node;
        let mut complete = {
            let mut state = self.lock();
            let now = tokio::time::Instant::now();
            prune(&mut state.barriers, now, timeout);
            if !state.barriers.contains_key(&epoch) {
                let open: Vec<u64> = state
                    .barriers
                    .iter()
                    .filter(|(_, b)| !b.is_complete())
                    .map(|(&e, _)| e)
                    .collect();
                if open.len() >= MAX_OPEN_BARRIERS {
                    return Err(Refusal::TooManyOpen(open));
                }
            }
            let barrier = state.barriers.entry(epoch).or_insert_with(|| Barrier {
                arrived: vec![false; world],
                count: 0,
                last_arrival: now,
                complete: watch::Sender::new(false),
            });
            if !std::mem::replace(&mut barrier.arrived[rank], true) {
                barrier.count += 1;
                barrier.last_arrival = now;
                if barrier.count == world {
                    barrier.complete.send_replace(true);
                }
            }
            barrier.complete.subscribe()
        };
        let done = tokio::time::timeout(timeout, complete.wait_for(|c| *c))
            .await
            .is_ok_and(|r| r.is_ok());
        let count = self
            .lock()
            .barriers
            .get(&epoch)
            .map_or(if done { world } else { 0 }, |b| b.count);
        Ok((done, count))
    }
}

/// Drops what no rank waits on any more: complete barriers beyond the newest
/// [`KEPT_BARRIERS`], and open ones whose last arrival is a gather timeout old (every
/// waiter there has been answered).
fn prune(barriers: &mut BTreeMap<u64, Barrier>, now: tokio::time::Instant, timeout: Duration) {
    barriers.retain(|_, b| b.is_complete() || now.duration_since(b.last_arrival) < timeout);
    let complete: Vec<u64> = barriers
        .iter()
        .filter(|(_, b)| b.is_complete())
        .map(|(&e, _)| e)
        .collect();
    for epoch in complete.iter().rev().skip(KEPT_BARRIERS) {
        barriers.remove(epoch);
    }
}

struct ControlService {
    shared: Arc<Shared>,
}

impl ControlService {
    fn check_node(&self, node: u32) -> std::result::Result<(), tonic::Status> {
        if (node as usize) < self.shared.config.nodes {
            Ok(())
        } else {
            Err(tonic::Status::invalid_argument(format!(
                "node {node} is out of range for a job of {} nodes",
                self.shared.config.nodes
            )))
        }
    }

    /// Refuses a caller whose catalog or placement differs from this node's.
    fn check_fingerprint(
        &self,
        node: u32,
        fingerprint: &[u8],
        peer: &str,
    ) -> std::result::Result<(), tonic::Status> {
        if fingerprint == self.shared.config.fingerprint.as_slice() {
            return Ok(());
        }
        let reason = format!(
            "node {node} has a different catalog or cache placement than node {} (same \
             dataset, seed, node count and cache size on every node?)",
            self.shared.config.node
        );
        self.shared.reject("mismatch", peer, reason.clone());
        Err(tonic::Status::failed_precondition(reason))
    }
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn hello(
        &self,
        request: Request<HelloRequest>,
    ) -> std::result::Result<Response<HelloReply>, tonic::Status> {
        let peer = request
            .remote_addr()
            .map_or("unknown".to_string(), |a| a.to_string());
        let hello = request.into_inner();
        self.check_node(hello.node)?;
        self.check_fingerprint(hello.node, &hello.fingerprint, &peer)?;
        Ok(Response::new(HelloReply {
            node: self.shared.config.node as u32,
            data_port: u32::from(self.shared.data_port),
        }))
    }

    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> std::result::Result<Response<RegisterReply>, tonic::Status> {
        let caller = request.remote_addr();
        let register = request.into_inner();
        self.check_node(register.node)?;
        let peer = caller.map_or("unknown".to_string(), |a| a.to_string());
        self.check_fingerprint(register.node, &register.fingerprint, &peer)?;
        if register.addr.len() > MAX_ADDRESS_BYTES {
            return Err(tonic::Status::invalid_argument(format!(
                "an address of {} bytes: at most {MAX_ADDRESS_BYTES}",
                register.addr.len()
            )));
        }
        // A node registers the address it is reached at, from that address; and each node
        // once: a second registration from elsewhere is a duplicate rank or an impostor,
        // and must not move the node's part of the cache.
        let claimed = crate::client::resolve(&register.addr).map_err(|e| {
            tonic::Status::invalid_argument(format!("bad address {:?}: {e}", register.addr))
        })?;
        if caller.is_some_and(|caller| caller.ip() != claimed.ip()) {
            let reason = format!(
                "node {} registered {} from {peer}: a node registers its own address",
                register.node, register.addr
            );
            self.shared.reject("mismatch", &peer, reason.clone());
            return Err(tonic::Status::permission_denied(reason));
        }
        let data_port = u16::try_from(register.data_port).map_err(|_| {
            tonic::Status::invalid_argument(format!(
                "data port {} is not a port",
                register.data_port
            ))
        })?;
        let rendezvous = &self.shared.rendezvous;
        // A node's other ranks (data port 0) only wait for the list; its first rank, which
        // runs the node's service, registers it.
        if data_port != 0 {
            let member = Member {
                addr: register.addr.clone(),
                data_port,
            };
            if let Err(known) = rendezvous.register(register.node as usize, member) {
                let reason = format!(
                    "node {} is already registered at {known}; {} claims it too (two \
                     processes with the same RANK?)",
                    register.node, register.addr
                );
                self.shared.reject("duplicate", &peer, reason.clone());
                return Err(tonic::Status::already_exists(reason));
            }
        }
        match rendezvous.members(self.shared.config.gather_timeout).await {
            Ok(members) => Ok(Response::new(RegisterReply {
                data_ports: members.iter().map(|m| u32::from(m.data_port)).collect(),
                addrs: members.into_iter().map(|m| m.addr).collect(),
            })),
            Err(missing) => Err(tonic::Status::deadline_exceeded(format!(
                "nodes {} did not register in {:?}",
                list(&missing),
                self.shared.config.gather_timeout
            ))),
        }
    }

    async fn barrier(
        &self,
        request: Request<BarrierRequest>,
    ) -> std::result::Result<Response<BarrierReply>, tonic::Status> {
        let barrier = request.into_inner();
        self.check_node(barrier.node)?;
        let rendezvous = &self.shared.rendezvous;
        let local_rank = barrier.local_rank as usize;
        if local_rank >= rendezvous.ranks_per_node {
            return Err(tonic::Status::invalid_argument(format!(
                "local rank {local_rank} of a job of {} ranks per node",
                rendezvous.ranks_per_node
            )));
        }
        let rank = barrier.node as usize * rendezvous.ranks_per_node + local_rank;
        match rendezvous
            .barrier(barrier.epoch, rank, self.shared.config.gather_timeout)
            .await
        {
            Ok((complete, arrived)) => Ok(Response::new(BarrierReply {
                complete,
                arrived: arrived as u32,
            })),
            Err(Refusal::TooManyOpen(open)) => Err(tonic::Status::resource_exhausted(format!(
                "epoch {}: the barriers of epochs {} are still gathering; a rank is never \
                 that far ahead of the others",
                barrier.epoch,
                list(&open)
            ))),
        }
    }
}

/// Numbers for a message, the first few of them and how many more.
fn list<T: std::fmt::Display>(items: &[T]) -> String {
    const SHOWN: usize = 16;
    let mut text: Vec<String> = items.iter().take(SHOWN).map(ToString::to_string).collect();
    if items.len() > SHOWN {
        text.push(format!("and {} more", items.len() - SHOWN));
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_common as common;
    use crate::testing::Counting;
    use nostall::cache::Capacity;
    use nostall::plan::placement::Placement;
    use std::io::Read;
    use std::time::Instant;

    /// A one-node service over `Counting` samples, serving at most `max_connections`.
    fn service(max_connections: usize) -> Service {
        service_with(max_connections, Duration::from_secs(5))
    }

    /// Like [`service`], with the I/O timeout given.
    fn service_with(max_connections: usize, io_timeout: Duration) -> Service {
        let placement =
            Arc::new(Placement::new(0, 1, Capacity::Fraction(1.0), &[100; 10]).unwrap());
        let storage = Arc::new(Counting::new(10, 100));
        let cache = Arc::new(NodeCache::new(0, placement, storage));
        let config = ServiceConfig {
            node: 0,
            nodes: 1,
            ranks_per_node: 1,
            listen: "127.0.0.1:0".parse().unwrap(),
            secret: Secret::new(SECRET).unwrap(),
            fingerprint: Vec::new(),
            max_response_bytes: 1000,
            io_timeout,
            gather_timeout: Duration::from_secs(5),
            max_connections,
        };
        Service::start(config, cache, 10).unwrap()
    }

    /// Waits until the service's counters show `done`: its threads see a connection a
    /// moment after the client made it. The 30 s bound only ends a test that would
    /// otherwise wait for ever.
    fn until(service: &Service, done: impl Fn(&ServiceStats) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let stats = service.stats();
            if done(&stats) {
                return;
            }
            assert!(Instant::now() < deadline, "{stats:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the service has `n` data connections open.
    fn until_open(service: &Service, n: usize) {
        until(service, |stats| stats.open_connections == n);
    }

    /// Waits until the service has counted `n` rejections of `kind`.
    fn until_rejected(service: &Service, kind: &str, n: u64) {
        until(service, |stats| {
            stats.rejected.get(kind).copied().unwrap_or(0) >= n
        });
    }

    const SECRET: &[u8] = b"the secret of this unit test";

    /// Whether the service closes a connection (it waits for a TLS client otherwise, and
    /// the read times out after 10 s).
    fn closed(stream: &mut TcpStream) -> bool {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        matches!(stream.read(&mut [0; 1]), Ok(0))
            || stream
                .read(&mut [0; 1])
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
    }

    type DataConnection = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

    /// A data connection to `service`, authenticated and greeted as a node of the job.
    fn authenticated(service: &Service) -> DataConnection {
        let tcp = TcpStream::connect(service.data_addr()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let client = Secret::new(SECRET).unwrap().identity().unwrap().client;
        let conn = rustls::ClientConnection::new(client, auth::Identity::server_name()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        auth::handshake(&mut tls).unwrap();
        wire::write_hello(&mut tls, 0).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            wire::read_response(&mut tls, &mut out, 100).unwrap(),
            Status::Ok
        );
        tls
    }

    /// One fetch on `conn`: the answer's status.
    fn fetch_on(conn: &mut DataConnection, id: u64) -> std::io::Result<Status> {
        wire::write_fetch(conn, id)?;
        wire::read_response(conn, &mut Vec::new(), 1000)
    }

    /// One fetch over the data plane, as a node of the job: the answer's status.
    fn fetch(service: &Service, id: u64) -> Status {
        fetch_on(&mut authenticated(service), id).unwrap()
    }

    #[test]
    fn idle_control_connections_take_few_places_and_cost_the_data_plane_nothing() {
        // 2 000 client sockets and the service's own in this one process.
        common::raise_descriptor_limit();
        let service = service_with(512, Duration::from_millis(200));
        let idle = common::idle_connections(service.control_addr(), 2000);
        assert!(
            idle.len() > MAX_CONTROL_CONNECTIONS,
            "{} connected",
            idle.len()
        );
        let stats = service.stats();
        assert!(
            stats.control_handshakes <= MAX_CONTROL_CONNECTIONS,
            "{} control connections held",
            stats.control_handshakes
        );
        assert_eq!(stats.control_sessions, 0, "none proved the secret");
        // The data plane serves as before.
        assert_eq!(fetch(&service, 3), Status::Ok);
        drop(idle);
        // Closed, the idle connections give their places back.
        until(&service, |stats| stats.control_handshakes == 0);
    }

    #[test]
    fn once_the_job_is_known_only_its_addresses_are_served() {
        let service = service(8);
        service.admit_only(["127.0.0.1".parse().unwrap()]);
        assert_eq!(fetch(&service, 3), Status::Ok);
        service.admit_only(["127.0.0.2".parse().unwrap()]);
        let mut stranger = TcpStream::connect(service.data_addr()).unwrap();
        assert!(closed(&mut stranger), "closed before any handshake");
        until_rejected(&service, "not-a-peer", 1);
    }

    #[test]
    fn one_address_holds_a_bounded_number_of_handshakes() {
        let service = service(512);
        let data = service.data_addr();
        let idle: Vec<TcpStream> = (0..MAX_HANDSHAKES_PER_ADDRESS)
            .map(|_| TcpStream::connect(data).unwrap())
            .collect();
        until_open(&service, MAX_HANDSHAKES_PER_ADDRESS);
        let mut over = TcpStream::connect(data).unwrap();
        assert!(closed(&mut over), "over the budget: closed at once");
        until_rejected(&service, "too-many-handshakes", 1);
        assert_eq!(service.stats().open_connections, MAX_HANDSHAKES_PER_ADDRESS);
        // The silent ones leave; their address may connect again.
        drop(idle);
        until_open(&service, 0);
        assert_eq!(fetch(&service, 3), Status::Ok);
    }

    #[test]
    fn one_address_holds_a_bounded_share_of_the_control_places() {
        let service = service(8);
        let control = service.control_addr();
        let idle: Vec<TcpStream> = (0..MAX_CONTROL_HANDSHAKES_PER_ADDRESS)
            .map(|_| TcpStream::connect(control).unwrap())
            .collect();
        until(&service, |stats| {
            stats.control_handshakes == MAX_CONTROL_HANDSHAKES_PER_ADDRESS
        });
        let mut over = TcpStream::connect(control).unwrap();
        assert!(
            closed(&mut over),
            "over the address's share: closed at once"
        );
        until_rejected(&service, "too-many-handshakes", 1);
        assert_eq!(
            service.stats().control_handshakes,
            MAX_CONTROL_HANDSHAKES_PER_ADDRESS,
            "the other places stay free for other addresses"
        );
        drop(idle);
    }

    /// Runs alone in a process of its own: the descriptors it counts are all its own.
    #[test]
    fn a_data_connection_costs_the_service_one_descriptor() {
        if !common::alone_in_a_process(
            "server::tests::a_data_connection_costs_the_service_one_descriptor",
            "NOSTALL_TEST_DESCRIPTORS_CHILD",
        ) {
            return;
        }
        let open = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let service = service(512);
        let before = open();
        let clients: Vec<TcpStream> = (0..20)
            .map(|_| TcpStream::connect(service.data_addr()).unwrap())
            .collect();
        until_open(&service, 20);
        assert_eq!(
            open() - before,
            2 * clients.len(),
            "the clients' and the service's"
        );
    }

    #[test]
    fn connections_over_the_limit_are_refused_and_closed_ones_are_forgotten() {
        let service = service(2);
        let data = service.data_addr();
        let first = TcpStream::connect(data).unwrap();
        let second = TcpStream::connect(data).unwrap();
        until_open(&service, 2);
        let mut third = TcpStream::connect(data).unwrap();
        assert!(closed(&mut third), "over the limit: closed at once");
        assert_eq!(service.stats().rejected["too-many-connections"], 1);

        // Clients that leave (here: before their handshake) free their places.
        drop((first, second, third));
        until_open(&service, 0);
        assert_eq!(fetch(&service, 3), Status::Ok);
    }

    #[test]
    fn at_the_limit_a_new_connection_takes_the_place_of_one_idle() {
        let service = service(2);
        let mut pooled = [authenticated(&service), authenticated(&service)];
        for (id, conn) in pooled.iter_mut().enumerate() {
            assert_eq!(fetch_on(conn, id as u64).unwrap(), Status::Ok);
        }
        until(&service, |stats| stats.idle_connections == 2);
        // A third node's fetch is served, not refused (which would mark this node down
        // at that peer): one of the idle connections gave it its place.
        assert_eq!(fetch(&service, 3), Status::Ok);
        let stats = service.stats();
        assert_eq!(stats.evicted_idle, 1);
        assert!(
            !stats.rejected.contains_key("too-many-connections"),
            "{stats:?}"
        );
        let mut still_served = 0;
        for conn in &mut pooled {
            if matches!(fetch_on(conn, 4), Ok(Status::Ok)) {
                still_served += 1;
            }
        }
        assert_eq!(still_served, 1, "exactly one was closed");
    }

    /// A runtime with a clock, for the rendezvous's timeouts (the tests poll by hand).
    fn timer_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// Polls `future` once: its output if it is done, `None` if it waits.
    fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = futures_util::task::noop_waker();
        let mut context = std::task::Context::from_waker(&waker);
        match std::pin::Pin::new(future).poll(&mut context) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn arrivals_for_far_epochs_are_refused_and_never_evict_an_epoch_still_gathering() {
        let runtime = timer_runtime();
        let _entered = runtime.enter();
        // Two nodes of one rank; rank 0 runs ahead to later and later epochs (a bug, or a
        // member that means harm), rank 1 has not arrived anywhere.
        let rendezvous = Rendezvous::new(2, 1);
        let wait = Duration::from_secs(600);
        let mut waiting: Vec<_> = (0..MAX_OPEN_BARRIERS as u64)
            .map(|epoch| Box::pin(rendezvous.barrier(epoch, 0, wait)))
            .collect();
        for barrier in &mut waiting {
            assert!(poll_once(barrier).is_none(), "waits for rank 1");
        }
        let mut refused = Box::pin(rendezvous.barrier(1000, 0, wait));
        assert!(matches!(
            poll_once(&mut refused),
            Some(Err(Refusal::TooManyOpen(open))) if open.len() == MAX_OPEN_BARRIERS
        ));
        // Epoch 0 kept its arrival: rank 1 completes it, and its waiter is answered.
        let mut second = Box::pin(rendezvous.barrier(0, 1, wait));
        assert!(matches!(poll_once(&mut second), Some(Ok((true, 2)))));
        assert!(matches!(poll_once(&mut waiting[0]), Some(Ok((true, 2)))));
        // Asked again (its connection broke while it waited), it is answered at once.
        let mut again = Box::pin(rendezvous.barrier(0, 0, wait));
        assert!(matches!(poll_once(&mut again), Some(Ok((true, 2)))));
    }

    #[test]
    fn registration_completes_once_for_every_waiter_and_refuses_a_second_address() {
        let runtime = timer_runtime();
        let _entered = runtime.enter();
        let rendezvous = Rendezvous::new(2, 1);
        let member = |port: u16| Member {
            addr: format!("127.0.0.1:{port}"),
            data_port: port + 1,
        };
        let wait = Duration::from_secs(600);
        rendezvous.register(1, member(4000)).unwrap();
        let mut first = Box::pin(rendezvous.members(wait));
        assert!(poll_once(&mut first).is_none(), "waits for node 0");
        assert_eq!(rendezvous.register(1, member(5000)), Err(member(4000).addr));
        rendezvous.register(0, member(3000)).unwrap();
        let all = vec![member(3000), member(4000)];
        assert_eq!(poll_once(&mut first), Some(Ok(all.clone())));
        assert_eq!(
            poll_once(&mut Box::pin(rendezvous.members(wait))),
            Some(Ok(all))
        );
    }
}
