//! `GaussianBlur`: the image blurred by a Gaussian kernel of a random width.

use super::simd::{cast_u8, dispatched};
use super::{Declaration, Op, Operator, Photometric, Planes, Stage};
use crate::error::Result;
use crate::prep::args::{number, Args, Kind, Param, Value};
use crate::prep::translation::{Conv, Translation};
use crate::rng::Rng;

pub(super) static DECLARATION: Declaration = Declaration {
    name: "GaussianBlur",
    doc: "Blurs the image with a Gaussian kernel whose standard deviation is drawn \
          uniformly from `sigma` for each sample, the borders reflected \
          (torchvision.transforms.v2's `GaussianBlur` on uint8 images: its kernel weights, \
          sampled at `kernel_size` points over ±(size - 1) / (2√2) and normalised, applied \
          in 32-bit floats, one direction then the other, and rounded). As in torchvision, \
          a `kernel_size` pair is (x, y): the kernel's width (along a row) first, then its \
          height; one int is both.",
    params: &[
        Param::required(
            "kernel_size",
            Kind::Square,
            "the kernel's size, odd and positive: one int, or (width, height) as torchvision \
             takes it",
        ),
        Param::with_default(
            "sigma",
            Kind::FloatOrRange,
            "(0.1, 2.0)",
            "the standard deviation: a positive number, or the (min, max) range it is drawn \
             from",
        ),
    ],
    translates: &[Translation::torchvision(
        "GaussianBlur",
        &[
            ("kernel_size", "kernel_size", Conv::Ints),
            ("sigma", "sigma", Conv::Floats),
        ],
    )],
    build,
};

/// The largest kernel side. A sample's blur costs its pixels times the kernel's width plus
/// height, so this bounds a sample's work (99 999 took seconds a sample). Recipes take a
/// tenth of the image's side (SimCLR's 23 for 224 pixels); 1023 covers a tenth of a
/// 10 000-pixel side, and its taps span ±361 of torchvision's units, where the weight
/// `exp(-(x / sigma)²)` is negligible (below 3e-6) for any `sigma` up to 100.
const MAX_KERNEL: u32 = 1023;

fn build(args: &Args) -> Result<Op> {
    let (kx, ky) = args.square("kernel_size")?;
    if kx % 2 == 0 || ky % 2 == 0 {
        return Err(args.error(
            "kernel_size",
            format!("({kx}, {ky}) must be odd and positive"),
        ));
    }
    if kx > MAX_KERNEL || ky > MAX_KERNEL {
        return Err(args.error(
            "kernel_size",
            format!(
                "({kx}, {ky}) is too large: a side is at most {MAX_KERNEL} (each sample's \
                 blur costs its pixels times the kernel's sides); give a smaller kernel_size"
            ),
        ));
    }
    let sigma = match args.value("sigma") {
        Value::Tuple(_) => args.range("sigma")?,
        value => {
            let s = number(value).ok_or_else(|| {
                args.error(
                    "sigma",
                    format!("takes a number or a (min, max) pair, not {value}"),
                )
            })?;
            (s, s)
        }
    };
    // Drawn in 32 bits: each end must be positive and finite as an f32 too.
    if !(0.0 < sigma.0 as f32 && sigma.0 <= sigma.1 && (sigma.1 as f32).is_finite()) {
        return Err(args.error(
            "sigma",
            format!(
                "({}, {}) must be positive, finite in 32 bits, and of the form (min, max)",
                sigma.0, sigma.1
            ),
        ));
    }
    Ok(Op::new(GaussianBlur {
        kernel: (kx as usize, ky as usize),
        sigma,
    }))
}

pub(super) struct GaussianBlur {
    /// (width, height).
    pub(super) kernel: (usize, usize),
    /// The range of the standard deviation.
    pub(super) sigma: (f64, f64),
}

impl GaussianBlur {
    /// One sample's standard deviation, rounded to 32 bits as torch's `uniform_` gives it.
    pub(super) fn draw(&self, rng: &mut Rng) -> f32 {
        rng.uniform(self.sigma.0, self.sigma.1) as f32
    }
}

impl Operator for GaussianBlur {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn args(&self) -> Vec<Value> {
        let (kx, ky) = self.kernel;
        vec![(kx as u32, ky as u32).into(), self.sigma.into()]
    }

