//! The control plane's messages and its generated gRPC client and server.
//!
//! In protobuf terms (package `nostall.peer.v1`):
//!
//! ```protobuf
//! service Control {
//!   // A node greets a peer before fetching from it: both must have the same
//!   // fingerprint; the reply names the peer and its data-plane port.
//!   rpc Hello(HelloRequest) returns (HelloReply);
//!   // Sent to node 0 by each node's first rank: waits until every node has
//!   // registered, returns every node's control address and data port in one
//!   // binary list (membership from the launcher's rendezvous). Node 0 checks each
//!   // caller's fingerprint, so that nodes need not greet each other to join. A
//!   // node's other ranks send it to their node's service, which answers with the
//!   // list node 0 gave its first rank (their fingerprint checked against it).
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
//! # The node list
//!
//! The rendezvous's answer ([`RegisterReply::nodes`]) is the same for every rank, and
//! every rank of the job receives it, so node 0 encodes it once and each answer shares
//! the bytes. Integers big-endian:
//!
//! ```text
//! format u8 = 1 | nodes u32 | per node, by index:
//!     family u8 (4 | 6) | IP address (4 | 16 bytes) | control port u16 | data port u16
//! ```
//!
//! A node's data plane listens on its control plane's IP address. A rank refuses a list
//! of another format, of another node count than its job's, with a byte short or over,
//! or with a port 0 ([`decode_nodes`]).
//!
//! # Scale
//!
//! A process keeps one connection to each peer it calls (HTTP/2 carries its calls side
//! by side), and a waiting call holds nothing scarce at node 0: places for connections
//! bound only those still in their TLS handshake, and a wait is a task woken once, when
//! what it waits for is complete. So joining and each barrier cost O(1) messages per rank,
//! node 0 answers one registration per node at join (a node's other ranks ask their
//! node), and node 0 holds one connection per process of the job once every rank has met
//! it at a barrier.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use tonic::transport::{Channel, Endpoint};

use crate::auth::Identity;
use crate::error::{Error, Result};

/// The largest control message either side accepts, but for the rendezvous's answer,
/// which lists every node (see [`message_limit`]).
pub const MAX_CONTROL_MESSAGE_BYTES: usize = 64 << 10;

/// The longest node address the rendezvous takes, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 256;

/// The node list's format ([`RegisterReply::nodes`]); a rank refuses any other.
pub const NODE_LIST_FORMAT: u8 = 1;

/// The most bytes one node takes in the node list: an IPv6 address and two ports.
pub const MAX_NODE_BYTES: usize = 1 + 16 + 2 + 2;

/// The largest control message in a job of `nodes` nodes: the rendezvous's answer holds
/// one entry of the node list per node.
pub fn message_limit(nodes: usize) -> usize {
    MAX_CONTROL_MESSAGE_BYTES.saturating_add(nodes.saturating_mul(MAX_NODE_BYTES))
}

/// Where one node of the job is reached, as the rendezvous lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAddress {
    /// Its control plane.
    pub control: SocketAddr,
    /// Its data plane's port, on the control plane's IP address.
    pub data_port: u16,
}

impl NodeAddress {
    /// Its data plane.
    pub fn data(&self) -> SocketAddr {
        SocketAddr::new(self.control.ip(), self.data_port)
    }
}

/// The node list of `nodes`, by node index, in format [`NODE_LIST_FORMAT`].
pub fn encode_nodes(nodes: &[NodeAddress]) -> Bytes {
    let mut list = BytesMut::with_capacity(1 + 4 + nodes.len() * MAX_NODE_BYTES);
    list.put_u8(NODE_LIST_FORMAT);
    list.put_u32(u32::try_from(nodes.len()).expect("a job has fewer than 2^32 nodes"));
    for node in nodes {
        match node.control.ip() {
            IpAddr::V4(ip) => {
                list.put_u8(4);
                list.put_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                list.put_u8(6);
                list.put_slice(&ip.octets());
            }
        }
        list.put_u16(node.control.port());
        list.put_u16(node.data_port);
    }
    list.freeze()
}

/// Reads the node list of a job of `nodes` nodes, as [`encode_nodes`] wrote it.
///
/// # Errors
///
/// [`Error::Refused`] when the list is of another format, lists another number of
/// nodes, is cut short or runs over, names an unknown address family, or has a port 0:
/// it comes from the network, and the node indexes it by node.
pub fn decode_nodes(list: &[u8], nodes: usize) -> Result<Vec<NodeAddress>> {
    let refused = |why: String| Error::Refused(format!("the rendezvous's node list {why}"));
    let mut rest = list;
    let [format] = take(&mut rest)
        .ok_or_else(|| refused("is empty (does node 0 run another version of nostall?)".into()))?;
    if format != NODE_LIST_FORMAT {
        return Err(refused(format!(
            "is in format {format}, this build reads {NODE_LIST_FORMAT}: run the same nostall \
             version on every node"
        )));
    }
    let count = take(&mut rest).map(u32::from_be_bytes);
    if count.is_none_or(|count| count as usize != nodes) {
        return Err(refused(format!(
            "names {} nodes for a job of {nodes} (is it another job's rendezvous?)",
            count.map_or("no".into(), |c| c.to_string())
        )));
    }
    // `nodes` is this job's, not a count from the network: the allocation is ours.
    let mut out = Vec::with_capacity(nodes);
    for node in 0..nodes {
        let short = || refused(format!("ends within node {node}'s entry"));
        let ip = match take(&mut rest).ok_or_else(short)? {
            [4] => IpAddr::V4(Ipv4Addr::from(take::<4>(&mut rest).ok_or_else(short)?)),
            [6] => IpAddr::V6(Ipv6Addr::from(take::<16>(&mut rest).ok_or_else(short)?)),
            [family] => {
                return Err(refused(format!(
                    "gives node {node} an address of unknown family {family}"
                )))
            }
        };
        let [control, data] = take::<4>(&mut rest)
            .map(|p| {
                [
                    u16::from_be_bytes([p[0], p[1]]),
                    u16::from_be_bytes([p[2], p[3]]),
                ]
            })
            .ok_or_else(short)?;
        if control == 0 || data == 0 {
            return Err(refused(format!(
                "gives node {node} port {control} for control and {data} for data: 0 is not \
                 a port"
            )));
        }
        out.push(NodeAddress {
            control: SocketAddr::new(ip, control),
            data_port: data,
        });
    }
    if !rest.is_empty() {
        return Err(refused(format!(
            "runs {} bytes past its {nodes} nodes",
            rest.len()
        )));
    }
    Ok(out)
}

/// The next `N` bytes of `rest`, if it has them.
fn take<const N: usize>(rest: &mut &[u8]) -> Option<[u8; N]> {
    let (head, tail) = rest.split_first_chunk::<N>()?;
    *rest = tail;
    Some(*head)
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

/// `Register` reply. (Fields 1 and 2 held the list as text, one string per node, before
/// the node list: a node of that version finds no list here, and refuses the answer.)
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterReply {
    /// Every node's control address and data port, by node index: the node list (see
    /// the module's documentation; [`decode_nodes`] reads it).
    #[prost(bytes = "bytes", tag = "3")]
    pub nodes: Bytes,
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
