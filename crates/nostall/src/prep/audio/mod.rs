//! Audio: WAV, FLAC, Ogg Vorbis, Ogg Opus and MP3 decoded, mixed or kept by channel,
//! resampled, cropped to a fixed length, and optionally turned into a log-mel
//! spectrogram.
//!
//! Like the image operators, the audio operators are planned rather than applied one by
//! one: the crop is chosen on the resampled timeline, and only the samples it keeps are
//! resampled (a 30 s clip cropped to 4 s costs 4 s of filtering). Output is f32,
//! `[channels, samples]` for waveforms, `[n_mels, frames]` for a mono spectrogram
//! (`[channels, n_mels, frames]` otherwise).
//!
//! Random crops and masks draw from the sample's generator, seeded by (seed, epoch, sample
//! id), so the same sample gets the same crop and masks whatever thread prepares it. Definitions
//! follow torchaudio's (`functional.resample`, `transforms.MelSpectrogram`,
//! `FrequencyMasking`, `TimeMasking`); the presets are the data-stall paper's M5 input and
//! a common sound-classification log-mel input.
//!
//! The operators are declared in [`op`], one file each: adding one is its file, its line
//! in [`op::DECLARATIONS`], its test and its line in docs/audio.md.

mod decode;
mod mel;
pub mod op;
mod resample;

use std::collections::HashMap;

use decode::{decode, DecodeOptions};
pub(crate) use decode::{
    flac_find_sync, flac_frame_header, frame_at, wav_data_layout, FlacStreamInfo, Part, Segment,
    Waveform, ENVELOPE, MAX_RECORDING_SECONDS, OPUS_PREROLL,
};
use mel::Mel;

pub use mel::{MelArgs, MelScale, MelSpec};
pub use op::{AudioOp, Declaration, DECLARATIONS};
use op::{Spectrogram, Stage};
pub(crate) use resample::Resampler;
pub use resample::{ResampleQuality, ResampleWindow};

use super::{DType, Modality, Prep, Prepared, Preparer, SampleLayout};
use crate::error::{Cause, Error, Result};
use crate::rng::{derive, Rng};
use crate::user_code::function::{UserOp, UserSample};

/// Files lasting longer are refused unless the pipeline says otherwise: an hour-long
/// recording in a dataset of clips is a mistake, and decoding it holds the whole of it.
pub const DEFAULT_MAX_SECONDS: u32 = 600;

/// The most values a sample's spectrogram puts through the FFT, over its frames and
/// channels: its work, which its size does not bound (a hop of 1 sample makes a frame of
/// `n_fft` values for each sample of the crop). The longest crop, 2^28 samples, of one
/// channel at a hop of half `n_fft` takes half of it; the log-mel presets take 160 400.
const MAX_TRANSFORMED: usize = 1 << 30;

/// How a clip is cut to the output length.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Crop {
    Random,
    Center,
}

/// A validated list of audio operators with a fixed output shape.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioPipeline {
    ops: Vec<AudioOp>,
    channels: usize,
    rate: Option<(u32, ResampleQuality)>,
    crop: Crop,
    length: usize,
    mel: Option<MelSpec>,
    log_offset: Option<f32>,
    max_seconds: u32,
    /// The caller's functions on the waveform, each with its place in `ops`.
    on_waveform: Vec<(usize, UserOp)>,
    /// What runs on the sample as delivered, in the order written, each with its place:
    /// the caller's functions there and the operators on the spectrogram.
    on_sample: Vec<(usize, AudioOp)>,
}

/// Where a stage goes in a pipeline's order, and whether it may come more than once.
fn order(stage: &Stage<'_>) -> (usize, bool) {
    match stage {
        Stage::Channels(_) => (0, false),
        Stage::Resample { .. } => (1, false),
        Stage::RandomCrop { .. } | Stage::CenterCrop { .. } => (2, false),
        Stage::MelSpectrogram(_) => (3, false),
        Stage::Log { .. } => (4, false),
        Stage::Spectrogram(_) => (5, true),
        Stage::User(_) => unreachable!("a function's place is checked on its own"),
    }
}

