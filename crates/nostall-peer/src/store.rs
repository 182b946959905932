//! Meeting through a key-value store the job already runs (torchrun's, reached through
//! `torch.distributed`), instead of a rendezvous service of nostall's own.
//!
//! The store is trusted to carry keys, not to vouch for what they hold: every node's entry
//! is signed with the job's secret (HMAC-SHA256, bound to the job's key space), so an entry
//! written by anything but a node of this job, or copied from another job's keys, is
//! refused at join; and every connection between nodes still proves the secret in its TLS
//! handshake, whatever address the store gave. Every value read is bounded before it is
//! parsed.
//!
//! Keys, under the job's prefix:
//! - `node/<n>`: node `n`'s control address, data port and fingerprint, set by its first
//!   rank;
//! - `registered`: a counter; the node whose entry makes it reach the node count gathers
//!   every entry into `nodes`, so that each rank reads one value, not one per node;
//! - `barrier/<epoch>` and `barrier/<epoch>/done`: an arrival counter, and the flag the
//!   last arrival sets.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::auth::Secret;
use crate::control::MAX_ADDRESS_BYTES;
use crate::error::{Error, Result};

/// A key-value store every rank of the job reaches, such as torch.distributed's
/// `TCPStore`. Implementations block; none of them is called with a lock held.
pub trait Store: Send + Sync {
    /// Sets `key` to `value`.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// The value of `key`, waiting up to `timeout` for it to be set; `None` when it was
    /// not set in time.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    fn get(&self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>>;

    /// Adds `amount` to the counter at `key` (0 when unset) and returns its new value,
    /// atomically for every rank.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    fn add(&self, key: &str, amount: i64) -> Result<i64>;
}

/// A job's key space in a [`Store`]: the store and the prefix of every key the job's
/// nodes use (one per job, attempt and loader, so that a restarted job or a second loader
/// never reads the first one's entries).
#[derive(Clone)]
pub struct JobStore {
    store: Arc<dyn Store>,
    prefix: String,
}

impl fmt::Debug for JobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl PartialEq for JobStore {
    fn eq(&self, other: &JobStore) -> bool {
        Arc::ptr_eq(&self.store, &other.store) && self.prefix == other.prefix
    }
}

impl Eq for JobStore {}

/// The longest fingerprint an entry may carry (a SHA-256 digest is 32 bytes).
const MAX_FINGERPRINT_BYTES: usize = 64;
/// The signature's length (HMAC-SHA256).
const TAG_BYTES: usize = 32;
/// The longest entry: node index, data port, address and fingerprint with their lengths,
/// and the signature.
const MAX_ENTRY_BYTES: usize =
    4 + 2 + 2 + MAX_ADDRESS_BYTES + 1 + MAX_FINGERPRINT_BYTES + TAG_BYTES;

/// One node's entry, as read back and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    node: u32,
    addr: String,
    data_port: u16,
    fingerprint: Vec<u8>,
}

impl JobStore {
    /// The key space `prefix` of `store`.
    pub fn new(store: Arc<dyn Store>, prefix: impl Into<String>) -> JobStore {
        JobStore {
            store,
            prefix: prefix.into(),
        }
    }

    /// The prefix of the job's keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Registers this node (when `own` is given: its first rank's control address and
    /// data port) and waits up to `timeout` for every node's entry: each node's control
    /// address and data plane, by node index.
    pub(crate) fn meet(
        &self,
        node: usize,
        nodes: usize,
        own: Option<(&str, u16)>,
        secret: &Secret,
        fingerprint: &[u8],
        timeout: Duration,
    ) -> Result<Vec<(String, SocketAddr)>> {
        if let Some((addr, data_port)) = own {
            let entry = Entry {
                node: u32::try_from(node)
                    .map_err(|_| Error::Config(format!("node {node} is out of range")))?,
                addr: addr.to_string(),
                data_port,
                fingerprint: fingerprint.to_vec(),
            };
            self.store.set(
                &self.key(&format!("node/{node}")),
                &self.signed(&entry, secret)?,
            )?;
            let count = i64::try_from(nodes)
                .map_err(|_| Error::Config(format!("{nodes} nodes are too many")))?;
            if self.store.add(&self.key("registered"), 1)? == count {
                self.gather(nodes, timeout)?;
            }
        }
        let what = format!("the job's store (keys {})", self.prefix);
        let list = self
            .store
            .get(&self.key("nodes"), timeout)?
            .ok_or_else(|| {
                Error::Refused(format!(
                    "{what}: not every node registered within the join timeout of \
                     {timeout:?} (a node did not start, or its loader differs: every rank \
                     must make its partitioned loaders in the same order)"
                ))
            })?;
        let entries = self.parse_list(&list, nodes, secret)?;
        let mut peers = Vec::with_capacity(nodes);
        for (n, entry) in entries.into_iter().enumerate() {
            if entry.fingerprint != fingerprint {
                return Err(Error::Config(format!(
                    "node {n} has another catalog or placement than node {node}: every node \
                     must read the same dataset with the same seed and cache size"
                )));
            }
            let data = crate::client::resolve(&entry.addr)?;
            peers.push((entry.addr, SocketAddr::new(data.ip(), entry.data_port)));
        }
        Ok(peers)
    }

