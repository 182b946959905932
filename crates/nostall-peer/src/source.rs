//! The loader's source under a partitioned cache: the fastest holder of each sample.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nostall::plan::placement::Placement;
use nostall::storage::{Source, SourceStats, Tier};
use nostall::{Cause, SampleId};

use crate::client::{Failure, Peer};
use crate::node_cache::NodeCache;

/// Reads each sample from the fastest place that has it (NoPFS's rule): this node's cache,
/// else the peer that holds it, else storage.
///
/// - A sample this node holds comes from its [`NodeCache`] (filled from storage the first
///   time). A rank in a process without the node cache (torchrun's other local ranks)
///   asks its own node's service instead, like a peer.
/// - A sample a peer holds is fetched from that peer, which reads it from storage on its
///   first access and keeps it (read-through), so storage reads each cached sample once
///   in the whole job.
/// - A sample nobody holds, or held by a peer that is down or refuses, is read from
///   storage: a failing peer never loses or doubles a sample, it only moves load to
///   storage.
///
/// The fetch stage's read-ahead runs along the known plan, so these reads happen ahead of
/// prep (clairvoyant prefetch), with as many in flight as the loader has fetch threads.
pub struct PartitionedSource {
    node: usize,
    placement: Arc<Placement>,
    storage: Arc<dyn Source>,
    local: Option<Arc<NodeCache>>,
    /// Every node's peer handle, by index (this node's own is used only without `local`).
    peers: Vec<Arc<Peer>>,
    /// What a peer's answer must measure.
    answers: AnswerSizes,
    local_samples: AtomicU64,
    local_bytes: AtomicU64,
    fallbacks: AtomicU64,
    mismatches: AtomicU64,
}

impl std::fmt::Debug for PartitionedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedSource")
            .field("node", &self.node)
            .field("nodes", &self.peers.len())
            .finish()
    }
}

/// Where a [`PartitionedSource`]'s bytes came from, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceBreakdown {
    /// Samples and bytes read from this node's own cache (including its first fills).
    pub local_samples: u64,
    /// See `local_samples`.
    pub local_bytes: u64,
    /// Samples and bytes received from peers.
    pub peer_samples: u64,
    /// See `peer_samples`.
    pub peer_bytes: u64,
    /// Bytes read from storage by this process (by the loader, and by the node cache to
    /// fill itself, also for peers).
    pub storage_bytes: u64,
    /// Samples a peer should have served but storage did (peer down or refusing).
    pub fallbacks: u64,
    /// Times a peer was marked down.
    pub peer_downs: u64,
    /// Answers from peers whose size differed from the catalog's, or exceeded the largest
    /// sample's where the catalog's sizes are estimates (the peer was marked down
    /// and storage read the sample): a damaged or forged answer, or another dataset.
    pub peer_mismatches: u64,
}

/// The size a peer's answer for each sample must have: the catalog's, where it is exact;
/// at most the job's largest sample, where the catalog holds estimates (a Parquet
/// sample's size is known only once its page is decoded).
#[derive(Debug)]
pub(crate) enum AnswerSizes {
    /// Each sample's size, by id.
    Exact(Vec<u64>),
    /// The most bytes a sample may have.
    AtMost(u64),
}

impl AnswerSizes {
    /// The answers' sizes for `catalog`, whose samples measure `sizes` and may have at
    /// most `max_sample_bytes`.
    pub(crate) fn of(
        catalog: &nostall::Catalog,
        sizes: Vec<u64>,
        max_sample_bytes: u64,
    ) -> AnswerSizes {
        if catalog.sizes_are_exact() {
            AnswerSizes::Exact(sizes)
        } else {
            AnswerSizes::AtMost(max_sample_bytes)
        }
    }

    fn admits(&self, id: SampleId, len: usize) -> bool {
        match self {
            AnswerSizes::Exact(sizes) => sizes.get(id as usize) == Some(&(len as u64)),
            AnswerSizes::AtMost(most) => len as u64 <= *most,
        }
    }

