//! The nodes of jobs with a partitioned cache, joined by the agent for their local ranks.
//!
//! Without the agent, each local rank of a node joins the job itself: the first runs the
//! node's cache and peer service, the others read the node's part from that service over
//! TCP, as a remote peer would. Through the agent, the first local rank to attach makes
//! the agent join as the node (its cache, its service, the rendezvous); every local rank
//! then reads through the agent's loader for it, so the node's part is read from the
//! agent's memory and only other nodes' samples cross the network.

use std::sync::Arc;

use nostall::loader::LoaderBuilder;
use nostall::Catalog;
use nostall_peer::Node;

use crate::group::AtFinish;
use crate::held::HeldOnce;
use crate::wire::JobNode;

/// A job's node, joined by the agent; it leaves the job (its service stops) when the
/// last group of its ranks is dropped.
pub(crate) struct JoinedNode {
    pub(crate) node: Node,
    pub(crate) catalog: Arc<Catalog>,
    /// What the job said of the node, in words.
    pub(crate) described: String,
    /// What makes the job's node: its words and a digest of the job's secret.
    pub(crate) key: String,
}

impl JoinedNode {
    /// What local rank `local_rank`'s group does when its job is done: meet the job's
    /// other ranks at the end (at node 0), as `nostall node` does, so that this node's
    /// service stays up until every node is done with it. The ranks do not meet between
    /// epochs: a node's service serves its part all along.
    pub(crate) fn at_finish(self: &Arc<JoinedNode>, local_rank: usize) -> AtFinish {
        let joined = Arc::downgrade(self);
        Box::new(move || {
            let Some(joined) = joined.upgrade() else {
                return;
            };
            match joined.node.finish_for(local_rank) {
                Ok(true) => {}
                Ok(false) => eprintln!(
                    "nostall agent: {}: not every node finished; leaving",
                    joined.described
                ),
                Err(e) => eprintln!(
                    "nostall agent: {}: the meeting at the end failed ({e}); leaving",
                    joined.described
                ),
            }
        })
    }
}

/// The nodes the agent has joined, by job and node. A slot's lock is held while joining,
/// so that the local ranks of one node wait for one join, and jobs of other nodes do not.
/// What makes a job's node one: the dataset, where and as whom it is read (`storage`),
/// the job as described, and its secret (a job of another secret at the same addresses is
/// another job), which is digested, never printed.
fn node_key(location: &str, storage: &str, job: &JobNode) -> String {
    let secret = ring::digest::digest(&ring::digest::SHA256, &job.secret.0);
    let secret: String = secret.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{location}{storage} {} {secret}", job.describe())
}

#[derive(Default)]
pub(crate) struct Nodes {
    joined: HeldOnce<String, JoinedNode>,
}

impl Nodes {
    /// The node `job` names for the dataset `builder` opens: joined already by another
    /// of its local ranks, or joined now (waiting for the job's other nodes, up to its
    /// join timeout).
    pub(crate) fn join(
        &self,
        builder: &LoaderBuilder,
        location: &str,
        storage: &str,
        job: &JobNode,
    ) -> Result<Arc<JoinedNode>, String> {
        let described = job.describe();
        let key = node_key(location, storage, job);
        self.joined.get_or_make(key.clone(), || {
            let mut config = job.config()?;
            // The agent is the node's first local rank: it runs the node's cache and
            // service.
            config.local_rank = 0;
            let (dataset, node) = crate::job::join_node(builder, config)
                .map_err(|e| format!("joining the job as {described}: {e}"))?;
            eprintln!(
                "nostall agent: joined the job as {described}{}",
                node.service()
                    .map(|s| format!(", serving peers at {}", s.control_addr()))
                    .unwrap_or_default()
            );
            Ok(Arc::new(JoinedNode {
                node,
                catalog: dataset.catalog,
                described,
                key,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostall_peer::{NodeConfig, Secret};

    fn job(secret: &[u8]) -> JobNode {
        let peers = vec!["127.0.0.1:7070".into(), "127.0.0.1:7071".into()];
        let config = NodeConfig::new(
            0,
            peers,
            "50%".parse().unwrap(),
            Secret::new(secret).unwrap(),
        );
        JobNode::of(&config)
    }

    #[test]
    fn jobs_of_other_secrets_or_storage_are_other_nodes() {
        let a = node_key(
            "s3://b/d",
            ", from X",
            &job(b"the first secret, 32 bytes long."),
        );
        assert_eq!(
            a,
            node_key(
                "s3://b/d",
                ", from X",
                &job(b"the first secret, 32 bytes long.")
            )
        );
        // Same length, other bytes: the key once held the secret's Debug text, its length.
        assert_ne!(
            a,
            node_key(
                "s3://b/d",
                ", from X",
                &job(b"the other secret, 32 bytes long.")
            )
        );
        assert_ne!(
            a,
            node_key(
                "s3://b/d",
                ", from Y",
                &job(b"the first secret, 32 bytes long.")
            )
        );
        assert!(!a.contains("first secret"), "{a}");
    }
}
