//! `nostall simulate cache`: hit rates of cache policies over nostall's own shuffled
//! access stream, from [`nostall::sim::cache`]; `nostall simulate cluster`: bytes
//! from storage, between nodes and from local caches of a multi-node job over a
//! partitioned cache, from [`nostall::sim::cluster`]; `nostall simulate remote`: trainer
//! nodes fed by remote CPU hosts, from [`nostall::sim::remote`].

mod remote;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Subcommand;
use nostall::cache::Capacity;
use nostall::sim::cache::{capacity_for, AccessStreams, SimPolicy, SimResult};
use nostall::sim::cluster::{synthetic_sizes, Cluster, ClusterRun, Mode, NodeCounts, Tally};
use nostall::Error;

use crate::run::parsed;

/// What `simulate` can simulate.
#[derive(Subcommand)]
pub(crate) enum What {
    /// Hit rates of cache policies (LRU, Linux-like two-list, MinIO, Belady, the loader's
    /// lookahead, NoPFS frequency) over the seeded shuffle, per worker cache.
    Cache(CacheArgs),
    /// Bytes from storage, from peers and from local caches, per node and epoch, of a
    /// multi-node job: no cache, partitioned cache (CoorDL), and partitioned cache with
    /// locality-aware assignment (Yang & Cong).
    Cluster(ClusterArgs),
    /// Trainer nodes fed by remote CPU hosts (`remote=`): hosts needed per workload,
    /// bytes into each trainer node and out of each host, the control plane's cost at the
    /// job's scale against a central dispatcher, and one rank's client event by event
    /// (window, stragglers and hedging, a lost actor).
    Remote(Box<remote::RemoteArgs>),
}

/// A policy by the simulator's name for it, the possible values listed in `--help`.
fn sim_policy() -> impl TypedValueParser<Value = SimPolicy> {
    PossibleValuesParser::new(SimPolicy::ALL.map(SimPolicy::name)).map(|name| {
        name.parse::<SimPolicy>()
            .expect("one of the possible values")
    })
}

#[derive(clap::Args)]
pub(crate) struct CacheArgs {
    /// Samples in the dataset (all of equal size).
    #[arg(long, default_value_t = 20_000)]
    samples: usize,
    /// Cache sizes per worker, in percent of the dataset (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10,25,35,50,80")]
    cache: Vec<f64>,
    /// Epochs simulated (at least 2: the first, cold one is left out of the steady state).
    #[arg(long, default_value_t = 5)]
    epochs: u64,
    /// Workers (world size), each with its own cache; the plan splits every epoch among
    /// them as the loader does.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Policies (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lru,two-list,minio,belady,lookahead,frequency",
        value_parser = sim_policy()
    )]
    policy: Vec<SimPolicy>,
    /// Also write every epoch's counts to this CSV file
    /// (policy,cache_pct,epoch,hits,accesses,hit_rate).
    #[arg(long)]
    csv: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct ClusterArgs {
    /// Node counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    nodes: Vec<usize>,
    /// Ranks (GPUs) per node; they share the node's cache.
    #[arg(long, default_value_t = 1)]
    ranks_per_node: usize,
    /// Samples per batch on each rank (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "32,64,128")]
    batch: Vec<usize>,
    /// Samples in the dataset (default: ImageNet-1k's training set).
    #[arg(long, default_value_t = 1_281_167)]
    samples: usize,
    /// Mean sample size in kB (10^3 bytes).
    #[arg(long, default_value_t = 110.0)]
    sample_kb: f64,
    /// Sample sizes are uniform within this share of the mean on either side (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    size_spread: f64,
    /// Each node's cache: a share of the dataset (30%, 0.3) or bytes (32GiB). Default: a
    /// 1/nodes share, so that the nodes together hold the whole dataset.
    #[arg(long, value_parser = parsed::<Capacity>)]
    cache: Option<Capacity>,
    /// Epochs (at least 2: the first fills the caches and is left out of the table).
    #[arg(long, default_value_t = 3)]
    epochs: u64,
    /// Seed of the shuffle and the cache placement.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also write every epoch's counts to this CSV file (per node: min, mean, max).
    #[arg(long)]
    csv: Option<PathBuf>,
}

pub(crate) fn run(what: What) -> nostall::Result<()> {
    match what {
        What::Cache(args) => cache(args),
        What::Cluster(args) => cluster(args),
        What::Remote(args) => remote::run(*args),
    }
}

/// One simulated run: a node count, a batch size (`None` for the plain plan, whose
/// per-node reads do not depend on it) and a mode.
struct Row {
    nodes: usize,
    batch: Option<usize>,
    mode: Mode,
    /// Every epoch.
    epochs: Vec<Tally>,
    /// Epochs 1.. together.
    steady: Tally,
    /// All epochs together.
    overall: Tally,
}

