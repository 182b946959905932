//! `nostall node` as real processes on loopback: three nodes share a partitioned cache
//! over their peer services (framed TCP and gRPC), plan locality-aware batches, and one
//! of them is killed mid-epoch.
//!
//! The oracle is the library's own plan: each rank must deliver exactly the samples that
//! [`EpochPlan::locality_aware`] (or the plain [`EpochPlan::new`]) gives it, in order.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::cache::Capacity;
use nostall::plan::placement::Placement;
use nostall::plan::EpochPlan;
use nostall::prep::image::codec::{encode_jpeg, EncodePixels};
use nostall::{Catalog, LoaderConfig, Pipeline, SampleId};

#[path = "../../nostall-peer/tests/common/mod.rs"]
mod common;
#[path = "../../nostall/tests/common/mod.rs"]
mod fixtures;
use common::{free_addrs, idle_connections, raise_descriptor_limit, until_listening};

const NODES: usize = 3;
const SAMPLES: usize = 1200;
const BATCH: usize = 64;
const CACHE: f64 = 0.4;
const EPOCHS: u64 = 2;

/// `SAMPLES` small JPEGs of assorted sizes in four classes, indexed once here so that the
/// nodes, started together, all load the same index instead of racing to write it.
fn dataset(root: &Path) -> Arc<Catalog> {
    for i in 0..SAMPLES {
        let dir = root.join(format!("class{}", i % 4));
        std::fs::create_dir_all(&dir).unwrap();
        let (w, h) = [(64, 48), (48, 64), (80, 60), (56, 56)][i % 4];
        let pixels: Vec<u8> = (0..w * h * 3)
            .map(|p| ((p * 7 + i * 13) % 251) as u8)
            .collect();
        let jpeg = encode_jpeg(&pixels, w as u32, h as u32, EncodePixels::Rgb, 90, false).unwrap();
        std::fs::write(dir.join(format!("img{i:04}.jpg")), jpeg).unwrap();
    }
    Arc::new(
        Catalog::open(root, None, nostall::Modality::Image)
            .unwrap()
            .0,
    )
}

/// One run of the job: where each node writes its ids and epochs.
struct Job {
    out: PathBuf,
    children: Vec<Child>,
    /// Each node's control address.
    peers: Vec<String>,
}

impl Job {
    /// Starts every node of the job over `data`, with `extra` arguments for all.
    fn start(data: &Path, out: &Path, extra: &[&str]) -> Job {
        Job::start_each(data, out, |_| extra.to_vec(), None)
    }

