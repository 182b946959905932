//! The seam between a cache and its policy: a [`Keeper`] decides what a cache keeps, one
//! implementation per [`CachePolicy`], the same code whether the loader's cache drives it
//! ([`super::SampleCache`], sizes in bytes) or the simulator does ([`crate::sim::cache`],
//! every sample of size 1).
//!
//! The cache holds the bytes and says what happens (a hit, a miss offered, an epoch
//! begun, a placement given); the keeper holds whatever it needs to decide (sizes, recency,
//! next uses) and answers each miss with an [`Admission`].

use std::fmt::Debug;

use super::frequency::Frequency;
use super::lookahead::Lookahead;
use super::lru::Lru;
use super::CachePolicy;
use crate::sample::SampleId;

/// What a keeper decided about a missed sample.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Keep it, after evicting these samples (possibly none).
    Keep(Vec<SampleId>),
    /// Do not keep it.
    Bypass,
}

/// What a cache keeps. The cache calls it under its lock, so a keeper needs no
/// synchronisation of its own; its decisions are applied to its own state as it makes them.
pub(crate) trait Keeper: Send + Debug {
    /// `id`, which the cache holds, was read.
    fn touch(&mut self, _id: SampleId) {}

    /// `id` (`size` units), which the cache does not hold, was read from below: whether to
    /// keep it, and what to evict for it.
    fn admit(&mut self, id: SampleId, size: u64) -> Admission;

    /// Whether the keeper reads the plan's future ([`Keeper::begin_epoch`]'s `next`).
    fn looks_ahead(&self) -> bool {
        false
    }

    /// `epoch`'s reads begin; `next` is what this rank reads in the one after (in order),
    /// given only to a keeper that [looks ahead](Keeper::looks_ahead).
    fn begin_epoch(&mut self, _epoch: u64, _next: &[SampleId]) {}

    /// The samples to keep from now on, most wanted first (a placement computed from the
    /// plan: [`CachePolicy::Frequency`]'s); others ignore it.
    fn place(&mut self, _ids: &[SampleId]) {}
}

impl CachePolicy {
    /// The policy's keeper for a cache of `capacity` units.
    pub(crate) fn keeper(self, capacity: u64) -> Box<dyn Keeper> {
        match self {
            CachePolicy::None => Box::new(Nothing),
            CachePolicy::Minio => Box::new(Minio { capacity, used: 0 }),
            CachePolicy::Lru => Box::new(Lru::new(capacity)),
            CachePolicy::Lookahead => Box::new(Lookahead::new(capacity)),
            CachePolicy::Frequency => Box::new(Frequency::new(capacity)),
        }
    }
}

/// [`CachePolicy::None`]: keeps nothing.
#[derive(Debug)]
struct Nothing;

impl Keeper for Nothing {
    fn admit(&mut self, _id: SampleId, _size: u64) -> Admission {
        Admission::Bypass
    }
}

/// [`CachePolicy::Minio`] (CoorDL): keeps every sample offered until full, never evicts.
#[derive(Debug)]
struct Minio {
    capacity: u64,
    used: u64,
}

impl Keeper for Minio {
    fn admit(&mut self, _id: SampleId, size: u64) -> Admission {
        if size > self.capacity - self.used {
            return Admission::Bypass;
        }
        self.used += size;
        Admission::Keep(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minio_fills_and_never_evicts() {
        let mut minio = CachePolicy::Minio.keeper(3);
        assert_eq!(minio.admit(1, 2), Admission::Keep(vec![]));
        assert_eq!(minio.admit(2, 2), Admission::Bypass, "does not fit");
        assert_eq!(minio.admit(3, 1), Admission::Keep(vec![]));
        assert_eq!(minio.admit(4, 1), Admission::Bypass, "full");
        assert_eq!(CachePolicy::None.keeper(9).admit(1, 1), Admission::Bypass);
    }
}
