//! Images: JPEG and PNG decoding and the augmentations of a training pipeline, planned
//! before decoding.
//!
//! The geometric operators (crops, resizes, flips) are not applied one after another to
//! pixel arrays, as torchvision does. Each only moves a rectangle: starting from the whole
//! source image, `Resize` changes the size the rectangle maps to, `CenterCrop` and
//! `RandomResizedCrop` shrink it, `RandomHorizontalFlip` toggles a flag. What is left is
//! one [`Geometry`]: *this* region of the source, at *this* output size, mirrored or not.
//! The decoder then decodes only that region at the smallest sufficient scale, one resize
//! produces the output size, and one fused pass flips, normalises, converts the type and
//! lays out the channels straight into the sample's slot of the batch.
//!
//! Two things need the image whole. Operators on pixels written before every geometric
//! one (SSD's colour distortion) run on the whole decoded image first, as torchvision
//! runs them. A zoom-out's region reaches past the image: the image is drawn on a canvas
//! of its fill that covers the region (`on_canvas`), and the canvas is resized as any
//! region is. Padding after the resize (`FixedSizeCrop`) needs none of that: the region,
//! resized, is placed on a canvas of the output's size (`inset_canvas`). Targets (a
//! detection sample's boxes and masks) follow the same view ([`Placement`]).
//!
//! Random choices follow torchvision's definitions (RandomResizedCrop: scale 0.08–1,
//! ratio 3/4–4/3, ten tries, then the centre fallback), drawn from a generator seeded by
//! (seed, epoch, sample id), so a sample's augmentation does not depend on which thread
//! prepares it.

pub mod codec;
mod layout;
pub mod op;
pub(crate) mod output;
mod placement;
mod resample;
mod views;

use std::sync::Arc;

use codec::{Decoder, Rect, DEFAULT_MAX_PIXELS};
use resample::{Block, Image, Resampler};

pub use resample::Filter;

pub use layout::Layout;
pub use op::{
    Declaration, Op, Size, DECLARATIONS, DEFAULT_CROP_RATIO, DEFAULT_CROP_SCALE, IMAGENET_MEAN,
    IMAGENET_STD,
};
pub(crate) use placement::{follow_motions, read_nearest};
pub use placement::{sanitize, Placement, OUTSIDE};
/// Each view's generator: a video's views draw from it as an image's do.
#[cfg(any(test, feature = "video"))]
pub(crate) use views::view_rng;
pub(crate) use views::{fingerprint_of_views, write_views};
pub use views::{ViewsPipeline, MAX_VIEWS};

use super::{ByteValues, DType, Deferred, Modality, Prep, Prepared, Preparer, SampleLayout};
use crate::error::{Cause, Error, Result};
use crate::prep::args::Value;
use crate::prep::route::DecodeRoute;
use crate::rng::{derive, Rng};
use crate::user_code::function::UserSample;
use op::{OutputSize, Planes, Stage, View};

/// A validated list of operators with a fixed output shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePipeline {
    ops: Vec<Op>,
    dtype: DType,
    layout: Layout,
    height: u32,
    width: u32,
    mean: [f32; 3],
    std: [f32; 3],
    /// Whether [`output`]'s division-free form gives these `mean` and `std` exactly.
    fused_exact: bool,
    /// How many operators on pixels come before the first geometric one: they run on the
    /// whole decoded image before the geometry is applied (SSD's colour distortion before
    /// its zoom-out and crop), as torchvision runs them.
    source_end: usize,
    /// Whether an operator runs on the output's pixels (so they are kept whole before
    /// the last pass).
    photometric: bool,
    /// Whether an operator runs on the sample as delivered, after the last pass.
    tensor: bool,
    /// The caller's functions before this place run on pixels, the others on the sample
    /// as delivered.
    pixels_end: usize,
    /// Decompression-bomb guard: images with more pixels are refused.
    max_pixels: u64,
    /// The width and height the geometry makes: the output's, unless an operator on
    /// pixels grows each image onto a canvas (`grown`).
    placed: (u32, u32),
    /// The canvas an operator on pixels grows each image onto
    /// (`RandomRotation(expand=True)`): the output's size, each image at its top left.
    grown: Option<op::Grown>,
    /// Which JPEGs a device decodes instead ([`ImagePipeline::with_decode_route`]).
    route: Option<Arc<DecodeRoute>>,
}

/// What a device does to a batch of a pipeline split by [`ImagePipeline::for_device`]:
/// the engine delivers 8-bit HWC pixels (a quarter of the bytes of float32 to move to the
/// device), and the device converts them to the type and layout the user's pipeline asked
/// for, normalised where it had `Normalize`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceFinish {
    /// The element type the user's pipeline produces.
    pub dtype: DType,
    /// The layout the user's pipeline produces.
    pub layout: Layout,
    /// `Normalize`'s mean and standard deviation in [0, 1] units, where it had one.
    pub normalize: Option<([f32; 3], [f32; 3])>,
    /// For a video pipeline's clips, which the engine delivers frames first
    /// (`[T, H, W, C]`): whether the user's layout puts the channels first (`CTHW`)
    /// rather than the frames (`TCHW`); `None` for images.
    pub clip: Option<bool>,
}

/// The operators of [`ImagePipeline::imagenet_train`].
fn imagenet_train_ops(size: u32) -> Vec<Op> {
    vec![
        Op::random_resized_crop(size),
        Op::horizontal_flip(0.5),
        Op::normalize_imagenet(),
    ]
}

/// The operators of [`ImagePipeline::imagenet_val`].
fn imagenet_val_ops(size: u32) -> Vec<Op> {
    let resize = (size as f64 * 256.0 / 224.0).round() as u32;
    vec![
        Op::resize(resize),
        Op::center_crop(size, size),
        Op::normalize_imagenet(),
    ]
}

