use super::*;
use crate::prep::audio::op::Stage;
use crate::prep::audio::{AudioPipeline, MelArgs, ResampleQuality};
use crate::prep::image::ImagePipeline;

fn read(text: &str) -> Operators {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} did not read: {e}"))
}

fn refused(text: &str) -> String {
    match text.parse::<Operators>() {
        Ok(ops) => panic!("{text:?} read as {ops:?}"),
        Err(e) => e.to_string(),
    }
}

/// Every preset's operators, and operators with parameters that are hard to write
/// exactly (floats without a short decimal form, a Kaiser filter, Slaney's scale).
fn examples() -> Vec<Operators> {
    let mut out: Vec<Operators> = ["train", "val"]
        .iter()
        .map(|name| Operators::Image(ImagePipeline::preset(name, 224).unwrap().ops().to_vec()))
        .collect();
    for name in AudioPipeline::PRESETS {
        let ops = AudioPipeline::preset(name).unwrap().ops().to_vec();
        out.push(Operators::Audio(ops));
    }
    let call = |name: &str, args: Vec<Value>| Op::call(name, args, Vec::new()).unwrap();
    out.push(Operators::Image(vec![
        call(
            "RandomResizedCrop",
            vec![
                (160, 192).into(),
                (0.1 / 3.0, 0.999_999_999_9).into(),
                (0.1 + 0.2, 1e300).into(),
            ],
        ),
        call("Resize", vec![(7, u32::MAX).into(), "bicubic".into()]),
        call("Resize", vec![96.into(), "bilinear".into(), false.into()]),
        call(
            "RandomApply",
            vec![
                Value::Ops(vec![
                    call("RandomInvert", vec![0.25.into()]),
                    call(
                        "RandomChoice",
                        vec![
                            Value::Ops(vec![
                                call("RandomGrayscale", vec![]),
                                call("RandomPosterize", vec![2.into()]),
                            ]),
                            Value::None,
                        ],
                    ),
                ]),
                1.0.into(),
            ],
        ),
        Op::horizontal_flip(1.0 / 3.0),
        call("RandomSolarize", vec![(255.0 / 7.0).into(), 0.1.into()]),
        call("RandomPosterize", vec![3.into()]),
        Op::normalize(
            [1.0 / 3.0, -0.0, 1e-30],
            [f32::MIN_POSITIVE.into(), 3.4e38, 0.1],
        ),
    ]));
    let mut mel = MelArgs {
        sample_rate: 22_050,
        n_mels: 80,
        norm: Some("slaney"),
        mel_scale: "slaney",
        ..MelArgs::default()
    }
    .spec()
    .unwrap();
    mel.f_min = 1.0 / 7.0;
    out.push(Operators::Audio(vec![
        AudioOp::channels(2),
        AudioOp::resample_with(
            22_050,
            ResampleQuality::kaiser(64, 0.947_593_716_739_959_6, 1.0 / 9.0),
        ),
        AudioOp::center_crop(1 << 20),
        AudioOp::mel_spectrogram(mel),
        AudioOp::log(1.0 / 3.0),
    ]));
    out
}

#[test]
fn operators_read_back_as_written() {
    for ops in examples() {
        let text = ops.to_string();
        assert_eq!(read(&text), ops, "{text}");
        assert_eq!(read(&text).to_string(), text);
    }
}

#[test]
fn operators_are_read_as_the_python_classes_take_them() {
    let Operators::Image(val) = read(
        "[Resize(256), CenterCrop(224), Normalize((0.485, 0.456, 0.406), [0.229, 0.224, 0.225],)]",
    ) else {
        panic!("not images");
    };
    assert_eq!(val, ImagePipeline::imagenet_val(224).ops());
    assert_eq!(
        read("RandomResizedCrop(size=224 ), RandomHorizontalFlip()"),
        Operators::Image(vec![Op::random_resized_crop(224), Op::horizontal_flip(0.5)])
    );
    assert_eq!(
        read("[Resample(8000), RandomCrop(length=16000)]"),
        Operators::Audio(vec![AudioOp::resample(8000), AudioOp::random_crop(16_000)])
    );
    assert_eq!(
        read("[CenterCrop(length=400)]"),
        Operators::Audio(vec![AudioOp::center_crop(400)])
    );
    let Operators::Audio(ops) = read(
        "[RandomCrop(16000), MelSpectrogram(n_fft=512, norm=None, mel_scale=\"slaney\"), \
         Log()]",
    ) else {
        panic!("not audio");
    };
    let Stage::MelSpectrogram(&spec) = ops[1].stage() else {
        panic!("{ops:?}");
    };
    let expected = MelArgs {
        n_fft: 512,
        mel_scale: "slaney",
        ..MelArgs::default()
    };
    assert_eq!(spec, expected.spec().unwrap());
    assert_eq!((spec.win_length, spec.hop_length), (512, 256));
    assert_eq!(ops[2], AudioOp::log(1e-6));
    assert_eq!(read("[]"), Operators::Image(Vec::new()));
}

