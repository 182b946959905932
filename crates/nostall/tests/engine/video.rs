//! Videos end to end, on real camera footage (nostall-video's tests/footage, every codec
//! and container it holds): a folder of class folders, frames equal to decoding each
//! file from its start, the same bytes for any thread count and across resume, and
//! hostile files among the good ones skipped by cause.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use nostall::dataset;
use nostall::loader::{LoaderBuilder, LoaderSettings};
use nostall::prep::image::Layout;
use nostall::prep::video::{IndexFile, DEFAULT_INDEX_CACHE};
use nostall::prep::{DType, Operators, VideoPipeline, VideoViewsPipeline};
use nostall::storage::ReadMode;
use nostall::{ErrorPolicy, Loader, LoaderConfig, Modality, Pipeline};

/// The footage, by file name.
fn footage() -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nostall-video/tests/footage");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| Modality::Video.accepts(&p.to_string_lossy()))
        .filter(|p| !p.to_string_lossy().contains("hostile"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "the footage of nostall-video: {files:?}");
    files
}

/// The footage in two class folders (by container).
fn class_folder(root: &Path) {
    for (name, path) in footage() {
        let class = if name.ends_with(".mp4") {
            "mp4"
        } else {
            "other"
        };
        fs::create_dir_all(root.join(class)).unwrap();
        fs::copy(path, root.join(class).join(name)).unwrap();
    }
}

fn pipeline(text: &str, dtype: DType, layout: Layout) -> Pipeline {
    let Operators::Video(clip, ops) = text.parse::<Operators>().unwrap() else {
        panic!("{text} is a video's")
    };
    VideoPipeline::new(clip, ops, dtype, layout).unwrap().into()
}

fn config(pipeline: Pipeline, threads: usize) -> LoaderConfig {
    let mut config = LoaderConfig::new(pipeline);
    config.plan.batch_size = 3;
    config.plan.seed = 5;
    config.prep_threads = threads;
    config.on_error = ErrorPolicy::Skip;
    config
}

fn loader(root: &Path, config: LoaderConfig) -> Loader {
    let data = dataset::open(root.to_str().unwrap(), ReadMode::Cached, Modality::Video).unwrap();
    Loader::new(data.catalog, data.source, config).unwrap()
}

/// Ids, bytes and skips of one epoch.
fn run(loader: &Loader, epoch: u64) -> (Vec<u64>, Vec<u8>, BTreeMap<&'static str, u64>) {
    let mut epoch = loader.epoch(epoch).unwrap();
    let (mut ids, mut bytes) = (Vec::new(), Vec::new());
    for batch in epoch.by_ref() {
        let batch = batch.unwrap();
        ids.extend_from_slice(batch.ids());
        bytes.extend_from_slice(batch.data());
    }
    (ids, bytes, epoch.stats().skipped)
}

const TRAIN: &str = "[Clip(8, stride=2), Resize(72), RandomCrop(64), RandomHorizontalFlip(), \
                     ColorJitter(brightness=0.4)]";

#[test]
fn every_codec_loads_as_clips_identically_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let one = loader(
        dir.path(),
        config(pipeline(TRAIN, DType::U8, Layout::Chw), 1),
    );
    let mut first = one.epoch(0).unwrap();
    let batch = first.next().unwrap().unwrap();
    assert_eq!(batch.shape(), [3, 8, 3, 64, 64]);
    assert!(batch.labels().iter().all(|&l| l == 0 || l == 1));
    drop((batch, first));
    let reference = run(&one, 0);
    assert!(reference.2.is_empty(), "none skipped: {:?}", reference.2);
    let mut ids = reference.0.clone();
    ids.sort();
    assert_eq!(ids, (0..footage().len() as u64).collect::<Vec<_>>());
    for threads in [2, 3] {
        let other = run(
            &loader(
                dir.path(),
                config(pipeline(TRAIN, DType::U8, Layout::Chw), threads),
            ),
            0,
        );
        assert_eq!(other, reference, "{threads} threads");
    }
    assert_ne!(run(&one, 1).1, reference.1, "clips differ between epochs");
}