/// Where in the source to read, at what size, mirrored or not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    /// Region of the source image.
    pub source: Rect,
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// Mirror left–right.
    pub flip: bool,
    /// The resize's filter.
    pub filter: Filter,
    /// The part of the source the resize may read (`None`: the whole image): a crop's
    /// window where the crop came before the resize, as torchvision resizes a crop alone;
    /// `source` lies within it.
    pub bound: Option<Rect>,
}

impl Geometry {
    /// [`Geometry::bound`] where `source` is read as `region` of a decoded image (a
    /// part of the file decoded at a scale, a canvas): mapped the same way.
    fn bound_in(&self, region: Rect) -> Option<Rect> {
        let (b, s) = (self.bound?, self.source);
        let (kx, ky) = (region.w / s.w, region.h / s.h);
        Some(Rect {
            x: region.x + (b.x - s.x) * kx,
            y: region.y + (b.y - s.y) * ky,
            w: b.w * kx,
            h: b.h * ky,
        })
    }

    /// The size the source region must at least be decoded at: the output's, or the
    /// region's own where the filter does not antialias (a JPEG decoded at a fraction of
    /// its size is already averaged, which interpolating two pixels never does).
    pub(crate) fn least_decoded(&self) -> (u32, u32) {
        if self.filter.antialias() {
            (self.width, self.height)
        } else {
            (self.source.w.ceil() as u32, self.source.h.ceil() as u32)
        }
    }
}

/// A pipeline as a person would write it down, e.g. `RandomResizedCrop(224) →
/// RandomHorizontalFlip → Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
/// float32 CHW` (for reports): each operator with the arguments it needs and those that
/// are not their defaults, squares as one side.
impl std::fmt::Display for ImagePipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                f.write_str(" → ")?;
            }
            f.write_str(op.name())?;
            let params = op.declaration().params;
            let mut shown = Vec::new();
            for (param, (name, value)) in params.iter().zip(op.args()) {
                let short = match &value {
                    Value::Tuple(v)
                        if v.len() == 2 && v[0] == v[1] && matches!(v[0], Value::Int(_)) =>
                    {
                        v[0].to_string()
                    }
                    Value::Tuple(v)
                        if v.len() == 2 && v.iter().all(|x| matches!(x, Value::Int(_))) =>
                    {
                        format!("{}×{}", v[0], v[1])
                    }
                    other => other.to_string(),
                };
                match param.default {
                    None => shown.push(short),
                    Some(default)
                        if crate::prep::notation::read_value(default).ok() != Some(value) =>
                    {
                        shown.push(format!("{name}={short}"))
                    }
                    Some(_) => {}
                }
            }
            if !shown.is_empty() {
                write!(f, "({})", shown.join(", "))?;
            }
        }
        write!(f, ", {} {}", self.dtype, self.layout)
    }
}

