//! Long recordings cut into segments by a manifest: one sample per segment, each read for
//! the cost of its segment, not of its recording (audio), or whole with the segment's
//! times (video: the clip is drawn within them).
//!
//! Speech corpora keep hour-long recordings and a list of the stretches to train on
//! ([`manifest`]: JSON lines as NeMo writes them, or CSV). When the dataset is opened,
//! each recording is walked once ([`index`]) to find the bytes each of its segments needs
//! (WAV by arithmetic, FLAC by its frame headers, Ogg Opus by its pages; other formats
//! are read whole); a sample is then one ranged read of those bytes, behind the
//! recording's header and an envelope that says where the segment lies
//! (`prep::audio`'s `Segment`), so that the audio pipeline crops within the segment
//! and decodes only the crop's window, as it does for a clip.
//!
//! A recording that cannot be read when the dataset is opened fails each of its segments
//! with the reason, by the error policy, like any unreadable sample.

mod index;
mod manifest;

use std::collections::HashMap;
use std::sync::Arc;

pub(crate) use manifest::is_manifest;
use manifest::Label;

use super::blob::{read_range, read_ranges, BlobRange};
use super::record;
use super::{
    BlobInfo, BlobStore, NextRead, ReadDone, Served, Source, SourceStats, DEFAULT_MAX_BYTES,
};
use crate::catalog::Catalog;
use crate::error::{Cause, Result};
use crate::prep::audio::Segment;
use crate::sample::{Modality, SampleId};
use index::Stretch;

/// The segments of a manifest's recordings, read from a [`BlobStore`].
#[derive(Debug)]
pub struct Segments {
    store: Arc<dyn BlobStore>,
    catalog: Arc<Catalog>,
    /// Each sample's recording, by index into `recordings`.
    recording: Vec<u32>,
    recordings: Vec<Recording>,
    /// Each sample's bytes and where they lie.
    pieces: Vec<(Stretch, Segment)>,
    /// Each sample's transcript, when samples are read as records
    /// ([`Segments::from_manifest`]'s `records`).
    texts: Option<Vec<Option<Box<str>>>>,
    max_bytes: u64,
    served: Served,
}

/// A recording as the dataset was opened with it.
#[derive(Debug)]
struct Recording {
    key: String,
    version: Option<String>,
    /// Why it cannot be read, if it could not be when the dataset was opened.
    problem: Option<Cause>,
}

