//! The trainer's side: a run of batches made in parts by preparers (the trainer's own
//! loader and remote ones), delivered in plan order, each exactly once.
//!
//! A run is cut into parts of a fixed number of batches, numbered from the run's start.
//! Each preparer's thread takes the next part not yet given (within a window of the part
//! the consumer waits on), asks for it, and files each batch as it arrives; the consumer
//! takes batches in plan order from what was filed. A part whose preparer is lost is
//! given again; a part the consumer has waited on for too long is also given to an idle
//! preparer (a hedge). Whichever copy of a batch arrives first is kept and the other
//! dropped by its number, so a part made twice is delivered once. Parts are fixed, so
//! every batch is the same whoever made it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nostall::clock::Clock;
use nostall::loader::{Batch, Checkpoint, Next};
use nostall::prep::ByteValues;
use nostall::{EpochStats, Error, Loader, Position, SampleError};
use nostall_peer::Secret;
use rustls::{ClientConnection, StreamOwned};

use crate::busy::Busy;
use crate::coding;
use crate::describe::{describe, differs};
use crate::wire::{self, Failure, Part, Reply, Skip};
use crate::{RemoteError, Socket};

/// How a trainer's client shares out a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteOptions {
    /// Batches in a part: what one request asks of a preparer.
    pub part_batches: u64,
    /// Parts asked of one preparer at once (the next is queued on its connection while it
    /// makes the first, so it never waits for a request).
    pub parts_per_preparer: usize,
    /// Whether the trainer's own loader prepares parts too (first, on its own cores).
    pub local: bool,
    /// How long a preparer may stay silent in the middle of a part before it is dropped
    /// and its parts given to others.
    pub stall_limit: Duration,
    /// How long connecting and proving the secret may take.
    pub connect_limit: Duration,
    /// A part the consumer waits on is given to an idle preparer too once it has been out
    /// this many times as long as a part takes on average.
    pub hedge_factor: f64,
    /// The clock the decisions on elapsed time read (a part late enough to hedge, a run
    /// stranded for `stall_limit`): the real one, or one a test moves.
    pub clock: Clock,
    /// Whether the remote preparers start the next epoch's run once every part of this
    /// one is given out, so that an epoch's first batches are not waited for. The
    /// trainer's own loader joins that run when it is taken ([`Remote::run_after`]), so
    /// it makes fewer of the epoch's parts ([`RemoteOptions::for_loader`] says when that
    /// pays).
    pub ahead: bool,
    /// The share of the trainer process's CPU budget (its cgroup quota, else its cores)
    /// above which its own loader takes no new part while a remote preparer is connected:
    /// receiving their batches comes first. Read over about the last second; 1 or more:
    /// never held back.
    pub local_cpu: f64,
}

impl RemoteOptions {
    /// The options that suit `loader`'s batches. Where they travel as bytes the trainer
    /// turns into float32 values (an image recipe that normalises: [`coding`]), the actors
    /// start each next epoch ahead, so that the trainer's cores, busier receiving such
    /// batches, do not make each epoch's first parts alone. Batches that travel as they
    /// are (uint8) cost the trainer little to receive, and its loader joins each epoch at
    /// its start, as [`RemoteOptions::default`] does. Either way the trainer's loader
    /// takes every part it can: once receiving got cheap, holding it to 90% of the
    /// process's CPU lost batches on both recipes in every side-by-side run
    /// (docs/benchmarks.md, "Remote prep: the trainer's loader no longer held back").
    pub fn for_loader(loader: &Loader) -> RemoteOptions {
        RemoteOptions {
            ahead: coding::of(loader).is_some(),
            ..RemoteOptions::default()
        }
    }
}

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            part_batches: 4,
            parts_per_preparer: 2,
            local: true,
            stall_limit: Duration::from_secs(60),
            connect_limit: Duration::from_secs(10),
            hedge_factor: 3.0,
            clock: Clock::real(),
            ahead: false,
            local_cpu: 1.0,
        }
    }
}

/// One preparer's figures.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct PreparerStats {
    /// Its address, or `"local"` for the trainer's own loader.
    pub name: String,
    /// Batches it made that were delivered (not a late copy).
    pub batches: u64,
    /// Copies it made of batches another made first.
    pub duplicates: u64,
    /// Bytes of batch data it sent (as sent: float32 samples coded as their bytes where
    /// the pipeline allows).
    pub bytes: u64,
    /// Parts it made to their end.
    pub parts: u64,
    /// Time it spent on those parts, each from when it was asked for (or the one before it
    /// ended) to its end: its rate is `batches` over it.
    pub busy: Duration,
    /// Time the consumer waited for the batches it delivered: where the training loop's
    /// stalls came from.
    pub waited: Duration,
    /// Times it was lost (a broken connection, a stall) or could not be reached.
    pub failures: u64,
    /// Whether it is connected (always, for the local one).
    pub up: bool,
}

/// A trainer's client of preparers: the loader whose batches they make (this process's,
/// with the same dataset and settings), the job's secret and their addresses.
///
/// Cheap to clone: clones share the addresses and figures.
#[derive(Clone)]
pub struct Remote {
    inner: Arc<Inner>,
}

