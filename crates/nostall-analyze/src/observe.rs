//! The check on a prediction: the real loader, as configured, feeding a simulated model
//! that takes `len / G` seconds per batch. The consumer's wait for each batch is the data
//! stall a GPU of that speed would see.
//!
//! With a cache, the first epoch only fills it (MinIO keeps the first samples it sees),
//! so it is run and reported but left out of the steady-state figures the model predicts.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use nostall::cache::CachePolicy;
use nostall::error::Result;
use nostall::loader::Loader;
use nostall::metrics::EpochStats;
use nostall::metrics::PrepReason;
use nostall::storage::Tier;

/// Epochs whose samples prepared ahead [`Observation::choices`] lists one by one; a run
/// of more (a small dataset) is summed up.
const LISTED_EPOCHS: usize = 8;

/// One tier's part in the read time the bound on reads in flight followed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierShare {
    /// `memory`, `peer` or `storage`.
    pub tier: String,
    /// Of the reads to come at the bound's last revision, those from this tier.
    pub reads: u32,
    /// The smoothed time of one read from it, milliseconds (`None`: none timed yet).
    pub ms: Option<f64>,
}

/// What one epoch (or the part of it that ran) showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedEpoch {
    /// The epoch.
    pub epoch: u64,
    /// Samples delivered.
    pub samples: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Seconds the consumer waited for batches: the data stall.
    pub stall_seconds: f64,
    /// Seconds the simulated model computed.
    pub compute_seconds: f64,
    /// Cache hits / reads in this epoch.
    pub cache_hit_share: f64,
    /// Bytes read from storage (cache misses).
    pub storage_bytes: u64,
    /// Whether the epoch ran to its end (false when the time budget cut it short).
    pub complete: bool,
    /// What the loader chose: the bound on reads in flight at the epoch's end.
    #[serde(default)]
    pub reads_in_flight: usize,
    /// The time of one read that the bound followed, milliseconds: the mean over the
    /// reads then to come of their tier's time.
    #[serde(default)]
    pub read_ms: f64,
    /// The tiers of those reads to come: how many each served, and its read time.
    #[serde(default)]
    pub read_tiers: Vec<TierShare>,
    /// Samples prepared before the epoch was asked for (the epoch started ahead).
    #[serde(default)]
    pub prepared_ahead: u64,
    /// What the loader chose: the workers preparing at the epoch's end.
    #[serde(default)]
    pub prep_workers: usize,
    /// Why that many.
    #[serde(default)]
    pub prep_reason: PrepReason,
}

/// The run: every epoch, how many of the first ones only warmed the cache, and what
/// cost the most in the last one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The epochs, in order.
    pub epochs: Vec<ObservedEpoch>,
    /// Leading epochs that filled the cache and are left out of [`Observation::steady`].
    pub warm_up: usize,
    /// The last epoch's costliest samples, costliest first: files to re-encode (prep)
    /// or move (fetch).
    #[serde(default)]
    pub slowest: Vec<Costly>,
    /// The last epoch's costliest tar shards.
    #[serde(default)]
    pub slowest_shards: Vec<Costly>,
}

/// A sample, or a shard of samples, and what it cost in an epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Costly {
    /// Where it lives.
    pub location: String,
    /// Samples (1 for a sample).
    pub samples: u64,
    /// Milliseconds spent reading it.
    pub fetch_ms: f64,
    /// Milliseconds spent preparing it.
    pub prep_ms: f64,
}

impl Costly {
    fn of(stats: &EpochStats) -> (Vec<Costly>, Vec<Costly>) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let samples = stats.slowest.iter().map(|c| Costly {
            location: c.location.clone(),
            samples: 1,
            fetch_ms: ms(c.fetch),
            prep_ms: ms(c.prep),
        });
        let shards = stats.slowest_shards.iter().map(|c| Costly {
            location: c.shard.clone(),
            samples: c.samples,
            fetch_ms: ms(c.fetch),
            prep_ms: ms(c.prep),
        });
        (samples.collect(), shards.collect())
    }
}

/// Figures over the steady-state epochs of an [`Observation`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Steady {
    /// Samples per second.
    pub images_per_s: f64,
    /// Share of wall time spent waiting for data.
    pub stall_share: f64,
    /// Share of wall time the model computed.
    pub compute_share: f64,
    /// Cache hits / reads.
    pub cache_hit_share: f64,
    /// Whether these are steady-state epochs; false when the budget ended the run
    /// during the cache's warm-up, so the figures are the first epoch's.
    pub steady: bool,
}

