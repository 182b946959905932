//! `nostall node [DATASET]`: one node of a data-parallel job whose nodes share a
//! partitioned cache (CoorDL) and plan locality-aware batches (Yang & Cong).
//!
//! The node runs its peer service, joins its peers, and then runs epochs of a preset
//! pipeline (`--preset`: ImageNet training by default, or audio) as one rank would,
//! feeding a simulated training step. A node starts each epoch as soon as it is done with
//! the last (its service serves its part of the cache all along); the nodes meet at node 0
//! only at the end, so that every service stays up while a peer may still read from it
//! (`--epoch-barrier` meets before each epoch too). Per epoch it prints and (with
//! `--json`) records throughput, stall, and where the bytes came from: storage, peers,
//! and what it served.
//! `--no-peers` runs the same rank with a cache of its own instead (the baseline);
//! `bench/testbed.sh` runs one per network namespace.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::cache::{CacheConfig, CacheFill, CachePolicy, Capacity};
use nostall::loader::LoaderBuilder;
use nostall::storage::Source;
use nostall::Position;
use nostall_agent::{JobBuilder, Share};
use nostall_peer::{Node, NodeConfig, Secret};

use crate::run::{loader_settings, on_error, parse_bytes, parsed, PipelineArgs};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The dataset: a directory of images, a directory of .tar shards, or
    /// s3://bucket/prefix, the same on every node. Default: nostall's built-in demo
    /// photographs.
    dataset: Option<String>,
    /// This node's index (default: from torchrun's RANK and LOCAL_WORLD_SIZE).
    #[arg(long)]
    node: Option<usize>,
    /// Every node's peer-service address, host:port, in node order, the same list on
    /// every node (default: NOSTALL_PEERS, else a rendezvous at MASTER_ADDR).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Run without peers: this rank of a job of `--world` ranks, with a cache of its own
    /// (the baseline partitioned caching is compared with).
    #[arg(long, requires = "world")]
    no_peers: bool,
    /// Ranks in the job, with --no-peers.
    #[arg(long)]
    world: Option<usize>,
    /// With --no-peers, fill the cache from storage before the first epoch, so that every
    /// epoch runs from a warm cache: a minio cache with the first samples of the dataset
    /// (all of them with --cache-size 100%), a frequency cache with its placement.
    #[arg(long, requires = "no_peers")]
    prefill: bool,
    /// With peers, keep the plain plan (each rank a fixed slice of every global batch)
    /// instead of locality-aware batches: CoorDL's partitioned caching alone, the baseline
    /// locality-aware loading is compared with.
    #[arg(long, conflicts_with = "no_peers")]
    plain: bool,
    /// Each node's cache: a share of the dataset (30%) or bytes (2GiB).
    #[arg(long, default_value = "30%", value_parser = parsed::<Capacity>)]
    cache_size: Capacity,
    /// With --no-peers, the cache's policy: minio, lookahead, frequency (NoPFS: the
    /// samples this rank reads most often over --epochs, read ahead) or lru.
    #[arg(long, default_value = "minio", value_parser = parsed::<CachePolicy>, requires = "no_peers")]
    cache_policy: CachePolicy,
    /// Epochs to run.
    #[arg(long, default_value_t = 3)]
    epochs: u64,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Prep (decode + transform) threads.
    #[arg(long, default_value_t = 2)]
    prep_threads: usize,
    /// Fetch threads (requests in flight to peers and storage).
    #[arg(long, default_value_t = 4)]
    fetch_threads: usize,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Shuffle and placement seed, the same on every node.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A simulated training step of this many milliseconds per batch.
    #[arg(long)]
    step_ms: Option<f64>,
    /// Skip and count bad samples instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Parquet: bytes for decoded pages, which sets how many are open at once (1GiB).
    #[arg(long, value_parser = parse_bytes)]
    group_memory: Option<u64>,
    /// Append one JSON object per epoch to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the delivered sample ids, one line per epoch (`EPOCH: ID ID ...`).
    #[arg(long)]
    ids: Option<PathBuf>,
    /// A peer request taking longer marks the peer down (milliseconds).
    #[arg(long, default_value_t = 5000)]
    peer_timeout_ms: u64,
    /// How long a peer stays marked down before it is tried again (milliseconds).
    #[arg(long, default_value_t = 30_000)]
    retry_after_ms: u64,
    /// How long node 0 waits for every node at a meeting (the end, and each epoch's
    /// start with --epoch-barrier) before it goes on without the missing ones
    /// (milliseconds).
    #[arg(long, default_value_t = 600_000)]
    barrier_timeout_ms: u64,
    /// Meet every node at node 0 before each epoch, not only at the end: each epoch then
    /// waits for the slowest node (as a job whose training steps synchronise would).
    /// Through the agent (`--share`) the nodes meet only at the end.
    #[arg(long, conflicts_with_all = ["no_peers", "share"])]
    epoch_barrier: bool,
    /// This process's rank within its node, with --peers (default 0).
    #[arg(long, requires = "peers", default_value_t = 0)]
    local_rank: usize,
    /// Ranks (processes) per node, with --peers (default 1).
    #[arg(long, requires = "peers", default_value_t = 1)]
    ranks_per_node: usize,
    /// Read through the node agent (`nostall agent`, at NOSTALL_AGENT_SOCKET or the
    /// default socket), in the group of every job reading the same stream (`auto`) or
    /// the one named: the agent joins the job for this node, runs its cache and service,
    /// and prepares every local rank's batches, which reach this process in shared memory
    /// (the node's part is not read over TCP). The byte counters are then the node's:
    /// local rank 0 reports them, the others report none.
    #[arg(long, conflicts_with_all = ["no_peers", "plain", "hold_before_epoch"])]
    share: Option<String>,
    /// A hook for tests: once every node has reached this epoch, wait for a line on
    /// standard input before reading any sample of it, so that a test can act (stop a
    /// peer) at a known point instead of after a guessed delay.
    #[arg(long, hide = true)]
    hold_before_epoch: Option<u64>,
}

