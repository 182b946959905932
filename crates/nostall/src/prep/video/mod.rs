//! Videos: clips of exact frames, each prepared by the image operators with one draw per
//! clip.
//!
//! A video pipeline is a [`Clip`] (which frames, drawn from the sample's generator) and an
//! [`ImagePipeline`] that every frame goes through. Each clip draws its geometry (crop,
//! flip) and its photometric choices once, from a generator of its own, and every frame
//! of it is made with those draws: torchvision.transforms.v2's semantics on a video
//! tensor (one crop, flip and jitter per clip, the same on every frame).
//!
//! The caller's own functions (`ops.Python`) come last: each gets the whole clip as
//! delivered, after every frame is made, with a seed from the sample's generator and its
//! place, so that a function sees the clip's time axis and the operators' draws are those
//! of a pipeline without it.
//!
//! Decoding is `nostall-video`'s (FFmpeg's libraries, the `video` feature): a frame index
//! made from the container's packets, then each group of pictures decoded once, forward,
//! for the clip's frames in it, skipping frames nothing references. The frame index is
//! made once per video and kept, by sample, for every later read (`FrameIndexes`), and in a
//! file beside the dataset's index for later processes (`IndexFile`). Without the feature a
//! video pipeline can be described and checked, and fails to start with an error that
//! says so.

mod clip;
#[cfg(feature = "video")]
mod index_file;
#[cfg(feature = "video")]
mod indexes;
#[cfg(feature = "video")]
mod preparer;
mod views;

#[cfg(feature = "video")]
use std::sync::Arc;

#[cfg(feature = "video")]
pub(crate) use preparer::cause;

pub(crate) use clip::not_video;
pub use clip::{Clip, Declaration, Timeline, VideoOp, DECLARATIONS, MAX_CLIPS, MAX_FRAMES};
#[cfg(feature = "video")]
pub use index_file::IndexFile;
#[cfg(feature = "video")]
pub use indexes::{FrameIndexes, DEFAULT_INDEX_CACHE};
pub use views::VideoViewsPipeline;

use super::image::op::Stage;
use super::image::{DeviceFinish, ImagePipeline, Layout, Op};
use super::{DType, Modality, Prep, Preparer, SampleLayout};
use crate::error::{Error, Result};
use crate::user_code::function::UserOp;

/// A [`Clip`] and the image operators its frames go through, with a fixed output shape:
/// `[T, C, H, W]` (`[T, H, W, C]` with the HWC layout) or `[C, T, H, W]`, with a leading
/// dimension of clips when a sample holds several.
///
/// Its videos' frame indexes are kept in its `FrameIndexes` (with the `video` feature),
/// which its clones share: every prep thread of the loader that runs it, in every epoch.
#[derive(Debug, Clone)]
pub struct VideoPipeline {
    clip: VideoOp,
    frames: ImagePipeline,
    /// The caller's functions on the whole clip, each with its place among the operators.
    clip_fns: Vec<(usize, UserOp)>,
    #[cfg(feature = "video")]
    indexes: Arc<FrameIndexes>,
}

/// Two pipelines are equal when they make the same samples: what their caches hold is no
/// part of it.
impl PartialEq for VideoPipeline {
    fn eq(&self, other: &VideoPipeline) -> bool {
        (&self.clip, &self.frames, &self.clip_fns) == (&other.clip, &other.frames, &other.clip_fns)
    }
}

impl VideoPipeline {
    /// Checks that the frame operators give one fixed size (as an image pipeline's must),
    /// that none of them needs something a frame lacks, and that the layout fits.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming what does not fit.
    pub fn new(clip: VideoOp, mut ops: Vec<Op>, dtype: DType, layout: Layout) -> Result<Self> {
        let user_fn = |op: &Op| match op.stage() {
            Stage::User(user) => Some(user.clone()),
            _ => None,
        };
        let frame_ops = ops
            .iter()
            .rposition(|op| user_fn(op).is_none())
            .map_or(0, |last| last + 1);
        if let Some(user) = ops[..frame_ops].iter().find(|op| user_fn(op).is_some()) {
            return Err(not_video(&format!(
                "{} before a frame operator: with video, ops.Python goes last, where it is \
                 given the whole clip as delivered",
                user.name()
            )));
        }
        let clip_fns = ops
            .split_off(frame_ops)
            .iter()
            .enumerate()
            .filter_map(|(i, op)| Some((frame_ops + i, user_fn(op)?)))
            .collect();
        if clip.0.channels_first() && layout == Layout::Hwc {
            return Err(Error::Config(
                "Clip(layout='CTHW') puts channels first: leave the loader's layout at CHW".into(),
            ));
        }
        let frames = ImagePipeline::new(ops, dtype, layout)?;
        if let Some(op) = frames.on_a_canvas() {
            return Err(Error::Config(format!(
                "{op} pads a still image after its resize; video frames cannot take it yet"
            )));
        }
        Ok(VideoPipeline {
            clip,
            frames,
            clip_fns,
            #[cfg(feature = "video")]
            indexes: Arc::new(FrameIndexes::new(DEFAULT_INDEX_CACHE)),
        })
    }

