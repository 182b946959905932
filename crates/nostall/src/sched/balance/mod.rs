//! Load balance across the ranks of a node (Lobster): the local ranks of a torchrun job
//! share the node's prep threads in proportion to the work each has per iteration.
//!
//! In data-parallel training every rank waits for the slowest at each step's all-reduce.
//! Split evenly (each rank its cores ÷ local ranks), a rank whose batches cost more to
//! prepare (larger images, samples a cache does not hold) makes the whole job wait, while
//! the others' threads idle with their prefetch full. Balanced, each rank gets threads in
//! proportion to its predicted demand, so that their batches are ready together.
//!
//! **How the ranks agree.** A table of one record per local rank in a file under
//! `/dev/shm`, named after the user and the job (torchrun's run id, master address and
//! port, restart count, node rank): each rank writes its demand there, at most every
//! [`REVISION_INTERVAL`], and reads the others'. Every rank computes its own share from
//! the same records; nothing waits on another rank, so a rank that dies or stops
//! iterating only stops renewing its record, which is ignored once older than [`STALE`].
//! Each rank holds a shared `flock` on the file while it is open; the last to leave gets
//! the exclusive one, and removes the file.
//!
//! **Demand** is a rank's predicted one-core seconds per iteration: the CPU time its prep
//! workers spent per byte read (thread CPU time, so that workers sharing a core do not
//! look slower than they are) times the bytes of the samples its plan reads next, per
//! batch of them, plus what its fetch role spends per read from where those reads are
//! served (this process's cache, a peer, storage: a copy costs microseconds, an HTTP or
//! TLS read from storage or a peer far more), weighted by the tiers of the reads to
//! come. The plan says which samples come; their sizes and where they live, which way.
//!
//! **Shares are thread counts.** Ranks that train in lockstep consume batches at one
//! rate, so a lighter rank fills its prefetch and its threads sleep: its cores go to the
//! others. Two things then decide the job's rate: a heavier rank must have threads enough
//! to take every core while the others sleep, and while all are busy (the kernel gives
//! each runnable thread an equal part of the cores) the heavier ranks should hold more of
//! them. So the budget, twice the node's usable cores, is split by demand above a floor:
//! each rank's even part of the budget, at most the cores (with two ranks, the cores
//! themselves). On two cores and two ranks, a rank with 2.8 of 4 by demand runs 3
//! threads against the other's 2 and gets 1.2 cores while both are busy, all of them
//! while the other sleeps. (Below that floor, a light rank held to one thread cannot use
//! the cores the heavy one leaves when the light one falls behind, and the job runs
//! slower: docs/distributed.md has the figures.) With many ranks the floor shrinks, so
//! that a node's threads stay within a few times its cores. A rank's count moves only when its exact share is more than [`HYSTERESIS`] threads away,
//! so that it does not flip between two neighbours with noise.
//!
//! **Nothing in the table is trusted beyond that.** The file is opened without following
//! links, and refused unless it is a plain file this user owns and no one else may read
//! or write; a record is used only if its check word
//! matches (a torn or foreign write is ignored), and a demand only if it is finite and
//! below [`MAX_DEMAND`]. At worst a bad record skews the split of threads between ranks;
//! it cannot change which samples a rank delivers.

pub(crate) mod share;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::env::LocalRanks;

/// Bytes of one rank's record: when it was written (ms since the Unix epoch), the demand
/// (an `f64`'s bits), and a check word binding the two to [`MAGIC`].
const RECORD: usize = 24;
const MAGIC: u64 = 0x6e6f_7374_616c_6c31;

/// A record older than this is a rank that left or stopped iterating.
pub(crate) const STALE: Duration = Duration::from_secs(2);

/// The shortest time between two revisions of a rank's share.
pub(crate) const REVISION_INTERVAL: Duration = Duration::from_millis(100);

/// How far (in threads) the exact share must move from the current count to change it.
pub(crate) const HYSTERESIS: f64 = 0.6;

/// The largest demand believed: a day of one core's work per iteration.
pub(crate) const MAX_DEMAND: f64 = 86_400.0;

/// Prep threads for the ranks of a node together, and the fewest each rank keeps: twice
/// its usable cores, and each rank's even part of that, at most the cores.
pub(crate) fn node_budget(usable_cores: usize, local_ranks: usize) -> (usize, usize) {
    let cores = usable_cores.max(1);
    let budget = 2 * cores;
    (budget, (budget / local_ranks.max(1)).clamp(1, cores))
}

/// This rank's record in the table its node's ranks share.
#[derive(Debug)]
pub(crate) struct NodeTable {
    file: File,
    path: PathBuf,
    slot: usize,
    slots: usize,
    /// Records older than this are ignored ([`STALE`]).
    stale: Duration,
}