impl ImagePipeline {
    /// Checks that the operators together produce one fixed output size, that those on
    /// pixels (and the caller's functions) follow the geometric ones and precede
    /// `Normalize`, and that the output type fits. (Each operator was checked when made.)
    pub fn new(ops: Vec<Op>, dtype: DType, layout: Layout) -> Result<ImagePipeline> {
        let pixels_end = ops
            .iter()
            .rposition(|op| matches!(op.stage(), Stage::Pixels(_) | Stage::Normalize { .. }))
            .map_or(0, |last| last + 1);
        // Operators on pixels written before every geometric one run on the decoded image.
        // `Normalize` may follow them there (VideoMAE's fine-tuning normalises before its
        // crop): it is folded into the last pass wherever it is written, which is
        // torchvision's result up to rounding, the interpolation being linear.
        let source_end = match ops
            .iter()
            .position(|op| matches!(op.stage(), Stage::Geometry(_)))
        {
            Some(first) => {
                let pixels = ops[..first]
                    .iter()
                    .take_while(|op| matches!(op.stage(), Stage::Pixels(_)))
                    .count();
                let then_normalize = ops[pixels..first]
                    .iter()
                    .all(|op| matches!(op.stage(), Stage::Normalize { .. }));
                if then_normalize {
                    pixels
                } else {
                    0
                }
            }
            None => 0,
        };
        let mut size: Option<(u32, u32)> = None;
        let (mut mean, mut std) = ([0.0; 3], [1.0; 3]);
        let mut normalized: Option<&Op> = None;
        let mut after_decoding: Option<&Op> = None;
        let (mut photometric, mut tensor) = (false, None::<&Op>);
        let mut canvas: Option<&Op> = None;
        // The operator that grows each image to its own size, and the size before it.
        let mut grower: Option<(&Op, op::Grown, (u32, u32))> = None;
        for (place, op) in ops.iter().enumerate() {
            let delivered = matches!(op.stage(), Stage::Tensor(_) | Stage::User(_));
            let geometric = matches!(op.stage(), Stage::Geometry(_));
            if let (Some(last), false, false) = (tensor, delivered, geometric) {
                return Err(Error::Config(format!(
                    "{} follows {}, which works on the sample as delivered: write {} last",
                    op.name(),
                    last.name(),
                    last.name()
                )));
            }
            match op.stage() {
                Stage::Geometry(geometric) => {
                    if let Some(pixels) = after_decoding {
                        return Err(Error::Config(format!(
                            "{} follows {}: nostall plans the geometric operators before \
                             decoding and runs those on pixels after, so write the geometric \
                             ones (crops, resizes, flips) first",
                            op.name(),
                            pixels.name()
                        )));
                    }
                    if let (Some(padded), false) = (canvas, geometric.mirrors()) {
                        return Err(Error::Config(format!(
                            "{} follows {}, which pads the resized image: only \
                             RandomHorizontalFlip may follow it among the geometric operators",
                            op.name(),
                            padded.name()
                        )));
                    }
                    match geometric.output_size() {
                        OutputSize::Keeps => {}
                        OutputSize::Varies => size = None,
                        OutputSize::Fixed(h, w) => size = Some((h, w)),
                        OutputSize::Canvas(h, w) => (size, canvas) = (Some((h, w)), Some(op)),
                    }
                }
                Stage::Pixels(photometric) if place < source_end => {
                    if photometric.grows(1, 1).is_some() {
                        return Err(Error::Config(format!(
                            "{} with expand=True is written before the geometric operators, \
                             where the image keeps its size: write it after them",
                            op.name()
                        )));
                    }
                }
                Stage::Pixels(_) | Stage::Tensor(_) | Stage::User(_)
                    if canvas.is_some_and(
                        |c| matches!(c.stage(), Stage::Geometry(g) if g.batch_canvas()),
                    ) =>
                {
                    return Err(Error::Config(format!(
                        "{} follows {}, whose canvas only holds the batch: it would see the \
                         padding around each image; write it first, where it runs on the \
                         whole decoded image",
                        op.name(),
                        canvas.map_or("", Op::name)
                    )));
                }
                Stage::Pixels(_) | Stage::Tensor(_) | Stage::User(_)
                    if grower.is_some_and(|_| {
                        op.moves_pixels() || !matches!(op.stage(), Stage::Pixels(_))
                    }) =>
                {
                    return Err(Error::Config(format!(
                        "{} follows {} with expand=True, which grows each image to its own \
                         size on a canvas that only holds the batch: only operators on \
                         pixels that do not move them, and Normalize, may follow it; write \
                         {} before it",
                        op.name(),
                        grower.map_or("", |(g, _, _)| g.name()),
                        op.name()
                    )));
                }
                Stage::Pixels(pixels) => {
                    if normalized.is_some() {
                        return Err(Error::Config(format!(
                            "{} follows Normalize: it works on 8-bit pixels, so write it \
                             before Normalize",
                            op.name()
                        )));
                    }
                    let grown = size.and_then(|(h, w)| pixels.grows(w as usize, h as usize));
                    if let (Some(grown), Some((h, w))) = (grown, size) {
                        let area = u64::from(grown.width) * u64::from(grown.height);
                        if area > DEFAULT_MAX_PIXELS {
                            return Err(Error::Config(format!(
                                "{}: with expand=True and these degrees, the canvas that \
                                 holds every turned {w}x{h} image is {}x{}, more pixels than \
                                 an image may have ({DEFAULT_MAX_PIXELS}): narrow degrees or \
                                 give the geometric operators smaller sizes",
                                op.name(),
                                grown.width,
                                grown.height
                            )));
                        }
                        grower = Some((op, grown, (w, h)));
                        size = Some((grown.height, grown.width));
                    }
                    (photometric, after_decoding) = (true, Some(op));
                }
                Stage::Normalize { mean: m, std: s } => {
                    if normalized.is_some() {
                        return Err(Error::Config("Normalize appears twice".into()));
                    }
                    (mean, std, normalized) = (m, s, Some(op));
                }
                Stage::Tensor(tensorial) => {
                    tensorial.check(dtype)?;
                    (tensor, after_decoding) = (Some(op), Some(op));
                }
                Stage::User(_) if place < pixels_end => {
                    (photometric, after_decoding) = (true, Some(op));
                }
                Stage::User(_) => (tensor, after_decoding) = (Some(op), Some(op)),
            }
        }
        let delivered = tensor.is_some();
        let Some((height, width)) = size else {
            return Err(Error::Config(
                "the output size varies with the image: end the geometric operators with CenterCrop, \
                 RandomResizedCrop or an exact Resize so that samples can be batched"
                    .into(),
            ));
        };
        if u64::from(height) * u64::from(width) > DEFAULT_MAX_PIXELS {
            return Err(Error::Config(format!(
                "the output, {height}x{width}, has more pixels than an image may \
                 ({DEFAULT_MAX_PIXELS}): give the geometric operators smaller sizes"
            )));
        }
        if normalized.is_some() && dtype == DType::U8 {
            return Err(Error::Config(
                "Normalize needs f32 (float32) output; for u8 (uint8) output, leave Normalize out \
                 of the operators (the ImageNet presets end with it) and normalise on the GPU"
                    .into(),
            ));
        }
        let placed = grower.map_or((width, height), |(_, _, placed)| placed);
        let grown = grower.map(|(_, grown, _)| grown);
        Ok(ImagePipeline {
            ops,
            dtype,
            layout,
            height,
            width,
            mean,
            std,
            fused_exact: output::fused_is_exact(mean, std),
            source_end,
            photometric,
            tensor: delivered,
            pixels_end,
            max_pixels: DEFAULT_MAX_PIXELS,
            route: None,
            placed,
            grown,
        })
    }

    /// The pipeline split for a device: this one's geometry and operators on pixels in
    /// 8-bit HWC (what the engine prepares), and what the device does after (see
    /// [`DeviceFinish`]). The device's conversion gives the values the CPU's would, up to
    /// float rounding.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an operator on the sample as delivered (an erasing): the
    /// device makes that sample after the engine, so the operator could not run on it.
    pub fn for_device(&self) -> Result<(ImagePipeline, DeviceFinish)> {
        if let Some(op) = self
            .ops
            .iter()
            .find(|op| matches!(op.stage(), Stage::Tensor(_)))
        {
            return Err(Error::Config(format!(
                "{} with a device: it works on the sample as delivered, which the device \
                 converts and normalises after the engine; leave out device= (or the \
                 operator) and erase on the device in a batch_transform",
                op.name()
            )));
        }
        let is_normalize = |op: &Op| matches!(op.stage(), Stage::Normalize { .. });
        let normalized = self.ops.iter().any(is_normalize);
        let ops = self
            .ops
            .iter()
            .filter(|op| !is_normalize(op))
            .cloned()
            .collect();
        let geometry = ImagePipeline::new(ops, DType::U8, Layout::Hwc)?;
        let finish = DeviceFinish {
            dtype: self.dtype,
            layout: self.layout,
            normalize: normalized.then_some((self.mean, self.std)),
            clip: None,
        };
        Ok((
            ImagePipeline {
                max_pixels: self.max_pixels,
                route: self.route.clone(),
                ..geometry
            },
            finish,
        ))
    }
    /// Lets `route` send JPEGs to a device decoder: such a sample is delivered with its
    /// encoded bytes and drawn augmentation ([`Deferred`]) instead of pixels. Only for a
    /// consumer that decodes them (the Python `Loader` with `device=`).
    pub fn with_decode_route(mut self, route: Arc<DecodeRoute>) -> ImagePipeline {
        self.route = Some(route);
        self
    }

