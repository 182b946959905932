//! Byte sources: where a sample's encoded bytes come from.
//!
//! A [`Source`] turns a [`SampleId`] into the sample's bytes, and nothing more: decoding,
//! caching and scheduling live elsewhere. The trait is small and object-safe so that
//! sources stack:
//!
//! - [`LocalFiles`]: one file per sample, at the path the catalog gives.
//! - [`Objects`]: one blob per sample in a [`BlobStore`] (a bucket prefix, a directory).
//! - [`TarShards`]: samples as members of WebDataset-style tar shards in a [`BlobStore`],
//!   indexed once so that every sample is one ranged read.
//! - `ParquetFiles`: samples as rows of Parquet files (Hugging Face datasets) in a
//!   [`BlobStore`], read a row group's column chunk at a time.
//! - [`Segments`]: segments of long recordings listed by a manifest, each read as the
//!   stretch of its recording that holds it.
//! - [`Annotated`]: images with a COCO file's annotations, locally or in a [`BlobStore`].
//! - [`Paired`]: images each with a second file that gives its targets, locally or in a
//!   [`BlobStore`]: [`Segmented`] (label maps as segmentation datasets lay them out),
//!   [`Panoptic`] (a COCO panoptic file's PNGs of segment ids).
//! - [`Memory`]: samples already in memory (to measure prep without storage).
//! - [`Throttled`]: any source behind an emulated link (bandwidth, latency, concurrency),
//!   to stand in for a hard disk, a network filesystem or a remote object store.
//!
//! A [`BlobStore`] is the layer below: named objects with ranged reads, from a local
//! directory ([`LocalDir`]) or S3-compatible object storage ([`S3Store`]).
//!
//! Failures are per sample ([`Cause`]), never fatal to the loader: whether one bad file
//! stops training or is skipped and counted is the error policy's decision.
//!
//! # Reads in flight without a thread each
//!
//! A read from object storage spends its time waiting on the network, and keeping a
//! store busy takes as many reads in flight as its latency times the rate (Little's
//! law): at 20 ms and 2 000 samples/s, 40. [`Source::read_each`] lets one thread keep
//! [`Source::reads_at_once`] of them in flight: [`S3Store`] runs them on its client's
//! event loop, [`Objects`], [`TarShards`] and the cache pass them through, and the fetch
//! side of the loader then needs a thread per that many reads instead of one per read.
//! Sources that read one after another (files, blobs in a local directory, an emulated
//! link) keep the default: one read at a time, a thread each.
//!
//! # Cold reads
//!
//! A benchmark that reads a dataset twice measures the page cache the second time, not
//! the storage. [`ReadMode::Cold`] asks the kernel to drop a file's cached pages before
//! reading it (so the read reaches the device) and again after (so it leaves nothing
//! behind to flatter the next read). The page cache is shared by the whole machine, so
//! this also evicts those files for other processes; it is meant for measuring, not for
//! training. `O_DIRECT` would bypass the cache too, but it demands aligned buffers and
//! sizes and is refused outright by some filesystems.

mod annotated;
mod blob;
mod coco_index;
mod coco_member;
mod columns;
mod files;
mod held;
mod indexed;
mod lists_member;
mod memory;
mod mixed;
mod paired;
mod panoptic;
mod panoptic_member;
#[cfg(feature = "parquet")]
mod parquet;
pub(crate) mod record;
#[cfg(feature = "s3")]
mod s3;
mod segmented;
mod segments;
pub(crate) mod tar;
mod throttle;

pub(crate) use blob::{is_sample_key, Numbering};

/// Whether a blob is a Parquet file, by its name.
pub(crate) fn is_parquet_key(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    !name.starts_with('.') && name.to_ascii_lowercase().ends_with(".parquet")
}
pub use annotated::{images_folder, Annotated, COCO_MEMBER};
pub use blob::{BlobInfo, BlobStore, LocalDir, Objects, RangeRead};
pub(crate) use coco_member::{check_polygon, decode_coco_member, Shape, COCO_MAGIC, MAX_KEYPOINTS};
#[cfg(test)]
pub(crate) use coco_member::{encode_coco_member, EncodedAnnotation};
pub use columns::{Columns, LabelColumn, SubColumns};
pub use files::{LocalFiles, DEFAULT_MAX_BYTES};
pub use held::{Held, HeldSample, HeldSamples};
pub use indexed::Indexed;
#[cfg(any(feature = "parquet", test))]
pub(crate) use lists_member::encode_lists_member;
pub(crate) use lists_member::{decode_lists_member, Item, LISTS_MAGIC};
pub use memory::Memory;
pub use mixed::Mixed;
pub use paired::{Paired, Pairing};
pub use panoptic::{Panoptic, PanopticMaps, UNLABELLED};
pub(crate) use panoptic_member::decode_panoptic_member;
#[cfg(test)]
pub(crate) use panoptic_member::encode_panoptic_member;
#[cfg(feature = "parquet")]
pub use parquet::ParquetFiles;
pub use segmented::{label_map_member, LabelMaps, Segmented, MASK_MEMBER, TRAIN_IDS_MEMBER};

