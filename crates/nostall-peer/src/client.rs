//! Talking to peers: the control calls (handshake, rendezvous, barrier) and the data
//! plane's connection pool, with each peer's health.
//!
//! A peer that fails a request (connection refused or reset, no answer within the
//! timeout) is marked down: until `retry_after` has passed its samples come from storage
//! without trying it, then the next request tries it again (a fresh handshake, since a
//! restarted peer listens on a new data port).

use std::collections::HashMap;
use std::future::Future;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use crate::auth::{handshake, Identity, Secret};
use crate::control::generated::control_client::ControlClient;
use crate::control::{
    decode_nodes, BarrierReply, BarrierRequest, HelloRequest, RegisterReply, RegisterRequest,
};
use crate::deadline::Deadline;
use crate::error::{network, Error, Result};
use crate::server::Service;
use crate::wire::{self, Status};
use nostall::clock::Clock;

/// Timeouts of the client side.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Timeouts {
    /// A request (connect, send, answer) taking longer marks the peer down.
    pub request: Duration,
    /// How long a peer stays marked down before it is tried again.
    pub retry_after: Duration,
    /// How long to keep trying to reach peers when joining (they start at different
    /// times).
    pub join: Duration,
}

impl Timeouts {
    /// A request's deadline, how long a peer stays marked down, and how long a join
    /// waits for the job's nodes.
    pub fn new(request: Duration, retry_after: Duration, join: Duration) -> Timeouts {
        Timeouts {
            request,
            retry_after,
            join,
        }
    }
}

impl Default for Timeouts {
    /// 5 s per request, retry after 30 s, join within 120 s.
    fn default() -> Timeouts {
        Timeouts {
            request: Duration::from_secs(5),
            retry_after: Duration::from_secs(30),
            join: Duration::from_secs(120),
        }
    }
}

/// What this node tells peers about itself, and the runtime its control calls run on.
pub(crate) struct Links {
    node: u32,
    /// TLS for both planes, from the job's secret.
    tls: Arc<rustls::ClientConfig>,
    fingerprint: Vec<u8>,
    timeouts: Timeouts,
    /// What a peer's time marked down is read from.
    clock: Clock,
    runtime: tokio::runtime::Runtime,
    /// One control connection per peer called, kept for the next call: HTTP/2 carries a
    /// process's calls side by side (the agent's ranks at one barrier), so node 0 holds
    /// one connection per process of the job, not one per call.
    sessions: tokio::sync::Mutex<HashMap<String, ControlClient<Channel>>>,
}

/// Where the rendezvous placed the job's nodes: each node's control address and its data
/// plane, by node index.
pub(crate) type PeerList = Vec<(String, SocketAddr)>;

impl Links {
    pub(crate) fn new(
        node: usize,
        secret: Secret,
        fingerprint: Vec<u8>,
        (timeouts, clock): (Timeouts, Clock),
    ) -> Result<Links> {
        // Fetch threads call from many threads at once: a worker of its own drives them all.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("nostall-peer-client")
            .enable_all()
            .build()
            .map_err(network("cannot start the control client runtime"))?;
        Ok(Links {
            node: node as u32,
            tls: secret.identity()?.client,
            fingerprint,
            timeouts,
            clock,
            runtime,
            sessions: tokio::sync::Mutex::default(),
        })
    }

