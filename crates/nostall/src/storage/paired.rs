//! [`Paired`]: the source of datasets whose samples are each an image and a second file
//! that gives its targets (a label map, a PNG of segment ids), read from a local folder
//! or from a blob store, and framed as a record by what the dataset makes of the pair
//! ([`Pairing`]): [`super::Segmented`], [`super::Panoptic`].
//!
//! Local files are read one after another, in the dataset's read mode; a store's are read
//! as [`super::Objects`] reads its blobs (whole, many in flight, each as it was listed):
//! both files of a sample go to the store together, and the record is framed when the
//! second ends. A fault of the second file (missing, unreadable, over the size limit) is
//! the sample's `bad-targets`, of the member it becomes, naming the file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::blob::{check_sample_size, Numbering};
use super::files::read_regular_file;
use super::{
    BlobStore, NextRead, RangeRead, ReadDone, ReadMode, Served, Source, SourceStats,
    DEFAULT_MAX_BYTES,
};
use crate::catalog::{Catalog, SampleId};
use crate::error::{Cause, Result};
use crate::sample::Modality;

/// What a dataset of pairs makes of a sample's image and second file: its record.
pub trait Pairing: Send + Sync + fmt::Debug {
    /// The member the second file becomes in the record (the field a fault of it is
    /// blamed on).
    fn member(&self) -> &str;

    /// The second file, in words, for messages ("label map").
    fn noun(&self) -> &'static str;

    /// Writes sample `id`'s record, from its image's bytes and those of its second file
    /// (read from `location`), into `out`.
    ///
    /// # Errors
    ///
    /// Why the pair makes no record (a fault of the sample's targets).
    fn frame(
        &self,
        id: SampleId,
        image: &[u8],
        target: (&[u8], &str),
        out: &mut Vec<u8>,
    ) -> Result<(), Cause>;
}

/// A blob of a pair, as its store listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Blob {
    /// Its key in the store.
    pub(super) key: String,
    pub(super) size: u64,
    pub(super) version: Option<String>,
}

/// Images, each with its second file, framed by `P`.
#[derive(Debug)]
pub struct Paired<P> {
    catalog: Arc<Catalog>,
    place: Place,
    /// Why a sample cannot be read, where that is known when the dataset is opened
    /// (sorted by sample).
    refused: Vec<(SampleId, Cause)>,
    pairing: P,
    served: Served,
}

/// Where a [`Paired`]'s files are read from.
#[derive(Debug)]
enum Place {
    /// Local files: the images in the catalog's root, read in this mode, and each
    /// sample's second file.
    Folder {
        mode: ReadMode,
        targets: Vec<PathBuf>,
    },
    /// Blobs of a store: each sample's image and second file, each read as listed (a
    /// blob replaced since is an error, not another file).
    Store {
        store: Arc<dyn BlobStore>,
        pairs: Vec<[Blob; 2]>,
    },
}

impl<P: Pairing> Paired<P> {
    /// The pairs of local files `pairs` (an image's name in the folder `root`, its second
    /// file's path), in their order; `refused` (by sample) fail when read.
    pub(super) fn in_folder(
        root: PathBuf,
        pairs: Vec<(String, PathBuf)>,
        refused: Vec<(SampleId, Cause)>,
        pairing: P,
    ) -> Paired<P> {
        let mut samples = Vec::with_capacity(pairs.len());
        let mut targets = Vec::with_capacity(pairs.len());
        for (image, target) in pairs {
            // A missing file is not refused here: its read fails, naming the path.
            let size = std::fs::metadata(root.join(&image)).map_or(0, |m| m.len());
            samples.push((image, None, size));
            targets.push(target);
        }
        let place = Place::Folder {
            mode: ReadMode::Cached,
            targets,
        };
        Paired::of(root, samples, place, refused, pairing)
    }

    /// The pairs of blobs of `store` `pairs` (an image's name in the prefix `images`,
    /// the image's and the second file's blobs, or why the sample cannot be read), in
    /// their order; `refused` (by sample) fail when read too.
    pub(super) fn in_store(
        store: Arc<dyn BlobStore>,
        images: &str,
        pairs: Vec<(String, std::result::Result<[Blob; 2], Cause>)>,
        mut refused: Vec<(SampleId, Cause)>,
        pairing: P,
    ) -> Paired<P> {
        let mut samples = Vec::with_capacity(pairs.len());
        let mut blobs = Vec::with_capacity(pairs.len());
        for (id, (name, pair)) in pairs.into_iter().enumerate() {
            let pair = pair.unwrap_or_else(|cause| {
                refused.push((id as SampleId, cause));
                let none = |key: String| Blob {
                    key,
                    size: 0,
                    version: None,
                };
                [none(join(images, &name)), none(String::new())]
            });
            samples.push((name, None, pair[0].size));
            blobs.push(pair);
        }
        let root = PathBuf::from(store.locate(images));
        let place = Place::Store {
            store,
            pairs: blobs,
        };
        Paired::of(root, samples, place, refused, pairing)
    }

