//! Audio datasets end to end, on real recorded clips (tests/audio, every format): folders
//! and tar shards, presets, determinism across thread counts, resume, and hostile files
//! among the good ones.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nostall::dataset;
use nostall::prep::AudioPipeline;
use nostall::storage::{LocalDir, LocalFiles, ReadMode, Source, TarShards};
use nostall::{Catalog, Cause, Error, ErrorPolicy, Loader, LoaderConfig, Modality, Pipeline};

/// The real clips, by file name.
fn clips() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/audio");
    let mut clips: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| Modality::Audio.accepts(&p.to_string_lossy()))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read(&p).unwrap(),
            )
        })
        .collect();
    clips.sort();
    assert_eq!(clips.len(), 12, "the clips of tests/audio");
    clips
}

/// The clips in two class folders (by format family), each written `copies` times.
fn class_folder(root: &Path, copies: usize) {
    for (name, bytes) in clips() {
        let class = if name.ends_with(".wav") || name.ends_with(".flac") {
            "lossless"
        } else {
            "lossy"
        };
        fs::create_dir_all(root.join(class)).unwrap();
        for copy in 0..copies {
            fs::write(root.join(class).join(format!("{copy}-{name}")), &bytes).unwrap();
        }
    }
}

fn config(preset: &str, threads: usize) -> LoaderConfig {
    let mut config = LoaderConfig::new(Pipeline::preset(preset, 0).unwrap());
    config.plan.batch_size = 4;
    config.plan.seed = 3;
    config.prep_threads = threads;
    config.on_error = ErrorPolicy::Skip;
    config
}

fn folder_loader(root: &Path, config: LoaderConfig) -> Loader {
    let data = dataset::open(root.to_str().unwrap(), ReadMode::Cached, Modality::Audio).unwrap();
    Loader::new(data.catalog, data.source, config).unwrap()
}

/// Ids, bytes and skips of one epoch.
fn run(loader: &Loader, epoch: u64) -> (Vec<u64>, Vec<u8>, BTreeMap<&'static str, u64>) {
    let mut epoch = loader.epoch(epoch).unwrap();
    let (mut ids, mut bytes) = (Vec::new(), Vec::new());
    for batch in epoch.by_ref() {
        let batch = batch.unwrap();
        let values = batch.as_f32().unwrap();
        assert!(values.iter().all(|v| v.is_finite()));
        ids.extend_from_slice(batch.ids());
        bytes.extend_from_slice(batch.data());
    }
    (ids, bytes, epoch.stats().skipped)
}

#[test]
fn every_format_loads_through_both_presets_identically_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path(), 1);
    for (preset, shape) in [("m5", vec![4, 1, 32_000]), ("melspec", vec![4, 64, 401])] {
        let one = folder_loader(dir.path(), config(preset, 1));
        let mut first = one.epoch(0).unwrap();
        let batch = first.next().unwrap().unwrap();
        assert_eq!(batch.shape(), shape, "{preset}");
        // Two classes, by sorted folder name.
        assert!(batch.labels().iter().all(|&l| l == 0 || l == 1));
        drop((batch, first));
        let reference = run(&one, 0);
        assert_eq!(
            reference.0.len(),
            clips().len(),
            "{preset}: every clip, none skipped: {:?}",
            reference.2
        );
        assert!(reference.2.is_empty());
        for threads in [2, 4] {
            let other = run(&folder_loader(dir.path(), config(preset, threads)), 0);
            assert_eq!(other, reference, "{preset} with {threads} threads");
        }
        let next_epoch = run(&one, 1);
        assert_ne!(
            next_epoch.1, reference.1,
            "{preset}: crops differ between epochs"
        );
    }
}