    fn describe(&self, id: SampleId) -> String {
        match self {
            AnswerSizes::Exact(sizes) => sizes.get(id as usize).copied().unwrap_or(0).to_string(),
            AnswerSizes::AtMost(most) => format!("at most {most}"),
        }
    }
}

impl PartitionedSource {
    pub(crate) fn new(
        node: usize,
        placement: Arc<Placement>,
        storage: Arc<dyn Source>,
        local: Option<Arc<NodeCache>>,
        peers: Vec<Arc<Peer>>,
        answers: AnswerSizes,
    ) -> PartitionedSource {
        PartitionedSource {
            node,
            placement,
            storage,
            local,
            peers,
            answers,
            local_samples: AtomicU64::new(0),
            local_bytes: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
        }
    }

    /// Where the bytes came from so far.
    pub fn breakdown(&self) -> SourceBreakdown {
        let sum = |f: fn(&Peer) -> &AtomicU64| {
            self.peers
                .iter()
                .map(|p| f(p).load(Ordering::Relaxed))
                .sum()
        };
        SourceBreakdown {
            local_samples: self.local_samples.load(Ordering::Relaxed),
            local_bytes: self.local_bytes.load(Ordering::Relaxed),
            peer_samples: sum(|p| &p.fetched_samples),
            peer_bytes: sum(|p| &p.fetched_bytes),
            storage_bytes: self.storage.stats().bytes,
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
            peer_downs: sum(|p| &p.downs),
            peer_mismatches: self.mismatches.load(Ordering::Relaxed),
        }
    }
}

impl Source for PartitionedSource {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        match (self.placement.holder(id), &self.local) {
            (Some(holder), Some(local)) if holder == self.node => {
                local.read(id, out)?;
                self.local_samples.fetch_add(1, Ordering::Relaxed);
                self.local_bytes
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            (Some(holder), _) => match self.peers[holder].fetch(id, out) {
                Ok(()) if self.answers.admits(id, out.len()) => Ok(()),
                Ok(()) => {
                    // Never trust bytes from the network further than they can be checked.
                    let reason = format!(
                        "it answered sample {id} with {} bytes, the catalog has {}",
                        out.len(),
                        self.answers.describe(id)
                    );
                    self.peers[holder].mark_down(&reason);
                    self.mismatches.fetch_add(1, Ordering::Relaxed);
                    self.fallbacks.fetch_add(1, Ordering::Relaxed);
                    self.storage.read(id, out)
                }
                Err(failure) => {
                    if let Failure::Refused(status, reason) = failure {
                        eprintln!(
                            "nostall-peer: node {}: node {holder} refused sample {id} \
                             ({status:?}: {reason}); reading it from storage",
                            self.node
                        );
                    }
                    self.fallbacks.fetch_add(1, Ordering::Relaxed);
                    self.storage.read(id, out)
                }
            },
            (None, _) => self.storage.read(id, out),
        }
    }

    fn tier(&self, id: SampleId) -> Tier {
        match (self.placement.holder(id), &self.local) {
            (Some(holder), Some(local)) if holder == self.node => local.tier(id),
            (Some(holder), _) if !self.peers[holder].is_down() => Tier::Peer,
            _ => self.storage.tier(id),
        }
    }

    fn location(&self, id: SampleId) -> String {
        self.storage.location(id)
    }

    fn shard(&self, id: SampleId) -> Option<u32> {
        self.storage.shard(id)
    }

    fn shard_location(&self, shard: u32) -> String {
        self.storage.shard_location(shard)
    }

    /// Storage's counters, as for [`nostall::cache::Cached`]: what this process read
    /// from storage (see [`PartitionedSource::breakdown`] for the other tiers).
    fn set_group_memory(&self, bytes: u64) {
        self.storage.set_group_memory(bytes);
    }

    fn stats(&self) -> SourceStats {
        self.storage.stats()
    }
}
