//! nostall: a data-loading runtime for deep-learning training.
//!
//! (crate documentation is written once the modules settle)

pub mod catalog;
pub mod codec;
pub mod error;
pub mod metrics;
pub mod ops;
pub mod pipeline;
pub mod plan;
pub mod rng;
pub mod storage;

pub use catalog::{Catalog, SampleId};
pub use error::{Cause, Error, Result, SampleError};
pub use metrics::EpochStats;
pub use ops::{DType, Layout, Op, Pipeline};
pub use pipeline::{Batch, Epoch, ErrorPolicy, Loader, LoaderConfig};
pub use plan::{PlanConfig, Position, Shard};
