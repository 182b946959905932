//! What a saved position is valid for, and what it carries.
//!
//! A position counts batches and samples of one rank's stream, and that stream follows
//! from the dataset, the seed, the batch size, the world size and the shard policy; the
//! bytes of each sample follow from the pipeline too. Resuming a position with any of
//! them changed would silently deliver some samples twice and others never, so a
//! [`Checkpoint`] carries a [`RunIdentity`] and resuming checks it, naming what differs.
//! It also carries the epoch's skip counts, so that they stay exact across the
//! interruption.
//!
//! The world size is the one setting that may change: the rest of an interrupted epoch is
//! then re-sharded over the new ranks ([`crate::plan::elastic`]), and the checkpoint
//! carries the epoch's earlier stretches so that it can be interrupted again.
//!
//! The memory settings (`memory`, `group_memory`) may change too, though they shape the
//! order of a dataset read in groups (how many groups each rank keeps open,
//! [`crate::plan::Blocks`]): the identity records the groups the epoch's order was dealt
//! in, and the epoch resumes in that order whatever the settings say now (the next
//! epochs follow them); a resume that ignored it delivered some samples twice and others
//! never.

use std::collections::BTreeMap;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::plan::elastic::Stretch;
use crate::plan::{Blocks, Position, Shard};
use crate::rng::{derive, digest_text};

use super::LoaderConfig;

/// Everything needed to resume an epoch exactly where it stood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Where: the next batch to deliver.
    pub position: Position,
    /// For what: the dataset and settings the position belongs to.
    pub identity: RunIdentity,
    /// The samples of this epoch skipped before the position, by cause kind
    /// ([`crate::Cause::kind`]).
    pub skipped: BTreeMap<&'static str, u64>,
    /// The rank that saved it.
    pub rank: u64,
    /// The epoch's stretches under other world sizes before this one (empty unless the
    /// epoch was resumed with another number of ranks).
    pub history: Vec<Stretch>,
}

/// The most ranks a saved state may name: far beyond any job, and what keeps a crafted
/// state from asking for memory in proportion to its world size.
pub(crate) const MAX_WORLD: u64 = 1 << 24;
/// The most epochs a saved position may name.
pub(crate) const MAX_EPOCH: u64 = 1 << 40;
/// The most stretches under other world sizes one epoch's state may carry.
pub(crate) const MAX_STRETCHES: usize = 1 << 12;

impl Checkpoint {
    /// Checks that every field is one a loader over `dataset_len` samples could have
    /// saved: a saved state comes from a file, and is data, not a trusted structure. The
    /// error names the field and what it may be.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first field out of its bounds.
    pub fn validate(&self, dataset_len: u64) -> Result<()> {
        let bad = |field: &str, value: u64, may: &str| {
            Err(Error::Config(format!(
                "the saved state's {field} is {value}, and {may}: give the state \
                 state_dict() returned, unchanged"
            )))
        };
        let world = self.identity.world_size;
        if !(1..=MAX_WORLD).contains(&world) {
            return bad(
                "identity.world_size",
                world,
                &format!("a job has 1 to {MAX_WORLD} ranks"),
            );
        }
        if self.rank >= world {
            return bad(
                "rank",
                self.rank,
                &format!("a world of {world} has ranks 0 to {}", world - 1),
            );
        }
        if self.identity.batch_size == 0 {
            return bad(
                "identity.batch_size",
                0,
                "a batch holds at least one sample",
            );
        }
        let position = self.position;
        if position.epoch > MAX_EPOCH {
            return bad(
                "epoch",
                position.epoch,
                &format!("epochs go to {MAX_EPOCH}"),
            );
        }
        if position.sample > dataset_len {
            return bad(
                "sample",
                position.sample,
                &format!("the dataset has {dataset_len} samples"),
            );
        }
        if position.batch > dataset_len {
            return bad(
                "batch",
                position.batch,
                &format!("the dataset has {dataset_len} samples"),
            );
        }
        for (&kind, &count) in &self.skipped {
            if count > dataset_len {
                return bad(
                    &format!("skipped[{kind:?}]"),
                    count,
                    &format!("the dataset has {dataset_len} samples"),
                );
            }
        }
        if self.history.len() > MAX_STRETCHES {
            return bad(
                "history's length",
                self.history.len() as u64,
                &format!("an epoch has at most {MAX_STRETCHES} stretches"),
            );
        }
        for (i, stretch) in self.history.iter().enumerate() {
            if !(1..=MAX_WORLD).contains(&stretch.world) {
                return bad(
                    &format!("history[{i}].world"),
                    stretch.world,
                    &format!("a job has 1 to {MAX_WORLD} ranks"),
                );
            }
            if stretch.batches > dataset_len {
                return bad(
                    &format!("history[{i}].batches"),
                    stretch.batches,
                    &format!("the dataset has {dataset_len} samples"),
                );
            }
            if let Some(consumed) = &stretch.consumed {
                if consumed.len() as u64 != stretch.world {
                    return bad(
                        &format!("history[{i}].consumed's length"),
                        consumed.len() as u64,
                        &format!("it has one count per rank ({})", stretch.world),
                    );
                }
                if let Some(&n) = consumed.iter().find(|&&n| n > dataset_len) {
                    return bad(
                        &format!("history[{i}].consumed"),
                        n,
                        &format!("the dataset has {dataset_len} samples"),
                    );
                }
            }
        }
        Ok(())
    }
}

