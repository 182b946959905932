//! Frame indexes kept between reads of a video: made once per video by demuxing every
//! packet of its file (about a millisecond for a few hundred frames of camera footage),
//! then read back at every later read of the same sample, by every prep thread, in every
//! epoch.
//!
//! What is kept is the serialised index ([`FrameIndex::to_bytes`], 33 bytes a frame): it
//! is what the bound counts, and reading it back goes through its own CRC-32 and
//! [`FrameIndex::from_bytes`]' checks, so a damaged entry is scanned again, never
//! trusted. Each entry also carries the length and CRC-32 of the file it was made from,
//! computed at every read: a file that changed since (a dataset rewritten in place,
//! another dataset read with the same ids) is scanned again and its entry replaced.
//!
//! With an [`IndexFile`] (the loader's `frame_index_cache` setting gives one, beside the
//! dataset's index), the indexes are also kept on disk between processes: read from it
//! at the first read of a video, written to it when the indexes made since its last
//! write reach that write's size, and when the cache is dropped (see `index_file`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError, TryLockError};

use nostall_video::{FrameIndex, Limits, VideoError};

use super::index_file::{IndexFile, WRITE_AFTER};
use crate::error::Result;
#[cfg(doc)]
use crate::prep::VideoPipeline;
use crate::sample::SampleId;

/// The bound of a pipeline's frame indexes, in bytes of serialised index: about two
/// million frames (a little over 18 hours of 30 fps video, or 6,700 ten-second clips).
/// Also the bound of their file on disk, entries' headers included.
pub const DEFAULT_INDEX_CACHE: usize = 64 << 20;

/// The frame indexes of one pipeline's videos, by the dataset's sample id, shared by the
/// preparers it makes (all the prep threads of its loader) and kept across epochs.
///
/// Bounded in bytes: once full, it keeps what it holds, and the index of a video it has no
/// room for is made again at each of its reads. A loader reads each video once an epoch in
/// a shuffled order, so whatever an eviction made room for would be read again only after
/// about an epoch, by which time the evictions since would have taken it too: keeping the
/// first that came saves as many scans as any order of eviction would, at no cost.
///
/// With a file ([`VideoPipeline::with_index_file`]), what it holds outlives the process: the
/// file's entries are read at its first read of a video, and the entries it holds are
/// written there (merged with what other processes wrote) when those made since the last
/// write reach that write's size (at least 256 KiB), at [`FrameIndexes::flush`], and when
/// it is dropped.
pub struct FrameIndexes {
    bound: usize,
    held: Mutex<Held>,
    scans: AtomicU64,
    file: Option<IndexFile>,
    /// The file read, once, before the first index is looked up.
    read: Once,
    read_back: AtomicU64,
    writes: AtomicU64,
    /// One write at a time: a prep thread whose write is due while another writes goes
    /// on with its sample.
    writing: Mutex<()>,
}

/// Its figures, not its entries.
impl std::fmt::Debug for FrameIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameIndexes")
            .field("bound", &self.bound)
            .field("len", &self.len())
            .field("held_bytes", &self.held_bytes())
            .field("scans", &self.scans())
            .field("file", &self.file.as_ref().map(IndexFile::path))
            .field("read_back", &self.read_back())
            .field("writes", &self.writes())
            .finish()
    }
}

#[derive(Default)]
struct Held {
    /// The sum of the entries' lengths.
    bytes: usize,
    by_sample: HashMap<SampleId, Kept>,
    /// Whether it holds indexes its file may lack: made since its last write, or held
    /// when a write failed.
    stale: bool,
    /// The bytes of the indexes made since the file was last written (or tried).
    unwritten: usize,
    /// The bytes of the file when it was last read or written.
    on_disk: usize,
}

/// An index and what tells whether it still fits its video.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Kept {
    /// The digest of the file the index was made from.
    pub(super) file: Digest,
    pub(super) index: Arc<[u8]>,
    /// The digest of the index, when it was made.
    pub(super) check: Digest,
}

/// What tells a file from the one an index was made from: its length and CRC-32 (the
/// check the zip format keeps for the same purpose; tens of gigabytes a second here, a
/// tenth to a fifth of a scan's time on camera footage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Digest {
    pub(super) len: u64,
    pub(super) crc: u32,
}

impl Digest {
    pub(super) fn of(file: &[u8]) -> Digest {
        let mut crc = flate2::Crc::new();
        crc.update(file);
        Digest {
            len: file.len() as u64,
            crc: crc.sum(),
        }
    }
}