/// A loader of `pipeline` with `threads` that reads no epoch before it is asked for (an
/// epoch started ahead would scan videos at a time of its own).
fn one_epoch_at_a_time(pipeline: &VideoPipeline, threads: usize) -> LoaderConfig {
    let mut config = config(pipeline.clone().into(), threads);
    config.overlap_epochs = false;
    config
}

/// The training pipeline with a cache of frame indexes of `bound` bytes.
fn kept(bound: usize) -> VideoPipeline {
    let Operators::Video(clip, ops) = TRAIN.parse::<Operators>().unwrap() else {
        panic!("{TRAIN} is a video's")
    };
    VideoPipeline::new(clip, ops, DType::U8, Layout::Chw)
        .unwrap()
        .with_index_cache(bound)
}

#[test]
fn each_videos_frame_index_is_made_once_and_the_bytes_are_those_of_a_scan_at_every_read() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let n = footage().len() as u64;
    // Every read scans its video: the reference.
    let cold = kept(0);
    let scanning = loader(dir.path(), one_epoch_at_a_time(&cold, 1));
    let want = [run(&scanning, 0), run(&scanning, 1)];
    assert_eq!(cold.frame_indexes().scans(), 2 * n);
    assert!(cold.frame_indexes().is_empty());
    for threads in [1, 2] {
        let warm = kept(DEFAULT_INDEX_CACHE);
        let keeping = loader(dir.path(), one_epoch_at_a_time(&warm, threads));
        assert_eq!(
            run(&keeping, 0),
            want[0],
            "{threads} threads, the first epoch"
        );
        let indexes = warm.frame_indexes();
        assert_eq!((indexes.scans(), indexes.len() as u64), (n, n));
        assert_eq!(
            run(&keeping, 1),
            want[1],
            "{threads} threads, the second epoch"
        );
        assert_eq!(
            run(&keeping, 0),
            want[0],
            "{threads} threads, the first again"
        );
        assert_eq!(
            indexes.scans(),
            n,
            "{threads} threads: no scan after the first epoch"
        );
    }
}

#[test]
fn a_small_index_cache_keeps_what_fits_and_scans_the_rest_at_each_read() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let n = footage().len();
    let all = kept(DEFAULT_INDEX_CACHE);
    let keeping = loader(dir.path(), one_epoch_at_a_time(&all, 2));
    let want = run(&keeping, 1);
    let bound = all.frame_indexes().held_bytes() / 2;
    let half = kept(bound);
    let some = loader(dir.path(), one_epoch_at_a_time(&half, 2));
    run(&some, 0);
    let indexes = half.frame_indexes();
    let held = indexes.len();
    assert!(0 < held && held < n, "{held} of {n} kept");
    assert!(indexes.held_bytes() <= bound);
    assert_eq!(run(&some, 1), want);
    assert_eq!(
        indexes.scans() as usize,
        n + (n - held),
        "those not kept scanned again"
    );
    assert_eq!(indexes.len(), held);
}

/// The training pipeline with frame indexes kept in `file` too: a new one stands for a
/// new process.
fn kept_in(file: &IndexFile) -> VideoPipeline {
    kept(DEFAULT_INDEX_CACHE).with_index_file(DEFAULT_INDEX_CACHE, file.clone())
}

/// Two epochs of `pipeline` over `root`, and the cache written as the process ends.
fn two_epochs(root: &Path, pipeline: &VideoPipeline) -> [(Vec<u64>, Vec<u8>, Skips); 2] {
    let loader = loader(root, one_epoch_at_a_time(pipeline, 2));
    let epochs = [run(&loader, 0), run(&loader, 1)];
    pipeline.frame_indexes().flush().unwrap();
    epochs
}

