//! Jobs' fields, made once for every job and group that reads them alike.
//!
//! A job reading records sends its fields' text and its tokenizers' `tokenizer.json`
//! (megabytes each). Made for each hello, the fields of a search's jobs would be parsed
//! once per job, and held once per group (a search's seeds are groups of their own): the
//! agent's memory grew with the jobs, not with what they read. Fields alike (the same text
//! and tokenizers, by a SHA-256 digest of their bytes) are made once and shared while a
//! group holds them; the jobs of a search that start together wait for the one making
//! them.

use std::sync::Arc;

use nostall::fields::Fields;

use super::stream::Digest;
use crate::held::HeldOnce;

/// The fields made, by their digest, while some group holds them.
#[derive(Default)]
pub(crate) struct MadeFields {
    fields: HeldOnce<Digest, Fields>,
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
        self.fields.get_or_make(*digest, || {
            #[cfg(test)]
            self.made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let fields = Fields::from_portable(text, tokenizers).map_err(|e| e.to_string())?;
            Ok(Arc::new(fields))
        })
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
        assert_eq!(cache.fields.len(), 1, "the dropped fields' slot is gone");
        let why = cache.make(&fields_digest("[", &[]), "[", &[]).unwrap_err();
        assert!(why.contains("the fields sent"), "{why}");
    }
}