impl AudioPipeline {
    /// Checks the operators: their order, that a crop fixes the length, and how each fits
    /// the others (each one's own parameters were checked when it was made).
    pub fn new(ops: Vec<AudioOp>) -> Result<AudioPipeline> {
        let mut pipeline = AudioPipeline {
            ops: ops.clone(),
            channels: 1,
            rate: None,
            crop: Crop::Random,
            length: 0,
            mel: None,
            log_offset: None,
            max_seconds: DEFAULT_MAX_SECONDS,
            on_waveform: Vec::new(),
            on_sample: Vec::new(),
        };
        let mel_at = ops
            .iter()
            .position(|op| matches!(op.stage(), Stage::MelSpectrogram(_)));
        let mut last: Option<&AudioOp> = None;
        for (place, op) in ops.iter().enumerate() {
            let stage = op.stage();
            if let Stage::User(f) = stage {
                if pipeline.length == 0 {
                    return Err(Error::Config(format!(
                        "Python({}) before the crop: a function of yours runs on the cut \
                         waveform or the sample as delivered, so write it after RandomCrop \
                         or CenterCrop",
                        f.name()
                    )));
                }
                let log_after = ops[place..]
                    .iter()
                    .any(|op| matches!(op.stage(), Stage::Log { .. }));
                match mel_at {
                    Some(mel) if place < mel => pipeline.on_waveform.push((place, f.clone())),
                    Some(_) if log_after => {
                        return Err(Error::Config(format!(
                            "Python({}) between MelSpectrogram and Log: Log is folded into the \
                             spectrogram, so write the function before MelSpectrogram (the \
                             waveform) or after Log (the sample as delivered)",
                            f.name()
                        )))
                    }
                    _ => pipeline.on_sample.push((place, op.clone())),
                }
                continue;
            }
            let (at, repeats) = order(&stage);
            if let Some(previous) = last.filter(|p| {
                let (before, _) = order(&p.stage());
                before > at || (before == at && !repeats)
            }) {
                return Err(Error::Config(format!(
                    "{} after {}: audio operators go in the order Channels, Resample, a crop \
                     (RandomCrop or CenterCrop), MelSpectrogram, Log, each at most once, then \
                     those on the spectrogram (the masks), any number",
                    op.name(),
                    previous.name()
                )));
            }
            last = Some(op);
            match stage {
                Stage::Channels(n) => pipeline.channels = n,
                Stage::Resample { rate, quality } => pipeline.rate = Some((rate, quality)),
                Stage::RandomCrop { length } => pipeline.length = length,
                Stage::CenterCrop { length } => {
                    pipeline.length = length;
                    pipeline.crop = Crop::Center;
                }
                Stage::MelSpectrogram(spec) => {
                    let Some((rate, _)) = pipeline.rate else {
                        return Err(Error::Config(
                            "MelSpectrogram needs a Resample before it: the spectrogram's \
                             bands depend on the sample rate, which must be the same for \
                             every file"
                                .into(),
                        ));
                    };
                    if spec.sample_rate != rate {
                        return Err(Error::Config(format!(
                            "MelSpectrogram is set for {} Hz but the audio is resampled to \
                             {rate} Hz",
                            spec.sample_rate
                        )));
                    }
                    spec.validate(pipeline.length)?;
                    pipeline.mel = Some(*spec);
                }
                Stage::Log { offset } => {
                    if pipeline.mel.is_none() {
                        return Err(Error::Config(
                            "Log applies to a MelSpectrogram: put one before it".into(),
                        ));
                    }
                    pipeline.log_offset = Some(offset);
                }
                Stage::Spectrogram(spectral) => {
                    let Some(mel) = &pipeline.mel else {
                        return Err(Error::Config(format!(
                            "{} applies to a spectrogram: put a MelSpectrogram before it",
                            op.name()
                        )));
                    };
                    spectral.check(mel.n_mels, mel.frames(pipeline.length))?;
                    pipeline.on_sample.push((place, op.clone()));
                }
                Stage::User(_) => unreachable!("taken above"),
            }
        }
        if pipeline.length == 0 {
            return Err(Error::Config(
                "the output length varies with the file: add RandomCrop or CenterCrop so \
                 that samples can be batched"
                    .into(),
            ));
        }
        if let Some(mel) = &pipeline.mel {
            let transformed = pipeline.channels * mel.frames(pipeline.length) * mel.n_fft;
            if transformed > MAX_TRANSFORMED {
                return Err(Error::Config(format!(
                    "MelSpectrogram: {} frames of n_fft {} over {} channels put {transformed} \
                     values through the FFT a sample, more than the 2^30 a sample may: take \
                     a longer hop_length, a smaller n_fft or a shorter crop",
                    mel.frames(pipeline.length),
                    mel.n_fft,
                    pipeline.channels
                )));
            }
        }
        Ok(pipeline)
    }