type Skips = BTreeMap<&'static str, u64>;

#[test]
fn a_new_process_scans_no_video_its_dataset_indexed_before() {
    let dir = tempfile::tempdir().unwrap();
    let (root, cache) = (dir.path().join("videos"), dir.path().join("cache"));
    class_folder(&root);
    let n = footage().len() as u64;
    let file = IndexFile::at(cache.join("v.idx"), root.to_str().unwrap());
    let want = two_epochs(&root, &kept(0));
    let first = kept_in(&file);
    assert_eq!(two_epochs(&root, &first), want, "cold");
    assert_eq!(first.frame_indexes().scans(), n);
    let second = kept_in(&file);
    assert_eq!(two_epochs(&root, &second), want, "warm");
    let indexes = second.frame_indexes();
    assert_eq!((indexes.scans(), indexes.read_back()), (0, n));
    // Two videos rewritten between the runs (swapped): those two scanned again.
    let (a, b) = (root.join("mp4/av1.mp4"), root.join("mp4/h264_bframes.mp4"));
    let (bytes_a, bytes_b) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
    fs::write(&a, &bytes_b).unwrap();
    fs::write(&b, &bytes_a).unwrap();
    let want_swapped = two_epochs(&root, &kept(0));
    let swapped = kept_in(&file);
    assert_eq!(two_epochs(&root, &swapped), want_swapped, "rewritten");
    assert_eq!(swapped.frame_indexes().scans(), 2);
    // The file damaged (a byte flipped midway, then cut short): what fails is scanned
    // again, with no error, and the bytes are the same.
    let whole = fs::read(file.path()).unwrap();
    let mut flipped = whole.clone();
    flipped[whole.len() / 2] ^= 0x20;
    for bad in [flipped, whole[..whole.len() * 2 / 3].to_vec()] {
        fs::write(file.path(), bad).unwrap();
        let damaged = kept_in(&file);
        assert_eq!(two_epochs(&root, &damaged), want_swapped, "damaged");
        let scans = damaged.frame_indexes().scans();
        assert!(0 < scans && scans < n, "{scans} of {n} scanned again");
        assert_eq!(fs::read(file.path()).unwrap(), whole, "written whole again");
    }
}

#[test]
fn another_dataset_with_the_same_ids_reuses_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let (root, other) = (dir.path().join("videos"), dir.path().join("other"));
    class_folder(&root);
    class_folder(&other);
    let n = footage().len() as u64;
    let file = IndexFile::for_dataset(&[root.to_str().unwrap()]);
    let theirs = IndexFile::for_dataset(&[other.to_str().unwrap()]);
    assert_ne!(theirs.path(), file.path(), "a file each");
    let file = IndexFile::at(dir.path().join("cache/v.idx"), file.dataset());
    two_epochs(&root, &kept_in(&file));
    // Even at the same place, another dataset's name reads none of it.
    let theirs = IndexFile::at(file.path(), theirs.dataset());
    let other_process = kept_in(&theirs);
    assert_eq!(
        two_epochs(&other, &other_process),
        two_epochs(&other, &kept(0))
    );
    let indexes = other_process.frame_indexes();
    assert_eq!((indexes.scans(), indexes.read_back()), (n, 0));
}