    fn stage(&self) -> Stage<'_> {
        Stage::Pixels(self)
    }
}

impl Photometric for GaussianBlur {
    fn apply(&self, image: &mut Planes<'_>, rng: &mut Rng) {
        let sigma = self.draw(rng);
        let kx = kernel1d(self.kernel.0, sigma);
        let ky = kernel1d(self.kernel.1, sigma);
        let (width, height) = (image.width, image.height);
        let mut scratch = Vec::new();
        for plane in image.rgb_mut() {
            blur(plane, width, height, &kx, &ky, &mut scratch);
        }
    }
}

/// torchvision's `_get_gaussian_kernel1d`: `size` points evenly over ±(size - 1) / (2√2),
/// each `exp(-(x / sigma)²)`, normalised to sum 1 (computed here in f64 and rounded to
/// f32; torch's float32 `linspace` and `softmax` differ from these in the last bits).
pub(super) fn kernel1d(size: usize, sigma: f32) -> Vec<f32> {
    let lim = (size as f64 - 1.0) / (2.0 * std::f64::consts::SQRT_2);
    let sigma = f64::from(sigma);
    let weights: Vec<f64> = (0..size)
        .map(|i| {
            let x = if size == 1 {
                0.0
            } else {
                -lim + 2.0 * lim * i as f64 / (size - 1) as f64
            };
            (-(x / sigma).powi(2)).exp()
        })
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| (w / total) as f32).collect()
}

/// The index `i` (which may lie up to a kernel's half beyond either end) of a line of `n`
/// values reflected at its ends without repeating them (torch's `reflect` padding; for
/// lines shorter than the padding, reflected again).
#[inline(always)]
pub(super) fn reflect(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let i = i.rem_euclid(period);
    (if i < n as isize { i } else { period - i }) as usize
}

dispatched! {
    /// One uint8 channel of `height` rows of `width` convolved with `kx` along the rows and
    /// `ky` along the columns (odd lengths, centred), the borders reflected, in 32-bit floats,
    /// rounded half to even as torch's `round_` (`scratch` is reused between calls).
    pub(super) fn blur(
        plane: &mut [u8],
        width: usize,
        height: usize,
        kx: &[f32],
        ky: &[f32],
        scratch: &mut Vec<f32>,
    )
        => blur_body
}

#[inline(always)]
fn blur_body(
    plane: &mut [u8],
    width: usize,
    height: usize,
    kx: &[f32],
    ky: &[f32],
    scratch: &mut Vec<f32>,
) {
    if width == 0 || height == 0 {
        return;
    }
    let (rx, ry) = (kx.len() / 2, ky.len() / 2);
    // Along the rows, into `scratch`: each row padded by reflection, then each tap added
    // to the whole row at once.
    scratch.clear();
    scratch.resize(width * height, 0.0);
    let mut padded = vec![0.0f32; width + 2 * rx];
    for (row, out) in plane
        .chunks_exact(width)
        .zip(scratch.chunks_exact_mut(width))
    {
        // The row itself, then the reflections at its ends.
        for (p, v) in padded[rx..rx + width].iter_mut().zip(row) {
            *p = f32::from(*v);
        }
        for j in (0..rx).chain(rx + width..width + 2 * rx) {
            padded[j] = f32::from(row[reflect(j as isize - rx as isize, width)]);
        }
        for (k, w) in kx.iter().enumerate() {
            for (o, p) in out.iter_mut().zip(&padded[k..k + width]) {
                *o += w * p;
            }
        }
    }
    // Down the columns, each output row the weighted sum of the reflected rows around it.
    let mut acc = vec![0.0f32; width];
    for y in 0..height {
        acc.fill(0.0);
        for (k, w) in ky.iter().enumerate() {
            let source = reflect(y as isize + k as isize - ry as isize, height);
            let row = &scratch[source * width..(source + 1) * width];
            for (a, v) in acc.iter_mut().zip(row) {
                *a += w * v;
            }
        }
        for (out, a) in plane[y * width..(y + 1) * width].iter_mut().zip(&acc) {
            *out = cast_u8(a.round_ties_even());
        }
    }
}
