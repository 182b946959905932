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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nostall_video::{FrameIndex, Limits, VideoError};

use crate::sample::SampleId;

/// The bound of a pipeline's frame indexes, in bytes of serialised index: about two
/// million frames (a little over 18 hours of 30 fps video, or 6,700 ten-second clips).
pub const DEFAULT_INDEX_CACHE: usize = 64 << 20;

/// The frame indexes of one pipeline's videos, by the dataset's sample id, shared by the
/// preparers it makes (all the prep threads of its loader) and kept across epochs.
///
/// Bounded in bytes: once full, it keeps what it holds, and the index of a video it has no
/// room for is made again at each of its reads. A loader reads each video once an epoch in
/// a shuffled order, so whatever an eviction made room for would be read again only after
/// about an epoch, by which time the evictions since would have taken it too: keeping the
/// first that came saves as many scans as any order of eviction would, at no cost.
pub struct FrameIndexes {
    bound: usize,
    held: Mutex<Held>,
    scans: AtomicU64,
}

/// Its figures, not its entries.
impl std::fmt::Debug for FrameIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameIndexes")
            .field("bound", &self.bound)
            .field("len", &self.len())
            .field("held_bytes", &self.held_bytes())
            .field("scans", &self.scans())
            .finish()
    }
}

#[derive(Default)]
struct Held {
    /// The sum of the entries' lengths.
    bytes: usize,
    by_sample: HashMap<SampleId, Kept>,
}

struct Kept {
    /// The digest of the file the index was made from.
    file: Digest,
    index: Arc<[u8]>,
    /// The digest of the index, when it was made.
    check: Digest,
}

/// What tells a file from the one an index was made from: its length and CRC-32 (the
/// check the zip format keeps for the same purpose; tens of gigabytes a second here, a
/// tenth to a fifth of a scan's time on camera footage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digest {
    len: u64,
    crc: u32,
}

impl Digest {
    fn of(file: &[u8]) -> Digest {
        let mut crc = flate2::Crc::new();
        crc.update(file);
        Digest {
            len: file.len() as u64,
            crc: crc.sum(),
        }
    }
}

impl FrameIndexes {
    /// Frame indexes of up to `bound` bytes in all (0 keeps none).
    pub(crate) fn new(bound: usize) -> FrameIndexes {
        FrameIndexes {
            bound,
            held: Mutex::default(),
            scans: AtomicU64::new(0),
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
        let file = Digest::of(video);
        if let Some(held) = self.held(id, file) {
            // Checked as an index read from a file is: one that does not read back
            // is scanned again below, and replaced.
            if let Ok(index) = FrameIndex::from_bytes(&held, limits) {
                return Ok(index);
            }
        }
        let index = self.scan(video, limits)?;
        self.keep(id, file, index.to_bytes());
        Ok(index)
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
    fn keep(&self, id: SampleId, file: Digest, index: Vec<u8>) {
        let mut held = self.lock();
        if let Some(old) = held.by_sample.remove(&id) {
            held.bytes -= old.index.len();
        }
        if held.bytes + index.len() > self.bound {
            return;
        }
        held.bytes += index.len();
        let check = Digest::of(&index);
        let index = index.into();
        held.by_sample.insert(id, Kept { file, index, check });
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
