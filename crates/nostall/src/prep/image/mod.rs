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
//! Random choices follow torchvision's definitions (RandomResizedCrop: scale 0.08–1,
//! ratio 3/4–4/3, ten tries, then the centre fallback), drawn from a generator seeded by
//! (seed, epoch, sample id), so a sample's augmentation does not depend on which thread
//! prepares it.

pub mod codec;
mod ops;
mod output;
mod resample;

use std::sync::Arc;

use codec::{Decoder, Rect, DEFAULT_MAX_PIXELS};
use resample::{Image, Resampler};

pub use ops::{
    Layout, Op, Size, DEFAULT_CROP_RATIO, DEFAULT_CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD,
};

use super::{DType, Deferred, Modality, Prep, Prepared, Preparer, SampleLayout};
use crate::error::{Cause, Error, Result};
use crate::prep::route::DecodeRoute;
use crate::rng::Rng;

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
    /// Decompression-bomb guard: images with more pixels are refused.
    max_pixels: u64,
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
}

/// The operators of [`ImagePipeline::imagenet_train`].
fn imagenet_train_ops(size: u32) -> Vec<Op> {
    vec![
        Op::random_resized_crop(size),
        Op::RandomHorizontalFlip { p: 0.5 },
        Op::Normalize {
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        },
    ]
}

/// The operators of [`ImagePipeline::imagenet_val`].
fn imagenet_val_ops(size: u32) -> Vec<Op> {
    let resize = (size as f64 * 256.0 / 224.0).round() as u32;
    vec![
        Op::Resize(Size::Shorter(resize)),
        Op::CenterCrop {
            height: size,
            width: size,
        },
        Op::Normalize {
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        },
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
}

/// A pipeline as a person would write it down, e.g. `RandomResizedCrop(224) →
/// RandomHorizontalFlip → Normalize(ImageNet), float32 CHW` (for reports).
impl std::fmt::Display for ImagePipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn size(f: &mut std::fmt::Formatter<'_>, height: u32, width: u32) -> std::fmt::Result {
            if height == width {
                write!(f, "{height}")
            } else {
                write!(f, "{height}×{width}")
            }
        }
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                f.write_str(" → ")?;
            }
            match *op {
                Op::RandomResizedCrop {
                    size: (height, width),
                    scale,
                    ratio,
                } => {
                    f.write_str("RandomResizedCrop(")?;
                    size(f, height, width)?;
                    if scale != DEFAULT_CROP_SCALE || ratio != DEFAULT_CROP_RATIO {
                        write!(
                            f,
                            ", scale {}–{}, ratio {:.3}–{:.3}",
                            scale.0, scale.1, ratio.0, ratio.1
                        )?;
                    }
                    f.write_str(")")?;
                }
                Op::Resize(Size::Shorter(side)) => write!(f, "Resize({side})")?,
                Op::Resize(Size::Exact { height, width }) => {
                    f.write_str("Resize(")?;
                    size(f, height, width)?;
                    f.write_str(")")?;
                }
                Op::CenterCrop { height, width } => {
                    f.write_str("CenterCrop(")?;
                    size(f, height, width)?;
                    f.write_str(")")?;
                }
                Op::RandomHorizontalFlip { p: 0.5 } => f.write_str("RandomHorizontalFlip")?,
                Op::RandomHorizontalFlip { p } => write!(f, "RandomHorizontalFlip(p={p})")?,
                Op::Normalize { mean, std } if mean == IMAGENET_MEAN && std == IMAGENET_STD => {
                    f.write_str("Normalize(ImageNet)")?
                }
                Op::Normalize { mean, std } => write!(f, "Normalize(mean {mean:?}, std {std:?})")?,
            }
        }
        write!(f, ", {} {}", self.dtype, self.layout)
    }
}

