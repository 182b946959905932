//! DS-Analyzer: why training stalls on data, and what would remove the stall.
//!
//! The analysis measures three rates by difference (the model's ingestion rate, prep
//! with data in memory, fetch from the actual storage) and feeds them to a [`model`] that
//! predicts throughput and the split of epoch time for any cache size, thread count,
//! storage bandwidth or node count. So far this module holds the rate model; the
//! measurements and reports build on it.

pub mod model;

pub use model::{Bottleneck, Prediction, Rates, Setup};
