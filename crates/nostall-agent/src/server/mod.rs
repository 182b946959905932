//! The agent process: its socket, the groups, and one thread per attached job (whose
//! conversation is `session`'s).

mod fields;
mod session;
mod stream;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nostall::clock::Clock;
use nostall::env::LocalRanks;
use nostall::fields::Fields;
use nostall::loader::{Arena, LoaderBuilder, LoaderSettings, Threads};
use nostall::storage::Source;
use nostall::Catalog;

use crate::attachment;
use crate::group::{Group, GroupStats, Limits};
use crate::node::{JoinedNode, Nodes};
use crate::socket::{Channel, Listener, RecvError, MAX_MESSAGE};
use crate::wire::{
    hello_protocol, JobNode, Reply, Request, MAX_BATCH, NOSTALL_VERSION, PROTOCOL, VERSIONED,
};
use fields::MadeFields;
use session::Session;
use stream::Digest;

/// How the agent runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentConfig {
    /// Where it listens ([`crate::default_socket`] unless given).
    pub socket: PathBuf,
    /// Bytes of prepared batches a group stages ahead of its slowest member (at least two
    /// batches, at most 64).
    pub staging: u64,
    /// How long a member may hold its group up without asking for a batch before it is
    /// detached (the others go on; it continues alone if it comes back).
    pub lease: Duration,
    /// The agent leaves after this long with no job attached.
    pub idle: Duration,
    /// The most jobs attached at once.
    pub max_clients: usize,
    /// The most batches one job may hold (tensors not yet freed) before its requests
    /// are refused.
    pub max_held: usize,
}

impl AgentConfig {
    /// The defaults: the default socket, 512 MiB of staging per group, a 2 s lease,
    /// leaving after 60 s idle, 64 jobs, 64 held batches each.
    pub fn new() -> AgentConfig {
        AgentConfig {
            socket: crate::default_socket(),
            staging: 512 << 20,
            lease: Duration::from_secs(2),
            idle: Duration::from_secs(60),
            max_clients: 64,
            max_held: 64,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig::new()
    }
}

/// A group, and what makes private streams for its members.
struct Entry {
    group: Arc<Group>,
    /// What the group reads, in words, and digests of what its first job asked for and
    /// of that as its loader deals it (`stream`'s module): jobs in the group read the
    /// same.
    stream: String,
    asked: Digest,
    identity: Digest,
    /// Makes private streams for its members, over what the group reads.
    builder: LoaderBuilder,
    catalog: Arc<Catalog>,
    source: Arc<dyn Source>,
    /// The job's node the group's rank reads through (a partitioned cache).
    node: Option<Arc<JoinedNode>>,
    /// The fields its loader reads, held here so that jobs and groups reading the same
    /// fields share them while it lasts ([`MadeFields`]).
    _fields: Option<Arc<Fields>>,
    attached: usize,
}

/// Figures of the agent, for tests and logs.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AgentStats {
    /// Each group's figures, by name.
    pub groups: Vec<(String, GroupStats)>,
    /// Requests refused as malformed, oversized or from another user.
    pub refused: u64,
}

