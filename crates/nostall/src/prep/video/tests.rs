//! The clip's placement and the pipeline's shape (decoding is `nostall-video`'s, tested
//! there and end to end in `tests/engine/video.rs`).

use super::*;
use crate::prep::Operators;
use crate::rng::Rng;

/// Frames at a constant rate.
struct Steady {
    frames: usize,
    fps: f64,
}

impl Timeline for Steady {
    fn len(&self) -> usize {
        self.frames
    }

    fn seconds(&self, frame: usize) -> f64 {
        frame as f64 / self.fps
    }

    fn frame_at(&self, seconds: f64) -> usize {
        ((seconds * self.fps + 1e-9).floor().max(0.0) as usize).min(self.frames - 1)
    }
}

/// Frames 33 and 34 ms apart in turn, as a phone records them.
struct Phone(Vec<f64>);

impl Phone {
    fn new(frames: usize) -> Phone {
        let mut t = 0.0;
        Phone(
            (0..frames)
                .map(|k| {
                    let at = t;
                    t += if k % 2 == 0 { 0.033 } else { 0.034 };
                    at
                })
                .collect(),
        )
    }
}

impl Timeline for Phone {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn seconds(&self, frame: usize) -> f64 {
        self.0[frame]
    }

    fn frame_at(&self, seconds: f64) -> usize {
        self.0.partition_point(|&t| t <= seconds).saturating_sub(1)
    }
}

fn clip(text: &str) -> Clip {
    match text.parse::<Operators>().unwrap() {
        Operators::Video(clip, _) => clip.0,
        other => panic!("{other:?} is not a video's"),
    }
}

#[test]
fn a_random_clip_fits_the_video_and_follows_the_stride() {
    let video = Steady {
        frames: 300,
        fps: 30.0,
    };
    let clip = clip("[Clip(16, stride=4), CenterCrop(8)]");
    let mut starts = std::collections::BTreeSet::new();
    for key in 0..500 {
        let frames = clip.plan(&video, &mut Rng::new(key));
        assert_eq!(frames.len(), 16);
        assert!(frames.windows(2).all(|w| w[1] == w[0] + 4), "{frames:?}");
        assert!(*frames.last().unwrap() < 300);
        starts.insert(frames[0]);
    }
    // Every place the clip fits (0..=239: frame 299 ends it) is drawn, and no other.
    assert_eq!(starts.first(), Some(&0));
    assert_eq!(starts.last(), Some(&239));
    assert!(starts.len() > 200, "{} places", starts.len());
}

#[test]
fn the_same_key_draws_the_same_clip() {
    let video = Steady {
        frames: 100,
        fps: 25.0,
    };
    let clip = clip("[Clip(8, clips=3), CenterCrop(8)]");
    let a = clip.plan(&video, &mut Rng::new(7));
    assert_eq!(a, clip.plan(&video, &mut Rng::new(7)));
    assert_ne!(a, clip.plan(&video, &mut Rng::new(8)));
    assert_eq!(a.len(), 24);
}

#[test]
fn a_short_video_repeats_its_last_frame() {
    let video = Steady {
        frames: 5,
        fps: 30.0,
    };
    for sampler in ["random", "center", "uniform"] {
        let clip = clip(&format!(
            "[Clip(8, stride=2, sampler='{sampler}'), CenterCrop(8)]"
        ));
        let frames = clip.plan(&video, &mut Rng::new(1));
        assert_eq!(frames, [0, 2, 4, 4, 4, 4, 4, 4], "{sampler}");
    }
}

#[test]
fn clips_by_time_take_the_frame_shown_then_on_a_variable_rate() {
    let phone = Phone::new(90);
    let clip = clip("[Clip(4, fps=10, sampler='center'), CenterCrop(8)]");
    let frames = clip.plan(&phone, &mut Rng::new(0));
    // 0.1 s apart: each the last frame shown at or before its time.
    let t0 = phone.seconds(frames[0] as usize);
    for (i, &f) in frames.iter().enumerate() {
        let due = t0 + i as f64 * 0.1;
        let f = f as usize;
        assert!(phone.seconds(f) <= due + 1e-9);
        assert!(f + 1 == phone.len() || phone.seconds(f + 1) > due + 1e-9);
    }
}

#[test]
fn uniform_clips_span_the_video_and_segments_cover_it() {
    let video = Steady {
        frames: 100,
        fps: 30.0,
    };
    let uniform = clip("[Clip(10, sampler='uniform', clips=3), CenterCrop(8)]");
    let frames = uniform.plan(&video, &mut Rng::new(0));
    let starts: Vec<_> = frames.chunks(10).map(|c| c[0]).collect();
    assert_eq!(starts, [0, 45, 90]);
    let spread = clip("[Clip(4, sampler='spread'), CenterCrop(8)]");
    assert_eq!(spread.plan(&video, &mut Rng::new(0)), [12, 37, 62, 87]);
    let segments = clip("[Clip(4, sampler='segments'), CenterCrop(8)]");
    for key in 0..100 {
        let frames = segments.plan(&video, &mut Rng::new(key));
        for (i, f) in frames.iter().enumerate() {
            assert!(
                (25 * i as u32..25 * (i as u32 + 1)).contains(f),
                "{frames:?}"
            );
        }
    }
}

