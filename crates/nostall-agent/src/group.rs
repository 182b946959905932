//! A group: the jobs reading one stream, each batch fetched and prepared once.
//!
//! One producer thread runs the group's loader and stages its batches in order; each
//! member has a cursor (the position it asked for last: it has consumed everything before
//! it). A staged batch is dropped from staging once every member's cursor is past it; a
//! member still holding it (a tensor in its process) keeps its buffer out of the pool
//! until it releases it. Staging holds at most `window` batches: the producer waits for
//! the slowest member, and a member that holds the group up without asking for anything
//! for a whole lease is detached, so the others go on (CoorDL waits forever there).
//!
//! Joining: a member joins where the group can serve it exactly: a position still
//! staged, the one the producer makes next, or the start of the epoch after it. Any other
//! position (a late job mid-epoch, a resume elsewhere) is served from a private stream
//! until the end of that epoch, the member joining the group at the next epoch's start;
//! until then it is owed that start, so the group waits for it there (at most a window
//! ahead), and jobs that start at different times fall into step at an epoch boundary.
//! A member alone in its group that jumps elsewhere moves the stream instead.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nostall::clock::Clock;
use nostall::{Batch, Loader, Position};

use crate::wire::Failure;

/// A position in the stream, ordered: (epoch, batches before it in the epoch).
pub(crate) type Key = (u64, u64);

fn key(p: Position) -> Key {
    (p.epoch, p.batch)
}

/// What a member is given.
#[derive(Debug, Clone)]
pub(crate) enum Served {
    /// The batch at the asked position.
    Batch(Arc<Batch>),
    /// The epoch ends at the asked position.
    End,
    /// The group's stream failed there (a sample error, storage).
    Failed(Failure),
    /// The group cannot serve this position: read it from a private stream, up to the
    /// end of its epoch.
    Private,
}

#[derive(Debug)]
struct Staged {
    key: Key,
    item: Served,
}

#[derive(Debug)]
struct Member {
    /// The next position it is owed.
    /// `None` for a member that joined before the stream started: owed nothing until
    /// it starts.
    cursor: Option<Key>,
    /// When it last asked for anything (its lease runs from here).
    seen: Instant,
}

#[derive(Debug, Default)]
struct State {
    staged: VecDeque<Staged>,
    members: HashMap<u64, Member>,
    /// Members detached by their lease, told on their next request.
    detached: Vec<u64>,
    /// The position the producer stages next.
    next: Option<Position>,
    /// Where the producer must start over (a lone member moved), and a count of such
    /// moves, so that a batch made before a move is never staged after it.
    restart: Option<Position>,
    generation: u64,
    /// The stream failed at `next`; nothing is made until a member moves it.
    halted: bool,
    /// The producer began the start of epoch 0 before any member asked, as a job's own
    /// loader starts on its first batches while the job gets ready: no member is owed
    /// them until one asks, and a first ask elsewhere moves the stream there.
    prestarted: bool,
    /// The furthest epoch a member has asked for.
    asked: Option<u64>,
    stopped: bool,
    /// Batches and bytes made by the producer, and deliveries from staging.
    produced: u64,
    delivered: u64,
}

/// Figures of a group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupStats {
    /// Members attached now.
    pub members: usize,
    /// Batches prepared for the group.
    pub produced: u64,
    /// Batches handed to members from staging (each member counts).
    pub delivered: u64,
    /// Members detached by their lease so far.
    pub detached: u64,
    /// Batches staged beyond the position asked about (how far the group is ahead of a
    /// member: its lag behind the group's producer).
    pub ahead: u64,
}

/// What a group does when it stops at an epoch's boundary, its job done: a rank of a
/// partitioned cache meets the job's other ranks before its node may leave.
pub(crate) type AtFinish = Box<dyn Fn() + Send + Sync>;

/// How long members may hold the group up, and how far it stages ahead.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) window: usize,
    pub(crate) lease: Duration,
    /// What leases are read by: the monotonic clock, or a test's manual one (a member's
    /// lease then runs out when the test moves it).
    pub(crate) clock: Clock,
    /// Make an epoch only once a member asks for it, not ahead: nobody reads the epoch
    /// after a job's last, and a rank of a partitioned cache must not read its peers
    /// for it once they may have left.
    pub(crate) epochs_on_demand: bool,
}

