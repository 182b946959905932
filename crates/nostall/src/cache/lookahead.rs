//! The `lookahead` policy: Belady's rule over the plan's future.
//!
//! The plan is a pure function of the seed, so the loader knows every sample's next use:
//! a sample read in epoch `e` is next read at its position in epoch `e + 1`'s stream (or
//! later, beyond the horizon, if this rank does not read it then). On a miss with the
//! cache full, the sample needed furthest in the future goes, but only if that is further
//! than the newcomer's own next use: a sample needed before the one it would make room for
//! is never evicted, and the newcomer is not kept instead. That is Belady's optimum among
//! the policies that fill on a miss, limited to a horizon of one epoch ahead.
//!
//! On one node every sample is read once per epoch: the samples cached when an epoch
//! starts are all read in it before any sample read in it comes back, so all of them hit,
//! as MinIO's do: the same count as Belady. With several ranks, a rank reads a different
//! subset each epoch; MinIO's first-come set then hits only `1/W` of the time, while
//! `lookahead` swaps in the samples this rank reads next epoch.
//!
//! One implementation serves the loader's cache ([`super::SampleCache`], sizes in bytes)
//! and the simulator ([`crate::sim::cache`], every sample of size 1).

use std::collections::{BTreeSet, HashMap};

use super::policy::{Admission, Keeper};
use crate::sample::SampleId;

/// The next use of a sample beyond the horizon; ties between such samples are broken by
/// id, and none of them is evicted to make room for another.
const BEYOND: u64 = u64::MAX;

/// Which samples a `lookahead` cache keeps: their next uses, and the sizes they hold.
#[derive(Debug, Default)]
pub(crate) struct Lookahead {
    capacity: u64,
    used: u64,
    /// Cached samples by (next use, id): the last is the one needed furthest ahead.
    by_next_use: BTreeSet<(u64, SampleId)>,
    /// Each cached sample's next use and size.
    cached: HashMap<SampleId, (u64, u64)>,
    /// The epoch being read, and where each sample is read in the next one.
    epoch: u64,
    next_epoch: HashMap<SampleId, u32>,
}

impl Lookahead {
    /// An empty cache of `capacity` units (bytes, or samples in the simulator).
    pub(crate) fn new(capacity: u64) -> Lookahead {
        Lookahead {
            capacity,
            ..Lookahead::default()
        }
    }

    /// The next use of `id` after a read of it in the current epoch.
    fn next_use(&self, id: SampleId) -> u64 {
        self.next_epoch
            .get(&id)
            .map_or(BEYOND, |&at| ((self.epoch + 1) << 32) | u64::from(at))
    }

    fn rekey(&mut self, id: SampleId, use_at: u64) {
        if let Some((old, _)) = self.cached.get_mut(&id) {
            self.by_next_use.remove(&(*old, id));
            *old = use_at;
            self.by_next_use.insert((use_at, id));
        }
    }
}

impl Keeper for Lookahead {
    fn looks_ahead(&self) -> bool {
        true
    }

    /// Starts reading `epoch`, whose successor reads `next` (this rank's stream, in
    /// order; empty when unknown). Samples whose next use lay beyond the old horizon get
    /// their use in `next`, if any.
    fn begin_epoch(&mut self, epoch: u64, next: &[SampleId]) {
        self.epoch = epoch;
        self.next_epoch.clear();
        for (at, &id) in next.iter().enumerate() {
            // A sample read twice (padding) is keyed by its first read.
            self.next_epoch.entry(id).or_insert(at as u32);
        }
        let beyond: Vec<SampleId> = self
            .by_next_use
            .range((BEYOND, 0)..)
            .map(|&(_, id)| id)
            .collect();
        for id in beyond {
            let use_at = self.next_use(id);
            if use_at != BEYOND {
                self.rekey(id, use_at);
            }
        }
    }

    /// Records a hit on `id`: its next use moves on to the next epoch.
    fn touch(&mut self, id: SampleId) {
        self.rekey(id, self.next_use(id));
    }

    /// Decides whether to keep `id` (`size` units), just read after a miss, and what to
    /// evict for it; the decision is already applied to the policy's own state.
    fn admit(&mut self, id: SampleId, size: u64) -> Admission {
        if size > self.capacity || self.cached.contains_key(&id) {
            return Admission::Bypass;
        }
        let use_at = self.next_use(id);
        let mut victims = Vec::new();
        let mut free = self.capacity - self.used;
        for &(victim_use, victim) in self.by_next_use.iter().rev() {
            if free >= size {
                break;
            }
            if victim_use <= use_at {
                return Admission::Bypass; // what is left is needed no later than `id`
            }
            victims.push(victim);
            free += self.cached[&victim].1;
        }
        if free < size {
            return Admission::Bypass;
        }
        for victim in &victims {
            let (victim_use, victim_size) = self.cached.remove(victim).expect("cached");
            self.by_next_use.remove(&(victim_use, *victim));
            self.used -= victim_size;
        }
        self.cached.insert(id, (use_at, size));
        self.by_next_use.insert((use_at, id));
        self.used += size;
        Admission::Keep(victims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_sample_needed_furthest_ahead_and_never_one_needed_sooner() {
        let mut cache = Lookahead::new(3);
        // Epoch 0 reads 1, 2, 3, 4; epoch 1 will read 4, 3, 2, 1.
        cache.begin_epoch(0, &[4, 3, 2, 1]);
        for id in [1, 2, 3] {
            assert_eq!(cache.admit(id, 1), Admission::Keep(vec![]));
        }
        // 4 is needed first next epoch: 1 (needed last) makes room.
        assert_eq!(cache.admit(4, 1), Admission::Keep(vec![1]));
        // 1 again, needed after every cached sample: not kept.
        assert_eq!(cache.admit(1, 1), Admission::Bypass);
        // A sample too large for the whole cache is never kept.
        assert_eq!(cache.admit(9, 4), Admission::Bypass);
    }

    #[test]
    fn a_large_sample_evicts_several_only_if_all_are_needed_after_it() {
        let mut cache = Lookahead::new(4);
        cache.begin_epoch(0, &[5, 1, 6, 2, 3]);
        for id in [1, 2, 3] {
            assert_eq!(cache.admit(id, 1), Admission::Keep(vec![]));
        }
        // 6 (size 3) is needed before 2 and 3 but after 1: evicting 3 and 2 is enough.
        assert_eq!(cache.admit(6, 3), Admission::Keep(vec![3, 2]));
        // 2 again (as size 4) would need 6 and 1 gone, both needed before it: nothing is
        // evicted.
        assert_eq!(cache.admit(2, 4), Admission::Bypass);
        assert_eq!(cache.used, 4);
        // 5, needed first, may take the place of both.
        assert_eq!(cache.admit(5, 4), Admission::Keep(vec![6, 1]));
    }

    #[test]
    fn samples_beyond_the_horizon_are_rekeyed_when_it_moves() {
        let mut cache = Lookahead::new(1);
        cache.begin_epoch(0, &[2]);
        // 7 is not read in epoch 1: beyond the horizon, it gives way to 2.
        assert_eq!(cache.admit(7, 1), Admission::Keep(vec![]));
        assert_eq!(cache.admit(2, 1), Admission::Keep(vec![7]));
        assert_eq!(cache.admit(7, 1), Admission::Bypass);
        // In epoch 1, 2 is read and next read in epoch 2 at position 1; 7 at position 0
        // of epoch 2 now comes first.
        cache.begin_epoch(1, &[7, 2]);
        cache.touch(2);
        assert_eq!(cache.admit(7, 1), Admission::Keep(vec![2]));
    }
}
