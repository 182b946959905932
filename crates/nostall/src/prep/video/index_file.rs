//! A dataset's frame indexes kept on disk, so that a new process (the next training run, a
//! restarted worker) reads them back instead of scanning every video again: one file per
//! dataset in the cache directory beside the catalogs' indexes
//! ([`crate::catalog::derived_index_path`]: `HASH.video-frames.idx`, the hash of the
//! dataset's canonical location, the one its catalog's `HASH.video.idx` has).
//!
//! One file per dataset, rewritten whole, rather than one per video: a new process reads
//! it with one open and one read, where a file per video would cost an open per video (a
//! metadata round trip each on a network file system, tens of thousands a dataset), and
//! its bound is its length, where files per video could be bounded only by listing and
//! summing them. Rewriting it whole costs its length at each write, so writes are rare:
//! [`FrameIndexes`](super::FrameIndexes) writes when the indexes made since the last write
//! reach that write's size (at least [`WRITE_AFTER`]), and when it is dropped, so the
//! bytes a process writes over its life are about twice the file's at most.
//!
//! Writers run at once (the ranks of a job, its worker processes, two jobs over one
//! dataset), and none may tear the file or lose another's entries. Each write holds an
//! advisory lock (`flock` on `HASH.video-frames.idx.lock` beside it) while it reads the
//! file, merges its own entries with those there (its own first, then the others the
//! bound leaves room for), and replaces it by renaming a private temporary file over it:
//! a reader sees the old file or the new one, never a half-written one. Where the file
//! system has no `flock`, writes still never tear; two at once may only drop entries,
//! which are scanned and written again.
//!
//! Read, everything is checked, and a check that fails costs scans, never a wrong index:
//! the file is read only if this user owns it and no one else may write it (as a
//! catalog's index), only its first `bound` bytes, and only if its header names the
//! same dataset (another one's file at that name, by a hash collision or a path given
//! twice, is not read). Each entry's header (sample id, its file's length and CRC-32,
//! the index's length) has a CRC-32: one that fails ends the read, since the lengths after
//! it cannot be trusted. Each index has a CRC-32: one that fails drops that entry alone.
//! What is read back is then checked at every read as an entry made in memory is: the
//! sample's file against the length and CRC-32 it was made from, the index through
//! [`FrameIndex::from_bytes`](nostall_video::FrameIndex::from_bytes).
//!
//! Entries are by the dataset's sample ids, which are the catalog's order: a dataset that
//! gains or loses files shifts them, and the shifted samples are scanned again (their
//! files do not match) and their entries replaced.
//!
//! The format, little-endian: the magic `NSVFIX01`, the dataset's length (u32) and bytes,
//! a CRC-32 of all that; then each entry: sample id (u64), its file's length (u64) and
//! CRC-32 (u32), the index's length (u32), a CRC-32 of those 24 bytes, the index
//! ([`FrameIndex::to_bytes`](nostall_video::FrameIndex::to_bytes)), a CRC-32 of it.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::indexes::{Digest, Kept};
use crate::catalog::{derived_index_path, read_own_within, write_private};
use crate::error::Result;
use crate::sample::SampleId;

/// The indexes made since the last write that make a write due, at least: a first epoch
/// over a large dataset writes at 256 KiB of index, 512 KiB, 1 MiB and so on (about 8,000
/// frames at first, some 25 ten-second clips at 30 fps).
pub(super) const WRITE_AFTER: usize = 256 << 10;

const MAGIC: &[u8; 8] = b"NSVFIX01";

/// Sample id, file length, file CRC-32, index length, then the CRC-32 of those.
const ENTRY_HEAD: usize = 28;

/// Where a dataset's frame indexes are kept between processes, and which dataset they
/// are of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    path: PathBuf,
    dataset: String,
}

/// One entry as read or written: a sample's index and what it was made from.
pub(super) type Entry = (SampleId, Kept);

impl IndexFile {
    /// The file of the dataset at `locations` (one, or a mixture's in order): each local
    /// path made canonical, so that every spelling of a folder shares one file; others (a
    /// URL, shards' pattern) as given. In the cache directory of the catalogs' indexes
    /// (`$NOSTALL_CACHE_DIR`, else `$XDG_CACHE_HOME/nostall`, else `~/.cache/nostall`).
    pub fn for_dataset(locations: &[&str]) -> IndexFile {
        let named: Vec<String> = locations
            .iter()
            .map(|location| {
                fs::canonicalize(location)
                    .map_or_else(|_| location.to_string(), |p| p.display().to_string())
            })
            .collect();
        let dataset = named.join(" + ");
        IndexFile {
            path: derived_index_path(Path::new(&dataset), "video-frames"),
            dataset,
        }
    }

