//! The caller's own function on a sample, between a pipeline's operators.
//!
//! The image and audio pipelines fuse their operators (a crop is planned before decoding,
//! `Normalize` is folded into the last pass), so a function of the caller's cannot be
//! called on "the image so far" at any point: it runs where the pipeline has the sample
//! whole. An image's function sees the output's 8-bit pixels as three planes when an
//! operator on pixels or `Normalize` follows it, else the sample as delivered; an audio
//! function sees the cut waveform when `MelSpectrogram` follows it, else the sample as
//! delivered. Its place is what [`UserOp`] records; the pipelines check it.
//!
//! A function is given a seed of its own, drawn from the sample's generator and its place
//! in the pipeline (as an operator's draws are), so that its output does not depend on the
//! thread that ran it, and the native operators' draws are those of a pipeline without it.

use std::fmt;
use std::sync::Arc;

use crate::error::Cause;
use crate::sample::DType;

/// A function of the caller's on one sample (the Python bindings' `ops.Python`).
pub trait UserFn: Send + Sync + 'static {
    /// Its name, for messages, the pipeline's text and its fingerprint.
    fn name(&self) -> &str;

    /// Changes `sample` in place, drawing its random choices from a generator seeded with
    /// `seed`.
    ///
    /// # Errors
    ///
    /// The sample's [`Cause`] (for a function that raised: [`Cause::UserCode`]).
    fn apply(&self, sample: UserSample<'_>, seed: u64) -> Result<(), Cause>;
}

/// A sample as a [`UserFn`] sees it: `data` holds the values of `shape`, C-contiguous, of
/// `dtype` (or of `f32` for an audio waveform).
#[derive(Debug)]
pub struct UserSample<'a> {
    /// The values' bytes.
    pub data: &'a mut [u8],
    /// Its dimensions, outermost first.
    pub shape: &'a [usize],
    /// The element type.
    pub dtype: DType,
}

/// A [`UserFn`] in a pipeline: a shared handle, equal to another of the same name (a
/// pipeline cannot see inside a function; telling two of one name apart is the caller's).
#[derive(Clone)]
pub struct UserOp(Arc<dyn UserFn>);

impl UserOp {
    /// A handle to `f`.
    pub fn new(f: Arc<dyn UserFn>) -> UserOp {
        UserOp(f)
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// Runs the function on `sample` with `seed` (see [`UserFn::apply`]).
    pub(crate) fn apply(&self, sample: UserSample<'_>, seed: u64) -> Result<(), Cause> {
        self.0.apply(sample, seed)
    }
}

impl PartialEq for UserOp {
    fn eq(&self, other: &UserOp) -> bool {
        self.name() == other.name()
    }
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Python({})", self.name())
    }
}
