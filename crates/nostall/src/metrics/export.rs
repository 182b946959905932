//! A Prometheus endpoint: the live figures of this process's loaders, served as
//! OpenMetrics text on `GET /metrics`, for a dashboard beside the GPU's.
//!
//! **Opt-in and local.** Nothing listens unless an address is given ([`serve`]; in
//! Python `metrics_addr=` or `NOSTALL_METRICS_ADDR`), and only there. Every loader of the
//! process that names the same address is served by one endpoint, each under the labels
//! `loader` (its number in the process) and `rank`.
//!
//! **No HTTP stack.** Each connection is answered on a short-lived thread of its own (at
//! most `MAX_CLIENTS` at once; more are closed): it reads at most `MAX_REQUEST` bytes
//! of request head within `DEADLINE`, answers `GET /metrics` (404 for other paths, 405
//! for other methods, 400 for what is not HTTP), writes within the same deadline and
//! closes. A client that stalls holds its own thread for at most the deadline, and no
//! other scrape waits for it.
//!
//! **Free between scrapes.** The figures are the loaders' own counters
//! ([`crate::Loader::live_stats`]), read when Prometheus asks; the exposition format is
//! the `prometheus-client` crate's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::LiveStats;
use crate::error::{Error, Result};
use crate::net::AcceptFailure;

/// The most bytes of a request head read before answering 431.
pub(crate) const MAX_REQUEST: usize = 8 * 1024;
/// How long a connection may take to send its request, and to take the answer.
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);
/// The most connections answered at once, each on a thread of its own: a slow or silent
/// client holds one for at most [`DEADLINE`] and delays no other scrape. Connections
/// beyond are closed at once.
pub(crate) const MAX_CLIENTS: usize = 8;

/// What an endpoint serves of one loader.
pub trait Figures: Send + Sync + 'static {
    /// The loader's figures since it was made.
    fn live(&self) -> LiveStats;

    /// Figures from outside the loader (a partitioned cache's peers, say).
    fn extra(&self) -> Vec<Reading> {
        Vec::new()
    }
}

/// A figure from outside the loader, served beside its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The metric's name, without the `nostall_` prefix (nor `_total` for a counter).
    pub name: &'static str,
    /// What it means.
    pub help: &'static str,
    /// Whether it only grows (a counter) or goes up and down (a gauge).
    pub counter: bool,
    /// The value.
    pub value: f64,
}

/// Keeps a loader's figures served while it lives; the endpoint closes with its last
/// registration.
pub struct Registration {
    endpoint: Arc<Endpoint>,
    key: u64,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("addr", &self.endpoint.addr)
            .finish()
    }
}

impl Registration {
    /// The address the endpoint listens on (the port chosen, when `:0` was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.endpoint.addr
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.endpoint
            .shared
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| m.key != self.key);
    }
}

/// Serves `figures` (labelled with `rank`) at `addr`, with the process's other loaders
/// already served there, or on a new endpoint.
///
/// # Errors
///
/// [`Error::Config`] when `addr` is not a `host:port` this machine can bind (in use,
/// not an address of this machine), naming it.
pub fn serve(addr: &str, figures: Arc<dyn Figures>, rank: usize) -> Result<Registration> {
    let wanted: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| bad_addr(addr, &e.to_string()))?
        .collect();
    let mut endpoints = ENDPOINTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    endpoints.retain(|e| e.strong_count() > 0);
    let endpoint = match endpoints
        .iter()
        .filter_map(Weak::upgrade)
        // `:0` asks for a port of its own, never another loader's.
        .find(|e| wanted.contains(&e.addr) || (e.asked.port() != 0 && wanted.contains(&e.asked)))
    {
        Some(endpoint) => endpoint,
        None => {
            let endpoint = Arc::new(Endpoint::bind(addr, &wanted)?);
            endpoints.push(Arc::downgrade(&endpoint));
            endpoint
        }
    };
    drop(endpoints);
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let key = NEXT.fetch_add(1, Ordering::Relaxed);
    endpoint
        .shared
        .members
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Member { key, rank, figures });
    Ok(Registration { endpoint, key })
}

fn bad_addr(addr: &str, why: &str) -> Error {
    Error::Config(format!(
        "metrics address {addr:?}: {why}; give host:port of this machine, such as \
         127.0.0.1:9464"
    ))
}

/// The endpoints of this process, by address.
static ENDPOINTS: OnceLock<Mutex<Vec<Weak<Endpoint>>>> = OnceLock::new();