#[test]
fn settings_out_of_bounds_are_refused_naming_them() {
    for (text, says) in [
        ("[Clip(0), CenterCrop(8)]", "frames"),
        ("[Clip(2000), CenterCrop(8)]", "frames"),
        ("[Clip(16, clips=100), CenterCrop(8)]", "clips"),
        ("[Clip(512, clips=4), CenterCrop(8)]", "clips"),
        ("[Clip(16, stride=0), CenterCrop(8)]", "stride"),
        ("[Clip(16, fps=0.0), CenterCrop(8)]", "fps"),
        ("[Clip(16, fps=1e300), CenterCrop(8)]", "fps"),
        ("[Clip(16, stride=2, fps=8.0), CenterCrop(8)]", "stride"),
        (
            "[Clip(16, sampler='spread', stride=2), CenterCrop(8)]",
            "sampler",
        ),
        (
            "[Clip(16, sampler='center', clips=2), CenterCrop(8)]",
            "clips",
        ),
        ("[Clip(16, sampler='sideways'), CenterCrop(8)]", "sampler"),
        ("[Clip(16, layout='HWTC'), CenterCrop(8)]", "layout"),
        ("[CenterCrop(8), Clip(16)]", "Clip is not first"),
        ("[Clip(16), Clip(16), CenterCrop(8)]", "a second Clip"),
    ] {
        let error = text.parse::<Operators>().unwrap_err().to_string();
        assert!(error.contains(says), "{text}: {error}");
    }
}

#[test]
fn the_text_form_reads_back() {
    let text = "[Clip(frames=16, stride=2, fps=None, sampler='random', clips=2, layout='CTHW'), \
                Resize(size=128), RandomCrop(size=(112, 112), padding=None, pad_if_needed=False)]";
    let ops: Operators = text.parse().unwrap();
    assert_eq!(ops.to_string().parse::<Operators>().unwrap(), ops);
}

#[test]
fn the_layout_puts_frames_or_channels_first_with_clips_leading() {
    let pipeline = |text: &str, layout: Layout| {
        let Operators::Video(clip, ops) = text.parse::<Operators>().unwrap() else {
            panic!("a video's")
        };
        VideoPipeline::new(clip, ops, DType::F32, layout)
    };
    let shape = |text: &str, layout| pipeline(text, layout).unwrap().sample_shape();
    assert_eq!(
        shape("[Clip(16), CenterCrop(112)]", Layout::Chw),
        [16, 3, 112, 112]
    );
    assert_eq!(
        shape("[Clip(16), CenterCrop(112)]", Layout::Hwc),
        [16, 112, 112, 3]
    );
    assert_eq!(
        shape(
            "[Clip(8, layout='CTHW'), CenterCrop((64, 96))]",
            Layout::Chw
        ),
        [3, 8, 64, 96]
    );
    assert_eq!(
        shape("[Clip(8, clips=2), CenterCrop(32)]", Layout::Chw),
        [2, 8, 3, 32, 32]
    );
    let error = pipeline("[Clip(8, layout='CTHW'), CenterCrop(32)]", Layout::Hwc).unwrap_err();
    assert!(error.to_string().contains("CHW"), "{error}");
    let error = pipeline("[Clip(8), Resize(32)]", Layout::Chw).unwrap_err();
    assert!(error.to_string().contains("output size varies"), "{error}");
}

#[test]
fn a_pipeline_for_a_device_prepares_8_bit_frames_first_and_says_the_layout() {
    let text = "[Clip(8, layout='CTHW', clips=2), RandomCrop(32), Normalize((0.5, 0.4, 0.3), \
                (0.2, 0.2, 0.2))]";
    let Operators::Video(clip, ops) = text.parse::<Operators>().unwrap() else {
        panic!("a video's")
    };
    let pipeline = VideoPipeline::new(clip, ops, DType::F32, Layout::Chw).unwrap();
    assert_eq!(pipeline.sample_shape(), [2, 3, 8, 32, 32]);
    let (geometry, finish) = pipeline.for_device().unwrap();
    assert_eq!(geometry.sample_shape(), [2, 8, 32, 32, 3]);
    assert_eq!(geometry.frames().dtype(), DType::U8);
    assert_eq!(finish.clip, Some(true));
    assert_eq!((finish.dtype, finish.layout), (DType::F32, Layout::Chw));
    assert_eq!(finish.normalize, Some(([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])));
}