/// A running agent (see [`Agent::serve`]).
pub struct Agent {
    pub(crate) config: AgentConfig,
    /// The groups by name.
    groups: Mutex<HashMap<String, Entry>>,
    /// The groups whose dataset a job is opening (outside `groups`' lock), and the news
    /// that one was installed or failed, for the jobs that wait for it. Taken before
    /// `groups` when both are held.
    opening: Mutex<HashSet<String>>,
    opened: Condvar,
    /// What the groups' leases are read by (a test's manual clock, moved by hand).
    pub(crate) clock: Clock,
    /// A test's hook into the making of groups.
    #[cfg(test)]
    pub(crate) open_hook: Option<OpenHook>,
    /// The jobs' nodes joined for their local ranks.
    nodes: Nodes,
    /// The jobs' fields, made once for all the jobs that read them.
    pub(crate) fields: MadeFields,
    clients: AtomicUsize,
    /// Connections being refused before their hello was read ([`Agent::refuse_unheard`]).
    refusing: AtomicUsize,
    next_member: AtomicU64,
    refused: AtomicU64,
    /// The user served (the agent's own).
    pub(crate) uid: u32,
    stopping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How often the accept loop looks at the idle clock.
const ACCEPT_TICK: Duration = Duration::from_millis(200);

/// How long a job has to say which stream it reads.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections refused at once, each on a thread that reads its hello first; more are
/// refused without waiting (their refusal may then be lost to a reset).
const MAX_REFUSING: usize = 16;

impl Agent {
    /// An agent with `config`, not yet listening.
    pub fn new(config: AgentConfig) -> Agent {
        Agent {
            config,
            groups: Mutex::new(HashMap::new()),
            opening: Mutex::new(HashSet::new()),
            opened: Condvar::new(),
            clock: Clock::real(),
            #[cfg(test)]
            open_hook: None,
            nodes: Nodes::default(),
            fields: MadeFields::default(),
            clients: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
            next_member: AtomicU64::new(1),
            refused: AtomicU64::new(0),
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            stopping: Default::default(),
        }
    }

    /// Attaches `member` to the group `name` if there is one: `None` where there is none,
    /// an error naming both orders where it deals another than `resolved`.
    fn attach_to(
        &self,
        name: &str,
        resolved: &stream::Resolved,
        member: u64,
    ) -> Option<Result<String, String>> {
        let mut groups = self.groups();
        let entry = groups.get_mut(name)?;
        if entry.identity != resolved.identity {
            return Some(Err(another_order(name, &entry.stream, &resolved.words)));
        }
        entry.attached += 1;
        entry.group.attach(member);
        Some(Ok(name.to_string()))
    }

