//! `Resample`: to one rate, with torchaudio's band-limited sinc interpolation.

use super::{AudioOp, Declaration, Operator, Stage};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Kind, Param, Value};
use crate::prep::audio::{ResampleQuality, ResampleWindow};

pub(super) static DECLARATION: Declaration = Declaration {
    name: "Resample",
    doc: "Resamples to `rate` Hz with torchaudio's band-limited sinc interpolation \
          (`torchaudio.functional.resample`, same parameters and defaults); files already at \
          `rate` pass unchanged.",
    params: &[
        Param::required("rate", Kind::Int, "target rate, Hz (1 to 768 000)"),
        Param::with_default(
            "lowpass_filter_width",
            Kind::Int,
            "6",
            "zero crossings of the sinc kept on each side",
        ),
        Param::with_default(
            "rolloff",
            Kind::Float,
            "0.99",
            "cut-off as a fraction of the lower Nyquist frequency, in (0, 1]",
        ),
        Param::with_default(
            "resampling_method",
            Kind::Choice,
            "'sinc_interp_hann'",
            "`'sinc_interp_hann'` or `'sinc_interp_kaiser'`",
        ),
        Param::with_default(
            "beta",
            Kind::OptionalFloat,
            "None",
            "the Kaiser window's shape, with `'sinc_interp_kaiser'` (`None` there is \
             torchaudio's 14.769656459379492)",
        ),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<AudioOp> {
    let method = args
        .text("resampling_method")?
        .ok_or_else(|| args.error("resampling_method", "takes a string, not None"))?;
    let quality = ResampleQuality::torchaudio(
        args.int("lowpass_filter_width")?,
        args.float("rolloff")?,
        method,
        args.optional_float("beta")?,
    )?;
    let rate = args.int("rate")?;
    if !(1..=768_000).contains(&rate) {
        return Err(Error::Config(format!(
            "Resample({rate}): the rate must lie between 1 Hz and 768 kHz"
        )));
    }
    quality.validate()?;
    Ok(AudioOp::new(Resample { rate, quality }))
}

struct Resample {
    rate: u32,
    quality: ResampleQuality,
}

impl Operator for Resample {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        arguments(self.rate, self.quality)
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Resample {
            rate: self.rate,
            quality: self.quality,
        }
    }
}

impl AudioOp {
    /// `Resample(rate)` with the default filter.
    ///
    /// # Panics
    ///
    /// When `rate` is not between 1 Hz and 768 kHz.
    pub fn resample(rate: u32) -> AudioOp {
        AudioOp::resample_with(rate, ResampleQuality::default())
    }

    /// `Resample` to `rate` with `quality`'s filter.
    ///
    /// # Panics
    ///
    /// When `rate` is not between 1 Hz and 768 kHz, or `quality` is out of its bounds.
    pub fn resample_with(rate: u32, quality: ResampleQuality) -> AudioOp {
        AudioOp::known("Resample", arguments(rate, quality))
    }
}

/// The arguments of a resampling to `rate` with `quality`'s filter, as its call gives
/// them.
fn arguments(rate: u32, quality: ResampleQuality) -> Vec<Value> {
    let ResampleQuality {
        lowpass_width,
        rolloff,
        window,
    } = quality;
    let (method, beta) = match window {
        ResampleWindow::Hann => ("sinc_interp_hann", None),
        ResampleWindow::Kaiser { beta } => ("sinc_interp_kaiser", Some(beta)),
    };
    vec![
        rate.into(),
        lowpass_width.into(),
        rolloff.into(),
        method.into(),
        beta.into(),
    ]
}
