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
//! 2. **What is left** keeps its order in the epoch's global order ([`remaining`]).
//! 3. **The new ranks' shares**: the rest is made a multiple of the new world size by the
//!    shard policy (padded by repeating its head, or cut) and dealt as a fresh epoch's
//!    order is, plainly or locality-aware for the new membership
//!    ([`EpochPlan::resumed`]). Every rank therefore gets the same number of samples and
//!    batches, and each sample is delivered once over the epoch (padding aside).
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

/// The samples of `epoch` that `history` left, in the epoch's global order; `config`'s
/// rank and world are not used (each stretch has its own).
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
    // The epoch's order is the one its first ranks were dealt (with groups, each rank's
    // stretch of it draws from its own groups); later stretches deal what is left anew.
    let first_world = history.first().map_or(config.world, |s| {
        usize::try_from(s.world).unwrap_or(usize::MAX)
    });
    let mut left = super::order_of(config, epoch, dataset_len, first_world)?;
    let mut before = 0;
    for stretch in history {
        let world = usize::try_from(stretch.world).unwrap_or(usize::MAX);
        if world == 0 || world > dataset_len.max(1) * 1024 {
            return Err(bad_stretch(stretch, "its world size"));
        }
        let len = left.len();
        let per_rank = match config.shard {
            super::Shard::Drop => len / world,
            _ => len.div_ceil(world),
        };
        // Positions of the stretch's sharded order that were consumed; those past `len`
        // are padding (repeats of the head), which take nothing away.
        let mut taken = vec![false; len];
        let batches = stretch
            .batches
            .checked_sub(before)
            .ok_or_else(|| bad_stretch(stretch, "its count of batches"))?;
        before = stretch.batches;
        match &stretch.consumed {
            None => {
                let whole = usize::try_from(batches)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(config.batch_size)
                    .min(per_rank);
                taken[..(whole * world).min(len)].fill(true);
            }
            Some(counts) => {
                if counts.len() != world {
                    return Err(bad_stretch(stretch, "its count of ranks"));
                }
                for (rank, &count) in counts.iter().enumerate() {
                    if count > per_rank as u64 {
                        return Err(bad_stretch(stretch, "a rank's count of samples"));
                    }
                    for k in 0..count as usize {
                        if let Some(t) = taken.get_mut(rank + k * world) {
                            *t = true;
                        }
                    }
                }
            }
        }
        left = left
            .into_iter()
            .zip(taken)
            .filter_map(|(id, taken)| (!taken).then_some(id))
            .collect();
    }
    Ok(left)
}

fn bad_stretch(stretch: &Stretch, what: &str) -> Error {
    Error::Config(format!(
        "the saved state's history does not fit this dataset and plan ({what}: {stretch:?}); \
         give the state that was saved with it"
    ))
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
        let left = remaining(config, dataset_len, epoch, history)?;
        let (order, padded, dropped) = shard(left, config.world, config.shard);
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
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::cache::Capacity;
    use crate::plan::placement::Placement;
    use crate::plan::Shard;
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
        blocks: Option<crate::plan::Blocks>,
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
        let blocks = crate::plan::Blocks::new(&lengths, 2);
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
            let mut draws = Rng::new(len as u64);
            let (seen, _) = run(len, shard, &worlds, |_, _, stream| {
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
}
