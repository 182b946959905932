//! How node 0's control plane holds up under a large job: one real service, in a process
//! of its own, and every other rank of the job simulated in this process over real
//! sockets (one TLS session per simulated node, as a `nostall node` process keeps one).
//!
//! ```text
//! cargo run --release -p nostall-peer --example control_scale -- NODES RANKS_PER_NODE [EPOCHS]
//! ```
//!
//! All nodes register at once (the rendezvous), then every rank of every node arrives at
//! each epoch's barrier at once. It prints one JSON object: the time from the first
//! registration sent to the last answer received, each barrier's, and node 0's resident
//! memory before the job and at its peak.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::cache::Capacity;
use nostall::plan::placement::Placement;
use nostall::storage::Memory;
use nostall_peer::control::{connect, BarrierRequest, RegisterRequest};
use nostall_peer::{NodeCache, Secret, Service, ServiceConfig};

const SECRET: &[u8] = b"the secret of the control-plane scale run";
const FINGERPRINT: &[u8] = b"control-scale";
const WAIT: Duration = Duration::from_secs(600);

fn main() -> Result<(), Box<dyn std::error::Error>> {
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

/// Every node registers through a session of its own, then every rank meets at each
/// epoch's barrier over its node's session: the times, as JSON fields.
async fn simulate(
    addr: &str,
    nodes: usize,
    ranks: usize,
    epochs: u64,
) -> Result<String, Box<dyn std::error::Error>> {
    let tls = Secret::new(SECRET)?.identity()?.client;
    let connected = Instant::now();
    let mut sessions = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        sessions.push(connect(addr, &tls, WAIT).await?);
    }
    let connecting = connected.elapsed().as_secs_f64();

    let started = Instant::now();
    let registrations: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(node, session)| {
            let limit = nostall_peer::control::message_limit(nodes);
            let mut session = session.clone().max_decoding_message_size(limit);
            let request = RegisterRequest {
                node: node as u32,
                addr: format!("127.0.0.1:{}", 10_000 + node % 50_000),
                fingerprint: FINGERPRINT.to_vec(),
                data_port: 1 + (node % 60_000) as u32,
            };
            tokio::spawn(async move { session.register(request).await })
        })
        .collect();
    for registration in registrations {
        let reply = registration.await??.into_inner();
        assert_eq!(reply.addrs.len(), nodes);
    }
    let join = started.elapsed().as_secs_f64();

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
        "\"connect_s\": {connecting:.3}, \"join_s\": {join:.3}, \"barrier_s\": [{}]",
        barriers.join(", ")
    ))
}

/// Node 0's service for a job of `nodes` × `ranks`: prints its address and its resident
/// memory, serves until standard input closes, then prints its peak resident memory.
fn serve(nodes: usize, ranks: usize) -> Result<(), Box<dyn std::error::Error>> {
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
fn status_kib(field: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or("no such field")?;
    Ok(line.split_whitespace().nth(1).ok_or("malformed")?.parse()?)
}
