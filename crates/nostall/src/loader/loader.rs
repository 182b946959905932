//! The loader: one dataset, its cache and its batch buffers, making an [`Epoch`] at a
//! time.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::cache::{CachePolicy, Cached};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::metrics::live::Totals;
use crate::plan::elastic::{remaining, Stretch};
use crate::plan::{batches_for, samples_per_rank, Blocks, EpochPlan, PlanConfig, Position, Shard};
use crate::prep::Pipeline;
use crate::sample::SampleId;
use crate::sched::roles::PrepRole;
use crate::storage::Source;

use super::budget::{fit, MemoryPlan};
use super::buffer::Pool;
use super::epoch::{halt_runs, Parts, Running, Runs, Upcoming};
use super::quarantine::Quarantine;
use super::warm::Warmer;
use super::{Batch, BatchHeader, Checkpoint, Epoch, LoaderConfig, RunIdentity};
use crate::sched::balance::share::Balance;
use crate::sched::reads::readahead::CarriedReads;

/// An image loader over one dataset: makes an iterator of batches per epoch.
pub struct Loader {
    catalog: Arc<Catalog>,
    source: Arc<Cached>,
    pub(super) config: LoaderConfig,
    pool: Arc<Pool>,
    /// Computed when first asked for: a pass over the catalog.
    identity: OnceLock<RunIdentity>,
    quarantine: Option<Arc<Quarantine>>,
    /// Figures since the loader was made, for a live exporter.
    totals: Arc<Totals>,
    /// The epoch an ending epoch started ahead of the consumer
    /// ([`LoaderConfig::overlap_epochs`]).
    upcoming: Arc<Upcoming>,
    /// The `frequency` cache policy's background reads, stopped with the loader.
    _warmer: Option<Warmer>,
    /// How the memory budget was split, if there is one.
    memory: Option<MemoryPlan>,
    /// This rank's share of its node's prep threads, when balanced.
    balance: Option<Arc<Balance>>,
    /// How many workers prepare, across epochs.
    prep_role: Arc<Mutex<PrepRole>>,
    /// The read times the last epoch ended with, for the next one's read-ahead.
    carried_reads: Arc<Mutex<Option<CarriedReads>>>,
    /// Every run started, while it lasts ([`Loader::halt`]).
    runs: Arc<Runs>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("samples", &self.catalog.len())
            .field("config", &self.config)
            .finish()
    }
}

/// `config` as a loader over `catalog` runs it: fitted into its memory budget, and, for
/// samples read in groups (Parquet pages), an order that reads each group once, with as
/// many open as the memory for groups holds; the budget's split.
pub(super) fn resolved_config(
    config: &LoaderConfig,
    catalog: &Catalog,
) -> Result<(LoaderConfig, Option<MemoryPlan>)> {
    let grouped = !catalog.groups().is_empty();
    let (mut config, memory) = fit(config, catalog.total_bytes(), catalog.len(), grouped)?;
    if grouped && config.plan.blocks.is_none() {
        let group_memory = config
            .group_memory
            .unwrap_or(crate::storage::DEFAULT_GROUP_MEMORY);
        config.plan.blocks = Blocks::within(catalog.groups(), catalog.total_bytes(), group_memory);
    }
    Ok((config, memory))
}

