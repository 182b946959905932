//! Mel spectrograms with torchaudio's definition (`torchaudio.transforms.MelSpectrogram`):
//! a short-time Fourier transform of the centred, reflect-padded signal under a periodic
//! Hann window, its magnitude raised to `power`, and triangular mel filters (HTK or Slaney
//! scale, optionally Slaney-normalised) summing the bins.
//!
//! Computed in f64 and rounded once to f32: quiet bands, a millionth of a frame's loudest,
//! keep their relative precision (an f32 FFT's rounding is relative to the whole frame's
//! energy, which swamps them), at a cost far below decoding.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use crate::error::{Error, Result};

/// The mel scale's formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MelScale {
    /// `2595 · log10(1 + f / 700)` (torchaudio's default).
    #[default]
    Htk,
    /// Linear below 1 kHz, logarithmic above (librosa's default).
    Slaney,
}

/// Slaney's scale: linear at 200/3 Hz a mel up to 1 kHz, logarithmic above.
const SLANEY_HZ_PER_MEL: f64 = 200.0 / 3.0;
const SLANEY_MIN_LOG_HZ: f64 = 1000.0;
const SLANEY_MIN_LOG_MEL: f64 = SLANEY_MIN_LOG_HZ / SLANEY_HZ_PER_MEL;

/// The log step of Slaney's scale above 1 kHz, per mel.
fn slaney_logstep() -> f64 {
    6.4f64.ln() / 27.0
}

impl MelScale {
    fn mel_of_hz(self, f: f64) -> f64 {
        match self {
            MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
            MelScale::Slaney if f >= SLANEY_MIN_LOG_HZ => {
                SLANEY_MIN_LOG_MEL + (f / SLANEY_MIN_LOG_HZ).ln() / slaney_logstep()
            }
            MelScale::Slaney => f / SLANEY_HZ_PER_MEL,
        }
    }

    /// The inverse of [`MelScale::mel_of_hz`] as torchaudio computes it on an f32 tensor:
    /// the constants in f64 (Python floats), rounded to f32, the arithmetic in f32.
    fn hz_of_mel_f32(self, m: f32) -> f32 {
        match self {
            MelScale::Htk => 700.0 * (10f32.powf(m / 2595.0) - 1.0),
            MelScale::Slaney if m >= SLANEY_MIN_LOG_MEL as f32 => {
                SLANEY_MIN_LOG_HZ as f32
                    * (slaney_logstep() as f32 * (m - SLANEY_MIN_LOG_MEL as f32)).exp()
            }
            MelScale::Slaney => SLANEY_HZ_PER_MEL as f32 * m,
        }
    }

    #[cfg(test)]
    fn hz_of_mel(self, m: f64) -> f64 {
        match self {
            MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
            MelScale::Slaney if m >= SLANEY_MIN_LOG_MEL => {
                SLANEY_MIN_LOG_HZ * (slaney_logstep() * (m - SLANEY_MIN_LOG_MEL)).exp()
            }
            MelScale::Slaney => SLANEY_HZ_PER_MEL * m,
        }
    }
}

/// The parameters of a mel spectrogram, named and defaulted as torchaudio's.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct MelSpec {
    /// Sample rate of the input, Hz.
    pub sample_rate: u32,
    /// FFT size (default 400).
    pub n_fft: usize,
    /// Window length (default `n_fft`), centred in the FFT frame.
    pub win_length: usize,
    /// Samples between frames (default `win_length / 2`).
    pub hop_length: usize,
    /// Lowest frequency of the filters, Hz (default 0).
    pub f_min: f64,
    /// Highest, Hz (default the Nyquist frequency).
    pub f_max: f64,
    /// Mel bands (default 128).
    pub n_mels: usize,
    /// Exponent of the magnitude: 2 for power (default), 1 for magnitude.
    pub power: f64,
    /// Mel scale (default HTK).
    pub mel_scale: MelScale,
    /// Slaney normalisation of each filter to equal area (torchaudio's `norm="slaney"`).
    pub slaney_norm: bool,
}

