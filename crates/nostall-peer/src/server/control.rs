//! The control plane: authenticated gRPC sessions (each holding a place only once its
//! TLS handshake proved the secret), the rendezvous and the epoch barriers.

use super::*;

use bytes::Bytes;

use crate::control::{encode_nodes, NodeAddress};

/// An authenticated control connection, holding one of the service's places for
/// sessions until it closes.
pub(super) struct ControlConnection {
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    _session: Place,
}

/// One place of a bounded kind (handshakes, sessions), held until dropped.
pub(super) struct Place {
    _permit: tokio::sync::OwnedSemaphorePermit,
    open: Arc<AtomicUsize>,
}

impl Place {
    fn taken(permit: tokio::sync::OwnedSemaphorePermit, open: &Arc<AtomicUsize>) -> Place {
        open.fetch_add(1, Ordering::Relaxed);
        Place {
            _permit: permit,
            open: open.clone(),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl tonic::transport::server::Connected for ControlConnection {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.get_ref().0.connect_info()
    }
}

impl tokio::io::AsyncRead for ControlConnection {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ControlConnection {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Accepts control connections while one of [`MAX_CONTROL_CONNECTIONS`] places for
/// handshakes is free (the rest wait in the kernel's queue, costing this process no
/// descriptor), and hands each to the gRPC server once its TLS handshake proved the job's
/// secret, moving it from its handshake place to a session place; one that does not prove
/// it within the I/O timeout is closed, so that idle or foreign connections cannot keep
/// the places. An authenticated connection may then wait as long as its calls do (at the
/// rendezvous, at a barrier) without keeping anyone else out.
pub(super) async fn accept_control(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    connections: tokio::sync::mpsc::Sender<ControlConnection>,
) {
    let timeout = shared.config.io_timeout;
    loop {
        let Ok(permit) = shared.control_places.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => match nostall::net::accept_failed(&err) {
                nostall::net::AcceptFailure::Retry => continue,
                nostall::net::AcceptFailure::BackOff => {
                    eprintln!("nostall-peer: control accept failed: {err}; backing off");
                    tokio::time::sleep(nostall::net::ACCEPT_BACKOFF).await;
                    continue;
                }
                nostall::net::AcceptFailure::Fatal => {
                    eprintln!("nostall-peer: control listener broken: {err}");
                    return;
                }
            },
        };
        let Some(handshake) = admit(&shared, peer, &shared.control_handshakes_by_address) else {
            continue;
        };
        let place = Place::taken(permit, &shared.control_handshakes);
        let (shared, connections) = (shared.clone(), connections.clone());
        let acceptor = tokio_rustls::TlsAcceptor::from(shared.tls.clone());
        tokio::spawn(async move {
            let peer = peer.to_string();
            match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    drop((place, handshake));
                    let Ok(session) = shared.control_sessions.clone().try_acquire_owned() else {
                        let reason = "every place for an authenticated control connection is \
                                      taken (more connections than the job has processes)";
                        shared.reject("too-many-connections", &peer, reason.to_string());
                        return;
                    };
                    let session = Place::taken(session, &shared.control_sessions_open);
                    let _ = connections
                        .send(ControlConnection {
                            stream,
                            _session: session,
                        })
                        .await;
                }
                Ok(Err(err)) => shared.reject(
                    "unauthorized",
                    &peer,
                    format!(
                        "no TLS handshake with the job's identity ({err}); a node with another \
                         {}, or not a node",
                        auth::SECRET_VAR
                    ),
                ),
                Err(_) => shared.reject(
                    "idle",
                    &peer,
                    format!("no TLS handshake within {timeout:?}"),
                ),
            }
        });
    }
}

/// Who has registered, and who has reached which epoch's barrier; node 0's copy is the
/// one that counts (another node's only holds the list node 0 gave its first rank, for
/// its other ranks). Each wait subscribes to one flag that flips once, when what it waits
/// for is complete: n waiters cost n wake-ups, not n per arrival.
pub(super) struct Rendezvous {
    nodes: usize,
    ranks_per_node: usize,
    state: Mutex<Gathering>,
    /// Set once every node has registered.
    registered: watch::Sender<bool>,
}

pub(super) struct Gathering {
    members: Vec<Option<NodeAddress>>,
    missing: usize,
    /// The answer to every registration, encoded by the first waiter answered and
    /// shared by the others: each rank receives every node's entry, and there may be
    /// tens of thousands of ranks. Dropped when a node registers again with other ports.
    list: Option<Bytes>,
    barriers: BTreeMap<u64, Barrier>,
}

/// One epoch's barrier.
pub(super) struct Barrier {
    /// Whether each rank (by global rank) has arrived.
    arrived: Vec<bool>,
    count: usize,
    /// When the last rank arrived: a barrier still open a gather timeout later has
    /// answered every waiter, and may go.
    last_arrival: tokio::time::Instant,
    /// Set once every rank has arrived.
    complete: watch::Sender<bool>,
}

impl Barrier {
    fn is_complete(&self) -> bool {
        *self.complete.borrow()
    }
}

/// Why an arrival at a barrier was refused.
pub(super) enum Refusal {
    TooManyOpen(Vec<u64>),
}

impl Rendezvous {
    pub(super) fn new(nodes: usize, ranks_per_node: usize) -> Rendezvous {
        Rendezvous {
            nodes,
            ranks_per_node: ranks_per_node.max(1),
            state: Mutex::new(Gathering {
                members: vec![None; nodes],
                missing: nodes,
                list: None,
                barriers: BTreeMap::new(),
            }),
            registered: watch::Sender::new(nodes == 0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gathering> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records node `node` at `member`; `Err` with the address it already has when that
    /// is another one.
    fn register(&self, node: usize, member: NodeAddress) -> std::result::Result<(), SocketAddr> {
        let mut state = self.lock();
        match state.members[node] {
            Some(known) if known.control != member.control => return Err(known.control),
            Some(known) if known == member => {}
            Some(_) => {
                state.members[node] = Some(member);
                state.list = None;
            }
            None => {
                state.members[node] = Some(member);
                state.missing -= 1;
                if state.missing == 0 {
                    self.registered.send_replace(true);
                }
            }
        }
        Ok(())
    }

    /// Answers every registration with `list` from now on: on a node other than node 0,
    /// the list node 0 gave this node's first rank, for the node's other ranks.
    pub(super) fn hold(&self, list: Bytes) {
        self.lock().list = Some(list);
        self.registered.send_replace(true);
    }

    /// The node list once every node has registered (or once one was held), waiting up to
    /// `timeout`; else the nodes still missing.
    async fn members(&self, timeout: Duration) -> std::result::Result<Bytes, Vec<usize>> {
        let mut registered = self.registered.subscribe();
        let _ = tokio::time::timeout(timeout, registered.wait_for(|all| *all)).await;
        let mut state = self.lock();
        let Gathering { members, list, .. } = &mut *state;
        if let Some(list) = list {
            return Ok(list.clone());
        }
        let Some(members) = members.iter().copied().collect::<Option<Vec<_>>>() else {
            return Err((0..self.nodes).filter(|&n| members[n].is_none()).collect());
        };
        Ok(list.insert(encode_nodes(&members)).clone())
    }

    /// Records `rank`'s arrival at `epoch`'s barrier and waits up to `timeout` for the
    /// others: whether all arrived, and how many had.
    async fn barrier(
        &self,
        epoch: u64,
        rank: usize,
        timeout: Duration,
    ) -> std::result::Result<(bool, usize), Refusal> {
        let world = self.nodes * self.ranks_per_node;
        let mut complete = {
            let mut state = self.lock();
            let now = tokio::time::Instant::now();
            prune(&mut state.barriers, now, timeout);
            if !state.barriers.contains_key(&epoch) {
                let open: Vec<u64> = state
                    .barriers
                    .iter()
                    .filter(|(_, b)| !b.is_complete())
                    .map(|(&e, _)| e)
                    .collect();
                if open.len() >= MAX_OPEN_BARRIERS {
                    return Err(Refusal::TooManyOpen(open));
                }
            }
            let barrier = state.barriers.entry(epoch).or_insert_with(|| Barrier {
                arrived: vec![false; world],
                count: 0,
                last_arrival: now,
                complete: watch::Sender::new(false),
            });
            if !std::mem::replace(&mut barrier.arrived[rank], true) {
                barrier.count += 1;
                barrier.last_arrival = now;
                if barrier.count == world {
                    barrier.complete.send_replace(true);
                }
            }
            barrier.complete.subscribe()
        };
        let done = tokio::time::timeout(timeout, complete.wait_for(|c| *c))
            .await
            .is_ok_and(|r| r.is_ok());
        let count = self
            .lock()
            .barriers
            .get(&epoch)
            .map_or(if done { world } else { 0 }, |b| b.count);
        Ok((done, count))
    }
}

/// Drops what no rank waits on any more: complete barriers beyond the newest
/// [`KEPT_BARRIERS`], and open ones whose last arrival is a gather timeout old (every
/// waiter there has been answered).
pub(super) fn prune(
    barriers: &mut BTreeMap<u64, Barrier>,
    now: tokio::time::Instant,
    timeout: Duration,
) {
    barriers.retain(|_, b| b.is_complete() || now.duration_since(b.last_arrival) < timeout);
    let complete: Vec<u64> = barriers
        .iter()
        .filter(|(_, b)| b.is_complete())
        .map(|(&e, _)| e)
        .collect();
    for epoch in complete.iter().rev().skip(KEPT_BARRIERS) {
        barriers.remove(epoch);
    }
}

pub(super) struct ControlService {
    pub(super) shared: Arc<Shared>,
}

impl ControlService {
    fn check_node(&self, node: u32) -> std::result::Result<(), tonic::Status> {
        if (node as usize) < self.shared.config.nodes {
            Ok(())
        } else {
            Err(tonic::Status::invalid_argument(format!(
                "node {node} is out of range for a job of {} nodes",
                self.shared.config.nodes
            )))
        }
    }

    /// Refuses a caller whose catalog or placement differs from this node's.
    fn check_fingerprint(
        &self,
        node: u32,
        fingerprint: &[u8],
        peer: &str,
    ) -> std::result::Result<(), tonic::Status> {
        if fingerprint == self.shared.config.fingerprint.as_slice() {
            return Ok(());
        }
        let reason = format!(
            "node {node} has a different catalog or cache placement than node {} (same \
             dataset, seed, node count and cache size on every node?)",
            self.shared.config.node
        );
        self.shared.reject("mismatch", peer, reason.clone());
        Err(tonic::Status::failed_precondition(reason))
    }
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn hello(
        &self,
        request: Request<HelloRequest>,
    ) -> std::result::Result<Response<HelloReply>, tonic::Status> {
        let peer = request
            .remote_addr()
            .map_or("unknown".to_string(), |a| a.to_string());
        let hello = request.into_inner();
        self.check_node(hello.node)?;
        self.check_fingerprint(hello.node, &hello.fingerprint, &peer)?;
        Ok(Response::new(HelloReply {
            node: self.shared.config.node as u32,
            data_port: u32::from(self.shared.data_port),
        }))
    }

    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> std::result::Result<Response<RegisterReply>, tonic::Status> {
        let caller = request.remote_addr();
        let register = request.into_inner();
        self.check_node(register.node)?;
        let peer = caller.map_or("unknown".to_string(), |a| a.to_string());
        self.check_fingerprint(register.node, &register.fingerprint, &peer)?;
        if register.addr.len() > MAX_ADDRESS_BYTES {
            return Err(tonic::Status::invalid_argument(format!(
                "an address of {} bytes: at most {MAX_ADDRESS_BYTES}",
                register.addr.len()
            )));
        }
        // A node registers the address it is reached at, from that address; and each node
        // once: a second registration from elsewhere is a duplicate rank or an impostor,
        // and must not move the node's part of the cache.
        let claimed = crate::client::resolve(&register.addr).map_err(|e| {
            tonic::Status::invalid_argument(format!("bad address {:?}: {e}", register.addr))
        })?;
        if caller.is_some_and(|caller| caller.ip() != claimed.ip()) {
            let reason = format!(
                "node {} registered {} from {peer}: a node registers its own address",
                register.node, register.addr
            );
            self.shared.reject("mismatch", &peer, reason.clone());
            return Err(tonic::Status::permission_denied(reason));
        }
        let data_port = u16::try_from(register.data_port).map_err(|_| {
            tonic::Status::invalid_argument(format!(
                "data port {} is not a port",
                register.data_port
            ))
        })?;
        let rendezvous = &self.shared.rendezvous;
        let this = self.shared.config.node;
        if this != 0 {
            // Not the rendezvous: this node's other ranks ask here for the list node 0 gave
            // its first rank (their fingerprint checked against this node's, which node 0
            // checked), so that node 0 answers one rank per node. No one else asks here.
            if register.node as usize != this || data_port != 0 {
                let reason = format!(
                    "node {}'s rank (data port {data_port}) registered at node {this}: a node \
                     registers at node 0; only node {this}'s other ranks ask node {this}",
                    register.node
                );
                self.shared.reject("mismatch", &peer, reason.clone());
                return Err(tonic::Status::failed_precondition(reason));
            }
            return match rendezvous.members(self.shared.config.gather_timeout).await {
                Ok(nodes) => Ok(Response::new(RegisterReply { nodes })),
                Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                    "node {this}'s first rank had not joined the job in {:?}",
                    self.shared.config.gather_timeout
                ))),
            };
        }
        // Other ranks (data port 0: node 0's, and those of a node whose port the system
        // picked) only wait for the list; a node's first rank, which runs the node's
        // service, registers it.
        if data_port != 0 {
            // Every rank refuses a list with a port 0 in it: refused here, it is this
            // node's error alone.
            if claimed.port() == 0 {
                return Err(tonic::Status::invalid_argument(format!(
                    "node {} registered {}: a node registers the port it listens on",
                    register.node, register.addr
                )));
            }
            let member = NodeAddress {
                control: claimed,
                data_port,
            };
            if let Err(known) = rendezvous.register(register.node as usize, member) {
                let reason = format!(
                    "node {} is already registered at {known}; {} claims it too (two \
                     processes with the same RANK?)",
                    register.node, register.addr
                );
                self.shared.reject("duplicate", &peer, reason.clone());
                return Err(tonic::Status::already_exists(reason));
            }
        }
        match rendezvous.members(self.shared.config.gather_timeout).await {
            Ok(nodes) => Ok(Response::new(RegisterReply { nodes })),
            Err(missing) => Err(tonic::Status::deadline_exceeded(format!(
                "nodes {} did not register in {:?}",
                list(&missing),
                self.shared.config.gather_timeout
            ))),
        }
    }

