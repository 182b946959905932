//! Resuming an epoch with a different number of ranks.
//!
//! A job restarted after a failure often gets another number of GPUs. An epoch it
//! interrupts is then made of *stretches*, each run by a fixed number of ranks and ended by
//! an interruption ([`Stretch`]); the plan of the rest is a pure function of the plan's
//! inputs and those stretches, so every rank of the new job computes its share alone, as
//! for a fresh epoch:
//!
//! 1. **What a stretch consumed.** Under data-parallel training every rank has taken the
//!    same number of batches `b` when the job stops, so, when no sample was skipped, the
//!    ranks consumed exactly the first `b` global batches: a prefix of the stretch's
//!    sharded order. That holds for locality-aware plans too, which keep each global
//!    batch's contents and only move samples between its ranks, so one rank's saved state
//!    is enough ([`Stretch::consumed`] is `None`). A skipped sample pulls the next ones of
//!    its rank's stream forward, so after skips the prefix differs per rank: then every
//!    rank's count is needed, and only the plain plan (rank `r` takes every `world`-th
//!    sample from `r`) says which samples they were.
//! 2. **What is left** ([`remaining`]) keeps its order in the epoch's global order; for an
//!    order read in groups ([`Blocks`](super::Blocks)), it lists each rank's unconsumed
//!    samples rank by rank instead, so that the samples of a group stay together, in the
//!    order they had.
//! 3. **The new ranks' shares**: the rest is made a multiple of the new world size by the
//!    shard policy (padded by repeating its head, or cut) and dealt as a fresh epoch's
//!    order is, plainly or locality-aware for the new membership
//!    ([`EpochPlan::resumed`]). Every rank therefore gets the same number of samples and
//!    batches, and each sample is delivered once over the epoch (padding aside). An order
//!    read in groups is dealt by group: new rank `r` takes the `r`-th run of the rest, and
//!    so keeps about as many groups open as a rank of the epoch did. (Dealt sample by
//!    sample, one rank resuming the rest of eight drew from the open groups of all eight
//!    and decoded a group again for nearly every sample: 78 MB read for a 1.3 MB file.)
//!
//! The rest is found by taking away, stretch by stretch, the positions each consumed,
//! each in O(log n) (a Fenwick tree of the samples left): the work is in proportion to the
//! samples consumed and the counts a history carries, not to its stretches times the
//! dataset's size, which made a crafted history of 4 096 stretches slow to load.
//!
//! A sample's augmentation is drawn from (seed, epoch, sample), never from the rank or
//! its position, so a sample delivered after the change is prepared exactly as it would
//! have been without it.

use super::locality::{rank_share, Locality};
use super::{shard, EpochPlan, PlanConfig};
use crate::error::{Error, Result};
use crate::sample::SampleId;

/// One stretch of an interrupted epoch: `world` ranks ran it until each had delivered
/// `batches` batches of the epoch (counting those of earlier stretches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stretch {
    /// Ranks that ran it.
    pub world: u64,
    /// Batches of the epoch each rank had delivered when it ended.
    pub batches: u64,
    /// Samples of its stream each rank had consumed (delivered or skipped), rank by rank;
    /// `None` when each had consumed whole batches only (no skip) since the stretch
    /// before.
    pub consumed: Option<Vec<u64>>,
}

/// The samples of `epoch` that `history` left, in the epoch's global order (rank by rank
/// for an order read in groups: see the [module](self)); `config`'s rank and world are
/// not used (each stretch has its own).
///
/// # Errors
///
/// [`Error::Config`] when a stretch does not fit the plan (no rank, a count per rank
/// that does not match its world, more samples consumed than a rank had).
pub fn remaining(
    config: &PlanConfig,
    dataset_len: usize,
    epoch: u64,
    history: &[Stretch],
) -> Result<Vec<SampleId>> {
    Ok(rest(config, dataset_len, epoch, history, false)?.into_order())
}

