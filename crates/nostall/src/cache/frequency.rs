//! The `frequency` policy: NoPFS's placement, from the plan's future.
//!
//! With `W` ranks, a rank reads each sample in about `1/W` of the epochs, some more often
//! than others (a Binomial(E, 1/W) count over E epochs). The rank's cache keeps the
//! samples it reads most often over the planned epochs (ties: read first, first), read
//! ahead in the background so that even their first read hits, and never changes them.
//! On one node every count ties and it keeps the first samples read, as MinIO does; with
//! many ranks it hits more than any fixed share `c` of the dataset (NoPFS: about 9.6, 17.7
//! and 38.3% local hits at 5, 10 and 25% capacity for 16 ranks over 90 epochs).
//!
//! One implementation of the placement and the keeper serves the loader's cache
//! ([`super::SampleCache`], sizes in bytes) and the simulator ([`crate::sim::cache`],
//! every sample of size 1).

use std::collections::{HashMap, HashSet};

use super::policy::{Admission, Keeper};
use crate::sample::SampleId;

/// Which samples a `frequency` cache keeps: those of its placement, as they come.
#[derive(Debug)]
pub(crate) struct Frequency {
    capacity: u64,
    used: u64,
    placed: HashSet<SampleId>,
}

impl Frequency {
    /// An empty cache of `capacity` units, with nothing placed yet.
    pub(crate) fn new(capacity: u64) -> Frequency {
        Frequency {
            capacity,
            used: 0,
            placed: HashSet::new(),
        }
    }
}

impl Keeper for Frequency {
    fn admit(&mut self, id: SampleId, size: u64) -> Admission {
        if !self.placed.contains(&id) || size > self.capacity - self.used {
            return Admission::Bypass;
        }
        self.used += size;
        Admission::Keep(Vec::new())
    }

    fn place(&mut self, ids: &[SampleId]) {
        self.placed = ids.iter().copied().collect();
    }
}

/// The samples to keep, most read first, within `capacity` units: from `reads` (the rank's
/// reads over the planned epochs, in order) and each sample's `size`. A sample too large
/// for what is left is passed over for smaller ones further down.
pub(crate) fn placement(
    reads: impl IntoIterator<Item = SampleId>,
    capacity: u64,
    size: impl Fn(SampleId) -> u64,
) -> Vec<SampleId> {
    // Per sample: reads, and the position of its first read.
    let mut counts: HashMap<SampleId, (u64, usize)> = HashMap::new();
    for (at, id) in reads.into_iter().enumerate() {
        counts.entry(id).or_insert((0, at)).0 += 1;
    }
    let mut ranked: Vec<(SampleId, (u64, usize))> = counts.into_iter().collect();
    ranked.sort_unstable_by_key(|&(_, (reads, first))| (std::cmp::Reverse(reads), first));
    let mut left = capacity;
    let mut kept = Vec::new();
    for (id, _) in ranked {
        let size = size(id).max(1);
        if size <= left {
            left -= size;
            kept.push(id);
        }
        if left == 0 {
            break;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_read_samples_ties_by_first_read() {
        let reads = [5, 1, 2, 1, 3, 2, 1, 4];
        assert_eq!(placement(reads, 2, |_| 1), vec![1, 2]);
        // 5, 3 and 4 are read once each: 5 first.
        assert_eq!(placement(reads, 4, |_| 1), vec![1, 2, 5, 3]);
        // By size: 1 (3 units) fits, 2 (3 units) does not, 5 (1 unit) does.
        let size = |id| if id == 5 { 1 } else { 3 };
        assert_eq!(placement(reads, 4, size), vec![1, 5]);
        assert_eq!(placement(reads, 0, |_| 1), Vec::<SampleId>::new());
    }
}
