//! `S3Store` against a real S3-compatible server: `s3s-fs`, which serves a directory
//! over the S3 API (each sub-directory is a bucket, each file below it an object).
//! `make deps` installs it; without it these tests fail, they never pass silently.
#![cfg(feature = "s3")]

use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nostall::storage::{BlobInfo, BlobStore, S3Config, S3Store};
use nostall::{Cause, Error};

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
    .map(|(key, size)| BlobInfo {
        key: key.to_string(),
        size,
    });
    assert_eq!(store.list().unwrap(), expected);
    // A trailing slash names the same prefix.
    assert_eq!(fixture.store("s3://data/train/").list().unwrap(), expected);

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
