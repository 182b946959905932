//! Prep: what a sample becomes. The seam between the pipeline, which moves bytes and
//! batches without knowing what they hold, and each modality, which knows its formats.
//!
//! A modality implements [`Prep`]: it declares the layout of one prepared sample
//! ([`SampleLayout`]: shape and element type, so a fixed number of bytes that the pipeline
//! reserves in a batch buffer) and makes a [`Preparer`] per prep thread, the state that
//! turns one sample's encoded bytes into its slot (decoders, scratch buffers). A
//! [`Pipeline`] is a shared handle to one `Prep`; the loader clones it into every thread.
//!
//! Three modalities ship: [`image`] (JPEG, PNG; crops, flips, normalisation), [`audio`]
//! (WAV, FLAC, Ogg Vorbis, Ogg Opus, MP3; resampling, crops, mel spectrograms) and [`video`]
//! (clips of exact frames, each through the image operators). The files each one
//! reads are declared once, by [`Modality`], and the catalog and storage list datasets
//! through it. Their operators have one text form, [`notation`] (Python's `repr`), in which a
//! pipeline travels as a setting.
//!
//! A preparer must leave nothing behind from one sample to the next that could change the
//! next one's output: the pipeline relies on it to make output independent of which
//! thread prepared what, and a sample that failed must not harm its neighbours.

pub mod args;
pub mod audio;
pub mod byte_values;
pub mod image;
pub mod mixup;
pub mod notation;
pub mod processes;
mod python;
pub mod route;
#[cfg(feature = "tokenize")]
pub mod tokens;
pub mod translation;
pub mod video;

use std::sync::Arc;

use crate::error::{Cause, Error, Result};
use crate::prep::route::DecodeRoute;
use crate::rng::Rng;
use crate::sample::SampleId;

pub use audio::AudioPipeline;
pub use byte_values::ByteValues;
pub use image::{ImagePipeline, Placement, ViewsPipeline};
pub use notation::Operators;
pub use video::{VideoPipeline, VideoViewsPipeline};

pub use crate::sample::{DType, Modality, SampleLayout, UnknownName};

/// A modality's recipe: what one prepared sample looks like, and how to make it.
///
/// Implementations are immutable and shared by every prep thread; the per-thread state
/// lives in the [`Preparer`] each thread makes.
pub trait Prep: Send + Sync + std::fmt::Debug + std::fmt::Display {
    /// The kind of files this recipe reads.
    fn modality(&self) -> Modality;

    /// Shape and element type of every prepared sample.
    fn layout(&self) -> SampleLayout;

    /// Text that changes whenever the output would: what a saved position is checked
    /// against (a [`RunIdentity`](crate::RunIdentity) digests it).
    fn fingerprint(&self) -> String;

    /// The state one prep thread keeps.
    ///
    /// # Errors
    ///
    /// When that state cannot be made (a codec library that fails to start).
    fn preparer(&self) -> Result<Box<dyn Preparer>>;

    /// The route that sends some samples to a device decoder, if this recipe has one
    /// (the consumer reports its waits to it).
    fn decode_route(&self) -> Option<&DecodeRoute> {
        None
    }

    /// Whether its samples carry a geometry that targets follow (a detection sample's
    /// boxes: [`Preparer::placement`]), in words if not.
    ///
    /// # Errors
    ///
    /// What keeps targets from following its samples, as a sentence.
    fn places_targets(&self) -> std::result::Result<(), String> {
        Err("boxes follow the geometry of an image pipeline, and this pipeline has none".into())
    }

    /// The operator whose draws read the sample's boxes (`RandomIoUCrop`), if it has one:
    /// its samples must carry a boxes field ([`Preparer::prepare_targeted`]).
    fn targets_needed(&self) -> Option<&'static str> {
        None
    }

    /// The operator that gives each image its own size on a canvas that only holds the
    /// batch (`RandomShortestSize` with `max_size`), if it has one: what a batch can be
    /// cut to its largest image for (`pad_to_largest`).
    fn batch_canvas(&self) -> Option<&'static str> {
        None
    }
    /// The values its `f32` elements take when each was computed from one byte, if its
    /// output is such (an image's `ToTensor` and `Normalize`): what lets remote prep send
    /// the bytes instead ([`ByteValues`]).
    fn byte_values(&self) -> Option<ByteValues> {
        None
    }
    /// This recipe writing each element's byte instead of its value, where every element
    /// of its output before what runs on the delivered sample is a byte's value in
    /// [`Prep::byte_values`]' tables: the same run (draws, bytes), stopped at the
    /// conversion, with this recipe's fingerprint. What a remote preparer makes, so that
    /// neither it nor the network carries the values; the trainer converts the bytes and
    /// runs the rest ([`Prep::finish_converted`]).
    fn unconverted(&self) -> Option<Pipeline> {
        None
    }
    /// What this recipe does after its conversion (its operators on the delivered
    /// sample, such as `RandomErasing`), run on `out`, a sample its
    /// [`Prep::unconverted`] recipe made and [`Prep::byte_values`] converted: with
    /// `sample`, the generator its preparer was given for it, `out` becomes this recipe's
    /// sample, draws and all. Nothing where the conversion ends the recipe.
    ///
    /// # Errors
    ///
    /// What an operator on the delivered sample reports.
    fn finish_converted(&self, _out: &mut [u8], _sample: &Rng) -> Result<(), Cause> {
        Ok(())
    }
}