impl Loader {
    /// A loader reading `catalog`'s samples from `source`, through a cache as
    /// configured.
    pub fn new(
        catalog: Arc<Catalog>,
        source: Arc<dyn Source>,
        config: LoaderConfig,
    ) -> Result<Loader> {
        config.validate(catalog.len())?;
        if let Some(mix) = &config.mixup {
            let classes = catalog.classes().len();
            if mix.num_classes() < classes {
                return Err(Error::Config(format!(
                    "Mixup: num_classes={} but the dataset {} has {classes} classes",
                    mix.num_classes(),
                    catalog.root().display()
                )));
            }
        }
        let (listed, prepared) = (catalog.modality(), config.pipeline.modality());
        if listed != prepared {
            return Err(Error::Config(format!(
                "the dataset {} lists {} but the pipeline prepares {}: open it for the \
                 pipeline's modality",
                catalog.root().display(),
                listed.plural(),
                prepared.plural()
            )));
        }
        let (config, memory) = resolved_config(&config, &catalog)?;
        if !catalog.groups().is_empty() {
            let group_memory = config
                .group_memory
                .unwrap_or(crate::storage::DEFAULT_GROUP_MEMORY);
            source.set_group_memory(group_memory);
        }
        let buffer_bytes = config.plan.batch_size * config.pipeline.sample_bytes();
        let capacity = config.cache.capacity.bytes(catalog.total_bytes());
        let quarantine = config
            .quarantine
            .as_deref()
            .map(|path| Quarantine::open(path).map(Arc::new))
            .transpose()?;
        let source = Arc::new(Cached::new(source, config.cache.policy, capacity));
        let warmer = Warmer::start(&config, &catalog, source.clone());
        let balance = Balance::open(config.balance_ranks, config.local_ranks).map(Arc::new);
        let prep_role = prep_role(&config, balance.as_deref());
        let (arena, page_lock) = (config.arena, config.page_lock.clone());
        Ok(Loader {
            balance,
            prep_role,
            carried_reads: Arc::default(),
            quarantine,
            source,
            _warmer: warmer,
            memory,
            catalog,
            config,
            pool: Pool::new(buffer_bytes, arena, page_lock),
            identity: OnceLock::new(),
            totals: Arc::default(),
            upcoming: Arc::new(Mutex::new(None)),
            runs: Arc::default(),
        })
    }

    /// This loader balancing its prep threads through `balance`, whatever the
    /// environment says.
    #[cfg(test)]
    pub(super) fn with_balance(mut self, balance: Balance) -> Loader {
        self.prep_role = prep_role(&self.config, Some(&balance));
        self.balance = Some(Arc::new(balance));
        self
    }

    /// A loader making this one's runs with `pipeline` instead, one of this pipeline's
    /// fingerprint (its [`Prep::unconverted`](crate::prep::Prep::unconverted) form, say),
    /// reading through this loader's source and cache.
    ///
    /// # Errors
    ///
    /// As [`Loader::new`]: `pipeline` prepares another modality.
    pub fn with_pipeline(&self, pipeline: Pipeline) -> Result<Loader> {
        let mut config = self.config.clone();
        config.pipeline = pipeline;
        // This loader's cache serves both: the new loader's source is it.
        config.cache.policy = CachePolicy::None;
        Loader::new(self.catalog.clone(), self.source.clone(), config)
    }

    /// What a position of this loader is valid for (part of a [`Checkpoint`]).
    pub fn identity(&self) -> RunIdentity {
        *self
            .identity
            .get_or_init(|| RunIdentity::of(&self.catalog, &self.config))
    }

    /// Where `epoch` stands, for what, and what it skipped so far: save it to resume
    /// exactly there with [`Loader::resume_saved`] (or [`Loader::resume_from`] with the
    /// states of the other ranks).
    pub fn checkpoint(&self, epoch: &Epoch) -> Checkpoint {
        let mut identity = self.identity();
        // A resumed epoch goes on in the groups it was dealt in (the same `Arc` as the
        // configuration's otherwise, compared without reading it).
        if epoch.blocks() != self.config.plan.blocks.as_ref() {
            identity = identity.dealt_in(epoch.blocks());
        }
        Checkpoint {
            position: epoch.position(),
            identity,
            skipped: epoch.stats().skipped,
            rank: self.config.plan.rank as u64,
            history: epoch.history().to_vec(),
        }
    }

    /// Resumes a [`Checkpoint`], after checking that it belongs to this dataset and these
    /// settings; the epoch's skip counts go on from the saved ones. One rank's state
    /// resumes another world size too, as [`Loader::resume_from`] says.
    ///
    /// # Errors
    ///
    /// As [`Loader::resume_from`].
    pub fn resume_saved(&self, checkpoint: &Checkpoint) -> Result<Epoch> {
        self.resume_from(std::slice::from_ref(checkpoint))
    }

    /// Resumes from the states the ranks of a job saved: one rank's, or every rank's.
    ///
    /// With the world size they were saved with, this rank resumes its own state if it is
    /// among them, else the first (under data-parallel training, ranks stand at the same
    /// batch; their positions differ only after skips). With another world size, the rest
    /// of the epoch is re-sharded over this job's ranks ([`crate::plan::elastic`]): every
    /// remaining sample is delivered once, with the augmentation it would have had, and
    /// every rank gets the same number of batches. One rank's state is enough when no rank
    /// had skipped a sample in the epoch; after skips, every rank's state is needed (the
    /// given ones are checked for skips; the others' cannot be). The epoch's skip counts
    /// so far go on in rank 0's counts, so that their sum over ranks stays the epoch's.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the states belong to another dataset or settings (naming
    /// what differs), disagree with each other, or cannot tell what was consumed; or as
    /// for [`Loader::resume`].
    pub fn resume_from(&self, states: &[Checkpoint]) -> Result<Epoch> {
        let resumed = self.resolve(states)?;
        let plan = self.dealt_as(&resumed.identity)?;
        self.start(resumed.position, resumed.skipped, resumed.history, plan)
    }

