//! Partitioned cache placement across nodes (CoorDL): which node caches which sample.
//!
//! In data-parallel training on several nodes, each node's memory can hold only part of
//! the dataset, but together they may hold all of it. CoorDL's partitioned cache gives
//! every node a *disjoint* part, so the nodes cache the sum of their memories instead of
//! the same popular part many times; a node that misses locally asks the node that holds
//! the sample before going to storage.
//!
//! That only works if every node knows who holds what, and asking would cost a message
//! per sample. So the placement is a pure function of (seed, number of nodes, per-node
//! capacity, the sample sizes): every node computes the same [`Placement`] at start-up and
//! never exchanges metadata. It does not depend on the epoch, the batch size or the order
//! in which samples are read, so it stays fixed for the whole job, and the plan
//! ([`crate::plan::locality`]) can route samples to their holders from it.
//!
//! # How samples are dealt
//!
//! The samples are visited in a seeded random order (independent of every epoch's
//! shuffle), and each goes to the node with the most free bytes left, if it fits there
//! (ties go to the lowest node index). Why this rule:
//!
//! - *Random order*: the part a node holds is a uniform random subset, so in every
//!   global batch each node holds its fair share in expectation. With a contiguous range
//!   of ids a node would hold, say, whole classes or whole shards, which is harmless for a
//!   shuffled plan but not for an unshuffled one.
//! - *Most free bytes first*: nodes fill evenly (with equal sample sizes it is plain
//!   round-robin), so no node runs full while others have room, and when the aggregate
//!   capacity is about the dataset size nearly every sample finds a place. A sample that
//!   fits nowhere (the node with the most room cannot take it, so none can) stays
//!   uncached and is read from storage; later, smaller samples may still fit.
//! - *Byte capacity*: each node's cache is bounded in bytes, like [`crate::cache::SampleCache`],
//!   so the placement never gives a node more than its capacity, and a node's cache can
//!   admit exactly its part without ever evicting (MinIO semantics).
//!
//! Cost: `O(N log K)` for `N` samples and `K` nodes, and 4 bytes per sample for the
//! holder table (5 MB for ImageNet's 1.28 million samples).

use super::Capacity;
use crate::error::{Error, Result};
use crate::rng::{derive, Rng};
use crate::sample::SampleId;

/// "Held by no node" in the holder table.
const NOBODY: u32 = u32::MAX;

/// Which node caches which sample: disjoint across nodes, within each node's byte
/// capacity, the same on every node for the same inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Per sample id: the holding node, or [`NOBODY`].
    holders: Vec<u32>,
    /// Per node: bytes of the samples it holds.
    held_bytes: Vec<u64>,
    /// Per node: number of samples it holds.
    held_samples: Vec<usize>,
    /// Each node's capacity in bytes.
    capacity: u64,
    /// Bytes of all samples.
    dataset_bytes: u64,
}

impl Placement {
    /// Deals the samples, whose sizes in bytes are `sizes` (indexed by sample id, e.g.
    /// [`crate::Catalog::size`] of each id), to `nodes` nodes of `capacity` each (a
    /// [`Capacity::Fraction`] is of the whole dataset's bytes), from `seed`.
    ///
    /// Samples of size 0 are never placed (there is nothing to cache).
    pub fn new(seed: u64, nodes: usize, capacity: Capacity, sizes: &[u64]) -> Result<Placement> {
        Placement::in_groups(seed, nodes, capacity, sizes, &[])
    }

