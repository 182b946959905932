//! Batches of a nostall loader prepared in other processes (remote prep).
//!
//! A training node's cores are a fixed budget, and today's recipes cost more CPU per
//! sample than a node of GPUs has cores for. This crate lets other machines' cores
//! prepare a trainer's batches, exactly as its own loader would, without a state the
//! trainer depends on:
//!
//! - Every batch of a run is a pure function of the run's start (a [`Checkpoint`]: seed,
//!   epoch, rank, position, the stretches of an elastic resume) and its number
//!   ([`Loader::batches`]), so a preparer is told *which* batches to make and holds
//!   nothing a trainer needs: a lost one costs only the parts it was making.
//! - [`Server`] (a preparer: a Ray actor, say) serves a loader built with the trainer's
//!   dataset and settings. [`Remote`] (the trainer's client) cuts each run into parts of
//!   a few batches, keeps a window of them out over its preparers (its own loader among
//!   them, on its own cores, first), and delivers batches in plan order, whoever made
//!   them.
//! - A preparer that dies, hangs or is slow costs nothing but time: its parts are given
//!   to others (a part the consumer waits on too long is hedged onto an idle preparer),
//!   and the first copy of each batch to arrive is kept, the late one dropped by its
//!   number. Parts are fixed by the run, so a batch has the same bytes whoever made it.
//! - Bytes travel over TLS 1.3 with the job's identity on both ends
//!   ([`nostall_peer::auth`]: derived from the job's secret, never sent), in frames whose
//!   every length is bounded before it is read ([`wire`] has the format), straight into
//!   the trainer's batch buffers ([`Loader::receive`]). Before a client takes a
//!   preparer's batches, both check that they describe the same loader (dataset,
//!   pipeline, seed, batch size, ranks, layout).
//!
//! Where the preparers come from (Ray actors, placed and restarted by Ray) is the Python
//! front's business (`nostall.Remote`); this crate only needs their addresses.
//!
//! [`Checkpoint`]: nostall::loader::Checkpoint
//! [`Loader::batches`]: nostall::Loader::batches
//! [`Loader::receive`]: nostall::Loader::receive

mod busy;
mod client;
mod coding;
mod describe;
mod server;
pub mod wire;

pub use client::{Delivered, PreparerStats, Remote, RemoteOptions, RemoteRun};
pub use server::{Server, ServerStats};

/// Why a client could not use a preparer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteError {
    /// The settings cannot work: the preparer prepares for another loader, or the options
    /// or secret are unusable. The message says what to change.
    Config(String),
    /// No connection could be made (no one listens there, the network is down).
    Unreachable {
        /// The preparer's address.
        address: String,
        /// What happened.
        message: String,
    },
    /// The preparer was reached and refused this client, or this client it: one of the
    /// two does not hold the job's secret, or they speak other protocols.
    Refused {
        /// The preparer's address.
        address: String,
        /// What happened.
        message: String,
    },
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteError::Config(message) => f.write_str(message),
            RemoteError::Unreachable { address, message } => {
                write!(f, "cannot reach the preparer at {address}: {message}")
            }
            RemoteError::Refused { address, message } => write!(
                f,
                "the preparer at {address} and this trainer did not accept each other \
                 ({message}): both must hold the job's secret (NOSTALL_PEER_SECRET) and \
                 run the same nostall"
            ),
        }
    }
}

impl std::error::Error for RemoteError {}

/// A TCP socket whose reads go through a buffer. rustls reads its records 4 KiB at a
/// time: for batches of tens of megabytes, a system call every 4 KiB cost the receiver
/// half its CPU time. (Writes need none: rustls writes its pending records at once.)
pub(crate) struct Socket {
    read: std::io::BufReader<std::net::TcpStream>,
    /// The socket itself (its other handle), for writes, timeouts and shutdown.
    pub(crate) tcp: std::net::TcpStream,
}

impl Socket {
    /// How much one read from the kernel asks for.
    const READ_BUFFER: usize = 1 << 20;

    pub(crate) fn new(tcp: std::net::TcpStream) -> std::io::Result<Socket> {
        let read = std::io::BufReader::with_capacity(Self::READ_BUFFER, tcp.try_clone()?);
        Ok(Socket { read, tcp })
    }
}

impl std::io::Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read.read(buf)
    }
}

impl std::io::Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.tcp.write_vectored(bufs)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}