#[test]
fn a_resumed_epoch_yields_exactly_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path(), 2);
    let loader = folder_loader(dir.path(), config("m5", 2));
    let (ids, bytes, _) = run(&loader, 2);
    let mut epoch = loader.epoch(2).unwrap();
    let head = epoch.next().unwrap().unwrap();
    let saved = loader.checkpoint(&epoch);
    drop((head, epoch));
    let mut rest = loader.resume_saved(&saved).unwrap();
    let (mut tail_ids, mut tail_bytes) = (Vec::new(), Vec::new());
    for batch in rest.by_ref() {
        let batch = batch.unwrap();
        tail_ids.extend_from_slice(batch.ids());
        tail_bytes.extend_from_slice(batch.data());
    }
    assert_eq!(tail_ids, ids[4..]);
    assert_eq!(tail_bytes, bytes[4 * 32_000 * 4..]);
}

/// A tar header for a member of `len` bytes.
fn tar_header(name: &str, len: usize) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{len:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..262].copy_from_slice(b"ustar");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

fn append(tar: &mut Vec<u8>, name: &str, data: &[u8]) {
    tar.extend_from_slice(&tar_header(name, data.len()));
    tar.extend_from_slice(data);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
}

#[test]
fn webdataset_shards_of_audio_with_labels_load_like_folders() {
    let dir = tempfile::tempdir().unwrap();
    let clips = clips();
    for (shard, part) in clips.chunks(4).enumerate() {
        let mut tar = Vec::new();
        for (i, (name, bytes)) in part.iter().enumerate() {
            let key = format!("sample{shard}{i}");
            let ext = name.rsplit('.').next().unwrap();
            append(&mut tar, &format!("{key}.{ext}"), bytes);
            append(
                &mut tar,
                &format!("{key}.cls"),
                format!("{}", i % 2).as_bytes(),
            );
        }
        tar.resize(tar.len() + 1024, 0);
        fs::write(dir.path().join(format!("shard-{shard}.tar")), tar).unwrap();
    }
    let data = dataset::open(
        dir.path().to_str().unwrap(),
        ReadMode::Cached,
        Modality::Audio,
    )
    .unwrap();
    assert_eq!(data.format, dataset::Format::TarShards);
    assert_eq!(data.catalog.len(), clips.len());
    let loader = Loader::new(data.catalog, data.source, config("melspec", 2)).unwrap();
    let (ids, _, skipped) = run(&loader, 0);
    assert_eq!(ids.len(), clips.len());
    assert!(skipped.is_empty());
    // The same shards opened for images hold no samples.
    let store = Arc::new(LocalDir::new(dir.path()).unwrap());
    assert!(TarShards::open(store, Modality::Image).is_err());
}

#[test]
fn a_pipeline_of_another_modality_than_the_dataset_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path(), 1);
    let data = dataset::open(
        dir.path().to_str().unwrap(),
        ReadMode::Cached,
        Modality::Audio,
    )
    .unwrap();
    let images = LoaderConfig::new(Pipeline::imagenet_train(32));
    match Loader::new(data.catalog, data.source, images) {
        Err(Error::Config(why)) => assert!(why.contains("audio files"), "{why}"),
        other => panic!("{other:?}"),
    }
    // And a folder of audio has no images.
    assert!(dataset::open(
        dir.path().to_str().unwrap(),
        ReadMode::Cached,
        Modality::Image
    )
    .is_err());
}

/// A WAV header over `data`, with fields as given (they may lie).
fn wav_header(rate: u32, channels: u16, format: u16, bits: u16, data_len: u32) -> Vec<u8> {
    let block = channels.wrapping_mul(bits / 8);
    let mut h = Vec::new();
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&36u32.wrapping_add(data_len).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&format.to_le_bytes());
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&rate.wrapping_mul(u32::from(block)).to_le_bytes());
    h.extend_from_slice(&block.to_le_bytes());
    h.extend_from_slice(&bits.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_len.to_le_bytes());
    h
}

fn float_wav(samples: &[f32]) -> Vec<u8> {
    let mut file = wav_header(16_000, 1, 3, 32, (samples.len() * 4) as u32);
    for s in samples {
        file.extend_from_slice(&s.to_le_bytes());
    }
    file
}

