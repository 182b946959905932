//! The image operators, each declared once, in its own file.
//!
//! An operator's file holds everything about it: its [`Declaration`] (name, parameters
//! with their kinds and defaults, the docs Python shows, and how the arguments are
//! checked and read), and the type that does the work, an [`Operator`]. The operator says
//! where in a sample's preparation it runs ([`Stage`]), draws its random choices from the
//! generator it is handed, and holds its kernel. Everything else reads the declarations
//! in [`DECLARATIONS`]: the pipeline ([`ImagePipeline`](super::ImagePipeline)) plans and
//! runs the stages, the text form ([`crate::prep::notation`]) reads and writes calls, the
//! Python bindings make one class per declaration and the stubs are generated from them.
//! A declaration also names the torchvision and timm transforms the operator stands for
//! ([`Translation`](crate::prep::translation::Translation): the class, and for each
//! parameter the attribute it is read from and its named conversion), which Python's
//! translation of recipes reads. Adding an operator, one with a torchvision name too, is
//! its file (the declaration with its translations), its line in [`DECLARATIONS`], its
//! test and its docs line.
//!
//! The stages, in the order a sample goes through them:
//!
//! - [`Stage::Geometry`]: planned before decoding. A geometric operator only moves a
//!   rectangle ([`View`]): the region of the source read, the size it maps to, mirrored
//!   or not. The decoder then decodes only that region, at the smallest sufficient scale,
//!   and one resize makes the output's size.
//! - [`Stage::Pixels`]: on the output's 8-bit pixels, after the resize, in the order
//!   written (colour, blur, solarize, the automatic augmentations).
//! - [`Stage::Normalize`]: folded into the last pass, which converts the type and lays
//!   out the channels straight into the sample's slot of the batch.
//! - [`Stage::Tensor`]: on the sample as delivered, in its slot.
//!
//! A function of the caller's ([`Stage::User`]) runs on pixels where an operator on
//! pixels or `Normalize` follows it, else on the sample as delivered.

mod affine;
mod augment;
mod augmix;
mod auto_augment;
mod autocontrast;
mod center_crop;
mod color_jitter;
mod compose;
mod composed;
mod detr_random_resize;
mod equalize;
mod fixed_size_crop;
mod gaussian_blur;
mod grayscale;
mod horizontal_flip;
mod invert;
mod motion;
mod multi_scale_crop;
mod normalize;
mod pad;
mod pil;
#[cfg(target_arch = "x86_64")]
mod pil_affine_avx2;
mod posterize;
mod python;
mod rand_augment;
mod random_apply;
mod random_choice;
mod random_crop;
mod random_erasing;
mod random_iou_crop;
mod random_order;
mod random_perspective;
mod random_photometric_distort;
mod random_resize;
mod random_resized_crop;
mod random_shortest_size;
mod random_size_crop;
mod random_zoom_out;
mod resize;
mod rotation;
mod scale_jitter;
mod sharpness;
mod simd;
mod solarize;
mod timm_rand_augment;
mod timm_random_erasing;
mod trivial_augment_wide;
mod vertical_flip;
mod videomae_random_erasing;

use std::sync::Arc;

use super::codec::Rect;
use super::{Filter, Layout};
use crate::error::{Error, Result};
use crate::prep::args::{Args, Handle, Operation, Value};
use crate::prep::DType;
use crate::rng::Rng;
use crate::user_code::function::UserOp;

pub(crate) use motion::{composed_sources, Motion};
pub use normalize::{IMAGENET_MEAN, IMAGENET_STD};
#[doc(hidden)]
pub use random_perspective::pinned_perspective;
pub use random_resized_crop::{DEFAULT_CROP_RATIO, DEFAULT_CROP_SCALE};
pub use resize::Size;