    /// The group `name`, for a test that waits on what it made.
    #[cfg(test)]
    pub(crate) fn group(&self, name: &str) -> Option<Arc<Group>> {
        self.groups().get(name).map(|e| e.group.clone())
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn opening(&self) -> MutexGuard<'_, HashSet<String>> {
        self.opening.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes [`Agent::serve`] return soon, whether jobs are attached or not (their
    /// connections end with the process, or when they leave).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// The agent's figures now.
    pub fn stats(&self) -> AgentStats {
        let groups = self.groups();
        AgentStats {
            groups: groups
                .iter()
                .map(|(name, e)| (name.clone(), e.group.stats(None)))
                .collect(),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// Listens on the configured socket and serves jobs until none has been attached for
    /// the idle time. Returns `Ok(false)` at once if another agent of this user already
    /// serves the socket.
    ///
    /// # Errors
    ///
    /// The socket's directory is not this user's alone, or the socket cannot be made.
    pub fn serve(self: &Arc<Agent>) -> io::Result<bool> {
        self.serve_while(|| true)
    }

    /// As [`Agent::serve`], also returning (as served) when `keep_going`, asked a few
    /// times a second, says to stop: a signal seen by the caller.
    ///
    /// # Errors
    ///
    /// As for [`Agent::serve`].
    pub fn serve_while(
        self: &Arc<Agent>,
        mut keep_going: impl FnMut() -> bool,
    ) -> io::Result<bool> {
        let Some(_lock) = crate::place::claim(&self.config.socket)? else {
            return Ok(false);
        };
        let listener = Listener::bind(&self.config.socket)?;
        eprintln!(
            "nostall agent: serving {} (pid {})",
            self.config.socket.display(),
            std::process::id()
        );
        let mut idle_since = Instant::now();
        loop {
            if let Some(channel) = listener.accept(ACCEPT_TICK)? {
                self.admit(channel);
            }
            if self.stopping.load(Ordering::SeqCst) || !keep_going() {
                let _ = std::fs::remove_file(&self.config.socket);
                return Ok(true);
            }
            if self.clients.load(Ordering::SeqCst) > 0 {
                idle_since = Instant::now();
            } else if idle_since.elapsed() >= self.config.idle {
                eprintln!("nostall agent: idle for {:?}, leaving", self.config.idle);
                let _ = std::fs::remove_file(&self.config.socket);
                return Ok(true);
            }
        }
    }

    fn refuse(&self, channel: &Channel, why: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        eprintln!("nostall agent: refused a connection: {why}");
        let _ = channel.send(&Reply::refusal(why).encode(), None);
    }

    /// Refuses a job of another protocol (another nostall version) in words it reads:
    /// [`Reply::Versions`] to a job that knows it, a refusal naming both versions to an
    /// earlier one.
    fn refuse_version(&self, channel: &Channel, protocol: u32, pid: i32) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "nostall agent: refused job (pid {pid}) of protocol {protocol}: this agent speaks \
             protocol {PROTOCOL} (nostall {NOSTALL_VERSION})"
        );
        let reply = if protocol >= VERSIONED {
            Reply::Versions {
                protocol: PROTOCOL,
                release: NOSTALL_VERSION.into(),
            }
        } else {
            Reply::refusal(format!(
                "this job speaks protocol {protocol}, the agent at {} (pid {}) protocol \
                 {PROTOCOL} (nostall {NOSTALL_VERSION}): they are other nostall versions. Stop the \
                 agent once its jobs are done, or give this job an agent of its own version \
                 at another socket (NOSTALL_AGENT_SOCKET)",
                self.config.socket.display(),
                std::process::id()
            ))
        };
        let _ = channel.send(&reply.encode(), None);
    }

    /// Refuses a connection whose hello has not been read, on a thread of its own: reads
    /// the hello, sends the refusal, and closes once the job has closed its end (or after
    /// [`HELLO_TIMEOUT`]). Closed with its hello unread, the connection would reset the
    /// job's end, and the job would read the reset instead of the refusal.
    fn refuse_unheard(self: &Arc<Agent>, channel: Channel, why: String) {
        if self.refusing.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::SeqCst);
            return self.refuse(&channel, &why);
        }
        let agent = self.clone();
        let spawned = std::thread::Builder::new()
            .name("nostall-agent-refusal".into())
            .spawn(move || {
                // The hello is dropped unread: a small buffer takes it (truncated) too.
                let mut buf = vec![0u8; 4096];
                let _ = channel.set_timeouts(HELLO_TIMEOUT, Some(HELLO_TIMEOUT));
                let _ = channel.recv(&mut buf);
                agent.refuse(&channel, &why);
                // Until the job has read the refusal and closed its end.
                let _ = channel.recv(&mut buf);
                agent.refusing.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.refusing.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn admit(self: &Arc<Agent>, channel: Channel) {
        let pid = match channel.peer() {
            Ok(peer) if peer.uid == self.uid => peer.pid,
            Ok(peer) => {
                return self.refuse_unheard(
                    channel,
                    format!(
                        "process {} runs as user {}, the agent serves user {} only",
                        peer.pid, peer.uid, self.uid
                    ),
                )
            }
            Err(e) => return self.refuse_unheard(channel, format!("no peer credentials: {e}")),
        };
        if self.clients.load(Ordering::SeqCst) >= self.config.max_clients {
            return self.refuse_unheard(
                channel,
                format!("{} jobs are attached already", self.config.max_clients),
            );
        }
        self.clients.fetch_add(1, Ordering::SeqCst);
        let agent = self.clone();
        let spawned = std::thread::Builder::new()
            .name("nostall-agent-client".into())
            .spawn(move || {
                // A bug met while serving one job ends that job's connection only (its
                // membership is given back as the stack unwinds); the agent serves on.
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    agent.converse(&channel, pid)
                }));
                if served.is_err() {
                    eprintln!("nostall agent: serving a job failed (a bug): its connection ends");
                }
                agent.clients.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.clients.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// One job's connection, from its hello to its leaving.
    fn converse(&self, channel: &Channel, pid: i32) {
        // A job that stops reading cannot block this thread for long.
        if channel
            .set_timeouts(self.config.lease, Some(HELLO_TIMEOUT))
            .is_err()
        {
            return;
        }
        let mut buf = vec![0u8; MAX_MESSAGE];
        let (hello, attached) = match channel.recv(&mut buf) {
            Ok(r) => (&buf[..r.len], r.fd),
            Err(RecvError::Oversized) => return self.refuse(channel, "oversized hello"),
            Err(_) => return,
        };
        // Told before the rest is read: the rest of another version's hello is laid out
        // otherwise.
        if let Some(protocol) = hello_protocol(hello).filter(|&p| p != PROTOCOL) {
            return self.refuse_version(channel, protocol, pid);
        }
        let (location, settings, group_name, node, ranks, storage, sources, fields) =
            match Request::decode(hello) {
                Ok(Request::Hello {
                    location,
                    settings,
                    group,
                    node,
                    ranks,
                    storage,
                    sources,
                    fields,
                    ..
                }) => (
                    location, settings, group, node, ranks, storage.0, sources, fields,
                ),
                Ok(_) => return self.refuse(channel, "the first message must be a hello"),
                Err(e) => {
                    return self.refuse(channel, &format!("the job's hello is malformed: {}", e.0))
                }
            };
        // A descriptor comes with a hello only to carry its fields' tokenizers.
        let lens = fields.as_ref().map_or(&[][..], |f| &f.tokenizers[..]);
        let tokenizers = match attachment::received(attached, lens) {
            Ok(tokenizers) => tokenizers,
            Err(why) => return self.refuse(channel, &why),
        };
        let fields = fields.map(|f| SentFields {
            digest: stream::fields_digest(&f.text, &tokenizers),
            text: f.text,
            tokenizers,
        });
        let member = self.next_member.fetch_add(1, Ordering::Relaxed);
        let joining = Joining {
            location: &location,
            settings: &settings,
            group_name: &group_name,
            job: node.as_deref(),
            ranks,
            storage: &storage,
            sources: &sources,
            fields: fields.as_ref(),
        };
        let name = match self.join(member, &joining) {
            Ok(name) => name,
            Err(message) => {
                eprintln!("nostall agent: refused job {member} (pid {pid}): {message}");
                let _ = channel.send(&Reply::refusal(&message).encode(), None);
                return;
            }
        };
        eprintln!("nostall agent: job {member} (pid {pid}) joined group {name}");
        let _ = channel.set_timeouts(self.config.lease, None);
        let membership = Membership {
            agent: self,
            name: &name,
            member,
        };
        let mut session = Session::new(self, &name, member);
        let welcome = session.welcome();
        if channel.send(&welcome.encode(), None).is_ok() {
            session.serve(channel, &mut buf);
        }
        drop(session);
        drop(membership);
        eprintln!("nostall agent: job {member} (pid {pid}) left group {name}");
    }

    /// Attaches `member` to the group for its stream, making the group if needed (and,
    /// for a rank of a partitioned cache, joining its job as its node if needed).
    fn join(&self, member: u64, joining: &Joining<'_>) -> Result<String, String> {
        let Joining {
            location,
            settings,
            group_name,
            job,
            ranks,
            storage,
            sources,
            fields,
        } = *joining;
        let settings =
            LoaderSettings::from_texts(settings.iter().map(|(n, v)| (n.as_str(), v.as_str())))
                .map_err(|e| e.to_string())?;
        if !sources.is_empty() && job.is_some() {
            return Err(
                "a mixture of datasets with a cache partitioned across nodes is not \
                        supported: give one dataset"
                    .into(),
            );
        }
        let fields = fields
            .map(|sent| {
                let fields = self
                    .fields
                    .make(&sent.digest, &sent.text, &sent.tokenizers)?;
                Ok::<_, String>((fields, &sent.digest))
            })
            .transpose()?;
        // The agent prepares for every job of the node: all the cores it may use, unless
        // a job counted them. It balances a job's ranks only as the job says they are,
        // never by the launcher's variables it inherited from the job that started it
        // (it is not one of a job's ranks).
        let balanced = settings.balances_ranks();
        let columns = settings.columns.clone();
        let mut builder = LoaderBuilder::with_settings(location, settings);
        builder
            .fields(fields.as_ref().map(|(f, _)| Fields::clone(f)))
            .mixture(sources.to_vec());
        let settings = builder.settings_mut();
        settings.balance_ranks = Some(false);
        if settings.threads == Threads::Auto {
            settings.threads = Threads::Count(nostall::loader::usable_cores());
        }
        builder.arena(Arena::Shared);
        // The job's data, from its server, as the job: never with the settings of the
        // environment the agent inherited from whichever job started it.
        builder.storage_environment(storage.to_vec());
        // Where and as whom, in the words of the group key (a digest: computed once).
        let remote = sources
            .iter()
            .map(|(l, _)| l.as_str())
            .chain([location])
            .find(|l| l.starts_with("s3://"))
            .unwrap_or(location);
        let reads_from = stream::storage_of(remote, storage);
        let node = job
            .map(|job| {
                let node = self
                    .nodes
                    .join(&builder, location, &reads_from.key(), job)?;
                node.node
                    .configure_rank(&mut builder, job.local_rank as usize);
                Ok::<_, String>(node)
            })
            .transpose()?;
        // A partitioned cache's ranks are the node's; any other job's, as it says.
        let ranks = node
            .as_ref()
            .zip(job)
            .map(|(node, job)| LocalRanks {
                job: nostall::rng::digest_text(&node.key),
                local_rank: job.local_rank as usize,
                local_world: job.ranks_per_node as usize,
            })
            .or(ranks)
            .filter(|ranks| ranks.local_world >= 2);
        if let (true, Some(ranks)) = (balanced, ranks) {
            builder.settings_mut().balance_ranks = Some(true);
            builder.local_ranks(Some(ranks));
        }
        let config = builder.config().map_err(|e| e.to_string())?;
        if config.plan.batch_size > MAX_BATCH {
            return Err(format!(
                "batch_size={} is more than the {MAX_BATCH} samples a shared batch may hold",
                config.plan.batch_size
            ));
        }
        // A mixture's datasets with their weights (`None`: by size), or the one dataset.
        let datasets = match sources {
            [] => location.to_string(),
            sources => {
                let each: Vec<String> = sources
                    .iter()
                    .map(|(l, w)| match w {
                        Some(w) => format!("{l} (weight {w})"),
                        None => format!("{l} (weight by size)"),
                    })
                    .collect();
                each.join(" + ")
            }
        };
        let parts = stream::Parts {
            datasets: &datasets,
            columns: &columns,
            storage: &reads_from,
            fields: fields.as_ref().map(|(_, digest)| *digest),
            node: node
                .as_ref()
                .map(|n| (n.described.as_str(), n.key.as_str())),
        };
        // What the job asks for, were its batches of `batch_size` samples.
        let asked_with = |batch_size: usize| {
            let mut config = config.clone();
            config.plan.batch_size = batch_size;
            parts.asked(&config)
        };
        let asked = asked_with(config.plan.batch_size);
        // The group the job's loader makes over a group's dataset (the order only the
        // dataset settles: Parquet's row groups kept open as its memory allows).
        let resolve = |catalog: &Catalog| {
            let resolved = builder.resolved(catalog).map_err(|e| e.to_string())?;
            Ok::<_, String>(asked.resolved(&resolved))
        };
        let named = match group_name {
            "" => None,
            // The ranks of one job read different streams: one group per rank.
            name if config.plan.world > 1 => Some(format!("{name}.rank{}", config.plan.rank)),
            name => Some(name.to_string()),
        };
        // A group's dataset is opened without the agent's locks (slow storage holds up no
        // other job's attach or leave), by the one job that makes the group: the jobs
        // of a search start together, and the others wait for that opening instead of
        // each reading the index again. By stream, the group's name comes only once the
        // dataset is open (its identity): the jobs wait on the stream they ask for.
        let key = named.clone().unwrap_or_else(|| stream::opening_key(&asked));
        let mut opening = self.opening();
        loop {
            // The group of that name, or one of the job's stream: its dataset is open, to
            // resolve the job's order over.
            let made = {
                let groups = self.groups();
                let entry = match &named {
                    Some(name) => groups.get(name),
                    None => groups.values().find(|e| e.asked == asked.digest),
                };
                entry.map(|e| {
                    let batch = e.group.loader().config().plan.batch_size;
                    (e.catalog.clone(), e.asked, batch, e.stream.clone())
                })
            };
            if let Some((catalog, group_asked, group_batch, group_stream)) = made {
                let name = named.as_deref().unwrap_or_default();
                if group_asked != asked.digest && asked_with(group_batch).digest == group_asked {
                    // The batch is the unit staged: every member takes the same ones.
                    return Err(format!(
                        "group {name:?} reads batches of {group_batch} samples; this job \
                         asks for batch_size={}. Jobs of a group use one batch size: give \
                         batch_size={group_batch}, or share=\"auto\" (a group for each \
                         batch size)",
                        config.plan.batch_size
                    ));
                }
                if group_asked != asked.digest {
                    return Err(format!(
                        "group {name:?} reads another stream: {group_stream}; this job asks \
                         for {}. Jobs of a group read the same dataset with the same \
                         pipeline, seed, batch size and ranks (and, for a partitioned cache, \
                         the same job)",
                        asked.words
                    ));
                }
                let resolved = resolve(&catalog)?;
                let name = named
                    .clone()
                    .unwrap_or_else(|| stream::auto_name(&resolved.identity));
                if let Some(attached) = self.attach_to(&name, &resolved, member) {
                    return attached;
                }
            }
            if opening.insert(key.clone()) {
                break;
            }
            #[cfg(test)]
            if let Some(hook) = &self.open_hook {
                hook(&key, OpenStep::Waits);
            }
            opening = self.opened.wait(opening).unwrap_or_else(|e| e.into_inner());
        }
        drop(opening);
        // Until the group is installed, or the opening failed: the jobs waiting try again.
        let _opening = Opening {
            agent: self,
            name: key.clone(),
        };
        #[cfg(test)]
        if let Some(hook) = &self.open_hook {
            hook(&key, OpenStep::Opens);
        }
        let (catalog, source) = match &node {
            Some(node) => {
                let source: Arc<dyn Source> = node.node.source();
                (node.catalog.clone(), source)
            }
            None => {
                // Opening reads the dataset's index: the group's other jobs wait for
                // it, no one else.
                let dataset = builder.open_dataset().map_err(|e| e.to_string())?;
                (dataset.catalog, dataset.source)
            }
        };
        let resolved = resolve(&catalog)?;
        let name = named.unwrap_or_else(|| stream::auto_name(&resolved.identity));
        // A group of this name made over another opening of the dataset (it changed
        // between the two): the same order is the same group.
        if let Some(attached) = self.attach_to(&name, &resolved, member) {
            return attached;
        }
        let loader = builder
            .build(catalog.clone(), source.clone())
            .map_err(|e| e.to_string())?;
        // The rank's record in its table is the group's loader's: a private stream made
        // later from this builder must not write (or, leaving, clear) it.
        builder.settings_mut().balance_ranks = Some(false);
        let batch_bytes = (config.plan.batch_size * config.pipeline.sample_bytes()).max(1) as u64;
        let window = (self.config.staging / batch_bytes).clamp(2, 64) as usize;
        let group = Group::start(
            Arc::new(loader),
            Limits {
                window,
                lease: self.config.lease,
                clock: self.clock.clone(),
                epochs_on_demand: node.is_some(),
            },
            node.as_ref()
                .zip(job)
                .map(|(node, job)| node.at_finish(job.local_rank as usize)),
        );
        group.attach(member);
        // Only the job marked as opening its stream (or name) installs a group of it.
        self.groups().insert(
            name.clone(),
            Entry {
                group,
                stream: resolved.words,
                asked: asked.digest,
                identity: resolved.identity,
                builder,
                catalog,
                source,
                node,
                _fields: fields.map(|(fields, _)| fields),
                attached: 1,
            },
        );
        Ok(name)
    }

    fn part(&self, name: &str, member: u64) {
        let mut groups = self.groups();
        let Some(entry) = groups.get_mut(name) else {
            return;
        };
        entry.group.leave(member);
        entry.attached -= 1;
        if entry.attached == 0 {
            let entry = groups.remove(name).expect("present");
            drop(groups);
            entry.group.stop();
        }
    }

    fn entry<T>(&self, name: &str, f: impl FnOnce(&Entry) -> T) -> Option<T> {
        let groups = self.groups();
        groups.get(name).map(f)
    }
}

/// The refusal of a job whose loader deals another order than group `name`'s, over the
/// same dataset with settings that read alike (Parquet's row groups kept open as the memory
/// settings allow).
fn another_order(name: &str, group: &str, job: &str) -> String {
    format!(
        "group {name:?} deals its samples in another order than this job's loader: the \
         group's is {group}; this job's would be {job}. A job in it would train on the \
         group's order while its own state described its own: give this job the group's \
         memory settings (group_memory, memory, prefetch, readahead), or share=\"auto\" (a \
         group for each order)"
    )
}

/// A job's opening of a group's dataset, ended when dropped (the group installed, the
/// opening failed, or serving the job panicked): the jobs waiting for it try again.
struct Opening<'a> {
    agent: &'a Agent,
    name: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.agent.opening().remove(&self.name);
        self.agent.opened.notify_all();
    }
}

/// A test's hook into the making of a group, called with the group's name as a job is
/// about to open its dataset, or to wait for another job's opening of it (the agent's
/// `opening` lock held then: once told, the test knows the job waits).
#[cfg(test)]
pub(crate) type OpenHook = Box<dyn Fn(&str, OpenStep) + Send + Sync>;

/// Where [`OpenHook`] is called.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenStep {
    /// The job opens the group's dataset (no lock held).
    Opens,
    /// The job waits for another's opening.
    Waits,
}

/// A job's place in a group, given back when dropped: also when serving it panicked.
struct Membership<'a> {
    agent: &'a Agent,
    name: &'a str,
    member: u64,
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        self.agent.part(self.name, self.member);
    }
}

/// What a job's hello asks for.
#[derive(Clone, Copy)]
struct Joining<'a> {
    location: &'a str,
    settings: &'a [(String, String)],
    group_name: &'a str,
    /// For a rank of a partitioned cache: its node.
    job: Option<&'a JobNode>,
    /// Its place among its job's local ranks, as it says.
    ranks: Option<LocalRanks>,
    /// Its object-storage settings.
    storage: &'a [(String, String)],
    /// The datasets of its mixture, with their weights; empty: the one at `location`.
    sources: &'a [(String, Option<f64>)],
    /// Its fields, if it reads records.
    fields: Option<&'a SentFields>,
}

/// A job's fields as it sent them: their portable text, their tokenizers, and a digest of
/// both ([`stream::fields_digest`]).
struct SentFields {
    text: String,
    tokenizers: Vec<Arc<[u8]>>,
    digest: Digest,
}
