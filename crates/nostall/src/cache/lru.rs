//! The `lru` policy: least recently used, the classic baseline.
//!
//! A random permutation per epoch is its worst case (a sample read now comes back about
//! an epoch later, after every other), which is why it is here: for comparison. The
//! recency list is threaded through a slab of the cached samples, so a hit or an
//! admission costs a hash lookup and a few index moves, and memory follows the entries
//! held, not the dataset.

use std::collections::HashMap;

use super::policy::{Admission, Keeper};
use crate::sample::SampleId;

/// "No entry": the end of the list.
const NIL: u32 = u32::MAX;

/// A cached sample in the recency list.
#[derive(Debug, Clone, Copy)]
struct Node {
    id: SampleId,
    size: u64,
    /// Towards the most recent end.
    newer: u32,
    /// Towards the least recent end.
    older: u32,
}

/// Which samples an `lru` cache keeps.
#[derive(Debug)]
pub(crate) struct Lru {
    capacity: u64,
    used: u64,
    slot: HashMap<SampleId, u32>,
    nodes: Vec<Node>,
    /// Slots of evicted samples, reused before the slab grows.
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
}

impl Lru {
    /// An empty cache of `capacity` units.
    pub(crate) fn new(capacity: u64) -> Lru {
        Lru {
            capacity,
            used: 0,
            slot: HashMap::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
        }
    }

    fn unlink(&mut self, at: u32) {
        let Node { newer, older, .. } = self.nodes[at as usize];
        match newer {
            NIL => self.newest = older,
            n => self.nodes[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.nodes[o as usize].newer = newer,
        }
    }

    fn push_newest(&mut self, at: u32) {
        let node = &mut self.nodes[at as usize];
        node.newer = NIL;
        node.older = self.newest;
        match self.newest {
            NIL => self.oldest = at,
            n => self.nodes[n as usize].newer = at,
        }
        self.newest = at;
    }
}

impl Keeper for Lru {
    fn touch(&mut self, id: SampleId) {
        if let Some(&at) = self.slot.get(&id) {
            self.unlink(at);
            self.push_newest(at);
        }
    }

    fn admit(&mut self, id: SampleId, size: u64) -> Admission {
        if size > self.capacity {
            return Admission::Bypass;
        }
        let mut victims = Vec::new();
        while self.used + size > self.capacity {
            let at = self.oldest;
            let victim = self.nodes[at as usize];
            self.unlink(at);
            self.slot.remove(&victim.id);
            self.free.push(at);
            self.used -= victim.size;
            victims.push(victim.id);
        }
        let node = Node {
            id,
            size,
            newer: NIL,
            older: NIL,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.nodes[at as usize] = node;
                at
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 cached samples")
            }
        };
        self.push_newest(at);
        self.slot.insert(id, at);
        self.used += size;
        Admission::Keep(victims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_first() {
        let mut lru = Lru::new(3);
        for id in [1, 2, 3] {
            assert_eq!(lru.admit(id, 1), Admission::Keep(vec![]));
        }
        lru.touch(1);
        assert_eq!(lru.admit(4, 1), Admission::Keep(vec![2]));
        // A sample of 2 units makes room by as many as it takes, oldest first.
        assert_eq!(lru.admit(5, 2), Admission::Keep(vec![3, 1]));
        assert_eq!(lru.admit(6, 4), Admission::Bypass, "larger than the cache");
        lru.touch(4);
        assert_eq!(lru.admit(7, 1), Admission::Keep(vec![5]));
        assert_eq!(lru.used, 2);
        assert!(
            lru.nodes.len() <= 4,
            "slots are reused: {}",
            lru.nodes.len()
        );
    }
}
