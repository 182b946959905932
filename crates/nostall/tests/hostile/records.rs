//! Hostile captions, metadata and vectors in WebDataset records read with fields:
//! captions that are not UTF-8 or are 10 MB long; JSON nested 5 000 deep, nested one
//! level past the recursion limit, cut short, or a 10 MB array; vectors of 1 MB (as a
//! `.npy` array and as JSON), a `.npy` array whose bytes are not a whole number of its
//! elements, JSON nested 5 000 deep; members missing. Each is its sample's skip, by cause,
//! for any thread count, the good samples delivered as they would be without the bad
//! ones; each alone stops an epoch under the `error` policy naming its sample and
//! cause; and the peak resident memory of a run (in a process of its own) stays near
//! that of a run over the good samples alone.

use std::fs;
use std::path::Path;

use crate::common::{jpeg, peak_rss, run_alone, tar, watchdog};
use nostall::fields::{Field, FieldKind, Fields};
use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
use nostall::{Error, ErrorPolicy, Modality};

/// Kinds of hostile samples ([`hostile`]).
const KINDS: usize = 12;

/// The elements of the vector field.
const LENGTH: usize = 4;

/// A `.npy` file of `<f4` elements of `shape` (as NumPy writes its header), holding
/// `data`.
fn npy(shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A JSON array of zeros of about `bytes` bytes: a parser that builds it holds tens of
/// bytes for each two.
fn zeros(bytes: usize) -> Vec<u8> {
    format!("[0{}]", ",0".repeat(bytes / 2)).into_bytes()
}

/// The hostile members of sample `k` (of kind `k % KINDS`) and the cause it is skipped
/// by. The fields are read in order (caption, meta, embedding): a sample's members before
/// its hostile one are good.
fn hostile(k: usize) -> (Vec<(&'static str, Vec<u8>)>, &'static str) {
    let nested = |n: usize| ("[".repeat(n) + &"]".repeat(n)).into_bytes();
    let fine = |extra: Vec<(&'static str, Vec<u8>)>| {
        let mut members = vec![("txt", b"fine".to_vec()), ("json", b"{}".to_vec())];
        members.extend(extra);
        members
    };
    match k % KINDS {
        0 => (vec![("txt", b"caf\xe9 cr\xe8me".to_vec())], "bad-text"),
        1 => (vec![("txt", b"caption ".repeat(10 << 17))], "bad-text"),
        // Within the field's 16 KiB: refused for its depth.
        2 => (
            vec![("txt", b"deep".to_vec()), ("json", nested(5_000))],
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
        5 => (
            vec![("txt", b"\xff\xfe".to_vec()), ("json", vec![b'{'; 4096])],
            "bad-text",
        ),
        // 10 MB of a huge array, 16 KiB allowed: refused for its size, never parsed.
        6 => (
            vec![("txt", b"big".to_vec()), ("json", zeros(10 << 20))],
            "too-large",
        ),
        // One level past serde_json's recursion limit (128).
        7 => (
            vec![("txt", b"past".to_vec()), ("json", nested(128))],
            "bad-json",
        ),
        8 => (
            fine(vec![("npy", npy("(262144,)", &vec![0; 1 << 20]))]),
            "bad-vector",
        ),
        9 => (fine(vec![("npy", zeros(1 << 20))]), "bad-vector"),
        // 15 bytes: not a whole number of 4-byte elements.
        10 => (fine(vec![("npy", npy("(4,)", &[0; 15]))]), "bad-vector"),
        _ => (fine(vec![("npy", nested(5_000))]), "bad-vector"),
    }
}

/// The members of good sample `i`.
fn good(i: usize) -> Vec<(&'static str, Vec<u8>)> {
    let values: Vec<u8> = [i as f32, 1.0, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    vec![
        ("jpg", jpeg(64, 48, i as u32)),
        ("txt", format!("photograph number {i}").into_bytes()),
        ("json", format!(r#"{{"i": {i}}}"#).into_bytes()),
        (
            "npy",
            match i % 2 {
                0 => npy("(4,)", &values),
                _ => format!("[{i}, 1, 2.0, 3e0]").into_bytes(),
            },
        ),
    ]
}

fn fields() -> Fields {
    Fields::new(vec![
        Field::new("image", "jpg", Modality::Image).unwrap(),
        Field::new("caption", "txt", Modality::Image).unwrap(),
        Field::new("meta", "json", Modality::Image).unwrap(),
        Field::new("embedding", "npy", Modality::Image)
            .unwrap()
            .with_kind(FieldKind::vector(LENGTH)),
    ])
    .unwrap()
}

/// The members of `key` as a shard lists them.
fn named(key: &str, members: Vec<(&str, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    members
        .into_iter()
        .map(|(ext, data)| (format!("{key}.{ext}"), data))
        .collect()
}

/// Shards of `good` samples, and (with `bad`) 24 hostile ones among them; returns the
/// skips expected as `(key, cause)`, sorted.
fn corpus(dir: &Path, good_samples: usize, bad: bool) -> Vec<(String, &'static str)> {
    let mut samples: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    let mut expected = Vec::new();
    for i in 0..good_samples {
        samples.push(named(&format!("good{i:04}"), good(i)));
        if bad && i % 4 == 0 && i / 4 < 2 * KINDS {
            let k = i / 4;
            let key = format!("bad{k:04}");
            let (extra, cause) = hostile(k);
            let mut members = vec![("jpg", jpeg(64, 48, 1000 + k as u32))];
            members.extend(extra);
            samples.push(named(&key, members));
            expected.push((key, cause));
        }
    }
    let (a, b) = samples.split_at(samples.len() / 2);
    fs::write(dir.join("a.tar"), tar(&a.concat())).unwrap();
    fs::write(dir.join("b.tar"), tar(&b.concat())).unwrap();
    expected.sort();
    expected
}

/// One epoch: each sample delivered as its caption and its embedding (sorted), and the
/// skips as `(key, cause)`, sorted.
type Epoch = (Vec<(String, Vec<f32>)>, Vec<(String, &'static str)>);

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
        let mut builder = LoaderBuilder::with_settings(&location, settings);
        builder.fields(Some(fields()));
        let (loader, _) = builder.open().unwrap();
        let layout = loader.config().pipeline.layout();
        let (caption, embedding) = (layout.parts()[1].offset, layout.parts()[3].offset);
        let slot = loader.config().pipeline.sample_bytes();
        let mut it = loader.epoch(0).unwrap();
        let mut delivered = Vec::new();
        for batch in it.by_ref() {
            let batch = batch.unwrap();
            for sample in batch.data().chunks_exact(slot) {
                let len = u32::from_le_bytes(sample[caption..caption + 4].try_into().unwrap());
                let text = &sample[caption + 4..caption + 4 + len as usize];
                let values = sample[embedding..embedding + 4 * LENGTH]
                    .chunks_exact(4)
                    .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
                    .collect();
                delivered.push((String::from_utf8(text.to_vec()).unwrap(), values));
            }
        }
        delivered.sort_by(|a, b| a.0.cmp(&b.0));
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
        (delivered, skipped)
    })
}

#[test]
fn hostile_fields_skip_exactly_their_samples_for_any_thread_count() {
    let (dir, clean) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let expected = corpus(dir.path(), 100, true);
    corpus(clean.path(), 100, false);
    let want = epoch(clean.path(), 2).0;
    assert_eq!(want.len(), 100);
    assert!(want.iter().all(|(caption, values)| *caption
        == format!("photograph number {}", values[0])
        && values[1..] == [1.0, 2.0, 3.0]));
    for threads in [1, 2] {
        let (delivered, skipped) = epoch(dir.path(), threads);
        assert_eq!(skipped, expected, "{threads} threads");
        assert_eq!(delivered, want, "{threads} threads");
    }
}

#[test]
fn each_hostile_record_alone_stops_an_epoch_naming_its_sample_and_cause() {
    for k in 0..KINDS {
        let dir = tempfile::tempdir().unwrap();
        let (extra, cause) = hostile(k);
        let mut members = vec![("jpg", jpeg(64, 48, 1000))];
        members.extend(extra);
        let shard = [
            named("a", good(0)),
            named("b", members),
            named("c", good(1)),
        ]
        .concat();
        fs::write(dir.path().join("s.tar"), tar(&shard)).unwrap();
        let location = dir.path().to_str().unwrap().to_string();
        let (delivered, error) = watchdog(format!("kind {k}"), move || {
            let mut settings = LoaderSettings::default();
            settings.set("pipeline", "val").unwrap();
            settings.set("image_size", "32").unwrap();
            settings.plan.batch_size = 1;
            settings.plan.shuffle = false;
            settings.threads = Threads::Count(1);
            settings.on_error = ErrorPolicy::Error;
            let mut builder = LoaderBuilder::with_settings(&location, settings);
            builder.fields(Some(fields()));
            let (loader, _) = builder.open().unwrap();
            let results: Vec<_> = loader.epoch(0).unwrap().collect();
            let delivered = results.iter().take_while(|r| r.is_ok()).count();
            (delivered, results.into_iter().find_map(Result::err))
        });
        let Some(Error::Sample(error)) = error else {
            panic!("kind {k}: {error:?}, not the sample's error");
        };
        assert_eq!(delivered, 1, "kind {k}: {error}");
        assert!(error.location.ends_with("s.tar:b"), "kind {k}: {error}");
        assert_eq!(error.cause.kind(), cause, "kind {k}: {error}");
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
    let (delivered, _) = epoch(Path::new(&dir), 2);
    println!("delivered {} peak {}", delivered.len(), peak_rss());
}

#[test]
fn peak_memory_over_hostile_fields_stays_near_that_over_good_ones() {
    let (good, bad) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    corpus(good.path(), 100, false);
    corpus(bad.path(), 100, true);
    let (good_delivered, good_peak) = run_alone(
        module_path!(),
        "one_run_in_its_own_process",
        CHILD,
        good.path(),
    );
    let (bad_delivered, bad_peak) = run_alone(
        module_path!(),
        "one_run_in_its_own_process",
        CHILD,
        bad.path(),
    );
    assert_eq!((good_delivered, bad_delivered), (100, 100));
    println!(
        "peak resident memory: {good_peak} bytes over good records, {bad_peak} with hostile ones"
    );
    // The two 10 MB captions, the two 10 MB JSON documents and the four 1 MB vectors are
    // read whole (the record's range, under the per-sample limit) before their field
    // refuses them for their size, unparsed: at most all eight at once. Parsed first, each
    // JSON document alone would take 256 MiB.
    assert!(
        bad_peak < good_peak + (128 << 20),
        "peak resident memory {bad_peak} bytes with hostile records, {good_peak} without"
    );
}