    /// The clip's plan.
    pub fn clip(&self) -> &Clip {
        &self.clip.0
    }

    /// What every frame goes through.
    pub fn frames(&self) -> &ImagePipeline {
        &self.frames
    }

    /// The decompression guard: frames with more pixels are refused (the image
    /// pipeline's, [`ImagePipeline::with_max_pixels`]).
    pub fn with_max_pixels(self, max_pixels: u64) -> VideoPipeline {
        VideoPipeline {
            frames: self.frames.with_max_pixels(max_pixels),
            ..self
        }
    }

    /// This pipeline with a cache of frame indexes of its own, of up to `bytes` bytes of
    /// serialised index (33 bytes a frame; 0 keeps none, so that every read scans its
    /// video). [`DEFAULT_INDEX_CACHE`] unless set.
    #[cfg(feature = "video")]
    pub fn with_index_cache(self, bytes: usize) -> VideoPipeline {
        VideoPipeline {
            indexes: Arc::new(FrameIndexes::new(bytes)),
            ..self
        }
    }

    /// This pipeline with a cache of frame indexes of its own, of up to `bytes` bytes,
    /// kept in `file` too, between processes (see [`FrameIndexes`]; 0 keeps none).
    /// The loader's `frame_index_cache` setting gives the dataset's file.
    #[cfg(feature = "video")]
    pub fn with_index_file(self, bytes: usize, file: IndexFile) -> VideoPipeline {
        VideoPipeline {
            indexes: Arc::new(FrameIndexes::kept_in(bytes, file)),
            ..self
        }
    }

    /// Its videos' frame indexes, kept between their reads.
    #[cfg(feature = "video")]
    pub fn frame_indexes(&self) -> &FrameIndexes {
        &self.indexes
    }

    /// The pipeline split for a device, as an image pipeline is
    /// ([`ImagePipeline::for_device`]): the frames' geometry and operators on pixels in
    /// 8-bit HWC, each clip frames first (`[T, H, W, C]`), is what the engine prepares;
    /// the device then converts, normalises and puts the channels where the clip's layout
    /// says ([`DeviceFinish::clip`]).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] where a function of the caller's runs on the clip: the device
    /// finishes the clip after the engine, so the function would not see it as written.
    pub fn for_device(&self) -> Result<(VideoPipeline, DeviceFinish)> {
        if let Some((_, user)) = self.clip_fns.first() {
            return Err(Error::Config(format!(
                "ops.Python({}) with a device: the device finishes the clips after the \
                 engine, so a function of yours would not see them as written",
                user.name()
            )));
        }
        let (frames, mut finish) = self.frames.for_device()?;
        finish.clip = Some(self.clip().channels_first());
        let mut clip = self.clip.clone();
        clip.0 = clip.0.frames_first();
        let geometry = VideoPipeline {
            clip,
            frames,
            clip_fns: Vec::new(),
            #[cfg(feature = "video")]
            indexes: self.indexes.clone(),
        };
        Ok((geometry, finish))
    }

    /// The shape of one sample.
    pub fn sample_shape(&self) -> Vec<usize> {
        let clip = self.clip();
        let frame = self.frames.sample_shape();
        let mut shape = Vec::with_capacity(5);
        if clip.clips() > 1 {
            shape.push(clip.clips());
        }
        if clip.channels_first() {
            shape.extend([frame[0], clip.frames(), frame[1], frame[2]]);
        } else {
            shape.push(clip.frames());
            shape.extend(frame);
        }
        shape
    }
}

/// `Clip(16) → RandomResizedCrop(224) → …, float32 CHW`, for reports.
impl std::fmt::Display for VideoPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} → {}", self.clip, self.frames)?;
        for (_, user) in &self.clip_fns {
            write!(f, " → Python({})", user.name())?;
        }
        Ok(())
    }
}

/// The videos modality: what a prepared clip looks like, and a decoder per thread.
impl Prep for VideoPipeline {
    fn modality(&self) -> Modality {
        Modality::Video
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(self.sample_shape(), self.frames.dtype())
    }

    fn fingerprint(&self) -> String {
        let fns = self.clip_fns.iter();
        let fns: String = fns
            .map(|(_, user)| format!(" Python({})", user.name()))
            .collect();
        format!("{} {}{fns}", self.clip, self.frames.fingerprint())
    }

    #[cfg(feature = "video")]
    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(preparer::VideoPreparer::new(self.clone())))
    }

    #[cfg(not(feature = "video"))]
    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Err(not_built())
    }
}

/// Why a build without the `video` feature prepares no video.
#[cfg(not(feature = "video"))]
pub(crate) fn not_built() -> Error {
    Error::Config(
        "this build of nostall decodes no video: build it with the `video` feature \
         (FFmpeg's libraries; `make deps` installs them)"
            .into(),
    )
}

#[cfg(test)]
mod tests;