struct Inner {
    loader: Arc<Loader>,
    tls: Arc<rustls::ClientConfig>,
    options: RemoteOptions,
    description: Vec<(String, u64)>,
    /// How the preparers code its samples, where they can be ([`coding`]).
    coding: Option<ByteValues>,
    /// Whether the preparers make its samples unconverted ([`coding::unconverted`]), so
    /// that each is finished here once converted ([`Loader::finish_converted`]).
    finishes: bool,
    addresses: Mutex<Vec<String>>,
    stats: Mutex<BTreeMap<String, PreparerStats>>,
    /// Batches delivered and the consumer's waits for them, since the client was made.
    delivered: Mutex<Delivered>,
    /// Runs taken by [`Remote::run_after`] as the run before started them.
    taken_ahead: AtomicU64,
    /// The process's CPU use against its budget ([`RemoteOptions::local_cpu`]).
    busy: Busy,
}

/// What a client's consumer got, across runs: what a scaling rule reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Delivered {
    /// Batches delivered.
    pub batches: u64,
    /// Samples delivered.
    pub samples: u64,
    /// Time the consumer waited for them.
    pub wait: Duration,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("addresses", &self.inner.addresses)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// A client for `loader` of the preparers at `addresses` (`host:port`), holding
    /// `secret`.
    ///
    /// # Errors
    ///
    /// [`RemoteError::Config`] when the job's identity cannot be made, or the options
    /// ask for empty parts or no parts at once.
    pub fn new(
        loader: Arc<Loader>,
        secret: &Secret,
        addresses: Vec<String>,
        options: RemoteOptions,
    ) -> Result<Remote, RemoteError> {
        if options.part_batches == 0 || options.parts_per_preparer == 0 {
            return Err(RemoteError::Config(
                "parts of at least one batch, and at least one part per preparer at once".into(),
            ));
        }
        if addresses.is_empty() && !options.local {
            return Err(RemoteError::Config(
                "no preparer: give addresses, or let the trainer's own loader prepare".into(),
            ));
        }
        let tls = secret
            .identity()
            .map_err(|e| RemoteError::Config(e.to_string()))?
            .client;
        let description = describe(&loader);
        let coding = coding::of(&loader);
        let finishes = coding::unconverted(&loader).is_some();
        let busy = Busy::new(options.clock.clone());
        let inner = Inner {
            loader,
            tls,
            options,
            description,
            coding,
            finishes,
            addresses: Mutex::new(addresses),
            stats: Mutex::default(),
            delivered: Mutex::default(),
            taken_ahead: AtomicU64::new(0),
            busy,
        };
        Ok(Remote {
            inner: Arc::new(inner),
        })
    }

    /// Replaces the preparers' addresses: a run under way starts on the new ones at its
    /// next batch and stops asking the ones no longer given.
    pub fn set_addresses(&self, addresses: Vec<String>) {
        *lock(&self.inner.addresses) = addresses;
    }

    /// The preparers' addresses.
    pub fn addresses(&self) -> Vec<String> {
        self.inner.addresses()
    }

    /// Connects to every preparer once and checks that it holds the job's secret and
    /// prepares for this loader: what to call before the first epoch, so that a wrong
    /// address, secret or setting is an error then rather than a slow epoch.
    ///
    /// # Errors
    ///
    /// [`RemoteError::Unreachable`] naming the first preparer that cannot be reached,
    /// [`RemoteError::Refused`] the first that does not prove the secret (or refuses
    /// this one's), [`RemoteError::Config`] the first that prepares for other settings.
    pub fn check(&self) -> Result<(), RemoteError> {
        for address in self.addresses() {
            let stream = self.inner.connect(&address)?;
            let _ = stream.sock.tcp.shutdown(Shutdown::Both);
        }
        Ok(())
    }

    /// How many runs [`Remote::run_after`] took as the run before had started them.
    pub fn runs_taken_ahead(&self) -> u64 {
        self.inner.taken_ahead.load(Ordering::Relaxed)
    }

    /// What the consumer got so far, across runs.
    pub fn delivered(&self) -> Delivered {
        *lock(&self.inner.delivered)
    }

    /// Each preparer's figures, the local one first.
    pub fn stats(&self) -> Vec<PreparerStats> {
        let stats = lock(&self.inner.stats);
        let mut all: Vec<PreparerStats> = stats.values().cloned().collect();
        all.sort_by_key(|s| s.name != LOCAL);
        all
    }

    /// Starts the run that `start` starts (a state [`Loader::resolve`] returned).
    ///
    /// # Errors
    ///
    /// As [`Loader::batches_left`] when `start` is not this loader's.
    pub fn run(&self, start: Checkpoint) -> Result<RemoteRun, Error> {
        self.start_run(start, self.inner.options.local)
    }

    /// Starts the run that `start` starts after `previous`: the run `previous` started
    /// ahead when it starts there (see [`RemoteOptions::ahead`]), with the trainer's own
    /// loader joining it now, else a new one. `previous` is stopped either way.
    ///
    /// # Errors
    ///
    /// As [`Remote::run`].
    pub fn run_after(
        &self,
        previous: Option<RemoteRun>,
        start: Checkpoint,
    ) -> Result<RemoteRun, Error> {
        let ahead = previous.and_then(|mut run| run.ahead.take());
        match ahead {
            Some(mut run) if run.start == start => {
                run.local = self.inner.options.local;
                if run.local {
                    lock(&run.schedule.state).window +=
                        self.inner.options.parts_per_preparer as u64;
                }
                run.started = self.inner.options.clock.now();
                *lock(&run.schedule.after) = None;
                run.follow_addresses();
                self.inner.taken_ahead.fetch_add(1, Ordering::Relaxed);
                Ok(*run)
            }
            _ => self.run(start),
        }
    }

    /// A run from `start` with the trainer's own loader among its preparers or not.
    fn start_run(&self, start: Checkpoint, local: bool) -> Result<RemoteRun, Error> {
        let inner = &self.inner;
        let batches = inner.loader.batches_left(&start)?;
        let parts = batches.div_ceil(inner.options.part_batches);
        let preparers = inner.addresses().len() + usize::from(local);
        let window = (preparers * inner.options.parts_per_preparer) as u64;
        let schedule = Arc::new(Schedule {
            state: Mutex::new(State {
                parts,
                next_new: 0,
                again: BTreeSet::new(),
                open: BTreeMap::new(),
                delivering: 0,
                taken: 0,
                window: window.max(1),
                fatal: None,
                part_seconds: (0.0, 0),
                wanted: BTreeSet::new(),
                sockets: BTreeMap::new(),
                lost: BTreeMap::new(),
                clock: inner.options.clock.clone(),
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            after: Mutex::new(None),
        });
        let mut run = RemoteRun {
            remote: self.inner.clone(),
            start,
            schedule,
            threads: Vec::new(),
            running: BTreeSet::new(),
            position: Position::start_of(0),
            delivered: 0,
            skipped: BTreeMap::new(),
            skipped_samples: Vec::new(),
            started: inner.options.clock.now(),
            wait: Duration::ZERO,
            max_wait: Duration::ZERO,
            first_wait: None,
            local,
            ahead: None,
            tried_ahead: false,
            was_ahead: false,
        };
        run.position = run.start.position;
        run.follow_addresses();
        Ok(run)
    }
}

impl Inner {
    fn waited(&self, wait: Duration, samples: usize) {
        let mut delivered = lock(&self.delivered);
        delivered.batches += 1;
        delivered.samples += samples as u64;
        delivered.wait += wait;
    }

    fn addresses(&self) -> Vec<String> {
        lock(&self.addresses).clone()
    }

    /// A TLS connection to `address` that has proved the secret both ways and whose
    /// preparer describes this loader.
    fn connect(&self, address: &str) -> Result<StreamOwned<ClientConnection, Socket>, RemoteError> {
        let unreachable = |e: io::Error| RemoteError::Unreachable {
            address: address.to_owned(),
            message: e.to_string(),
        };
        let limit = self.options.connect_limit;
        let addr = address
            .to_socket_addrs()
            .map_err(unreachable)?
            .next()
            .ok_or_else(|| unreachable(io::Error::other("the name resolves to no address")))?;
        let sock = TcpStream::connect_timeout(&addr, limit).map_err(unreachable)?;
        sock.set_nodelay(true).map_err(unreachable)?;
        sock.set_read_timeout(Some(limit)).map_err(unreachable)?;
        sock.set_write_timeout(Some(limit)).map_err(unreachable)?;
        let conn = ClientConnection::new(
            self.tls.clone(),
            nostall_peer::auth::Identity::server_name(),
        )
        .map_err(|e| unreachable(io::Error::other(e)))?;
        let mut tls = StreamOwned::new(conn, Socket::new(sock).map_err(unreachable)?);
        let refused = |e: io::Error| RemoteError::Refused {
            address: address.to_owned(),
            message: e.to_string(),
        };
        nostall_peer::auth::handshake(&mut tls).map_err(refused)?;
        wire::write_hello(&mut tls).map_err(refused)?;
        let theirs = wire::read_welcome(&mut tls).map_err(refused)?;
        if let Some(difference) = differs(&self.description, &theirs) {
            return Err(RemoteError::Config(format!(
                "the preparer at {address} prepares for another loader: {difference}; \
                 give it the same dataset and settings (and this rank)"
            )));
        }
        Ok(tls)
    }

    fn count(&self, name: &str, change: impl FnOnce(&mut PreparerStats)) {
        let mut stats = lock(&self.stats);
        let entry = stats
            .entry(name.to_owned())
            .or_insert_with(|| PreparerStats {
                name: name.to_owned(),
                ..PreparerStats::default()
            });
        change(entry);
    }
}

/// The name of the trainer's own loader among the preparers.
const LOCAL: &str = "local";

/// A run's shared state: the parts and what arrived of them.
struct Schedule {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    /// While this run is one started ahead and not yet taken: the run before it, whose
    /// parts a preparer makes first (both on one preparer at once would slow the parts
    /// the consumer waits for).
    after: Mutex<Option<Arc<Schedule>>>,
}

impl Schedule {
    /// Whether `name` still makes a part of this run.
    fn holds(&self, name: &str) -> bool {
        let st = lock(&self.state);
        st.open.values().any(|open| {
            open.ended.is_none() && open.failed.is_none() && open.holders.iter().any(|h| h == name)
        })
    }
}

struct State {
    /// Parts in the run.
    parts: u64,
    /// The lowest part never given.
    next_new: u64,
    /// Parts to give again (their preparer was lost).
    again: BTreeSet<u64>,
    /// Parts given and not yet delivered to their end.
    open: BTreeMap<u64, Open>,
    /// The part the consumer takes from, and how many of its batches it took.
    delivering: u64,
    taken: u64,
    /// How many parts may be out past the one delivered.
    window: u64,
    /// What stops the run (the user's to fix, or a failed sample under the error policy
    /// of a part being delivered is kept with its part instead).
    fatal: Option<Error>,
    /// Seconds spent on parts made to their end, and how many: the hedge's yardstick.
    part_seconds: (f64, u64),
    /// Preparers the run should have (the addresses last given, and local).
    wanted: BTreeSet<String>,
    /// Each remote preparer's socket, to cut a blocked read when the run stops.
    sockets: BTreeMap<String, TcpStream>,
    /// Remote preparers lost and not reached since: when they were lost, and why.
    lost: BTreeMap<String, (Instant, String)>,
    /// What `given`, `lost` and the parts' times are read on.
    clock: Clock,
}

/// A part given out.
struct Open {
    /// Batches arrived and not yet taken, by their number in the part, with the samples
    /// skipped before each.
    batches: BTreeMap<u64, (Batch, Vec<Skip>, String)>,
    /// How many batches the part made, and the samples skipped after its last, once
    /// known.
    ended: Option<(u64, Vec<Skip>)>,
    /// The sample that stopped the part under the error policy, after this many batches.
    failed: Option<(u64, SampleError)>,
    /// Who makes it, when it was first given, and whether it was hedged.
    holders: Vec<String>,
    given: Instant,
    hedged: bool,
}

impl State {
    /// The part `me` makes next, if any is due.
    fn give(&mut self, me: &str, hedge_factor: f64) -> Option<u64> {
        while let Some(part) = self.again.pop_first() {
            if let Some(open) = self.open.get_mut(&part) {
                open.holders.push(me.to_owned());
                return Some(part);
            }
        }
        if self.next_new < self.parts && self.next_new < self.delivering + self.window {
            let part = self.next_new;
            self.next_new += 1;
            self.open.insert(
                part,
                Open {
                    batches: BTreeMap::new(),
                    ended: None,
                    failed: None,
                    holders: vec![me.to_owned()],
                    given: self.clock.now(),
                    hedged: false,
                },
            );
            return Some(part);
        }
        // A hedge: the part the consumer waits on, out for much longer than parts take.
        let (seconds, made) = self.part_seconds;
        let typical = if made == 0 {
            None
        } else {
            Some(seconds / made as f64)
        };
        let open = self.open.get_mut(&self.delivering)?;
        let out = self.clock.since(open.given).as_secs_f64();
        let late = typical.is_some_and(|t| out > hedge_factor * t);
        if late && !open.hedged && open.ended.is_none() && !open.holders.iter().any(|h| h == me) {
            open.hedged = true;
            open.holders.push(me.to_owned());
            return Some(self.delivering);
        }
        None
    }

    /// `me` no longer makes `part`: given again when no one else does.
    fn drop_holder(&mut self, part: u64, me: &str) {
        if let Some(open) = self.open.get_mut(&part) {
            open.holders.retain(|h| h != me);
            if open.holders.is_empty() && open.ended.is_none() && open.failed.is_none() {
                self.again.insert(part);
            }
        }
    }

    /// Why the run cannot go on when every preparer it has is remote and none has been
    /// reached for `limit`: it would wait for ever.
    fn stranded(&self, local: bool, limit: Duration) -> Option<Error> {
        if local || self.wanted.is_empty() {
            return None;
        }
        let mut lost = Vec::with_capacity(self.wanted.len());
        for name in &self.wanted {
            let (since, why) = self.lost.get(name)?;
            if self.clock.since(*since) < limit {
                return None;
            }
            lost.push(format!("{name}: {why}"));
        }
        Some(Error::Storage {
            location: "remote preparers".into(),
            message: format!(
                "none of the {} preparers was reached for {:.0} s ({}); are the actors \
                 alive and their nodes reachable from here?",
                lost.len(),
                limit.as_secs_f64(),
                lost.join("; ")
            ),
        })
    }

    /// Whether batch `index` of `part` is still wanted (not taken, not arrived).
    fn wants(&self, part: u64, index: u64) -> bool {
        if part < self.delivering || (part == self.delivering && index < self.taken) {
            return false;
        }
        self.open
            .get(&part)
            .is_some_and(|open| !open.batches.contains_key(&index))
    }
}

/// A run in progress: an iterator of batches in plan order.
///
/// Dropping it stops its preparers' threads (a remote preparer finishes the part it
/// makes, for nobody).
pub struct RemoteRun {
    remote: Arc<Inner>,
    start: Checkpoint,
    schedule: Arc<Schedule>,
    threads: Vec<JoinHandle<()>>,
    /// The preparers a thread was started for.
    running: BTreeSet<String>,
    position: Position,
    delivered: u64,
    skipped: BTreeMap<&'static str, u64>,
    skipped_samples: Vec<SampleError>,
    started: Instant,
    wait: Duration,
    max_wait: Duration,
    first_wait: Option<Duration>,
    /// Whether the trainer's own loader is among its preparers.
    local: bool,
    /// The next epoch's run, started by the remote preparers once every part of this one
    /// was given out.
    ahead: Option<Box<RemoteRun>>,
    /// Whether starting it was tried (once: a run that cannot start is not tried again at
    /// every batch).
    tried_ahead: bool,
    /// Whether it was started ahead, during the run before it.
    was_ahead: bool,
}

impl std::fmt::Debug for RemoteRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRun")
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

/// Skipped samples kept with their causes, as an epoch keeps them.
const KEPT_SKIPS: usize = 1000;

impl RemoteRun {
    /// Where the run stands: save it to resume exactly here.
    pub fn position(&self) -> Position {
        self.position
    }

    /// The run's skips by cause, with those before its start.
    pub fn skipped_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = self.start.skipped.clone();
        for (&kind, &n) in &self.skipped {
            *counts.entry(kind).or_default() += n;
        }
        counts
    }

    /// The first samples this run skipped, with their causes.
    pub fn skipped(&self) -> &[SampleError] {
        &self.skipped_samples
    }

    /// The state to resume exactly here: the run's start with this position and skips.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            position: self.position,
            skipped: self.skipped_counts(),
            ..self.start.clone()
        }
    }

    /// The run's figures as a local epoch's: batches and samples delivered, skips, time
    /// and waits (its preparers' own are in [`Remote::stats`]).
    pub fn stats(&self) -> EpochStats {
        EpochStats {
            epoch: self.start.position.epoch,
            batches: self.delivered_batches(),
            samples: self.delivered,
            skipped: self.skipped_counts(),
            wall: self.remote.options.clock.since(self.started),
            wait: self.wait,
            max_wait: self.max_wait,
            first_wait: self.first_wait.unwrap_or_default(),
            ..EpochStats::default()
        }
    }

    /// The next batch, waiting at most `limit` (`Next::Pending` when it did not come).
    pub fn next_within(&mut self, limit: Duration) -> Next {
        self.follow_addresses();
        self.start_ahead();
        let deadline = Instant::now() + limit;
        let schedule = self.schedule.clone();
        let mut st = lock(&schedule.state);
        let before = Instant::now();
        loop {
            let stranded = st.stranded(self.local, self.remote.options.stall_limit);
            if let Some(error) = st.fatal.take().or(stranded) {
                schedule.stop.store(true, Ordering::Release);
                return Next::Batch(Err(error));
            }
            if st.delivering >= st.parts {
                return Next::End;
            }
            let (part, taken) = (st.delivering, st.taken);
            // Not open yet: no preparer has taken the part so far.
            if let Some(open) = st.open.get_mut(&part) {
                if let Some((mut batch, skips, by)) = open.batches.remove(&taken) {
                    st.taken += 1;
                    drop(st);
                    self.count_skips(skips);
                    let waited = before.elapsed();
                    self.wait += waited;
                    self.max_wait = self.max_wait.max(waited);
                    self.first_wait.get_or_insert(waited);
                    self.remote.waited(waited, batch.len());
                    batch.renumber(self.start.position.batch + self.delivered_batches());
                    self.position = batch.position();
                    self.delivered += batch.len() as u64;
                    self.remote.count(&by, |s| {
                        s.batches += 1;
                        s.waited += waited;
                    });
                    schedule.changed.notify_all();
                    return Next::Batch(Ok(batch));
                }
                if let Some((at, error)) = &open.failed {
                    if *at == taken {
                        let error = error.clone();
                        schedule.stop.store(true, Ordering::Release);
                        return Next::Batch(Err(Error::Sample(error)));
                    }
                }
                if open.ended.as_ref().is_some_and(|(made, _)| *made <= taken) {
                    let (_, tail) = st
                        .open
                        .remove(&part)
                        .and_then(|open| open.ended)
                        .expect("ended above");
                    st.delivering += 1;
                    st.taken = 0;
                    self.count_skips(tail);
                    schedule.changed.notify_all();
                    continue;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Pending;
            }
            // Woken by every arrival; the bound only re-checks the hedge.
            let wait = (deadline - now).min(Duration::from_millis(100));
            st = schedule
                .changed
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn delivered_batches(&self) -> u64 {
        self.position.batch - self.start.position.batch
    }

    fn count_skips(&mut self, skips: Vec<Skip>) {
        for skip in skips {
            *self.skipped.entry(skip.kind).or_default() += 1;
            if self.skipped_samples.len() < KEPT_SKIPS {
                self.skipped_samples.push(skip.into_error());
            }
        }
    }

    /// Whether this run was started ahead, during the epoch before it, and taken by
    /// [`Remote::run_after`].
    pub fn started_ahead(&self) -> bool {
        self.was_ahead
    }

    /// Starts the next epoch's run on the remote preparers once every part of this one is
    /// given out: they would otherwise idle until the consumer asks for it.
    fn start_ahead(&mut self) {
        let options = &self.remote.options;
        if !options.ahead || self.tried_ahead || self.remote.addresses().is_empty() {
            return;
        }
        let given = {
            let st = lock(&self.schedule.state);
            st.next_new >= st.parts && st.again.is_empty() && st.fatal.is_none()
        };
        if !given {
            return;
        }
        self.tried_ahead = true;
        let next = Position::start_of(self.start.position.epoch.saturating_add(1));
        let remote = Remote {
            inner: self.remote.clone(),
        };
        // A run that cannot start here fails again, with its error, when it is asked for.
        self.ahead = self
            .remote
            .loader
            .run_from(next)
            .and_then(|start| remote.start_run(start, false))
            .ok()
            .map(|mut run| {
                run.was_ahead = true;
                *lock(&run.schedule.after) = Some(self.schedule.clone());
                Box::new(run)
            });
    }

    /// Starts threads for addresses given since, and lets go of those taken away.
    fn follow_addresses(&mut self) {
        let mut wanted: BTreeSet<String> = self.remote.addresses().into_iter().collect();
        if self.local {
            wanted.insert(LOCAL.to_owned());
        }
        let new: Vec<String> = wanted.difference(&self.running).cloned().collect();
        {
            let mut st = lock(&self.schedule.state);
            for gone in st.wanted.difference(&wanted) {
                if let Some(sock) = st.sockets.get(gone) {
                    let _ = sock.shutdown(Shutdown::Both);
                }
            }
            st.wanted = wanted;
        }
        for name in new {
            self.spawn(name);
        }
    }

    fn spawn(&mut self, name: String) {
        self.running.insert(name.clone());
        let schedule = self.schedule.clone();
        let start = self.start.clone();
        let remote = Worker {
            client: self.remote.clone(),
            name: name.clone(),
        };
        remote.count(|s| s.up = name == LOCAL);
        let thread = std::thread::Builder::new()
            .name(format!("nostall-remote-{name}"))
            .spawn(move || {
                if name == LOCAL {
                    remote.prepare_locally(&schedule, &start);
                } else {
                    remote.prepare_remotely(&schedule, &start);
                }
            })
            .expect("cannot start a thread");
        self.threads.push(thread);
    }
}

impl Iterator for RemoteRun {
    type Item = Result<Batch, Error>;

    fn next(&mut self) -> Option<Result<Batch, Error>> {
        loop {
            match self.next_within(Duration::from_secs(3600)) {
                Next::Batch(batch) => return Some(batch),
                Next::End => return None,
                Next::Pending => {}
            }
        }
    }
}

impl Drop for RemoteRun {
    fn drop(&mut self) {
        self.schedule.stop.store(true, Ordering::Release);
        {
            let st = lock(&self.schedule.state);
            for sock in st.sockets.values() {
                let _ = sock.shutdown(Shutdown::Both);
            }
        }
        self.schedule.changed.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What a preparer's thread needs of its client.
struct Worker {
    client: Arc<Inner>,
    name: String,
}

/// How long a lost preparer waits before it is tried again, at most.
const RETRY_LIMIT: Duration = Duration::from_secs(5);

impl Worker {
    fn count(&self, change: impl FnOnce(&mut PreparerStats)) {
        self.client.count(&self.name, change);
    }

    /// Whether this thread should go on: the run goes on and still wants it.
    fn wanted(&self, schedule: &Schedule, st: &State) -> bool {
        !schedule.stop.load(Ordering::Acquire)
            && st.fatal.is_none()
            && st.wanted.contains(&self.name)
    }

    /// Waits for a part to make; `None` when the run stops or no longer wants this one.
    fn next_part(&self, schedule: &Schedule, busy: bool) -> Option<Option<u64>> {
        let mut st = lock(&schedule.state);
        loop {
            if !self.wanted(schedule, &st) {
                return None;
            }
            // A run started ahead waits for this preparer's parts of the run before.
            let first = lock(&schedule.after)
                .as_ref()
                .is_some_and(|before| before.holds(&self.name));
            if !first {
                if let Some(part) = st.give(&self.name, self.client.options.hedge_factor) {
                    return Some(Some(part));
                }
            }
            if busy || st.delivering >= st.parts {
                return Some(None);
            }
            // The run before does not wake this one: look again soon while it holds us.
            let wait = if first { 10 } else { 100 };
            st = schedule
                .changed
                .wait_timeout(st, Duration::from_millis(wait))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn range(&self, part: u64) -> std::ops::Range<u64> {
        let first = part * self.client.options.part_batches;
        first..first + self.client.options.part_batches
    }

    /// Files batch `index` of `part`, unless a copy came first.
    fn file(&self, schedule: &Schedule, part: u64, index: u64, made: (Batch, Vec<Skip>)) {
        let mut st = lock(&schedule.state);
        if st.wants(part, index) {
            let open = st.open.get_mut(&part).expect("wanted parts are open");
            open.batches
                .insert(index, (made.0, made.1, self.name.clone()));
            drop(st);
            schedule.changed.notify_all();
        } else {
            drop(st);
            self.count(|s| s.duplicates += 1);
        }
    }

    /// Records the end of `part` after `made` batches.
    fn end(&self, schedule: &Schedule, part: u64, made: u64, tail: Vec<Skip>, took: Duration) {
        let mut st = lock(&schedule.state);
        let (seconds, count) = st.part_seconds;
        st.part_seconds = (seconds + took.as_secs_f64(), count + 1);
        if let Some(open) = st.open.get_mut(&part) {
            if open.ended.is_none() {
                open.ended = Some((made, tail));
            }
            open.holders.retain(|h| h != &self.name);
        }
        drop(st);
        self.count(|s| {
            s.parts += 1;
            s.busy += took;
        });
        schedule.changed.notify_all();
    }

    fn fail_sample(&self, schedule: &Schedule, part: u64, after: u64, error: SampleError) {
        let mut st = lock(&schedule.state);
        if let Some(open) = st.open.get_mut(&part) {
            open.failed.get_or_insert((after, error));
            open.holders.retain(|h| h != &self.name);
        }
        drop(st);
        schedule.changed.notify_all();
    }

    fn fatal(&self, schedule: &Schedule, error: Error) {
        let mut st = lock(&schedule.state);
        st.fatal.get_or_insert(error);
        drop(st);
        schedule.changed.notify_all();
    }

    /// Waits while the trainer's process uses more than [`RemoteOptions::local_cpu`] of
    /// its budget and a remote preparer is connected; at once when the run stops.
    fn wait_for_cpu(&self, schedule: &Schedule) {
        let limit = self.client.options.local_cpu;
        if limit >= 1.0 {
            return;
        }
        loop {
            let st = lock(&schedule.state);
            if !self.wanted(schedule, &st) || st.sockets.is_empty() {
                return;
            }
            if self.client.busy.share().is_none_or(|share| share <= limit) {
                return;
            }
            // Read again soon: the share moves as the window does, not on an event.
            drop(
                schedule
                    .changed
                    .wait_timeout(st, Duration::from_millis(20))
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
    }

    /// The trainer's own loader, making parts in this thread's turn with its threads,
    /// each once the process has CPU to spare ([`Worker::wait_for_cpu`]).
    fn prepare_locally(&self, schedule: &Schedule, start: &Checkpoint) {
        while let Some(Some(part)) = {
            self.wait_for_cpu(schedule);
            self.next_part(schedule, false)
        } {
            let clock = &self.client.options.clock;
            let began = clock.now();
            let mut batches = match self.client.loader.batches(start, self.range(part)) {
                Ok(batches) => batches,
                Err(e) => return self.fatal(schedule, e),
            };
            let (mut made, mut reported) = (0, 0);
            let mut stopped = false;
            while let Some(batch) = batches.next() {
                let skips = Skip::since(&batches, &mut reported);
                match batch {
                    Ok(batch) => {
                        let bytes = batch.data().len() as u64;
                        self.file(schedule, part, made, (batch, skips));
                        self.count(|s| s.bytes += bytes);
                        made += 1;
                    }
                    Err(Error::Sample(error)) => {
                        self.fail_sample(schedule, part, made, error);
                        stopped = true;
                        break;
                    }
                    Err(e) => return self.fatal(schedule, e),
                }
                if schedule.stop.load(Ordering::Acquire) {
                    return;
                }
            }
            if !stopped {
                let tail = Skip::since(&batches, &mut reported);
                self.end(schedule, part, made, tail, clock.since(began));
            }
        }
    }

    /// A remote preparer: connects (again, after a loss), asks for parts, files what
    /// arrives; a lost connection gives its parts back.
    fn prepare_remotely(&self, schedule: &Schedule, start: &Checkpoint) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if !self.wanted(schedule, &lock(&schedule.state)) {
                return;
            }
            let mut asked = VecDeque::new();
            let result = self.session(schedule, start, &mut asked);
            self.count(|s| s.up = false);
            let mut st = lock(&schedule.state);
            st.sockets.remove(&self.name);
            for part in asked {
                st.drop_holder(part, &self.name);
            }
            drop(st);
            schedule.changed.notify_all();
            match result {
                Ok(()) => return,
                Err(RemoteError::Config(message)) => {
                    return self.fatal(schedule, Error::Config(message))
                }
                Err(e) => {
                    if schedule.stop.load(Ordering::Acquire) {
                        return;
                    }
                    let mut st = lock(&schedule.state);
                    let since = match st.lost.get(&self.name) {
                        Some(&(since, _)) => since,
                        None => st.clock.now(),
                    };
                    st.lost.insert(self.name.clone(), (since, e.to_string()));
                    drop(st);
                    // Counted once it is recorded lost: a test waits for the count.
                    self.count(|s| s.failures += 1);
                    // Waits out the backoff, unless the run stops first.
                    let until = Instant::now() + backoff;
                    let mut st = lock(&schedule.state);
                    while self.wanted(schedule, &st) && Instant::now() < until {
                        let left = until.saturating_duration_since(Instant::now());
                        st = schedule
                            .changed
                            .wait_timeout(st, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    backoff = (backoff * 2).min(RETRY_LIMIT);
                }
            }
        }
    }

    fn session(
        &self,
        schedule: &Schedule,
        start: &Checkpoint,
        asked: &mut VecDeque<u64>,
    ) -> Result<(), RemoteError> {
        let mut tls = self.client.connect(&self.name)?;
        let lost = |e: io::Error| RemoteError::Unreachable {
            address: self.name.clone(),
            message: e.to_string(),
        };
        tls.sock
            .tcp
            .set_read_timeout(Some(self.client.options.stall_limit))
            .map_err(lost)?;
        {
            let mut st = lock(&schedule.state);
            if !self.wanted(schedule, &st) {
                return Ok(());
            }
            st.sockets
                .insert(self.name.clone(), tls.sock.tcp.try_clone().map_err(lost)?);
            st.lost.remove(&self.name);
        }
        self.count(|s| s.up = true);
        let clock = &self.client.options.clock;
        let mut began = clock.now();
        // Batches received of the part at the front of `asked`.
        let mut made = 0;
        loop {
            while asked.len() < self.client.options.parts_per_preparer {
                let Some(next) = self.next_part(schedule, !asked.is_empty()) else {
                    return Ok(());
                };
                let Some(part) = next else { break };
                let request = Part {
                    tag: part,
                    first: self.range(part).start,
                    count: self.client.options.part_batches,
                    run: start.clone(),
                };
                if asked.is_empty() {
                    began = clock.now();
                }
                asked.push_back(part);
                wire::write_part(&mut tls, &request).map_err(lost)?;
            }
            let Some(&part) = asked.front() else {
                return Ok(()); // nothing left to ask for
            };
            match wire::read_reply(&mut tls).map_err(lost)? {
                Reply::Batch {
                    tag,
                    header,
                    skips,
                    data,
                } => {
                    if tag != part {
                        return Err(lost(wire::invalid(format!(
                            "a batch of part {tag} while part {part} was due"
                        ))));
                    }
                    let samples = header.labels.len();
                    let sample_bytes = self.client.loader.config().pipeline.sample_bytes();
                    let coding = self.client.coding.as_ref();
                    let expected = match coding {
                        // Each sample's code is at least its mark.
                        Some(_) => 4 * samples as u64..=coding::bound(samples, sample_bytes),
                        None => {
                            let whole = (samples * sample_bytes) as u64;
                            whole..=whole
                        }
                    };
                    if !expected.contains(&data) {
                        return Err(lost(wire::invalid(format!(
                            "{data} bytes for a batch of {samples} samples \
                             ({expected:?} bytes)"
                        ))));
                    }
                    let mut from = (&mut tls).take(data);
                    let loader = &self.client.loader;
                    let (epoch, ids) = (start.position.epoch, header.ids.clone());
                    let batch = loader
                        .receive(header, Duration::ZERO, &self.name, |out| {
                            let Some(values) = coding else {
                                return from.read_exact(out);
                            };
                            for (slot, &id) in out.chunks_exact_mut(sample_bytes).zip(&ids) {
                                coding::decode(values, &mut from, slot)?;
                                if self.client.finishes {
                                    loader
                                        .finish_converted(slot, epoch, id)
                                        .map_err(io::Error::other)?;
                                }
                            }
                            match from.limit() {
                                0 => Ok(()),
                                left => Err(wire::invalid(format!(
                                    "{left} bytes past the batch's samples"
                                ))),
                            }
                        })
                        .map_err(|e| lost(io::Error::other(e.to_string())))?;
                    self.count(|s| s.bytes += data);
                    self.file(schedule, part, made, (batch, skips));
                    made += 1;
                }
                Reply::End { tag, skips } if tag == part => {
                    asked.pop_front();
                    self.end(schedule, part, made, skips, clock.since(began));
                    began = clock.now();
                    made = 0;
                }
                Reply::Failed { tag, failure } if tag == part => {
                    asked.pop_front();
                    match failure {
                        Failure::Sample(skip) => {
                            self.fail_sample(schedule, part, made, skip.into_error())
                        }
                        Failure::Config(message) => return Err(RemoteError::Config(message)),
                        Failure::Other(message) => {
                            return Err(RemoteError::Refused {
                                address: self.name.clone(),
                                message,
                            })
                        }
                    }
                    made = 0;
                }
                _ => return Err(lost(wire::invalid("a reply to a part not asked for"))),
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
