//! The loader's workers: one pool, each worker fetching or preparing as the role table
//! ([`crate::sched::roles::table`]) says, between two pieces of work. Fetching reads bytes into the
//! read-ahead; preparing claims samples in order and prepares them into their slots. A
//! panic inside one sample costs that sample; one outside any sample stops the epoch
//! with an error, never a hang.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crate::error::Cause;
use crate::prep::{Prepared, Preparer};
use crate::rng::{derive, Rng};
use crate::sample::SampleId;
use crate::sched::balance::thread_cpu_time;
use crate::storage::{Source, Tier};

use super::device_queue::ToDecode;
use super::epoch::Shared;
use super::order::Claim;
use crate::sched::reads::readahead::Reservation;
use crate::sched::roles::table::Role;

/// What a repeat's generator key has besides the seed, epoch and sample (see
/// [`EpochPlan::repeats`](crate::plan::EpochPlan::repeats)).
const REPEAT: u64 = 0x5245_5045_4154;

/// The generator sample `id` of `epoch` is prepared with, for its `repeat` under
/// repeated augmentation: a repeat draws its own augmentation, the first (and every
/// sample without repeats) keeps the key it always had.
pub(super) fn sample_rng(seed: u64, epoch: u64, id: SampleId, repeat: u32) -> Rng {
    if repeat > 0 {
        Rng::new(derive(&[seed, epoch, id, REPEAT, u64::from(repeat)]))
    } else {
        Rng::new(derive(&[seed, epoch, id]))
    }
}

/// Starts a loader thread running `body`, kept by `shared` to join when the run stops. A
/// panic that escapes it (one outside any sample: the samples' own are caught where they
/// happen) stops the epoch with an error, rather than leaving the consumer waiting for
/// that thread's samples forever.
pub(super) fn spawn(
    name: String,
    shared: &Arc<Shared>,
    body: fn(&Arc<Shared>),
) -> std::io::Result<()> {
    let run = shared.clone();
    let thread = name.clone();
    shared.thread_starting();
    let started = std::thread::Builder::new().name(name).spawn(move || {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(&run))) {
            run.crashed(format!("{thread} panicked: {}", panic_message(&*panic)));
        }
        run.thread_exited();
    });
    match started {
        Ok(handle) => {
            shared.keep(handle);
            Ok(())
        }
        Err(e) => {
            shared.thread_exited();
            Err(e)
        }
    }
}

/// Lowers the calling thread's CPU priority by `nice`: on Linux a nice value belongs to a
/// thread, so the consumer's stays where it was. Best effort: a priority that cannot be
/// changed costs the consumer some latency, not correctness.
fn lower_priority(nice: u8) {
    if nice > 0 {
        // SAFETY: nice takes and returns plain integers and touches no memory of ours.
        unsafe { libc::nice(libc::c_int::from(nice)) };
    }
}

/// The message a panic carries, when it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// A worker of the pool: takes the role the table gives it and does that role's work a
/// piece at a time, asking again after each, until the pool stops or the work ends.
pub(super) fn work(shared: &Arc<Shared>) {
    lower_priority(shared.parts.config.worker_nice);
    // Made when the worker first prepares: a worker that only fetches needs none.
    let mut preparer = None;
    let mut role = shared.roles.next(None);
    while let Some(now) = role {
        let piece = catch_unwind(AssertUnwindSafe(|| match now {
            Role::Fetch => fetch(shared),
            Role::Prep => prepare(shared, &mut preparer),
        }));
        let more = match piece {
            Ok(more) => more,
            Err(panic) => {
                // Outside any sample (those are caught where they happen): the epoch stops
                // with an error naming the worker and its role, never a hang.
                let worker = std::thread::current();
                shared.crashed(format!(
                    "{} panicked while {}: {}",
                    worker.name().unwrap_or("a loader worker"),
                    now.doing(),
                    panic_message(&*panic)
                ));
                return;
            }
        };
        if !more {
            // Every read was given, or every sample claimed (or the epoch stopped): the
            // role has no work left for anyone.
            shared.roles.done(now);
        }
        role = shared.roles.next(Some(now));
        staff(shared);
    }
}