/// Hostile files and how each must end: `None` is delivered, `Some(kind)` skipped so.
fn hostile(root: &Path) -> Vec<(String, Option<&'static str>)> {
    let bad = root.join("zz-hostile");
    fs::create_dir_all(&bad).unwrap();
    let clips = clips();
    let clip = |name: &str| clips.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let (wav, flac, mp3, ogg, opus) = (
        clip("knolls.wav"),
        clip("northerners.flac"),
        clip("frantic.mp3"),
        clip("heroes_rite.ogg"),
        clip("elvish_theme.opus"),
    );
    // One byte of an Opus page's audio changed: its checksum no longer holds.
    let mut flipped_opus = opus.clone();
    let middle = flipped_opus.len() / 2;
    flipped_opus[middle] ^= 0x40;
    let mut long = wav_header(8_000, 1, 1, 16, 8_000 * 2 * 601);
    long.resize(long.len() + 8_000 * 2 * 601, 0);
    let mut nan = vec![0.25f32; 16_000];
    nan[9_000] = f32::NAN;
    let mut inf = vec![0.25f32; 16_000];
    inf[3] = f32::NEG_INFINITY;
    let mut zero_rate = wav.clone();
    zero_rate[24..28].copy_from_slice(&0u32.to_le_bytes());
    let mut zero_channels = wav.clone();
    zero_channels[22..24].copy_from_slice(&0u16.to_le_bytes());
    let mut absurd_rate = wav.clone();
    absurd_rate[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    // A WAV data chunk claiming 4 GB in a file of 110 kB: damaged.
    let mut beyond_riff = wav.clone();
    beyond_riff[40..44].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    // A FLAC stream declaring 2^36 - 1 samples (STREAMINFO's 36-bit total): refused by
    // duration before decoding.
    let mut absurd_length = flac.clone();
    absurd_length[21] |= 0x0F;
    absurd_length[22..26].fill(0xFF);
    let noise: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let files: Vec<(&str, Vec<u8>, Option<&'static str>)> = vec![
        ("empty.wav", Vec::new(), Some("empty")),
        (
            "header-only.wav",
            wav_header(8_000, 1, 1, 16, 0),
            Some("corrupt"),
        ),
        (
            "truncated.wav",
            wav[..wav.len() / 2].to_vec(),
            Some("corrupt"),
        ),
        (
            "truncated.flac",
            flac[..flac.len() / 2].to_vec(),
            Some("corrupt"),
        ),
        ("header-cut.flac", flac[..40].to_vec(), Some("corrupt")),
        // Its Xing tag states the frames: the file holds half of them.
        (
            "truncated.mp3",
            mp3[..mp3.len() / 2].to_vec(),
            Some("corrupt"),
        ),
        (
            "truncated.opus",
            opus[..opus.len() / 2].to_vec(),
            Some("corrupt"),
        ),
        ("header-cut.opus", opus[..60].to_vec(), Some("corrupt")),
        ("checksum.opus", flipped_opus, Some("corrupt")),
        ("rate-zero.wav", zero_rate, Some("corrupt")),
        ("no-channels.wav", zero_channels, Some("corrupt")),
        ("absurd-rate.wav", absurd_rate, Some("corrupt")),
        ("beyond-riff.wav", beyond_riff, Some("corrupt")),
        ("absurd-length.flac", absurd_length, Some("too-long")),
        ("eleven-minutes.wav", long, Some("too-long")),
        ("nan.wav", float_wav(&nan), Some("corrupt")),
        ("infinite.wav", float_wav(&inf), Some("corrupt")),
        ("noise.mp3", noise.clone(), Some("unknown-format")),
        ("noise.ogg", noise, Some("unknown-format")),
        (
            "text.flac",
            b"not audio, a note\n".to_vec(),
            Some("unknown-format"),
        ),
        (
            "jpeg-named.wav",
            vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 16, b'J', b'F', b'I', b'F', 0],
            Some("unknown-format"),
        ),
        // Wrong extensions on good files: decoded by content.
        ("flac-named.mp3", flac.clone(), None),
        ("ogg-named.wav", ogg.clone(), None),
        ("mp3-named.flac", mp3.clone(), None),
        ("opus-named.ogg", opus.clone(), None),
    ];
    let mut expected = Vec::new();
    for (name, bytes, outcome) in files {
        fs::write(bad.join(name), bytes).unwrap();
        expected.push((format!("zz-hostile/{name}"), outcome));
    }
    expected
}

