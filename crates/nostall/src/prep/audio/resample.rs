//! Band-limited resampling by windowed sinc interpolation, with torchaudio's definition
//! (`torchaudio.functional.resample`), evaluated only where the output is wanted.
//!
//! The rates are reduced by their gcd to `from → to`. Output sample `j` lies in frame
//! `f = j / to` at phase `p = j % to`; it is the dot product of the input around
//! `f · from` with phase `p`'s kernel:
//!
//! ```text
//! out[j] = Σ_k x[f·from − width + k] · K_p[k]
//! K_p[k] = sinc(π t) · window(t) · base / from,   t = ((k − width) / from − p / to) · base
//! ```
//!
//! with `base = min(from, to) · rolloff` the cut-off, `t` clamped to ±`lowpass_width`
//! zero crossings, and `width = ⌈lowpass_width · from / base⌉`; samples outside the clip
//! are zeros, and the output has `⌈len · to / from⌉` samples. torchaudio convolves every
//! phase with all `2·width + from` taps, most of them zero (the window ends at the clamp);
//! here each phase keeps only its non-zero span, and only the output samples a crop keeps
//! are computed, so resampling a 30 s clip for a 4 s crop costs 4 s of work.
//!
//! Taps are computed in f64 and stored in f32; sums are in f32, as torchaudio's are (in
//! another order, so results differ from torchaudio's by float rounding).

use std::f64::consts::PI;
use std::ops::Range;

use super::decode::MAX_RATE;
use crate::error::{Error, Result};

/// The most taps a filter may hold over all its phases (512 MiB of f32): a worker builds
/// one for each source rate it meets, before it resamples a sample. torchaudio's filters
/// (its default, width 6 at roll-off 0.99; `kaiser_best`, 64 at 0.9476) need at most 9
/// and 104 million, for a file at a rate coprime to the target's.
const MAX_TAPS: f64 = (1u64 << 27) as f64;

/// How sharp the anti-aliasing filter is: torchaudio's parameters, same defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ResampleQuality {
    /// Zero crossings of the sinc kept on each side (torchaudio's
    /// `lowpass_filter_width`, default 6). Wider is sharper, slower and a larger filter:
    /// `lowpass_width / rolloff` is at most 87.4.
    pub lowpass_width: u32,
    /// Cut-off as a fraction of the lower Nyquist frequency (default 0.99).
    pub rolloff: f64,
    /// The window over the sinc.
    pub window: ResampleWindow,
}

/// torchaudio's default shape of the Kaiser window (`beta`).
pub(crate) const KAISER_BETA: f64 = 14.769_656_459_379_492;

impl Default for ResampleQuality {
    fn default() -> ResampleQuality {
        ResampleQuality {
            lowpass_width: 6,
            rolloff: 0.99,
            window: ResampleWindow::Hann,
        }
    }
}

impl ResampleQuality {
    /// The default filter (torchaudio's `sinc_interp_hann`, width 6, roll-off 0.99).
    pub fn new() -> ResampleQuality {
        ResampleQuality::default()
    }

    /// torchaudio's `sinc_interp_kaiser` with `lowpass_filter_width` and `beta` (its
    /// "kaiser_best" preset is width 64, roll-off 0.9475937167399596, β 14.769656459379492).
    pub fn kaiser(lowpass_width: u32, rolloff: f64, beta: f64) -> ResampleQuality {
        ResampleQuality {
            lowpass_width,
            rolloff,
            window: ResampleWindow::Kaiser { beta },
        }
    }

