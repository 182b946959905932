//! The control plane's messages and its generated gRPC client and server.
//!
//! In protobuf terms (package `nostall.peer.v1`):
//!
//! ```protobuf
//! service Control {
//!   // A node greets a peer before fetching from it: both must have the same
//!   // fingerprint; the reply names the peer and its data-plane port.
//!   rpc Hello(HelloRequest) returns (HelloReply);
//!   // Sent to node 0 by every rank: waits until every node has registered,
//!   // returns every node's control address and data port (membership from the
//!   // launcher's rendezvous). Node 0 checks each caller's fingerprint, so that
//!   // nodes need not greet each other to join.
//!   rpc Register(RegisterRequest) returns (RegisterReply);
//!   // Sent to node 0 by every rank before each epoch: waits until every rank of
//!   // every node has arrived.
//!   rpc Barrier(BarrierRequest) returns (BarrierReply);
//! }
//! ```
//!
//! It runs over TLS 1.3 with the job's identity (see [`crate::auth`]); messages are
//! limited to [`MAX_CONTROL_MESSAGE_BYTES`], and the rendezvous's answer to
//! [`message_limit`] of the job's nodes.
//!
//! # Scale
//!
//! A process keeps one connection to each peer it calls (HTTP/2 carries its calls side
//! by side), and a waiting call holds nothing scarce at node 0: places for connections
//! bound only those still in their TLS handshake, and a wait is a task woken once, when
//! what it waits for is complete. So joining and each barrier cost O(1) messages per rank
//! and node 0 holds one connection per process of the job.

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::auth::Identity;
use crate::error::{Error, Result};

/// The largest control message either side accepts, but for the rendezvous's answer,
/// which lists every node (see [`message_limit`]).
pub const MAX_CONTROL_MESSAGE_BYTES: usize = 64 << 10;

/// The longest node address the rendezvous takes, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 256;

/// The largest control message in a job of `nodes` nodes: the rendezvous's answer holds
/// one address and one port per node.
pub fn message_limit(nodes: usize) -> usize {
    MAX_CONTROL_MESSAGE_BYTES.saturating_add(nodes.saturating_mul(MAX_ADDRESS_BYTES + 16))
}

/// `Hello` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    /// The caller's node index.
    #[prost(uint32, tag = "1")]
    pub node: u32,
    /// The caller's fingerprint ([`crate::fingerprint`]).
    #[prost(bytes = "vec", tag = "2")]
    pub fingerprint: Vec<u8>,
}

/// `Hello` reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// The answering node's index.
    #[prost(uint32, tag = "1")]
    pub node: u32,
    /// Its data-plane port, on the control plane's address.
    #[prost(uint32, tag = "2")]
    pub data_port: u32,
}

/// `Register` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterRequest {
    /// The caller's node index.
    #[prost(uint32, tag = "1")]
    pub node: u32,
    /// The caller's control address, `host:port`.
    #[prost(string, tag = "2")]
    pub addr: String,
    /// The caller's fingerprint ([`crate::fingerprint`]): node 0 refuses one that differs
    /// from its own.
    #[prost(bytes = "vec", tag = "3")]
    pub fingerprint: Vec<u8>,
    /// The node's data-plane port when the caller runs its node's service (local rank 0);
    /// 0 from the node's other ranks, which only wait for the list.
    #[prost(uint32, tag = "4")]
    pub data_port: u32,
}

/// `Register` reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterReply {
    /// Every node's control address, by node index.
    #[prost(string, repeated, tag = "1")]
    pub addrs: Vec<String>,
    /// Every node's data-plane port, by node index.
    #[prost(uint32, repeated, tag = "2")]
    pub data_ports: Vec<u32>,
}

/// `Barrier` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BarrierRequest {
    /// The caller's node index.
    #[prost(uint32, tag = "1")]
    pub node: u32,
    /// The epoch about to start.
    #[prost(uint64, tag = "2")]
    pub epoch: u64,
    /// The caller's rank within its node: the barrier waits for every rank of every
    /// node.
    #[prost(uint32, tag = "3")]
    pub local_rank: u32,
}

/// `Barrier` reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BarrierReply {
    /// Whether every node arrived before the timeout.
    #[prost(bool, tag = "1")]
    pub complete: bool,
    /// How many had.
    #[prost(uint32, tag = "2")]
    pub arrived: u32,
}

/// A control client of the peer at `addr` (`host:port`), over TLS with the job's identity
/// (`tls`: [`crate::auth::Identity::client`]), connecting within `timeout`.
///
/// # Errors
///
/// [`Error::Config`] for an address that is not one, [`Error::Network`] when the peer
/// cannot be reached or does not prove the job's secret.
pub async fn connect(
    addr: &str,
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<generated::control_client::ControlClient<Channel>> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| Error::Config(format!("bad peer address {addr:?}: {e}")))?
        .connect_timeout(timeout);
    let tls = tokio_rustls::TlsConnector::from(tls.clone());
    let target = addr.to_string();
    let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
        let (tls, target) = (tls.clone(), target.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect(&target).await?;
            tcp.set_nodelay(true)?;
            let stream = tls.connect(Identity::server_name(), tcp).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    let channel = endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|e| Error::Network {
            context: format!("cannot reach peer {addr}"),
            source: std::io::Error::other(describe(&e)),
        })?;
    Ok(generated::control_client::ControlClient::new(channel)
        .max_decoding_message_size(MAX_CONTROL_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_CONTROL_MESSAGE_BYTES))
}

/// An error with its causes, as one line (transport errors hide the useful part).
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The code `tonic-build` generates (see `build.rs`).
#[allow(missing_docs, clippy::all)]
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/nostall.peer.v1.Control.rs"));
}