    /// As [`Placement::new`], dealing whole groups of samples where `groups` gives them
    /// (runs of consecutive ids, as [`crate::Catalog::groups`]: a Parquet file's pages),
    /// so that one node reads and holds each group, instead of every node reading it for
    /// the samples it holds; empty `groups`: each sample alone, as [`Placement::new`].
    ///
    /// # Errors
    ///
    /// As [`Placement::new`]; also groups that do not add up to the samples.
    pub fn in_groups(
        seed: u64,
        nodes: usize,
        capacity: Capacity,
        sizes: &[u64],
        groups: &[u32],
    ) -> Result<Placement> {
        if nodes == 0 {
            return Err(Error::Config(
                "a partitioned cache needs at least 1 node".into(),
            ));
        }
        if nodes >= NOBODY as usize {
            return Err(Error::Config(format!(
                "a partitioned cache handles fewer than {NOBODY} nodes"
            )));
        }
        if let Capacity::Fraction(f) = capacity {
            if !(0.0..=1.0).contains(&f) {
                return Err(Error::Config(format!(
                    "cache fraction {f} is outside [0, 1]"
                )));
            }
        }
        let dataset_bytes = sizes
            .iter()
            .try_fold(0u64, |sum, &s| sum.checked_add(s))
            .ok_or_else(|| Error::Config("the sample sizes add up to more than 2^64".into()))?;
        let capacity = capacity.bytes(dataset_bytes);
        // Each unit dealt is a run of sample ids: a group, or a sample alone.
        let bounds = if groups.is_empty() {
            (0..=sizes.len()).collect()
        } else {
            super::group_bounds(groups, sizes.len())?
        };
        let mut order: Vec<usize> = (0..bounds.len() - 1).collect();
        Rng::new(derive(&[seed, 0x5041_5254])).shuffle(&mut order);

        let mut holders = vec![NOBODY; sizes.len()];
        let mut held_bytes = vec![0u64; nodes];
        let mut held_samples = vec![0usize; nodes];
        let mut free = MostFree::new(nodes, capacity);
        for unit in order {
            let ids = bounds[unit]..bounds[unit + 1];
            let size: u64 = sizes[ids.clone()].iter().sum();
            let node = free.top();
            if size == 0 || size > free.free(node) {
                continue;
            }
            free.take(node, size);
            held_bytes[node] += size;
            for id in ids.filter(|&id| sizes[id] > 0) {
                holders[id] = node as u32;
                held_samples[node] += 1;
            }
        }
        Ok(Placement {
            holders,
            held_bytes,
            held_samples,
            capacity,
            dataset_bytes,
        })
    }

    /// The node that caches sample `id`, or `None` when no node does (it is read from
    /// storage) or the id is outside the dataset.
    pub fn holder(&self, id: SampleId) -> Option<usize> {
        match usize::try_from(id).ok().and_then(|i| self.holders.get(i)) {
            Some(&n) if n != NOBODY => Some(n as usize),
            _ => None,
        }
    }

    /// Whether `node` caches sample `id`.
    pub fn holds(&self, node: usize, id: SampleId) -> bool {
        self.holder(id) == Some(node)
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.held_bytes.len()
    }

    /// Samples in the dataset.
    pub fn len(&self) -> usize {
        self.holders.len()
    }

    /// Whether the dataset is empty.
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// Each node's capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of all samples.
    pub fn dataset_bytes(&self) -> u64 {
        self.dataset_bytes
    }

    /// Bytes of the samples `node` caches (at most [`Placement::capacity`]).
    pub fn held_bytes(&self, node: usize) -> u64 {
        self.held_bytes[node]
    }

    /// Number of samples `node` caches.
    pub fn held_samples(&self, node: usize) -> usize {
        self.held_samples[node]
    }

    /// Samples no node caches.
    pub fn uncached_samples(&self) -> usize {
        self.len() - self.held_samples.iter().sum::<usize>()
    }

    /// Bytes of the samples no node caches.
    pub fn uncached_bytes(&self) -> u64 {
        self.dataset_bytes - self.held_bytes.iter().sum::<u64>()
    }
}

/// Free bytes per node, and the node with the most (the lowest index among equals) in
/// `O(1)`, updated in `O(log K)`: a tournament tree, leaner than a binary heap because a
/// placement only ever shrinks the winner's free space.
struct MostFree {
    /// Free bytes per leaf; leaves past the last node have none and never win a tie.
    free: Vec<u64>,
    /// `winner[i]` for `i` in `1..leaves`: the leaf with the most free bytes below inner
    /// node `i` (children `2i` and `2i + 1`; leaf `j` sits at `leaves + j`).
    winner: Vec<u32>,
    leaves: usize,
}

impl MostFree {
    fn new(nodes: usize, capacity: u64) -> MostFree {
        let leaves = nodes.next_power_of_two();
        let mut free = vec![capacity; nodes];
        free.resize(leaves, 0);
        let mut winner = vec![0u32; 2 * leaves];
        for j in 0..leaves {
            winner[leaves + j] = j as u32;
        }
        let mut tree = MostFree {
            free,
            winner,
            leaves,
        };
        for i in (1..leaves).rev() {
            tree.replay(i);
        }
        tree
    }

