//! Read-ahead: fetch threads read along the epoch's order ahead of prep and park the
//! bytes until the prep thread that claims the sample takes them.
//!
//! What they hold (in flight or parked) is bounded in bytes by a window that adapts to
//! what is observed: by Little's law, keeping prep fed at `R` bytes/s through reads that
//! take `L` seconds needs about `R·L` bytes under way, so the window follows twice that,
//! between a floor and the configured [`LoaderConfig::readahead`](crate::loader::LoaderConfig).
//! Slow storage thus gets a deep window, a cache or a local disk a shallow one. The floor
//! is a batch of samples (at least two per prep thread): cache hits arrive at once, so
//! with a cache in front of slow storage a run of hits fills a shallow window, and the
//! fetch threads would wait for prep instead of starting the next slow miss (measured:
//! 15% of a 10 MB/s link lost with half the dataset cached). The factor of two also lets
//! a window that starts small grow: reads limited by the window raise the pace, which
//! widens the window, until the fetch threads or prep are the limit.
//!
//! Waiting fetch threads are woken when a quarter of the window is free, to read a burst,
//! not once per sample: every wake-up takes a core from a prep thread.
//!
//! **Reads in flight** follow Little's law and the read times by tier: how many, and
//! when the bound moves, is the scheduler's ([`super`]); this module
//! keeps the bound it gives and the reads under it.
//!
//! **The opening batch.** A loader with nothing carried over starts at two reads in
//! flight, and its first batch would wait for a batch of reads two at a time (0.64 s at
//! 20 ms a read). So once a read has taken [`SLOW_READ`] or more, the reads of the first
//! batch may all be in flight at once; after them the bound is Little's law's again.
//! Their times are kept out of the read time the bound follows: behind a link of
//! limited bandwidth they queue, and would both ask for more reads and hide from the
//! raise guard that more only queue. Fast storage never opens so (no threads started
//! for nothing), and a bound carried from an earlier epoch needs no opening.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{
    reads_in_flight, ReadTimes, Trial, MIN_IN_FLIGHT, REVISION_INTERVAL, SLOW_REVISION_INTERVAL,
    SLOW_REVISION_SAMPLES,
};
use crate::catalog::{Catalog, SampleId};
use crate::clock::Clock;
use crate::error::Cause;
use crate::metrics::{ReadaheadStats, TierReads};
use crate::storage::Tier;

/// A fetched sample's bytes, or why they could not be read.
pub(crate) type Fetched = std::result::Result<Vec<u8>, Cause>;

/// The bytes under way between the fetch threads and prep, and the window bounding them.
pub(crate) struct ReadAhead {
    state: Mutex<Ahead>,
    /// Signalled when bytes are parked.
    parked: Condvar,
    /// Signalled when prep takes bytes, making room in the window.
    room: Condvar,
    /// The samples in read order, and the catalog whose sizes (at least one byte) a read
    /// reserves before it knows the real size.
    stream: Arc<[SampleId]>,
    catalog: Arc<Catalog>,
    /// The largest window.
    limit: u64,
    /// How many emptied buffers are kept for re-use.
    spare_limit: usize,
    /// The ceiling on reads in flight (the fetch threads), and how many samples prep
    /// takes between two revisions of the bound.
    max_in_flight: usize,
    revise_every: u64,
    started: Instant,
    /// What the revisions' intervals are read from.
    clock: Clock,
    stop: AtomicBool,
    /// Where each sample's read would be served from now.
    tier_of: TierOf,
}

/// Where a sample's read would be served from now ([`crate::storage::Source::tier`]).
pub(crate) type TierOf = Box<dyn Fn(SampleId) -> Tier + Send + Sync>;

/// A read a fetch thread may start.
pub(crate) struct Reservation {
    /// The sample's stream index.
    pub(crate) index: usize,
    /// The bytes reserved for it in the window.
    pub(crate) reserved: u64,
    /// A buffer to read into.
    pub(crate) buffer: Vec<u8>,
    /// Where the read would be served from when it was reserved.
    pub(crate) tier: Tier,
}