    /// The file at `path`, holding the indexes of the dataset named `dataset` (what its
    /// header must say for it to be read).
    pub fn at(path: impl Into<PathBuf>, dataset: impl Into<String>) -> IndexFile {
        IndexFile {
            path: path.into(),
            dataset: dataset.into(),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The dataset it is of.
    pub fn dataset(&self) -> &str {
        &self.dataset
    }

    /// The whole entries of the file's first `bound` bytes, and how many bytes were read;
    /// nothing for a file that is missing, another user's, or another dataset's.
    pub(super) fn read(&self, bound: usize) -> (Vec<Entry>, usize) {
        let Some(bytes) = read_own_within(&self.path, bound as u64) else {
            return (Vec::new(), 0);
        };
        (decode(&bytes, &self.dataset), bytes.len())
    }

    /// Writes `ours` (in their order) with the entries the file holds for other samples,
    /// while the file stays within `bound` bytes; the bytes written.
    ///
    /// # Errors
    ///
    /// The file system's, naming the file.
    pub(super) fn write(&self, ours: &[Entry], bound: usize) -> Result<usize> {
        let mut out = header(&self.dataset);
        if out.len() > bound {
            return Ok(0);
        }
        // Held until the new file is in place, so that no other writer merges with the
        // file this one is about to replace.
        let _lock = self.lock();
        let (theirs, _) = self.read(bound);
        let mut written = HashSet::new();
        for (id, kept) in ours.iter().chain(&theirs) {
            let room = out.len() + ENTRY_HEAD + kept.index.len() + 4 <= bound;
            if room && written.insert(*id) {
                encode(&mut out, *id, kept);
            }
        }
        write_private(&self.path, &out)?;
        Ok(out.len())
    }

    /// An exclusive `flock` on the lock file beside the index, made for this user alone;
    /// `None` where there is none to take (the write goes on: a rename never tears).
    fn lock(&self) -> Option<fs::File> {
        let mut name = self.path.file_name()?.to_os_string();
        name.push(".lock");
        let path = self.path.with_file_name(name);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // As `write_private` makes it: this user's alone.
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .ok()?;
        }
        let file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        loop {
            // SAFETY: flock takes a descriptor of an open file, which `file` keeps open;
            // closing it (dropping `file`) releases the lock.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Some(file);
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return None;
            }
        }
    }
}

fn crc(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

/// The magic, the dataset and their CRC-32.
fn header(dataset: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + dataset.len());
    out.extend_from_slice(MAGIC);
    // A dataset's name longer than a u32 counts cannot be read back: it is cut, and
    // then names no dataset a reader has.
    out.extend_from_slice(&(dataset.len() as u32).to_le_bytes());
    out.extend_from_slice(dataset.as_bytes());
    out.extend_from_slice(&crc(&out).to_le_bytes());
    out
}

fn encode(out: &mut Vec<u8>, id: SampleId, kept: &Kept) {
    let start = out.len();
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&kept.file.len.to_le_bytes());
    out.extend_from_slice(&kept.file.crc.to_le_bytes());
    out.extend_from_slice(&(kept.index.len() as u32).to_le_bytes());
    let head = crc(&out[start..]);
    out.extend_from_slice(&head.to_le_bytes());
    out.extend_from_slice(&kept.index);
    // The index's CRC-32 as it was when it was made: an index damaged in memory since
    // fails it when read back.
    out.extend_from_slice(&kept.check.crc.to_le_bytes());
}