/// Bytes of decoded groups of samples (Parquet pages or row groups) a source keeps in
/// memory, and that the plan's open groups are sized for ([`crate::plan::Blocks::within`]),
/// unless the loader's settings say otherwise (`group_memory`, or a quarter of `memory`).
pub const DEFAULT_GROUP_MEMORY: u64 = 1 << 30;
#[cfg(feature = "s3")]
pub use s3::{S3Config, S3Store};
pub(crate) use segments::is_manifest;
pub use segments::Segments;
pub use tar::TarShards;
pub use throttle::{Link, Throttled};

use crate::error::Cause;
use crate::sample::SampleId;

/// Every environment variable that says where and as whom S3 is read: two jobs with the
/// same values read the same bytes. A job that hands its reading to another process (the
/// node agent) sends these, so that the dataset is read as the job would read it. The
/// credential chain's come last (the S3 store reads them from the eighth on).
pub const S3_ENVIRONMENT: [&str; 15] = [
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
];

/// How reads treat the OS page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReadMode {
    /// Ordinary reads: repeated epochs are served from memory when the dataset fits.
    #[default]
    Cached,
    /// Every read goes to the device and leaves the file uncached; see the
    /// [module docs](self).
    Cold,
}

impl std::str::FromStr for ReadMode {
    type Err = crate::error::Error;

    /// `cached` or `cold`.
    fn from_str(s: &str) -> crate::error::Result<ReadMode> {
        match s {
            "cached" => Ok(ReadMode::Cached),
            "cold" => Ok(ReadMode::Cold),
            _ => Err(crate::error::Error::Config(format!(
                "read={s:?}: use \"cached\" or \"cold\" (bypass the page cache)"
            ))),
        }
    }
}

impl std::fmt::Display for ReadMode {
    /// The name its `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadMode::Cached => "cached",
            ReadMode::Cold => "cold",
        })
    }
}

/// Counters a source keeps: what it has served successfully so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Bytes delivered.
    pub bytes: u64,
    /// Samples delivered.
    pub requests: u64,
}

impl std::ops::Sub for SourceStats {
    type Output = SourceStats;

    /// What was served between two readings of the counters.
    fn sub(self, earlier: SourceStats) -> SourceStats {
        SourceStats {
            bytes: self.bytes - earlier.bytes,
            requests: self.requests - earlier.requests,
        }
    }
}

/// A source's counters as it serves: what [`Source::stats`] reports. Every source below
/// the cache counts the same way, so they share this.
#[derive(Debug, Default)]
pub(crate) struct Served {
    bytes: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
}

impl Served {
    /// Counts one sample of `bytes` served.
    pub(crate) fn count(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.bytes.fetch_add(bytes, Relaxed);
        self.requests.fetch_add(1, Relaxed);
    }

    /// A read's end: `out` counted when it succeeded, emptied when it failed.
    pub(crate) fn settle(&self, read: Result<(), Cause>, out: &mut Vec<u8>) -> Result<(), Cause> {
        match read {
            Ok(()) => {
                self.count(out.len() as u64);
                Ok(())
            }
            Err(cause) => {
                out.clear();
                Err(cause)
            }
        }
    }

    /// What was served so far.
    pub(crate) fn stats(&self) -> SourceStats {
        use std::sync::atomic::Ordering::Relaxed;
        SourceStats {
            bytes: self.bytes.load(Relaxed),
            requests: self.requests.load(Relaxed),
        }
    }
}

/// What [`Source::read_each`] asks for its next read: a sample and a buffer to read it
/// into, or `None` when there is none now. It never waits.
pub type NextRead<'a> = dyn FnMut() -> Option<(SampleId, Vec<u8>)> + 'a;

