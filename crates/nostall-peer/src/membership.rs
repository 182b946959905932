//! A node of a job: who its peers are (an explicit list, or the launcher's rendezvous),
//! and everything it runs to take part.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use nostall::cache::Capacity;
use nostall::env::Distributed;
use nostall::loader::LoaderBuilder;
use nostall::plan::locality::Locality;
use nostall::plan::placement::Placement;
use nostall::storage::{Source, DEFAULT_MAX_BYTES};
use nostall::Catalog;

use crate::auth::Secret;
use crate::client::{resolve, Links, Peer, Timeouts};
use crate::error::{Error, Result};
use crate::node_cache::{NodeCache, NodeCacheStats};
use crate::server::{Service, ServiceConfig, ServiceStats, DEFAULT_MAX_CONNECTIONS};
use crate::source::{AnswerSizes, PartitionedSource, SourceBreakdown};
use crate::store::JobStore;

/// The barrier's "epoch" of the meeting at the end of a job ([`Node::finish`]): after any
/// epoch a job may have, and the same for every rank whatever its epoch count.
const FINISH: u64 = u64::MAX;

/// The environment variable with an explicit peer list (comma-separated `host:port`, by
/// node index); it wins over the rendezvous.
pub const PEERS_VAR: &str = "NOSTALL_PEERS";
/// The environment variable with the port of the peer service (default `MASTER_PORT + 1`).
pub const PORT_VAR: &str = "NOSTALL_PEER_PORT";
/// The environment variable with this node's listen address (default: this host's
/// address towards `MASTER_ADDR`, at the peer port). Port 0 lets the system pick one, for
/// nodes that share a host (node 0 listens where the rendezvous is).
pub const LISTEN_VAR: &str = "NOSTALL_PEER_LISTEN";
/// The environment variable with how long, in seconds, joining waits for every peer to
/// start (default: [`Timeouts::default`]'s).
pub const JOIN_TIMEOUT_VAR: &str = "NOSTALL_PEER_JOIN_TIMEOUT_S";

/// How a node learns its peers' addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// Every node's control address, by node index, the same list on every node.
    Peers(Vec<String>),
    /// Register `own` (this node's address; port 0 for one the system picks) with node
    /// 0's service at `at`, which answers with the list once every node has registered.
    Rendezvous {
        /// Node 0's address.
        at: String,
        /// This node's address.
        own: String,
    },
    /// Register with the job's key-value store (torchrun's, reached through
    /// `torch.distributed`), which every rank already reaches, and read every node's entry
    /// from it: no rendezvous service and no port of nostall's own.
    Store {
        /// The job's key space.
        store: JobStore,
        /// This node's address (port 0: the system picks one).
        own: String,
    },
}

/// How a node takes part in a job.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// This node's index, `0..nodes`.
    pub node: usize,
    /// Nodes in the job.
    pub nodes: usize,
    /// This process's rank within the node; local rank 0 runs the node's cache and
    /// service, the others use them through it.
    pub local_rank: usize,
    /// Ranks (processes) per node.
    pub ranks_per_node: usize,
    /// Where the peers are.
    pub membership: Membership,
    /// Each node's cache: bytes, or a share of the dataset. Together the nodes should hold
    /// at least the whole dataset for storage to go quiet after the first epoch.
    pub capacity: Capacity,
    /// The seed of the placement; the same on every node.
    pub seed: u64,
    /// The job's secret.
    pub secret: Secret,
    /// Client timeouts.
    pub timeouts: Timeouts,
    /// The largest sample served or accepted, in bytes.
    pub max_sample_bytes: u64,
    /// How long the rendezvous and the barrier wait for every node.
    pub gather_timeout: Duration,
    /// What a peer's time marked down is read from: the real clock, or a test's
    /// ([`nostall::clock::Clock::manual`]), which moves only when the test says.
    pub clock: nostall::clock::Clock,
}

impl NodeConfig {
    /// The global rank of this node's local rank `local_rank`.
    pub fn rank_of(&self, local_rank: usize) -> usize {
        self.node * self.ranks_per_node + local_rank
    }

    /// This process's global rank.
    pub fn rank(&self) -> usize {
        self.rank_of(self.local_rank)
    }

    /// The number of ranks in the job.
    pub fn world(&self) -> usize {
        self.nodes * self.ranks_per_node
    }

