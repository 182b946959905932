//! Shared test fixtures: small datasets of generated JPEGs, as folders, tar shards and
//! Parquet files written as Hugging Face's `datasets` writes them (behaviour tests only;
//! speed is measured on real photographs in bench/).

// Each test binary uses a different subset of these fixtures.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use nostall::prep::image::codec::{encode_jpeg, EncodePixels};
use nostall::storage::{LocalFiles, ReadMode};
use nostall::{Catalog, Loader, LoaderConfig, Pipeline};
use std::fs;
use std::process::Command;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

/// Runs `body` on a thread; a panic or two minutes without an answer fail the test (a
/// hostile input must never hang or kill the process).
pub(crate) fn watchdog<T: Send + 'static>(
    what: String,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer in two minutes")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// The peak resident memory of this process, from the kernel, in bytes.
pub(crate) fn peak_rss() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb << 10
}

/// The name the test harness gives the test `name` of the module `module` (the caller's
/// `module_path!()`, which starts with the test binary's crate): the module path without
/// the crate, then the test, as `--exact` wants it (`npz::one_run_in_its_own_process`).
pub(crate) fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Runs the (ignored) test `name` of the module `module` (the caller's `module_path!()`)
/// of this test binary in a process of its own, with the environment variable `var` set
/// to `value`, so that the peak memory it reports is of its run alone; the test prints
/// `delivered N peak BYTES`, returned as `(N, BYTES)`.
pub(crate) fn run_alone(module: &str, name: &str, var: &str, value: &Path) -> (usize, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name(module, name), "--include-ignored"])
        .arg("--nocapture")
        .args(["--test-threads", "1"])
        .env(var, value)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {text}{err}", out.status);
    // The harness prints the test's name on the same line, before.
    let report = text.split("delivered ").nth(1).expect("the run's report");
    let fields: Vec<&str> = report.split_whitespace().collect();
    (fields[0].parse().unwrap(), fields[2].parse().unwrap())
}

/// A textured picture, different for every `seed`, so that crops and flips show.
pub(crate) fn picture(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let mut px = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height {
        for x in 0..width {
            let v = x.wrapping_mul(7 + seed) ^ y.wrapping_mul(13 + seed);
            px.extend([
                (x * 255 / width) as u8,
                (y * 255 / height) as u8,
                (v % 251) as u8,
            ]);
        }
    }
    px
}

pub(crate) fn jpeg(width: u32, height: u32, seed: u32) -> Vec<u8> {
    encode_jpeg(
        &picture(width, height, seed),
        width,
        height,
        EncodePixels::Rgb,
        90,
        seed.is_multiple_of(3),
    )
    .unwrap()
}