    /// The run of this loader's own order from `position` (no skips so far, no stretch
    /// under another world size), resolved as [`Loader::resolve`] resolves a saved state:
    /// where a run starts when no state was loaded.
    ///
    /// # Errors
    ///
    /// As [`Loader::resolve`].
    pub fn run_from(&self, position: Position) -> Result<Checkpoint> {
        self.resolve(&[Checkpoint {
            position,
            identity: self.identity(),
            skipped: BTreeMap::new(),
            rank: self.config.plan.rank as u64,
            history: Vec::new(),
        }])
    }

    /// The state this rank resumes from `states` (see [`Loader::resume_from`]): where, with
    /// which skip counts, after which stretches and in which groups
    /// ([`RunIdentity::open_groups`]: the epoch goes on in the order it was dealt, whatever
    /// the memory settings say now). Checks everything [`Loader::resume_from`] checks,
    /// without starting threads.
    ///
    /// # Errors
    ///
    /// As [`Loader::resume_from`], except for the position's bound; and
    /// [`Error::Config`] when this dataset is read in groups and the state does not say
    /// which (it was saved by an earlier nostall), or names groups it does not have.
    pub fn resolve(&self, states: &[Checkpoint]) -> Result<Checkpoint> {
        let Some(first) = states.first() else {
            return Err(Error::Config("no saved state to resume from".into()));
        };
        let identity = self.identity();
        for state in states {
            state.validate(self.catalog.len() as u64)?;
            identity.check_elastic(&state.identity)?;
            let (p, q) = (state.position, first.position);
            if state.identity != first.identity
                || (p.epoch, p.batch) != (q.epoch, q.batch)
                || state.history != first.history
            {
                return Err(Error::Config(format!(
                    "the saved states of ranks {} and {} belong to different runs or \
                     points of training (epoch {}, batch {} against epoch {}, batch {}): \
                     give the states saved together",
                    first.rank, state.rank, q.epoch, q.batch, p.epoch, p.batch
                )));
            }
        }
        let dealt = self.dealt_as(&first.identity)?;
        let (open_groups, groups) = match dealt.blocks {
            Some(_) => (first.identity.open_groups, first.identity.groups),
            None => (0, 0),
        };
        let plan = &self.config.plan;
        if first.identity.world_size == plan.world as u64 {
            identity.check(&first.identity)?;
            let own = states
                .iter()
                .find(|s| s.rank == plan.rank as u64)
                .unwrap_or(first);
            let batches = self.batches_per_epoch() as u64;
            if own.history.is_empty() && own.position.batch > batches {
                return Err(Error::Config(format!(
                    "the saved state's batch is {}, and an epoch here has {batches} batches: \
                     give the state state_dict() returned, unchanged",
                    own.position.batch
                )));
            }
            return Ok(Checkpoint {
                rank: plan.rank as u64,
                identity: RunIdentity {
                    open_groups,
                    groups,
                    ..own.identity
                },
                ..own.clone()
            });
        }
        let mut history = first.history.clone();
        let stretch = self.stretch(states, &dealt)?;
        if stretch.batches > history.last().map_or(0, |s| s.batches) || stretch.consumed.is_some() {
            history.push(stretch);
        }
        let mut skipped = BTreeMap::new();
        if plan.rank == 0 {
            for state in states {
                for (&kind, &count) in &state.skipped {
                    *skipped.entry(kind).or_default() += count;
                }
            }
        }
        Ok(Checkpoint {
            position: Position {
                sample: 0,
                ..first.position
            },
            identity: RunIdentity {
                open_groups,
                groups,
                ..identity
            },
            skipped,
            rank: plan.rank as u64,
            history,
        })
    }

