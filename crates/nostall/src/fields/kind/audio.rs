//! An audio field: the audio track of the sample's video over each clip the video
//! pipeline drew, at the field's rate and channels, one fixed-length segment a clip.
//!
//! It is read from the video's own member, after the sample: the video preparer says
//! which span of the timeline each clip covers (its first frame's time to its last
//! frame's end), and `nostall-video` decodes the track over it at its own rate
//! ([`nostall_video::decode_audio`]: from the file's start, exact). The segment is then
//! resampled by the audio pipeline's resampler (torchaudio's, as `Resample` does), and
//! cut or padded with zeros to the field's length so that batches stack. Nothing is drawn:
//! the clips are those the sample already holds.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use nostall_video::{decode_audio, Span, VideoError};
use serde_json::{json, Map, Value};

use super::{Declaration, FieldKind, Kind, Role, Settings};
use crate::error::Cause;
use crate::prep::audio::{ResampleQuality, Resampler, Segment, DEFAULT_MAX_SECONDS};
use crate::sample::{DType, PartForm, SampleLayout};

/// Declared for no extension: it is read from the video's member, which the sample's
/// field is of.
pub(super) const DECLARATION: Declaration = Declaration {
    name: "audio",
    extensions: &[],
    settings: &["sample_rate", "channels", "length"],
    make,
};

/// The highest rate a field may ask for (the audio decoders' bound on a recording's).
const MAX_RATE: usize = 768_000;

/// The most channels a field keeps (`audio.Channels`').
const MAX_CHANNELS: usize = 64;

/// The most samples a clip's segment holds over its channels: what every sample of a
/// batch reserves for each of its clips.
const MAX_SEGMENT: usize = 1 << 24;

/// The most samples a channel of the track holds per clip at its own rate, before
/// resampling: the audio pipeline's longest recording at 48 kHz.
const MAX_TRACK_SAMPLES: u64 = DEFAULT_MAX_SECONDS as u64 * 48_000;

/// Resamplers kept per thread, by (source, target) rate.
const KEPT_RESAMPLERS: usize = 8;

thread_local! {
    /// The resamplers of this prep thread: made once per pair of rates (making one costs
    /// more than resampling a short clip with it).
    static RESAMPLERS: RefCell<HashMap<(u32, u32), Resampler>> = RefCell::new(HashMap::new());
}

#[derive(Debug)]
struct Audio {
    sample_rate: usize,
    channels: usize,
    length: usize,
}

impl FieldKind {
    /// The audio track of the sample's video over each of its clips: `channels` (1 mixes
    /// the track to mono, more keeps exactly that many) at `sample_rate` Hz, `length`
    /// samples a channel and a clip, as float32 `[channels, length]` (`[clips, channels,
    /// length]` for a sample of several clips). A video pipeline's field only.
    pub fn audio(sample_rate: usize, channels: usize, length: usize) -> FieldKind {
        FieldKind::of(Audio {
            sample_rate,
            channels,
            length,
        })
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    let sample_rate = settings.number("sample_rate")?.ok_or(
        "the audio is resampled to a fixed rate: give sample_rate= (Field(\"mp4\", \
         kind=\"audio\", sample_rate=16000, length=16000))",
    )?;
    let length = settings.number("length")?.ok_or(
        "the audio of a clip has a fixed length so that batches stack: give length=, the \
         samples a channel holds (a clip's seconds × sample_rate)",
    )?;
    let channels = settings.number("channels")?.unwrap_or(1);
    Ok(FieldKind::audio(sample_rate, channels, length))
}

impl Kind for Audio {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn role(&self) -> Role {
        Role::Spans
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        if !(1..=MAX_RATE).contains(&self.sample_rate) {
            return Err(format!(
                "sample_rate={} is out of bounds: use 1 to {MAX_RATE}",
                self.sample_rate
            ));
        }
        if !(1..=MAX_CHANNELS).contains(&self.channels) {
            return Err(format!(
                "channels={} is out of bounds: use 1 (mono) to {MAX_CHANNELS}",
                self.channels
            ));
        }
        if self.length == 0 || self.channels.saturating_mul(self.length) > MAX_SEGMENT {
            return Err(format!(
                "length={} is out of bounds: keep channels × length from 1 to {MAX_SEGMENT}",
                self.length
            ));
        }
        Ok(())
    }

    fn form(&self, sample: &SampleLayout) -> PartForm {
        // A video sample of several clips leads with them ([clips, T, C, H, W]).
        let mut shape = match sample.shape() {
            [clips, _, _, _, _] => vec![*clips],
            _ => Vec::new(),
        };
        shape.extend([self.channels, self.length]);
        PartForm::Tensor {
            shape,
            dtype: DType::F32,
        }
    }

    fn fingerprint(&self) -> String {
        format!(
            "audio {} Hz {} channels {}",
            self.sample_rate, self.channels, self.length
        )
    }

    fn prepare(&self, field: &str, _: &[u8], _: &mut [u8]) -> Result<(), Cause> {
        Err(Cause::Internal(format!(
            "field {field:?} follows the sample's clips and was prepared without them"
        )))
    }

    fn prepare_spanned(
        &self,
        field: &str,
        member: &[u8],
        spans: &[Span],
        slot: &mut [u8],
    ) -> Result<(), Cause> {
        let video = match Segment::read(member) {
            Some(read) => read?.1,
            None => member,
        };
        let segment = self.channels * self.length;
        if slot.len() != spans.len() * segment * 4 {
            return Err(Cause::Internal(format!(
                "field {field:?} holds {} bytes for {} clips",
                slot.len(),
                spans.len()
            )));
        }
        let mono = self.channels == 1;
        let max = self.channels as u64 * MAX_TRACK_SAMPLES;
        let mut out = vec![0.0f32; self.length];
        for (span, slot) in spans.iter().zip(slot.chunks_exact_mut(segment * 4)) {
            let audio = decode_audio(video, Some(span), mono, max).map_err(|e| cause(field, e))?;
            if audio.planes.len() != self.channels {
                return Err(Cause::Corrupt(format!(
                    "field {field:?}: the video's audio has {} channels, and the field keeps \
                     {} (channels=1 mixes any track to mono)",
                    audio.planes.len(),
                    self.channels
                )));
            }
            let to = self.sample_rate as u32;
            RESAMPLERS.with_borrow_mut(|kept| {
                if !kept.contains_key(&(audio.rate, to)) && kept.len() >= KEPT_RESAMPLERS {
                    kept.clear();
                }
                let resampler = kept
                    .entry((audio.rate, to))
                    .or_insert_with(|| Resampler::new(audio.rate, to, ResampleQuality::default()));
                for (plane, slot) in audio
                    .planes
                    .iter()
                    .zip(slot.chunks_exact_mut(self.length * 4))
                {
                    resampler.run(plane, 0, plane.len(), 0, &mut out);
                    for (bytes, value) in slot.chunks_exact_mut(4).zip(&out) {
                        bytes.copy_from_slice(&value.to_ne_bytes());
                    }
                }
            });
        }
        Ok(())
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        Map::from_iter([
            ("sample_rate".into(), json!(self.sample_rate)),
            ("channels".into(), json!(self.channels)),
            ("length".into(), json!(self.length)),
        ])
    }
}

/// Why the audio of a clip cannot be made, naming the field.
fn cause(field: &str, error: VideoError) -> Cause {
    match error {
        VideoError::NoAudio => {
            Cause::Corrupt(format!("field {field:?}: the video has no audio track"))
        }
        VideoError::Corrupt(what) => Cause::Corrupt(format!("field {field:?}: {what}")),
        other => crate::prep::video::cause(other),
    }
}
