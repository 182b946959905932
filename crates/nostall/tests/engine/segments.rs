//! Segments of long recordings listed by a manifest (tests/recordings: real music, FLAC
//! and Ogg Opus; WAV, MP3 and Vorbis recordings made from the clips of tests/audio): each
//! segment decodes to the frames a full decode of its recording holds there, reads only
//! its stretch of the recording where the format allows, and a bad segment or recording
//! is skipped by cause without disturbing the good ones.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use nostall::dataset::{self, Dataset};
use nostall::prep::audio::AudioOp;
use nostall::prep::{AudioPipeline, Prep};
use nostall::rng::Rng;
use nostall::storage::ReadMode;
use nostall::{Cause, ErrorPolicy, Loader, LoaderConfig, Modality, Pipeline};

fn data(dir: &str, name: &str) -> Vec<u8> {
    fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(name)).unwrap()
}

/// A 16-bit PCM WAV file of `channels` at `rate` holding `pcm` (little-endian samples).
fn wav(rate: u32, channels: u16, pcm: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + pcm.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&channels.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
    out.extend_from_slice(&(channels * 2).to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(pcm.len() as u32).to_le_bytes());
    out.extend_from_slice(pcm);
    out
}

/// Whether a recording is one of the clips (2.5 s long, carried whole).
fn is_clip(name: &str) -> bool {
    name.ends_with(".mp3") || name.ends_with(".ogg")
}

/// The recordings in `dir`, with each one's rate as decoded: the two of tests/recordings,
/// a 15 s WAV recording made of the 48 kHz stereo WAV clip's samples twelve times over,
/// and an MP3 and a Vorbis clip,
/// which are carried whole.
fn recordings(dir: &Path) -> Vec<(&'static str, u32)> {
    fs::write(
        dir.join("battle.flac"),
        data("tests/recordings", "battle.flac"),
    )
    .unwrap();
    fs::write(
        dir.join("battle.opus"),
        data("tests/recordings", "battle.opus"),
    )
    .unwrap();
    let clip = data("tests/audio", "wanderer.wav");
    let at = clip.windows(4).position(|w| w == b"data").unwrap() + 8;
    let pcm = clip[at..].repeat(12);
    fs::write(dir.join("wanderer.wav"), wav(48_000, 2, &pcm)).unwrap();
    fs::write(dir.join("frantic.mp3"), data("tests/audio", "frantic.mp3")).unwrap();
    fs::write(
        dir.join("vengeful.ogg"),
        data("tests/audio", "vengeful.ogg"),
    )
    .unwrap();
    vec![
        ("battle.flac", 16_000),
        ("battle.opus", 48_000),
        ("wanderer.wav", 48_000),
        ("frantic.mp3", 44_100),
        ("vengeful.ogg", 32_000),
    ]
}

fn open(location: &Path) -> Dataset {
    dataset::open(
        location.to_str().unwrap(),
        ReadMode::Cached,
        Modality::Audio,
    )
    .unwrap()
}

/// Prepares `bytes` with a mono pipeline that keeps `length` frames at the file's own
/// rate, from the middle (all of a segment of that length).
fn frames(bytes: &[u8], length: usize) -> Result<Vec<f32>, Cause> {
    let pipeline =
        AudioPipeline::new(vec![AudioOp::channels(1), AudioOp::center_crop(length)]).unwrap();
    let mut out = vec![0u8; length * 4];
    pipeline
        .preparer()
        .unwrap()
        .prepare(bytes, &mut Rng::new(0), &mut out)?;
    Ok(out
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect())
}

/// Sample `id`'s bytes.
fn read(data: &Dataset, id: u64) -> Result<Vec<u8>, Cause> {
    let mut bytes = Vec::new();
    data.source.read(id, &mut bytes)?;
    Ok(bytes)
}

