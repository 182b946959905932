//! Several views of one image (DINO's multi-crop, SimCLR's pairs, any "list of
//! pipelines"): each view its own [`ImagePipeline`], the image read and decoded once.
//!
//! Each view plans its geometry as a pipeline alone would, with a generator of its own
//! forked from the sample's by the view's place, so that a view's crop, flip and
//! operators are keyed by (seed, epoch, sample, view, operator). The decoder then decodes
//! once: the region that holds every view's, at the scale the most demanding view needs
//! (so every view sees at least the resolution it would alone). Each view is resized from
//! its own part of that image and goes through its own operators into its part of the
//! sample's slot: the views one after another, each in the pipelines' type and layout
//! ([`SampleLayout::of_views`]), which Python hands over as one tensor a view.
//!
//! Each view's [`Placement`] is kept as its pipeline alone keeps it (its geometry's, then
//! its operators' motions drawn again from its generator), so that a record's targets
//! follow each view ([`Preparer::placements`]); the draws that read the boxes
//! (`RandomIoUCrop`) read them in each view as they do alone.

use super::codec::{clamp, Decoder, Rect};
use super::resample::{Image, Resampler};
use super::{Geometry, ImagePipeline, Placement};
use crate::error::{Cause, Error, Result};
use crate::prep::{Modality, Prep, Prepared, Preparer, SampleLayout};
use crate::rng::{derive, Rng};

/// The most views a sample may have.
pub const MAX_VIEWS: usize = 64;

/// Several views of each image, each prepared by its own pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewsPipeline {
    views: Vec<ImagePipeline>,
}

impl ViewsPipeline {
    /// Views prepared by `views`, in order.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no view, more than [`MAX_VIEWS`], views of different element
    /// types or layouts, or a view split for a device.
    pub fn new(views: Vec<ImagePipeline>) -> Result<ViewsPipeline> {
        if let Some(op) = views.iter().find_map(ImagePipeline::before_geometry) {
            return Err(Error::Config(format!(
                "{op} before the geometric operators runs on a still image's whole decoded \
                 picture; in a view write it after them"
            )));
        }
        if let Some(op) = views.iter().find_map(ImagePipeline::on_a_canvas) {
            return Err(Error::Config(format!(
                "{op} pads the resized image; a view cannot take it yet"
            )));
        }
        let Some(first) = views.first() else {
            return Err(Error::Config(
                "views: a list of pipelines needs at least one".into(),
            ));
        };
        if views.len() > MAX_VIEWS {
            return Err(Error::Config(format!(
                "views: {} pipelines; a sample has at most {MAX_VIEWS} views",
                views.len()
            )));
        }
        if views
            .iter()
            .any(|v| v.dtype != first.dtype || v.layout != first.layout)
        {
            return Err(Error::Config(
                "views: every view is delivered in the loader's dtype and layout".into(),
            ));
        }
        if views.iter().any(|v| v.route.is_some()) {
            return Err(Error::Config(
                "views are decoded on the CPU: a device decode route does not apply".into(),
            ));
        }
        Ok(ViewsPipeline { views })
    }

    /// The views' pipelines, in order.
    pub fn views(&self) -> &[ImagePipeline] {
        &self.views
    }
}

impl std::fmt::Display for ViewsPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_views(f, &self.views)
    }
}

impl Prep for ViewsPipeline {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        let views: Vec<SampleLayout> = self.views.iter().map(Prep::layout).collect();
        SampleLayout::of_views(&views, self.views[0].dtype)
    }

    fn fingerprint(&self) -> String {
        fingerprint_of_views(&self.views)
    }

    fn targets_needed(&self) -> Option<&'static str> {
        self.views.iter().find_map(Prep::targets_needed)
    }

    fn places_targets(&self) -> std::result::Result<(), String> {
        for (place, view) in self.views.iter().enumerate() {
            view.places_targets()
                .map_err(|why| format!("view {place}: {why}"))?;
        }
        Ok(())
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        let max_pixels = self.views.iter().map(|v| v.max_pixels).min();
        let decoder =
            Decoder::new(max_pixels.unwrap_or(super::DEFAULT_MAX_PIXELS)).map_err(Error::Config)?;
        Ok(Box::new(ViewsPreparer {
            pipeline: self.clone(),
            decoder,
            resampler: Resampler::default(),
            planes: Vec::new(),
            placed: Vec::new(),
        }))
    }
}

