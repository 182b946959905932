//! `MelSpectrogram`: the crop's mel spectrogram, as torchaudio's.

use super::{int, AudioOp, Declaration, Operator, Stage};
use crate::error::Result;
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::audio::{MelArgs, MelScale, MelSpec};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "MelSpectrogram",
    doc: "A mel spectrogram of the crop, `[n_mels, frames]`, as \
          `torchaudio.transforms.MelSpectrogram` computes it (Hann window, centred frames with \
          reflect padding), with its parameters and defaults. `sample_rate` must be the rate \
          of a `Resample` before it.",
    params: &[
        Param::with_default(
            "sample_rate",
            Kind::Int,
            "16000",
            "sample rate of the input, Hz",
        ),
        Param::with_default("n_fft", Kind::Int, "400", "FFT size, 2 to 65536"),
        Param::with_default(
            "win_length",
            Kind::DerivedInt,
            "None",
            "window length (`None`: `n_fft`)",
        ),
        Param::with_default(
            "hop_length",
            Kind::DerivedInt,
            "None",
            "samples between frames (`None`: `win_length // 2`)",
        ),
        Param::with_default(
            "f_min",
            Kind::Float,
            "0.0",
            "lowest frequency of the filters, Hz",
        ),
        Param::with_default(
            "f_max",
            Kind::DerivedFloat,
            "None",
            "highest frequency of the filters, Hz (`None`: the Nyquist frequency)",
        ),
        Param::with_default("n_mels", Kind::Int, "128", "mel bands, 1 to 1024"),
        Param::with_default(
            "power",
            Kind::Float,
            "2.0",
            "exponent of the magnitude: 2 for power, 1 for magnitude",
        ),
        Param::with_default(
            "norm",
            Kind::OptionalChoice,
            "None",
            "`'slaney'` (filters of equal area) or `None`",
        ),
        Param::with_default("mel_scale", Kind::Choice, "'htk'", "`'htk'` or `'slaney'`"),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    let spec = MelArgs {
        sample_rate: args.int("sample_rate")?,
        n_fft: args.int("n_fft")?,
        win_length: args.optional_int("win_length")?,
        hop_length: args.optional_int("hop_length")?,
        f_min: args.float("f_min")?,
        f_max: args.optional_float("f_max")?,
        n_mels: args.int("n_mels")?,
        power: args.float("power")?,
        norm: args.text("norm")?,
        mel_scale: args
            .text("mel_scale")?
            .ok_or_else(|| args.error("mel_scale", "takes a string, not None"))?,
    }
    .spec()?;
    // The crop's length is checked against n_fft in a pipeline.
    spec.validate(usize::MAX)?;
    Ok(AudioOp::new(MelSpectrogram(spec)))
}

struct MelSpectrogram(MelSpec);

impl Operator for MelSpectrogram {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        arguments(&self.0)
    }

    fn stage(&self) -> Stage<'_> {
        Stage::MelSpectrogram(&self.0)
    }
}

impl AudioOp {
    /// `MelSpectrogram` with the parameters of `spec`.
    ///
    /// # Panics
    ///
    /// When a parameter is out of its bounds.
    pub fn mel_spectrogram(spec: MelSpec) -> AudioOp {
        AudioOp::known("MelSpectrogram", arguments(&spec))
    }
}

/// The arguments of the spectrogram `spec`, as its call gives them (every one resolved).
fn arguments(spec: &MelSpec) -> Vec<Value> {
    vec![
        spec.sample_rate.into(),
        int(spec.n_fft),
        int(spec.win_length),
        int(spec.hop_length),
        spec.f_min.into(),
        spec.f_max.into(),
        int(spec.n_mels),
        spec.power.into(),
        spec.slaney_norm.then_some("slaney").into(),
        match spec.mel_scale {
            MelScale::Htk => "htk",
            MelScale::Slaney => "slaney",
        }
        .into(),
    ]
}
