//! `Clip`: which frames of a video a sample holds, drawn from the sample's generator.
//!
//! A clip is `frames` frames, `stride` frames apart in the video's own frames, or `1/fps`
//! seconds apart by presentation time (right on variable frame rates: each is the frame
//! shown at that time). The sampler places it: at random, at the middle, at evenly spaced
//! places (`clips` of them), or as one frame in each of `frames` equal segments of the
//! whole video (TSN and VideoMAE's evaluation: `spread` takes each segment's middle,
//! `segments` a random frame of each).

use crate::error::{Error, Result};
use crate::prep::args::{Args, Declaration as Declared, Handle, Kind, Operation, Param, Value};
use crate::rng::{derive, Rng};

/// Every video operator, in the order the docs list them.
pub static DECLARATIONS: &[&Declaration] = &[&DECLARATION];

/// A video operator's declaration: what Python, the text form and the docs know of it.
pub type Declaration = Declared<VideoOp>;

/// A video operator: a handle to one checked [`Clip`].
pub type VideoOp = Handle<Clip>;

/// The most frames a sample holds (all its clips together).
pub const MAX_FRAMES: usize = 1024;

/// The most clips of one video a sample holds.
pub const MAX_CLIPS: usize = 64;

const SAMPLERS: &[&str] = &["random", "center", "uniform", "segments", "spread"];
const LAYOUTS: &[&str] = &["TCHW", "CTHW"];

static DECLARATION: Declaration = Declaration {
    name: "Clip",
    doc: "The frames of a video a sample holds: `frames` frames, `stride` frames apart, or \
          `1/fps` seconds apart by presentation time (variable frame rates included). \
          `sampler` places the clip: 'random' (uniform over the places it fits, \
          torchvision's RandomClipSampler), 'center' (the middle), 'uniform' (`clips` clips \
          evenly spaced from the first frame to the last, torchvision's UniformClipSampler), \
          'segments' (the video cut in `frames` equal segments, a random frame of each: \
          TSN's training) or 'spread' (each segment's middle frame: VideoMAE's and TSN's \
          evaluation). A video shorter than the clip repeats its last frame. The image \
          operators after it run on every frame, with one draw per clip: the same crop, \
          flip and jitter on each of its frames.",
    params: &[
        Param::required("frames", Kind::Int, "frames a clip holds, 1 to 1024"),
        Param::with_default(
            "stride",
            Kind::Int,
            "1",
            "frames of the video from one of the clip's to the next (1: consecutive)",
        ),
        Param::with_default(
            "fps",
            Kind::OptionalFloat,
            "None",
            "frames a second of the clip, by presentation time (instead of `stride`)",
        ),
        Param::with_default(
            "sampler",
            Kind::Choice,
            "'random'",
            "'random', 'center', 'uniform', 'segments' or 'spread'",
        ),
        Param::with_default(
            "clips",
            Kind::Int,
            "1",
            "clips of each video a sample holds (more than one: a leading dimension)",
        ),
        Param::with_default(
            "layout",
            Kind::Choice,
            "'TCHW'",
            "'TCHW' (frames first, torchvision's video tensors) or 'CTHW' (channels first, \
             for 3D convolutions)",
        ),
    ],
    translates: &[],
    build,
};

fn build(args: &Args) -> Result<VideoOp> {
    let frames: usize = args.int("frames")?;
    let clips: usize = args.int("clips")?;
    if !(1..=MAX_FRAMES).contains(&frames) {
        return Err(args.error("frames", format!("{frames}: keep 1 to {MAX_FRAMES}")));
    }
    if !(1..=MAX_CLIPS).contains(&clips) || clips * frames > MAX_FRAMES {
        return Err(args.error(
            "clips",
            format!("{clips}: keep 1 to {MAX_CLIPS}, and clips × frames at most {MAX_FRAMES}"),
        ));
    }
    let stride: u32 = args.int("stride")?;
    if !(1..=1 << 16).contains(&stride) {
        return Err(args.error("stride", format!("{stride}: keep 1 to 65536")));
    }
    let fps = args.optional_float("fps")?;
    if let Some(fps) = fps {
        if !(fps.is_finite() && fps > 0.0 && fps <= 1000.0) {
            return Err(args.error("fps", format!("{fps}: keep above 0 and at most 1000")));
        }
        if stride != 1 {
            return Err(args.error("stride", "give stride or fps, not both"));
        }
    }
    let sampler = match args.choice("sampler", SAMPLERS)? {
        "random" => Sampler::Random,
        "center" => Sampler::Center,
        "uniform" => Sampler::Uniform,
        "segments" => Sampler::Segments,
        _ => Sampler::Spread,
    };
    if matches!(sampler, Sampler::Segments | Sampler::Spread) && (fps.is_some() || stride != 1) {
        return Err(args.error(
            "sampler",
            "'segments' and 'spread' place each frame in its own segment: leave stride and \
             fps out",
        ));
    }
    if clips > 1 && matches!(sampler, Sampler::Center | Sampler::Spread) {
        return Err(args.error(
            "clips",
            "'center' and 'spread' place one clip: use 'uniform' or 'random' for several",
        ));
    }
    let channels_first = args.choice("layout", LAYOUTS)? == "CTHW";
    Ok(Handle(Clip {
        frames,
        stride,
        fps,
        sampler,
        clips,
        channels_first,
    }))
}