    /// Starts every node of the job over `data`, with `extra(node)` arguments for each,
    /// and at most `files` open descriptors each if given (`ulimit -n`).
    fn start_each<'a>(
        data: &Path,
        out: &Path,
        extra: impl Fn(usize) -> Vec<&'a str>,
        files: Option<u64>,
    ) -> Job {
        std::fs::create_dir_all(out).unwrap();
        let addrs = free_addrs(NODES);
        let peers = addrs.join(",");
        let children = (0..NODES)
            .map(|node| {
                let mut command = Command::new(env!("CARGO_BIN_EXE_nostall"));
                if let Some(files) = files {
                    // SAFETY: setrlimit is async-signal-safe and touches only the child.
                    unsafe {
                        command.pre_exec(move || {
                            let limit = libc::rlimit {
                                rlim_cur: files,
                                rlim_max: files,
                            };
                            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                                0 => Ok(()),
                                _ => Err(std::io::Error::last_os_error()),
                            }
                        });
                    }
                }
                command
                    .arg("node")
                    .arg(data)
                    .args(["--node", &node.to_string(), "--peers", &peers])
                    .args(["--epochs", &EPOCHS.to_string()])
                    .args(["--batch-size", &BATCH.to_string()])
                    .args(["--cache-size", &format!("{}%", CACHE * 100.0)])
                    .args([
                        "--size",
                        "32",
                        "--prep-threads",
                        "1",
                        "--fetch-threads",
                        "2",
                    ])
                    .args(["--peer-timeout-ms", "2000", "--retry-after-ms", "300"])
                    .arg("--ids")
                    .arg(out.join(format!("ids{node}")))
                    .arg("--json")
                    .arg(out.join(format!("node{node}.jsonl")))
                    .args(extra(node))
                    .env("NOSTALL_PEER_SECRET", "the secret of the test job")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(out.join(format!("node{node}.log"))).unwrap())
                    .spawn()
                    .expect("the nostall binary runs")
            })
            .collect();
        Job {
            out: out.to_path_buf(),
            children,
            peers: addrs,
        }
    }

    /// Waits (up to 60 s) until node `node` has written `line` on its standard error.
    fn wait_for(&self, node: usize, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.log(node).contains(line) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("node {node} never wrote {line:?}:\n{}", self.log(node));
    }

    /// What node `node` wrote on its standard error so far.
    fn log(&self, node: usize) -> String {
        std::fs::read_to_string(self.out.join(format!("node{node}.log"))).unwrap_or_default()
    }

    /// Waits for the nodes other than `killed`; each must succeed (a failure shows every
    /// failed node's log: the first to fail is not always the first node).
    fn finish(mut self, killed: Option<usize>) -> Job {
        let mut failed = String::new();
        for node in 0..self.children.len() {
            let status = self.children[node].wait().unwrap();
            if Some(node) != killed && !status.success() {
                failed += &format!("node {node} failed ({status}):\n{}\n", self.log(node));
            }
        }
        assert!(failed.is_empty(), "{failed}");
        self
    }

    /// Node `node`'s delivered ids, per epoch.
    fn ids(&self, node: usize) -> Vec<Vec<SampleId>> {
        let text = std::fs::read_to_string(self.out.join(format!("ids{node}"))).unwrap();
        text.lines()
            .enumerate()
            .map(|(epoch, line)| {
                let (e, ids) = line.split_once(':').unwrap();
                assert_eq!(e, epoch.to_string());
                ids.split_whitespace()
                    .map(|id| id.parse().unwrap())
                    .collect()
            })
            .collect()
    }

    /// Every node's delivered ids in `epoch`, each checked against its rank's plan
    /// (locality-aware under `placement`).
    fn planned_ids(
        &self,
        catalog: &Catalog,
        placement: Option<&Placement>,
        epoch: usize,
    ) -> Vec<Vec<SampleId>> {
        let per_rank: Vec<Vec<SampleId>> = (0..NODES).map(|n| self.ids(n)[epoch].clone()).collect();
        for (rank, ids) in per_rank.iter().enumerate() {
            assert_eq!(
                ids,
                &planned(catalog, placement, rank, epoch as u64),
                "rank {rank}, epoch {epoch}: the plan's samples, in order"
            );
        }
        per_rank
    }

    /// Node `node`'s per-epoch record, as written by `--json`.
    fn epochs(&self, node: usize) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.out.join(format!("node{node}.jsonl")))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The sum over `nodes` of field `key` in epoch `epoch`.
    fn total(&self, nodes: &[usize], epoch: usize, key: &str) -> u64 {
        nodes
            .iter()
            .map(|&n| self.epochs(n)[epoch][key].as_u64().unwrap())
            .sum()
    }
}

/// The plan's samples of `rank` in `epoch`, as the CLI configures it.
fn planned(catalog: &Catalog, placement: Option<&Placement>, rank: usize, epoch: u64) -> Vec<u64> {
    let mut config = LoaderConfig::new(Pipeline::imagenet_train(32)).plan;
    config.rank = rank;
    config.world = NODES;
    config.batch_size = BATCH;
    let plan = match placement {
        Some(p) => EpochPlan::locality_aware(&config, p, 1, catalog.len(), epoch),
        None => EpochPlan::new(&config, catalog.len(), epoch),
    };
    plan.unwrap().samples().to_vec()
}

fn placement(catalog: &Catalog) -> Placement {
    let sizes: Vec<u64> = (0..catalog.len() as u64)
        .map(|id| catalog.size(id))
        .collect();
    Placement::in_groups(
        0,
        NODES,
        Capacity::Fraction(CACHE),
        &sizes,
        catalog.groups(),
    )
    .unwrap()
}