    /// Node `node` of a job whose nodes' addresses are `peers`, one rank per node.
    pub fn new(node: usize, peers: Vec<String>, capacity: Capacity, secret: Secret) -> NodeConfig {
        NodeConfig {
            node,
            nodes: peers.len(),
            local_rank: 0,
            ranks_per_node: 1,
            membership: Membership::Peers(peers),
            capacity,
            seed: 0,
            secret,
            timeouts: Timeouts::default(),
            clock: nostall::clock::Clock::real(),
            max_sample_bytes: DEFAULT_MAX_BYTES,
            gather_timeout: Duration::from_secs(600),
        }
    }

    /// The node as torchrun describes it: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
    /// `LOCAL_WORLD_SIZE` place it; peers come from [`PEERS_VAR`], else from a rendezvous
    /// at `MASTER_ADDR` on [`PORT_VAR`] (default `MASTER_PORT + 1`); the secret from
    /// [`crate::auth::SECRET_VAR`]; the join timeout from [`JOIN_TIMEOUT_VAR`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the variable that is missing or malformed.
    pub fn from_env(capacity: Capacity) -> Result<NodeConfig> {
        NodeConfig::from_vars(capacity, Secret::from_env()?, None, |name| {
            std::env::var(name).ok()
        })
    }

    /// As [`NodeConfig::from_env`], the nodes meeting through `store` (the job's own, as
    /// torchrun runs it) instead of a rendezvous at `MASTER_ADDR`: each node listens at a
    /// port the system picks ([`LISTEN_VAR`] still wins), and [`PEERS_VAR`] still wins
    /// over the store.
    ///
    /// # Errors
    ///
    /// As for [`NodeConfig::from_env`].
    pub fn from_env_meeting_in(capacity: Capacity, store: JobStore) -> Result<NodeConfig> {
        NodeConfig::from_vars(capacity, Secret::from_env()?, Some(store), |name| {
            std::env::var(name).ok()
        })
    }

    fn from_vars(
        capacity: Capacity,
        secret: Secret,
        store: Option<JobStore>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<NodeConfig> {
        let place = Distributed::resolve_with(None, None, &var)?;
        let local_world: usize = match var("LOCAL_WORLD_SIZE") {
            Some(v) => v.trim().parse().map_err(|_| {
                Error::Config(format!("LOCAL_WORLD_SIZE={v:?} is not a whole number"))
            })?,
            None => 1,
        };
        if local_world == 0 || place.world % local_world != 0 {
            return Err(Error::Config(format!(
                "WORLD_SIZE {} is not a multiple of LOCAL_WORLD_SIZE {local_world}: every node \
                 must run the same number of ranks",
                place.world
            )));
        }
        let nodes = place.world / local_world;
        let membership = match var(PEERS_VAR) {
            Some(list) => {
                let peers: Vec<String> = list.split(',').map(|p| p.trim().to_string()).collect();
                if peers.len() != nodes {
                    return Err(Error::Config(format!(
                        "{PEERS_VAR} lists {} addresses for {nodes} nodes",
                        peers.len()
                    )));
                }
                Membership::Peers(peers)
            }
            None => {
                let master = var("MASTER_ADDR").ok_or_else(|| {
                    Error::Config(format!(
                        "neither {PEERS_VAR} nor MASTER_ADDR is set: launch with torchrun, or \
                         list the nodes' peer addresses in {PEERS_VAR}"
                    ))
                })?;
                if let Some(store) = store {
                    // The route towards the store's host (any port: no packet is sent).
                    let probe = format!("{master}:{}", var("MASTER_PORT").unwrap_or("1".into()));
                    let own = match var(LISTEN_VAR) {
                        Some(own) => own,
                        None => format!("{}:0", address_towards(&probe)?),
                    };
                    return NodeConfig::placed(
                        place,
                        local_world,
                        capacity,
                        secret,
                        var,
                        Membership::Store { store, own },
                    );
                }
                let port = match var(PORT_VAR) {
                    Some(p) => p.trim().parse::<u16>().map_err(|_| {
                        Error::Config(format!("{PORT_VAR}={p:?} is not a port number"))
                    })?,
                    None => var("MASTER_PORT")
                        .and_then(|p| p.trim().parse::<u16>().ok())
                        .and_then(|p| p.checked_add(1))
                        .ok_or_else(|| {
                            Error::Config(format!(
                                "MASTER_PORT is missing or not a port below 65535; set \
                                 {PORT_VAR}"
                            ))
                        })?,
                };
                let at = format!("{master}:{port}");
                let own = match var(LISTEN_VAR) {
                    Some(own) => own,
                    None => format!("{}:{port}", address_towards(&at)?),
                };
                Membership::Rendezvous { at, own }
            }
        };
        NodeConfig::placed(place, local_world, capacity, secret, var, membership)
    }

    /// Node and local rank from `place`, the join timeout from [`JOIN_TIMEOUT_VAR`].
    fn placed(
        place: Distributed,
        local_world: usize,
        capacity: Capacity,
        secret: Secret,
        var: impl Fn(&str) -> Option<String>,
        membership: Membership,
    ) -> Result<NodeConfig> {
        let mut timeouts = Timeouts::default();
        if let Some(v) = var(JOIN_TIMEOUT_VAR) {
            timeouts.join = v
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| {
                    Error::Config(format!(
                        "{JOIN_TIMEOUT_VAR}={v:?} is not a number of seconds"
                    ))
                })?;
        }
        Ok(NodeConfig {
            node: place.rank / local_world,
            nodes: place.world / local_world,
            local_rank: place.local_rank % local_world,
            ranks_per_node: local_world,
            membership,
            timeouts,
            ..NodeConfig::new(0, Vec::new(), capacity, secret)
        })
    }
}

