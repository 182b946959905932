//! Locality-aware assignment (Yang & Cong, HiPC 2019): within each global batch, ranks
//! take the samples their node caches.
//!
//! With a partitioned cache ([`Placement`]) on `K` nodes, the plain plan gives a rank a
//! fixed slice of each global batch, so `(K − 1)/K` of its samples live on other nodes and
//! cross the network every epoch. But data-parallel SGD does not care *which* rank
//! computes on which sample of a global batch, only which samples the global batch holds
//! (the gradients are averaged over all of them). So the assignment can follow the data:
//!
//! 1. Each node takes the samples of the global batch it holds. A node runs
//!    `ranks_per_node` ranks (torchrun's local ranks), which share its cache, so locality
//!    is a property of the node, not of the rank: everything below counts per node and
//!    only at the end splits a node's samples among its ranks.
//! 2. Samples no node holds must come from storage whoever reads them, so they go to the
//!    nodes short of samples, by *water-filling*: the largest shortfalls are topped up
//!    first, which levels what each node still lacks (and with it the peer traffic each
//!    must receive), and uses up shortfalls that would otherwise be filled with cached
//!    samples moved from a peer.
//! 3. The counts are balanced with the two-heap procedure: pair the node with the largest
//!    surplus with the node with the largest deficit, move `min(surplus, deficit)`
//!    samples, repeat. Every node ends with exactly `ranks_per_node × b` samples. A node
//!    with a surplus must give away at least its surplus, so the samples moved (the sum
//!    of the surpluses) is the least possible; pairing largest with largest also keeps
//!    the number of sender–receiver pairs small (at most `K − 1`), so each node talks to
//!    few peers per step.
//! 4. A node's samples, in global-batch order, are dealt round-robin to its ranks, each
//!    getting exactly `b` (the per-rank count of this global batch), so every rank still
//!    has the same number of samples and batches as in the plain plan.
//!
//! The set of samples in each global batch is unchanged, so training sees the same
//! randomness as with the plain plan (Yang & Cong's Table I: same accuracy). What moves is
//! only the imbalance: when the nodes hold the whole dataset, a node's count in a global
//! batch is about Binomial(`K·L·b`, 1/`K`), and the share of the global batch moved is
//! `E|X − L·b| / (2·L·b)`, about `1/√(2π·L·b)`: 6.8/4.8/3.4% for `b` = 32/64/128 with one
//! rank per node, nearly independent of `K` (see `docs/distributed.md`).
//!
//! Everything is a pure function of the plan's inputs and the placement, so each rank
//! computes its own list ([`EpochPlan::locality_aware`]) with no messages, like the plain
//! plan. Ties (equal surpluses, equal deficits, the remainder of the water-filling) go to
//! nodes in an order rotated by the global batch's index, so no node is systematically
//! favoured. The tail is the plain plan's: the [`Shard`](super::Shard) policy makes the
//! order a multiple of the world size, the last global batch holds `world × r` samples
//! when each rank's last batch holds `r`, and each rank gets exactly `r` of them; with
//! `drop_last` that batch is not delivered, exactly as in the plain plan.
//!
//! Cost: `O(B + K log K)` per global batch of `B` samples, so `O(N + (N/B)·K log K)` per
//! rank per epoch, about as much as building the shuffle itself.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::{batches_for, sharded_order, EpochPlan, PlanConfig};
use crate::error::{Error, Result};
use crate::plan::placement::Placement;
use crate::sample::SampleId;

/// What a loader needs to plan locality-aware epochs: who caches what, and how many ranks
/// each node runs. Cheap to clone (the placement is shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locality {
    /// The partitioned cache's placement, the same on every rank.
    pub placement: Arc<Placement>,
    /// Ranks (torchrun's local ranks) per node; world size = nodes × this.
    pub ranks_per_node: usize,
}

/// An epoch's global order, made a multiple of the world size by the shard policy, split
/// into global batches: batch `k` holds batch `k` of every rank in the plain plan.
#[derive(Debug, Clone)]
pub struct GlobalBatches {
    order: Vec<SampleId>,
    world: usize,
    batch_size: usize,
    per_rank: usize,
    drop_last: bool,
}

