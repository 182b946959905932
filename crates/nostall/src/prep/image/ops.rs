//! The image operators a pipeline is written in (torchvision's, with their defaults and
//! checks), and the output's layout.

use crate::error::{Error, Result};

/// ImageNet channel means, in [0, 1] units (torchvision's convention).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations, in [0, 1] units.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// A target size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Scale so that the shorter side has this length, keeping the aspect ratio.
    Shorter(u32),
    /// Exactly this height and width.
    Exact {
        /// Height in pixels.
        height: u32,
        /// Width in pixels.
        width: u32,
    },
}

/// One step of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Crop a random area and aspect ratio, then resize to `size` (torchvision semantics).
    RandomResizedCrop {
        /// Output height and width.
        size: (u32, u32),
        /// Range of the crop's area as a fraction of the image's.
        scale: (f64, f64),
        /// Range of the crop's aspect ratio (width / height).
        ratio: (f64, f64),
    },
    /// Resize.
    Resize(Size),
    /// Crop the centre to height × width.
    CenterCrop {
        /// Height in pixels.
        height: u32,
        /// Width in pixels.
        width: u32,
    },
    /// Mirror left–right with probability `p`.
    RandomHorizontalFlip {
        /// Probability of mirroring.
        p: f64,
    },
    /// Subtract `mean`, divide by `std`, per channel, in [0, 1] units. Needs f32 output.
    Normalize {
        /// Per-channel mean (RGB).
        mean: [f32; 3],
        /// Per-channel standard deviation (RGB).
        std: [f32; 3],
    },
}

/// RandomResizedCrop's default range of the crop's area (torchvision's).
pub const DEFAULT_CROP_SCALE: (f64, f64) = (0.08, 1.0);
/// RandomResizedCrop's default range of the crop's aspect ratio (torchvision's).
pub const DEFAULT_CROP_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);

impl Op {
    /// RandomResizedCrop with torchvision's default scale and ratio ranges.
    pub fn random_resized_crop(size: u32) -> Op {
        Op::RandomResizedCrop {
            size: (size, size),
            scale: DEFAULT_CROP_SCALE,
            ratio: DEFAULT_CROP_RATIO,
        }
    }

    /// Checks the operator's own parameters: sizes of at least one pixel, ordered
    /// ranges, a probability in [0, 1], finite means and positive standard deviations.
    /// [`ImagePipeline::new`](super::ImagePipeline::new) checks each operator this way, then how they combine.
    pub fn validate(&self) -> Result<()> {
        let not_empty = |name: &str, height: u32, width: u32| {
            if height == 0 || width == 0 {
                return Err(Error::Config(format!(
                    "{name} to {height}x{width} pixels: sizes must be at least 1"
                )));
            }
            Ok(())
        };
        match *self {
            Op::RandomResizedCrop {
                size: (height, width),
                scale,
                ratio,
            } => {
                not_empty("RandomResizedCrop", height, width)?;
                if !(0.0 < scale.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                    return Err(Error::Config(format!(
                        "RandomResizedCrop scale {scale:?} must satisfy 0 < lo <= hi <= 1"
                    )));
                }
                if !(0.0 < ratio.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                    return Err(Error::Config(format!(
                        "RandomResizedCrop ratio {ratio:?} must satisfy 0 < lo <= hi"
                    )));
                }
            }
            Op::Resize(Size::Shorter(0)) => {
                return Err(Error::Config(
                    "Resize of the shorter side to 0 pixels: sizes must be at least 1".into(),
                ));
            }
            Op::Resize(Size::Shorter(_)) => {}
            Op::Resize(Size::Exact { height, width }) => not_empty("Resize", height, width)?,
            Op::CenterCrop { height, width } => not_empty("CenterCrop", height, width)?,
            Op::RandomHorizontalFlip { p } => {
                if !(0.0..=1.0).contains(&p) {
                    return Err(Error::Config(format!(
                        "flip probability {p} is not in [0, 1]"
                    )));
                }
            }
            Op::Normalize { mean, std } => {
                if std.iter().any(|&v| v <= 0.0 || !v.is_finite()) {
                    return Err(Error::Config(format!(
                        "Normalize std {std:?} must be positive"
                    )));
                }
                if !mean.iter().all(|v| v.is_finite()) {
                    return Err(Error::Config(format!(
                        "Normalize mean {mean:?} must be finite"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Order of the output's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Layout {
    /// Channels, height, width (PyTorch).
    #[default]
    Chw,
    /// Height, width, channels (TensorFlow, JAX, image files).
    Hwc,
}

impl std::str::FromStr for Layout {
    type Err = Error;

    /// `CHW` or `HWC`, in either case.
    fn from_str(s: &str) -> Result<Layout> {
        match s.to_ascii_uppercase().as_str() {
            "CHW" => Ok(Layout::Chw),
            "HWC" => Ok(Layout::Hwc),
            _ => Err(Error::Config(format!(
                "unknown output layout {s:?}: use \"CHW\" (channels first, PyTorch) or \"HWC\" \
                 (channels last)"
            ))),
        }
    }
}

/// `CHW` or `HWC` (what its `FromStr` reads).
impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Chw => "CHW",
            Layout::Hwc => "HWC",
        })
    }
}
