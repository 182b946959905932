//! How a [`Loader`](super::Loader) runs: its settings and their validation.

use std::sync::Arc;

use crate::cache::CacheConfig;
use crate::env::LocalRanks;
use crate::error::{Error, Result};
use crate::plan::elastic::Stretch;
use crate::plan::locality::Locality;
use crate::plan::{EpochPlan, PlanConfig};
use crate::prep::mixup::Mixup;
use crate::prep::{Modality, Pipeline};
use crate::sched::schedule::Scheduler;

use super::buffer::{Arena, PageLock};
use super::device_queue::DeviceQueue;

/// The most bytes one batch may take (16 GiB): far above any training batch, and what
/// keeps a pipeline's sizes, set by hand or sent by another process, from asking for
/// memory no machine has (or overflowing the arithmetic of the buffers).
pub(crate) const MAX_BATCH_BYTES: u64 = 1 << 34;

/// The largest nice increment Linux gives a thread.
const MAX_NICE: u8 = 19;

/// What to do with a sample that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ErrorPolicy {
    /// Stop the epoch with an error naming the sample and the cause.
    #[default]
    Error,
    /// Leave the sample out, count it by cause, and fill its place with the next sample
    /// of the plan.
    Skip,
}

impl std::str::FromStr for ErrorPolicy {
    type Err = Error;

    /// `error` or `skip`.
    fn from_str(s: &str) -> Result<ErrorPolicy> {
        match s {
            "error" => Ok(ErrorPolicy::Error),
            "skip" => Ok(ErrorPolicy::Skip),
            _ => Err(Error::Config(format!(
                "on_error={s:?}: use \"error\" or \"skip\""
            ))),
        }
    }
}

impl std::fmt::Display for ErrorPolicy {
    /// The name its `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorPolicy::Error => "error",
            ErrorPolicy::Skip => "skip",
        })
    }
}

