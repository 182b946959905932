//! `S3Store` against a real S3-compatible server: `s3s-fs`, which serves a directory
//! over the S3 API (each sub-directory is a bucket, each file below it an object).
//! `make deps` installs it; without it these tests fail, they never pass silently.
//!
//! The second half runs whole epochs through a [`Loader`] over data in the server (as
//! WebDataset shards, as one object per image, as a Parquet file) and checks them against
//! the same images read from a local folder.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{self, config, epoch_output, image_folder, output, write_shards, BatchOutput};
use nostall::dataset::{self, Columns, Format};
use nostall::storage::{
    BlobStore, Objects, ParquetFiles, RangeRead, ReadMode, S3Config, S3Store, Source, TarShards,
};
use nostall::{Catalog, Cause, Error, ErrorPolicy, Loader, LoaderConfig, Modality, Pipeline};

const ACCESS_KEY: &str = "nostall-test";
const SECRET_KEY: &str = "nostall-test-secret";

/// The `s3s-fs` binary: `$S3S_FS`, else cargo's bin directory, else `PATH`.
fn s3s_fs() -> PathBuf {
    if let Some(path) = std::env::var_os("S3S_FS") {
        return path.into();
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let candidates = cargo_home
        .map(|home| home.join("bin"))
        .into_iter()
        .chain(std::env::split_paths(&path));
    for dir in candidates {
        let path = dir.join("s3s-fs");
        if path.is_file() {
            return path;
        }
    }
    panic!(
        "the S3 tests need the `s3s-fs` server and it is not installed (looked in \
         $CARGO_HOME/bin and PATH): run `make deps` (or `cargo install s3s-fs@0.14.1 \
         --features binary --locked`), or point S3S_FS at the binary"
    );
}

/// A port on 127.0.0.1 that nothing listens on right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// An `s3s-fs` process serving `root` on 127.0.0.1; killed on drop.
struct Server {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Server {
    /// Starts a server for `root` on `port` and waits until it accepts connections.
    fn start(root: &Path, port: u16, log: &Path) -> Server {
        let child = Command::new(s3s_fs())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(File::create(log).unwrap())
            .stderr(File::create(log.with_extension("err")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start s3s-fs: {e} (run `make deps`)"));
        let mut server = Server {
            child: Some(child),
            port,
            log: log.to_path_buf(),
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            let child = self.child.as_mut().unwrap();
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "s3s-fs exited ({status}) before listening on {addr}: {}",
                    fs::read_to_string(self.log.with_extension("err")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "s3s-fs is not listening on {addr} after 20 s"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL, no goodbye to open connections) and reaps it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A served directory with bucket `data` holding objects under `train/` and around it.
struct Fixture {
    dir: tempfile::TempDir,
    server: Server,
}

/// Deterministic contents of a given size.
fn content(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7) as u8)
        .collect()
}

const OBJECTS: [(&str, usize); 6] = [
    ("data/train/b/2.jpg", 70_000),
    ("data/train/a/1.jpg", 1_000),
    ("data/train/a/0.jpg", 3),
    ("data/train/shard-000.tar", 200_001),
    ("data/trainx/not-under-the-prefix.jpg", 10),
    ("data/top.bin", 5),
];

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for (i, (key, size)) in OBJECTS.iter().enumerate() {
            let path = root.join(key);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content(*size, i as u8)).unwrap();
        }
        let server = Server::start(&root, free_port(), &dir.path().join("s3s-fs.log"));
        Fixture { dir, server }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn bytes(&self, key: &str) -> Vec<u8> {
        fs::read(self.root().join(key)).unwrap()
    }

    fn config(&self, url: &str) -> S3Config {
        config_for(url, &self.server.endpoint())
    }

    fn store(&self, url: &str) -> S3Store {
        S3Store::new(self.config(url)).unwrap()
    }
}

fn config_for(url: &str, endpoint: &str) -> S3Config {
    let mut config = S3Config::from_url(url).unwrap();
    config.endpoint = Some(endpoint.to_string());
    config.allow_http = true;
    config.region = "us-east-1".into();
    config.access_key_id = Some(ACCESS_KEY.into());
    config.secret_access_key = Some(SECRET_KEY.into());
    config.session_token = None;
    config
}

#[test]
fn lists_the_objects_under_the_prefix_relative_and_sorted() {
    let fixture = Fixture::new();
    let store = fixture.store("s3://data/train");
    assert_eq!(store.root(), "s3://data/train");
    let expected = [
        ("a/0.jpg", 3),
        ("a/1.jpg", 1_000),
        ("b/2.jpg", 70_000),
        ("shard-000.tar", 200_001),
    ]
    .map(|(key, size)| (key.to_string(), size));
    // (s3s-fs lists no ETags, so the versions are not compared here.)
    let listed = |store: &S3Store| -> Vec<(String, u64)> {
        let blobs = store.list().unwrap();
        blobs.into_iter().map(|b| (b.key, b.size)).collect()
    };
    assert_eq!(listed(&store), expected);
    // A trailing slash names the same prefix.
    assert_eq!(listed(&fixture.store("s3://data/train/")), expected);

    let whole = fixture.store("s3://data").list().unwrap();
    let keys: Vec<&str> = whole.iter().map(|b| b.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "top.bin",
            "train/a/0.jpg",
            "train/a/1.jpg",
            "train/b/2.jpg",
            "train/shard-000.tar",
            "trainx/not-under-the-prefix.jpg"
        ]
    );
    assert!(fixture
        .store("s3://data/nothing-here")
        .list()
        .unwrap()
        .is_empty());
}

#[test]
fn ranged_reads_return_exactly_the_bytes_asked_for() {
    let fixture = Fixture::new();
    let store = fixture.store("s3://data/train");
    let tar = fixture.bytes("data/train/shard-000.tar");
    let mut out = vec![0xAA; 17];
    for (offset, len) in [
        (0, 1),
        (0, 512),
        (1, 1),
        (512, 1_000),
        (100_000, 65_536),
        (199_000, 1_001),
        (0, 200_001),
    ] {
        store
            .read_range("shard-000.tar", offset, len, &mut out)
            .unwrap();
        let range = offset as usize..(offset + len) as usize;
        assert_eq!(out.len(), range.len(), "{range:?}");
        assert!(out == tar[range.clone()], "bytes {range:?} differ");
    }
    store.read_range("a/0.jpg", 0, 3, &mut out).unwrap();
    assert_eq!(out, fixture.bytes("data/train/a/0.jpg"));
    store.read_range("b/2.jpg", 0, 0, &mut out).unwrap();
    assert!(out.is_empty());
}

#[test]
fn reads_in_flight_together_end_each_once_with_what_one_at_a_time_gives() {
    let fixture = Fixture::new();
    let store = fixture.store("s3://data/train");
    assert!(store.reads_at_once() > 1);
    // Good ranges among a missing object, a range past the end and an empty range: each
    // ends with what a read of its own gives, the failures alone, numbered in the order
    // they were given.
    let ranges: [(&str, u64, u64); 7] = [
        ("shard-000.tar", 0, 200_001),
        ("a/gone.jpg", 0, 10),
        ("b/2.jpg", 1_000, 65_536),
        ("a/1.jpg", 990, 20),
        ("a/0.jpg", 0, 3),
        ("b/2.jpg", 0, 0),
        ("shard-000.tar", 199_000, 1_001),
    ];
    let mut reads = ranges.iter().map(|&(key, offset, len)| RangeRead {
        key,
        version: None,
        offset,
        len,
        out: vec![0xAA; 5],
    });
    // After two reads, no room for a moment: the store asks again once a read has ended.
    let mut given = 0;
    let mut next = || {
        given += 1;
        if given == 3 {
            return None;
        }
        reads.next()
    };
    let mut ended = BTreeMap::new();
    store.read_each_range(&mut next, &mut |index, out, result| {
        assert!(
            ended.insert(index, (out, result)).is_none(),
            "read {index} ended twice"
        );
    });
    assert_eq!(ended.len(), ranges.len());
    for (index, &(key, offset, len)) in ranges.iter().enumerate() {
        let mut alone = Vec::new();
        let expected = store.read_range(key, offset, len, &mut alone);
        assert_eq!(ended[&index], (alone, expected), "read {index}: {key}");
    }
    assert_eq!(ended[&1].1, Err(Cause::Missing));
    assert!(matches!(ended[&3].1, Err(Cause::Io(_))));
}

#[test]
fn a_range_past_the_end_is_an_error_not_a_short_read() {
    let fixture = Fixture::new();
    let store = fixture.store("s3://data/train");
    let mut out = Vec::new();
    // Starting inside the object and running past its end (1000 bytes).
    match store.read_range("a/1.jpg", 990, 20, &mut out) {
        Err(Cause::Io(message)) => assert!(message.contains("a/1.jpg"), "{message}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(out.is_empty());
    // Starting after the end.
    match store.read_range("a/1.jpg", 5_000, 10, &mut out) {
        Err(Cause::Io(message)) => assert!(message.contains("a/1.jpg"), "{message}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(out.is_empty());
}

#[test]
fn a_missing_object_is_cause_missing() {
    let fixture = Fixture::new();
    let store = fixture.store("s3://data/train");
    let mut out = vec![1, 2, 3];
    assert_eq!(
        store.read_range("a/gone.jpg", 0, 10, &mut out),
        Err(Cause::Missing)
    );
    assert!(out.is_empty());
    assert_eq!(
        fixture
            .store("s3://no-such-bucket/train")
            .read_range("a/1.jpg", 0, 10, &mut out),
        Err(Cause::Missing)
    );
}

#[test]
fn a_missing_bucket_is_a_storage_error_that_names_it() {
    let fixture = Fixture::new();
    let error = fixture
        .store("s3://no-such-bucket/train")
        .list()
        .unwrap_err();
    let Error::Storage { location, message } = &error else {
        panic!("expected a storage error, got {error:?}");
    };
    assert_eq!(location, "s3://no-such-bucket/train");
    assert!(
        message.contains("bucket `no-such-bucket` does not exist"),
        "{message}"
    );
    assert!(message.contains(&fixture.server.endpoint()), "{message}");
    assert!(error.to_string().starts_with("s3://no-such-bucket/train: "));
}

#[test]
fn wrong_credentials_are_a_storage_error_about_credentials() {
    let fixture = Fixture::new();
    let mut config = fixture.config("s3://data/train");
    config.secret_access_key = Some("wrong".into());
    let error = S3Store::new(config).unwrap().list().unwrap_err();
    let Error::Storage { message, .. } = &error else {
        panic!("expected a storage error, got {error:?}");
    };
    assert!(message.contains("credentials"), "{message}");
}

#[test]
fn an_unreachable_server_is_a_storage_error_once_the_retry_window_is_over() {
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let mut config = config_for("s3://data/train", &endpoint);
    config.retry_window = Duration::from_millis(500);
    let store = S3Store::new(config).unwrap();
    let started = Instant::now();
    let error = store.list().unwrap_err();
    let waited = started.elapsed();
    let Error::Storage { location, message } = &error else {
        panic!("expected a storage error, got {error:?}");
    };
    assert_eq!(location, "s3://data/train");
    assert!(message.contains("cannot reach the server"), "{message}");
    assert!(message.contains(&endpoint), "{message}");
    // It was retried for the window, and gave up soon after.
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");

    let mut out = Vec::new();
    match store.read_range("a/1.jpg", 0, 10, &mut out) {
        Err(Cause::Io(message)) => {
            assert!(message.contains("s3://data/train/a/1.jpg"), "{message}")
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

/// On real time, deliberately: what is tested is the S3 client's retries against a real
/// server's outage (its sockets, its restart), not a decision of nostall's that a clock
/// could drive; the outage is kept short (1.5 s within a retry window of many seconds).
#[test]
fn a_server_restarted_within_the_retry_window_costs_no_sample() {
    let mut fixture = Fixture::new();
    let store = Arc::new(fixture.store("s3://data/train"));
    let expected = Arc::new(fixture.bytes("data/train/b/2.jpg"));
    let stop = Arc::new(AtomicBool::new(false));
    // Several loader threads read continuously; each read must succeed.
    let readers: Vec<_> = (0..4)
        .map(|t| {
            let (store, expected, stop) = (store.clone(), expected.clone(), stop.clone());
            thread::spawn(move || {
                let mut out = Vec::new();
                let (mut reads, mut slowest) = (0u32, Duration::ZERO);
                while !stop.load(Ordering::Relaxed) {
                    let offset = (reads as u64 * 997 + t * 13) % 60_000;
                    let started = Instant::now();
                    store
                        .read_range("b/2.jpg", offset, 10_000, &mut out)
                        .unwrap_or_else(|e| panic!("read {reads} of thread {t} failed: {e}"));
                    slowest = slowest.max(started.elapsed());
                    let range = offset as usize..offset as usize + 10_000;
                    assert!(
                        out == expected[range],
                        "read {reads} of thread {t}: wrong bytes"
                    );
                    reads += 1;
                    thread::sleep(Duration::from_millis(5));
                }
                (reads, slowest)
            })
        })
        .collect();

    thread::sleep(Duration::from_millis(300));
    let port = fixture.server.port;
    fixture.server.kill();
    thread::sleep(Duration::from_millis(1_500));
    let root = fixture.root();
    fixture.server = Server::start(&root, port, &fixture.dir.path().join("s3s-fs-2.log"));
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);

    for reader in readers {
        let (reads, slowest) = reader.join().expect("a reader failed");
        assert!(reads > 2, "only {reads} reads");
        // Some read spanned the outage: it was retried, not failed.
        assert!(
            slowest >= Duration::from_millis(1_000),
            "slowest read {slowest:?}"
        );
    }
    // The listing works against the new server too.
    assert_eq!(store.list().unwrap().len(), 4);
}

// ---- Whole epochs through a loader -------------------------------------------------

/// Samples per tar shard in [`Served`].
const PER_SHARD: usize = 10;

/// An ImageFolder on disk, and the same images served by `s3s-fs` in both layouts:
/// WebDataset shards (`train-0000.tar`, … holding `000000.jpg`, `000000.cls`, …, in the
/// folder's catalog order) under `s3://shards/train`, and one object per image
/// (`class0/img000.jpg`, …) under `s3://objects/train`.
struct Served {
    dir: tempfile::TempDir,
    server: Server,
    len: usize,
}

impl Served {
    fn new(classes: usize, per_class: usize) -> Served {
        Served::of(
            |folder| image_folder(folder, classes, per_class),
            Modality::Image,
        )
    }

    /// The samples `write` puts in a class folder, of `modality`, served as shards and
    /// as objects.
    fn of(write: impl FnOnce(&Path), modality: Modality) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("folder");
        write(&folder);
        let (catalog, _) = Catalog::scan(&folder, modality).unwrap();
        let root = dir.path().join("root");
        let shards = root.join("shards/train");
        fs::create_dir_all(&shards).unwrap();
        write_shards(&catalog, &shards, PER_SHARD);
        for id in 0..catalog.len() as u64 {
            let object = root.join("objects/train").join(catalog.relative_path(id));
            fs::create_dir_all(object.parent().unwrap()).unwrap();
            fs::copy(catalog.path(id), object).unwrap();
        }
        let server = Server::start(&root, free_port(), &dir.path().join("s3s-fs.log"));
        Served {
            dir,
            server,
            len: catalog.len(),
        }
    }

    fn folder(&self) -> PathBuf {
        self.dir.path().join("folder")
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn store(&self, url: &str) -> Arc<S3Store> {
        Arc::new(S3Store::new(config_for(url, &self.server.endpoint())).unwrap())
    }
}

/// The loader configuration of these tests: small batches, several fetch threads.
fn s3_config(batch_size: usize) -> LoaderConfig {
    let mut config = config(batch_size, 2);
    config.fetch_threads = 4;
    config
}

/// The folder's epoch, read from local files.
fn folder_output(served: &Served, config: &LoaderConfig, epoch: u64) -> Vec<BatchOutput> {
    epoch_output(&common::loader(&served.folder(), config.clone()), epoch)
}

#[test]
fn shards_and_objects_in_s3_yield_the_same_batches_as_the_folder() {
    let served = Served::new(3, 14);
    let mut config = s3_config(8);
    // The reads of one epoch are counted: none of the next epoch's, started ahead.
    config.overlap_epochs = false;
    let expected = folder_output(&served, &config, 1);

    let shards =
        TarShards::open(served.store("s3://shards/train"), nostall::Modality::Image).unwrap();
    assert_eq!(shards.shards().len(), served.len.div_ceil(PER_SHARD));
    let objects =
        Objects::open(served.store("s3://objects/train"), nostall::Modality::Image).unwrap();
    let sources: [(&str, Arc<Catalog>, Arc<dyn Source>); 2] = [
        ("shards", shards.catalog().clone(), Arc::new(shards)),
        ("objects", objects.catalog().clone(), Arc::new(objects)),
    ];
    for (layout, catalog, source) in sources {
        assert_eq!(catalog.len(), served.len, "{layout}");
        let loader = Loader::new(catalog, source.clone(), config.clone()).unwrap();
        // Ids are assigned in the folder's order in both layouts, so the same seed picks
        // the same samples with the same augmentation.
        assert!(
            epoch_output(&loader, 1) == expected,
            "{layout}: the batches differ from the folder's"
        );
        let stats = source.stats();
        assert_eq!(
            stats.requests, served.len as u64,
            "{layout}: one read per sample"
        );
    }
}

#[test]
fn parquet_in_s3_yields_the_same_batches_as_the_folder() {
    let served = Served::new(3, 14);
    let (catalog, _) = Catalog::scan(&served.folder(), Modality::Image).unwrap();
    let rows: Vec<common::Row> = (0..catalog.len() as u64)
        .map(|id| {
            let label = catalog.label(id).unwrap();
            (Some(fs::read(catalog.path(id)).unwrap()), i64::from(label))
        })
        .collect();
    let file = served.root().join("parquet/train/data-00000.parquet");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let features = common::features(catalog.classes());
    common::write(&file, &rows, 5, Some(features));
    let mut config = s3_config(8);
    config.overlap_epochs = false;
    let expected = folder_output(&served, &config, 1);

    let store = served.store("s3://parquet/train");
    let listing = store.list().unwrap();
    let files =
        ParquetFiles::from_listing(store, listing, Modality::Image, &Columns::default()).unwrap();
    assert_eq!(files.catalog().classes(), catalog.classes());
    assert_eq!(files.catalog().groups().len(), catalog.len().div_ceil(5));
    let (files_catalog, files) = (files.catalog().clone(), Arc::new(files));
    let loader = Loader::new(files_catalog, files.clone(), config).unwrap();
    assert!(
        epoch_output(&loader, 1) == expected,
        "the batches differ from the folder's"
    );
    assert_eq!(
        files.stats().requests,
        catalog.len() as u64,
        "one read per sample"
    );

    // The file named alone, as `s3://bucket/prefix/file.parquet`.
    let endpoint = served.server.endpoint();
    let var = |name: &str| {
        Some(match name {
            "AWS_ENDPOINT_URL" => endpoint.clone(),
            "AWS_ACCESS_KEY_ID" => ACCESS_KEY.to_string(),
            "AWS_SECRET_ACCESS_KEY" => SECRET_KEY.to_string(),
            "AWS_REGION" => "us-east-1".to_string(),
            _ => return None,
        })
    };
    let open = |location: &str| {
        dataset::open_in(
            location,
            ReadMode::Cached,
            Modality::Image,
            &Columns::default(),
            &var,
        )
    };
    let named = open("s3://parquet/train/data-00000.parquet").unwrap();
    assert_eq!(named.format, Format::Parquet);
    assert_eq!(named.catalog.len(), catalog.len());
    let error = open("s3://parquet/train/data-00001.parquet").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("s3://parquet/train/data-00001.parquet"),
        "{error}"
    );
}

#[test]
fn audio_shards_and_objects_in_s3_yield_the_same_batches_as_the_folder() {
    let clips = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/audio");
    let served = Served::of(
        |folder| {
            for entry in fs::read_dir(&clips).unwrap().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if Modality::Audio.accepts(&name) {
                    let class = folder.join(if name.ends_with(".mp3") {
                        "mp3"
                    } else {
                        "other"
                    });
                    fs::create_dir_all(&class).unwrap();
                    fs::copy(entry.path(), class.join(&name)).unwrap();
                }
            }
        },
        Modality::Audio,
    );
    let mut config = s3_config(3);
    config.pipeline = Pipeline::preset("melspec", 0).unwrap();
    let local = dataset::open(
        served.folder().to_str().unwrap(),
        ReadMode::Cached,
        Modality::Audio,
    )
    .unwrap();
    let expected = epoch_output(
        &Loader::new(local.catalog, local.source, config.clone()).unwrap(),
        0,
    );
    let clip_count = fs::read_dir(&clips)
        .unwrap()
        .flatten()
        .filter(|e| Modality::Audio.accepts(&e.file_name().to_string_lossy()))
        .count();
    assert_eq!(
        expected.iter().map(|b| b.0.len()).sum::<usize>(),
        clip_count
    );
    let shards = TarShards::open(served.store("s3://shards/train"), Modality::Audio).unwrap();
    let objects = Objects::open(served.store("s3://objects/train"), Modality::Audio).unwrap();
    let sources: [(&str, Arc<Catalog>, Arc<dyn Source>); 2] = [
        ("shards", shards.catalog().clone(), Arc::new(shards)),
        ("objects", objects.catalog().clone(), Arc::new(objects)),
    ];
    for (layout, catalog, source) in sources {
        let loader = Loader::new(catalog, source, config.clone()).unwrap();
        assert!(
            epoch_output(&loader, 0) == expected,
            "{layout}: the batches differ from the folder's"
        );
    }
}

#[test]
fn a_server_restart_mid_epoch_costs_no_sample_and_changes_no_byte() {
    let mut served = Served::new(4, 15);
    let shards =
        TarShards::open(served.store("s3://shards/train"), nostall::Modality::Image).unwrap();
    let catalog = shards.catalog().clone();
    let config = s3_config(4);
    let loader = Loader::new(catalog.clone(), Arc::new(shards), config.clone()).unwrap();
    let undisturbed = epoch_output(&loader, 1);
    assert!(
        undisturbed == folder_output(&served, &config, 1),
        "the batches differ from the folder's"
    );

    let port = served.server.port;
    let (root, log) = (served.root(), served.dir.path().join("s3s-fs-2.log"));
    let mut server = Some(&mut served.server);
    let mut disturbed = Vec::new();
    let mut longest_wait = Duration::ZERO;
    let outage = Duration::from_millis(1_500);
    thread::scope(|scope| {
        let mut epoch = loader.epoch(1).unwrap();
        let mut outage_thread = None;
        for batch in epoch.by_ref() {
            let batch = batch.unwrap_or_else(|e| panic!("batch {} failed: {e}", disturbed.len()));
            longest_wait = longest_wait.max(batch.wait());
            disturbed.push(output(&batch));
            if disturbed.len() == 3 {
                // Down while the loader keeps reading: fetches in flight break off, new
                // ones are refused, until the same server comes back on the same port.
                let server = server.take().expect("one outage");
                outage_thread = Some(scope.spawn(|| {
                    server.kill();
                    thread::sleep(outage);
                    *server = Server::start(&root, port, &log);
                }));
            }
        }
        outage_thread
            .expect("the epoch has more than three batches")
            .join()
            .expect("the server restarted");
        let stats = epoch.stats();
        assert!(stats.skipped.is_empty(), "skipped {:?}", stats.skipped);
        assert_eq!(stats.samples, served.len as u64);
    });

    let mut ids: Vec<u64> = disturbed.iter().flat_map(|b| b.0.clone()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..served.len as u64).collect::<Vec<_>>());
    assert!(
        disturbed == undisturbed,
        "the batches differ from an undisturbed epoch"
    );
    // The outage was felt: the loader ran out of bytes read ahead and waited for the
    // server to come back, rather than finishing before it went down.
    assert!(
        longest_wait >= outage / 2,
        "the longest wait for a batch was {longest_wait:?}"
    );
}

/// Runs an epoch under each error policy over `source`, whose samples `gone` were
/// deleted from the server after indexing; `location` is where each should be reported.
fn check_missing(
    catalog: &Arc<Catalog>,
    source: Arc<dyn Source>,
    gone: &[u64],
    location: impl Fn(u64) -> String,
) {
    let mut config = s3_config(8);
    let strict = Loader::new(catalog.clone(), source.clone(), config.clone()).unwrap();
    let mut epoch = strict.epoch(0).unwrap();
    let error = epoch
        .by_ref()
        .find_map(|batch| batch.err())
        .expect("the epoch stops at a missing sample");
    let Error::Sample(sample) = &error else {
        panic!("expected a sample error, got {error:?}");
    };
    assert!(gone.contains(&sample.id), "{error}");
    assert_eq!(sample.cause, Cause::Missing, "{error}");
    assert_eq!(sample.location, location(sample.id));
    assert!(error.to_string().contains(&location(sample.id)), "{error}");
    assert!(epoch.next().is_none(), "the epoch goes on after its error");
    drop(epoch);

    config.on_error = ErrorPolicy::Skip;
    let lenient = Loader::new(catalog.clone(), source, config).unwrap();
    let mut epoch = lenient.epoch(0).unwrap();
    let batches: Vec<Vec<u64>> = epoch.by_ref().map(|b| b.unwrap().ids().to_vec()).collect();
    assert_eq!(
        epoch.stats().skipped,
        BTreeMap::from([("missing", gone.len() as u64)])
    );
    let mut skipped: Vec<(u64, String)> = epoch
        .skipped()
        .into_iter()
        .map(|e| (e.id, e.location))
        .collect();
    skipped.sort();
    let expected: Vec<(u64, String)> = gone.iter().map(|&id| (id, location(id))).collect();
    assert_eq!(skipped, expected);
    // The gaps are filled: every batch is full but the last.
    let delivered = catalog.len() - gone.len();
    let mut sizes = vec![8; delivered / 8];
    if !delivered.is_multiple_of(8) {
        sizes.push(delivered % 8);
    }
    assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), sizes);
    let mut ids = batches.concat();
    ids.sort_unstable();
    let kept: Vec<u64> = (0..catalog.len() as u64)
        .filter(|id| !gone.contains(id))
        .collect();
    assert_eq!(ids, kept);
}

#[test]
fn an_object_deleted_after_indexing_stops_the_epoch_or_is_skipped_and_counted() {
    let served = Served::new(3, 10);
    let objects =
        Objects::open(served.store("s3://objects/train"), nostall::Modality::Image).unwrap();
    let catalog = objects.catalog().clone();
    let key = "class1/img004.jpg";
    let gone = (0..catalog.len() as u64)
        .find(|&id| catalog.relative_path(id) == key)
        .unwrap();
    fs::remove_file(served.root().join("objects/train").join(key)).unwrap();
    check_missing(&catalog, Arc::new(objects), &[gone], |_| {
        format!("s3://objects/train/{key}")
    });
}

#[test]
fn a_shard_deleted_after_indexing_stops_the_epoch_or_is_skipped_and_counted() {
    let served = Served::new(3, 10);
    let shards =
        TarShards::open(served.store("s3://shards/train"), nostall::Modality::Image).unwrap();
    let catalog = shards.catalog().clone();
    fs::remove_file(served.root().join("shards/train/train-0001.tar")).unwrap();
    let gone: Vec<u64> = (PER_SHARD as u64..2 * PER_SHARD as u64).collect();
    check_missing(&catalog, Arc::new(shards), &gone, |id| {
        format!("s3://shards/train/train-0001.tar:{id:06}.jpg")
    });
}

#[test]
fn opening_a_dataset_in_a_missing_bucket_is_a_storage_error_that_names_it() {
    let fixture = Fixture::new();
    let store = Arc::new(fixture.store("s3://no-such-bucket/train"));
    let errors = [
        TarShards::open(store.clone(), nostall::Modality::Image).unwrap_err(),
        Objects::open(store, nostall::Modality::Image).unwrap_err(),
    ];
    for error in errors {
        let Error::Storage { location, message } = &error else {
            panic!("expected a storage error, got {error:?}");
        };
        assert_eq!(location, "s3://no-such-bucket/train");
        assert!(
            message.contains("bucket `no-such-bucket` does not exist"),
            "{message}"
        );
    }
}

/// Set (to the local folder) in the child process of
/// [`dataset_open_takes_the_s3_settings_from_the_environment`].
const CHILD_FOLDER: &str = "NOSTALL_TEST_S3_FOLDER";

/// `dataset::open` reads the endpoint and the keys from the environment, which is shared
/// by every thread of the process: setting it here would race with the other tests. So
/// the checks run in a child process, this test binary again running only this test,
/// started with the variables set.
#[test]
fn dataset_open_takes_the_s3_settings_from_the_environment() {
    if let Some(folder) = std::env::var_os(CHILD_FOLDER) {
        return open_from_the_environment(Path::new(&folder));
    }
    let served = Served::new(3, 14);
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.arg(common::test_name(
        module_path!(),
        "dataset_open_takes_the_s3_settings_from_the_environment",
    ));
    child.args(["--exact", "--nocapture", "--test-threads=1"]);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AWS_") {
            child.env_remove(name);
        }
    }
    let output = child
        .env(CHILD_FOLDER, served.folder())
        .env("NOSTALL_CACHE_DIR", served.dir.path().join("index-cache"))
        .env("AWS_ENDPOINT_URL", served.server.endpoint())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "the child test failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

fn open_from_the_environment(folder: &Path) {
    let local = dataset::open(
        folder.to_str().unwrap(),
        ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap();
    assert_eq!(local.format, Format::Files);
    let config = s3_config(8);
    let load = |dataset: &dataset::Dataset| {
        let loader = Loader::new(
            dataset.catalog.clone(),
            dataset.source.clone(),
            config.clone(),
        )
        .unwrap();
        epoch_output(&loader, 1)
    };
    let expected = load(&local);
    for (location, format) in [
        ("s3://shards/train", Format::TarShards),
        ("s3://shards", Format::TarShards),
        ("s3://objects/train", Format::Objects),
        ("s3://objects/train/", Format::Objects),
    ] {
        let dataset = dataset::open(location, ReadMode::Cached, nostall::Modality::Image)
            .unwrap_or_else(|e| panic!("{location}: {e}"));
        assert_eq!(dataset.format, format, "{location}");
        assert_eq!(dataset.catalog.len(), local.catalog.len(), "{location}");
        assert!(
            load(&dataset) == expected,
            "{location}: the batches differ from the folder's"
        );
    }

    let error = dataset::open(
        "s3://no-such-bucket/train",
        ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap_err();
    let Error::Storage { location, message } = &error else {
        panic!("expected a storage error, got {error:?}");
    };
    assert_eq!(location, "s3://no-such-bucket/train");
    assert!(
        message.contains("bucket `no-such-bucket` does not exist"),
        "{message}"
    );
    let error = dataset::open(
        "s3://shards/nothing-here",
        ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("s3://shards/nothing-here"),
        "{error}"
    );
    let error = dataset::open(
        "s3://shards/train",
        ReadMode::Cold,
        nostall::Modality::Image,
    )
    .unwrap_err();
    assert!(matches!(error, Error::Config(_)), "{error:?}");
}

/// A hostile S3 endpoint on loopback: every GET gets `answer` (the status line and
/// headers, `\r\n`-terminated), then `body` repeated `repeats` times (`None`: for ever).
fn hostile_endpoint(answer: &'static str, body: &'static [u8], repeats: Option<usize>) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                let mut stream = stream;
                if stream.write_all(answer.as_bytes()).is_err() {
                    return;
                }
                let mut sent = 0;
                while repeats.is_none_or(|n| sent < n) && stream.write_all(body).is_ok() {
                    sent += 1;
                }
            });
        }
    });
    format!("http://{addr}")
}

