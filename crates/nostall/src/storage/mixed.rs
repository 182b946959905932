//! [`Mixed`]: several sources one after another in one id space, for a mixture of
//! datasets ([`crate::plan::mixture`]).

use std::sync::Arc;

use super::{Source, SourceStats, Tier};
use crate::error::Cause;
use crate::sample::SampleId;

/// Sources one after another: source `s`'s sample `k` is the sum of the earlier
/// sources' lengths plus `k`, as [`Catalog::concat`](crate::Catalog::concat) numbers
/// them. Reads go to their source one at a time (a source's own reads in flight are not
/// used across the mixture).
pub struct Mixed {
    sources: Vec<Arc<dyn Source>>,
    /// Each source's first id, and one past the last source's last.
    offsets: Vec<u64>,
    /// Shards (a source's files) before each source's: a mixture's shards are numbered
    /// one after another too.
    shards: Vec<u32>,
}

impl std::fmt::Debug for Mixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mixed")
            .field("sources", &self.sources.len())
            .field("samples", self.offsets.last().expect("one"))
            .finish()
    }
}

impl Mixed {
    /// `sources`, of `lens` samples and `shards` shards each.
    pub fn new(sources: Vec<Arc<dyn Source>>, lens: &[usize], shards: &[u32]) -> Mixed {
        let mut offsets = vec![0u64];
        for &len in lens {
            offsets.push(offsets.last().expect("one") + len as u64);
        }
        let mut before = vec![0u32];
        for &n in shards {
            before.push(before.last().expect("one") + n);
        }
        Mixed {
            sources,
            offsets,
            shards: before,
        }
    }

    /// The source of `id`, and its id there.
    fn locate(&self, id: SampleId) -> (&dyn Source, SampleId) {
        let s = self.offsets.partition_point(|&o| o <= id) - 1;
        (&*self.sources[s], id - self.offsets[s])
    }
}

impl Source for Mixed {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        let (source, id) = self.locate(id);
        source.read(id, out)
    }

    fn tier(&self, id: SampleId) -> Tier {
        let (source, id) = self.locate(id);
        source.tier(id)
    }

    fn location(&self, id: SampleId) -> String {
        let (source, id) = self.locate(id);
        source.location(id)
    }

    fn shard(&self, id: SampleId) -> Option<u32> {
        let s = self.offsets.partition_point(|&o| o <= id) - 1;
        let (source, id) = self.locate(id);
        source.shard(id).map(|shard| self.shards[s] + shard)
    }

    fn shard_location(&self, shard: u32) -> String {
        let s = self.shards.partition_point(|&first| first <= shard) - 1;
        match self.sources.get(s) {
            Some(source) => source.shard_location(shard - self.shards[s]),
            None => format!("shard {shard}"),
        }
    }

    fn set_group_memory(&self, bytes: u64) {
        let each = bytes / self.sources.len().max(1) as u64;
        for source in &self.sources {
            source.set_group_memory(each);
        }
    }

    fn stats(&self) -> SourceStats {
        let mut all = SourceStats::default();
        for stats in self.sources.iter().map(|s| s.stats()) {
            all.bytes += stats.bytes;
            all.requests += stats.requests;
        }
        all
    }
}
