//! Mel spectrograms with torchaudio's definition (`torchaudio.transforms.MelSpectrogram`):
//! a short-time Fourier transform of the centred, reflect-padded signal under a periodic
//! Hann window, its magnitude raised to `power`, and triangular mel filters (HTK or Slaney
//! scale, optionally Slaney-normalised) summing the bins.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use crate::error::{Error, Result};

/// The mel scale's formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MelScale {
    /// `2595 · log10(1 + f / 700)` (torchaudio's default).
    #[default]
    Htk,
    /// Linear below 1 kHz, logarithmic above (librosa's default).
    Slaney,
}

impl MelScale {
    fn mel_of_hz(self, f: f64) -> f64 {
        match self {
            MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
            MelScale::Slaney => {
                let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
                let min_log_mel = min_log_hz / f_sp;
                let logstep = 6.4f64.ln() / 27.0;
                if f >= min_log_hz {
                    min_log_mel + (f / min_log_hz).ln() / logstep
                } else {
                    f / f_sp
                }
            }
        }
    }

    fn hz_of_mel(self, m: f64) -> f64 {
        match self {
            MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
            MelScale::Slaney => {
                let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
                let min_log_mel = min_log_hz / f_sp;
                let logstep = 6.4f64.ln() / 27.0;
                if m >= min_log_mel {
                    min_log_hz * (logstep * (m - min_log_mel)).exp()
                } else {
                    f_sp * m
                }
            }
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

    /// Frames for a signal of `len` samples (centred: one per hop, plus one).
    pub fn frames(&self, len: usize) -> usize {
        len / self.hop_length + 1
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

    /// The filters: for each mel band, its first FFT bin and weights.
    fn filters(&self) -> Vec<(usize, Vec<f32>)> {
        let n_freqs = self.n_fft / 2 + 1;
        let nyquist = f64::from(self.sample_rate / 2);
        // torch.linspace(0, sample_rate // 2, n_freqs)
        let freqs: Vec<f64> = (0..n_freqs)
            .map(|i| nyquist * i as f64 / (n_freqs - 1) as f64)
            .collect();
        let (m_min, m_max) = (
            self.mel_scale.mel_of_hz(self.f_min),
            self.mel_scale.mel_of_hz(self.f_max),
        );
        let points: Vec<f64> = (0..self.n_mels + 2)
            .map(|i| {
                let m = m_min + (m_max - m_min) * i as f64 / (self.n_mels + 1) as f64;
                self.mel_scale.hz_of_mel(m)
            })
            .collect();
        (0..self.n_mels)
            .map(|m| {
                let (lo, mid, hi) = (points[m], points[m + 1], points[m + 2]);
                let norm = if self.slaney_norm {
                    2.0 / (hi - lo)
                } else {
                    1.0
                };
                let weight = |f: f64| {
                    let down = (f - lo) / (mid - lo);
                    let up = (hi - f) / (hi - mid);
                    (down.min(up).max(0.0) * norm) as f32
                };
                let first = freqs.iter().position(|&f| weight(f) > 0.0).unwrap_or(0);
                let weights: Vec<f32> = freqs[first..]
                    .iter()
                    .map(|&f| weight(f))
                    .take_while(|&w| w > 0.0)
                    .collect();
                (first, weights)
            })
            .collect()
    }
}

/// A mel spectrogram computer for one [`MelSpec`], with its FFT plan and buffers.
pub(crate) struct Mel {
    spec: MelSpec,
    fft: Arc<dyn RealToComplex<f32>>,
    window: Vec<f32>,
    filters: Vec<(usize, Vec<f32>)>,
    frame: Vec<f32>,
    spectrum: Vec<realfft::num_complex::Complex<f32>>,
    scratch: Vec<realfft::num_complex::Complex<f32>>,
    power: Vec<f32>,
    padded: Vec<f32>,
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
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(spec.n_fft);
        // torch.hann_window(win_length) (periodic), centred in n_fft.
        let mut window = vec![0.0f32; spec.n_fft];
        let left = (spec.n_fft - spec.win_length) / 2;
        for i in 0..spec.win_length {
            let phase = 2.0 * std::f64::consts::PI * i as f64 / spec.win_length as f64;
            window[left + i] = (0.5 - 0.5 * phase.cos()) as f32;
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
        self.padded.extend((1..=pad).rev().map(|i| signal[i]));
        self.padded.extend_from_slice(signal);
        let n = signal.len();
        self.padded.extend((1..=pad).map(|i| signal[n - 1 - i]));
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
                    .sum();
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