impl NodeTable {
    /// Opens (creating it if it is the first) the table of `ranks`' job in `dir`
    /// (`/dev/shm` where it exists, see [`table_dir`]).
    ///
    /// # Errors
    ///
    /// A sentence saying why the ranks cannot balance: the file cannot be made, or it is
    /// not this user's alone.
    pub(crate) fn open(dir: &Path, ranks: &LocalRanks) -> Result<NodeTable, String> {
        let uid = own_uid();
        let path = dir.join(format!("nostall-{uid}-{:016x}.ranks", ranks.job));
        let fail = |what: &str, e: std::io::Error| {
            format!("{what} {}: {e} (ranks are not balanced)", path.display())
        };
        if ranks.local_rank >= ranks.local_world {
            return Err(format!(
                "LOCAL_RANK {} is not below LOCAL_WORLD_SIZE {} (ranks are not balanced)",
                ranks.local_rank, ranks.local_world
            ));
        }
        // The last rank to leave removes the file (see `Drop`): one opened just before
        // that is no longer the table, and is opened again.
        for _ in 0..OPEN_ATTEMPTS {
            let file = open_own(&path, uid, &fail)?;
            flock(&file, libc::LOCK_SH)
                .map_err(|e| fail("cannot lock the node's rank table", e))?;
            if !names(&path, &file) {
                continue;
            }
            let len = (ranks.local_world * RECORD) as u64;
            let meta = file
                .metadata()
                .map_err(|e| fail("cannot inspect the node's rank table", e))?;
            if meta.len() < len {
                file.set_len(len)
                    .map_err(|e| fail("cannot size the node's rank table", e))?;
            }
            return Ok(NodeTable {
                file,
                path,
                slot: ranks.local_rank,
                slots: ranks.local_world,
                stale: STALE,
            });
        }
        Err(format!(
            "the node's rank table {} was removed {OPEN_ATTEMPTS} times as it was opened \
             (ranks are not balanced)",
            path.display()
        ))
    }

    /// Keeps records for `stale` rather than [`STALE`] (for tests that must not depend
    /// on how fast they run).
    #[cfg(test)]
    pub(crate) fn keep_records_for(&mut self, stale: Duration) {
        self.stale = stale;
    }

    /// This rank's place in the table.
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// Writes this rank's `demand` (one-core seconds per iteration) with the time now.
    pub(crate) fn publish(&self, demand: f64) {
        self.write(now_ms(), demand);
    }

    fn write(&self, written: u64, demand: f64) {
        let bits = demand.to_bits();
        let mut record = [0u8; RECORD];
        record[..8].copy_from_slice(&written.to_le_bytes());
        record[8..16].copy_from_slice(&bits.to_le_bytes());
        record[16..].copy_from_slice(&(written ^ bits ^ MAGIC).to_le_bytes());
        // A write that fails leaves the record to go stale: the others then leave this
        // rank out, which is what it would want if it cannot say its demand.
        let _ = self.file.write_all_at(&record, (self.slot * RECORD) as u64);
    }

    /// Every rank's demand, where its record is sound and fresh (written within
    /// [`STALE`], and not after it from now).
    pub(crate) fn demands(&self) -> Vec<Option<f64>> {
        let mut table = vec![0u8; self.slots * RECORD];
        if self.file.read_exact_at(&mut table, 0).is_err() {
            return vec![None; self.slots];
        }
        let now = now_ms();
        table
            .chunks_exact(RECORD)
            .map(|record| {
                let word = |i: usize| u64::from_le_bytes(record[i..i + 8].try_into().unwrap());
                let (written, bits, check) = (word(0), word(8), word(16));
                let demand = f64::from_bits(bits);
                let stale = self.stale.as_millis() as u64;
                let fresh = now.saturating_sub(written) <= stale && written <= now + stale;
                let sound = check == written ^ bits ^ MAGIC
                    && demand.is_finite()
                    && (0.0..MAX_DEMAND).contains(&demand);
                (sound && fresh).then_some(demand)
            })
            .collect()
    }
}