#[test]
fn hostile_audio_among_real_clips_is_skipped_by_cause_and_never_disturbs_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path(), 1);
    let clean = tempfile::tempdir().unwrap();
    class_folder(clean.path(), 1);
    let expected = hostile(dir.path());
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, outcome) in &expected {
        if let Some(kind) = outcome {
            *want.entry(kind).or_default() += 1;
        }
    }
    let delivered_hostile = expected.iter().filter(|(_, o)| o.is_none()).count();
    for threads in [1, 2, 3] {
        let mut config = config("m5-val", threads);
        config.plan.shuffle = false;
        let (catalog, _) = Catalog::scan(dir.path(), Modality::Audio).unwrap();
        let catalog = Arc::new(catalog);
        let source: Arc<dyn Source> = Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
        let loader = Loader::new(catalog.clone(), source, config.clone()).unwrap();
        let mut epoch = loader.epoch(0).unwrap();
        let mut delivered: Vec<(String, Vec<u8>)> = Vec::new();
        for batch in epoch.by_ref() {
            let batch = batch.unwrap();
            for (id, sample) in batch.ids().iter().zip(batch.data().chunks(32_000 * 4)) {
                delivered.push((catalog.relative_path(*id).to_string(), sample.to_vec()));
            }
        }
        assert_eq!(epoch.stats().skipped, want, "{threads} threads");
        let skipped: BTreeMap<String, &'static str> = epoch
            .skipped()
            .into_iter()
            .map(|e| {
                let path = e.location.to_string();
                let rel = path
                    .split("zz-hostile/")
                    .nth(1)
                    .map(|n| format!("zz-hostile/{n}"));
                (rel.unwrap_or(path), e.cause.kind())
            })
            .collect();
        for (name, outcome) in &expected {
            assert_eq!(skipped.get(name).copied(), *outcome, "{name}");
        }
        assert_eq!(delivered.len(), clips().len() + delivered_hostile);
        // The good clips come out exactly as from a folder without the hostile files.
        let clean_loader = folder_loader(clean.path(), config);
        let (_, clean_bytes, _) = run(&clean_loader, 0);
        let good: Vec<u8> = delivered
            .iter()
            .filter(|(path, _)| !path.starts_with("zz-hostile"))
            .flat_map(|(_, bytes)| bytes.clone())
            .collect();
        assert_eq!(good, clean_bytes, "{threads} threads");
    }
}

#[test]
fn under_the_error_policy_the_message_names_the_bad_clip() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path(), 1);
    let bad = dir.path().join("lossy/zz-truncated.flac");
    let flac = clips()
        .into_iter()
        .find(|(n, _)| n.ends_with(".flac"))
        .unwrap()
        .1;
    fs::write(&bad, &flac[..flac.len() / 3]).unwrap();
    let mut config = config("m5", 2);
    config.on_error = ErrorPolicy::Error;
    let loader = folder_loader(dir.path(), config);
    let error = loader
        .epoch(0)
        .unwrap()
        .find_map(Result::err)
        .expect("the truncated clip stops the epoch");
    let text = error.to_string();
    assert!(text.contains("zz-truncated.flac"), "{text}");
    match error {
        Error::Sample(e) => assert!(matches!(e.cause, Cause::Corrupt(_)), "{:?}", e.cause),
        other => panic!("{other}"),
    }
}

#[test]
fn audio_presets_and_their_errors() {
    for name in AudioPipeline::PRESETS {
        assert!(Pipeline::preset(name, 0).is_ok(), "{name}");
    }
    let why = Pipeline::preset("mel", 224).unwrap_err().to_string();
    assert!(why.contains("melspec"), "{why}");
    let _: PathBuf = Catalog::default_index_path(Path::new("/tmp"), Modality::Audio);
    assert_ne!(
        Catalog::default_index_path(Path::new("/tmp"), Modality::Audio),
        Catalog::default_index_path(Path::new("/tmp"), Modality::Image)
    );
}