    async fn barrier(
        &self,
        request: Request<BarrierRequest>,
    ) -> std::result::Result<Response<BarrierReply>, tonic::Status> {
        let barrier = request.into_inner();
        self.check_node(barrier.node)?;
        let rendezvous = &self.shared.rendezvous;
        let local_rank = barrier.local_rank as usize;
        if local_rank >= rendezvous.ranks_per_node {
            return Err(tonic::Status::invalid_argument(format!(
                "local rank {local_rank} of a job of {} ranks per node",
                rendezvous.ranks_per_node
            )));
        }
        let rank = barrier.node as usize * rendezvous.ranks_per_node + local_rank;
        match rendezvous
            .barrier(barrier.epoch, rank, self.shared.config.gather_timeout)
            .await
        {
            Ok((complete, arrived)) => Ok(Response::new(BarrierReply {
                complete,
                arrived: arrived as u32,
            })),
            Err(Refusal::TooManyOpen(open)) => Err(tonic::Status::resource_exhausted(format!(
                "epoch {}: the barriers of epochs {} are still gathering; a rank is never \
                 that far ahead of the others",
                barrier.epoch,
                list(&open)
            ))),
        }
    }
}

/// Numbers for a message, the first few of them and how many more.
pub(super) fn list<T: std::fmt::Display>(items: &[T]) -> String {
    const SHOWN: usize = 16;
    let mut text: Vec<String> = items.iter().take(SHOWN).map(ToString::to_string).collect();
    if items.len() > SHOWN {
        text.push(format!("and {} more", items.len() - SHOWN));
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime with a clock, for the rendezvous's timeouts (the tests poll by hand).
    fn timer_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// Polls `future` once: its output if it is done, `None` if it waits.
    fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = futures_util::task::noop_waker();
        let mut context = std::task::Context::from_waker(&waker);
        match std::pin::Pin::new(future).poll(&mut context) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn arrivals_for_far_epochs_are_refused_and_never_evict_an_epoch_still_gathering() {
        let runtime = timer_runtime();
        let _entered = runtime.enter();
        // Two nodes of one rank; rank 0 runs ahead to later and later epochs (a bug, or a
        // member that means harm), rank 1 has not arrived anywhere.
        let rendezvous = Rendezvous::new(2, 1);
        let wait = Duration::from_secs(600);
        let mut waiting: Vec<_> = (0..MAX_OPEN_BARRIERS as u64)
            .map(|epoch| Box::pin(rendezvous.barrier(epoch, 0, wait)))
            .collect();
        for barrier in &mut waiting {
            assert!(poll_once(barrier).is_none(), "waits for rank 1");
        }
        let mut refused = Box::pin(rendezvous.barrier(1000, 0, wait));
        assert!(matches!(
            poll_once(&mut refused),
            Some(Err(Refusal::TooManyOpen(open))) if open.len() == MAX_OPEN_BARRIERS
        ));
        // Epoch 0 kept its arrival: rank 1 completes it, and its waiter is answered.
        let mut second = Box::pin(rendezvous.barrier(0, 1, wait));
        assert!(matches!(poll_once(&mut second), Some(Ok((true, 2)))));
        assert!(matches!(poll_once(&mut waiting[0]), Some(Ok((true, 2)))));
        // Asked again (its connection broke while it waited), it is answered at once.
        let mut again = Box::pin(rendezvous.barrier(0, 0, wait));
        assert!(matches!(poll_once(&mut again), Some(Ok((true, 2)))));
    }

    #[test]
    fn registration_completes_once_for_every_waiter_and_refuses_a_second_address() {
        let runtime = timer_runtime();
        let _entered = runtime.enter();
        let rendezvous = Rendezvous::new(2, 1);
        let member = |port: u16| NodeAddress {
            control: format!("127.0.0.1:{port}").parse().unwrap(),
            data_port: port + 1,
        };
        let wait = Duration::from_secs(600);
        rendezvous.register(1, member(4000)).unwrap();
        let mut first = Box::pin(rendezvous.members(wait));
        assert!(poll_once(&mut first).is_none(), "waits for node 0");
        assert_eq!(
            rendezvous.register(1, member(5000)),
            Err(member(4000).control)
        );
        rendezvous.register(0, member(3000)).unwrap();
        let all = encode_nodes(&[member(3000), member(4000)]);
        let Some(Ok(answer)) = poll_once(&mut first) else {
            panic!("every node registered");
        };
        assert_eq!(answer, all);
        // Every other waiter shares the bytes encoded for the first: not a copy each.
        let Some(Ok(again)) = poll_once(&mut Box::pin(rendezvous.members(wait))) else {
            panic!("every node registered");
        };
        assert_eq!(again.as_ptr(), answer.as_ptr());
        // A node registering again at its address, from a new first rank (a new data
        // port), is listed at its new port from then on.
        rendezvous.register(1, member(4000)).unwrap();
        let Some(Ok(same)) = poll_once(&mut Box::pin(rendezvous.members(wait))) else {
            panic!("every node registered");
        };
        assert_eq!(same.as_ptr(), answer.as_ptr(), "nothing changed");
        let moved = NodeAddress {
            data_port: 9000,
            ..member(4000)
        };
        rendezvous.register(1, moved).unwrap();
        let Some(Ok(renewed)) = poll_once(&mut Box::pin(rendezvous.members(wait))) else {
            panic!("every node registered");
        };
        assert_eq!(renewed, encode_nodes(&[member(3000), moved]));
    }

    #[test]
    fn a_held_list_answers_every_waiter_with_the_same_bytes() {
        let runtime = timer_runtime();
        let _entered = runtime.enter();
        // Node 1's service: nobody registers there; its first rank hands it node 0's list.
        let rendezvous = Rendezvous::new(2, 4);
        let wait = Duration::from_secs(600);
        let mut waiting = Box::pin(rendezvous.members(wait));
        assert!(poll_once(&mut waiting).is_none(), "waits for the list");
        let list = encode_nodes(&[
            NodeAddress {
                control: "127.0.0.1:3000".parse().unwrap(),
                data_port: 3001,
            },
            NodeAddress {
                control: "127.0.0.1:4000".parse().unwrap(),
                data_port: 4001,
            },
        ]);
        rendezvous.hold(list.clone());
        for answer in [
            poll_once(&mut waiting),
            poll_once(&mut Box::pin(rendezvous.members(wait))),
        ] {
            let Some(Ok(answer)) = answer else {
                panic!("the list is held");
            };
            assert_eq!(answer.as_ptr(), list.as_ptr());
        }
    }
}