    /// The node with the most free bytes (the root; with one node, its leaf).
    fn top(&self) -> usize {
        self.winner[1] as usize
    }

    fn free(&self, node: usize) -> u64 {
        self.free[node]
    }

    /// Takes `bytes` of `node`'s free space.
    fn take(&mut self, node: usize, bytes: u64) {
        self.free[node] -= bytes;
        let mut i = (self.leaves + node) / 2;
        while i >= 1 {
            self.replay(i);
            i /= 2;
        }
    }

    /// Recomputes inner node `i`'s winner from its children's (ties to the left, the
    /// lower indices).
    fn replay(&mut self, i: usize) {
        let (left, right) = (self.winner[2 * i], self.winner[2 * i + 1]);
        self.winner[i] = if self.free[right as usize] > self.free[left as usize] {
            right
        } else {
            left
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes between 50 and 150 KB, like ImageNet's JPEGs around their mean.
    fn varied(n: usize, seed: u64) -> Vec<u64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| 50_000 + rng.below(100_001)).collect()
    }

    #[test]
    fn equal_sizes_are_dealt_evenly_and_cover_the_dataset() {
        let sizes = vec![1_000; 10_003];
        let p = Placement::new(3, 16, Capacity::Bytes(626_000), &sizes).unwrap();
        assert_eq!(p.uncached_samples(), 0);
        let counts: Vec<usize> = (0..16).map(|n| p.held_samples(n)).collect();
        assert_eq!(counts.iter().sum::<usize>(), 10_003);
        assert!(counts.iter().all(|&c| c == 625 || c == 626), "{counts:?}");
        for id in 0..10_003 {
            let n = p.holder(id).unwrap();
            assert!(p.holds(n, id));
            assert!(!p.holds((n + 1) % 16, id));
        }
        assert_eq!(p.holder(10_003), None);
    }

    #[test]
    fn nodes_never_exceed_their_capacity_and_hold_what_they_claim() {
        let sizes = varied(20_000, 1);
        let total: u64 = sizes.iter().sum();
        for (nodes, capacity) in [
            (4, Capacity::Fraction(0.25)),
            (4, Capacity::Fraction(0.30)),
            (7, Capacity::Fraction(0.05)),
            (32, Capacity::Bytes(total / 32 + 1)),
            (1, Capacity::Fraction(1.0)),
        ] {
            let p = Placement::new(9, nodes, capacity, &sizes).unwrap();
            let mut bytes = vec![0u64; nodes];
            let mut count = vec![0usize; nodes];
            for (id, &size) in sizes.iter().enumerate() {
                if let Some(n) = p.holder(id as SampleId) {
                    bytes[n] += size;
                    count[n] += 1;
                }
            }
            for n in 0..nodes {
                assert!(bytes[n] <= p.capacity(), "{nodes} nodes, node {n}");
                assert_eq!(bytes[n], p.held_bytes(n));
                assert_eq!(count[n], p.held_samples(n));
            }
            assert_eq!(p.uncached_bytes(), total - bytes.iter().sum::<u64>());
            // Each node fills to within one sample of its capacity, or everything fits.
            let aggregate = p.capacity() as f64 * nodes as f64 / total as f64;
            if aggregate < 1.0 {
                for n in 0..nodes {
                    assert!(
                        p.held_bytes(n) + 150_000 > p.capacity(),
                        "node {n} underfilled"
                    );
                }
            } else {
                // At exactly the dataset's size, fragmentation leaves a few samples out.
                assert!(p.uncached_bytes() < 150_000 * nodes as u64, "{nodes}");
            }
        }
    }

    #[test]
    fn slack_covers_everything_and_the_part_is_a_random_subset() {
        let sizes = varied(20_000, 2);
        let p = Placement::new(0, 8, Capacity::Fraction(0.13), &sizes).unwrap();
        assert_eq!(p.uncached_samples(), 0);
        // A random subset, not a range: node 0 holds about 1/8 of each tenth of the ids.
        for chunk in 0..10 {
            let held = (chunk * 2_000..(chunk + 1) * 2_000)
                .filter(|&id| p.holds(0, id as SampleId))
                .count();
            assert!((170..330).contains(&held), "chunk {chunk}: {held}");
        }
    }