    /// A preset by name: `"train"` ([`ImagePipeline::imagenet_train`]) or `"val"` (also
    /// `"eval"`, [`ImagePipeline::imagenet_val`]), with output size `size`.
    pub fn preset(name: &str, size: u32) -> Result<ImagePipeline> {
        if size == 0 {
            return Err(Error::Config(format!(
                "the {name:?} preset at 0 pixels: sizes must be at least 1"
            )));
        }
        let ops = match name {
            "train" => imagenet_train_ops(size),
            "val" | "eval" => imagenet_val_ops(size),
            _ => {
                return Err(Error::Config(format!(
                    "unknown pipeline preset {name:?}: use \"train\" or \"val\", or give a list \
                     of operators"
                )))
            }
        };
        ImagePipeline::new(ops, DType::F32, Layout::Chw)
    }

    /// The standard ImageNet training pipeline: RandomResizedCrop(size), flip,
    /// normalise, f32 CHW.
    ///
    /// # Panics
    ///
    /// When `size` is 0 ([`ImagePipeline::preset`] returns an error instead).
    pub fn imagenet_train(size: u32) -> ImagePipeline {
        ImagePipeline::new(imagenet_train_ops(size), DType::F32, Layout::Chw)
            .expect("the preset is valid for sizes of at least 1")
    }

    /// The standard ImageNet evaluation pipeline: resize the shorter side to 256/224 of
    /// `size`, centre crop `size`, normalise, f32 CHW.
    ///
    /// # Panics
    ///
    /// When `size` is 0 ([`ImagePipeline::preset`] returns an error instead).
    pub fn imagenet_val(size: u32) -> ImagePipeline {
        ImagePipeline::new(imagenet_val_ops(size), DType::F32, Layout::Chw)
            .expect("the preset is valid for sizes of at least 1")
    }

    /// The operators.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Output element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Shape of one sample in its layout, e.g. `[3, 224, 224]` for CHW.
    pub fn sample_shape(&self) -> [usize; 3] {
        let (h, w) = (self.height as usize, self.width as usize);
        match self.layout {
            Layout::Chw => [3, h, w],
            Layout::Hwc => [h, w, 3],
        }
    }

    /// The most pixels an image (or a video's frame) may have.
    #[cfg(feature = "video")]
    pub(crate) fn max_pixels(&self) -> u64 {
        self.max_pixels
    }

    /// Refuses images of more than `max_pixels` pixels (decompression bombs), instead of
    /// [`DEFAULT_MAX_PIXELS`].
    pub fn with_max_pixels(mut self, max_pixels: u64) -> ImagePipeline {
        self.max_pixels = max_pixels;
        self
    }

    /// Bytes of one prepared sample.
    pub fn sample_bytes(&self) -> usize {
        self.height as usize * self.width as usize * 3 * self.dtype.size()
    }

