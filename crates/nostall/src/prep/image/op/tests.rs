use super::*;
use crate::prep::args::Kind;

#[test]
fn every_declaration_is_complete_and_its_defaults_read() {
    let mut names = std::collections::HashSet::new();
    for declaration in DECLARATIONS {
        assert!(names.insert(declaration.name), "{} twice", declaration.name);
        assert!(!declaration.doc.is_empty(), "{}", declaration.name);
        for param in declaration.params {
            assert!(!param.doc.is_empty(), "{}.{}", declaration.name, param.name);
            if let Some(default) = param.default {
                crate::prep::notation::read_value(default)
                    .unwrap_or_else(|e| panic!("{}.{}: {e}", declaration.name, param.name));
            }
        }
        // Made with its required parameters as small as they go (a later int one more
        // than an earlier: a range's ends), it writes itself as a call that reads back to
        // itself.
        let required: Vec<Value> = declaration
            .params
            .iter()
            .filter(|p| p.default.is_none())
            .enumerate()
            .map(|(i, p)| match (p.kind, example(p.kind)) {
                (Kind::Int, Value::Int(v)) => Value::Int(v + i as i64),
                (_, value) => value,
            })
            .collect();
        let op = declaration.call(required, Vec::new()).unwrap();
        let again: Op = op.to_string().parse().unwrap();
        assert_eq!(again, op, "{op}");
        assert_eq!(again.to_string(), op.to_string());
    }
}

#[test]
fn every_translation_reads_parameters_its_operator_has_once_each() {
    let mut transforms = std::collections::HashSet::new();
    for declaration in DECLARATIONS {
        for translation in declaration.translates {
            let at = format!("{}'s {}", declaration.name, translation.name);
            // Python looks a transform up by its library and class: one operator each.
            assert!(
                transforms.insert((translation.library, translation.name)),
                "{at} twice"
            );
            if translation.translator.is_some() {
                assert!(translation.args.is_empty(), "{at}: a translator and args");
                continue;
            }
            let mut read = std::collections::HashSet::new();
            for (param, attribute, _) in translation.args {
                assert!(
                    declaration.params.iter().any(|p| p.name == *param),
                    "{at}: no parameter {param}"
                );
                assert!(read.insert(*param), "{at}: {param} twice");
                assert!(!attribute.is_empty(), "{at}: {param} from no attribute");
            }
            for param in declaration.params.iter().filter(|p| p.default.is_none()) {
                assert!(read.contains(param.name), "{at}: {} unread", param.name);
            }
        }
    }
}

#[test]
fn random_crop_stays_inside_and_follows_ranges() {
    use random_resized_crop::random_crop;
    let mut rng = Rng::new(1);
    for _ in 0..2000 {
        let (x, y, w, h) = random_crop(500, 375, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut rng);
        assert!(x >= 0.0 && y >= 0.0 && x + w <= 500.0 && y + h <= 375.0);
        let area = w * h / (500.0 * 375.0);
        assert!((0.07..=1.0).contains(&area), "area {area}");
    }
    // An image too elongated for any try falls back to the centre crop.
    let (x, y, w, h) = random_crop(1000, 10, (0.9, 1.0), (0.75, 4.0 / 3.0), &mut Rng::new(2));
    assert_eq!((w, h), (13.0, 10.0));
    assert_eq!((x, y), (493.0, 0.0));
}

#[test]
fn random_crop_places_are_uniform_as_torchvisions_randint_and_small_images_are_centred() {
    let op: Op = "RandomCrop((10, 20))".parse().unwrap();
    let Stage::Geometry(crop) = op.stage() else {
        panic!("a geometric operator")
    };
    // torchvision: top = randint(0, 30 - 10 + 1), left = randint(0, 50 - 20 + 1).
    let (draws, mut tops, mut lefts) = (42_000, [0u32; 21], [0u32; 31]);
    let mut rng = Rng::new(3);
    for _ in 0..draws {
        let mut view = View::whole(50, 30);
        crop.plan(&mut view, &mut rng);
        assert_eq!((view.w, view.h), (20.0, 10.0));
        tops[view.source.y as usize] += 1;
        lefts[view.source.x as usize] += 1;
    }
    // Chi-square against uniform: the bounds are the 1e-6 quantiles for 20 and 30
    // degrees of freedom.
    let chi2 = |counts: &[u32]| {
        let expected = draws as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum::<f64>()
    };
    assert!(chi2(&tops) < 57.0, "tops {tops:?}");
    assert!(chi2(&lefts) < 75.0, "lefts {lefts:?}");
    // Smaller than the window: its centre, as CenterCrop takes it.
    let mut view = View::whole(16, 8);
    crop.plan(&mut view, &mut rng);
    assert_eq!((view.source.x, view.source.y), (-2.0, -1.0));
}

#[test]
fn a_crop_after_a_flip_crops_the_mirrored_image() {
    let mut view = View::whole(100, 50);
    view.flip = true;
    // The left 10 columns of the mirrored image are the right 10 of the source.
    view.crop(0.0, 5.0, 10.0, 20.0);
    assert_eq!(
        (view.source.x, view.source.y, view.source.w, view.source.h),
        (90.0, 5.0, 10.0, 20.0)
    );
    assert!(view.flip);
}

/// Every value of every channel once, in a 16 × 16 image.
fn ramp() -> Vec<u8> {
    (0..3 * 256).map(|i| (i * 7 % 256) as u8).collect()
}

fn planes(data: &mut [u8]) -> Planes<'_> {
    Planes {
        data,
        width: 16,
        height: 16,
    }
}

