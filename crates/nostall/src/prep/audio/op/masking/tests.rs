use super::*;
use crate::prep::args::Value;
use crate::prep::audio::op::{AudioOp, Stage};

/// `channels` spectrograms of `mels` × `frames` distinct, non-zero values.
fn values(channels: usize, mels: usize, frames: usize) -> Vec<f32> {
    (1..=channels * mels * frames).map(|v| v as f32).collect()
}

/// The operator `name` with these keyword arguments.
fn op(name: &str, keywords: &[(&str, Value)]) -> AudioOp {
    let keywords = keywords
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    AudioOp::call(name, Vec::new(), keywords).unwrap()
}

/// `op` (a mask) applied to `values` of `channels` × `mels` × `frames`, drawing from `rng`.
fn masked(
    op: &AudioOp,
    mut values: Vec<f32>,
    (channels, mels, frames): (usize, usize, usize),
    rng: &mut Rng,
) -> Vec<f32> {
    let Stage::Spectrogram(spectral) = op.stage() else {
        panic!("{op} is not on the spectrogram");
    };
    let mut spectrogram = Spectrogram {
        values: &mut values,
        channels,
        mels,
        frames,
    };
    spectral.apply(&mut spectrogram, rng);
    values
}

/// The bands of `channel` that `after` holds at 0 where `before` did not: `(start, width)`
/// of the rows (mel bands) and of the columns (frames) all of whose values are masked.
fn band(
    before: &[f32],
    after: &[f32],
    (mels, frames): (usize, usize),
    channel: usize,
) -> ((usize, usize), (usize, usize)) {
    let plane = mels * frames;
    let zero = |m: usize, t: usize| {
        let i = channel * plane + m * frames + t;
        after[i] == 0.0 && before[i] != 0.0
    };
    let span = |hit: Vec<bool>| {
        let start = hit.iter().position(|&h| h).unwrap_or(0);
        (start, hit.iter().filter(|&&h| h).count())
    };
    let rows = span((0..mels).map(|m| (0..frames).all(|t| zero(m, t))).collect());
    let columns = span((0..frames).map(|t| (0..mels).all(|m| zero(m, t))).collect());
    (rows, columns)
}

#[test]
fn a_band_drawn_is_masked_as_the_definition_says() {
    // torchaudio's mask_along_axis: values whose index along the axis lies in
    // [start, start + width) become 0, every other value is kept, in every channel.
    let (channels, mels, frames) = (2, 5, 7);
    for (axis, start, width) in [
        (Axis::Mels, 1, 3),
        (Axis::Mels, 0, 5),
        (Axis::Frames, 2, 4),
        (Axis::Frames, 6, 1),
        (Axis::Frames, 3, 0),
    ] {
        let before = values(channels, mels, frames);
        let mut after = before.clone();
        let mut spectrogram = Spectrogram {
            values: &mut after,
            channels,
            mels,
            frames,
        };
        for channel in 0..channels {
            mask(&mut spectrogram, channel, axis, start, width);
        }
        for c in 0..channels {
            for m in 0..mels {
                for t in 0..frames {
                    let i = (c * mels + m) * frames + t;
                    let along = if axis == Axis::Mels { m } else { t };
                    let expected = if (start..start + width).contains(&along) {
                        0.0
                    } else {
                        before[i]
                    };
                    assert_eq!(
                        after[i], expected,
                        "{axis:?} {start}+{width} at {c},{m},{t}"
                    );
                }
            }
        }
    }
}

#[test]
fn widths_are_below_the_parameter_and_bands_end_within_the_axis() {
    for (widest, size) in [(1, 1), (1, 9), (5, 5), (7, 40), (40, 40), (64, 1000)] {
        let mut rng = Rng::new(widest as u64 * 1000 + size as u64);
        let (mut widths, mut starts) = (vec![0usize; widest], vec![0usize; size]);
        for _ in 0..20_000 {
            let (start, width) = draw(widest, size, &mut rng);
            assert!(width < widest, "width {width} of {widest}");
            assert!(start + width <= size, "{start}+{width} past {size}");
            widths[width] += 1;
            starts[start] += 1;
        }
        // Uniform widths: each within a third of its share.
        let share = 20_000 / widest;
        assert!(
            widths
                .iter()
                .all(|&n| n > share * 2 / 3 && n < share * 4 / 3),
            "widths {widths:?}"
        );
        // Bands start at the axis's start, and as far on as the widest one fits.
        let far = starts[size - widest..].iter().sum::<usize>();
        assert!(starts[0] > 0 && far > 0, "{widest} on {size}");
    }
    // Doubles near 1 and the largest sizes keep the band within the axis.
    let size = 1 << 28;
    let (mut rng, widest) = (Rng::new(3), size);
    for _ in 0..10_000 {
        let (start, width) = draw(widest, size, &mut rng);
        assert!(start + width <= size);
    }
}

