//! A simulator of a multi-node job's data movement: bytes from storage, bytes between
//! nodes and local cache hits, per node and per epoch, for hundreds of nodes in seconds.
//!
//! # Why simulate
//!
//! A real partitioned cache needs as many machines as nodes, and its interesting regime
//! (hundreds of nodes, where Yang & Cong measured) is out of reach of a test. But the
//! bytes a job moves do not depend on timing: they follow from the plan (which rank reads
//! which sample in which epoch), the placement (which node caches which sample) and the
//! fill rule below. So the simulator runs the loader's own plan code
//! ([`GlobalBatches`], [`Assigner`]) and placement ([`Placement`]) over every access of
//! every rank and counts, with no data, no threads and no network: the same accounting
//! the testbed prints, at any scale.
//!
//! # What a node does on each access (the protocol the peer service follows)
//!
//! The ranks of a node share its cache; the simulator counts per node. For sample `s`
//! read by node `n`, with holder `h` from the placement:
//!
//! - no holder: `n` reads `s` from storage (nobody caches it);
//! - `h = n`: a *local hit* once `s` is cached; the first time, `n` reads storage and
//!   caches `s` (its part was sized to fit, so nothing is ever evicted);
//! - `h ≠ n`: `n` asks `h`, which serves `s` from its cache (bytes *served* by `h`, *from
//!   peers* at `n`); the first time, `h` reads `s` from storage, caches it and serves it
//!   (read-through), so every holder's part is full after the first epoch whatever the
//!   assignment, and storage is read once per cached sample.
//!
//! Three ways of running the same job are compared: [`Mode::NoCache`] (every read from
//! storage), [`Mode::Partitioned`] (the plain plan over the partitioned cache: CoorDL) and
//! [`Mode::LocalityAware`] (Yang & Cong's assignment over the same cache). For each epoch
//! the simulator also counts the *off-node* samples: cached samples given to a node that
//! does not hold them. Under locality-aware assignment these are exactly the samples moved
//! by balancing, and their share of the global batch is Yang & Cong's figure.
//!
//! Everything is indexed by sample id in flat vectors, and each epoch's global order is
//! built once and shared by the modes run together, so the cost is a few passes over the
//! accesses: about 60 ms per mode and epoch of ImageNet (1.28 million samples) in a
//! release build, whatever the number of nodes.

use std::fmt;
use std::ops::Range;

use crate::cache::Capacity;
use crate::error::{Error, Result};
use crate::plan::locality::{Assigner, GlobalBatches};
use crate::plan::placement::Placement;
use crate::plan::{PlanConfig, Shard};
use crate::rng::{derive, Rng};
use crate::sample::SampleId;

/// How the simulated job reads its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// No cache in the loader: every access reads storage.
    NoCache,
    /// Partitioned cache (CoorDL) with the plain plan: a rank takes a fixed slice of each
    /// global batch and fetches what its node does not hold from the holder.
    Partitioned,
    /// Partitioned cache with locality-aware assignment (Yang & Cong).
    LocalityAware,
}

impl Mode {
    /// Every mode, in the order tables show them.
    pub const ALL: [Mode; 3] = [Mode::NoCache, Mode::Partitioned, Mode::LocalityAware];

    /// The mode's short name, as tables print it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::NoCache => "none",
            Mode::Partitioned => "partitioned",
            Mode::LocalityAware => "locality",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One node's counts over an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounts {
    /// Samples its ranks read.
    pub accesses: u64,
    /// Accesses served by its own cache.
    pub local_hits: u64,
    /// Bytes served by its own cache.
    pub local_bytes: u64,
    /// Bytes it read from storage (for its ranks, and read-through for peers).
    pub storage_bytes: u64,
    /// Bytes it received from peers' caches.
    pub peer_bytes: u64,
    /// Bytes it served to peers from its cache.
    pub served_bytes: u64,
}

impl NodeCounts {
    fn add(&mut self, other: &NodeCounts) {
        self.accesses += other.accesses;
        self.local_hits += other.local_hits;
        self.local_bytes += other.local_bytes;
        self.storage_bytes += other.storage_bytes;
        self.peer_bytes += other.peer_bytes;
        self.served_bytes += other.served_bytes;
    }
}

/// The smallest, mean and largest value of a count over the nodes, per epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The node with the least.
    pub min: f64,
    /// The mean over nodes.
    pub mean: f64,
    /// The node with the most.
    pub max: f64,
}

/// Counts over one or more consecutive epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The epochs counted.
    pub epochs: Range<u64>,
    /// Per node.
    pub nodes: Vec<NodeCounts>,
    /// Cached samples given to a node that does not hold them (summed over the epochs).
    pub off_node: u64,
    /// Samples in the delivered global batches (summed over the epochs).
    pub samples: u64,
}

