//! MixUp and CutMix: a batch operator, as timm's `Mixup` defines it.
//!
//! A batch's images are mixed with the batch reversed (sample `i` with sample
//! `len - 1 - i`): blended by a weight λ drawn from Beta(α, α) (MixUp), or a box of the
//! partner pasted in, its area a share 1 − λ of the image (CutMix). The labels become
//! soft: each sample's one-hot label, smoothed, weighted by λ, plus its partner's by
//! 1 − λ. In `Batch` mode one draw serves the whole batch, in `Pair` mode one per pair,
//! in `Elem` mode one per sample, as timm's modes. The draws come from a generator keyed
//! by the seed, rank, epoch and the batch's index, so a batch is mixed the same way
//! whatever the thread count and across resume.
//!
//! The loader mixes a batch as it hands it over; the images must be `float32` for MixUp
//! (CutMix copies values, so `uint8` is fine).
//!
//! A video sample mixes as a whole: MixUp blends every frame by the one λ, and CutMix
//! pastes one box, drawn on the frames' height and width, into every frame and channel
//! of the clip (PyTorchVideo's `CutMix` on `[B, C, T, H, W]`; timm's own, given such a
//! tensor, would slice the frame and height axes).

use crate::error::{Error, Result};
use crate::prep::image::Layout;
use crate::prep::DType;
use crate::rng::Rng;

/// How many mixing draws a batch gets (timm's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MixupMode {
    /// One for the whole batch.
    Batch,
    /// One per pair (`i`, `len - 1 - i`), each mixed with the other.
    Pair,
    /// One per sample.
    Elem,
}

impl std::str::FromStr for MixupMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<MixupMode> {
        match s {
            "batch" => Ok(MixupMode::Batch),
            "pair" => Ok(MixupMode::Pair),
            "elem" => Ok(MixupMode::Elem),
            _ => Err(Error::Config(format!(
                "Mixup: mode {s:?}: use \"batch\", \"pair\" or \"elem\""
            ))),
        }
    }
}

/// timm's `Mixup` arguments, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MixupArgs {
    /// MixUp's Beta(α, α); 0 turns MixUp off.
    pub mixup_alpha: f64,
    /// CutMix's Beta(α, α); 0 turns CutMix off.
    pub cutmix_alpha: f64,
    /// CutMix's box as a range of its sides' share of the image's, instead of from λ.
    pub cutmix_minmax: Option<(f64, f64)>,
    /// Probability of mixing a batch (or pair, or sample).
    pub prob: f64,
    /// Probability of CutMix rather than MixUp when both are on.
    pub switch_prob: f64,
    /// How many draws a batch gets.
    pub mode: MixupMode,
    /// Whether λ is corrected to the box's area after clipping (CutMix).
    pub correct_lam: bool,
    /// Label smoothing of the soft labels.
    pub label_smoothing: f64,
    /// Classes (the soft labels' width), 1 to [`MAX_CLASSES`].
    pub num_classes: usize,
}

impl Default for MixupArgs {
    fn default() -> MixupArgs {
        MixupArgs {
            mixup_alpha: 1.0,
            cutmix_alpha: 0.0,
            cutmix_minmax: None,
            prob: 1.0,
            switch_prob: 0.5,
            mode: MixupMode::Batch,
            correct_lam: true,
            label_smoothing: 0.1,
            num_classes: 1000,
        }
    }
}

/// The most classes the soft labels have. Each batch carries a row of `num_classes`
/// floats a sample, so this bounds a batch's labels (64 MiB a sample) while leaving the
/// largest label sets trained with dense targets (ImageNet-21k's 21 841 classes, face
/// identities in the millions) room to spare.
pub const MAX_CLASSES: usize = 1 << 24;

/// MixUp and CutMix over a loader's batches of images or video clips.
#[derive(Debug, Clone, PartialEq)]
pub struct Mixup {
    args: MixupArgs,
    layout: Layout,
}

/// One draw: λ, and CutMix's box (else MixUp).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Draw {
    lam: f64,
    cutmix: Option<Box2>,
}

/// No mixing.
const UNMIXED: Draw = Draw {
    lam: 1.0,
    cutmix: None,
};

/// A box of an image: rows `top..bottom`, columns `left..right`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Box2 {
    top: usize,
    bottom: usize,
    left: usize,
    right: usize,
}

