//! Hostile files and settings: every bad sample is skipped and counted by cause, or stops
//! the loader with a message naming it; every setting past its bounds is refused when
//! read; never a panic, a hang, or a silently short batch.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use std::sync::Arc;

use crate::common::{self, config, jpeg, loader, picture};
use nostall::loader::{LoaderBuilder, PipelineSetting};
use nostall::prep::args::Value;
use nostall::prep::image::codec::{encode_jpeg, Decoder, EncodePixels, DEFAULT_MAX_PIXELS};
use nostall::prep::mixup::MixupArgs;
use nostall::storage::{LocalFiles, ReadMode, Source, SourceStats};
use nostall::{Catalog, Cause, Error, ErrorPolicy, Loader, Op};

const GOOD: usize = 13;

/// A class of good JPEGs plus one of every kind of trouble; returns the file to delete
/// after indexing.
fn corpus(root: &Path) -> std::path::PathBuf {
    let good = root.join("good");
    let bad = root.join("bad");
    fs::create_dir_all(&good).unwrap();
    fs::create_dir_all(&bad).unwrap();
    for i in 0..GOOD {
        fs::write(good.join(format!("{i:02}.jpg")), jpeg(80, 60, i as u32)).unwrap();
    }
    let valid = jpeg(80, 60, 99);
    fs::write(bad.join("truncated.jpg"), &valid[..valid.len() * 2 / 3]).unwrap();
    fs::write(bad.join("empty.jpg"), b"").unwrap();
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    fs::write(bad.join("random.jpg"), noise).unwrap();
    fs::write(bad.join("text.jpg"), b"this is not an image, just a note\n").unwrap();
    fs::write(bad.join("bomb.jpg"), declare_size(&valid, 60000, 60000)).unwrap();
    // Frame headers that once left the decoder in a state that failed every later sample.
    fs::write(bad.join("zero-width.jpg"), declare_size(&valid, 0, 60)).unwrap();
    fs::write(bad.join("zero-height.jpg"), declare_size(&valid, 80, 0)).unwrap();
    fs::write(bad.join("huge.jpg"), declare_size(&valid, 65535, 65535)).unwrap();
    fs::write(bad.join("deleted.jpg"), &valid).unwrap();
    // Unusual but valid: these must be delivered, converted to RGB.
    fs::write(bad.join("png-named.jpg"), png(40, 30, png::BitDepth::Eight)).unwrap();
    fs::write(
        bad.join("sixteen-bit.png"),
        png(40, 30, png::BitDepth::Sixteen),
    )
    .unwrap();
    let cmyk: Vec<u8> = picture(40, 30, 1)
        .chunks(3)
        .flat_map(|p| [p[0], p[1], p[2], 200])
        .collect();
    fs::write(
        bad.join("cmyk.jpg"),
        encode_jpeg(&cmyk, 40, 30, EncodePixels::Cmyk, 90, false).unwrap(),
    )
    .unwrap();
    let gray: Vec<u8> = picture(40, 30, 2).chunks(3).map(|p| p[0]).collect();
    fs::write(
        bad.join("gray.jpg"),
        encode_jpeg(&gray, 40, 30, EncodePixels::Gray, 90, true).unwrap(),
    )
    .unwrap();
    bad.join("deleted.jpg")
}

const DELIVERABLE: usize = GOOD + 4;

