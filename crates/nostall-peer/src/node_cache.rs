//! The node's part of the partitioned cache, shared by the node's ranks and served to its
//! peers.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use nostall::cache::{CachePolicy, SampleCache};
use nostall::plan::placement::Placement;
use nostall::storage::{Source, Tier};
use nostall::{Cause, SampleId};

/// The samples [`Placement`] gives this node, filled from storage on first use
/// (read-through) and then kept for the whole job.
///
/// It admits only the node's own part, which by construction fits its capacity, so it
/// never evicts: MinIO's rule, with the set chosen for the cluster rather than by arrival.
/// Its bound is the node's capacity, not the part's bytes: where the catalog's sizes are
/// estimates (Parquet), the part's real bytes may exceed its estimate a little.
/// Concurrent first reads of one sample (the node's own rank and a peer asking for it at
/// the same moment) read storage once: the later reader waits for the first.
pub struct NodeCache {
    node: usize,
    placement: Arc<Placement>,
    storage: Arc<dyn Source>,
    cache: SampleCache,
    /// Samples being read from storage right now.
    loading: Mutex<HashSet<SampleId>>,
    loaded: Condvar,
    hits: AtomicU64,
    fills: AtomicU64,
}

impl std::fmt::Debug for NodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCache")
            .field("node", &self.node)
            .field("stats", &self.cache.stats())
            .finish()
    }
}

/// Marks a sample as being read from storage until dropped, panic or not: readers
/// waiting for it must not wait forever for a read that unwound.
struct Loading<'a> {
    cache: &'a NodeCache,
    id: SampleId,
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        let cache = self.cache;
        cache
            .loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        cache.loaded.notify_all();
    }
}

/// A node cache's counters since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCacheStats {
    /// Reads answered from memory.
    pub hits: u64,
    /// Reads that filled the cache from storage.
    pub fills: u64,
    /// Samples held.
    pub entries: u64,
    /// Bytes held.
    pub used: u64,
}

impl NodeCache {
    /// The cache of `node` under `placement`, filling from `storage`.
    pub fn new(node: usize, placement: Arc<Placement>, storage: Arc<dyn Source>) -> NodeCache {
        let capacity = placement.capacity();
        NodeCache {
            node,
            placement,
            storage,
            cache: SampleCache::new(CachePolicy::Minio, capacity),
            loading: Mutex::default(),
            loaded: Condvar::new(),
            hits: AtomicU64::new(0),
            fills: AtomicU64::new(0),
        }
    }

    /// Whether `id` is this node's to cache.
    pub fn holds(&self, id: SampleId) -> bool {
        self.placement.holds(self.node, id)
    }

    /// Where a read of `id` (one this node holds) would be served from now: memory once
    /// it has been filled, storage before.
    pub fn tier(&self, id: SampleId) -> Tier {
        if self.cache.contains(id) {
            Tier::Memory
        } else {
            self.storage.tier(id)
        }
    }

    /// Reads sample `id` (one this node holds) into `out`: from memory, or from storage
    /// the first time.
    pub fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        debug_assert!(self.holds(id), "node {} asked for {id}", self.node);
        loop {
            if self.cache.get(id, out) {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let mut loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
            if loading.contains(&id) {
                // Someone is reading it: wait, then look again (a failed read leaves it
                // uncached, and this reader tries storage itself).
                while loading.contains(&id) {
                    loading = self.loaded.wait(loading).unwrap_or_else(|e| e.into_inner());
                }
                continue;
            }
            if self.cache.contains(id) {
                continue; // filled between the lookup and the lock
            }
            loading.insert(id);
            drop(loading);
            let _loading = Loading { cache: self, id };
            let result = self.storage.read(id, out);
            if result.is_ok() {
                self.cache.offer(id, out);
                self.fills.fetch_add(1, Ordering::Relaxed);
            }
            return result;
        }
    }

    /// The counters.
    pub fn stats(&self) -> NodeCacheStats {
        let cache = self.cache.stats();
        NodeCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            entries: cache.entries,
            used: cache.used,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Counting;
    use nostall::cache::Capacity;
    use nostall::storage::SourceStats;

    /// Panics on its first read, then reads like `Counting`.
    struct PanicsOnce {
        inner: Counting,
        panicked: std::sync::atomic::AtomicBool,
    }

    impl Source for PanicsOnce {
        fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
            if !self.panicked.swap(true, Ordering::Relaxed) {
                panic!("a bug in the storage source");
            }
            self.inner.read(id, out)
        }

        fn location(&self, id: SampleId) -> String {
            self.inner.location(id)
        }

        fn stats(&self) -> SourceStats {
            self.inner.stats()
        }
    }

    #[test]
    fn a_fill_that_panics_leaves_the_sample_readable() {
        let storage = Arc::new(PanicsOnce {
            inner: Counting::new(10, 100),
            panicked: Default::default(),
        });
        let placement =
            Arc::new(Placement::new(1, 1, Capacity::Fraction(1.0), &[100; 10]).unwrap());
        let cache = Arc::new(NodeCache::new(0, placement, storage));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.read(3, &mut Vec::new())
        }));
        assert!(panicked.is_err());
        // The next reader of the same sample reads it, rather than waiting for the fill
        // that unwound (on a thread, so that a wait fails the test instead of hanging it).
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = cache.clone();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = tx.send(reader.read(3, &mut out).map(|()| out));
        });
        let read = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the second reader waited forever");
        assert_eq!(read, Ok(Counting::bytes(3, 100)));
    }

    #[test]
    fn holds_its_part_reads_storage_once_and_concurrent_readers_share_the_fill() {
        let storage = Arc::new(Counting::new(200, 1000));
        let sizes = vec![1000; 200];
        let placement = Arc::new(Placement::new(3, 2, Capacity::Fraction(0.5), &sizes).unwrap());
        let cache = Arc::new(NodeCache::new(1, placement.clone(), storage.clone()));
        let mine: Vec<SampleId> = (0..200).filter(|&id| cache.holds(id)).collect();
        assert_eq!(mine.len(), placement.held_samples(1));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut out = Vec::new();
                    for _ in 0..3 {
                        for &id in &mine {
                            cache.read(id, &mut out).unwrap();
                            assert_eq!(out, Counting::bytes(id, 1000));
                        }
                    }
                });
            }
        });
        assert_eq!(
            storage.reads(),
            mine.len() as u64,
            "each sample read from storage once"
        );
        let stats = cache.stats();
        assert_eq!(stats.fills, mine.len() as u64);
        assert_eq!(stats.hits, 12 * mine.len() as u64 - stats.fills);
        assert_eq!(stats.used, placement.held_bytes(1));
    }
}