    /// This loader's plan, dealing the epoch in the groups `saved` records
    /// ([`RunIdentity::open_groups`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when those groups are not recorded and this dataset is read in
    /// groups, or are not this dataset's.
    fn dealt_as(&self, saved: &RunIdentity) -> Result<PlanConfig> {
        let mut plan = self.config.plan.clone();
        let own = self.identity();
        if (saved.open_groups, saved.groups) == (own.open_groups, own.groups) {
            return Ok(plan);
        }
        let lengths = plan
            .blocks
            .as_ref()
            .map_or(self.catalog.groups(), |b| &b.lengths);
        plan.blocks = match saved.open_groups {
            0 => None,
            // Saved before the groups were recorded: safe only where no order has groups.
            RunIdentity::UNRECORDED if lengths.is_empty() => None,
            RunIdentity::UNRECORDED => {
                return Err(Error::Config(
                    "the saved state does not say how many groups of samples (Parquet pages \
                     or row groups) its epoch's order kept open (identity.open_groups: an \
                     earlier nostall saved it), and this dataset is read in groups, so that \
                     order cannot be rebuilt and resuming would repeat some samples and \
                     leave out others: start the epoch afresh (set_epoch)"
                        .into(),
                ))
            }
            open => {
                let blocks = usize::try_from(open)
                    .ok()
                    .and_then(|open| Blocks::new(lengths, open))
                    .filter(|b| own.dealt_in(Some(b)).groups == saved.groups);
                if blocks.is_none() {
                    return Err(Error::Config(format!(
                        "the saved state's epoch kept {open} groups of samples open on each \
                         rank, among groups this dataset does not have (identity.open_groups \
                         and identity.groups: its Parquet files' pages or row groups are not \
                         those it was saved with), so resuming would repeat some samples and \
                         leave out others: resume with the files it was saved with, or start \
                         the epoch afresh (set_epoch)"
                    )));
                }
                blocks
            }
        };
        Ok(plan)
    }

    /// What the ranks that saved `states` (all at the same point) had consumed, in the
    /// epoch dealt as `plan` says.
    fn stretch(&self, states: &[Checkpoint], plan: &PlanConfig) -> Result<Stretch> {
        let first = &states[0];
        let (world, batches) = (first.identity.world_size, first.position.batch);
        let left = remaining(
            plan,
            self.catalog.len(),
            first.position.epoch,
            &first.history,
        )?
        .len() as u64;
        let per_rank = match plan.shard {
            Shard::Drop => left / world.max(1),
            _ => left.div_ceil(world.max(1)),
        };
        // A state no rank of that world could have saved is said to be so, rather than
        // read as a rank that skipped samples.
        if let Some(state) = states.iter().find(|s| s.position.sample > per_rank) {
            return Err(Error::Config(format!(
                "the saved state of rank {} has consumed {} samples of epoch {}, and a rank \
                 of a world of {world} has {per_rank} to read of this dataset: give the \
                 state saved with this dataset, unchanged",
                state.rank, state.position.sample, first.position.epoch
            )));
        }
        let since = first.history.last().map_or(0, |s| s.batches);
        let whole = batches
            .saturating_sub(since)
            .saturating_mul(plan.batch_size as u64)
            .min(per_rank);
        let mut counts = vec![None; usize::try_from(world).unwrap_or(0)];
        for state in states {
            let slot = counts.get_mut(state.rank as usize).ok_or_else(|| {
                Error::Config(format!(
                    "a saved state names rank {} of a world of {world}",
                    state.rank
                ))
            })?;
            if slot.replace(state.position.sample).is_some() {
                return Err(Error::Config(format!(
                    "two saved states of rank {}: give each rank's once",
                    state.rank
                )));
            }
        }
        if counts.iter().flatten().all(|&n| n == whole) {
            return Ok(Stretch {
                world,
                batches,
                consumed: None,
            });
        }
        let skipper = states.iter().find(|s| s.position.sample != whole);
        let skipper = skipper.map_or(0, |s| s.rank);
        let counts: Option<Vec<u64>> = counts.into_iter().collect();
        match counts {
            Some(counts) if first.identity.layout == 0 => Ok(Stretch {
                world,
                batches,
                consumed: Some(counts),
            }),
            Some(_) => Err(Error::Config(format!(
                "rank {skipper} skipped samples before the state was saved, and in a \
                 locality-aware epoch which samples that made it consume cannot be \
                 recomputed: resume with the same world size ({world})"
            ))),
            None => Err(Error::Config(format!(
                "rank {skipper} skipped samples before its state was saved, so the other \
                 ranks' positions cannot be inferred from the states given: to resume \
                 with another world size, give every rank's state (all {world})"
            ))),
        }
    }

