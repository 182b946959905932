//! Which samples a device decodes instead of a prep thread.
//!
//! On a machine with an accelerator, a large JPEG costs a CPU core tens of milliseconds
//! of entropy decoding however small the crop it keeps, while the accelerator's JPEG
//! decoder (NVJPG on an H100, nvJPEG's CUDA decoder elsewhere) takes it in a fraction of
//! that. Small images are the other way round: DCT-scaled partial decode on the CPU costs
//! less than moving the file and decoding it whole. So a [`DecodeRoute`] sends a JPEG to
//! the device only when it has at least [`min_pixels`](DecodeRoute::min_pixels) pixels,
//! and, under [`RouteMode::Auto`], only while the CPU cannot keep up with the consumer:
//! the share of such images sent to the device rises each time the consumer waits for a
//! batch, and falls while it does not: faster while the device's decoding held the
//! consumer up instead ([`DecodeRoute::device_took`]), slowly while neither did. Rising
//! faster than it falls, the share settles just above the point where the CPU and the
//! device's decoder finish their parts of a batch together, rather than switching on and
//! off.
//!
//! The route decides *where* a sample is decoded, never *how* it is augmented: the
//! preparer draws the crop and flip before asking, so a sample's augmentation is the same
//! whichever decoder takes it (the pixels may differ by the decoders' rounding).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};

/// When the device decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteMode {
    /// Every JPEG of at least the size threshold.
    Always,
    /// JPEGs of at least the size threshold, as many as it takes for the consumer to stop
    /// waiting.
    Auto,
}

/// The share of eligible images sent to the device is kept in units of 1 / `WHOLE`.
const WHOLE: u32 = 1 << 16;
/// A consumer wait longer than this counts as the CPU falling behind: shorter ones are the
/// hand-off itself.
const WAIT_THRESHOLD: Duration = Duration::from_micros(500);
/// How much one wait raises the share; how much a batch that the device's decoding held
/// up lowers it; how much a batch neither held up lowers it.
const RAISE: u32 = WHOLE / 16;
const LOWER_DEVICE_BOUND: u32 = WHOLE / 64;
const LOWER: u32 = WHOLE / 256;

/// Routes samples between the prep threads and a device decoder (see the module docs).
/// Shared by the prep threads, which ask it per sample, and the consumer, which reports
/// its waits.
#[derive(Debug)]
pub struct DecodeRoute {
    mode: RouteMode,
    min_pixels: u64,
    /// Of the eligible images, the share sent to the device, in units of 1 / `WHOLE`.
    share: AtomicU32,
    /// Eligible images asked about so far: spreads the share evenly over them.
    asked: AtomicU64,
    sent: AtomicU64,
    /// What the consumer spent on the device's decoding of its last batch, nanoseconds.
    device_nanos: AtomicU64,
}

/// Routes are equal when they decide alike (whatever their state).
impl PartialEq for DecodeRoute {
    fn eq(&self, other: &DecodeRoute) -> bool {
        (self.mode, self.min_pixels) == (other.mode, other.min_pixels)
    }
}

impl DecodeRoute {
    /// The size threshold `"auto"` takes unless told otherwise: one megapixel, from 1–2
    /// megapixels up the device's decoding adds to the CPU's as much as half of it again;
    /// below, at photographs' size, what it adds did not show while a model trained
    /// (docs/gpu.md has the measurements).
    pub const DEFAULT_MIN_PIXELS: u64 = 1_000_000;

    /// A route sending JPEGs of at least `min_pixels` pixels to the device, always or
    /// while the CPU falls behind. `Auto` starts with none sent.
    pub fn new(mode: RouteMode, min_pixels: u64) -> DecodeRoute {
        let share = match mode {
            RouteMode::Always => WHOLE,
            RouteMode::Auto => 0,
        };
        DecodeRoute {
            mode,
            min_pixels,
            share: AtomicU32::new(share),
            asked: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            device_nanos: AtomicU64::new(0),
        }
    }

    /// The route a consumer's `decode` setting names: `"auto"` (JPEGs of at least
    /// `min_pixels` pixels while the CPU falls behind), `"gpu"` (every JPEG) or `"cpu"`
    /// (none: `None`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for any other name.
    pub fn named(decode: &str, min_pixels: u64) -> Result<Option<DecodeRoute>> {
        match decode {
            "cpu" => Ok(None),
            "gpu" => Ok(Some(DecodeRoute::new(RouteMode::Always, 0))),
            "auto" => Ok(Some(DecodeRoute::new(RouteMode::Auto, min_pixels))),
            other => Err(Error::Config(format!(
                "decode={other:?}: use \"auto\" (large JPEGs on the GPU while the CPU falls \
                 behind), \"gpu\" (every JPEG on the GPU) or \"cpu\""
            ))),
        }
    }