/// Rewrites the frame header (SOF0 or SOF2) of a JPEG to declare another size.
fn declare_size(jpeg: &[u8], width: u16, height: u16) -> Vec<u8> {
    let mut out = jpeg.to_vec();
    let sof = out
        .windows(2)
        .position(|w| w == [0xFF, 0xC0] || w == [0xFF, 0xC2])
        .expect("a frame header");
    out[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    out[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    out
}

fn png(width: u32, height: u32, depth: png::BitDepth) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(depth);
    let mut writer = encoder.write_header().unwrap();
    let bytes_per_sample = if depth == png::BitDepth::Sixteen {
        2
    } else {
        1
    };
    let data: Vec<u8> = (0..width * height * 4 * bytes_per_sample)
        .map(|i| (i % 251) as u8)
        .collect();
    writer.write_image_data(&data).unwrap();
    writer.finish().unwrap();
    out
}

#[test]
fn a_failed_image_leaves_nothing_behind_in_the_decoder() {
    let good = jpeg(96, 64, 4);
    let mut fresh = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
    let reference = fresh.decode_full(&good).unwrap().pixels.to_vec();
    let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
    for bad in [
        declare_size(&good, 0, 64),
        declare_size(&good, 96, 0),
        declare_size(&good, 65535, 65535),
        good[..good.len() / 2].to_vec(),
    ] {
        assert!(dec.decode_full(&bad).is_err());
        for _ in 0..3 {
            let out = dec
                .decode_full(&good)
                .expect("a good image after a bad one");
            assert_eq!(out.pixels, &reference[..]);
        }
    }
}

#[test]
fn skip_policy_fills_batches_and_counts_every_cause() {
    let dir = tempfile::tempdir().unwrap();
    let deleted = corpus(dir.path());
    let mut c = config(4, 2);
    c.on_error = ErrorPolicy::Skip;
    let l = loader(dir.path(), c);
    fs::remove_file(deleted).unwrap();
    for epoch in 0..2 {
        let mut it = l.epoch(epoch).unwrap();
        let batches: Vec<_> = it.by_ref().map(|b| b.unwrap()).collect();
        let sizes: Vec<usize> = batches.iter().map(|b| b.len()).collect();
        // 17 deliverable samples in batches of 4: four full batches and one of 1.
        assert_eq!(sizes, [4, 4, 4, 4, 1], "epoch {epoch}");
        let stats = it.stats();
        let expected = BTreeMap::from([
            ("corrupt", 4),
            ("empty", 1),
            ("missing", 1),
            ("too-many-pixels", 1),
            ("unknown-format", 2),
        ]);
        assert_eq!(stats.skipped, expected);
        assert_eq!(stats.samples as usize, DELIVERABLE);
        // Every sample is either delivered or reported skipped, once.
        let mut seen: Vec<u64> = batches.iter().flat_map(|b| b.ids().to_vec()).collect();
        seen.extend(it.skipped().iter().map(|e| e.id));
        seen.sort_unstable();
        assert_eq!(seen, (0..l.catalog().len() as u64).collect::<Vec<_>>());
        assert!(it
            .skipped()
            .iter()
            .any(|e| e.location.ends_with("bomb.jpg") && e.cause.kind() == "too-many-pixels"));
    }
}

#[test]
fn error_policy_names_the_file_and_cause() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    for (file, words) in [
        ("truncated.jpg", "cannot decode"),
        ("empty.jpg", "empty"),
        ("random.jpg", "not a JPEG or PNG"),
        ("text.jpg", "not a JPEG or PNG"),
        ("bomb.jpg", "60000x60000"),
        ("zero-width.jpg", "cannot decode"),
        ("huge.jpg", "65500 pixels"),
    ] {
        let only = tempfile::tempdir().unwrap();
        fs::create_dir(only.path().join("c")).unwrap();
        fs::copy(
            dir.path().join("bad").join(file),
            only.path().join("c").join(file),
        )
        .unwrap();
        fs::write(only.path().join("c").join("ok.jpg"), jpeg(80, 60, 1)).unwrap();
        let l = loader(only.path(), config(2, 2));
        let results: Vec<_> = l.epoch(0).unwrap().collect();
        let err = results.into_iter().find_map(|r| r.err()).expect("an error");
        let message = err.to_string();
        assert!(matches!(err, Error::Sample(_)));
        assert!(
            message.contains(file) && message.contains(words),
            "{message}"
        );
    }
}

