//! Settings a launcher passes through the environment.
//!
//! `torchrun` (and `torch.distributed.launch`, and most cluster launchers that follow it)
//! start one process per rank and tell each its place in `RANK`, `WORLD_SIZE` and
//! `LOCAL_RANK`. [`Distributed::resolve`] combines them with what the caller gave
//! explicitly (which always wins), so a training script needs no sharding code: every
//! rank gets its shard of the plan, with the same number of batches.
//!
//! [`local_ranks`] tells `threads="auto"` how many ranks share the node's cores, and
//! [`LocalRanks`] lets them find each other to balance their threads.
//! [`metrics_addr`] does the same for the live metrics endpoint (`NOSTALL_METRICS_ADDR`),
//! so that a job can be watched without touching its script.

use crate::error::{Error, Result};

/// The cores this process may run on: its CPU affinity mask and, under a cgroup CPU quota,
/// the quota (Rust's `available_parallelism` reads both on Linux); 1 if unknown.
pub fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The ranks this node runs, as torchrun says (`LOCAL_WORLD_SIZE`); 1 when not given or
/// unreadable. The ranks of a node share its cores.
pub fn local_ranks() -> usize {
    std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// This process's place among the local ranks of a torchrun job, when the node runs
/// several: what the scheduler's node table (`sched/balance`) balances threads across.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalRanks {
    /// A name for the job on this node, the same in each of its ranks and different from
    /// other jobs': a hash of `TORCHELASTIC_RUN_ID`, `MASTER_ADDR`, `MASTER_PORT`,
    /// `TORCHELASTIC_RESTART_COUNT` and `GROUP_RANK`.
    pub job: u64,
    /// `LOCAL_RANK`.
    pub local_rank: usize,
    /// `LOCAL_WORLD_SIZE`, at least 2.
    pub local_world: usize,
}

impl LocalRanks {
    /// From the process environment; see [`LocalRanks::from_vars`].
    pub fn from_env() -> Option<LocalRanks> {
        LocalRanks::from_vars(|name| std::env::var(name).ok())
    }

    /// From the variables `var` looks up: `None` unless `LOCAL_WORLD_SIZE` is 2 or more
    /// and `LOCAL_RANK` and `MASTER_PORT` are set (a launcher that names no job gives the
    /// ranks no way to find each other).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<LocalRanks> {
        let number = |name: &str| var(name)?.trim().parse::<usize>().ok();
        let local_world = number("LOCAL_WORLD_SIZE").filter(|&n| n >= 2)?;
        let local_rank = number("LOCAL_RANK")?;
        var("MASTER_PORT")?;
        // FNV-1a over the variables, each ended by a zero byte: stable across processes.
        let mut job: u64 = 0xcbf2_9ce4_8422_2325;
        for name in [
            "TORCHELASTIC_RUN_ID",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TORCHELASTIC_RESTART_COUNT",
            "GROUP_RANK",
        ] {
            for byte in var(name).unwrap_or_default().bytes().chain([0]) {
                job = (job ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        Some(LocalRanks {
            job,
            local_rank,
            local_world,
        })
    }
}

/// The variable naming the address of the live metrics endpoint.
pub const METRICS_ADDR: &str = "NOSTALL_METRICS_ADDR";

/// Where to serve live metrics: `given` if any, else `NOSTALL_METRICS_ADDR` when set and
/// not empty, else nowhere.
pub fn metrics_addr(given: Option<&str>) -> Option<String> {
    given
        .map(str::to_owned)
        .or_else(|| std::env::var(METRICS_ADDR).ok())
        .filter(|addr| !addr.trim().is_empty())
}

/// This process's place among the ranks of a data-parallel job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distributed {
    /// The global rank, `0..world`.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
    /// The rank within this node (which GPU to use), `0` when not given.
    pub local_rank: usize,
}

impl Default for Distributed {
    /// A single process: rank 0 of 1.
    fn default() -> Distributed {
        Distributed {
            rank: 0,
            world: 1,
            local_rank: 0,
        }
    }
}

impl Distributed {
    /// Reads `RANK`, `WORLD_SIZE` and `LOCAL_RANK` from the process environment; see
    /// [`Distributed::resolve_with`].
    ///
    /// # Errors
    ///
    /// As [`Distributed::resolve_with`].
    pub fn resolve(rank: Option<usize>, world: Option<usize>) -> Result<Distributed> {
        Distributed::resolve_with(rank, world, |name| std::env::var(name).ok())
    }