/// How a clip is placed in its video.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sampler {
    Random,
    Center,
    Uniform,
    Segments,
    Spread,
}

/// A clip's plan: how many frames, how far apart, placed how (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    frames: usize,
    stride: u32,
    fps: Option<f64>,
    sampler: Sampler,
    clips: usize,
    channels_first: bool,
}

/// What a clip's placement needs to know of its video: the frames' presentation times.
pub trait Timeline {
    /// Frames in the video.
    fn len(&self) -> usize;

    /// Whether the video has no frame.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Presentation time of frame `k`, in seconds.
    fn seconds(&self, frame: usize) -> f64;

    /// The frame shown at `seconds`: the last whose time is at most it (the first for
    /// earlier times).
    fn frame_at(&self, seconds: f64) -> usize;
}

impl Clip {
    /// `Clip(frames)`: consecutive frames at a random place.
    ///
    /// # Panics
    ///
    /// When `frames` is not between 1 and [`MAX_FRAMES`].
    pub fn random(frames: usize) -> VideoOp {
        Handle::known("Clip", vec![Value::Int(frames as i64)])
    }

    /// Frames a clip holds.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Clips of one video a sample holds.
    pub fn clips(&self) -> usize {
        self.clips
    }

    /// Whether the layout is channels first (`CTHW`) rather than frames first (`TCHW`).
    pub fn channels_first(&self) -> bool {
        self.channels_first
    }

    /// This plan laid out frames first: what the engine prepares for a device, which
    /// puts the channels where the user's layout says.
    pub(crate) fn frames_first(&self) -> Clip {
        Clip {
            channels_first: false,
            ..self.clone()
        }
    }

    /// The frames of each clip of a sample of the video `timeline` describes, clip after
    /// clip, drawn from `rng` (the sample's). Frames past the video's end repeat its last.
    pub fn plan(&self, timeline: &dyn Timeline, rng: &mut Rng) -> Vec<u32> {
        let n = timeline.len().max(1);
        let last = n - 1;
        let mut frames = Vec::with_capacity(self.clips * self.frames);
        match self.sampler {
            Sampler::Segments | Sampler::Spread => {
                // Segment i holds frames [i·n/T, (i+1)·n/T): one of them each.
                for i in 0..self.frames {
                    let lo = i as f64 * n as f64 / self.frames as f64;
                    let hi = (i + 1) as f64 * n as f64 / self.frames as f64;
                    let at = if self.sampler == Sampler::Spread {
                        (lo + hi) / 2.0
                    } else {
                        rng.uniform(lo, hi)
                    };
                    frames.push((at.floor() as usize).min(last) as u32);
                }
                return frames;
            }
            _ => {}
        }
        let starts = self.starts(timeline, rng);
        for start in starts {
            for i in 0..self.frames {
                let frame = match self.fps {
                    Some(fps) => timeline.frame_at(timeline.seconds(start) + i as f64 / fps),
                    None => start + i * self.stride as usize,
                };
                frames.push(frame.min(last) as u32);
            }
        }
        frames
    }

    /// The first frame of each clip.
    fn starts(&self, timeline: &dyn Timeline, rng: &mut Rng) -> Vec<usize> {
        let n = timeline.len().max(1);
        // The last frame a clip may start at and still end within the video.
        let latest = match self.fps {
            Some(fps) => {
                let span = (self.frames - 1) as f64 / fps;
                let end = timeline.seconds(n - 1) - span;
                if end < timeline.seconds(0) {
                    0
                } else {
                    timeline.frame_at(end)
                }
            }
            None => (n - 1).saturating_sub((self.frames - 1) * self.stride as usize),
        };
        match self.sampler {
            Sampler::Random => (0..self.clips)
                .map(|c| {
                    let mut clip = rng.fork(derive(&[0x434c_4950, c as u64]));
                    clip.below(latest as u64 + 1) as usize
                })
                .collect(),
            Sampler::Center => vec![latest / 2],
            // torchvision's linspace over the places, rounded down.
            _ if self.clips == 1 => vec![0],
            _ => (0..self.clips)
                .map(|c| (c as f64 * latest as f64 / (self.clips - 1) as f64).floor() as usize)
                .collect(),
        }
    }
}

impl Operation for Clip {
    const MODALITY: &'static str = "video";

    fn declarations() -> &'static [&'static Declaration] {
        DECLARATIONS
    }

    fn declared(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn values(&self) -> Vec<Value> {
        let sampler = SAMPLERS[self.sampler as usize];
        vec![
            Value::Int(self.frames as i64),
            Value::Int(self.stride.into()),
            self.fps.map_or(Value::None, Value::Float),
            Value::Str(sampler.into()),
            Value::Int(self.clips as i64),
            Value::Str(LAYOUTS[usize::from(self.channels_first)].into()),
        ]
    }
}

/// Refuses what a video pipeline cannot be made of.
pub(crate) fn not_video(what: &str) -> Error {
    Error::Config(format!(
        "{what}: a video pipeline is a Clip followed by image operators (nostall.ops) that \
         run on each frame"
    ))
}
