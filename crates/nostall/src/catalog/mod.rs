//! The sample index: which files make up a dataset, their labels and their sizes.
//!
//! One job per module: `scan` walks a dataset root ([`Catalog::scan`]: the layouts it
//! understands), `index` writes and reads the saved index ([`Catalog::save`],
//! [`Catalog::load`]: the format), `store` decides where an index lives and whether it is
//! still fresh ([`Catalog::open`]). This module holds the catalog itself and its
//! accessors.
//!
//! # Layouts
//!
//! [`Catalog::scan`] walks a dataset root once and understands two layouts:
//!
//! * [`DatasetLayout::ImageFolder`]: the root holds one sub-directory per class. Classes are
//!   sorted by name and numbered `0..k`, and every class directory is searched
//!   recursively, exactly like torchvision's `ImageFolder`, so that labels and sample order
//!   match a PyTorch reference run on the same tree. Files directly in the root are not
//!   part of any class and are skipped.
//! * [`DatasetLayout::Flat`]: the root holds only files; samples have no labels.
//!
//! Sample files are recognised by their extension (images: `.jpg`, `.jpeg`, `.png`, in
//! any case; audio: [`Modality::extensions`]). Whether the bytes really are what they
//! claim is the decoder's business, checked later by content. Everything else is skipped
//! and counted in [`ScanReport::ignored`]; hidden entries (names starting with `.`) are
//! skipped without being counted, because tools leave them everywhere (`.DS_Store`,
//! `.ipynb_checkpoints`) and they are never data.
//!
//! # Memory
//!
//! ImageNet has 1.28 million files, and datasets ten times larger are common, so a
//! catalog holds no `String` or `PathBuf` per sample: all relative paths live in one
//! string arena addressed by offsets, and labels and sizes are plain vectors. A sample
//! costs its path's bytes plus 20 bytes (16 for a flat dataset).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sample::Modality;

pub use crate::sample::SampleId;
pub use index::seal_index;
pub(crate) use index::write_private;
#[cfg(feature = "video")]
pub(crate) use store::read_own_within;
pub(crate) use store::{derived_index_path, read_own};

mod index;
mod scan;
mod store;
#[cfg(test)]
mod tests;

/// How the files under a dataset root are organised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatasetLayout {
    /// One sub-directory per class, searched recursively; labels are class indices.
    ImageFolder,
    /// Images directly in the root; no labels.
    Flat,
}

/// What a scan skipped and what it found.
#[derive(Debug, Clone)]
pub struct ScanReport {
    /// Entries skipped because they are not image files: other extensions, names that
    /// are not UTF-8, symlinks that cannot be followed, files directly in the root of an
    /// ImageFolder tree. Hidden entries are not counted.
    pub ignored: u64,
    /// The layout the scan recognised.
    pub layout: DatasetLayout,
}

/// How [`Catalog::open`] obtained its catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// From a fresh index file; nothing was scanned.
    Loaded,
    /// By scanning the root, because the index was missing, stale or damaged. The new
    /// index is saved when possible; a failure to save is not reported, since the
    /// catalog is complete either way and the next start will simply scan again.
    Scanned,
}

/// The index of a dataset: every sample's path relative to the root, label and size.
///
/// Build one with [`Catalog::scan`] or, to re-use a saved index, [`Catalog::open`].
/// Sample accessors take a [`SampleId`] and panic if it is out of range, like slice
/// indexing.
#[derive(Clone, PartialEq, Eq)]
pub struct Catalog {
    /// Canonical: symlinks resolved, so equal roots compare equal.
    root: PathBuf,
    /// The kind of files listed.
    modality: Modality,
    layout: DatasetLayout,
    classes: Vec<String>,
    paths: Strings,
    /// One per sample for ImageFolder, empty for Flat.
    labels: Vec<u32>,
    sizes: Vec<u64>,
    total_bytes: u64,
    /// Runs of consecutive samples stored together and read as one (a Parquet file's row
    /// groups), by their lengths; empty when each sample is read alone.
    groups: Vec<u32>,
    /// Whether the sizes are estimates (a Parquet sample's is known only once its page is
    /// decoded), not each sample's bytes.
    estimated_sizes: bool,
    /// For the samples of several datasets ([`Catalog::concat`]), each one's length and
    /// groups; empty for one dataset.
    sources: Vec<(usize, Vec<u32>)>,
    /// Every directory scanned, relative to the root ("" is the root), with its
    /// modification time as seen before it was listed: what decides freshness.
    dirs: Strings,
    mtimes: Vec<i64>,
}

