//! What makes a group: a job's stream in words (what a refusal shows) and its identity, a
//! SHA-256 digest of everything that decides the group's batches.
//!
//! Two digests. What a job *asks* for is known from its hello: its settings, datasets,
//! fields (their tokenizers by their bytes), storage and node. The group's *identity* is
//! that and the plan its loader deals over the dataset, which only the dataset's catalog
//! settles: Parquet's row groups kept open as `group_memory` (or `memory`) allows, a
//! mixture's groups. Jobs whose settings read alike but resolve to other orders are other
//! groups: a job in a group of another order would train on that order while its own
//! `state_dict` described a plan it never ran (resuming alone, it delivered some samples
//! twice and others never).
//!
//! The words name tokenizers, credentials and secrets by short digests; the identity
//! digests them whole, so that no crafted description joins another job's group by a
//! collision of what the words show.

use std::fmt::{self, Write as _};

use nostall::plan::PlanConfig;
use nostall::storage::Columns;
use nostall::LoaderConfig;
use ring::digest::{Context, SHA256};

/// A SHA-256 digest.
pub(crate) type Digest = [u8; 32];

/// What a job asks for, before its dataset is open.
pub(super) struct Asked {
    /// In words.
    pub(super) words: String,
    /// A digest of the words and of what they name by a short digest only.
    pub(super) digest: Digest,
}

/// What a job's group is: what it asked for, with the order its loader deals over the
/// group's dataset.
pub(super) struct Resolved {
    pub(super) words: String,
    pub(super) identity: Digest,
}

/// Where and as whom a job reads object storage (see [`storage_of`]).
pub(super) struct Storage {
    /// The server and region, and the credentials by a short digest; empty for a local
    /// dataset.
    pub(super) words: String,
    /// A digest of every storage setting, for a dataset in object storage.
    pub(super) digest: Option<Digest>,
}

impl Storage {
    /// The words and the whole digest: what tells two jobs' storage apart.
    pub(super) fn key(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{} {}", self.words, hex(digest)),
            None => String::new(),
        }
    }
}

/// What a job asks for, but for the plan its loader resolves over the dataset.
pub(super) struct Parts<'a> {
    /// The dataset, or a mixture's datasets with their weights.
    pub(super) datasets: &'a str,
    /// Which Parquet columns hold the samples and the labels.
    pub(super) columns: &'a Columns,
    pub(super) storage: &'a Storage,
    /// [`fields_digest`] of the job's fields, if it reads records.
    pub(super) fields: Option<&'a Digest>,
    /// For a rank of a partitioned cache, its node in words and the node's key (its
    /// secret digested whole).
    pub(super) node: Option<(&'a str, &'a str)>,
}

impl Parts<'_> {
    /// What a loader of `config`'s settings asks for.
    pub(super) fn asked(&self, config: &LoaderConfig) -> Asked {
        let mut words = stream_of(self.datasets, config);
        if *self.columns != Columns::default() {
            let _ = write!(words, ", columns {:?}", self.columns);
        }
        words.push_str(&self.storage.words);
        if let Some((described, _)) = self.node {
            let _ = write!(words, ", {described}");
        }
        let mut digest = Context::new(&SHA256);
        let parts: [&[u8]; 5] = [
            b"nostall-agent/stream/1",
            words.as_bytes(),
            self.storage.digest.as_ref().map_or(&[], |d| d.as_slice()),
            self.fields.map_or(&[], |d| d.as_slice()),
            self.node.map_or(&[][..], |(_, key)| key.as_bytes()),
        ];
        for part in parts {
            digest.update(&(part.len() as u64).to_le_bytes());
            digest.update(part);
        }
        Asked {
            words,
            digest: finish(digest),
        }
    }
}