    /// The names [`AudioPipeline::preset`] knows.
    pub const PRESETS: [&'static str; 4] = ["m5", "melspec", "m5-val", "melspec-val"];

    /// A preset by name: `"m5"` (the data-stall paper's M5 input: mono, 8 kHz, a random
    /// 32 000-sample crop), `"melspec"` (mono, 16 kHz, a random 4 s crop, 64 log-mel bands
    /// of 25 ms windows every 10 ms), and their evaluation forms `"m5-val"` and
    /// `"melspec-val"` (centre crops).
    pub fn preset(name: &str) -> Result<AudioPipeline> {
        let (base, crop) = match name.strip_suffix("-val") {
            Some(base) => (base, Crop::Center),
            None => (name, Crop::Random),
        };
        let crop = |length| match crop {
            Crop::Random => AudioOp::random_crop(length),
            Crop::Center => AudioOp::center_crop(length),
        };
        let ops = match base {
            "m5" => vec![AudioOp::channels(1), AudioOp::resample(8_000), crop(32_000)],
            "melspec" => vec![
                AudioOp::channels(1),
                AudioOp::resample(16_000),
                crop(64_000),
                AudioOp::mel_spectrogram(MelSpec {
                    n_fft: 400,
                    win_length: 400,
                    hop_length: 160,
                    n_mels: 64,
                    ..MelSpec::new(16_000)
                }),
                AudioOp::log(1e-6),
            ],
            _ => {
                return Err(Error::Config(format!(
                    "unknown audio preset {name:?}: use \"m5\" or \"melspec\" (or their \
                     \"-val\" forms)"
                )))
            }
        };
        AudioPipeline::new(ops)
    }

    /// Refuses files lasting more than `max_seconds`, instead of [`DEFAULT_MAX_SECONDS`].
    pub fn with_max_seconds(mut self, max_seconds: u32) -> AudioPipeline {
        self.max_seconds = max_seconds;
        self
    }

    /// The operators.
    pub fn ops(&self) -> &[AudioOp] {
        &self.ops
    }

    /// Shape of one sample: `[channels, samples]`, or `[n_mels, frames]` (mono) and
    /// `[channels, n_mels, frames]` with a spectrogram.
    pub fn sample_shape(&self) -> Vec<usize> {
        match &self.mel {
            None => vec![self.channels, self.length],
            Some(mel) if self.channels == 1 => vec![mel.n_mels, mel.frames(self.length)],
            Some(mel) => vec![self.channels, mel.n_mels, mel.frames(self.length)],
        }
    }
}

/// As a person would write it down, e.g. `Mono → Resample(8000 Hz) → RandomCrop(32000),
/// float32 [1, 32000]`.
impl std::fmt::Display for AudioPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                f.write_str(" → ")?;
            }
            match op.stage() {
                Stage::Channels(1) => f.write_str("Mono")?,
                Stage::Channels(n) => write!(f, "Channels({n})")?,
                Stage::Resample { rate, quality } if quality == ResampleQuality::default() => {
                    write!(f, "Resample({rate} Hz)")?
                }
                Stage::Resample { rate, quality } => write!(f, "Resample({rate} Hz, {quality:?})")?,
                Stage::RandomCrop { length } => write!(f, "RandomCrop({length})")?,
                Stage::CenterCrop { length } => write!(f, "CenterCrop({length})")?,
                Stage::MelSpectrogram(m) => write!(
                    f,
                    "MelSpectrogram({} mels, n_fft {}, hop {})",
                    m.n_mels, m.n_fft, m.hop_length
                )?,
                Stage::Log { offset } => write!(f, "Log(+{offset})")?,
                Stage::Spectrogram(_) => write!(f, "{op}")?,
                Stage::User(user) => write!(f, "Python({})", user.name())?,
            }
        }
        write!(f, ", float32 {:?}", self.sample_shape())
    }
}

/// The audio modality.
impl Prep for AudioPipeline {
    fn modality(&self) -> Modality {
        Modality::Audio
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(self.sample_shape(), DType::F32)
    }

