//! The rate model of DS-Analyzer: what throughput a configuration allows, where the time
//! of an epoch goes, and what change would remove a stall.
//!
//! Three rates bound training, each in samples per second:
//!
//! - **G**, how fast the model ingests samples (the GPU's speed);
//! - **P(n)**, how fast `n` prep threads decode and augment (measured per thread count,
//!   because scaling saturates: memory bandwidth, hyper-threads, turbo);
//! - **F(x)**, how fast samples can be fetched when a fraction `x` of the dataset sits in
//!   the cache: an epoch reads `x` of its bytes at the cache's rate `C` and the rest at the
//!   storage rate `S`, so `1/F = x/C + (1−x)/S` (per-sample times, weighted).
//!
//! The stages overlap, so throughput is `min(F, P, G)` and an epoch of `D` samples takes
//! `D / min(F, P, G)`. Of that, `D/G` is compute; the prep stall is what prep adds on top
//! of compute, `D/min(P, G) − D/G`; the fetch stall is the rest.
//!
//! One cost does not overlap: the loader starts each epoch empty, so the model waits for
//! the first batch of `b` samples, `b / min(F, P)`, before it computes at all. With it,
//! an epoch takes `max(D / min(F, P), b / min(F, P) + D / G)`. It matters only when an
//! epoch is a few batches long (a small dataset, or many ranks); [`Setup::batch_size`]
//! of 0 leaves it out. The smallest cache that
//! removes the fetch stall solves `F(x) = min(P, G)`:
//! `x* = (1/S − 1/m) / (1/S − 1/C)` with `m = min(P, G)`.
//!
//! With `K` nodes each caching a fraction `c` of the dataset in a partitioned cache
//! (CoorDL), a node finds `c` of its samples locally, `min(1, K·c) − c` at a peer (at the
//! network's rate `R`), and the rest in storage, whose rate `S` the nodes share.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Measured (or assumed) rates, in samples per second unless noted.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Rates {
    /// Samples in the dataset.
    pub samples: u64,
    /// Bytes in the dataset (to convert bandwidths into sample rates).
    pub dataset_bytes: u64,
    /// Prep rate for 1, 2, … threads: `prep[n - 1]` is P(n).
    pub prep: Vec<f64>,
    /// Storage read rate S, in bytes per second, for the whole job.
    pub storage_bytes_per_s: f64,
    /// Rate of reads served from the in-memory cache, C.
    pub cache: f64,
    /// The model's ingestion rate G; `None` when the model is not the limit (infinite).
    pub model: Option<f64>,
}

/// A configuration to predict for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    /// Fraction of the dataset each node caches, 0–1.
    pub cache_fraction: f64,
    /// Prep threads per node.
    pub threads: usize,
    /// Nodes training together (each with its own cache, partitioned); 1 for one node.
    pub nodes: usize,
    /// Network bandwidth between nodes, bytes per second (for remote cache hits).
    pub network_bytes_per_s: f64,
    /// Samples per batch, for the wait at each epoch's start; 0 to leave it out.
    pub batch_size: usize,
}

impl Setup {
    /// One node with `threads` prep threads and a cache of `cache_fraction`, epochs long
    /// enough that their start does not matter.
    pub fn single(cache_fraction: f64, threads: usize) -> Setup {
        Setup {
            cache_fraction,
            threads,
            nodes: 1,
            network_bytes_per_s: f64::INFINITY,
            batch_size: 0,
        }
    }
}

/// Which rate limits throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum Bottleneck {
    /// Reading samples (storage or network).
    Fetch,
    /// Decoding and augmenting.
    Prep,
    /// The model: no data stall.
    Model,
}

/// What the model predicts for one node of a [`Setup`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Prediction {
    /// Samples per second per node.
    pub throughput: f64,
    /// F: the fetch rate the setup allows.
    pub fetch: f64,
    /// P(n).
    pub prep: f64,
    /// The limiting rate.
    pub bottleneck: Bottleneck,
    /// Shares of epoch time, summing to 1: compute, prep stall, fetch stall. Without a
    /// model rate, compute is 0 and the stalls are relative to the slower stage.
    pub compute_share: f64,
    /// Share of epoch time prep adds beyond compute.
    pub prep_stall_share: f64,
    /// Share of epoch time fetch adds beyond prep and compute.
    pub fetch_stall_share: f64,
}

impl Rates {
    /// Rates for deciding prep threads alone: one thread prepares `per_thread`
    /// samples/s (more scale linearly, as [`Rates::prep_rate`] extrapolates from one
    /// measurement) for a model taking `model` samples/s. Fetching and caching are left
    /// out (they are not what prep threads change).
    pub fn prep_only(per_thread: f64, model: f64) -> Rates {
        Rates {
            samples: 1,
            dataset_bytes: 1,
            prep: vec![per_thread],
            storage_bytes_per_s: f64::INFINITY,
            cache: f64::INFINITY,
            model: Some(model),
        }
    }

