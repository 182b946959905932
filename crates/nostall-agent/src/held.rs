//! Values made once per key and shared while something holds them.
//!
//! The agent makes a few costly things that several jobs may ask for at once: a job's
//! node of a partitioned cache (joined once for a node's local ranks), a job's fields
//! (its tokenizers parsed once for every job and group that reads them alike). Each is
//! made by the first caller while the others asking for the same key wait, then shared
//! until its last holder drops it; callers asking for other keys never wait.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

/// What [`HeldOnce::get_or_make`] made, by key, while held.
pub(crate) struct HeldOnce<K, T> {
    slots: Mutex<HashMap<K, Arc<Mutex<Weak<T>>>>>,
}

impl<K, T> Default for HeldOnce<K, T> {
    fn default() -> Self {
        HeldOnce {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, T> HeldOnce<K, T> {
    /// The value of `key`: the one a holder still has, or `make`'s, made while the other
    /// callers for `key` wait (a failure is theirs to try again).
    pub(crate) fn get_or_make<E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<Arc<T>, E> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            // A slot another caller holds is being made or read (it takes it only here,
            // under this lock); otherwise, one whose value no one holds is gone.
            slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .strong_count()
                        > 0
            });
            slots.entry(key).or_default().clone()
        };
        let mut made = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = made.upgrade() {
            return Ok(value);
        }
        let value = make()?;
        *made = Arc::downgrade(&value);
        Ok(value)
    }

    /// How many keys have a slot (a test's look at what is kept).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
