//! Talking to peers: the control calls (handshake, rendezvous, barrier) and the data
//! plane's connection pool, with each peer's health.
//!
//! A peer that fails a request (connection refused or reset, no answer within the
//! timeout) is marked down: until `retry_after` has passed its samples come from storage
//! without trying it, then the next request tries it again (a fresh handshake, since a
//! restarted peer listens on a new data port).

use std::io::BufReader;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};

use crate::auth::{Purpose, Secret};
use crate::control::generated::control_client::ControlClient;
use crate::control::{
    BarrierReply, BarrierRequest, HelloRequest, RegisterRequest, AUTH_HEADER,
    MAX_CONTROL_MESSAGE_BYTES,
};
use crate::deadline::Deadline;
use crate::error::{network, Error, Result};
use crate::wire::{self, Status};

/// Timeouts of the client side.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// A request (connect, send, answer) taking longer marks the peer down.
    pub request: Duration,
    /// How long a peer stays marked down before it is tried again.
    pub retry_after: Duration,
    /// How long to keep trying to reach peers when joining (they start at different
    /// times).
    pub join: Duration,
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
    secret: Secret,
    fingerprint: Vec<u8>,
    timeouts: Timeouts,
    runtime: tokio::runtime::Runtime,
}

impl Links {
    pub(crate) fn new(
        node: usize,
        secret: Secret,
        fingerprint: Vec<u8>,
        timeouts: Timeouts,
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
            secret,
            fingerprint,
            timeouts,
            runtime,
        })
    }

    /// A control client of the peer at `addr`.
    async fn control(&self, addr: &str) -> Result<ControlClient<Channel>> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Error::Config(format!("bad peer address {addr:?}: {e}")))?
            .connect_timeout(self.timeouts.request);
        let channel = endpoint.connect().await.map_err(|e| Error::Network {
            context: format!("cannot reach peer {addr}"),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(ControlClient::new(channel)
            .max_decoding_message_size(MAX_CONTROL_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_CONTROL_MESSAGE_BYTES))
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        let token = self
            .secret
            .control_token()
            .parse()
            .expect("hex is a valid header value");
        request.metadata_mut().insert(AUTH_HEADER, token);
        request
    }

    /// Greets the peer at `addr`, which must be node `expected`: its data-plane address.
    fn hello(&self, addr: &str, expected: usize, timeout: Duration) -> Result<SocketAddr> {
        self.runtime.block_on(async {
            let call = async {
                let mut client = self.control(addr).await?;
                let request = self.request(HelloRequest {
                    node: self.node,
                    fingerprint: self.fingerprint.clone(),
                });
                client
                    .hello(request)
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|s| Error::Refused(format!("peer {addr}: {}", s.message())))
            };
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

    /// Registers `own` with the rendezvous at `addr`: every node's address, by index, once
    /// every node has registered, within the join timeout.
    pub(crate) fn register(&self, rendezvous: &str, own: &str) -> Result<Vec<String>> {
        let deadline = Instant::now() + self.timeouts.join;
        loop {
            let attempt = self.runtime.block_on(async {
                let mut client = self.control(rendezvous).await?;
                let request = self.request(RegisterRequest {
                    node: self.node,
                    addr: own.to_string(),
                });
                let call = client.register(request);
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, call).await {
                    Ok(reply) => reply.map(|r| r.into_inner().addrs).map_err(|s| {
                        Error::Refused(format!("rendezvous {rendezvous}: {}", s.message()))
                    }),
                    Err(_) => Err(Error::Refused(format!(
                        "rendezvous {rendezvous}: not every node registered within the join \
                         timeout of {:?}",
                        self.timeouts.join
                    ))),
                }
            });
            match attempt {
                Err(Error::Network { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => return other,
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
        gather: Duration,
    ) -> Result<BarrierReply> {
        let deadline = gather + self.timeouts.request;
        self.runtime.block_on(async {
            let call = async {
                let mut client = self.control(rendezvous).await?;
                let request = self.request(BarrierRequest {
                    node: self.node,
                    epoch,
                });
                client
                    .barrier(request)
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|s| {
                        Error::Refused(format!("barrier at {rendezvous}: {}", s.message()))
                    })
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

/// `host:port` as a socket address.
pub(crate) fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(network(format!("cannot resolve {addr}")))?
        .next()
        .ok_or_else(|| Error::Config(format!("{addr} resolves to no address")))
}

/// One open, authenticated data connection.
struct Connection {
    reader: BufReader<Deadline>,
    writer: Deadline,
}

impl Connection {
    /// From now on, the connection's I/O must finish within `limit`.
    fn within(&mut self, limit: Duration) {
        self.reader.get_mut().within(limit);
        self.writer.within(limit);
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
        wire::write_fetch(&mut self.writer, id)?;
        wire::read_response(&mut self.reader, out, max_bytes)
    }
}

/// Why a fetch from a peer gave no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
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
                Some(at) if Instant::now() < at => return Err(Failure::Down),
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
                let reason = String::from_utf8_lossy(out).into_owned();
                out.clear();
                if !matches!(status, Status::BadRequest | Status::Unauthorized) {
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
        let mut conn = Connection {
            reader: BufReader::with_capacity(
                256 << 10,
                Deadline::new(stream.try_clone().map_err(|e| e.to_string())?),
            ),
            writer: Deadline::new(stream),
        };
        // The whole handshake within one request's time.
        conn.within(timeout);
        let nonce = wire::read_greeting(&mut conn.reader).map_err(|e| e.to_string())?;
        let tag = self.links.secret.sign(Purpose::Data, &nonce);
        wire::write_login(&mut conn.writer, &tag, self.links.node).map_err(|e| e.to_string())?;
        let mut reason = Vec::new();
        match wire::read_response(&mut conn.reader, &mut reason, 4096) {
            Ok(Status::Ok) => Ok(conn),
            Ok(_) => Err(format!("refused: {}", String::from_utf8_lossy(&reason))),
            Err(e) => Err(e.to_string()),
        }
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
        health.retry_at = Some(Instant::now() + retry_after);
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

    /// A data-plane server that lets any client in, then answers each fetch one byte
    /// every 20 ms: each read gets its byte well within any per-call timeout.
    fn dripping_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut login = [0; crate::auth::TAG_BYTES + 4];
                    let mut fetch = [0; 13];
                    let setup = wire::write_greeting(&mut stream, &[0; crate::auth::NONCE_BYTES])
                        .and_then(|()| stream.read_exact(&mut login))
                        .and_then(|()| wire::write_response(&mut stream, Status::Ok, &[]))
                        .and_then(|()| stream.read_exact(&mut fetch))
                        .and_then(|()| stream.write_all(&[0, 0, 0x10, 0, 0]));
                    if setup.is_err() {
                        return;
                    }
                    while stream.write_all(&[7]).is_ok() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_peer_dripping_its_answer_is_marked_down_within_the_deadline() {
        let timeouts = Timeouts {
            request: Duration::from_millis(500),
            retry_after: Duration::from_secs(60),
            join: Duration::from_secs(1),
        };
        let secret = Secret::new(b"the secret of this unit test").unwrap();
        let links = Arc::new(Links::new(0, secret, Vec::new(), timeouts).unwrap());
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