/// The address a node registers: where its service listens, once started (`own` may name
/// port 0, for the system to pick one: nodes sharing a host need no ports of their own
/// but node 0's); `own` from a rank that runs no service.
fn registered(own: &str, service: Option<&Service>) -> String {
    service.map_or_else(|| own.to_string(), |s| s.control_addr().to_string())
}

/// This host's address on the route to `addr` (no packet is sent).
fn address_towards(addr: &str) -> Result<std::net::IpAddr> {
    let target = resolve(addr)?;
    let any = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(any).map_err(crate::error::network("probing the route"))?;
    socket
        .connect(target)
        .and_then(|()| socket.local_addr())
        .map(|a| a.ip())
        .map_err(crate::error::network(format!("no route to {addr}")))
}

/// What every node must agree on for the partition to be the same everywhere: the
/// catalog (ids, paths and sizes) and the placement. A SHA-256 digest.
pub fn fingerprint(catalog: &Catalog, placement: &Placement) -> Vec<u8> {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    digest.update(b"nostall-peer/v1/fingerprint");
    digest.update(&(catalog.len() as u64).to_be_bytes());
    digest.update(&(placement.nodes() as u64).to_be_bytes());
    digest.update(&placement.capacity().to_be_bytes());
    for id in 0..catalog.len() as u64 {
        digest.update(&catalog.size(id).to_be_bytes());
        digest.update(catalog.relative_path(id).as_bytes());
        digest.update(&[0]);
        let holder = placement.holder(id).map_or(u32::MAX, |h| h as u32);
        digest.update(&holder.to_be_bytes());
    }
    digest.finish().as_ref().to_vec()
}

/// A node's counters.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct NodeStats {
    /// Where this process's samples came from.
    pub source: SourceBreakdown,
    /// The node cache, in the process that runs it.
    pub cache: Option<NodeCacheStats>,
    /// The service, in the process that runs it.
    pub service: Option<ServiceStats>,
}

/// One process's part in a job with a partitioned cache.
pub struct Node {
    config: NodeConfig,
    peers: Vec<String>,
    placement: Arc<Placement>,
    links: Arc<Links>,
    cache: Option<Arc<NodeCache>>,
    source: Arc<PartitionedSource>,
    service: Option<Service>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node", &self.config.node)
            .field("peers", &self.peers)
            .finish()
    }
}