/// The settings a position belongs to, in a form that can be saved with it (integers).
///
/// The rank is not part of it: under torchrun every rank may load the state rank 0 saved
/// (positions of ranks differ only after skips, which the state of each rank records).
/// Neither are the world size and the layout, for [`RunIdentity::check_elastic`], nor the
/// groups the epoch's order was dealt in, which resuming adopts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunIdentity {
    /// A digest of the catalog: every sample's path, size and label, and the class names.
    pub dataset: u64,
    /// A digest of the pipeline: operators, element type and layout.
    pub pipeline: u64,
    /// The shuffle seed.
    pub seed: u64,
    /// Samples per batch on a rank.
    pub batch_size: u64,
    /// Ranks in the job.
    pub world_size: u64,
    /// A digest of the rest of the plan: shuffling, drop-last and shard policy.
    pub plan: u64,
    /// How samples are dealt to ranks: 0 for the plain plan, else a digest of the
    /// locality-aware plan's nodes and ranks per node.
    pub layout: u64,
    /// Groups of samples each rank kept open in the epoch's order
    /// ([`Blocks::open`]): 0 for a plain permutation; [`RunIdentity::UNRECORDED`] in a
    /// state saved before it was recorded. It follows from the memory settings, which may
    /// change on resume: the epoch goes on in the order it was dealt.
    pub open_groups: u64,
    /// A digest of the lengths of those groups (0 for a plain permutation): the epoch
    /// resumes only over the same groups.
    pub groups: u64,
}

impl RunIdentity {
    /// What [`RunIdentity::open_groups`] reads as in a state saved before it was recorded:
    /// the groups of its order are unknown.
    pub const UNRECORDED: u64 = u64::MAX;

    /// The identity of a loader over `catalog` configured by `config`.
    pub(crate) fn of(catalog: &Catalog, config: &LoaderConfig) -> RunIdentity {
        let plan = &config.plan;
        let layout = config.locality.as_ref().map_or(0, |l| {
            derive(&[1, l.placement.nodes() as u64, l.ranks_per_node as u64])
        });
        RunIdentity {
            dataset: catalog_digest(catalog),
            pipeline: digest_text(&config.pipeline.prep().fingerprint()),
            seed: plan.seed,
            batch_size: plan.batch_size as u64,
            world_size: plan.world as u64,
            plan: derive(&[
                u64::from(plan.shuffle),
                u64::from(plan.drop_last),
                match plan.shard {
                    Shard::Pad => 0,
                    Shard::Drop => 1,
                },
                // Where the layout once was: states saved before it had a field of its
                // own keep their digest.
                0,
            ]),
            layout,
            open_groups: 0,
            groups: 0,
        }
        .dealt_in(plan.blocks.as_ref())
        .mixed(plan.mixture.as_ref())
    }

    /// This identity for a mixture of datasets (`None`: one dataset, the digest as it was).
    fn mixed(self, mixture: Option<&crate::plan::mixture::Mixture>) -> RunIdentity {
        match mixture {
            None => self,
            Some(m) => RunIdentity {
                plan: derive(&[self.plan, 0x4d49_5845, m.digest()]),
                ..self
            },
        }
    }