#[test]
fn the_frame_index_cache_setting_keeps_the_file_beside_the_datasets_index() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("videos");
    class_folder(&root);
    let location = root.to_str().unwrap();
    let file = IndexFile::for_dataset(&[location]);
    let catalog = nostall::catalog::Catalog::default_index_path(&root, Modality::Video);
    assert_eq!(file.path().parent(), catalog.parent());
    let stem = |p: &Path| p.file_name().unwrap().to_string_lossy()[..16].to_string();
    assert_eq!(stem(file.path()), stem(&catalog), "named by the same hash");
    let read = |bound: &str| {
        let mut settings = LoaderSettings::default();
        settings.set("pipeline", TRAIN).unwrap();
        settings.set("frame_index_cache", bound).unwrap();
        settings.set("overlap_epochs", "false").unwrap();
        let builder = LoaderBuilder::with_settings(location, settings);
        let (loader, _) = builder.open().unwrap();
        // Written as the loader, and with it the cache, is dropped.
        run(&loader, 0)
    };
    let _ = fs::remove_file(file.path());
    let off = read("0");
    assert!(!file.path().exists(), "0 keeps none");
    assert_eq!(read("64MiB"), off, "the same bytes");
    let written = fs::metadata(file.path()).unwrap().len();
    assert!(0 < written && written <= 64 << 20);
    assert_eq!(read("64MiB"), off, "read back");
    let _ = fs::remove_file(file.path());
}

#[test]
fn each_clip_holds_the_frames_decoding_from_the_start_gives() {
    for (name, path) in footage() {
        let bytes = fs::read(&path).unwrap();
        let limits = nostall_video::Limits::default();
        let mut frames: Vec<Vec<u8>> = Vec::new();
        let mut size = (0, 0);
        nostall_video::decode_all(&bytes, &limits, &mut |_, frame| {
            size = (frame.width, frame.height);
            frames.push(frame.rgb.to_vec());
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        fs::copy(&path, dir.path().join(&name)).unwrap();
        // One frame in each of 6 segments, at its middle: the frames are known.
        let text = format!(
            "[Clip(6, sampler='spread'), CenterCrop(({}, {}))]",
            size.1, size.0
        );
        let mut config = config(pipeline(&text, DType::U8, Layout::Hwc), 2);
        config.plan.batch_size = 1;
        config.on_error = ErrorPolicy::Error;
        let (_, got, _) = run(&loader(dir.path(), config), 0);
        let n = frames.len();
        let want: Vec<u8> = (0..6)
            .flat_map(|i| frames[((2 * i + 1) * n / 12).min(n - 1)].clone())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        assert!(
            got == want,
            "{name}: the clip's frames differ from decoding from the start"
        );
    }
}

#[test]
fn channels_first_holds_the_same_values_as_frames_first() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let text = |layout: &str| {
        format!("[Clip(4, stride=3, layout='{layout}'), Resize(40), CenterCrop(32)]")
    };
    let tchw = run(
        &loader(
            dir.path(),
            config(pipeline(&text("TCHW"), DType::U8, Layout::Chw), 2),
        ),
        0,
    );
    let cthw = run(
        &loader(
            dir.path(),
            config(pipeline(&text("CTHW"), DType::U8, Layout::Chw), 2),
        ),
        0,
    );
    assert_eq!(tchw.0, cthw.0);
    let (t, c, plane) = (4, 3, 32 * 32);
    for (a, b) in tchw
        .1
        .chunks(t * c * plane)
        .zip(cthw.1.chunks(t * c * plane))
    {
        for ti in 0..t {
            for ci in 0..c {
                let x = &a[(ti * c + ci) * plane..][..plane];
                let y = &b[(ci * t + ti) * plane..][..plane];
                assert_eq!(x, y, "frame {ti} channel {ci}");
            }
        }
    }
}

#[test]
fn a_resumed_epoch_yields_exactly_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let mut config = config(pipeline(TRAIN, DType::U8, Layout::Chw), 2);
    config.plan.batch_size = 2;
    let loader = loader(dir.path(), config);
    let (ids, bytes, _) = run(&loader, 1);
    let mut epoch = loader.epoch(1).unwrap();
    let head = epoch.next().unwrap().unwrap();
    let (head_ids, head_bytes) = (head.ids().to_vec(), head.data().to_vec());
    let saved = loader.checkpoint(&epoch);
    drop((head, epoch));
    let mut rest = loader.resume_saved(&saved).unwrap();
    let (mut got_ids, mut got_bytes) = (head_ids, head_bytes);
    for batch in rest.by_ref() {
        let batch = batch.unwrap();
        got_ids.extend_from_slice(batch.ids());
        got_bytes.extend_from_slice(batch.data());
    }
    assert_eq!((got_ids, got_bytes), (ids, bytes));
}