impl Node {
    /// Joins the job: places the dataset, starts this node's service (on local rank 0),
    /// and learns the peers' addresses: from the rendezvous at node 0 (one call, answered
    /// once every node has registered), or from the list given, greeting every peer on it
    /// (waiting up to the join timeout for them to start).
    ///
    /// # Errors
    ///
    /// A bad configuration, an address that cannot be bound, a peer that cannot be
    /// reached in time, or one whose catalog or placement differs.
    pub fn join(catalog: &Catalog, storage: Arc<dyn Source>, config: NodeConfig) -> Result<Node> {
        if config.nodes == 0 || config.node >= config.nodes {
            return Err(Error::Config(format!(
                "node {} is out of range for a job of {} nodes",
                config.node, config.nodes
            )));
        }
        if config.ranks_per_node == 0 || config.local_rank >= config.ranks_per_node {
            return Err(Error::Config(format!(
                "local rank {} is out of range for {} ranks per node",
                config.local_rank, config.ranks_per_node
            )));
        }
        let sizes: Vec<u64> = (0..catalog.len() as u64)
            .map(|id| catalog.size(id))
            .collect();
        // Samples read in groups (Parquet pages) are placed a group to a node: the node
        // that holds a group reads it, once.
        let placement = Arc::new(Placement::in_groups(
            config.seed,
            config.nodes,
            config.capacity,
            &sizes,
            catalog.groups(),
        )?);
        let answers = AnswerSizes::of(catalog, sizes, config.max_sample_bytes);
        let fingerprint = fingerprint(catalog, &placement);
        let links = Arc::new(Links::new(
            config.node,
            config.secret.clone(),
            fingerprint.clone(),
            (config.timeouts, config.clock.clone()),
        )?);
        let own = match &config.membership {
            Membership::Peers(peers) => {
                if peers.len() != config.nodes {
                    return Err(Error::Config(format!(
                        "{} peer addresses for {} nodes",
                        peers.len(),
                        config.nodes
                    )));
                }
                peers[config.node].clone()
            }
            Membership::Rendezvous { own, .. } | Membership::Store { own, .. } => own.clone(),
        };
        let (cache, service) = if config.local_rank == 0 {
            let cache = Arc::new(NodeCache::new(
                config.node,
                placement.clone(),
                storage.clone(),
            ));
            let service = Service::start(
                ServiceConfig {
                    node: config.node,
                    nodes: config.nodes,
                    ranks_per_node: config.ranks_per_node,
                    listen: resolve(&own)?,
                    secret: config.secret.clone(),
                    fingerprint: fingerprint.clone(),
                    max_response_bytes: config.max_sample_bytes,
                    io_timeout: config.timeouts.request,
                    gather_timeout: config.gather_timeout,
                    max_connections: DEFAULT_MAX_CONNECTIONS,
                },
                cache.clone(),
                catalog.len() as u64,
            )?;
            (Some(cache), Some(service))
        } else {
            (None, None)
        };
        // From the rendezvous, each node's data plane, its fingerprint checked by node 0;
        // from a list, nothing but addresses: each peer is greeted (the fingerprint
        // compared, its data port learnt), waiting for it to start.
        let (peers, data): (Vec<String>, Vec<Option<SocketAddr>>) = match &config.membership {
            Membership::Peers(peers) => (peers.clone(), vec![None; peers.len()]),
            Membership::Rendezvous { at, own } => links
                .register(
                    at,
                    &registered(own, service.as_ref()),
                    service.as_ref(),
                    config.nodes,
                )?
                .into_iter()
                .map(|(addr, data)| (addr, Some(data)))
                .unzip(),
            Membership::Store { store, own } => store
                .meet(
                    config.node,
                    config.nodes,
                    service
                        .as_ref()
                        .map(|s| (registered(own, Some(s)), s.data_addr().port()))
                        .as_ref()
                        .map(|(addr, port)| (addr.as_str(), *port)),
                    &config.secret,
                    &fingerprint,
                    config.timeouts.join,
                )?
                .into_iter()
                .map(|(addr, data)| (addr, Some(data)))
                .unzip(),
        };
        if let Some(service) = &service {
            // The service serves the job's nodes only (the node's other ranks included:
            // they call from its address), at every address their names resolve to.
            let mut addresses = Vec::with_capacity(peers.len());
            for addr in &peers {
                let resolved = addr
                    .to_socket_addrs()
                    .map_err(crate::error::network(format!("cannot resolve {addr}")))?;
                addresses.extend(resolved.map(|a| a.ip()));
            }
            service.admit_only(addresses);
        }
        let handles: Vec<Arc<Peer>> = peers
            .iter()
            .enumerate()
            .map(|(n, addr)| {
                Arc::new(Peer::new(
                    n,
                    addr.clone(),
                    links.clone(),
                    config.max_sample_bytes,
                ))
            })
            .collect();
        for (n, (peer, data)) in handles.iter().zip(&data).enumerate() {
            match data {
                Some(data) => peer.knows(*data),
                None if n != config.node || cache.is_none() => peer.greet()?,
                None => {}
            }
        }
        let source = Arc::new(PartitionedSource::new(
            config.node,
            placement.clone(),
            storage,
            cache.clone(),
            handles,
            answers,
        ));
        Ok(Node {
            config,
            peers,
            placement,
            links,
            cache,
            source,
            service,
        })
    }