/// How a [`Loader`](crate::Loader) runs (made by [`LoaderConfig::new`] or a `LoaderBuilder`; more
/// settings may come).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoaderConfig {
    /// Order, sharding and batching.
    pub plan: PlanConfig,
    /// What is done to each sample.
    pub pipeline: Pipeline,
    /// The most workers decoding and transforming at once (the CPU-heavy role); by
    /// default this process's share of the cores it may use. Fewer prepare while the
    /// consumer needs fewer ([`adaptive_prep`](Self::adaptive_prep)); under
    /// [`balance_ranks`](Self::balance_ranks), the rank's share of its node's bounds them.
    pub prep_threads: usize,
    /// The most reads in flight: a ceiling. The read-ahead keeps as many in flight as
    /// Little's law asks for the rate prep takes samples at, at least two (see the
    /// `readahead` module): two on local storage, dozens on 20 ms storage. Each takes a
    /// thread, except from a source that keeps several in flight from one
    /// ([`Source::reads_at_once`](crate::storage::Source::reads_at_once): S3).
    pub fetch_threads: usize,
    /// Whether reads in flight follow the observed latency (up to `fetch_threads`); off,
    /// `fetch_threads` reads are always in flight (a static configuration, for
    /// comparison).
    pub adaptive_reads: bool,
    /// Whether fewer than `prep_threads` workers prepare when the consumer's rate needs
    /// fewer (the rate model, once a batch: `sched/roles`), leaving the cores
    /// to a training step that is itself CPU; off, `prep_threads` always prepare (a
    /// static configuration, for comparison).
    pub adaptive_prep: bool,
    /// The loader threads' nice increment (0 to 19): their CPU priority below the
    /// consumer's, so that a training thread is not queued behind them.
    pub worker_nice: u8,
    /// Batches prepared ahead of the consumer.
    pub prefetch: usize,
    /// What to do with bad samples.
    pub on_error: ErrorPolicy,
    /// The loader's cache of encoded samples, kept across epochs.
    pub cache: CacheConfig,
    /// The most bytes fetch threads may hold ahead of prep (in flight or waiting); see
    /// the [pipeline's docs](crate::loader).
    pub readahead: u64,
    /// With a cache partitioned across nodes: plan each epoch locality-aware
    /// ([`EpochPlan::locality_aware`]), so that ranks take the samples their node holds.
    /// Every global batch keeps the plain plan's contents.
    pub locality: Option<Locality>,
    /// Under [`ErrorPolicy::Skip`]: append every skipped sample to this file, one JSON
    /// object a line (`epoch`, `sample_id`, `location`, `cause`, `detail`), so that the
    /// dataset can be cleaned. Unlike [`Epoch::skipped`](crate::Epoch::skipped), it has no cap.
    pub quarantine: Option<std::path::PathBuf>,
    /// Start each epoch's fetch and prep while the previous epoch's last batches are
    /// consumed (once the previous epoch has read all its samples), so that the pipeline
    /// never runs dry at an epoch boundary. The consumer adopts that work when it asks for
    /// the next epoch from its start; asking for anything else discards it
    /// ([`Loader::prepare`](super::Loader::prepare) starts an epoch so too). While the two
    /// overlap, batch buffers reach twice [`prefetch`](Self::prefetch) and read-ahead twice
    /// [`readahead`](Self::readahead).
    pub overlap_epochs: bool,
    /// A bound on what the loader holds by design, in bytes: batch buffers, read-ahead
    /// and cache together ([`MemoryPlan`](super::MemoryPlan) says how it is split). The
    /// pipeline is paid first (shrunk to fit if needed), the cache gets the rest. It may
    /// change between a saved state and its resume: the epoch resumed keeps the groups
    /// it was dealt in ([`RunIdentity::open_groups`](super::RunIdentity::open_groups)).
    pub memory: Option<u64>,
    /// Bytes for decoded groups of samples (Parquet pages or row groups), which sets how
    /// many the plan keeps open ([`Blocks::within`](crate::plan::Blocks::within)); `None`:
    /// [`DEFAULT_GROUP_MEMORY`](crate::storage::DEFAULT_GROUP_MEMORY), or a quarter of
    /// [`memory`](Self::memory) where that is less. Part of `memory` where both are set.
    /// It may change between a saved state and its resume, as `memory` may.
    pub group_memory: Option<u64>,
    /// When this process is one of several local ranks of a torchrun job: share the
    /// node's prep threads among them in proportion to the work each has per iteration
    /// (the scheduler's node table, `sched/balance`), rather than each keeping `prep_threads`.
    pub balance_ranks: bool,
    /// Under [`balance_ranks`](Self::balance_ranks), the ranks this loader balances
    /// with; `None`: the launcher's ([`LocalRanks::from_env`]). A process that loads for
    /// several ranks (the node agent) names each loader's.
    pub local_ranks: Option<LocalRanks>,
    /// Where batch buffers live: shared memory lets another process map a batch without
    /// a copy ([`Batch::shared_memory`](super::Batch::shared_memory)), as the node agent
    /// does for the jobs it serves.
    pub arena: Arena,
    /// Page-locks the batch buffers of the private arena, for a consumer that copies
    /// them to a device ([`crate::device::CudaHostMemory`]); `None`: plain memory.
    pub page_lock: Option<Arc<dyn PageLock>>,
    /// Where samples left to a device are also queued as they are prepared, for a
    /// consumer that decodes them ahead of their batches; `None`: only in their batches.
    pub device_queue: Option<Arc<DeviceQueue>>,
    /// MixUp and CutMix of each batch as it is handed over (images only); its soft
    /// labels are the batch's [`soft_labels`](super::Batch::soft_labels).
    pub mixup: Option<Mixup>,
}

impl LoaderConfig {
    /// The [default settings](super::LoaderSettings) around a pipeline: batch 64,
    /// shuffled, prep threads for this process's share of the cores
    /// ([`auto_threads`](super::auto_threads)), up to 128 reads in flight, 4 batches of
    /// prefetch, stop on errors, no cache, read-ahead up to 64 MiB, epochs overlapping,
    /// the threads of a node's ranks balanced.
    pub fn new(pipeline: Pipeline) -> LoaderConfig {
        super::LoaderSettings::default().config_with(pipeline)
    }

    /// The plan of `epoch` on this rank over a dataset of `dataset_len` samples: plain,
    /// or locality-aware where [`locality`](Self::locality) is set. Every plan the loader
    /// reads (its epochs, the next epoch a cache looks ahead to, a frequency cache's
    /// placement) is this one, or [`LoaderConfig::resumed_plan`] for an epoch resumed.
    pub(crate) fn epoch_plan(&self, dataset_len: usize, epoch: u64) -> Result<EpochPlan> {
        self.resumed_plan(&self.plan, dataset_len, epoch, &[])
    }

