//! `nostall.audio`: the operators of an audio pipeline as Python objects, as
//! `nostall.ops` holds those of images.
//!
//! Each class converts its arguments (torchaudio's names and defaults) into one
//! [`AudioOp`], which the engine checks ([`AudioOp::validate`]) when the object is made;
//! the base class holds that value. Their order and how they fit together (a crop is
//! required, `MelSpectrogram` at the resampled rate) are checked when a `Loader` is made.
//! The classes are registered in the extension module under names that do not clash
//! with the image operators (`AudioOp`, `AudioCenterCrop`); `nostall.audio` gives them
//! their own names.

use nostall::prep::audio::{AudioOp, MelArgs, ResampleQuality};
use pyo3::prelude::*;
use pyo3::{PyClass, PyClassInitializer};

use crate::raise;

/// An operator of an audio pipeline: the base class of the operators of
/// `nostall.audio`.
///
/// Operators are made by their subclasses and cannot be changed once made; a list of
/// them is the `pipeline` of a `nostall.Loader`. Two operators are equal when they do the
/// same thing.
#[pyclass(module = "nostall.audio", name = "Op", subclass, frozen, eq)]
#[derive(PartialEq)]
pub struct AudioOpBase(pub AudioOp);

/// A new operator of class `T` doing `op`, once the engine accepts `op`.
fn make<T>(py: Python<'_>, op: AudioOp, operator: T) -> PyResult<PyClassInitializer<T>>
where
    T: PyClass<BaseType = AudioOpBase>,
{
    op.validate().map_err(|e| raise(py, e))?;
    Ok(PyClassInitializer::from(AudioOpBase(op)).add_subclass(operator))
}

#[pymethods]
impl AudioOpBase {
    fn __repr__(&self) -> String {
        self.0.to_string()
    }
}

/// Keeps `count` channels: 1 mixes every file to mono (the mean of its channels, as
/// `waveform.mean(dim=0)`); more keeps that many and refuses files with another count.
#[pyclass(module = "nostall.audio", extends = AudioOpBase, frozen, get_all)]
pub struct Channels {
    /// Channels kept.
    count: usize,
}

#[pymethods]
impl Channels {
    #[new]
    #[pyo3(signature = (count=1))]
    fn new(py: Python<'_>, count: usize) -> PyResult<PyClassInitializer<Self>> {
        make(py, AudioOp::Channels(count), Channels { count })
    }
}

/// Resamples to `rate` Hz with torchaudio's band-limited sinc interpolation
/// (`torchaudio.functional.resample`, same parameters and defaults); files already at
/// `rate` pass unchanged.
#[pyclass(module = "nostall.audio", extends = AudioOpBase, frozen, get_all)]
pub struct Resample {
    /// Target rate, Hz.
    rate: u32,
    /// Zero crossings of the sinc kept on each side.
    lowpass_filter_width: u32,
    /// Cut-off as a fraction of the lower Nyquist frequency.
    rolloff: f64,
    /// `"sinc_interp_hann"` or `"sinc_interp_kaiser"`.
    resampling_method: String,
    /// The Kaiser window's shape (with `"sinc_interp_kaiser"`).
    beta: Option<f64>,
}

#[pymethods]
impl Resample {
    #[new]
    #[pyo3(signature = (
        rate, lowpass_filter_width=6, rolloff=0.99, resampling_method="sinc_interp_hann",
        beta=None
    ))]
    fn new(
        py: Python<'_>,
        rate: u32,
        lowpass_filter_width: u32,
        rolloff: f64,
        resampling_method: &str,
        beta: Option<f64>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let quality =
            ResampleQuality::torchaudio(lowpass_filter_width, rolloff, resampling_method, beta)
                .map_err(|e| raise(py, e))?;
        let operator = Resample {
            rate,
            lowpass_filter_width,
            rolloff,
            resampling_method: resampling_method.to_string(),
            beta,
        };
        make(py, AudioOp::Resample { rate, quality }, operator)
    }
}

/// A random window of `length` samples (at the output rate), chosen from the seed, the
/// epoch and the sample; shorter clips are padded with zeros at the end.
#[pyclass(module = "nostall.audio", extends = AudioOpBase, frozen, get_all)]
pub struct RandomCrop {
    /// Samples kept.
    length: usize,
}

