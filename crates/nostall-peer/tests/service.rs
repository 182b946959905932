//! The peer service over real sockets on loopback: several nodes in one process, each with
//! its own service, talking TCP and gRPC to each other.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use nostall::cache::Capacity;
use nostall::clock::Clock;
use nostall::storage::{Memory, Source};
use nostall::Catalog;
use nostall_peer::auth::Identity;
use nostall_peer::control::generated::control_client::ControlClient;
use nostall_peer::control::HelloRequest;
use nostall_peer::{Node, NodeConfig, Secret, Timeouts};

mod common;
use common::{bytes, catalog, free_addrs, storage, until_listening, SAMPLES};

/// A runtime for calling a service's control plane by hand.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn secret() -> Secret {
    Secret::new(b"a secret of the test job").unwrap()
}

/// How long a peer that went away stays marked down.
const RETRY_AFTER: Duration = Duration::from_millis(300);

fn config(node: usize, peers: &[String], capacity: f64) -> NodeConfig {
    let mut config = NodeConfig::new(node, peers.to_vec(), Capacity::Fraction(capacity), secret());
    config.timeouts = Timeouts::new(Duration::from_secs(2), RETRY_AFTER, Duration::from_secs(20));
    config
}

/// Starts every node at once (each waits for the others while joining).
fn join_all(peers: &[String], capacity: f64, storages: &[Arc<Memory>]) -> Vec<Node> {
    join_all_over(&catalog(), peers, capacity, storages, &Clock::real())
}

/// [`join_all`] over `catalog`, every node reading `clock`.
fn join_all_over(
    catalog: &Arc<Catalog>,
    peers: &[String],
    capacity: f64,
    storages: &[Arc<Memory>],
    clock: &Clock,
) -> Vec<Node> {
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..peers.len())
            .map(|n| {
                let catalog = catalog.clone();
                let storage: Arc<dyn Source> = storages[n].clone();
                let mut config = config(n, peers, capacity);
                config.clock = clock.clone();
                s.spawn(move || Node::join(&catalog, storage, config).unwrap())
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    })
}

#[test]
fn nodes_share_one_partitioned_cache_and_storage_reads_each_sample_once() {
    let peers = free_addrs(3);
    let storages: Vec<Arc<Memory>> = (0..3).map(|_| storage()).collect();
    let nodes = join_all(&peers, 0.4, &storages);
    let storage_reads = || storages.iter().map(|s| s.stats().requests).sum::<u64>();

    for pass in 0..2 {
        std::thread::scope(|s| {
            for node in &nodes {
                s.spawn(move || {
                    let source = node.source();
                    let mut out = Vec::new();
                    for id in 0..SAMPLES {
                        source.read(id, &mut out).unwrap();
                        assert_eq!(out, bytes(id), "sample {id}");
                    }
                });
            }
        });
        // Together the nodes hold everything (3 × 40%), so storage served each sample
        // once in the whole job, in the first pass, whoever asked first.
        assert_eq!(storage_reads(), SAMPLES, "after pass {pass}");
    }
    for node in &nodes {
        let stats = node.stats();
        let held = node.placement().held_samples(node.rank()) as u64;
        assert_eq!(stats.cache.unwrap().entries, held);
        // Each pass: the node's own part locally, the rest from peers.
        assert_eq!(stats.source.local_samples, 2 * held);
        assert_eq!(stats.source.peer_samples, 2 * (SAMPLES - held));
        assert_eq!(stats.source.fallbacks, 0);
    }
    let served: u64 = nodes
        .iter()
        .map(|n| n.stats().service.unwrap().served_samples)
        .sum();
    assert_eq!(
        served,
        2 * 2 * SAMPLES,
        "each sample served to the two other nodes, twice"
    );
    for epoch in 0..2 {
        std::thread::scope(|s| {
            for node in &nodes {
                s.spawn(move || assert!(node.barrier(epoch).unwrap()));
            }
        });
    }
}

