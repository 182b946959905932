//! Several views of one video (CVRL's and ρBYOL's clips of one video at different
//! places, VideoMAE's repeated sampling): each view its own [`VideoPipeline`], a `Clip`
//! and the image operators its frames go through.
//!
//! Each view draws as its pipeline alone draws, from a generator of its own forked from
//! the sample's by the view's place (as a view of an image does), so that view *k* of a
//! sample is what its pipeline alone makes with that generator. What the views share is
//! what does not change what they make: the video's bytes are read, and its frame index
//! taken, once a sample, and the frames every view wants are decoded in one pass (each
//! group of pictures once for all of them). The sample is the views one after another,
//! each in its own shape ([`SampleLayout::of_views`]), which Python hands over as one
//! tensor a view.

use super::VideoPipeline;
use crate::error::{Error, Result};
use crate::prep::image::{fingerprint_of_views, write_views, MAX_VIEWS};
use crate::prep::{Modality, Prep, Preparer, SampleLayout};

/// Several views of each video, each prepared by its own [`VideoPipeline`].
#[derive(Debug, Clone, PartialEq)]
pub struct VideoViewsPipeline {
    views: Vec<VideoPipeline>,
}

impl VideoViewsPipeline {
    /// Views prepared by `views`, in order. They may differ in their clips (frames,
    /// sampler, clips a sample, layout) and frame operators; they keep the first view's
    /// cache of frame indexes, which every view then reads.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no view, more than [`MAX_VIEWS`], or views of different
    /// element types.
    pub fn new(views: Vec<VideoPipeline>) -> Result<VideoViewsPipeline> {
        let Some(first) = views.first() else {
            return Err(Error::Config(
                "views: a list of video pipelines needs at least one".into(),
            ));
        };
        if views.len() > MAX_VIEWS {
            return Err(Error::Config(format!(
                "views: {} pipelines; a sample has at most {MAX_VIEWS} views",
                views.len()
            )));
        }
        let dtype = first.frames.dtype();
        if views.iter().any(|v| v.frames.dtype() != dtype) {
            return Err(Error::Config(
                "views: every view is delivered in the loader's dtype".into(),
            ));
        }
        #[cfg(feature = "video")]
        let views = {
            let indexes = first.indexes.clone();
            let shared = |view| VideoPipeline {
                indexes: indexes.clone(),
                ..view
            };
            views.into_iter().map(shared).collect()
        };
        Ok(VideoViewsPipeline { views })
    }

    /// The views' pipelines, in order.
    pub fn views(&self) -> &[VideoPipeline] {
        &self.views
    }

    /// These views with a cache of frame indexes of their own, of up to `bytes` bytes
    /// ([`VideoPipeline::with_index_cache`]), shared by every view.
    #[cfg(feature = "video")]
    pub fn with_index_cache(self, bytes: usize) -> VideoViewsPipeline {
        let mut views = self.views;
        views[0] = views[0].clone().with_index_cache(bytes);
        VideoViewsPipeline::new(views).expect("the views were checked")
    }

    /// Their videos' frame indexes, kept between their reads.
    #[cfg(feature = "video")]
    pub fn frame_indexes(&self) -> &super::FrameIndexes {
        self.views[0].frame_indexes()
    }
}

/// `views: Clip(16) → … | Clip(8) → …`, for reports.
impl std::fmt::Display for VideoViewsPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_views(f, &self.views)
    }
}

impl Prep for VideoViewsPipeline {
    fn modality(&self) -> Modality {
        Modality::Video
    }

    fn layout(&self) -> SampleLayout {
        let views: Vec<SampleLayout> = self.views.iter().map(Prep::layout).collect();
        SampleLayout::of_views(&views, self.views[0].frames.dtype())
    }

    fn fingerprint(&self) -> String {
        fingerprint_of_views(&self.views)
    }

    #[cfg(feature = "video")]
    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(super::preparer::VideoPreparer::views(
            self.views.clone(),
        )))
    }

    #[cfg(not(feature = "video"))]
    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Err(super::not_built())
    }
}

