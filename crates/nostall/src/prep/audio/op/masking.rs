//! SpecAugment's masks, as torchaudio's `mask_along_axis` and `mask_along_axis_iid` make
//! them (its `FrequencyMasking` and `TimeMasking`): a band of the spectrogram's rows (mel
//! bands) or columns (frames) set to 0.
//!
//! On an axis of `size` values, with `widest` the operator's parameter (capped at
//! `⌊p · size⌋` where `p` is below 1, and no mask where that leaves 0), torchaudio draws
//! `v` uniformly in [0, widest) and `s` uniformly in [0, size − v), and masks
//! `[⌊s⌋, ⌊s⌋ + ⌊v⌋)`: a width below `widest`, and a band that ends within the axis. One
//! band for every channel; with `iid_masks`, one drawn for each channel (torchaudio draws
//! one for each example and channel of what it is given; here that is one sample).

use super::{Declaration, Spectral, Spectrogram};
use crate::error::{Error, Result};
use crate::rng::Rng;

/// The axis a mask runs along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Axis {
    /// Mel bands: the band is of rows.
    Mels,
    /// Frames: the band is of columns.
    Frames,
}

/// A masking operator's settings.
#[derive(Debug)]
pub(super) struct Mask {
    /// The operator's name, for its errors.
    operator: &'static str,
    /// Its parameter bounding the width, for its errors.
    param: &'static str,
    /// The axis it masks.
    axis: Axis,
    /// The parameter: widths are drawn below it.
    pub(super) widest: usize,
    /// Whether each channel draws its own band.
    pub(super) iid: bool,
    /// The widest band as a fraction of the axis.
    pub(super) p: f64,
}

impl Mask {
    /// The mask of the operator `declaration` (whose first parameter bounds the width)
    /// along `axis`.
    pub(super) fn new(
        declaration: &'static Declaration,
        axis: Axis,
        widest: usize,
        iid: bool,
        p: f64,
    ) -> Mask {
        Mask {
            operator: declaration.name,
            param: declaration.params[0].name,
            axis,
            widest,
            iid,
            p,
        }
    }

    /// Values along the axis of `spectrogram`.
    fn size(&self, spectrogram: &Spectrogram<'_>) -> usize {
        match self.axis {
            Axis::Mels => spectrogram.mels,
            Axis::Frames => spectrogram.frames,
        }
    }
}

impl Spectral for Mask {
    fn check(&self, mels: usize, frames: usize) -> Result<()> {
        let (size, what) = match self.axis {
            Axis::Mels => (mels, "mel bands"),
            Axis::Frames => (frames, "frames"),
        };
        if self.widest > size {
            return Err(Error::Config(format!(
                "{}: {} {} is more than the spectrogram's {size} {what}: a mask is at most as \
                 wide as the axis it masks",
                self.operator, self.param, self.widest
            )));
        }
        Ok(())
    }

    fn apply(&self, spectrogram: &mut Spectrogram<'_>, rng: &mut Rng) {
        let size = self.size(spectrogram);
        // torchaudio's `_get_mask_param`.
        let widest = if self.p == 1.0 {
            self.widest
        } else {
            self.widest.min((size as f64 * self.p) as usize)
        };
        if widest == 0 {
            return;
        }
        if self.iid {
            for channel in 0..spectrogram.channels {
                let (start, width) = draw(widest, size, rng);
                mask(spectrogram, channel, self.axis, start, width);
            }
        } else {
            let (start, width) = draw(widest, size, rng);
            for channel in 0..spectrogram.channels {
                mask(spectrogram, channel, self.axis, start, width);
            }
        }
    }
}

/// A band `(start, width)` on an axis of `size` values, with a width below `widest` (at
/// most `size`), as torchaudio draws it. `start + width` is at most `size`: `s < size − v`,
/// and the floors and the rounding of `size − v` (an integer less a float) only lower it.
fn draw(widest: usize, size: usize, rng: &mut Rng) -> (usize, usize) {
    let v = rng.next_f64() * widest as f64;
    let s = rng.next_f64() * (size as f64 - v);
    (s as usize, v as usize)
}

/// Sets the band of `width` values from `start` along `axis` of `channel` to 0.
fn mask(spectrogram: &mut Spectrogram<'_>, channel: usize, axis: Axis, start: usize, width: usize) {
    let (mels, frames) = (spectrogram.mels, spectrogram.frames);
    let plane = &mut spectrogram.values[channel * mels * frames..(channel + 1) * mels * frames];
    match axis {
        Axis::Mels => plane[start * frames..(start + width) * frames].fill(0.0),
        Axis::Frames => {
            for row in plane.chunks_exact_mut(frames) {
                row[start..start + width].fill(0.0);
            }
        }
    }
}

#[cfg(test)]
mod tests;