    /// The first operator on pixels that runs on the whole decoded image, before the
    /// geometry (written before every geometric operator), if there is one: what views
    /// refuse (a still image's preparer and a video's frames run it).
    pub(crate) fn before_geometry(&self) -> Option<&'static str> {
        self.ops[..self.source_end].first().map(Op::name)
    }

    /// The operator that places the resized image on a canvas (`FixedSizeCrop`), or grows
    /// it onto one (`RandomRotation(expand=True)`), if there is one: what only a still
    /// image's preparer makes (views and video frames refuse it).
    pub(crate) fn on_a_canvas(&self) -> Option<&'static str> {
        let (w, h) = (self.placed.0 as usize, self.placed.1 as usize);
        self.ops.iter().find_map(|op| match op.stage() {
            Stage::Geometry(g) if matches!(g.output_size(), OutputSize::Canvas(..)) => {
                Some(op.name())
            }
            Stage::Pixels(p) if p.grows(w, h).is_some() => Some(op.name()),
            _ => None,
        })
    }

    /// Runs the operators written before the geometry on `rgb`, a decoded `width` ×
    /// `height` image (packed RGB), in place, through `planes` (scratch).
    fn source_pixels(
        &self,
        (rgb, width, height): (&mut [u8], usize, usize),
        planes: &mut Vec<u8>,
        sample: &Rng,
    ) {
        let area = width * height;
        planes.resize(3 * area, 0);
        for (i, px) in rgb.chunks_exact(3).enumerate() {
            for c in 0..3 {
                planes[c * area + i] = px[c];
            }
        }
        let mut image = Planes {
            data: planes,
            width,
            height,
        };
        for (place, op) in self.ops[..self.source_end].iter().enumerate() {
            if let Stage::Pixels(photometric) = op.stage() {
                photometric.apply(&mut image, &mut operator_rng(sample, place));
            }
        }
        for (i, px) in rgb.chunks_exact_mut(3).enumerate() {
            for c in 0..3 {
                px[c] = planes[c * area + i];
            }
        }
    }

    /// Decides, for an image of `width` × `height`, what region to decode and how to
    /// place it, drawing the random choices from `rng`.
    pub fn geometry(&self, width: u32, height: u32, rng: &mut Rng) -> Geometry {
        self.geometry_of(&self.view((width, height), &[], rng))
    }

    /// The view the geometric operators leave of an image of `size` (width, height) with
    /// boxes `targets` (source pixels; what `RandomIoUCrop` draws against), drawing from
    /// `rng`.
    fn view(&self, (width, height): (u32, u32), targets: &[[f64; 4]], rng: &mut Rng) -> View {
        let mut view = View::whole(width, height);
        for op in &self.ops {
            if let Stage::Geometry(geometric) = op.stage() {
                op::plan_step(geometric, &mut view, targets, rng);
            }
        }
        view
    }

    /// The geometry of `view`, at the output's size (at the view's own, where it is placed
    /// on a canvas of the output's size).
    fn geometry_of(&self, view: &View) -> Geometry {
        let (width, height) = view.read_size(self.placed);
        Geometry {
            source: view.source,
            width,
            height,
            flip: view.flip,
            filter: view.filter,
            bound: view.resize_bound,
        }
    }

    /// How the operators on the output's pixels move them, in order, for a sample whose
    /// generator before any draw is `sample`: each drawn from the generator its
    /// [`Photometric::apply`](op::Photometric::apply) draws from, so the motions are
    /// those of the pixels, and the pixels' draws are untouched.
    fn motions(&self, sample: &Rng) -> Vec<op::Motion> {
        if !self.ops.iter().any(Op::moves_targets) {
            return Vec::new();
        }
        let (width, height) = (self.placed.0 as usize, self.placed.1 as usize);
        let mut motions = Vec::new();
        let ops = self.ops[..self.pixels_end].iter().enumerate();
        for (place, op) in ops.skip(self.source_end) {
            if let Stage::Pixels(photometric) = op.stage() {
                let rng = &mut operator_rng(sample, place);
                photometric.motions(width, height, rng, &mut motions);
            }
        }
        motions
    }

    /// Runs the operators on pixels over the image of `size` (width, height) in `planes`,
    /// each with a generator of its own keyed by the sample's (`sample`: its generator
    /// before any draw) and its place; gives the image's size after them (an operator
    /// that grows it, handed all of `planes` as room, changes it).
    fn pixels(
        &self,
        planes: &mut [u8],
        (mut width, mut height): (usize, usize),
        sample: &Rng,
    ) -> Result<(usize, usize), Cause> {
        let ops = self.ops[..self.pixels_end].iter().enumerate();
        for (place, op) in ops.skip(self.source_end) {
            let grows = match op.stage() {
                Stage::Pixels(photometric) => photometric.grows(width, height).is_some(),
                _ => false,
            };
            let room = if grows {
                planes.len()
            } else {
                3 * width * height
            };
            let image = &mut Planes {
                data: &mut planes[..room],
                width,
                height,
            };
            match op.stage() {
                Stage::Pixels(photometric) => {
                    photometric.apply(image, &mut operator_rng(sample, place));
                    (width, height) = (image.width, image.height);
                }
                Stage::User(user) => {
                    let (area, shape) = (image.area(), [3, image.height, image.width]);
                    let planes = UserSample {
                        data: &mut image.data[..3 * area],
                        shape: &shape,
                        dtype: DType::U8,
                    };
                    user.apply(planes, operator_rng(sample, place).next_u64())?;
                }
                _ => {}
            }
        }
        let canvas = (self.width as usize, self.height as usize);
        if width > canvas.0 || height > canvas.1 {
            return Err(Cause::Internal(format!(
                "an operator on pixels grew the image to {width}x{height}, past its canvas \
                 of {}x{}",
                canvas.0, canvas.1
            )));
        }
        Ok((width, height))
    }

    /// Runs the operators on the delivered sample over `out`, as [`Self::pixels`]; `out`
    /// is frame `frame` of its clip (0 for a still image).
    fn tensor(&self, out: &mut [u8], sample: &Rng, frame: usize) -> Result<(), Cause> {
        let mut delivered = op::Sample {
            data: out,
            height: self.height as usize,
            width: self.width as usize,
            layout: self.layout,
            dtype: self.dtype,
            frame,
        };
        for (place, op) in self.ops.iter().enumerate() {
            match op.stage() {
                Stage::Tensor(tensorial) => {
                    tensorial.apply(&mut delivered, &mut operator_rng(sample, place))
                }
                Stage::User(user) if place >= self.pixels_end => {
                    let shape = self.sample_shape();
                    let whole = UserSample {
                        data: delivered.data,
                        shape: &shape,
                        dtype: self.dtype,
                    };
                    user.apply(whole, operator_rng(sample, place).next_u64())?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The generator of the operator at `place` of a pipeline, for the sample whose generator
/// before any draw is `sample`.
pub(crate) fn operator_rng(sample: &Rng, place: usize) -> Rng {
    sample.fork(derive(&[0x5049_5845_4c53, place as u64]))
}

/// The images modality: what a prepared image looks like, and a decoder per thread.
impl Prep for ImagePipeline {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(self.sample_shape().to_vec(), self.dtype)
            .with_image(self.height as usize, self.width as usize)
    }

    fn fingerprint(&self) -> String {
        // What the user asked for, not what the pipeline derived from it.
        format!("{:?} {:?} {:?}", self.ops, self.dtype, self.layout)
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(ImagePreparer::new(self.clone())?))
    }

    fn decode_route(&self) -> Option<&DecodeRoute> {
        self.route.as_deref()
    }

    fn targets_needed(&self) -> Option<&'static str> {
        self.ops.iter().find(|op| op.needs_targets()).map(Op::name)
    }

    fn batch_canvas(&self) -> Option<&'static str> {
        self.ops
            .iter()
            .find(|op| matches!(op.stage(), Stage::Geometry(g) if g.batch_canvas()))
            .map(Op::name)
    }

    fn byte_values(&self) -> Option<ByteValues> {
        if self.dtype != DType::F32 {
            return None;
        }
        let plane = match self.layout {
            Layout::Chw => Some(self.height as usize * self.width as usize),
            Layout::Hwc => None,
        };
        ByteValues::normalizing(self.mean, self.std, plane)
    }

    fn unconverted(&self) -> Option<super::Pipeline> {
        // The user's code on the delivered sample stays where the loader runs it.
        let user_after = self.ops[self.pixels_end..]
            .iter()
            .any(|op| matches!(op.stage(), Stage::User(_)));
        if self.dtype != DType::F32 || user_after || self.route.is_some() {
            return None;
        }
        // The output pass copies the bytes of a u8 sample and ignores `mean` and `std`; the
        // operators, and so their places and draws, are this pipeline's. Those on the
        // delivered sample run where it is converted (`finish_converted`), each from its
        // own generator, so that none of their draws moves another's.
        let bytes = ImagePipeline {
            dtype: DType::U8,
            tensor: false,
            ..self.clone()
        };
        Some(super::Pipeline::new(Unconverted {
            fingerprint: self.fingerprint(),
            bytes,
        }))
    }

    fn finish_converted(&self, out: &mut [u8], sample: &Rng) -> Result<(), Cause> {
        if self.tensor {
            self.tensor(out, sample, 0)?;
        }
        Ok(())
    }

    fn places_targets(&self) -> std::result::Result<(), String> {
        for (place, op) in self.ops.iter().enumerate() {
            if !op.moves_pixels() {
                continue;
            }
            if !op.moves_targets() {
                return Err(format!(
                    "{} moves pixels where boxes do not follow them yet: leave it out of a \
                     pipeline with boxes",
                    op.name()
                ));
            }
            if place < self.source_end {
                return Err(format!(
                    "{} is written before the geometric operators, where it moves the whole \
                     decoded image and boxes do not follow it: write it after them",
                    op.name()
                ));
            }
        }
        Ok(())
    }
}

