//! Decoding, limits, crops and shapes on WAV files written here (formats whose bytes a
//! test can state exactly); real recordings in every format are the corpus tests' job.

use super::*;

/// A WAV file: `format` 1 (integer PCM) or 3 (IEEE float), `bits` per sample, interleaved
/// `samples` in [-1, 1] (written as integers scaled like torchaudio reads them back).
fn wav(rate: u32, channels: u16, format: u16, bits: u16, samples: &[f32]) -> Vec<u8> {
    let mut data = Vec::new();
    for &s in samples {
        match (format, bits) {
            (3, 32) => data.extend_from_slice(&s.to_le_bytes()),
            (1, 8) => data.push(((s * 128.0) as i32 + 128) as u8),
            (1, 16) => data.extend_from_slice(&((s * 32768.0) as i16).to_le_bytes()),
            (1, 24) => data.extend_from_slice(&((s * 8_388_608.0) as i32).to_le_bytes()[..3]),
            (1, 32) => {
                data.extend_from_slice(&((f64::from(s) * 2_147_483_648.0) as i32).to_le_bytes())
            }
            _ => unreachable!("no such test format"),
        }
    }
    let block = channels * bits / 8;
    let mut file = Vec::new();
    file.extend_from_slice(b"RIFF");
    file.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    file.extend_from_slice(b"WAVEfmt ");
    file.extend_from_slice(&16u32.to_le_bytes());
    file.extend_from_slice(&format.to_le_bytes());
    file.extend_from_slice(&channels.to_le_bytes());
    file.extend_from_slice(&rate.to_le_bytes());
    file.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
    file.extend_from_slice(&block.to_le_bytes());
    file.extend_from_slice(&bits.to_le_bytes());
    file.extend_from_slice(b"data");
    file.extend_from_slice(&(data.len() as u32).to_le_bytes());
    file.extend_from_slice(&data);
    file
}

/// Samples that are exact in every test format: multiples of 1/128.
fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i % 200) as f32 - 100.0) / 128.0).collect()
}

fn decoded(data: &[u8], mono: bool) -> Result<Waveform, Cause> {
    let mut wave = Waveform::default();
    let options = DecodeOptions {
        mono,
        max_seconds: DEFAULT_MAX_SECONDS,
    };
    decode(data, options, None, &mut wave).map(|()| wave)
}

/// Runs `pipeline` on `data`: the output values, or why it failed.
fn prepare(pipeline: &AudioPipeline, data: &[u8], seed: u64) -> Result<Vec<f32>, Cause> {
    let mut out = vec![0u8; pipeline.layout().bytes()];
    pipeline
        .preparer()
        .unwrap()
        .prepare(data, &mut Rng::new(seed), &mut out)?;
    Ok(out
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect())
}

#[test]
fn every_pcm_width_and_float_decodes_to_the_same_values() {
    let samples = ramp(1000);
    for (format, bits) in [(1, 8), (1, 16), (1, 24), (1, 32), (3, 32)] {
        let wave = decoded(&wav(8000, 1, format, bits, &samples), false)
            .unwrap_or_else(|e| panic!("{bits}-bit format {format}: {e}"));
        assert_eq!(wave.rate, 8000);
        assert_eq!(wave.planes.len(), 1);
        assert_eq!(wave.planes[0], samples, "{bits}-bit format {format}");
    }
}

#[test]
fn channels_are_kept_or_mixed_to_their_mean() {
    let left = ramp(300);
    let right: Vec<f32> = left.iter().map(|s| -s / 2.0).collect();
    let interleaved: Vec<f32> = left
        .iter()
        .zip(&right)
        .flat_map(|(&l, &r)| [l, r])
        .collect();
    let file = wav(16000, 2, 1, 16, &interleaved);
    let kept = decoded(&file, false).unwrap();
    assert_eq!(kept.planes, vec![left.clone(), right.clone()]);
    let mono = decoded(&file, true).unwrap();
    let mean: Vec<f32> = left
        .iter()
        .zip(&right)
        .map(|(l, r)| (l + r) * 0.5)
        .collect();
    assert_eq!(mono.planes, vec![mean]);
}

/// A copy of `file` with the little-endian u32 at `at` replaced.
fn patched32(file: &[u8], at: usize, value: u32) -> Vec<u8> {
    let mut file = file.to_vec();
    file[at..at + 4].copy_from_slice(&value.to_le_bytes());
    file
}