#[test]
fn pixel_kernels_match_torchvision_definitions_on_every_value() {
    let original = ramp();
    let mut data = original.clone();
    solarize::solarize(&mut data, 127.5);
    for (v, s) in original.iter().zip(&data) {
        assert_eq!(*s, if *v >= 128 { 255 - v } else { *v });
    }
    for bits in 0..=8u8 {
        let mut data = original.clone();
        posterize::posterize(&mut data, bits);
        // torchvision: image & (((1 << bits) - 1) << (8 - bits)), whole when bits is 8.
        let mask = if bits == 8 {
            0xFF
        } else {
            (((1u32 << bits) - 1) << (8 - bits)) as u8
        };
        for (v, p) in original.iter().zip(&data) {
            assert_eq!(*p, v & mask, "bits {bits}");
        }
    }
    let mut data = original.clone();
    grayscale::to_gray(&mut planes(&mut data));
    for i in 0..256 {
        let (r, g, b) = (original[i], original[256 + i], original[512 + i]);
        // torch's `add_(…, alpha=…)`: each later product fused into the sum.
        let (r, g, b) = (f32::from(r), f32::from(g), f32::from(b));
        let want = b.mul_add(0.114, g.mul_add(0.587, r * 0.2989)) as u8;
        assert_eq!([data[i], data[256 + i], data[512 + i]], [want; 3]);
    }
}

#[test]
fn a_probability_decides_each_sample_by_its_own_draw() {
    let invert: Op = "RandomInvert(p=0.25)".parse().unwrap();
    let Stage::Pixels(kernel) = invert.stage() else {
        panic!("RandomInvert is on pixels");
    };
    let mut inverted = 0;
    for seed in 0..4000 {
        let mut data = ramp();
        kernel.apply(&mut planes(&mut data), &mut Rng::new(seed));
        let mut again = ramp();
        kernel.apply(&mut planes(&mut again), &mut Rng::new(seed));
        assert_eq!(data, again, "seed {seed}");
        if data != ramp() {
            assert_eq!(data, ramp().iter().map(|v| 255 - v).collect::<Vec<_>>());
            inverted += 1;
        }
    }
    // 1000 expected; 5 standard deviations (27) either side.
    assert!((865..=1135).contains(&inverted), "{inverted} of 4000");
}

// ColorJitter, RandomAutocontrast, RandomEqualize, RandomAdjustSharpness, GaussianBlur.

/// A `width` × `height` image of values drawn from `seed`.
fn noise(width: usize, height: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..3 * width * height)
        .map(|_| rng.below(256) as u8)
        .collect()
}

fn sized(data: &mut [u8], width: usize, height: usize) -> Planes<'_> {
    Planes {
        data,
        width,
        height,
    }
}

/// The Kolmogorov–Smirnov statistic of `samples` against the uniform distribution on
/// [`lo`, `hi`].
fn ks_uniform(mut samples: Vec<f64>, lo: f64, hi: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let cdf = ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
            (cdf - i as f64 / n).max((i + 1) as f64 / n - cdf)
        })
        .fold(0.0, f64::max)
}

/// Over 10 000 draws, the statistic stays below 0.0195 but for odds of 1 in 1000 (its
/// critical value at that level is 1.949 / √n); the draws are seeded, so a pass stays one.
const KS_BOUND: f64 = 0.0195;

/// The ops' kernel on pixels.
fn pixels(op: &Op) -> &dyn Photometric {
    match op.stage() {
        Stage::Pixels(kernel) => kernel,
        _ => panic!("{op} is not on pixels"),
    }
}

/// Applying `op` with each of 200 seeds gives the same image twice, and not always the
/// same image.
fn same_seed_same_output(op: &str) {
    let op: Op = op.parse().unwrap();
    let original = noise(24, 16, 5);
    let mut outputs = std::collections::HashSet::new();
    for seed in 0..200 {
        let mut once = original.clone();
        pixels(&op).apply(&mut sized(&mut once, 24, 16), &mut Rng::new(seed));
        let mut twice = original.clone();
        pixels(&op).apply(&mut sized(&mut twice, 24, 16), &mut Rng::new(seed));
        assert_eq!(once, twice, "{op}, seed {seed}");
        outputs.insert(once);
    }
    assert!(outputs.len() > 1, "{op}: every seed alike");
}

/// The grayscale `_blend` takes: torchvision's sum with each `add_(…, alpha)` a fused
/// multiply-add, floored.
fn torch_gray(r: u8, g: u8, b: u8) -> f32 {
    let l = r as f32 * 0.2989;
    let l = (g as f32).mul_add(0.587, l);
    (b as f32).mul_add(0.114, l).floor()
}

/// torchvision's `_blend(v, other, ratio)` on uint8, by its definition.
fn torch_blend(v: u8, other: f32, ratio: f32) -> u8 {
    let alpha = (1.0 - ratio as f64) as f32;
    other.mul_add(alpha, v as f32 * ratio).clamp(0.0, 255.0) as u8
}

