//! The engine's hostile-input tests, as one test binary: damaged, crafted and lying
//! images, tar shards and settings (`images`), dozens of kinds of hostile files among
//! real photographs (`corpus`), crafted Parquet files (`parquet`), cut and lying
//! recordings and manifest lines (`recordings`), hostile captions, metadata and vectors
//! in WebDataset records (`records`) and hostile `.npz` members (`npz`). Never a panic,
//! a hang, an abort or a silently short batch; memory bounded by what the good samples
//! take.
//!
//! One binary rather than one a file, for the build: one link instead of six, and the
//! engine's generic code (the loader over each source and pipeline) instantiated and
//! optimised once instead of once a binary. `make test` runs it a second time with
//! release settings and without the default features (`--no-default-features --features
//! prometheus,parquet,manifest --test hostile`): a module that needs a feature is
//! compiled only with it.
//!
//! The tests share one process. A peak-memory check measures a run in a process of its
//! own (`common::run_alone`, which starts this binary again for that one test, by its
//! module-qualified name), never this shared process.

#[path = "../common/mod.rs"]
mod common;

mod corpus;
mod images;
mod npz;
#[cfg(feature = "parquet")]
mod parquet;
#[cfg(feature = "manifest")]
mod recordings;
mod records;