/// How a preparer left a sample.
#[derive(Debug)]
pub enum Prepared {
    /// In its slot.
    InSlot,
    /// Left for a device to decode ([`DecodeRoute`]): its slot holds zeros.
    Deferred(Box<Deferred>),
}

/// A JPEG a device decodes, with the augmentation nostall drew for it: the consumer's
/// device decodes `data`, takes the `geometry.source` region, resizes it to the output
/// size, mirrors it if `geometry.flip`, and writes it in the sample's slot.
#[derive(Debug, Clone)]
pub struct Deferred {
    /// The encoded file (shared: a [`DeviceQueue`](crate::loader::DeviceQueue) may
    /// hand it to the device before its batch is delivered).
    pub data: Arc<[u8]>,
    /// Where to read in the image, at what size, mirrored or not.
    pub geometry: image::Geometry,
}

/// One prep thread's state: prepares one sample at a time into its slot.
pub trait Preparer: Send {
    /// Decodes and transforms `data` into `out` (exactly [`SampleLayout::bytes`] bytes),
    /// drawing every random choice from `rng`; or, where the recipe's
    /// [`DecodeRoute`] says so, draws them and leaves the decoding to a device.
    ///
    /// # Errors
    ///
    /// The [`Cause`] that makes this sample unusable; the preparer stays usable for the
    /// next sample, whose output must not depend on this failure.
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause>;

    /// The dataset's id of the sample its next [`Preparer::prepare`] (or
    /// [`Preparer::prepare_targeted`]) call is for, which the loader gives before each
    /// sample: what a preparer that keeps something of a sample between its reads (a
    /// video's frame index) keeps it by. A call it was not given one for prepares a
    /// sample without an identity, of which nothing is kept; a preparer that keeps
    /// nothing ignores it.
    fn next_sample(&mut self, _id: SampleId) {}

    /// Where the pixels of the sample it last prepared came from, for the targets that
    /// follow them ([`Prep::places_targets`]); `None` where its modality has no such
    /// geometry, or where that sample failed.
    fn placement(&self) -> Option<Placement> {
        None
    }

    /// Where the pixels of each view of the sample it last prepared came from, in the
    /// views' order, for the targets that follow each view (a list of pipelines'); a
    /// sample of one image's [`Preparer::placement`] alone; empty where there is none.
    fn placements(&self) -> Vec<Placement> {
        self.placement().into_iter().collect()
    }

    /// The span of the video's timeline each clip of the sample it last prepared covers
    /// (its first frame's time to its last frame's end), in the sample's order of clips,
    /// for the fields that follow them (a video's audio track); `None` where its modality
    /// has no clips.
    #[cfg(feature = "video")]
    fn clip_spans(&self) -> Option<&[nostall_video::Span]> {
        None
    }

    /// Prepares `data` as [`Preparer::prepare`] does, for a sample with boxes `targets`
    /// (x0, y0, x1, y1 in source pixels), which the operators whose draws read them draw
    /// against ([`Prep::targets_needed`]). A preparer without such operators ignores them.
    ///
    /// # Errors
    ///
    /// As [`Preparer::prepare`].
    fn prepare_targeted(
        &mut self,
        data: &[u8],
        _targets: &[[f64; 4]],
        rng: &mut Rng,
        out: &mut [u8],
    ) -> Result<Prepared, Cause> {
        self.prepare(data, rng, out)
    }
}

/// What a loader does to each sample: a shared handle to one modality's [`Prep`].
#[derive(Clone)]
pub struct Pipeline {
    prep: Arc<dyn Prep>,
    layout: SampleLayout,
}

impl Pipeline {
    /// A pipeline running `prep`: one of nostall's modalities, or one of your own.
    pub fn new(prep: impl Prep + 'static) -> Pipeline {
        let layout = prep.layout();
        Pipeline {
            prep: Arc::new(prep),
            layout,
        }
    }