    /// How the memory budget ([`LoaderConfig::memory`]) was split; the configuration
    /// ([`Loader::config`]) has the prefetch, read-ahead and cache size it chose.
    pub fn memory_plan(&self) -> Option<MemoryPlan> {
        self.memory
    }

    /// The configuration (fitted into the memory budget, if there is one).
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The loader's figures since it was made, over all epochs (what a live exporter
    /// serves; [`Epoch::stats`] has one epoch's).
    pub fn live_stats(&self) -> crate::metrics::LiveStats {
        let config = &self.config;
        self.totals.snapshot(
            (
                config.fetch_threads,
                self.prep_role
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .workers(),
            ),
            self.source.cache().stats(),
            self.source.stats(),
            config.readahead,
        )
    }

    /// The cache's counters since the loader was made.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.source.cache().stats()
    }

    /// Batch buffers allocated so far: bounded by the prefetch depth plus the batches the
    /// consumer holds, whatever the number of epochs.
    pub fn buffers_allocated(&self) -> usize {
        self.pool.allocated()
    }

    /// Batches per epoch on this rank when no sample is skipped.
    pub fn batches_per_epoch(&self) -> usize {
        let plan = &self.config.plan;
        batches_for(
            samples_per_rank(plan, self.catalog.len()),
            plan.batch_size,
            plan.drop_last,
        )
    }

    /// Starts `epoch` from its beginning.
    pub fn epoch(&self, epoch: u64) -> Result<Epoch> {
        self.resume(Position::start_of(epoch))
    }

    /// Starts from a saved position: yields exactly the batches that remained.
    pub fn resume(&self, position: Position) -> Result<Epoch> {
        self.start(
            position,
            BTreeMap::new(),
            Vec::new(),
            self.config.plan.clone(),
        )
    }

    /// Starts the batches `batches` of the run that `run` starts (a state
    /// [`Loader::resolve`] returned), counted from the run's first, made of those
    /// batches' samples alone: preparers elsewhere can make any range of a run by its
    /// numbers (remote prep). Without skips they are the run's batches, byte for byte.
    /// A sample skipped under [`ErrorPolicy::Skip`] is replaced by the next of the range
    /// only, so the range's last batch comes short (never dropped, whatever `drop_last`
    /// says, except at the epoch's end); which batches a failure shortens depends on the
    /// ranges asked for, so a caller keeps them fixed. No next epoch is started after
    /// them.
    ///
    /// # Errors
    ///
    /// As [`Loader::resume_from`], when `run` belongs to another dataset or settings, or
    /// the batches start beyond the run's samples.
    ///
    /// [`ErrorPolicy::Skip`]: super::ErrorPolicy::Skip
    pub fn batches(&self, run: &Checkpoint, batches: Range<u64>) -> Result<Epoch> {
        let (first, count) = (batches.start, batches.end.saturating_sub(batches.start));
        let resumed = self.resolve(std::slice::from_ref(run))?;
        let dealt = self.dealt_as(&resumed.identity)?;
        let batch_size = self.config.plan.batch_size as u64;
        let skip = first.saturating_mul(batch_size);
        let position = Position {
            epoch: resumed.position.epoch,
            batch: resumed.position.batch.saturating_add(first),
            sample: resumed.position.sample.saturating_add(skip),
        };
        let plan = self.plan_from(position, &resumed.history, &dealt)?;
        let until = count
            .saturating_mul(batch_size)
            .saturating_add(position.sample);
        let until = usize::try_from(until).unwrap_or(usize::MAX);
        let run = Running::launch(self.parts(), plan, position, true, Some(until));
        Ok(Epoch::new(
            run,
            BTreeMap::new(),
            resumed.history,
            dealt.blocks,
            false,
        ))
    }

    /// The batches left in the run that `run` starts (a state [`Loader::resolve`]
    /// returned) when none of its samples is skipped: the range [`Loader::batches`]
    /// of it covers.
    ///
    /// # Errors
    ///
    /// As [`Loader::batches`].
    pub fn batches_left(&self, run: &Checkpoint) -> Result<u64> {
        let resumed = self.resolve(std::slice::from_ref(run))?;
        let dealt = self.dealt_as(&resumed.identity)?;
        let plan = self.plan_from(resumed.position, &resumed.history, &dealt)?;
        let left = plan.samples().len() as u64 - resumed.position.sample;
        let batch_size = self.config.plan.batch_size as u64;
        Ok(if self.config.plan.drop_last {
            left / batch_size
        } else {
            left.div_ceil(batch_size)
        })
    }

    /// Finishes `sample`, made by this loader's pipeline stopped at its conversion
    /// ([`Prep::unconverted`](crate::prep::Prep::unconverted)) and converted by its
    /// [`byte_values`](crate::prep::Prep::byte_values) elsewhere: runs what the recipe does
    /// after the conversion, with the draws sample `id` of `epoch` has here, so that it
    /// is the sample this loader makes.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] under repeated augmentation (a repeat's draws are not known from
    /// its id), or what an operator on the delivered sample reports.
    pub fn finish_converted(&self, sample: &mut [u8], epoch: u64, id: SampleId) -> Result<()> {
        if self.config.plan.repeats > 1 {
            return Err(Error::Config(
                "a sample converted elsewhere is finished from its id, which repeated \
                 augmentation's repeats share"
                    .into(),
            ));
        }
        let rng = super::workers::sample_rng(self.config.plan.seed, epoch, id, 0);
        self.config
            .pipeline
            .prep()
            .finish_converted(sample, &rng)
            .map_err(|cause| Error::Config(format!("finishing sample {id}: {cause}")))
    }

    /// A batch prepared by another process from `header` and the bytes `fill` writes
    /// (exactly the batch's: `header.labels.len()` samples of this loader's layout), in a
    /// buffer of this loader's own, counted as delivered after a wait of `wait`: how a
    /// batch prepared elsewhere goes on like one of this loader's.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] naming `from` when the header cannot be this loader's (no
    /// samples, more than a batch, ids and labels that differ in number, mixed labels
    /// where this loader mixes none or of another size), or what `fill` returned.
    pub fn receive(
        &self,
        header: BatchHeader,
        wait: Duration,
        from: &str,
        fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
    ) -> Result<Batch> {
        let refused = |message: String| Error::Storage {
            location: from.to_owned(),
            message,
        };
        let len = header.labels.len();
        let batch_size = self.config.plan.batch_size;
        if len == 0 || len > batch_size || header.ids.len() != len {
            return Err(refused(format!(
                "a batch of {len} labels and {} ids, for batches of {batch_size}",
                header.ids.len()
            )));
        }
        let mixed = header.soft_labels.as_ref().map(Vec::len);
        let classes = self.config.mixup.as_ref().map(|mix| mix.num_classes());
        match (mixed, classes) {
            (None, None) => {}
            (Some(n), Some(classes)) if n == len * classes => {}
            _ => {
                return Err(refused(format!(
                    "mixed labels of {mixed:?} values for {len} samples of {classes:?} classes"
                )))
            }
        }
        let sample_bytes = self.config.pipeline.sample_bytes();
        let mut buffer = self.pool.take();
        let filled = fill(&mut buffer.bytes_mut()[..len * sample_bytes]);
        if let Err(e) = filled {
            self.pool.give(buffer);
            return Err(refused(e.to_string()));
        }
        self.totals.delivered(len, wait);
        Ok(Batch {
            buffer: Some(buffer),
            pool: self.pool.clone(),
            len,
            layout: self.config.pipeline.layout().clone(),
            sample_bytes,
            labels: header.labels,
            soft_labels: header.soft_labels,
            ids: header.ids,
            index: header.index,
            position: header.position,
            wait,
            deferred: Vec::new(),
            retired: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Counts a batch of `samples` samples of `epoch` that this loader's consumer received
    /// from elsewhere after waiting `wait` (a job whose batches the node agent prepares),
    /// so that [`Loader::live_stats`] stays the job's: its waits and samples.
    pub fn count_delivered(&self, epoch: u64, samples: usize, wait: Duration) {
        self.totals.epoch.store(epoch, Ordering::Relaxed);
        self.totals.delivered(samples, wait);
    }

    /// Starts preparing the epoch from `position` ahead of the consumer, as
    /// [`LoaderConfig::overlap_epochs`] starts each next epoch: a training script that
    /// makes its loader, then its model, finds the first batches ready when it asks for
    /// them (its first batch would otherwise also pay for the threads' start and the
    /// first touch of fresh batch buffers). The next [`Loader::resume`] from `position`
    /// adopts the work; one from anywhere else stops it. Nothing is started when
    /// `overlap_epochs` is off.
    ///
    /// # Errors
    ///
    /// As for [`Loader::resume`], when no epoch starts at `position`.
    pub fn prepare(&self, position: Position) -> Result<()> {
        if !self.config.overlap_epochs {
            return Ok(());
        }
        let plan = self.plan_from(position, &[], &self.config.plan)?;
        Running::ahead(self.parts(), plan, position, &self.upcoming);
        Ok(())
    }

    /// Stops the epoch started ahead of the consumer, if any ([`Loader::prepare`], or
    /// the next one an ending epoch began), waiting for its threads: what a consumer
    /// whose threads wait on it (a preparer that calls back into an interpreter) must do
    /// before it lets the loader go.
    pub fn stop_ahead(&self) {
        let ahead = self
            .upcoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(ahead);
    }

    /// Stops every epoch of this loader: the one begun ahead, and any being iterated (it
    /// yields no more batches), waiting a moment for their threads. What a process about
    /// to exit does, so that no loader thread is inside an interpreter's code (the
    /// user's, through a preparer) while the process tears it down.
    pub fn halt(&self) {
        self.stop_ahead();
        halt_runs(&self.runs);
    }

    /// The plan of the epoch of `position` after `history`, dealt as `dealt` says, checked
    /// to hold `position`.
    fn plan_from(
        &self,
        position: Position,
        history: &[Stretch],
        dealt: &PlanConfig,
    ) -> Result<EpochPlan> {
        let plan = self
            .config
            .resumed_plan(dealt, self.catalog.len(), position.epoch, history)?;
        if position.sample as usize > plan.samples().len() {
            return Err(Error::Config(format!(
                "position {position:?} lies beyond the epoch's {} samples on this rank",
                plan.samples().len()
            )));
        }
        Ok(plan)
    }

    /// Starts at `position` of the stretch after `history`, dealt as `dealt` says, with
    /// the epoch's skips before it counted as `skipped`: adopts the epoch started ahead
    /// when it is that one (always dealt as the configuration says), and stops it
    /// otherwise.
    fn start(
        &self,
        position: Position,
        skipped: BTreeMap<&'static str, u64>,
        history: Vec<Stretch>,
        dealt: PlanConfig,
    ) -> Result<Epoch> {
        let ahead = self
            .upcoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(run) = ahead {
            if run.from() == position
                && skipped.is_empty()
                && history.is_empty()
                && dealt.blocks == self.config.plan.blocks
            {
                return Ok(Epoch::new(run, skipped, history, dealt.blocks, true));
            }
        }
        let plan = self.plan_from(position, &history, &dealt)?;
        let run = Running::launch(self.parts(), plan, position, true, None);
        Ok(Epoch::new(run, skipped, history, dealt.blocks, false))
    }

    /// Where the epoch started ahead starts, the samples it has prepared so far, and
    /// whether it has read them all.
    #[cfg(test)]
    pub(super) fn upcoming(&self) -> Option<(Position, u64, bool)> {
        let upcoming = self.upcoming.lock().unwrap_or_else(|e| e.into_inner());
        upcoming
            .as_ref()
            .map(|run| (run.from(), run.prepared(), run.read_all()))
    }

    /// What an epoch of this loader starts from.
    fn parts(&self) -> Parts {
        Parts {
            config: self.config.clone(),
            catalog: self.catalog.clone(),
            source: self.source.clone(),
            pool: self.pool.clone(),
            quarantine: self.quarantine.clone(),
            totals: self.totals.clone(),
            upcoming: Arc::downgrade(&self.upcoming),
            balance: self.balance.clone(),
            prep_role: self.prep_role.clone(),
            carried_reads: self.carried_reads.clone(),
            runs: self.runs.clone(),
        }
    }
}

/// The prep role of a loader run by `config`: as many workers as it may have (a rank's
/// share of its node's when `balance`d), fewer as the consumer's rate allows.
fn prep_role(config: &LoaderConfig, balance: Option<&Balance>) -> Arc<Mutex<PrepRole>> {
    let mut role = PrepRole::new(balance.map_or(config.prep_threads, Balance::ceiling));
    if let Some(balance) = balance {
        role.set_ceiling(balance.threads());
    }
    Arc::new(Mutex::new(role))
}

/// The live metrics endpoint serves a loader's own figures.
#[cfg(feature = "prometheus")]
impl crate::metrics::export::Figures for Loader {
    fn live(&self) -> crate::metrics::LiveStats {
        self.live_stats()
    }
}