impl Asked {
    /// This stream dealt as `resolved` (a loader's configuration over the group's
    /// dataset, [`nostall::loader::LoaderBuilder::resolved`]) deals it.
    pub(super) fn resolved(&self, resolved: &LoaderConfig) -> Resolved {
        let plan = &resolved.plan;
        let mut words = self.words.clone();
        if let Some(blocks) = &plan.blocks {
            let _ = write!(
                words,
                ", dealt from {} of {} groups of samples open at once",
                blocks.open,
                blocks.lengths.len()
            );
        }
        if let Some(mixture) = &plan.mixture {
            let _ = write!(words, ", mixed as {:016x}", mixture.digest());
        }
        let mut digest = Context::new(&SHA256);
        digest.update(b"nostall-agent/group/1");
        digest.update(&self.digest);
        // The whole plan (groups and their lengths, a mixture's counts and groups), not
        // its words: both ends of a comparison are this process's, so its `Debug` text is
        // exact enough.
        let _ = write!(Hashing(&mut digest), "{plan:?}");
        Resolved {
            words,
            identity: finish(digest),
        }
    }
}

/// A digest of a job's fields: their text and each tokenizer's bytes.
pub(crate) fn fields_digest(text: &str, tokenizers: &[std::sync::Arc<[u8]>]) -> Digest {
    let mut digest = Context::new(&SHA256);
    digest.update(b"nostall-agent/fields/1");
    for part in std::iter::once(text.as_bytes()).chain(tokenizers.iter().map(|t| &t[..])) {
        digest.update(&(part.len() as u64).to_le_bytes());
        digest.update(part);
    }
    finish(digest)
}

/// The name of a group by stream (`share="auto"`): its identity's first 8 bytes in hex
/// (the whole identity is compared).
pub(super) fn auto_name(identity: &Digest) -> String {
    hex(&identity[..8])
}

/// The digest a job waits on while another job of its stream opens the dataset.
pub(super) fn opening_key(asked: &Asked) -> String {
    format!("stream {}", hex(&asked.digest))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn finish(digest: Context) -> Digest {
    digest
        .finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

/// Text written into a digest.
struct Hashing<'a>(&'a mut Context);

impl fmt::Write for Hashing<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update(s.as_bytes());
        Ok(())
    }
}

/// What a stream is, in words, but for where it is read from ([`storage_of`]) and the
/// order only the dataset settles ([`Asked::resolved`]).
fn stream_of(location: &str, config: &LoaderConfig) -> String {
    let plan: &PlanConfig = &config.plan;
    let mut words = format!(
        "{location} with {}, seed {}, batch_size {}, shuffle {}, drop_last {}, shard {:?}, \
         rank {} of {}, on_error {:?}, quarantine {:?}",
        config.pipeline.prep().fingerprint(),
        plan.seed,
        plan.batch_size,
        plan.shuffle,
        plan.drop_last,
        plan.shard,
        plan.rank,
        plan.world,
        config.on_error,
        config.quarantine
    );
    if plan.repeats != 1 {
        let _ = write!(words, ", aug_repeats {}", plan.repeats);
    }
    words
}

/// Where and as whom a job reads object storage: the server and region as the job gives
/// them, and its credentials as a digest of every storage setting (the jobs of a group
/// read with one set of credentials: a job whose keys differ, or that has none, is never
/// served data read with another's). Nothing for a local dataset.
pub(super) fn storage_of(location: &str, storage: &[(String, String)]) -> Storage {
    if !location.starts_with("s3://") {
        return Storage {
            words: String::new(),
            digest: None,
        };
    }
    let var = |name: &str| {
        storage
            .iter()
            .find(|(n, v)| n == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    };
    let endpoint = var("AWS_ENDPOINT_URL")
        .or_else(|| var("AWS_ENDPOINT"))
        .unwrap_or("AWS");
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .unwrap_or("us-east-1");
    let mut digest = Context::new(&SHA256);
    digest.update(b"nostall-agent/v1/storage");
    for name in nostall::storage::S3_ENVIRONMENT {
        digest.update(name.as_bytes());
        digest.update(&[0]);
        digest.update(var(name).unwrap_or_default().as_bytes());
        digest.update(&[0]);
    }
    let digest = finish(digest);
    Storage {
        words: format!(
            ", from {endpoint} in {region} with credentials {}",
            hex(&digest[..8])
        ),
        digest: Some(digest),
    }
}

#[cfg(test)]
mod tests;