impl ImagePipeline {
    /// Checks every operator ([`Op::validate`]), that together they produce one fixed
    /// output shape, and that the output type fits.
    pub fn new(ops: Vec<Op>, dtype: DType, layout: Layout) -> Result<ImagePipeline> {
        let mut size: Option<(u32, u32)> = None;
        let (mut mean, mut std) = ([0.0; 3], [1.0; 3]);
        let mut normalized = false;
        for op in &ops {
            op.validate()?;
            match *op {
                Op::RandomResizedCrop { size: (h, w), .. } => size = Some((h, w)),
                Op::Resize(Size::Exact { height, width }) | Op::CenterCrop { height, width } => {
                    size = Some((height, width))
                }
                Op::Resize(Size::Shorter(_)) => size = None,
                Op::RandomHorizontalFlip { .. } => {}
                Op::Normalize { mean: m, std: s } => {
                    if normalized {
                        return Err(Error::Config("Normalize appears twice".into()));
                    }
                    (mean, std, normalized) = (m, s, true);
                }
            }
        }
        let Some((height, width)) = size else {
            return Err(Error::Config(
                "the output size varies with the image: end the geometric operators with CenterCrop, \
                 RandomResizedCrop or an exact Resize so that samples can be batched"
                    .into(),
            ));
        };
        if normalized && dtype == DType::U8 {
            return Err(Error::Config(
                "Normalize needs f32 (float32) output; for u8 (uint8) output, leave Normalize out \
                 of the operators (the ImageNet presets end with it) and normalise on the GPU"
                    .into(),
            ));
        }
        Ok(ImagePipeline {
            ops,
            dtype,
            layout,
            height,
            width,
            mean,
            std,
            fused_exact: output::fused_is_exact(mean, std),
            max_pixels: DEFAULT_MAX_PIXELS,
            route: None,
        })
    }

    /// The pipeline split for a device: this one's geometry in 8-bit HWC pixels (what
    /// the engine prepares), and what the device does after (see [`DeviceFinish`]). The
    /// device's conversion gives the values the CPU's would, up to float rounding.
    pub fn for_device(&self) -> (ImagePipeline, DeviceFinish) {
        let normalized = self.ops.iter().any(|op| matches!(op, Op::Normalize { .. }));
        let ops = self
            .ops
            .iter()
            .filter(|op| !matches!(op, Op::Normalize { .. }))
            .cloned()
            .collect();
        let geometry = ImagePipeline::new(ops, DType::U8, Layout::Hwc)
            .expect("the operators were checked, and without Normalize u8 output is valid");
        let finish = DeviceFinish {
            dtype: self.dtype,
            layout: self.layout,
            normalize: normalized.then_some((self.mean, self.std)),
        };
        (
            ImagePipeline {
                max_pixels: self.max_pixels,
                route: self.route.clone(),
                ..geometry
            },
            finish,
        )
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

    /// Decides, for an image of `width` × `height`, what region to decode and how to
    /// place it, drawing the random choices from `rng`.
    pub fn geometry(&self, width: u32, height: u32, rng: &mut Rng) -> Geometry {
        let mut view = View {
            source: Rect::full(width, height),
            w: width as f64,
            h: height as f64,
        };
        let mut flip = false;
        for op in &self.ops {
            match *op {
                Op::RandomResizedCrop {
                    size: (oh, ow),
                    scale,
                    ratio,
                } => {
                    let (x, y, w, h) = random_crop(
                        view.w.round() as u32,
                        view.h.round() as u32,
                        scale,
                        ratio,
                        rng,
                    );
                    view.crop(x, y, w, h);
                    (view.w, view.h) = (ow as f64, oh as f64);
                }
                Op::Resize(Size::Shorter(s)) => {
                    let portrait = view.w <= view.h;
                    let (short, long) = if portrait {
                        (view.w, view.h)
                    } else {
                        (view.h, view.w)
                    };
                    let new_long = (s as f64 * long / short).floor();
                    (view.w, view.h) = if portrait {
                        (s as f64, new_long)
                    } else {
                        (new_long, s as f64)
                    };
                }
                Op::Resize(Size::Exact { height, width }) => {
                    (view.w, view.h) = (width as f64, height as f64)
                }
                Op::CenterCrop { height, width } => {
                    let (w, h) = (width as f64, height as f64);
                    let x = ((view.w - w) / 2.0).round_ties_even();
                    let y = ((view.h - h) / 2.0).round_ties_even();
                    view.crop(x, y, w, h);
                }
                Op::RandomHorizontalFlip { p } => {
                    if rng.next_f64() < p {
                        flip = !flip;
                    }
                }
                Op::Normalize { .. } => {}
            }
        }
        Geometry {
            source: view.source,
            width: self.width,
            height: self.height,
            flip,
        }
    }
}

/// The image as the operators so far have made it: `source` of the original, seen at w × h.
struct View {
    source: Rect,
    w: f64,
    h: f64,
}

impl View {
    /// Crops to the given rectangle of the current view.
    fn crop(&mut self, x: f64, y: f64, w: f64, h: f64) {
        let (sx, sy) = (self.source.w / self.w, self.source.h / self.h);
        self.source = Rect {
            x: self.source.x + x * sx,
            y: self.source.y + y * sy,
            w: w * sx,
            h: h * sy,
        };
        (self.w, self.h) = (w, h);
    }
}

/// torchvision's `RandomResizedCrop.get_params`: (left, top, width, height).
fn random_crop(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut Rng,
) -> (f64, f64, f64, f64) {
    let (w_img, h_img) = (width as f64, height as f64);
    let area = w_img * h_img;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_lo, log_hi).exp();
        let w = (target * aspect).sqrt().round_ties_even();
        let h = (target / aspect).sqrt().round_ties_even();
        if 0.0 < w && w <= w_img && 0.0 < h && h <= h_img {
            let top = rng.below((h_img - h) as u64 + 1) as f64;
            let left = rng.below((w_img - w) as u64 + 1) as f64;
            return (left, top, w, h);
        }
    }
    let in_ratio = w_img / h_img;
    let (w, h) = if in_ratio < ratio.0 {
        (w_img, (w_img / ratio.0).round_ties_even())
    } else if in_ratio > ratio.1 {
        ((h_img * ratio.1).round_ties_even(), h_img)
    } else {
        (w_img, h_img)
    };
    (
        ((w_img - w) / 2.0).floor(),
        ((h_img - h) / 2.0).floor(),
        w,
        h,
    )
}