    /// A preset by name: the image presets `"train"` and `"val"` (see
    /// [`ImagePipeline::preset`]) at output size `image_size`, or the audio presets `"m5"`
    /// and `"melspec"` and their `"-val"` forms (see [`AudioPipeline::preset`]), for
    /// which `image_size` is unused.
    pub fn preset(name: &str, image_size: u32) -> Result<Pipeline> {
        match name {
            _ if AudioPipeline::PRESETS.contains(&name) => {
                AudioPipeline::preset(name).map(Pipeline::new)
            }
            "train" | "val" | "eval" => ImagePipeline::preset(name, image_size).map(Pipeline::new),
            _ => Err(Error::Config(format!(
                "unknown pipeline preset {name:?}: use \"train\" or \"val\" (images), \"m5\" \
                 or \"melspec\" (audio), or give a list of operators"
            ))),
        }
    }

    /// The ImageNet training pipeline ([`ImagePipeline::imagenet_train`]).
    ///
    /// # Panics
    ///
    /// When `size` is 0.
    pub fn imagenet_train(size: u32) -> Pipeline {
        Pipeline::new(ImagePipeline::imagenet_train(size))
    }

    /// The ImageNet evaluation pipeline ([`ImagePipeline::imagenet_val`]).
    ///
    /// # Panics
    ///
    /// When `size` is 0.
    pub fn imagenet_val(size: u32) -> Pipeline {
        Pipeline::new(ImagePipeline::imagenet_val(size))
    }

    /// The recipe.
    pub fn prep(&self) -> &dyn Prep {
        &*self.prep
    }

    /// The kind of files it reads.
    pub fn modality(&self) -> Modality {
        self.prep.modality()
    }

    /// Shape and element type of one prepared sample.
    pub fn layout(&self) -> &SampleLayout {
        &self.layout
    }

    /// Bytes of one prepared sample.
    pub fn sample_bytes(&self) -> usize {
        self.layout.bytes()
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.prep.fmt(f)
    }
}

/// As a person would write it down (for reports).
impl std::fmt::Display for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.prep, f)
    }
}

impl From<ImagePipeline> for Pipeline {
    fn from(image: ImagePipeline) -> Pipeline {
        Pipeline::new(image)
    }
}

impl From<VideoPipeline> for Pipeline {
    fn from(video: VideoPipeline) -> Pipeline {
        Pipeline::new(video)
    }
}

impl From<AudioPipeline> for Pipeline {
    fn from(audio: AudioPipeline) -> Pipeline {
        Pipeline::new(audio)
    }
}

/// Decodes whole samples of a modality and discards them: the floor a pipeline's speed
/// is compared with (`nostall bench`), since every pipeline decodes at least once.
pub struct DecodeOnly {
    decoder: Decoding,
}

enum Decoding {
    Image(image::codec::Decoder),
    Audio(audio::Waveform),
    #[cfg(feature = "video")]
    Video(nostall_video::Limits),
}

impl std::fmt::Debug for DecodeOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let modality = match self.decoder {
            Decoding::Image(_) => Modality::Image,
            Decoding::Audio(_) => Modality::Audio,
            #[cfg(feature = "video")]
            Decoding::Video(_) => Modality::Video,
        };
        f.debug_struct("DecodeOnly")
            .field("modality", &modality)
            .finish()
    }
}

impl DecodeOnly {
    /// A decoder for `modality`'s files, with the default limits.
    ///
    /// # Errors
    ///
    /// When the codec library cannot start.
    pub fn new(modality: Modality) -> Result<DecodeOnly> {
        let decoder = match modality {
            Modality::Image => Decoding::Image(
                image::codec::Decoder::new(image::codec::DEFAULT_MAX_PIXELS)
                    .map_err(Error::Config)?,
            ),
            Modality::Audio => Decoding::Audio(audio::Waveform::default()),
            #[cfg(feature = "video")]
            Modality::Video => Decoding::Video(nostall_video::Limits::default()),
            #[cfg(not(feature = "video"))]
            Modality::Video => return Err(video::not_built()),
        };
        Ok(DecodeOnly { decoder })
    }

    /// Decodes `data` in full: every pixel of an image, every channel of a recording at
    /// its own rate, every frame of a video.
    ///
    /// # Errors
    ///
    /// Why the file cannot be decoded.
    pub fn decode(&mut self, data: &[u8]) -> Result<(), Cause> {
        match &mut self.decoder {
            Decoding::Image(decoder) => decoder.decode_full(data).map(drop),
            Decoding::Audio(wave) => audio::decode_all(data, wave),
            #[cfg(feature = "video")]
            Decoding::Video(limits) => nostall_video::decode_all(data, limits, &mut |_, _| {})
                .map(drop)
                .map_err(video::cause),
        }
    }
}