impl Tally {
    fn new(epochs: Range<u64>, nodes: usize) -> Tally {
        Tally {
            epochs,
            nodes: vec![NodeCounts::default(); nodes],
            off_node: 0,
            samples: 0,
        }
    }

    /// The counts summed over all nodes.
    pub fn total(&self) -> NodeCounts {
        let mut total = NodeCounts::default();
        for n in &self.nodes {
            total.add(n);
        }
        total
    }

    /// A count's min, mean and max over nodes, per epoch (divided by the epochs counted).
    pub fn spread(&self, count: impl Fn(&NodeCounts) -> u64) -> Spread {
        let per_epoch = (self.epochs.end - self.epochs.start).max(1) as f64;
        let values = self.nodes.iter().map(|n| count(n) as f64 / per_epoch);
        let (min, max, sum) = values.fold((f64::INFINITY, 0.0f64, 0.0), |(lo, hi, s), v| {
            (lo.min(v), hi.max(v), s + v)
        });
        Spread {
            min,
            mean: sum / self.nodes.len() as f64,
            max,
        }
    }

    /// Off-node samples as a share of the global batches (0 to 1): for locality-aware
    /// assignment, the share moved by balancing.
    pub fn off_node_share(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.off_node as f64 / self.samples as f64
        }
    }

    /// Local hits over accesses, all nodes (0 to 1).
    pub fn hit_rate(&self) -> f64 {
        let t = self.total();
        if t.accesses == 0 {
            0.0
        } else {
            t.local_hits as f64 / t.accesses as f64
        }
    }

    fn merge(&mut self, other: &Tally) {
        self.epochs.start = self.epochs.start.min(other.epochs.start);
        self.epochs.end = self.epochs.end.max(other.epochs.end);
        for (a, b) in self.nodes.iter_mut().zip(&other.nodes) {
            a.add(b);
        }
        self.off_node += other.off_node;
        self.samples += other.samples;
    }
}

/// One mode's counts, epoch by epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRun {
    /// The mode simulated.
    pub mode: Mode,
    /// One tally per epoch, in order.
    pub epochs: Vec<Tally>,
}

impl ClusterRun {
    /// The counts of every epoch but the first (which fills the caches) together; `None`
    /// with fewer than two epochs.
    pub fn steady_state(&self) -> Option<Tally> {
        let (first, rest) = self.epochs.get(1..)?.split_first()?;
        let mut sum = first.clone();
        for t in rest {
            sum.merge(t);
        }
        Some(sum)
    }

    /// The counts of every epoch together.
    pub fn overall(&self) -> Tally {
        let mut sum = self.epochs[0].clone();
        for t in &self.epochs[1..] {
            sum.merge(t);
        }
        sum
    }
}

/// A cluster: nodes running ranks, a dataset and the partitioned cache placement.
#[derive(Debug, Clone)]
pub struct Cluster {
    seed: u64,
    ranks_per_node: usize,
    sizes: Vec<u64>,
    placement: Placement,
}

impl Cluster {
    /// `nodes` nodes of `ranks_per_node` ranks each, caching `capacity` each (a fraction
    /// is of the dataset), over samples of `sizes` bytes (indexed by id), with `seed` for
    /// the placement and the shuffle.
    pub fn new(
        seed: u64,
        nodes: usize,
        ranks_per_node: usize,
        capacity: Capacity,
        sizes: Vec<u64>,
    ) -> Result<Cluster> {
        if sizes.is_empty() {
            return Err(Error::Config(
                "the simulated dataset needs at least 1 sample".into(),
            ));
        }
        if ranks_per_node == 0 {
            return Err(Error::Config("a node runs at least 1 rank".into()));
        }
        let placement = Placement::new(seed, nodes, capacity, &sizes)?;
        Ok(Cluster {
            seed,
            ranks_per_node,
            sizes,
            placement,
        })
    }