/// Root reads any file whatever its mode, so as root this test reruns itself as `nobody`.
#[test]
fn unreadable_file_is_counted_as_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        // The checkout may not be reachable by `nobody`: run a copy from a world-readable place.
        let place = tempfile::tempdir_in("/tmp").unwrap();
        fs::set_permissions(place.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let exe = place.path().join("hostile-test");
        fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        // Its name in this binary is qualified by its module; a name that matched no test
        // would pass with nothing run, so the child must report its one test passed.
        let name = common::test_name(
            module_path!(),
            "unreadable_file_is_counted_as_permission_denied",
        );
        let out = std::process::Command::new(&exe)
            .args(["--exact", &name, "--nocapture"])
            .env("TMPDIR", "/tmp")
            .current_dir("/")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("test result: ok. 1 passed"),
            "the test failed when run as nobody ({}):\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("c")).unwrap();
    for i in 0..3 {
        fs::write(
            dir.path().join("c").join(format!("{i}.jpg")),
            jpeg(40, 30, i),
        )
        .unwrap();
    }
    let locked = dir.path().join("c").join("1.jpg");
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    let mut c = config(2, 1);
    c.on_error = ErrorPolicy::Skip;
    let l = loader(dir.path(), c);
    let mut it = l.epoch(0).unwrap();
    let delivered: usize = it.by_ref().map(|b| b.unwrap().len()).sum();
    assert_eq!(delivered, 2);
    assert_eq!(
        it.stats().skipped,
        BTreeMap::from([("permission-denied", 1)])
    );
}

#[test]
fn skipping_keeps_output_independent_of_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let bytes = |threads| {
        let mut c = config(3, threads);
        c.on_error = ErrorPolicy::Skip;
        let l = loader(dir.path(), c);
        (0..3).map(|epoch| run_epoch(&l, epoch)).collect::<Vec<_>>()
    };
    let one = bytes(1);
    for (batches, skipped) in &one {
        // Nothing deleted here: every good sample once, every bad one counted.
        let mut ids: Vec<u64> = batches.iter().flat_map(|b| b.0.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), DELIVERABLE + 1);
        assert_eq!(skipped.values().sum::<u64>(), 8);
    }
    assert_eq!(one, bytes(2));
    assert_eq!(one, bytes(4));
}

/// Local files behind a hook that runs before each read and may answer instead (an
/// error, a panic) or hold the read up.
struct Hooked<F> {
    inner: LocalFiles,
    before: F,
}

/// A source over `catalog`'s files with `before` run ahead of each read.
fn hooked<F>(catalog: &Arc<Catalog>, before: F) -> Arc<Hooked<F>>
where
    F: Fn(u64) -> Option<Result<(), Cause>> + Send + Sync,
{
    Arc::new(Hooked {
        inner: LocalFiles::new(catalog.clone(), ReadMode::Cached),
        before,
    })
}

impl<F> Source for Hooked<F>
where
    F: Fn(u64) -> Option<Result<(), Cause>> + Send + Sync,
{
    fn read(&self, id: u64, out: &mut Vec<u8>) -> Result<(), Cause> {
        match (self.before)(id) {
            Some(answer) => answer,
            None => self.inner.read(id, out),
        }
    }

    fn location(&self, id: u64) -> String {
        self.inner.location(id)
    }

    fn stats(&self) -> SourceStats {
        self.inner.stats()
    }
}

/// A panic payload whose drop panics again, so that the panic escapes the per-sample
/// guard and takes the thread down.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("and again while the first panic was handled");
    }
}