    fn mean_sample_bytes(&self) -> f64 {
        self.dataset_bytes as f64 / self.samples.max(1) as f64
    }

    /// Storage's rate in samples per second.
    pub fn storage(&self) -> f64 {
        self.storage_bytes_per_s / self.mean_sample_bytes()
    }

    /// P(n): measured where available; beyond the measured counts, the last measured
    /// per-thread gain is assumed to continue (an optimistic bound, marked as such in
    /// reports).
    pub fn prep_rate(&self, threads: usize) -> f64 {
        let measured = self.prep.len();
        if threads == 0 || measured == 0 {
            return 0.0;
        }
        if threads <= measured {
            return self.prep[threads - 1];
        }
        let last = self.prep[measured - 1];
        let gain = if measured >= 2 {
            (last - self.prep[measured - 2]).max(0.0)
        } else {
            last
        };
        last + gain * (threads - measured) as f64
    }

    /// F for a setup, per node, in samples per second.
    pub fn fetch_rate(&self, setup: &Setup) -> f64 {
        let nodes = setup.nodes.max(1) as f64;
        let local = setup.cache_fraction.clamp(0.0, 1.0);
        let held = (nodes * local).min(1.0);
        let remote = held - local;
        let from_storage = 1.0 - held;
        let network = setup.network_bytes_per_s / self.mean_sample_bytes();
        // Storage is shared: each node gets its share of the bandwidth.
        let storage = self.storage() / nodes;
        let time = local / self.cache + remote / network + from_storage / storage;
        if time > 0.0 {
            1.0 / time
        } else {
            f64::INFINITY
        }
    }

    /// Throughput and the split of epoch time for `setup`.
    pub fn predict(&self, setup: &Setup) -> Prediction {
        let fetch = self.fetch_rate(setup);
        let prep = self.prep_rate(setup.threads);
        let model = self.model.unwrap_or(f64::INFINITY);
        let pipeline = fetch.min(prep);
        let bottleneck = if model <= pipeline {
            Bottleneck::Model
        } else if prep <= fetch {
            Bottleneck::Prep
        } else {
            Bottleneck::Fetch
        };
        // Seconds per epoch on one node: its share of the samples, the first batch's wait.
        let samples = self.samples.max(1) as f64 / setup.nodes.max(1) as f64;
        let first = setup.batch_size as f64;
        let compute = if model.is_finite() {
            samples / model
        } else {
            0.0
        };
        let epoch_at = |rate: f64| (samples / rate).max(first / rate + compute);
        let epoch = epoch_at(pipeline);
        let without_fetch = epoch_at(prep);
        Prediction {
            throughput: samples / epoch,
            fetch,
            prep,
            bottleneck,
            compute_share: compute / epoch,
            prep_stall_share: (without_fetch - compute) / epoch,
            fetch_stall_share: (epoch - without_fetch) / epoch,
        }
    }

    /// x*: the smallest cache fraction whose fetch rate keeps up with `min(P(n), G)` on
    /// one node; 0 when storage alone keeps up, `None` when even a full cache cannot.
    pub fn smallest_cache(&self, threads: usize) -> Option<f64> {
        let target = self
            .prep_rate(threads)
            .min(self.model.unwrap_or(f64::INFINITY));
        let (s, c) = (1.0 / self.storage(), 1.0 / self.cache);
        let m = 1.0 / target;
        if s <= m {
            return Some(0.0);
        }
        if c > m {
            return None;
        }
        Some(((s - m) / (s - c)).clamp(0.0, 1.0))
    }