/// `views: A | B | …`, for reports: views of images and of videos alike.
pub(crate) fn write_views(
    f: &mut std::fmt::Formatter<'_>,
    views: &[impl std::fmt::Display],
) -> std::fmt::Result {
    f.write_str("views: ")?;
    for (i, view) in views.iter().enumerate() {
        if i > 0 {
            f.write_str(" | ")?;
        }
        write!(f, "{view}")?;
    }
    Ok(())
}

/// The fingerprint of views, each its pipeline's: views of images and of videos alike.
pub(crate) fn fingerprint_of_views(views: &[impl Prep]) -> String {
    let views: Vec<String> = views.iter().map(Prep::fingerprint).collect();
    format!("views [{}]", views.join("; "))
}

/// The generator of view `place`, for the sample whose generator before any draw is
/// `sample`.
pub(crate) fn view_rng(sample: &Rng, place: usize) -> Rng {
    sample.fork(derive(&[0x5649_4557, place as u64]))
}

/// Per-thread state to prepare the views of images.
struct ViewsPreparer {
    pipeline: ViewsPipeline,
    decoder: Decoder,
    resampler: Resampler,
    planes: Vec<u8>,
    /// The last sample's placement by each view's geometry, with the view's generator
    /// before any draw (what its motions are drawn again from where a target asks); empty
    /// where that sample failed.
    placed: Vec<(Placement, Rng)>,
}

impl Preparer for ViewsPreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        self.prepare_targeted(data, &[], rng, out)
    }

    fn prepare_targeted(
        &mut self,
        data: &[u8],
        targets: &[[f64; 4]],
        rng: &mut Rng,
        out: &mut [u8],
    ) -> Result<Prepared, Cause> {
        self.placed.clear();
        let views = &self.pipeline.views;
        let header = self.decoder.header(data)?;
        let (width, height) = (header.width, header.height);
        // Each view's generator, geometry and placement, drawn as its pipeline alone
        // draws them, its region kept inside the image as the decoder keeps a pipeline's.
        let mut planned = Vec::with_capacity(views.len());
        let mut placed = Vec::with_capacity(views.len());
        for (place, view) in views.iter().enumerate() {
            let sample = view_rng(rng, place);
            let drawn = view.view((width, height), targets, &mut sample.clone());
            let mut geometry = view.geometry_of(&drawn);
            geometry.source = clamp(geometry.source, width, height);
            let output = (view.width, view.height);
            placed.push((
                Placement::new(&drawn, (width, height), output),
                sample.clone(),
            ));
            planned.push((sample, geometry));
        }
        let union = planned
            .iter()
            .map(|(_, g)| g.source)
            .reduce(union)
            .expect("at least one view");
        // The resolution the most demanding view needs, across the whole region.
        let density = |size: fn(&Geometry) -> (f64, f64)| {
            planned.iter().fold(0.0f64, |most, (_, g)| {
                let (out, source) = size(g);
                most.max(out / source)
            })
        };
        let dx = density(|g| (g.least_decoded().0 as f64, g.source.w));
        let dy = density(|g| (g.least_decoded().1 as f64, g.source.h));
        let least = (
            (union.w * dx).ceil().max(1.0) as u32,
            (union.h * dy).ceil().max(1.0) as u32,
        );
        let decoded = self.decoder.decode(data, &header, union, least)?;
        let (sx, sy) = (decoded.region.w / union.w, decoded.region.h / union.h);
        let mut at = 0;
        for ((sample, geometry), view) in planned.iter().zip(views) {
            let bytes = view.sample_bytes();
            let region = Rect {
                x: decoded.region.x + (geometry.source.x - union.x) * sx,
                y: decoded.region.y + (geometry.source.y - union.y) * sy,
                w: geometry.source.w * sx,
                h: geometry.source.h * sy,
            };
            let src = Image {
                pixels: decoded.pixels,
                width: decoded.width as usize,
                height: decoded.height as usize,
            };
            view.finish(
                (&mut self.resampler, &mut self.planes),
                src,
                region,
                geometry,
                &mut out[at..at + bytes],
                (sample, 0),
            )?;
            at += bytes;
        }
        self.placed = placed;
        Ok(Prepared::InSlot)
    }

    fn placements(&self) -> Vec<Placement> {
        let views = self.placed.iter().zip(&self.pipeline.views);
        views
            .map(|((placement, sample), view)| placement.clone().moved(view.motions(sample)))
            .collect()
    }
}