#[test]
fn text_that_is_not_operators_is_refused_saying_where_or_what() {
    let cases = [
        ("[Resize(256), Blur(3)]", "unknown operator \"Blur\""),
        ("[Log(), Blur(3)]", "unknown operator \"Blur\""),
        (
            "[Resize(256), Log()]",
            "Log is an audio operator and Resize an image",
        ),
        (
            "[Resize(256)",
            "at character 13: expected a comma or the list's closing ']'",
        ),
        (
            "Resize(256",
            "expected a comma or the operator's closing ')', found the end",
        ),
        (
            "Resize 256",
            "expected '(' after the operator's name, found \"256\"",
        ),
        ("Resize(size=((1, 2)))", "a tuple holds numbers only"),
        (
            "Resize(size='big')",
            "Resize: size takes an int or a (height, width) pair",
        ),
        (
            "Resize(size=-3)",
            "Resize: size takes an int or a (height, width) pair of ints, not -3",
        ),
        (
            "Resize(size=(1, 2, 3))",
            "size takes an int or a (height, width) pair of ints, not (1, 2, 3)",
        ),
        (
            "Resize(256, 'linear', True, 3)",
            "Resize takes at most 3 arguments (size, interpolation, antialias)",
        ),
        (
            "Resize(256, 3)",
            "Resize: interpolation takes one of \"bilinear\", \"bicubic\", \"nearest\", not 3",
        ),
        (
            "Resize(256, 'bicubic', antialias=False)",
            "Resize: antialias False is not supported with 'bicubic'",
        ),
        (
            "RandomApply([RandomApply([RandomApply([RandomApply([RandomApply([RandomInvert()])])])])])",
            "no more than 4 levels of lists of operators",
        ),
        ("Resize(height=3)", "Resize has no parameter \"height\""),
        ("Resize(size=3, size=4)", "Resize: size is given twice"),
        (
            "RandomResizedCrop(scale=(0.5, 1.0), 224)",
            "a positional argument follows",
        ),
        (
            "RandomResizedCrop(scale=(0.5, 1.0))",
            "RandomResizedCrop needs size",
        ),
        (
            "RandomResizedCrop(224, (0.9, 0.1))",
            "must satisfy 0 < lo <= hi <= 1",
        ),
        ("RandomHorizontalFlip(p=nan)", "expected a value"),
        (
            "RandomHorizontalFlip(p=+nan)",
            "RandomHorizontalFlip: p NaN is not a probability in [0, 1]",
        ),
        (
            "RandomHorizontalFlip(p=1.5)",
            "RandomHorizontalFlip: p 1.5 is not a probability in [0, 1]",
        ),
        (
            "Normalize(mean=(0.5, 0.5), std=(1, 1, 1))",
            "mean takes a tuple of 3 numbers",
        ),
        (
            "Resample(8000, resampling_method='linear')",
            "resampling_method=\"linear\"",
        ),
        ("MelSpectrogram(norm='area')", "norm=\"area\""),
        (
            "MelSpectrogram(n_fft=1)",
            "n_fft 1 must lie between 2 and 65536",
        ),
        ("Log(offset=None)", "Log: offset takes a number, not None"),
        ("[Resize(256)] Resize(1)", "expected the end of the list"),
        ("Resize(size='unterminated)", "the string's closing quote"),
        ("Resize(size=é)", "expected a value"),
    ];
    for (text, says) in cases {
        let message = refused(text);
        assert!(message.contains(says), "{text:?}: {message}");
    }
}