/// Every image operator, in the order the docs list them.
pub static DECLARATIONS: &[&Declaration] = &[
    &random_resized_crop::DECLARATION,
    &resize::DECLARATION,
    &center_crop::DECLARATION,
    &pad::DECLARATION,
    &random_crop::DECLARATION,
    &multi_scale_crop::DECLARATION,
    &random_iou_crop::DECLARATION,
    &random_resize::DECLARATION,
    &random_zoom_out::DECLARATION,
    &scale_jitter::DECLARATION,
    &fixed_size_crop::DECLARATION,
    &random_shortest_size::DECLARATION,
    &detr_random_resize::DECLARATION,
    &random_size_crop::DECLARATION,
    &horizontal_flip::DECLARATION,
    &vertical_flip::DECLARATION,
    &normalize::DECLARATION,
    &grayscale::DECLARATION,
    &invert::DECLARATION,
    &solarize::DECLARATION,
    &posterize::DECLARATION,
    &color_jitter::DECLARATION,
    &random_photometric_distort::DECLARATION,
    &autocontrast::DECLARATION,
    &equalize::DECLARATION,
    &sharpness::DECLARATION,
    &gaussian_blur::DECLARATION,
    &rotation::DECLARATION,
    &affine::DECLARATION,
    &random_perspective::DECLARATION,
    &auto_augment::DECLARATION,
    &rand_augment::DECLARATION,
    &trivial_augment_wide::DECLARATION,
    &augmix::DECLARATION,
    &timm_rand_augment::DECLARATION,
    &compose::DECLARATION,
    &random_apply::DECLARATION,
    &random_choice::DECLARATION,
    &random_order::DECLARATION,
    &random_erasing::DECLARATION,
    &timm_random_erasing::DECLARATION,
    &videomae_random_erasing::DECLARATION,
];

/// An image operator's declaration: what Python, the text form and the docs know of it.
pub type Declaration = crate::prep::args::Declaration<Op>;

/// What an operator does and when: the trait each operator's type implements.
pub(crate) trait Operator: Send + Sync + 'static {
    /// Its declaration.
    fn declaration(&self) -> &'static Declaration;

    /// Its arguments, one per parameter in the declaration's order, as its call would
    /// give them (what it is written as, compared by, and shown to Python as).
    fn args(&self) -> Vec<Value>;

    /// Where it runs.
    fn stage(&self) -> Stage<'_>;

    /// Whether it moves pixels away from where the geometry placed them (a rotation, an
    /// affine warp, a flip of the output's rows): the targets that follow the geometry
    /// (a detection sample's boxes, [`Placement`](super::Placement)) follow it only where
    /// it says how ([`Operator::moves_targets`]), else a pipeline with targets refuses it.
    fn moves_pixels(&self) -> bool {
        false
    }

    /// Whether the targets follow the pixels it moves: its [`Photometric::motion`] gives
    /// each sample's motion.
    fn moves_targets(&self) -> bool {
        false
    }

    /// Whether its draws read the sample's boxes ([`Geometric::plan_targeted`]): it runs
    /// only where samples carry a boxes field.
    fn needs_targets(&self) -> bool {
        false
    }

    /// Its draws and steps one at a time, where it applies augmentations drawn from a
    /// space (the automatic augmentations), for the tests against the reference.
    fn augmenter(&self) -> Option<&dyn Augmenter> {
        None
    }
}