    /// Runs `call` on this process's control session with the peer at `addr`, opening it
    /// if needed. A session whose connection failed is forgotten (the next call opens a
    /// new one) and the failure is an [`Error::Network`], which callers retry; a refusal
    /// is an [`Error::Refused`] prefixed with `what`.
    async fn call<T, F, Fut>(&self, addr: &str, what: &str, call: F) -> Result<T>
    where
        F: FnOnce(ControlClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = {
            let mut sessions = self.sessions.lock().await;
            match sessions.get(addr) {
                Some(client) => client.clone(),
                None => {
                    let client =
                        crate::control::connect(addr, &self.tls, self.timeouts.request).await?;
                    sessions.insert(addr.to_string(), client.clone());
                    client
                }
            }
        };
        match call(client).await {
            Ok(reply) => Ok(reply.into_inner()),
            // The service answers with its own codes; these come from the connection
            // (reset, closed, or broken in HTTP/2), which a new session may not repeat.
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                ) =>
            {
                self.sessions.lock().await.remove(addr);
                Err(Error::Network {
                    context: format!("{what}: connection to {addr} lost"),
                    source: std::io::Error::other(crate::control::describe(&status)),
                })
            }
            Err(status) => Err(Error::Refused(format!("{what}: {}", status.message()))),
        }
    }

    /// Greets the peer at `addr`, which must be node `expected`: its data-plane address.
    fn hello(&self, addr: &str, expected: usize, timeout: Duration) -> Result<SocketAddr> {
        self.runtime.block_on(async {
            let request = HelloRequest {
                node: self.node,
                fingerprint: self.fingerprint.clone(),
            };
            let what = format!("peer {addr}");
            let call = self.call(addr, &what, |mut client| async move {
                client.hello(request).await
            });
            let reply =
                tokio::time::timeout(timeout, call)
                    .await
                    .map_err(|_| Error::Network {
                        context: format!("peer {addr}"),
                        source: std::io::ErrorKind::TimedOut.into(),
                    })??;
            if reply.node as usize != expected {
                return Err(Error::Config(format!(
                    "{addr} answers as node {}, but the peer list has it as node {expected}: \
                     give every node the same list, in the same order",
                    reply.node
                )));
            }
            let ip = resolve(addr)?.ip();
            let port = u16::try_from(reply.data_port)
                .map_err(|_| Error::Refused(format!("peer {addr} sent a bad data port")))?;
            Ok(SocketAddr::new(ip, port))
        })
    }

    /// Greets the peer, retrying while it is not up yet, until the join timeout.
    pub(crate) fn hello_when_up(&self, addr: &str, expected: usize) -> Result<SocketAddr> {
        let deadline = Instant::now() + self.timeouts.join;
        loop {
            match self.hello(addr, expected, self.timeouts.request) {
                Ok(data) => return Ok(data),
                Err(Error::Network { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Registers this node at `own` with the rendezvous at `rendezvous`, with its data
    /// port when this process serves the node (`service`): where every one of the job's
    /// `nodes` is, once every node has registered, within the join timeout. The service
    /// is given the list, for the node's other ranks.
    ///
    /// A node's other ranks ask their node's service at `own` instead, so that node 0
    /// answers one rank per node, not every rank of the job: each call costs node 0 more
    /// than its bytes (4 096 nodes of 16 ranks took 30 s to join with every rank at node
    /// 0, the list in binary; 0.8 s so). Where the node's port is the system's pick, they
    /// cannot know it, and ask node 0.
    pub(crate) fn register(
        &self,
        rendezvous: &str,
        own: &str,
        service: Option<&Service>,
        nodes: usize,
    ) -> Result<PeerList> {
        let data_port = service.map_or(0, |s| s.data_addr().port());
        let at = match service {
            None if resolve(own)?.port() != 0 => own,
            _ => rendezvous,
        };
        let deadline = Instant::now() + self.timeouts.join;
        let what = if at == rendezvous {
            format!("rendezvous {rendezvous}")
        } else {
            format!("this node's service at {at}")
        };
        loop {
            let attempt = self.runtime.block_on(async {
                let request = RegisterRequest {
                    node: self.node,
                    addr: own.to_string(),
                    fingerprint: self.fingerprint.clone(),
                    data_port: u32::from(data_port),
                };
                // The answer lists every node: larger than other control messages.
                let limit = crate::control::message_limit(nodes);
                let call = self.call(at, &what, |client| async move {
                    client
                        .max_decoding_message_size(limit)
                        .register(request)
                        .await
                });
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, call).await {
                    Ok(reply) => reply,
                    Err(_) => Err(Error::Refused(format!(
                        "{what}: not every node registered within the join timeout of {:?}",
                        self.timeouts.join
                    ))),
                }
            });
            match attempt {
                Ok(reply) => {
                    let peers = peer_list(&reply, nodes, &what)?;
                    if let Some(service) = service {
                        service.serve_node_list(reply.nodes);
                    }
                    return Ok(peers);
                }
                Err(Error::Network { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Waits at node 0's barrier for `epoch`.
    ///
    /// Node 0 answers within `gather` (its own wait for the others); a node 0 that does not
    /// answer by then and one request's time more (stopped, or cut off) is an error.
    pub(crate) fn barrier(
        &self,
        rendezvous: &str,
        epoch: u64,
        local_rank: u32,
        gather: Duration,
    ) -> Result<BarrierReply> {
        let deadline = gather + self.timeouts.request;
        let what = format!("barrier at {rendezvous}");
        self.runtime.block_on(async {
            let call = async {
                // Node 0's control plane may be slow to take a connection (a flood of idle
                // ones waits for its handshake timeout first), or the session may break
                // while it waits: keep trying until the barrier's own deadline (arriving
                // twice counts once).
                loop {
                    let request = BarrierRequest {
                        node: self.node,
                        epoch,
                        local_rank,
                    };
                    let reply = self.call(rendezvous, &what, |mut client| async move {
                        client.barrier(request).await
                    });
                    match reply.await {
                        Err(Error::Network { .. }) => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        answered => return answered,
                    }
                }
            };
            tokio::time::timeout(deadline, call)
                .await
                .map_err(|_| Error::Network {
                    context: format!(
                        "barrier at {rendezvous}: no answer within {deadline:?} (node 0 \
                         stopped or unreachable)"
                    ),
                    source: std::io::ErrorKind::TimedOut.into(),
                })?
        })
    }
}

/// The rendezvous's answer as a peer list, checked: it comes from the network, and the
/// rest of the node indexes it by node.
fn peer_list(reply: &RegisterReply, nodes: usize, what: &str) -> Result<PeerList> {
    let listed = decode_nodes(&reply.nodes, nodes).map_err(|e| match e {
        Error::Refused(why) => Error::Refused(format!("{what}: {why}")),
        other => other,
    })?;
    Ok(listed
        .into_iter()
        .map(|node| (node.control.to_string(), node.data()))
        .collect())
}

/// `host:port` as a socket address.
pub(crate) fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(network(format!("cannot resolve {addr}")))?
        .next()
        .ok_or_else(|| Error::Config(format!("{addr} resolves to no address")))
}

/// The longest refusal reason from a peer that is kept, in bytes.
const MAX_REASON_BYTES: usize = 256;

/// A peer's refusal reason as it may be printed: cut to [`MAX_REASON_BYTES`], control
/// characters escaped (it comes from the network, and ends up in logs and terminals).
fn printable(reason: &[u8]) -> String {
    let mut shown = String::new();
    for c in String::from_utf8_lossy(&reason[..reason.len().min(MAX_REASON_BYTES)]).chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// One open, authenticated data connection.
struct Connection {
    tls: rustls::StreamOwned<rustls::ClientConnection, Deadline>,
}

impl Connection {
    /// From now on, the connection's I/O must finish within `limit`.
    fn within(&mut self, limit: Duration) {
        self.tls.sock.within(limit);
    }

    /// One fetch of sample `id` into `out`, all of it within `limit`.
    fn fetch(
        &mut self,
        id: u64,
        out: &mut Vec<u8>,
        max_bytes: u64,
        limit: Duration,
    ) -> std::io::Result<Status> {
        self.within(limit);
        wire::write_fetch(&mut self.tls, id)?;
        wire::read_response(&mut self.tls, out, max_bytes)
    }
}

/// Why a fetch from a peer gave no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The peer is marked down (now or earlier).
    Down,
    /// The peer answered with a refusal.
    Refused(Status, String),
}

/// Where a peer stands.
#[derive(Debug, Default)]
struct Health {
    /// Its data-plane address, once greeted.
    data: Option<SocketAddr>,
    /// Set while it is marked down: when to try it again.
    retry_at: Option<Instant>,
}

/// One peer, seen from this node.
pub(crate) struct Peer {
    node: usize,
    addr: String,
    links: Arc<Links>,
    health: Mutex<Health>,
    idle: Mutex<Vec<Connection>>,
    /// The largest response accepted.
    limit: u64,
    pub(crate) fetched_samples: AtomicU64,
    pub(crate) fetched_bytes: AtomicU64,
    pub(crate) downs: AtomicU64,
}

impl Peer {
    pub(crate) fn new(node: usize, addr: String, links: Arc<Links>, limit: u64) -> Peer {
        Peer {
            node,
            addr,
            links,
            health: Mutex::default(),
            idle: Mutex::default(),
            limit,
            fetched_samples: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            downs: AtomicU64::new(0),
        }
    }

    /// Where the peer's data plane is, as the rendezvous said: no greeting needed (node 0
    /// checked the peer's fingerprint when it registered).
    pub(crate) fn knows(&self, data: SocketAddr) {
        self.lock_health().data = Some(data);
    }

    /// Greets the peer now (at join), waiting for it to come up.
    pub(crate) fn greet(&self) -> Result<()> {
        let data = self.links.hello_when_up(&self.addr, self.node)?;
        self.lock_health().data = Some(data);
        Ok(())
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fetches sample `id` into `out`.
    pub(crate) fn fetch(&self, id: u64, out: &mut Vec<u8>) -> std::result::Result<(), Failure> {
        let data = {
            let health = self.lock_health();
            match health.retry_at {
                Some(at) if self.links.clock.now() < at => return Err(Failure::Down),
                _ => health.data,
            }
        };
        let timeout = self.links.timeouts.request;
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        // A pooled connection may have been closed by the peer while it idled (it bounds
        // idle time): that costs a retry on a fresh connection, not the peer's health.
        let answer = pooled.and_then(|mut conn| {
            let answer = conn.fetch(id, out, self.limit, timeout);
            answer.ok().map(|status| (conn, Ok(status)))
        });
        let (conn, answer) = match answer {
            Some(answered) => answered,
            None => match self.connect(data) {
                Ok(mut conn) => {
                    let answer = conn.fetch(id, out, self.limit, timeout);
                    (conn, answer)
                }
                Err(reason) => {
                    self.mark_down(&reason);
                    return Err(Failure::Down);
                }
            },
        };
        match answer {
            Ok(Status::Ok) => {
                self.fetched_samples.fetch_add(1, Ordering::Relaxed);
                self.fetched_bytes
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
                self.recovered();
                self.idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(conn);
                Ok(())
            }
            Ok(status) => {
                let reason = printable(out);
                out.clear();
                if status != Status::BadRequest {
                    self.idle
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(conn);
                }
                Err(Failure::Refused(status, reason))
            }
            Err(err) => {
                out.clear();
                self.mark_down(&format!("fetching sample {id}: {err}"));
                Err(Failure::Down)
            }
        }
    }

    /// A new authenticated connection (greeting the peer first if needed).
    fn connect(&self, data: Option<SocketAddr>) -> std::result::Result<Connection, String> {
        let timeout = self.links.timeouts.request;
        let data = match data {
            Some(data) => data,
            None => {
                let data = self
                    .links
                    .hello(&self.addr, self.node, timeout)
                    .map_err(|e| e.to_string())?;
                self.lock_health().data = Some(data);
                data
            }
        };
        let stream = TcpStream::connect_timeout(&data, timeout)
            .map_err(|e| format!("connecting to {data}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let tls = rustls::ClientConnection::new(self.links.tls.clone(), Identity::server_name())
            .map_err(|e| e.to_string())?;
        let mut conn = Connection {
            tls: rustls::StreamOwned::new(tls, Deadline::new(stream)),
        };
        // The whole handshake within one request's time.
        conn.within(timeout);
        handshake(&mut conn.tls).map_err(|e| {
            format!(
                "no TLS handshake with the job's identity ({e}): another {} there, or not a \
                 node",
                crate::auth::SECRET_VAR
            )
        })?;
        wire::write_hello(&mut conn.tls, self.links.node).map_err(|e| e.to_string())?;
        let mut reason = Vec::new();
        match wire::read_response(&mut conn.tls, &mut reason, 4096) {
            Ok(Status::Ok) => Ok(conn),
            Ok(_) => Err(format!("refused: {}", String::from_utf8_lossy(&reason))),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether the peer is marked down now (its samples come from storage).
    pub(crate) fn is_down(&self) -> bool {
        self.lock_health()
            .retry_at
            .is_some_and(|at| self.links.clock.now() < at)
    }

    pub(crate) fn mark_down(&self, reason: &str) {
        let retry_after = self.links.timeouts.retry_after;
        let mut health = self.lock_health();
        if health.retry_at.is_none() {
            eprintln!(
                "nostall-peer: node {}: peer node {} ({}) is down ({reason}); its samples come \
                 from storage, retrying in {retry_after:?}",
                self.links.node, self.node, self.addr
            );
        }
        self.downs.fetch_add(1, Ordering::Relaxed);
        health.retry_at = Some(self.links.clock.now() + retry_after);
        health.data = None;
        drop(health);
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn recovered(&self) {
        let mut health = self.lock_health();
        if health.retry_at.take().is_some() {
            eprintln!(
                "nostall-peer: node {}: peer node {} ({}) is back",
                self.links.node, self.node, self.addr
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    const SECRET: &[u8] = b"the secret of this unit test";

    /// A stream that sends one byte at a time, every 20 ms: each read of the other end
    /// gets its byte well within any per-call timeout.
    struct Drip(TcpStream);

    impl Read for Drip {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl Write for Drip {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(20));
            self.0.write(&buf[..buf.len().min(1)])
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }

    /// A data-plane server of the job (it knows the secret) whose every byte drips.
    fn dripping_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let tls = Secret::new(SECRET).unwrap().identity().unwrap().server;
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let tls = tls.clone();
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(tls).unwrap();
                    let mut stream = rustls::StreamOwned::new(conn, Drip(stream));
                    let _ = handshake(&mut stream)
                        .and_then(|()| wire::read_hello(&mut stream))
                        .and_then(|_| wire::write_response(&mut stream, Status::Ok, &[]));
                });
            }
        });
        addr
    }

    #[test]
    fn refusal_reasons_are_cut_and_escaped_before_they_reach_a_log() {
        let reason = [b"no\x1b[31m\n".as_slice(), &[b'x'; 100_000]].concat();
        let shown = printable(&reason);
        assert!(shown.starts_with("no\\u{1b}[31m\\n"), "{shown}");
        assert!(shown.len() < MAX_REASON_BYTES + 16);
    }

    #[test]
    fn a_rendezvous_answer_that_does_not_fit_the_job_is_refused() {
        use crate::control::{encode_nodes, NodeAddress};
        let node = |control: &str, data_port: u16| NodeAddress {
            control: control.parse().unwrap(),
            data_port,
        };
        let two = [node("127.0.0.1:1", 11), node("[::1]:2", 12)];
        let reply = |nodes: &[u8]| RegisterReply {
            nodes: bytes::Bytes::copy_from_slice(nodes),
        };
        let list = encode_nodes(&two);
        assert_eq!(list.len(), 1 + 4 + (1 + 4 + 4) + (1 + 16 + 4));
        let peers = peer_list(&reply(&list), 2, "r").unwrap();
        assert_eq!(
            peers,
            [
                ("127.0.0.1:1".into(), "127.0.0.1:11".parse().unwrap()),
                ("[::1]:2".into(), "[::1]:12".parse().unwrap())
            ]
        );
        let refused = |nodes: &[u8], count: usize| {
            peer_list(&reply(nodes), count, "r")
                .unwrap_err()
                .to_string()
        };
        assert!(refused(&list, 3).contains("names 2 nodes for a job of 3"));
        assert!(refused(&list[..3], 2).contains("names no nodes for a job of 2"));
        assert!(refused(&[], 2).contains("is empty"));
        // Cut anywhere within an entry, or with a byte more.
        for cut in 5..list.len() {
            let err = refused(&list[..cut], 2);
            assert!(err.contains("ends within node"), "{cut}: {err}");
        }
        let over = [&list[..], &[0]].concat();
        assert!(refused(&over, 2).contains("runs 1 bytes past its 2 nodes"));
        let mut other = list.to_vec();
        other[0] = 2;
        assert!(refused(&other, 2).contains("format 2"));
        let mut family = list.to_vec();
        family[5] = 5;
        assert!(refused(&family, 2).contains("unknown family 5"));
        for zero in [node("127.0.0.1:0", 11), node("127.0.0.1:1", 0)] {
            let err = refused(&encode_nodes(&[zero]), 1);
            assert!(err.contains("0 is not a port"), "{err}");
        }
    }

    #[test]
    fn a_peer_dripping_its_answer_is_marked_down_within_the_deadline() {
        let timeouts = Timeouts {
            request: Duration::from_millis(500),
            retry_after: Duration::from_secs(60),
            join: Duration::from_secs(1),
        };
        let links = Arc::new(
            Links::new(
                0,
                Secret::new(SECRET).unwrap(),
                Vec::new(),
                (timeouts, Clock::real()),
            )
            .unwrap(),
        );
        let peer = Arc::new(Peer::new(1, "127.0.0.1:9".into(), links, 1 << 21));
        peer.lock_health().data = Some(dripping_server());
        let (tx, rx) = std::sync::mpsc::channel();
        let fetching = peer.clone();
        std::thread::spawn(move || tx.send(fetching.fetch(3, &mut Vec::new())));
        let result = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the fetch never gave up on a peer that drips");
        assert_eq!(result, Err(Failure::Down));
        assert_eq!(peer.downs.load(Ordering::Relaxed), 1);
    }
}