#[test]
fn color_jitter_kernels_match_torchvision_definitions() {
    // 64 × 64: rounding that differs shows on some values of a few thousand.
    const N: usize = 64 * 64;
    let original = noise(64, 64, 1);
    let px = |data: &[u8], i: usize| [data[i], data[N + i], data[2 * N + i]];
    let grays: Vec<f32> = (0..N)
        .map(|i| {
            let [r, g, b] = px(&original, i);
            torch_gray(r, g, b)
        })
        .collect();
    let mean = (grays.iter().map(|g| *g as f64).sum::<f64>() / N as f64) as f32;
    for factor in [0.0f32, 0.3, 0.77, 1.0, 1.3, 1.77, 2.5] {
        let mut data = original.clone();
        color_jitter::brightness(&mut data, factor);
        for (v, got) in original.iter().zip(&data) {
            assert_eq!(
                *got,
                (*v as f32 * factor).min(255.0) as u8,
                "brightness {factor}"
            );
        }
        let mut data = original.clone();
        color_jitter::saturation(&mut sized(&mut data, 64, 64), f64::from(factor));
        for (i, gray) in grays.iter().enumerate() {
            let want = px(&original, i).map(|v| torch_blend(v, *gray, factor));
            assert_eq!(px(&data, i), want, "saturation {factor}");
        }
        let mut data = original.clone();
        color_jitter::contrast(&mut sized(&mut data, 64, 64), f64::from(factor));
        for (v, got) in original.iter().zip(&data) {
            assert_eq!(*got, torch_blend(*v, mean, factor), "contrast {factor}");
        }
    }
    // The fused grayscale differs from the unfused one on 21 of the 2^24 colours, by a
    // level: (20, 152, 7) is one, and the kernels take torch's.
    assert_eq!(grayscale::luma::<false>(20, 152, 7), 96.0);
    // The copies with FMA fuse by the instruction (here `mul_add`, the library's fused
    // multiply-add), the others through f64: the same value, on every 97th colour.
    for colour in (0..1u32 << 24).step_by(97) {
        let [r, g, b, _] = colour.to_le_bytes();
        assert_eq!(
            grayscale::luma::<true>(r, g, b),
            grayscale::luma::<false>(r, g, b),
            "{r} {g} {b}"
        );
    }
    assert_eq!((20.0f32 * 0.2989 + 152.0 * 0.587 + 7.0 * 0.114) as u8, 95);
    // Factor 1 leaves every image as it was, 0 makes saturation the grayscale.
    for kernel in [color_jitter::contrast, color_jitter::saturation] {
        let mut data = original.clone();
        kernel(&mut sized(&mut data, 64, 64), 1.0);
        assert_eq!(data, original);
    }
    let mut data = original.clone();
    color_jitter::saturation(&mut sized(&mut data, 64, 64), 0.0);
    for (i, gray) in grays.iter().enumerate() {
        assert_eq!(px(&data, i), [*gray as u8; 3]);
    }
}

/// Hue turned by `factor` in 64-bit floats, the textbook way (Python's `colorsys`).
fn hue_in_f64(rgb: [u8; 3], factor: f64) -> [f64; 3] {
    let [r, g, b] = rgb.map(|v| v as f64 / 255.0);
    let (max, min) = (r.max(g).max(b), r.min(g).min(b));
    if max == min {
        return [r, g, b];
    }
    let s = (max - min) / max;
    let (rc, gc, bc) = (
        (max - r) / (max - min),
        (max - g) / (max - min),
        (max - b) / (max - min),
    );
    let h = if r == max {
        bc - gc
    } else if g == max {
        2.0 + rc - bc
    } else {
        4.0 + gc - rc
    };
    let h = ((h / 6.0).rem_euclid(1.0) + factor).rem_euclid(1.0);
    let (i, f) = ((h * 6.0).floor(), h * 6.0 - (h * 6.0).floor());
    let (p, q, t) = (
        max * (1.0 - s),
        max * (1.0 - s * f),
        max * (1.0 - s * (1.0 - f)),
    );
    match i as i32 % 6 {
        0 => [max, t, p],
        1 => [q, max, p],
        2 => [p, max, t],
        3 => [p, q, max],
        4 => [t, p, max],
        _ => [max, p, q],
    }
}

#[test]
fn hue_turns_as_hsv_does() {
    let original = noise(16, 16, 2);
    for factor in [-0.5f32, -0.21, 0.0, 0.1, 1.0 / 3.0, 0.5] {
        let mut data = original.clone();
        color_jitter::hue(&mut planes(&mut data), factor);
        for i in 0..256 {
            let rgb = [original[i], original[256 + i], original[512 + i]];
            let got = [data[i], data[256 + i], data[512 + i]];
            let want = hue_in_f64(rgb, factor as f64).map(|x| x * 255.999);
            for (g, w) in got.iter().zip(want) {
                // torch's truncation of x · 255.999, in 32-bit floats: a level at most
                // from the exact one, where it falls on an integer.
                assert!(
                    (*g as f64 - w.floor()).abs() <= 1.0,
                    "{rgb:?} {factor}: {got:?}"
                );
            }
            if factor == 0.0 {
                assert_eq!(got, rgb, "no turn");
            }
        }
    }
    assert_eq!(color_jitter::rotate_hue(255, 0, 0, 0.5), [0, 255, 255]);
    assert_eq!(color_jitter::rotate_hue(255, 0, 0, 1.0 / 3.0), [0, 255, 0]);
    assert_eq!(color_jitter::rotate_hue(90, 90, 90, 0.25), [90, 90, 90]);
}