impl FrameIndexes {
    /// Frame indexes of up to `bound` bytes in all (0 keeps none), in memory only.
    pub(crate) fn new(bound: usize) -> FrameIndexes {
        FrameIndexes::with_file(bound, None)
    }

    /// Frame indexes of up to `bound` bytes in all, kept in memory and in `file`, of at
    /// most `bound` bytes too (0 keeps none, and `file` is neither read nor written).
    pub(crate) fn kept_in(bound: usize, file: IndexFile) -> FrameIndexes {
        FrameIndexes::with_file(bound, (bound > 0).then_some(file))
    }

    fn with_file(bound: usize, file: Option<IndexFile>) -> FrameIndexes {
        FrameIndexes {
            bound,
            held: Mutex::default(),
            scans: AtomicU64::new(0),
            file,
            read: Once::new(),
            read_back: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            writing: Mutex::new(()),
        }
    }

    /// Its bound, in bytes of serialised index.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// How many indexes it holds.
    pub fn len(&self) -> usize {
        self.lock().by_sample.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the indexes it holds (never over [`FrameIndexes::bound`]).
    pub fn held_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// How many times a video was scanned for its index (by any of the pipeline's
    /// preparers) because none was held for it, or the one held did not fit its file.
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }

    /// The file it is kept in between processes, if any.
    pub fn file(&self) -> Option<&IndexFile> {
        self.file.as_ref()
    }

    /// How many indexes it read from its file (once, at its first read of a video).
    pub fn read_back(&self) -> u64 {
        self.read_back.load(Ordering::Relaxed)
    }

    /// How many times it wrote its file.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes the indexes it holds to its file, merged with those other processes wrote
    /// there, if it made any since its last write (or a write failed). Dropping it does
    /// the same.
    ///
    /// # Errors
    ///
    /// The file system's, naming the file; the indexes stay held, and the next flush
    /// tries again.
    pub fn flush(&self) -> Result<()> {
        let guard = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        self.write(guard)
    }

    /// The frame index of `video` (a whole file), sample `id` of the dataset: the one
    /// held for it if it was made from these bytes and reads back whole, else made by
    /// [`FrameIndex::scan`] and kept. Without an id the video is scanned, and nothing
    /// kept.
    ///
    /// # Errors
    ///
    /// As [`FrameIndex::scan`].
    pub(crate) fn index(
        &self,
        id: Option<SampleId>,
        video: &[u8],
        limits: &Limits,
    ) -> Result<FrameIndex, VideoError> {
        let Some(id) = id else {
            return self.scan(video, limits);
        };
        self.read_file();
        let file = Digest::of(video);
        if let Some(held) = self.held(id, file) {
            // Checked as an index read from a file is: one that does not read back
            // is scanned again below, and replaced.
            if let Ok(index) = FrameIndex::from_bytes(&held, limits) {
                return Ok(index);
            }
        }
        let index = self.scan(video, limits)?;
        if self.keep(id, file, index.to_bytes()) {
            // Written by this thread unless another is writing: a few times in a
            // process's life (each write at least doubles what was written).
            let guard = match self.writing.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            // A cache: a write that fails leaves the indexes to the next process's
            // scans, and the next write tries again.
            let _ = guard.map(|guard| self.write(guard));
        }
        Ok(index)
    }

