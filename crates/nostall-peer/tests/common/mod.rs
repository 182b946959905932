//! Helpers shared by the crate's integration tests, its unit tests, its benchmark and the
//! `nostall node` cluster test of `nostall-cli` (all but the first include this file by
//! path).

// Each includer uses a different subset.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Loopback addresses whose ports are free right now, for nodes' services to listen on.
pub(crate) fn free_addrs(n: usize) -> Vec<String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect()
}

/// Lets this test process hold a few thousand sockets (up to its hard limit).
pub(crate) fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max.min(16384);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
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