    /// The filter `torchaudio.functional.resample` uses with these arguments:
    /// `resampling_method` `"sinc_interp_hann"` or `"sinc_interp_kaiser"` (whose `beta`
    /// defaults to torchaudio's 14.769 656 459 379 492).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for another method, or a `beta` with the Hann window.
    pub fn torchaudio(
        lowpass_filter_width: u32,
        rolloff: f64,
        resampling_method: &str,
        beta: Option<f64>,
    ) -> Result<ResampleQuality> {
        match (resampling_method, beta) {
            ("sinc_interp_hann", None) => Ok(ResampleQuality {
                lowpass_width: lowpass_filter_width,
                rolloff,
                window: ResampleWindow::Hann,
            }),
            ("sinc_interp_kaiser", beta) => Ok(ResampleQuality::kaiser(
                lowpass_filter_width,
                rolloff,
                beta.unwrap_or(KAISER_BETA),
            )),
            ("sinc_interp_hann", Some(_)) => Err(Error::Config(
                "Resample: beta shapes the Kaiser window; give it with \
                 resampling_method=\"sinc_interp_kaiser\""
                    .into(),
            )),
            (other, _) => Err(Error::Config(format!(
                "Resample: resampling_method={other:?}: use \"sinc_interp_hann\" or \
                 \"sinc_interp_kaiser\""
            ))),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        // Its upper bound is the filter's size, below.
        if self.lowpass_width == 0 {
            return Err(Error::Config(
                "Resample: lowpass_filter_width 0: keep at least 1 zero crossing".into(),
            ));
        }
        if !(self.rolloff > 0.0 && self.rolloff <= 1.0) {
            return Err(Error::Config(format!(
                "Resample: rolloff {} must lie in (0, 1]",
                self.rolloff
            )));
        }
        // A phase keeps the taps within `lowpass_width` zero crossings of its centre,
        // `lowpass_width / rolloff · from / min(from, to)` either side, and there are `to`
        // phases: `2 · lowpass_width / rolloff · max(from, to)` taps in all, the rates
        // reduced by their gcd. A file's rate coprime to the target's leaves them as
        // they are, up to the highest rate a file may have.
        let taps = 2.0 * f64::from(self.lowpass_width) / self.rolloff * f64::from(MAX_RATE);
        if taps > MAX_TAPS {
            return Err(Error::Config(format!(
                "Resample: lowpass_filter_width {} at rolloff {} builds filters of up to \
                 {taps:.0} taps (for a file at a rate coprime to the target's), more than the \
                 2^27 (512 MiB) a filter may hold; keep lowpass_filter_width / rolloff at \
                 most {:.1} (torchaudio's kaiser_best is 64 / 0.9476)",
                self.lowpass_width,
                self.rolloff,
                MAX_TAPS / (2.0 * f64::from(MAX_RATE))
            )));
        }
        if let ResampleWindow::Kaiser { beta } = self.window {
            if !(beta.is_finite() && beta >= 0.0) {
                return Err(Error::Config(format!(
                    "resample Kaiser beta {beta} must be a finite number ≥ 0"
                )));
            }
        }
        Ok(())
    }
}

/// The window over the resampling sinc.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ResampleWindow {
    /// cos² (torchaudio's default, `sinc_interp_hann`).
    Hann,
    /// Kaiser with shape `beta` (`sinc_interp_kaiser`).
    Kaiser {
        /// Shape: larger is a wider main lobe and lower side lobes.
        beta: f64,
    },
}

/// One phase's non-zero taps, and where they start relative to `f·from − width`.
#[derive(Debug)]
struct Phase {
    offset: usize,
    taps: Vec<f32>,
}