#[test]
fn color_jitter_draws_an_order_and_uniform_factors() {
    let jitter = color_jitter::ColorJitter {
        ranges: [
            Some((0.5, 1.5)),
            Some((0.6, 1.4)),
            Some((0.0, 2.0)),
            Some((-0.3, 0.3)),
        ],
    };
    let mut orders = std::collections::HashMap::new();
    let mut factors = vec![Vec::new(); 4];
    for seed in 0..10_000 {
        let (order, drawn) = jitter.draw(&mut Rng::new(seed));
        *orders.entry(order).or_insert(0u32) += 1;
        for (i, f) in drawn.iter().enumerate() {
            factors[i].push(f.unwrap() as f64);
        }
    }
    for (i, samples) in factors.into_iter().enumerate() {
        let (lo, hi) = jitter.ranges[i].unwrap();
        assert!(samples.iter().all(|f| (lo..=hi).contains(f)));
        let d = ks_uniform(samples, lo, hi);
        assert!(d < KS_BOUND, "factor {i}: KS {d}");
    }
    // The 24 orders, each 10 000 / 24 times expected: chi-square with 23 degrees of
    // freedom, below 49.7 but for odds of 1 in 1000.
    assert_eq!(orders.len(), 24);
    let expected = 10_000.0 / 24.0;
    let chi2: f64 = orders
        .values()
        .map(|&n| (n as f64 - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 49.7, "chi-square {chi2}: {orders:?}");
    // Those off draw nothing.
    let off = color_jitter::ColorJitter {
        ranges: [None, Some((0.5, 0.5)), None, None],
    };
    let (_, drawn) = off.draw(&mut Rng::new(3));
    assert_eq!(drawn, [None, Some(0.5), None, None]);
    same_seed_same_output("ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)");
}

#[test]
fn color_jitter_reads_its_ranges_as_torchvision() {
    let op: Op = "ColorJitter(brightness=0.4, contrast=(0.5, 2), saturation=1.5, hue=0.25)"
        .parse()
        .unwrap();
    assert_eq!(op.arg("brightness"), Some((0.6, 1.4).into()));
    assert_eq!(op.arg("contrast"), Some((0.5, 2.0).into()));
    assert_eq!(op.arg("saturation"), Some((0.0, 2.5).into()));
    assert_eq!(op.arg("hue"), Some((-0.25, 0.25).into()));
    // What changes nothing is off.
    let op: Op = "ColorJitter(brightness=0, contrast=(1, 1), hue=(0, 0))"
        .parse()
        .unwrap();
    assert!(op.args().iter().all(|(_, v)| *v == Value::None), "{op}");
    for (bad, says) in [
        (
            "ColorJitter(brightness=-0.1)",
            "ColorJitter: brightness -0.1",
        ),
        (
            "ColorJitter(contrast=(1.5, 0.5))",
            "ColorJitter: contrast (1.5, 0.5)",
        ),
        (
            "ColorJitter(saturation=(-1, 1))",
            "ColorJitter: saturation (-1, 1)",
        ),
        ("ColorJitter(hue=0.6)", "ColorJitter: hue (-0.6, 0.6)"),
        (
            "ColorJitter(hue=(-0.6, 0.2))",
            "ColorJitter: hue (-0.6, 0.2)",
        ),
        ("ColorJitter(hue='a')", "ColorJitter: hue takes"),
    ] {
        let error = bad.parse::<Op>().unwrap_err();
        assert!(
            matches!(&error, crate::error::Error::Config(m) if m.contains(says)),
            "{bad}: {error}"
        );
    }
}

/// `op` with probability `p` changes the share `p` of 4000 samples (5 standard deviations
/// either side), on an image of values 40 to 199 that each of them changes (24 × 16:
/// equalizing needs 255 pixels below a channel's highest value).
fn changes_with_probability(op: &str, p: f64) {
    let op: Op = op.parse().unwrap();
    let original: Vec<u8> = noise(24, 16, 9).iter().map(|v| 40 + v % 160).collect();
    let mut changed = 0;
    for seed in 0..4000 {
        let mut data = original.clone();
        pixels(&op).apply(&mut sized(&mut data, 24, 16), &mut Rng::new(seed));
        changed += usize::from(data != original);
    }
    let (mean, sd) = (4000.0 * p, (4000.0 * p * (1.0 - p)).sqrt());
    assert!(
        (changed as f64 - mean).abs() <= 5.0 * sd,
        "{op}: {changed} of 4000"
    );
}

#[test]
fn autocontrast_stretches_each_channel_as_torchvision() {
    let original: Vec<u8> = noise(16, 16, 3).iter().map(|v| 30 + v % 150).collect();
    for channel in original.chunks(256) {
        let mut data = channel.to_vec();
        autocontrast::autocontrast(&mut data);
        let (min, max) = (
            *channel.iter().min().unwrap(),
            *channel.iter().max().unwrap(),
        );
        assert_eq!(*data.iter().min().unwrap(), 0);
        // Not always 255: torchvision's (max - min) / inv_scale in f32 is often a hair
        // below 255, truncated to 254 (as here for [30, 179]).
        assert!(*data.iter().max().unwrap() >= 254);
        // torchvision: (v - min) / ((max - min) · (1 / 255)) in f32, truncated.
        let inv_scale = (max as f32 - min as f32) * (1.0f64 / 255.0) as f32;
        for (v, got) in channel.iter().zip(&data) {
            let want = ((*v as f32 - min as f32) / inv_scale).clamp(0.0, 255.0) as u8;
            assert_eq!(*got, want);
            // A level at most below the exact stretch.
            let exact = (*v - min) as f64 * 255.0 / (max - min) as f64;
            assert!((exact - *got as f64) < 1.0 + 1e-9 && *got as f64 <= exact + 1e-4);
        }
    }
    let mut pair = [30u8, 179, 100];
    autocontrast::autocontrast(&mut pair);
    assert_eq!(pair, [0, 254, 119]);
    // A flat channel is kept.
    let mut flat = vec![77u8; 50];
    autocontrast::autocontrast(&mut flat);
    assert_eq!(flat, vec![77u8; 50]);
    changes_with_probability("RandomAutocontrast(p=0.3)", 0.3);
    same_seed_same_output("RandomAutocontrast()");
}

/// torchvision's `equalize_image` on one channel, step by step as it writes it.
fn torch_equalize(channel: &[u8]) -> Vec<u8> {
    let mut hist = [0i64; 256];
    channel.iter().for_each(|v| hist[*v as usize] += 1);
    let cum: Vec<i64> = hist
        .iter()
        .scan(0, |total, n| {
            *total += n;
            Some(*total)
        })
        .collect();
    // argmax: the first index of the largest value.
    let index = (0..256).find(|&i| cum[i] == cum[255]).unwrap();
    let step = (channel.len() as i64 - hist[index]).div_euclid(255);
    if step == 0 {
        return channel.to_vec();
    }
    let mut lut = vec![0u8];
    lut.extend(
        cum[..255]
            .iter()
            .map(|c| ((c + step / 2).div_euclid(step)).clamp(0, 255) as u8),
    );
    channel.iter().map(|v| lut[*v as usize]).collect()
}

#[test]
fn equalize_follows_torchvisions_lookup_table() {
    let original = noise(40, 30, 4);
    let skewed: Vec<u8> = original
        .iter()
        .map(|v| ((*v as u32).pow(2) / 600) as u8)
        .collect();
    for channel in original.chunks(1200).chain(skewed.chunks(1200)) {
        let mut data = channel.to_vec();
        equalize::equalize(&mut data);
        assert_eq!(data, torch_equalize(channel));
    }
    // Worked by hand: 1000 pixels each of 0, 10 and 20; step = 2000 / 255 = 7, so 10
    // becomes (1000 + 3) / 7 = 143 and 20 (2000 + 3) / 7, clamped to 255.
    let mut three: Vec<u8> = [0u8, 10, 20].iter().flat_map(|v| [*v; 1000]).collect();
    equalize::equalize(&mut three);
    assert_eq!([three[0], three[1000], three[2000]], [0, 143, 255]);
    // Every value once: step 1, the identity. Fewer than 255 pixels below the top: kept.
    let mut every: Vec<u8> = (0..=255).collect();
    equalize::equalize(&mut every);
    assert_eq!(every, (0..=255).collect::<Vec<u8>>());
    let mut few: Vec<u8> = (0..200).map(|i| (i % 7 * 30) as u8).collect();
    let kept = few.clone();
    equalize::equalize(&mut few);
    assert_eq!(few, kept);
    changes_with_probability("RandomEqualize(p=0.7)", 0.7);
    same_seed_same_output("RandomEqualize()");
}

#[test]
fn sharpness_blends_with_the_smoothed_image_inside_the_border() {
    // 67 × 61: odd sizes, and enough values for a rounding that differs to show.
    let (w, h) = (67, 61);
    let original = noise(w, h, 6);
    let kernel =
        [[1.0f32, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]].map(|row| row.map(|k| k / 13.0));
    for factor in [0.0, 0.3, 0.5, 1.0, 1.7, 2.2, 3.0] {
        let alpha = (1.0 - factor) as f32;
        for channel in original.chunks(w * h) {
            let mut data = channel.to_vec();
            sharpness::sharpen(&mut data, w, h, factor);
            for y in 0..h {
                for x in 0..w {
                    let v = channel[y * w + x] as f32;
                    let want = if x == 0 || y == 0 || x == w - 1 || y == h - 1 {
                        v
                    } else {
                        let mut smoothed = 0.0f32;
                        for (dy, row) in kernel.iter().enumerate() {
                            for (dx, k) in row.iter().enumerate() {
                                smoothed += k * channel[(y + dy - 1) * w + x + dx - 1] as f32;
                            }
                        }
                        (smoothed.round_ties_even() - v).mul_add(alpha, v)
                    };
                    assert_eq!(
                        data[y * w + x],
                        want.clamp(0.0, 255.0) as u8,
                        "{factor} ({x}, {y})"
                    );
                }
            }
            if factor == 1.0 {
                assert_eq!(data, channel);
            }
        }
    }
    // Two pixels a side or fewer: kept.
    let mut small = noise(2, 5, 7)[..10].to_vec();
    let kept = small.clone();
    sharpness::sharpen(&mut small, 2, 5, 0.0);
    assert_eq!(small, kept);
    changes_with_probability("RandomAdjustSharpness(2.0, p=0.4)", 0.4);
    same_seed_same_output("RandomAdjustSharpness(sharpness_factor=0.0)");
    for bad in [
        "RandomAdjustSharpness(-1)",
        "RandomAdjustSharpness(2, p=1.5)",
    ] {
        let error = bad.parse::<Op>().unwrap_err().to_string();
        assert!(error.contains("RandomAdjustSharpness: "), "{bad}: {error}");
    }
}

#[test]
fn gaussian_kernels_are_torchvisions() {
    // torchvision's _get_gaussian_kernel1d(3, 1.0) and (5, 1.5), in float32.
    let close = |got: Vec<f32>, want: &[f32]| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 2e-7, "{got:?} against {want:?}");
        }
    };
    close(
        gaussian_blur::kernel1d(3, 1.0),
        &[0.27406862, 0.45186275, 0.27406862],
    );
    close(
        gaussian_blur::kernel1d(5, 1.5),
        &[0.12007838, 0.23388074, 0.2920817, 0.23388074, 0.12007838],
    );
    assert_eq!(gaussian_blur::kernel1d(1, 0.7), [1.0]);
    let reflected: Vec<usize> = (-3..9).map(|i| gaussian_blur::reflect(i, 5)).collect();
    assert_eq!(reflected, [3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1, 0]);
    assert_eq!(gaussian_blur::reflect(-2, 1), 0);
    assert_eq!(gaussian_blur::reflect(-3, 2), 1);
}

