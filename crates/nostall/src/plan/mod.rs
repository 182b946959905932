//! The plan: which sample each rank delivers, in which order, in which batch.
//!
//! A plan is a pure function of (seed, epoch, shuffle, rank, world size, dataset size), so
//! every rank computes the same global order without exchanging a message, and the fetch
//! stage can read ahead along it (the order is known before the epoch starts).
//!
//! Sharding follows PyTorch's `DistributedSampler`: the global permutation is either padded
//! by repeating its head ([`Shard::Pad`]) or cut ([`Shard::Drop`]) to a multiple of the world
//! size, and rank `r` takes every `world`-th sample starting at `r`. Every rank therefore gets
//! the same number of samples, hence the same number of batches, which data-parallel training
//! needs (a rank that runs out early deadlocks the others at the next all-reduce).
//!
//! Batch `k` of every rank together make *global batch* `k`, a contiguous slice of the
//! sharded order (`world` × batch size samples, fewer in the last one). When the nodes
//! share a partitioned cache, [`locality`] keeps each global batch's contents but gives
//! each rank the samples its node holds ([`EpochPlan::locality_aware`]). [`mixture`]
//! orders several datasets mixed by weight in one id space.

mod capacity;
pub mod elastic;
pub mod locality;
pub mod mixture;
pub mod placement;

pub use capacity::Capacity;

use crate::error::{Error, Result};
use crate::rng::{derive, Rng};
use crate::sample::SampleId;

/// How a dataset that does not divide evenly among ranks is made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Shard {
    /// Repeat samples from the head of the permutation until it divides evenly
    /// (`DistributedSampler(drop_last=False)`): every sample is seen, a few twice.
    #[default]
    Pad,
    /// Leave out the tail of the permutation (`DistributedSampler(drop_last=True)`): a few
    /// samples, different ones each epoch when shuffling, are not seen this epoch.
    Drop,
}

impl std::str::FromStr for Shard {
    type Err = Error;

    /// `pad` or `drop`.
    fn from_str(s: &str) -> Result<Shard> {
        match s {
            "pad" => Ok(Shard::Pad),
            "drop" => Ok(Shard::Drop),
            _ => Err(Error::Config(format!(
                "shard={s:?}: use \"pad\" (repeat samples so that ranks divide evenly) or \
                 \"drop\" (leave the tail out)"
            ))),
        }
    }
}

impl std::fmt::Display for Shard {
    /// The name its `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shard::Pad => "pad",
            Shard::Drop => "drop",
        })
    }
}

/// Everything that decides the order of samples (start from `PlanConfig::default()` and
/// set fields: more may come).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanConfig {
    /// Seed of the shuffle; the same seed gives the same order on every rank.
    pub seed: u64,
    /// Shuffle every epoch (training) or keep catalog order (evaluation).
    pub shuffle: bool,
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// Number of ranks taking part.
    pub world: usize,
    /// Samples per batch on this rank.
    pub batch_size: usize,
    /// Drop the last, incomplete batch of the rank's epoch.
    pub drop_last: bool,
    /// How ranks are evened out.
    pub shard: Shard,
    /// Samples read together (a Parquet file's pages or row groups) and how many groups
    /// each rank keeps open; `None`: a plain permutation of the samples.
    pub blocks: Option<Blocks>,
    /// Repeated augmentation: each sample drawn into the epoch this many times in a row
    /// of ranks, each repeat its own augmentation ([`EpochPlan::repeats`]); 1: off.
    pub repeats: u32,
    /// Several datasets mixed by weight, one after another in the id space: the epoch's
    /// order is the mixture's ([`mixture::Mixture::order`]); `None`: one dataset.
    pub mixture: Option<mixture::Mixture>,
}

/// The most times repeated augmentation may draw a sample into an epoch.
pub const MAX_REPEATS: u32 = 16;

/// Samples stored in groups that are read as one (a Parquet file's pages, ~18
/// photographs each, or its row groups, ~100), and how many groups each rank may have
/// open at once.
///
/// A plain permutation visits a group's samples at random times through the epoch, so a
/// reader either keeps every group in memory all epoch or reads each group many times.
/// With blocks each rank keeps `open` groups open, its own: each next sample of its
/// stream is the next of one of them (each group's samples shuffled), and a group that
/// runs out is replaced by the next group to open. A group is read once, by one rank,
/// serves its samples and leaves; memory holds the open groups. Three choices keep the
/// batches mixed:
///
/// - groups open in *stratified* order: the dataset cut into as many runs of neighbouring
///   groups as are open over all ranks, and one group taken from each run in turn, so the
///   open groups always come from all over the dataset, and a dataset sorted by class
///   still gives each batch its share of every class;
/// - a rank draws its next sample from a random open group *not drawn in the last half
///   of its groups' count*, so a batch holds nearly as many groups as samples (fewer
///   repeats than random draws give), while groups still run out at random times, not
///   all in one batch;
/// - ranks draw from disjoint groups, so the open groups of all ranks together mix each
///   global batch.
///
/// As many open groups as there are groups is a plain permutation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// The groups' lengths: runs of consecutive sample ids, adding up to the dataset.
    pub lengths: std::sync::Arc<[u32]>,
    /// Groups open at once on each rank, at least 1.
    pub open: usize,
}