#[test]
fn a_wav_file_written_to_a_pipe_holds_the_rest_of_the_file() {
    // ffmpeg and sox writing to a pipe leave the RIFF and data sizes unknown: 2^32 - 1,
    // or 0. An empty data chunk is empty where the RIFF size is known.
    let good = wav(8000, 1, 1, 16, &ramp(800));
    let whole = decoded(&good, false).unwrap();
    for unknown in [u32::MAX, 0] {
        let piped = patched32(&patched32(&good, 4, unknown), 40, unknown);
        assert_eq!(
            decoded(&piped, false).unwrap().planes,
            whole.planes,
            "{unknown:x}"
        );
    }
    match decoded(&patched32(&good, 40, 0), false) {
        Err(Cause::Corrupt(why)) => assert!(why.contains("no audio"), "{why}"),
        other => panic!("an empty data chunk: {other:?}"),
    }
}

#[test]
fn damaged_and_hostile_files_are_refused_with_their_reason() {
    let good = wav(8000, 1, 1, 16, &ramp(800));
    let corrupt = |data: &[u8], words: &str| match decoded(data, true) {
        Err(Cause::Corrupt(why)) => assert!(why.contains(words), "{why:?} lacks {words:?}"),
        other => panic!("expected corrupt ({words}), got {other:?}"),
    };
    corrupt(&good[..good.len() - 100], "truncated");
    corrupt(&wav(8000, 1, 1, 16, &[]), "no audio");
    corrupt(&patched32(&good, 24, 0), "");
    corrupt(&patched32(&good, 24, 4_000_000_000), "sample rate");
    let mut no_channels = good.clone();
    no_channels[22..24].copy_from_slice(&0u16.to_le_bytes());
    assert!(decoded(&no_channels, true).is_err(), "0 channels");
    let mut nan = ramp(100);
    nan[50] = f32::NAN;
    corrupt(&wav(8000, 1, 3, 32, &nan), "NaN");
    let mut inf = ramp(100);
    inf[7] = f32::INFINITY;
    corrupt(&wav(8000, 1, 3, 32, &inf), "infinite");
    // A data chunk declaring 2^31 frames: refused from the header, nothing decoded.
    assert_eq!(
        decoded(
            &patched32(&patched32(&good, 4, (1 << 31) + 36), 40, 1 << 31),
            true
        )
        .unwrap_err(),
        Cause::TooLong {
            seconds: (1u64 << 30).div_ceil(8000),
            limit: u64::from(DEFAULT_MAX_SECONDS)
        }
    );
    assert_eq!(
        decoded(b"\xff\xd8\xff\xe0 not audio at all, a JPEG's start", true).unwrap_err(),
        Cause::UnknownFormat(Modality::Audio)
    );
    assert!(decoded(&good[..30], true).is_err(), "header cut short");
}

#[test]
fn audio_longer_than_the_limit_is_refused() {
    let pipeline = AudioPipeline::preset("m5").unwrap().with_max_seconds(1);
    let file = wav(8000, 1, 1, 16, &ramp(8001));
    assert_eq!(
        prepare(&pipeline, &file, 0),
        Err(Cause::TooLong {
            seconds: 2,
            limit: 1
        })
    );
    assert!(prepare(&pipeline, &wav(8000, 1, 1, 16, &ramp(8000)), 0).is_ok());
}

#[test]
fn crops_are_windows_of_the_clip_and_short_clips_are_padded() {
    // No window of 100 repeats.
    let samples: Vec<f32> = (0..1000)
        .map(|i| (crate::rng::mix64(i) % 256) as f32 / 128.0 - 1.0)
        .collect();
    let file = wav(8000, 1, 1, 16, &samples);
    let random = AudioPipeline::new(vec![AudioOp::random_crop(100)]).unwrap();
    let mut starts = std::collections::BTreeSet::new();
    for seed in 0..50 {
        let out = prepare(&random, &file, seed).unwrap();
        assert_eq!(out, prepare(&random, &file, seed).unwrap(), "deterministic");
        let start = (0..=900)
            .find(|&s| samples[s..s + 100] == out[..])
            .expect("a window");
        starts.insert(start / 100);
    }
    assert!(starts.len() > 5, "crops spread over the clip: {starts:?}");
    let center = AudioPipeline::new(vec![AudioOp::center_crop(100)]).unwrap();
    assert_eq!(prepare(&center, &file, 3).unwrap(), samples[450..550]);
    let long = AudioPipeline::new(vec![AudioOp::random_crop(1500)]).unwrap();
    let out = prepare(&long, &file, 1).unwrap();
    assert_eq!(out[..1000], samples[..]);
    assert!(out[1000..].iter().all(|&x| x == 0.0));
}