#[test]
fn hostile_videos_among_the_footage_are_skipped_by_cause_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let good = fs::read(&footage()[0].1).unwrap();
    let bad = dir.path().join("zz-hostile");
    fs::create_dir_all(&bad).unwrap();
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    for b in &mut flipped[middle..middle + 64] {
        *b ^= 0x5a;
    }
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("empty.mp4", Vec::new()),
        (
            "noise.mkv",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("text.webm", b"not a video at all\n".to_vec()),
        ("truncated.mp4", good[..good.len() / 3].to_vec()),
        ("header-cut.mp4", good[..64].to_vec()),
    ];
    for (name, bytes) in &files {
        fs::write(bad.join(name), bytes).unwrap();
    }
    fs::write(bad.join("flipped.mp4"), &flipped).unwrap();
    let clean = tempfile::tempdir().unwrap();
    class_folder(clean.path());
    let mut config = config(pipeline(TRAIN, DType::U8, Layout::Chw), 2);
    config.plan.shuffle = false;
    let (ids, bytes, skipped) = run(&loader(dir.path(), config.clone()), 0);
    // Every hostile file but the flipped one (which may decode, concealed) is skipped.
    let count: u64 = skipped.values().sum();
    assert!(count >= files.len() as u64, "{skipped:?}");
    assert!(
        skipped
            .keys()
            .all(|k| ["empty", "corrupt", "unknown-format"].contains(k)),
        "{skipped:?}"
    );
    assert_eq!(
        ids.len() as u64 + count,
        (footage().len() + files.len() + 1) as u64
    );
    // Each skip names its file.
    let hostile = loader(dir.path(), config.clone());
    let mut epoch = hostile.epoch(0).unwrap();
    for batch in epoch.by_ref() {
        batch.unwrap();
    }
    let named: Vec<String> = epoch.skipped().iter().map(|e| e.to_string()).collect();
    for (name, _) in &files {
        assert!(
            named
                .iter()
                .any(|m| m.contains(&format!("zz-hostile/{name}"))),
            "{name}: {named:?}"
        );
    }
    // The footage comes out as from a folder without the hostile files.
    let (_, clean_bytes, _) = run(&loader(clean.path(), config), 0);
    assert_eq!(&bytes[..clean_bytes.len()], &clean_bytes[..]);
}