    fn fingerprint(&self) -> String {
        let stages: Vec<_> = self.ops.iter().map(AudioOp::stage).collect();
        format!("audio {stages:?}")
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(AudioPreparer {
            mel: self.mel.map(Mel::new),
            pipeline: self.clone(),
            wave: Waveform::default(),
            resamplers: HashMap::new(),
            crop: Vec::new(),
            waveform: Vec::new(),
        }))
    }
}

/// Decodes `data` in full, every channel at its own rate (the decode-only floor).
pub(crate) fn decode_all(data: &[u8], wave: &mut Waveform) -> Result<(), Cause> {
    let options = DecodeOptions {
        mono: false,
        max_seconds: DEFAULT_MAX_SECONDS,
    };
    decode(data, options, None, wave)
}

/// Resamplers kept per source rate; datasets hold a handful of rates, a hostile one may
/// hold many.
const KEPT_RESAMPLERS: usize = 16;
/// The filter taps kept over all source rates (64 MB of f32): a rate coprime to the
/// target's needs a phase per output sample of the cycle (a 768 kHz file resampled to
/// 8 kHz, 9 million taps), so a dataset of odd rates is bounded by size, not only count.
const KEPT_TAPS: usize = 16 << 20;

/// The resampler from `from` to `to` Hz, made once per source rate.
fn resampler(
    kept: &mut HashMap<u32, Resampler>,
    from: u32,
    to: u32,
    quality: ResampleQuality,
) -> &Resampler {
    if !kept.contains_key(&from)
        && (kept.len() >= KEPT_RESAMPLERS
            || kept.values().map(Resampler::taps).sum::<usize>() > KEPT_TAPS)
    {
        kept.clear();
    }
    kept.entry(from)
        .or_insert_with(|| Resampler::new(from, to, quality))
}

/// Per-thread state: decoded audio, resampling filters, the spectrogram's FFT.
struct AudioPreparer {
    pipeline: AudioPipeline,
    wave: Waveform,
    resamplers: HashMap<u32, Resampler>,
    mel: Option<Mel>,
    /// The crop of one channel at the output rate.
    crop: Vec<f32>,
    /// Every channel's crop, for the caller's functions on the waveform.
    waveform: Vec<f32>,
}

impl Preparer for AudioPreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let pipeline = &self.pipeline;
        let sample = rng.clone();
        let options = DecodeOptions {
            mono: pipeline.channels == 1,
            max_seconds: pipeline.max_seconds,
        };
        let length = pipeline.length;
        let resamplers = &mut self.resamplers;
        // Once the decoder knows the rate and length: where the crop lies, and so which
        // frames to decode.
        let mut crop_start = 0;
        let mut plan = |rate: u32, frames: u64| {
            let resampler = pipeline
                .rate
                .filter(|&(to, _)| to != rate)
                .map(|(to, quality)| resampler(resamplers, rate, to, quality));
            let frames = frames as usize;
            let total = resampler.map_or(frames, |r| r.output_len(frames));
            let spare = total.saturating_sub(length);
            crop_start = match pipeline.crop {
                Crop::Random if spare > 0 => rng.below(spare as u64 + 1) as usize,
                Crop::Random => 0,
                Crop::Center => spare / 2,
            };
            let window = crop_start..crop_start + length;
            let needed = match resampler {
                Some(r) => r.input_range(window, frames),
                None => window.start.min(frames)..window.end.min(frames),
            };
            needed.start as u64..needed.end as u64
        };
        let wave = &mut self.wave;
        decode(data, options, Some(&mut plan), wave)?;
        if wave.planes.len() != pipeline.channels {
            return Err(Cause::Corrupt(format!(
                "it has {} channels, and the pipeline keeps {} (use Channels(1) to mix \
                 any file to mono)",
                wave.planes.len(),
                pipeline.channels
            )));
        }
        let resampler = match pipeline.rate {
            Some((to, _)) if to != wave.rate => self.resamplers.get(&wave.rate),
            _ => None,
        };
        let (held_from, frames) = (wave.start as usize, wave.total as usize);
        let per_channel = out.len() / pipeline.channels;
        let whole = !pipeline.on_waveform.is_empty();
        if whole {
            self.waveform.resize(pipeline.channels * length, 0.0);
        }
        for (c, (plane, out)) in wave
            .planes
            .iter()
            .zip(out.chunks_exact_mut(per_channel))
            .enumerate()
        {
            self.crop.resize(length, 0.0);
            match resampler {
                Some(r) => r.run(plane, held_from, frames, crop_start, &mut self.crop),
                None => {
                    let kept = plane
                        .get(crop_start.saturating_sub(held_from)..)
                        .unwrap_or(&[]);
                    let n = kept.len().min(length);
                    self.crop[..n].copy_from_slice(&kept[..n]);
                    self.crop[n..].fill(0.0);
                }
            }
            if whole {
                self.waveform[c * length..(c + 1) * length].copy_from_slice(&self.crop);
            } else {
                finish_channel(&mut self.mel, pipeline.log_offset, &self.crop, out);
            }
        }
        if whole {
            let shape = [pipeline.channels, length];
            for (place, f) in &pipeline.on_waveform {
                let waveform = UserSample {
                    data: f32_bytes(&mut self.waveform),
                    shape: &shape,
                    dtype: DType::F32,
                };
                f.apply(waveform, user_seed(&sample, *place))?;
            }
            for (crop, out) in self
                .waveform
                .chunks_exact(length)
                .zip(out.chunks_exact_mut(per_channel))
            {
                finish_channel(&mut self.mel, pipeline.log_offset, crop, out);
            }
        }
        let shape = pipeline.sample_shape();
        for (place, op) in &pipeline.on_sample {
            match op.stage() {
                Stage::User(f) => {
                    let delivered = UserSample {
                        data: &mut *out,
                        shape: &shape,
                        dtype: DType::F32,
                    };
                    f.apply(delivered, user_seed(&sample, *place))?;
                }
                Stage::Spectrogram(spectral) => {
                    let mel = pipeline.mel.as_ref().expect("checked: a spectrogram");
                    let mut spectrogram = Spectrogram {
                        values: as_f32_mut(out),
                        channels: pipeline.channels,
                        mels: mel.n_mels,
                        frames: mel.frames(length),
                    };
                    spectral.apply(&mut spectrogram, &mut operator_rng(&sample, *place));
                }
                _ => unreachable!("only functions and spectrogram operators run on the sample"),
            }
        }
        Ok(Prepared::InSlot)
    }
}