/// Global batch `k` of an epoch: batch `k` of every rank together, as a set.
fn global_batches(per_rank: &[Vec<SampleId>]) -> Vec<BTreeSet<SampleId>> {
    let count = per_rank[0].len().div_ceil(BATCH);
    (0..count)
        .map(|k| {
            per_rank
                .iter()
                .flat_map(|ids| ids.chunks(BATCH).nth(k).unwrap().iter().copied())
                .collect()
        })
        .collect()
}

#[test]
fn locality_aware_batches_keep_every_global_batch_and_move_a_tenth_of_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let catalog = dataset(&data);
    let placement = placement(&catalog);
    let all = [0, 1, 2];

    // The nodes meet before each epoch: what each epoch reads from storage and peers is
    // then that epoch's (without meetings a node ahead reads a sample of its part from
    // storage in its epoch 1 that a node behind has yet to read in its epoch 0).
    let plain = Job::start(
        &data,
        &dir.path().join("plain"),
        &["--plain", "--epoch-barrier"],
    )
    .finish(None);
    let local = Job::start(&data, &dir.path().join("locality"), &["--epoch-barrier"]).finish(None);

    for epoch in 0..EPOCHS as usize {
        let mut by_mode = Vec::new();
        for (job, placement) in [(&plain, None), (&local, Some(&placement))] {
            let per_rank = job.planned_ids(&catalog, placement, epoch);
            let every: Vec<SampleId> = per_rank.concat();
            let distinct: BTreeSet<SampleId> = every.iter().copied().collect();
            assert_eq!(every.len(), SAMPLES, "epoch {epoch}");
            assert_eq!(distinct.len(), SAMPLES, "each sample once in epoch {epoch}");
            by_mode.push(global_batches(&per_rank));
        }
        assert_eq!(
            by_mode[0], by_mode[1],
            "epoch {epoch}: every global batch holds the same samples"
        );
    }

    // Epoch 1: the caches are full (together 120% of the dataset), so storage is quiet,
    // and what crosses the network is what the plan sends there.
    for job in [&plain, &local] {
        assert_eq!(job.total(&all, 1, "storage_bytes"), 0);
        assert_eq!(job.total(&all, 1, "fallbacks"), 0);
    }
    let moved_plain = plain.total(&all, 1, "peer_bytes");
    let moved = local.total(&all, 1, "peer_bytes");
    assert!(moved_plain > 0);
    assert!(
        moved * 10 <= moved_plain,
        "locality-aware: {moved} bytes between nodes, plain: {moved_plain}"
    );
}

/// The photographs of `catalog` as a Hugging Face Parquet file at `file`, in pages of 10
/// rows (as `datasets` 5 writes them, with an offset index).
fn parquet_dataset(catalog: &Catalog, file: &Path) -> Arc<Catalog> {
    let rows: Vec<fixtures::Row> = (0..catalog.len() as u64)
        .map(|id| {
            let bytes = std::fs::read(catalog.path(id)).unwrap();
            (Some(bytes), i64::from(catalog.label(id).unwrap()))
        })
        .collect();
    let features = fixtures::features(catalog.classes());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    fixtures::write_paged(file, &rows, 200, 10, Some(features));
    let opened = nostall::dataset::open(
        file.to_str().unwrap(),
        nostall::storage::ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap();
    opened.catalog
}

#[test]
fn a_parquet_dataset_is_cached_a_page_to_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("parquet/train.parquet");
    let photos = dataset(&dir.path().join("images"));
    let catalog = parquet_dataset(&photos, &file);
    assert_eq!(catalog.groups(), vec![10; SAMPLES / 10].as_slice());
    let placement = placement(&catalog);
    let all = [0, 1, 2];
    let job = Job::start(&file, &dir.path().join("job"), &["--epoch-barrier"]).finish(None);
    let photo_bytes: u64 = (0..photos.len() as u64).map(|id| photos.size(id)).sum();
    for epoch in 0..EPOCHS as usize {
        let per_rank = job.planned_ids(&catalog, Some(&placement), epoch);
        let distinct: BTreeSet<SampleId> = per_rank.concat().into_iter().collect();
        assert_eq!(distinct.len(), SAMPLES, "each sample once in epoch {epoch}");
        // No answer refused for want of an exact size.
        assert_eq!(job.total(&all, epoch, "fallbacks"), 0, "epoch {epoch}");
    }
    // Storage served each sample at most once, in epoch 0 (the photographs' bytes at
    // most: no node read another's part), and the nodes' caches served epoch 1.
    let first = job.total(&all, 0, "storage_bytes");
    assert!(
        first <= photo_bytes && first > photo_bytes / 2,
        "{first} of {photo_bytes}"
    );
    assert_eq!(job.total(&all, 1, "storage_bytes"), 0);
    assert!(job.total(&all, 1, "peer_bytes") > 0);
}