/// Starts the workers the roles want beyond those there are. One that cannot be started
/// leaves the work to those there are.
pub(super) fn staff(shared: &Arc<Shared>) {
    while let Some(n) = shared.roles.hire() {
        if spawn(format!("nostall-worker-{n}"), shared, work).is_err() {
            shared.roles.not_started();
            return;
        }
    }
}

/// One piece of fetch work: a read (or, from a source that keeps several in flight,
/// as many as the read-ahead has room for as reads end). `false` once every read was
/// given or the epoch stopped.
fn fetch(shared: &Arc<Shared>) -> bool {
    // A source that keeps several reads in flight from this thread is given more as its
    // reads end, as long as the read-ahead has room; one that reads one at a time gets one.
    let more = shared.parts.source.reads_at_once() > 1;
    shared.want_fetchers();
    staff(shared);
    let Some(first) = shared.ahead.next() else {
        return false;
    };
    read_each(shared, first, more);
    true
}

/// Reads `first` through the source and, with `more`, every sample the read-ahead has
/// room for as reads end, parking each sample's bytes as its read ends. A source that
/// panics costs the reads it had not finished (each named, skippable), not the epoch;
/// the buffers they held are not reused.
fn read_each(shared: &Arc<Shared>, first: Reservation, more: bool) {
    let reading = RefCell::new(Reading {
        shared,
        given: 0,
        unfinished: HashMap::new(),
        // Only a rank balanced against its node's others uses the fetch role's CPU: the
        // clock is not read per read otherwise.
        cpu_mark: shared.parts.balance.is_some().then(thread_cpu_time),
    });
    let mut first = Some(first);
    let mut next = || {
        let read = match first.take() {
            Some(read) => read,
            None if more => {
                shared.want_fetchers();
                staff(shared);
                shared.ahead.try_next()?
            }
            None => return None,
        };
        Some(reading.borrow_mut().given(read))
    };
    let read = catch_unwind(AssertUnwindSafe(|| {
        shared
            .parts
            .source
            .read_each(&mut next, &mut |i, bytes, result| {
                reading.borrow_mut().finish(i, bytes, result)
            })
    }));
    // Reads a panic (or a source that broke its word) left unfinished fail, named, rather
    // than leaving prep waiting for their bytes.
    let mut reading = reading.into_inner();
    if reading.unfinished.is_empty() {
        return;
    }
    let mut left: Vec<usize> = reading.unfinished.keys().copied().collect();
    left.sort_unstable();
    let why = match read {
        Ok(()) => "the source did not finish reading it".to_string(),
        Err(panic) => format!("reading it panicked: {}", panic_message(&*panic)),
    };
    for i in left {
        reading.finish(i, Vec::new(), Err(Cause::Internal(why.clone())));
    }
}

/// The reads of one [`read_each`] call under way, each ended once. Only those in flight
/// are kept: a call that streams a whole epoch holds no more.
struct Reading<'a> {
    shared: &'a Shared,
    /// Reads given to the source so far.
    given: usize,
    /// Each read in flight, by its number: when it was given, its stream index,
    /// reservation and tier.
    unfinished: HashMap<usize, (Instant, (usize, u64, Tier))>,
    /// The worker's CPU time when the last read ended (or the call began): what it
    /// spent since is charged to the read that ends next, by that read's tier. Exact for
    /// a source that reads one at a time; for one that keeps several in flight, the
    /// total is exact and each read is charged what ran between two endings. `None`
    /// where it is not counted.
    cpu_mark: Option<std::time::Duration>,
}

impl Reading<'_> {
    /// Hands `read` to the source: its sample and buffer.
    fn given(&mut self, read: Reservation) -> (SampleId, Vec<u8>) {
        let started = (Instant::now(), (read.index, read.reserved, read.tier));
        self.unfinished.insert(self.given, started);
        self.given += 1;
        (self.shared.stream[read.index], read.buffer)
    }

    /// Parks read `i`'s bytes (or why there are none) and counts the read. A read the
    /// source reports twice, or never was given, is not believed.
    fn finish(&mut self, i: usize, bytes: Vec<u8>, result: Result<(), Cause>) {
        let Some((started, read)) = self.unfinished.remove(&i) else {
            return;
        };
        let took = started.elapsed();
        let shared = self.shared;
        if let Some(mark) = &mut self.cpu_mark {
            let cpu = thread_cpu_time();
            shared.fetch_cpu[read.2.index()].record(cpu.saturating_sub(*mark), 0);
            *mark = cpu;
        }
        shared.fetch.record(took, bytes.len() as u64);
        shared.parts.totals.fetch.record(took, bytes.len() as u64);
        shared.read_finished();
        shared.ahead.park(read, took, result.map(|()| bytes));
    }
}