    /// The rank and world size: each explicit argument wins over its variable
    /// (`RANK`, `WORLD_SIZE`, looked up with `var`); without either, rank 0 of 1.
    /// `LOCAL_RANK` is read when set, else it is the rank.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when a variable is not a whole number, or when the rank is not
    /// below the world size (the message says where each value came from).
    pub fn resolve_with(
        rank: Option<usize>,
        world: Option<usize>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Distributed> {
        let read = |name: &str| -> Result<Option<usize>> {
            match var(name) {
                None => Ok(None),
                Some(value) if value.trim().is_empty() => Ok(None),
                Some(value) => value.trim().parse().map(Some).map_err(|_| {
                    Error::Config(format!(
                        "environment variable {name}={value:?} is not a whole number"
                    ))
                }),
            }
        };
        let (rank_from, rank) = match rank {
            Some(r) => ("the rank argument", r),
            None => match read("RANK")? {
                Some(r) => ("RANK", r),
                None => ("the default", 0),
            },
        };
        let (world_from, world) = match world {
            Some(w) => ("the world_size argument", w),
            None => match read("WORLD_SIZE")? {
                Some(w) => ("WORLD_SIZE", w),
                None => ("the default", 1),
            },
        };
        if world == 0 {
            return Err(Error::Config(format!(
                "world size 0 (from {world_from}): it must be at least 1"
            )));
        }
        if rank >= world {
            return Err(Error::Config(format!(
                "rank {rank} (from {rank_from}) is out of range for world size {world} \
                 (from {world_from}); ranks are 0..{world}"
            )));
        }
        let local_rank = read("LOCAL_RANK")?.unwrap_or(rank);
        Ok(Distributed {
            rank,
            world,
            local_rank,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_to_one_process() {
        let d = Distributed::resolve_with(None, None, env(&[])).unwrap();
        assert_eq!(d, Distributed::default());
    }

    #[test]
    fn reads_the_launcher_variables() {
        let vars = [("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")];
        let d = Distributed::resolve_with(None, None, env(&vars)).unwrap();
        assert_eq!((d.rank, d.world, d.local_rank), (3, 4, 1));
    }

    #[test]
    fn explicit_arguments_win() {
        let vars = [("RANK", "3"), ("WORLD_SIZE", "4")];
        let d = Distributed::resolve_with(Some(0), Some(2), env(&vars)).unwrap();
        assert_eq!((d.rank, d.world, d.local_rank), (0, 2, 0));
    }

    #[test]
    fn local_ranks_of_one_job_share_a_name_that_other_jobs_do_not() {
        let rank = |local: &'static str, port: &'static str| {
            let vars: Vec<(&str, &str)> = vec![
                ("LOCAL_RANK", local),
                ("LOCAL_WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", port),
                ("TORCHELASTIC_RUN_ID", "none"),
            ];
            LocalRanks::from_vars(env(Box::leak(vars.into_boxed_slice())))
        };
        let (a, b) = (rank("0", "29500").unwrap(), rank("1", "29500").unwrap());
        assert_eq!((a.local_rank, b.local_rank, a.local_world), (0, 1, 2));
        assert_eq!(a.job, b.job);
        assert_ne!(a.job, rank("0", "29501").unwrap().job);
        // One local rank, or no job named: nothing to balance.
        assert_eq!(
            LocalRanks::from_vars(env(&[("LOCAL_WORLD_SIZE", "1")])),
            None
        );
        let no_port = [("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")];
        assert_eq!(LocalRanks::from_vars(env(&no_port)), None);
    }

    #[test]
    fn bad_values_are_config_errors_naming_the_variable() {
        let vars = [("RANK", "two")];
        let err = Distributed::resolve_with(None, None, env(&vars)).unwrap_err();
        assert!(err.to_string().contains("RANK=\"two\""), "{err}");
        let vars = [("RANK", "2"), ("WORLD_SIZE", "2")];
        let err = Distributed::resolve_with(None, None, env(&vars)).unwrap_err();
        assert!(err.to_string().contains("from RANK"), "{err}");
    }
}