    /// The loader's source: own cache → holder peer → storage.
    pub fn source(&self) -> Arc<PartitionedSource> {
        self.source.clone()
    }

    /// Makes `builder` plan as this process's rank of the job: its rank and the world
    /// size, and locality-aware batches over the node caches.
    pub fn configure(&self, builder: &mut LoaderBuilder) {
        self.configure_rank(builder, self.config.local_rank);
    }

    /// As [`Node::configure`], for local rank `local_rank` of this node: a process that
    /// prepares for every rank of its node (the node agent) plans each rank's stream.
    ///
    /// # Panics
    ///
    /// When `local_rank` is not below the node's ranks.
    pub fn configure_rank(&self, builder: &mut LoaderBuilder, local_rank: usize) {
        assert!(
            local_rank < self.config.ranks_per_node,
            "local rank {local_rank} of {} ranks per node",
            self.config.ranks_per_node
        );
        let settings = builder.settings_mut();
        settings.plan.rank = self.config.rank_of(local_rank);
        settings.plan.world = self.world();
        // The nodes meet at a barrier before each epoch: an epoch started ahead would read
        // before it, from peers still filling their parts in the previous epoch.
        settings.overlap_epochs = false;
        builder.locality(Some(self.locality()));
    }

    /// The loader's locality-aware planning, to set as
    /// [`nostall::LoaderConfig::locality`].
    pub fn locality(&self) -> Locality {
        Locality {
            placement: self.placement.clone(),
            ranks_per_node: self.config.ranks_per_node,
        }
    }

    /// How this node takes part in the job.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// This process's global rank.
    pub fn rank(&self) -> usize {
        self.config.rank()
    }

    /// The number of ranks in the job.
    pub fn world(&self) -> usize {
        self.config.world()
    }

    /// Every node's control address, by index.
    pub fn peers(&self) -> &[String] {
        &self.peers
    }

    /// Who caches what.
    pub fn placement(&self) -> &Arc<Placement> {
        &self.placement
    }

    /// Where this node's service listens (local rank 0 only).
    pub fn service(&self) -> Option<&Service> {
        self.service.as_ref()
    }

    /// Waits until every rank of every node has reached `epoch` (at node 0).
    /// `Ok(false)` when the barrier timed out with ranks missing (a node died): the epoch
    /// goes on without them.
    ///
    /// # Errors
    ///
    /// When node 0 cannot be reached or refuses.
    pub fn barrier(&self, epoch: u64) -> Result<bool> {
        self.barrier_for(epoch, self.config.local_rank)
    }

    /// As [`Node::barrier`], for local rank `local_rank` of this node (the node agent
    /// meets the other nodes for each of the node's ranks).
    ///
    /// # Errors
    ///
    /// As for [`Node::barrier`].
    pub fn barrier_for(&self, epoch: u64, local_rank: usize) -> Result<bool> {
        if let Membership::Store { store, .. } = &self.config.membership {
            return store.barrier(epoch, self.config.world(), self.config.gather_timeout);
        }
        let reply = self.links.barrier(
            &self.peers[0],
            epoch,
            local_rank as u32,
            self.config.gather_timeout,
        )?;
        Ok(reply.complete)
    }

    /// Waits until every rank of every node has finished the job (at node 0): the
    /// meeting before a node leaves, so that its service stays up while a peer may still
    /// read its part. Ranks need not meet between epochs. `Ok(false)` when the meeting
    /// timed out with ranks missing (a node died): leave anyway.
    ///
    /// # Errors
    ///
    /// When node 0 cannot be reached or refuses.
    pub fn finish(&self) -> Result<bool> {
        self.finish_for(self.config.local_rank)
    }