/// `classes` × `per_class` JPEGs of assorted sizes in ImageFolder layout.
pub(crate) fn image_folder(root: &Path, classes: usize, per_class: usize) {
    for c in 0..classes {
        let dir = root.join(format!("class{c}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..per_class {
            let seed = (c * per_class + i) as u32;
            let (w, h) = [(96, 72), (72, 96), (120, 90), (64, 64)][seed as usize % 4];
            std::fs::write(dir.join(format!("img{i:03}.jpg")), jpeg(w, h, seed)).unwrap();
        }
    }
}

pub(crate) fn loader(root: &Path, config: LoaderConfig) -> Loader {
    let (catalog, _) = Catalog::scan(root, nostall::Modality::Image).unwrap();
    let catalog = Arc::new(catalog);
    let source = Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
    Loader::new(catalog, source, config).unwrap()
}

pub(crate) fn config(batch_size: usize, threads: usize) -> LoaderConfig {
    let mut config = LoaderConfig::new(Pipeline::imagenet_train(32));
    config.plan.batch_size = batch_size;
    config.plan.seed = 5;
    config.prep_threads = threads;
    config.fetch_threads = threads;
    config.prefetch = 2;
    config
}

/// Writes the dataset of `catalog` as WebDataset tar shards of `per_shard` samples into
/// `out`, with `.cls` labels, using the system's `tar` as an independent writer.
pub(crate) fn write_shards(catalog: &Catalog, out: &Path, per_shard: usize) {
    let staging = tempfile::tempdir().unwrap();
    let ids: Vec<u64> = (0..catalog.len() as u64).collect();
    for (n, chunk) in ids.chunks(per_shard).enumerate() {
        let shard_dir = staging.path().join(format!("{n}"));
        fs::create_dir_all(&shard_dir).unwrap();
        let mut names = Vec::new();
        for &id in chunk {
            let key = format!("{id:06}");
            let ext = catalog.relative_path(id).rsplit('.').next().unwrap();
            fs::copy(catalog.path(id), shard_dir.join(format!("{key}.{ext}"))).unwrap();
            let label = catalog.label(id).unwrap().to_string();
            fs::write(shard_dir.join(format!("{key}.cls")), label).unwrap();
            names.push(format!("{key}.{ext}"));
            names.push(format!("{key}.cls"));
        }
        let status = Command::new("tar")
            .arg("-cf")
            .arg(out.join(format!("train-{n:04}.tar")))
            .arg("-C")
            .arg(&shard_dir)
            .args(&names)
            .status()
            .expect("the system's tar runs");
        assert!(status.success());
    }
}

/// A tar shard of `(name, data)` members, ustar as GNU tar writes it (names of at most
/// 100 bytes).
pub(crate) fn tar(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in members {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        header[100..108].copy_from_slice(b"0000644\0");
        header[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
        header[136..148].copy_from_slice(b"00000000000\0");
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// One delivered batch: ids, labels and bytes.
pub(crate) type BatchOutput = (Vec<u64>, Vec<i64>, Vec<u8>);

pub(crate) fn output(batch: &nostall::Batch) -> BatchOutput {
    (
        batch.ids().to_vec(),
        batch.labels().to_vec(),
        batch.data().to_vec(),
    )
}

/// Every batch of an epoch.
pub(crate) fn epoch_output(loader: &Loader, epoch: u64) -> Vec<BatchOutput> {
    loader
        .epoch(epoch)
        .unwrap()
        .map(|b| output(&b.unwrap()))
        .collect()
}

/// One row of a Parquet dataset: the encoded sample (or none: a null), its class.
pub(crate) type Row = (Option<Vec<u8>>, i64);

/// The `huggingface` metadata `datasets` writes for an image and a class label.
pub(crate) fn features(classes: &[String]) -> String {
    let names: Vec<String> = classes.iter().map(|c| format!("{c:?}")).collect();
    format!(
        r#"{{"info": {{"features": {{"image": {{"_type": "Image"}}, "label": {{"names": [{}], "_type": "ClassLabel"}}}}}}}}"#,
        names.join(", ")
    )
}

/// The demo's real photographs as rows, class by class (as a conversion from class
/// folders sorts them), with the class names.
pub(crate) fn demo_rows() -> (Vec<Row>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    nostall_demo::write(dir.path()).unwrap();
    let classes: Vec<String> = nostall_demo::classes()
        .iter()
        .map(|c| c.to_string())
        .collect();
    let mut rows = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let mut names: Vec<_> = fs::read_dir(dir.path().join(class))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for path in names {
            rows.push((Some(fs::read(path).unwrap()), label as i64));
        }
    }
    (rows, classes)
}

/// Writes `rows` as `datasets` does: `image` a struct of `bytes` and `path`, `label` an
/// int64, Snappy, `group` rows a row group, with `metadata` as the `huggingface` key.
pub(crate) fn write(path: &Path, rows: &[Row], group: usize, metadata: Option<String>) {
    write_with(path, rows, group, metadata, Compression::SNAPPY);
}

/// [`write`] with another compression.
pub(crate) fn write_with(
    path: &Path,
    rows: &[Row],
    group: usize,
    metadata: Option<String>,
    compression: Compression,
) {
    write_column(path, "image", rows, group, metadata, compression);
}

/// [`write_with`], the samples in column `column` (a struct of `bytes` and `path`).
pub(crate) fn write_column(
    path: &Path,
    column: &str,
    rows: &[Row],
    group: usize,
    metadata: Option<String>,
    compression: Compression,
) {
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_key_value_metadata(metadata.map(|m| vec![KeyValue::new("huggingface".into(), m)]));
    write_props(path, column, rows, group, props.build());
}

/// [`write`] with pages of `page_rows` rows, plain encoded (no dictionary), with an offset
/// index: as `datasets` 5 writes image columns, in pages of a few photographs.
pub(crate) fn write_paged(
    path: &Path,
    rows: &[Row],
    group: usize,
    page_rows: usize,
    metadata: Option<String>,
) {
    let props = WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_data_page_row_count_limit(page_rows)
        .set_write_batch_size(1)
        .set_key_value_metadata(metadata.map(|m| vec![KeyValue::new("huggingface".into(), m)]));
    write_props(path, "image", rows, group, props.build());
}

/// Writes `rows` with the samples in column `column`, `group` rows a row group, with
/// `props`.
fn write_props(path: &Path, column: &str, rows: &[Row], group: usize, props: WriterProperties) {
    let schema = parse_message_type(&format!(
        "message schema {{
            optional group {column} {{ optional binary bytes; optional binary path (STRING); }}
            optional int64 label;
        }}"
    ))
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props)).unwrap();
    for chunk in rows.chunks(group) {
        let mut row_group = writer.next_row_group().unwrap();
        let mut column = 0;
        while let Some(mut col) = row_group.next_column().unwrap() {
            match column {
                0 => {
                    let values: Vec<ByteArray> = chunk
                        .iter()
                        .filter_map(|r| r.0.clone().map(ByteArray::from))
                        .collect();
                    let defs: Vec<i16> = chunk
                        .iter()
                        .map(|r| if r.0.is_some() { 2 } else { 1 })
                        .collect();
                    col.typed::<ByteArrayType>()
                        .write_batch(&values, Some(&defs), None)
                        .unwrap();
                }
                1 => {
                    let defs = vec![1i16; chunk.len()];
                    col.typed::<ByteArrayType>()
                        .write_batch(&[], Some(&defs), None)
                        .unwrap();
                }
                _ => {
                    let values: Vec<i64> = chunk.iter().map(|r| r.1).collect();
                    let defs = vec![1i16; chunk.len()];
                    col.typed::<Int64Type>()
                        .write_batch(&values, Some(&defs), None)
                        .unwrap();
                }
            }
            col.close().unwrap();
            column += 1;
        }
        row_group.close().unwrap();
    }
    writer.close().unwrap();
}