    fn of(
        root: PathBuf,
        samples: Vec<(String, Option<u32>, u64)>,
        place: Place,
        mut refused: Vec<(SampleId, Cause)>,
        pairing: P,
    ) -> Paired<P> {
        // One reason a sample, the first found.
        refused.sort_by_key(|(id, _)| *id);
        refused.dedup_by_key(|(id, _)| *id);
        let catalog = Catalog::from_samples(root, Modality::Image, Vec::new(), samples)
            .expect("none labelled");
        Paired {
            catalog: Arc::new(catalog),
            place,
            refused,
            pairing,
            served: Served::default(),
        }
    }

    /// Reads local files in `mode`; a store's are read as the store reads them.
    pub fn with_mode(mut self, mode: ReadMode) -> Paired<P> {
        if let Place::Folder { mode: read, .. } = &mut self.place {
            *read = mode;
        }
        self
    }

    /// The catalog of its images, in the order of their ids.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// What makes each pair a record.
    #[cfg(test)]
    pub(super) fn pairing(&self) -> &P {
        &self.pairing
    }

    /// Why sample `id` cannot be read, if that was known when the dataset was opened.
    fn refusal(&self, id: SampleId) -> Result<(), Cause> {
        match self.refused.binary_search_by_key(&id, |(id, _)| *id) {
            Ok(at) => Err(self.refused[at].1.clone()),
            Err(_) => Ok(()),
        }
    }

    /// A fault of the second file at `location`, as the sample's targets'.
    fn bad_target(&self, location: &str, cause: &Cause) -> Cause {
        Cause::BadTargets {
            field: self.pairing.member().to_string(),
            reason: format!("its {} {location}: {cause}", self.pairing.noun()),
        }
    }

    fn read_record(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        self.refusal(id)?;
        let (mut image, mut target) = (Vec::new(), Vec::new());
        let location = match &self.place {
            Place::Folder { mode, targets } => {
                let path = targets.get(id as usize).ok_or_else(|| past(id))?;
                read_regular_file(&self.catalog.path(id), DEFAULT_MAX_BYTES, *mode, &mut image)?;
                let location = path.display().to_string();
                // The sample's location names its image: the cause names the other file.
                read_regular_file(path, DEFAULT_MAX_BYTES, *mode, &mut target)
                    .map_err(|cause| self.bad_target(&location, &cause))?;
                location
            }
            Place::Store { store, pairs } => {
                let [first, second] = pairs.get(id as usize).ok_or_else(|| past(id))?;
                check_sample_size(first.size, DEFAULT_MAX_BYTES, &mut image)?;
                let version = first.version.as_deref();
                store.read_version(&first.key, version, 0, first.size, &mut image)?;
                let location = store.locate(&second.key);
                self.check_target(second, &location)?;
                let version = second.version.as_deref();
                store
                    .read_version(&second.key, version, 0, second.size, &mut target)
                    .map_err(|cause| self.bad_target(&location, &cause))?;
                location
            }
        };
        self.pairing.frame(id, &image, (&target, &location), out)
    }

    /// Refuses a second file over the size limit before it is read.
    fn check_target(&self, blob: &Blob, location: &str) -> Result<(), Cause> {
        if blob.size > DEFAULT_MAX_BYTES {
            let cause = Cause::TooLarge {
                bytes: blob.size,
                limit: DEFAULT_MAX_BYTES,
                field: None,
            };
            return Err(self.bad_target(location, &cause));
        }
        Ok(())
    }

    /// The two reads of sample `id` in `store` (the image's into `out`), or why it cannot
    /// be read.
    fn ranges<'a>(
        &self,
        id: SampleId,
        store: &dyn BlobStore,
        pairs: &'a [[Blob; 2]],
        mut out: Vec<u8>,
    ) -> std::result::Result<[RangeRead<'a>; 2], (Vec<u8>, Cause)> {
        let checked = self.refusal(id).and_then(|()| {
            let pair = pairs.get(id as usize).ok_or_else(|| past(id))?;
            check_sample_size(pair[0].size, DEFAULT_MAX_BYTES, &mut out)?;
            self.check_target(&pair[1], &store.locate(&pair[1].key))?;
            Ok(pair)
        });
        let pair = match checked {
            Ok(pair) => pair,
            Err(cause) => return Err((out, cause)),
        };
        let read = |blob: &'a Blob, out| RangeRead {
            key: &blob.key,
            version: blob.version.as_deref(),
            offset: 0,
            len: blob.size,
            out,
        };
        Ok([read(&pair[0], out), read(&pair[1], Vec::new())])
    }
}