/// An image pipeline's samples as the bytes its values come from
/// ([`Prep::unconverted`]): its run, under its fingerprint.
#[derive(Debug)]
struct Unconverted {
    fingerprint: String,
    bytes: ImagePipeline,
}

impl std::fmt::Display for Unconverted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (unconverted)", self.bytes)
    }
}

impl Prep for Unconverted {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        Prep::layout(&self.bytes)
    }

    fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        self.bytes.preparer()
    }

    fn targets_needed(&self) -> Option<&'static str> {
        self.bytes.targets_needed()
    }

    fn places_targets(&self) -> std::result::Result<(), String> {
        self.bytes.places_targets()
    }
}

/// Per-thread state to prepare images: decoder and resampler, reused.
pub(crate) struct ImagePreparer {
    pipeline: ImagePipeline,
    decoder: Decoder,
    resampler: Resampler,
    /// The output's pixels as planes, for pipelines with operators on pixels.
    planes: Vec<u8>,
    /// The last sample's placement by the geometry, if it was placed, and its generator
    /// before any draw: the motions after the geometry are drawn again from it only when
    /// a target asks ([`Preparer::placement`]).
    placement: Option<(Placement, Rng)>,
    /// A zoomed-out sample's canvas (`RandomZoomOut`), packed RGB.
    canvas: Vec<u8>,
    /// A padded sample's canvas (`FixedSizeCrop`), packed RGB.
    padded: Vec<u8>,
    /// The whole image after the operators before the geometry, packed RGB.
    source: Vec<u8>,
}

impl ImagePreparer {
    /// Buffers size themselves on first use.
    fn new(pipeline: ImagePipeline) -> Result<ImagePreparer> {
        let decoder = Decoder::new(pipeline.max_pixels).map_err(Error::Config)?;
        Ok(ImagePreparer {
            pipeline,
            decoder,
            resampler: Resampler::default(),
            planes: Vec::new(),
            placement: None,
            canvas: Vec::new(),
            padded: Vec::new(),
            source: Vec::new(),
        })
    }
}

impl Preparer for ImagePreparer {
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
        let pipeline = &self.pipeline;
        debug_assert_eq!(out.len(), pipeline.sample_bytes());
        let sample = rng.clone();
        self.placement = None;
        let header = self.decoder.header(data)?;
        let view = pipeline.view((header.width, header.height), targets, rng);
        let geometry = pipeline.geometry_of(&view);
        let placement = Placement::new(&view, (header.width, header.height), pipeline.placed)
            .on_canvas((pipeline.width, pipeline.height));
        // Asked after the draws, so that the augmentation does not depend on the answer.
        // A device decoder does the geometry only, resizing bilinearly: operators on
        // pixels and other filters keep the CPU's.
        let pixels = header.width as u64 * header.height as u64;
        // A device decoder has no canvas: a zoomed-out sample is made here.
        if header.format == codec::Format::Jpeg
            && view.fill.is_none()
            && view.inset.is_none()
            && pipeline.source_end == 0
            && !pipeline.photometric
            && !pipeline.tensor
            && geometry.filter == Filter::Bilinear
            && pipeline.route.as_ref().is_some_and(|r| r.to_device(pixels))
        {
            out.fill(0);
            self.placement = Some((placement, sample));
            return Ok(Prepared::Deferred(Box::new(Deferred {
                data: Arc::from(data),
                geometry,
            })));
        }
        // The operators before the geometry see the whole image, decoded in full.
        let whole = if pipeline.source_end > 0 {
            let full = Rect::full(header.width, header.height);
            let decoded =
                self.decoder
                    .decode(data, &header, full, (header.width, header.height))?;
            let (w, h) = (decoded.width as usize, decoded.height as usize);
            self.source.clear();
            self.source.extend_from_slice(&decoded.pixels[..w * h * 3]);
            pipeline.source_pixels((&mut self.source, w, h), &mut self.planes, &sample);
            Some((w, h))
        } else {
            None
        };
        let (src, region) = match (view.fill, whole) {
            (Some((shown, fill)), _) => {
                let canvas = (&mut self.canvas, fill, pipeline.max_pixels);
                let from = match whole {
                    Some((w, h)) => Part::Decoded(&self.source, w, h),
                    None => Part::Decoder(&mut self.decoder, data, &header),
                };
                on_canvas(from, geometry.source, shown, canvas)?
            }
            (None, Some((w, h))) => {
                let src = Image {
                    pixels: &self.source,
                    width: w,
                    height: h,
                };
                (src, codec::clamp(geometry.source, w as u32, h as u32))
            }
            (None, None) => {
                let decoded = self.decoder.decode(
                    data,
                    &header,
                    geometry.source,
                    geometry.least_decoded(),
                )?;
                let src = Image {
                    pixels: decoded.pixels,
                    width: decoded.width as usize,
                    height: decoded.height as usize,
                };
                (src, decoded.region)
            }
        };
        match view.inset {
            None => pipeline.finish(
                (&mut self.resampler, &mut self.planes),
                src,
                region,
                &geometry,
                out,
                (&sample, 0),
            )?,
            Some(inset) => {
                let padded = inset_canvas(
                    &mut self.resampler,
                    (src, region, &geometry),
                    inset,
                    (pipeline.placed.0 as usize, pipeline.placed.1 as usize),
                    &mut self.padded,
                );
                let (width, height) = (padded.width as u32, padded.height as u32);
                let whole = Geometry {
                    source: Rect::full(width, height),
                    width,
                    height,
                    flip: false,
                    filter: Filter::Bilinear,
                    bound: None,
                };
                pipeline.finish(
                    (&mut self.resampler, &mut self.planes),
                    padded,
                    whole.source,
                    &whole,
                    out,
                    (&sample, 0),
                )?
            }
        }
        if self.padded.len() > RETAINED_CANVAS_BYTES {
            self.padded = Vec::new();
        }
        if self.canvas.len() > RETAINED_CANVAS_BYTES {
            self.canvas = Vec::new();
        }
        if self.source.len() > RETAINED_CANVAS_BYTES {
            self.source = Vec::new();
        }
        self.placement = Some((placement, sample));
        Ok(Prepared::InSlot)
    }

    fn placement(&self) -> Option<Placement> {
        let (placement, sample) = self.placement.as_ref()?;
        Some(placement.clone().moved(self.pipeline.motions(sample)))
    }
}