type AnyError = Box<dyn std::error::Error>;

/// Byte counters read before and after each epoch.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    storage: u64,
    from_peers: u64,
    served: u64,
    /// Of `served`, to this node's own ranks (over TCP).
    served_local: u64,
    fallbacks: u64,
}

impl Counters {
    fn of_node(stats: &nostall_peer::NodeStats) -> Counters {
        let service = stats.service.as_ref();
        Counters {
            storage: stats.source.storage_bytes,
            from_peers: stats.source.peer_bytes,
            served: service.map_or(0, |s| s.served_bytes),
            served_local: service.map_or(0, |s| s.served_local_bytes),
            fallbacks: stats.source.fallbacks,
        }
    }
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, before: Counters) -> Counters {
        Counters {
            storage: self.storage - before.storage,
            from_peers: self.from_peers - before.from_peers,
            served: self.served - before.served,
            served_local: self.served_local - before.served_local,
            fallbacks: self.fallbacks - before.fallbacks,
        }
    }
}

/// The two ways the rank runs: with its node's peers, or alone with its own cache.
enum Mode {
    Peers(Box<Node>),
    Alone { storage: Arc<dyn Source> },
}

impl Mode {
    fn counters(&self) -> Counters {
        match self {
            Mode::Peers(node) => Counters::of_node(&node.stats()),
            Mode::Alone { storage } => Counters {
                storage: storage.stats().bytes,
                ..Counters::default()
            },
        }
    }
}