struct Ahead {
    /// Next stream index to read.
    next: usize,
    /// Bytes read ahead, by stream index, until the prep thread that claims them takes them.
    parked: BTreeMap<usize, (Fetched, Duration)>,
    /// Bytes held: reserved for reads in flight (at their catalog size) and parked.
    held: u64,
    peak: u64,
    /// The current bound on `held`.
    window: u64,
    floor: u64,
    /// Smoothed read times, by tier and over every read.
    times: ReadTimes,
    /// The read time the bound followed at its last revision (seconds), and how many of
    /// the reads then to come each tier served.
    followed: Option<(f64, [u32; 3])>,
    /// Bytes taken by prep since the epoch started.
    taken: u64,
    /// Time prep threads spent waiting for bytes.
    starved: Duration,
    /// Emptied byte buffers, re-used by fetch threads.
    spare: Vec<Vec<u8>>,
    /// Fetch threads waiting for room, and prep threads waiting for bytes.
    fetchers_waiting: usize,
    takers_waiting: usize,
    /// Reads started and not parked yet, and the bound on them.
    in_flight: usize,
    allowed: usize,
    /// The bound's last raise, to be judged by the rate it brings.
    trial: Trial,
    /// Samples prep has taken since the bound on reads in flight was last revised, and
    /// when that was.
    taken_samples: u64,
    revised_at: Instant,
    /// The stream index before which the opening batch's reads may all be in flight,
    /// and the one from which they did, once a read was slow.
    opening_end: usize,
    opened_at: Option<usize>,
}

impl ReadAhead {
    /// A read-ahead over `stream`, sized by `catalog`, starting at stream index
    /// `start`, with a window between `floor` and `limit` bytes, at most `max_in_flight`
    /// reads at once (`in_flight` to begin with: what the previous epoch ended with), the
    /// bound revised every `revise_every` samples taken and [`REVISION_INTERVAL`] at the
    /// least (never, if 0: `max_in_flight` then runs at once throughout).
    pub(crate) fn new(
        stream: Arc<[SampleId]>,
        catalog: Arc<Catalog>,
        start: usize,
        (floor, limit): (u64, u64),
        (in_flight, max_in_flight, revise_every): (usize, usize, usize),
        spare_limit: usize,
    ) -> ReadAhead {
        ReadAhead {
            state: Mutex::new(Ahead {
                next: start,
                parked: BTreeMap::new(),
                held: 0,
                peak: 0,
                window: floor,
                floor,
                times: ReadTimes::default(),
                followed: None,
                taken: 0,
                starved: Duration::ZERO,
                spare: Vec::new(),
                fetchers_waiting: 0,
                takers_waiting: 0,
                in_flight: 0,
                allowed: if revise_every == 0 {
                    max_in_flight.max(1)
                } else {
                    in_flight.clamp(MIN_IN_FLIGHT.min(max_in_flight), max_in_flight.max(1))
                },
                taken_samples: 0,
                revised_at: Instant::now(),
                trial: Trial::default(),
                opening_end: if revise_every > 0 && in_flight == 0 {
                    start.saturating_add(revise_every)
                } else {
                    start
                },
                opened_at: None,
            }),
            parked: Condvar::new(),
            room: Condvar::new(),
            stream,
            catalog,
            limit,
            spare_limit,
            max_in_flight: max_in_flight.max(1),
            revise_every: revise_every as u64,
            started: Instant::now(),
            clock: Clock::real(),
            stop: AtomicBool::new(false),
            tier_of: Box::new(|_| Tier::Storage),
        }
    }