#[pymethods]
impl RandomCrop {
    #[new]
    fn new(py: Python<'_>, length: usize) -> PyResult<PyClassInitializer<Self>> {
        make(py, AudioOp::RandomCrop { length }, RandomCrop { length })
    }
}

/// The middle `length` samples (for evaluation); shorter clips are padded with zeros at
/// the end.
#[pyclass(module = "nostall.audio", name = "CenterCrop", extends = AudioOpBase, frozen, get_all)]
pub struct AudioCenterCrop {
    /// Samples kept.
    length: usize,
}

#[pymethods]
impl AudioCenterCrop {
    #[new]
    fn new(py: Python<'_>, length: usize) -> PyResult<PyClassInitializer<Self>> {
        make(
            py,
            AudioOp::CenterCrop { length },
            AudioCenterCrop { length },
        )
    }
}

/// A mel spectrogram of the crop, `[n_mels, frames]`, as
/// `torchaudio.transforms.MelSpectrogram` computes it (Hann window, centred frames with
/// reflect padding), with its parameters and defaults. `sample_rate` must be the rate
/// of a `Resample` before it.
#[pyclass(module = "nostall.audio", extends = AudioOpBase, frozen, get_all)]
pub struct MelSpectrogram {
    /// Sample rate of the input, Hz.
    sample_rate: u32,
    /// FFT size.
    n_fft: usize,
    /// Window length.
    win_length: usize,
    /// Samples between frames.
    hop_length: usize,
    /// Lowest frequency of the filters, Hz.
    f_min: f64,
    /// Highest frequency of the filters, Hz.
    f_max: f64,
    /// Mel bands.
    n_mels: usize,
    /// 2 for power, 1 for magnitude.
    power: f64,
    /// `"slaney"` (filters of equal area) or `None`.
    norm: Option<String>,
    /// `"htk"` or `"slaney"`.
    mel_scale: String,
}

#[pymethods]
impl MelSpectrogram {
    #[new]
    #[pyo3(signature = (
        sample_rate=16000, n_fft=400, win_length=None, hop_length=None, f_min=0.0,
        f_max=None, n_mels=128, power=2.0, norm=None, mel_scale="htk"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        sample_rate: u32,
        n_fft: usize,
        win_length: Option<usize>,
        hop_length: Option<usize>,
        f_min: f64,
        f_max: Option<f64>,
        n_mels: usize,
        power: f64,
        norm: Option<String>,
        mel_scale: &str,
    ) -> PyResult<PyClassInitializer<Self>> {
        let spec = MelArgs {
            sample_rate,
            n_fft,
            win_length,
            hop_length,
            f_min,
            f_max,
            n_mels,
            power,
            norm: norm.as_deref(),
            mel_scale,
        }
        .spec()
        .map_err(|e| raise(py, e))?;
        let operator = MelSpectrogram {
            sample_rate,
            n_fft,
            win_length: spec.win_length,
            hop_length: spec.hop_length,
            f_min,
            f_max: spec.f_max,
            n_mels,
            power,
            norm,
            mel_scale: mel_scale.to_string(),
        };
        make(py, AudioOp::MelSpectrogram(spec), operator)
    }
}

/// `ln(x + offset)` of every value of a `MelSpectrogram` before it (`offset` keeps
/// silence finite).
#[pyclass(module = "nostall.audio", extends = AudioOpBase, frozen, get_all)]
pub struct Log {
    /// Added before the logarithm.
    offset: f32,
}

#[pymethods]
impl Log {
    #[new]
    #[pyo3(signature = (offset=1e-6))]
    fn new(py: Python<'_>, offset: f32) -> PyResult<PyClassInitializer<Self>> {
        make(py, AudioOp::Log { offset }, Log { offset })
    }
}

/// Adds the operator classes to the extension module (`nostall.audio` re-exports them
/// under their own names).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AudioOp", py.get_type::<AudioOpBase>())?;
    m.add_class::<Channels>()?;
    m.add_class::<Resample>()?;
    m.add_class::<RandomCrop>()?;
    m.add("AudioCenterCrop", py.get_type::<AudioCenterCrop>())?;
    m.add_class::<MelSpectrogram>()?;
    m.add_class::<Log>()?;
    Ok(())
}