impl Drop for NodeTable {
    /// Clears this rank's record, and removes the file if no other rank holds it: every
    /// rank holds a shared lock on it while open, so the exclusive lock is had only by
    /// the last. A rank that opened the file but has not locked it yet finds, once
    /// locked, that the path no longer names it, and makes the table again.
    fn drop(&mut self) {
        self.write(0, 0.0);
        // Asking for the exclusive lock gives up the shared one first (flock converts
        // that way): a rank that does not get it holds nothing, as it leaves anyway.
        if flock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_ok() && names(&self.path, &self.file)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// How many times a table removed as it is opened is opened again.
const OPEN_ATTEMPTS: usize = 16;

/// Opens (creating it) the table at `path`, refused unless it is a plain file of `uid`
/// alone.
fn open_own(
    path: &Path,
    uid: u32,
    fail: &dyn Fn(&str, std::io::Error) -> String,
) -> Result<File, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        // The other ranks' records are in it.
        .truncate(false)
        .mode(0o600)
        // In a directory everyone may write to, the name may be a link planted to make
        // this user write elsewhere, or a FIFO to make the open hang.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| fail("cannot open the node's rank table", e))?;
    let meta = file
        .metadata()
        .map_err(|e| fail("cannot inspect the node's rank table", e))?;
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "the node's rank table {} (uid {}, mode {:o}) is not a file of this user \
             alone: it is not trusted (ranks are not balanced; remove it if it is stale)",
            path.display(),
            meta.uid(),
            meta.mode() & 0o777
        ));
    }
    Ok(file)
}

/// Whether `path` still names `file` (and not a file made after it was removed).
fn names(path: &Path, file: &File) -> bool {
    match (std::fs::symlink_metadata(path), file.metadata()) {
        (Ok(named), Ok(open)) => named.dev() == open.dev() && named.ino() == open.ino(),
        _ => false,
    }
}