impl Blocks {
    /// Blocks of `lengths` with `open` groups open at once, or `None` where all of them
    /// may be (the order is then a plain permutation) or there are no groups.
    pub fn new(lengths: &[u32], open: usize) -> Option<Blocks> {
        (!lengths.is_empty() && open.max(1) < lengths.len()).then(|| Blocks {
            lengths: lengths.into(),
            open: open.max(1),
        })
    }

    /// Blocks of `lengths` whose open groups take at most three quarters of `memory`
    /// bytes (the rest for groups the read-ahead opens early), for groups of
    /// `total_bytes` together; `None` where all of them fit in `memory` (a plain
    /// permutation reads each group once then too, and keeps it).
    pub fn within(lengths: &[u32], total_bytes: u64, memory: u64) -> Option<Blocks> {
        if total_bytes <= memory {
            return None;
        }
        let mean = total_bytes / (lengths.len() as u64).max(1);
        let open = memory / 4 * 3 / mean.max(1);
        Blocks::new(lengths, usize::try_from(open).unwrap_or(usize::MAX))
    }

    /// The epoch's order for `lanes` ranks (position `p` is rank `p % lanes`'s): each rank
    /// keeps its own `open` groups open ([`Lane`]); a group that runs out is replaced by
    /// the next in [`Blocks::opening_order`]. A rank thus reads only its own groups, except
    /// near the end of the epoch, when a rank whose groups have all run out takes samples
    /// of another's.
    fn order(&self, rng: &mut Rng, len: usize, lanes: usize) -> Result<Vec<SampleId>> {
        let bounds = group_bounds(&self.lengths, len)?;
        let lanes = lanes.clamp(1, len.max(1));
        let mut pending = self
            .opening_order(rng, lanes.saturating_mul(self.open))
            .into_iter();
        let mut open_group = |rng: &mut Rng| {
            pending.by_ref().find(|&g| self.lengths[g] > 0).map(|g| {
                let mut samples: Vec<SampleId> =
                    (bounds[g] as SampleId..bounds[g + 1] as SampleId).collect();
                rng.shuffle(&mut samples);
                samples
            })
        };
        let mut open: Vec<Lane> = (0..lanes).map(|_| Lane::default()).collect();
        // Dealt a group at a time, so that every lane's groups are spread over the file.
        for _ in 0..self.open {
            for lane in open.iter_mut() {
                if let Some(samples) = open_group(rng) {
                    lane.ready.push(lane.groups.len());
                    lane.groups.push(samples);
                    lane.live += 1;
                }
            }
        }
        // Lanes with samples left: a finished lane's positions go to the next of them.
        let mut unfinished: std::collections::BTreeSet<usize> =
            (0..lanes).filter(|&l| open[l].live > 0).collect();
        let mut order = Vec::with_capacity(len);
        while order.len() < len {
            let own = order.len() % lanes;
            let index = *unfinished
                .range(own..)
                .next()
                .or_else(|| unfinished.first())
                .expect("samples are left while the order is short");
            let lane = &mut open[index];
            let at = lane.next(rng);
            order.push(lane.groups[at].pop().expect("open groups hold samples"));
            if lane.groups[at].is_empty() {
                match open_group(rng) {
                    Some(samples) => lane.groups[at] = samples,
                    None => {
                        lane.live -= 1;
                        if lane.live == 0 {
                            unfinished.remove(&index);
                        }
                    }
                }
            }
        }
        Ok(order)
    }