/// The sound entries of `bytes`, a file of `dataset`'s indexes: none for another
/// dataset's or a damaged header; those up to the first damaged entry header, less those
/// whose index fails its CRC-32.
fn decode(bytes: &[u8], dataset: &str) -> Vec<Entry> {
    let head = header(dataset);
    let Some(mut rest) = bytes.strip_prefix(head.as_slice()) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    while rest.len() >= ENTRY_HEAD {
        let (fields, after) = rest.split_at(ENTRY_HEAD);
        if crc(&fields[..24]) != le_u32(&fields[24..]) {
            break;
        }
        let len = le_u32(&fields[20..24]) as usize;
        // Checked against the bytes left before anything is allocated; a file cut at
        // its bound ends with part of an entry.
        if after.len() < len + 4 {
            break;
        }
        let (index, after) = after.split_at(len);
        let check = le_u32(after);
        rest = &after[4..];
        if crc(index) != check {
            continue;
        }
        let kept = Kept {
            file: Digest {
                len: le_u64(&fields[8..16]),
                crc: le_u32(&fields[16..20]),
            },
            index: index.into(),
            check: Digest {
                len: len as u64,
                crc: check,
            },
        };
        entries.push((le_u64(&fields[..8]), kept));
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: SampleId, fill: u8, len: usize) -> Entry {
        let index: Vec<u8> = vec![fill; len];
        let kept = Kept {
            file: Digest {
                len: 1000 + id,
                crc: id as u32 * 7,
            },
            check: Digest::of(&index),
            index: index.into(),
        };
        (id, kept)
    }

    fn ids(entries: &[Entry]) -> Vec<SampleId> {
        entries.iter().map(|(id, _)| *id).collect()
    }

    #[test]
    fn what_is_written_reads_back_and_merges_with_what_the_file_holds() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("cache/f.idx"), "/data/videos");
        assert_eq!(file.read(1 << 20), (Vec::new(), 0), "no file yet");
        let first = [entry(3, 1, 100), entry(1, 2, 50)];
        let bytes = file.write(&first, 1 << 20).unwrap();
        let (read, len) = file.read(1 << 20);
        assert_eq!((ids(&read), len), (vec![3, 1], bytes));
        assert_eq!(read[0].1, first[0].1);
        // Another process's entries: its own first, then the file's for other samples.
        let second = [entry(1, 9, 60), entry(5, 3, 10)];
        file.write(&second, 1 << 20).unwrap();
        let (read, _) = file.read(1 << 20);
        assert_eq!(ids(&read), vec![1, 5, 3]);
        assert_eq!(
            read[0].1, second[0].1,
            "the writer's own entry for a sample"
        );
        // Another dataset's reader finds nothing in it.
        let other = IndexFile::at(file.path(), "/data/other");
        assert!(other.read(1 << 20).0.is_empty());
    }

    #[test]
    fn the_file_stays_within_its_bound_and_a_reader_reads_within_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("f.idx"), "d");
        let entries: Vec<Entry> = (0..10).map(|id| entry(id, id as u8, 100)).collect();
        let one = ENTRY_HEAD + 100 + 4;
        let bound = header("d").len() + 4 * one + one / 2;
        assert_eq!(file.write(&entries, bound).unwrap(), bound - one / 2);
        assert_eq!(ids(&file.read(bound).0), vec![0, 1, 2, 3]);
        // A reader with a smaller bound reads whole entries within it.
        assert_eq!(ids(&file.read(bound - one).0), vec![0, 1, 2]);
        assert!(file.read(4).0.is_empty());
        // A bound below the header's size writes nothing.
        let none = IndexFile::at(dir.path().join("n.idx"), "d");
        assert_eq!(none.write(&entries, 4).unwrap(), 0);
        assert!(!none.path().exists());
    }

    #[test]
    fn damage_costs_entries_never_a_wrong_one_and_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("f.idx"), "d");
        let entries = [entry(0, 1, 40), entry(1, 2, 40), entry(2, 3, 40)];
        file.write(&entries, 1 << 20).unwrap();
        let whole = fs::read(file.path()).unwrap();
        let start = header("d").len();
        let one = ENTRY_HEAD + 40 + 4;
        // Every cut reads the whole entries before it.
        for end in 0..whole.len() {
            let read = decode(&whole[..end], "d");
            let want = end.saturating_sub(start) / one;
            assert_eq!(
                read.len(),
                if end < start { 0 } else { want },
                "cut at {end}"
            );
        }
        // Every byte flipped: an index's drops its entry, an entry header's ends the
        // read, the file header's loses all; never a changed entry.
        for at in 0..whole.len() {
            let mut bad = whole.clone();
            bad[at] ^= 0x10;
            let read = decode(&bad, "d");
            for (id, kept) in &read {
                assert_eq!(kept, &entries[*id as usize].1, "byte {at}");
            }
            let want = match at.checked_sub(start) {
                None => 0,
                Some(k) if k % one < ENTRY_HEAD => k / one,
                Some(_) => 2,
            };
            assert_eq!(read.len(), want, "byte {at}");
        }
    }

    #[test]
    fn a_file_another_user_may_write_is_not_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("f.idx"), "d");
        file.write(&[entry(0, 1, 40)], 1 << 20).unwrap();
        assert_eq!(file.read(1 << 20).0.len(), 1);
        fs::set_permissions(file.path(), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(file.read(1 << 20).0.is_empty());
    }

    #[test]
    fn a_folders_spellings_share_one_file_and_other_datasets_have_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("videos");
        fs::create_dir(&root).unwrap();
        let plain = root.to_str().unwrap();
        let dotted = format!("{}/../videos/.", plain);
        let file = IndexFile::for_dataset(&[plain]);
        assert_eq!(IndexFile::for_dataset(&[&dotted]), file);
        assert!(file.path().to_string_lossy().ends_with(".video-frames.idx"));
        let other = IndexFile::for_dataset(&["s3://bucket/videos"]);
        assert_ne!(other.path(), file.path());
        let mixture = IndexFile::for_dataset(&[plain, "s3://bucket/videos"]);
        assert_ne!(mixture.path(), file.path());
        assert_eq!(
            mixture.dataset(),
            format!("{} + s3://bucket/videos", file.dataset())
        );
    }
}