/// An operator that applies a sequence of augmentations drawn from a space (AutoAugment,
/// RandAugment, ...), seen step by step: what the tests compare with the reference's
/// draws and kernels.
pub(crate) trait Augmenter {
    /// The augmentations one sample of `width` × `height` gets, in order, each as the
    /// reference names it with its argument (the signed magnitude, the bits, ...; 0 for
    /// those that take none), without applying them.
    fn draw_steps(&self, width: usize, height: usize, rng: &mut Rng) -> Vec<(&'static str, f64)>;

    /// Applies the one augmentation `name` with its argument `value`, as this operator's
    /// settings (interpolation, fill) have it; `rng` serves the draws the step itself
    /// makes (timm's random resampling filter).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a name that is not in the operator's space.
    fn apply_step(
        &self,
        name: &str,
        value: f64,
        image: &mut Planes<'_>,
        rng: &mut Rng,
    ) -> Result<()>;
}

/// Where in a sample's preparation an operator runs (see the module doc).
pub(crate) enum Stage<'a> {
    /// Planned before decoding.
    Geometry(&'a dyn Geometric),
    /// On the output's 8-bit pixels.
    Pixels(&'a dyn Photometric),
    /// Folded into the output pass: `(v / 255 - mean) / std` per channel.
    Normalize {
        /// Per-channel mean, in [0, 1] units.
        mean: [f32; 3],
        /// Per-channel standard deviation, in [0, 1] units.
        std: [f32; 3],
    },
    /// On the sample as delivered (normalised, in its type and layout).
    Tensor(&'a dyn Tensorial),
    /// The caller's function, on pixels or on the sample as delivered by its place.
    User(&'a UserOp),
}

/// An operator on the sample as delivered, in its slot of the batch.
pub(crate) trait Tensorial {
    /// Whether it can write samples of this element type.
    fn check(&self, dtype: DType) -> Result<()>;

    /// Changes `sample` in place, drawing from `rng` (its own, as [`Photometric`]'s).
    fn apply(&self, sample: &mut Sample<'_>, rng: &mut Rng);
}

/// One prepared sample in its slot: `height` × `width` × 3 values of `dtype`, in
/// `layout`.
#[derive(Debug)]
pub(crate) struct Sample<'a> {
    /// The slot's bytes.
    pub data: &'a mut [u8],
    /// Rows.
    pub height: usize,
    /// Pixels a row.
    pub width: usize,
    /// The order of the dimensions.
    pub layout: Layout,
    /// The element type.
    pub dtype: DType,
    /// Which frame of its clip the sample is (0 for a still image): what an operator
    /// whose draws are made per frame keys them by, its generator being the clip's.
    pub frame: usize,
}

impl Sample<'_> {
    /// Sets rows `top..top + h`, columns `left..left + w` of channel `c` to `value(c)`,
    /// for each channel in turn (a `u8` sample takes the value rounded and clamped).
    pub(crate) fn fill(
        &mut self,
        (top, left, h, w): (usize, usize, usize, usize),
        mut value: impl FnMut(usize) -> f32,
    ) {
        let (width, height, size) = (self.width, self.height, self.dtype.size());
        for c in 0..3 {
            for y in top..top + h {
                for x in left..left + w {
                    let i = match self.layout {
                        Layout::Chw => (c * height + y) * width + x,
                        Layout::Hwc => (y * width + x) * 3 + c,
                    };
                    let v = value(c);
                    match self.dtype {
                        DType::U8 => self.data[i] = v.round().clamp(0.0, 255.0) as u8,
                        DType::F32 => {
                            self.data[i * size..(i + 1) * size].copy_from_slice(&v.to_ne_bytes())
                        }
                    }
                }
            }
        }
    }
}

/// An operator that moves the region read and the size it maps to.
pub(crate) trait Geometric {
    /// What it does to the output's size.
    fn output_size(&self) -> OutputSize;

    /// Moves `view`, drawing its random choices from `rng`.
    fn plan(&self, view: &mut View, rng: &mut Rng);

    /// Moves `view` as [`Geometric::plan`] does, for a sample with boxes `targets` (x0, y0,
    /// x1, y1 in source pixels): what an operator whose draws read the boxes implements
    /// ([`Operator::needs_targets`]).
    fn plan_targeted(&self, view: &mut View, _targets: &[[f64; 4]], rng: &mut Rng) {
        self.plan(view, rng);
    }

    /// Whether all it does is mirror the view left–right (what may follow an [`Inset`]).
    fn mirrors(&self) -> bool {
        false
    }

    /// Whether the canvas it places the view on only holds the batch
    /// ([`Inset::for_batching`]): no operator on pixels may follow it.
    fn batch_canvas(&self) -> bool {
        false
    }

    /// Whether it plans operators of its own (`Compose`, `RandomChoice`, ...), each
    /// through [`plan_step`], which notes their resizes: the step around it notes none.
    fn holds_operators(&self) -> bool {
        false
    }
}

/// Plans `geometric` on `view` for a sample with boxes `targets` (in source pixels), and
/// where it resized the view, keeps the crops' windows then as the resize's bound:
/// torchvision resizes a crop alone, so the resize's filter reads nothing outside them.
pub(crate) fn plan_step(
    geometric: &dyn Geometric,
    view: &mut View,
    targets: &[[f64; 4]],
    rng: &mut Rng,
) {
    if geometric.holds_operators() {
        geometric.plan_targeted(view, targets, rng);
        return;
    }
    let scale = (view.source.w / view.w, view.source.h / view.h);
    geometric.plan_targeted(view, targets, rng);
    // A crop keeps the scale but for a rounding of the region's size.
    let resized = |before: f64, after: f64| (after / before - 1.0).abs() > 1e-9;
    if resized(scale.0, view.source.w / view.w) || resized(scale.1, view.source.h / view.h) {
        view.resize_bound = view.clip;
    }
}

/// The `fill` of an operator that places the image on a canvas (`RandomZoomOut`,
/// `FixedSizeCrop`, `RandomShortestSize`): one number or three, each from 0 to 255, as
/// bytes.
fn canvas_fill(args: &Args) -> Result<[u8; 3]> {
    let fill = args.fill("fill")?;
    if fill.iter().any(|v| !(0.0..=255.0).contains(v)) {
        return Err(args.error("fill", format!("{fill:?}: use values from 0 to 255")));
    }
    Ok(fill.map(|v| v.round() as u8))
}

/// A canvas's fill as its operator's argument gives it back.
fn canvas_fill_value(fill: [u8; 3]) -> Value {
    Value::Tuple(fill.iter().map(|&v| Value::Float(v.into())).collect())
}

/// What a geometric operator does to the output's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputSize {
    /// Leaves it as it was.
    Keeps,
    /// Makes it depend on the image.
    Varies,
    /// Makes it this `(height, width)`.
    Fixed(u32, u32),
    /// Makes it this `(height, width)` by placing the view on a canvas ([`Inset`]).
    Canvas(u32, u32),
}

/// An operator on the output's 8-bit pixels.
pub(crate) trait Photometric {
    /// Changes `image` in place, drawing its random choices from `rng` (a generator of
    /// its own, keyed by the sample and the operator's place in the pipeline).
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng);

    /// How [`Photometric::apply`] moves the pixels of a `width` × `height` image, drawn
    /// from `rng` exactly as `apply` draws from it (so the same generator gives the motion
    /// of the pixels it moved), for the targets that follow them
    /// ([`Operator::moves_targets`]); `None` where it leaves them in place.
    fn motion(&self, _width: usize, _height: usize, _rng: &mut Rng) -> Option<Motion> {
        None
    }

    /// Every motion [`Photometric::apply`] makes, in order, onto `out`: its
    /// [`Photometric::motion`], or, for an operator that holds others (`RandomApply`,
    /// `RandomChoice`, `RandomOrder`, `Compose`), those of the ones it applies, drawn as
    /// it draws them.
    fn motions(&self, width: usize, height: usize, rng: &mut Rng, out: &mut Vec<Motion>) {
        out.extend(self.motion(width, height, rng));
    }

    /// Where it grows each image of `width` × `height` to a size of its own
    /// (`RandomRotation(expand=True)`): the canvas that holds the largest, which
    /// [`Photometric::apply`] is then handed room for in [`Planes::data`]; `None` where it
    /// keeps the size.
    fn grows(&self, _width: usize, _height: usize) -> Option<Grown> {
        None
    }
}

/// The canvas of an operator that grows each image to a size of its own
/// ([`Photometric::grows`]): each image at its top left, the rest `fill`, so that a
/// batch holds them; a boxes field gives each image's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grown {
    /// The canvas's width: the widest image.
    pub width: u32,
    /// The canvas's height: the tallest image.
    pub height: u32,
    /// Its colour around each image.
    pub fill: [u8; 3],
}

