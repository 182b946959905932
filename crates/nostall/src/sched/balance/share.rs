//! The loader's side of load balance across a node's ranks ([`super`]): its
//! share of the node's prep threads, revised from its predicted demand. The share bounds
//! the workers that prepare (the role table holds the others in another role or idle).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{node_budget, settle, share, table_dir, NodeTable, REVISION_INTERVAL};
use crate::env::usable_cores;
use crate::env::LocalRanks;

/// This rank's share of its node's prep threads.
#[derive(Debug)]
pub(crate) struct Balance {
    table: NodeTable,
    budget: usize,
    /// The fewest and the most prep threads this rank runs.
    bounds: (usize, usize),
    /// The share now: prep threads allowed to work.
    threads: AtomicUsize,
    revised_at: Mutex<Instant>,
    /// The shortest time between two revisions.
    interval: Duration,
}

impl Balance {
    /// The balance of a loader that asks for one (`wanted`) and loads for one of several
    /// local ranks (`ranks`, its configuration's, else this process's under torchrun). A
    /// table that cannot be used is said on stderr, and the loader runs its even split.
    pub(crate) fn open(wanted: bool, ranks: Option<LocalRanks>) -> Option<Balance> {
        if !wanted {
            return None;
        }
        let ranks = ranks.or_else(LocalRanks::from_env)?;
        let table = NodeTable::open(&table_dir(), &ranks)
            .map_err(|why| eprintln!("nostall: {why}"))
            .ok()?;
        let (budget, floor) = node_budget(usable_cores(), ranks.local_world);
        Some(Balance::new(
            table,
            budget,
            (floor, budget),
            REVISION_INTERVAL,
        ))
    }

    /// A share of `budget` threads through `table`, between `bounds` (starting at the
    /// fewest), revised at most every `interval`.
    pub(crate) fn new(
        table: NodeTable,
        budget: usize,
        bounds: (usize, usize),
        interval: Duration,
    ) -> Balance {
        Balance {
            table,
            budget,
            bounds,
            threads: AtomicUsize::new(bounds.0.max(1)),
            revised_at: Mutex::new(Instant::now()),
            interval,
        }
    }

    /// The prep threads to start: as many as the share may grow to.
    pub(crate) fn ceiling(&self) -> usize {
        self.bounds.1
    }

    /// The prep threads allowed to work now.
    pub(crate) fn threads(&self) -> usize {
        self.threads.load(Ordering::Relaxed)
    }

    /// Says this rank's `demand` (if known) to the others and revises its share, at most
    /// every [`REVISION_INTERVAL`] (as configured): the new share when revised.
    pub(crate) fn revise(&self, demand: Option<f64>) -> Option<usize> {
        {
            let mut revised_at = self.revised_at.lock().unwrap_or_else(|e| e.into_inner());
            if revised_at.elapsed() < self.interval {
                return None;
            }
            *revised_at = Instant::now();
        }
        if let Some(demand) = demand {
            self.table.publish(demand);
        }
        let exact = share(&self.table.demands(), self.table.slot(), self.budget)?;
        let threads = settle(self.threads(), exact, self.bounds);
        self.threads.store(threads, Ordering::Relaxed);
        Some(threads)
    }
}

/// A rank's predicted demand: one-core seconds per iteration for the samples it reads
/// next (`upcoming`: their bytes and count), at the CPU time per byte its prep has taken
/// so far (`cpu` seconds over `bytes` read), plus `fetch` CPU seconds per read (where
/// they are read from: [`fetch_cpu_per_read`]), `batch_size` samples an iteration.
/// `None` until prep's cost is known.
pub(crate) fn demand(
    (cpu, bytes): (f64, u64),
    (upcoming_bytes, upcoming): (u64, usize),
    fetch: f64,
    batch_size: usize,
) -> Option<f64> {
    if bytes == 0 || cpu <= 0.0 || upcoming == 0 {
        return None;
    }
    let per_iteration = upcoming as f64 / batch_size.max(1) as f64;
    let prep = cpu / bytes as f64 * upcoming_bytes as f64 / per_iteration;
    Some(prep + fetch * batch_size as f64)
}

