//! Offline simulators, run without data: [`cache`] replays nostall's access stream
//! against cache policies on one node or per worker; [`cluster`] a multi-node job over a
//! partitioned cache (bytes from storage, between nodes and from local caches).

pub mod cache;
pub mod cluster;