    /// As [`Node::finish`], for local rank `local_rank` of this node (the node agent
    /// finishes for each of the node's ranks).
    ///
    /// # Errors
    ///
    /// As for [`Node::finish`].
    pub fn finish_for(&self, local_rank: usize) -> Result<bool> {
        self.barrier_for(FINISH, local_rank)
    }

    /// The counters.
    pub fn stats(&self) -> NodeStats {
        NodeStats {
            source: self.source.breakdown(),
            cache: self.cache.as_ref().map(|c| c.stats()),
            service: self.service.as_ref().map(Service::stats),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn secret() -> Secret {
        Secret::new(b"0123456789abcdef").unwrap()
    }

    /// Rank 5 of a torchrun job of two nodes of four ranks.
    const TORCHRUN: [(&str, &str); 6] = [
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn torchrun_places_the_node_and_finds_the_rendezvous() {
        let config =
            NodeConfig::from_vars(Capacity::Fraction(0.3), secret(), None, vars(&TORCHRUN))
                .unwrap();
        assert_eq!((config.node, config.nodes), (1, 2));
        assert_eq!((config.local_rank, config.ranks_per_node), (1, 4));
        assert_eq!(
            config.membership,
            Membership::Rendezvous {
                at: "127.0.0.1:29501".into(),
                own: "127.0.0.1:29501".into()
            }
        );
    }

    #[test]
    fn meeting_in_the_jobs_store_each_node_listens_where_the_system_picks() {
        let store = JobStore::new(Arc::new(crate::store::MemoryStore::default()), "p/");
        let from = |env: &[(&str, &str)]| {
            NodeConfig::from_vars(
                Capacity::Fraction(0.3),
                secret(),
                Some(store.clone()),
                vars(env),
            )
            .unwrap()
        };
        let config = from(&TORCHRUN);
        assert_eq!((config.node, config.nodes), (1, 2));
        assert_eq!((config.local_rank, config.ranks_per_node), (1, 4));
        let own = |own: &str| Membership::Store {
            store: store.clone(),
            own: own.into(),
        };
        assert_eq!(config.membership, own("127.0.0.1:0"));
        let listen = [&TORCHRUN[..], &[(LISTEN_VAR, "127.0.0.1:7000")]].concat();
        assert_eq!(from(&listen).membership, own("127.0.0.1:7000"));
        let list = [&TORCHRUN[..], &[(PEERS_VAR, "a:1,b:2")]].concat();
        assert_eq!(
            from(&list).membership,
            Membership::Peers(vec!["a:1".into(), "b:2".into()])
        );
    }

    #[test]
    fn an_explicit_list_wins_and_must_fit_the_world() {
        let env = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            (PEERS_VAR, "10.0.0.1:7070, 10.0.0.2:7070"),
        ];
        let config =
            NodeConfig::from_vars(Capacity::Fraction(0.5), secret(), None, vars(&env)).unwrap();
        assert_eq!(config.node, 1);
        assert_eq!(
            config.membership,
            Membership::Peers(vec!["10.0.0.1:7070".into(), "10.0.0.2:7070".into()])
        );
        let env = [("WORLD_SIZE", "3"), (PEERS_VAR, "a:1,b:2")];
        let err =
            NodeConfig::from_vars(Capacity::Fraction(0.5), secret(), None, vars(&env)).unwrap_err();
        assert!(err.to_string().contains("2 addresses for 3 nodes"), "{err}");
        let err =
            NodeConfig::from_vars(Capacity::Fraction(0.5), secret(), None, vars(&[])).unwrap_err();
        assert!(err.to_string().contains("MASTER_ADDR"), "{err}");
        let env = [(PEERS_VAR, "a:1"), (JOIN_TIMEOUT_VAR, "2.5")];
        let config =
            NodeConfig::from_vars(Capacity::Fraction(0.5), secret(), None, vars(&env)).unwrap();
        assert_eq!(config.timeouts.join, Duration::from_millis(2500));
        let env = [(PEERS_VAR, "a:1"), (JOIN_TIMEOUT_VAR, "soon")];
        let err =
            NodeConfig::from_vars(Capacity::Fraction(0.5), secret(), None, vars(&env)).unwrap_err();
        assert!(err.to_string().contains("not a number of seconds"), "{err}");
    }
}
