//! What the live metrics endpoint serves of a Python `Loader`: the engine's figures, and
//! its partitioned cache's where it has one.

use std::sync::{Arc, Mutex};

use nostall::metrics::export::{Figures, Reading};
use nostall::metrics::LiveStats;

/// A loader, with its node of a partitioned cache.
pub(crate) struct LoaderFigures {
    pub(crate) loader: Arc<nostall::Loader>,
    pub(crate) node: Option<NodeCounters>,
}

/// Where a rank's partitioned-cache counters are: its own node, or the node agent's (as
/// its last batch brought them).
#[derive(Clone)]
pub(crate) enum NodeCounters {
    Joined(Arc<nostall_peer::Node>),
    Agent(Arc<Mutex<nostall_peer::NodeStats>>),
}

impl NodeCounters {
    pub(crate) fn stats(&self) -> nostall_peer::NodeStats {
        match self {
            NodeCounters::Joined(node) => node.stats(),
            NodeCounters::Agent(stats) => stats.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

impl Figures for LoaderFigures {
    fn live(&self) -> LiveStats {
        self.loader.live_stats()
    }

    fn extra(&self) -> Vec<Reading> {
        let Some(node) = &self.node else {
            return Vec::new();
        };
        let s = node.stats().source;
        let reading = |name, help, counter, value: u64| Reading {
            name,
            help,
            counter,
            value: value as f64,
        };
        vec![
            reading(
                "node_local_bytes",
                "Sample bytes read from this node's cache.",
                true,
                s.local_bytes,
            ),
            reading(
                "peer_bytes",
                "Sample bytes read from other nodes' caches.",
                true,
                s.peer_bytes,
            ),
            reading(
                "node_storage_bytes",
                "Sample bytes read from storage through the partitioned cache.",
                true,
                s.storage_bytes,
            ),
            reading(
                "peer_fallbacks",
                "Reads that fell back from a peer to storage.",
                true,
                s.fallbacks,
            ),
            reading(
                "peer_downs",
                "Times a peer was marked down.",
                true,
                s.peer_downs,
            ),
            reading(
                "peer_mismatches",
                "Peer answers refused for the wrong size.",
                true,
                s.peer_mismatches,
            ),
        ]
    }
}