/// A resampler between two fixed rates.
#[derive(Debug)]
pub(crate) struct Resampler {
    from: u64,
    to: u64,
    width: usize,
    phases: Vec<Phase>,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The zeroth-order modified Bessel function of the first kind (its power series).
fn bessel_i0(x: f64) -> f64 {
    let (mut sum, mut term, quarter) = (1.0, 1.0, x * x / 4.0);
    for k in 1..500 {
        term *= quarter / (k as f64 * k as f64);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

impl Resampler {
    /// A resampler from `from` Hz to `to` Hz (both above zero).
    pub(crate) fn new(from: u32, to: u32, quality: ResampleQuality) -> Resampler {
        let divisor = gcd(u64::from(from), u64::from(to));
        let (from, to) = (u64::from(from) / divisor, u64::from(to) / divisor);
        let lw = f64::from(quality.lowpass_width);
        let base = from.min(to) as f64 * quality.rolloff;
        let width = (lw * from as f64 / base).ceil() as usize;
        let scale = base / from as f64;
        let kaiser_norm = match quality.window {
            ResampleWindow::Kaiser { beta } => bessel_i0(beta),
            ResampleWindow::Hann => 1.0,
        };
        let phases = (0..to)
            .map(|p| {
                let tap = |k: usize| -> Option<f32> {
                    let t = ((k as f64 - width as f64) / from as f64 - p as f64 / to as f64) * base;
                    // Beyond the clamp the window is zero (torchaudio computes these taps
                    // and multiplies by them anyway).
                    if t.abs() >= lw {
                        return None;
                    }
                    let window = match quality.window {
                        ResampleWindow::Hann => (t * PI / lw / 2.0).cos().powi(2),
                        ResampleWindow::Kaiser { beta } => {
                            bessel_i0(beta * (1.0 - (t / lw).powi(2)).sqrt()) / kaiser_norm
                        }
                    };
                    let sinc = if t == 0.0 {
                        1.0
                    } else {
                        (t * PI).sin() / (t * PI)
                    };
                    Some((sinc * window * scale) as f32)
                };
                let all = 2 * width + from as usize;
                // The window is not zero where |t| < lw: within lw·from/base taps of the
                // phase's centre. Start there (scanning from tap 0 costs `from` tap
                // evaluations a phase: seconds for a rate coprime to the target's), then
                // step to the exact first tap.
                let centre = width as f64 + p as f64 * from as f64 / to as f64;
                let reach = lw * from as f64 / base;
                let mut first = ((centre - reach).floor().max(0.0) as usize).min(all);
                while first > 0 && tap(first - 1).is_some() {
                    first -= 1;
                }
                while first < all && tap(first).is_none() {
                    first += 1;
                }
                if first == all {
                    first = 0;
                }
                let taps: Vec<f32> = (first..all).map_while(tap).collect();
                Phase {
                    offset: first,
                    taps,
                }
            })
            .collect();
        Resampler {
            from,
            to,
            width,
            phases,
        }
    }

    /// The filter's taps, over all phases: what it holds in memory, in f32s.
    pub(crate) fn taps(&self) -> usize {
        self.phases.iter().map(|p| p.taps.len()).sum()
    }

    /// Samples of the output for an input of `len` samples (torchaudio's length).
    pub(crate) fn output_len(&self, len: usize) -> usize {
        (len as u64 * self.to).div_ceil(self.from) as usize
    }

    /// The input frames that output samples `out` read, for a clip of `len` frames:
    /// what a decoder must provide.
    pub(crate) fn input_range(&self, out: Range<usize>, len: usize) -> Range<usize> {
        if self.from == self.to {
            return out.start.min(len)..out.end.min(len);
        }
        let end = out.end.min(self.output_len(len));
        if out.start >= end {
            return 0..0;
        }
        // Output j + to reads the frames of output j shifted by `from`: the first frame
        // read is among the first period's outputs, the last among the last period's.
        let period = self.to as usize;
        let lo = (out.start..end.min(out.start + period))
            .map(|j| self.taps_of(j).0)
            .min()
            .unwrap_or(0)
            .max(0) as usize;
        let hi = (end.saturating_sub(period).max(out.start)..end)
            .map(|j| {
                let (first, taps) = self.taps_of(j);
                first + taps.len() as isize
            })
            .max()
            .unwrap_or(0)
            .clamp(0, len as isize) as usize;
        let needed = lo..hi;
        if needed.is_empty() {
            0..0
        } else {
            needed
        }
    }

    /// Output sample `j`'s first input index (may lie before the clip) and its taps.
    fn taps_of(&self, j: usize) -> (isize, &[f32]) {
        let (frame, phase) = (j as u64 / self.to, (j as u64 % self.to) as usize);
        let phase = &self.phases[phase];
        let first = (frame * self.from) as isize - self.width as isize + phase.offset as isize;
        (first, &phase.taps)
    }

    /// Writes output samples `start .. start + out.len()` of a clip of `len` frames into
    /// `out`, reading its frames from `input`, which holds frames `input_start ..` (at
    /// least [`Resampler::input_range`] of them). Positions past the output's end are
    /// zeros (a short clip padded).
    pub(crate) fn run(
        &self,
        input: &[f32],
        input_start: usize,
        len: usize,
        start: usize,
        out: &mut [f32],
    ) {
        if self.from == self.to {
            // Equal rates: the input itself (torchaudio returns it unchanged too).
            let kept = input
                .get(start.saturating_sub(input_start)..)
                .unwrap_or(&[]);
            let n = kept.len().min(out.len()).min(len.saturating_sub(start));
            out[..n].copy_from_slice(&kept[..n]);
            out[n..].fill(0.0);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above), the only requirement of
            // `filter_avx2`.
            unsafe { self.filter_avx2(input, input_start, len, start, out) };
            return;
        }
        self.filter(input, input_start, len, start, out);
    }

    /// [`Resampler::filter`] compiled for AVX2: the same operations in the same order on
    /// 256-bit registers (no fused multiply-add), so the same bits as without it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn filter_avx2(
        &self,
        input: &[f32],
        input_start: usize,
        len: usize,
        start: usize,
        out: &mut [f32],
    ) {
        self.filter(input, input_start, len, start, out);
    }

    /// The filtering of [`Resampler::run`] for unequal rates.
    #[inline(always)]
    fn filter(&self, input: &[f32], input_start: usize, len: usize, start: usize, out: &mut [f32]) {
        let end = self.output_len(len);
        for (j, out) in (start..).zip(out.iter_mut()) {
            if j >= end {
                *out = 0.0;
                continue;
            }
            let (first, taps) = self.taps_of(j);
            // Taps over frames before the clip or past its end meet zeros.
            let lo = first.max(0);
            let hi = (first + taps.len() as isize).min(len as isize);
            if hi <= lo {
                *out = 0.0;
                continue;
            }
            let taps = &taps[(lo - first) as usize..(hi - first) as usize];
            let from = lo as usize - input_start;
            *out = dot(taps, &input[from..from + taps.len()]);
        }
    }
}

/// The dot product of the common length of `a` and `b`, in eight independent sums (so
/// that the compiler vectorises it: one running sum is a chain of dependent additions).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0.0f32; 8];
    for (a, b) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for ((lane, a), b) in lanes.iter_mut().zip(a).zip(b) {
            *lane += a * b;
        }
    }
    let tail = n - n % 8;
    let rest: f32 = a[tail..].iter().zip(&b[tail..]).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coprime_rate_builds_the_filter_the_bound_assumes() {
        // 2 · lowpass_width / rolloff · max(from, to) taps, the rates being coprime.
        for (from, to) in [(44_101, 16_000), (16_000, 44_101)] {
            let quality = ResampleQuality::default();
            let taps = Resampler::new(from, to, quality).taps() as f64;
            let assumed = 2.0 * 6.0 / 0.99 * 44_101.0;
            assert!((taps / assumed - 1.0).abs() < 0.01, "{from} → {to}: {taps}");
        }
        let too_wide = ResampleQuality::kaiser(88, 1.0, KAISER_BETA);
        assert!(too_wide
            .validate()
            .unwrap_err()
            .to_string()
            .contains("2^27"));
        let kaiser_best = ResampleQuality::kaiser(64, 0.947_593_716_739_959_6, KAISER_BETA);
        assert!(kaiser_best.validate().is_ok());
    }

    #[test]
    fn equal_rates_pass_the_signal_through() {
        let resampler = Resampler::new(16_000, 16_000, ResampleQuality::default());
        let input: Vec<f32> = (0..500)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut out = vec![1.0; 300];
        resampler.run(&input, 0, input.len(), 250, &mut out);
        assert_eq!(out[..250], input[250..]);
        assert!(out[250..].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn a_tone_below_both_nyquists_survives_downsampling() {
        // 440 Hz at 44.1 kHz to 8 kHz: the output is the same tone at the new rate.
        let input: Vec<f32> = (0..44_100)
            .map(|i| (2.0 * PI * 440.0 * i as f64 / 44_100.0).sin() as f32)
            .collect();
        let resampler = Resampler::new(44_100, 8_000, ResampleQuality::default());
        assert_eq!(resampler.output_len(input.len()), 8_000);
        let mut out = vec![0.0; 4_000];
        resampler.run(&input, 0, input.len(), 2_000, &mut out);
        for (j, &y) in (2_000..).zip(&out) {
            let expected = (2.0 * PI * 440.0 * j as f64 / 8_000.0).sin() as f32;
            assert!((y - expected).abs() < 2e-3, "sample {j}: {y} vs {expected}");
        }
    }

    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let input: Vec<f32> = (0..5_000)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        for (from, to) in [(44_100, 8_000), (22_050, 16_000), (8_000, 16_000)] {
            let r = Resampler::new(from, to, ResampleQuality::default());
            let len = r.output_len(input.len());
            let (mut dispatched, mut portable) = (vec![0.0; len], vec![0.0; len]);
            r.run(&input, 0, input.len(), 0, &mut dispatched);
            r.filter(&input, 0, input.len(), 0, &mut portable);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&dispatched), bits(&portable), "{from} → {to}");
        }
    }

    #[test]
    fn a_window_from_the_frames_it_needs_equals_cutting_the_whole() {
        let input: Vec<f32> = (0..3_000)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        for (from, to) in [
            (44_100, 8_000),
            (22_050, 16_000),
            (8_000, 16_000),
            (48_000, 44_100),
        ] {
            let r = Resampler::new(from, to, ResampleQuality::default());
            let len = r.output_len(input.len());
            let mut whole = vec![0.0; len + 100];
            r.run(&input, 0, input.len(), 0, &mut whole);
            assert!(whole[len..].iter().all(|&x| x == 0.0), "padding is zeros");
            for start in [0, len / 3, len - 100, len - 30] {
                // From the input frames it needs only.
                let needed = r.input_range(start..start + 100, input.len());
                // Exactly the frames some output reads.
                let read = (start..(start + 100).min(len)).flat_map(|j| {
                    let (first, taps) = r.taps_of(j);
                    (first.max(0)..(first + taps.len() as isize).min(input.len() as isize))
                        .map(|i| i as usize)
                });
                let (lo, hi) = read.fold((usize::MAX, 0), |(lo, hi), i| (lo.min(i), hi.max(i + 1)));
                assert_eq!(needed, lo..hi, "{from} → {to} at {start}");
                let mut part = vec![0.0; 100];
                r.run(
                    &input[needed.clone()],
                    needed.start,
                    input.len(),
                    start,
                    &mut part,
                );
                assert_eq!(part, whole[start..start + 100], "{from} → {to} at {start}");
            }
        }
    }
}
