//! The output's layout: the order of a prepared image's dimensions.

use crate::error::{Error, Result};

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
