//! Offline simulators, run without data: [`cache`] replays nostall's access stream
//! against cache policies on one node or per worker; [`cluster`] a multi-node job over a
//! partitioned cache (bytes from storage, between nodes and from local caches);
//! [`remote`] trainers fed by remote CPU hosts (hosts, network and control cost, and one
//! rank's client event by event).

pub mod cache;
pub mod cluster;
pub mod remote;