#[test]
fn a_peer_that_goes_away_is_replaced_by_storage_and_used_again_when_back() {
    let peers = free_addrs(2);
    let storages: Vec<Arc<Memory>> = (0..2).map(|_| storage()).collect();
    // Node 0's retry delay runs on a clock the test moves.
    let clock = Clock::manual();
    let mut nodes = join_all_over(&catalog(), &peers, 0.5, &storages, &clock);
    let theirs: Vec<u64> = (0..SAMPLES)
        .filter(|&id| nodes[0].placement().holder(id) == Some(1))
        .collect();
    assert!(!theirs.is_empty());

    drop(nodes.pop()); // node 1 stops: its service closes every connection
    let source = nodes[0].source();
    let mut out = Vec::new();
    for &id in &theirs {
        source.read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id), "sample {id} must come from storage intact");
    }
    let stats = source.breakdown();
    assert_eq!(stats.fallbacks, theirs.len() as u64);
    assert!(stats.peer_downs >= 1);
    assert_eq!(storages[0].stats().requests, theirs.len() as u64);

    // Node 1 restarts (new data port); while node 0's retry delay runs, node 1 is left
    // alone; once it has passed, node 0 uses it again.
    let restarted = Node::join(&catalog(), storages[1].clone(), config(1, &peers, 0.5)).unwrap();
    source.read(theirs[0], &mut out).unwrap();
    assert_eq!(
        source.breakdown().fallbacks,
        theirs.len() as u64 + 1,
        "still marked down"
    );
    clock.advance(RETRY_AFTER);
    for &id in &theirs {
        source.read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id));
    }
    let after = source.breakdown();
    assert!(after.peer_samples >= theirs.len() as u64 - 1, "{after:?}");
    assert_eq!(
        restarted.stats().service.unwrap().served_samples,
        after.peer_samples
    );
}

const SECRET: &[u8] = b"a secret of the test job";

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A raw data-plane connection made with `secret`'s identity (the protocol of
/// `nostall_peer::wire`, written out here as a conformance check): the TLS stream, or the
/// handshake's error.
fn connect(data: SocketAddr, secret: &[u8]) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(data).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let client = Secret::new(secret).unwrap().identity().unwrap().client;
    let conn = rustls::ClientConnection::new(client, Identity::server_name()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    // TLS 1.3: the server judges the client's certificate after the client has finished;
    // its verdict comes with the first answer.
    let mut hello = b"NSTL\x02".to_vec();
    hello.extend_from_slice(&0u32.to_be_bytes());
    tls.write_all(&hello)?;
    let (status, _) = answer(&mut tls)?;
    assert_eq!(status, 0);
    Ok(tls)
}

fn answer(stream: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0; 5];
    stream.read_exact(&mut head)?;
    let mut payload = vec![0; u32::from_be_bytes(head[1..].try_into().unwrap()) as usize];
    stream.read_exact(&mut payload)?;
    Ok((head[0], payload))
}

fn fetch(stream: &mut Tls, id: u64) -> (u8, Vec<u8>) {
    let mut frame = 9u32.to_be_bytes().to_vec();
    frame.push(1);
    frame.extend_from_slice(&id.to_be_bytes());
    stream.write_all(&frame).unwrap();
    answer(stream).unwrap()
}