impl Catalog {
    /// A catalog of samples listed by another indexer (tar shards, an object-store
    /// prefix), in the given order: `(relative path, label, size)` each.
    ///
    /// `root` names the dataset in messages (a directory, or a URL such as
    /// `s3://bucket/prefix`). Either every sample has a label or none has: the layout is
    /// [`DatasetLayout::ImageFolder`] or [`DatasetLayout::Flat`] accordingly. `classes`
    /// may be empty when labels are bare numbers. Such a catalog has no directories to
    /// check for freshness, so it is not meant for [`Catalog::save`] and `open`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if there are no samples, or if some have labels and others not.
    pub fn from_samples(
        root: impl Into<PathBuf>,
        modality: Modality,
        classes: Vec<String>,
        samples: impl IntoIterator<Item = (String, Option<u32>, u64)>,
    ) -> Result<Catalog> {
        let mut catalog = Catalog::empty(root.into(), modality);
        catalog.classes = classes;
        for (path, label, size) in samples {
            catalog.push_sample("", &path, label, size);
            if catalog.labels.len() != catalog.sizes.len() && !catalog.labels.is_empty() {
                return Err(Error::Config(format!(
                    "{}: sample {path} has {} but earlier samples have {}; give every \
                     sample a label, or none",
                    catalog.root.display(),
                    if label.is_some() {
                        "a label"
                    } else {
                        "no label"
                    },
                    if label.is_some() { "none" } else { "labels" },
                )));
            }
        }
        if catalog.is_empty() {
            return Err(Error::Config(format!(
                "found no samples in {}",
                catalog.root.display()
            )));
        }
        if !catalog.labels.is_empty() {
            catalog.layout = DatasetLayout::ImageFolder;
        }
        Ok(catalog)
    }
    /// The samples of several catalogs one after another (a mixture of datasets): source
    /// `s`'s sample `k` is the sum of the earlier ones' lengths plus `k`. Each sample keeps
    /// its relative path and label; the class names are the sources' where they all
    /// name the same classes, else none (labels stay the numbers each source gives).
    /// Groups are kept by dataset ([`Catalog::source_groups`]), not as the catalog's.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no catalog, catalogs of different modalities, or labels in
    /// some and not others.
    pub fn concat(parts: &[&Catalog]) -> Result<Catalog> {
        let Some(first) = parts.first() else {
            return Err(Error::Config("a mixture needs at least one dataset".into()));
        };
        let roots: Vec<String> = parts.iter().map(|c| c.root.display().to_string()).collect();
        let mut catalog = Catalog::empty(PathBuf::from(roots.join(" + ")), first.modality);
        let labeled = !first.labels.is_empty();
        for part in parts {
            if part.modality != first.modality {
                return Err(Error::Config(format!(
                    "a mixture's datasets hold one kind of sample: {} holds {}, {} {}",
                    first.root.display(),
                    first.modality.plural(),
                    part.root.display(),
                    part.modality.plural()
                )));
            }
            if part.labels.is_empty() == labeled {
                return Err(Error::Config(format!(
                    "a mixture's datasets are all labeled or none: {} is{} and {} is{}",
                    first.root.display(),
                    if labeled { "" } else { " not" },
                    part.root.display(),
                    if labeled { " not" } else { "" },
                )));
            }
            for id in 0..part.len() as SampleId {
                catalog.push_sample("", part.relative_path(id), part.label(id), part.size(id));
            }
            catalog.estimated_sizes |= part.estimated_sizes;
            catalog.sources.push((part.len(), part.groups.clone()));
        }
        if parts.iter().all(|c| c.classes == first.classes) {
            catalog.classes.clone_from(&first.classes);
        }
        if labeled {
            catalog.layout = DatasetLayout::ImageFolder;
        }
        Ok(catalog)
    }

    /// The catalog with its samples read in groups: runs of consecutive samples of
    /// `lengths` (a Parquet file's row groups), which the plan keeps together
    /// ([`crate::plan::Blocks`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] unless the lengths are positive and add up to the samples.
    pub fn with_groups(mut self, lengths: Vec<u32>) -> Result<Catalog> {
        let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
        if total != self.len() as u64 || lengths.contains(&0) {
            return Err(Error::Config(format!(
                "{}: groups of {total} samples for a catalog of {}",
                self.root.display(),
                self.len()
            )));
        }
        self.groups = lengths;
        Ok(self)
    }