    /// Reads the file's entries into the cache, once, within the bound.
    fn read_file(&self) {
        let Some(file) = &self.file else {
            return;
        };
        self.read.call_once(|| {
            let (entries, bytes) = file.read(self.bound);
            let mut held = self.lock();
            held.on_disk = bytes;
            for (id, kept) in entries {
                let fits = held.bytes + kept.index.len() <= self.bound;
                if fits && !held.by_sample.contains_key(&id) {
                    held.bytes += kept.index.len();
                    held.by_sample.insert(id, kept);
                    self.read_back.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }

    /// Writes what it holds to its file, if it made anything since the last write;
    /// `_one` is the write's turn.
    fn write(&self, _one: MutexGuard<'_, ()>) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let ours: Vec<(SampleId, Kept)> = {
            let mut held = self.lock();
            if !held.stale {
                return Ok(());
            }
            (held.stale, held.unwritten) = (false, 0);
            let mut ours: Vec<_> = held
                .by_sample
                .iter()
                .map(|(&id, k)| (id, k.clone()))
                .collect();
            // By id: the same file for the same entries, whichever thread made them.
            ours.sort_unstable_by_key(|(id, _)| *id);
            ours
        };
        let written = file.write(&ours, self.bound);
        // After a failure too, so that the next try waits until as much is made again.
        let tried = ours.iter().map(|(_, kept)| kept.index.len()).sum();
        let mut held = self.lock();
        held.on_disk = *written.as_ref().unwrap_or(&tried);
        held.stale |= written.is_err();
        drop(held);
        self.writes
            .fetch_add(u64::from(written.is_ok()), Ordering::Relaxed);
        written.map(drop)
    }

    fn scan(&self, video: &[u8], limits: &Limits) -> Result<FrameIndex, VideoError> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        FrameIndex::scan(video, limits)
    }

    /// A panic elsewhere cannot leave the map half-updated (every update is one insert
    /// or remove, with its byte count), so a poisoned lock is still sound.
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry held for `id`, if it was made from `file` and is whole.
    fn held(&self, id: SampleId, file: Digest) -> Option<Arc<[u8]>> {
        let (index, check) = {
            let held = self.lock();
            let kept = held.by_sample.get(&id).filter(|kept| kept.file == file)?;
            (kept.index.clone(), kept.check)
        };
        (Digest::of(&index) == check).then_some(index)
    }

    /// Keeps `index`, made from `file`, for `id` in place of any entry held for it, if the
    /// bound leaves room; otherwise only drops the entry held, which no longer fits.
    /// Whether a write of the file is due.
    fn keep(&self, id: SampleId, file: Digest, index: Vec<u8>) -> bool {
        let mut held = self.lock();
        if let Some(old) = held.by_sample.remove(&id) {
            held.bytes -= old.index.len();
        }
        if held.bytes + index.len() > self.bound {
            return false;
        }
        held.bytes += index.len();
        held.unwritten += index.len();
        held.stale = true;
        let check = Digest::of(&index);
        let index = index.into();
        held.by_sample.insert(id, Kept { file, index, check });
        self.file.is_some() && held.unwritten >= held.on_disk.max(WRITE_AFTER)
    }
}

/// Writes what it made since its last write, so that the next process scans none of it.
impl Drop for FrameIndexes {
    fn drop(&mut self) {
        // A cache: a write that fails leaves the indexes to the next process's scans.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn footage(name: &str) -> Vec<u8> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nostall-video/tests/footage");
        std::fs::read(dir.join(name)).unwrap()
    }

    #[test]
    fn a_held_index_is_the_scanned_one_and_scans_nothing() {
        let video = footage("h264_bframes.mp4");
        let limits = Limits::default();
        let indexes = FrameIndexes::new(DEFAULT_INDEX_CACHE);
        let scanned = FrameIndex::scan(&video, &limits).unwrap();
        assert_eq!(indexes.index(Some(7), &video, &limits).unwrap(), scanned);
        assert_eq!((indexes.scans(), indexes.len()), (1, 1));
        assert_eq!(indexes.held_bytes(), scanned.to_bytes().len());
        for _ in 0..3 {
            assert_eq!(indexes.index(Some(7), &video, &limits).unwrap(), scanned);
        }
        assert_eq!(indexes.scans(), 1, "read back, not scanned");
        // Without an id: scanned, nothing kept.
        assert_eq!(indexes.index(None, &video, &limits).unwrap(), scanned);
        assert_eq!((indexes.scans(), indexes.len()), (2, 1));
    }

    #[test]
    fn a_file_changed_since_is_scanned_again_and_replaces_its_entry() {
        let (first, second) = (footage("h264_bframes.mp4"), footage("vp9.webm"));
        let limits = Limits::default();
        let indexes = FrameIndexes::new(1 << 20);
        indexes.index(Some(3), &first, &limits).unwrap();
        let index = indexes.index(Some(3), &second, &limits).unwrap();
        assert_eq!(index, FrameIndex::scan(&second, &limits).unwrap());
        assert_eq!((indexes.scans(), indexes.len()), (2, 1));
        assert_eq!(indexes.held_bytes(), index.to_bytes().len());
        // The same length, one byte changed: its CRC tells it apart.
        let mut changed = second.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        assert_ne!(Digest::of(&changed), Digest::of(&second));
        let _ = indexes.index(Some(3), &changed, &limits);
        assert_eq!(indexes.scans(), 3);
    }

    #[test]
    fn a_damaged_entry_is_scanned_again_never_trusted() {
        let video = footage("h264_bframes.mp4");
        let limits = Limits::default();
        let scanned = FrameIndex::scan(&video, &limits).unwrap();
        let indexes = FrameIndexes::new(1 << 20);
        indexes.index(Some(1), &video, &limits).unwrap();
        let file = Digest::of(&video);
        let whole = indexes.held(1, file).unwrap().to_vec();
        // A timestamp's bit flipped (an index that still reads back, wrongly),
        // truncated, an unknown version, an entry's flags no scan makes.
        let mut damaged = vec![whole.clone(), whole[..whole.len() - 5].to_vec()];
        damaged[0][whole.len() - 30] ^= 4;
        assert!(FrameIndex::from_bytes(&damaged[0], &limits).is_ok());
        damaged.push(whole.clone());
        damaged[2][4] = 9;
        damaged.push(whole.clone());
        *damaged[3].last_mut().unwrap() = 0xff;
        for (n, bad) in damaged.into_iter().enumerate() {
            {
                let mut held = indexes.lock();
                held.bytes = held.bytes - whole.len() + bad.len();
                held.by_sample.get_mut(&1).unwrap().index = bad.into();
            }
            assert_eq!(indexes.index(Some(1), &video, &limits).unwrap(), scanned);
            assert_eq!(indexes.scans(), 2 + n as u64, "damage {n} scanned again");
            let replaced = indexes.held(1, file);
            assert_eq!(replaced.as_deref(), Some(&whole[..]), "damage {n} replaced");
            assert_eq!(indexes.held_bytes(), whole.len());
        }
    }

    const VIDEOS: [&str; 3] = ["h264_bframes.mp4", "vp9.webm", "hevc.mkv"];

    /// A cache over `file` standing for a new process: it indexes `videos` by their
    /// places, checking each index against a scan.
    fn a_process(file: &IndexFile, videos: &[Vec<u8>]) -> FrameIndexes {
        let limits = Limits::default();
        let indexes = FrameIndexes::kept_in(DEFAULT_INDEX_CACHE, file.clone());
        for (id, video) in videos.iter().enumerate() {
            let index = indexes.index(Some(id as u64), video, &limits).unwrap();
            assert_eq!(
                index,
                FrameIndex::scan(video, &limits).unwrap(),
                "video {id}"
            );
        }
        indexes
    }

    #[test]
    fn a_new_process_reads_the_files_indexes_back_and_scans_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("cache/v.idx"), "/data/videos");
        let videos: Vec<Vec<u8>> = VIDEOS.into_iter().map(footage).collect();
        let first = a_process(&file, &videos);
        assert_eq!(
            (first.scans(), first.read_back(), first.writes()),
            (3, 0, 0)
        );
        first.flush().unwrap();
        first.flush().unwrap();
        assert_eq!(first.writes(), 1, "nothing new, nothing written");
        let second = a_process(&file, &videos);
        assert_eq!((second.scans(), second.read_back()), (0, 3));
        drop((first, second));
        // Dropped, a cache writes what it made.
        std::fs::remove_file(file.path()).unwrap();
        drop(a_process(&file, &videos));
        assert_eq!(a_process(&file, &videos).scans(), 0, "written at the drop");
        // Without a bound, the file is neither read nor written.
        let none = FrameIndexes::kept_in(0, file.clone());
        none.index(Some(0), &videos[0], &Limits::default()).unwrap();
        none.flush().unwrap();
        assert_eq!((none.scans(), none.read_back(), none.writes()), (1, 0, 0));
        assert!(none.file().is_none());
    }