    /// Reads every node's entry, all set by now, and sets `nodes` to their list.
    fn gather(&self, nodes: usize, timeout: Duration) -> Result<()> {
        let mut list = Vec::with_capacity(4 + nodes * 64);
        let count = u32::try_from(nodes)
            .map_err(|_| Error::Config(format!("{nodes} nodes are too many")))?;
        list.extend_from_slice(&count.to_be_bytes());
        for n in 0..nodes {
            let key = self.key(&format!("node/{n}"));
            let entry = self
                .store
                .get(&key, timeout)?
                .ok_or_else(|| Error::Refused(format!("the job's store lost the entry {key}")))?;
            if entry.len() > MAX_ENTRY_BYTES {
                return Err(Error::Refused(format!(
                    "the job's store holds {} bytes at {key}, more than a node's entry \
                     ({MAX_ENTRY_BYTES})",
                    entry.len()
                )));
            }
            list.extend_from_slice(&(entry.len() as u16).to_be_bytes());
            list.extend_from_slice(&entry);
        }
        self.store.set(&self.key("nodes"), &list)
    }

    /// Waits up to `timeout` for `world` arrivals at the barrier of `epoch`, this one
    /// among them: `Ok(false)` when some never came.
    pub(crate) fn barrier(&self, epoch: u64, world: usize, timeout: Duration) -> Result<bool> {
        let name = format!("barrier/{epoch}");
        let arrived = self.store.add(&self.key(&name), 1)?;
        if usize::try_from(arrived).is_ok_and(|n| n == world) {
            self.store.set(&self.key(&format!("{name}/done")), b"1")?;
        }
        Ok(self
            .store
            .get(&self.key(&format!("{name}/done")), timeout)?
            .is_some())
    }

    fn signed(&self, entry: &Entry, secret: &Secret) -> Result<Vec<u8>> {
        if entry.addr.len() > MAX_ADDRESS_BYTES || entry.fingerprint.len() > MAX_FINGERPRINT_BYTES {
            return Err(Error::Config(format!(
                "the address {:?} is longer than {MAX_ADDRESS_BYTES} bytes",
                entry.addr
            )));
        }
        let mut bytes = Vec::with_capacity(MAX_ENTRY_BYTES);
        bytes.extend_from_slice(&entry.node.to_be_bytes());
        bytes.extend_from_slice(&entry.data_port.to_be_bytes());
        bytes.extend_from_slice(&(entry.addr.len() as u16).to_be_bytes());
        bytes.extend_from_slice(entry.addr.as_bytes());
        bytes.push(entry.fingerprint.len() as u8);
        bytes.extend_from_slice(&entry.fingerprint);
        let tag = secret.sign(&[STORE_CONTEXT, self.prefix.as_bytes(), &bytes]);
        bytes.extend_from_slice(tag.as_ref());
        Ok(bytes)
    }

    /// The entries of the list at `nodes`, each checked: length, signature, node index.
    fn parse_list(&self, list: &[u8], nodes: usize, secret: &Secret) -> Result<Vec<Entry>> {
        let bad = |why: &str| {
            Error::Refused(format!(
                "the job's store holds a malformed node list at {}nodes: {why}",
                self.prefix
            ))
        };
        let mut rest = list;
        let count = take(&mut rest, 4).ok_or_else(|| bad("no count"))?;
        let count = u32::from_be_bytes(count.try_into().expect("4 bytes")) as usize;
        if count != nodes {
            return Err(bad(&format!("{count} nodes listed for a job of {nodes}")));
        }
        let mut entries = Vec::with_capacity(nodes);
        for n in 0..nodes {
            let len = take(&mut rest, 2).ok_or_else(|| bad("cut short"))?;
            let len = usize::from(u16::from_be_bytes(len.try_into().expect("2 bytes")));
            let entry = take(&mut rest, len).ok_or_else(|| bad("cut short"))?;
            let entry = self.parse_entry(entry, secret).ok_or_else(|| {
                Error::Refused(format!(
                    "node {n}'s entry in the job's store (keys {}) is not signed with this \
                     job's secret: the nodes' NOSTALL_PEER_SECRET differ, or something else \
                     writes these keys",
                    self.prefix
                ))
            })?;
            if entry.node as usize != n {
                return Err(bad(&format!("entry {n} names node {}", entry.node)));
            }
            entries.push(entry);
        }
        if !rest.is_empty() {
            return Err(bad("bytes after the last entry"));
        }
        Ok(entries)
    }

