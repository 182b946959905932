use super::codec::{encode_jpeg, EncodePixels};
use super::*;

#[test]
fn random_crop_stays_inside_and_follows_ranges() {
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
fn invalid_pipelines_are_refused() {
    assert!(ImagePipeline::new(
        vec![Op::Resize(Size::Shorter(256))],
        DType::F32,
        Layout::Chw
    )
    .is_err());
    let norm = Op::Normalize {
        mean: IMAGENET_MEAN,
        std: IMAGENET_STD,
    };
    assert!(ImagePipeline::new(
        vec![Op::random_resized_crop(8), norm.clone()],
        DType::U8,
        Layout::Chw
    )
    .is_err());
    let bad_std = Op::Normalize {
        mean: IMAGENET_MEAN,
        std: [0.0, 1.0, 1.0],
    };
    assert!(ImagePipeline::new(
        vec![Op::random_resized_crop(8), bad_std],
        DType::F32,
        Layout::Chw
    )
    .is_err());
}

#[test]
fn operators_check_their_own_parameters() {
    let good = [
        Op::random_resized_crop(1),
        Op::Resize(Size::Shorter(1)),
        Op::Resize(Size::Exact {
            height: 1,
            width: 2,
        }),
        Op::CenterCrop {
            height: 3,
            width: 1,
        },
        Op::RandomHorizontalFlip { p: 1.0 },
        Op::Normalize {
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        },
    ];
    for op in &good {
        op.validate().unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
    let bad = [
        (Op::random_resized_crop(0), "at least 1"),
        (
            Op::RandomResizedCrop {
                size: (8, 8),
                scale: (0.5, 0.1),
                ratio: DEFAULT_CROP_RATIO,
            },
            "scale",
        ),
        (
            Op::RandomResizedCrop {
                size: (8, 8),
                scale: DEFAULT_CROP_SCALE,
                ratio: (f64::NAN, 1.0),
            },
            "ratio",
        ),
        (Op::Resize(Size::Shorter(0)), "at least 1"),
        (
            Op::Resize(Size::Exact {
                height: 0,
                width: 5,
            }),
            "Resize to 0x5",
        ),
        (
            Op::CenterCrop {
                height: 5,
                width: 0,
            },
            "CenterCrop to 5x0",
        ),
        (Op::RandomHorizontalFlip { p: 1.5 }, "probability"),
        (
            Op::Normalize {
                mean: [f32::NAN, 0.0, 0.0],
                std: [1.0; 3],
            },
            "mean",
        ),
    ];
    for (op, words) in bad {
        let error = op.validate().unwrap_err();
        assert!(matches!(error, Error::Config(_)), "{op:?}: {error:?}");
        assert!(error.to_string().contains(words), "{op:?}: {error}");
        // A pipeline refuses what its operators refuse.
        let ops = vec![op, Op::random_resized_crop(8)];
        assert!(ImagePipeline::new(ops, DType::F32, Layout::Chw).is_err());
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
        .filter(|op| !matches!(op, Op::Normalize { .. }))
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
    let (geometry_only, finish) = cpu.for_device();
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
        let ops = vec![
            Op::Resize(Size::Exact {
                height: 16,
                width: 16,
            }),
            Op::RandomHorizontalFlip { p },
        ];
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
        let ops = vec![
            Op::CenterCrop {
                height: 8,
                width: 12,
            },
            Op::RandomHorizontalFlip { p: 1.0 },
        ];
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
        "RandomResizedCrop(224) → RandomHorizontalFlip → Normalize(ImageNet), float32 CHW"
    );
    let custom = ImagePipeline::new(
        vec![
            Op::Resize(Size::Shorter(256)),
            Op::CenterCrop {
                height: 200,
                width: 300,
            },
            Op::RandomHorizontalFlip { p: 0.25 },
        ],
        DType::U8,
        Layout::Hwc,
    )
    .unwrap();
    assert_eq!(
        custom.to_string(),
        "Resize(256) → CenterCrop(200×300) → RandomHorizontalFlip(p=0.25), uint8 HWC"
    );
}