/// A canvas above this size is given back after the sample that needed it.
const RETAINED_CANVAS_BYTES: usize = 64 << 20;

/// Where a canvas's image comes from: the decoder (the part the canvas shows decoded at
/// full resolution), or the whole image already decoded (packed RGB, width, height).
enum Part<'d> {
    Decoder(&'d mut Decoder, &'d [u8], &'d codec::Header),
    Decoded(&'d [u8], usize, usize),
}

/// The pixels of `region` (source coordinates, reaching past the image): a canvas of
/// `fill` covering it in whole source pixels, with the image (`from`) drawn where `shown`
/// says (rounded to whole pixels), at full resolution; and `region` in the canvas's
/// coordinates. The canvas is `buffer`, at most `max_pixels`.
fn on_canvas<'a>(
    from: Part<'_>,
    region: Rect,
    shown: Rect,
    (buffer, fill, max_pixels): (&'a mut Vec<u8>, [u8; 3], u64),
) -> Result<(Image<'a>, Rect), Cause> {
    let (x0, y0) = (region.x.floor(), region.y.floor());
    let (x1, y1) = ((region.x + region.w).ceil(), (region.y + region.h).ceil());
    let (width, height) = ((x1 - x0).max(1.0) as u64, (y1 - y0).max(1.0) as u64);
    if width.saturating_mul(height) > max_pixels {
        return Err(Cause::TooManyPixels {
            width,
            height,
            limit: max_pixels,
        });
    }
    let (cw, ch) = (width as usize, height as usize);
    buffer.clear();
    buffer.resize(cw * ch * 3, 0);
    buffer
        .chunks_exact_mut(3)
        .for_each(|p| p.copy_from_slice(&fill));
    // What of the image the canvas shows, in whole source pixels.
    let canvas = Rect {
        x: x0,
        y: y0,
        w: width as f64,
        h: height as f64,
    };
    let (image_w, image_h) = match &from {
        Part::Decoder(_, _, header) => (header.width, header.height),
        Part::Decoded(_, w, h) => (*w as u32, *h as u32),
    };
    let part = op::intersection(
        op::intersection(shown, Rect::full(image_w, image_h)),
        canvas,
    );
    let (px0, py0) = (part.x.round(), part.y.round());
    let (pw, ph) = (
        ((part.x + part.w).round() - px0) as usize,
        ((part.y + part.h).round() - py0) as usize,
    );
    if pw > 0 && ph > 0 {
        let whole = Rect {
            x: px0,
            y: py0,
            w: pw as f64,
            h: ph as f64,
        };
        let (pixels, dx, dy, dw, dh) = match from {
            Part::Decoder(decoder, data, header) => {
                let decoded = decoder.decode(data, header, whole, (pw as u32, ph as u32))?;
                let (dx, dy) = (decoded.region.x as usize, decoded.region.y as usize);
                let (dw, dh) = (decoded.width as usize, decoded.height as usize);
                (decoded.pixels, dx, dy, dw, dh)
            }
            Part::Decoded(pixels, w, h) => (pixels, px0 as usize, py0 as usize, w, h),
        };
        let (ox, oy) = ((px0 - x0) as usize, (py0 - y0) as usize);
        if dx + pw > dw || dy + ph > dh {
            return Err(Cause::Internal(format!(
                "the decoder gave {dw}x{dh} for a part of {pw}x{ph} at ({dx}, {dy})"
            )));
        }
        for y in 0..ph {
            let at = ((dy + y) * dw + dx) * 3;
            let to = ((oy + y) * cw + ox) * 3;
            buffer[to..to + pw * 3].copy_from_slice(&pixels[at..at + pw * 3]);
        }
    }
    let src = Image {
        pixels: buffer,
        width: cw,
        height: ch,
    };
    let local = Rect {
        x: region.x - x0,
        y: region.y - y0,
        ..region
    };
    Ok((src, local))
}

/// The canvas of `output` (width, height) pixels of the inset's fill, in `buffer` (packed
/// RGB), with `region` of `src` resized by `geometry` at its top left (top right and
/// mirrored when the canvas was mirrored): the padding after the resize.
fn inset_canvas<'a>(
    resampler: &mut Resampler,
    (src, region, geometry): (Image<'_>, Rect, &Geometry),
    inset: op::Inset,
    (cw, ch): (usize, usize),
    buffer: &'a mut Vec<u8>,
) -> Image<'a> {
    buffer.clear();
    buffer.resize(cw * ch * 3, 0);
    buffer
        .chunks_exact_mut(3)
        .for_each(|p| p.copy_from_slice(&inset.fill));
    let (pw, ph) = (geometry.width as usize, geometry.height as usize);
    let mirrored = geometry.flip != inset.flip;
    let left = if inset.flip { cw - pw } else { 0 };
    let bound = geometry.bound_in(region);
    resampler.run(
        (src, region, bound),
        (pw, ph, geometry.filter),
        |y0, block| {
            for r in 0..block.rows {
                let line = &mut buffer[((y0 + r) * cw + left) * 3..][..pw * 3];
                for c in 0..3 {
                    let row = block.row(c, r);
                    for (x, &v) in row.iter().enumerate() {
                        let at = if mirrored { pw - 1 - x } else { x };
                        line[at * 3 + c] = v;
                    }
                }
            }
        },
    );
    Image {
        pixels: buffer,
        width: cw,
        height: ch,
    }
}

