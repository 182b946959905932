//! The audio operators, each declared once, in its own file.
//!
//! An operator's file holds everything about it: its [`Declaration`] (name, parameters
//! with their kinds and defaults, the docs Python shows, and how the arguments are
//! checked and read), and the type that does the work, an [`Operator`], which says where
//! in a sample's preparation it runs ([`Stage`]). Everything else reads the declarations
//! in [`DECLARATIONS`]: the pipeline ([`AudioPipeline`](super::AudioPipeline)) checks how
//! the stages fit and runs them, the text form ([`crate::prep::notation`]) reads and writes
//! calls, the Python bindings make one class of `nostall.audio` per declaration and its
//! stubs are generated from them. Adding an audio operator is its file, its line in
//! [`DECLARATIONS`], its test and its line in docs/audio.md (a stage of a new kind is the
//! pipeline's to run as well).
//!
//! The stages, in the order a pipeline takes them:
//!
//! - [`Stage::Channels`], [`Stage::Resample`], a crop ([`Stage::RandomCrop`] or
//!   [`Stage::CenterCrop`], required: it fixes the length), [`Stage::MelSpectrogram`],
//!   [`Stage::Log`]: each at most once, planned together (the crop is placed before
//!   decoding, and only its samples are decoded and resampled; `Log` is folded into the
//!   spectrogram).
//! - [`Stage::Spectrogram`]: any number, after `MelSpectrogram` (and `Log`), on the
//!   spectrogram as delivered, in the order written (SpecAugment's masks).
//!
//! A function of the caller's ([`Stage::User`]) runs after the crop: on the cut waveform
//! where `MelSpectrogram` follows it, else on the sample as delivered.

mod center_crop;
mod channels;
mod frequency_masking;
mod log;
mod masking;
mod mel_spectrogram;
mod python;
mod random_crop;
mod resample;
mod time_masking;

use std::fmt;
use std::sync::Arc;

use super::{MelSpec, ResampleQuality};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Handle, Operation, Param, Value};
use crate::rng::Rng;
use crate::user_code::function::UserOp;

/// Every audio operator, in the order the docs list them.
pub static DECLARATIONS: &[&Declaration] = &[
    &channels::DECLARATION,
    &resample::DECLARATION,
    &random_crop::DECLARATION,
    &center_crop::DECLARATION,
    &mel_spectrogram::DECLARATION,
    &log::DECLARATION,
    &frequency_masking::DECLARATION,
    &time_masking::DECLARATION,
];

/// An audio operator's declaration: what Python, the text form and the docs know of it.
pub type Declaration = crate::prep::args::Declaration<AudioOp>;

/// What an operator does and when: the trait each operator's type implements.
pub(crate) trait Operator: Send + Sync + 'static {
    /// Its declaration.
    fn declaration(&self) -> &'static Declaration;

    /// Its arguments, one per parameter in the declaration's order, as its call would
    /// give them (what it is written as, compared by, and shown to Python as).
    fn args(&self) -> Vec<Value>;

    /// Where it runs, and with what.
    fn stage(&self) -> Stage<'_>;
}