/// An operator on pixels whose one parameter is `p`, the probability of running its
/// kernel on a sample (RandomGrayscale, RandomInvert, ...): the declaration, the draw and
/// the argument they all share.
struct WithProbability {
    declaration: &'static Declaration,
    kernel: fn(&mut Planes<'_>),
    p: f64,
    /// How the kernel moves pixels, where it does ([`Operator::moves_pixels`]).
    motion: Option<Motion>,
}

/// The operator of `declaration` (whose one parameter is `p`) running `kernel` with
/// probability `p`.
pub(super) fn with_probability(
    args: &Args,
    declaration: &'static Declaration,
    kernel: fn(&mut Planes<'_>),
) -> Result<Op> {
    probable(args, declaration, kernel, None)
}

/// As [`with_probability`], for a kernel that moves pixels as `motion` says
/// ([`Operator::moves_pixels`]).
pub(super) fn moving_with_probability(
    args: &Args,
    declaration: &'static Declaration,
    kernel: fn(&mut Planes<'_>),
    motion: Motion,
) -> Result<Op> {
    probable(args, declaration, kernel, Some(motion))
}

fn probable(
    args: &Args,
    declaration: &'static Declaration,
    kernel: fn(&mut Planes<'_>),
    motion: Option<Motion>,
) -> Result<Op> {
    Ok(Op::new(WithProbability {
        declaration,
        kernel,
        p: args.probability("p")?,
        motion,
    }))
}

impl Operator for WithProbability {
    fn declaration(&self) -> &'static Declaration {
        self.declaration
    }

    fn args(&self) -> Vec<Value> {
        vec![self.p.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }

    fn moves_pixels(&self) -> bool {
        self.motion.is_some()
    }

    fn moves_targets(&self) -> bool {
        self.motion.is_some()
    }
}

impl Photometric for WithProbability {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        if rng.next_f64() < self.p {
            (self.kernel)(image);
        }
    }

    fn motion(&self, _width: usize, _height: usize, rng: &mut Rng) -> Option<Motion> {
        (rng.next_f64() < self.p).then_some(self.motion?)
    }
}

/// An image as three planes of 8-bit values, R, G, B, each `height` rows of `width`.
#[derive(Debug)]
pub(crate) struct Planes<'a> {
    /// The planes, one after another (the first `3 · width · height` bytes: an operator
    /// that grows the image, [`Photometric::grows`], is handed room for its canvas).
    pub data: &'a mut [u8],
    /// Pixels a row.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

impl Planes<'_> {
    /// Pixels a plane.
    pub(crate) fn area(&self) -> usize {
        self.width * self.height
    }

    /// The three planes at once.
    pub(crate) fn rgb_mut(&mut self) -> [&mut [u8]; 3] {
        let area = self.area();
        let (r, rest) = self.data[..3 * area].split_at_mut(area);
        let (g, b) = rest.split_at_mut(area);
        [r, g, b]
    }

    /// Every pixel made anew from its own values: `pixel(r, g, b)` gives its new
    /// `[r, g, b]`. Inlined, so that the caller's loop is compiled (and vectorised) with it.
    #[inline(always)]
    pub(crate) fn map_pixels(&mut self, mut pixel: impl FnMut(u8, u8, u8) -> [u8; 3]) {
        let [r, g, b] = self.rgb_mut();
        for ((r, g), b) in r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()) {
            [*r, *g, *b] = pixel(*r, *g, *b);
        }
    }

    /// The image turned by a multiple of 90 degrees, keeping its size (a square one for
    /// a quarter turn): output pixel `(x, y)` takes the source pixel `source(x, y, width,
    /// height)`, an `(x, y)` pair.
    pub(crate) fn turn(&mut self, source: fn(usize, usize, usize, usize) -> (usize, usize)) {
        self.turn_onto((self.width, self.height), source);
    }

    /// The image turned by a multiple of 90 degrees onto `output` (width, height: its own
    /// size, or for a quarter turn its sides swapped), which `data` must hold: output
    /// pixel `(x, y)` takes the source pixel `source(x, y, width, height)` (the image's
    /// size before the turn). The image takes the output's size.
    pub(crate) fn turn_onto(
        &mut self,
        (out_w, out_h): (usize, usize),
        source: fn(usize, usize, usize, usize) -> (usize, usize),
    ) {
        let (width, height, area) = (self.width, self.height, self.area());
        let copy = self.data[..3 * area].to_vec();
        for (out, plane) in self.data[..3 * area]
            .chunks_exact_mut(area)
            .zip(copy.chunks_exact(area))
        {
            for y in 0..out_h {
                for x in 0..out_w {
                    let (sx, sy) = source(x, y, width, height);
                    out[y * out_w + x] = plane[sy * width + sx];
                }
            }
        }
        (self.width, self.height) = (out_w, out_h);
    }
}

/// The image as the geometric operators so far have made it: `source`, a region of the
/// decoded image, seen at `w` × `h` pixels, mirrored left–right when `flip`, resized with
/// `filter` (the last resizing operator's); `clip`, the crops' windows, for the targets
/// that follow the pixels ([`Placement`](super::Placement)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    /// Region of the source image.
    pub source: Rect,
    /// Width it is seen at.
    pub w: f64,
    /// Height it is seen at.
    pub h: f64,
    /// Whether it is mirrored.
    pub flip: bool,
    /// Whether the last mirroring came before any resize across (the view at the
    /// source's scale): a mask, read nearest, is then mirrored in source pixels, as
    /// torchvision flips it before it resizes it.
    pub flip_unscaled: bool,
    /// Where a keypoint lies from a box's edge at the same source x, in source pixels:
    /// torchvision.transforms.v2 mirrors a point to `w - 1 - x` (a pixel's index) and a
    /// box's edge to `w - x`, so each mirroring adds its pixel, at the scale it was
    /// seen at, and turns what came before.
    pub point_shift: f64,
    /// The filter of the one resize.
    pub filter: Filter,
    /// The intersection of the windows cropped so far, in source coordinates (`None`
    /// before the first crop): what torchvision's crops clamp boxes to.
    pub clip: Option<Rect>,
    /// The crops' windows when the view was last resized (`clip` then; `None`: the whole
    /// image): torchvision resizes a crop alone, so the resize's filter reads nothing
    /// outside them.
    pub resize_bound: Option<Rect>,
    /// The window of a crop that drops the boxes whose centre it leaves out
    /// (`RandomIoUCrop`), with the crops' windows before it (`clip` then), in source
    /// coordinates.
    pub within: Option<(Rect, Option<Rect>)>,
    /// Where a zoom-out put the image on a larger canvas: the region of the source that
    /// still shows the image, in source coordinates, and the canvas's colour around it
    /// (`RandomZoomOut`; `None` without one).
    pub fill: Option<(Rect, [u8; 3])>,
    /// The canvas the view, once resized, is placed on (`FixedSizeCrop`'s padding).
    pub inset: Option<Inset>,
}