pub(crate) struct Group {
    loader: Arc<Loader>,
    limits: Limits,
    at_finish: Option<AtFinish>,
    state: Mutex<State>,
    changed: Condvar,
    detached_total: std::sync::atomic::AtomicU64,
    producer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// How often a waiting producer looks at the leases.
const LEASE_CHECK: Duration = Duration::from_millis(50);

/// How often a job waiting for a batch is told that the agent still works on it: four
/// times a lease, so that only an agent silent for a whole lease (stopped, or stuck) is
/// given up by its jobs.
pub(crate) fn pulse_interval(lease: Duration) -> Duration {
    (lease / 4).max(Duration::from_millis(1))
}

impl Group {
    /// A group producing from `loader` (whose arena should be shared memory), calling
    /// `at_finish` when it stops at an epoch's boundary.
    pub(crate) fn start(
        loader: Arc<Loader>,
        limits: Limits,
        at_finish: Option<AtFinish>,
    ) -> Arc<Group> {
        // A group whose epochs are made on demand waits for its first ask.
        let prestarted = !limits.epochs_on_demand;
        let group = Arc::new(Group {
            loader,
            limits,
            at_finish,
            state: Mutex::new(State {
                next: prestarted.then(|| Position::start_of(0)),
                prestarted,
                ..State::default()
            }),
            changed: Condvar::new(),
            detached_total: Default::default(),
            producer: Mutex::new(None),
        });
        let producing = group.clone();
        let handle = std::thread::Builder::new()
            .name("nostall-group".into())
            .spawn(move || producing.produce())
            .expect("spawn the group's producer");
        *group.producer.lock().expect("producer lock") = Some(handle);
        group
    }

