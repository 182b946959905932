//! One prep thread's video decoding: the frame index (the pipeline's kept one, by sample,
//! or a scan of the file), the clip's frames decoded by
//! `nostall-video`, each made into its place of the sample by the frame operators. A
//! manifest's segment comes as the whole video behind an envelope with the segment's
//! times (`storage::Segments`): its clips are drawn among the frames shown within them.

use nostall_video::{ClipDecoder, FrameIndex, Limits, Span, VideoError};

use super::{Timeline, VideoPipeline};
use crate::error::Cause;
use crate::prep::audio::Segment;
use crate::prep::image::view_rng;
use crate::prep::image::{operator_rng, Geometry, Scratch};
use crate::prep::{Modality, Prep, Prepared, Preparer};
use crate::rng::{derive, Rng};
use crate::sample::SampleId;
use crate::user_code::function::UserSample;

/// The decoder, the resampler's scratch, and a frame's worth of bytes for the
/// channels-first layout (a frame is made whole, then spread over the channels' planes).
pub(super) struct VideoPreparer {
    /// The sample's pipelines, in order: one, or each view's ([`VideoPreparer::views`]).
    pipelines: Vec<VideoPipeline>,
    /// Whether each pipeline is a view, drawing from a generator of its own.
    views: bool,
    limits: Limits,
    decoder: ClipDecoder,
    scratch: Scratch,
    frame: Vec<u8>,
    /// The spans of the last sample's clips ([`Preparer::clip_spans`]).
    spans: Vec<Span>,
    /// The id of the sample the next call prepares ([`Preparer::next_sample`]).
    sample: Option<SampleId>,
}

impl VideoPreparer {
    pub(super) fn new(pipeline: VideoPipeline) -> VideoPreparer {
        VideoPreparer::of(vec![pipeline], false)
    }

    /// Several views of each video, view `k` prepared by `views[k]` with the draws of that
    /// pipeline alone given the sample's view generator ([`view_rng`]): the video read
    /// and its frame index taken once (`views[0]`'s cache), and the frames of every view
    /// decoded together, each group of pictures once for all of them.
    pub(super) fn views(views: Vec<VideoPipeline>) -> VideoPreparer {
        VideoPreparer::of(views, true)
    }

    fn of(pipelines: Vec<VideoPipeline>, views: bool) -> VideoPreparer {
        let mut limits = Limits::default();
        let most = pipelines.iter().map(|p| p.frames.max_pixels()).min();
        limits.max_pixels = most.unwrap_or(limits.max_pixels);
        VideoPreparer {
            pipelines,
            views,
            decoder: ClipDecoder::new(limits),
            limits,
            scratch: Scratch::default(),
            frame: Vec::new(),
            spans: Vec::new(),
            sample: None,
        }
    }
}

/// One pipeline's part of a sample: where its frames are among those decoded and its
/// bytes in the sample's slot, its generator before any draw, and each clip's draws.
struct Planned {
    wanted: usize,
    out: usize,
    sample: Rng,
    clips: Vec<(Geometry, Rng)>,
}

/// The frames a clip is drawn among: frames `first..first + len` of the video (all of
/// them, or those a manifest's segment shows), numbered from 0.
struct Window<'a> {
    index: &'a FrameIndex,
    first: usize,
    len: usize,
}

impl<'a> Window<'a> {
    /// The frames shown from `segment.start` (inclusive) to its end (exclusive; the
    /// video's end when it has no duration), in seconds from the first frame's time.
    fn of(index: &'a FrameIndex, segment: Option<Segment>) -> Result<Window<'a>, Cause> {
        let Some(segment) = segment else {
            return Ok(Window {
                index,
                first: 0,
                len: index.len(),
            });
        };
        let first = index.frames_before(segment.start);
        let end = segment
            .duration
            .map_or(index.len(), |d| index.frames_before(segment.start + d));
        if end <= first {
            let end = segment
                .duration
                .map_or(String::new(), |d| format!("–{} s", segment.start + d));
            return Err(Cause::Corrupt(format!(
                "its segment {} s{end} shows no frame of the video, whose {} frames span \
                 {:.3} s",
                segment.start,
                index.len(),
                index.duration_seconds()
            )));
        }
        Ok(Window {
            index,
            first,
            len: end - first,
        })
    }
}

impl Timeline for Window<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn seconds(&self, frame: usize) -> f64 {
        self.index.seconds(self.first + frame)
    }

    fn frame_at(&self, seconds: f64) -> usize {
        let at = self.index.frame_at(seconds);
        at.clamp(self.first, self.first + self.len - 1) - self.first
    }
}

/// Why a video cannot be prepared, as a skip counter names it.
pub(crate) fn cause(error: VideoError) -> Cause {
    match error {
        VideoError::UnknownFormat(_) => Cause::UnknownFormat(Modality::Video),
        VideoError::UnsupportedCodec(codec) => Cause::UnsupportedCodec(codec),
        VideoError::TooLarge(what) => Cause::VideoTooLarge(what),
        VideoError::Corrupt(what) => Cause::Corrupt(what),
        other => Cause::Corrupt(other.to_string()),
    }
}