#[test]
fn bad_clients_are_refused_with_a_logged_reason_and_others_still_served() {
    let peers = free_addrs(2);
    let storages: Vec<Arc<Memory>> = (0..2).map(|_| storage()).collect();
    let nodes = join_all(&peers, 0.5, &storages);
    let service = nodes[1].service().unwrap();
    let data = service.data_addr();
    let held = |id: u64| nodes[0].placement().holder(id) == Some(1);
    let theirs = (0..SAMPLES).find(|&id| held(id)).unwrap();
    let not_theirs = (0..SAMPLES).find(|&id| !held(id)).unwrap();

    // A client without the secret: refused at the TLS handshake.
    assert!(connect(data, b"not the secret of this job").is_err());
    // Nor does one in clear get anything.
    let mut plain = TcpStream::connect(data).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain.write_all(b"NSTL\x02\0\0\0\0").unwrap();
    assert!(answer(&mut plain).is_err());

    // The control plane without the secret: in clear, or with another job's identity.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let hello = || HelloRequest {
            node: 0,
            fingerprint: Vec::new(),
        };
        if let Ok(mut client) = ControlClient::connect(format!("http://{}", peers[1])).await {
            assert!(client.hello(hello()).await.is_err());
        }
        let other = Secret::new(b"not the secret of this job").unwrap();
        let tls = other.identity().unwrap().client;
        if let Ok(mut client) =
            nostall_peer::control::connect(&peers[1], &tls, Duration::from_secs(5)).await
        {
            assert!(client.hello(hello()).await.is_err());
        }
    });

    // With the secret: an unknown id and a sample held elsewhere are refused, and the
    // connection goes on serving.
    let mut stream = connect(data, SECRET).unwrap();
    assert_eq!(fetch(&mut stream, SAMPLES + 5).0, 1, "UnknownId");
    assert_eq!(fetch(&mut stream, not_theirs).0, 2, "NotHeld");
    let (status, payload) = fetch(&mut stream, theirs);
    assert_eq!(status, 0);
    assert_eq!(payload, bytes(theirs));

    // An oversized request: refused, and that connection closed.
    let mut frame = 100_000u32.to_be_bytes().to_vec();
    frame.extend_from_slice(&[1; 64]);
    stream.write_all(&frame).unwrap();
    let (status, reason) = answer(&mut stream).unwrap();
    let reason = String::from_utf8_lossy(&reason);
    assert_eq!(status, 5, "BadRequest");
    assert!(reason.contains("over the limit"), "{reason}");
    assert!(answer(&mut stream).is_err(), "the connection is closed");

    let stats = service.stats();
    for kind in ["unauthorized", "unknown-id", "not-held", "bad-request"] {
        assert!(
            stats.rejected.contains_key(kind),
            "{kind} not counted: {stats:?}"
        );
    }
    // Both planes: TLS clients of another job, and clients in clear.
    assert!(stats.rejected["unauthorized"] >= 3, "{stats:?}");
    let reasons: Vec<&str> = stats.recent.iter().map(|r| r.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.contains("no TLS handshake")),
        "{reasons:?}"
    );
    assert!(reasons
        .iter()
        .any(|r| r.contains(&format!("no sample {}", SAMPLES + 5))));

    // The service kept serving the real peer all along.
    let source = nodes[0].source();
    let mut out = Vec::new();
    for id in (0..SAMPLES).filter(|&id| held(id)) {
        source.read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id));
    }
    assert_eq!(source.breakdown().fallbacks, 0);
}

#[test]
fn a_peer_answering_with_bytes_the_catalog_does_not_know_is_caught() {
    // Node 1's storage holds other bytes than the catalog says (damage, another dataset,
    // or a forger): node 0 must not take them, and must read those samples from storage.
    let peers = free_addrs(2);
    let forged = Arc::new(Memory::new(
        (0..SAMPLES)
            .map(|id| [bytes(id), b"forged".to_vec()].concat())
            .collect(),
    ));
    let storages = vec![storage(), forged];
    let nodes = join_all(&peers, 0.5, &storages);
    let theirs: Vec<u64> = (0..SAMPLES)
        .filter(|&id| nodes[0].placement().holder(id) == Some(1))
        .collect();
    let source = nodes[0].source();
    let mut out = Vec::new();
    for &id in &theirs {
        source.read(id, &mut out).unwrap();
        assert_eq!(
            out,
            bytes(id),
            "sample {id}: the catalog's bytes, from storage"
        );
    }
    let stats = source.breakdown();
    assert!(stats.peer_mismatches >= 1, "{stats:?}");
    assert_eq!(stats.fallbacks, theirs.len() as u64);
    assert_eq!(stats.peer_samples, stats.peer_mismatches);
}

#[test]
fn a_node_registers_once_and_only_its_own_address() {
    use nostall_peer::control::RegisterRequest;
    let peers = free_addrs(2);
    let storages: Vec<Arc<Memory>> = (0..2).map(|_| storage()).collect();
    let nodes = join_all(&peers, 0.5, &storages);
    let runtime = runtime();
    let tls = secret().identity().unwrap().client;
    let fingerprint = nostall_peer::fingerprint(&catalog(), nodes[0].placement());
    let register = |node: u32, addr: &str| {
        let (rendezvous, addr, tls) = (peers[0].clone(), addr.to_string(), tls.clone());
        let fingerprint = fingerprint.clone();
        async move {
            let timeout = Duration::from_secs(5);
            let mut client = nostall_peer::control::connect(&rendezvous, &tls, timeout)
                .await
                .unwrap();
            let request = RegisterRequest {
                node,
                addr,
                fingerprint,
                data_port: 4000,
            };
            client.register(request).await
        }
    };
    runtime.block_on(async {
        // Two processes claim node 1: whichever lands first waits for node 0 (which never
        // registers in this test); the other is refused at once, naming the conflict.
        let first = register(1, "127.0.0.1:4001");
        let second = register(1, "127.0.0.1:4002");
        let refused = tokio::select! {
            answer = first => answer.unwrap_err(),
            answer = second => answer.unwrap_err(),
        };
        assert_eq!(refused.code(), tonic::Code::AlreadyExists, "{refused:?}");
        assert!(
            refused.message().contains("same RANK"),
            "{}",
            refused.message()
        );
        // A node may register only the address it calls from.
        let status = register(0, "127.0.0.2:4003").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        // And only with the job's catalog and placement.
        let mut client = nostall_peer::control::connect(&peers[0], &tls, Duration::from_secs(5))
            .await
            .unwrap();
        let other = RegisterRequest {
            node: 0,
            addr: "127.0.0.1:4004".into(),
            fingerprint: vec![0; 32],
            data_port: 4000,
        };
        let status = client.register(other).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains("different catalog"), "{status:?}");
    });
    let stats = nodes[0].service().unwrap().stats();
    assert_eq!(stats.rejected["duplicate"], 1);
    assert!(stats.rejected["mismatch"] >= 1);
}

