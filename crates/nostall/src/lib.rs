//! nostall: a data-loading runtime for deep-learning training, built so that the GPU
//! never waits for data.
//!
//! A training step waits on two things besides the GPU: *fetch* (reading a sample's bytes)
//! and *prep* (decoding and augmenting it). nostall's engine keeps both off the critical
//! path and measures what is left.
//!
//! # Design
//!
//! One epoch flows through the modules in this order:
//!
//! - [`sample`]: what every module names a sample by: its [`SampleId`], its
//!   [`Modality`] and its [`SampleLayout`] (depending on nothing else of the engine).
//! - [`catalog`]: every sample once (path, label, size), scanned from class folders or a
//!   flat directory and saved as an index that reloads in milliseconds.
//! - [`plan`]: a pure function of (seed, epoch, rank, world size) giving each rank its
//!   samples in order, in equal numbers; a [`Position`] resumes an epoch exactly; the
//!   placement of samples on nodes for a partitioned cache, and locality-aware batches.
//! - [`dataset`]: a location (a directory, a directory of tar shards, `s3://…`) opened as
//!   a catalog and a source.
//! - [`storage`]: where bytes come from, behind the [`storage::Source`] trait: files, tar
//!   shards, object storage, and a throttle that emulates slow storage.
//! - [`cache`]: encoded samples kept in memory across epochs: MinIO (keep the first,
//!   never evict: it never thrashes), the plan-aware `lookahead` (Belady over the next
//!   epoch) and `frequency` (NoPFS: what this rank reads most often, read ahead), and LRU
//!   for comparison.
//! - [`prep`]: what a sample becomes, one [`Modality`] behind the [`prep::Prep`] seam:
//!   [`prep::image`] (JPEG and PNG decoded only where a crop keeps them, one resize and
//!   one fused output pass) and [`prep::audio`] (WAV, FLAC, Ogg Vorbis, Ogg Opus and MP3;
//!   mixing, resampling, crops, mel spectrograms).
//! - [`loader`]: the loader's settings, declared once, and one pool of workers that
//!   fetch or prepare as the scheduler says, writing samples straight into pooled batch
//!   buffers; the [`Loader`] hands out [`Batch`]es in plan order through an [`Epoch`].
//! - [`sched`]: the rate model (throughput as the slowest of fetch, prep and the model),
//!   below the loader so that the scheduler and the analyzer (the `nostall-analyze`
//!   crate: DS-Analyzer) share it; each decision of the workers (reads in flight and
//!   the read-ahead, roles, the node's share of its ranks' threads) with its mechanism. (Which images a device decodes instead of a worker is the
//!   preparer's [`prep::route`], below the scheduler.)
//! - [`user_code`]: the user's own code: the seam of a function between a pipeline's
//!   operators, and the pool of worker processes that runs a Python `Dataset`.
//! - [`device`]: what a consumer on a GPU needs of the engine, loaded at run time: batch
//!   buffers page-locked through the CUDA runtime.
//! - [`sim`]: offline simulators of cache policies, of partitioned caches across
//!   nodes, and of trainers fed by remote CPU hosts.
//! - [`metrics`]: the consumer's wait for each batch (the data stall) and per-stage rates.
//! - [`net`]: what the services do when `accept` fails (back off, never exit or spin).
//!
//! Three rules hold everywhere. *Deterministic*: each sample's randomness comes from
//! (seed, epoch, sample id), so output bytes do not depend on thread count or timing.
//! *Exactly once*: every sample of the rank's plan is delivered once per epoch or reported
//! skipped with its cause. *Bounded*: every queue and buffer pool has a fixed size, so
//! memory does not grow with the dataset or the number of epochs.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use nostall::catalog::Catalog;
//! use nostall::storage::{LocalFiles, ReadMode};
//! use nostall::{Loader, LoaderConfig, Modality, Pipeline};
//!
//! # fn main() -> nostall::Result<()> {
//! let (catalog, _) = Catalog::open("/data/imagenet/train".as_ref(), None, Modality::Image)?;
//! let catalog = Arc::new(catalog);
//! let source = Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
//! let loader = Loader::new(catalog, source, LoaderConfig::new(Pipeline::imagenet_train(224)))?;
//! for batch in loader.epoch(0)? {
//!     let batch = batch?;
//!     let (pixels, labels) = (batch.as_f32().unwrap(), batch.labels());
//!     # let _ = (pixels, labels);
//! }
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod cache;
pub mod catalog;
pub mod clock;
pub mod dataset;
pub mod device;
pub mod env;
pub mod error;
pub mod fields;
pub mod loader;
pub mod metrics;
pub mod net;
pub mod plan;
pub mod prep;
pub mod rng;
pub mod sample;
pub mod sched;
pub mod sim;
pub mod storage;
pub mod user_code;

pub use catalog::Catalog;
pub use error::{Cause, Error, Result, SampleError};
pub use loader::{Batch, Checkpoint, Epoch, ErrorPolicy, Loader, LoaderConfig, RunIdentity};
pub use metrics::EpochStats;
pub use plan::{PlanConfig, Position, Shard};
pub use prep::image::{Layout, Op};
pub use prep::Pipeline;
pub use sample::SampleId;
pub use sample::{DType, Modality, SampleLayout};
