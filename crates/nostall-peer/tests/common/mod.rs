//! Helpers shared by the crate's integration tests, its unit tests, its benchmark, the
//! `nostall node` cluster test of `nostall-cli` and the unit tests of `nostall-agent` (all
//! but the first include this file by path).

// Each includer uses a different subset.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::storage::Memory;
use nostall::Catalog;

/// Samples in the test dataset.
pub(crate) const SAMPLES: u64 = 300;

/// Sample `id`'s bytes: recognisable, and of sizes from 500 to 3 000.
pub(crate) fn bytes(id: u64) -> Vec<u8> {
    let len = 500 + (id as usize * 37) % 2500;
    (0..len)
        .map(|i| (id as usize * 131 + i * 7) as u8)
        .collect()
}

/// The catalog of the test dataset.
pub(crate) fn catalog() -> Arc<Catalog> {
    let samples = (0..SAMPLES).map(|id| (format!("s{id:04}.jpg"), None, bytes(id).len() as u64));
    Arc::new(
        Catalog::from_samples(
            "memory://test",
            nostall::Modality::Image,
            Vec::new(),
            samples,
        )
        .unwrap(),
    )
}

/// The test dataset's storage, in memory.
pub(crate) fn storage() -> Arc<Memory> {
    Arc::new(Memory::new((0..SAMPLES).map(bytes).collect()))
}

/// Loopback addresses whose ports are free right now, for nodes' services to listen on.
///
/// The ports come from below the kernel's ephemeral range, each once per process: a port
/// from inside that range (what binding port 0 gives) can become the source port of any
/// outgoing connection before the node meant to listen on it binds it, and the tests
/// beside this one open thousands of connections.
pub(crate) fn free_addrs(n: usize) -> Vec<String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Where this process starts in the range, so that test binaries run side by side
    // (rarely) start apart; the bind below skips a port another one holds.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .max(LOWEST + 1_000);
    let span = ephemeral - LOWEST;
    let start = std::process::id() * 7_919 % span;
    let mut listeners = Vec::with_capacity(n);
    while listeners.len() < n {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(step < span, "no free port left below {ephemeral}");
        let port = LOWEST + (start + step) % span;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port as u16)) {
            listeners.push(listener);
        }
    }
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect()
}

/// Waits until something accepts connections at `addr` (a node started in another thread
/// or process), failing the test after `patience`. (Each try is a connection, closed at
/// once.)
pub(crate) fn until_listening(addr: &str, patience: Duration) {
    let deadline = Instant::now() + patience;
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listened at {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lets this test process hold a few thousand sockets (up to its hard limit), as a
/// service raises its own.
pub(crate) fn raise_descriptor_limit() {
    nostall::net::raise_descriptor_limit();
}

/// For a test that changes what the whole process shares (its descriptor limit) or counts
/// what the process holds: runs test `name` (its path in this test binary) alone in a
/// child process with the variable `marker` set, and checks that it passed. True in that
/// child, where the test's body runs; false here, where the test is then done.
pub(crate) fn alone_in_a_process(name: &str, marker: &str) -> bool {
    if std::env::var_os(marker).is_some() {
        return true;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1"])
        .env(marker, "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{name}, run in a process of its own, failed"
    );
    false
}

/// Opens up to `n` connections to `addr` that say nothing, from 8 threads, each attempt
/// given 20 ms (a listener whose queue is full makes the rest wait): those that connected.
pub(crate) fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    std::thread::scope(|s| {
        let openers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(move || {
                    (0..n.div_ceil(8))
                        .filter_map(|_| {
                            TcpStream::connect_timeout(&addr, Duration::from_millis(20)).ok()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        openers
            .into_iter()
            .flat_map(|o| o.join().unwrap())
            .collect()
    })
}