/// `flock(2)` on `file`, retried when a signal interrupts a wait.
fn flock(file: &File, operation: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: the descriptor is open for the whole call (borrowed from `file`);
        // flock reads nothing from memory.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Where the tables live: `/dev/shm` (memory, cleared at boot) where there is one, else
/// the temporary directory.
pub(crate) fn table_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The threads of `budget` due to rank `me`: its demand's part of all fresh demands
/// (`None` when it has not said its own yet).
pub(crate) fn share(demands: &[Option<f64>], me: usize, budget: usize) -> Option<f64> {
    let mine = (*demands.get(me)?)?;
    let total: f64 = demands.iter().flatten().sum();
    let present = demands.iter().flatten().count() as f64;
    Some(if total > 0.0 {
        budget as f64 * mine / total
    } else {
        budget as f64 / present
    })
}

/// The thread count after a revision that found `exact` due: moved only past
/// [`HYSTERESIS`], to the nearest count between `floor` and `ceiling`.
pub(crate) fn settle(current: usize, exact: f64, (floor, ceiling): (usize, usize)) -> usize {
    let exact = exact.clamp(floor as f64, ceiling as f64);
    if (exact - current as f64).abs() > HYSTERESIS {
        (exact.round() as usize).clamp(floor.max(1), ceiling.max(1))
    } else {
        current
    }
}

/// CPU time the calling thread has used (zero if the clock cannot be read).
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is supported by every Linux kernel this runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(local_rank: usize) -> LocalRanks {
        LocalRanks {
            job: 0xfeed,
            local_rank,
            local_world: 2,
        }
    }

    #[test]
    fn the_last_rank_to_leave_removes_the_table_and_a_later_one_makes_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let files = || std::fs::read_dir(dir.path()).unwrap().count();
        let first = NodeTable::open(dir.path(), &ranks(0)).unwrap();
        let second = NodeTable::open(dir.path(), &ranks(1)).unwrap();
        first.publish(0.5);
        drop(first);
        assert_eq!(files(), 1, "a rank still holds it");
        assert_eq!(second.demands(), vec![None, None], "the record cleared");
        drop(second);
        assert_eq!(files(), 0, "the last one out removed it");
        let again = NodeTable::open(dir.path(), &ranks(0)).unwrap();
        assert_eq!(files(), 1);
        again.publish(0.25);
        assert_eq!(again.demands(), vec![Some(0.25), None]);
    }

    #[test]
    fn a_rank_holding_a_removed_table_leaves_the_new_one_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let stale = NodeTable::open(dir.path(), &ranks(0)).unwrap();
        // As a rank that opened the file just before the last rank removed it holds it.
        std::fs::remove_file(&stale.path).unwrap();
        let fresh = NodeTable::open(dir.path(), &ranks(1)).unwrap();
        assert!(names(&fresh.path, &fresh.file));
        assert!(!names(&stale.path, &stale.file));
        // The stale rank gets the exclusive lock on its own file: the path is not it.
        drop(stale);
        assert!(fresh.path.exists(), "the table in use stays");
        drop(fresh);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn ranks_see_each_others_demands_through_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let heavy = NodeTable::open(dir.path(), &ranks(0)).unwrap();
        let light = NodeTable::open(dir.path(), &ranks(1)).unwrap();
        assert_eq!(heavy.demands(), vec![None, None], "nothing said yet");
        heavy.publish(0.375);
        light.publish(0.125);
        assert_eq!(light.demands(), vec![Some(0.375), Some(0.125)]);
        // Twice the cores (2) in threads, split 3:1.
        let (budget, floor) = node_budget(2, 2);
        assert_eq!(floor, 2, "two ranks: each keeps the cores");
        assert_eq!(node_budget(96, 8), (192, 24), "eight: a quarter of them");
        assert_eq!(node_budget(2, 8), (4, 1));
        assert_eq!(share(&heavy.demands(), 0, budget), Some(3.0));
        assert_eq!(share(&light.demands(), 1, budget), Some(1.0));
        // A rank that leaves clears its record.
        drop(light);
        assert_eq!(heavy.demands(), vec![Some(0.375), None]);
        assert_eq!(share(&heavy.demands(), 0, budget), Some(4.0));
    }

    #[test]
    fn stale_torn_and_absurd_records_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let table = NodeTable::open(dir.path(), &ranks(0)).unwrap();
        let other = NodeTable::open(dir.path(), &ranks(1)).unwrap();
        other.write(now_ms() - 3 * STALE.as_millis() as u64, 0.5);
        assert_eq!(table.demands()[1], None, "stale");
        other.write(now_ms() + 10 * STALE.as_millis() as u64, 0.5);
        assert_eq!(table.demands()[1], None, "from the future");
        for absurd in [f64::NAN, f64::INFINITY, -1.0, 1e300] {
            other.write(now_ms(), absurd);
            assert_eq!(table.demands()[1], None, "{absurd}");
        }
        other.publish(0.5);
        assert_eq!(table.demands()[1], Some(0.5));
        // A torn record: the demand's bytes from another write.
        table
            .file
            .write_all_at(&0.7f64.to_bits().to_le_bytes(), RECORD as u64 + 8)
            .unwrap();
        assert_eq!(table.demands()[1], None, "torn");
    }

    #[test]
    fn a_table_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(format!("nostall-{}-{:016x}.ranks", own_uid(), 0xfeed));
        std::fs::write(&path, [0u8; 2 * RECORD]).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = NodeTable::open(dir.path(), &ranks(0)).unwrap_err();
        assert!(err.contains("not a file of this user alone"), "{err}");
        // A link planted at the name is not followed.
        std::fs::remove_file(&path).unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = NodeTable::open(dir.path(), &ranks(0)).unwrap_err();
        assert!(err.contains("cannot open"), "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let err = NodeTable::open(
            dir.path(),
            &LocalRanks {
                job: 1,
                local_rank: 2,
                local_world: 2,
            },
        )
        .unwrap_err();
        assert!(err.contains("LOCAL_RANK 2"), "{err}");
    }

    #[test]
    fn shares_follow_demand_with_hysteresis() {
        assert_eq!(share(&[Some(1.0), Some(1.0)], 0, 4), Some(2.0));
        assert_eq!(share(&[Some(0.0), Some(0.0)], 1, 4), Some(2.0));
        assert_eq!(share(&[None, Some(1.0)], 0, 4), None);
        assert_eq!(share(&[Some(2.0), Some(1.0), None], 0, 6), Some(4.0));
        // Moves past 0.6 of a thread only, and stays within 1..=ceiling.
        assert_eq!(settle(2, 2.5, (1, 3)), 2);
        assert_eq!(settle(2, 2.7, (1, 3)), 3);
        assert_eq!(settle(2, 1.45, (1, 3)), 2);
        assert_eq!(settle(2, 0.2, (1, 3)), 1);
        assert_eq!(settle(2, 7.9, (1, 3)), 3);
        assert_eq!(settle(2, 0.2, (2, 4)), 2, "never below the floor");
        assert_eq!(settle(3, 0.2, (2, 4)), 2);
        // Noise around a boundary does not flip the count.
        let mut threads = 2;
        for exact in [2.4, 1.6, 2.5, 1.5, 2.45] {
            threads = settle(threads, exact, (1, 3));
        }
        assert_eq!(threads, 2);
    }

    #[test]
    fn thread_cpu_time_counts_this_threads_work_only() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_time() > before, "{x}");
        // Another thread's sleep costs no CPU time.
        let slept = std::thread::spawn(|| {
            let before = thread_cpu_time();
            std::thread::sleep(Duration::from_millis(20));
            thread_cpu_time() - before
        })
        .join()
        .unwrap();
        assert!(slept < Duration::from_millis(20));
    }
}
