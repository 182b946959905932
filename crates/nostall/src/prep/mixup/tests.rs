use super::*;

/// `len` CHW f32 samples of 3 × 4 × 6, sample `i` all `i`.
fn samples(len: usize) -> Vec<u8> {
    (0..len)
        .flat_map(|i| std::iter::repeat_n(i as f32, 3 * 4 * 6))
        .flat_map(f32::to_ne_bytes)
        .collect()
}

fn floats(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect()
}

fn mix(args: MixupArgs) -> Mixup {
    Mixup::new(args, Layout::Chw).unwrap()
}

#[test]
fn mixup_blends_each_sample_with_its_mirror_and_weights_the_labels_alike() {
    let m = mix(MixupArgs {
        num_classes: 4,
        label_smoothing: 0.0,
        ..MixupArgs::default()
    });
    let mut data = samples(4);
    let labels = [0, 1, 2, 3];
    let targets = m.apply(&mut data, &[3, 4, 6], DType::F32, &labels, &mut Rng::new(5));
    let values = floats(&data);
    let per = 3 * 4 * 6;
    // One λ for the batch: sample i = i·λ + (3 − i)·(1 − λ), so sample 0 gives 3 − 3λ.
    let lam = 1.0 - values[0] as f64 / 3.0;
    assert!(0.0 < lam && lam < 1.0, "{lam}");
    for i in 0..4 {
        let want = i as f64 * lam + (3 - i) as f64 * (1.0 - lam);
        assert!(values[i * per..(i + 1) * per]
            .iter()
            .all(|&v| (v as f64 - want).abs() < 1e-5));
        let row = &targets[i * 4..(i + 1) * 4];
        assert!(
            (row[i] as f64 - lam).abs() < 1e-6 && (row[3 - i] as f64 - (1.0 - lam)).abs() < 1e-6
        );
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}

#[test]
fn cutmix_pastes_a_box_whose_area_is_the_partners_weight() {
    let m = mix(MixupArgs {
        mixup_alpha: 0.0,
        cutmix_alpha: 1.0,
        num_classes: 2,
        label_smoothing: 0.1,
        ..MixupArgs::default()
    });
    for seed in 0..50 {
        let mut data = samples(2);
        let targets = m.apply(
            &mut data,
            &[3, 4, 6],
            DType::F32,
            &[0, 1],
            &mut Rng::new(seed),
        );
        let values = floats(&data);
        let pasted = values[..72].iter().filter(|&&v| v == 1.0).count() / 3;
        let lam = 1.0 - pasted as f64 / 24.0;
        // Smoothing 0.1 over 2 classes: on 0.95, off 0.05.
        let want = 0.05 + 0.9 * lam;
        assert!(
            (targets[0] as f64 - want).abs() < 1e-6,
            "seed {seed}: {targets:?} vs λ {lam}"
        );
        // The same box, from the other side.
        assert_eq!(
            values[72..].iter().filter(|&&v| v == 0.0).count() / 3,
            pasted
        );
    }
}

#[test]
fn beta_draws_follow_the_distribution() {
    // Beta(α, α) has mean 1/2 and variance 1 / (4(2α + 1)).
    for alpha in [0.2, 0.8, 1.0, 3.0] {
        let mut rng = Rng::new(11);
        let draws: Vec<f64> = (0..20_000).map(|_| rng.dirichlet(alpha, 2)[0]).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        let want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
        assert!((mean - 0.5).abs() < 0.01, "α {alpha}: mean {mean}");
        assert!(
            (var - want).abs() < 0.05 * want + 0.001,
            "α {alpha}: var {var} vs {want}"
        );
        assert!(draws.iter().all(|d| (0.0..=1.0).contains(d)));
    }
}

#[test]
fn elem_mode_draws_per_sample_and_bad_arguments_are_refused() {
    let m = mix(MixupArgs {
        mode: MixupMode::Elem,
        num_classes: 8,
        ..MixupArgs::default()
    });
    let mut data = samples(8);
    m.apply(
        &mut data,
        &[3, 4, 6],
        DType::F32,
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &mut Rng::new(1),
    );
    let values = floats(&data);
    let lams: Vec<f64> = (0..4)
        .map(|i| {
            let v = values[i * 72] as f64;
            (v - (7 - i) as f64) / (i as f64 - (7 - i) as f64)
        })
        .collect();
    assert!(
        lams.windows(2).any(|w| (w[0] - w[1]).abs() > 1e-3),
        "{lams:?}"
    );
    for (args, says) in [
        (
            MixupArgs {
                mixup_alpha: -1.0,
                ..MixupArgs::default()
            },
            "mixup_alpha -1",
        ),
        (
            MixupArgs {
                mixup_alpha: 0.0,
                ..MixupArgs::default()
            },
            "both 0",
        ),
        (
            MixupArgs {
                prob: 1.5,
                ..MixupArgs::default()
            },
            "prob 1.5",
        ),
        (
            MixupArgs {
                cutmix_minmax: Some((0.5, 0.1)),
                ..MixupArgs::default()
            },
            "cutmix_minmax",
        ),
        (
            MixupArgs {
                num_classes: 0,
                ..MixupArgs::default()
            },
            "num_classes",
        ),
    ] {
        let error = Mixup::new(args, Layout::Chw).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
    }
    assert!(mix(MixupArgs::default()).check(DType::U8).is_err());
    let cutmix_only = MixupArgs {
        mixup_alpha: 0.0,
        cutmix_alpha: 1.0,
        ..MixupArgs::default()
    };
    assert!(mix(cutmix_only).check(DType::U8).is_ok());
}

#[test]
fn pairs_mixed_in_one_pass_equal_pairs_mixed_through_a_copy() {
    // Every value its own, so that a box in the wrong place or layout shows.
    let (len, shape_chw, shape_hwc) = (6, [3, 4, 6], [4, 6, 3]);
    let data: Vec<u8> = (0..len * 72)
        .flat_map(|v| (v as f32 * 0.37).to_ne_bytes())
        .collect();
    for layout in [Layout::Chw, Layout::Hwc] {
        let shape = if layout == Layout::Chw {
            shape_chw
        } else {
            shape_hwc
        };
        for mode in [MixupMode::Batch, MixupMode::Pair, MixupMode::Elem] {
            for (mixup_alpha, cutmix_alpha) in [(0.8, 0.0), (0.0, 1.0), (0.8, 1.0)] {
                let m = Mixup::new(
                    MixupArgs {
                        mixup_alpha,
                        cutmix_alpha,
                        mode,
                        num_classes: 3,
                        ..MixupArgs::default()
                    },
                    layout,
                )
                .unwrap();
                for seed in 0..20 {
                    let mut got = data.clone();
                    m.apply(&mut got, &shape, DType::F32, &[0; 6], &mut Rng::new(seed));
                    let draws = m.draws(len, (4, 6), &mut Rng::new(seed));
                    let mut want = data.clone();
                    let sample = 72 * 4;
                    for i in 0..len / 2 {
                        let j = len - 1 - i;
                        let first = want[i * sample..][..sample].to_vec();
                        let second = want[j * sample..][..sample].to_vec();
                        let (a, b) = (draws[i], draws[j]);
                        let planes = Planes::of(&shape, layout);
                        mix_into(
                            &mut want[i * sample..][..sample],
                            &second,
                            a,
                            planes,
                            DType::F32,
                        );
                        mix_into(
                            &mut want[j * sample..][..sample],
                            &first,
                            b,
                            planes,
                            DType::F32,
                        );
                    }
                    assert!(
                        got == want,
                        "{layout:?} {mode:?} mixup {mixup_alpha} cutmix {cutmix_alpha} seed {seed}"
                    );
                }
            }
        }
    }
}

/// An element's (frame, channel, y, x) from its place in a sample.
type Axes = fn(usize) -> [usize; 4];

/// A clip mixes as a whole: CutMix pastes one box, drawn on the frames' height and width,
/// into every frame and channel, wherever the layout puts the frame and channel axes.
#[test]
fn cutmix_pastes_one_box_into_every_frame_of_a_clip() {
    let m = |layout| {
        Mixup::new(
            MixupArgs {
                mixup_alpha: 0.0,
                cutmix_alpha: 1.0,
                num_classes: 2,
                ..MixupArgs::default()
            },
            layout,
        )
        .unwrap()
    };
    // Five frames of 3 × 4 × 6: (frame, channel, y, x) for every element, by layout.
    let (t, c, h, w) = (5, 3, 4, 6);
    let layouts: [(&[usize], Layout, Axes); 3] = [
        (&[t, c, h, w], Layout::Chw, |i| {
            [i / 72, i / 24 % 3, i / 6 % 4, i % 6]
        }),
        (&[c, t, h, w], Layout::Chw, |i| {
            [i / 24 % 5, i / 120, i / 6 % 4, i % 6]
        }),
        (&[t, h, w, c], Layout::Hwc, |i| {
            [i / 72, i % 3, i / 18 % 4, i / 3 % 6]
        }),
    ];
    for (shape, layout, axes) in layouts {
        let per = t * c * h * w;
        for seed in 0..30 {
            // Sample 0 all 0, sample 1 all 1: the pasted box shows as 1s in sample 0.
            let mut data: Vec<u8> = (0..2 * per)
                .flat_map(|i| ((i / per) as f32).to_ne_bytes())
                .collect();
            let targets =
                m(layout).apply(&mut data, shape, DType::F32, &[0, 1], &mut Rng::new(seed));
            let first = floats(&data[..per * 4]);
            let mut boxes: Vec<std::collections::BTreeSet<(usize, usize)>> =
                vec![Default::default(); t * c];
            for (i, &v) in first.iter().enumerate() {
                let [frame, channel, y, x] = axes(i);
                if v == 1.0 {
                    boxes[frame * c + channel].insert((y, x));
                }
            }
            assert!(
                boxes.iter().all(|b| b == &boxes[0]),
                "{shape:?} seed {seed}: the box differs between frames or channels"
            );
            let lam = 1.0 - boxes[0].len() as f64 / (h * w) as f64;
            let want = 0.05 + 0.9 * lam;
            assert!(
                (targets[0] as f64 - want).abs() < 1e-6,
                "{shape:?} seed {seed}"
            );
        }
    }
}

#[test]
fn a_pair_blends_alike_at_any_alignment() {
    let values: Vec<u8> = (0..40)
        .flat_map(|v| (v as f32 * 1.7).to_ne_bytes())
        .collect();
    let (mut a, mut b) = (values[..80].to_vec(), values[80..].to_vec());
    blend_pair(&mut a, &mut b, 0.3, 0.6);
    // The same bytes one byte into a heap buffer (malloc aligns its start): not aligned for
    // f32.
    #[allow(clippy::useless_vec)]
    let mut shifted = vec![0u8; 162];
    shifted[1..81].copy_from_slice(&values[..80]);
    shifted[82..162].copy_from_slice(&values[80..]);
    let (head, tail) = shifted.split_at_mut(81);
    blend_pair(&mut head[1..], &mut tail[1..], 0.3, 0.6);
    assert_eq!((&shifted[1..81], &shifted[82..]), (&a[..], &b[..]));
    assert_ne!(&a[..], &values[..80]);
}

/// Every argument at and past its edges, one at a time: refused with a config error that
/// names it, or taken, and then a batch mixes and its labels are `num_classes` wide.
#[test]
fn every_argument_at_its_edges_is_refused_or_mixes_a_batch() {
    let floats = [
        0.0,
        -0.0,
        0.5,
        1.0,
        -1.0,
        2.0,
        1e-300,
        1e300,
        f64::MAX,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let mut cases: Vec<(&str, MixupArgs)> = Vec::new();
    let with = |set: &dyn Fn(&mut MixupArgs)| {
        let mut args = MixupArgs {
            num_classes: 8,
            ..MixupArgs::default()
        };
        set(&mut args);
        args
    };
    for v in floats {
        cases.push(("mixup_alpha", with(&|a| a.mixup_alpha = v)));
        cases.push(("cutmix_alpha", with(&|a| a.cutmix_alpha = v)));
        cases.push(("prob", with(&|a| a.prob = v)));
        cases.push(("switch_prob", with(&|a| a.switch_prob = v)));
        cases.push(("label_smoothing", with(&|a| a.label_smoothing = v)));
        for w in floats {
            cases.push(("cutmix_minmax", with(&|a| a.cutmix_minmax = Some((v, w)))));
        }
    }
    for n in [
        0,
        1,
        MAX_CLASSES,
        MAX_CLASSES + 1,
        1_000_000_000,
        1 << 62,
        usize::MAX,
    ] {
        cases.push(("num_classes", with(&|a| a.num_classes = n)));
    }
    let (mut taken, mut refused) = (0, 0);
    for (name, args) in cases {
        let case = format!("{name} in {args:?}");
        let m = match Mixup::new(args.clone(), Layout::Chw) {
            Ok(m) => m,
            Err(Error::Config(message)) => {
                assert!(message.contains(name), "{case}: {message}");
                refused += 1;
                continue;
            }
            Err(other) => panic!("{case}: {other:?}"),
        };
        taken += 1;
        assert!(m.num_classes() <= MAX_CLASSES, "{case}");
        // Labels as wide as the bound (64 MiB a row) are bounded, not worth making here.
        if m.num_classes() > 1000 {
            continue;
        }
        let mut data = samples(4);
        let targets = m.apply(
            &mut data,
            &[3, 4, 6],
            DType::F32,
            &[0, 1, 2, 3],
            &mut Rng::new(3),
        );
        assert_eq!(targets.len(), 4 * m.num_classes(), "{case}");
    }
    assert!(
        taken > 30 && refused > 100,
        "{taken} taken, {refused} refused"
    );
}
