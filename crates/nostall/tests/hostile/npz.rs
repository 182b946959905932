//! Hostile `.npz` members of WebDataset records read with an npz field: a zip bomb (256
//! MiB of zeros deflated to 256 KiB) declaring its size, the same stream declaring the size
//! of the field's array, archives cut short, an array of another shape, an array missing, a
//! member that is no archive. Each is its sample's `bad-vector` skip, the good samples
//! delivered as they would be without the bad ones, and the peak resident memory of a run
//! (in a process of its own) stays near that of a run over the good samples alone: no
//! bomb is inflated past the bytes its array takes.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::common::{jpeg, peak_rss, run_alone, tar, watchdog};
use nostall::fields::{Field, FieldKind, Fields};
use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
use nostall::{ErrorPolicy, Modality};

/// The elements of the field's one array, `embedding`.
const LENGTH: usize = 4;

/// The header of a `.npy` file of `elements` `<f4` elements, as NumPy writes it.
fn npy_header(elements: usize) -> Vec<u8> {
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({elements},), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out
}

/// An `.npz` archive of one deflated entry `name`, in `savez_compressed`'s layout: `parts`
/// inflate to its bytes (written in pieces, so that a bomb is never whole in memory).
fn npz(name: &str, parts: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    let (mut crc, mut size) = (flate2::Crc::new(), 0u64);
    for part in parts {
        crc.update(&part);
        size += part.len() as u64;
        encoder.write_all(&part).unwrap();
    }
    let packed = encoder.finish().unwrap();
    let size = size as u32;
    let name = name.as_bytes();
    let fixed = |out: &mut Vec<u8>| {
        for value in [20u16, 0, 8, 0, 0] {
            out.extend_from_slice(&value.to_le_bytes()); // version, flags, method, time, date
        }
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    };
    let mut out = b"PK\x03\x04".to_vec();
    fixed(&mut out);
    out.extend_from_slice(&0u16.to_le_bytes()); // extra
    out.extend_from_slice(name);
    out.extend_from_slice(&packed);
    let directory = out.len() as u32;
    out.extend_from_slice(b"PK\x01\x02\x14\x00");
    fixed(&mut out);
    out.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
    out.extend_from_slice(&0u32.to_le_bytes()); // the local header's offset
    out.extend_from_slice(name);
    let directory_bytes = out.len() as u32 - directory;
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0\x01\x00\x01\x00");
    out.extend_from_slice(&directory_bytes.to_le_bytes());
    out.extend_from_slice(&directory.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// The archive of an array `name` of `values`.
fn archive(name: &str, values: &[f32]) -> Vec<u8> {
    let mut file = npy_header(values.len());
    file.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    npz(name, std::iter::once(file))
}

/// 256 MiB of a `.npy` array's zeros, deflated: declaring its size, and declaring the
/// bytes of the field's array (what its local header and directory say, and its stream
/// goes on).
fn bombs() -> [Vec<u8>; 2] {
    let zeros = (0..256).map(|_| vec![0; 1 << 20]);
    let declared = npz(
        "embedding.npy",
        std::iter::once(npy_header(64 << 20)).chain(zeros),
    );
    let mut lying = declared.clone();
    let size = (npy_header(LENGTH).len() + 4 * LENGTH) as u32;
    let directory = lying.len() - 22 - (46 + "embedding.npy".len());
    for at in [22, directory + 24] {
        lying[at..at + 4].copy_from_slice(&size.to_le_bytes());
    }
    [declared, lying]
}

/// The members of `key`'s sample beside its photograph.
fn sample(key: &str, seed: u32, npz: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    vec![
        (format!("{key}.jpg"), jpeg(64, 48, seed)),
        (format!("{key}.npz"), npz),
    ]
}

/// A shard of 40 good samples and (with `bad`) the hostile ones among them; returns the
/// keys of the hostile ones, sorted.
fn corpus(dir: &Path, bad: bool) -> Vec<String> {
    let mut members = Vec::new();
    for i in 0..40 {
        let values = [i as f32, 1.0, 2.0, 3.0];
        members.extend(sample(
            &format!("good{i:02}"),
            i,
            archive("embedding.npy", &values),
        ));
    }
    let mut hostile = Vec::new();
    if bad {
        let [declared, lying] = bombs();
        let good = archive("embedding.npy", &[0.0; LENGTH]);
        let cases = [
            ("bomb", declared),
            ("lying", lying),
            ("cut", good[..good.len() - 30].to_vec()),
            ("head", good[..40].to_vec()),
            ("shape", archive("embedding.npy", &[0.0; LENGTH + 1])),
            ("other", archive("mask.npy", &[0.0; LENGTH])),
            ("text", b"an archive, it said".to_vec()),
        ];
        for (k, (key, npz)) in cases.into_iter().enumerate() {
            members.extend(sample(key, 1000 + k as u32, npz));
            hostile.push(key.to_string());
        }
    }
    fs::write(dir.join("a.tar"), tar(&members)).unwrap();
    hostile.sort();
    hostile
}

/// One epoch: each sample's embedding (sorted), and the skips as `(key, cause)`, sorted.
type Epoch = (Vec<Vec<f32>>, Vec<(String, &'static str)>);

fn epoch(dir: &Path) -> Epoch {
    let location = dir.to_str().unwrap().to_string();
    watchdog("an epoch".into(), move || {
        let mut settings = LoaderSettings::default();
        settings.set("pipeline", "val").unwrap();
        settings.set("image_size", "32").unwrap();
        settings.plan.batch_size = 4;
        settings.threads = Threads::Count(2);
        settings.on_error = ErrorPolicy::Skip;
        let fields = Fields::new(vec![
            Field::new("image", "jpg", Modality::Image).unwrap(),
            Field::new("feat", "npz", Modality::Image)
                .unwrap()
                .with_kind(FieldKind::npz(vec![("embedding".into(), vec![LENGTH])])),
        ])
        .unwrap();
        let mut builder = LoaderBuilder::with_settings(&location, settings);
        builder.fields(Some(fields));
        let (loader, _) = builder.open().unwrap();
        let feat = loader.config().pipeline.layout().parts()[1].offset;
        let slot = loader.config().pipeline.sample_bytes();
        let mut it = loader.epoch(0).unwrap();
        let mut delivered = Vec::new();
        for batch in it.by_ref() {
            for sample in batch.unwrap().data().chunks_exact(slot) {
                delivered.push(
                    sample[feat..feat + 4 * LENGTH]
                        .chunks_exact(4)
                        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
                        .collect(),
                );
            }
        }
        delivered.sort_by(|a: &Vec<f32>, b| a[0].total_cmp(&b[0]));
        let mut skipped: Vec<_> = it
            .skipped()
            .into_iter()
            .map(|e| {
                let key = e.location.rsplit(':').next().unwrap().to_string();
                (key, e.cause.kind())
            })
            .collect();
        skipped.sort();
        (delivered, skipped)
    })
}

#[test]
fn hostile_archives_skip_exactly_their_samples() {
    let (dir, clean) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hostile = corpus(dir.path(), true);
    corpus(clean.path(), false);
    let (want, none) = epoch(clean.path());
    assert!(none.is_empty());
    assert_eq!(want.len(), 40);
    assert!(want
        .iter()
        .enumerate()
        .all(|(i, v)| *v == [i as f32, 1.0, 2.0, 3.0]));
    let (delivered, skipped) = epoch(dir.path());
    let expected: Vec<_> = hostile.iter().map(|k| (k.clone(), "bad-vector")).collect();
    assert_eq!(skipped, expected);
    assert_eq!(delivered, want);
}

/// Set in the process [`peak_memory_over_hostile_archives_stays_near_that_over_good_ones`]
/// starts: the folder of shards to read.
const CHILD: &str = "NOSTALL_TEST_RSS_NPZ";

/// Not a test of its own: the body of a process that
/// [`peak_memory_over_hostile_archives_stays_near_that_over_good_ones`] starts.
#[test]
#[ignore = "run by peak_memory_over_hostile_archives_stays_near_that_over_good_ones"]
fn one_run_in_its_own_process() {
    let dir = std::env::var(CHILD).expect("started by the peak memory test");
    let (delivered, _) = epoch(Path::new(&dir));
    println!("delivered {} peak {}", delivered.len(), peak_rss());
}

#[test]
fn peak_memory_over_hostile_archives_stays_near_that_over_good_ones() {
    let (good, bad) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    corpus(good.path(), false);
    corpus(bad.path(), true);
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
    assert_eq!((good_delivered, bad_delivered), (40, 40));
    println!(
        "peak resident memory: {good_peak} bytes over good archives, {bad_peak} with hostile ones"
    );
    // Each bomb is 256 KiB read whole (the record's range) and refused for what it
    // declares or at the first byte past it; inflated, either would take 256 MiB.
    assert!(
        bad_peak < good_peak + (64 << 20),
        "peak resident memory {bad_peak} bytes with hostile archives, {good_peak} without"
    );
}