    /// An entry whose signature checks, or `None`.
    fn parse_entry(&self, bytes: &[u8], secret: &Secret) -> Option<Entry> {
        let signed = bytes.len().checked_sub(TAG_BYTES)?;
        let (body, tag) = bytes.split_at(signed);
        secret
            .verify(&[STORE_CONTEXT, self.prefix.as_bytes(), body], tag)
            .ok()?;
        let mut rest = body;
        let node = u32::from_be_bytes(take(&mut rest, 4)?.try_into().ok()?);
        let data_port = u16::from_be_bytes(take(&mut rest, 2)?.try_into().ok()?);
        let len = usize::from(u16::from_be_bytes(take(&mut rest, 2)?.try_into().ok()?));
        let addr = std::str::from_utf8(take(&mut rest, len)?).ok()?.to_string();
        let len = usize::from(*take(&mut rest, 1)?.first()?);
        let fingerprint = take(&mut rest, len)?.to_vec();
        rest.is_empty().then_some(Entry {
            node,
            addr,
            data_port,
            fingerprint,
        })
    }
}

/// A [`Store`] in this process's memory, which waits as torch's `TCPStore` does: for
/// tests, and for the nodes of a job run as threads of one process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    keys: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.into(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>> {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let (keys, _) = self
            .changed
            .wait_timeout_while(keys, timeout, |k| !k.contains_key(key))
            .unwrap_or_else(PoisonError::into_inner);
        Ok(keys.get(key).cloned())
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let now = match keys.get(key) {
            None => 0,
            Some(value) => std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| Error::Refused(format!("{key} holds no counter")))?,
        }
        .checked_add(amount)
        .ok_or_else(|| Error::Refused(format!("the counter at {key} overflows")))?;
        keys.insert(key.into(), now.to_string().into_bytes());
        self.changed.notify_all();
        Ok(now)
    }
}

/// What an entry's signature is bound to, beside the job's prefix.
const STORE_CONTEXT: &[u8] = b"nostall-peer/v1/store-entry";