/// The real clips of the engine's audio tests, copied `copies` times into two classes
/// and indexed once (as `dataset` does for images).
fn audio_dataset(root: &Path, copies: usize) -> Arc<Catalog> {
    let clips = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nostall/tests/audio");
    for entry in std::fs::read_dir(clips).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !nostall::Modality::Audio.accepts(&name) {
            continue;
        }
        let class = if name.ends_with(".wav") || name.ends_with(".flac") {
            "lossless"
        } else {
            "lossy"
        };
        std::fs::create_dir_all(root.join(class)).unwrap();
        for copy in 0..copies {
            std::fs::copy(&path, root.join(class).join(format!("{copy:03}-{name}"))).unwrap();
        }
    }
    Arc::new(
        Catalog::open(root, None, nostall::Modality::Audio)
            .unwrap()
            .0,
    )
}

#[test]
fn audio_loads_through_the_partitioned_cache_as_images_do() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let catalog = audio_dataset(&data, 30);
    let placement = placement(&catalog);
    let all = [0, 1, 2];
    // The nodes meet before each epoch, as the other tests that count an epoch's bytes
    // do: without the meeting a node that finished epoch 0 first asks a peer still in
    // its epoch 0 for clips the peer has not cached yet, which storage then serves.
    let job = Job::start(
        &data,
        &dir.path().join("m5"),
        &["--preset", "m5", "--epoch-barrier"],
    )
    .finish(None);
    for epoch in 0..EPOCHS as usize {
        let per_rank = job.planned_ids(&catalog, Some(&placement), epoch);
        let distinct: BTreeSet<SampleId> = per_rank.concat().into_iter().collect();
        assert_eq!(
            distinct.len(),
            catalog.len(),
            "each clip once in epoch {epoch}"
        );
    }
    // Epoch 1 from the nodes' caches and their peers', none from storage.
    assert_eq!(job.total(&all, 1, "storage_bytes"), 0);
    assert_eq!(job.total(&all, 1, "fallbacks"), 0);
    assert!(job.total(&all, 1, "peer_bytes") > 0);
}

