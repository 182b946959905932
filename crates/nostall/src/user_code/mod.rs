//! The user's own code: the seam a function of the caller's plugs into between a
//! pipeline's operators ([`function`]), and the pool of worker processes that runs code
//! the loader cannot run well in its own threads ([`pool`]: a Python `Dataset`'s
//! `__getitem__` under the GIL). Neither knows the pipeline: `prep` calls them
//! (`prep::processes` is the [`crate::prep::Prep`] over a pool).

pub mod function;
pub mod pool;