fn cluster(args: ClusterArgs) -> nostall::Result<()> {
    if args.epochs < 2 {
        return Err(Error::Config(
            "simulate at least 2 epochs: the first fills the caches and is not part of the \
             steady state"
                .into(),
        ));
    }
    if !(0.001..1e9).contains(&args.sample_kb) || !(0.0..=1.0).contains(&args.size_spread) {
        return Err(Error::Config(
            "the mean sample size must be 0.001 kB to 1 TB, and the size spread in 0..1".into(),
        ));
    }
    if args.nodes.is_empty() || args.batch.is_empty() {
        return Err(Error::Config(
            "give at least one node count and one batch size".into(),
        ));
    }
    let start = Instant::now();
    let mean = (args.sample_kb * 1e3).round() as u64;
    let sizes = synthetic_sizes(args.samples, mean, args.size_spread, args.seed);
    let total: u64 = sizes.iter().sum();
    let mut rows = Vec::new();
    let mut push = |nodes, batch, run: ClusterRun| {
        rows.push(Row {
            nodes,
            batch,
            mode: run.mode,
            steady: run.steady_state().expect("at least 2 epochs"),
            overall: run.overall(),
            epochs: run.epochs,
        })
    };
    for &nodes in &args.nodes {
        let capacity = args
            .cache
            .unwrap_or(Capacity::Bytes(total.div_ceil(nodes.max(1) as u64)));
        let cluster = Cluster::new(
            args.seed,
            nodes,
            args.ranks_per_node,
            capacity,
            sizes.clone(),
        )?;
        // The plain plan gives each rank the same stream whatever the batch size.
        let plain = [Mode::NoCache, Mode::Partitioned];
        for run in cluster.run(&plain, args.batch[0], args.epochs)? {
            push(nodes, None, run);
        }
        for &batch in &args.batch {
            for run in cluster.run(&[Mode::LocalityAware], batch, args.epochs)? {
                push(nodes, Some(batch), run);
            }
        }
    }
    let find = |nodes: usize, mode: Mode, batch: Option<usize>| {
        rows.iter()
            .find(|r| r.nodes == nodes && r.mode == mode && r.batch == batch)
            .expect("every configuration ran")
    };

    println!(
        "{} samples, {} ({} mean, sizes within ±{:.0}%), {} rank{} per node, {} epochs, seed {}",
        args.samples,
        bytes(total as f64),
        bytes(mean as f64),
        100.0 * args.size_spread,
        args.ranks_per_node,
        if args.ranks_per_node == 1 { "" } else { "s" },
        args.epochs,
        args.seed
    );
    match args.cache {
        None => println!("each node caches 1/nodes of the dataset: together they hold all of it"),
        Some(c) => println!(
            "each node caches {} ({:.1}% of the dataset)",
            bytes(c.bytes(total) as f64),
            100.0 * c.bytes(total) as f64 / total.max(1) as f64
        ),
    }

    println!(
        "\nshare of the global batch moved between nodes by locality-aware balancing, % \
         (Yang & Cong: about 6.8/4.8/3.4 for batch 32/64/128):"
    );
    let mut table = format!("{:>7}", "batch");
    for nodes in &args.nodes {
        write!(table, " {:>7}", format!("{nodes}n")).expect("write to a String");
    }
    table.push('\n');
    for &batch in &args.batch {
        write!(table, "{batch:>7}").expect("write to a String");
        for &nodes in &args.nodes {
            let row = find(nodes, Mode::LocalityAware, Some(batch));
            let moved = 100.0 * row.overall.off_node_share();
            write!(table, " {moved:>7.2}").expect("write to a String");
        }
        table.push('\n');
    }
    print!("{table}");

    let steady = match args.epochs {
        2 => "epoch 1".to_string(),
        n => format!("epochs 1-{}", n - 1),
    };
    println!("\nper node and epoch, {steady} (epoch 0 fills the caches), min / mean / max:");
    let mut table = format!(
        "{:>5} {:>5} {:<11} {:>24} {:>24} {:>24} {:>17} {:>8} {:>9}\n",
        "nodes",
        "batch",
        "mode",
        "from storage",
        "from peers",
        "served to peers",
        "local hits %",
        "off-node",
        "peer/part"
    );
    for row in &rows {
        let t = &row.steady;
        let spread = |f: fn(&NodeCounts) -> u64| {
            let s = t.spread(f);
            format!("{} {} {}", bytes(s.min), bytes(s.mean), bytes(s.max))
        };
        let accesses = t.spread(|n| n.accesses).mean.max(1.0);
        let hits = t.spread(|n| n.local_hits);
        let pct = |x: f64| 100.0 * x / accesses;
        let partitioned = find(row.nodes, Mode::Partitioned, None).steady.total();
        let ratio = match row.mode {
            Mode::LocalityAware if partitioned.peer_bytes > 0 => format!(
                "{:.1}%",
                100.0 * t.total().peer_bytes as f64 / partitioned.peer_bytes as f64
            ),
            _ => "-".into(),
        };
        writeln!(
            table,
            "{:>5} {:>5} {:<11} {:>24} {:>24} {:>24} {:>17} {:>7.2}% {:>9}",
            row.nodes,
            row.batch.map_or("any".into(), |b| b.to_string()),
            row.mode.name(),
            spread(|n| n.storage_bytes),
            spread(|n| n.peer_bytes),
            spread(|n| n.served_bytes),
            format!(
                "{:.1} {:.1} {:.1}",
                pct(hits.min),
                pct(hits.mean),
                pct(hits.max)
            ),
            100.0 * t.off_node_share(),
            ratio
        )
        .expect("write to a String");
    }
    print!("{table}");
    println!(
        "off-node: samples a rank takes from another node's cache, % of the global batches; \
         peer/part: bytes between nodes, locality-aware over partitioned"
    );

    if let Some(path) = &args.csv {
        type Field = (&'static str, fn(&NodeCounts) -> u64);
        let fields: [Field; 4] = [
            ("storage_bytes", |n| n.storage_bytes),
            ("peer_bytes", |n| n.peer_bytes),
            ("served_bytes", |n| n.served_bytes),
            ("local_hits", |n| n.local_hits),
        ];
        let mut csv = String::from("nodes,ranks_per_node,batch,mode,epoch,off_node_share");
        for (name, _) in &fields {
            write!(csv, ",{name}_min,{name}_mean,{name}_max").expect("write to a String");
        }
        csv.push('\n');
        for row in &rows {
            for t in &row.epochs {
                write!(
                    csv,
                    "{},{},{},{},{},{:.6}",
                    row.nodes,
                    args.ranks_per_node,
                    row.batch.map_or(String::new(), |b| b.to_string()),
                    row.mode,
                    t.epochs.start,
                    t.off_node_share()
                )
                .expect("write to a String");
                for (_, field) in &fields {
                    let s = t.spread(field);
                    write!(csv, ",{:.0},{:.1},{:.0}", s.min, s.mean, s.max)
                        .expect("write to a String");
                }
                csv.push('\n');
            }
        }
        std::fs::write(path, csv).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        println!("per-epoch counts written to {}", path.display());
    }
    println!("simulated in {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Bytes with three significant digits and a decimal unit: `0B`, `950B`, `8.81kB`, `141GB`.
fn bytes(b: f64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut value = b;
    let mut unit = 0;
    while value >= 999.5 && unit + 1 < units.len() {
        value /= 1e3;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0}{}", units[0])
    } else if value >= 99.95 {
        format!("{value:.0}{}", units[unit])
    } else if value >= 9.995 {
        format!("{value:.1}{}", units[unit])
    } else {
        format!("{value:.2}{}", units[unit])
    }
}

fn cache(args: CacheArgs) -> nostall::Result<()> {
    if args.epochs < 2 {
        return Err(Error::Config(
            "simulate at least 2 epochs: the first (cold) one is not part of the steady state"
                .into(),
        ));
    }
    if let Some(bad) = args.cache.iter().find(|c| !(0.0..=100.0).contains(*c)) {
        return Err(Error::Config(format!(
            "cache size {bad}% is outside 0..100"
        )));
    }
    let mut policies: Vec<SimPolicy> = Vec::new();
    for &p in &args.policy {
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    let streams = AccessStreams::new(args.samples, args.epochs, args.workers, args.seed)?;
    // results[row][column]: cache size × policy.
    let results: Vec<Vec<SimResult>> = args
        .cache
        .iter()
        .map(|&pct| {
            let capacity = capacity_for(pct / 100.0, args.samples);
            policies.iter().map(|&p| streams.run(p, capacity)).collect()
        })
        .collect();

    println!(
        "steady-state hit rate (%), {} samples, {} epochs, {} worker{}, seed {}:",
        args.samples,
        args.epochs,
        args.workers,
        if args.workers == 1 { "" } else { "s" },
        args.seed
    );
    let mut table = format!("{:>7}", "cache %");
    for p in &policies {
        write!(table, " {:>9}", p.name()).expect("write to a String");
    }
    table.push('\n');
    for (pct, row) in args.cache.iter().zip(&results) {
        write!(table, "{:>7}", format_pct(*pct)).expect("write to a String");
        for r in row {
            let rate = r.steady_state().expect("at least 2 epochs");
            write!(table, " {:>9.1}", 100.0 * rate).expect("write to a String");
        }
        table.push('\n');
    }
    print!("{table}");
    println!(
        "steady state = hits/accesses over epochs 1..{} (epoch 0 is cold), all workers; \
         cache = floor(c*N) samples per worker",
        args.epochs - 1
    );

    if let Some(path) = &args.csv {
        let mut csv = String::from("policy,cache_pct,epoch,hits,accesses,hit_rate\n");
        for (pct, row) in args.cache.iter().zip(&results) {
            for r in row {
                for e in &r.epochs {
                    writeln!(
                        csv,
                        "{},{},{},{},{},{:.6}",
                        r.policy,
                        format_pct(*pct),
                        e.epoch,
                        e.hits,
                        e.accesses,
                        e.hit_rate()
                    )
                    .expect("write to a String");
                }
            }
        }
        std::fs::write(path, csv).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        println!("per-epoch counts written to {}", path.display());
    }
    Ok(())
}

/// A percentage without a needless fraction: `35`, `12.5`.
fn format_pct(pct: f64) -> String {
    if pct.fract() == 0.0 {
        format!("{pct:.0}")
    } else {
        format!("{pct}")
    }
}