fn panicking_loader(root: &Path, policy: ErrorPolicy, twice: bool) -> Loader {
    let (catalog, _) = Catalog::scan(root, nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let source = hooked(&catalog, move |id| {
        if id == 5 {
            if twice {
                std::panic::panic_any(PanicsWhenDropped);
            }
            panic!("a bug in a custom source");
        }
        None
    });
    let mut c = config(4, 2);
    c.on_error = policy;
    Loader::new(catalog, source, c).unwrap()
}

#[test]
fn a_source_that_panics_costs_one_named_sample() {
    let dir = tempfile::tempdir().unwrap();
    common::image_folder(dir.path(), 2, 10);
    let root = dir.path().to_path_buf();
    let (delivered, skipped, located) = within_a_minute(move || {
        let l = panicking_loader(&root, ErrorPolicy::Skip, false);
        let mut it = l.epoch(0).unwrap();
        let delivered: usize = it.by_ref().map(|b| b.unwrap().len()).sum();
        let skipped = it.skipped();
        (delivered, it.stats().skipped, skipped[0].location.clone())
    });
    assert_eq!(delivered, 19);
    assert_eq!(skipped, BTreeMap::from([("internal", 1)]));
    assert!(located.ends_with("img005.jpg"), "{located}");

    let root = dir.path().to_path_buf();
    let err = within_a_minute(move || {
        let l = panicking_loader(&root, ErrorPolicy::Error, false);
        let results: Vec<_> = l.epoch(0).unwrap().collect();
        results
            .into_iter()
            .find_map(|r| r.err())
            .map(|e| e.to_string())
    });
    let err = err.expect("an error");
    assert!(
        err.contains("img005.jpg") && err.contains("a bug in a custom source"),
        "{err}"
    );
}

#[test]
fn a_thread_that_dies_stops_the_epoch_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    common::image_folder(dir.path(), 2, 10);
    let root = dir.path().to_path_buf();
    let results = within_a_minute(move || {
        let l = panicking_loader(&root, ErrorPolicy::Skip, true);
        let results: Vec<_> = l.epoch(0).unwrap().collect();
        results
    });
    let err = results
        .into_iter()
        .find_map(|r| r.err())
        .expect("an error, not a hang or a short epoch");
    assert!(matches!(err, Error::Internal(_)), "{err}");
    assert!(err.to_string().contains("while fetching"), "{err}");
}

/// Every batch of `epoch` (ids and bytes) and the skips counted by cause.
type EpochRun = (Vec<(Vec<u64>, Vec<u8>)>, BTreeMap<&'static str, u64>);

fn run_epoch(l: &Loader, epoch: u64) -> EpochRun {
    let mut it = l.epoch(epoch).unwrap();
    let batches = it
        .by_ref()
        .map(|b| b.unwrap())
        .map(|b| (b.ids().to_vec(), b.data().to_vec()))
        .collect();
    (batches, it.stats().skipped)
}

/// Runs `body` on a thread and fails the test if it has not finished within a minute:
/// a loader that stalls must fail here, not hang the suite.
fn within_a_minute<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(body()).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the loader stalled")
}

#[test]
fn dense_failures_with_a_one_batch_window_never_stall() {
    // Every other file is garbage, and claims may run only one batch ahead: skips keep
    // pushing tentative positions past the window, so claimers wait on the consumer while
    // it waits on them to fill its batch.
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("mixed");
    fs::create_dir_all(&class).unwrap();
    for i in 0..40u32 {
        let bytes = if i % 2 == 0 {
            jpeg(48, 40, i)
        } else {
            b"not an image".to_vec()
        };
        fs::write(class.join(format!("{i:02}.jpg")), bytes).unwrap();
    }
    for threads in [1, 2, 4] {
        let root = dir.path().to_path_buf();
        let (ids, skipped) = within_a_minute(move || {
            let mut c = config(3, threads);
            c.prefetch = 1;
            c.on_error = ErrorPolicy::Skip;
            let l = loader(&root, c);
            let mut it = l.epoch(0).unwrap();
            let batches: Vec<_> = it.by_ref().map(|b| b.unwrap()).collect();
            assert!(batches.iter().rev().skip(1).all(|b| b.len() == 3));
            let ids: Vec<u64> = batches.iter().flat_map(|b| b.ids().to_vec()).collect();
            (ids, it.stats().skipped)
        });
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..40).step_by(2).collect::<Vec<u64>>(),
            "{threads} threads"
        );
        assert_eq!(skipped, BTreeMap::from([("unknown-format", 20)]));
    }
}

