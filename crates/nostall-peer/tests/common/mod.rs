//! Helpers shared by the crate's integration tests, its benchmark and the `nostall node`
//! cluster test of `nostall-cli` (those two include this file by path).

use std::net::TcpListener;

/// Loopback addresses whose ports are free right now, for nodes' services to listen on.
pub fn free_addrs(n: usize) -> Vec<String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect()
}
