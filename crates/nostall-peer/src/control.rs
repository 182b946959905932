//! The control plane's messages and its generated gRPC client and server.
//!
//! In protobuf terms (package `nostall.peer.v1`):
//!
//! ```protobuf
//! service Control {
//!   // A node greets a peer before fetching from it: both must have the same
//!   // fingerprint; the reply names the peer and its data-plane port.
//!   rpc Hello(HelloRequest) returns (HelloReply);
//!   // Sent to node 0 by every node: waits until all have registered, returns
//!   // every node's control address (membership from the launcher's rendezvous).
//!   rpc Register(RegisterRequest) returns (RegisterReply);
//!   // Sent to node 0 before each epoch: waits until every node has arrived.
//!   rpc Barrier(BarrierRequest) returns (BarrierReply);
//! }
//! ```
//!
//! Every request carries [`AUTH_HEADER`] (see [`crate::auth`]); messages are limited to
//! [`MAX_CONTROL_MESSAGE_BYTES`].

/// The request header carrying the control-plane token.
pub const AUTH_HEADER: &str = "x-nostall-auth";

/// The largest control message either side accepts.
pub const MAX_CONTROL_MESSAGE_BYTES: usize = 64 << 10;

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
}

/// `Register` reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterReply {
    /// Every node's control address, by node index.
    #[prost(string, repeated, tag = "1")]
    pub addrs: Vec<String>,
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

/// The code `tonic-build` generates (see `build.rs`).
#[allow(missing_docs, clippy::all)]
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/nostall.peer.v1.Control.rs"));
}
