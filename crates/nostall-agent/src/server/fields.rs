//! Jobs' fields, made once for every job and group that reads them alike.
//!
//! A job reading records sends its fields' text and its tokenizers' `tokenizer.json`
//! (megabytes each). Made for each hello, the fields of a search's jobs would be parsed
//! once per job, and held once per group (a search's seeds are groups of their own): the
//! agent's memory grew with the jobs, not with what they read. Fields alike (the same text
//! and tokenizers, by a SHA-256 digest of their bytes) are made once and shared while a
//! group holds them; the jobs of a search that start together wait for the one making
//! them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use nostall::fields::Fields;

use super::stream::Digest;

/// The fields made, by their digest, while some group holds them.
#[derive(Default)]
pub(crate) struct MadeFields {
    slots: Mutex<HashMap<Digest, Arc<Mutex<Weak<Fields>>>>>,
    /// How many times fields were made (a test's count of tokenizers parsed).
    #[cfg(test)]
    pub(crate) made: std::sync::atomic::AtomicUsize,
}

impl MadeFields {
    /// The fields of `text` and `tokenizers`, whose digest is `digest`: made already and
    /// held by a group, or made now, checked as a user's would be
    /// ([`Fields::from_portable`]).
    pub(super) fn make(
        &self,
        digest: &Digest,
        text: &str,
        tokenizers: &[Arc<[u8]>],
    ) -> Result<Arc<Fields>, String> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            // A slot another job holds is being made (it takes it only here, under this
            // lock); otherwise, one whose fields no group holds is gone.
            slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .strong_count()
                        > 0
            });
            slots.entry(*digest).or_default().clone()
        };
        // Jobs making other fields do not wait for these.
        let mut made = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fields) = made.upgrade() {
            return Ok(fields);
        }
        #[cfg(test)]
        self.made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let fields = Arc::new(Fields::from_portable(text, tokenizers).map_err(|e| e.to_string())?);
        *made = Arc::downgrade(&fields);
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::server::stream::fields_digest;

    #[test]
    fn fields_alike_are_made_once_while_held_and_again_once_dropped() {
        let cache = MadeFields::default();
        let text = r#"[{"name":"image","members":["jpg"],"kind":"sample"}]"#;
        let digest = fields_digest(text, &[]);
        let first = cache.make(&digest, text, &[]).unwrap();
        let second = cache.make(&digest, text, &[]).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(cache.made.load(Ordering::SeqCst), 1);
        drop((first, second));
        let _again = cache.make(&digest, text, &[]).unwrap();
        assert_eq!(cache.made.load(Ordering::SeqCst), 2);
        assert_eq!(
            cache.slots.lock().unwrap().len(),
            1,
            "the dropped fields' slot is gone"
        );
        let why = cache.make(&fields_digest("[", &[]), "[", &[]).unwrap_err();
        assert!(why.contains("the fields sent"), "{why}");
    }
}
