use super::codec::{encode_jpeg, EncodePixels};
use super::*;

#[test]
fn val_geometry_matches_torchvision() {
    let p = ImagePipeline::imagenet_val(224);
    let g = p.geometry(500, 375, &mut Rng::new(0));
    // Resize(256): 375 -> 256, 500 -> 341; CenterCrop(224) at (58.5 -> 58, 16).
    let (sx, sy) = (500.0 / 341.0, 375.0 / 256.0);
    assert!((g.source.x - 58.0 * sx).abs() < 1e-9 && (g.source.y - 16.0 * sy).abs() < 1e-9);
    assert!((g.source.w - 224.0 * sx).abs() < 1e-9 && (g.source.h - 224.0 * sy).abs() < 1e-9);
    assert_eq!((g.width, g.height, g.flip), (224, 224, false));
}

#[test]
fn a_resize_after_a_crop_reads_within_it_and_one_before_it_the_whole_image() {
    let geometry = |ops: &[&str]| {
        let ops = ops.iter().map(|text| op(text)).collect();
        let p = ImagePipeline::new(ops, DType::U8, Layout::Chw).unwrap();
        p.geometry(500, 375, &mut Rng::new(3))
    };
    // The validation recipe crops after its resize (whatever the region's rounding).
    assert_eq!(
        ImagePipeline::imagenet_val(224)
            .geometry(500, 375, &mut Rng::new(0))
            .bound,
        None
    );
    assert_eq!(
        geometry(&["Resize(100)", "RandomHorizontalFlip()", "CenterCrop(90)"]).bound,
        None
    );
    // A crop, then its resize: the crop's window.
    let g = geometry(&["CenterCrop((200, 300))", "Resize((50, 60))"]);
    assert_eq!(g.bound, Some(g.source));
    let g = geometry(&["RandomResizedCrop(64)", "RandomHorizontalFlip()"]);
    assert_eq!(g.bound, Some(g.source));
    // A crop before a resize and one after: the first.
    let g = geometry(&["CenterCrop(300)", "Resize(100)", "CenterCrop(80)"]);
    let first = g.bound.unwrap();
    assert_eq!((first.w, first.h), (300.0, 300.0));
}

