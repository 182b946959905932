//! The loader: one dataset, its cache and its batch buffers, making an [`Epoch`] at a
//! time.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::cache::Cached;
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::plan::{batches_for, samples_per_rank, EpochPlan, Position};
use crate::storage::Source;

use super::buffer::Pool;
use super::quarantine::Quarantine;
use super::{Checkpoint, Epoch, LoaderConfig, RunIdentity};

/// An image loader over one dataset: makes an iterator of batches per epoch.
pub struct Loader {
    pub(super) catalog: Arc<Catalog>,
    pub(super) source: Arc<Cached>,
    pub(super) config: LoaderConfig,
    pub(super) pool: Arc<Pool>,
    /// Computed when first asked for: a pass over the catalog.
    identity: OnceLock<RunIdentity>,
    pub(super) quarantine: Option<Arc<Quarantine>>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("samples", &self.catalog.len())
            .field("config", &self.config)
            .finish()
    }
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
        let buffer_bytes = config.plan.batch_size * config.pipeline.sample_bytes();
        let capacity = config.cache.capacity.bytes(catalog.total_bytes());
        let quarantine = config
            .quarantine
            .as_deref()
            .map(|path| Quarantine::open(path).map(Arc::new))
            .transpose()?;
        Ok(Loader {
            quarantine,
            source: Arc::new(Cached::new(source, config.cache.policy, capacity)),
            catalog,
            config,
            pool: Pool::new(buffer_bytes),
            identity: OnceLock::new(),
        })
    }

    /// What a position of this loader is valid for (part of a [`Checkpoint`]).
    pub fn identity(&self) -> RunIdentity {
        *self
            .identity
            .get_or_init(|| RunIdentity::of(&self.catalog, &self.config))
    }

    /// Where `epoch` stands, for what, and what it skipped so far: save it to resume
    /// exactly there with [`Loader::resume_saved`].
    pub fn checkpoint(&self, epoch: &Epoch) -> Checkpoint {
        Checkpoint {
            position: epoch.position(),
            identity: self.identity(),
            skipped: epoch.stats().skipped,
        }
    }

    /// Resumes a [`Checkpoint`], after checking that it belongs to this dataset and these
    /// settings; the epoch's skip counts go on from the saved ones.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming what differs, or as for [`Loader::resume`].
    pub fn resume_saved(&self, checkpoint: &Checkpoint) -> Result<Epoch> {
        self.identity().check(&checkpoint.identity)?;
        self.start(checkpoint.position, checkpoint.skipped.clone())
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
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
        self.start(position, BTreeMap::new())
    }

    /// Starts at `position`, with the epoch's skips before it counted as `skipped`.
    fn start(&self, position: Position, skipped: BTreeMap<&'static str, u64>) -> Result<Epoch> {
        let len = self.catalog.len();
        let plan = match &self.config.locality {
            None => EpochPlan::new(&self.config.plan, len, position.epoch)?,
            Some(l) => EpochPlan::locality_aware(
                &self.config.plan,
                &l.placement,
                l.ranks_per_node,
                len,
                position.epoch,
            )?,
        };
        if position.sample as usize > plan.samples().len() {
            return Err(Error::Config(format!(
                "position {position:?} lies beyond the epoch's {} samples on this rank",
                plan.samples().len()
            )));
        }
        Ok(Epoch::start(self, plan, position, skipped))
    }
}