#[test]
fn each_segment_decodes_to_its_stretch_of_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let recordings = recordings(dir.path());
    // Segments at the start, in the middle, near the end and to the end (the clips are
    // 2.5 s long, the others 10 s or more).
    let spans = |name: &str| -> [(f64, Option<f64>); 5] {
        if is_clip(name) {
            [
                (0.0, Some(1.0)),
                (0.4, Some(1.5)),
                (1.5, Some(0.9)),
                (0.75, Some(1.0)),
                (1.2, None),
            ]
        } else {
            [
                (0.0, Some(1.5)),
                (2.25, Some(2.0)),
                (8.0, Some(1.5)),
                (0.75, Some(1.0)),
                (6.2, None),
            ]
        }
    };
    let mut manifest = String::from("path,start,duration\n");
    for (name, _) in &recordings {
        for (start, duration) in spans(name) {
            let duration = duration.map_or(String::new(), |d| d.to_string());
            manifest.push_str(&format!("{name},{start},{duration}\n"));
        }
    }
    fs::write(dir.path().join("segments.csv"), manifest).unwrap();
    let data = open(&dir.path().join("segments.csv"));
    assert_eq!(data.catalog.len(), recordings.len() * 5);
    assert_eq!(data.catalog.relative_path(1), "battle.flac#t=2.25,4.25");
    for (r, &(name, rate)) in recordings.iter().enumerate() {
        let whole = fs::read(dir.path().join(name)).unwrap();
        // The whole recording, padded (its length is unknown here; the padding is zeros).
        let full = frames(&whole, rate as usize * 20).unwrap();
        let length = full.iter().rposition(|&v| v != 0.0).unwrap() + 1;
        for (s, &(start, duration)) in spans(name).iter().enumerate() {
            let id = (r * 5 + s) as u64;
            let bytes = read(&data, id).unwrap();
            let first = (start * f64::from(rate)).round() as usize;
            let frames_in =
                duration.map_or(length - first, |d| (d * f64::from(rate)).round() as usize);
            let got = frames(&bytes, frames_in).unwrap_or_else(|e| panic!("{name} {s}: {e}"));
            let expected = &full[first..first + frames_in];
            if name.ends_with(".opus") {
                // Decoded from a pre-roll, CELT-coded music matches a full decode to float
                // rounding.
                let signal: f64 = expected.iter().map(|&v| f64::from(v).powi(2)).sum();
                let noise: f64 = got
                    .iter()
                    .zip(expected)
                    .map(|(&a, &b)| f64::from(a - b).powi(2))
                    .sum();
                let snr = 10.0 * (signal / noise.max(1e-30)).log10();
                assert!(snr >= 100.0, "{name} {start}+{duration:?}: {snr:.1} dB");
            } else {
                assert!(
                    got == expected,
                    "{name} {start}+{duration:?}: not the full decode's frames"
                );
            }
            // Where the format allows, a segment carries a stretch, not the recording.
            let stretch = duration.is_some_and(|d| d <= 2.0) && !is_clip(name);
            if stretch {
                assert!(
                    (bytes.len() as f64) < whole.len() as f64 * 0.6,
                    "{name} {start}+{duration:?}: {} bytes of {}",
                    bytes.len(),
                    whole.len()
                );
            }
        }
    }
}

fn config(preset: &str, threads: usize) -> LoaderConfig {
    let mut config = LoaderConfig::new(Pipeline::preset(preset, 0).unwrap());
    config.plan.batch_size = 4;
    config.plan.seed = 5;
    config.prep_threads = threads;
    config.on_error = ErrorPolicy::Skip;
    config
}

/// Ids, bytes and skips of one epoch.
fn run(
    data: &Dataset,
    config: LoaderConfig,
    epoch: u64,
) -> (Vec<u64>, Vec<u8>, BTreeMap<&'static str, u64>) {
    let loader = Loader::new(data.catalog.clone(), data.source.clone(), config).unwrap();
    let mut epoch = loader.epoch(epoch).unwrap();
    let (mut ids, mut bytes) = (Vec::new(), Vec::new());
    for batch in epoch.by_ref() {
        let batch = batch.unwrap();
        ids.extend_from_slice(batch.ids());
        bytes.extend_from_slice(batch.data());
    }
    ids.sort_unstable();
    (ids, bytes, epoch.stats().skipped)
}

