//! Hostile captions and metadata in WebDataset records read with fields: captions that
//! are not UTF-8 or are 10 MB long, JSON nested 10 000 deep or cut short, members
//! missing. Each is its sample's skip, by cause, for any thread count, the good samples
//! delivered as they would be without the bad ones; and the peak resident memory of a
//! run (in a process of its own) stays near that of a run over the good samples alone.

mod common;

use std::fs;
use std::path::Path;

use common::{jpeg, peak_rss, run_alone, tar, watchdog};
use nostall::fields::{Field, Fields};
use nostall::pipeline::{LoaderBuilder, LoaderSettings, Threads};
use nostall::{ErrorPolicy, Modality};

/// The hostile members of sample `k` (of kind `k % 6`) and the cause it is skipped by.
fn hostile(k: usize) -> (Vec<(&'static str, Vec<u8>)>, &'static str) {
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    match k % 6 {
        0 => (vec![("txt", b"caf\xe9 cr\xe8me".to_vec())], "bad-text"),
        1 => (vec![("txt", b"caption ".repeat(10 << 17))], "bad-text"),
        2 => (
            vec![("txt", b"deep".to_vec()), ("json", deep.into_bytes())],
            "bad-json",
        ),
        3 => (
            vec![
                ("txt", b"cut".to_vec()),
                ("json", br#"{"a": [1, {"b""#.to_vec()),
            ],
            "bad-json",
        ),
        4 => (vec![("json", b"{}".to_vec())], "missing-field"),
        _ => (
            vec![("txt", b"\xff\xfe".to_vec()), ("json", vec![b'{'; 4096])],
            "bad-text",
        ),
    }
}

/// Shards of `good` samples, and (with `bad`) 24 hostile ones among them; returns the
/// skips expected as `(key, cause)`, sorted.
fn corpus(dir: &Path, good: usize, bad: bool) -> Vec<(String, &'static str)> {
    let mut samples: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    let mut expected = Vec::new();
    for i in 0..good {
        let key = format!("good{i:04}");
        samples.push(vec![
            (format!("{key}.jpg"), jpeg(64, 48, i as u32)),
            (
                format!("{key}.txt"),
                format!("photograph number {i}").into_bytes(),
            ),
            (
                format!("{key}.json"),
                format!(r#"{{"i": {i}}}"#).into_bytes(),
            ),
        ]);
        if bad && i % 4 == 0 && i / 4 < 24 {
            let k = i / 4;
            let key = format!("bad{k:04}");
            let (extra, cause) = hostile(k);
            let mut members = vec![(format!("{key}.jpg"), jpeg(64, 48, 1000 + k as u32))];
            members.extend(
                extra
                    .into_iter()
                    .map(|(ext, data)| (format!("{key}.{ext}"), data)),
            );
            samples.push(members);
            expected.push((key, cause));
        }
    }
    let (a, b) = samples.split_at(samples.len() / 2);
    fs::write(dir.join("a.tar"), tar(&a.concat())).unwrap();
    fs::write(dir.join("b.tar"), tar(&b.concat())).unwrap();
    expected.sort();
    expected
}

/// One epoch: the captions delivered (sorted), and the skips as `(key, cause)`, sorted.
type Epoch = (Vec<String>, Vec<(String, &'static str)>);

fn epoch(dir: &Path, threads: usize) -> Epoch {
    let location = dir.to_str().unwrap().to_string();
    watchdog(format!("{threads} threads"), move || {
        let mut settings = LoaderSettings::default();
        settings.set("pipeline", "val").unwrap();
        settings.set("image_size", "32").unwrap();
        settings.plan.batch_size = 4;
        settings.threads = Threads::Count(threads);
        settings.fetch_threads = threads;
        settings.on_error = ErrorPolicy::Skip;
        let fields = Fields::new(vec![
            Field::new("image", "jpg", Modality::Image).unwrap(),
            Field::new("caption", "txt", Modality::Image).unwrap(),
            Field::new("meta", "json", Modality::Image).unwrap(),
        ])
        .unwrap();
        let mut builder = LoaderBuilder::with_settings(&location, settings);
        builder.fields(Some(fields));
        let (loader, _) = builder.open().unwrap();
        let caption = &loader.config().pipeline.layout().parts()[1];
        let (offset, slot) = (caption.offset, loader.config().pipeline.sample_bytes());
        let mut it = loader.epoch(0).unwrap();
        let mut captions = Vec::new();
        for batch in it.by_ref() {
            let batch = batch.unwrap();
            for sample in batch.data().chunks_exact(slot) {
                let len = u32::from_le_bytes(sample[offset..offset + 4].try_into().unwrap());
                let text = &sample[offset + 4..offset + 4 + len as usize];
                captions.push(String::from_utf8(text.to_vec()).unwrap());
            }
        }
        captions.sort();
        let mut skipped: Vec<_> = it
            .skipped()
            .into_iter()
            .map(|e| {
                (
                    e.location.rsplit(':').next().unwrap().to_string(),
                    e.cause.kind(),
                )
            })
            .collect();
        skipped.sort();
        (captions, skipped)
    })
}

#[test]
fn hostile_fields_skip_exactly_their_samples_for_any_thread_count() {
    let (dir, clean) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let expected = corpus(dir.path(), 100, true);
    corpus(clean.path(), 100, false);
    let want = epoch(clean.path(), 2).0;
    assert_eq!(want.len(), 100);
    for threads in [1, 2] {
        let (captions, skipped) = epoch(dir.path(), threads);
        assert_eq!(skipped, expected, "{threads} threads");
        assert_eq!(captions, want, "{threads} threads");
    }
}

/// Set in the process [`peak_memory_over_hostile_fields_stays_near_that_over_good_ones`]
/// starts: the folder of shards to read.
const CHILD: &str = "NOSTALL_TEST_RSS_RECORDS";

/// Not a test of its own: the body of a process that
/// [`peak_memory_over_hostile_fields_stays_near_that_over_good_ones`] starts.
#[test]
#[ignore = "run by peak_memory_over_hostile_fields_stays_near_that_over_good_ones"]
fn one_run_in_its_own_process() {
    let dir = std::env::var(CHILD).expect("started by the peak memory test");
    let (captions, _) = epoch(Path::new(&dir), 2);
    println!("delivered {} peak {}", captions.len(), peak_rss());
}

#[test]
fn peak_memory_over_hostile_fields_stays_near_that_over_good_ones() {
    let (good, bad) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    corpus(good.path(), 100, false);
    corpus(bad.path(), 100, true);
    let (good_delivered, good_peak) = run_alone("one_run_in_its_own_process", CHILD, good.path());
    let (bad_delivered, bad_peak) = run_alone("one_run_in_its_own_process", CHILD, bad.path());
    assert_eq!((good_delivered, bad_delivered), (100, 100));
    println!(
        "peak resident memory: {good_peak} bytes over good records, {bad_peak} with hostile ones"
    );
    // The four 10 MB captions are read whole (the record's range, under the per-sample
    // limit) before their field refuses them: at most all four at once.
    assert!(
        bad_peak < good_peak + (128 << 20),
        "peak resident memory {bad_peak} bytes with hostile records, {good_peak} without"
    );
}