impl Observation {
    /// What the loader chose in the last epoch that ran, in words: reads in flight and
    /// the read time they follow, and the samples the epoch had ready when it was asked
    /// for. `None` if nothing ran.
    pub fn choices(&self) -> Option<String> {
        let last = self.epochs.last()?;
        // The tiers are named once the next reads came from more than one.
        let tiers = if last.read_tiers.len() > 1 {
            let each: Vec<String> = last
                .read_tiers
                .iter()
                .map(|share| match share.ms {
                    Some(ms) => format!("{} from {} at {ms:.2} ms", share.reads, share.tier),
                    None => format!("{} from {}", share.reads, share.tier),
                })
                .collect();
            format!(": of the next reads, {}", each.join(", "))
        } else {
            String::new()
        };
        let mut words = format!(
            "{} reads in flight (twice Little's law for {:.2} ms a read at the rate prep \
             takes samples{tiers}); {} {} preparing ({})",
            last.reads_in_flight,
            last.read_ms,
            last.prep_workers,
            if last.prep_workers == 1 {
                "worker"
            } else {
                "workers"
            },
            last.prep_reason
        );
        let mut ahead: Vec<u64> = self
            .epochs
            .iter()
            .skip(1)
            .map(|e| e.prepared_ahead)
            .collect();
        if (1..=LISTED_EPOCHS).contains(&ahead.len()) {
            let listed: Vec<String> = ahead.iter().map(u64::to_string).collect();
            words.push_str(&format!(
                "; each epoch after the first started ahead, with {} samples prepared \
                 before it was asked for",
                listed.join(", ")
            ));
        } else if !ahead.is_empty() {
            ahead.sort_unstable();
            words.push_str(&format!(
                "; the {} epochs after the first each started ahead, with {} to {} samples \
                 (median {}) prepared before it was asked for",
                ahead.len(),
                ahead[0],
                ahead[ahead.len() - 1],
                ahead[ahead.len() / 2]
            ));
        }
        Some(words)
    }

    /// The figures over the epochs after the warm-up (over the warm-up itself if no
    /// other epoch ran); `None` if nothing ran.
    pub fn steady(&self) -> Option<Steady> {
        let after: Vec<_> = self.epochs.iter().skip(self.warm_up).collect();
        let (epochs, steady) = if after.is_empty() {
            (self.epochs.iter().collect(), self.warm_up == 0)
        } else {
            (after, true)
        };
        let sum = |f: fn(&ObservedEpoch) -> f64| epochs.iter().map(|e| f(e)).sum::<f64>();
        let seconds = sum(|e| e.seconds);
        if epochs.is_empty() || seconds <= 0.0 {
            return None;
        }
        let samples = sum(|e| e.samples as f64);
        Some(Steady {
            images_per_s: samples / seconds,
            stall_share: sum(|e| e.stall_seconds) / seconds,
            compute_share: sum(|e| e.compute_seconds) / seconds,
            cache_hit_share: sum(|e| e.cache_hit_share * e.samples as f64) / samples.max(1.0),
            steady,
        })
    }
}

/// How long [`observe`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLength {
    /// Stop once this much time has passed (in the middle of an epoch if need be)…
    pub budget: Duration,
    /// …but not before this many epochs after the warm-up have ended.
    pub min_epochs: u64,
}

/// Runs `loader` from epoch 0 with a consumer that spends `len / model` seconds on every
/// batch (none without a model rate), for `length`; `progress` sees each epoch's figures
/// as they end.
///
/// # Errors
///
/// What the loader raises: a failing sample under the `error` policy.
pub fn observe(
    loader: &Loader,
    model: Option<f64>,
    length: RunLength,
    mut progress: impl FnMut(&ObservedEpoch),
) -> Result<Observation> {
    let cache = loader.config().cache;
    let warm_up = usize::from(cache.policy != CachePolicy::None);
    let started = Instant::now();
    let mut epochs = Vec::new();
    let (mut slowest, mut slowest_shards) = (Vec::new(), Vec::new());
    for epoch in 0.. {
        let measured_done = epochs.len().saturating_sub(warm_up) as u64;
        if started.elapsed() >= length.budget && measured_done >= length.min_epochs {
            break;
        }
        let must_finish = measured_done < length.min_epochs;
        let mut batches = loader.epoch(epoch)?;
        let mut compute = Duration::ZERO;
        let mut complete = true;
        for batch in batches.by_ref() {
            let batch = batch?;
            if let Some(rate) = model {
                let step = Duration::from_secs_f64(batch.len() as f64 / rate);
                std::thread::sleep(step);
                compute += step;
            }
            if !must_finish && started.elapsed() >= length.budget {
                complete = batches.position().batch as usize >= loader.batches_per_epoch();
                break;
            }
        }
        let stats = batches.stats();
        (slowest, slowest_shards) = Costly::of(&stats);
        let reads = stats.cache.hits + stats.cache.misses;
        let observed = ObservedEpoch {
            epoch,
            samples: stats.samples,
            seconds: stats.wall.as_secs_f64(),
            stall_seconds: stats.wait.as_secs_f64(),
            compute_seconds: compute.as_secs_f64(),
            cache_hit_share: if reads == 0 {
                0.0
            } else {
                stats.cache.hits as f64 / reads as f64
            },
            storage_bytes: stats.storage.bytes,
            complete,
            reads_in_flight: stats.readahead.reads_in_flight,
            read_ms: stats.readahead.read_time.as_secs_f64() * 1e3,
            read_tiers: Tier::ALL
                .iter()
                .map(|&tier| {
                    let reads = stats.readahead.by_tier[tier.index()];
                    TierShare {
                        tier: tier.name().to_string(),
                        reads: reads.upcoming,
                        ms: reads.time.map(|t| t.as_secs_f64() * 1e3),
                    }
                })
                .filter(|share| share.reads > 0)
                .collect(),
            prepared_ahead: stats.prepared_ahead,
            prep_workers: stats.prep.threads,
            prep_reason: stats.prep_reason,
        };
        progress(&observed);
        epochs.push(observed);
        if !complete {
            break;
        }
    }
    Ok(Observation {
        epochs,
        warm_up,
        slowest,
        slowest_shards,
    })
}