/// A manifest of good segments, with labels, and bad ones among them: past the end, after
/// the end, of a recording that is not there, of one that is not audio, of one cut short.
fn mixed(dir: &Path) -> (PathBuf, Vec<u64>) {
    let recordings = recordings(dir);
    fs::write(dir.join("notes.flac"), b"not audio at all").unwrap();
    let flac = data("tests/recordings", "battle.flac");
    fs::write(dir.join("cut.flac"), &flac[..flac.len() / 2]).unwrap();
    let mut lines = vec![
        r#"{"audio_filepath": "battle.flac", "offset": 9.0, "duration": 3.0, "label": "bad"}"#
            .to_string(),
        r#"{"audio_filepath": "wanderer.wav", "offset": 40.0, "duration": 1.0, "label": "bad"}"#
            .into(),
        r#"{"audio_filepath": "missing.flac", "offset": 1.0, "duration": 1.0, "label": "bad"}"#
            .into(),
        r#"{"audio_filepath": "notes.flac", "offset": 0.0, "duration": 1.0, "label": "bad"}"#
            .into(),
        r#"{"audio_filepath": "cut.flac", "offset": 8.0, "duration": 1.0, "label": "bad"}"#.into(),
    ];
    let bad = lines.len();
    let mut good = Vec::new();
    for (name, _) in &recordings {
        let starts = if is_clip(name) {
            [0.1, 0.6, 1.1]
        } else {
            [0.5, 3.0, 5.0]
        };
        let duration = if is_clip(name) { 1.0 } else { 4.5 };
        for start in starts {
            good.push(lines.len() as u64);
            lines.push(format!(
                r#"{{"audio_filepath": "{name}", "offset": {start}, "duration": {duration}, "text": "…", "label": "{}"}}"#,
                &name[name.len() - 3..]
            ));
        }
    }
    // The first half of the cut recording is good.
    good.push(lines.len() as u64);
    lines.push(
        r#"{"audio_filepath": "cut.flac", "offset": 0.5, "duration": 3.0, "label": "lac"}"#.into(),
    );
    assert_eq!(lines.len() - bad, good.len());
    let path = dir.join("train.jsonl");
    fs::write(&path, lines.join("\n")).unwrap();
    (path, good)
}

#[test]
fn segments_load_identically_for_any_thread_count_and_bad_ones_are_skipped_by_cause() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, good) = mixed(dir.path());
    let data = open(&manifest);
    assert_eq!(
        data.catalog.classes(),
        ["bad", "lac", "mp3", "ogg", "pus", "wav"]
    );
    for preset in ["m5", "melspec"] {
        let reference = run(&data, config(preset, 1), 0);
        assert_eq!(reference.0, good, "{preset}: every good segment, once");
        let skipped: u64 = reference.2.values().sum();
        assert_eq!(skipped, 5, "{preset}: {:?}", reference.2);
        for threads in [2, 3] {
            assert_eq!(
                run(&data, config(preset, threads), 0),
                reference,
                "{preset}, {threads} threads"
            );
        }
        assert_ne!(
            run(&data, config(preset, 2), 1).1,
            reference.1,
            "{preset}: crops differ by epoch"
        );
    }
    // Each bad segment's error names it and says why.
    let why = |id: u64| {
        read(&data, id)
            .and_then(|b| frames(&b, 8_000).map(|_| ()))
            .unwrap_err()
            .to_string()
    };
    assert!(
        why(0).contains("runs past the end of the recording"),
        "{}",
        why(0)
    );
    assert!(
        why(1).contains("after the end of the recording"),
        "{}",
        why(1)
    );
    assert!(why(2).contains("no such file: missing.flac"), "{}", why(2));
    assert!(
        why(4).contains("truncated") || why(4).contains("past the end"),
        "{}",
        why(4)
    );
    assert!(data.source.location(2).ends_with("missing.flac#t=1,2"));
}

#[test]
fn a_manifest_names_its_problems() {
    let dir = tempfile::tempdir().unwrap();
    recordings(dir.path());
    let refuse = |name: &str, text: &str| {
        fs::write(dir.path().join(name), text).unwrap();
        let location = dir.path().join(name);
        dataset::open(
            location.to_str().unwrap(),
            ReadMode::Cached,
            Modality::Audio,
        )
        .unwrap_err()
        .to_string()
    };
    let error = refuse(
        "a.csv",
        "path,start,label\nbattle.flac,1,a\nbattle.opus,x,b\n",
    );
    assert!(error.contains("a.csv, line 3"), "{error}");
    let error = refuse("b.jsonl", "{\"path\": \"battle.flac\", \"label\": 1}\n{\"path\": \"battle.opus\", \"label\": \"x\"}\n");
    assert!(error.contains("class numbers and others names"), "{error}");
    let error = refuse("c.csv", "path,label\nbattle.flac,a\nbattle.opus,\n");
    assert!(error.contains("label"), "{error}");
    let location = dir.path().join("a.csv");
    let error = dataset::open(
        location.to_str().unwrap(),
        ReadMode::Cached,
        Modality::Image,
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("an audio or a video pipeline"), "{error}");
}