/// The images modality: what a prepared image looks like, and a decoder per thread.
impl Prep for ImagePipeline {
    fn modality(&self) -> Modality {
        Modality::Image
    }

    fn layout(&self) -> SampleLayout {
        SampleLayout::new(self.sample_shape().to_vec(), self.dtype)
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
}

/// Per-thread state to prepare images: decoder and resampler, reused.
pub(crate) struct ImagePreparer {
    pipeline: ImagePipeline,
    decoder: Decoder,
    resampler: Resampler,
}

impl ImagePreparer {
    /// Buffers size themselves on first use.
    fn new(pipeline: ImagePipeline) -> Result<ImagePreparer> {
        let decoder = Decoder::new(pipeline.max_pixels).map_err(Error::Config)?;
        Ok(ImagePreparer {
            pipeline,
            decoder,
            resampler: Resampler::default(),
        })
    }
}

impl Preparer for ImagePreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let pipeline = &self.pipeline;
        debug_assert_eq!(out.len(), pipeline.sample_bytes());
        let header = self.decoder.header(data)?;
        let geometry = pipeline.geometry(header.width, header.height, rng);
        // Asked after the draws, so that the augmentation does not depend on the answer.
        let pixels = header.width as u64 * header.height as u64;
        if header.format == codec::Format::Jpeg
            && pipeline.route.as_ref().is_some_and(|r| r.to_device(pixels))
        {
            out.fill(0);
            return Ok(Prepared::Deferred(Box::new(Deferred {
                data: Arc::from(data),
                geometry,
            })));
        }
        let (ow, oh) = (geometry.width, geometry.height);
        let decoded = self
            .decoder
            .decode(data, &header, geometry.source, (ow, oh))?;
        let src = Image {
            pixels: decoded.pixels,
            width: decoded.width as usize,
            height: decoded.height as usize,
        };
        let (width, height) = (ow as usize, oh as usize);
        self.resampler
            .run(src, decoded.region, width, height, |y0, block| {
                output::write_block(block, y0, height, geometry.flip, pipeline, out)
            });
        Ok(Prepared::InSlot)
    }
}

#[cfg(test)]
mod tests;
