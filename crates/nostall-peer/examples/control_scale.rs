//! How node 0's control plane holds up under a large job: one real service, in a process
//! of its own, and every other rank of the job simulated in this process over real
//! sockets (one TLS session per simulated node, as a `nostall node` process keeps one).
//!
//! ```text
//! cargo run --release -p nostall-peer --example control_scale -- NODES RANKS_PER_NODE [EPOCHS]
//! ```
//!
//! All nodes register at once (the rendezvous), then every rank of every node arrives at
//! each epoch's barrier at once. Node 0 answers each node's first rank and its own other
//! ranks; every other node's other ranks ask their node's service, on their own host: that
//! part of the join is the same on every node, at once, so it is measured for one node, a
//! real service in this process answering its other ranks over sessions of their own.
//!
//! It prints one JSON object: the time from the first registration sent to node 0 to the
//! last answer received (`join_s`), from a node's other ranks connecting to their node's
//! service to their last answer (`node_join_s`), each barrier's, and node 0's resident
//! memory before the job and at its peak.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nostall::cache::Capacity;
use nostall::plan::placement::Placement;
use nostall::storage::Memory;
use nostall_peer::control::generated::control_client::ControlClient;
use nostall_peer::control::{
    connect, decode_nodes, message_limit, BarrierRequest, RegisterRequest,
};
use nostall_peer::{NodeCache, Secret, Service, ServiceConfig};
use tonic::transport::Channel;

const SECRET: &[u8] = b"the secret of the control-plane scale run";
const FINGERPRINT: &[u8] = b"control-scale";
const WAIT: Duration = Duration::from_secs(600);

/// An error of the run; sent between tasks.
type Failure = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve") {
        return serve(args[1].parse()?, args[2].parse()?);
    }
    let usage = "usage: control_scale NODES RANKS_PER_NODE [EPOCHS]";
    let nodes: usize = args.first().ok_or(usage)?.parse()?;
    let ranks: usize = args.get(1).ok_or(usage)?.parse()?;
    let epochs: u64 = args.get(2).map_or(Ok(3), |e| e.parse())?;
    nostall::net::raise_descriptor_limit();

    let mut server = Command::new(std::env::current_exe()?)
        .args(["--serve", &nodes.to_string(), &ranks.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(server.stdout.take().ok_or("no stdout")?).lines();
    let addr = lines.next().ok_or("the service did not start")??;
    let rss_before = lines.next().ok_or("the service did not start")??;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(simulate(&addr, nodes, ranks, epochs))?;
    drop(server.stdin.take());
    let rss_peak = lines.next().ok_or("the service did not report")??;
    server.wait()?;
    println!(
        "{{\"nodes\": {nodes}, \"ranks_per_node\": {ranks}, \"ranks\": {}, {report}, \
         \"server_rss_kib_before\": {rss_before}, \"server_rss_kib_peak\": {rss_peak}}}",
        nodes * ranks
    );
    Ok(())
}

/// Every node registers through a session of its own, the last node's other ranks at its
/// service, then every rank meets at each epoch's barrier over its node's session: the
/// times, as JSON fields.
async fn simulate(addr: &str, nodes: usize, ranks: usize, epochs: u64) -> Result<String, Failure> {
    let tls = Secret::new(SECRET)?.identity()?.client;
    let connected = Instant::now();
    let mut sessions = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        sessions.push(connect(addr, &tls, WAIT).await?);
    }
    let connecting = connected.elapsed().as_secs_f64();

    // Every node's first rank, and node 0's other ranks: what node 0 answers.
    let callers = (0..nodes)
        .map(|node| (node, 0))
        .chain((1..ranks).map(|r| (0, r)));
    let started = Instant::now();
    let registrations: Vec<_> = callers
        .map(|(node, local_rank)| {
            let session = sessions[node].clone();
            let addr = format!("127.0.0.1:{}", 10_000 + node % 50_000);
            let data_port = if local_rank == 0 {
                node % 60_000 + 1
            } else {
                0
            };
            tokio::spawn(register(session, nodes, node, addr, data_port as u16))
        })
        .collect();
    let mut lists = Vec::with_capacity(registrations.len());
    for registration in registrations {
        lists.push(registration.await??);
    }
    let join = started.elapsed().as_secs_f64();
    let node_join = node_join(&tls, nodes, ranks, lists.swap_remove(nodes - 1)).await?;

    let mut barriers = Vec::new();
    for epoch in 0..epochs {
        let started = Instant::now();
        let arrivals: Vec<_> = (0..nodes * ranks)
            .map(|rank| {
                let mut session = sessions[rank / ranks].clone();
                let request = BarrierRequest {
                    node: (rank / ranks) as u32,
                    epoch,
                    local_rank: (rank % ranks) as u32,
                };
                tokio::spawn(async move { session.barrier(request).await })
            })
            .collect();
        for arrival in arrivals {
            assert!(arrival.await??.into_inner().complete);
        }
        barriers.push(format!("{:.3}", started.elapsed().as_secs_f64()));
    }
    Ok(format!(
        "\"connect_s\": {connecting:.3}, \"join_s\": {join:.3}, \"node_join_s\": \
         {node_join:.3}, \"barrier_s\": [{}]",
        barriers.join(", ")
    ))
}