pub(crate) fn run(args: Args) -> Result<(), AnyError> {
    let location = match &args.dataset {
        Some(location) => location.clone(),
        None => nostall_demo::write(&nostall_demo::default_dir())?
            .display()
            .to_string(),
    };
    let mut settings = loader_settings(
        &args.pipeline,
        args.batch_size,
        args.prep_threads,
        args.fetch_threads,
        args.seed,
    );
    settings.on_error = on_error(args.skip_bad);
    settings.group_memory = args.group_memory;
    // Each epoch's bytes moved are counted between its start and end: an epoch started
    // ahead would count its reads in the previous one.
    settings.overlap_epochs = false;
    if args.no_peers {
        if args.prefill
            && ![CachePolicy::Minio, CachePolicy::Frequency].contains(&args.cache_policy)
        {
            return Err(
                "--prefill fills a minio cache, or reads a frequency cache's \
                 placement, before the first epoch: use it with --cache-policy minio or \
                 frequency"
                    .into(),
            );
        }
        settings.plan.rank = args.node.unwrap_or(0);
        settings.plan.world = args.world.expect("clap requires --world");
        settings.cache = CacheConfig::new(args.cache_policy, args.cache_size);
        settings.cache.planned_epochs = args.epochs;
        if args.prefill {
            settings.cache.fill = CacheFill::Before;
        }
    }
    let mut job = JobBuilder::new(LoaderBuilder::with_settings(&location, settings));
    let node_config = (!args.no_peers).then(|| node_config(&args)).transpose()?;
    if let Some(config) = &node_config {
        job.on_node(config.clone());
    }
    if args.plain {
        job.plain_plan();
    }
    if let (Some(share), Some(node)) = (&args.share, &node_config) {
        job.share(share.parse::<Share>()?);
        return through_agent(&args, job, node);
    }
    let job = job.start()?;
    let (loader, rank) = (job.loader, job.rank);
    let mode = match job.node {
        Some(node) => Mode::Peers(Box::new(node)),
        None => Mode::Alone {
            storage: job.storage,
        },
    };
    let making = Making {
        seconds: job.made_in.as_secs_f64(),
        storage: mode.counters().storage,
    };
    if args.prefill {
        let held = loader.cache_stats();
        eprintln!(
            "nostall node {rank}: filled the cache before the first epoch, {} samples ({:.1} \
             MB), in {:.1} s",
            held.entries,
            held.used as f64 / 1e6,
            making.seconds
        );
    }
    eprintln!(
        "nostall node {rank}: joined; {} samples, {} batches per epoch",
        loader.catalog().len(),
        loader.batches_per_epoch()
    );

    let mut report = Report::new(&args, rank)?;
    report.making = Some(making);
    for epoch in 0..args.epochs {
        let met = Instant::now();
        // (The test hook holds where every node has reached the epoch.)
        let meet = args.epoch_barrier || args.hold_before_epoch == Some(epoch);
        if let (Mode::Peers(node), true) = (&mode, meet) {
            if !node.barrier(epoch)? {
                eprintln!("nostall node {rank}: not every node reached epoch {epoch}; going on");
            }
        }
        let barrier = met.elapsed().as_secs_f64();
        if args.hold_before_epoch == Some(epoch) {
            eprintln!("nostall node {rank}: holding before epoch {epoch}");
            std::io::stdin().read_line(&mut String::new())?;
        }
        eprintln!("nostall node {rank}: epoch {epoch} started");
        let before = mode.counters();
        let started = Instant::now();
        let mut row = Row {
            barrier,
            ..Row::default()
        };
        let mut batches = loader.epoch(epoch)?;
        for batch in batches.by_ref() {
            let batch = batch?;
            row.delivered(batch.ids(), report.ids.is_some());
            args.step();
        }
        let stats = batches.stats();
        row.seconds = started.elapsed().as_secs_f64();
        row.stall = stats.wait.as_secs_f64();
        row.moved = mode.counters() - before;
        row.skipped = stats.skipped_total();
        row.cache = Some((stats.cache.hits, stats.cache.misses));
        report.epoch(epoch, &row)?;
    }
    // The service stays up until every node has finished: a peer still in its last
    // epoch reads this node's part from it. This node's own work is done, so a meeting
    // that fails (node 0 gave up on a dead node and left) is only reported.
    if let Mode::Peers(node) = &mode {
        let met = Instant::now();
        match node.finish() {
            Ok(true) => eprintln!(
                "nostall node {rank}: every node finished ({:.2} s after this one)",
                met.elapsed().as_secs_f64()
            ),
            Ok(false) => eprintln!("nostall node {rank}: not every node finished; stopping"),
            Err(e) => eprintln!("nostall node {rank}: final barrier: {e}; stopping"),
        }
    }
    Ok(())
}

/// How this node takes part in the job, from the arguments and the environment.
fn node_config(args: &Args) -> Result<NodeConfig, AnyError> {
    let mut node_config = if args.peers.is_empty() {
        NodeConfig::from_env(args.cache_size)?
    } else {
        let node = args
            .node
            .ok_or("--peers needs --node (this node's index)")?;
        let mut c = NodeConfig::new(
            node,
            args.peers.clone(),
            args.cache_size,
            Secret::from_env()?,
        );
        c.local_rank = args.local_rank;
        c.ranks_per_node = args.ranks_per_node;
        c
    };
    node_config.seed = args.seed;
    node_config.timeouts.request = Duration::from_millis(args.peer_timeout_ms);
    node_config.timeouts.retry_after = Duration::from_millis(args.retry_after_ms);
    node_config.gather_timeout = Duration::from_millis(args.barrier_timeout_ms);
    Ok(node_config)
}

/// The epochs of this rank read through the node agent, which joins the job for this
/// node (`--share`).
fn through_agent(args: &Args, mut job: JobBuilder, node: &NodeConfig) -> Result<(), AnyError> {
    let rank = node.rank();
    let reports_node = node.local_rank == 0;
    let mut client = job.attach()?.expect("the job shares");
    eprintln!(
        "nostall node {rank}: attached to the agent's group {}; {} samples, {} batches per \
         epoch",
        client.attached().group,
        client.attached().dataset_len,
        client.attached().batches_per_epoch
    );
    let mut report = Report::new(args, rank)?;
    let mut node_counters = Counters::default();
    for epoch in 0..args.epochs {
        eprintln!("nostall node {rank}: epoch {epoch} started");
        let before = node_counters;
        let started = Instant::now();
        let mut row = Row::default();
        let mut at = Position::start_of(epoch);
        loop {
            let asked = Instant::now();
            let Some(batch) = client.next(at)? else {
                break;
            };
            row.stall += asked.elapsed().as_secs_f64();
            at = batch.position();
            row.delivered(batch.ids(), report.ids.is_some());
            if let Some(stats) = batch.node() {
                node_counters = Counters::of_node(&stats);
            }
            drop(batch); // released to the agent, as a training step done with it would
            args.step();
        }
        row.seconds = started.elapsed().as_secs_f64();
        if reports_node {
            row.moved = node_counters - before;
        }
        report.epoch(epoch, &row)?;
    }
    Ok(())
}