#[test]
fn a_node_killed_mid_epoch_costs_the_others_nothing_and_storage_takes_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let catalog = dataset(&data);
    let placement = placement(&catalog);
    let survivors = [0, 1];

    // Node 2 is killed at a known point: inside its epoch 0, while the survivors hold
    // before reading any sample of theirs, so that all of node 2's share of their epoch 0
    // must come from storage (a kill after a guessed delay raced their read-ahead). The
    // nodes meet before each epoch (`--epoch-barrier`), and node 0 lets epoch 1 start
    // without the dead node after 1.5 s.
    let mut job = Job::start_each(
        &data,
        &dir.path().join("kill"),
        |node| {
            let mut extra = vec![
                "--step-ms",
                "200",
                "--barrier-timeout-ms",
                "1500",
                "--epoch-barrier",
            ];
            if survivors.contains(&node) {
                extra.extend(["--hold-before-epoch", "0"]);
            }
            extra
        },
        None,
    );
    for node in survivors {
        job.wait_for(node, "holding before epoch 0");
    }
    job.wait_for(2, "epoch 0 started");
    job.children[2].kill().unwrap();
    job.children[2].wait().unwrap();
    for node in survivors {
        let stdin = job.children[node].stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }
    let job = job.finish(Some(2));

    for &rank in &survivors {
        let ids = job.ids(rank);
        assert_eq!(
            ids.len(),
            EPOCHS as usize,
            "rank {rank} finished every epoch"
        );
        for (epoch, ids) in ids.iter().enumerate() {
            assert_eq!(
                ids,
                &planned(&catalog, Some(&placement), rank, epoch as u64),
                "rank {rank}, epoch {epoch}: each of its samples exactly once, in order"
            );
        }
    }
    // The dead node's part came from storage instead, in both epochs: every sample of
    // the survivors that node 2 holds.
    for epoch in 0..EPOCHS {
        let theirs: Vec<SampleId> = survivors
            .iter()
            .flat_map(|&rank| job.ids(rank)[epoch as usize].clone())
            .filter(|&id| placement.holder(id) == Some(2))
            .collect();
        assert!(!theirs.is_empty());
        assert_eq!(
            job.total(&survivors, epoch as usize, "fallbacks"),
            theirs.len() as u64,
            "epoch {epoch}"
        );
        let bytes: u64 = theirs.iter().map(|&id| catalog.size(id)).sum();
        assert!(job.total(&survivors, epoch as usize, "storage_bytes") >= bytes);
    }
    assert!(job.log(0).contains("not every node reached epoch 1"));
}

#[test]
fn two_thousand_idle_connections_to_node_0_cost_the_epoch_nothing() {
    // Each node may hold 1 024 descriptors; someone opens 2 000 connections to node 0's
    // control port, says nothing, and keeps them, while the nodes run their epochs.
    let (_dir, job) = run_flooded(|job| job.peers[0].parse().unwrap(), 2000, 64);
    let all: Vec<usize> = (0..NODES).collect();
    for epoch in 0..EPOCHS as usize {
        assert_eq!(job.total(&all, epoch, "fallbacks"), 0, "epoch {epoch}");
    }
}

/// Runs the job with each node limited to 1 024 descriptors while someone holds `n`
/// silent connections to node 0's address `target(job)` (more than `at_least` of them
/// made) from the first epoch on; checks that every rank delivers its plan and nothing is
/// skipped. The job, and the folder its records are in.
fn run_flooded(
    target: impl Fn(&Job) -> std::net::SocketAddr,
    n: usize,
    at_least: usize,
) -> (tempfile::TempDir, Job) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let catalog = dataset(&data);
    let placement = placement(&catalog);
    let mut job = Job::start_each(
        &data,
        &dir.path().join("flooded"),
        |_| vec!["--hold-before-epoch", "0"],
        Some(1024),
    );
    for node in 0..NODES {
        job.wait_for(node, "holding before epoch 0");
    }
    raise_descriptor_limit();
    let silent = idle_connections(target(&job), n);
    assert!(silent.len() > at_least, "{} connections made", silent.len());
    for child in &mut job.children {
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let job = job.finish(None);
    drop(silent);
    for rank in 0..NODES {
        for (epoch, ids) in job.ids(rank).iter().enumerate() {
            assert_eq!(
                ids,
                &planned(&catalog, Some(&placement), rank, epoch as u64),
                "rank {rank}, epoch {epoch}"
            );
        }
    }
    let all: Vec<usize> = (0..NODES).collect();
    for epoch in 0..EPOCHS as usize {
        assert_eq!(job.total(&all, epoch, "skipped"), 0, "epoch {epoch}");
    }
    (dir, job)
}