#[test]
fn masks_are_bands_the_same_in_every_channel_or_drawn_for_each() {
    let shape @ (channels, mels, frames) = (4, 16, 30);
    let before = values(channels, mels, frames);
    let shared = op(
        "FrequencyMasking",
        &[
            ("freq_mask_param", Value::Int(8)),
            ("iid_masks", false.into()),
        ],
    );
    let own = op(
        "TimeMasking",
        &[
            ("time_mask_param", Value::Int(12)),
            ("iid_masks", true.into()),
        ],
    );
    let (mut differ, mut masked_any) = (0, 0);
    for seed in 0..200 {
        let after = masked(&shared, before.clone(), shape, &mut Rng::new(seed));
        let bands: Vec<_> = (0..channels)
            .map(|c| band(&before, &after, (mels, frames), c))
            .collect();
        assert!(bands.iter().all(|b| *b == bands[0]), "{bands:?}");
        let ((start, width), _) = bands[0];
        assert!(width < 8 && start + width <= mels);
        // Nothing but the band changed.
        let zeros = after.iter().filter(|&&v| v == 0.0).count();
        assert_eq!(zeros, channels * width * frames);

        let after = masked(&own, before.clone(), shape, &mut Rng::new(seed));
        let bands: Vec<_> = (0..channels)
            .map(|c| band(&before, &after, (mels, frames), c).1)
            .collect();
        let zeros = after.iter().filter(|&&v| v == 0.0).count();
        assert_eq!(zeros, bands.iter().map(|(_, w)| w * mels).sum::<usize>());
        assert!(bands.iter().all(|&(s, w)| w < 12 && s + w <= frames));
        differ += usize::from(bands.iter().any(|b| b.1 > 0 && *b != bands[0]));
        masked_any += usize::from(zeros > 0);
    }
    assert!(
        masked_any > 150 && differ > 100,
        "{masked_any} masked, {differ} differ"
    );
}

#[test]
fn p_caps_the_width_at_its_share_of_the_frames() {
    let shape @ (_, mels, frames) = (1, 4, 100);
    let before = values(1, mels, frames);
    let capped = op(
        "TimeMasking",
        &[
            ("time_mask_param", Value::Int(50)),
            ("p", Value::Float(0.1)),
        ],
    );
    let mut widest = 0;
    for seed in 0..500 {
        let after = masked(&capped, before.clone(), shape, &mut Rng::new(seed));
        widest = widest.max(band(&before, &after, (mels, frames), 0).1 .1);
    }
    assert_eq!(widest, 9, "below ⌊0.1 · 100⌋");
    // No room for a mask at all: the sample is left as it was.
    let none = op(
        "TimeMasking",
        &[
            ("time_mask_param", Value::Int(50)),
            ("p", Value::Float(0.0)),
        ],
    );
    assert_eq!(
        masked(&none, before.clone(), shape, &mut Rng::new(1)),
        before
    );
}

#[test]
fn the_same_generator_draws_the_same_masks() {
    let shape @ (channels, mels, frames) = (2, 32, 50);
    let before = values(channels, mels, frames);
    let time = op(
        "TimeMasking",
        &[
            ("time_mask_param", Value::Int(20)),
            ("iid_masks", true.into()),
        ],
    );
    let outputs: Vec<_> = (0..20)
        .map(|seed| masked(&time, before.clone(), shape, &mut Rng::new(seed)))
        .collect();
    for (seed, output) in outputs.iter().enumerate() {
        let again = masked(&time, before.clone(), shape, &mut Rng::new(seed as u64));
        assert_eq!(&again, output, "seed {seed}");
    }
    let distinct: std::collections::HashSet<_> = outputs
        .iter()
        .map(|o| o.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        .collect();
    assert!(distinct.len() > 10, "seeds draw different masks");
}

#[test]
fn a_mask_wider_than_its_axis_is_refused_naming_the_operator() {
    let freq = op("FrequencyMasking", &[("freq_mask_param", Value::Int(65))]);
    let time = op("TimeMasking", &[("time_mask_param", Value::Int(402))]);
    let check = |op: &AudioOp| match op.stage() {
        Stage::Spectrogram(spectral) => spectral.check(64, 401),
        _ => unreachable!(),
    };
    let why = check(&freq).unwrap_err().to_string();
    assert!(
        why.contains(
            "FrequencyMasking: freq_mask_param 65 is more than the spectrogram's 64 mel bands"
        ),
        "{why}"
    );
    let why = check(&time).unwrap_err().to_string();
    assert!(why.contains("TimeMasking: time_mask_param 402"), "{why}");
    let fits = op("TimeMasking", &[("time_mask_param", Value::Int(401))]);
    assert!(check(&fits).is_ok());
    let why = AudioOp::call(
        "TimeMasking",
        vec![Value::Int(10), false.into(), Value::Float(1.5)],
        vec![],
    )
    .unwrap_err()
    .to_string();
    assert!(
        why.contains("TimeMasking: p 1.5 is not a probability"),
        "{why}"
    );
}