#[test]
fn a_resumed_epoch_of_segments_yields_exactly_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, _) = mixed(dir.path());
    let data = open(&manifest);
    let loader = Loader::new(data.catalog.clone(), data.source.clone(), config("m5", 2)).unwrap();
    let collect = |epoch: &mut nostall::Epoch| {
        let (mut ids, mut bytes) = (Vec::new(), Vec::new());
        for batch in epoch.by_ref() {
            let batch = batch.unwrap();
            ids.extend_from_slice(batch.ids());
            bytes.extend_from_slice(batch.data());
        }
        (ids, bytes)
    };
    let (ids, bytes) = collect(&mut loader.epoch(3).unwrap());
    let mut epoch = loader.epoch(3).unwrap();
    let head = epoch.next().unwrap().unwrap();
    let saved = loader.checkpoint(&epoch);
    drop((head, epoch));
    let (tail_ids, tail_bytes) = collect(&mut loader.resume_saved(&saved).unwrap());
    assert_eq!(tail_ids, ids[4..]);
    assert_eq!(tail_bytes, bytes[4 * 32_000 * 4..]);
}

#[test]
fn a_flac_stretch_read_as_a_file_of_its_own_starts_at_its_first_frame() {
    // A segment's carried FLAC (its envelope taken off, its stated length cleared) is a
    // FLAC stream whose frames are numbered from the middle of the recording, as a file
    // cut from a longer stream can be: it decodes from its first frame, as frame 0.
    let dir = tempfile::tempdir().unwrap();
    recordings(dir.path());
    fs::write(
        dir.path().join("one.csv"),
        "path,start,duration\nbattle.flac,4.25,2\n",
    )
    .unwrap();
    let data = open(&dir.path().join("one.csv"));
    let mut carried = read(&data, 0).unwrap()[40..].to_vec();
    assert_eq!(&carried[..4], b"fLaC");
    // STREAMINFO's total (the low 36 bits of bytes 10..18 of the block, at byte 8).
    carried[8 + 13] &= 0xF0;
    carried[8 + 14..8 + 18].fill(0);
    let whole = fs::read(dir.path().join("battle.flac")).unwrap();
    let full = frames(&whole, 16_000 * 20).unwrap();
    let stretch = frames(&carried, 16_000 * 3).unwrap();
    let length = stretch.iter().rposition(|&v| v != 0.0).unwrap() + 1;
    assert!((32_000..16_000 * 3).contains(&length), "{length}");
    // Where it lies in the recording: at a frame boundary at or before 4.25 s.
    let at = (0..=68_000)
        .rev()
        .find(|&k| full[k..k + 64] == stretch[..64])
        .expect("the stretch is a stretch of the recording");
    assert!(
        at <= 68_000 && at + length >= 68_000 + 32_000,
        "{at} {length}"
    );
    assert_eq!(stretch[..length], full[at..at + length]);
}

/// `wanderer.wav` of [`recordings`] with its RIFF and data chunks' sizes set to `sizes`.
fn with_sizes(wav: &[u8], (riff, data): (u32, u32)) -> Vec<u8> {
    let mut file = wav.to_vec();
    file[4..8].copy_from_slice(&riff.to_le_bytes());
    file[40..44].copy_from_slice(&data.to_le_bytes());
    file
}

#[test]
fn a_wav_written_to_a_pipe_is_cut_anywhere_in_its_data() {
    // ffmpeg and sox writing to a pipe cannot go back to write the sizes: they leave
    // them unknown (2^32 - 1, or 0). Segments past the first MiB (5.46 s at 48 kHz
    // stereo) read as those of the same recording with its sizes written.
    let dir = tempfile::tempdir().unwrap();
    recordings(dir.path());
    let wav = fs::read(dir.path().join("wanderer.wav")).unwrap();
    assert_eq!(&wav[36..40], b"data");
    fs::write(
        dir.path().join("ffmpeg.wav"),
        with_sizes(&wav, (u32::MAX, u32::MAX)),
    )
    .unwrap();
    fs::write(dir.path().join("zeros.wav"), with_sizes(&wav, (0, 0))).unwrap();
    let spans = ["0.5,1.5", "8,1.5", "12.25,", "40,1"];
    let mut manifest = String::from("path,start,duration\n");
    for name in ["wanderer.wav", "ffmpeg.wav", "zeros.wav"] {
        for span in spans {
            manifest.push_str(&format!("{name},{span}\n"));
        }
    }
    fs::write(dir.path().join("piped.csv"), manifest).unwrap();
    let data = open(&dir.path().join("piped.csv"));
    for (s, span) in spans.iter().enumerate().take(3) {
        let written = read(&data, s as u64).unwrap();
        for piped in [1, 2] {
            let id = (piped * spans.len() + s) as u64;
            assert!(read(&data, id).unwrap() == written, "{id}: {span}");
        }
    }
    let full = frames(&wav, 48_000 * 16).unwrap();
    let got = frames(&read(&data, spans.len() as u64 + 1).unwrap(), 72_000).unwrap();
    assert!(got == full[384_000..456_000], "8 s + 1.5 s");
    // Past the end of the file's audio, a segment is still refused.
    for piped in [1, 2] {
        let error = read(&data, (piped * spans.len() + 3) as u64).unwrap_err();
        let error = error.to_string();
        assert!(
            error.contains("after the end of the recording, which lasts 15.000 s"),
            "{error}"
        );
    }
}