#[test]
fn a_pipeline_keeping_two_channels_refuses_a_mono_file() {
    let pipeline =
        AudioPipeline::new(vec![AudioOp::channels(2), AudioOp::random_crop(10)]).unwrap();
    assert_eq!(pipeline.sample_shape(), vec![2, 10]);
    match prepare(&pipeline, &wav(8000, 1, 1, 16, &ramp(100)), 0) {
        Err(Cause::Corrupt(why)) => assert!(why.contains("1 channels"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn presets_have_the_documented_shapes_and_run() {
    let m5 = AudioPipeline::preset("m5").unwrap();
    assert_eq!(m5.sample_shape(), vec![1, 32_000]);
    let melspec = AudioPipeline::preset("melspec").unwrap();
    assert_eq!(melspec.sample_shape(), vec![64, 401]);
    let file = wav(44_100, 2, 1, 16, &ramp(2 * 44_100 * 5));
    for pipeline in [m5, melspec, AudioPipeline::preset("melspec-val").unwrap()] {
        let out = prepare(&pipeline, &file, 9).unwrap();
        assert_eq!(out.len(), pipeline.layout().bytes() / 4);
        assert!(out.iter().all(|v| v.is_finite()), "{pipeline}");
    }
    assert!(AudioPipeline::preset("m6").is_err());
}

#[test]
fn operators_out_of_order_or_without_a_crop_are_config_errors() {
    let config = |ops| match AudioPipeline::new(ops) {
        Err(Error::Config(why)) => why,
        other => panic!("{other:?}"),
    };
    assert!(config(vec![AudioOp::resample(8000)]).contains("RandomCrop"));
    assert!(config(vec![AudioOp::random_crop(8), AudioOp::resample(8000)]).contains("order"));
    assert!(config(vec![
        AudioOp::random_crop(8000),
        AudioOp::mel_spectrogram(MelSpec::new(16_000))
    ])
    .contains("Resample"));
    assert!(config(vec![
        AudioOp::resample(8000),
        AudioOp::random_crop(8000),
        AudioOp::mel_spectrogram(MelSpec::new(16_000))
    ])
    .contains("16000 Hz"));
    match AudioOp::call("Channels", vec![crate::prep::args::Value::Int(0)], vec![]) {
        Err(Error::Config(why)) => assert!(why.contains("Channels"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// The real clips of tests/audio.
fn real_clips() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/audio");
    let mut clips: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| Modality::Audio.accepts(&p.to_string_lossy()))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    clips.sort();
    clips
}

/// The least signal-to-difference ratio between an Opus window, decoded from its
/// pre-roll, and the same frames of a full decode: the decoder's state has converged to
/// within float rounding (these clips are CELT-coded music).
const OPUS_WINDOW_SNR_DB: f64 = 100.0;

/// A window's samples against a full decode's: the same bits, except for Opus, whose
/// window decode starts from its pre-roll.
fn assert_same_audio(name: &str, got: &[f32], want: &[f32], what: &str) {
    if !name.ends_with(".opus") {
        assert!(
            got == want,
            "{name}, {what}: not the samples of a full decode"
        );
        return;
    }
    assert_eq!(got.len(), want.len(), "{name}, {what}");
    let signal: f64 = want.iter().map(|&s| f64::from(s).powi(2)).sum();
    let noise: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| f64::from(g - w).powi(2))
        .sum();
    let snr = 10.0 * (signal / noise.max(f64::MIN_POSITIVE)).log10();
    assert!(
        snr >= OPUS_WINDOW_SNR_DB,
        "{name}, {what}: {snr:.1} dB from a full decode"
    );
}

#[test]
fn a_decoded_window_holds_exactly_the_samples_of_a_full_decode() {
    for (name, data) in real_clips() {
        for mono in [false, true] {
            let full = decoded(&data, mono).unwrap();
            let total = full.frames() as u64;
            let options = DecodeOptions {
                mono,
                max_seconds: DEFAULT_MAX_SECONDS,
            };
            for window in [
                0..1000,
                100..total / 2,
                total / 3..total / 3 + 4096,
                total / 2..total,
                total - 10..total,
            ] {
                let mut asked = None;
                let mut plan = |rate: u32, frames: u64| {
                    asked = Some((rate, frames));
                    window.clone()
                };
                let mut wave = Waveform::default();
                decode(&data, options, Some(&mut plan), &mut wave).unwrap();
                assert_eq!(asked, Some((full.rate, total)), "{name}: the exact length");
                assert_eq!(wave.total, total, "{name}");
                assert!(wave.start <= window.start, "{name}");
                let at = (window.start - wave.start) as usize..(window.end - wave.start) as usize;
                for (got, all) in wave.planes.iter().zip(&full.planes) {
                    assert_same_audio(
                        &name,
                        &got[at.clone()],
                        &all[window.start as usize..window.end as usize],
                        &format!("frames {window:?}, mono {mono}"),
                    );
                }
            }
        }
    }
}

#[test]
fn lengths_are_those_the_reference_decoders_give() {
    // Frames as libmpg123 (gapless, `mpg123 -s`), opusfile (`opusinfo`) and libFLAC count
    // them: the encoder's delay and padding trimmed as a Xing/LAME tag or an Opus header
    // and last granule state, and nothing trimmed from an MP3 without a tag.
    let clips = real_clips();
    for (file, rate, frames) in [
        ("frantic.mp3", 44_100, 110_250),
        ("underground.mp3", 16_000, 32_000),
        ("transience.mp3", 44_100, 66_816),
        ("elvish_theme.opus", 48_000, 120_000),
        ("journeys_end.opus", 48_000, 96_000),
        ("the_deep_path.flac", 48_000, 60_000),
    ] {
        let (_, data) = clips.iter().find(|(n, _)| n.ends_with(file)).unwrap();
        let wave = decoded(data, false).unwrap();
        assert_eq!((wave.rate, wave.frames() as u64), (rate, frames), "{file}");
    }
}

#[test]
fn a_flac_file_behind_an_id3_tag_decodes_as_without_it() {
    let clips = real_clips();
    let (_, flac) = clips.iter().find(|(n, _)| n.ends_with(".flac")).unwrap();
    let plain = decoded(flac, false).unwrap();
    for footer in [false, true] {
        // A 1 000-byte tag body (syncsafe: 7 bits a byte), a footer when flagged.
        let mut tagged = b"ID3\x04\x00".to_vec();
        tagged.push(if footer { 0x10 } else { 0 });
        tagged.extend_from_slice(&[0, 0, (1000 / 128) as u8, (1000 % 128) as u8]);
        tagged.extend(std::iter::repeat_n(0u8, 1000 + if footer { 10 } else { 0 }));
        tagged.extend_from_slice(flac);
        let wave = decoded(&tagged, false).unwrap();
        assert_eq!((wave.rate, wave.frames()), (plain.rate, plain.frames()));
        assert_eq!(wave.planes, plain.planes);
    }
    // A tag whose length points past the stream's start is no FLAC.
    let mut wrong = b"ID3\x04\x00\x00\x00\x00\x00\x05".to_vec();
    wrong.extend_from_slice(flac);
    assert!(decoded(&wrong, false).is_err());
}

#[test]
fn a_cut_file_is_refused_whatever_window_is_asked() {
    for (name, data) in real_clips() {
        let cut = &data[..data.len() * 2 / 3];
        let options = DecodeOptions {
            mono: true,
            max_seconds: DEFAULT_MAX_SECONDS,
        };
        // A window in the part that is still there.
        let mut plan = |_: u32, _: u64| 0..100;
        let mut wave = Waveform::default();
        let result = decode(cut, options, Some(&mut plan), &mut wave);
        // Formats that state their length exactly; an MP3 does in its Xing/LAME tag.
        let exact = [".wav", ".flac", ".opus"].iter().any(|e| name.ends_with(e))
            || (name.ends_with(".mp3")
                && data[..400.min(data.len())].windows(4).any(|w| w == b"Xing"));
        if exact {
            assert!(
                matches!(result, Err(Cause::Corrupt(_))),
                "{name}: {result:?}"
            );
        }
    }
}

/// Every clip under `$NOSTALL_AUDIO_CLIPS` (e.g. the benchmark's, from
/// bench/make_audio.py): three windows of each, decoded by seeking, against a full decode.
/// Too slow for every run: `NOSTALL_AUDIO_CLIPS=bench/out/audio/clips cargo test -p
/// nostall --release --lib windows_of_every_clip -- --ignored`.
#[test]
#[ignore]
fn windows_of_every_clip_match_a_full_decode() {
    let root = std::env::var("NOSTALL_AUDIO_CLIPS").expect("NOSTALL_AUDIO_CLIPS");
    let (catalog, _) = crate::catalog::Catalog::scan(root.as_ref(), Modality::Audio).unwrap();
    let options = DecodeOptions {
        mono: true,
        max_seconds: DEFAULT_MAX_SECONDS,
    };
    for id in 0..catalog.len() as u64 {
        let data = std::fs::read(catalog.path(id)).unwrap();
        let full = decoded(&data, true).unwrap();
        let total = full.frames() as u64;
        for window in [
            0..32_000.min(total),
            total / 3..total / 2,
            total.saturating_sub(50_000)..total,
        ] {
            let mut plan = |_: u32, _: u64| window.clone();
            let mut wave = Waveform::default();
            decode(&data, options, Some(&mut plan), &mut wave).unwrap();
            let at = (window.start - wave.start) as usize..(window.end - wave.start) as usize;
            assert_same_audio(
                &catalog.path(id).display().to_string(),
                &wave.planes[0][at],
                &full.planes[0][window.start as usize..window.end as usize],
                &format!("{window:?}"),
            );
        }
    }
}

/// `ogg` with `by` added to the granule position of every page in its middle third (the
/// CRCs recomputed), as some encoders write them: positions that disagree with the frames
/// the pages hold.
fn with_granules_shifted(ogg: &[u8], by: u64) -> Vec<u8> {
    let pages = ogg_pages(ogg);
    let mut out = ogg.to_vec();
    let n = pages.len();
    for page in &pages[n / 3..2 * n / 3] {
        let page = &mut out[page.clone()];
        let granule = u64::from_le_bytes(page[6..14].try_into().unwrap());
        if granule == u64::MAX {
            continue; // no packet ends on this page
        }
        page[6..14].copy_from_slice(&(granule + by).to_le_bytes());
        fix_crc(page);
    }
    out
}

/// Ogg's page checksum, written into `page`.
fn fix_crc(page: &mut [u8]) {
    page[22..26].fill(0);
    let sum = page.iter().fold(0u32, |crc, &byte| {
        (0..8).fold(crc ^ (u32::from(byte) << 24), |c, _| {
            (c << 1) ^ if c & 0x8000_0000 != 0 { 0x04c1_1db7 } else { 0 }
        })
    });
    page[22..26].copy_from_slice(&sum.to_le_bytes());
}

/// Where each page of `ogg` lies.
fn ogg_pages(ogg: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut pages = Vec::new();
    let mut at = 0;
    while at < ogg.len() {
        assert_eq!(&ogg[at..at + 4], b"OggS");
        let segments = usize::from(ogg[at + 26]);
        let body: usize = ogg[at + 27..at + 27 + segments]
            .iter()
            .map(|&s| usize::from(s))
            .sum();
        pages.push(at..at + 27 + segments + body);
        at += 27 + segments + body;
    }
    pages
}

#[test]
fn a_vorbis_comment_header_declaring_more_than_it_holds_is_refused() {
    for (name, data) in real_clips()
        .into_iter()
        .filter(|(n, _)| n.ends_with(".ogg"))
    {
        let pages = ogg_pages(&data);
        let second = pages[1].clone();
        let body = second.start + 27 + usize::from(data[second.start + 26]);
        assert_eq!(&data[body..body + 7], b"\x03vorbis", "{name}");
        let vendor = u32::from_le_bytes(data[body + 7..body + 11].try_into().unwrap()) as usize;
        let count_at = body + 11 + vendor;
        // The vendor string, the comment count, then the first comment's length, each
        // declared past the header's end.
        for (at, what) in [
            (body + 7, "vendor string"),
            (count_at, "comments in"),
            (count_at + 4, "comment past"),
        ] {
            let mut crafted = data.clone();
            if at == count_at + 4
                && u32::from_le_bytes(data[count_at..count_at + 4].try_into().unwrap()) == 0
            {
                continue; // no comment to lie about
            }
            crafted[at..at + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
            fix_crc(&mut crafted[second.clone()]);
            match decoded(&crafted, true) {
                Err(Cause::Corrupt(why)) => assert!(why.contains(what), "{name}: {why}"),
                other => panic!("{name} ({what}): {other:?}"),
            }
        }
        // The honest file still decodes.
        decoded(&data, true).unwrap();
    }
}

#[test]
fn vorbis_windows_are_placed_by_frame_count_not_granule_position() {
    for (name, data) in real_clips()
        .into_iter()
        .filter(|(n, _)| n.ends_with(".ogg"))
    {
        let original = decoded(&data, true).unwrap();
        let shifted = with_granules_shifted(&data, 448);
        assert_ne!(shifted, data);
        // A full decode does not read granule positions (but for the last page's): the
        // same samples.
        let full = decoded(&shifted, true).unwrap();
        assert_eq!(full.planes, original.planes, "{name}");
        let total = full.frames() as u64;
        for start in (0..total - 4096).step_by(1531) {
            let window = start..start + 4096;
            let mut asked = None;
            let mut plan = |_: u32, frames: u64| {
                asked = Some(frames);
                window.clone()
            };
            let options = DecodeOptions {
                mono: true,
                max_seconds: DEFAULT_MAX_SECONDS,
            };
            let mut wave = Waveform::default();
            decode(&shifted, options, Some(&mut plan), &mut wave).unwrap();
            assert_eq!(asked, Some(total), "{name}: the length by count");
            assert_eq!(wave.start, window.start, "{name}: decoded as a window");
            assert_eq!(
                wave.planes[0][..],
                full.planes[0][window.start as usize..window.end as usize],
                "{name}, frames {window:?}"
            );
        }
    }
}

/// A caller's function for the tests: records the shapes it was given and does `kernel`.
struct Recorded {
    kernel: fn(&mut [f32]),
    shapes: std::sync::Mutex<Vec<Vec<usize>>>,
}

impl crate::user_code::function::UserFn for Recorded {
    fn name(&self) -> &str {
        "recorded"
    }

    fn apply(
        &self,
        sample: crate::user_code::function::UserSample<'_>,
        _seed: u64,
    ) -> Result<(), Cause> {
        self.shapes.lock().unwrap().push(sample.shape.to_vec());
        (self.kernel)(as_f32_mut(sample.data));
        Ok(())
    }
}

fn recorded(kernel: fn(&mut [f32])) -> (std::sync::Arc<Recorded>, AudioOp) {
    let f = std::sync::Arc::new(Recorded {
        kernel,
        shapes: Default::default(),
    });
    let op = AudioOp::user(crate::user_code::function::UserOp::new(f.clone()));
    (f, op)
}

#[test]
fn a_function_runs_on_the_waveform_before_the_spectrogram_and_on_the_sample_after() {
    let file = wav(16_000, 2, 1, 16, &ramp(2 * 8_000));
    let mel = |ops: Vec<AudioOp>| {
        let mut all = vec![
            AudioOp::channels(2),
            AudioOp::resample(16_000),
            AudioOp::random_crop(4_000),
        ];
        all.extend(ops);
        AudioPipeline::new(all).unwrap()
    };
    let spectrogram = || AudioOp::mel_spectrogram(MelSpec::new(16_000));
    let log = AudioOp::log(1e-6);
    // Silenced before the spectrogram: every value is the log of the offset.
    let (silence, op) = recorded(|w| w.fill(0.0));
    let silent = prepare(&mel(vec![op, spectrogram(), log.clone()]), &file, 3).unwrap();
    assert!(
        silent.iter().all(|&v| v == 1e-6f32.ln()),
        "{:?}",
        &silent[..4]
    );
    assert_eq!(silence.shapes.lock().unwrap()[0], vec![2, 4_000]);
    // After the spectrogram: the delivered sample, the crop drawn as without it.
    let (negate, op) = recorded(|s| s.iter_mut().for_each(|v| *v = -*v));
    let plain = prepare(&mel(vec![spectrogram(), log.clone()]), &file, 3).unwrap();
    let negated = prepare(&mel(vec![spectrogram(), log, op]), &file, 3).unwrap();
    assert!(plain.iter().zip(&negated).all(|(a, b)| *a == -*b));
    let shapes = negate.shapes.lock().unwrap();
    assert_eq!(shapes[0].len(), 3, "[channels, mels, frames]: {shapes:?}");
    // Between the spectrogram and Log (folded into it), and before the crop: refused.
    let (_, between) = recorded(|_| {});
    let log = AudioOp::log(1e-6);
    let refused = AudioPipeline::new(vec![
        AudioOp::resample(16_000),
        AudioOp::random_crop(4_000),
        spectrogram(),
        between,
        log,
    ])
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("between MelSpectrogram and Log"),
        "{refused}"
    );
    let (_, early) = recorded(|_| {});
    let refused = AudioPipeline::new(vec![early, AudioOp::random_crop(10)]).unwrap_err();
    assert!(refused.to_string().contains("before the crop"), "{refused}");
}

/// The pipeline that runs `op`: the fewest operators around it that make one (none where
/// the resampling its spectrogram needs cannot be).
fn around(op: &AudioOp) -> Result<Vec<AudioOp>> {
    let mono = AudioOp::channels(1);
    let crop = AudioOp::random_crop(800);
    let small_mel = || {
        AudioOp::mel_spectrogram(MelSpec {
            n_fft: 256,
            win_length: 256,
            hop_length: 128,
            n_mels: 16,
            ..MelSpec::new(16_000)
        })
    };
    Ok(match op.stage() {
        Stage::Channels(_) => vec![op.clone(), crop],
        Stage::Resample { .. } => vec![mono, op.clone(), crop],
        Stage::RandomCrop { .. } | Stage::CenterCrop { .. } => vec![mono, op.clone()],
        Stage::MelSpectrogram(spec) => vec![
            mono,
            AudioOp::call("Resample", vec![spec.sample_rate.into()], vec![])?,
            AudioOp::random_crop(spec.n_fft.max(800)),
            op.clone(),
        ],
        Stage::Log { .. } => vec![
            mono,
            AudioOp::resample(16_000),
            crop,
            small_mel(),
            op.clone(),
        ],
        Stage::Spectrogram(_) => vec![
            mono,
            AudioOp::resample(16_000),
            crop,
            small_mel(),
            AudioOp::log(1e-6),
            op.clone(),
        ],
        Stage::User(_) => unreachable!("no text makes a function"),
    })
}

/// Every audio operator's every parameter at and past its edges, and given the wrong
/// kind, as the image operators' are: refused with a config error naming the operator, or
/// made into an operator that prepares a real clip and returns, its sample and its
/// spectrogram's work within their bounds (nothing is timed).
#[test]
fn every_audio_argument_at_its_edges_is_refused_or_runs_bounded() {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use crate::prep::args::Value;
    use crate::prep::image::op::extremes::extremes;
    let (mut accepted, mut refused) = (0, 0);
    for declaration in DECLARATIONS {
        let (name, params) = (declaration.name, declaration.params);
        // The required parameter (a crop's length, a rate; a mask's width, which fits the
        // spectrogram `around` makes) where it is not the one tried.
        let required = match name {
            "FrequencyMasking" | "TimeMasking" => 8,
            _ => 16_000,
        };
        for param in params {
            for value in extremes(param.kind) {
                let mut keywords = vec![(param.name.to_string(), value.clone())];
                if let Some(needed) = params.iter().find(|p| p.default.is_none()) {
                    if needed.name != param.name {
                        keywords.push((needed.name.to_string(), Value::Int(required)));
                    }
                }
                let case = format!("{name}({}={value})", param.name);
                let op = match AudioOp::call(name, vec![], keywords) {
                    Ok(op) => op,
                    Err(Error::Config(message)) => {
                        let lower = message.to_lowercase();
                        assert!(lower.contains(&name.to_lowercase()), "{case}: {message}");
                        refused += 1;
                        continue;
                    }
                    Err(other) => panic!("{case}: not a config error: {other:?}"),
                };
                let pipeline = match around(&op).and_then(AudioPipeline::new) {
                    Ok(pipeline) => pipeline,
                    Err(Error::Config(_)) => {
                        refused += 1;
                        continue;
                    }
                    Err(other) => panic!("{case}: not a config error: {other:?}"),
                };
                accepted += 1;
                let bytes = pipeline.layout().bytes();
                assert!(bytes <= 1 << 30, "{case}: a sample of {bytes} bytes");
                if let Some(mel) = &pipeline.mel {
                    let transformed = pipeline.channels * mel.frames(pipeline.length) * mel.n_fft;
                    assert!(transformed <= MAX_TRANSFORMED, "{case}");
                }
                // Samples past 4 MiB are bounded by the batch's check, not worth running.
                if bytes > 1 << 22 {
                    continue;
                }
                let channels = u16::try_from(pipeline.channels).unwrap();
                let clip = wav(22_050, channels, 1, 16, &ramp(4410 * usize::from(channels)));
                let values = catch_unwind(AssertUnwindSafe(|| prepare(&pipeline, &clip, 1)))
                    .unwrap_or_else(|_| panic!("{case} panicked"))
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                assert_eq!(values.len() * 4, bytes, "{case}");
            }
        }
    }
    assert!(
        accepted > 50 && refused > 500,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn an_odd_n_fft_makes_torchs_frames_and_runs() {
    // torch.stft(center=True) pads n_fft // 2 each side and fits a frame every hop:
    // 1 + (len + 2 · (n_fft // 2) − n_fft) // hop, one fewer for an odd n_fft.
    let odd = MelSpec {
        n_fft: 3,
        win_length: 3,
        hop_length: 1,
        n_mels: 4,
        ..MelSpec::new(16_000)
    };
    let even = MelSpec {
        n_fft: 4,
        win_length: 4,
        ..odd
    };
    assert_eq!((odd.frames(10), even.frames(10)), (10, 11));
    let pipeline = AudioPipeline::new(vec![
        AudioOp::channels(1),
        AudioOp::resample(16_000),
        AudioOp::random_crop(10),
        AudioOp::mel_spectrogram(odd),
    ])
    .unwrap();
    let values = prepare(&pipeline, &wav(16_000, 1, 1, 16, &ramp(10)), 0).unwrap();
    assert_eq!(values.len(), 4 * 10);
}

#[test]
fn masks_run_on_the_spectrogram_as_delivered_in_the_order_written() {
    use crate::prep::args::Value;
    let file = wav(16_000, 2, 1, 16, &ramp(2 * 8_000));
    let with = |ops: Vec<AudioOp>| {
        let mut all = vec![
            AudioOp::channels(2),
            AudioOp::resample(16_000),
            AudioOp::random_crop(4_000),
            AudioOp::mel_spectrogram(MelSpec {
                n_mels: 32,
                ..MelSpec::new(16_000)
            }),
            AudioOp::log(1e-6),
        ];
        all.extend(ops);
        AudioPipeline::new(all)
    };
    let mask = |name: &str, param: i64| AudioOp::call(name, vec![Value::Int(param)], vec![]);
    let (freq, time) = (
        mask("FrequencyMasking", 12).unwrap(),
        mask("TimeMasking", 8).unwrap(),
    );
    let plain = with(vec![]).unwrap();
    let masked = with(vec![freq.clone(), time.clone(), freq.clone()]).unwrap();
    assert_eq!(masked.sample_shape(), vec![2, 32, 21]);
    let mut zeros = 0;
    for seed in 0..20 {
        let (a, b) = (
            prepare(&plain, &file, seed).unwrap(),
            prepare(&masked, &file, seed).unwrap(),
        );
        assert_eq!(b, prepare(&masked, &file, seed).unwrap(), "deterministic");
        // The same crop underneath, each value kept or masked to 0.
        assert!(a.iter().all(|&v| v != 0.0));
        assert!(a.iter().zip(&b).all(|(x, y)| y == x || *y == 0.0));
        zeros += b.iter().filter(|&&v| v == 0.0).count();
    }
    assert!(zeros > 0, "masks were drawn");

    // A function between the masks sees the sample as the masks before it left it.
    let (ones, fill) = recorded(|s| s.fill(1.0));
    let after = with(vec![fill.clone(), time.clone()]).unwrap();
    let before = with(vec![time.clone(), fill]).unwrap();
    let (masked_ones, all_ones) = (
        prepare(&after, &file, 4).unwrap(),
        prepare(&before, &file, 4).unwrap(),
    );
    assert_eq!(ones.shapes.lock().unwrap()[0], vec![2, 32, 21]);
    assert!(all_ones.iter().all(|&v| v == 1.0));
    assert!(masked_ones.iter().all(|&v| v == 1.0 || v == 0.0));

    // Refused: wider than the spectrogram, without one, or before Log (folded into it).
    let why = with(vec![mask("TimeMasking", 22).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("TimeMasking: time_mask_param 22 is more than the spectrogram's 21 frames"),
        "{why}"
    );
    let why = with(vec![mask("FrequencyMasking", 33).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(why.contains("32 mel bands"), "{why}");
    let no_spectrogram = vec![AudioOp::random_crop(100), freq.clone()];
    let why = AudioPipeline::new(no_spectrogram).unwrap_err().to_string();
    assert!(
        why.contains("FrequencyMasking applies to a spectrogram"),
        "{why}"
    );
    let before_log = vec![
        AudioOp::resample(16_000),
        AudioOp::random_crop(4_000),
        AudioOp::mel_spectrogram(MelSpec::new(16_000)),
        time,
        AudioOp::log(1e-6),
    ];
    let why = AudioPipeline::new(before_log).unwrap_err().to_string();
    assert!(
        why.contains("Log after TimeMasking") && why.contains("order"),
        "{why}"
    );
}

/// The fingerprint of a saved state's pipeline: as it was before the operators were
/// declared, so that a state saved then resumes.
#[test]
fn a_pipelines_fingerprint_is_as_it_was() {
    let hann = "Resample { rate: 8000, quality: ResampleQuality { lowpass_width: 6, rolloff: \
                0.99, window: Hann } }";
    assert_eq!(
        AudioPipeline::preset("m5").unwrap().fingerprint(),
        format!("audio [Channels(1), {hann}, RandomCrop {{ length: 32000 }}]")
    );
    assert_eq!(
        AudioPipeline::preset("melspec-val").unwrap().fingerprint(),
        "audio [Channels(1), Resample { rate: 16000, quality: ResampleQuality { lowpass_width: \
         6, rolloff: 0.99, window: Hann } }, CenterCrop { length: 64000 }, \
         MelSpectrogram(MelSpec { sample_rate: 16000, n_fft: 400, win_length: 400, \
         hop_length: 160, f_min: 0.0, f_max: 8000.0, n_mels: 64, power: 2.0, mel_scale: Htk, \
         slaney_norm: false }), Log { offset: 1e-6 }]"
    );
    let kaiser = AudioPipeline::new(vec![
        AudioOp::channels(2),
        AudioOp::resample_with(
            22_050,
            ResampleQuality::kaiser(64, 0.947_593_716_739_959_6, 1.0 / 9.0),
        ),
        AudioOp::center_crop(40_000),
        AudioOp::mel_spectrogram(MelSpec {
            n_mels: 80,
            mel_scale: MelScale::Slaney,
            slaney_norm: true,
            ..MelSpec::new(22_050)
        }),
        AudioOp::log(1.0 / 3.0),
        recorded(|_| {}).1,
    ])
    .unwrap();
    assert_eq!(
        kaiser.fingerprint(),
        "audio [Channels(2), Resample { rate: 22050, quality: ResampleQuality { lowpass_width: \
         64, rolloff: 0.9475937167399596, window: Kaiser { beta: 0.1111111111111111 } } }, \
         CenterCrop { length: 40000 }, MelSpectrogram(MelSpec { sample_rate: 22050, n_fft: \
         400, win_length: 400, hop_length: 200, f_min: 0.0, f_max: 11025.0, n_mels: 80, \
         power: 2.0, mel_scale: Slaney, slaney_norm: true }), Log { offset: 0.33333334 }, \
         User(Python(recorded))]"
    );
}