    #[test]
    fn groups_are_dealt_whole() {
        let sizes = varied(6_000, 5);
        let groups: Vec<u32> = (0..400).map(|g| 5 + g % 20).collect();
        assert_eq!(groups.iter().sum::<u32>(), 5_800);
        assert!(
            Placement::in_groups(0, 3, Capacity::Fraction(0.3), &sizes, &groups).is_err(),
            "groups must cover the samples"
        );
        let (sizes, nodes) = (&sizes[..5_800], 3);
        let p = Placement::in_groups(0, nodes, Capacity::Fraction(0.3), sizes, &groups).unwrap();
        let mut start = 0;
        for &length in &groups {
            let holders: std::collections::HashSet<_> = (start..start + length as usize)
                .map(|id| p.holder(id as SampleId))
                .collect();
            assert_eq!(holders.len(), 1, "group at {start} split: {holders:?}");
            start += length as usize;
        }
        for node in 0..nodes {
            let held: u64 = (0..sizes.len())
                .filter(|&id| p.holds(node, id as SampleId))
                .map(|id| sizes[id])
                .sum();
            assert_eq!(held, p.held_bytes(node));
            assert!(held <= p.capacity());
        }
        // Most of the capacity is used, whole groups at a time.
        assert!(p.uncached_bytes() < p.dataset_bytes() / 10 + p.dataset_bytes() / 100 * 3);
        assert_eq!(
            p,
            Placement::in_groups(0, nodes, Capacity::Fraction(0.3), sizes, &groups).unwrap()
        );
        // Without groups, each sample alone.
        assert_eq!(
            Placement::in_groups(1, nodes, Capacity::Fraction(0.3), sizes, &[]).unwrap(),
            Placement::new(1, nodes, Capacity::Fraction(0.3), sizes).unwrap()
        );
    }

    #[test]
    fn the_same_inputs_give_the_same_placement_on_every_node() {
        let sizes = varied(5_000, 3);
        let a = Placement::new(5, 6, Capacity::Fraction(0.1), &sizes).unwrap();
        let b = Placement::new(5, 6, Capacity::Fraction(0.1), &sizes).unwrap();
        let c = Placement::new(6, 6, Capacity::Fraction(0.1), &sizes).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.holders, c.holders);
    }

    #[test]
    fn the_tournament_picks_the_node_with_the_most_free_bytes() {
        let mut rng = Rng::new(4);
        for nodes in [1, 2, 3, 5, 8, 13] {
            let mut tree = MostFree::new(nodes, 1_000);
            let mut free = vec![1_000u64; nodes];
            for _ in 0..500 {
                let most = *free.iter().max().unwrap();
                let want = free.iter().position(|&f| f == most).unwrap();
                assert_eq!(tree.top(), want, "{nodes} nodes: {free:?}");
                let take = rng.below(most.min(20) + 1);
                tree.take(want, take);
                free[want] -= take;
            }
        }
    }

    #[test]
    fn edge_cases() {
        assert!(Placement::new(0, 0, Capacity::Fraction(0.5), &[1, 2]).is_err());
        assert!(Placement::new(0, 2, Capacity::Fraction(1.5), &[1, 2]).is_err());
        let none = Placement::new(0, 3, Capacity::Bytes(0), &[1, 2, 3]).unwrap();
        assert_eq!(none.uncached_samples(), 3);
        assert_eq!(none.holder(0), None);
        // Empty samples are not placed; a sample larger than a node's cache is not either.
        let p = Placement::new(0, 2, Capacity::Bytes(10), &[0, 11, 10, 4]).unwrap();
        assert_eq!(p.holder(0), None);
        assert_eq!(p.holder(1), None);
        assert!(p.holder(2).is_some() && p.holder(3).is_some());
        assert_ne!(p.holder(2), p.holder(3));
        let empty = Placement::new(0, 2, Capacity::Fraction(0.5), &[]).unwrap();
        assert!(empty.is_empty() && empty.dataset_bytes() == 0);
    }
}
