//! The peer service's tests: admission, the data plane, the rendezvous and barriers.

use super::*;
use crate::test_common as common;
use crate::testing::Counting;
use nostall::cache::Capacity;
use nostall::plan::placement::Placement;
use std::io::Read;
use std::time::Instant;

/// A one-node service over `Counting` samples, serving at most `max_connections`.
fn service(max_connections: usize) -> Service {
    service_with(max_connections, Duration::from_secs(5))
}

/// Like [`service`], with the I/O timeout given.
fn service_with(max_connections: usize, io_timeout: Duration) -> Service {
    let placement = Arc::new(Placement::new(0, 1, Capacity::Fraction(1.0), &[100; 10]).unwrap());
    let storage = Arc::new(Counting::new(10, 100));
    let cache = Arc::new(NodeCache::new(0, placement, storage));
    let config = ServiceConfig {
        node: 0,
        nodes: 1,
        ranks_per_node: 1,
        listen: "127.0.0.1:0".parse().unwrap(),
        secret: Secret::new(SECRET).unwrap(),
        fingerprint: Vec::new(),
        max_response_bytes: 1000,
        io_timeout,
        gather_timeout: Duration::from_secs(5),
        max_connections,
    };
    Service::start(config, cache, 10).unwrap()
}

/// Waits until the service's counters show `done`: its threads see a connection a
/// moment after the client made it. The 30 s bound only ends a test that would
/// otherwise wait for ever.
fn until(service: &Service, done: impl Fn(&ServiceStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = service.stats();
        if done(&stats) {
            return;
        }
        assert!(Instant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the service has `n` data connections open.
fn until_open(service: &Service, n: usize) {
    until(service, |stats| stats.open_connections == n);
}

/// Waits until the service has counted `n` rejections of `kind`.
fn until_rejected(service: &Service, kind: &str, n: u64) {
    until(service, |stats| {
        stats.rejected.get(kind).copied().unwrap_or(0) >= n
    });
}

const SECRET: &[u8] = b"the secret of this unit test";

/// Whether the service closes a connection (it waits for a TLS client otherwise, and
/// the read times out after 10 s).
fn closed(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    matches!(stream.read(&mut [0; 1]), Ok(0))
        || stream
            .read(&mut [0; 1])
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
}

type DataConnection = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A data connection to `service`, authenticated and greeted as a node of the job.
fn authenticated(service: &Service) -> DataConnection {
    let tcp = TcpStream::connect(service.data_addr()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let client = Secret::new(SECRET).unwrap().identity().unwrap().client;
    let conn = rustls::ClientConnection::new(client, auth::Identity::server_name()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    auth::handshake(&mut tls).unwrap();
    wire::write_hello(&mut tls, 0).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        wire::read_response(&mut tls, &mut out, 100).unwrap(),
        Status::Ok
    );
    tls
}

/// One fetch on `conn`: the answer's status.
fn fetch_on(conn: &mut DataConnection, id: u64) -> std::io::Result<Status> {
    wire::write_fetch(conn, id)?;
    wire::read_response(conn, &mut Vec::new(), 1000)
}

/// One fetch over the data plane, as a node of the job: the answer's status.
fn fetch(service: &Service, id: u64) -> Status {
    fetch_on(&mut authenticated(service), id).unwrap()
}

#[test]
fn idle_control_connections_take_few_places_and_cost_the_data_plane_nothing() {
    // 2 000 client sockets and the service's own in this one process.
    common::raise_descriptor_limit();
    let service = service_with(512, Duration::from_millis(200));
    let idle = common::idle_connections(service.control_addr(), 2000);
    assert!(
        idle.len() > MAX_CONTROL_CONNECTIONS,
        "{} connected",
        idle.len()
    );
    let stats = service.stats();
    assert!(
        stats.control_handshakes <= MAX_CONTROL_CONNECTIONS,
        "{} control connections held",
        stats.control_handshakes
    );
    assert_eq!(stats.control_sessions, 0, "none proved the secret");
    // The data plane serves as before.
    assert_eq!(fetch(&service, 3), Status::Ok);
    drop(idle);
    // Closed, the idle connections give their places back.
    until(&service, |stats| stats.control_handshakes == 0);
}

#[test]
fn once_the_job_is_known_only_its_addresses_are_served() {
    let service = service(8);
    service.admit_only(["127.0.0.1".parse().unwrap()]);
    assert_eq!(fetch(&service, 3), Status::Ok);
    service.admit_only(["127.0.0.2".parse().unwrap()]);
    let mut stranger = TcpStream::connect(service.data_addr()).unwrap();
    assert!(closed(&mut stranger), "closed before any handshake");
    until_rejected(&service, "not-a-peer", 1);
}

#[test]
fn one_address_holds_a_bounded_number_of_handshakes() {
    let service = service(512);
    let data = service.data_addr();
    let idle: Vec<TcpStream> = (0..MAX_HANDSHAKES_PER_ADDRESS)
        .map(|_| TcpStream::connect(data).unwrap())
        .collect();
    until_open(&service, MAX_HANDSHAKES_PER_ADDRESS);
    let mut over = TcpStream::connect(data).unwrap();
    assert!(closed(&mut over), "over the budget: closed at once");
    until_rejected(&service, "too-many-handshakes", 1);
    assert_eq!(service.stats().open_connections, MAX_HANDSHAKES_PER_ADDRESS);
    // The silent ones leave; their address may connect again.
    drop(idle);
    until_open(&service, 0);
    assert_eq!(fetch(&service, 3), Status::Ok);
}

#[test]
fn one_address_holds_a_bounded_share_of_the_control_places() {
    let service = service(8);
    let control = service.control_addr();
    let idle: Vec<TcpStream> = (0..MAX_CONTROL_HANDSHAKES_PER_ADDRESS)
        .map(|_| TcpStream::connect(control).unwrap())
        .collect();
    until(&service, |stats| {
        stats.control_handshakes == MAX_CONTROL_HANDSHAKES_PER_ADDRESS
    });
    let mut over = TcpStream::connect(control).unwrap();
    assert!(
        closed(&mut over),
        "over the address's share: closed at once"
    );
    until_rejected(&service, "too-many-handshakes", 1);
    assert_eq!(
        service.stats().control_handshakes,
        MAX_CONTROL_HANDSHAKES_PER_ADDRESS,
        "the other places stay free for other addresses"
    );
    drop(idle);
}

/// Runs alone in a process of its own: the descriptors it counts are all its own.
#[test]
fn a_data_connection_costs_the_service_one_descriptor() {
    if !common::alone_in_a_process(
        "server::tests::a_data_connection_costs_the_service_one_descriptor",
        "NOSTALL_TEST_DESCRIPTORS_CHILD",
    ) {
        return;
    }
    let open = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let service = service(512);
    let before = open();
    let clients: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(service.data_addr()).unwrap())
        .collect();
    until_open(&service, 20);
    assert_eq!(
        open() - before,
        2 * clients.len(),
        "the clients' and the service's"
    );
}

#[test]
fn connections_over_the_limit_are_refused_and_closed_ones_are_forgotten() {
    let service = service(2);
    let data = service.data_addr();
    let first = TcpStream::connect(data).unwrap();
    let second = TcpStream::connect(data).unwrap();
    until_open(&service, 2);
    let mut third = TcpStream::connect(data).unwrap();
    assert!(closed(&mut third), "over the limit: closed at once");
    assert_eq!(service.stats().rejected["too-many-connections"], 1);

    // Clients that leave (here: before their handshake) free their places.
    drop((first, second, third));
    until_open(&service, 0);
    assert_eq!(fetch(&service, 3), Status::Ok);
}

#[test]
fn at_the_limit_a_new_connection_takes_the_place_of_one_idle() {
    let service = service(2);
    let mut pooled = [authenticated(&service), authenticated(&service)];
    for (id, conn) in pooled.iter_mut().enumerate() {
        assert_eq!(fetch_on(conn, id as u64).unwrap(), Status::Ok);
    }
    until(&service, |stats| stats.idle_connections == 2);
    // A third node's fetch is served, not refused (which would mark this node down
    // at that peer): one of the idle connections gave it its place.
    assert_eq!(fetch(&service, 3), Status::Ok);
    let stats = service.stats();
    assert_eq!(stats.evicted_idle, 1);
    assert!(
        !stats.rejected.contains_key("too-many-connections"),
        "{stats:?}"
    );
    let mut still_served = 0;
    for conn in &mut pooled {
        if matches!(fetch_on(conn, 4), Ok(Status::Ok)) {
            still_served += 1;
        }
    }
    assert_eq!(still_served, 1, "exactly one was closed");
}