/// `torchaudio.transforms.MelSpectrogram`'s arguments as it takes them: its names and
/// defaults, `None` for what follows from the others, the choices as text.
/// [`MelArgs::spec`] resolves them; the `MelSpectrogram` operator reads its arguments
/// through it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MelArgs<'a> {
    /// Sample rate of the input, Hz (16000).
    pub sample_rate: u32,
    /// FFT size (400).
    pub n_fft: usize,
    /// Window length (`n_fft`).
    pub win_length: Option<usize>,
    /// Samples between frames (`win_length / 2`).
    pub hop_length: Option<usize>,
    /// Lowest frequency of the filters, Hz (0).
    pub f_min: f64,
    /// Highest, Hz (the Nyquist frequency).
    pub f_max: Option<f64>,
    /// Mel bands (128).
    pub n_mels: usize,
    /// 2 for power, 1 for magnitude (2).
    pub power: f64,
    /// `"slaney"` (filters of equal area) or `None`.
    pub norm: Option<&'a str>,
    /// `"htk"` (the default) or `"slaney"`.
    pub mel_scale: &'a str,
}

impl Default for MelArgs<'_> {
    fn default() -> Self {
        MelArgs {
            sample_rate: 16_000,
            n_fft: 400,
            win_length: None,
            hop_length: None,
            f_min: 0.0,
            f_max: None,
            n_mels: 128,
            power: 2.0,
            norm: None,
            mel_scale: "htk",
        }
    }
}

impl MelArgs<'_> {
    /// The spectrogram these arguments describe (its numbers are checked where it is
    /// used: by the `MelSpectrogram` operator, and against the crop by the pipeline).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a `norm` or `mel_scale` that torchaudio does not have.
    pub fn spec(&self) -> Result<MelSpec> {
        let mut spec = MelSpec::new(self.sample_rate);
        spec.n_fft = self.n_fft;
        spec.win_length = self.win_length.unwrap_or(self.n_fft);
        spec.hop_length = self.hop_length.unwrap_or(spec.win_length / 2);
        spec.f_min = self.f_min;
        spec.f_max = self.f_max.unwrap_or(f64::from(self.sample_rate) / 2.0);
        spec.n_mels = self.n_mels;
        spec.power = self.power;
        spec.slaney_norm = match self.norm {
            None => false,
            Some("slaney") => true,
            Some(other) => {
                return Err(Error::Config(format!(
                    "MelSpectrogram: norm={other:?}: use None or \"slaney\""
                )))
            }
        };
        spec.mel_scale = match self.mel_scale {
            "htk" => MelScale::Htk,
            "slaney" => MelScale::Slaney,
            other => {
                return Err(Error::Config(format!(
                    "MelSpectrogram: mel_scale={other:?}: use \"htk\" or \"slaney\""
                )))
            }
        };
        Ok(spec)
    }
}

impl MelSpec {
    /// torchaudio's defaults at `sample_rate`.
    pub fn new(sample_rate: u32) -> MelSpec {
        MelSpec {
            sample_rate,
            n_fft: 400,
            win_length: 400,
            hop_length: 200,
            f_min: 0.0,
            f_max: f64::from(sample_rate) / 2.0,
            n_mels: 128,
            power: 2.0,
            mel_scale: MelScale::Htk,
            slaney_norm: false,
        }
    }

    /// Frames for a signal of `len` samples (centred: one per hop, plus one), as
    /// `torch.stft(center=True)` makes them: the signal padded by `n_fft / 2` (rounded
    /// down) each side, one frame of `n_fft` every hop that fits (an odd `n_fft` fits one
    /// fewer where the hop divides `len`).
    pub fn frames(&self, len: usize) -> usize {
        (len + 2 * (self.n_fft / 2)).saturating_sub(self.n_fft) / self.hop_length + 1
    }