/// A listening socket and the thread answering it.
struct Endpoint {
    /// Where it listens, and the address it was asked for (`:0` gives another port).
    addr: SocketAddr,
    asked: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    members: Mutex<Vec<Member>>,
    stop: AtomicBool,
    /// How long a connection may take ([`DEADLINE`]; longer in tests).
    deadline: Duration,
    /// Connections being answered now.
    answering: AtomicUsize,
}

struct Member {
    key: u64,
    rank: usize,
    figures: Arc<dyn Figures>,
}

impl Endpoint {
    fn bind(addr: &str, wanted: &[SocketAddr]) -> Result<Endpoint> {
        Endpoint::bind_with(addr, wanted, DEADLINE)
    }

    fn bind_with(addr: &str, wanted: &[SocketAddr], deadline: Duration) -> Result<Endpoint> {
        let listener = TcpListener::bind(wanted).map_err(|e| bad_addr(addr, &e.to_string()))?;
        let bound = listener
            .local_addr()
            .map_err(|e| bad_addr(addr, &e.to_string()))?;
        let shared = Arc::new(Shared {
            members: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            deadline,
            answering: AtomicUsize::new(0),
        });
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("nostall-metrics".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if serving.stop.load(Ordering::Acquire) {
                        break;
                    }
                    match stream {
                        Ok(stream) => answer_apart(stream, &serving),
                        Err(e) => match crate::net::accept_failed(&e) {
                            AcceptFailure::Retry => {}
                            // Out of descriptors or memory: waiting, not spinning on it.
                            AcceptFailure::BackOff => {
                                std::thread::sleep(crate::net::ACCEPT_BACKOFF)
                            }
                            AcceptFailure::Fatal => break,
                        },
                    }
                }
            })
            .map_err(|e| Error::Config(format!("cannot start the metrics thread: {e}")))?;
        Ok(Endpoint {
            addr: bound,
            asked: wanted.first().copied().unwrap_or(bound),
            shared,
            thread: Some(thread),
        })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wakes the blocked accept; if the connection fails, the thread is left parked in
        // accept rather than this drop hanging.
        if TcpStream::connect_timeout(&self.addr, DEADLINE).is_ok() {
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// Answers `stream` on a thread of its own, if fewer than [`MAX_CLIENTS`] are being
/// answered; closes it otherwise.
fn answer_apart(stream: TcpStream, shared: &Arc<Shared>) {
    if shared.answering.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        shared.answering.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let answering = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("nostall-metrics-answer".into())
        .spawn(move || {
            // A failed answer concerns that client only.
            let _ = answer(stream, &answering);
            answering.answering.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        shared.answering.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads one request head and answers it.
fn answer(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let deadline = Instant::now() + shared.deadline;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || head.len() >= MAX_REQUEST {
            break false;
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break false,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    };
    let (status, body) = if !complete && head.len() >= MAX_REQUEST {
        ("431 Request Header Fields Too Large", String::new())
    } else if !complete {
        return Ok(()); // the client went away or stalled: nothing to answer
    } else {
        let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        let mut parts = line.split(|&b| b == b' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(b"GET"), Some(path), Some(version)) if version.starts_with(b"HTTP/1.") => {
                let path = path.split(|&b| b == b'?').next().unwrap_or_default();
                if path == b"/metrics" {
                    ("200 OK", exposition(shared))
                } else {
                    ("404 Not Found", String::new())
                }
            }
            (Some(_), Some(_), Some(version)) if version.starts_with(b"HTTP/1.") => {
                ("405 Method Not Allowed", String::new())
            }
            _ => ("400 Bad Request", String::new()),
        }
    };
    stream.set_write_timeout(Some(shared.deadline))?;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
         charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// The OpenMetrics text of every member.
fn exposition(shared: &Shared) -> String {
    let snapshot = Snapshot(
        shared
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|m| (m.key, m.rank, m.figures.live(), m.figures.extra()))
            .collect(),
    );
    let mut registry = Registry::with_prefix("nostall");
    registry.register_collector(Box::new(snapshot));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

/// Every member's figures at one scrape: (key, rank, figures, extra readings).
#[derive(Debug)]
struct Snapshot(Vec<(u64, usize, LiveStats, Vec<Reading>)>);

/// The labels of one series: loader, rank, and the metric's own.
type Labels = Vec<(&'static str, String)>;

impl Snapshot {
    /// Writes one metric family: a descriptor, then a series per member and per label
    /// value that `series` yields for it.
    fn family<V>(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        kind: MetricType,
        series: impl Fn(&LiveStats, &[Reading]) -> Vec<(Option<(&'static str, String)>, V)>,
    ) -> std::fmt::Result
    where
        V: Into<f64>,
    {
        let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
        for (key, rank, live, extra) in &self.0 {
            for (label, value) in series(live, extra) {
                let mut labels: Labels =
                    vec![("loader", key.to_string()), ("rank", rank.to_string())];
                labels.extend(label);
                let value: f64 = value.into();
                let family = metric.encode_family(&labels)?;
                // Whole numbers (counts, bytes) print as integers.
                let whole = value.fract() == 0.0 && (0.0..9e15).contains(&value);
                match (kind, whole) {
                    (MetricType::Counter, true) => {
                        ConstCounter::new(value as u64).encode(family)?
                    }
                    (MetricType::Counter, false) => ConstCounter::new(value).encode(family)?,
                    (_, true) => ConstGauge::new(value as i64).encode(family)?,
                    (_, false) => ConstGauge::new(value).encode(family)?,
                }
            }
        }
        Ok(())
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        use MetricType::{Counter, Gauge};
        let e = &mut encoder;
        {
            let mut metric = e.encode_descriptor(
                "batch_wait_seconds",
                "The consumer's wait for each batch: the data stall.",
                None,
                MetricType::Histogram,
            )?;
            for (key, rank, live, _) in &self.0 {
                let labels: Labels = vec![("loader", key.to_string()), ("rank", rank.to_string())];
                let buckets: Vec<(f64, u64)> = live
                    .stall_buckets
                    .iter()
                    .map(|&(bound, n)| (if bound.is_finite() { bound } else { f64::MAX }, n))
                    .collect();
                metric
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        live.stall.as_secs_f64(),
                        live.batches(),
                        &buckets,
                        None,
                    )?;
            }
        }
        let n = |v: u64| v as f64;
        self.family(e, "samples", "Samples delivered.", Counter, |l, _| {
            vec![(None, n(l.samples))]
        })?;
        self.family(
            e,
            "epoch",
            "The epoch running, or the last one run.",
            Gauge,
            |l, _| vec![(None, n(l.epoch))],
        )?;
        let stages = |l: &LiveStats| [("fetch", l.fetch), ("prep", l.prep)];
        self.family(
            e,
            "stage_busy_seconds",
            "Time a stage's threads spent working.",
            Counter,
            |l, _| {
                stages(l)
                    .map(|(s, st)| (Some(("stage", s.to_owned())), st.busy.as_secs_f64()))
                    .to_vec()
            },
        )?;
        self.family(
            e,
            "stage_samples",
            "Samples a stage processed.",
            Counter,
            |l, _| {
                stages(l)
                    .map(|(s, st)| (Some(("stage", s.to_owned())), n(st.items)))
                    .to_vec()
            },
        )?;
        self.family(
            e,
            "stage_bytes",
            "Bytes a stage read (fetch) or wrote (prep).",
            Counter,
            |l, _| {
                stages(l)
                    .map(|(s, st)| (Some(("stage", s.to_owned())), n(st.bytes)))
                    .to_vec()
            },
        )?;
        self.family(e, "threads", "Threads per role.", Gauge, |l, _| {
            stages(l)
                .map(|(s, st)| (Some(("role", s.to_owned())), st.threads as f64))
                .to_vec()
        })?;
        self.family(
            e,
            "cache_hits",
            "Samples the loader's cache served.",
            Counter,
            |l, _| vec![(None, n(l.cache.hits))],
        )?;
        self.family(
            e,
            "cache_misses",
            "Samples the loader's cache did not hold.",
            Counter,
            |l, _| vec![(None, n(l.cache.misses))],
        )?;
        self.family(
            e,
            "cache_used_bytes",
            "Bytes the loader's cache holds.",
            Gauge,
            |l, _| vec![(None, n(l.cache.used))],
        )?;
        self.family(e, "read_bytes", "Sample bytes read, by tier: the loader's cache, or its source (storage, or a partitioned cache's peers and storage).", Counter, |l, _| {
            vec![
                (Some(("tier", "cache".to_owned())), n(l.cache.hit_bytes)),
                (Some(("tier", "source".to_owned())), n(l.storage.bytes)),
            ]
        })?;
        self.family(
            e,
            "readahead_window_bytes",
            "The read-ahead window's bound at the last batch.",
            Gauge,
            |l, _| vec![(None, n(l.readahead.window))],
        )?;
        self.family(
            e,
            "readahead_peak_bytes",
            "The most bytes the read-ahead held in the epoch.",
            Gauge,
            |l, _| vec![(None, n(l.readahead.peak))],
        )?;
        self.family(
            e,
            "skipped",
            "Samples skipped, by cause.",
            Counter,
            |l, _| {
                l.skipped
                    .iter()
                    .map(|(&cause, &k)| (Some(("cause", cause.to_owned())), n(k)))
                    .collect()
            },
        )?;
        // Extra readings, a family per name, in the order members first give them.
        let mut names: Vec<(&'static str, &'static str, bool)> = Vec::new();
        for (_, _, _, extra) in &self.0 {
            for r in extra {
                if !names.iter().any(|n| n.0 == r.name) {
                    names.push((r.name, r.help, r.counter));
                }
            }
        }
        for (name, help, counter) in names {
            let kind = if counter { Counter } else { Gauge };
            self.family(e, name, help, kind, |_, extra| {
                extra
                    .iter()
                    .filter(|r| r.name == name)
                    .map(|r| (None, r.value))
                    .collect()
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed(LiveStats);

    impl Figures for Fixed {
        fn live(&self) -> LiveStats {
            self.0.clone()
        }

        fn extra(&self) -> Vec<Reading> {
            vec![Reading {
                name: "peer_bytes",
                help: "Bytes from peers.",
                counter: true,
                value: 42.0,
            }]
        }
    }

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn serves_the_figures_of_every_loader_at_one_address_until_the_last_goes() {
        let mut live = LiveStats {
            samples: 96,
            epoch: 2,
            ..LiveStats::default()
        };
        live.stall_buckets = vec![(0.001, 2), (0.01, 1), (f64::INFINITY, 0)];
        live.stall = Duration::from_millis(7);
        live.skipped.insert("corrupt", 3);
        let a = serve("127.0.0.1:0", Arc::new(Fixed(live.clone())), 0).unwrap();
        let addr = a.local_addr();
        let b = serve(&addr.to_string(), Arc::new(Fixed(live)), 1).unwrap();
        assert_eq!(b.local_addr(), addr, "one endpoint per address");
        let page = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
        for rank in ["0", "1"] {
            let series = |name: &str| format!("{name}{{loader=\"");
            assert!(page.contains(&series("nostall_samples_total")));
            assert!(page.contains(&format!("rank=\"{rank}\"}} 96")), "{page}");
        }
        assert!(
            page.contains("nostall_batch_wait_seconds_bucket{"),
            "{page}"
        );
        assert!(
            page.lines().any(|l| l
                .starts_with("nostall_batch_wait_seconds_bucket{le=\"+Inf\",loader=")
                && l.ends_with("} 3")),
            "{page}"
        );
        assert!(page.contains("nostall_batch_wait_seconds_count{"), "{page}");
        assert!(page.contains(",cause=\"corrupt\"} 3"), "{page}");
        assert!(page.contains("nostall_peer_bytes_total{"), "{page}");
        assert!(page.trim_end().ends_with("# EOF"), "{page}");
        drop(a);
        let page = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(page.matches("nostall_samples_total{").count(), 1);
        drop(b);
        assert!(
            TcpStream::connect(addr).is_err(),
            "the endpoint closes with its last loader"
        );
    }

    #[test]
    fn other_requests_are_refused_and_the_endpoint_goes_on() {
        let r = serve("127.0.0.1:0", Arc::new(Fixed(LiveStats::default())), 0).unwrap();
        let addr = r.local_addr();
        assert!(get(addr, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(addr, b"\x16\x03\x01 hello\r\n\r\n").starts_with("HTTP/1.1 400"));
        let huge = vec![b'a'; MAX_REQUEST];
        assert!(get(addr, &huge).starts_with("HTTP/1.1 431"));
        // A client that sends half a request and leaves costs nothing.
        drop(TcpStream::connect(addr).unwrap());
        assert!(get(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
        assert!(serve("256.0.0.1:1", Arc::new(Fixed(LiveStats::default())), 0).is_err());
    }

    #[test]
    fn a_silent_client_delays_no_other_scrape() {
        // Connections get ten minutes here: a scrape answered only after the silent
        // client's deadline would fail the read timeout below, whatever the load.
        let wanted: Vec<SocketAddr> = vec!["127.0.0.1:0".parse().unwrap()];
        let endpoint =
            Endpoint::bind_with("127.0.0.1:0", &wanted, Duration::from_secs(600)).unwrap();
        let silent = TcpStream::connect(endpoint.addr).unwrap();
        let mut scrape = TcpStream::connect(endpoint.addr).unwrap();
        scrape
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        scrape.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        scrape.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        drop(silent);
    }
}