impl Segments {
    /// The segments listed by the manifest `name` (its bytes `text`), whose recordings
    /// are blobs of `store` keyed by the paths the manifest gives; `info` tells a
    /// recording's size and version (a file's metadata, an object's listing). Audio
    /// recordings are walked for each segment's bytes; a video is carried whole, its
    /// segment's times in the envelope.
    ///
    /// Labels are class numbers as given, or class names numbered in sorted order; every
    /// segment has one or none has.
    ///
    /// With `records`, each sample is read as a framed record ([`crate::storage::record`])
    /// of its segment (member `audio` or `video`, the modality's name) and, where its row
    /// has one, its transcript or caption (member `text`), for a loader given fields.
    ///
    /// # Errors
    ///
    /// When the manifest cannot be parsed (the error names its line), mixes class names
    /// and numbers, or labels some segments and not others.
    pub(crate) fn from_manifest(
        store: Arc<dyn BlobStore>,
        name: &str,
        text: &[u8],
        info: &dyn Fn(&str) -> std::result::Result<BlobInfo, Cause>,
        (modality, records): (Modality, bool),
    ) -> Result<Segments> {
        let rows = manifest::parse(name, text)?;
        let classes = classes(name, rows.iter().filter_map(|r| r.label.as_ref()))?;
        // Each recording once, with its segments in the manifest's order.
        let mut by_path: HashMap<&str, u32> = HashMap::new();
        let mut recordings: Vec<Recording> = Vec::new();
        let mut spans: Vec<Vec<(usize, index::Span)>> = Vec::new();
        let mut recording = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let r = *by_path.entry(&row.path).or_insert_with(|| {
                recordings.push(Recording {
                    key: row.path.clone(),
                    version: None,
                    problem: None,
                });
                spans.push(Vec::new());
                recordings.len() as u32 - 1
            });
            spans[r as usize].push((i, (row.start, row.duration)));
            recording.push(r);
        }
        let mut pieces: Vec<Option<(Stretch, Segment)>> = vec![None; rows.len()];
        for (recording, spans) in recordings.iter_mut().zip(&spans) {
            let found = info(&recording.key).and_then(|blob| {
                recording.version = blob.version;
                let at = (
                    recording.key.as_str(),
                    recording.version.as_deref(),
                    blob.size,
                );
                if modality == Modality::Video {
                    return Ok(vec![Stretch::whole(blob.size); spans.len()]);
                }
                let only: Vec<_> = spans.iter().map(|(_, span)| *span).collect();
                index::stretches(&*store, at, &only)
            });
            let stretches = found.unwrap_or_else(|cause| {
                recording.problem = Some(cause);
                vec![Stretch::unreadable(); spans.len()]
            });
            for (&(i, (start, duration)), stretch) in spans.iter().zip(stretches) {
                let segment = Segment {
                    start,
                    duration,
                    part: stretch.part,
                };
                pieces[i] = Some((stretch, segment));
            }
        }
        let pieces: Vec<_> = pieces.into_iter().map(|p| p.expect("each row")).collect();
        let member = modality.name();
        let samples = rows.iter().zip(&pieces).map(|(row, (stretch, _))| {
            let label = row.label.as_ref().map(|l| match l {
                Label::Number(n) => *n,
                Label::Name(name) => classes.binary_search(name).expect("listed") as u32,
            });
            let size = match (records, &row.text) {
                (false, _) => stretch.size(),
                (true, None) => record::frame_len([(member, stretch.size())]),
                (true, Some(text)) => {
                    record::frame_len([(member, stretch.size()), ("text", text.len() as u64)])
                }
            };
            (segment_name(row), label, size)
        });
        let root = store.root();
        let catalog =
            Catalog::from_samples(format!("{root}/{name}"), modality, classes.clone(), samples)?;
        Ok(Segments {
            store,
            catalog: Arc::new(catalog),
            recording,
            recordings,
            pieces,
            texts: records.then(|| {
                rows.into_iter()
                    .map(|row| row.text.map(String::into_boxed_str))
                    .collect()
            }),
            max_bytes: DEFAULT_MAX_BYTES,
            served: Served::default(),
        })
    }

    /// The segments, one sample each, named `path#t=start,end` (a media fragment).
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Refuses segments whose bytes exceed `limit` with [`Cause::TooLarge`], before
    /// reading them, instead of the default limit of [`DEFAULT_MAX_BYTES`].
    pub fn with_max_bytes(self, limit: u64) -> Segments {
        Segments {
            max_bytes: limit,
            ..self
        }
    }

    /// Where sample `id`'s body lies, or why its recording cannot be read.
    fn range(&self, id: SampleId) -> std::result::Result<BlobRange<'_>, Cause> {
        let recording = &self.recordings[self.recording[id as usize] as usize];
        if let Some(problem) = &recording.problem {
            return Err(problem.clone());
        }
        let stretch = &self.pieces[id as usize].0;
        if let Some(problem) = &stretch.problem {
            return Err(problem.clone());
        }
        // The sample's bytes, its header's with its body's, are what the limit bounds (a
        // header may hold a megabyte of tags).
        let bytes = stretch.size();
        if bytes > self.max_bytes {
            return Err(Cause::TooLarge {
                bytes,
                limit: self.max_bytes,
                field: None,
            });
        }
        let body = &stretch.body;
        Ok((
            &recording.key,
            recording.version.as_deref(),
            body.start,
            body.end - body.start,
        ))
    }

    /// Puts the envelope and the header in front of sample `id`'s body, read into `out`;
    /// for records, frames that with the transcript.
    fn wrap(&self, id: SampleId, out: &mut Vec<u8>) {
        let (stretch, segment) = &self.pieces[id as usize];
        let mut front = Vec::with_capacity((stretch.size() as usize).saturating_sub(out.len()));
        segment.write_envelope(&mut front);
        stretch.write_header(&mut front);
        out.splice(0..0, front);
        if let Some(texts) = &self.texts {
            let sample = std::mem::take(out);
            let member = self.catalog.modality().name();
            let mut members: Vec<(&str, &[u8])> = vec![(member, &sample)];
            if let Some(text) = &texts[id as usize] {
                members.push(("text", text.as_bytes()));
            }
            record::write_frame(&members, out);
        }
    }
}

impl Source for Segments {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> std::result::Result<(), Cause> {
        out.clear();
        let range = self.range(id)?;
        let count = |bytes| self.served.count(bytes);
        read_range(&*self.store, range, self.max_bytes, out, &count)?;
        self.wrap(id, out);
        Ok(())
    }