/// [`remaining`], before it is read out; with `positions`, of the positions in the epoch's
/// order rather than the samples at them (a mixture's order holds a sample more than
/// once, each occurrence with its own augmentation).
fn rest(
    config: &PlanConfig,
    dataset_len: usize,
    epoch: u64,
    history: &[Stretch],
    positions: bool,
) -> Result<Left> {
    // The epoch's order is the one its first ranks were dealt (with groups, each rank's
    // stretch of it draws from its own groups); later stretches deal what is left anew.
    let first_world = history.first().map_or(config.world, |s| {
        usize::try_from(s.world).unwrap_or(usize::MAX)
    });
    let mut order = super::order_of(config, epoch, dataset_len, first_world)?;
    if positions {
        order = (0..order.len() as SampleId).collect();
    }
    let mut before = 0;
    let mut stretches = history.iter();
    let runs = by_group(config);
    if runs {
        if let Some(first) = stretches.next() {
            let taken = Taken::of(config, dataset_len, first, order.len(), &mut before)?;
            order = by_rank(order, &taken);
        }
    }
    let mut left = Left::new(order);
    for stretch in stretches {
        let len = left.len();
        let taken = Taken::of(config, dataset_len, stretch, len, &mut before)?;
        // Where rank `r`'s `k`-th sample lay in the stretch's sharded order: every
        // `world`-th from `r`, or the `k`-th of the `r`-th run (positions past `len`
        // are padding, which takes nothing away).
        let at = |rank: usize, k: usize| match runs {
            true => rank.saturating_mul(taken.per_rank).saturating_add(k),
            false => k.saturating_mul(taken.world).saturating_add(rank),
        };
        let mut consumed = Vec::new();
        for (rank, count) in taken.ranks() {
            if at(rank, 0) >= len {
                break;
            }
            for k in 0..count {
                let p = at(rank, k);
                if p >= len {
                    break;
                }
                consumed.push(left.index_of(p));
            }
        }
        for index in consumed {
            left.take(index);
        }
    }
    Ok(left)
}

/// Whether `config`'s order is read in groups ([`Blocks`](super::Blocks)), and the rest
/// of an interrupted epoch of it dealt by group.
fn by_group(config: &PlanConfig) -> bool {
    config.shuffle && config.blocks.is_some()
}

/// What one stretch consumed: how many samples of its stream each rank took.
struct Taken<'a> {
    world: usize,
    /// Samples of each rank's stream in the stretch.
    per_rank: usize,
    counts: Counts<'a>,
}

enum Counts<'a> {
    /// As many for every rank: whole batches.
    Each(usize),
    /// Rank by rank, after skips.
    Ranks(&'a [u64]),
}

impl<'a> Taken<'a> {
    /// What `stretch` took of the `len` samples its order had, the stretches before it
    /// having delivered `before` batches (moved on to its own).
    fn of(
        config: &PlanConfig,
        dataset_len: usize,
        stretch: &'a Stretch,
        len: usize,
        before: &mut u64,
    ) -> Result<Taken<'a>> {
        let world = usize::try_from(stretch.world).unwrap_or(usize::MAX);
        if world == 0 || world > dataset_len.max(1) * 1024 {
            return Err(bad_stretch(stretch, "its world size"));
        }
        let per_rank = match config.shard {
            super::Shard::Drop => len / world,
            _ => len.div_ceil(world),
        };
        let batches = stretch
            .batches
            .checked_sub(*before)
            .ok_or_else(|| bad_stretch(stretch, "its count of batches"))?;
        *before = stretch.batches;
        let counts = match &stretch.consumed {
            None => Counts::Each(
                usize::try_from(batches)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(config.batch_size)
                    .min(per_rank),
            ),
            Some(counts) => {
                if counts.len() != world {
                    return Err(bad_stretch(stretch, "its count of ranks"));
                }
                if counts.iter().any(|&n| n > per_rank as u64) {
                    return Err(bad_stretch(stretch, "a rank's count of samples"));
                }
                Counts::Ranks(counts)
            }
        };
        Ok(Taken {
            world,
            per_rank,
            counts,
        })
    }

    /// Samples rank `rank` took.
    fn count(&self, rank: usize) -> usize {
        match self.counts {
            Counts::Each(n) => n,
            Counts::Ranks(counts) => counts[rank] as usize,
        }
    }

    /// The ranks that took samples, in order, with how many each (none at all when the
    /// stretch took none: a crafted history of empty stretches costs nothing per rank).
    fn ranks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let ranks = match self.counts {
            Counts::Each(0) => 0,
            _ => self.world,
        };
        (0..ranks)
            .map(|rank| (rank, self.count(rank)))
            .filter(|&(_, n)| n > 0)
    }
}