/// A node's other ranks take the node list from their node's service, on their own host,
/// so node 0 answers one rank per node (and its own), not every rank of the job; where a
/// node's port is the system's pick, its other ranks cannot know it, and ask node 0.
#[test]
fn a_nodes_other_ranks_join_at_their_node_and_no_one_else_does() {
    use nostall_peer::control::RegisterRequest;
    let master = free_addrs(1).remove(0);
    let addrs = [master, free_addrs(1).remove(0), "127.0.0.1:0".into()];
    let catalog = catalog();
    let ranks: Vec<(usize, usize)> = (0..3).flat_map(|n| [(n, 0), (n, 1)]).collect();
    let nodes: Vec<Node> = std::thread::scope(|s| {
        let joins: Vec<_> = ranks
            .iter()
            .map(|&(n, local_rank)| {
                let (catalog, addrs) = (catalog.clone(), &addrs);
                s.spawn(move || {
                    let mut c = config(n, &[], 0.4);
                    c.nodes = addrs.len();
                    c.ranks_per_node = 2;
                    c.local_rank = local_rank;
                    c.membership = nostall_peer::Membership::Rendezvous {
                        at: addrs[0].clone(),
                        own: addrs[n].clone(),
                    };
                    Node::join(&catalog, storage(), c).unwrap()
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let first = |n: usize| nodes[2 * n].service().unwrap();
    for node in &nodes {
        assert_eq!(node.peers(), nodes[0].peers());
    }
    assert_eq!(nodes[0].peers()[1], addrs[1]);
    assert_eq!(nodes[0].peers()[2], first(2).control_addr().to_string());
    // Node 0 holds sessions from its own two ranks, the other nodes' first ranks and node
    // 2's other rank; node 1 from its other rank alone.
    assert_eq!(first(0).stats().control_sessions, 5);
    assert_eq!(first(1).stats().control_sessions, 1);
    assert_eq!(first(2).stats().control_sessions, 0);
    // Node 1's other rank reads every sample: its node's part from its node's service,
    // the rest from the others, at the data planes its node's list gave.
    let mut out = Vec::new();
    for id in 0..SAMPLES {
        nodes[3].source().read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id), "sample {id}");
    }
    assert_eq!(nodes[3].stats().source.fallbacks, 0);

    // Node 1 answers no one but its own other ranks.
    let runtime = runtime();
    let tls = secret().identity().unwrap().client;
    let fingerprint = nostall_peer::fingerprint(&catalog, nodes[0].placement());
    runtime.block_on(async {
        let mut client = nostall_peer::control::connect(&addrs[1], &tls, Duration::from_secs(5))
            .await
            .unwrap();
        for (node, data_port) in [(0, 0), (1, 4000)] {
            let request = RegisterRequest {
                node,
                addr: "127.0.0.1:4001".into(),
                fingerprint: fingerprint.clone(),
                data_port,
            };
            let status = client.register(request).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
            assert!(
                status.message().contains("registers at node 0"),
                "{status:?}"
            );
        }
    });
    assert_eq!(first(1).stats().rejected["mismatch"], 2);
}

/// With two ranks per node, the barrier waits for every rank: one rank of each node is
/// not enough (the barrier times out incomplete), both ranks of both nodes are. So a
/// node's first rank, which runs its service, stays until its node's other ranks are done
/// too.
#[test]
fn the_barrier_waits_for_every_rank_of_every_node() {
    // A short gather for the barrier that must time out; the default (minutes) for the
    // one that must complete, however slowly its calls arrive.
    let meet = |gather: Option<Duration>, local_ranks: &[usize]| -> Vec<bool> {
        let nodes = two_nodes_of_two_ranks(gather);
        std::thread::scope(|s| {
            let calls: Vec<_> = nodes
                .iter()
                .flat_map(|node| local_ranks.iter().map(move |&r| (node, r)))
                .map(|(node, r)| s.spawn(move || node.barrier_for(0, r).unwrap()))
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        })
    };
    let short = Some(Duration::from_millis(300));
    assert_eq!(
        meet(short, &[0]),
        [false, false],
        "local rank 1 of each node is missing"
    );
    assert_eq!(meet(None, &[0, 1]), [true; 4]);
    let nodes = two_nodes_of_two_ranks(short);
    assert!(
        nodes[0].barrier_for(1, 2).is_err(),
        "a local rank out of range"
    );
}

/// A job of two nodes with two ranks each, joined as their first ranks.
fn two_nodes_of_two_ranks(gather: Option<Duration>) -> Vec<Node> {
    let peers = free_addrs(2);
    let catalog = catalog();
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..2)
            .map(|n| {
                let (catalog, peers) = (catalog.clone(), &peers);
                s.spawn(move || {
                    let mut c = config(n, peers, 0.6);
                    c.ranks_per_node = 2;
                    if let Some(gather) = gather {
                        c.gather_timeout = gather;
                    }
                    Node::join(&catalog, storage(), c).unwrap()
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    })
}

/// More nodes than node 0 has places for connections in their handshake, joining at the
/// rendezvous all at once as torchrun starts them: every node learns every node's data
/// plane from the one registration (no greetings), meets the others at each epoch's
/// barrier, and reads the others' parts. Node 0 holds one control connection per node,
/// whatever the number of calls. (Before, registrations held a place each while they
/// waited: past 64 nodes none could finish.)
#[test]
fn a_job_of_more_nodes_than_control_places_joins_and_meets_every_epoch() {
    const NODES: usize = nostall_peer::MAX_CONTROL_CONNECTIONS + 32;
    // Node 0 where the rendezvous is; the others on ports the system picks.
    let master = free_addrs(1).remove(0);
    let addrs: Vec<String> = (0..NODES)
        .map(|n| {
            if n == 0 {
                master.clone()
            } else {
                "127.0.0.1:0".into()
            }
        })
        .collect();
    let catalog = catalog();
    let nodes: Vec<Node> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..NODES)
            .map(|n| {
                let (catalog, addrs) = (catalog.clone(), &addrs);
                s.spawn(move || {
                    let mut c = config(n, &[], 1.0 / NODES as f64 + 0.01);
                    c.nodes = NODES;
                    c.membership = nostall_peer::Membership::Rendezvous {
                        at: addrs[0].clone(),
                        own: addrs[n].clone(),
                    };
                    // However slowly 288 nodes start on a loaded machine.
                    c.timeouts.join = Duration::from_secs(600);
                    c.timeouts.request = Duration::from_secs(60);
                    let node = Node::join(&catalog, storage(), c).unwrap();
                    for epoch in 0..2 {
                        assert!(node.barrier(epoch).unwrap(), "node {n}, epoch {epoch}");
                    }
                    node
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for (n, node) in nodes.iter().enumerate() {
        let own = node.service().unwrap().control_addr().to_string();
        assert_eq!(node.peers()[n], own, "node {n}");
        assert_eq!(node.peers(), nodes[0].peers());
    }
    // Every sample, read by the last node: its own part, the rest from the others over
    // the data planes the rendezvous gave.
    let last = &nodes[NODES - 1];
    let mut out = Vec::new();
    for id in 0..SAMPLES {
        last.source().read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id), "sample {id}");
    }
    let stats = last.stats().source;
    assert_eq!(stats.fallbacks, 0, "{stats:?}");
    assert!(stats.peer_samples > 0, "{stats:?}");
    let service = nodes[0].service().unwrap().stats();
    assert!(
        service.control_sessions <= NODES,
        "one control connection per node at most: {service:?}"
    );
    // Nodes sharing this host share one address: some of their connections may have
    // been over its share of handshakes, closed and made again. Nothing else was refused.
    let refused: Vec<_> = service
        .rejected
        .keys()
        .filter(|&&kind| kind != "too-many-handshakes")
        .collect();
    assert!(refused.is_empty(), "{:?}", service.rejected);
}

/// `n` silent connections to `to` from the local address `from` (loopback has every
/// 127.x.y.z): those that connected.
fn idle_connections_from(from: &str, to: &str, n: usize) -> Vec<TcpStream> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let to: SocketAddr = to.parse().unwrap();
    runtime.block_on(async {
        let mut held = Vec::new();
        for _ in 0..n {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
            let connecting = socket.connect(to);
            if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(1), connecting).await {
                held.push(stream.into_std().unwrap());
            }
        }
        held
    })
}

#[test]
fn strangers_at_four_addresses_cannot_hold_up_a_join() {
    // Four addresses, each holding its whole share of node 0's control handshakes,
    // silent, while three nodes join: their connections must find a place (node 0 closes
    // a silent handshake only after its request timeout, here longer than the join's).
    let master = free_addrs(1).remove(0);
    let addrs = [master.clone(), "127.0.0.1:0".into(), "127.0.0.1:0".into()];
    let catalog = catalog();
    let join = |n: usize| {
        let mut c = config(n, &[], 0.5);
        c.nodes = addrs.len();
        c.membership = nostall_peer::Membership::Rendezvous {
            at: addrs[0].clone(),
            own: addrs[n].clone(),
        };
        c.timeouts.join = Duration::from_secs(30);
        c.timeouts.request = Duration::from_secs(120);
        Node::join(&catalog, storage(), c)
    };
    std::thread::scope(|s| {
        let first = s.spawn(|| join(0));
        // Node 0 listens before it registers, and cannot finish without the others.
        until_listening(&master, Duration::from_secs(60));
        let strangers: Vec<TcpStream> = (2..6)
            .flat_map(|a| {
                idle_connections_from(
                    &format!("127.0.0.{a}"),
                    &master,
                    nostall_peer::MAX_CONTROL_HANDSHAKES_PER_ADDRESS,
                )
            })
            .collect();
        assert_eq!(
            strangers.len(),
            4 * nostall_peer::MAX_CONTROL_HANDSHAKES_PER_ADDRESS
        );
        let others: Vec<_> = (1..3).map(|n| s.spawn(move || join(n))).collect();
        let mut nodes = vec![first.join().unwrap().expect("node 0 joins")];
        for (n, other) in others.into_iter().enumerate() {
            nodes.push(
                other
                    .join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("node {}: {e}", n + 1)),
            );
        }
        let stats = nodes[0].service().unwrap().stats();
        assert!(stats.control_handshakes >= strangers.len(), "{stats:?}");
        drop(strangers);
    });
}

#[test]
fn samples_read_in_groups_are_placed_a_group_to_a_node_and_served_by_estimate() {
    // As a Parquet dataset: pages of 10 samples, each sample's size its group's mean.
    let groups = vec![10u32; SAMPLES as usize / 10];
    let samples = (0..SAMPLES).map(|id| {
        let group = id / 10 * 10;
        let mean = (group..group + 10)
            .map(|i| bytes(i).len() as u64)
            .sum::<u64>()
            / 10;
        (format!("s{id:04}.jpg"), None, mean)
    });
    let catalog = Catalog::from_samples(
        "memory://test",
        nostall::Modality::Image,
        Vec::new(),
        samples,
    )
    .unwrap()
    .with_groups(groups)
    .unwrap()
    .with_estimated_sizes();
    let peers = free_addrs(2);
    let storages: Vec<Arc<Memory>> = (0..2).map(|_| storage()).collect();
    let nodes = join_all_over(&Arc::new(catalog), &peers, 0.5, &storages, &Clock::real());
    let placement = nodes[0].placement();
    for group in 0..SAMPLES / 10 {
        let holder = placement.holder(group * 10);
        assert!(
            (group * 10..group * 10 + 10).all(|id| placement.holder(id) == holder),
            "group {group} split"
        );
    }
    // Node 1's samples come from node 1, whatever their exact sizes.
    let source = nodes[0].source();
    let theirs: Vec<u64> = (0..SAMPLES)
        .filter(|&id| placement.holder(id) == Some(1))
        .collect();
    assert!(!theirs.is_empty());
    let mut out = Vec::new();
    for &id in &theirs {
        source.read(id, &mut out).unwrap();
        assert_eq!(out, bytes(id));
    }
    let stats = source.breakdown();
    assert_eq!(
        (stats.peer_samples, stats.fallbacks),
        (theirs.len() as u64, 0)
    );
}
