//! nostall: a data-loading runtime for deep-learning training.
//!
//! (crate documentation is written once the modules settle)

pub mod catalog;
pub mod codec;
pub mod error;
pub mod ops;
pub mod plan;
pub mod rng;
pub mod storage;

pub use error::{Cause, Error, Result, SampleError};