/// A job launched as torchrun launches one: twelve processes with `RANK`, `WORLD_SIZE`
/// and `MASTER_ADDR`, no peer list, node 0's service the rendezvous and the others on
/// ports the system picks; the last node starts only once node 0 is up and waiting. Every
/// node joins, runs its epochs without waiting for the others, meets them at the end and
/// exits 0, and each epoch delivers every
/// sample once across the job. (`bench/many_nodes.py` runs the same with 256 nodes.)
#[test]
fn a_job_launched_as_torchrun_launches_it_joins_at_the_rendezvous_with_a_late_node() {
    const RANKS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    dataset(&data);
    let out = dir.path().join("rendezvous");
    std::fs::create_dir_all(&out).unwrap();
    // MASTER_PORT + 1, where node 0's service listens, must be free.
    let master_port = free_addrs(1)[0]
        .rsplit_once(':')
        .unwrap()
        .1
        .parse::<u16>()
        .unwrap()
        - 1;
    let start = |rank: usize| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nostall"));
        command
            .arg("node")
            .arg(&data)
            .args(["--epochs", &EPOCHS.to_string(), "--batch-size", "50"])
            .args(["--cache-size", "10%", "--size", "32"])
            .args(["--prep-threads", "1", "--fetch-threads", "1"])
            .arg("--ids")
            .arg(out.join(format!("ids{rank}")))
            .env("NOSTALL_PEER_SECRET", "the secret of the test job")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", RANKS.to_string())
            .env("LOCAL_RANK", "0")
            .env("LOCAL_WORLD_SIZE", "1")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", master_port.to_string())
            .env_remove("NOSTALL_PEERS")
            .env_remove("NOSTALL_PEER_PORT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(out.join(format!("node{rank}.log"))).unwrap());
        if rank > 0 {
            command.env("NOSTALL_PEER_LISTEN", "127.0.0.1:0");
        } else {
            command.env_remove("NOSTALL_PEER_LISTEN");
        }
        command.spawn().expect("the nostall binary runs")
    };
    let mut children: Vec<Child> = (0..RANKS - 1).map(start).collect();
    // Node 0 listens before it registers, and cannot finish registering without the
    // last node: once it accepts connections, the last node is late.
    until_listening(
        &format!("127.0.0.1:{}", master_port + 1),
        Duration::from_secs(120),
    );
    children.push(start(RANKS - 1));
    for (rank, child) in children.iter_mut().enumerate() {
        let status = child.wait().unwrap();
        let log = std::fs::read_to_string(out.join(format!("node{rank}.log"))).unwrap();
        assert!(status.success(), "node {rank} failed:\n{log}");
        assert!(!log.contains("not every node"), "node {rank}:\n{log}");
    }
    for epoch in 0..EPOCHS as usize {
        let mut every = Vec::new();
        for rank in 0..RANKS {
            let text = std::fs::read_to_string(out.join(format!("ids{rank}"))).unwrap();
            let line = text.lines().nth(epoch).unwrap();
            every.extend(
                line.split_once(':')
                    .unwrap()
                    .1
                    .split_whitespace()
                    .map(|id| id.parse::<SampleId>().unwrap()),
            );
        }
        let distinct: BTreeSet<SampleId> = every.iter().copied().collect();
        assert_eq!(every.len(), SAMPLES, "epoch {epoch}");
        assert_eq!(distinct.len(), SAMPLES, "each sample once in epoch {epoch}");
    }
}

/// The TCP ports process `pid` listens on (its sockets in `/proc/net/tcp`).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields[3] == "0A";
            let port = u16::from_str_radix(fields[1].rsplit_once(':')?.1, 16).ok()?;
            (listening && inodes.contains(fields[9])).then_some(port)
        })
        .collect()
}

#[test]
fn a_thousand_silent_connections_to_a_data_port_cost_the_epoch_no_sample() {
    // Each node may hold 1 024 descriptors; someone opens 1 000 connections to node 0's
    // data port, says nothing, and keeps them, while the nodes run their epochs. (Node
    // 0's data plane refuses what its address's budget of handshakes cannot take: on
    // loopback the nodes share the silent client's address, so some reads may come from
    // storage instead; none is skipped.)
    let node_0_data = |job: &Job| {
        let control: u16 = job.peers[0].rsplit_once(':').unwrap().1.parse().unwrap();
        let ports = listening_ports(job.children[0].id());
        let data = ports
            .iter()
            .copied()
            .find(|&p| p != control)
            .unwrap_or_else(|| panic!("node 0 listens on {ports:?}"));
        format!("127.0.0.1:{data}").parse().unwrap()
    };
    run_flooded(node_0_data, 1000, 512);
}