    /// This identity for an epoch dealt in `blocks` (`None`: a plain permutation).
    pub(crate) fn dealt_in(self, blocks: Option<&Blocks>) -> RunIdentity {
        let (open_groups, groups) = blocks.map_or((0, 0), |b| {
            let lengths = b.lengths.iter();
            let digest = lengths.fold(b.lengths.len() as u64, |h, &l| derive(&[h, l.into()]));
            (b.open as u64, digest)
        });
        RunIdentity {
            open_groups,
            groups,
            ..self
        }
    }

    /// The fields' names in the saved form, in the order of [`RunIdentity::fields`].
    pub const FIELDS: [&'static str; 9] = [
        "dataset",
        "pipeline",
        "seed",
        "batch_size",
        "world_size",
        "plan",
        "layout",
        "open_groups",
        "groups",
    ];

    /// Each field with its name: the saved form.
    pub fn fields(&self) -> [(&'static str, u64); 9] {
        let values = [
            self.dataset,
            self.pipeline,
            self.seed,
            self.batch_size,
            self.world_size,
            self.plan,
            self.layout,
            self.open_groups,
            self.groups,
        ];
        std::array::from_fn(|i| (Self::FIELDS[i], values[i]))
    }

    /// Reads the saved form back; `get` returns a field by name (`None` if absent). A
    /// missing `layout` reads as the plain plan's, a missing `open_groups` as
    /// [`RunIdentity::UNRECORDED`] (states saved before they existed: such a state
    /// resumes an epoch read in groups nowhere, see [`crate::Loader::resolve`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first missing field.
    pub fn from_fields(mut get: impl FnMut(&str) -> Option<u64>) -> Result<RunIdentity> {
        let mut field = |name: &str| {
            get(name).ok_or_else(|| {
                Error::Config(format!(
                    "the saved state's identity lacks {name:?}: give the state that was saved"
                ))
            })
        };
        Ok(RunIdentity {
            dataset: field("dataset")?,
            pipeline: field("pipeline")?,
            seed: field("seed")?,
            batch_size: field("batch_size")?,
            world_size: field("world_size")?,
            plan: field("plan")?,
            layout: get("layout").unwrap_or(0),
            open_groups: get("open_groups").unwrap_or(Self::UNRECORDED),
            groups: get("groups").unwrap_or(0),
        })
    }

    /// Checks that a position saved under `saved` may be resumed here, with the same
    /// ranks (in the groups `saved` records: [`RunIdentity::open_groups`] is not
    /// compared).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming every field that differs.
    pub fn check(&self, saved: &RunIdentity) -> Result<()> {
        self.compare(saved, &[])
    }

    /// Checks that the rest of an epoch saved under `saved` may be re-sharded over this
    /// run's ranks: everything but the world size and the layout must match.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming every field that differs.
    pub fn check_elastic(&self, saved: &RunIdentity) -> Result<()> {
        self.compare(saved, &["world_size", "layout"])
    }

    fn compare(&self, saved: &RunIdentity, free: &[&str]) -> Result<()> {
        // The groups of the order are the epoch's, adopted on resume.
        let adopted = ["open_groups", "groups"];
        let differ: Vec<String> = self
            .fields()
            .iter()
            .zip(saved.fields())
            .filter(|(now, then)| {
                now.1 != then.1 && !free.contains(&now.0) && !adopted.contains(&now.0)
            })
            .map(|((name, now), (_, then))| match *name {
                "dataset" | "pipeline" => format!("the {name} changed"),
                "plan" => "the plan's shuffle, drop_last or shard changed".to_owned(),
                "layout" => "the locality-aware layout changed".to_owned(),
                _ => format!("{name} was {then}, is {now}"),
            })
            .collect();
        if differ.is_empty() {
            return Ok(());
        }
        Err(Error::Config(format!(
            "the saved state belongs to another run ({}): resuming it here would repeat some \
             samples and leave out others; resume with the dataset and settings it was saved \
             with, or start an epoch afresh with set_epoch",
            differ.join("; ")
        )))
    }
}

fn catalog_digest(catalog: &Catalog) -> u64 {
    let classes = catalog
        .classes()
        .iter()
        .fold(catalog.len() as u64, |h, class| {
            derive(&[h, digest_text(class)])
        });
    (0..catalog.len() as u64).fold(classes, |h, id| {
        derive(&[
            h,
            digest_text(catalog.relative_path(id)),
            catalog.size(id),
            catalog.label(id).map_or(u64::MAX, u64::from),
        ])
    })
}

#[cfg(test)]
mod tests;