/// torchvision's blur by its definition: the 2-D kernel `ky[i] · kx[j]` (f32) over the
/// image padded by reflection, summed in f64, rounded half to even.
fn blur_by_definition(channel: &[u8], w: usize, h: usize, kx: &[f32], ky: &[f32]) -> Vec<u8> {
    let (rx, ry) = ((kx.len() / 2) as isize, (ky.len() / 2) as isize);
    let mut out = vec![0u8; w * h];
    for y in 0..h {
        for x in 0..w {
            let mut sum = 0.0f64;
            for (i, wy) in ky.iter().enumerate() {
                for (j, wx) in kx.iter().enumerate() {
                    let sy = gaussian_blur::reflect(y as isize + i as isize - ry, h);
                    let sx = gaussian_blur::reflect(x as isize + j as isize - rx, w);
                    sum += (wy * wx) as f64 * channel[sy * w + sx] as f64;
                }
            }
            out[y * w + x] = sum.round_ties_even() as u8;
        }
    }
    out
}

#[test]
fn gaussian_blur_is_the_two_dimensional_convolution() {
    let (w, h) = (37, 23);
    let original = noise(w, h, 8);
    let mut scratch = Vec::new();
    let mut values = 0;
    let mut apart = 0;
    for ((sx, sy), sigma) in [
        ((3, 3), 0.5f32),
        ((5, 3), 1.5),
        ((1, 7), 2.0),
        ((9, 9), 3.3),
    ] {
        let (kx, ky) = (
            gaussian_blur::kernel1d(sx, sigma),
            gaussian_blur::kernel1d(sy, sigma),
        );
        for channel in original.chunks(w * h) {
            let mut data = channel.to_vec();
            gaussian_blur::blur(&mut data, w, h, &kx, &ky, &mut scratch);
            let want = blur_by_definition(channel, w, h, &kx, &ky);
            for (g, v) in data.iter().zip(&want) {
                // The two sums differ in their last bits: a level apart where one falls
                // on each side of a half.
                assert!(g.abs_diff(*v) <= 1, "({sx}, {sy}) {sigma}");
                apart += usize::from(g != v);
                values += 1;
            }
        }
    }
    assert!(apart * 1000 <= values, "{apart} of {values} a level apart");
    // The pair is (width, height): (3, 1) spreads a dot along its row only.
    let mut dot = vec![0u8; 5 * 5];
    dot[12] = 200;
    let kx = gaussian_blur::kernel1d(3, 1.0);
    gaussian_blur::blur(&mut dot, 5, 5, &kx, &[1.0], &mut scratch);
    let row: Vec<u8> = dot[10..15].to_vec();
    assert_eq!(row, [0, 55, 90, 55, 0]);
    assert_eq!(dot.iter().map(|v| *v as u32).sum::<u32>(), 200);
    // Flat stays flat, even where the kernel is wider than the image.
    let mut flat = vec![99u8; 2 * 3];
    let k = gaussian_blur::kernel1d(9, 2.0);
    gaussian_blur::blur(&mut flat, 2, 3, &k, &k, &mut scratch);
    assert_eq!(flat, [99; 6]);
}

