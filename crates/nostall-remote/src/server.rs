//! The preparer's side: a listener that makes the parts of runs it is asked for with its
//! own loader and sends each batch as it is made.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nostall::prep::ByteValues;
use nostall::{Error, Loader};
use nostall_peer::Secret;
use rustls::{ServerConnection, StreamOwned};

use crate::coding;
use crate::describe::describe;
use crate::wire::{self, Failure, Part, Skip};
use crate::{RemoteError, Socket};

/// How long a connection may take to say hello, and a client to read what was sent.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long a write to a client may block: a client that stops reading for this long is
/// let go (the part it asked for goes to someone else on its side).
const WRITE_LIMIT: Duration = Duration::from_secs(60);
/// The most clients served at once (a trainer's run opens one connection to each
/// preparer; more is a misuse or an attack).
const MAX_CLIENTS: usize = 64;

/// What a preparer did, for its figures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Connections that proved the job's secret.
    pub clients: u64,
    /// Connections refused (no secret, another protocol, too many at once).
    pub refused: u64,
    /// Parts made to their end.
    pub parts: u64,
    /// Batches sent.
    pub batches: u64,
    /// Bytes of batch data sent (as sent: float32 samples coded as their bytes where the
    /// pipeline allows).
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    clients: AtomicU64,
    refused: AtomicU64,
    parts: AtomicU64,
    batches: AtomicU64,
    bytes: AtomicU64,
    open: AtomicU64,
}