/// The fetch role's CPU seconds per read to come: each tier's CPU per read so far
/// (`spent`: seconds and reads, by [`Tier::index`](crate::storage::Tier::index)), weighted
/// by the tiers of the reads to come (`mix`: reads by tier). A tier not read yet costs
/// the mean over every read; with no mix known, the mean over every read.
pub(crate) fn fetch_cpu_per_read(spent: [(f64, u64); 3], mix: [u32; 3]) -> f64 {
    // Seconds per read, or `otherwise` before one.
    let per_read = |(seconds, reads): (f64, u64), otherwise: f64| {
        if reads == 0 {
            otherwise
        } else {
            seconds / reads as f64
        }
    };
    let all = spent.iter().fold((0.0, 0), |(s, r), &(seconds, reads)| {
        (s + seconds, r + reads)
    });
    let mean = per_read(all, 0.0);
    let coming: u32 = mix.iter().sum();
    if coming == 0 {
        return mean;
    }
    let weighted: f64 = spent
        .iter()
        .zip(mix)
        .map(|(&tier, n)| per_read(tier, mean) * f64::from(n))
        .sum();
    weighted / f64::from(coming)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_cpu_per_byte_times_the_bytes_coming_per_iteration() {
        // 1 ms of CPU per 100 kB so far; the next 128 samples weigh 25.6 MB, 2 batches.
        let d = demand((0.01, 1_000_000), (25_600_000, 128), 0.0, 64).unwrap();
        assert!((d - 0.128).abs() < 1e-12, "{d}");
        // Fetching at 0.5 ms of CPU a read adds 32 ms an iteration of 64.
        let d = demand((0.01, 1_000_000), (25_600_000, 128), 5e-4, 64).unwrap();
        assert!((d - 0.160).abs() < 1e-12, "{d}");
        assert_eq!(demand((0.0, 0), (1, 1), 5e-4, 64), None);
        assert_eq!(demand((0.01, 1_000), (0, 0), 5e-4, 64), None);
    }

    #[test]
    fn fetch_cpu_follows_where_the_reads_to_come_are_served_from() {
        // So far: 100 hits at 10 us of CPU each, 100 reads from storage at 1 ms each.
        let spent = [(100.0 * 1e-5, 100), (0.0, 0), (100.0 * 1e-3, 100)];
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(
            close(fetch_cpu_per_read(spent, [64, 0, 0]), 1e-5),
            "all hits"
        );
        assert!(
            close(fetch_cpu_per_read(spent, [0, 0, 64]), 1e-3),
            "all storage"
        );
        assert!(
            close(fetch_cpu_per_read(spent, [32, 0, 32]), 5.05e-4),
            "half and half"
        );
        // A tier not read yet (a peer's) costs the mean; no mix known, the mean.
        assert!(close(fetch_cpu_per_read(spent, [0, 64, 0]), 5.05e-4));
        assert!(close(fetch_cpu_per_read(spent, [0, 0, 0]), 5.05e-4));
        assert_eq!(fetch_cpu_per_read([(0.0, 0); 3], [0, 0, 0]), 0.0);
    }

    #[test]
    fn ranks_named_by_the_configuration_are_balanced_without_a_launcher() {
        // A name no other job has: the table is a file in /dev/shm.
        let job = crate::rng::digest_text(&format!("{:?}", std::time::SystemTime::now()));
        let ranks = Some(LocalRanks {
            job,
            local_rank: 1,
            local_world: 3,
        });
        let balance = Balance::open(true, ranks).expect("a balance for the named ranks");
        let (budget, floor) = node_budget(usable_cores(), 3);
        assert_eq!(balance.table.slot(), 1);
        assert_eq!((balance.budget, balance.bounds), (budget, (floor, budget)));
        assert!(Balance::open(false, ranks).is_none(), "balance off");
        let name = format!("{job:016x}.ranks");
        let tables = || {
            std::fs::read_dir(table_dir())
                .unwrap()
                .flatten()
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(&name))
                .count()
        };
        assert_eq!(tables(), 1);
        drop(balance);
        assert_eq!(tables(), 0, "the only rank removed it as it left");
    }
}