    /// n*: the fewest prep threads with P(n) ≥ G, searched up to `max_threads`; `None`
    /// without a model rate or when `max_threads` are not enough.
    pub fn threads_needed(&self, max_threads: usize) -> Option<usize> {
        let model = self.model?;
        (1..=max_threads).find(|&n| self.prep_rate(n) >= model)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// 10 000 samples of 100 kB; storage 50 MB/s = 500 samples/s; prep 400/700/900 for
    /// 1–3 threads; cache 20 000 samples/s; model 600 samples/s.
    pub(crate) fn rates() -> Rates {
        Rates {
            samples: 10_000,
            dataset_bytes: 1_000_000_000,
            prep: vec![400.0, 700.0, 900.0],
            storage_bytes_per_s: 50e6,
            cache: 20_000.0,
            model: Some(600.0),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn fetch_rate_weighs_cache_and_storage_by_time_per_sample() {
        let r = rates();
        assert!(close(r.fetch_rate(&Setup::single(0.0, 1)), 500.0));
        assert!(close(r.fetch_rate(&Setup::single(1.0, 1)), 20_000.0));
        let half = 1.0 / (0.5 / 20_000.0 + 0.5 / 500.0);
        assert!(close(r.fetch_rate(&Setup::single(0.5, 1)), half));
    }

    #[test]
    fn throughput_is_the_slowest_rate_and_shares_add_up() {
        let r = rates();
        for (setup, rate, bottleneck) in [
            (Setup::single(0.0, 2), 500.0, Bottleneck::Fetch),
            (Setup::single(1.0, 1), 400.0, Bottleneck::Prep),
            (Setup::single(1.0, 2), 600.0, Bottleneck::Model),
        ] {
            let p = r.predict(&setup);
            assert!(close(p.throughput, rate), "{setup:?}: {p:?}");
            assert_eq!(p.bottleneck, bottleneck);
            let total = p.compute_share + p.prep_stall_share + p.fetch_stall_share;
            assert!(close(total, 1.0), "{p:?}");
        }
        // Fetch-bound at 500 with the model at 600: compute is 500/600 of the epoch and
        // the rest is fetch stall (prep at 2 threads, 700, keeps up with the model).
        let p = r.predict(&Setup::single(0.0, 2));
        assert!(close(p.compute_share, 500.0 / 600.0));
        assert!(close(p.prep_stall_share, 0.0));
        assert!(close(p.fetch_stall_share, 1.0 - 500.0 / 600.0));
        // Prep-bound at 400: prep stall is 1 − 400/600, no fetch stall.
        let p = r.predict(&Setup::single(1.0, 1));
        assert!(close(p.prep_stall_share, 1.0 - 400.0 / 600.0));
        assert!(close(p.fetch_stall_share, 0.0));
    }

    #[test]
    fn the_smallest_cache_makes_fetch_exactly_keep_up() {
        let r = rates();
        let x = r.smallest_cache(2).unwrap();
        let fetch = r.fetch_rate(&Setup::single(x, 2));
        assert!(close(fetch, 600.0), "F(x*) = {fetch}");
        assert!(r.predict(&Setup::single(x * 0.9, 2)).fetch_stall_share > 0.0);
        // Storage alone keeps up with one thread's 400 samples/s.
        assert_eq!(r.smallest_cache(1), Some(0.0));
        // A cache slower than the target cannot help.
        let slow_cache = Rates {
            cache: 550.0,
            ..rates()
        };
        assert_eq!(slow_cache.smallest_cache(2), None);
    }

    #[test]
    fn threads_needed_follow_the_measured_scaling() {
        let r = rates();
        assert_eq!(r.threads_needed(8), Some(2));
        let fast_model = Rates {
            model: Some(1_000.0),
            ..rates()
        };
        // Beyond 3 measured threads the last gain (+200) is extrapolated: 4 → 1100.
        assert_eq!(fast_model.threads_needed(8), Some(4));
        assert_eq!(fast_model.threads_needed(3), None);
    }

    #[test]
    fn short_epochs_wait_for_their_first_batch() {
        let r = Rates {
            samples: 3_000,
            ..rates()
        };
        // Model-bound: 3000 samples at 600/s is 5 s of compute, plus the first batch of
        // 100 at the pipeline's 700/s before it can start.
        let setup = Setup {
            batch_size: 100,
            ..Setup::single(1.0, 2)
        };
        let p = r.predict(&setup);
        let epoch = 100.0 / 700.0 + 5.0;
        assert!(close(p.throughput, 3_000.0 / epoch), "{p:?}");
        assert!(close(p.compute_share, 5.0 / epoch));
        assert!(close(p.prep_stall_share, 1.0 - 5.0 / epoch));
        assert_eq!(p.bottleneck, Bottleneck::Model);
        // Pipeline-bound epochs hide the start behind the slower stage.
        let prep_bound = Setup {
            batch_size: 100,
            ..Setup::single(1.0, 1)
        };
        assert!(close(r.predict(&prep_bound).throughput, 400.0));
    }

    #[test]
    fn a_partitioned_cache_serves_misses_from_peers() {
        let r = rates();
        let setup = Setup {
            cache_fraction: 0.25,
            threads: 2,
            nodes: 4,
            network_bytes_per_s: 1e9, // 10 000 samples/s
            batch_size: 0,
        };
        let expected = 1.0 / (0.25 / 20_000.0 + 0.75 / 10_000.0);
        assert!(close(r.fetch_rate(&setup), expected));
        // Two nodes with 25% each leave half to a storage shared by both.
        let two = Setup { nodes: 2, ..setup };
        let expected = 1.0 / (0.25 / 20_000.0 + 0.25 / 10_000.0 + 0.5 / 250.0);
        assert!(close(r.fetch_rate(&two), expected));
    }
}