impl Args {
    /// The simulated training step after each batch, if any.
    fn step(&self) {
        if let Some(ms) = self.step_ms {
            std::thread::sleep(Duration::from_secs_f64(ms / 1e3));
        }
    }
}

/// One epoch of one rank, as reported.
#[derive(Default)]
struct Row {
    images: u64,
    ids: String,
    seconds: f64,
    stall: f64,
    moved: Counters,
    skipped: u64,
    /// The loader's own cache's hits and misses, where it has one.
    cache: Option<(u64, u64)>,
    /// Seconds waited at node 0's barrier before the epoch.
    barrier: f64,
}

impl Row {
    fn delivered(&mut self, ids: &[u64], keep_ids: bool) {
        self.images += ids.len() as u64;
        if keep_ids {
            for id in ids {
                let _ = write!(self.ids, " {id}");
            }
        }
    }
}

/// What making the loader took, before its first epoch: reading a frequency cache's
/// placement when asked to, for one.
#[derive(Clone, Copy, Default)]
struct Making {
    seconds: f64,
    /// Bytes read from storage meanwhile.
    storage: u64,
}

/// Where the epochs are reported: a table on standard output, and the files asked for.
struct Report {
    rank: usize,
    json: Option<std::fs::File>,
    ids: Option<std::fs::File>,
    /// Reported with the first epoch, then taken.
    making: Option<Making>,
}

impl Report {
    fn new(args: &Args, rank: usize) -> Result<Report, AnyError> {
        let json = args
            .json
            .as_ref()
            .map(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
            })
            .transpose()?;
        let ids = args.ids.as_ref().map(std::fs::File::create).transpose()?;
        println!(
            "{:>5} {:>5} {:>10} {:>9} {:>8} {:>12} {:>11} {:>11} {:>9}",
            "node",
            "epoch",
            "images",
            "images/s",
            "stall s",
            "storage MB",
            "peers MB",
            "served MB",
            "fallback"
        );
        Ok(Report {
            rank,
            json,
            ids,
            making: None,
        })
    }

    fn epoch(&mut self, epoch: u64, row: &Row) -> Result<(), AnyError> {
        let rank = self.rank;
        let (images, seconds, moved) = (row.images, row.seconds, row.moved);
        let mb = |bytes: u64| bytes as f64 / 1e6;
        println!(
            "{rank:>5} {epoch:>5} {images:>10} {:>9.0} {:>8.2} {:>12.2} {:>11.2} {:>11.2} {:>9}",
            images as f64 / seconds,
            row.stall,
            mb(moved.storage),
            mb(moved.from_peers),
            mb(moved.served),
            moved.fallbacks
        );
        if let Some(out) = self.ids.as_mut() {
            writeln!(out, "{epoch}:{}", row.ids)?;
        }
        if let Some(out) = self.json.as_mut() {
            let (hits, misses) = row.cache.unwrap_or_default();
            let making = self.making.take().unwrap_or_default();
            // When the epoch ended, on the clock every host shares: a job's epoch ends
            // with its last rank's, whatever each rank waited for before it.
            let ended = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            writeln!(
                out,
                "{{\"epoch\":{epoch},\"node\":{rank},\"images\":{images},\"seconds\":{seconds:.4},\
                 \"images_per_s\":{:.2},\"storage_bytes\":{},\"peer_bytes\":{},\
                 \"served_bytes\":{},\"served_local_bytes\":{},\"fallbacks\":{},\"stall_s\":{:.4},\
                 \"skipped\":{},\"cache_hits\":{hits},\"cache_misses\":{misses},\
                 \"ended_s\":{ended:.4},\"made_s\":{:.4},\"made_storage_bytes\":{},\
                 \"barrier_s\":{:.4}}}",
                images as f64 / seconds,
                moved.storage,
                moved.from_peers,
                moved.served,
                moved.served_local,
                moved.fallbacks,
                row.stall,
                row.skipped,
                making.seconds,
                making.storage,
                row.barrier,
            )?;
        }
        Ok(())
    }
}