/// The smallest rectangle holding `a` and `b`.
fn union(a: Rect, b: Rect) -> Rect {
    let (x, y) = (a.x.min(b.x), a.y.min(b.y));
    Rect {
        x,
        y,
        w: (a.x + a.w).max(b.x + b.w) - x,
        h: (a.y + a.h).max(b.y + b.h) - y,
    }
}

impl From<ViewsPipeline> for crate::prep::Pipeline {
    fn from(views: ViewsPipeline) -> crate::prep::Pipeline {
        crate::prep::Pipeline::new(views)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::{Layout, Op};
    use crate::prep::{DType, Operators};

    fn view(ops: &str) -> ImagePipeline {
        let Operators::Image(ops) = ops.parse().unwrap() else {
            panic!("image operators");
        };
        ImagePipeline::new(ops, DType::F32, Layout::Chw).unwrap()
    }

    #[test]
    fn a_sample_is_its_views_one_after_another() {
        let views = ViewsPipeline::new(vec![
            view("[RandomResizedCrop(224)]"),
            view("[RandomResizedCrop(96), Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))]"),
        ])
        .unwrap();
        let layout = views.layout();
        assert_eq!(layout.views(), [vec![3, 224, 224], vec![3, 96, 96]]);
        assert_eq!(layout.shape(), [3 * 224 * 224 + 3 * 96 * 96]);
        assert_eq!(layout.bytes(), 4 * (3 * 224 * 224 + 3 * 96 * 96));
    }

    #[test]
    fn views_that_cannot_be_one_sample_are_refused() {
        assert!(ViewsPipeline::new(Vec::new()).is_err());
        assert!(ViewsPipeline::new(vec![view("[CenterCrop(8)]"); MAX_VIEWS + 1]).is_err());
        let uint8 = ImagePipeline::new(vec![Op::center_crop(8, 8)], DType::U8, Layout::Chw);
        assert!(ViewsPipeline::new(vec![view("[CenterCrop(8)]"), uint8.unwrap()]).is_err());
    }

    #[test]
    fn views_are_written_as_a_list_of_lists_and_read_back() {
        let text = "[[Resize(size=40, interpolation='bilinear', antialias=True), \
                    CenterCrop(size=(32, 32))], [RandomHorizontalFlip(p=0.5)]]";
        let ops: Operators = text.parse().unwrap();
        let Operators::Views(views) = &ops else {
            panic!("views: {ops}");
        };
        assert_eq!(views.len(), 2);
        assert_eq!(ops.to_string().parse::<Operators>().unwrap(), ops);
        for bad in [
            "[[Resize(40)], CenterCrop(3)]",
            "[[Resize(40)]",
            "[[Resize(40)]] x",
        ] {
            assert!(bad.parse::<Operators>().is_err(), "{bad}");
        }
    }
}