#[test]
fn gaussian_blur_draws_sigma_uniformly() {
    let blur = gaussian_blur::GaussianBlur {
        kernel: (5, 5),
        sigma: (0.1, 2.0),
    };
    let sigmas: Vec<f64> = (0..10_000)
        .map(|seed| blur.draw(&mut Rng::new(seed)) as f64)
        .collect();
    assert!(sigmas.iter().all(|s| (0.1..=2.0).contains(s)));
    let d = ks_uniform(sigmas, 0.1, 2.0);
    assert!(d < KS_BOUND, "KS {d}");
    same_seed_same_output("GaussianBlur(5)");
    let op: Op = "GaussianBlur(kernel_size=(5, 3), sigma=1.5)"
        .parse()
        .unwrap();
    assert_eq!(op.arg("kernel_size"), Some((5u32, 3u32).into()));
    assert_eq!(op.arg("sigma"), Some((1.5, 1.5).into()));
    for (bad, says) in [
        ("GaussianBlur(4)", "GaussianBlur: kernel_size (4, 4)"),
        ("GaussianBlur((3, 0))", "GaussianBlur: kernel_size (3, 0)"),
        ("GaussianBlur(-3)", "GaussianBlur: kernel_size takes"),
        ("GaussianBlur(3, sigma=0)", "GaussianBlur: sigma (0, 0)"),
        (
            "GaussianBlur(3, sigma=-1.0)",
            "GaussianBlur: sigma (-1, -1)",
        ),
        (
            "GaussianBlur(3, sigma=(2.0, 1.0))",
            "GaussianBlur: sigma (2, 1)",
        ),
    ] {
        let error = bad.parse::<Op>().unwrap_err().to_string();
        assert!(error.contains(says), "{bad}: {error}");
    }
}

/// `data` (3 planes of `size` × `size`) turned by `k` quarter turns anticlockwise, as
/// `torch.rot90(k)`: transposed and flipped.
fn quarter_turns(data: &[u8], size: usize, k: usize) -> Vec<u8> {
    let mut out = data.to_vec();
    for _ in 0..k {
        let before = out.clone();
        for (c, plane) in out.chunks_exact_mut(size * size).enumerate() {
            let from = &before[c * size * size..(c + 1) * size * size];
            for y in 0..size {
                for x in 0..size {
                    // rot90(k=1): out[y][x] = in[x][size - 1 - y].
                    plane[y * size + x] = from[x * size + size - 1 - y];
                }
            }
        }
    }
    out
}

