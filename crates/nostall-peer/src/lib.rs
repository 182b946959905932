//! The cache service between the nodes of a nostall job (CoorDL's partitioned caching).
//!
//! Several nodes training one model data-parallel can together hold a dataset that none
//! holds alone. Each node caches a disjoint part of it, chosen by
//! [`nostall::plan::placement::Placement`] from the job's seed, so that every node knows
//! who holds what without messages; a sample is read from the node's own cache, else from
//! the peer holding it, and only then from storage. With locality-aware assignment
//! ([`nostall::plan::locality`]) each rank mostly takes samples its node holds, and only
//! the balancing surplus crosses the network.
//!
//! # Layers
//!
//! - [`NodeCache`]: the node's part, filled from storage on first use and kept (it never
//!   evicts: the part fits by construction). Shared by the node's ranks.
//! - [`Service`]: serves the node cache to peers. Two planes:
//!   - **data**: framed TCP in TLS ([`wire`]): one request per sample by catalog id
//!     (never by path), answered with the bytes. Blocking sockets on plain threads, pooled
//!     connections: a sample costs one round trip and one copy into the loader's buffer.
//!   - **control**: gRPC in TLS ([`control`], `tonic`): the handshake (fingerprint check,
//!     data port), the rendezvous that turns a launcher's `MASTER_ADDR` into a peer list,
//!     and the barrier (a meeting of every rank: before leaving the job, and before each
//!     epoch where a job wants its nodes in step).
//! - [`PartitionedSource`]: the loader's [`nostall::storage::Source`]: own cache → holder
//!   peer → storage, with peers marked down after a timeout and retried later.
//! - [`Node`]: all of it for one process, from a [`NodeConfig`] (explicit peer list, or
//!   torchrun's environment via [`NodeConfig::from_env`]).
//!
//! # Security
//!
//! The service listens only on the configured address. Both planes run TLS 1.3 with an
//! identity derived from the job's shared secret ([`Secret`], from `NOSTALL_PEER_SECRET`):
//! mutual authentication, encrypted and authenticated records, no replay (see [`auth`]
//! for what the secret does and does not protect against). Every request has a deadline,
//! request and response sizes are limited, ids outside the catalog or not held by the
//! node are refused, and bytes from a peer must have the catalog's size (where it is
//! exact; Parquet's are estimates, and then the largest sample's); each refusal is
//! counted and logged, and the service goes on serving others.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use nostall::loader::LoaderBuilder;
//! use nostall_peer::{Node, NodeConfig, Secret};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut builder = LoaderBuilder::new("s3://bucket/train");
//! let data = builder.open_dataset()?;
//! let peers = vec!["10.0.0.1:7070".to_string(), "10.0.0.2:7070".to_string()];
//! let config = NodeConfig::new(0, peers, "30%".parse()?, Secret::from_env()?);
//! let node = Node::join(&data.catalog, data.source.clone(), config)?;
//! node.configure(&mut builder); // rank, world size, locality-aware batches
//! let loader = builder.build(data.catalog.clone(), node.source())?;
//! for epoch in 0..90 {
//!     // No meeting between epochs: this node's service serves its part all along.
//!     for batch in loader.epoch(epoch)? {
//!         let batch = batch?;
//!         // train on batch
//!     }
//! }
//! // Meet the others before leaving: a peer still in its last epoch reads from this node.
//! node.finish()?;
//! # Ok(())
//! # }
//! ```

pub mod auth;
mod client;
pub mod control;
mod deadline;
mod error;
mod membership;
mod node_cache;
mod server;
mod source;
mod store;
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod test_common;
#[cfg(test)]
mod testing;
pub mod wire;

pub use auth::Secret;
pub use client::{Failure, Timeouts};
pub use error::{Error, Result};
pub use membership::{
    fingerprint, Membership, Node, NodeConfig, NodeStats, JOIN_TIMEOUT_VAR, LISTEN_VAR, PEERS_VAR,
    PORT_VAR,
};
pub use node_cache::{NodeCache, NodeCacheStats};
pub use server::{
    Rejection, Service, ServiceConfig, ServiceStats, DEFAULT_MAX_CONNECTIONS, IDLE_LIMIT,
    KEPT_REJECTIONS, MAX_CONTROL_CONNECTIONS, MAX_CONTROL_HANDSHAKES_PER_ADDRESS,
    MAX_HANDSHAKES_PER_ADDRESS,
};
pub use source::{PartitionedSource, SourceBreakdown};
pub use store::{JobStore, MemoryStore, Store};