#[test]
fn a_flac_recording_cut_inside_its_cover_art_fails_its_own_segments_only() {
    // An interrupted download: `fLaC`, STREAMINFO, a picture block declaring a MiB
    // (padding was to follow it), and the bytes that came: the recording's frames (its
    // other blocks dropped).
    let dir = tempfile::tempdir().unwrap();
    recordings(dir.path());
    let flac = data("tests/recordings", "battle.flac");
    let mut cut = flac[..42].to_vec();
    cut.extend_from_slice(&[0x06, 0x10, 0x00, 0x00]);
    cut.extend_from_slice(&flac[8_288..]);
    fs::write(dir.path().join("cover.flac"), cut).unwrap();
    fs::write(
        dir.path().join("covers.csv"),
        "path,start,duration\nbattle.flac,1,2\ncover.flac,1,2\ncover.flac,5,2\nbattle.flac,5,2\n",
    )
    .unwrap();
    let data = open(&dir.path().join("covers.csv"));
    assert_eq!(data.catalog.len(), 4);
    for id in [1, 2] {
        let error = read(&data, id).unwrap_err().to_string();
        assert!(
            error.contains("its FLAC metadata is cut short")
                && error.contains("past the file's end"),
            "{error}"
        );
        assert!(data.source.location(id).contains("cover.flac#t="));
    }
    let (ids, _, skipped) = run(&data, config("m5", 2), 0);
    assert_eq!(ids, [0, 3]);
    assert_eq!(skipped.values().sum::<u64>(), 2, "{skipped:?}");
}

#[test]
fn segments_of_a_wav_recording_with_a_megabyte_of_tags_decode_as_without() {
    // A `LIST` chunk with a megabyte of comment in front of the data, as tag editors
    // leave lyrics or notes: carried once per recording, its segments decode as those of
    // the recording without it.
    let dir = tempfile::tempdir().unwrap();
    recordings(dir.path());
    let wav = fs::read(dir.path().join("wanderer.wav")).unwrap();
    let mut tagged = wav[..36].to_vec();
    tagged.extend_from_slice(b"LIST");
    tagged.extend_from_slice(&1_000_012u32.to_le_bytes());
    tagged.extend_from_slice(b"INFOICMT");
    tagged.extend_from_slice(&1_000_000u32.to_le_bytes());
    tagged.resize(tagged.len() + 1_000_000, b'~');
    tagged.extend_from_slice(&wav[36..]);
    let riff = tagged.len() as u32 - 8;
    tagged[4..8].copy_from_slice(&riff.to_le_bytes());
    fs::write(dir.path().join("tagged.wav"), tagged).unwrap();
    let mut manifest = String::from("path,start,duration\n");
    for name in ["wanderer.wav", "tagged.wav"] {
        for s in 0..500 {
            manifest.push_str(&format!("{name},{},1\n", f64::from(s) * 0.025));
        }
    }
    fs::write(dir.path().join("tagged.csv"), manifest).unwrap();
    let data = open(&dir.path().join("tagged.csv"));
    for s in [0, 123, 499] {
        let plain = frames(&read(&data, s).unwrap(), 48_000).unwrap();
        let tagged = read(&data, 500 + s).unwrap();
        assert!(tagged.len() > 1_000_000);
        assert!(frames(&tagged, 48_000).unwrap() == plain, "{s}");
    }
}

#[test]
fn times_past_a_day_are_refused_by_their_line() {
    let dir = tempfile::tempdir().unwrap();
    recordings(dir.path());
    fs::write(
        dir.path().join("far.jsonl"),
        concat!(
            r#"{"path": "battle.flac", "offset": 1}"#,
            "\n",
            r#"{"path": "battle.flac", "offset": 1e300, "duration": 1e300}"#,
        ),
    )
    .unwrap();
    let location = dir.path().join("far.jsonl");
    let error = dataset::open(
        location.to_str().unwrap(),
        ReadMode::Cached,
        Modality::Audio,
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("far.jsonl, line 2: the start 1e300 s is past a day"),
        "{error}"
    );
}