    pub(crate) fn validate(&self, len: usize) -> Result<()> {
        let problem = if self.sample_rate == 0 {
            "sample_rate must be above 0".to_string()
        } else if self.n_fft < 2 || self.n_fft > 1 << 16 {
            format!("n_fft {} must lie between 2 and 65536", self.n_fft)
        } else if self.win_length == 0 || self.win_length > self.n_fft {
            format!(
                "win_length {} must lie between 1 and n_fft",
                self.win_length
            )
        } else if self.hop_length == 0 {
            "hop_length must be at least 1".to_string()
        } else if self.n_mels == 0 || self.n_mels > 1024 {
            format!("n_mels {} must lie between 1 and 1024", self.n_mels)
        } else if !(self.f_min >= 0.0 && self.f_min < self.f_max) {
            format!(
                "f_min {} must be ≥ 0 and below f_max {}",
                self.f_min, self.f_max
            )
        } else if self.f_max > f64::from(self.sample_rate) / 2.0 {
            format!(
                "f_max {} lies above the Nyquist frequency of {} Hz",
                self.f_max, self.sample_rate
            )
        } else if !(self.power == 1.0 || self.power == 2.0) {
            format!("power {} must be 1 (magnitude) or 2 (power)", self.power)
        } else if len <= self.n_fft / 2 {
            format!(
                "the clip of {len} samples is too short for n_fft {} (reflect padding needs \
                 more than n_fft / 2)",
                self.n_fft
            )
        } else {
            return Ok(());
        };
        Err(Error::Config(format!("MelSpectrogram: {problem}")))
    }

    /// The filters: for each mel band, its first FFT bin and weights. Computed in f32
    /// step by step as torchaudio's `melscale_fbanks` computes them (its band edges are
    /// f32, and a bin beside an edge weighs up to 1e-3 relatively differently if computed
    /// more precisely, which shows in quiet bands).
    fn filters(&self) -> Vec<(usize, Vec<f64>)> {
        let n_freqs = self.n_fft / 2 + 1;
        let freqs = linspace_f32(0.0, (self.sample_rate / 2) as f32, n_freqs);
        let (m_min, m_max) = (
            self.mel_scale.mel_of_hz(self.f_min),
            self.mel_scale.mel_of_hz(self.f_max),
        );
        let points: Vec<f32> = linspace_f32(m_min as f32, m_max as f32, self.n_mels + 2)
            .into_iter()
            .map(|m| self.mel_scale.hz_of_mel_f32(m))
            .collect();
        (0..self.n_mels)
            .map(|m| {
                let (lo, mid, hi) = (points[m], points[m + 1], points[m + 2]);
                let norm = if self.slaney_norm {
                    2.0 / (hi - lo)
                } else {
                    1.0
                };
                let weight = |f: f32| {
                    let down = -(lo - f) / (mid - lo);
                    let up = (hi - f) / (hi - mid);
                    f64::from(down.min(up).max(0.0) * norm)
                };
                let first = freqs.iter().position(|&f| weight(f) > 0.0).unwrap_or(0);
                let weights: Vec<f64> = freqs[first..]
                    .iter()
                    .map(|&f| weight(f))
                    .take_while(|&w| w > 0.0)
                    .collect();
                (first, weights)
            })
            .collect()
    }
}

/// `torch.linspace(start, end, steps)` in f32: from both ends towards the middle.
fn linspace_f32(start: f32, end: f32, steps: usize) -> Vec<f32> {
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f32;
    (0..steps)
        .map(|i| {
            if i < steps / 2 {
                start + step * i as f32
            } else {
                end - step * (steps - 1 - i) as f32
            }
        })
        .collect()
}

/// A mel spectrogram computer for one [`MelSpec`], with its FFT plan and buffers.
pub(crate) struct Mel {
    spec: MelSpec,
    fft: Arc<dyn RealToComplex<f64>>,
    window: Vec<f64>,
    filters: Vec<(usize, Vec<f64>)>,
    frame: Vec<f64>,
    spectrum: Vec<realfft::num_complex::Complex<f64>>,
    scratch: Vec<realfft::num_complex::Complex<f64>>,
    power: Vec<f64>,
    padded: Vec<f64>,
}