/// Where in a sample's preparation an operator runs (see the module doc).
///
/// Its `Debug` is what the pipeline's fingerprint is made of: the variants and fields are
/// those the operators had as an enum before they were declared, so that a state saved
/// then still resumes.
#[derive(Debug)]
pub(crate) enum Stage<'a> {
    /// `1`: mix every file to mono. More: keep that many channels, and refuse files with
    /// another count.
    Channels(usize),
    /// Resample to `rate` Hz with `quality`'s filter.
    Resample {
        /// Target rate, Hz.
        rate: u32,
        /// The filter.
        quality: ResampleQuality,
    },
    /// A random window of `length` samples.
    RandomCrop {
        /// Samples kept.
        length: usize,
    },
    /// The middle `length` samples.
    CenterCrop {
        /// Samples kept.
        length: usize,
    },
    /// A mel spectrogram of the crop.
    MelSpectrogram(&'a MelSpec),
    /// `ln(x + offset)` of every value of the spectrogram.
    Log {
        /// Added before the logarithm.
        offset: f32,
    },
    /// On the spectrogram as delivered.
    Spectrogram(&'a dyn Spectral),
    /// The caller's function.
    User(&'a UserOp),
}

/// An operator on the spectrogram as delivered (after `MelSpectrogram`, and `Log` where
/// the pipeline has one).
pub(crate) trait Spectral: fmt::Debug + Send + Sync {
    /// Whether it fits spectrograms of `mels` bands by `frames` frames.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the operator and the parameter that does not fit.
    fn check(&self, mels: usize, frames: usize) -> Result<()>;

    /// Changes `spectrogram` in place, drawing from `rng` (a generator of its own, keyed
    /// by the sample and the operator's place in the pipeline).
    fn apply(&self, spectrogram: &mut Spectrogram<'_>, rng: &mut Rng);
}

/// One sample's spectrograms as delivered: `channels` of `mels` rows (bands) of `frames`
/// values each, one after another.
#[derive(Debug)]
pub(crate) struct Spectrogram<'a> {
    /// The values.
    pub values: &'a mut [f32],
    /// Channels (1 for a mono sample, delivered as `[mels, frames]`).
    pub channels: usize,
    /// Mel bands: rows of a channel.
    pub mels: usize,
    /// Frames: values of a row.
    pub frames: usize,
}

/// An audio operator: a shared handle to one checked [`Operator`] (see [`Handle`]). How
/// it fits among others is [`AudioPipeline::new`](super::AudioPipeline::new)'s to check.
pub type AudioOp = Handle<Shared>;

/// An audio operator as its handle ([`AudioOp`]) holds it: any of them, shared.
#[derive(Clone)]
pub struct Shared(Arc<dyn Operator>);

impl Operation for Shared {
    const MODALITY: &'static str = "audio";

    fn declarations() -> &'static [&'static Declaration] {
        DECLARATIONS
    }

    fn declared(&self) -> &'static Declaration {
        self.0.declaration()
    }

    fn values(&self) -> Vec<Value> {
        self.0.args()
    }

    /// Those at the end that are `None`, their default (`Resample`'s `beta` with the Hann
    /// window, which takes none): the audio operators' text as it has always been written.
    fn unwritten(args: &[(&'static str, Value)], params: &[Param]) -> usize {
        args.iter()
            .zip(params)
            .rev()
            .take_while(|((_, value), param)| {
                *value == Value::None && param.default == Some("None")
            })
            .count()
    }
}

impl AudioOp {
    pub(crate) fn new(operator: impl Operator) -> AudioOp {
        Handle(Shared(Arc::new(operator)))
    }

    pub(crate) fn stage(&self) -> Stage<'_> {
        self.0 .0.stage()
    }
}

/// A count or a size as an int argument (saturating: those read from arguments fit).
fn int(v: usize) -> Value {
    Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

/// A crop of `length` samples: `RandomCrop` when `random`, else `CenterCrop` (the two
/// differ only in where their window lies).
struct Crop {
    length: usize,
    random: bool,
}

impl Crop {
    /// The crop `args` make, its `length` checked: between 1 and 2^28 samples.
    fn build(args: &Args, random: bool) -> Result<AudioOp> {
        let length = args.int("length")?;
        if !(1..=1 << 28).contains(&length) {
            return Err(Error::Config(format!(
                "{}({length}): keep between 1 and 2^28 samples",
                args.operator()
            )));
        }
        Ok(AudioOp::new(Crop { length, random }))
    }
}

impl Operator for Crop {
    fn declaration(&self) -> &'static Declaration {
        if self.random {
            &random_crop::DECLARATION
        } else {
            &center_crop::DECLARATION
        }
    }

    fn args(&self) -> Vec<Value> {
        vec![int(self.length)]
    }

    fn stage(&self) -> Stage<'_> {
        let length = self.length;
        if self.random {
            Stage::RandomCrop { length }
        } else {
            Stage::CenterCrop { length }
        }
    }
}