/// A canvas of the output's size that the resized view is placed on, at its top left
/// corner (at its top right once mirrored), the rest `fill`: padding after the resize, as
/// `FixedSizeCrop` pads, or room for images of several sizes in one batch
/// (`RandomShortestSize`). Only mirroring may follow it ([`Geometric::mirrors`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Inset {
    /// The canvas's width.
    pub width: f64,
    /// The canvas's height.
    pub height: f64,
    /// Its colour around the view.
    pub fill: [u8; 3],
    /// Whether the canvas was mirrored after the view was placed on it.
    pub flip: bool,
    /// Whether it is only room for the batch: the image is the view, so a mirror mirrors
    /// the view on it (and the canvas stays), and its size is the image's.
    pub for_batching: bool,
}

impl View {
    /// The whole of a `width` × `height` image.
    pub(crate) fn whole(width: u32, height: u32) -> View {
        View {
            source: Rect::full(width, height),
            w: width as f64,
            h: height as f64,
            flip: false,
            flip_unscaled: false,
            point_shift: 0.0,
            filter: Filter::Bilinear,
            clip: None,
            resize_bound: None,
            within: None,
            fill: None,
            inset: None,
        }
    }

    /// The width and height its region is read at, for an output of `output`: the
    /// output's, or the view's own where it is placed on a canvas ([`Inset`]).
    pub(crate) fn read_size(&self, output: (u32, u32)) -> (u32, u32) {
        match self.inset {
            None => output,
            Some(_) => (
                (self.w.round() as u32).clamp(1, output.0),
                (self.h.round() as u32).clamp(1, output.1),
            ),
        }
    }