impl std::fmt::Debug for Mel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mel")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Mel {
    pub(crate) fn new(spec: MelSpec) -> Mel {
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(spec.n_fft);
        // torch.hann_window(win_length) (periodic), centred in n_fft.
        let mut window = vec![0.0; spec.n_fft];
        let left = (spec.n_fft - spec.win_length) / 2;
        for i in 0..spec.win_length {
            let phase = 2.0 * std::f64::consts::PI * i as f64 / spec.win_length as f64;
            window[left + i] = 0.5 - 0.5 * phase.cos();
        }
        Mel {
            filters: spec.filters(),
            frame: fft.make_input_vec(),
            spectrum: fft.make_output_vec(),
            scratch: fft.make_scratch_vec(),
            power: vec![0.0; spec.n_fft / 2 + 1],
            padded: Vec::new(),
            fft,
            window,
            spec,
        }
    }

    /// Writes the spectrogram of `signal` into `out`, `[n_mels, frames]` row-major.
    pub(crate) fn run(&mut self, signal: &[f32], out: &mut [f32]) {
        let spec = &self.spec;
        let pad = spec.n_fft / 2;
        let frames = spec.frames(signal.len());
        debug_assert_eq!(out.len(), spec.n_mels * frames);
        // Reflect padding (the edge sample is not repeated), as torch.stft(center=True).
        self.padded.clear();
        self.padded
            .extend((1..=pad).rev().map(|i| f64::from(signal[i])));
        self.padded.extend(signal.iter().map(|&s| f64::from(s)));
        let n = signal.len();
        self.padded
            .extend((1..=pad).map(|i| f64::from(signal[n - 1 - i])));
        for t in 0..frames {
            let start = t * spec.hop_length;
            for ((x, s), w) in self
                .frame
                .iter_mut()
                .zip(&self.padded[start..start + spec.n_fft])
                .zip(&self.window)
            {
                *x = s * w;
            }
            self.fft
                .process_with_scratch(&mut self.frame, &mut self.spectrum, &mut self.scratch)
                .expect("buffers made by the plan");
            for (p, c) in self.power.iter_mut().zip(&self.spectrum) {
                let squared = c.re * c.re + c.im * c.im;
                *p = if spec.power == 2.0 {
                    squared
                } else {
                    squared.sqrt()
                };
            }
            for (m, (first, weights)) in self.filters.iter().enumerate() {
                out[m * frames + t] = weights
                    .iter()
                    .zip(&self.power[*first..])
                    .map(|(w, p)| w * p)
                    .sum::<f64>() as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tone_lands_in_the_band_of_its_frequency() {
        let spec = MelSpec {
            n_mels: 40,
            hop_length: 160,
            ..MelSpec::new(16_000)
        };
        let signal: Vec<f32> = (0..16_000)
            .map(|i| (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 16_000.0).sin() as f32)
            .collect();
        spec.validate(signal.len()).unwrap();
        let frames = spec.frames(signal.len());
        assert_eq!(frames, 101);
        let mut out = vec![0.0; 40 * frames];
        Mel::new(spec).run(&signal, &mut out);
        let energy: Vec<f32> = (0..40).map(|m| out[m * frames + 50]).collect();
        let loudest = (0..40)
            .max_by(|&a, &b| energy[a].total_cmp(&energy[b]))
            .unwrap();
        let filters = spec.filters();
        let (first, weights) = &filters[loudest];
        // Bin 25 is 1 kHz (16 kHz / 400 · 25).
        assert!(
            (*first..first + weights.len()).contains(&25),
            "band {loudest}"
        );
    }

    #[test]
    fn the_scales_invert() {
        for scale in [MelScale::Htk, MelScale::Slaney] {
            for f in [0.0, 440.0, 999.0, 1000.0, 4000.0, 8000.0] {
                let back = scale.hz_of_mel(scale.mel_of_hz(f));
                assert!((back - f).abs() < 1e-6, "{scale:?} {f} → {back}");
            }
        }
    }
}
