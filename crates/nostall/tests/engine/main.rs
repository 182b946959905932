//! The engine's integration tests, as one test binary: the loader end to end over
//! images (`pipeline`), its cache and read-ahead (`caching`), audio clips (`audio`),
//! segments of long recordings (`segments`), videos (`video`), Parquet files
//! (`parquet`) and an S3-compatible server (`s3`); and the floors of the engine's
//! modules (`floors`). The hostile-input tests are the `hostile` binary.
//!
//! One binary rather than one a file, for the build: one link instead of eight, and the
//! engine's generic code (the loader over each source and pipeline) instantiated and
//! optimised once instead of once a binary. A module that needs a feature of the engine
//! is compiled only with it.
//!
//! The tests share one process: a test that needs the process to itself (the S3
//! settings read from the environment) runs this binary again for that one test, by
//! its module-qualified name.

#[path = "../common/mod.rs"]
mod common;

mod audio;
mod caching;
mod floors;
#[cfg(feature = "parquet")]
mod parquet;
mod pipeline;
#[cfg(feature = "s3")]
mod s3;
#[cfg(feature = "manifest")]
mod segments;
#[cfg(feature = "video")]
mod video;