    /// The same read-ahead, timing its revisions by `clock` (a test's).
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: Clock) -> ReadAhead {
        self.started = clock.now();
        self.lock().revised_at = clock.now();
        self.clock = clock;
        self
    }

    /// The same read-ahead, told where each sample's read would be served from (without
    /// this, every read is taken as storage's).
    pub(crate) fn with_tiers(mut self, tier_of: TierOf) -> ReadAhead {
        self.tier_of = tier_of;
        self
    }

    /// The same read-ahead, with the read times an earlier epoch ended with (`None`: a
    /// fresh loader's). The bound carried from that epoch (given to `new`) is scaled at
    /// once to the tiers of this epoch's first reads: a bound set for misses does not
    /// start a run of hits with as many reads in flight, nor one for hits a run of misses
    /// with two.
    pub(crate) fn carrying(self, carried: Option<CarriedReads>) -> ReadAhead {
        let Some(carried) = carried else {
            return self;
        };
        let mut ahead = self.lock();
        ahead.times = carried.times;
        if self.revise_every > 0 && carried.followed > 0.0 {
            let (read_time, upcoming) = self.upcoming(&ahead);
            let scaled = (ahead.allowed as f64 * read_time / carried.followed).ceil() as usize;
            ahead.allowed = scaled.clamp(MIN_IN_FLIGHT.min(self.max_in_flight), self.max_in_flight);
            ahead.followed = Some((read_time, upcoming));
        }
        drop(ahead);
        self
    }

    /// What the next epoch carries from this one: its read times, and the read time its
    /// bound followed.
    pub(crate) fn carried(&self) -> CarriedReads {
        let ahead = self.lock();
        CarriedReads {
            times: ahead.times,
            followed: ahead.followed.map_or(ahead.times.all(), |(time, _)| time),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ahead> {
        // The state is consistent at every unlock, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Wakes every waiting thread and makes every later call return `None`.
    pub(crate) fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        // Take the lock so that no thread misses the wake-up between its check and wait.
        drop(self.lock());
        self.parked.notify_all();
        self.room.notify_all();
    }

    /// Reserves the next sample of the stream for a fetch thread, waiting while the
    /// window or the bound on reads in flight is full. `None` once the stream is exhausted
    /// or the epoch stopped.
    pub(crate) fn next(&self) -> Option<Reservation> {
        let mut ahead = self.lock();
        loop {
            if self.stopped() || ahead.next == self.stream.len() {
                return None;
            }
            if let Some(read) = self.reserve(&mut ahead) {
                return Some(read);
            }
            ahead.fetchers_waiting += 1;
            ahead = self.room.wait(ahead).unwrap_or_else(|e| e.into_inner());
            ahead.fetchers_waiting -= 1;
        }
    }

    /// Like [`ReadAhead::next`], without waiting: `None` also while there is no room.
    pub(crate) fn try_next(&self) -> Option<Reservation> {
        if self.stopped() {
            return None;
        }
        self.reserve(&mut self.lock())
    }

    /// The next sample of the stream, if the window and the bound on reads in flight have
    /// room for it now.
    fn reserve(&self, ahead: &mut Ahead) -> Option<Reservation> {
        if ahead.next == self.stream.len() {
            return None;
        }
        let need = self.need(ahead);
        // A sample larger than the whole window still goes through, alone.
        let room = ahead.held == 0 || ahead.held + need <= ahead.window;
        if !room || ahead.in_flight >= self.bound(ahead) {
            return None;
        }
        let index = ahead.next;
        ahead.next += 1;
        ahead.in_flight += 1;
        ahead.held += need;
        ahead.peak = ahead.peak.max(ahead.held);
        let buffer = ahead.spare.pop().unwrap_or_default();
        Some(Reservation {
            index,
            reserved: need,
            buffer,
            tier: (self.tier_of)(self.stream[index]),
        })
    }

    /// The reads that may be in flight now: the bound, or the opening batch's reads.
    fn bound(&self, ahead: &Ahead) -> usize {
        if ahead.opened_at.is_some() && ahead.next < ahead.opening_end {
            let opening =
                (ahead.opening_end - ahead.next + ahead.in_flight).min(self.max_in_flight);
            ahead.allowed.max(opening)
        } else {
            ahead.allowed
        }
    }

    /// Waiting fetch threads that may start a read now: the others would wake to sleep
    /// again.
    fn startable(&self, ahead: &Ahead) -> usize {
        ahead
            .fetchers_waiting
            .min(self.bound(ahead).saturating_sub(ahead.in_flight))
    }

    /// The bytes to reserve for the next sample to fetch (zero past the end).
    fn need(&self, ahead: &Ahead) -> u64 {
        self.stream
            .get(ahead.next)
            .map_or(0, |&id| self.catalog.size(id).max(1))
    }

    /// Parks a fetched sample for prep, correcting the reservation to its real size; its
    /// read, from `tier`, took `took`.
    pub(crate) fn park(
        &self,
        (index, reserved, tier): (usize, u64, Tier),
        took: Duration,
        bytes: Fetched,
    ) {
        let len = bytes.as_ref().map_or(0, |b| b.len() as u64);
        let mut ahead = self.lock();
        ahead.held = ahead.held - reserved + len;
        ahead.peak = ahead.peak.max(ahead.held);
        let opening = ahead
            .opened_at
            .is_some_and(|from| (from..ahead.opening_end).contains(&index));
        if !opening {
            // The opening's reads queue behind each other where bandwidth is the limit:
            // their times would ask for more reads in flight, and hide from the raise
            // guard that more only queue.
            ahead.times.record(tier, took.as_secs_f64());
        }
        ahead.parked.insert(index, (bytes, took));
        ahead.in_flight -= 1;
        let opened =
            ahead.opened_at.is_none() && took >= SLOW_READ && ahead.next < ahead.opening_end;
        if opened {
            ahead.opened_at = Some(ahead.next);
        }
        let wake = ahead.takers_waiting > 0;
        // No fetch thread is woken here: this one goes back for the next reads itself, so
        // reads in flight stay at the bound without a wake-up per sample.
        drop(ahead);
        if wake {
            self.parked.notify_all();
        }
        if opened {
            self.room.notify_all();
        }
    }

    /// Takes sample `index`'s bytes once they are parked, with the time its read took,
    /// and adapts the window to the pace at which prep takes bytes. `None` if the epoch
    /// stopped.
    pub(crate) fn take(&self, index: usize) -> Option<(Fetched, Duration)> {
        let mut ahead = self.lock();
        let before = Instant::now();
        let (bytes, took) = loop {
            if let Some(parked) = ahead.parked.remove(&index) {
                break parked;
            }
            if self.stopped() {
                return None;
            }
            ahead.takers_waiting += 1;
            ahead = self.parked.wait(ahead).unwrap_or_else(|e| e.into_inner());
            ahead.takers_waiting -= 1;
        };
        ahead.starved += before.elapsed();
        let len = bytes.as_ref().map_or(0, |b| b.len() as u64);
        ahead.held -= len;
        ahead.taken += len;
        ahead.taken_samples += 1;
        let elapsed = self.clock.since(self.started).as_secs_f64().max(1e-3);
        let pace = ahead.taken as f64 / elapsed;
        let wanted = (2.0 * pace * ahead.times.all()) as u64;
        ahead.window = wanted.clamp(ahead.floor, self.limit);
        let mut more_reads = false;
        let since = self.clock.since(ahead.revised_at);
        let due = ahead.taken_samples >= self.revise_every
            || (since >= SLOW_REVISION_INTERVAL && ahead.taken_samples >= SLOW_REVISION_SAMPLES);
        if self.revise_every > 0 && due && since >= REVISION_INTERVAL {
            // The rate since the last revision: the rate the current bound allows.
            let rate = ahead.taken_samples as f64 / since.as_secs_f64();
            ahead.taken_samples = 0;
            ahead.revised_at = self.clock.now();
            let (read_time, upcoming) = self.upcoming(&ahead);
            ahead.followed = Some((read_time, upcoming));
            let wanted = reads_in_flight(rate, read_time, self.max_in_flight);
            let current = ahead.allowed;
            // Queueing behind a link shows in the farthest tier's reads, whatever the mix.
            let observed = (rate, ahead.times.farthest());
            let revised = ahead.trial.revise(current, wanted, observed);
            more_reads = revised > ahead.allowed;
            ahead.allowed = revised;
        }
        // Let waiting fetch threads refill a quarter of the window at a time rather than a
        // sample at a time: one wake-up per sample would take a core from prep as often.
        let refill = more_reads || {
            let burst = self.need(&ahead).max(ahead.window / 4);
            ahead.held == 0 || ahead.held + burst <= ahead.window
        };
        // Only as many as may start a read: the others would wake to sleep again.
        let wake = if refill { self.startable(&ahead) } else { 0 };
        drop(ahead);
        for _ in 0..wake {
            self.room.notify_one();
        }
        Some((bytes, took))
    }

    /// The read time the bound follows: the mean of the tier times of the next batch of
    /// reads, and how many of them each tier serves.
    fn upcoming(&self, ahead: &Ahead) -> (f64, [u32; 3]) {
        let end = (ahead.next + self.revise_every.max(1) as usize).min(self.stream.len());
        let mut count = [0u32; 3];
        for &id in &self.stream[ahead.next..end] {
            count[(self.tier_of)(id).index()] += 1;
        }
        let reads: u32 = count.iter().sum();
        if reads == 0 {
            return (ahead.times.all(), count);
        }
        let total: f64 = Tier::ALL
            .iter()
            .map(|&tier| f64::from(count[tier.index()]) * ahead.times.of(tier))
            .sum();
        (total / f64::from(reads), count)
    }

    /// The reads that may be in flight now (the bound, or the opening batch's).
    pub(crate) fn reads_allowed(&self) -> usize {
        self.bound(&self.lock())
    }

    /// Returns an emptied byte buffer to the fetch threads.
    pub(crate) fn recycle(&self, mut bytes: Vec<u8>) {
        let mut ahead = self.lock();
        if ahead.spare.len() < self.spare_limit {
            bytes.clear();
            ahead.spare.push(bytes);
        }
    }

    /// Time prep waited for bytes, and the window's figures.
    pub(crate) fn stats(&self) -> (Duration, ReadaheadStats) {
        let ahead = self.lock();
        let (read_time, upcoming) = ahead.followed.unwrap_or((ahead.times.all(), [0; 3]));
        let by_tier = Tier::ALL.map(|tier| TierReads {
            upcoming: upcoming[tier.index()],
            time: ahead.times.by_tier[tier.index()].map(Duration::from_secs_f64),
        });
        let stats = ReadaheadStats {
            window: ahead.window,
            peak: ahead.peak,
            limit: self.limit,
            reads_in_flight: ahead.allowed,
            read_time: Duration::from_secs_f64(read_time.max(0.0)),
            by_tier,
        };
        (ahead.starved, stats)
    }
}

/// What an epoch's read-ahead carries to the next one's ([`ReadAhead::carrying`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CarriedReads {
    times: ReadTimes,
    /// The read time (seconds) the bound followed.
    followed: f64,
}

