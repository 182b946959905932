//! What CPU this process may use, and what it used: the budget a decision that spends
//! the process's own cores (its loader's parts in remote prep) is held to.
//!
//! The budget is the tightest of the process's CPU affinity and the cgroup CPU quotas
//! above it (v2 `cpu.max`, v1 `cpu.cfs_quota_us` over `cpu.cfs_period_us`), kept as a
//! fraction: half a core is 0.5, where Rust's `available_parallelism` rounds it up to 1.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The CPU time this process's threads have used so far.
pub fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_PROCESS_CPUTIME_ID is supported by every Linux kernel this runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The cores this process may use, as a fraction: its affinity mask's, or less under a
/// cgroup CPU quota (its own cgroup's or an ancestor's); at least a hundredth of a core.
pub fn cpu_budget() -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as f64;
    let quota = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .zip(std::fs::read_to_string("/proc/self/mountinfo").ok())
        .and_then(|(cgroups, mounts)| {
            quota_of(&cgroups, &mounts, |p| std::fs::read_to_string(p).ok())
        });
    quota.map_or(cores, |q| q.min(cores)).max(0.01)
}

/// The tightest CPU quota, in cores, over the cgroups of `cgroups` (`/proc/self/cgroup`)
/// that hold the cpu controller, found where `mounts` (`/proc/self/mountinfo`) mounts
/// their hierarchies, each read by `read`; `None` without one.
fn quota_of(cgroups: &str, mounts: &str, read: impl Fn(&Path) -> Option<String>) -> Option<f64> {
    let mut tightest: Option<f64> = None;
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':').skip(1);
        let (Some(controllers), Some(path)) = (fields.next(), fields.next()) else {
            continue;
        };
        let v2 = controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "cpu") {
            continue;
        }
        let Some((root, mount)) = mount_of(mounts, v2) else {
            continue;
        };
        // Inside a container the hierarchy's root may be mounted from below its top.
        let relative = path.strip_prefix(root.as_str()).unwrap_or(path);
        let mut dir = mount.join(relative.trim_start_matches('/'));
        loop {
            let quota = if v2 {
                read(&dir.join("cpu.max")).and_then(|t| cpu_max(&t))
            } else {
                read(&dir.join("cpu.cfs_quota_us"))
                    .zip(read(&dir.join("cpu.cfs_period_us")))
                    .and_then(|(q, p)| cfs_quota(&q, &p))
            };
            if let Some(q) = quota {
                tightest = Some(tightest.map_or(q, |t: f64| t.min(q)));
            }
            if dir == mount || !dir.pop() {
                break;
            }
        }
    }
    tightest
}

/// Where the cgroup hierarchy is mounted (v2's, or v1's holding the cpu controller): the
/// hierarchy's path at the mount's root, and the mount point.
fn mount_of(mounts: &str, v2: bool) -> Option<(String, PathBuf)> {
    mounts.lines().find_map(|line| {
        let (mine, theirs) = line.split_once(" - ")?;
        let mine: Vec<&str> = mine.split(' ').collect();
        let mut theirs = theirs.split(' ');
        let (kind, _, options) = (theirs.next()?, theirs.next()?, theirs.next()?);
        let fits = match v2 {
            true => kind == "cgroup2",
            false => kind == "cgroup" && options.split(',').any(|o| o == "cpu"),
        };
        (fits && mine.len() > 4).then(|| (mine[3].to_owned(), PathBuf::from(mine[4])))
    })
}

/// v2's `cpu.max` ("quota period", or "max period") in cores.
fn cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let (quota, period) = (fields.next()?, fields.next()?);
    ratio(quota.parse().ok()?, period.parse().ok()?)
}

/// v1's `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`, in cores.
fn cfs_quota(quota: &str, period: &str) -> Option<f64> {
    let quota: i64 = quota.trim().parse().ok()?;
    ratio(u64::try_from(quota).ok()?, period.trim().parse().ok()?)
}

fn ratio(quota: u64, period: u64) -> Option<f64> {
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = entries
            .iter()
            .map(|(p, t)| (PathBuf::from(p), (*t).to_owned()))
            .collect();
        move |p| map.get(p).cloned()
    }

    #[test]
    fn a_v2_quota_is_the_tightest_of_the_cgroup_and_its_ancestors() {
        let mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate";
        let read = files(&[
            ("/sys/fs/cgroup/job/cpu.max", "150000 100000\n"),
            ("/sys/fs/cgroup/job/trainer/cpu.max", "max 100000\n"),
            ("/sys/fs/cgroup/job/trainer/rank0/cpu.max", "50000 100000\n"),
        ]);
        let got = quota_of("0::/job/trainer/rank0\n", mounts, &read);
        assert_eq!(got, Some(0.5));
        assert_eq!(quota_of("0::/job/trainer\n", mounts, &read), Some(1.5));
        assert_eq!(quota_of("0::/elsewhere\n", mounts, &read), None);
    }

    #[test]
    fn a_v1_quota_is_read_where_the_cpu_controller_is_mounted() {
        let mounts = "\
25 24 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
26 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct";
        let read = files(&[
            (
                "/sys/fs/cgroup/cpu,cpuacct/bench/cpu.cfs_quota_us",
                "10000\n",
            ),
            (
                "/sys/fs/cgroup/cpu,cpuacct/bench/cpu.cfs_period_us",
                "20000\n",
            ),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
        ]);
        let cgroups = "5:memory:/bench\n4:cpu,cpuacct:/bench\n";
        assert_eq!(quota_of(cgroups, mounts, &read), Some(0.5));
    }

    #[test]
    fn a_container_sees_its_hierarchy_mounted_from_its_own_cgroup() {
        let mounts = "30 23 0:26 /pod/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        let read = files(&[("/sys/fs/cgroup/cpu.max", "200000 100000")]);
        assert_eq!(quota_of("0::/pod/c1\n", mounts, &read), Some(2.0));
    }

    #[test]
    fn the_budget_is_a_positive_fraction_and_cpu_time_grows() {
        assert!(cpu_budget() > 0.0);
        let before = process_cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(process_cpu_time() > before, "{x}");
    }
}
