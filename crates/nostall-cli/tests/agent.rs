//! `nostall agent` as a process: it serves jobs, a second agent for the same socket
//! leaves at once instead of taking it over, and the local ranks of `nostall node` jobs
//! read their node of a partitioned cache through it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nostall::cache::Capacity;
use nostall::plan::placement::Placement;
use nostall::plan::EpochPlan;
use nostall::{LoaderConfig, Pipeline, Position};
use nostall_agent::{Client, Reading};

#[path = "../../nostall-peer/tests/common/mod.rs"]
mod common;

#[test]
fn the_agent_serves_a_job_and_a_second_one_for_its_socket_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
    let socket = dir.path().join("run/agent.sock");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args(["agent", "--idle", "600", "--socket"])
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let settings = nostall::loader::LoaderSettings::from_texts([
        ("batch_size", "8"),
        ("pipeline", "val"),
        ("image_size", "32"),
    ])
    .unwrap();
    let mut client = Client::attach_within(
        Duration::from_secs(60),
        &socket,
        &Reading::new(photos.to_string_lossy(), settings),
    )
    .unwrap();
    let mut at = Position::start_of(0);
    let mut samples = 0;
    while let Some(batch) = client.next(at).unwrap() {
        samples += batch.len();
        at = batch.position();
    }
    assert_eq!(samples as u64, client.attached().dataset_len);

    let second = Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args(["agent", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(second.status.success());
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("another agent"), "{said}");
    // The first still serves.
    assert!(client.next(Position::start_of(1)).unwrap().is_some());
    agent.kill().unwrap();
    agent.wait().unwrap();
}

/// `nostall agent` at `socket`, until killed, returned once it says it serves (a job
/// started before then finds no socket); the rest of what it says goes to `log`.
fn agent(socket: &Path, log: &Path) -> Child {
    let mut agent = Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args(["agent", "--idle", "600", "--socket"])
        .arg(socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(agent.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("nostall agent: serving") {
        line.clear();
        let read = said.read_line(&mut line).unwrap();
        assert!(
            read > 0,
            "the agent at {} left before serving",
            socket.display()
        );
    }
    let mut log = std::fs::File::create(log).unwrap();
    // Drained to the end: an agent writing to a closed pipe would fail.
    std::thread::spawn(move || std::io::copy(&mut said, &mut log));
    agent
}

/// Two nodes of two local ranks each, every rank a `nostall node --share auto` process
/// attached to its node's agent (a process each): each rank delivers exactly the samples
/// of its locality-aware plan, in order, and no byte of a node's part reaches its own
/// ranks over TCP.
#[test]
fn local_ranks_through_their_nodes_agents_deliver_their_plans_with_no_local_tcp() {
    const NODES: usize = 2;
    const RANKS: usize = 2;
    const BATCH: usize = 4;
    const EPOCHS: u64 = 2;
    let dir = tempfile::tempdir().unwrap();
    let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
    let sockets: Vec<_> = (0..NODES)
        .map(|n| dir.path().join(format!("node{n}/agent.sock")))
        .collect();
    let mut agents: Vec<Child> = sockets
        .iter()
        .enumerate()
        .map(|(n, s)| agent(s, &dir.path().join(format!("agent{n}.log"))))
        .collect();
    let peers = common::free_addrs(NODES).join(",");
    let ranks: Vec<Child> = (0..NODES * RANKS)
        .map(|g| {
            let (node, local) = (g / RANKS, g % RANKS);
            Command::new(env!("CARGO_BIN_EXE_nostall"))
                .arg("node")
                .arg(&photos)
                .args(["--node", &node.to_string(), "--peers", &peers])
                .args(["--local-rank", &local.to_string(), "--ranks-per-node"])
                .arg(RANKS.to_string())
                .args(["--share", "auto", "--epochs", &EPOCHS.to_string()])
                .args(["--batch-size", &BATCH.to_string(), "--size", "32"])
                .args(["--prep-threads", "1", "--cache-size", "30%"])
                .arg("--ids")
                .arg(dir.path().join(format!("ids{g}")))
                .arg("--json")
                .arg(dir.path().join(format!("rank{g}.jsonl")))
                .env("NOSTALL_AGENT_SOCKET", &sockets[node])
                .env("NOSTALL_PEER_SECRET", "the secret of the test job")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join(format!("rank{g}.log"))).unwrap())
                .spawn()
                .unwrap()
        })
        .collect();
    for (g, mut rank) in ranks.into_iter().enumerate() {
        let status = rank.wait().unwrap();
        let log = std::fs::read_to_string(dir.path().join(format!("rank{g}.log"))).unwrap();
        assert!(status.success(), "rank {g}:\n{log}");
    }
    for agent in &mut agents {
        agent.kill().unwrap();
        agent.wait().unwrap();
    }

    let (catalog, _) = nostall::Catalog::open(&photos, None, nostall::Modality::Image).unwrap();
    let sizes: Vec<u64> = (0..catalog.len() as u64)
        .map(|id| catalog.size(id))
        .collect();
    let placement = Placement::new(0, NODES, Capacity::Fraction(0.3), &sizes).unwrap();
    for g in 0..NODES * RANKS {
        let ids = std::fs::read_to_string(dir.path().join(format!("ids{g}"))).unwrap();
        for (epoch, line) in ids.lines().enumerate() {
            let got: Vec<u64> = line
                .split_once(':')
                .unwrap()
                .1
                .split_whitespace()
                .map(|id| id.parse().unwrap())
                .collect();
            let mut plan = LoaderConfig::new(Pipeline::imagenet_train(32)).plan;
            plan.rank = g;
            plan.world = NODES * RANKS;
            plan.batch_size = BATCH;
            let expected =
                EpochPlan::locality_aware(&plan, &placement, RANKS, catalog.len(), epoch as u64)
                    .unwrap();
            assert_eq!(got, expected.samples(), "rank {g}, epoch {epoch}");
        }
        let json = std::fs::read_to_string(dir.path().join(format!("rank{g}.jsonl"))).unwrap();
        assert_eq!(json.lines().count(), EPOCHS as usize);
        for line in json.lines() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(row["served_local_bytes"], 0, "rank {g}: {row}");
        }
    }
}