    /// Mirrors it left–right (the canvas it was placed on, if any).
    pub(crate) fn mirror(&mut self) {
        if let Some(inset) = self.inset.as_mut().filter(|inset| !inset.for_batching) {
            inset.flip = !inset.flip;
            return;
        }
        self.flip = !self.flip;
        self.flip_unscaled = self.source.w == self.w;
        self.point_shift = -self.point_shift - self.source.w / self.w;
    }

    /// Box `b` (x0, y0, x1, y1 in source pixels) as the view shows it, clamped to the crops'
    /// windows as torchvision's crops clamp it.
    pub(crate) fn seen_box(&self, b: [f64; 4]) -> [f64; 4] {
        map_box(b, self.clip, self.source, (self.w, self.h), self.flip)
    }

    /// Places the view at (`x`, `y`) on a canvas of `w` × `h` (as seen) filled with `fill`
    /// around it: torchvision's `pad`, which moves boxes and clamps them to the canvas
    /// (only a box already past the image reaches past it), as a crop to the canvas does.
    pub(crate) fn pad(&mut self, x: f64, y: f64, w: f64, h: f64, fill: [u8; 3]) {
        // The image shows where the view did before, unless an earlier zoom-out said less.
        let shown = self.fill.map_or(self.source, |(shown, _)| shown);
        self.move_to(-x, -y, w, h);
        self.clip_to_source();
        self.fill = Some((shown, self.fill.map_or(fill, |(_, first)| first)));
    }

    /// Crops to the rectangle at (`x`, `y`), `w` × `h`, of the view as seen.
    pub(crate) fn crop(&mut self, x: f64, y: f64, w: f64, h: f64) {
        self.move_to(x, y, w, h);
        self.clip_to_source();
    }