/// `order`, the epoch's order as its first stretch was dealt it (rank `r` every
/// `world`-th sample from `r`), less what that stretch took: each rank's unconsumed
/// samples rank by rank, then those its shard policy left out. Each rank's stream draws
/// from its own open groups, so this keeps a group's samples together.
fn by_rank(order: Vec<SampleId>, taken: &Taken) -> Vec<SampleId> {
    let (len, world) = (order.len(), taken.world);
    let dealt = taken.per_rank.saturating_mul(world).min(len);
    let mut rest = Vec::with_capacity(len);
    for rank in 0..world.min(len) {
        let mut p = taken.count(rank).saturating_mul(world).saturating_add(rank);
        while p < dealt {
            rest.push(order[p]);
            p += world;
        }
    }
    rest.extend_from_slice(&order[dealt..]);
    rest
}

/// The samples of an epoch not consumed yet, in order, as stretches take them away by
/// their positions among those left: a Fenwick tree counts the samples left up to each
/// index of the order, so that finding the `p`-th one left and taking it away cost
/// O(log n) each.
struct Left {
    order: Vec<SampleId>,
    gone: Vec<bool>,
    /// `tree[i]` (from 1) counts the samples left among the `i & -i` indices of the order
    /// that end at index `i - 1`.
    tree: Vec<usize>,
    len: usize,
    /// Lookups made so far: the work a history cost.
    #[cfg(test)]
    lookups: usize,
}

impl Left {
    fn new(order: Vec<SampleId>) -> Left {
        let n = order.len();
        let mut tree = vec![0; n + 1];
        for i in 1..=n {
            tree[i] += 1;
            let up = i + (i & i.wrapping_neg());
            if up <= n {
                tree[up] += tree[i];
            }
        }
        Left {
            gone: vec![false; n],
            order,
            tree,
            len: n,
            #[cfg(test)]
            lookups: 0,
        }
    }

    /// Samples left.
    fn len(&self) -> usize {
        self.len
    }

    /// The index in the order of the `p`-th sample left (`p < len`).
    fn index_of(&mut self, p: usize) -> usize {
        #[cfg(test)]
        {
            self.lookups += 1;
        }
        let n = self.order.len();
        let (mut at, mut skip) = (0, p);
        let mut step = n.checked_ilog2().map_or(0, |b| 1 << b);
        while step > 0 {
            if at + step <= n && self.tree[at + step] <= skip {
                at += step;
                skip -= self.tree[at];
            }
            step /= 2;
        }
        at
    }

    /// Takes away the sample at `index` of the order (one left).
    fn take(&mut self, index: usize) {
        self.gone[index] = true;
        self.len -= 1;
        let mut i = index + 1;
        while i < self.tree.len() {
            self.tree[i] -= 1;
            i += i & i.wrapping_neg();
        }
    }

    /// The samples left, in order.
    fn into_order(self) -> Vec<SampleId> {
        self.order
            .into_iter()
            .zip(self.gone)
            .filter_map(|(id, gone)| (!gone).then_some(id))
            .collect()
    }
}

fn bad_stretch(stretch: &Stretch, what: &str) -> Error {
    Error::Config(format!(
        "the saved state's history does not fit this dataset and plan ({what}: {stretch:?}); \
         give the state that was saved with it"
    ))
}