/// Writes one channel's `crop` to `out`: as it is, or as its (log-)mel spectrogram.
fn finish_channel(mel: &mut Option<Mel>, log_offset: Option<f32>, crop: &[f32], out: &mut [u8]) {
    match mel {
        None => write_f32(crop, out),
        Some(mel) => {
            // The spectrogram goes through the output bytes' own f32 view when aligned;
            // batch slots are 64-byte aligned and sample sizes multiples of four bytes.
            let values = as_f32_mut(out);
            mel.run(crop, values);
            if let Some(offset) = log_offset {
                for v in values.iter_mut() {
                    *v = (*v + offset).ln();
                }
            }
        }
    }
}

/// The seed of the caller's function at `place`, for the sample whose generator before
/// any draw is `sample`.
fn user_seed(sample: &Rng, place: usize) -> u64 {
    sample.fork(derive(&[0x5553_4552, place as u64])).next_u64()
}

/// The generator of the operator at `place` (one on the spectrogram), for the sample
/// whose generator before any draw is `sample`: its own, so that its draws depend on
/// neither the crop's nor the other operators'.
fn operator_rng(sample: &Rng, place: usize) -> Rng {
    sample.fork(derive(&[0x5350_4543, place as u64]))
}

/// `values`' bytes.
fn f32_bytes(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: the bytes of f32 values are initialised, u8 has no alignment, and any bytes
    // written make valid f32 values; the slice borrows `values` for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), size_of_val(values)) }
}

/// Writes `values` as native-endian f32 bytes.
fn write_f32(values: &[f32], out: &mut [u8]) {
    for (bytes, v) in out.chunks_exact_mut(4).zip(values) {
        bytes.copy_from_slice(&v.to_ne_bytes());
    }
}

/// `bytes` as f32 values.
///
/// # Panics
///
/// If `bytes` is not 4-byte aligned or not a whole number of values.
fn as_f32_mut(bytes: &mut [u8]) -> &mut [f32] {
    // SAFETY: every bit pattern is a valid f32, and align_to_mut only yields the middle
    // part where the alignment holds; the assertion below requires it to be all of it.
    let (head, values, tail) = unsafe { bytes.align_to_mut::<f32>() };
    assert!(
        head.is_empty() && tail.is_empty(),
        "an output slot is not aligned for f32"
    );
    values
}

#[cfg(test)]
mod tests;