/// The operator written `text`.
fn op(text: &str) -> Op {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn invalid_pipelines_are_refused() {
    let refused = |ops: &[&str], dtype, says: &str| {
        let ops = ops.iter().map(|text| op(text)).collect();
        let error = ImagePipeline::new(ops, dtype, Layout::Chw).unwrap_err();
        assert!(error.to_string().contains(says), "{error}");
    };
    let imagenet = "Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))";
    refused(&["Resize(256)"], DType::F32, "output size varies");
    refused(
        &["RandomResizedCrop(8)", imagenet],
        DType::U8,
        "Normalize needs f32",
    );
    refused(&["CenterCrop(8)", imagenet, imagenet], DType::F32, "twice");
    refused(
        &["RandomShortestSize(8, 16)", "RandomGrayscale()"],
        DType::U8,
        "RandomGrayscale follows RandomShortestSize, whose canvas only holds the batch",
    );
    refused(
        &["CenterCrop(8)", "RandomInvert()", "RandomHorizontalFlip()"],
        DType::F32,
        "RandomHorizontalFlip follows RandomInvert",
    );
    refused(
        &["CenterCrop(8)", imagenet, "RandomInvert()"],
        DType::F32,
        "RandomInvert follows Normalize",
    );
    // Before the geometry, Normalize may follow the operators on pixels, not precede them.
    refused(
        &[imagenet, "RandomInvert()", "CenterCrop(8)"],
        DType::F32,
        "RandomInvert follows Normalize",
    );
}

#[test]
fn normalize_may_follow_the_operators_on_the_whole_image() {
    let imagenet = "Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))";
    let pipeline = |ops: &[&str]| {
        let ops = ops.iter().map(|text| op(text)).collect();
        ImagePipeline::new(ops, DType::F32, Layout::Chw).unwrap()
    };
    let whole = pipeline(&["RandomInvert()", imagenet, "CenterCrop(8)"]);
    assert_eq!(
        (whole.source_end, whole.before_geometry()),
        (1, Some("RandomInvert"))
    );
    // The same normalisation as written after the geometry, folded into the last pass.
    let after = pipeline(&["RandomInvert()", "CenterCrop(8)", imagenet]);
    assert_eq!((whole.mean, whole.std), (after.mean, after.std));
    // Normalize alone before the geometry leaves nothing to run on the whole image.
    assert_eq!(pipeline(&[imagenet, "CenterCrop(8)"]).source_end, 0);
}

#[test]
fn operators_check_their_own_parameters() {
    let bad = [
        (
            "RandomResizedCrop(0)",
            "RandomResizedCrop: size 0x0: sizes must be at least 1",
        ),
        (
            "RandomResizedCrop(8, scale=(0.5, 0.1))",
            "RandomResizedCrop: scale",
        ),
        (
            "RandomResizedCrop(8, ratio=(-nan, 1.0))",
            "RandomResizedCrop: ratio",
        ),
        ("Resize(0)", "at least 1"),
        ("Resize((0, 5))", "Resize: size 0x5"),
        ("CenterCrop((5, 0))", "CenterCrop: size 5x0"),
        (
            "RandomHorizontalFlip(1.5)",
            "RandomHorizontalFlip: p 1.5 is not a probability",
        ),
        ("Normalize((-nan, 0, 0), (1, 1, 1))", "Normalize: mean"),
        ("Normalize((0, 0, 0), (0, 1, 1))", "Normalize: std"),
        ("Normalize((0, 0, 0), (1e-50, 1, 1))", "Normalize: std"),
        (
            "RandomSolarize(256)",
            "RandomSolarize: threshold 256 is not in [0, 255]",
        ),
        ("RandomPosterize(9)", "RandomPosterize: bits 9 is more than"),
        ("RandomPosterize(-1)", "RandomPosterize: bits takes an int"),
        (
            "RandomGrayscale(p=-0.1)",
            "RandomGrayscale: p -0.1 is not a probability",
        ),
        (
            "RandomInvert(p='often')",
            "RandomInvert: p takes a number, not 'often'",
        ),
    ];
    for (text, words) in bad {
        let error = text.parse::<Op>().unwrap_err();
        assert!(matches!(error, Error::Config(_)), "{text}: {error:?}");
        assert!(error.to_string().contains(words), "{text}: {error}");
    }
}

#[test]
fn presets_by_name_and_output_types_from_text() {
    assert_eq!(
        ImagePipeline::preset("train", 96).unwrap(),
        ImagePipeline::imagenet_train(96)
    );
    assert_eq!(
        ImagePipeline::preset("val", 96).unwrap(),
        ImagePipeline::imagenet_val(96)
    );
    assert_eq!(
        ImagePipeline::preset("eval", 96).unwrap(),
        ImagePipeline::imagenet_val(96)
    );
    let error = ImagePipeline::preset("test", 96).unwrap_err();
    assert!(
        error.to_string().contains("\"train\" or \"val\""),
        "{error}"
    );
    let error = ImagePipeline::preset("train", 0).unwrap_err();
    assert!(error.to_string().contains("at least 1"), "{error}");

    assert_eq!("float32".parse::<DType>().unwrap(), DType::F32);
    assert_eq!("f32".parse::<DType>().unwrap(), DType::F32);
    assert_eq!("uint8".parse::<DType>().unwrap(), DType::U8);
    assert_eq!("u8".parse::<DType>().unwrap(), DType::U8);
    let error = "float16".parse::<DType>().unwrap_err();
    assert!(
        error.to_string().contains("\"float32\" or \"uint8\""),
        "{error}"
    );
    assert_eq!("CHW".parse::<Layout>().unwrap(), Layout::Chw);
    assert_eq!("hwc".parse::<Layout>().unwrap(), Layout::Hwc);
    let error = "NHWC".parse::<Layout>().unwrap_err();
    assert!(error.to_string().contains("\"HWC\""), "{error}");

    // The presets normalise, so they need f32: a u8 output must leave Normalize out.
    let ops = ImagePipeline::imagenet_train(32).ops().to_vec();
    let error = ImagePipeline::new(ops.clone(), DType::U8, Layout::Chw).unwrap_err();
    assert!(error.to_string().contains("leave Normalize out"), "{error}");
    let without: Vec<Op> = ops
        .into_iter()
        .filter(|op| op.name() != "Normalize")
        .collect();
    let u8_hwc = ImagePipeline::new(without, DType::U8, Layout::Hwc).unwrap();
    assert_eq!(u8_hwc.sample_shape(), [32, 32, 3]);
    assert_eq!(u8_hwc.sample_bytes(), 32 * 32 * 3);
}

#[test]
fn a_routed_jpeg_keeps_the_augmentation_the_cpu_would_draw() {
    use crate::prep::route::{DecodeRoute, RouteMode};
    let (w, h) = (96u32, 64u32);
    let px: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
    let jpeg = encode_jpeg(&px, w, h, EncodePixels::Rgb, 90, false).unwrap();
    let mut png = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&px).unwrap();
    }
    let cpu = ImagePipeline::imagenet_train(32);
    let (geometry_only, finish) = cpu.for_device().unwrap();
    assert_eq!(geometry_only.dtype(), DType::U8);
    assert_eq!(geometry_only.layout(), Layout::Hwc);
    assert_eq!(finish.normalize, Some((IMAGENET_MEAN, IMAGENET_STD)));
    // Large enough (every image here is), every time: the JPEG is deferred with the
    // geometry the CPU draws from the same generator, and its slot zeroed.
    let route = Arc::new(DecodeRoute::new(RouteMode::Always, (w * h) as u64));
    let routed = geometry_only.clone().with_decode_route(route.clone());
    let mut prep = routed.preparer().unwrap();
    for seed in 0..20 {
        let mut out = vec![7u8; routed.sample_bytes()];
        let prepared = prep.prepare(&jpeg, &mut Rng::new(seed), &mut out).unwrap();
        let Prepared::Deferred(deferred) = prepared else {
            panic!("a JPEG of the threshold's size stayed on the CPU");
        };
        assert_eq!(deferred.geometry, cpu.geometry(w, h, &mut Rng::new(seed)));
        assert_eq!(*deferred.data, jpeg[..]);
        assert!(out.iter().all(|&b| b == 0));
    }
    assert_eq!(route.sent(), 20);
    // PNG has no device decoder here, and smaller JPEGs stay: both prepared in the
    // slot exactly as without a route.
    let mut plain = geometry_only.preparer().unwrap();
    let small = Arc::new(DecodeRoute::new(RouteMode::Always, (w * h) as u64 + 1));
    let mut smaller = geometry_only
        .clone()
        .with_decode_route(small)
        .preparer()
        .unwrap();
    for (data, prep) in [(&png[..], &mut prep), (&jpeg[..], &mut smaller)] {
        let prep: &mut Box<dyn Preparer> = prep;
        let (mut a, mut b) = (
            vec![0u8; routed.sample_bytes()],
            vec![1u8; routed.sample_bytes()],
        );
        let got = prep.prepare(data, &mut Rng::new(3), &mut a).unwrap();
        assert!(matches!(got, Prepared::InSlot));
        plain.prepare(data, &mut Rng::new(3), &mut b).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn prep_writes_normalized_chw_and_flips() {
    // Left half black, right half white: a flip must swap them.
    let (w, h) = (64u32, 48u32);
    let px: Vec<u8> = (0..w * h)
        .flat_map(|i| if i % w < w / 2 { [0u8; 3] } else { [255u8; 3] })
        .collect();
    let jpeg = encode_jpeg(&px, w, h, EncodePixels::Rgb, 95, false).unwrap();
    let make = |p| {
        let ops = vec![op("Resize((16, 16))"), Op::horizontal_flip(p)];
        ImagePipeline::new(ops, DType::F32, Layout::Chw).unwrap()
    };
    for (p, left_dark) in [(0.0, true), (1.0, false)] {
        let pipeline = make(p);
        let mut prep = pipeline.preparer().unwrap();
        let mut out = vec![0u8; pipeline.sample_bytes()];
        prep.prepare(&jpeg, &mut Rng::new(0), &mut out).unwrap();
        let f: Vec<f32> = out
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(f.len(), 3 * 16 * 16);
        let (left, right) = (f[16 * 8 + 1], f[16 * 8 + 14]);
        assert_eq!(
            left < 0.1 && right > 0.9,
            left_dark,
            "left {left} right {right}"
        );
    }
}

#[test]
fn layouts_and_dtypes_hold_the_same_pixels() {
    let jpeg = encode_jpeg(
        &(0..40 * 30 * 3)
            .map(|i| (i * 7 % 256) as u8)
            .collect::<Vec<_>>(),
        40,
        30,
        EncodePixels::Rgb,
        95,
        false,
    )
    .unwrap();
    let run = |dtype, layout| {
        let ops = vec![Op::center_crop(8, 12), Op::horizontal_flip(1.0)];
        let pipeline = ImagePipeline::new(ops, dtype, layout).unwrap();
        let mut out = vec![0u8; pipeline.sample_bytes()];
        pipeline
            .preparer()
            .unwrap()
            .prepare(&jpeg, &mut Rng::new(0), &mut out)
            .unwrap();
        out
    };
    let (u8_chw, u8_hwc) = (run(DType::U8, Layout::Chw), run(DType::U8, Layout::Hwc));
    let f32_chw = run(DType::F32, Layout::Chw);
    let f32_hwc = run(DType::F32, Layout::Hwc);
    let f = |b: &[u8], i: usize| f32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
    for y in 0..8 {
        for x in 0..12 {
            for c in 0..3 {
                let (chw, hwc) = (c * 96 + y * 12 + x, (y * 12 + x) * 3 + c);
                assert_eq!(u8_chw[chw], u8_hwc[hwc]);
                // Without Normalize, f32 is the byte scaled to [0, 1], as ToTensor gives.
                assert_eq!(f(&f32_chw, chw), u8_chw[chw] as f32 / 255.0);
                assert_eq!(f(&f32_hwc, hwc), f(&f32_chw, chw));
            }
        }
    }
}

#[test]
fn pipelines_print_as_a_person_would_write_them() {
    assert_eq!(
        ImagePipeline::imagenet_train(224).to_string(),
        "RandomResizedCrop(224) → RandomHorizontalFlip → Normalize((0.485, 0.456, 0.406), \
         (0.229, 0.224, 0.225)), float32 CHW"
    );
    let custom = ImagePipeline::new(
        vec![
            op("Resize(256)"),
            Op::center_crop(200, 300),
            Op::horizontal_flip(0.25),
            op("RandomSolarize(128)"),
        ],
        DType::U8,
        Layout::Hwc,
    )
    .unwrap();
    assert_eq!(
        custom.to_string(),
        "Resize(256) → CenterCrop(200×300) → RandomHorizontalFlip(p=0.25) → \
         RandomSolarize(128.0), uint8 HWC"
    );
}

/// A caller's function for the tests: records what it was given and does `kernel`.
struct Recorded {
    kernel: fn(&mut UserSample<'_>, u64) -> Result<(), Cause>,
    seen: std::sync::Mutex<Vec<(Vec<usize>, DType, u64)>>,
}

impl crate::user_code::function::UserFn for Recorded {
    fn name(&self) -> &str {
        "recorded"
    }

    fn apply(&self, mut sample: UserSample<'_>, seed: u64) -> Result<(), Cause> {
        let seen = (sample.shape.to_vec(), sample.dtype, seed);
        self.seen.lock().unwrap().push(seen);
        (self.kernel)(&mut sample, seed)
    }
}

fn recorded(kernel: fn(&mut UserSample<'_>, u64) -> Result<(), Cause>) -> Arc<Recorded> {
    Arc::new(Recorded {
        kernel,
        seen: Default::default(),
    })
}

fn user(f: &Arc<Recorded>) -> Op {
    Op::user(crate::user_code::function::UserOp::new(f.clone()))
}

/// A photograph-sized JPEG of smooth gradients.
fn gradient_jpeg() -> Vec<u8> {
    let (w, h) = (96u32, 72u32);
    let px: Vec<u8> = (0..w * h)
        .flat_map(|i| {
            let (x, y) = (i % w, i / w);
            [
                (x * 255 / w) as u8,
                (y * 255 / h) as u8,
                ((x + y) % 256) as u8,
            ]
        })
        .collect();
    encode_jpeg(&px, w, h, EncodePixels::Rgb, 90, false).unwrap()
}

fn run_ops(ops: Vec<Op>, dtype: DType, seed: u64) -> Result<Vec<u8>, Cause> {
    let pipeline = ImagePipeline::new(ops, dtype, Layout::Chw).unwrap();
    let mut out = vec![0u8; pipeline.sample_bytes()];
    pipeline
        .preparer()
        .unwrap()
        .prepare(&gradient_jpeg(), &mut Rng::new(seed), &mut out)?;
    Ok(out)
}

#[test]
fn a_function_between_operators_gets_the_8_bit_planes_in_its_place() {
    let invert = recorded(|s, _| {
        s.data.iter_mut().for_each(|v| *v = 255 - *v);
        Ok(())
    });
    let norm = || op("Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))");
    for seed in 0..6 {
        let theirs = run_ops(
            vec![op("RandomResizedCrop(24)"), user(&invert), norm()],
            DType::F32,
            seed,
        );
        let ours = run_ops(
            vec![op("RandomResizedCrop(24)"), op("RandomInvert(1.0)"), norm()],
            DType::F32,
            seed,
        );
        assert_eq!(theirs.unwrap(), ours.unwrap(), "seed {seed}");
    }
    let seen = invert.seen.lock().unwrap();
    assert!(seen
        .iter()
        .all(|(shape, dtype, _)| shape == &[3, 24, 24] && *dtype == DType::U8));
    // Its own seed each sample, the same for the same sample.
    let seeds: std::collections::BTreeSet<u64> = seen.iter().map(|s| s.2).collect();
    assert_eq!(seeds.len(), 6);
}

#[test]
fn a_function_last_gets_the_sample_as_delivered_and_the_draws_stay() {
    let double = recorded(|s, _| {
        for v in s.data.chunks_exact_mut(4) {
            let x = f32::from_ne_bytes(v.try_into().unwrap());
            v.copy_from_slice(&(2.0 * x).to_ne_bytes());
        }
        Ok(())
    });
    let native = || vec![op("RandomResizedCrop(16)"), op("RandomHorizontalFlip()")];
    for seed in 0..4 {
        let alone = run_ops(native(), DType::F32, seed).unwrap();
        let mut ops = native();
        ops.push(user(&double));
        let doubled = run_ops(ops, DType::F32, seed).unwrap();
        for (a, b) in alone.chunks_exact(4).zip(doubled.chunks_exact(4)) {
            let (a, b) = (
                f32::from_ne_bytes(a.try_into().unwrap()),
                f32::from_ne_bytes(b.try_into().unwrap()),
            );
            assert_eq!(2.0 * a, b);
        }
    }
    let seen = double.seen.lock().unwrap();
    assert_eq!(seen[0].0, vec![3, 16, 16]);
    assert_eq!(seen[0].1, DType::F32);
}

#[test]
fn a_failing_function_fails_its_sample_and_a_misplaced_one_is_refused() {
    let fails = recorded(|_, _| {
        Err(Cause::UserCode {
            code: "ops.Python(recorded)".into(),
            message: "ValueError: no".into(),
        })
    });
    let got = run_ops(
        vec![op("CenterCrop(8)"), user(&fails), op("RandomInvert()")],
        DType::U8,
        0,
    );
    assert!(matches!(got, Err(Cause::UserCode { .. })), "{got:?}");
    let refused = ImagePipeline::new(
        vec![user(&fails), op("CenterCrop(8)")],
        DType::F32,
        Layout::Chw,
    )
    .unwrap_err();
    assert!(
        refused.to_string().contains("write the geometric ones"),
        "{refused}"
    );
    assert!(
        "Python(fn='recorded')".parse::<Op>().is_err(),
        "a function has no text"
    );
    let pipeline = ImagePipeline::new(
        vec![op("CenterCrop(8)"), user(&fails)],
        DType::F32,
        Layout::Chw,
    )
    .unwrap();
    assert!(format!("{pipeline:?}").contains("Python"));
}