/// What [`Source::read_each`] and [`BlobStore::read_each_range`] call as each read ends:
/// the read's number (the order in which it was given, from 0), its buffer, and the
/// result.
pub type ReadDone<'a> = dyn FnMut(usize, Vec<u8>, Result<(), Cause>) + 'a;

/// [`Source::read_each`] one read after another, each through [`Source::read`]: the
/// trait's default, and what a source that reads many at once from a store does with
/// local files.
pub(crate) fn read_one_after_another<S: Source + ?Sized>(
    source: &S,
    next: &mut NextRead<'_>,
    done: &mut ReadDone<'_>,
) {
    let mut number = 0;
    while let Some((id, mut bytes)) = next() {
        let result = source.read(id, &mut bytes);
        done(number, bytes, result);
        number += 1;
    }
}

/// Where a read of a sample is served from, nearest first: what the read is likely to
/// cost. The read-ahead keeps a read time per tier, and sets the reads it keeps in flight
/// by the tiers of the reads to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Tier {
    /// This process's memory (its cache): no wait to speak of.
    Memory,
    /// Another node's cache, over the network.
    Peer,
    /// The dataset's storage: a disk, a file system, an object store.
    Storage,
}

impl Tier {
    /// Every tier, nearest first, in the order [`Tier::index`] numbers them.
    pub const ALL: [Tier; 3] = [Tier::Memory, Tier::Peer, Tier::Storage];

    /// The tier's place in [`Tier::ALL`].
    pub fn index(self) -> usize {
        match self {
            Tier::Memory => 0,
            Tier::Peer => 1,
            Tier::Storage => 2,
        }
    }

    /// The tier in words: `memory`, `peer` or `storage`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Peer => "peer",
            Tier::Storage => "storage",
        }
    }
}

/// A place sample bytes come from.
///
/// Implementations are shared by all loader threads, so reads take `&self`. A source that
/// wraps another ([`crate::cache::Cached`], [`Throttled`], the peer layer's partitioned
/// source) changes how bytes arrive, not what the samples are: it forwards
/// [`location`](Source::location), [`shard`](Source::shard),
/// [`shard_location`](Source::shard_location), [`set_group_memory`](Source::set_group_memory)
/// and [`stats`](Source::stats) to the source below, one line each. They are written out
/// rather than given defaults that forward, so that a source that reads a dataset cannot
/// compile without naming its samples and counting what it serves.
pub trait Source: Send + Sync {
    /// Reads sample `id`'s bytes into `out`, replacing its contents and re-using its
    /// capacity. On error `out` is left empty.
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause>;

    /// Reads the samples `next` gives (each with a buffer to read into, as [`read`](
    /// Source::read) takes one) until it has none, calling `done` as each read ends, in
    /// any order. A source whose reads wait on a network keeps up to
    /// [`reads_at_once`](Source::reads_at_once) in flight from the calling thread, asking
    /// `next` for another whenever one ends (a `None` then is asked again after the next
    /// one ends), and returns once none is in flight and `next` has none; the default
    /// reads one after another. `done` is called exactly once for each read.
    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        read_one_after_another(self, next, done);
    }

    /// How many reads one call of [`read_each`](Source::read_each) keeps in flight at
    /// once: 1 for a source that reads one after another (the default), so that each read
    /// in flight costs a thread.
    fn reads_at_once(&self) -> usize {
        1
    }

    /// Where a read of sample `id` would be served from now (the default: storage). A
    /// source that holds some samples nearer (a cache, a peer's) says which; asked once
    /// a read, it must be cheap.
    fn tier(&self, _id: SampleId) -> Tier {
        Tier::Storage
    }

    /// Where the sample lives, as a user would recognise it (for a file, its path).
    fn location(&self, id: SampleId) -> String;

    /// The shard holding sample `id`, when samples share blobs (tar shards): an index
    /// for [`Source::shard_location`]. `None` when every sample is a blob of its own.
    fn shard(&self, _id: SampleId) -> Option<u32> {
        None
    }

    /// Where shard `shard` (from [`Source::shard`]) lives, as a user would recognise it.
    fn shard_location(&self, shard: u32) -> String {
        format!("shard {shard}")
    }

    /// Keeps at most `bytes` of decoded groups of samples (Parquet pages or row groups)
    /// in memory, where the source reads samples in groups; the loader sets it from its
    /// memory budget. Sources without groups ignore it.
    fn set_group_memory(&self, _bytes: u64) {}

    /// What the source has served so far.
    fn stats(&self) -> SourceStats;
}
