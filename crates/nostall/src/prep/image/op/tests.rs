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
                crate::prep::text::read_value(default)
                    .unwrap_or_else(|e| panic!("{}.{}: {e}", declaration.name, param.name));
            }
        }
        // Made with its required parameters as small as they go, it writes itself as a
        // call that reads back to itself.
        let required: Vec<Value> = declaration
            .params
            .iter()
            .filter(|p| p.default.is_none())
            .map(|p| match p.kind {
                Kind::Int | Kind::Size | Kind::Square => Value::Int(8),
                Kind::Float => Value::Float(0.5),
                Kind::Rgb => [0.5, 0.5, 0.5].into(),
                Kind::Ops => Value::Ops(vec![Op::call("RandomInvert", vec![], vec![]).unwrap()]),
                other => panic!("no example for {other:?}"),
            })
            .collect();
        let op = declaration.call(required, Vec::new()).unwrap();
        let again: Op = op.to_string().parse().unwrap();
        assert_eq!(again, op, "{op}");
        assert_eq!(again.to_string(), op.to_string());
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
        let want = (r as f32 * 0.2989 + g as f32 * 0.587 + b as f32 * 0.114) as u8;
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