impl GlobalBatches {
    /// The global batches of `epoch` under `config` (its `rank` is not used) over
    /// `dataset_len` samples.
    pub fn new(config: &PlanConfig, dataset_len: usize, epoch: u64) -> Result<GlobalBatches> {
        let (order, _, _) = sharded_order(config, dataset_len, epoch)?;
        Ok(GlobalBatches::from_order(order, config))
    }

    /// Splits `order`, already a multiple of `config.world` long.
    fn from_order(order: Vec<SampleId>, config: &PlanConfig) -> GlobalBatches {
        GlobalBatches {
            per_rank: order.len() / config.world,
            order,
            world: config.world,
            batch_size: config.batch_size,
            drop_last: config.drop_last,
        }
    }

    /// Number of global batches, the last, partial one included even under `drop_last`.
    pub fn len(&self) -> usize {
        batches_for(self.per_rank, self.batch_size, false)
    }

    /// Whether there is no global batch.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Global batches the loader delivers: [`GlobalBatches::len`], less a partial last
    /// one under `drop_last`.
    pub fn delivered(&self) -> usize {
        batches_for(self.per_rank, self.batch_size, self.drop_last)
    }

    /// The world size.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Global batch `k` (below [`GlobalBatches::len`]): `world` × (samples of each
    /// rank's batch `k`) samples, in the plain plan's order (rank `r` takes positions `r`,
    /// `r + world`, …).
    pub fn batch(&self, k: usize) -> &[SampleId] {
        let start = k * self.batch_size;
        let per_rank = self.batch_size.min(self.per_rank - start);
        &self.order[start * self.world..(start + per_rank) * self.world]
    }

    /// Every global batch, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[SampleId]> + '_ {
        (0..self.len()).map(|k| self.batch(k))
    }
}

/// One global batch's samples per rank under locality-aware assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Rank-major: rank `r`'s samples are `samples[r * per_rank..(r + 1) * per_rank]`.
    samples: Vec<SampleId>,
    per_rank: usize,
    moved: usize,
    uncached: usize,
}

impl Assignment {
    /// Rank `rank`'s samples, in global-batch order.
    pub fn rank(&self, rank: usize) -> &[SampleId] {
        &self.samples[rank * self.per_rank..(rank + 1) * self.per_rank]
    }

    /// Samples each rank gets.
    pub fn per_rank(&self) -> usize {
        self.per_rank
    }

    /// Samples in the global batch.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the global batch is empty.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Cached samples given by balancing to a node that does not hold them: what crosses
    /// the network between nodes.
    pub fn moved(&self) -> usize {
        self.moved
    }

    /// Samples no node caches (read from storage).
    pub fn uncached(&self) -> usize {
        self.uncached
    }
}

/// Computes locality-aware assignments of global batches, reusing its buffers.
#[derive(Debug)]
pub struct Assigner<'a> {
    placement: &'a Placement,
    ranks_per_node: usize,
    /// Per node: positions in the batch it holds and keeps, increasing.
    held: Vec<Vec<u32>>,
    /// Positions in the batch no node holds, increasing.
    uncached: Vec<u32>,
    /// Per position: the node that gets it.
    dest: Vec<u32>,
    /// Per node: samples it still lacks.
    deficit: Vec<usize>,
    /// Per node: samples of its own given out so far while dealing to its ranks.
    dealt: Vec<usize>,
    assignment: Assignment,
}