/// A preparer for `shared`'s pipeline, or why none could be made.
type Made = Result<Box<dyn Preparer>, String>;

/// One piece of prep work: claims the next sample of the plan, takes its bytes and
/// prepares it into its slot. `false` once every sample was claimed or the epoch stopped.
fn prepare(shared: &Arc<Shared>, preparer: &mut Option<Made>) -> bool {
    let pipeline = &shared.parts.config.pipeline;
    let Some(Claim {
        index,
        position,
        mut slot,
    }) = shared.order.claim()
    else {
        return false;
    };
    let Some((bytes, fetch)) = shared.ahead.take(index) else {
        return false; // the epoch is stopping
    };
    // Without a preparer every sample fails, and is reported as such, rather than the
    // worker vanishing and the epoch waiting forever for its samples.
    let made =
        preparer.get_or_insert_with(|| pipeline.prep().preparer().map_err(|e| e.to_string()));
    let id = shared.stream[index];
    let started = Instant::now();
    // CPU time, not wall time: what a sample costs a core, which is what the prep role
    // and a node's balance decide on (a worker's wall time grows with whatever shares
    // its core).
    let cpu_before = thread_cpu_time();
    let read = bytes.as_ref().map_or(0, |b| b.len() as u64);
    let result = match (&mut *made, bytes) {
        (_, Err(cause)) => Err(cause),
        (Err(why), Ok(_)) => Err(Cause::Internal(format!(
            "no {} preparer could be made: {why}",
            pipeline.modality()
        ))),
        (Ok(state), Ok(bytes)) => {
            let (seed, epoch) = (shared.parts.config.plan.seed, shared.from.epoch);
            let repeat = shared.repeats.get(index).copied().unwrap_or(0);
            let mut rng = sample_rng(seed, epoch, id, repeat);
            state.next_sample(id);
            // A panic in a decoder must cost one sample, not the epoch: a thread that died
            // would leave its sample unfinished and the consumer waiting forever.
            let run = || state.prepare(&bytes, &mut rng, slot.as_mut());
            let result = catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|panic| {
                // Whatever the panic left half-done in the preparer stays with this sample.
                *made = pipeline.prep().preparer().map_err(|e| e.to_string());
                Err(Cause::Internal(format!(
                    "preparing it panicked: {}",
                    panic_message(&*panic)
                )))
            });
            shared.ahead.recycle(bytes);
            result
        }
    };
    let prep = started.elapsed();
    let cpu = thread_cpu_time().saturating_sub(cpu_before);
    shared.prep_cpu.record(cpu, read);
    shared.parts.totals.prep_cpu.record(cpu, read);
    let shard = shared.parts.source.shard(id);
    shared.costs.record(id, shard, fetch, prep);
    if let (Some(queue), Ok(Prepared::Deferred(sample))) =
        (&shared.parts.config.device_queue, &result)
    {
        queue.push(ToDecode {
            epoch: shared.from.epoch,
            id,
            sample: (**sample).clone(),
        });
    }
    let written = if result.is_ok() {
        shared.sample_bytes as u64
    } else {
        0
    };
    shared.prep.record(prep, written);
    shared.parts.totals.prep.record(prep, written);
    shared.order.complete(index, position, result);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's own nice value (`nice(0)` changes nothing and returns it).
    fn own_nice() -> libc::c_int {
        // SAFETY: as in `lower_priority`.
        unsafe { libc::nice(0) }
    }

    #[test]
    fn a_worker_lowers_its_own_priority_and_no_other_thread_s() {
        let before = own_nice();
        let worker = std::thread::spawn(|| {
            let start = own_nice();
            lower_priority(3);
            (start, own_nice())
        });
        let (start, lowered) = worker.join().unwrap();
        assert_eq!(lowered, (start + 3).min(19));
        assert_eq!(own_nice(), before, "the spawning thread keeps its priority");
    }
}