    pub(crate) fn loader(&self) -> &Arc<Loader> {
        &self.loader
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The group's figures, `ahead` counted past `after`.
    pub(crate) fn stats(&self, after: Option<Position>) -> GroupStats {
        let s = self.lock();
        let ahead = after.map_or(0, |after| {
            s.staged
                .iter()
                .filter(|st| st.key >= key(after) && matches!(st.item, Served::Batch(_)))
                .count() as u64
        });
        GroupStats {
            ahead,
            members: s.members.len(),
            produced: s.produced,
            delivered: s.delivered,
            detached: self
                .detached_total
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Counts a member in, owed the first epoch start the group can still serve whole
    /// (or, before the stream starts, wherever it starts).
    pub(crate) fn attach(&self, member: u64) {
        let mut s = self.lock();
        let cursor = Self::entry_point(&s);
        s.members.insert(
            member,
            Member {
                cursor,
                seen: self.limits.clock.now(),
            },
        );
    }

    fn entry_point(s: &State) -> Option<Key> {
        if s.prestarted {
            return None;
        }
        if let Some(start) = s.staged.iter().find(|st| st.key.1 == 0) {
            return Some(start.key);
        }
        s.next.map(|n| {
            if n.batch == 0 {
                key(n)
            } else {
                (n.epoch.saturating_add(1), 0)
            }
        })
    }

    /// Waits until the group has made `n` batches or `bound` has passed (a test's bound on
    /// a failure), woken as each batch is staged; the batches it made.
    #[cfg(test)]
    pub(crate) fn made_within(&self, n: u64, bound: Duration) -> u64 {
        let s = self.lock();
        let (s, _) = self
            .changed
            .wait_timeout_while(s, bound, |s| s.produced < n)
            .unwrap_or_else(|e| e.into_inner());
        s.produced
    }

    /// The member left (its connection closed): it is owed nothing more.
    pub(crate) fn leave(&self, member: u64) {
        let mut s = self.lock();
        s.members.remove(&member);
        s.detached.retain(|m| *m != member);
        self.changed.notify_all();
    }

    /// Stops the producer (the group has no members and is being dropped). A group that
    /// stopped between two epochs (its job is done) then runs its `at_finish`: a rank of
    /// a partitioned cache meets the others at the end, as they finish theirs, so that
    /// the node's service it reads through stays up until they have read what they need
    /// of it.
    pub(crate) fn stop(&self) {
        let at_boundary = {
            let mut s = self.lock();
            s.stopped = true;
            s.next.is_some_and(|n| n.batch == 0 && !s.halted)
        };
        self.changed.notify_all();
        let handle = self.producer.lock().expect("producer lock").take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        if let (true, Some(finish)) = (at_boundary, &self.at_finish) {
            finish();
        }
    }

    /// The member is alive (it asked for something, maybe from its private stream).
    pub(crate) fn touch(&self, member: u64) {
        if let Some(m) = self.lock().members.get_mut(&member) {
            m.seen = self.limits.clock.now();
        }
    }

    /// Serves `member` the batch at `at`, waiting for the producer if it has not made
    /// it yet, and calling `pulse` (without the group's lock) every
    /// [`pulse_interval`] of the wait.
    pub(crate) fn next(&self, member: u64, at: Position, pulse: &mut dyn FnMut()) -> Served {
        let beat = pulse_interval(self.limits.lease);
        let mut pulsed = Instant::now();
        let wanted = key(at);
        let mut s = self.lock();
        s.asked = s.asked.max(Some(at.epoch));
        if let Some(i) = s.detached.iter().position(|m| *m == member) {
            // Detached by its lease: it continues on its own, and may join again at an
            // epoch's start like a newcomer.
            s.detached.swap_remove(i);
            s.members.insert(
                member,
                Member {
                    cursor: None,
                    seen: self.limits.clock.now(),
                },
            );
        }
        let Some(m) = s.members.get_mut(&member) else {
            return Served::Private;
        };
        m.seen = self.limits.clock.now();
        let cursor = m.cursor;
        if std::mem::take(&mut s.prestarted) {
            // The first ask. What was made ahead serves it only where it asks for exactly
            // that: the rest of an epoch nobody asked for is not worth waiting through.
            let made_ahead = s.staged.iter().any(|st| st.key == wanted)
                || s.next.is_some_and(|n| key(n) == wanted);
            if !made_ahead {
                s.staged.clear();
                s.restart = Some(at);
                s.next = Some(at);
                s.halted = false;
                s.generation = s.generation.wrapping_add(1);
            }
            // The members still getting ready are owed the stream from here.
            let now = self.limits.clock.now();
            for m in s.members.values_mut() {
                if m.cursor.is_none() {
                    m.cursor = Some(wanted);
                    m.seen = now;
                }
            }
        }
        if cursor != Some(wanted) {
            if !Self::joinable(&s, wanted) {
                let others_reading = s
                    .members
                    .iter()
                    .any(|(id, m)| *id != member && m.cursor.is_some());
                // Alone, the stream goes where its only reader goes; a stream that
                // failed serves nobody, so it starts over where the first member to move
                // on asks (the others follow it there). Members waiting for the stream
                // to start are owed its start, their lease running from now.
                if !others_reading || s.halted {
                    let now = self.limits.clock.now();
                    for m in s.members.values_mut() {
                        if m.cursor.is_none() {
                            m.cursor = Some(wanted);
                            m.seen = now;
                        }
                    }
                    s.staged.clear();
                    s.restart = Some(at);
                    s.next = Some(at);
                    s.halted = false;
                    s.generation = s.generation.wrapping_add(1);
                } else {
                    // Private for the rest of this epoch, owed the next one's start.
                    let m = s.members.get_mut(&member).expect("member present");
                    m.cursor = Some((at.epoch.saturating_add(1), 0));
                    self.changed.notify_all();
                    return Served::Private;
                }
            }
            s.members.get_mut(&member).expect("member present").cursor = Some(wanted);
        }
        self.changed.notify_all();
        loop {
            if s.detached.contains(&member) {
                s.detached.retain(|m| *m != member);
                return Served::Private;
            }
            if let Some(staged) = s.staged.iter().find(|st| st.key == wanted) {
                let item = staged.item.clone();
                // Owed from the next position on: the batch itself stays mapped in the
                // member's process until it releases it (its session holds it).
                let after = match &item {
                    Served::Batch(batch) => key(batch.position()),
                    Served::End => (wanted.0.saturating_add(1), 0),
                    Served::Failed(_) | Served::Private => wanted,
                };
                s.members.get_mut(&member).expect("member present").cursor = Some(after);
                if matches!(item, Served::Batch(_)) {
                    s.delivered += 1;
                }
                self.changed.notify_all();
                return item;
            }
            let behind = s.staged.front().is_some_and(|f| wanted < f.key)
                || s.next.is_some_and(|n| wanted < key(n));
            if behind || s.stopped {
                // Freed already (cannot happen to a member in step): read it privately.
                let m = s.members.get_mut(&member).expect("member present");
                m.cursor = Some((at.epoch.saturating_add(1), 0));
                self.changed.notify_all();
                return Served::Private;
            }
            if pulsed.elapsed() >= beat {
                drop(s);
                pulse();
                pulsed = Instant::now();
                s = self.lock();
                continue;
            }
            s = self
                .changed
                .wait_timeout(s, LEASE_CHECK.min(beat))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Whether the group can serve `wanted` exactly: still staged, made next, or the
    /// start of the epoch after the one being made.
    fn joinable(s: &State, wanted: Key) -> bool {
        if s.halted {
            return false;
        }
        if s.staged.iter().any(|st| st.key == wanted) {
            return true;
        }
        match s.next {
            Some(next) => wanted == key(next) || wanted == (next.epoch.saturating_add(1), 0),
            None => false,
        }
    }

    /// Drops staged batches every member has passed, and detaches members that hold a
    /// full staging up past their lease.
    fn tidy(&self, s: &mut State) {
        if s.staged.len() >= self.limits.window {
            if let Some(oldest) = s.staged.front().map(|f| f.key) {
                let now = self.limits.clock.now();
                let late: Vec<u64> = s
                    .members
                    .iter()
                    .filter(|(_, m)| {
                        m.cursor.is_some_and(|c| c <= oldest)
                            && now.saturating_duration_since(m.seen) > self.limits.lease
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in late {
                    s.members.remove(&id);
                    s.detached.push(id);
                    self.detached_total
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    eprintln!(
                        "nostall agent: job {id} held its group up for more than {:?} \
                         without asking for a batch; detached (it goes on alone if it \
                         comes back)",
                        self.limits.lease
                    );
                }
            }
        }
        while let Some(front) = s.staged.front() {
            if s.prestarted
                || s.members
                    .values()
                    .any(|m| m.cursor.is_some_and(|c| c <= front.key))
            {
                break;
            }
            s.staged.pop_front();
        }
    }

    fn produce(&self) {
        let mut running: Option<nostall::Epoch> = None;
        loop {
            let (generation, start) = {
                let mut s = self.lock();
                let start = loop {
                    if s.stopped {
                        return;
                    }
                    if let Some(at) = s.restart.take() {
                        break Some(at);
                    }
                    self.tidy(&mut s);
                    let wanted = |next: Position| {
                        !self.limits.epochs_on_demand
                            || next.batch > 0
                            || s.asked.is_some_and(|a| a >= next.epoch)
                    };
                    let ready = !s.members.is_empty()
                        && !s.halted
                        && s.next.is_some_and(wanted)
                        && s.staged.len() < self.limits.window;
                    if ready {
                        break None;
                    }
                    s = self
                        .changed
                        .wait_timeout(s, LEASE_CHECK)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                };
                (s.generation, start)
            };
            if let Some(at) = start {
                drop(running.take()); // stops its threads, outside the lock
                match self.loader.resume(at) {
                    Ok(epoch) => running = Some(epoch),
                    Err(e) => self.stage(generation, at, Served::Failed(Failure::of(&e)), None),
                }
                continue;
            }
            let Some(epoch) = running.as_mut() else {
                // Nothing running: the stream starts at `next`.
                let mut s = self.lock();
                s.restart = s.next;
                continue;
            };
            // Where the batch made now goes: what the epoch delivers next.
            let at = nostall::Epoch::position(epoch);
            match epoch.next() {
                Some(Ok(batch)) => {
                    let after = batch.position();
                    self.stage(generation, at, Served::Batch(Arc::new(batch)), Some(after));
                }
                Some(Err(e)) => self.stage(generation, at, Served::Failed(Failure::of(&e)), None),
                None => {
                    // A job may ask for any epoch: the last one has no next.
                    let next = Position::start_of(at.epoch.saturating_add(1));
                    self.stage(generation, at, Served::End, Some(next));
                    drop(running.take());
                    if self.limits.epochs_on_demand {
                        continue; // started from `next` once a member asks for it
                    }
                    match self.loader.epoch(next.epoch) {
                        Ok(e) => running = Some(e),
                        Err(e) => {
                            self.stage(generation, next, Served::Failed(Failure::of(&e)), None)
                        }
                    }
                }
            }
        }
    }

    /// Stages `item` at `at` and, if given, moves what the producer makes next to `then`,
    /// unless the stream moved since the item was made.
    fn stage(&self, generation: u64, at: Position, item: Served, then: Option<Position>) {
        let mut s = self.lock();
        if s.generation != generation {
            return;
        }
        if matches!(item, Served::Failed(_)) {
            s.halted = true;
        }
        if matches!(item, Served::Batch(_)) {
            s.produced += 1;
        }
        s.staged.push_back(Staged { key: key(at), item });
        if then.is_some() {
            s.next = then;
        }
        self.changed.notify_all();
    }
}