impl<P: Pairing> Source for Paired<P> {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        out.clear();
        let read = self.read_record(id, out);
        self.served.settle(read, out)
    }

    /// A store's pairs are read many at once, both files of a sample together, each
    /// record framed when its second read ends.
    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        let Place::Store { store, pairs } = &self.place else {
            // Local files, one after another: as the trait's default reads them.
            return super::read_one_after_another(self, next, done);
        };
        // Below, each read is one file of a sample: which sample's read, and which file.
        let numbers = RefCell::new(Numbering::<(SampleId, usize)>::default());
        // The first file of a sample to end waits here, by the sample's read, for the other.
        let halves: RefCell<HashMap<usize, Ended>> = RefCell::new(HashMap::new());
        let done = RefCell::new(done);
        let mut second = None;
        let mut next_range = || {
            if let Some(read) = second.take() {
                return Some(read);
            }
            loop {
                let (id, out) = next()?;
                let number = numbers.borrow_mut().given();
                match self.ranges(id, &**store, pairs, out) {
                    Err((mut out, cause)) => {
                        out.clear();
                        (*done.borrow_mut())(number, out, Err(cause));
                    }
                    Ok([image, target]) => {
                        numbers.borrow_mut().pass(number, (id, 0));
                        numbers.borrow_mut().pass(number, (id, 1));
                        second = Some(target);
                        return Some(image);
                    }
                }
            }
        };
        store.read_each_range(&mut next_range, &mut |below, out, result| {
            let Some((number, (id, file))) = numbers.borrow_mut().ended(below) else {
                return; // a store that ended it twice, or never was given it
            };
            let waiting = halves.borrow_mut().remove(&number);
            let Some((other, other_result)) = waiting else {
                halves.borrow_mut().insert(number, (out, result));
                return;
            };
            let ((image, image_read), (target, target_read)) = match file {
                0 => ((out, result), (other, other_result)),
                _ => ((other, other_result), (out, result)),
            };
            let mut record = Vec::new();
            let read = image_read.and_then(|()| {
                let key = match pairs.get(id as usize) {
                    Some([_, second]) => &second.key,
                    None => return Err(past(id)),
                };
                let location = store.locate(key);
                target_read.map_err(|cause| self.bad_target(&location, &cause))?;
                self.pairing
                    .frame(id, &image, (&target, &location), &mut record)
            });
            let read = self.served.settle(read, &mut record);
            (*done.borrow_mut())(number, record, read);
        });
    }

    fn reads_at_once(&self) -> usize {
        match &self.place {
            Place::Folder { .. } => 1,
            // Two reads a sample.
            Place::Store { store, .. } => store.reads_at_once().div_ceil(2).max(1),
        }
    }

    fn location(&self, id: SampleId) -> String {
        match &self.place {
            Place::Folder { .. } => self.catalog.path(id).display().to_string(),
            Place::Store { store, pairs } => match pairs.get(id as usize) {
                Some([image, _]) => store.locate(&image.key),
                None => store.locate(self.catalog.relative_path(id)),
            },
        }
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// A read that ended: its buffer and result.
type Ended = (Vec<u8>, Result<(), Cause>);

/// Sample `id` is past the dataset's pairs.
fn past(id: SampleId) -> Cause {
    Cause::Internal(format!("sample {id} is past the dataset's pairs"))
}

/// Key `name` under prefix `dir` (`dir` empty: the store's root).
pub(super) fn join(dir: &str, name: &str) -> String {
    let dir = match dir.trim_end_matches('/') {
        "" if dir.starts_with('/') => "/",
        dir => dir,
    };
    match (dir, name) {
        ("/", name) => format!("/{name}"),
        ("", name) => name.to_string(),
        (dir, "") => dir.to_string(),
        (dir, name) => format!("{dir}/{name}"),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::Path;

    use super::*;
    use crate::storage::LocalDir;

    /// What opens the store of a prefix of a bucket.
    pub(in crate::storage) type Open = dyn Fn(&str) -> Result<Arc<dyn BlobStore>>;

    /// `root` as a bucket, each prefix's store its folder (an empty one for a folder
    /// that is not there, as S3 lists a prefix that holds nothing).
    pub(in crate::storage) fn bucket(root: &Path) -> (Arc<dyn BlobStore>, Box<Open>) {
        let store: Arc<dyn BlobStore> = Arc::new(LocalDir::new(root).unwrap());
        let (root, empty) = (root.to_path_buf(), root.join(".empty"));
        std::fs::create_dir_all(&empty).unwrap();
        let open = move |prefix: &str| -> Result<Arc<dyn BlobStore>> {
            let dir = root.join(prefix);
            let dir = if dir.is_dir() { dir } else { empty.clone() };
            Ok(Arc::new(LocalDir::new(&dir)?))
        };
        (store, Box::new(open))
    }
}