impl Mixup {
    /// Checks `args` for images (or the frames of clips) laid out as `layout`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the argument out of its bounds.
    pub fn new(args: MixupArgs, layout: Layout) -> Result<Mixup> {
        let bad = |what: String| Err(Error::Config(format!("Mixup: {what}")));
        for (name, v) in [
            ("mixup_alpha", args.mixup_alpha),
            ("cutmix_alpha", args.cutmix_alpha),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(format!("{name} {v} must be 0 (off) or positive"));
            }
        }
        if args.mixup_alpha == 0.0 && args.cutmix_alpha == 0.0 {
            return bad("mixup_alpha and cutmix_alpha are both 0: nothing to do".into());
        }
        for (name, v) in [
            ("prob", args.prob),
            ("switch_prob", args.switch_prob),
            ("label_smoothing", args.label_smoothing),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} {v} is not in [0, 1]"));
            }
        }
        if let Some((lo, hi)) = args.cutmix_minmax {
            if !(0.0 < lo && lo <= hi && hi <= 1.0) {
                return bad(format!(
                    "cutmix_minmax ({lo}, {hi}) must satisfy 0 < lo <= hi <= 1"
                ));
            }
        }
        if !(1..=MAX_CLASSES).contains(&args.num_classes) {
            return bad(format!(
                "num_classes {} must be at least 1 and at most 2^24 (a soft-label row of \
                 2^24 classes is 64 MiB a sample); give the dataset's number of classes",
                args.num_classes
            ));
        }
        Ok(Mixup { args, layout })
    }

    /// The soft labels' width.
    pub fn num_classes(&self) -> usize {
        self.args.num_classes
    }

    /// Whether it can mix samples of `dtype`.
    ///
    /// # Errors
    ///
    /// MixUp on `uint8` images.
    pub fn check(&self, dtype: DType) -> Result<()> {
        if self.args.mixup_alpha > 0.0 && dtype == DType::U8 {
            return Err(Error::Config(
                "Mixup: MixUp blends images, which needs dtype=\"float32\" (CutMix alone, \
                 mixup_alpha=0, works on uint8)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Mixes `len` samples of `shape` (`[3, h, w]` or `[h, w, 3]`, as the layout, or a
    /// clip's frames of that shape after leading axes: `[t, 3, h, w]`, `[3, t, h, w]`,
    /// `[t, h, w, 3]`) in `data` and returns their soft labels, `len` rows of
    /// [`num_classes`](Self::num_classes), drawing from `rng`.
    pub fn apply(
        &self,
        data: &mut [u8],
        shape: &[usize],
        dtype: DType,
        labels: &[i64],
        rng: &mut Rng,
    ) -> Vec<f32> {
        let slot = data.len() / labels.len().max(1);
        self.apply_within(data, (slot, 0..slot), shape, dtype, labels, rng)
    }

    /// [`Mixup::apply`] on the images that lie at `image` within each sample's `slot` bytes
    /// of `data` (a record's image field: the rest of each slot is left as it is).
    pub fn apply_within(
        &self,
        data: &mut [u8],
        (slot, image): (usize, std::ops::Range<usize>),
        shape: &[usize],
        dtype: DType,
        labels: &[i64],
        rng: &mut Rng,
    ) -> Vec<f32> {
        let len = labels.len();
        let planes = Planes::of(shape, self.layout);
        let draws = self.draws(len, (planes.height, planes.width), rng);
        let mut lams = vec![1.0; len];
        // Each pair (i, len - 1 - i) mixes each with the other as it was (this runs on the
        // consumer's thread).
        let mut scratch = Vec::new();
        for i in 0..len / 2 {
            let j = len - 1 - i;
            let (head, tail) = data.split_at_mut(j * slot);
            let a = &mut head[i * slot..][image.clone()];
            let b = &mut tail[image.clone()];
            let draws = [draws[i], draws[j]];
            mix_pair([a, b], draws, planes, dtype, &mut scratch);
            (lams[i], lams[j]) = (draws[0].lam, draws[1].lam);
        }
        self.targets(labels, &lams)
    }

    /// One draw for each sample (the same for a batch, or a pair, as the mode says).
    fn draws(&self, len: usize, size: (usize, usize), rng: &mut Rng) -> Vec<Draw> {
        match self.args.mode {
            MixupMode::Batch => vec![self.draw(size, rng); len],
            MixupMode::Elem => (0..len).map(|_| self.draw(size, rng)).collect(),
            MixupMode::Pair => {
                let mut draws = vec![UNMIXED; len];
                for i in 0..len / 2 {
                    let draw = self.draw(size, rng);
                    (draws[i], draws[len - 1 - i]) = (draw, draw);
                }
                draws
            }
        }
    }

    /// timm's `_params_per_batch`: λ and the kind, or λ = 1 (no mixing); for CutMix,
    /// the box in an image of `(height, width)` and λ as its area corrects it.
    fn draw(&self, (height, width): (usize, usize), rng: &mut Rng) -> Draw {
        let a = &self.args;
        if rng.next_f64() >= a.prob {
            return UNMIXED;
        }
        let cutmix = match (a.mixup_alpha > 0.0, a.cutmix_alpha > 0.0) {
            (true, true) => rng.next_f64() < a.switch_prob,
            (false, true) => true,
            _ => false,
        };
        let alpha = if cutmix {
            a.cutmix_alpha
        } else {
            a.mixup_alpha
        };
        let lam = rng.dirichlet(alpha, 2)[0];
        if !cutmix {
            return Draw { lam, cutmix: None };
        }
        let (b, lam) = self.cutmix_box(height, width, lam, rng);
        Draw {
            lam,
            cutmix: Some(b),
        }
    }

    /// timm's `cutmix_bbox_and_lam`: the box, and λ as its area corrects it.
    fn cutmix_box(&self, height: usize, width: usize, lam: f64, rng: &mut Rng) -> (Box2, f64) {
        let (cut_h, cut_w) = match self.args.cutmix_minmax {
            Some((lo, hi)) => (
                rng.uniform(height as f64 * lo, height as f64 * hi) as usize,
                rng.uniform(width as f64 * lo, width as f64 * hi) as usize,
            ),
            None => {
                let ratio = (1.0 - lam).sqrt();
                (
                    (height as f64 * ratio) as usize,
                    (width as f64 * ratio) as usize,
                )
            }
        };
        let cy = rng.below(height as u64) as usize;
        let cx = rng.below(width as u64) as usize;
        let b = Box2 {
            top: cy.saturating_sub(cut_h / 2),
            bottom: (cy + cut_h / 2).min(height),
            left: cx.saturating_sub(cut_w / 2),
            right: (cx + cut_w / 2).min(width),
        };
        let lam = if self.args.correct_lam || self.args.cutmix_minmax.is_some() {
            let area = (b.bottom - b.top) * (b.right - b.left);
            1.0 - area as f64 / (height * width) as f64
        } else {
            lam
        };
        (b, lam)
    }

    /// timm's `mixup_target`: each row its label's smoothed one-hot times λ, plus its
    /// partner's times 1 − λ.
    fn targets(&self, labels: &[i64], lams: &[f64]) -> Vec<f32> {
        let classes = self.args.num_classes;
        let off = self.args.label_smoothing / classes as f64;
        let on = 1.0 - self.args.label_smoothing + off;
        let len = labels.len();
        let mut out = vec![0.0f64; len * classes];
        for (i, (&label, &lam)) in labels.iter().zip(lams).enumerate() {
            let row = &mut out[i * classes..][..classes];
            row.fill(off);
            let partner = labels[len - 1 - i];
            for (class, weight) in [(label, lam), (partner, 1.0 - lam)] {
                if let Some(v) = usize::try_from(class).ok().and_then(|c| row.get_mut(c)) {
                    *v += (on - off) * weight;
                }
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }
}

/// Where a sample's pixels lie: `count` planes of `height` × `width` pixels of `per_pixel`
/// values each (an image's three channels, or a clip's frames' channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Planes {
    count: usize,
    height: usize,
    width: usize,
    per_pixel: usize,
}

impl Planes {
    /// The planes of a sample of `shape` whose last axes are a frame's, as `layout`
    /// orders them: `[.., h, w]` (CHW), `[.., h, w, c]` (HWC).
    fn of(shape: &[usize], layout: Layout) -> Planes {
        let product = |axes: &[usize]| axes.iter().product::<usize>();
        match (layout, shape) {
            (Layout::Chw, [lead @ .., height, width]) => Planes {
                count: product(lead),
                height: *height,
                width: *width,
                per_pixel: 1,
            },
            (Layout::Hwc, [lead @ .., height, width, channels]) => Planes {
                count: product(lead),
                height: *height,
                width: *width,
                per_pixel: *channels,
            },
            _ => unreachable!("an image tensor has at least three axes: {shape:?}"),
        }
    }

    /// The byte ranges of box `b`'s rows in every plane.
    fn runs(self, b: Box2, dtype: DType) -> impl Iterator<Item = std::ops::Range<usize>> {
        let Planes {
            count,
            height,
            width,
            per_pixel,
        } = self;
        let pixel = dtype.size() * per_pixel;
        (0..count).flat_map(move |plane| {
            (b.top..b.bottom).map(move |y| {
                let row = (plane * height + y) * width;
                (row + b.left) * pixel..(row + b.right) * pixel
            })
        })
    }
}

/// Mixes the pair `a` and `b`, each with the other as it was, as their draws say: in
/// one pass where both blend or both paste the same box (every pair but in `Elem`
/// mode), else through a copy of `a` in `scratch`.
fn mix_pair(
    [a, b]: [&mut [u8]; 2],
    [da, db]: [Draw; 2],
    planes: Planes,
    dtype: DType,
    scratch: &mut Vec<u8>,
) {
    match (da.cutmix, db.cutmix) {
        (None, None) if da.lam != 1.0 && db.lam != 1.0 => {
            blend_pair(a, b, da.lam as f32, db.lam as f32);
        }
        (Some(x), Some(y)) if x == y => swap(a, b, x, planes, dtype),
        _ => {
            scratch.clear();
            scratch.extend_from_slice(a);
            mix_into(a, b, da, planes, dtype);
            mix_into(b, scratch, db, planes, dtype);
        }
    }
}

/// Mixes the sample `to` with its partner `from` as `draw` says (nothing where λ is 1).
fn mix_into(to: &mut [u8], from: &[u8], draw: Draw, planes: Planes, dtype: DType) {
    if draw.lam == 1.0 {
        return;
    }
    match draw.cutmix {
        Some(bbox) => {
            for run in planes.runs(bbox, dtype) {
                to[run.clone()].copy_from_slice(&from[run]);
            }
        }
        None => blend(to, from, draw.lam as f32),
    }
}

/// Swaps box `bbox` of `a` and `b` (CutMix of a pair with one box).
fn swap(a: &mut [u8], b: &mut [u8], bbox: Box2, planes: Planes, dtype: DType) {
    for run in planes.runs(bbox, dtype) {
        a[run.clone()].swap_with_slice(&mut b[run]);
    }
}

/// `a, b = a * la + b * (1 - la), b * lb + a * (1 - lb)`, over f32 values, in one pass.
fn blend_pair(a: &mut [u8], b: &mut [u8], la: f32, lb: f32) {
    let whole = |s: &[u8]| s.as_ptr().align_offset(4) == 0 && s.len().is_multiple_of(4);
    if whole(a) && whole(b) {
        // As floats, which the compiler vectorises (through bytes it did not).
        // SAFETY: every bit pattern is a valid f32; aligned and a whole number of values,
        // each slice is all middle, nothing before or after.
        let (_, a, _) = unsafe { a.align_to_mut::<f32>() };
        // SAFETY: as above.
        let (_, b, _) = unsafe { b.align_to_mut::<f32>() };
        for (u, v) in a.iter_mut().zip(b.iter_mut()) {
            (*u, *v) = (*u * la + *v * (1.0 - la), *v * lb + *u * (1.0 - lb));
        }
        return;
    }
    for (x, y) in a.chunks_exact_mut(4).zip(b.chunks_exact_mut(4)) {
        let u = f32::from_ne_bytes((&*x).try_into().expect("4 bytes"));
        let v = f32::from_ne_bytes((&*y).try_into().expect("4 bytes"));
        x.copy_from_slice(&(u * la + v * (1.0 - la)).to_ne_bytes());
        y.copy_from_slice(&(v * lb + u * (1.0 - lb)).to_ne_bytes());
    }
}

/// `to = to * lam + from * (1 - lam)`, over f32 values.
fn blend(to: &mut [u8], from: &[u8], lam: f32) {
    for (t, f) in to.chunks_exact_mut(4).zip(from.chunks_exact(4)) {
        let a = f32::from_ne_bytes(t.try_into().expect("4 bytes"));
        let b = f32::from_ne_bytes(f.try_into().expect("4 bytes"));
        t.copy_from_slice(&(a * lam + b * (1.0 - lam)).to_ne_bytes());
    }
}

#[cfg(test)]
mod tests;