    #[test]
    fn a_rewritten_video_or_a_damaged_file_is_scanned_again_with_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("v.idx"), "/data/videos");
        let mut videos: Vec<Vec<u8>> = VIDEOS.into_iter().map(footage).collect();
        a_process(&file, &videos);
        let whole = std::fs::read(file.path()).unwrap();
        // Video 1 rewritten between the runs: scanned again, and its entry replaced.
        videos.swap(1, 2);
        let rewritten = a_process(&file, &videos);
        assert_eq!(rewritten.scans(), 2);
        drop(rewritten);
        assert_eq!(a_process(&file, &videos).scans(), 0);
        videos.swap(1, 2);
        // A flipped byte in each entry's index, in an entry's header, the file cut short
        // in its last entry, cut in its header, emptied: whatever fails is scanned.
        let sizes: Vec<usize> = videos
            .iter()
            .map(|v| {
                FrameIndex::scan(v, &Limits::default())
                    .unwrap()
                    .to_bytes()
                    .len()
            })
            .collect();
        let header = 8 + 4 + "/data/videos".len() + 4;
        let entry = |k: usize| header + (0..k).map(|i| sizes[i] + 32).sum::<usize>();
        let flipped = |at: usize| {
            let mut bad = whole.clone();
            bad[at] ^= 0x40;
            bad
        };
        for (damage, bad, scans) in [
            ("an index's byte", flipped(entry(1) + 28 + sizes[1] / 2), 1),
            ("an entry's header", flipped(entry(1) + 3), 2),
            ("the last entry cut", whole[..whole.len() - 5].to_vec(), 1),
            ("the header cut", whole[..header - 2].to_vec(), 3),
            ("emptied", Vec::new(), 3),
        ] {
            std::fs::write(file.path(), &bad).unwrap();
            let indexes = a_process(&file, &videos);
            assert_eq!(indexes.scans(), scans, "{damage}");
            drop(indexes);
            assert_eq!(
                std::fs::read(file.path()).unwrap(),
                whole,
                "{damage}: made whole"
            );
        }
    }

    #[test]
    fn another_datasets_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("v.idx"), "/data/videos");
        let videos: Vec<Vec<u8>> = VIDEOS.into_iter().map(footage).collect();
        a_process(&file, &videos);
        // The same ids, the same file name even: another dataset reads none of it.
        let other = IndexFile::at(file.path(), "/data/other");
        let indexes = a_process(&other, &videos);
        assert_eq!((indexes.scans(), indexes.read_back()), (3, 0));
    }

    #[test]
    fn a_write_is_due_as_the_indexes_made_reach_the_last_writes_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("v.idx"), "d");
        let video = footage("h264_bframes.mp4");
        let limits = Limits::default();
        let size = FrameIndex::scan(&video, &limits).unwrap().to_bytes().len();
        let indexes = FrameIndexes::kept_in(DEFAULT_INDEX_CACHE, file.clone());
        let mut written_at = Vec::new();
        for id in 0..(4 * WRITE_AFTER / size) as u64 {
            let writes = indexes.writes();
            indexes.index(Some(id), &video, &limits).unwrap();
            if indexes.writes() > writes {
                written_at.push((id as usize + 1) * size);
            }
        }
        // At 256 KiB, then once as much again was made: not at every sample.
        assert_eq!(written_at.len(), 2, "{written_at:?}");
        assert!(written_at[0] >= WRITE_AFTER && written_at[0] < WRITE_AFTER + size);
        // Entries' headers (32 bytes each) count on disk.
        let second = 2 * written_at[0]..2 * written_at[0] + written_at[0] / 10 + size;
        assert!(second.contains(&written_at[1]), "{written_at:?}");
        let on_disk = std::fs::metadata(file.path()).unwrap().len() as usize;
        assert!(on_disk > written_at[1], "every entry made by then written");
    }

    #[test]
    fn processes_writing_at_once_lose_no_entries() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::at(dir.path().join("v.idx"), "d");
        let videos: Vec<Vec<u8>> = VIDEOS.into_iter().map(footage).collect();
        let limits = Limits::default();
        // Each a cache of its own over the file (a process, a rank), with samples of
        // its own, written at once.
        std::thread::scope(|s| {
            for rank in 0..4u64 {
                let (file, videos, limits) = (&file, &videos, &limits);
                s.spawn(move || {
                    let indexes = FrameIndexes::kept_in(DEFAULT_INDEX_CACHE, file.clone());
                    for (k, video) in videos.iter().enumerate() {
                        indexes
                            .index(Some(rank * 10 + k as u64), video, limits)
                            .unwrap();
                    }
                    indexes.flush().unwrap();
                });
            }
        });
        let all = FrameIndexes::kept_in(DEFAULT_INDEX_CACHE, file);
        for rank in 0..4u64 {
            for (k, video) in videos.iter().enumerate() {
                all.index(Some(rank * 10 + k as u64), video, &limits)
                    .unwrap();
            }
        }
        assert_eq!((all.scans(), all.read_back()), (0, 12));
    }

    #[test]
    fn indexes_past_the_bound_are_not_kept_and_scanned_at_each_read() {
        let videos: Vec<Vec<u8>> = ["h264_bframes.mp4", "vp9.webm", "hevc.mkv"]
            .into_iter()
            .map(footage)
            .collect();
        let limits = Limits::default();
        let sizes: Vec<usize> = videos
            .iter()
            .map(|v| FrameIndex::scan(v, &limits).unwrap().to_bytes().len())
            .collect();
        // Room for the first two, not the third.
        let bound = sizes[0] + sizes[1] + sizes[2] - 1;
        let indexes = FrameIndexes::new(bound);
        for round in 1..=3 {
            for (id, video) in videos.iter().enumerate() {
                indexes.index(Some(id as u64), video, &limits).unwrap();
            }
            assert_eq!(indexes.scans(), 2 + round, "round {round}");
            assert_eq!(indexes.len(), 2);
            assert!(indexes.held_bytes() <= bound);
        }
        let none = FrameIndexes::new(0);
        for _ in 0..2 {
            none.index(Some(0), &videos[0], &limits).unwrap();
        }
        assert_eq!((none.scans(), none.len(), none.held_bytes()), (2, 0, 0));
    }
}
