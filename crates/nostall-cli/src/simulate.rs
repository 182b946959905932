//! `nostall simulate cache`: hit rates of cache policies over nostall's own shuffled
//! access stream, from [`nostall::cache::simulate`].

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};
use nostall::cache::simulate::{capacity_for, AccessStreams, SimPolicy, SimResult};
use nostall::Error;

/// What `simulate` can simulate.
#[derive(Subcommand)]
pub enum What {
    /// Hit rates of cache policies (LRU, Linux-like two-list, MinIO, Belady, NoPFS
    /// frequency) over the seeded shuffle, per worker cache.
    Cache(CacheArgs),
}

/// The policies, as the command line names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Policy {
    /// Least recently used.
    Lru,
    /// Linux page cache approximation (inactive + active list).
    TwoList,
    /// CoorDL MinIO: insert until full, never evict.
    Minio,
    /// Belady's optimum: evict the sample needed furthest in the future.
    Belady,
    /// NoPFS: each worker caches the samples it reads most often (prefetched).
    Frequency,
}

impl From<Policy> for SimPolicy {
    fn from(p: Policy) -> SimPolicy {
        match p {
            Policy::Lru => SimPolicy::Lru,
            Policy::TwoList => SimPolicy::TwoList,
            Policy::Minio => SimPolicy::Minio,
            Policy::Belady => SimPolicy::Belady,
            Policy::Frequency => SimPolicy::Frequency,
        }
    }
}

#[derive(clap::Args)]
pub struct CacheArgs {
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
        value_enum,
        value_delimiter = ',',
        default_value = "lru,two-list,minio,belady,frequency"
    )]
    policy: Vec<Policy>,
    /// Also write every epoch's counts to this CSV file
    /// (policy,cache_pct,epoch,hits,accesses,hit_rate).
    #[arg(long)]
    csv: Option<PathBuf>,
}

pub fn run(what: What) -> nostall::Result<()> {
    match what {
        What::Cache(args) => cache(args),
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
    for p in args.policy.iter().map(|&p| SimPolicy::from(p)) {
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