    /// The order in which groups are opened: the groups cut into `strata` runs of
    /// neighbours (in dataset order), and taken in rounds of one random group of each run,
    /// each round shuffled. The groups open at any time (about one round) thus come from
    /// all over the dataset, evenly, so a dataset sorted by class or source still gives
    /// each stretch of the order its share of every class, not the chance mix of a few
    /// random groups.
    fn opening_order(&self, rng: &mut Rng, strata: usize) -> Vec<usize> {
        let groups = self.lengths.len();
        let strata = strata.clamp(1, groups.max(1));
        let mut runs: Vec<Vec<usize>> = (0..strata)
            .map(|s| {
                let mut run: Vec<usize> =
                    (s * groups / strata..(s + 1) * groups / strata).collect();
                rng.shuffle(&mut run);
                run
            })
            .collect();
        let rounds = runs.iter().map(Vec::len).max().unwrap_or(0);
        let mut order = Vec::with_capacity(groups);
        for _ in 0..rounds {
            let mut round: Vec<usize> = runs.iter_mut().filter_map(Vec::pop).collect();
            rng.shuffle(&mut round);
            order.extend(round);
        }
        order
    }
}

/// Where each of the groups of `lengths` (runs of consecutive sample ids) starts, and after
/// them `len`: group `g` is `bounds[g]..bounds[g + 1]`.
///
/// # Errors
///
/// [`Error::Config`] when the groups do not add up to the `len` samples.
pub(crate) fn group_bounds(lengths: &[u32], len: usize) -> Result<Vec<usize>> {
    let mut bounds = Vec::with_capacity(lengths.len() + 1);
    let mut start = 0usize;
    bounds.push(start);
    for &length in lengths {
        start = start.saturating_add(length as usize);
        bounds.push(start);
    }
    if start != len {
        return Err(Error::Config(format!(
            "groups of {start} samples for a dataset of {len}"
        )));
    }
    Ok(bounds)
}

/// One rank's open groups. Each next sample comes from a random group among those not
/// drawn in the last `live / 2` draws (`cooling`), so a stretch of the order draws from
/// nearly as many groups as it is long, while the groups still progress at random rates
/// (strict rounds would make groups of one length, opened together, all run out in the
/// same batch, and their replacements be read in one burst).
#[derive(Default)]
struct Lane {
    /// Each slot's samples left, in the order they are drawn (from the back).
    groups: Vec<Vec<SampleId>>,
    /// Slots with samples left.
    live: usize,
    /// Slots that may be drawn from.
    ready: Vec<usize>,
    /// Slots drawn recently, oldest first (and emptied ones, dropped when they come up).
    cooling: std::collections::VecDeque<usize>,
}

impl Lane {
    /// The slot to draw the next sample from (one with samples left: `live` > 0).
    fn next(&mut self, rng: &mut Rng) -> usize {
        loop {
            if self.ready.is_empty() || self.cooling.len() > self.live / 2 {
                if let Some(at) = self.cooling.pop_front() {
                    self.ready.push(at);
                }
            }
            let pick = rng.below(self.ready.len() as u64) as usize;
            let at = self.ready.swap_remove(pick);
            if !self.groups[at].is_empty() {
                self.cooling.push_back(at);
                return at;
            }
        }
    }
}

impl Default for PlanConfig {
    fn default() -> PlanConfig {
        PlanConfig {
            seed: 0,
            shuffle: true,
            rank: 0,
            world: 1,
            batch_size: 64,
            drop_last: false,
            shard: Shard::Pad,
            blocks: None,
            repeats: 1,
            mixture: None,
        }
    }
}

impl PlanConfig {
    /// Checks the settings against each other and the dataset size.
    pub fn validate(&self, dataset_len: usize) -> Result<()> {
        self.check()?;
        if dataset_len == 0 {
            return Err(Error::Config("the dataset holds no samples".into()));
        }
        if let Some(mixture) = &self.mixture {
            if mixture.samples() != dataset_len {
                return Err(Error::Config(format!(
                    "the mixture's sources hold {} samples, the dataset {dataset_len}",
                    mixture.samples()
                )));
            }
        }
        if self.shard == Shard::Drop && dataset_len < self.world {
            return Err(Error::Config(format!(
                "{dataset_len} samples cannot be split among {} ranks with the drop shard policy; use pad",
                self.world
            )));
        }
        Ok(())
    }