#[test]
fn rotation_by_0_is_the_identity_and_by_quarter_turns_a_transpose_and_flip() {
    use affine::{inverse_matrix, warp, Interpolation};
    let original = noise(24, 16, 3);
    for op in [
        "RandomRotation((0, 0))",
        "RandomRotation(0, interpolation='bilinear')",
    ] {
        let op: Op = op.parse().unwrap();
        let mut data = original.clone();
        pixels(&op).apply(&mut sized(&mut data, 24, 16), &mut Rng::new(1));
        assert_eq!(data, original, "{op}");
    }
    // The kernel itself, through the identity matrix, changes nothing either.
    for interpolation in [Interpolation::Nearest, Interpolation::Bilinear] {
        let mut data = original.clone();
        let identity = inverse_matrix([0.0, 0.0], 0.0, [0.0, 0.0], 1.0, [0.0, 0.0]);
        warp(
            &mut sized(&mut data, 24, 16),
            identity,
            interpolation,
            Some([7.0; 3]),
        );
        assert_eq!(data, original, "{interpolation:?}");
    }
    for size in [16, 15] {
        let square = noise(size, size, 4);
        for (degrees, k) in [(90.0, 1), (180.0, 2), (270.0, 3), (-90.0, 3), (450.0, 1)] {
            let want = quarter_turns(&square, size, k);
            // The operator (torchvision's exact turn) ...
            let op = Op::call("RandomRotation", vec![(degrees, degrees).into()], vec![]).unwrap();
            let mut data = square.clone();
            pixels(&op).apply(&mut sized(&mut data, size, size), &mut Rng::new(2));
            assert_eq!(data, want, "{op} on {size}x{size}");
            // ... and the sampling kernel, nearest, agree.
            let matrix = inverse_matrix([0.0, 0.0], -degrees, [0.0, 0.0], 1.0, [0.0, 0.0]);
            let mut data = square.clone();
            warp(
                &mut sized(&mut data, size, size),
                matrix,
                Interpolation::Nearest,
                Some([0.0; 3]),
            );
            assert_eq!(data, want, "kernel, {degrees} on {size}x{size}");
        }
    }
    // A quarter turn of a wide image leaves its sides filled.
    let op: Op = "RandomRotation((90, 90), fill=(1, 2, 3))".parse().unwrap();
    let mut data = noise(24, 16, 5);
    pixels(&op).apply(&mut sized(&mut data, 24, 16), &mut Rng::new(0));
    for (c, plane) in data.chunks_exact(24 * 16).enumerate() {
        assert!(
            plane.chunks_exact(24).all(|row| row[0] == c as u8 + 1),
            "{c}"
        );
    }
}

#[test]
fn affine_matrix_and_sampling_are_torchvisions() {
    use affine::{inverse_matrix, warp, Interpolation};
    // torchvision's `_get_inverse_affine_matrix([0, 0], 30, [2, -3], 1.2, [10, 5])` and
    // `(…, -37.5, [0, 0], 1, [0, 0])`, as Python printed them: the same bits.
    assert_eq!(
        inverse_matrix([0.0, 0.0], 30.0, [2.0, -3.0], 1.2, [10.0, 5.0]),
        [
            0.659351459347987,
            0.5503474588408431,
            0.3323394578265555,
            -0.3535271623695006,
            0.7581414462895005,
            2.981478663607503
        ]
    );
    assert_eq!(
        inverse_matrix([0.0, 0.0], -37.5, [0.0, 0.0], 1.0, [0.0, 0.0]),
        [
            0.7933533402912352,
            -0.6087614290087207,
            0.0,
            0.6087614290087207,
            0.7933533402912352,
            0.0
        ]
    );
    // `F.affine(x, angle=30, translate=[1, 0], scale=1.2, shear=[10, 5], fill=[10, 20, 30])`
    // on `x = (arange(60) * 37 % 256).reshape(3, 4, 5)` as uint8, from torchvision 0.2x.
    let image: Vec<u8> = (0..60).map(|i| (i * 37 % 256) as u8).collect();
    let matrix = inverse_matrix([0.0, 0.0], 30.0, [1.0, 0.0], 1.2, [10.0, 5.0]);
    for (interpolation, want) in [
        (
            Interpolation::Bilinear,
            [
                14, 133, 152, 94, 68, 59, 141, 182, 77, 34, 58, 108, 157, 176, 135, 14, 46, 124,
                173, 134, 21, 114, 159, 83, 42, 46, 113, 163, 212, 127, 30, 80, 129, 170, 115, 18,
                37, 96, 145, 195, 28, 95, 168, 189, 56, 59, 85, 135, 184, 174, 171, 58, 101, 151,
                200, 26, 29, 68, 117, 167,
            ],
        ),
        (
            Interpolation::Nearest,
            [
                10, 185, 222, 37, 74, 114, 114, 222, 3, 3, 43, 80, 188, 188, 225, 10, 117, 117,
                154, 225, 20, 157, 194, 9, 46, 86, 86, 194, 231, 231, 15, 52, 160, 160, 197, 20,
                89, 89, 126, 197, 30, 129, 166, 237, 18, 58, 58, 166, 203, 203, 243, 24, 132, 132,
                169, 30, 61, 61, 98, 169,
            ],
        ),
    ] {
        let mut data = image.clone();
        warp(
            &mut sized(&mut data, 5, 4),
            matrix,
            interpolation,
            Some([10.0, 20.0, 30.0]),
        );
        assert_eq!(data, want, "{interpolation:?}");
    }
}

