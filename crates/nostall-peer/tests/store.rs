//! Nodes that meet through the job's key-value store (as torchrun's `TCPStore` is reached
//! from Python) instead of node 0's rendezvous: real services on loopback, each node on
//! a port the system picks, the store in memory.

use std::sync::Arc;
use std::time::Duration;

use nostall::cache::Capacity;
use nostall::storage::{Memory, Source};
use nostall_peer::{JobStore, Membership, MemoryStore, Node, NodeConfig, Secret, Timeouts};

const NODES: usize = 3;
const RANKS_PER_NODE: usize = 2;

mod common;
use common::{bytes, catalog, storage, SAMPLES};

/// Rank `local_rank` of node `node`, meeting in `store` under the secret `secret`.
fn config(node: usize, local_rank: usize, store: &JobStore, secret: &[u8]) -> NodeConfig {
    let mut c = NodeConfig::new(
        node,
        Vec::new(),
        Capacity::Fraction(0.5),
        Secret::new(secret).unwrap(),
    );
    c.nodes = NODES;
    c.local_rank = local_rank;
    c.ranks_per_node = RANKS_PER_NODE;
    c.membership = Membership::Store {
        store: store.clone(),
        own: "127.0.0.1:0".into(),
    };
    c.timeouts = Timeouts::new(
        Duration::from_secs(20),
        Duration::from_millis(300),
        Duration::from_secs(120),
    );
    c.gather_timeout = Duration::from_secs(120);
    c
}

const SECRET: &[u8] = b"the secret of the store test";

#[test]
fn nodes_meet_in_the_store_read_each_others_parts_and_finish_together() {
    let store = JobStore::new(Arc::new(MemoryStore::default()), "torchelastic-run/0/0/");
    let catalog = catalog();
    // The first ranks start the nodes' services; the other ranks join once those are up
    // (they read through their node's service, as a node's other ranks do).
    let firsts: Vec<Node> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..NODES)
            .map(|n| {
                let (catalog, store) = (catalog.clone(), &store);
                s.spawn(move || {
                    Node::join(&catalog, storage(), config(n, 0, store, SECRET)).unwrap()
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for (n, node) in firsts.iter().enumerate() {
        assert_eq!(node.peers(), firsts[0].peers());
        let own = node.service().unwrap().control_addr().to_string();
        assert_eq!(
            node.peers()[n],
            own,
            "node {n} listens where the system picked"
        );
    }
    let seconds: Vec<Node> = (0..NODES)
        .map(|n| {
            let storage = Arc::new(Memory::new(Vec::new()));
            Node::join(&catalog, storage, config(n, 1, &store, SECRET)).unwrap()
        })
        .collect();
    // A node's second rank holds nothing and reads no storage: every sample comes from
    // its node's part or a peer's, over the data planes the store gave.
    let mut out = Vec::new();
    for id in 0..SAMPLES {
        seconds[NODES - 1].source().read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id), "sample {id}");
    }
    let stats = seconds[NODES - 1].stats().source;
    assert_eq!(stats.fallbacks, 0, "{stats:?}");
    // Every rank of every node meets at the end.
    let met: Vec<bool> = std::thread::scope(|s| {
        let waits: Vec<_> = firsts
            .iter()
            .chain(&seconds)
            .map(|node| s.spawn(move || node.finish().unwrap()))
            .collect();
        waits.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(met, vec![true; NODES * RANKS_PER_NODE]);
}

#[test]
fn a_node_with_another_secret_is_refused_by_the_others() {
    let store = JobStore::new(Arc::new(MemoryStore::default()), "job/");
    let catalog = catalog();
    let results: Vec<_> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..NODES)
            .map(|n| {
                let (catalog, store) = (catalog.clone(), &store);
                s.spawn(move || {
                    let secret: &[u8] = if n == 1 {
                        b"another secret, as long"
                    } else {
                        SECRET
                    };
                    Node::join(&catalog, storage(), config(n, 0, store, secret)).map(|_| ())
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for (n, result) in results.into_iter().enumerate() {
        let err = result.expect_err("no node joins a job with a stranger in it");
        // Each node finds an entry signed with a secret other than its own.
        let stranger = if n == 1 {
            "node 0's entry"
        } else {
            "node 1's entry"
        };
        assert!(err.to_string().contains(stranger), "node {n}: {err}");
    }
}