/// A read this long or longer is not served from memory: the opening batch's reads may
/// then all be in flight at once.
const SLOW_READ: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    /// A read-ahead over `samples` samples of 100 bytes, revising every `batch` taken,
    /// starting at the bound `carried` from an earlier epoch (0: a fresh loader).
    fn read_ahead(samples: usize, batch: usize, carried: usize) -> ReadAhead {
        let sized = (0..samples).map(|i| (format!("{i}.jpg"), None, 100));
        let catalog =
            Catalog::from_samples("/nowhere", crate::sample::Modality::Image, vec![], sized)
                .expect("a catalog of sizes");
        let stream: Arc<[SampleId]> = (0..samples as SampleId).collect();
        ReadAhead::new(
            stream,
            Arc::new(catalog),
            0,
            (1 << 20, 1 << 20),
            (carried, 128, batch),
            0,
        )
    }

    /// Reads `n` samples through `ahead` one at a time, each taking `took`, and takes them.
    fn read_and_take(ahead: &ReadAhead, n: usize, took: Duration) {
        for _ in 0..n {
            let read = ahead.try_next().expect("room for a read");
            ahead.park(
                (read.index, read.reserved, read.tier),
                took,
                Ok(vec![0; 100]),
            );
            let (bytes, _) = ahead.take(read.index).expect("parked bytes");
            assert_eq!(bytes.expect("a read that succeeded").len(), 100);
        }
    }

    #[test]
    fn a_slow_start_revises_before_a_batch_has_come() {
        // Reads of seconds: at two in flight, a batch of 64 would take minutes. (Carried
        // from an earlier epoch, so that the opening batch does not come into it.)
        let clock = Clock::manual();
        let ahead = read_ahead(1000, 64, 2).with_clock(clock.clone());
        let few = SLOW_REVISION_SAMPLES as usize - 1;
        read_and_take(&ahead, few, Duration::from_secs(10));
        assert_eq!(ahead.reads_allowed(), 2);
        // Once the slow interval has passed, the next sample revises: the rate times
        // seconds a read asks for many more.
        clock.advance(SLOW_REVISION_INTERVAL);
        read_and_take(&ahead, 1, Duration::from_secs(10));
        assert!(ahead.reads_allowed() > 2, "{}", ahead.reads_allowed());
        // Fewer samples than that since the last revision do not revise, however long.
        let raised = ahead.reads_allowed();
        clock.advance(SLOW_REVISION_INTERVAL);
        read_and_take(&ahead, few, Duration::from_secs(10));
        assert_eq!(ahead.reads_allowed(), raised);
    }

    #[test]
    fn a_fresh_start_opens_its_first_batch_once_a_read_is_slow() {
        // Reads from memory: the bound stays at two, no thread is wanted for more.
        let fast = read_ahead(1000, 64, 0);
        read_and_take(&fast, 1, Duration::from_micros(50));
        assert_eq!(fast.reads_allowed(), 2);
        // A bound carried from an earlier epoch needs no opening.
        let carried = read_ahead(1000, 64, 2);
        read_and_take(&carried, 1, Duration::from_millis(20));
        assert_eq!(carried.reads_allowed(), 2);
        // A slow read: the rest of the first batch may be in flight at once, and no more.
        let slow = read_ahead(1000, 64, 0);
        read_and_take(&slow, 1, Duration::from_millis(20));
        assert_eq!(slow.reads_allowed(), 63);
        let opening: Vec<Reservation> = (0..63)
            .map(|_| slow.try_next().expect("a read of the opening batch"))
            .collect();
        assert!(slow.try_next().is_none(), "the opening is one batch");
        // After it, the bound is Little's law's again, and the read time it follows is the
        // first read's (what it seeds the average with): the opening's reads, which took
        // seconds as if queued behind each other, are not in it.
        assert_eq!(slow.stats().1.read_time, Duration::from_millis(20));
        for read in opening {
            slow.park(
                (read.index, read.reserved, read.tier),
                Duration::from_secs(1),
                Ok(vec![0; 100]),
            );
            let (bytes, _) = slow.take(read.index).expect("parked bytes");
            assert!(bytes.is_ok());
        }
        assert_eq!(slow.reads_allowed(), slow.stats().1.reads_in_flight);
        assert_eq!(slow.stats().1.read_time, Duration::from_millis(20));
        assert!(slow.try_next().is_some());
    }

    #[test]
    fn the_bound_follows_the_tiers_of_the_reads_to_come() {
        // A batch of reads from storage, 10 s each; then the next batch is read from
        // storage by one read-ahead and from the cache by the other.
        let after_a_batch = |then: Tier| {
            let ahead = read_ahead(1000, 64, 40).with_tiers(Box::new(move |id| {
                if id < 64 {
                    Tier::Storage
                } else {
                    then
                }
            }));
            read_and_take(&ahead, 64, Duration::from_secs(10));
            let upcoming = ahead.upcoming(&ahead.lock());
            upcoming
        };
        assert_eq!(after_a_batch(Tier::Storage), (10.0, [0, 0, 64]));
        // The cache holds the next reads: no time to wait for, before one is timed.
        assert_eq!(after_a_batch(Tier::Memory), (0.0, [64, 0, 0]));
        // Half and half: the mean.
        let ahead = read_ahead(1000, 64, 40).with_tiers(Box::new(|id| {
            if id % 2 == 0 {
                Tier::Storage
            } else {
                Tier::Memory
            }
        }));
        read_and_take(&ahead, 64, Duration::from_secs(10));
        let (time, count) = ahead.upcoming(&ahead.lock());
        assert_eq!(count, [32, 0, 32]);
        // Storage's reads timed at 10 s; memory's too here (the test parks them so), and
        // the mean follows each tier's own time.
        assert!((time - 10.0).abs() < 1e-9, "{time}");
        assert_eq!(reads_in_flight(100.0, 0.0, 128), MIN_IN_FLIGHT);
    }

    #[test]
    fn a_bound_carried_from_an_epoch_of_misses_is_scaled_to_the_next_ones_tiers() {
        // An epoch of reads from storage at 20 ms ended with 40 in flight.
        let mut times = ReadTimes::default();
        times.record(Tier::Storage, 0.02);
        let carried = CarriedReads {
            times,
            followed: 0.02,
        };
        let next = |tier: Tier| {
            read_ahead(1000, 64, 40)
                .with_tiers(Box::new(move |_| tier))
                .carrying(Some(carried))
                .reads_allowed()
        };
        assert_eq!(next(Tier::Storage), 40, "the same tiers: the same bound");
        assert_eq!(
            next(Tier::Memory),
            MIN_IN_FLIGHT,
            "all cached: no reads to wait on"
        );
        // Nothing carried: the bound as given.
        let fresh = read_ahead(1000, 64, 40).carrying(None);
        assert_eq!(fresh.reads_allowed(), 40);
    }
}