    /// The cache placement.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.placement.nodes()
    }

    /// Ranks per node.
    pub fn ranks_per_node(&self) -> usize {
        self.ranks_per_node
    }

    /// Simulates `epochs` epochs of every mode in `modes` with `batch_size` samples per
    /// rank (the plain plan's defaults otherwise: shuffled, [`Shard::Pad`], last partial
    /// batch kept), sharing each epoch's order among the modes. Runs come back in the
    /// order of `modes`.
    pub fn run(&self, modes: &[Mode], batch_size: usize, epochs: u64) -> Result<Vec<ClusterRun>> {
        if epochs == 0 {
            return Err(Error::Config("simulate at least 1 epoch".into()));
        }
        let world = self.nodes() * self.ranks_per_node;
        let config = PlanConfig {
            seed: self.seed,
            shuffle: true,
            rank: 0,
            world,
            batch_size,
            drop_last: false,
            shard: Shard::Pad,
            blocks: None,
            repeats: 1,
            mixture: None,
        };
        let mut states: Vec<State> = modes
            .iter()
            .map(|&mode| State {
                mode,
                filled: vec![false; self.sizes.len()],
                epochs: Vec::new(),
            })
            .collect();
        let mut assigner = Assigner::new(&self.placement, self.ranks_per_node)?;
        for epoch in 0..epochs {
            let batches = GlobalBatches::new(&config, self.sizes.len(), epoch)?;
            for state in &mut states {
                let tally = state.epoch(self, &batches, &mut assigner, epoch)?;
                state.epochs.push(tally);
            }
        }
        Ok(states
            .into_iter()
            .map(|s| ClusterRun {
                mode: s.mode,
                epochs: s.epochs,
            })
            .collect())
    }
}

/// One mode's cache contents across epochs.
struct State {
    mode: Mode,
    /// Per sample: whether its holder has cached it yet.
    filled: Vec<bool>,
    epochs: Vec<Tally>,
}

impl State {
    fn epoch(
        &mut self,
        cluster: &Cluster,
        batches: &GlobalBatches,
        assigner: &mut Assigner<'_>,
        epoch: u64,
    ) -> Result<Tally> {
        let local = cluster.ranks_per_node;
        let world = batches.world();
        let mut tally = Tally::new(epoch..epoch + 1, cluster.nodes());
        for k in 0..batches.delivered() {
            let batch = batches.batch(k);
            tally.samples += batch.len() as u64;
            if self.mode == Mode::LocalityAware {
                let assignment = assigner.assign(batch, k as u64)?;
                for rank in 0..world {
                    for &id in assignment.rank(rank) {
                        self.access(cluster, &mut tally, rank / local, id);
                    }
                }
            } else {
                // The plain plan: rank r takes positions r, r + world, ...
                for (pos, &id) in batch.iter().enumerate() {
                    self.access(cluster, &mut tally, pos % world / local, id);
                }
            }
        }
        Ok(tally)
    }

    /// Node `node` reads sample `id` (see the module documentation for the rules).
    fn access(&mut self, cluster: &Cluster, tally: &mut Tally, node: usize, id: SampleId) {
        let size = cluster.sizes[id as usize];
        tally.nodes[node].accesses += 1;
        let holder = match self.mode {
            Mode::NoCache => None,
            Mode::Partitioned | Mode::LocalityAware => cluster.placement.holder(id),
        };
        let Some(holder) = holder else {
            tally.nodes[node].storage_bytes += size;
            return;
        };
        let filled = std::mem::replace(&mut self.filled[id as usize], true);
        if !filled {
            tally.nodes[holder].storage_bytes += size;
        }
        if holder == node {
            if filled {
                tally.nodes[node].local_hits += 1;
                tally.nodes[node].local_bytes += size;
            }
        } else {
            tally.off_node += 1;
            tally.nodes[holder].served_bytes += size;
            tally.nodes[node].peer_bytes += size;
        }
    }
}