impl From<VideoViewsPipeline> for crate::prep::Pipeline {
    fn from(views: VideoViewsPipeline) -> crate::prep::Pipeline {
        crate::prep::Pipeline::new(views)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::Layout;
    use crate::prep::{DType, Operators};

    fn views(text: &str, dtype: DType) -> Result<VideoViewsPipeline> {
        let Operators::VideoViews(views) = text.parse::<Operators>()? else {
            panic!("{text} is views of a video")
        };
        let views = views
            .into_iter()
            .map(|(clip, ops)| VideoPipeline::new(clip, ops, dtype, Layout::Chw))
            .collect::<Result<_>>()?;
        VideoViewsPipeline::new(views)
    }

    const TWO: &str = "[[Clip(8, stride=2), Resize(40), RandomCrop(32), \
                       RandomHorizontalFlip()], [Clip(4, clips=2, sampler='uniform', \
                       layout='CTHW'), RandomResizedCrop(24), ColorJitter(brightness=0.4)]]";

    #[test]
    fn a_sample_is_its_views_one_after_another_each_in_its_clips_layout() {
        let layout = views(TWO, DType::U8).unwrap().layout();
        assert_eq!(layout.views(), [vec![8, 3, 32, 32], vec![2, 3, 4, 24, 24]]);
        assert_eq!(layout.bytes(), 8 * 3 * 32 * 32 + 2 * 3 * 4 * 24 * 24);
    }

    #[test]
    fn views_of_videos_are_written_as_lists_of_clips_and_read_back() {
        let ops: Operators = TWO.parse().unwrap();
        assert!(matches!(&ops, Operators::VideoViews(v) if v.len() == 2));
        assert_eq!(ops.to_string().parse::<Operators>().unwrap(), ops);
        for (bad, says) in [
            (
                "[[Clip(8), CenterCrop(8)], [CenterCrop(8)]]",
                "view 1 does not start",
            ),
            (
                "[[CenterCrop(8)], [Clip(8), CenterCrop(8)]]",
                "view 0 does not start",
            ),
            ("[[Clip(8), Clip(4)]]", "a second Clip in view 0"),
        ] {
            let why = bad.parse::<Operators>().unwrap_err().to_string();
            assert!(why.contains(says), "{bad}: {why}");
        }
    }

    #[test]
    fn views_that_cannot_be_one_sample_are_refused() {
        assert!(VideoViewsPipeline::new(Vec::new()).is_err());
        let one = "[Clip(2), CenterCrop(8)]";
        let many = format!("[{}]", vec![one; MAX_VIEWS + 1].join(", "));
        assert!(views(&many, DType::U8).is_err());
        let Operators::Video(clip, ops) = one.parse::<Operators>().unwrap() else {
            panic!("a video's")
        };
        let f32 = VideoPipeline::new(clip.clone(), ops.clone(), DType::F32, Layout::Chw);
        let u8 = VideoPipeline::new(clip, ops, DType::U8, Layout::Chw);
        let why = VideoViewsPipeline::new(vec![f32.unwrap(), u8.unwrap()]).unwrap_err();
        assert!(why.to_string().contains("dtype"), "{why}");
    }

    /// Each view of a sample against its pipeline alone given the view's generator, on
    /// every file of the footage: the same bytes, the video's index made once a sample.
    #[cfg(feature = "video")]
    #[test]
    fn each_view_is_its_pipeline_alone_with_the_views_draws() {
        use crate::prep::image::view_rng;
        use crate::rng::Rng;

        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nostall-video/tests/footage");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && Modality::Video.accepts(&p.to_string_lossy()))
            .collect();
        files.sort();
        assert!(files.len() >= 6, "the footage: {files:?}");
        // A third view like the first: the same pipeline, other draws.
        let text = TWO.replacen(
            "[[",
            "[[Clip(8, stride=2), Resize(40), RandomCrop(32)], [",
            1,
        );
        let pipeline = views(&text, DType::U8).unwrap();
        let layout = pipeline.layout();
        let mut together = pipeline.preparer().unwrap();
        let mut alone: Vec<_> = pipeline
            .views()
            .iter()
            .map(|v| v.clone().with_index_cache(0).preparer().unwrap())
            .collect();
        for (id, path) in files.iter().enumerate() {
            let data = std::fs::read(path).unwrap();
            let rng = Rng::new(0x5eed ^ id as u64);
            let mut out = vec![0u8; layout.bytes()];
            together.next_sample(id as u64);
            together.prepare(&data, &mut rng.clone(), &mut out).unwrap();
            let mut at = 0;
            for (place, (view, preparer)) in pipeline.views().iter().zip(&mut alone).enumerate() {
                let mut own = vec![0u8; view.layout().bytes()];
                preparer
                    .prepare(&data, &mut view_rng(&rng, place), &mut own)
                    .unwrap();
                assert!(out[at..at + own.len()] == own[..], "{path:?}, view {place}");
                at += own.len();
            }
            let bytes: Vec<usize> = layout.views().iter().map(|v| v.iter().product()).collect();
            let third = bytes[0] + bytes[1];
            assert!(
                out[..bytes[0]] != out[third..third + bytes[2]],
                "{path:?}: views 0 and 2, alike, draw apart"
            );
        }
        let indexes = pipeline.frame_indexes();
        assert_eq!(indexes.scans(), files.len() as u64, "one scan a video");
    }
}