    /// The plan of the rest of `epoch` on this rank after the world sizes of `history`
    /// (elastic resume), dealt as `plan` says: this configuration's plan, or one with the
    /// groups a saved state's epoch was dealt in (see [`RunIdentity::open_groups`]).
    ///
    /// [`RunIdentity::open_groups`]: super::RunIdentity::open_groups
    pub(crate) fn resumed_plan(
        &self,
        plan: &PlanConfig,
        dataset_len: usize,
        epoch: u64,
        history: &[Stretch],
    ) -> Result<EpochPlan> {
        EpochPlan::resumed(plan, self.locality.as_ref(), dataset_len, epoch, history)
    }

    /// The scheduler of the epochs: adaptive or static, per decision, as
    /// `adaptive_reads` and `adaptive_prep` say.
    pub(crate) fn scheduler(&self) -> Scheduler {
        Scheduler::new(self.adaptive_reads, self.adaptive_prep)
    }

    /// Checks the settings against a dataset of `dataset_len` samples, and against each
    /// other ([`LoaderConfig::check`]).
    pub(super) fn validate(&self, dataset_len: usize) -> Result<()> {
        self.plan.validate(dataset_len)?;
        if let Some(locality) = &self.locality {
            // Fails early, with the reason, when the placement does not fit the job.
            EpochPlan::locality_aware(
                &self.plan,
                &locality.placement,
                locality.ranks_per_node,
                dataset_len,
                0,
            )?;
        }
        self.check()
    }

    /// Checks what can be checked before the dataset is opened: the settings against each
    /// other (a batch that fits, a thread of each kind, a quarantine file with the skip
    /// policy, ...). A loader made by a [`LoaderBuilder`](super::LoaderBuilder) is checked
    /// so when its configuration is asked for.
    pub(super) fn check(&self) -> Result<()> {
        self.plan.check()?;
        self.cache.validate()?;
        let layout = self.pipeline.layout();
        let batch_bytes = layout
            .checked_bytes()
            .and_then(|sample| sample.checked_mul(self.plan.batch_size));
        if batch_bytes.is_none_or(|bytes| bytes as u64 > MAX_BATCH_BYTES) {
            return Err(Error::Config(format!(
                "a batch of {} samples of shape {:?} ({:?}) would take more than the {} GiB \
                 a batch may: the pipeline's output sizes (a crop's, a resize's, a clip's \
                 length) or the batch size are larger than meant",
                self.plan.batch_size,
                layout.shape(),
                layout.dtype(),
                MAX_BATCH_BYTES >> 30
            )));
        }
        if self.prep_threads == 0 || self.fetch_threads == 0 {
            return Err(Error::Config(
                "prep and fetch need at least one thread each".into(),
            ));
        }
        if self.prefetch == 0 {
            return Err(Error::Config("prefetch must be at least 1 batch".into()));
        }
        if self.worker_nice > MAX_NICE {
            return Err(Error::Config(format!(
                "worker_nice={}: a nice increment is 0 to {MAX_NICE}",
                self.worker_nice
            )));
        }
        if self.quarantine.is_some() && self.on_error != ErrorPolicy::Skip {
            return Err(Error::Config(
                "a quarantine file lists skipped samples: it needs the skip error policy".into(),
            ));
        }
        if let Some(mix) = &self.mixup {
            let modality = self.pipeline.modality();
            if !matches!(modality, Modality::Image | Modality::Video) {
                return Err(Error::Config(format!(
                    "Mixup mixes images and video clips: the pipeline prepares {}",
                    modality.name()
                )));
            }
            let Some((_, _, dtype)) = self.pipeline.layout().tensor() else {
                return Err(Error::Config(
                    "Mixup mixes images: the samples hold none".into(),
                ));
            };
            mix.check(dtype)?;
            if self.pipeline.prep().decode_route().is_some() {
                return Err(Error::Config(
                    "Mixup mixes the batch on the CPU as it is handed over, before a device \
                     decodes the JPEGs it was sent: use decode=\"cpu\" with Mixup"
                        .into(),
                ));
            }
        }
        if self.readahead == 0 {
            return Err(Error::Config(
                "readahead must be at least 1 byte (it bounds bytes fetched ahead of prep)".into(),
            ));
        }
        Ok(())
    }
}