/// `samples` sample sizes, uniform in `mean × [1 − spread, 1 + spread]` bytes (at least 1
/// byte), drawn from `seed`: a synthetic dataset for the simulator.
pub fn synthetic_sizes(samples: usize, mean: u64, spread: f64, seed: u64) -> Vec<u64> {
    let spread = spread.clamp(0.0, 1.0);
    let mut rng = Rng::new(derive(&[seed, 0x5349_5A45]));
    (0..samples)
        .map(|_| {
            let factor = rng.uniform(1.0 - spread, 1.0 + spread);
            ((mean as f64 * factor).round() as u64).max(1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::EpochPlan;

    /// Yang & Cong's setting: every node holds exactly 1/K of the dataset (so together
    /// they hold all of it), one learner per node, equal sample sizes.
    fn yang_cong_cluster(nodes: usize, samples: usize) -> Cluster {
        let per_node = samples.div_ceil(nodes) as u64;
        let cluster =
            Cluster::new(7, nodes, 1, Capacity::Bytes(per_node), vec![1; samples]).unwrap();
        assert_eq!(cluster.placement().uncached_samples(), 0);
        cluster
    }

    #[test]
    fn balancing_moves_yang_and_cong_s_share_at_16_to_1024_nodes() {
        // Expected E|X − b| / 2b for X ~ Binomial(K·b, 1/K): 6.81/4.82/3.41% at 16 nodes,
        // rising to 7.03/4.98/3.52% at 1024 (1/√(2πb) in the limit); Yang & Cong report
        // about 6.8/4.8/3.4% for any node count. A global batch draws without replacement,
        // which lowers the share by √(1 − K·b/N), so the dataset must be large next to
        // the global batch: each node holds 2 048 samples, 16 global batches at b = 128.
        // Small clusters run more epochs, so every size counts at least 4 096 node-batches
        // at b = 32 (a standard error of about 0.1 point).
        let batches = [(32, 6.8), (64, 4.8), (128, 3.4)];
        let mut shares = vec![Vec::new(); batches.len()];
        for nodes in [16, 64, 256, 1024] {
            let cluster = yang_cong_cluster(nodes, 2_048 * nodes);
            let epochs = (64 / nodes as u64).max(1);
            for (i, &(batch, want)) in batches.iter().enumerate() {
                let runs = cluster.run(&[Mode::LocalityAware], batch, epochs).unwrap();
                let got = 100.0 * runs[0].overall().off_node_share();
                assert!(
                    (got - want).abs() <= 0.3,
                    "batch {batch}, {nodes} nodes: {got:.2}% moved, Yang & Cong {want}%"
                );
                shares[i].push(got);
            }
        }
        for ((batch, _), shares) in batches.iter().zip(&shares) {
            let (lo, hi) = shares.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &s| {
                (lo.min(s), hi.max(s))
            });
            assert!(
                hi - lo <= 0.45,
                "batch {batch}: depends on node count: {shares:?}"
            );
        }
    }

    #[test]
    fn locality_cuts_inter_node_bytes_to_a_tenth_of_partitioned_caching() {
        for (nodes, local, batch, aggregate) in [
            (4, 1, 32, 1.0),
            (16, 2, 32, 1.0),
            (64, 1, 64, 1.2),
            (8, 4, 16, 0.8),
        ] {
            let samples = 200_000;
            let sizes = synthetic_sizes(samples, 110_000, 0.5, 3);
            let total: u64 = sizes.iter().sum();
            let capacity = Capacity::Bytes((total as f64 * aggregate / nodes as f64).ceil() as u64);
            let cluster = Cluster::new(1, nodes, local, capacity, sizes).unwrap();
            let runs = cluster.run(&Mode::ALL, batch, 3).unwrap();
            let [none, plain, locality] = [0, 1, 2].map(|i| runs[i].steady_state().unwrap());
            let what = format!("{nodes}×{local}, batch {batch}, aggregate {aggregate}");
            let (plain_t, local_t, none_t) = (plain.total(), locality.total(), none.total());
            assert!(
                local_t.peer_bytes * 10 <= plain_t.peer_bytes,
                "{what}: locality {} vs partitioned {} bytes between nodes",
                local_t.peer_bytes,
                plain_t.peer_bytes
            );
            // Both read from storage only what no node caches, and no cache reads it all.
            let uncached = 2 * cluster.placement().uncached_bytes();
            assert_eq!(plain_t.storage_bytes, uncached, "{what}");
            assert_eq!(local_t.storage_bytes, uncached, "{what}");
            assert_eq!(none_t.storage_bytes, 2 * total, "{what}");
            if aggregate >= 1.0 {
                assert!(uncached * 200 < 2 * total, "{what}: storage is ~0");
            }
            for t in [&none, &plain, &locality] {
                // Every byte served by a peer is received by another node.
                let sum = t.total();
                assert_eq!(sum.peer_bytes, sum.served_bytes);
                assert_eq!(
                    sum.local_bytes + sum.peer_bytes + sum.storage_bytes,
                    2 * total
                );
                assert_eq!(sum.accesses, t.samples);
            }
            assert_eq!(none.total().local_hits, 0);
            // Locality-aware ranks read nearly all cached bytes from their own node.
            let cached = 2 * (total - cluster.placement().uncached_bytes());
            assert!(local_t.local_bytes as f64 >= 0.9 * cached as f64, "{what}");
            assert!(locality.hit_rate() > plain.hit_rate(), "{what}");
        }
    }

    #[test]
    fn the_first_epoch_fills_each_holder_from_storage_once() {
        let sizes = synthetic_sizes(30_000, 1_000, 0.3, 0);
        let total: u64 = sizes.iter().sum();
        let cluster = Cluster::new(2, 6, 1, Capacity::Fraction(0.2), sizes).unwrap();
        let cached = total - cluster.placement().uncached_bytes();
        let runs = cluster.run(&Mode::ALL, 32, 2).unwrap();
        for run in &runs[1..] {
            let first = run.epochs[0].total();
            // Each cached sample is read from storage once, by its holder, and each
            // uncached one by whoever reads it; nothing hits locally yet.
            assert_eq!(first.storage_bytes, total, "{}", run.mode);
            assert_eq!(first.local_hits, 0);
            for n in 0..cluster.nodes() {
                let t = &run.epochs[0].nodes[n];
                assert!(t.storage_bytes >= cluster.placement().held_bytes(n));
            }
            let second = run.epochs[1].total();
            assert_eq!(
                second.local_bytes + second.peer_bytes,
                cached,
                "{}",
                run.mode
            );
        }
        // The plain plan makes nodes read the same amount; partitioned nodes serve about
        // equal amounts to each other.
        let plain = runs[1].steady_state().unwrap();
        let served = plain.spread(|n| n.served_bytes);
        assert!(served.min > 0.8 * served.mean && served.max < 1.2 * served.mean);
    }

    #[test]
    fn counts_agree_with_the_plans_and_the_same_seed_gives_the_same_counts() {
        let sizes = synthetic_sizes(5_003, 100, 0.5, 1);
        let cluster = Cluster::new(4, 4, 2, Capacity::Fraction(0.25), sizes.clone()).unwrap();
        let a = cluster.run(&Mode::ALL, 8, 3).unwrap();
        let b = cluster.run(&Mode::ALL, 8, 3).unwrap();
        assert_eq!(a, b);
        // Each mode alone gives what it gives alongside the others.
        let alone = cluster.run(&[Mode::LocalityAware], 8, 3).unwrap();
        assert_eq!(alone[0], a[2]);
        // Node n's accesses are its ranks' plan lengths (padding repeats 5 samples).
        let per_rank = 5_003usize.div_ceil(8) as u64;
        for run in &a {
            for t in &run.epochs {
                assert!(t.nodes.iter().all(|n| n.accesses == 2 * per_rank));
                assert_eq!(t.samples, 8 * per_rank);
            }
        }
        // Off-node samples: for the plain plan, those a rank's node does not hold; for
        // locality-aware assignment, those moved by balancing.
        for epoch in 0..3 {
            let config = PlanConfig {
                seed: 4,
                world: 8,
                batch_size: 8,
                ..PlanConfig::default()
            };
            let plain_off: u64 = (0..8)
                .map(|rank| {
                    let plan = EpochPlan::new(
                        &PlanConfig {
                            rank,
                            ..config.clone()
                        },
                        5_003,
                        epoch,
                    );
                    let holder = |id| cluster.placement().holder(id);
                    plan.unwrap()
                        .samples()
                        .iter()
                        .filter(|&&id| holder(id).is_some_and(|h| h != rank / 2))
                        .count() as u64
                })
                .sum();
            assert_eq!(a[1].epochs[epoch as usize].off_node, plain_off);
            let batches = GlobalBatches::new(&config, 5_003, epoch).unwrap();
            let mut assigner = Assigner::new(cluster.placement(), 2).unwrap();
            let moved: usize = (0..batches.len())
                .map(|k| assigner.assign(batches.batch(k), k as u64).unwrap().moved())
                .sum();
            assert_eq!(a[2].epochs[epoch as usize].off_node, moved as u64);
        }
        let other = Cluster::new(5, 4, 2, Capacity::Fraction(0.25), sizes).unwrap();
        assert_ne!(other.run(&Mode::ALL, 8, 3).unwrap(), a);
    }

    #[test]
    fn settings_are_checked() {
        assert!(Cluster::new(0, 4, 1, Capacity::Fraction(0.25), vec![]).is_err());
        assert!(Cluster::new(0, 0, 1, Capacity::Fraction(0.25), vec![1]).is_err());
        assert!(Cluster::new(0, 4, 0, Capacity::Fraction(0.25), vec![1]).is_err());
        let c = Cluster::new(0, 2, 1, Capacity::Fraction(0.5), vec![1; 10]).unwrap();
        assert!(c.run(&Mode::ALL, 2, 0).is_err());
        assert!(c.run(&Mode::ALL, 0, 1).is_err());
        let one = c.run(&[Mode::NoCache], 2, 1).unwrap();
        assert_eq!(one[0].steady_state(), None);
        assert_eq!(Mode::LocalityAware.to_string(), "locality");
        let sizes = synthetic_sizes(1_000, 100, 0.5, 9);
        assert!(sizes.iter().all(|&s| (50..=150).contains(&s)));
        assert_eq!(sizes, synthetic_sizes(1_000, 100, 0.5, 9));
    }
}