fn hostile_store(endpoint: &str) -> S3Store {
    let mut config = config_for("s3://bucket/train", endpoint);
    config.max_retries = 0;
    config.retry_window = Duration::from_secs(5);
    // Longer than the test's watchdog: the endless body must be cut off by its size,
    // not by the request's timeout (by then a client that kept it would hold gigabytes).
    config.request_timeout = Duration::from_secs(600);
    S3Store::new(config).unwrap()
}

#[test]
fn a_server_that_sends_more_than_the_range_or_never_stops_is_refused() {
    const CHUNK: &[u8] = b"1000\r\n";
    let endless: &'static [u8] =
        Box::leak([CHUNK, &[7u8; 4096], b"\r\n"].concat().into_boxed_slice());
    for (what, endpoint) in [
        (
            "an endless chunked body",
            hostile_endpoint(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/100\r\n\
                 Transfer-Encoding: chunked\r\n\r\n",
                endless,
                None,
            ),
        ),
        (
            "a body longer than the range",
            hostile_endpoint(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/100\r\n\
                 Content-Length: 4000\r\n\r\n",
                &[7u8; 100],
                Some(40),
            ),
        ),
        (
            "the whole object instead of the range",
            hostile_endpoint(
                "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
                &[7u8; 100],
                Some(10),
            ),
        ),
    ] {
        let store = hostile_store(&endpoint);
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut out = Vec::new();
            let result = store.read_range("a.jpg", 0, 100, &mut out);
            let _ = tx.send((result, out.len(), out.capacity()));
        });
        let (result, len, capacity) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{what}: the read never ended"));
        assert!(matches!(result, Err(Cause::Io(_))), "{what}: {result:?}");
        assert_eq!(len, 0, "{what}");
        assert!(capacity < 1 << 20, "{what}: {capacity} bytes held");
    }
}

#[test]
fn a_read_requires_the_object_as_it_was_listed() {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::Mutex;
    // An endpoint that records each request's head and answers 412 Precondition Failed,
    // as S3 does when an object's ETag is no longer the one in If-Match.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let recorded = heads.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                head.push_str(&line.to_ascii_lowercase());
                line.clear();
            }
            recorded.lock().unwrap().push(head);
            let _ =
                stream.write_all(b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let store = hostile_store(&endpoint);
    let mut out = Vec::new();
    let result = store.read_version("a.jpg", Some("\"etag-1\""), 0, 10, &mut out);
    match result {
        Err(Cause::Io(message)) => assert!(message.contains("changed since"), "{message}"),
        other => panic!("{other:?}"),
    }
    let heads = heads.lock().unwrap();
    assert!(
        heads.iter().any(|h| h.contains("if-match: \"etag-1\"")),
        "{heads:?}"
    );
}