/// A preparer serving a loader's batches to the clients of its job: listens on one
/// address, accepts only connections that prove the job's secret (TLS 1.3, both ends),
/// and makes each part asked for with [`Loader::batches`].
///
/// Dropping it stops accepting; parts under way end with their connections.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    accepting: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Serves `loader` on `listener` to clients holding `secret`.
    ///
    /// # Errors
    ///
    /// [`RemoteError::Config`] when the job's identity cannot be made from the secret, or
    /// the listener's address cannot be read.
    pub fn serve(
        loader: Arc<Loader>,
        listener: TcpListener,
        secret: &Secret,
    ) -> Result<Server, RemoteError> {
        let identity = secret
            .identity()
            .map_err(|e| RemoteError::Config(e.to_string()))?;
        let addr = listener
            .local_addr()
            .map_err(|e| RemoteError::Config(format!("the listener has no address: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let description = Arc::new(describe(&loader));
        let (maker, sending) = match coding::of(&loader) {
            None => (loader.clone(), Sending::Values),
            Some(values) => match coding::unconverted(&loader) {
                Some(pipeline) => {
                    let unconverted = loader
                        .with_pipeline(pipeline)
                        .map_err(|e| RemoteError::Config(e.to_string()))?;
                    (Arc::new(unconverted), Sending::Unconverted)
                }
                None => (loader.clone(), Sending::Coded(Arc::new(values))),
            },
        };
        let accepting = {
            let (stop, counters) = (stop.clone(), counters.clone());
            std::thread::Builder::new()
                .name("nostall-remote-accept".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        let Ok(stream) = stream else { continue };
                        if counters.open.load(Ordering::Acquire) >= MAX_CLIENTS as u64 {
                            counters.refused.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        counters.open.fetch_add(1, Ordering::AcqRel);
                        let client = Client {
                            maker: maker.clone(),
                            config: identity.server.clone(),
                            description: description.clone(),
                            sending: sending.clone(),
                            counters: counters.clone(),
                            stop: stop.clone(),
                        };
                        let spawned = std::thread::Builder::new()
                            .name("nostall-remote-serve".into())
                            .spawn(move || client.serve(stream));
                        if spawned.is_err() {
                            counters.open.fetch_sub(1, Ordering::AcqRel);
                        }
                    }
                })
                .map_err(|e| RemoteError::Config(format!("cannot start a thread: {e}")))?
        };
        Ok(Server {
            addr,
            stop,
            counters,
            accepting: Some(accepting),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it did so far.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            clients: c.clients.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            parts: c.parts.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accepting thread, which sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.accepting.take() {
            let _ = thread.join();
        }
    }
}

/// How a preparer sends its samples ([`coding`]).
#[derive(Clone)]
enum Sending {
    /// As the batch holds them.
    Values,
    /// Each coded by the tables of the values its elements may take.
    Coded(Arc<ByteValues>),
    /// Made unconverted, each element's byte (in the code's form, with no runs).
    Unconverted,
}

/// One client's connection.
struct Client {
    /// What makes the batches: the loader served, or its unconverted form (the same run,
    /// each element's byte instead of its value: [`coding::unconverted`]).
    maker: Arc<Loader>,
    config: Arc<rustls::ServerConfig>,
    description: Arc<Vec<(String, u64)>>,
    sending: Sending,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

impl Client {
    fn serve(self, stream: TcpStream) {
        if let Err(e) = self.session(stream) {
            // A client that left is the common end; anything else is logged.
            if !matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
            ) {
                eprintln!("nostall remote prep: a client's connection ended: {e}");
            }
        }
        self.counters.open.fetch_sub(1, Ordering::AcqRel);
    }

    fn session(&self, stream: TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(HANDSHAKE))?;
        stream.set_write_timeout(Some(WRITE_LIMIT))?;
        let conn = ServerConnection::new(self.config.clone()).map_err(io::Error::other)?;
        let mut tls = StreamOwned::new(conn, Socket::new(stream)?);
        let hello =
            nostall_peer::auth::handshake(&mut tls).and_then(|()| wire::read_hello(&mut tls));
        if let Err(e) = hello {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        self.counters.clients.fetch_add(1, Ordering::Relaxed);
        wire::write_welcome(&mut tls, &self.description)?;
        // Waiting for the next part has no bound: a trainer between epochs asks for none.
        tls.sock.tcp.set_read_timeout(None)?;
        // The batches' codes, kept between them.
        let mut code = Vec::new();
        while let Some(part) = wire::read_part(&mut tls)? {
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            self.make(&mut tls, &part, &mut code)?;
        }
        Ok(())
    }

    /// Makes `part` and sends its batches as they come, then its end (or why it stopped).
    fn make(&self, out: &mut impl Write, part: &Part, code: &mut Vec<u8>) -> io::Result<()> {
        let range = part.first..part.first.saturating_add(part.count);
        let mut batches = match self.maker.batches(&part.run, range) {
            Ok(batches) => batches,
            Err(e) => return wire::write_failed(out, part.tag, &failure(e)),
        };
        let mut reported = 0;
        while let Some(batch) = batches.next() {
            match batch {
                Ok(batch) => {
                    let skips = Skip::since(&batches, &mut reported);
                    let sample_bytes = self.maker.config().pipeline.sample_bytes();
                    let samples = batch.data().chunks_exact(sample_bytes);
                    code.clear();
                    let data = match &self.sending {
                        Sending::Values => batch.data(),
                        Sending::Coded(values) => {
                            samples.for_each(|sample| coding::encode(values, sample, code));
                            &code[..]
                        }
                        Sending::Unconverted => {
                            samples.for_each(|sample| coding::unconverted_code(sample, code));
                            &code[..]
                        }
                    };
                    wire::write_batch(out, part.tag, &batch.header(), &skips, data)?;
                    self.counters.batches.fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                Err(e) => return wire::write_failed(out, part.tag, &failure(e)),
            }
        }
        let skips = Skip::since(&batches, &mut reported);
        self.counters.parts.fetch_add(1, Ordering::Relaxed);
        wire::write_end(out, part.tag, &skips)
    }
}

/// What the client is told of an error that stopped a part.
fn failure(error: Error) -> Failure {
    match error {
        Error::Sample(sample) => Failure::Sample(Skip::of(&sample)),
        Error::Config(message) => Failure::Config(message),
        other => Failure::Other(other.to_string()),
    }
}