#[test]
fn rotation_and_affine_draw_uniformly_and_the_same_seed_gives_the_same_output() {
    let rotation = rotation::RandomRotation {
        degrees: (-30.0, 45.0),
        interpolation: affine::Interpolation::Nearest,
        expand: false,
        fill: [0.0; 3],
    };
    let angles: Vec<f64> = (0..10_000)
        .map(|seed| rotation.draw(&mut Rng::new(seed)))
        .collect();
    assert!(angles.iter().all(|a| (-30.0..=45.0).contains(a)));
    let d = ks_uniform(angles, -30.0, 45.0);
    assert!(d < KS_BOUND, "rotation: KS {d}");

    let random_affine = affine::RandomAffine {
        degrees: (-10.0, 20.0),
        translate: Some((0.2, 0.1)),
        scale: Some((0.8, 1.25)),
        shear: Some(affine::Shear::Xy((-5.0, 15.0), (0.0, 8.0))),
        interpolation: affine::Interpolation::Nearest,
        fill: [0.0; 3],
    };
    let draws: Vec<_> = (0..10_000)
        .map(|seed| random_affine.draw(100, 50, &mut Rng::new(seed)))
        .collect();
    for (what, values, (lo, hi)) in [
        (
            "angle",
            draws.iter().map(|d| d.angle).collect::<Vec<_>>(),
            (-10.0, 20.0),
        ),
        (
            "scale",
            draws.iter().map(|d| d.scale).collect(),
            (0.8, 1.25),
        ),
        (
            "shear x",
            draws.iter().map(|d| d.shear[0]).collect(),
            (-5.0, 15.0),
        ),
        (
            "shear y",
            draws.iter().map(|d| d.shear[1]).collect(),
            (0.0, 8.0),
        ),
    ] {
        assert!(values.iter().all(|v| (lo..=hi).contains(v)), "{what}");
        let d = ks_uniform(values, lo, hi);
        assert!(d < KS_BOUND, "{what}: KS {d}");
    }
    // The translations are whole pixels within ±20 (x) and ±5 (y), the rounding of a
    // uniform draw: each whole value inside as often as another (1/40 of x's draws;
    // 250 ± 4.5 standard deviations), the two ends half as often.
    let mut counts = [0usize; 41];
    for d in &draws {
        let [tx, ty] = d.translate;
        assert!(tx.fract() == 0.0 && ty.fract() == 0.0, "{tx}, {ty}");
        assert!(tx.abs() <= 20.0 && ty.abs() <= 5.0, "{tx}, {ty}");
        counts[(tx + 20.0) as usize] += 1;
    }
    for (i, count) in counts.iter().enumerate() {
        let expected = if i == 0 || i == 40 { 125 } else { 250 };
        assert!(
            count.abs_diff(expected) <= 75,
            "tx {}: {count}",
            i as i32 - 20
        );
    }
    // Without translate, scale or shear, only the angle is drawn.
    let plain: Op = "RandomAffine(10)".parse().unwrap();
    assert_eq!(plain.arg("degrees"), Some((-10.0, 10.0).into()));

    same_seed_same_output("RandomRotation(30)");
    same_seed_same_output("RandomRotation((-45, 45), interpolation='bilinear', fill=(10, 20, 30))");
    same_seed_same_output("RandomAffine(30)");
    same_seed_same_output(
        "RandomAffine(30, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-5, 5, -3, 3), \
         interpolation='bilinear', fill=7)",
    );
}

#[test]
fn rotation_and_affine_read_their_arguments_as_torchvision_and_refuse_the_rest() {
    let op: Op = "RandomAffine(degrees=(-5, 10), shear=7, fill=[1, 2, 3])"
        .parse()
        .unwrap();
    assert_eq!(op.arg("degrees"), Some((-5.0, 10.0).into()));
    assert_eq!(op.arg("shear"), Some([-7.0, 7.0].into()));
    assert_eq!(op.arg("fill"), Some([1.0, 2.0, 3.0].into()));
    assert_eq!(op.arg("interpolation"), Some("nearest".into()));
    assert_eq!(op.arg("center"), Some(Value::None));
    let op: Op = "RandomRotation(0)".parse().unwrap();
    assert_eq!(op.arg("degrees"), Some((-0.0, 0.0).into()));
    assert_eq!(op.arg("expand"), Some(false.into()));
    for (bad, says) in [
        (
            "RandomRotation(-5)",
            "RandomRotation: degrees -5: a single number",
        ),
        ("RandomRotation((10, 5))", "RandomRotation: degrees (10, 5)"),
        (
            "RandomRotation(5, expand=True, fill=300)",
            "RandomRotation: fill",
        ),
        (
            "RandomRotation(5, center=(1, 2))",
            "RandomRotation: center (1, 2)",
        ),
        (
            "RandomRotation(5, interpolation='bicubic')",
            "RandomRotation: interpolation takes",
        ),
        (
            "RandomRotation(5, fill=(1, 2))",
            "RandomRotation: fill takes",
        ),
        ("RandomAffine(-1)", "RandomAffine: degrees -1"),
        (
            "RandomAffine(5, scale=(0, 1))",
            "RandomAffine: scale (0, 1)",
        ),
        (
            "RandomAffine(5, scale=(2, 1))",
            "RandomAffine: scale (2, 1)",
        ),
        (
            "RandomAffine(5, translate=(0.5, 1.5))",
            "RandomAffine: translate",
        ),
        ("RandomAffine(5, shear=-3)", "RandomAffine: shear -3"),
        (
            "RandomAffine(5, shear=(1, 2, 3))",
            "RandomAffine: shear takes",
        ),
        (
            "RandomAffine(5, shear=(4, 2))",
            "RandomAffine: shear (4, 2)",
        ),
        (
            "RandomAffine(5, center=(0, 0))",
            "RandomAffine: center (0, 0)",
        ),
    ] {
        let error = bad.parse::<Op>().unwrap_err().to_string();
        assert!(error.contains(says), "{bad}: {error}");
    }
}

/// A valid value for a required parameter of `kind`, as small as it goes.
pub(super) fn example(kind: Kind) -> Value {
    match kind {
        Kind::Int | Kind::OptionalInt | Kind::Size | Kind::Sides | Kind::Padding => Value::Int(8),
        // Odd, as a kernel's size must be.
        Kind::Square => Value::Int(7),
        Kind::Float => Value::Float(0.5),
        Kind::Angle => Value::Float(30.0),
        Kind::Rgb => [0.5, 0.5, 0.5].into(),
        Kind::Ops => Value::Ops(vec![Op::call("RandomInvert", vec![], vec![]).unwrap()]),
        other => panic!("no example for {other:?}"),
    }
}