    /// The lengths of the datasets whose samples these are, one after another
    /// ([`Catalog::concat`]); empty for one dataset.
    pub fn sources(&self) -> Vec<usize> {
        self.sources.iter().map(|(len, _)| *len).collect()
    }

    /// Each dataset's groups ([`Catalog::groups`]) where the samples are several
    /// datasets'; empty for one dataset.
    pub fn source_groups(&self) -> impl Iterator<Item = &[u32]> {
        self.sources.iter().map(|(_, groups)| groups.as_slice())
    }

    /// Runs of consecutive samples read as one, by their lengths; empty when each sample
    /// is read alone.
    pub fn groups(&self) -> &[u32] {
        &self.groups
    }

    /// The catalog with its sizes marked as estimates: right in total, not sample by
    /// sample (what a reader that checks a sample's bytes against its size must know).
    pub fn with_estimated_sizes(mut self) -> Catalog {
        self.estimated_sizes = true;
        self
    }

    /// Whether [`Catalog::size`] is each sample's exact size in bytes (else an estimate).
    pub fn sizes_are_exact(&self) -> bool {
        !self.estimated_sizes
    }

    /// A flat catalog of `modality` at `root`, with no samples yet.
    fn empty(root: PathBuf, modality: Modality) -> Catalog {
        Catalog {
            root,
            modality,
            layout: DatasetLayout::Flat,
            classes: Vec::new(),
            paths: Strings::default(),
            labels: Vec::new(),
            sizes: Vec::new(),
            total_bytes: 0,
            groups: Vec::new(),
            estimated_sizes: false,
            sources: Vec::new(),
            dirs: Strings::default(),
            mtimes: Vec::new(),
        }
    }

    /// The kind of files it lists.
    pub fn modality(&self) -> Modality {
        self.modality
    }

    /// The number of samples.
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether the catalog has no samples. A scanned or loaded catalog never is: a
    /// dataset without images is an error.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// The dataset root, canonical (absolute, symlinks resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The layout the scan recognised.
    pub fn layout(&self) -> DatasetLayout {
        self.layout
    }

    /// The class names, sorted; a sample's label indexes this. Empty for a flat dataset.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The sample's class index, or `None` for a flat dataset.
    pub fn label(&self, id: SampleId) -> Option<u32> {
        let i = self.index(id);
        self.labels.get(i).copied()
    }

    /// The sample's path relative to the root, with `/` between components.
    pub fn relative_path(&self, id: SampleId) -> &str {
        self.paths.get(self.index(id))
    }

    /// The sample's full path: the root joined with its relative path.
    pub fn path(&self, id: SampleId) -> PathBuf {
        self.root.join(self.relative_path(id))
    }

    /// The sample's size in bytes when it was scanned.
    pub fn size(&self, id: SampleId) -> u64 {
        self.sizes[self.index(id)]
    }

    /// The sum of all sample sizes, as scanned.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    fn index(&self, id: SampleId) -> usize {
        match usize::try_from(id) {
            Ok(i) if i < self.len() => i,
            _ => panic!(
                "sample id {id} is out of range: the catalog holds {} samples",
                self.len()
            ),
        }
    }

    fn push_sample(&mut self, dir: &str, name: &str, label: Option<u32>, size: u64) {
        self.paths.push_joined(dir, name);
        self.labels.extend(label);
        self.sizes.push(size);
        self.total_bytes += size;
    }
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A summary: a derived Debug would print millions of paths.
        f.debug_struct("Catalog")
            .field("root", &self.root)
            .field("modality", &self.modality)
            .field("layout", &self.layout)
            .field("samples", &self.len())
            .field("classes", &self.classes.len())
            .field("total_bytes", &self.total_bytes)
            .finish_non_exhaustive()
    }
}

/// Many strings in one allocation: `ends[i]` is where string `i` stops in `text`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Strings {
    text: String,
    ends: Vec<u64>,
}

impl Strings {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    fn push(&mut self, s: &str) {
        self.push_joined("", s);
    }

    /// Pushes `dir/name`, or `name` when `dir` is empty.
    fn push_joined(&mut self, dir: &str, name: &str) {
        if !dir.is_empty() {
            self.text.push_str(dir);
            self.text.push('/');
        }
        self.text.push_str(name);
        self.ends.push(self.text.len() as u64);
    }
}
