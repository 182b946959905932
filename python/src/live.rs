//! What the live metrics endpoint serves of a Python `Loader`: the engine's figures, and
//! its partitioned cache's where it has one.

use std::sync::{Arc, Mutex};

use nostall::metrics::export::{Figures, Reading};
use nostall::metrics::LiveStats;

/// A loader, with its node of a partitioned cache and its group in the node agent.
pub(crate) struct LoaderFigures {
    pub(crate) loader: Arc<nostall::Loader>,
    pub(crate) node: Option<NodeCounters>,
    pub(crate) group: Option<crate::shared::GroupFigures>,
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
        let mut readings = self.group_readings();
        if let Some(node) = &self.node {
            readings.extend(node_readings(&node.stats().source));
        }
        readings
    }
}

fn reading(name: &'static str, help: &'static str, counter: bool, value: u64) -> Reading {
    Reading {
        name,
        help,
        counter,
        value: value as f64,
    }
}

impl LoaderFigures {
    /// The group's figures as the job's last batch brought them (none before it).
    fn group_readings(&self) -> Vec<Reading> {
        let last = self
            .group
            .as_ref()
            .and_then(|g| *g.lock().unwrap_or_else(|e| e.into_inner()));
        let Some((g, batch_bytes)) = last else {
            return Vec::new();
        };
        vec![
            reading(
                "group_members",
                "Jobs in this job's group in the node agent.",
                false,
                g.members as u64,
            ),
            reading(
                "group_lag_batches",
                "Batches the group had ready past this job's last.",
                false,
                g.ahead,
            ),
            reading(
                "group_batches_prepared",
                "Batches the group prepared, for all its jobs.",
                true,
                g.produced,
            ),
            reading(
                "group_batches_delivered",
                "Batches the group handed to its jobs (each job counts).",
                true,
                g.delivered,
            ),
            reading(
                "group_members_detached",
                "Jobs the group detached by their lease.",
                true,
                g.detached,
            ),
            reading(
                "group_bytes_saved",
                "Batch bytes delivered beyond each batch's first delivery: prep not done again.",
                true,
                crate::shared::bytes_saved(&g, batch_bytes),
            ),
        ]
    }
}

/// A partitioned cache's counters of where samples came from.
fn node_readings(s: &nostall_peer::SourceBreakdown) -> Vec<Reading> {
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