    /// The mode.
    pub fn mode(&self) -> RouteMode {
        self.mode
    }

    /// Images with fewer pixels stay on the CPU.
    pub fn min_pixels(&self) -> u64 {
        self.min_pixels
    }

    /// The share of eligible images now sent to the device, in [0, 1].
    pub fn share(&self) -> f64 {
        self.share.load(Ordering::Relaxed) as f64 / WHOLE as f64
    }

    /// Images sent to the device so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Whether the device decodes a JPEG of `pixels` pixels: the `n`-th eligible image
    /// goes when the running count of the share crosses a whole number, so that a share
    /// of a quarter sends every fourth, whichever thread asks.
    pub fn to_device(&self, pixels: u64) -> bool {
        if pixels < self.min_pixels {
            return false;
        }
        let share = self.share.load(Ordering::Relaxed) as u64;
        if share == 0 {
            return false;
        }
        let n = self.asked.fetch_add(1, Ordering::Relaxed);
        let whole = WHOLE as u64;
        let go = (n + 1) * share / whole > n * share / whole;
        if go {
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
        go
    }

    /// The consumer spent `took` on the device's decoding of a batch's deferred samples
    /// (its part in the next [`observe`](Self::observe)).
    pub fn device_took(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.device_nanos.store(nanos, Ordering::Relaxed);
    }

    /// The consumer took a batch after waiting `waited` for it.
    pub fn observe(&self, waited: Duration) {
        let device = Duration::from_nanos(self.device_nanos.swap(0, Ordering::Relaxed));
        if self.mode != RouteMode::Auto {
            return;
        }
        let share = self.share.load(Ordering::Relaxed);
        let next = if waited > WAIT_THRESHOLD {
            (share + RAISE).min(WHOLE)
        } else if device > WAIT_THRESHOLD {
            share.saturating_sub(LOWER_DEVICE_BOUND)
        } else {
            share.saturating_sub(LOWER)
        };
        self.share.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: u64 = 12_000_000;

    #[test]
    fn small_images_stay_on_the_cpu_and_always_sends_every_large_one() {
        let route = DecodeRoute::new(RouteMode::Always, 2_000_000);
        assert!(!route.to_device(1_999_999));
        assert!((0..100).all(|_| route.to_device(BIG)));
        assert_eq!(route.sent(), 100);
        route.observe(Duration::from_secs(1));
        assert_eq!(route.share(), 1.0);
    }

    #[test]
    fn auto_sends_none_until_the_consumer_waits_then_backs_off_while_it_does_not() {
        let route = DecodeRoute::new(RouteMode::Auto, 0);
        assert!(!(0..100).any(|_| route.to_device(BIG)));
        // A wait at the threshold is the hand-off, not a stall.
        route.observe(WAIT_THRESHOLD);
        assert_eq!(route.share(), 0.0);
        for _ in 0..4 {
            route.observe(Duration::from_millis(5));
        }
        assert_eq!(route.share(), 0.25);
        // A share of a quarter sends every fourth eligible image, evenly.
        let sent: Vec<bool> = (0..8).map(|_| route.to_device(BIG)).collect();
        assert_eq!(sent.iter().filter(|&&s| s).count(), 2);
        assert!(sent
            .windows(4)
            .all(|w| w.iter().filter(|&&s| s).count() == 1));
        for _ in 0..32 {
            route.observe(Duration::ZERO);
        }
        assert_eq!(route.share(), 0.125);
        // The device's decoding holding the consumer up lowers it faster, once per report.
        route.device_took(Duration::from_millis(5));
        route.observe(Duration::ZERO);
        assert_eq!(route.share(), 0.125 - 1.0 / 64.0);
        route.observe(Duration::ZERO);
        assert_eq!(route.share(), 0.125 - 1.0 / 64.0 - 1.0 / 256.0);
        for _ in 0..1000 {
            route.observe(Duration::ZERO);
        }
        assert_eq!(route.share(), 0.0);
        for _ in 0..100 {
            route.observe(Duration::from_secs(1));
        }
        assert_eq!(route.share(), 1.0);
    }
}