/// A gate that holds every read up until it opens; it reports the first read it holds.
struct Gate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    blocked: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

impl Gate {
    fn wait(&self) {
        if let Some(tx) = self.blocked.lock().unwrap().take() {
            tx.send(()).unwrap();
        }
        let open = self.open.lock().unwrap();
        drop(self.opened.wait_while(open, |open| !*open).unwrap());
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

#[test]
fn a_consumer_is_never_held_by_a_read_that_hangs() {
    let dir = tempfile::tempdir().unwrap();
    common::image_folder(dir.path(), 2, 10);
    let (catalog, _) = Catalog::scan(dir.path(), nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let (tx, blocked) = std::sync::mpsc::channel();
    let gate = Arc::new(Gate {
        open: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
        blocked: std::sync::Mutex::new(Some(tx)),
    });
    let held = gate.clone();
    let source = hooked(&catalog, move |_| {
        held.wait();
        None
    });
    let l = Loader::new(catalog, source, config(4, 2)).unwrap();
    let mut epoch = l.epoch(0).unwrap();
    blocked.recv().unwrap();
    // No sample can arrive while the gate is shut: the wait ends at its limit.
    assert!(matches!(
        epoch.next_within(std::time::Duration::from_millis(20)),
        nostall::loader::Next::Pending
    ));
    // Dropping the epoch returns although its fetch threads are stuck in reads.
    within_a_minute(move || drop(epoch));
    gate.open();
    // The loader still works once the reads come back.
    assert_eq!(
        l.epoch(1).unwrap().map(|b| b.unwrap().len()).sum::<usize>(),
        20
    );
}

#[test]
fn the_quarantine_file_lists_every_skipped_sample() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let file = dir.path().join("quarantine.jsonl");
    let mut c = config(4, 2);
    c.on_error = ErrorPolicy::Skip;
    c.quarantine = Some(file.clone());
    let l = loader(dir.path(), c.clone());
    let mut expected = Vec::new();
    for epoch in 0..2 {
        let mut it = l.epoch(epoch).unwrap();
        it.by_ref().for_each(|b| drop(b.unwrap()));
        expected.extend(it.skipped().into_iter().map(|e| (epoch, e)));
    }
    let lines: Vec<serde_json::Value> = fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 16); // 8 bad files, 2 epochs
    for (line, (epoch, e)) in lines.iter().zip(&expected) {
        assert_eq!(line["epoch"], *epoch);
        assert_eq!(line["sample_id"], e.id);
        assert_eq!(line["location"], e.location.as_str());
        assert_eq!(line["cause"], e.cause.kind());
        assert_eq!(line["detail"], e.cause.to_string());
    }
    c.on_error = ErrorPolicy::Error;
    let (catalog, _) = Catalog::scan(dir.path(), nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let source = Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
    let err = Loader::new(catalog, source, c).unwrap_err();
    assert!(err.to_string().contains("skip error policy"), "{err}");
}

#[test]
fn a_stray_tar_beside_class_directories_leaves_an_image_folder_one() {
    let dir = tempfile::tempdir().unwrap();
    common::image_folder(dir.path(), 2, 5);
    let stray = dir.path().join("backup.tar");
    fs::write(&stray, vec![0u8; 2048]).unwrap();
    let data = nostall::dataset::open(
        dir.path().to_str().unwrap(),
        ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap();
    assert_eq!(data.format, nostall::dataset::Format::Files);
    assert_eq!(data.catalog.len(), 10);
    // A folder of nothing but shards is still one of shards.
    let shards = tempfile::tempdir().unwrap();
    common::write_shards(&data.catalog, shards.path(), 4);
    let opened = nostall::dataset::open(
        shards.path().to_str().unwrap(),
        ReadMode::Cached,
        nostall::Modality::Image,
    );
    assert_eq!(opened.unwrap().format, nostall::dataset::Format::TarShards);
}

#[test]
fn skip_counts_stay_exact_across_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let mut c = config(3, 2);
    c.on_error = ErrorPolicy::Skip;
    let l = loader(dir.path(), c);
    let mut whole = l.epoch(1).unwrap();
    whole.by_ref().for_each(|b| drop(b.unwrap()));
    let expected = whole.stats().skipped;
    for stop_after in 1..l.batches_per_epoch() {
        let mut first = l.epoch(1).unwrap();
        first
            .by_ref()
            .take(stop_after)
            .for_each(|b| drop(b.unwrap()));
        let saved = l.checkpoint(&first);
        drop(first);
        let mut rest = l.resume_saved(&saved).unwrap();
        rest.by_ref().for_each(|b| drop(b.unwrap()));
        assert_eq!(
            rest.stats().skipped,
            expected,
            "stopped after {stop_after} batches"
        );
    }
}

/// The hash that decides which samples fail and how long each read takes: the same
/// every epoch, whatever the thread count.
fn flaky_hash(id: u64) -> u64 {
    nostall::rng::derive(&[0xF1A, id])
}

/// Fails a fifth of the samples and makes the others slow (by yielding, not sleeping).
fn flaky(id: u64) -> Option<Result<(), Cause>> {
    let h = flaky_hash(id);
    for _ in 0..h % 300 {
        std::thread::yield_now();
    }
    h.is_multiple_of(5)
        .then(|| Err(Cause::Io("the storage said no".into())))
}

#[test]
fn random_failures_and_latencies_never_lose_or_repeat_a_sample() {
    let dir = tempfile::tempdir().unwrap();
    common::image_folder(dir.path(), 3, 17);
    let (catalog, _) = Catalog::scan(dir.path(), nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let good: Vec<u64> = (0..catalog.len() as u64)
        .filter(|&id| !flaky_hash(id).is_multiple_of(5))
        .collect();
    let bad = catalog.len() as u64 - good.len() as u64;
    assert!(bad > 0);
    let mut reference: Option<Vec<(Vec<u64>, Vec<u8>)>> = None;
    for threads in 1..=4 {
        for prefetch in 1..=3 {
            let catalog = catalog.clone();
            let output = within_a_minute(move || {
                let source = hooked(&catalog, flaky);
                let mut c = config(4, threads);
                c.prefetch = prefetch;
                c.on_error = ErrorPolicy::Skip;
                run_epoch(&Loader::new(catalog, source, c).unwrap(), 2)
            });
            let (batches, skipped) = output;
            let mut ids: Vec<u64> = batches.iter().flat_map(|b| b.0.clone()).collect();
            ids.sort_unstable();
            assert_eq!(ids, good, "{threads} threads, prefetch {prefetch}");
            assert_eq!(skipped, BTreeMap::from([("io", bad)]));
            match &reference {
                None => reference = Some(batches),
                Some(first) => assert!(
                    *first == batches,
                    "{threads} threads, prefetch {prefetch}: other bytes"
                ),
            }
        }
    }
}

/// What `pipeline` (as the `pipeline=` setting takes it) and `mix` make of a loader's
/// configuration: its error, where they are refused.
fn refusal(pipeline: &str, mix: Option<MixupArgs>) -> Option<Error> {
    let setting: PipelineSetting = match pipeline.parse() {
        Ok(setting) => setting,
        Err(e) => return Some(e),
    };
    let mut builder = LoaderBuilder::new("unread");
    builder.settings_mut().pipeline = setting;
    builder.mixup(mix);
    builder.config().err()
}

/// Settings that once allocated without bound (aborting the process) or cost seconds a
/// sample are refused when read, by a config error naming the operator, the argument
/// and the bound.
#[test]
fn settings_past_their_bounds_are_refused_before_anything_is_allocated() {
    let mixup = |num_classes| MixupArgs {
        num_classes,
        ..MixupArgs::default()
    };
    let cases: [(&str, Option<MixupArgs>, &[&str]); 12] = [
        (
            "[CenterCrop(8), GaussianBlur(1000000001)]",
            None,
            &["GaussianBlur", "kernel_size", "1023"],
        ),
        (
            "[CenterCrop(8), GaussianBlur(99999)]",
            None,
            &["GaussianBlur", "kernel_size", "1023"],
        ),
        (
            "[CenterCrop(8), RandAugment(num_ops=1000000000)]",
            None,
            &["RandAugment", "num_ops", "64"],
        ),
        (
            "[CenterCrop(8), TimmRandAugment('rand-m9-n4000000000')]",
            None,
            &["TimmRandAugment", "config", "n4000000000", "64"],
        ),
        (
            "[CenterCrop(8), AugMix(mixture_width=1000000000)]",
            None,
            &["AugMix", "mixture_width", "64"],
        ),
        (
            "[CenterCrop(8), AugMix(chain_depth=1000000000)]",
            None,
            &["AugMix", "chain_depth", "64"],
        ),
        (
            "[CenterCrop(8), TimmRandomErasing(max_count=4000000000)]",
            None,
            &["TimmRandomErasing", "max_count", "64"],
        ),
        (
            "[CenterCrop(8)]",
            Some(mixup(1_000_000_000)),
            &["Mixup", "num_classes", "2^24"],
        ),
        (
            "[CenterCrop(8)]",
            Some(mixup(1 << 62)),
            &["Mixup", "num_classes", "2^24"],
        ),
        (
            "[Channels(1), Resample(16000, rolloff=1e-300), RandomCrop(16000)]",
            None,
            &["Resample", "lowpass_filter_width", "rolloff"],
        ),
        (
            "[Channels(1), Resample(16000, lowpass_filter_width=1024), RandomCrop(16000)]",
            None,
            &["Resample", "lowpass_filter_width", "2^27"],
        ),
        (
            "[Channels(1), Resample(16000), RandomCrop(1048576), \
             MelSpectrogram(sample_rate=16000, n_fft=65536, hop_length=1, n_mels=1)]",
            None,
            &["MelSpectrogram", "hop_length", "2^30"],
        ),
    ];
    for (pipeline, mix, words) in cases {
        let error = refusal(pipeline, mix).unwrap_or_else(|| panic!("{pipeline} is taken"));
        let message = error.to_string();
        assert!(matches!(error, Error::Config(_)), "{pipeline}: {error:?}");
        for word in words {
            assert!(message.contains(word), "{pipeline}: {message}");
        }
    }
    // At their bounds, they are taken.
    for (pipeline, mix) in [
        ("[CenterCrop(8), GaussianBlur(1023)]", None),
        ("[CenterCrop(8), RandAugment(num_ops=64)]", None),
        ("[CenterCrop(8), TimmRandAugment('rand-m9-n64')]", None),
        ("[CenterCrop(8), AugMix(mixture_width=21)]", None),
        ("[CenterCrop(8), TimmRandomErasing(max_count=64)]", None),
        ("[CenterCrop(8)]", Some(mixup(1 << 24))),
        (
            "[Channels(1), Resample(16000), RandomCrop(1048576), \
             MelSpectrogram(sample_rate=16000, n_fft=512, hop_length=1, n_mels=1)]",
            None,
        ),
    ] {
        assert!(refusal(pipeline, mix).is_none(), "{pipeline} is refused");
    }
}

/// Lists of operators nested without bound (a loop wrapping an operator again and again,
/// as Python may) are refused past the text form's depth, before running, writing or
/// dropping them recurses past the stack.
#[test]
fn operators_nested_past_the_text_forms_depth_are_refused() {
    let wrap = |op: Op| Op::call("RandomApply", vec![Value::Ops(vec![op])], vec![]);
    let mut op = Op::call("RandomInvert", vec![], vec![]).unwrap();
    for _ in 0..4 {
        op = wrap(op).unwrap();
    }
    let error = wrap(op).unwrap_err();
    assert!(matches!(error, Error::Config(_)), "{error:?}");
    assert!(
        error.to_string().contains("RandomApply: transforms nests"),
        "{error}"
    );
}
