//! Samples made by the user's code in worker processes ([`crate::user_code::pool`]): the
//! [`Prep`] over a [`WorkerPool`], so that the loader treats them as any other sample.

use std::sync::Arc;

use super::{Prep, Prepared, Preparer};
use crate::error::{Cause, Result};
use crate::rng::Rng;
use crate::sample::{Modality, SampleLayout};
use crate::user_code::pool::WorkerPool;

/// A [`Prep`] whose samples a [`WorkerPool`] makes: a sample's bytes from its source are
/// its index (`u64`, little-endian: [`crate::storage::Indexed`]), its seed the first draw
/// of its generator.
#[derive(Debug, Clone)]
pub struct WorkerPrep {
    pool: Arc<WorkerPool>,
    fingerprint: String,
}

impl WorkerPrep {
    /// Samples of `pool`; `fingerprint` says what changes them (the user's code and its
    /// arguments, as the caller knows them).
    pub fn new(pool: Arc<WorkerPool>, fingerprint: String) -> WorkerPrep {
        WorkerPrep { pool, fingerprint }
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<WorkerPool> {
        &self.pool
    }
}

impl std::fmt::Display for WorkerPrep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} in {} worker processes",
            self.pool.config().code,
            self.pool.config().workers
        )
    }
}

impl Prep for WorkerPrep {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(vec![self.pool.sample_bytes()], crate::sample::DType::U8)
    }

    fn fingerprint(&self) -> String {
        format!("workers {}", self.fingerprint)
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(self.clone()))
    }
}

impl Preparer for WorkerPrep {
    fn prepare(
        &mut self,
        data: &[u8],
        rng: &mut Rng,
        out: &mut [u8],
    ) -> std::result::Result<Prepared, Cause> {
        let index = index_of(data)?;
        self.pool.make(index, rng.next_u64(), out)?;
        Ok(Prepared::InSlot)
    }
}

/// The index a sample's bytes hold ([`crate::storage::Indexed`]).
///
/// # Errors
///
/// [`Cause::Internal`] when they are not 8 bytes.
pub fn index_of(data: &[u8]) -> std::result::Result<u64, Cause> {
    data.try_into()
        .map(u64::from_le_bytes)
        .map_err(|_| Cause::Internal(format!("a sample's index of {} bytes, not 8", data.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_its_index() {
        assert!(index_of(&[1, 2, 3]).is_err());
        assert_eq!(index_of(&7u64.to_le_bytes()).unwrap(), 7);
    }
}