/// The image of `size` (width, height) at the start of `planes` (three planes) placed at
/// the top left of `canvas`, the rest its fill, in the same `planes`, which hold the
/// canvas's three planes.
fn grown_canvas(planes: &mut [u8], (width, height): (usize, usize), canvas: op::Grown) {
    let (cw, ch) = (canvas.width as usize, canvas.height as usize);
    let image = planes[..3 * width * height].to_vec();
    for (c, plane) in planes[..3 * cw * ch].chunks_exact_mut(cw * ch).enumerate() {
        plane.fill(canvas.fill[c]);
        let from = &image[c * width * height..][..width * height];
        for (row, line) in from.chunks_exact(width).enumerate() {
            plane[row * cw..row * cw + width].copy_from_slice(line);
        }
    }
}

/// A prep thread's scratch to make samples from pixels decoded elsewhere (a video's
/// frames): the resampler and the planes [`ImagePipeline::sample_from_pixels`] reuses,
/// and a copy of the frame for the operators written before the geometry.
#[cfg(feature = "video")]
#[derive(Default)]
pub(crate) struct Scratch {
    resampler: Resampler,
    planes: Vec<u8>,
    source: Vec<u8>,
}

#[cfg(feature = "video")]
impl ImagePipeline {
    /// Makes the sample of `geometry` from `rgb`, a decoded `width` × `height` image (packed
    /// RGB) the geometry was drawn for, in `out`, as [`Preparer::prepare`] does from a
    /// file: the operators on pixels and on the delivered sample draw from generators
    /// keyed by `sample`, so the same `sample` gives every frame of a clip the same draws
    /// (the operators written before the geometry run on a copy of the whole frame, as on
    /// a still image's whole decoded picture). `frame` is the image's frame of its clip,
    /// which an operator with draws of each frame's own keys them by.
    pub(crate) fn sample_from_pixels(
        &self,
        scratch: &mut Scratch,
        (rgb, width, height): (&[u8], u32, u32),
        geometry: &Geometry,
        out: &mut [u8],
        (sample, frame): (&Rng, usize),
    ) -> Result<(), Cause> {
        let (w, h) = (width as usize, height as usize);
        let pixels = if self.source_end > 0 {
            scratch.source.clear();
            scratch.source.extend_from_slice(rgb);
            self.source_pixels((&mut scratch.source, w, h), &mut scratch.planes, sample);
            &scratch.source[..]
        } else {
            rgb
        };
        let src = Image {
            pixels,
            width: w,
            height: h,
        };
        self.finish(
            (&mut scratch.resampler, &mut scratch.planes),
            src,
            geometry.source,
            geometry,
            out,
            (sample, frame),
        )
    }
}

impl ImagePipeline {
    /// Makes the sample of `geometry` from `region` of the decoded image `src`, in `out`:
    /// the one resize, the operators on pixels, the last pass and the operators on the
    /// delivered sample, their draws keyed by `sample` (the sample's generator before any
    /// draw; `frame`, the sample's frame of its clip, 0 for a still image). `scratch` is
    /// the preparer's resampler and planes. Fails where a function of the caller's does.
    fn finish(
        &self,
        (resampler, planes): (&mut Resampler, &mut Vec<u8>),
        src: Image<'_>,
        region: Rect,
        geometry: &Geometry,
        out: &mut [u8],
        (sample, frame): (&Rng, usize),
    ) -> Result<(), Cause> {
        let (width, height) = (geometry.width as usize, geometry.height as usize);
        let bound = geometry.bound_in(region);
        if !self.photometric {
            // The resized rows go straight to the last pass while in cache.
            resampler.run(
                (src, region, bound),
                (width, height, geometry.filter),
                |y0, block| output::write_block(block, y0, height, geometry.flip, self, out),
            );
            if self.tensor {
                self.tensor(out, sample, frame)?;
            }
            return Ok(());
        }
        // The operators on pixels see the whole image, mirrored where the geometry says; one
        // that grows it has room for its canvas, the output.
        let area = width * height;
        let room = match self.grown {
            Some(_) => area.max(self.width as usize * self.height as usize),
            None => area,
        };
        planes.resize(3 * room, 0);
        resampler.run(
            (src, region, bound),
            (width, height, geometry.filter),
            |y0, block| {
                for c in 0..3 {
                    for r in 0..block.rows {
                        let at = c * area + (y0 + r) * width;
                        let (row, to) = (block.row(c, r), &mut planes[at..at + width]);
                        if geometry.flip {
                            to.iter_mut()
                                .zip(row.iter().rev())
                                .for_each(|(d, s)| *d = *s);
                        } else {
                            to.copy_from_slice(row);
                        }
                    }
                }
            },
        );
        let grown = self.pixels(planes, (width, height), sample)?;
        if let Some(canvas) = self
            .grown
            .filter(|c| grown != (c.width as usize, c.height as usize))
        {
            grown_canvas(planes, grown, canvas);
        }
        let (width, height) = (self.width as usize, self.height as usize);
        let whole = Block {
            data: planes,
            width,
            rows: height,
            plane: width * height,
        };
        output::write_block(&whole, 0, height, false, self, out);
        if self.tensor {
            self.tensor(out, sample, frame)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