    /// Checks the settings against each other, before any dataset: a world, a rank in
    /// it, a batch.
    pub fn check(&self) -> Result<()> {
        if self.world == 0 {
            return Err(Error::Config("world size must be at least 1".into()));
        }
        if self.rank >= self.world {
            return Err(Error::Config(format!(
                "rank {} is out of range for world size {} (ranks are 0..{})",
                self.rank, self.world, self.world
            )));
        }
        if self.batch_size == 0 {
            return Err(Error::Config("batch size must be at least 1".into()));
        }
        if !(1..=MAX_REPEATS).contains(&self.repeats) {
            return Err(Error::Config(format!(
                "aug_repeats={}: repeated augmentation takes 1 (off) to {MAX_REPEATS} repeats",
                self.repeats
            )));
        }
        if self.mixture.is_some() && (self.repeats > 1 || self.blocks.is_some()) {
            return Err(Error::Config(
                "a mixture of datasets draws its own repeats: it does not take aug_repeats= \
                 or samples read in groups"
                    .into(),
            ));
        }
        if self.repeats > 1 && self.blocks.is_some() {
            return Err(Error::Config(
                "repeated augmentation draws single samples: it does not apply to samples \
                 read in groups (Parquet pages or row groups read whole)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Where a rank is within training: enough to resume an epoch exactly.
///
/// `sample` counts samples of the rank's stream already consumed; it equals
/// `batch * batch_size` unless samples were skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Position {
    /// The epoch.
    pub epoch: u64,
    /// Batches already delivered in this epoch.
    pub batch: u64,
    /// Samples of the rank's stream already consumed in this epoch.
    pub sample: u64,
}

impl Position {
    /// The start of `epoch`.
    pub fn start_of(epoch: u64) -> Position {
        Position {
            epoch,
            batch: 0,
            sample: 0,
        }
    }
}

/// One rank's share of one epoch, in delivery order.
#[derive(Debug, Clone)]
pub struct EpochPlan {
    epoch: u64,
    samples: Vec<SampleId>,
    batch_size: usize,
    drop_last: bool,
    padded: usize,
    dropped: Vec<SampleId>,
    repeats: Vec<u32>,
}

/// The global order of one epoch: a seeded permutation, or catalog order.
pub fn global_order(seed: u64, epoch: u64, shuffle: bool, len: usize) -> Vec<SampleId> {
    let mut order: Vec<SampleId> = (0..len as SampleId).collect();
    if shuffle {
        Rng::new(derive(&[seed, epoch, 0x5348_5546])).shuffle(&mut order);
    }
    order
}

/// The global order of one epoch as `config` asks: a seeded permutation (in windows of
/// groups, with [`Blocks`]), or catalog order.
pub(crate) fn order_of(
    config: &PlanConfig,
    epoch: u64,
    len: usize,
    lanes: usize,
) -> Result<Vec<SampleId>> {
    if let Some(mixture) = &config.mixture {
        return Ok(mixture.order(config.seed, epoch, config.shuffle));
    }
    match (&config.blocks, config.shuffle) {
        (Some(blocks), true) => blocks.order(
            &mut Rng::new(derive(&[config.seed, epoch, 0x424c_4f43])),
            len,
            lanes,
        ),
        _ => Ok(global_order(config.seed, epoch, config.shuffle, len)),
    }
}

/// The epoch's global order made a multiple of the world size by the shard policy, with
/// the number of padded samples and the samples dropped; validates `config` first.
fn sharded_order(
    config: &PlanConfig,
    dataset_len: usize,
    epoch: u64,
) -> Result<(Vec<SampleId>, usize, Vec<SampleId>)> {
    config.validate(dataset_len)?;
    let order = order_of(config, epoch, dataset_len, config.world)?;
    Ok(shard(order, config.world, config.shard))
}

/// `order` made a multiple of `world` long by `policy`: padded by repeating its head, or
/// cut; with the number of padded samples and the samples cut off.
fn shard(
    mut order: Vec<SampleId>,
    world: usize,
    policy: Shard,
) -> (Vec<SampleId>, usize, Vec<SampleId>) {
    let len = order.len();
    match policy {
        Shard::Pad if len > 0 => {
            let padded = len.div_ceil(world) * world - len;
            // Repeats the head as often as needed (only when world > len).
            for k in 0..padded {
                order.push(order[k % len]);
            }
            (order, padded, Vec::new())
        }
        Shard::Pad => (order, 0, Vec::new()),
        Shard::Drop => {
            let dropped = order.split_off(len / world * world);
            (order, 0, dropped)
        }
    }
}

impl EpochPlan {
    /// The plan of `epoch` for the rank described by `config`, over `dataset_len` samples.
    pub fn new(config: &PlanConfig, dataset_len: usize, epoch: u64) -> Result<EpochPlan> {
        if config.repeats > 1 {
            let (samples, repeats) = repeated(config, dataset_len, epoch)?;
            return Ok(EpochPlan {
                epoch,
                samples,
                batch_size: config.batch_size,
                drop_last: config.drop_last,
                padded: 0,
                dropped: Vec::new(),
                repeats,
            });
        }
        let (order, padded, dropped) = sharded_order(config, dataset_len, epoch)?;
        // In a mixture a small source's samples come more than once an epoch: each
        // occurrence draws its own augmentation, as a repeat does.
        let repeats = match config.mixture {
            None => Vec::new(),
            Some(_) => {
                // A padded place repeats the head's sample as it was: its numbers are
                // padded as the order was (as a resumed epoch pads its rest).
                let numbered = occurrences(&order[..order.len() - padded], dataset_len);
                let (numbered, _, _) = shard(numbered, config.world, config.shard);
                numbered
                    .into_iter()
                    .skip(config.rank)
                    .step_by(config.world)
                    .map(|r| r as u32)
                    .collect()
            }
        };
        let samples = order
            .into_iter()
            .skip(config.rank)
            .step_by(config.world)
            .collect();
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

    /// The epoch this plan is for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The rank's samples in delivery order.
    pub fn samples(&self) -> &[SampleId] {
        &self.samples
    }

    /// Samples per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Whether the last incomplete batch is dropped.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// Batches in the epoch when no sample is skipped.
    pub fn num_batches(&self) -> usize {
        batches_for(self.samples.len(), self.batch_size, self.drop_last)
    }

    /// How many samples (over all ranks) repeat the head of the order to even out ranks.
    pub fn padded(&self) -> usize {
        self.padded
    }

    /// Samples (over all ranks) that the [`Shard::Drop`] policy leaves out this epoch.
    pub fn dropped(&self) -> &[SampleId] {
        &self.dropped
    }

    /// Under repeated augmentation, which repeat each of [`EpochPlan::samples`] is (its
    /// occurrence in the epoch's order over all ranks, from 0): what keys its draws
    /// apart from its other repeats'. Empty without repeated augmentation.
    pub fn repeats(&self) -> &[u32] {
        &self.repeats
    }
}

/// Each place of `order`'s occurrence of its sample, from 0: which repeat of it the place
/// is, among samples `0..len`.
fn occurrences(order: &[SampleId], len: usize) -> Vec<SampleId> {
    let mut seen = vec![0 as SampleId; len];
    order
        .iter()
        .map(|&id| {
            let n = &mut seen[id as usize];
            *n += 1;
            *n - 1
        })
        .collect()
}

/// The rank's samples and their repeats under repeated augmentation, as DeiT's and
/// torchvision's `RASampler` make them: the epoch's order with each sample `repeats`
/// times in a row, padded with its own head to a multiple of the world, dealt round-robin
/// (a sample's repeats go to consecutive ranks, and to one rank only where the world is
/// smaller), each rank's share cut to `⌊len / 256⌋ · 256 / world` samples (their
/// `num_selected_samples`: an epoch as long as without repeats) — `⌈len / world⌉` for a
/// dataset under 256 samples, which theirs would leave empty.
fn repeated(config: &PlanConfig, len: usize, epoch: u64) -> Result<(Vec<SampleId>, Vec<u32>)> {
    config.validate(len)?;
    let selected = repeated_per_rank(config, len);
    if selected == 0 {
        return Err(Error::Config(format!(
            "{len} samples give {} ranks none each under repeated augmentation (each rank \
             takes ⌊len / 256⌋ · 256 / world)",
            config.world
        )));
    }
    let order = global_order(config.seed, epoch, config.shuffle, len);
    let k = config.repeats as usize;
    let total = (len * k).div_ceil(config.world) * config.world;
    let mut seen = vec![0u32; len];
    let (mut samples, mut repeats) = (Vec::with_capacity(selected), Vec::with_capacity(selected));
    for i in 0..total {
        let id = order[i % (len * k) / k];
        let repeat = seen[id as usize];
        seen[id as usize] += 1;
        if i % config.world == config.rank && samples.len() < selected {
            samples.push(id);
            repeats.push(repeat);
        }
    }
    Ok((samples, repeats))
}

/// Samples each rank gets per epoch under repeated augmentation (see [`repeated`]).
fn repeated_per_rank(config: &PlanConfig, len: usize) -> usize {
    if len >= 256 {
        len / 256 * 256 / config.world
    } else {
        len.div_ceil(config.world)
    }
}

/// Samples each rank gets per epoch, without building the permutation.
pub(crate) fn samples_per_rank(config: &PlanConfig, dataset_len: usize) -> usize {
    if config.repeats > 1 {
        return repeated_per_rank(config, dataset_len);
    }
    match config.shard {
        Shard::Pad => dataset_len.div_ceil(config.world),
        Shard::Drop => dataset_len / config.world,
    }
}

/// Number of batches that `samples` samples make.
pub(crate) fn batches_for(samples: usize, batch_size: usize, drop_last: bool) -> usize {
    if drop_last {
        samples / batch_size
    } else {
        samples.div_ceil(batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn cfg(rank: usize, world: usize, shard: Shard) -> PlanConfig {
        PlanConfig {
            seed: 9,
            rank,
            world,
            batch_size: 4,
            shard,
            ..PlanConfig::default()
        }
    }

    #[test]
    fn blocks_keep_a_few_groups_open_and_stay_a_permutation() {
        // 30 groups of uneven lengths (a file's last row group is short; one is empty).
        let lengths: Vec<u32> = (0..30)
            .map(|g| match g % 10 {
                9 => 3,
                5 if g == 5 => 0,
                _ => 7,
            })
            .collect();
        let len: usize = lengths.iter().map(|&l| l as usize).sum();
        let group_of = groups_of(&lengths);
        let config = |open| PlanConfig {
            blocks: Blocks::new(&lengths, open),
            ..cfg(0, 1, Shard::Pad)
        };
        let blocked = config(4);
        let order = order_of(&blocked, 3, len, 1).unwrap();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..len as SampleId).collect::<Vec<_>>());
        assert_eq!(order, order_of(&blocked, 3, len, 1).unwrap(), "seeded");
        assert_ne!(
            order,
            order_of(&blocked, 4, len, 1).unwrap(),
            "each epoch its own"
        );
        // At every point of the order, at most 4 groups are begun and not finished, and
        // the open groups are mixed (not read one after the other).
        let mut left: Vec<u32> = lengths.clone();
        let mut open: HashSet<usize> = HashSet::new();
        for &id in &order {
            let g = group_of[id as usize];
            open.insert(g);
            assert!(open.len() <= 4, "{open:?}");
            left[g] -= 1;
            if left[g] == 0 {
                open.remove(&g);
            }
        }
        let switches = order
            .windows(2)
            .filter(|w| group_of[w[0] as usize] != group_of[w[1] as usize])
            .count();
        assert!(switches > len / 2, "{switches} switches of group in {len}");
        // As many open as there are groups: a plain permutation.
        assert_eq!(Blocks::new(&lengths, 30), None);
        assert_eq!(
            order_of(&config(30), 3, len, 1).unwrap(),
            global_order(9, 3, true, len)
        );
        assert!(
            order_of(&blocked, 3, len + 1, 1).is_err(),
            "groups must cover the dataset"
        );
        // Without shuffling, catalog order.
        let mut unshuffled = config(4);
        unshuffled.shuffle = false;
        assert_eq!(order_of(&unshuffled, 3, len, 1).unwrap(), sorted);
    }

    /// The group of each sample of `lengths`.
    fn groups_of(lengths: &[u32]) -> Vec<usize> {
        (0..lengths.len())
            .flat_map(|g| std::iter::repeat_n(g, lengths[g] as usize))
            .collect()
    }

    #[test]
    fn each_rank_reads_its_own_groups_and_draws_without_repeating_soon() {
        let lengths: Vec<u32> = (0..60).map(|g| 5 + g % 7).collect();
        let len: usize = lengths.iter().map(|&l| l as usize).sum();
        let group_of = groups_of(&lengths);
        let (world, open) = (3, 4);
        let config = PlanConfig {
            blocks: Blocks::new(&lengths, open),
            ..cfg(0, world, Shard::Drop)
        };
        let order = order_of(&config, 1, len, world).unwrap();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..len as SampleId).collect::<Vec<_>>());
        // Every group is served by one rank (its samples sit at one position modulo
        // the world), but for the few of the epoch's tail.
        let mut ranks_of: Vec<HashSet<usize>> = vec![HashSet::new(); lengths.len()];
        for (p, &id) in order.iter().enumerate() {
            ranks_of[group_of[id as usize]].insert(p % world);
        }
        let shared = ranks_of.iter().filter(|r| r.len() > 1).count();
        assert!(
            shared <= world * open,
            "{shared} groups read by several ranks"
        );
        // A rank's stream draws a group again only after `open / 2` others, while all
        // of its groups are open (the first half of the epoch).
        for rank in 0..world {
            let stream: Vec<usize> = order[..len / 2]
                .iter()
                .skip(rank)
                .step_by(world)
                .map(|&id| group_of[id as usize])
                .collect();
            for window in stream.windows(open / 2 + 1) {
                let distinct: HashSet<_> = window.iter().collect();
                assert_eq!(distinct.len(), window.len(), "rank {rank}: {window:?}");
            }
        }
    }

    #[test]
    fn groups_open_from_all_over_the_dataset() {
        // 100 groups, each one class, sorted by class: the first 10 groups to open (the
        // open ones) are one of each tenth, whatever the seed.
        let lengths = vec![3u32; 100];
        let group_of = groups_of(&lengths);
        for seed in 0..20 {
            let config = PlanConfig {
                seed,
                blocks: Blocks::new(&lengths, 10),
                ..cfg(0, 1, Shard::Pad)
            };
            let order = order_of(&config, 0, 300, 1).unwrap();
            let mut opened: Vec<usize> = Vec::new();
            for &id in &order {
                let g = group_of[id as usize];
                if !opened.contains(&g) {
                    opened.push(g);
                }
            }
            let mut tenths: Vec<usize> = opened[..10].iter().map(|g| g / 10).collect();
            tenths.sort_unstable();
            assert_eq!(
                tenths,
                (0..10).collect::<Vec<_>>(),
                "seed {seed}: {opened:?}"
            );
        }
    }

    #[test]
    fn open_groups_take_three_quarters_of_the_memory_for_groups() {
        let lengths = vec![100u32; 1000];
        // 1000 groups of 10 MB: 1 GiB holds 107 such groups, 80 of them open.
        let blocks = Blocks::within(&lengths, 10_000_000_000, 1 << 30).unwrap();
        assert_eq!(blocks.open, 80);
        assert_eq!(
            Blocks::within(&lengths, 100_000_000, 1 << 30),
            None,
            "all fit"
        );
        assert_eq!(Blocks::within(&[], 0, 1 << 30), None);
        assert_eq!(Blocks::within(&lengths, u64::MAX, 1).unwrap().open, 1);
    }

    #[test]
    fn pad_gives_equal_shares_covering_everything() {
        let len = 103;
        let plans: Vec<_> = (0..4)
            .map(|r| EpochPlan::new(&cfg(r, 4, Shard::Pad), len, 0).unwrap())
            .collect();
        let counts: HashSet<_> = plans.iter().map(|p| p.samples().len()).collect();
        assert_eq!(counts, HashSet::from([26]));
        let batches: HashSet<_> = plans.iter().map(|p| p.num_batches()).collect();
        assert_eq!(batches.len(), 1);
        assert_eq!(samples_per_rank(&cfg(0, 4, Shard::Pad), len), 26);
        let all: Vec<_> = plans
            .iter()
            .flat_map(|p| p.samples().iter().copied())
            .collect();
        assert_eq!(all.len(), 104);
        let distinct: HashSet<_> = all.iter().copied().collect();
        assert_eq!(distinct.len(), len);
        assert_eq!(plans[0].padded(), 1);
    }

    #[test]
    fn drop_gives_disjoint_equal_shares_and_names_the_rest() {
        let len = 103;
        let plans: Vec<_> = (0..4)
            .map(|r| EpochPlan::new(&cfg(r, 4, Shard::Drop), len, 0).unwrap())
            .collect();
        let mut seen = HashSet::new();
        assert_eq!(samples_per_rank(&cfg(0, 4, Shard::Drop), len), 25);
        for p in &plans {
            assert_eq!(p.samples().len(), 25);
            for &s in p.samples() {
                assert!(seen.insert(s), "sample {s} on two ranks");
            }
        }
        for &s in plans[0].dropped() {
            assert!(seen.insert(s));
        }
        assert_eq!(seen.len(), len);
    }

    #[test]
    fn order_depends_on_seed_and_epoch_only() {
        let a = EpochPlan::new(&cfg(0, 1, Shard::Pad), 50, 3).unwrap();
        let b = EpochPlan::new(&cfg(0, 1, Shard::Pad), 50, 3).unwrap();
        let c = EpochPlan::new(&cfg(0, 1, Shard::Pad), 50, 4).unwrap();
        let d = EpochPlan::new(
            &PlanConfig {
                seed: 10,
                ..cfg(0, 1, Shard::Pad)
            },
            50,
            3,
        )
        .unwrap();
        assert_eq!(a.samples(), b.samples());
        assert_ne!(a.samples(), c.samples());
        assert_ne!(a.samples(), d.samples());
        let plain = EpochPlan::new(
            &PlanConfig {
                shuffle: false,
                ..cfg(0, 1, Shard::Pad)
            },
            5,
            3,
        )
        .unwrap();
        assert_eq!(plain.samples(), &[0, 1, 2, 3, 4]);
    }

    #[test]
    fn tiny_datasets_and_bad_settings() {
        let p = EpochPlan::new(&cfg(2, 3, Shard::Pad), 1, 0).unwrap();
        assert_eq!(p.samples(), &[0]);
        assert!(EpochPlan::new(&cfg(0, 3, Shard::Drop), 2, 0).is_err());
        assert!(EpochPlan::new(&cfg(3, 3, Shard::Pad), 10, 0).is_err());
        assert!(EpochPlan::new(&cfg(0, 1, Shard::Pad), 0, 0).is_err());
        assert_eq!(batches_for(10, 4, false), 3);
        assert_eq!(batches_for(10, 4, true), 2);
    }

    /// DeiT's and torchvision's `RASampler.__iter__`, written as they write it, over the
    /// epoch's order.
    fn ra_sampler(order: &[SampleId], k: usize, rank: usize, world: usize) -> Vec<SampleId> {
        let mut indices: Vec<SampleId> = order.iter().flat_map(|&i| [i].repeat(k)).collect();
        let total = (order.len() * k).div_ceil(world) * world;
        let head = indices[..total - indices.len()].to_vec();
        indices.extend(head);
        let mine: Vec<SampleId> = indices.into_iter().skip(rank).step_by(world).collect();
        let selected = order.len() / 256 * 256 / world;
        mine[..selected].to_vec()
    }

    #[test]
    fn repeated_augmentation_deals_repeats_as_ra_sampler() {
        for (len, k, world) in [
            (1000, 3, 4),
            (1000, 3, 2),
            (777, 2, 8),
            (300, 4, 1),
            (5000, 3, 16),
        ] {
            let mut pairs = std::collections::HashSet::new();
            let mut total = 0;
            for rank in 0..world {
                let config = PlanConfig {
                    seed: 9,
                    rank,
                    world,
                    repeats: k as u32,
                    ..PlanConfig::default()
                };
                let plan = EpochPlan::new(&config, len, 3).unwrap();
                let order = global_order(9, 3, true, len);
                assert_eq!(
                    plan.samples(),
                    ra_sampler(&order, k, rank, world),
                    "{len} {k} {world}"
                );
                assert_eq!(plan.samples().len(), samples_per_rank(&config, len));
                assert_eq!(plan.repeats().len(), plan.samples().len());
                // Each repeat of a sample is its own: no (sample, repeat) twice anywhere.
                for (&id, &repeat) in plan.samples().iter().zip(plan.repeats()) {
                    assert!(pairs.insert((id, repeat)), "{id} repeat {repeat} twice");
                    assert!((repeat as usize) < k + 1);
                }
                total += plan.samples().len();
            }
            // An epoch as long as without repeats (to a multiple of 256).
            assert_eq!(total, len / 256 * 256 / world * world);
        }
    }

    #[test]
    fn repeated_augmentation_on_small_data_and_its_limits() {
        let config = |repeats, world, rank| PlanConfig {
            repeats,
            world,
            rank,
            ..PlanConfig::default()
        };
        // Under 256 samples: an epoch of ceil(len / world) a rank (theirs would be empty).
        let plan = EpochPlan::new(&config(3, 1, 0), 32, 0).unwrap();
        assert_eq!(plan.samples().len(), 32);
        // On one rank the repeats come in a row, 0, 1, 2.
        assert_eq!(plan.samples()[0], plan.samples()[2]);
        assert_eq!(&plan.repeats()[..3], [0, 1, 2]);
        assert!(EpochPlan::new(&config(17, 1, 0), 32, 0).is_err());
        assert!(EpochPlan::new(&config(0, 1, 0), 32, 0).is_err());
        assert!(EpochPlan::new(&config(2, 512, 0), 300, 0).is_err());
        // Without repeats nothing changes: no repeats recorded.
        assert!(EpochPlan::new(&config(1, 1, 0), 32, 0)
            .unwrap()
            .repeats()
            .is_empty());
    }

    #[test]
    fn a_mixtures_repeated_samples_draw_their_own_augmentation() {
        use mixture::{Mixture, Source};
        let sources = [
            Source {
                len: 6,
                weight: 3.0,
            },
            Source {
                len: 10,
                weight: 1.0,
            },
        ];
        let mixture = Mixture::new(&sources, None).unwrap();
        let config = PlanConfig {
            mixture: Some(mixture.clone()),
            ..cfg(0, 1, Shard::Pad)
        };
        let plan = EpochPlan::new(&config, 16, 2).unwrap();
        assert_eq!(plan.samples(), mixture.order(9, 2, true));
        // The small source gives 12 of 16 places from its 6 samples: each twice, the
        // second time as repeat 1.
        let mut seen = std::collections::HashMap::new();
        for (&id, &repeat) in plan.samples().iter().zip(plan.repeats()) {
            let n = seen.entry(id).or_insert(0u32);
            assert_eq!(repeat, *n, "sample {id}");
            *n += 1;
        }
        assert_eq!((0..6).map(|id| seen[&id]).sum::<u32>(), 12);
        let grouped = PlanConfig {
            blocks: Blocks::new(&[8, 8], 1),
            ..config.clone()
        };
        assert!(grouped.check().is_err());
        assert!(EpochPlan::new(&config, 17, 2).is_err());
    }
}
