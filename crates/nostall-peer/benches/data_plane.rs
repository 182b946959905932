//! Why the data plane is framed TCP: the same samples fetched from a peer over loopback,
//! through the real service and client (`PartitionedSource` → framed TCP → `NodeCache`),
//! and over gRPC (tonic, one unary call per sample, the HTTP/2 channel shared by the fetch
//! threads as the control plane shares it).
//!
//! Both sides run in this process and share the machine's cores, as a node's service
//! shares them with its loader. Each run: `THREADS` fetch threads ask for every sample
//! once per pass, 1 warm-up pass (the holder fills its cache), 3 measured passes.
//!
//! `cargo bench -p nostall-peer --bench data_plane` (release build).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::cache::Capacity;
use nostall::storage::{Memory, Source};
use nostall::Catalog;
use nostall_peer::{Node, NodeConfig, Secret};

/// `Fetch` request of the benchmark's gRPC service.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FetchRequest {
    /// The sample's catalog id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
}

/// `Fetch` reply: the sample's bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FetchReply {
    /// The encoded sample.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

#[allow(missing_docs, unreachable_pub, clippy::all)]
mod generated {
    include!(concat!(
        env!("OUT_DIR"),
        "/nostall.peer.bench.FetchBench.rs"
    ));
}
use generated::fetch_bench_client::FetchBenchClient;
use generated::fetch_bench_server::{FetchBench, FetchBenchServer};

#[path = "../tests/common/mod.rs"]
mod common;
use common::free_addrs;

const SAMPLES: u64 = 2000;
const THREADS: u64 = 4;
const PASSES: u64 = 3;

fn sample(id: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (id as usize * 31 + i * 7) as u8)
        .collect()
}

/// Runs `fetch` for `ids` on `THREADS` threads, one warm-up and `PASSES` measured passes:
/// samples per second and bytes fetched in the measured passes.
fn drive(ids: &[u64], fetch: impl Fn(u64, &mut Vec<u8>) + Sync) -> (f64, u64) {
    let pass = |bytes: &AtomicU64| {
        let next = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&id) = ids.get(i as usize) else {
                            return;
                        };
                        fetch(id, &mut out);
                        bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
                    }
                });
            }
        });
    };
    pass(&AtomicU64::new(0));
    let bytes = AtomicU64::new(0);
    let started = Instant::now();
    for _ in 0..PASSES {
        pass(&bytes);
    }
    let seconds = started.elapsed().as_secs_f64();
    (
        (ids.len() as u64 * PASSES) as f64 / seconds,
        bytes.into_inner(),
    )
}

/// The real data plane: node 0 fetches, through its `PartitionedSource`, the samples that
/// node 1 holds.
fn framed_tcp(size: usize) -> (f64, u64) {
    let samples = (0..SAMPLES).map(|id| (format!("s{id:05}.jpg"), None, size as u64));
    let catalog = Arc::new(
        Catalog::from_samples(
            "memory://bench",
            nostall::Modality::Image,
            Vec::new(),
            samples,
        )
        .unwrap(),
    );
    let peers = free_addrs(2);
    let secret = Secret::new(b"the data plane benchmark's secret").unwrap();
    let nodes: Vec<Node> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..2)
            .map(|n| {
                let (catalog, peers, secret) = (catalog.clone(), peers.clone(), secret.clone());
                s.spawn(move || {
                    let storage: Arc<dyn Source> = Arc::new(Memory::new(
                        (0..SAMPLES).map(|id| sample(id, size)).collect(),
                    ));
                    let mut config = NodeConfig::new(n, peers, Capacity::Fraction(0.5), secret);
                    config.timeouts.request = Duration::from_secs(10);
                    Node::join(&catalog, storage, config).unwrap()
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let theirs: Vec<u64> = (0..SAMPLES)
        .filter(|&id| nodes[0].placement().holder(id) == Some(1))
        .collect();
    let source = nodes[0].source();
    let result = drive(&theirs, |id, out| source.read(id, out).unwrap());
    assert_eq!(source.breakdown().fallbacks, 0);
    result
}

struct Served {
    samples: Arc<Vec<Vec<u8>>>,
}

#[tonic::async_trait]
impl FetchBench for Served {
    async fn fetch(
        &self,
        request: tonic::Request<FetchRequest>,
    ) -> Result<tonic::Response<FetchReply>, tonic::Status> {
        let id = request.into_inner().id as usize;
        let data = self
            .samples
            .get(id)
            .ok_or_else(|| tonic::Status::not_found("no such sample"))?
            .clone();
        Ok(tonic::Response::new(FetchReply { data }))
    }
}

/// The same samples over gRPC: a tonic server on 2 worker threads, and a client whose
/// fetch threads block on calls over one shared channel (as the control client does);
/// Nagle off on both sides and HTTP/2's adaptive flow-control window, as the framed TCP
/// plane turns Nagle off and sizes its buffers for whole samples.
fn grpc(size: usize) -> (f64, u64) {
    let samples = Arc::new((0..SAMPLES).map(|id| sample(id, size)).collect::<Vec<_>>());
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = server_runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let limit = size + 1024;
    server_runtime.spawn(async move {
        let service = FetchBenchServer::new(Served { samples })
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            )
            .await
            .unwrap();
    });
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .tcp_nodelay(true)
        .http2_adaptive_window(true);
    let channel = client_runtime.block_on(endpoint.connect()).unwrap();
    let client = FetchBenchClient::new(channel).max_decoding_message_size(limit);
    let ids: Vec<u64> = (0..SAMPLES).filter(|id| id % 2 == 1).collect();
    drive(&ids, |id, out| {
        let reply = client_runtime
            .block_on(client.clone().fetch(FetchRequest { id }))
            .unwrap()
            .into_inner();
        out.clear();
        out.extend_from_slice(&reply.data);
    })
}

fn main() {
    println!(
        "{SAMPLES} samples, {THREADS} fetch threads, a warm-up and {PASSES} measured passes, loopback"
    );
    println!(
        "{:>10} {:>22} {:>22} {:>12}",
        "sample", "framed TCP samples/s", "gRPC unary samples/s", "TCP / gRPC"
    );
    for size in [30_000, 110_000, 500_000] {
        let (tcp, tcp_bytes) = framed_tcp(size);
        let (grpc, grpc_bytes) = grpc(size);
        assert_eq!(tcp_bytes, grpc_bytes, "both fetched the same bytes");
        println!(
            "{:>8}kB {:>13.0} ({:>4.0} MB/s) {:>13.0} ({:>4.0} MB/s) {:>11.2}x",
            size / 1000,
            tcp,
            tcp * size as f64 / 1e6,
            grpc,
            grpc * size as f64 / 1e6,
            tcp / grpc
        );
    }
}