#[test]
fn every_cut_and_every_character_swapped_reads_or_is_refused() {
    // What the text's reader must survive from another process: any prefix, and any
    // character replaced by one that matters to the grammar (or is not ASCII).
    let text = examples()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let chars: Vec<char> = text.chars().collect();
    for end in 0..=chars.len() {
        let cut: String = chars[..end].iter().collect();
        let _ = cut.parse::<Operators>();
    }
    for at in (0..chars.len()).step_by(7) {
        for swap in ['(', ')', '[', ']', ',', '=', '\'', '-', 'e', 'é', ' '] {
            let mut changed = chars.clone();
            changed[at] = swap;
            let _ = changed.iter().collect::<String>().parse::<Operators>();
        }
    }
}

#[test]
fn audio_operators_are_read_and_written_through_their_declarations() {
    let text = "[Resample(16000), RandomCrop(16000), MelSpectrogram(n_mels=64), Log(), \
                FrequencyMasking(27), TimeMasking(40, p=0.5, iid_masks=True)]";
    let Operators::Audio(ops) = read(text) else {
        panic!("not audio");
    };
    let names: Vec<_> = ops.iter().map(AudioOp::name).collect();
    assert_eq!(
        names,
        [
            "Resample",
            "RandomCrop",
            "MelSpectrogram",
            "Log",
            "FrequencyMasking",
            "TimeMasking"
        ]
    );
    let written = Operators::Audio(ops.clone()).to_string();
    assert!(
        written.ends_with(
            "FrequencyMasking(freq_mask_param=27, iid_masks=False), \
             TimeMasking(time_mask_param=40, iid_masks=True, p=0.5)]"
        ),
        "{written}"
    );
    assert_eq!(read(&written), Operators::Audio(ops));
    assert!(AudioPipeline::new(match read(&written) {
        Operators::Audio(ops) => ops,
        other => panic!("{other:?}"),
    })
    .is_ok());
    let why = refused("[RandomCrop(16000), SpecAugment(2)]");
    assert!(
        why.contains(
            "the audio operators are Channels, Resample, RandomCrop, CenterCrop, \
                      MelSpectrogram, Log, FrequencyMasking, TimeMasking"
        ),
        "{why}"
    );
    let why = refused("[FrequencyMasking(-1)]");
    assert!(
        why.contains("FrequencyMasking: freq_mask_param takes an int"),
        "{why}"
    );
}

/// The text a pipeline's operators travel as (the agent groups jobs by it) is as it was
/// before the audio operators were declared.
#[test]
fn audio_operators_are_written_as_they_were() {
    let preset = |name| Operators::Audio(AudioPipeline::preset(name).unwrap().ops().to_vec());
    assert_eq!(
        preset("m5").to_string(),
        "[Channels(count=1), Resample(rate=8000, lowpass_filter_width=6, rolloff=0.99, \
         resampling_method='sinc_interp_hann'), RandomCrop(length=32000)]"
    );
    assert_eq!(
        preset("melspec").to_string(),
        "[Channels(count=1), Resample(rate=16000, lowpass_filter_width=6, rolloff=0.99, \
         resampling_method='sinc_interp_hann'), RandomCrop(length=64000), \
         MelSpectrogram(sample_rate=16000, n_fft=400, win_length=400, hop_length=160, \
         f_min=0.0, f_max=8000.0, n_mels=64, power=2.0, norm=None, mel_scale='htk'), \
         Log(offset=1e-6)]"
    );
    let mel = MelArgs {
        sample_rate: 22_050,
        n_mels: 80,
        norm: Some("slaney"),
        mel_scale: "slaney",
        ..MelArgs::default()
    };
    let kaiser = Operators::Audio(vec![
        AudioOp::resample_with(
            22_050,
            ResampleQuality::kaiser(64, 0.947_593_716_739_959_6, 1.0 / 9.0),
        ),
        AudioOp::mel_spectrogram(mel.spec().unwrap()),
        AudioOp::log(1.0 / 3.0),
    ]);
    assert_eq!(
        kaiser.to_string(),
        "[Resample(rate=22050, lowpass_filter_width=64, rolloff=0.9475937167399596, \
         resampling_method='sinc_interp_kaiser', beta=0.1111111111111111), \
         MelSpectrogram(sample_rate=22050, n_fft=400, win_length=400, hop_length=200, \
         f_min=0.0, f_max=11025.0, n_mels=80, power=2.0, norm='slaney', mel_scale='slaney'), \
         Log(offset=0.33333334)]"
    );
}