    /// Narrows the windows boxes are clamped to by the region the view now reads.
    fn clip_to_source(&mut self) {
        self.clip = Some(match self.clip {
            None => self.source,
            Some(clip) => intersection(clip, self.source),
        });
    }

    /// The view of the rectangle at (`x`, `y`), `w` × `h`, of the view as seen (which may
    /// reach past it).
    fn move_to(&mut self, x: f64, y: f64, w: f64, h: f64) {
        let (sx, sy) = (self.source.w / self.w, self.source.h / self.h);
        // Seen mirrored, the left of the view is the right of the source.
        let x = if self.flip { self.w - x - w } else { x };
        self.source = Rect {
            x: self.source.x + x * sx,
            y: self.source.y + y * sy,
            w: w * sx,
            h: h * sy,
        };
        (self.w, self.h) = (w, h);
    }
}

/// Box `b` (x0, y0, x1, y1 in source pixels) clamped to `clip`, then mapped as region
/// `source` seen at `size` (width, height) maps it, mirrored when `flip`.
pub(crate) fn map_box(
    b: [f64; 4],
    clip: Option<Rect>,
    source: Rect,
    (w, h): (f64, f64),
    flip: bool,
) -> [f64; 4] {
    let [x0, y0, x1, y1] = clamp_box(b, clip);
    let (sx, sy) = (w / source.w, h / source.h);
    let (mut a, mut c) = ((x0 - source.x) * sx, (x1 - source.x) * sx);
    if flip {
        (a, c) = (w - c, w - a);
    }
    [a, (y0 - source.y) * sy, c, (y1 - source.y) * sy]
}

/// Box `b` (x0, y0, x1, y1) clamped to `clip`, where there is one.
pub(crate) fn clamp_box(b: [f64; 4], clip: Option<Rect>) -> [f64; 4] {
    let Some(c) = clip else { return b };
    let x = |v: f64| v.max(c.x).min(c.x + c.w);
    let y = |v: f64| v.max(c.y).min(c.y + c.h);
    [x(b[0]), y(b[1]), x(b[2]), y(b[3])]
}

/// The rectangle both `a` and `b` cover (of zero width or height where they do not meet).
pub(crate) fn intersection(a: Rect, b: Rect) -> Rect {
    let (x, y) = (a.x.max(b.x), a.y.max(b.y));
    Rect {
        x,
        y,
        w: ((a.x + a.w).min(b.x + b.w) - x).max(0.0),
        h: ((a.y + a.h).min(b.y + b.h) - y).max(0.0),
    }
}

/// An image operator: a shared handle to one checked [`Operator`] (see [`Handle`]), also
/// made from the text form (`"Resize(256)".parse()`).
pub type Op = Handle<Shared>;

/// An image operator as its handle ([`Op`]) holds it: any of them, shared.
#[derive(Clone)]
pub struct Shared(Arc<dyn Operator>);

impl Operation for Shared {
    const MODALITY: &'static str = "image";

    fn declarations() -> &'static [&'static Declaration] {
        DECLARATIONS
    }

    fn declared(&self) -> &'static Declaration {
        self.0.declaration()
    }

    fn values(&self) -> Vec<Value> {
        self.0.args()
    }
}

impl Op {
    pub(crate) fn new(operator: impl Operator) -> Op {
        Handle(Shared(Arc::new(operator)))
    }