#[test]
fn a_manifests_segments_draw_their_clips_among_the_frames_they_show() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = String::new();
    // For each row, the frames shown within it (the index's presentation times).
    let mut wanted: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut size = (0, 0);
    let limits = nostall_video::Limits::default();
    for (name, path) in footage()
        .into_iter()
        .filter(|(n, _)| n == "h264_bframes.mp4" || n == "vp9.webm")
    {
        fs::copy(&path, dir.path().join(&name)).unwrap();
        let bytes = fs::read(&path).unwrap();
        let index = nostall_video::FrameIndex::scan(&bytes, &limits).unwrap();
        let mut frames: Vec<Vec<u8>> = Vec::new();
        nostall_video::decode_all(&bytes, &limits, &mut |_, frame| {
            size = (frame.width, frame.height);
            frames.push(frame.rgb.to_vec());
        })
        .unwrap();
        let duration = index.duration_seconds();
        for (start, end) in [
            (0.2 * duration, Some(0.6 * duration)),
            (0.5 * duration, None),
        ] {
            let shown: Vec<usize> = (0..index.len())
                .filter(|&k| index.seconds(k) >= start && end.is_none_or(|e| index.seconds(k) < e))
                .collect();
            assert!(
                shown.len() >= 4,
                "{name}: {} frames in the segment",
                shown.len()
            );
            let n = shown.len();
            wanted.push(
                (0..4)
                    .map(|i| frames[shown[(2 * i + 1) * n / 8]].clone())
                    .collect(),
            );
            let end = end.map_or(String::new(), |e| format!(", \"end\": {e}"));
            rows += &format!("{{\"video\": \"{name}\", \"start\": {start}{end}, \"label\": 1}}\n");
        }
        // A segment after the video's end shows nothing: skipped, naming the file.
        let (after, later) = (duration + 1.0, duration + 2.0);
        rows += &format!(
            "{{\"video\": \"{name}\", \"start\": {after}, \"end\": {later}, \"label\": 0}}\n"
        );
    }
    let manifest = dir.path().join("clips.jsonl");
    fs::write(&manifest, rows).unwrap();
    // The footage here shares one size; a spread clip of 4 takes the middle of each
    // quarter of the segment.
    let text = format!(
        "[Clip(4, sampler='spread'), CenterCrop(({}, {}))]",
        size.1, size.0
    );
    let mut config = config(pipeline(&text, DType::U8, Layout::Hwc), 2);
    config.plan.batch_size = 1;
    let data = dataset::open(
        manifest.to_str().unwrap(),
        ReadMode::Cached,
        Modality::Video,
    )
    .unwrap();
    let loader = Loader::new(data.catalog.clone(), data.source, config).unwrap();
    let mut epoch = loader.epoch(0).unwrap();
    let mut seen = 0;
    for batch in epoch.by_ref() {
        let batch = batch.unwrap();
        let id = batch.ids()[0] as usize;
        // Rows 0, 1 of the first video, its row 2 the skipped one; then 3, 4 and 5.
        let row = id - id / 3;
        assert_eq!(batch.labels(), [1], "row {id}");
        let want: Vec<u8> = wanted[row].concat();
        assert!(batch.data() == want, "row {id}: not the segment's frames");
        seen += 1;
    }
    assert_eq!(seen, 4);
    let skips = epoch.stats().skipped;
    assert_eq!(skips.values().sum::<u64>(), 2, "{skips:?}");
    assert_eq!(skips.get("corrupt"), Some(&2), "{skips:?}");
}

/// Two views of each video, each its own clip and crop (CVRL's pair of clips, VideoMAE's
/// repeated sampling): the same bytes for 1, 2 and 4 threads, each sample its views one
/// after another.
#[test]
fn views_of_videos_are_the_same_bytes_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    class_folder(dir.path());
    let text = "[[Clip(8, stride=2), Resize(72), RandomCrop(64), RandomHorizontalFlip()], \
                [Clip(4, layout='CTHW'), RandomResizedCrop(32), ColorJitter(brightness=0.4)]]";
    let Operators::VideoViews(views) = text.parse::<Operators>().unwrap() else {
        panic!("{text} is views of a video")
    };
    let views: Vec<VideoPipeline> = views
        .into_iter()
        .map(|(clip, ops)| VideoPipeline::new(clip, ops, DType::U8, Layout::Chw).unwrap())
        .collect();
    let pipeline = || -> Pipeline { VideoViewsPipeline::new(views.clone()).unwrap().into() };
    assert_eq!(
        pipeline().layout().views(),
        [vec![8, 3, 64, 64], vec![3, 4, 32, 32]]
    );
    let reference = run(&loader(dir.path(), config(pipeline(), 1)), 0);
    assert!(reference.2.is_empty(), "none skipped: {:?}", reference.2);
    assert_eq!(
        reference.1.len(),
        footage().len() * (8 * 3 * 64 * 64 + 3 * 4 * 32 * 32)
    );
    for threads in [2, 4] {
        let other = run(&loader(dir.path(), config(pipeline(), threads)), 0);
        assert_eq!(other, reference, "{threads} threads");
    }
}