impl Preparer for VideoPreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let id = self.sample.take();
        self.spans.clear();
        let (data, segment) = match Segment::read(data) {
            Some(read) => read.map(|(segment, video)| (video, Some(segment)))?,
            None => (data, None),
        };
        let indexes = self.pipelines[0].frame_indexes();
        let index = indexes.index(id, data, &self.limits).map_err(cause)?;
        if index.is_empty() {
            return Err(Cause::Corrupt("the video stream has no frame".into()));
        }
        let window = Window::of(&index, segment)?;
        let (width, height) = (index.width(), index.height());
        // Each pipeline's frames and draws, as it draws them alone: from the sample's
        // generator, or a view's from the view's.
        let mut wanted = Vec::new();
        let mut planned = Vec::with_capacity(self.pipelines.len());
        let mut at = 0;
        for (place, pipeline) in self.pipelines.iter().enumerate() {
            let clip = pipeline.clip();
            let sample = match self.views {
                true => view_rng(rng, place),
                false => rng.clone(),
            };
            let first = wanted.len();
            match self.views {
                true => wanted.extend(clip.plan(&window, &mut sample.clone())),
                false => wanted.extend(clip.plan(&window, rng)),
            }
            wanted[first..]
                .iter_mut()
                .for_each(|k| *k += window.first as u32);
            // Each clip's span: from its earliest frame's time to the end of its latest.
            self.spans
                .extend(wanted[first..].chunks_exact(clip.frames()).map(|frames| {
                    let first = frames.iter().min().copied().unwrap_or(0) as usize;
                    let last = frames.iter().max().copied().unwrap_or(0) as usize;
                    Span {
                        start: index.pts(first),
                        end: index.end(last),
                        time_base: index.time_base(),
                    }
                }));
            // Each clip's draws, made once for all its frames: the geometry from the
            // clip's generator, the operators on pixels keyed by it.
            let clips = (0..clip.clips())
                .map(|c| {
                    let keyed = sample.fork(derive(&[0x0056_4944_454f, c as u64]));
                    let geometry = pipeline.frames.geometry(width, height, &mut keyed.clone());
                    (geometry, keyed)
                })
                .collect();
            planned.push(Planned {
                wanted: first,
                out: at,
                sample,
                clips,
            });
            at += pipeline.layout().bytes();
        }
        let staged_bytes = self.pipelines.iter().filter(|p| p.clip().channels_first());
        let staged_bytes = staged_bytes.map(|p| p.frames.sample_bytes()).max();
        self.frame.resize(staged_bytes.unwrap_or(0), 0);
        let (pipelines, scratch, staged) = (&self.pipelines, &mut self.scratch, &mut self.frame);
        let mut failed: Option<Cause> = None;
        self.decoder
            .decode(data, &index, &wanted, &mut |at, decoded| {
                if failed.is_some() {
                    return;
                }
                if (decoded.width, decoded.height) != (width, height) {
                    failed = Some(Cause::Corrupt(format!(
                        "frame {} is {}×{}, the stream {width}×{height}",
                        wanted[at], decoded.width, decoded.height
                    )));
                    return;
                }
                let view = planned.partition_point(|p| p.wanted <= at) - 1;
                let (pipeline, plan) = (&pipelines[view], &planned[view]);
                let (frames, frame_bytes) =
                    (pipeline.clip().frames(), pipeline.frames.sample_bytes());
                let at = at - plan.wanted;
                let (c, t) = (at / frames, at % frames);
                let (geometry, keyed) = &plan.clips[c];
                let clip_at = plan.out + c * frames * frame_bytes;
                let clip_out = &mut out[clip_at..clip_at + frames * frame_bytes];
                let pixels = (decoded.rgb, width, height);
                let made = if pipeline.clip().channels_first() {
                    let staged = &mut staged[..frame_bytes];
                    let made = pipeline.frames.sample_from_pixels(
                        scratch,
                        pixels,
                        geometry,
                        staged,
                        (keyed, t),
                    );
                    // [C, H, W] to channel c's plane of [C, T, H, W].
                    let plane = frame_bytes / 3;
                    for (ch, from) in staged.chunks_exact(plane).enumerate() {
                        let at = (ch * frames + t) * plane;
                        clip_out[at..at + plane].copy_from_slice(from);
                    }
                    made
                } else {
                    let slot = &mut clip_out[t * frame_bytes..(t + 1) * frame_bytes];
                    pipeline
                        .frames
                        .sample_from_pixels(scratch, pixels, geometry, slot, (keyed, t))
                };
                if let Err(e) = made {
                    failed = Some(e);
                }
            })
            .map_err(cause)?;
        if let Some(e) = failed {
            return Err(e);
        }
        for (pipeline, plan) in self.pipelines.iter().zip(&planned) {
            let bytes = pipeline.layout().bytes();
            finish_clip(pipeline, &mut out[plan.out..plan.out + bytes], &plan.sample)?;
        }
        Ok(Prepared::InSlot)
    }

    fn next_sample(&mut self, id: SampleId) {
        self.sample = Some(id);
    }

    fn clip_spans(&self) -> Option<&[Span]> {
        Some(&self.spans)
    }
}

/// Runs `pipeline`'s functions of the caller's on `clip`, a whole sample as delivered,
/// each with a seed of its own from `sample` (the sample's generator before any draw) and
/// its place among the operators.
fn finish_clip(pipeline: &VideoPipeline, clip: &mut [u8], sample: &Rng) -> Result<(), Cause> {
    let shape = pipeline.sample_shape();
    for (place, user) in &pipeline.clip_fns {
        let whole = UserSample {
            data: &mut *clip,
            shape: &shape,
            dtype: pipeline.frames.dtype(),
        };
        user.apply(whole, operator_rng(sample, *place).next_u64())?;
    }
    Ok(())
}