/// One rank's registration of node `node` at `addr` (its data port, or 0 from a node's
/// other ranks) over `session`: the node list it was answered with, read as a node reads
/// it.
async fn register(
    session: ControlClient<Channel>,
    nodes: usize,
    node: usize,
    addr: String,
    data_port: u16,
) -> Result<Bytes, Failure> {
    let mut session = session.max_decoding_message_size(message_limit(nodes));
    let request = RegisterRequest {
        node: node as u32,
        addr,
        fingerprint: FINGERPRINT.to_vec(),
        data_port: u32::from(data_port),
    };
    let list = session.register(request).await?.into_inner().nodes;
    assert_eq!(decode_nodes(&list, nodes)?.len(), nodes);
    Ok(list)
}

/// The last node's other ranks, each over a session of its own (each is a process),
/// registering at their node's service, which holds `list` (node 0's answer to the node's
/// first rank): seconds from the first connection to the last answer.
async fn node_join(
    tls: &Arc<rustls::ClientConfig>,
    nodes: usize,
    ranks: usize,
    list: Bytes,
) -> Result<f64, Failure> {
    let node = nodes - 1;
    let placement = Arc::new(Placement::new(0, nodes, Capacity::Fraction(1.0), &[1])?);
    let cache = Arc::new(NodeCache::new(
        node,
        placement,
        Arc::new(Memory::new(vec![vec![0]])),
    ));
    let mut config = ServiceConfig::new(node, nodes, "127.0.0.1:0".parse()?, Secret::new(SECRET)?);
    config.ranks_per_node = ranks;
    config.fingerprint = FINGERPRINT.to_vec();
    config.gather_timeout = WAIT;
    let service = Service::start(config, cache, 1)?;
    service.serve_node_list(list);
    let addr = service.control_addr().to_string();
    let started = Instant::now();
    let calls: Vec<_> = (1..ranks)
        .map(|_| {
            let (tls, addr) = (tls.clone(), addr.clone());
            tokio::spawn(async move {
                let session = connect(&addr, &tls, WAIT).await?;
                register(session, nodes, node, addr, 0).await
            })
        })
        .collect();
    for call in calls {
        call.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    // A service stops its own runtime: not from within another's.
    tokio::task::spawn_blocking(move || drop(service)).await?;
    Ok(seconds)
}

/// Node 0's service for a job of `nodes` × `ranks`: prints its address and its resident
/// memory, serves until standard input closes, then prints its peak resident memory.
fn serve(nodes: usize, ranks: usize) -> Result<(), Failure> {
    let placement = Arc::new(Placement::new(0, nodes, Capacity::Fraction(1.0), &[1])?);
    let cache = Arc::new(NodeCache::new(
        0,
        placement,
        Arc::new(Memory::new(vec![vec![0]])),
    ));
    let mut config = ServiceConfig::new(0, nodes, "127.0.0.1:0".parse()?, Secret::new(SECRET)?);
    config.ranks_per_node = ranks;
    config.fingerprint = FINGERPRINT.to_vec();
    config.max_response_bytes = 1 << 20;
    config.io_timeout = Duration::from_secs(30);
    config.gather_timeout = WAIT;
    let service = Service::start(config, cache, 1)?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", service.control_addr())?;
    writeln!(out, "{}", status_kib("VmRSS:")?)?;
    out.flush()?;
    std::io::stdin().read_line(&mut String::new())?;
    writeln!(out, "{}", status_kib("VmHWM:")?)?;
    Ok(())
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> Result<u64, Failure> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or("no such field")?;
    Ok(line.split_whitespace().nth(1).ok_or("malformed")?.parse()?)
}