impl<'a> Assigner<'a> {
    /// An assigner for `placement`'s nodes, each running `ranks_per_node` ranks: rank `r`
    /// runs on node `r / ranks_per_node` (torchrun's `RANK = node × nproc + LOCAL_RANK`).
    pub fn new(placement: &'a Placement, ranks_per_node: usize) -> Result<Assigner<'a>> {
        if ranks_per_node == 0 {
            return Err(Error::Config(
                "a node runs at least 1 rank (ranks per node is 0)".into(),
            ));
        }
        let nodes = placement.nodes();
        Ok(Assigner {
            placement,
            ranks_per_node,
            held: vec![Vec::new(); nodes],
            uncached: Vec::new(),
            dest: Vec::new(),
            deficit: vec![0; nodes],
            dealt: vec![0; nodes],
            assignment: Assignment::default(),
        })
    }

    /// The world size: nodes × ranks per node.
    pub fn world(&self) -> usize {
        self.placement.nodes() * self.ranks_per_node
    }

    /// Assigns global batch number `index` (which only rotates tie-breaking), whose length
    /// must be a multiple of the world size.
    pub fn assign(&mut self, batch: &[SampleId], index: u64) -> Result<&Assignment> {
        let (nodes, local, world) = (self.placement.nodes(), self.ranks_per_node, self.world());
        if !batch.len().is_multiple_of(world) || batch.len() >= u32::MAX as usize {
            return Err(Error::Config(format!(
                "a global batch of {} samples does not split among {world} ranks",
                batch.len()
            )));
        }
        let per_rank = batch.len() / world;
        let need = per_rank * local;
        let rot = (index % nodes as u64) as usize;
        // Tie order of node n: lower is served first.
        let tie = |n: usize| (n + nodes - rot) % nodes;
        let node_of_tie = |t: usize| (t + rot) % nodes;

        // 1. Each node takes what it holds.
        for list in &mut self.held {
            list.clear();
        }
        self.uncached.clear();
        self.dest.clear();
        for (pos, &id) in batch.iter().enumerate() {
            match self.placement.holder(id) {
                Some(n) => {
                    self.held[n].push(pos as u32);
                    self.dest.push(n as u32);
                }
                None => {
                    self.uncached.push(pos as u32);
                    self.dest.push(u32::MAX);
                }
            }
        }
        for (n, deficit) in self.deficit.iter_mut().enumerate() {
            *deficit = need.saturating_sub(self.held[n].len());
        }

        // 2. Water-fill the shortfalls with the uncached samples: the smallest level t
        // with sum(max(0, deficit - t)) <= uncached, then one more to some nodes at the
        // level. The deficits exceed the surpluses by exactly the uncached count, so the
        // uncached samples always fit.
        let u = self.uncached.len();
        if u > 0 {
            let fill =
                |t: usize| -> usize { self.deficit.iter().map(|&d| d.saturating_sub(t)).sum() };
            let (mut lo, mut hi) = (0, self.deficit.iter().copied().max().unwrap_or(0));
            while lo < hi {
                let mid = (lo + hi) / 2;
                if fill(mid) <= u {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            let level = lo;
            let mut extra = u - fill(level);
            let mut next = 0;
            for t in 0..nodes {
                let n = node_of_tie(t);
                let mut give = self.deficit[n].saturating_sub(level);
                if extra > 0 && level > 0 && self.deficit[n] >= level {
                    give += 1;
                    extra -= 1;
                }
                for &pos in &self.uncached[next..next + give] {
                    self.dest[pos as usize] = n as u32;
                }
                next += give;
                self.deficit[n] -= give;
            }
            debug_assert_eq!(next, u);
        }

        // 3. Two heaps: largest surplus gives to largest deficit.
        let mut surplus: BinaryHeap<(usize, Reverse<usize>)> = BinaryHeap::new();
        let mut deficit: BinaryHeap<(usize, Reverse<usize>)> = BinaryHeap::new();
        for n in 0..nodes {
            let held = self.held[n].len();
            if held > need {
                surplus.push((held - need, Reverse(tie(n))));
            }
            if self.deficit[n] > 0 {
                deficit.push((self.deficit[n], Reverse(tie(n))));
            }
        }
        let mut moved = 0;
        while let Some((give, Reverse(from))) = surplus.pop() {
            let (take, Reverse(to)) = deficit
                .pop()
                .expect("surpluses and deficits add up to the same count");
            let m = give.min(take);
            let (from_node, to_node) = (node_of_tie(from), node_of_tie(to));
            // The holder's last positions in the batch go.
            let held = &mut self.held[from_node];
            for pos in held.drain(held.len() - m..) {
                self.dest[pos as usize] = to_node as u32;
            }
            moved += m;
            if give > m {
                surplus.push((give - m, Reverse(from)));
            }
            if take > m {
                deficit.push((take - m, Reverse(to)));
            }
        }
        debug_assert!(deficit.is_empty());

        // 4. Deal each node's samples, in batch order, round-robin to its ranks.
        let a = &mut self.assignment;
        a.samples.clear();
        a.samples.resize(batch.len(), 0);
        a.per_rank = per_rank;
        a.moved = moved;
        a.uncached = u;
        self.dealt.iter_mut().for_each(|d| *d = 0);
        for (pos, &id) in batch.iter().enumerate() {
            let n = self.dest[pos] as usize;
            let j = self.dealt[n];
            self.dealt[n] += 1;
            let rank = n * local + j % local;
            a.samples[rank * per_rank + j / local] = id;
        }
        debug_assert!(self.dealt.iter().all(|&d| d == need));
        Ok(&self.assignment)
    }
}

impl EpochPlan {
    /// The plan of `epoch` for the rank described by `config`, over `dataset_len` samples,
    /// under locality-aware assignment to the nodes of `placement`, each running
    /// `ranks_per_node` ranks (so `config.world` must be nodes × ranks per node).
    ///
    /// Global batch `k` holds the same samples as in [`EpochPlan::new`], each rank gets as
    /// many samples of it as there, and so the same number of batches; what differs is
    /// which rank gets which sample. The padded and dropped samples are the plain plan's.
    pub fn locality_aware(
        config: &PlanConfig,
        placement: &Placement,
        ranks_per_node: usize,
        dataset_len: usize,
        epoch: u64,
    ) -> Result<EpochPlan> {
        if config.repeats > 1 || config.mixture.is_some() {
            return Err(Error::Config(
                "repeated augmentation or a mixture of datasets with a partitioned cache's \
                 locality-aware plan is not supported: leave one of them out"
                    .into(),
            ));
        }
        if placement.len() != dataset_len {
            return Err(Error::Config(format!(
                "the cache placement covers {} samples, the dataset {dataset_len}",
                placement.len()
            )));
        }
        let (order, padded, dropped) = sharded_order(config, dataset_len, epoch)?;
        Ok(EpochPlan {
            epoch,
            samples: rank_share(config, placement, ranks_per_node, order)?,
            batch_size: config.batch_size,
            drop_last: config.drop_last,
            padded,
            dropped,
            repeats: Vec::new(),
        })
    }
}

/// Rank `config.rank`'s samples of `order` (a multiple of the world size long) under
/// locality-aware assignment, global batch by global batch.
pub(super) fn rank_share(
    config: &PlanConfig,
    placement: &Placement,
    ranks_per_node: usize,
    order: Vec<SampleId>,
) -> Result<Vec<SampleId>> {
    if placement.nodes() * ranks_per_node != config.world {
        return Err(Error::Config(format!(
            "{} nodes × {ranks_per_node} ranks per node is not the world size {}",
            placement.nodes(),
            config.world
        )));
    }
    let batches = GlobalBatches::from_order(order, config);
    let mut assigner = Assigner::new(placement, ranks_per_node)?;
    let mut samples = Vec::with_capacity(batches.per_rank);
    for (k, batch) in batches.iter().enumerate() {
        samples.extend_from_slice(assigner.assign(batch, k as u64)?.rank(config.rank));
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Capacity;
    use crate::plan::Shard;
    use crate::rng::Rng;

    fn config(rank: usize, world: usize, batch_size: usize) -> PlanConfig {
        PlanConfig {
            seed: 4,
            rank,
            world,
            batch_size,
            ..PlanConfig::default()
        }
    }

    fn sorted(mut v: Vec<SampleId>) -> Vec<SampleId> {
        v.sort_unstable();
        v
    }

    fn varied_sizes(n: usize) -> Vec<u64> {
        let mut rng = Rng::new(n as u64);
        (0..n).map(|_| 1_000 + rng.below(2_000)).collect()
    }

    #[test]
    fn global_batches_hold_every_rank_s_plain_batch() {
        for (len, world, b, shard, drop_last) in [
            (1_000, 4, 32, Shard::Pad, false),
            (1_003, 4, 32, Shard::Pad, true),
            (1_003, 6, 7, Shard::Drop, false),
            (5, 8, 3, Shard::Pad, false),
        ] {
            let cfg = PlanConfig {
                shard,
                drop_last,
                ..config(0, world, b)
            };
            let g = GlobalBatches::new(&cfg, len, 2).unwrap();
            let plans: Vec<EpochPlan> = (0..world)
                .map(|r| {
                    EpochPlan::new(
                        &PlanConfig {
                            rank: r,
                            ..cfg.clone()
                        },
                        len,
                        2,
                    )
                    .unwrap()
                })
                .collect();
            assert_eq!(g.delivered(), plans[0].num_batches());
            assert_eq!(g.world(), world);
            for (k, batch) in g.iter().enumerate() {
                for (r, plan) in plans.iter().enumerate() {
                    let plain = &plan.samples()[k * b..plan.samples().len().min((k + 1) * b)];
                    let from_global: Vec<_> =
                        batch.iter().skip(r).step_by(world).copied().collect();
                    assert_eq!(from_global, plain, "batch {k} rank {r}");
                }
            }
            let total: usize = g.iter().map(<[_]>::len).sum();
            assert_eq!(
                total,
                plans.iter().map(|p| p.samples().len()).sum::<usize>()
            );
        }
    }

    /// The locality plans of every rank against the plain plans, over several shapes.
    #[test]
    fn locality_keeps_every_global_batch_and_equal_batch_counts() {
        let shapes = [
            // (samples, nodes, ranks per node, batch, shard, drop_last, cache fraction)
            (2_000, 4, 1, 32, Shard::Pad, false, 0.25),
            (2_003, 4, 2, 16, Shard::Pad, false, 0.30),
            (2_003, 3, 2, 10, Shard::Drop, true, 0.20),
            (997, 5, 1, 8, Shard::Drop, false, 0.05),
            (7, 4, 1, 4, Shard::Pad, false, 0.50),
            (3_000, 8, 1, 16, Shard::Pad, false, 0.0),
        ];
        for (len, nodes, local, b, shard, drop_last, fraction) in shapes {
            let world = nodes * local;
            let placement =
                Placement::new(1, nodes, Capacity::Fraction(fraction), &varied_sizes(len)).unwrap();
            for epoch in [0, 3] {
                let cfg = PlanConfig {
                    shard,
                    drop_last,
                    ..config(0, world, b)
                };
                let plain: Vec<EpochPlan> = (0..world)
                    .map(|r| {
                        EpochPlan::new(
                            &PlanConfig {
                                rank: r,
                                ..cfg.clone()
                            },
                            len,
                            epoch,
                        )
                        .unwrap()
                    })
                    .collect();
                let local_plans: Vec<EpochPlan> = (0..world)
                    .map(|r| {
                        let cfg = PlanConfig {
                            rank: r,
                            ..cfg.clone()
                        };
                        EpochPlan::locality_aware(&cfg, &placement, local, len, epoch).unwrap()
                    })
                    .collect();
                for (p, l) in plain.iter().zip(&local_plans) {
                    assert_eq!(p.samples().len(), l.samples().len());
                    assert_eq!(p.num_batches(), l.num_batches());
                    assert_eq!((p.padded(), p.dropped()), (l.padded(), l.dropped()));
                    assert_eq!(l.epoch(), epoch);
                }
                // Global batch k: the same multiset of samples (so exactly once per epoch
                // when nothing is padded), each rank with as many as in the plain plan.
                let per_rank = plain[0].samples().len();
                for k in 0..per_rank.div_ceil(b) {
                    let range = k * b..per_rank.min((k + 1) * b);
                    let gather = |plans: &[EpochPlan]| {
                        sorted(
                            plans
                                .iter()
                                .flat_map(|p| p.samples()[range.clone()].to_vec())
                                .collect(),
                        )
                    };
                    assert_eq!(
                        gather(&plain),
                        gather(&local_plans),
                        "{len} {nodes}×{local} batch {k}"
                    );
                }
                if shard == Shard::Drop {
                    let all = sorted(
                        local_plans
                            .iter()
                            .flat_map(|p| p.samples().to_vec())
                            .collect(),
                    );
                    let mut want =
                        sorted(plain.iter().flat_map(|p| p.samples().to_vec()).collect());
                    assert_eq!(all, want);
                    want.dedup();
                    assert_eq!(all.len(), want.len(), "a sample twice in one epoch");
                }
            }
        }
    }

    #[test]
    fn ranks_take_what_their_node_holds_and_only_the_surplus_moves() {
        let (len, nodes, local, b) = (20_000, 8, 2, 16);
        let placement =
            Placement::new(2, nodes, Capacity::Fraction(0.1), &varied_sizes(len)).unwrap();
        let cfg = config(0, nodes * local, b);
        let g = GlobalBatches::new(&cfg, len, 1).unwrap();
        let mut assigner = Assigner::new(&placement, local).unwrap();
        let mut moved_total = 0;
        let (mut foreign_of, mut reads_of) = (vec![0; nodes], vec![0; nodes]);
        for (k, batch) in g.iter().enumerate() {
            let a = assigner.assign(batch, k as u64).unwrap().clone();
            // The last global batch is partial: 2 samples per rank.
            let need = local * a.per_rank();
            assert_eq!(
                need,
                if k + 1 < g.len() {
                    local * b
                } else {
                    local * 2
                }
            );
            let mut held = vec![0usize; nodes];
            let mut uncached = 0;
            for &id in batch {
                match placement.holder(id) {
                    Some(n) => held[n] += 1,
                    None => uncached += 1,
                }
            }
            let surplus: usize = held.iter().map(|&h| h.saturating_sub(need)).sum();
            assert_eq!(a.moved(), surplus, "batch {k}: only the surplus moves");
            assert_eq!(a.uncached(), uncached);
            assert_eq!(a.len(), batch.len());
            moved_total += a.moved();
            for n in 0..nodes {
                let mine: Vec<SampleId> = (0..local)
                    .flat_map(|l| a.rank(n * local + l).to_vec())
                    .collect();
                assert_eq!(mine.len(), need);
                let own = mine.iter().filter(|&&id| placement.holds(n, id)).count();
                let foreign = mine
                    .iter()
                    .filter(|&&id| placement.holder(id).is_some_and(|h| h != n))
                    .count();
                // A node keeps min(held, need) of its own and takes foreign samples only
                // when uncached ones could not fill its shortfall.
                assert_eq!(own, held[n].min(need), "batch {k} node {n}");
                if foreign > 0 {
                    assert_eq!(own, held[n]);
                }
                foreign_of[n] = foreign;
                reads_of[n] = need - own - foreign;
            }
            // Water-filling levels what nodes receive from peers: no node receives more
            // than one sample beyond any node that was also given storage reads.
            let most = foreign_of.iter().max().unwrap();
            for n in (0..nodes).filter(|&n| reads_of[n] > 0) {
                assert!(
                    *most <= foreign_of[n] + 1,
                    "batch {k}: {foreign_of:?} {reads_of:?}"
                );
            }
            for r in 0..nodes * local {
                assert!(a.rank(r).windows(2).all(|w| {
                    let pos = |id| batch.iter().position(|&x| x == id).unwrap();
                    pos(w[0]) < pos(w[1])
                }));
            }
        }
        assert!(moved_total > 0);
        // The plain plan moves far more: everything a node does not hold.
        let plain_foreign: usize = (0..nodes * local)
            .map(|r| {
                let p = EpochPlan::new(&config(r, nodes * local, b), len, 1).unwrap();
                p.samples()
                    .iter()
                    .filter(|&&id| placement.holder(id).is_some_and(|h| h != r / local))
                    .count()
            })
            .sum();
        assert!(
            moved_total * 5 < plain_foreign,
            "{moved_total} vs {plain_foreign}"
        );
    }

    #[test]
    fn uncached_samples_are_spread_over_the_shortfalls() {
        // Half the dataset cached: each node's shortfall is mostly filled from storage, so
        // nodes end up reading about the same number of uncached samples.
        let (len, nodes, b) = (40_000, 10, 64);
        let placement = Placement::new(0, nodes, Capacity::Fraction(0.05), &vec![10; len]).unwrap();
        let g = GlobalBatches::new(&config(0, nodes, b), len, 0).unwrap();
        let mut assigner = Assigner::new(&placement, 1).unwrap();
        for (k, batch) in g.iter().enumerate() {
            let a = assigner.assign(batch, k as u64).unwrap();
            let reads: Vec<usize> = (0..nodes)
                .map(|r| {
                    a.rank(r)
                        .iter()
                        .filter(|&&id| placement.holder(id).is_none())
                        .count()
                })
                .collect();
            let held: Vec<usize> = (0..nodes)
                .map(|n| batch.iter().filter(|&&id| placement.holds(n, id)).count())
                .collect();
            // No node holds more than a batch's worth, so nothing moves, and each node
            // reads from storage exactly what it lacks after its own samples.
            assert_eq!(a.moved(), 0);
            // (The last global batch is partial: 32 samples per rank.)
            assert_eq!(a.per_rank(), if k + 1 < g.len() { b } else { 32 });
            for n in 0..nodes {
                assert_eq!(reads[n], a.per_rank() - held[n]);
            }
            assert_eq!(reads.iter().sum::<usize>(), a.uncached());
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_plan() {
        let len = 3_000;
        let placement = Placement::new(3, 4, Capacity::Fraction(0.25), &varied_sizes(len)).unwrap();
        let a = EpochPlan::locality_aware(&config(2, 4, 8), &placement, 1, len, 5).unwrap();
        let b = EpochPlan::locality_aware(&config(2, 4, 8), &placement, 1, len, 5).unwrap();
        let c = EpochPlan::locality_aware(&config(2, 4, 8), &placement, 1, len, 6).unwrap();
        assert_eq!(a.samples(), b.samples());
        assert_ne!(a.samples(), c.samples());
        // Each rank's own computation agrees with the whole batch's assignment.
        let g = GlobalBatches::new(&config(0, 4, 8), len, 5).unwrap();
        let mut assigner = Assigner::new(&placement, 1).unwrap();
        let whole: Vec<SampleId> = g
            .iter()
            .enumerate()
            .flat_map(|(k, batch)| assigner.assign(batch, k as u64).unwrap().rank(2).to_vec())
            .collect();
        assert_eq!(a.samples(), &whole[..]);
    }

    #[test]
    fn bad_settings_are_rejected() {
        let placement = Placement::new(0, 4, Capacity::Fraction(0.25), &vec![1; 100]).unwrap();
        assert!(Assigner::new(&placement, 0).is_err());
        let mut assigner = Assigner::new(&placement, 2).unwrap();
        assert_eq!(assigner.world(), 8);
        assert!(assigner.assign(&[1, 2, 3], 0).is_err());
        // World size must be nodes × ranks per node, and the placement the dataset's.
        assert!(EpochPlan::locality_aware(&config(0, 4, 8), &placement, 2, 100, 0).is_err());
        assert!(EpochPlan::locality_aware(&config(0, 8, 8), &placement, 2, 99, 0).is_err());
        assert!(EpochPlan::locality_aware(&config(8, 8, 8), &placement, 2, 100, 0).is_err());
        assert!(EpochPlan::locality_aware(&config(7, 8, 8), &placement, 2, 100, 0).is_ok());
    }
}