    fn read_each(&self, next: &mut NextRead<'_>, done: &mut ReadDone<'_>) {
        // The sample of each read, by the number the reads are given in.
        let ids = std::cell::RefCell::new(HashMap::new());
        let mut given = 0;
        let mut numbered = || {
            let (id, out) = next()?;
            ids.borrow_mut().insert(given, id);
            given += 1;
            Some((id, out))
        };
        let mut wrapped =
            |number: usize, mut out: Vec<u8>, result: std::result::Result<(), Cause>| {
                let id = ids
                    .borrow_mut()
                    .remove(&number)
                    .expect("numbered when given");
                if result.is_ok() {
                    self.wrap(id, &mut out);
                }
                done(number, out, result);
            };
        let count = |bytes| self.served.count(bytes);
        let range = |id| self.range(id);
        read_ranges(
            &*self.store,
            (&mut numbered, &mut wrapped),
            self.max_bytes,
            range,
            &count,
        );
    }

    fn reads_at_once(&self) -> usize {
        self.store.reads_at_once()
    }

    fn location(&self, id: SampleId) -> String {
        let name = self.catalog.relative_path(id);
        if name.starts_with('/') {
            name.to_string()
        } else {
            self.store.locate(name)
        }
    }

    fn stats(&self) -> SourceStats {
        self.served.stats()
    }
}

/// The class names in sorted order (empty when labels are numbers).
fn classes<'a>(name: &str, labels: impl Iterator<Item = &'a Label>) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    let mut numbers = false;
    for label in labels {
        match label {
            Label::Number(_) => numbers = true,
            Label::Name(n) => names.push(n.clone()),
        }
    }
    if numbers && !names.is_empty() {
        return Err(crate::error::Error::Config(format!(
            "{name}: some labels are class numbers and others names; give one kind"
        )));
    }
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// A segment's name: its recording's path with a media fragment, `a.flac#t=12.5,17.5`
/// (`#t=12.5` for one that runs to the end).
fn segment_name(row: &manifest::Row) -> String {
    match row.duration {
        Some(d) => format!("{}#t={},{}", row.path, row.start, row.start + d),
        None => format!("{}#t={}", row.path, row.start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalDir;

    #[test]
    fn a_segments_header_counts_in_the_sample_size_limit() {
        // The 48 kHz stereo WAV clip, and the same clip with a megabyte of tags (a `LIST`
        // chunk holding a comment) in front of its data.
        let clip = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/audio/wanderer.wav"
        ))
        .unwrap();
        let data = clip.windows(4).position(|w| w == b"data").unwrap();
        let mut tagged = clip[..36].to_vec();
        tagged.extend_from_slice(b"LIST");
        tagged.extend_from_slice(&1_000_012u32.to_le_bytes());
        tagged.extend_from_slice(b"INFOICMT");
        tagged.extend_from_slice(&1_000_000u32.to_le_bytes());
        tagged.resize(tagged.len() + 1_000_000, b'~');
        tagged.extend_from_slice(&clip[data..]);
        let riff = tagged.len() as u32 - 8;
        tagged[4..8].copy_from_slice(&riff.to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain.wav"), &clip).unwrap();
        std::fs::write(dir.path().join("tagged.wav"), &tagged).unwrap();
        let store = Arc::new(LocalDir::new(dir.path()).unwrap());
        let manifest = b"path,start,duration\nplain.wav,0.25,0.5\ntagged.wav,0.25,0.5\n";
        let info = |key: &str| store.info(key);
        let segments = Segments::from_manifest(
            store.clone(),
            "m.csv",
            manifest,
            &info,
            (Modality::Audio, false),
        )
        .unwrap()
        .with_max_bytes(500_000);
        // Half a second of audio is 96 000 bytes, under the limit; with the tags, over.
        let mut out = Vec::new();
        segments.read(0, &mut out).unwrap();
        assert_eq!(out.len() as u64, segments.catalog().size(0));
        let bytes = segments.catalog().size(1);
        assert!(bytes > 1_000_000, "{bytes}");
        assert_eq!(
            segments.read(1, &mut out),
            Err(Cause::TooLarge {
                bytes,
                limit: 500_000,
                field: None,
            })
        );
        // Within the limit, the tagged recording's segment reads whole.
        let segments = segments.with_max_bytes(bytes);
        segments.read(1, &mut out).unwrap();
        assert_eq!(out.len() as u64, bytes);
    }
}