    pub(crate) fn stage(&self) -> Stage<'_> {
        self.0 .0.stage()
    }

    /// Whether it moves pixels away from the geometry's places ([`Operator::moves_pixels`]).
    pub(crate) fn moves_pixels(&self) -> bool {
        self.0 .0.moves_pixels()
    }

    /// Whether the targets follow the pixels it moves ([`Operator::moves_targets`]).
    pub(crate) fn moves_targets(&self) -> bool {
        self.0 .0.moves_targets()
    }

    /// Whether its draws read the sample's boxes ([`Operator::needs_targets`]).
    pub(crate) fn needs_targets(&self) -> bool {
        self.0 .0.needs_targets()
    }

    /// RandomResizedCrop to a square of `size`, torchvision's default scale and ratio.
    ///
    /// # Panics
    ///
    /// When `size` is 0.
    pub fn random_resized_crop(size: u32) -> Op {
        Op::known("RandomResizedCrop", vec![size.into()])
    }

    /// Resize of the shorter side to `side`, keeping the aspect ratio.
    ///
    /// # Panics
    ///
    /// When `side` is 0.
    pub fn resize(side: u32) -> Op {
        Op::known("Resize", vec![side.into()])
    }

    /// CenterCrop to `height` × `width`.
    ///
    /// # Panics
    ///
    /// When a side is 0.
    pub fn center_crop(height: u32, width: u32) -> Op {
        Op::known("CenterCrop", vec![(height, width).into()])
    }

    /// RandomHorizontalFlip with probability `p`.
    ///
    /// # Panics
    ///
    /// When `p` is not in [0, 1].
    pub fn horizontal_flip(p: f64) -> Op {
        Op::known("RandomHorizontalFlip", vec![p.into()])
    }

    /// Normalize with ImageNet's mean and standard deviation.
    pub fn normalize_imagenet() -> Op {
        // As a person writes them (the f32 constants widened would not be).
        Op::normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    }

    /// Normalize with this mean and standard deviation, in [0, 1] units.
    ///
    /// # Panics
    ///
    /// When a standard deviation is not positive or a value not finite.
    pub fn normalize(mean: [f64; 3], std: [f64; 3]) -> Op {
        Op::known("Normalize", vec![mean.into(), std.into()])
    }
}

/// The augmentations drawn by `op` (an automatic augmentation) for `count` samples of
/// `width` × `height`, the generator seeded with `seed`: what the tests compare with the
/// reference's distribution. Not a stable interface.
///
/// # Errors
///
/// [`Error::Config`] when `op` draws no augmentations.
#[doc(hidden)]
pub fn augmentation_draws(
    op: &Op,
    seed: u64,
    count: usize,
    width: usize,
    height: usize,
) -> Result<Vec<Vec<(&'static str, f64)>>> {
    let augmenter = augmenter_of(op)?;
    let mut rng = Rng::new(seed);
    Ok((0..count)
        .map(|_| augmenter.draw_steps(width, height, &mut rng))
        .collect())
}

/// Applies the one augmentation `name` with argument `value` of `op` (an automatic
/// augmentation) to `image`, 3 planes of `width` × `height` bytes: what the tests compare
/// with the reference's kernel. Not a stable interface.
///
/// # Errors
///
/// [`Error::Config`] when `op` draws no augmentations, `name` is not one of them, or the
/// image is not 3 planes of that size.
#[doc(hidden)]
pub fn apply_augmentation(
    op: &Op,
    name: &str,
    value: f64,
    image: &mut [u8],
    width: usize,
    height: usize,
    seed: u64,
) -> Result<()> {
    let augmenter = augmenter_of(op)?;
    if image.len() != 3 * width * height {
        return Err(Error::Config(format!(
            "{} bytes are not 3 planes of {width}x{height}",
            image.len()
        )));
    }
    let mut planes = Planes {
        data: image,
        width,
        height,
    };
    augmenter.apply_step(name, value, &mut planes, &mut Rng::new(seed))
}

fn augmenter_of(op: &Op) -> Result<&dyn Augmenter> {
    op.0 .0
        .augmenter()
        .ok_or_else(|| Error::Config(format!("{} draws no augmentations", op.name())))
}

/// The most steps an operator takes on one sample: augmentations applied (RandAugment's
/// `num_ops`, timm's `n`, AugMix's chains times their depth) or rectangles erased (timm's
/// `max_count`). A sample's work grows with each step, and published recipes take a few
/// (RandAugment 2 or 3, AugMix 3 chains of at most 3, timm's `re_count` 1 to 3), so 64
/// leaves them ample room while one sample's work stays bounded.
pub(crate) const MAX_STEPS: usize = 64;

/// How deep lists of operators may nest (`RandomApply([RandomChoice([...])])`): running,
/// writing and dropping an operator recurses into its lists, so a list nested without
/// bound (a loop in Python wrapping an operator again and again) would overflow the stack.
pub(crate) const MAX_NESTING: usize = 4;

/// Checks that `size` has no side of 0 pixels.
pub(crate) fn not_empty(args: &Args, param: &str, (height, width): (u32, u32)) -> Result<()> {
    if height == 0 || width == 0 {
        return Err(args.error(
            param,
            format!("{height}x{width}: sizes must be at least 1 pixel"),
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod extremes;
#[cfg(test)]
mod tests;