/// `order` (a multiple of `world` long) dealt in runs: position `k · world + r` of the
/// result is the `k`-th sample of the `r`-th run, so that rank `r`, which takes every
/// `world`-th sample from `r`, takes the `r`-th run.
fn in_runs(order: &[SampleId], world: usize) -> Vec<SampleId> {
    let per_rank = order.len() / world;
    (0..order.len())
        .map(|p| order[p % world * per_rank + p / world])
        .collect()
}

impl EpochPlan {
    /// The plan of the rest of `epoch` for the rank described by `config`, after the
    /// stretches of `history` (see the [module](self)); with no history, the plan of the
    /// whole epoch, plain ([`EpochPlan::new`]) or locality-aware
    /// ([`EpochPlan::locality_aware`]) as `locality` says.
    ///
    /// # Errors
    ///
    /// As [`remaining`], and as the plain or locality-aware plan.
    pub fn resumed(
        config: &PlanConfig,
        locality: Option<&Locality>,
        dataset_len: usize,
        epoch: u64,
        history: &[Stretch],
    ) -> Result<EpochPlan> {
        if history.is_empty() {
            return match locality {
                None => EpochPlan::new(config, dataset_len, epoch),
                Some(l) => EpochPlan::locality_aware(
                    config,
                    &l.placement,
                    l.ranks_per_node,
                    dataset_len,
                    epoch,
                ),
            };
        }
        config.validate(dataset_len)?;
        if config.repeats > 1 {
            return Err(Error::Config(
                "an epoch under repeated augmentation resumes on the number of ranks it was \
                 saved on (its repeats are dealt to ranks in a row)"
                    .into(),
            ));
        }
        // A mixture's rest keeps each occurrence's repeat number, which keys its draws.
        let (left, repeats) = match &config.mixture {
            None => (remaining(config, dataset_len, epoch, history)?, Vec::new()),
            Some(_) => {
                let order = super::order_of(config, epoch, dataset_len, config.world)?;
                let occurrences = super::occurrences(&order, dataset_len);
                let at = rest(config, dataset_len, epoch, history, true)?.into_order();
                let left = at.iter().map(|&p| order[p as usize]).collect();
                (left, at.iter().map(|&p| occurrences[p as usize]).collect())
            }
        };
        let repeats = match repeats.is_empty() {
            true => Vec::new(),
            false => {
                let (repeats, _, _) = shard(repeats, config.world, config.shard);
                repeats
                    .into_iter()
                    .skip(config.rank)
                    .step_by(config.world)
                    .map(|r| r as u32)
                    .collect()
            }
        };
        let (order, padded, dropped) = shard(left, config.world, config.shard);
        let order = match by_group(config) {
            true => in_runs(&order, config.world),
            false => order,
        };
        let samples = match locality {
            None => order
                .into_iter()
                .skip(config.rank)
                .step_by(config.world)
                .collect(),
            Some(l) => rank_share(config, &l.placement, l.ranks_per_node, order)?,
        };
        Ok(EpochPlan {
            epoch,
            samples,
            batch_size: config.batch_size,
            drop_last: config.drop_last,
            padded,
            dropped,
            repeats,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::plan::placement::Placement;
    use crate::plan::Capacity;
    use crate::plan::{Blocks, Shard};
    use crate::rng::Rng;

    fn config(rank: usize, world: usize, shard: Shard) -> PlanConfig {
        PlanConfig {
            seed: 5,
            rank,
            world,
            batch_size: 3,
            shard,
            ..PlanConfig::default()
        }
    }

    /// Runs `worlds` in turn over epoch 2, each rank of a stretch consuming `consumed(world,
    /// rank, stream)` samples of its stream (the last stretch runs to the end); returns every
    /// consumed sample with how often, and the last stretch's plan of rank 0.
    fn run(
        len: usize,
        shard: Shard,
        worlds: &[usize],
        consumed: impl FnMut(usize, usize, &[SampleId]) -> (usize, bool),
    ) -> (BTreeMap<SampleId, usize>, EpochPlan) {
        run_in_blocks(len, shard, None, worlds, consumed)
    }

    /// [`run`] with samples read in `blocks`.
    fn run_in_blocks(
        len: usize,
        shard: Shard,
        blocks: Option<Blocks>,
        worlds: &[usize],
        mut consumed: impl FnMut(usize, usize, &[SampleId]) -> (usize, bool),
    ) -> (BTreeMap<SampleId, usize>, EpochPlan) {
        let config = |rank, world| PlanConfig {
            blocks: blocks.clone(),
            ..config(rank, world, shard)
        };
        let (mut history, mut batches) = (Vec::new(), 0);
        let mut seen = BTreeMap::new();
        for (i, &world) in worlds.iter().enumerate() {
            let last = i + 1 == worlds.len();
            let plans: Vec<EpochPlan> = (0..world)
                .map(|r| EpochPlan::resumed(&config(r, world), None, len, 2, &history))
                .collect::<Result<_>>()
                .unwrap();
            let per_rank: Vec<usize> = plans.iter().map(|p| p.samples().len()).collect();
            assert!(per_rank.iter().all(|&n| n == per_rank[0]), "{per_rank:?}");
            let mut counts = Vec::new();
            let mut whole = true;
            for (rank, plan) in plans.iter().enumerate() {
                let (n, no_skip) = if last {
                    (plan.samples().len(), true)
                } else {
                    consumed(world, rank, plan.samples())
                };
                whole &= no_skip;
                counts.push(n as u64);
                for &id in &plan.samples()[..n] {
                    *seen.entry(id).or_insert(0) += 1;
                }
            }
            if last {
                return (seen, plans.into_iter().next().unwrap());
            }
            batches += counts[0] / 3;
            history.push(Stretch {
                world: world as u64,
                batches,
                consumed: if whole { None } else { Some(counts) },
            });
        }
        unreachable!("worlds is not empty")
    }

    #[test]
    fn without_history_it_is_the_fresh_plan() {
        for world in 1..4 {
            for rank in 0..world {
                let c = config(rank, world, Shard::Pad);
                let fresh = EpochPlan::new(&c, 31, 4).unwrap();
                let resumed = EpochPlan::resumed(&c, None, 31, 4, &[]).unwrap();
                assert_eq!(fresh.samples(), resumed.samples());
            }
        }
    }

    #[test]
    fn every_sample_once_across_changes_of_world_size() {
        // 2 ranks take 2 batches (12 samples), 3 ranks 1 batch each (9), 1 rank the rest.
        let (seen, last) = run(48, Shard::Pad, &[2, 3, 1], |world, _, _| {
            (if world == 2 { 6 } else { 3 }, true)
        });
        assert_eq!(seen.len(), 48);
        assert!(seen.values().all(|&n| n == 1), "{seen:?}");
        assert_eq!(last.samples().len(), 48 - 12 - 9);
        assert_eq!(last.padded(), 0);
    }

    #[test]
    fn every_sample_once_when_ranks_read_their_own_groups() {
        // Each of the 2 first ranks draws from its own groups; the 3 after them deal
        // what is left of that order.
        let lengths = [7u32; 12];
        let blocks = Blocks::new(&lengths, 2);
        assert!(blocks.is_some());
        let (seen, last) = run_in_blocks(84, Shard::Pad, blocks, &[2, 3, 1], |world, _, _| {
            (if world == 2 { 9 } else { 6 }, true)
        });
        assert_eq!(seen.len(), 84);
        assert!(seen.values().all(|&n| n == 1), "{seen:?}");
        assert_eq!(last.samples().len(), 84 - 18 - 18);
    }

    #[test]
    fn skips_need_every_ranks_count_and_still_give_each_sample_once() {
        // Rank streams consumed unevenly, as after skips: 4, 5 and 7 samples.
        let (seen, _) = run(40, Shard::Drop, &[3, 2], |_, rank, _| {
            ([4, 5, 7][rank], false)
        });
        let last = EpochPlan::resumed(
            &config(0, 2, Shard::Drop),
            None,
            40,
            2,
            &[Stretch {
                world: 3,
                batches: 1,
                consumed: Some(vec![4, 5, 7]),
            }],
        )
        .unwrap();
        assert!(seen.values().all(|&n| n == 1));
        let mut all: Vec<SampleId> = seen.keys().copied().collect();
        all.extend_from_slice(last.dropped());
        all.sort_unstable();
        assert_eq!(
            all,
            (0..40).collect::<Vec<_>>(),
            "delivered or dropped, once"
        );
    }

    #[test]
    fn random_histories_deliver_every_sample_with_padding_only_as_policy() {
        let mut rng = Rng::new(77);
        for _ in 0..300 {
            let len = 1 + rng.below(60) as usize;
            let stretches = 1 + rng.below(4) as usize;
            let worlds: Vec<usize> = (0..stretches).map(|_| 1 + rng.below(5) as usize).collect();
            let shard = if rng.below(2) == 0 {
                Shard::Pad
            } else {
                Shard::Drop
            };
            if shard == Shard::Drop && worlds.iter().any(|&w| w > len) {
                continue;
            }
            // Half of them read in groups of 1 to 8 samples, 1 to 3 open on each rank.
            let blocks = (rng.below(2) == 0).then(|| {
                let mut lengths = Vec::new();
                let mut sum = 0;
                while sum < len {
                    let length = (1 + rng.below(8) as usize).min(len - sum);
                    lengths.push(length as u32);
                    sum += length;
                }
                Blocks::new(&lengths, 1 + rng.below(3) as usize)
            });
            let mut draws = Rng::new(len as u64);
            let (seen, _) = run_in_blocks(len, shard, blocks.flatten(), &worlds, |_, _, stream| {
                let n = draws.below(stream.len() as u64 + 1) as usize;
                (n, false)
            });
            match shard {
                // Padding repeats samples only to even out ranks: at most world − 1 per
                // stretch.
                Shard::Pad => {
                    assert_eq!(seen.len(), len, "every sample delivered");
                    let extra: usize = seen.values().map(|n| n - 1).sum();
                    assert!(extra < worlds.iter().sum::<usize>(), "{extra} repeats");
                }
                _ => assert!(seen.values().all(|&n| n == 1), "{seen:?}"),
            }
        }
    }

    #[test]
    fn whole_batches_of_a_locality_plan_are_the_same_prefix() {
        let sizes: Vec<u64> = (0..50).map(|i| 1000 + i * 37).collect();
        let placement = Arc::new(Placement::new(3, 2, Capacity::Fraction(1.0), &sizes).unwrap());
        let locality = Locality {
            placement,
            ranks_per_node: 1,
        };
        // Two ranks deliver 3 batches of 3 each, locality-aware.
        let consumed: Vec<SampleId> = (0..2)
            .flat_map(|r| {
                let plan =
                    EpochPlan::resumed(&config(r, 2, Shard::Pad), Some(&locality), 50, 2, &[])
                        .unwrap();
                plan.samples()[..9].to_vec()
            })
            .collect();
        let stretch = Stretch {
            world: 2,
            batches: 3,
            consumed: None,
        };
        let left = remaining(&config(0, 1, Shard::Pad), 50, 2, &[stretch]).unwrap();
        let mut all: Vec<SampleId> = consumed.into_iter().chain(left).collect();
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn histories_that_do_not_fit_are_refused() {
        let c = config(0, 1, Shard::Pad);
        let stretch = |world, consumed| Stretch {
            world,
            batches: 1,
            consumed,
        };
        assert!(remaining(&c, 10, 0, &[stretch(0, None)]).is_err());
        assert!(remaining(&c, 10, 0, &[stretch(2, Some(vec![1]))]).is_err());
        assert!(remaining(&c, 10, 0, &[stretch(2, Some(vec![1, 6]))]).is_err());
        assert_eq!(
            remaining(&c, 10, 0, &[stretch(2, Some(vec![1, 5]))])
                .unwrap()
                .len(),
            4
        );
    }

    /// The rest of `history` found the plain way, one pass over the samples left per
    /// stretch: what [`remaining`] must give, at any cost.
    fn naive_remaining(
        config: &PlanConfig,
        len: usize,
        epoch: u64,
        history: &[Stretch],
    ) -> Vec<SampleId> {
        let first_world = history.first().map_or(1, |s| s.world as usize);
        let mut left = crate::plan::order_of(config, epoch, len, first_world).unwrap();
        let mut before = 0;
        for (i, stretch) in history.iter().enumerate() {
            let (world, len) = (stretch.world as usize, left.len());
            let per_rank = match config.shard {
                Shard::Drop => len / world,
                _ => len.div_ceil(world),
            };
            let whole = ((stretch.batches - before) as usize * config.batch_size).min(per_rank);
            before = stretch.batches;
            let count = |rank: usize| {
                stretch
                    .consumed
                    .as_ref()
                    .map_or(whole, |c| c[rank] as usize)
            };
            let streams: Vec<Vec<usize>> = (0..world)
                .map(|rank| match (by_group(config), i) {
                    (false, _) | (true, 0) => (0..per_rank).map(|k| rank + k * world).collect(),
                    (true, _) => (0..per_rank).map(|k| rank * per_rank + k).collect(),
                })
                .collect();
            let mut taken = vec![false; len];
            for (rank, stream) in streams.iter().enumerate() {
                for &p in stream.iter().take(count(rank)).filter(|&&p| p < len) {
                    taken[p] = true;
                }
            }
            left = match (by_group(config), i) {
                (true, 0) => {
                    let dealt = (per_rank * world).min(len);
                    let mut rest: Vec<SampleId> = streams
                        .iter()
                        .enumerate()
                        .flat_map(|(rank, stream)| stream.iter().skip(count(rank)))
                        .filter(|&&p| p < dealt)
                        .map(|&p| left[p])
                        .collect();
                    rest.extend_from_slice(&left[dealt..]);
                    rest
                }
                _ => (0..len).filter(|&p| !taken[p]).map(|p| left[p]).collect(),
            };
        }
        left
    }

    /// A history of `stretches` over `len` samples, each of a world of 1 to 4 taking
    /// whole batches or (half of them) uneven counts, as after skips.
    fn random_history(rng: &mut Rng, len: usize, stretches: usize, shard: Shard) -> Vec<Stretch> {
        let (mut history, mut left, mut batches) = (Vec::new(), len, 0);
        for _ in 0..stretches {
            let world = 1 + rng.below(4);
            let per_rank = match shard {
                Shard::Drop => left / world as usize,
                _ => left.div_ceil(world as usize),
            } as u64;
            let whole = rng.below(per_rank / 3 + 1);
            batches += whole;
            let consumed = (rng.below(2) == 0).then(|| {
                (0..world)
                    .map(|_| (3 * whole + rng.below(3)).min(per_rank))
                    .collect::<Vec<u64>>()
            });
            let taken = consumed
                .as_ref()
                .map_or(3 * whole * world, |c| c.iter().sum::<u64>());
            left = left.saturating_sub(taken as usize);
            history.push(Stretch {
                world,
                batches,
                consumed,
            });
        }
        history
    }

    #[test]
    fn the_rest_is_what_each_stretch_left_in_the_order_it_was_dealt() {
        // Plain orders keep the rest in the epoch's order (so that states saved before
        // grouped orders were dealt by group still read the same), grouped ones rank by
        // rank, then in runs.
        let mut rng = Rng::new(5);
        for case in 0..200 {
            let len = 20 + rng.below(100) as usize;
            let shard = [Shard::Pad, Shard::Drop][case % 2];
            let lengths = vec![5; len / 5];
            let mut config = config(0, 1, shard);
            let len = len / 5 * 5;
            config.blocks = (case % 4 >= 2).then(|| Blocks::new(&lengths, 2)).flatten();
            let stretches = 1 + rng.below(4) as usize;
            let history = random_history(&mut rng, len, stretches, shard);
            match remaining(&config, len, 2, &history) {
                Ok(rest) => assert_eq!(
                    rest,
                    naive_remaining(&config, len, 2, &history),
                    "case {case}: {history:?}"
                ),
                // A random history may take more than a stretch had (a Drop world
                // larger than what is left, counts past a rank's share).
                Err(e) => assert!(e.to_string().contains("does not fit"), "{e}"),
            }
        }
    }

    #[test]
    fn a_grouped_rest_is_dealt_by_group_and_keeps_a_ranks_groups_open() {
        // 64 groups of 5, 2 open on each of 8 ranks, which take 2 batches of 3 each; the
        // rest is resumed by 1 rank, then by 3.
        let lengths = [5u32; 64];
        let blocks = Blocks::new(&lengths, 2);
        let group = |id: SampleId| id / 5;
        let history = [Stretch {
            world: 8,
            batches: 2,
            consumed: None,
        }];
        for world in [1, 3] {
            let plans: Vec<EpochPlan> = (0..world)
                .map(|rank| {
                    let config = PlanConfig {
                        blocks: blocks.clone(),
                        ..config(rank, world, Shard::Pad)
                    };
                    EpochPlan::resumed(&config, None, 320, 2, &history).unwrap()
                })
                .collect();
            for plan in &plans {
                // Groups begun and not finished along the stream: about a rank's 2, where
                // dealing sample by sample kept every old rank's open (16).
                let stream = plan.samples();
                let mut open = std::collections::HashSet::new();
                let mut most = 0;
                for (i, &id) in stream.iter().enumerate() {
                    open.insert(group(id));
                    most = most.max(open.len());
                    if !stream[i + 1..].iter().any(|&next| group(next) == group(id)) {
                        open.remove(&group(id));
                    }
                }
                assert!(most <= 4, "{world} ranks: {most} groups open at once");
            }
            // Each group is read by one rank but a few: at the ends of runs, the padding,
            // and the groups the old ranks shared at the epoch's end (dealt sample by
            // sample, every rank read nearly every group).
            let mut readers: BTreeMap<SampleId, std::collections::BTreeSet<usize>> =
                BTreeMap::new();
            for (rank, plan) in plans.iter().enumerate() {
                for &id in plan.samples() {
                    readers.entry(group(id)).or_default().insert(rank);
                }
            }
            let shared = readers.values().filter(|r| r.len() > 1).count();
            assert!(
                shared <= 2 * world,
                "{shared} groups read by several of {world} ranks"
            );
        }
    }

    #[test]
    fn a_history_of_thousands_of_stretches_costs_what_they_consumed() {
        // 4 096 stretches (the most a saved state may carry) over 2^16 samples, each
        // taking a batch of 3 on each of 2 or 3 ranks, or a few uneven counts (skips): the
        // rest is found with one lookup per sample consumed, not a pass over the samples
        // left per stretch (2^28 steps).
        let len = 1 << 16;
        let mut history = Vec::new();
        let mut batches = 0;
        for i in 0..4096u64 {
            let world = 2 + i % 2;
            let consumed = if i % 4 == 3 {
                Some(vec![1; world as usize])
            } else {
                batches += 1;
                None
            };
            history.push(Stretch {
                world,
                batches,
                consumed,
            });
        }
        for blocks in [None, Blocks::new(&[16; 1 << 12], 4)] {
            let config = PlanConfig {
                blocks,
                ..config(0, 1, Shard::Pad)
            };
            let left = rest(&config, len, 2, &history, false).unwrap();
            let consumed = len - left.len();
            assert!(consumed > 20_000, "{consumed}");
            assert!(left.lookups <= consumed, "{} lookups", left.lookups);
        }
        // Stretches that take nothing cost nothing per rank, whatever their world.
        let empty: Vec<Stretch> = (0..4096)
            .map(|_| Stretch {
                world: 1 << 24,
                batches: 0,
                consumed: None,
            })
            .collect();
        let left = rest(&config(0, 1, Shard::Pad), len, 2, &empty, false).unwrap();
        assert_eq!((left.len(), left.lookups), (len, 0));
    }
}