/// The first `n` bytes of `rest`, which moves past them; `None` when it is shorter.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> Secret {
        Secret::new(text.as_bytes()).unwrap()
    }

    const LONG: Duration = Duration::from_secs(60);

    /// Node `node`'s entry, with the fingerprint every test node has.
    fn entry(node: u32, addr: &str, data_port: u16) -> Entry {
        Entry {
            node,
            addr: addr.into(),
            data_port,
            fingerprint: b"fp".to_vec(),
        }
    }

    /// Every node registers from a thread of its own; each gets the whole list.
    fn meet_all(store: &JobStore, nodes: usize, secret: &Secret) -> Vec<Vec<(String, SocketAddr)>> {
        std::thread::scope(|s| {
            let joins: Vec<_> = (0..nodes)
                .map(|n| {
                    s.spawn(move || {
                        let addr = format!("127.0.0.{}:{}", n + 1, 7000 + n);
                        store.meet(
                            n,
                            nodes,
                            Some((&addr, 9000 + n as u16)),
                            secret,
                            b"fp",
                            LONG,
                        )
                    })
                })
                .collect();
            joins
                .into_iter()
                .map(|j| j.join().unwrap().unwrap())
                .collect()
        })
    }

    #[test]
    fn every_node_learns_every_node_in_order() {
        let store = JobStore::new(Arc::new(MemoryStore::default()), "job/0/0/");
        let lists = meet_all(&store, 5, &secret("the secret of the test job"));
        for list in &lists {
            assert_eq!(list, &lists[0]);
        }
        for (n, (addr, data)) in lists[0].iter().enumerate() {
            assert_eq!(addr, &format!("127.0.0.{}:{}", n + 1, 7000 + n));
            assert_eq!(
                data,
                &format!("127.0.0.{}:{}", n + 1, 9000 + n).parse().unwrap()
            );
        }
        // A node's other ranks only read the list.
        let other = store
            .meet(
                2,
                5,
                None,
                &secret("the secret of the test job"),
                b"fp",
                LONG,
            )
            .unwrap();
        assert_eq!(other, lists[0]);
    }

    #[test]
    fn an_entry_signed_with_another_secret_or_for_another_prefix_is_refused() {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let ours = secret("the secret of the test job");
        let theirs = secret("another job's secret, as long");
        let store = JobStore::new(memory.clone(), "job/0/0/");
        let forged = store
            .signed(&entry(1, "127.0.0.9:7001", 9001), &theirs)
            .unwrap();
        memory.set("job/0/0/node/1", &forged).unwrap();
        memory.add("job/0/0/registered", 1).unwrap();
        let err = store
            .meet(0, 2, Some(("127.0.0.1:7000", 9000)), &ours, b"fp", LONG)
            .unwrap_err();
        assert!(err.to_string().contains("node 1's entry"), "{err}");
        assert!(err.to_string().contains("NOSTALL_PEER_SECRET"), "{err}");

        // An entry copied from another attempt's keys does not check under this one's.
        let old = JobStore::new(memory.clone(), "job/0/1/");
        let copied = old
            .signed(&entry(0, "127.0.0.1:7000", 9000), &ours)
            .unwrap();
        assert!(store.parse_entry(&copied, &ours).is_none());
        assert!(old.parse_entry(&copied, &ours).is_some());
    }

    #[test]
    fn another_fingerprint_names_the_node() {
        let store = JobStore::new(Arc::new(MemoryStore::default()), "p/");
        let s = secret("the secret of the test job");
        let err = std::thread::scope(|scope| {
            let other = scope
                .spawn(|| store.meet(1, 2, Some(("127.0.0.2:7001", 9001)), &s, b"other", LONG));
            let ours = store.meet(0, 2, Some(("127.0.0.1:7000", 9000)), &s, b"fp", LONG);
            let _ = other.join().unwrap();
            ours.unwrap_err()
        });
        assert!(
            err.to_string().starts_with("node 1 has another catalog"),
            "{err}"
        );
    }

    #[test]
    fn a_node_that_never_comes_is_an_error_after_the_timeout() {
        let store = JobStore::new(Arc::new(MemoryStore::default()), "p/");
        let s = secret("the secret of the test job");
        let err = store
            .meet(
                0,
                2,
                Some(("127.0.0.1:7000", 9000)),
                &s,
                b"fp",
                Duration::ZERO,
            )
            .unwrap_err();
        assert!(
            err.to_string().contains("not every node registered"),
            "{err}"
        );
    }

    #[test]
    fn malformed_lists_are_refused_not_trusted() {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let store = JobStore::new(memory.clone(), "p/");
        let s = secret("the secret of the test job");
        for list in [
            &b""[..],
            &[0, 0, 0, 3][..],
            &[0, 0, 0, 1, 0xff, 0xff, 1, 2][..],
            &[0, 0, 0, 1, 0, 0][..],
        ] {
            assert!(store.parse_list(list, 1, &s).is_err(), "{list:?}");
        }
        // A valid entry followed by junk.
        let entry = store.signed(&entry(0, "127.0.0.1:7000", 9000), &s).unwrap();
        let mut list = vec![0, 0, 0, 1];
        list.extend_from_slice(&(entry.len() as u16).to_be_bytes());
        list.extend_from_slice(&entry);
        assert_eq!(store.parse_list(&list, 1, &s).unwrap().len(), 1);
        list.push(0);
        assert!(store.parse_list(&list, 1, &s).is_err());
    }

    #[test]
    fn the_barrier_opens_at_the_last_arrival_and_reports_one_missing() {
        let store = JobStore::new(Arc::new(MemoryStore::default()), "p/");
        let opened = std::thread::scope(|s| {
            let waits: Vec<_> = (0..3)
                .map(|_| s.spawn(|| store.barrier(4, 3, LONG).unwrap()))
                .collect();
            waits
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        });
        assert_eq!(opened, [true, true, true]);
        // Two of three arrive: the wait ends at its timeout, unopened.
        assert!(!store.barrier(5, 3, Duration::ZERO).unwrap());
        assert!(!store.barrier(5, 3, Duration::ZERO).unwrap());
        // The third opens it.
        assert!(store.barrier(5, 3, Duration::ZERO).unwrap());
    }
}
