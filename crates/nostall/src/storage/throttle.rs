//! [`Throttled`]: any source behind an emulated storage link.
//!
//! Experiments about fetch stalls need slow storage on demand: a hard disk, a network
//! filesystem, a remote object store. A [`Link`] models one with three numbers that
//! such devices are usually described by:
//!
//! - **latency**, paid by every request and overlapped between concurrent requests
//!   (seek time, a network round trip);
//! - **bandwidth**, shared by all requests: transfers queue behind each other on one
//!   virtual wire, so more threads do not buy more throughput than the link has;
//! - **concurrency**, the number of requests the device serves at once (queue depth,
//!   connection pool); further requests wait for a free one.
//!
//! A link may change during a run ([`Throttled::phased`]: 80 MB/s, then 5, then 80
//! again), to see how a loader follows storage that slows down and recovers.
//!
//! The inner read happens first, at full speed, and the caller is then held until the
//! moment the link would have delivered the bytes. Holding threads with `sleep` costs no
//! CPU, so throttled runs measure the loader, not the emulation.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Source, SourceStats};
use crate::error::Cause;
use crate::sample::SampleId;

/// An emulated storage link. The default is unlimited on every count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Link {
    /// Bytes per second through the link, shared by all requests; `None` for unlimited.
    pub bandwidth: Option<f64>,
    /// Time every request waits before its bytes start to flow.
    pub latency: Duration,
    /// Requests served at once; `None` for unlimited.
    pub concurrency: Option<usize>,
}

impl Link {
    /// A link of `megabytes_per_second` (10⁶ bytes) with no latency or concurrency limit.
    pub fn bandwidth_mb(megabytes_per_second: f64) -> Link {
        Link {
            bandwidth: Some(megabytes_per_second * 1e6),
            ..Link::default()
        }
    }
}

/// A source whose reads take as long as they would over a [`Link`], or over links that
/// follow each other in time.
#[derive(Debug)]
pub struct Throttled<S: ?Sized = dyn Source> {
    /// The links by the time they take over, measured from `began`; the first at zero.
    phases: Vec<(Duration, Link)>,
    began: Instant,
    wire: Mutex<Wire>,
    freed: Condvar,
    inner: Arc<S>,
}

#[derive(Debug)]
struct Wire {
    /// When the transfers queued so far will have finished.
    free_at: Instant,
    /// Requests being served.
    active: usize,
}

impl<S: Source + ?Sized> Throttled<S> {
    /// `inner` behind `link`.
    pub fn new(inner: Arc<S>, link: Link) -> Throttled<S> {
        Throttled::phased(inner, vec![(Duration::ZERO, link)])
    }

    /// `inner` behind each link of `phases` from its time on (measured from now), until
    /// the next takes over; before the first, an unlimited link. A request is served by
    /// the link of the moment it starts.
    pub fn phased(inner: Arc<S>, mut phases: Vec<(Duration, Link)>) -> Throttled<S> {
        phases.sort_by_key(|&(from, _)| from);
        if phases
            .first()
            .is_none_or(|&(from, _)| from > Duration::ZERO)
        {
            phases.insert(0, (Duration::ZERO, Link::default()));
        }
        let began = Instant::now();
        Throttled {
            phases,
            began,
            wire: Mutex::new(Wire {
                free_at: began,
                active: 0,
            }),
            freed: Condvar::new(),
            inner,
        }
    }

    /// The link emulated at first.
    pub fn link(&self) -> Link {
        self.phases[0].1
    }

    /// The link serving a request that starts at `at`.
    fn link_at(&self, at: Instant) -> Link {
        let since = at.saturating_duration_since(self.began);
        let later = self.phases.partition_point(|&(from, _)| from <= since);
        self.phases[later.saturating_sub(1)].1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wire> {
        self.wire.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a free request slot of `link` and takes it.
    fn enter(&self, link: Link) {
        let Some(limit) = link.concurrency else {
            return;
        };
        let mut wire = self.lock();
        while wire.active >= limit.max(1) {
            wire = self.freed.wait(wire).unwrap_or_else(|e| e.into_inner());
        }
        wire.active += 1;
    }

    fn leave(&self, link: Link) {
        if link.concurrency.is_some() {
            self.lock().active -= 1;
            // Every waiter: a later phase may allow more than one more.
            self.freed.notify_all();
        }
    }

    /// When a request over `link` that began at `began` and moves `bytes` would complete.
    /// Its transfer goes at the bandwidth of the moment it starts on the wire (after the
    /// transfers queued before it), so that a link that slows down slows the queue too.
    fn completion(&self, link: Link, began: Instant, bytes: usize) -> Instant {
        let ready = began + link.latency;
        if self.phases.len() == 1 && link.bandwidth.is_none() {
            return ready;
        }
        let mut wire = self.lock();
        let start = wire.free_at.max(ready);
        let Some(bandwidth) = self.link_at(start).bandwidth else {
            return ready;
        };
        wire.free_at = start + Duration::from_secs_f64(bytes as f64 / bandwidth);
        wire.free_at
    }
}

impl<S: Source + ?Sized> Source for Throttled<S> {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        let link = self.link_at(Instant::now());
        self.enter(link);
        let began = Instant::now();
        let result = self.inner.read(id, out);
        // A failed request still costs its round trip.
        let done = self.completion(link, began, out.len());
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
        self.leave(link);
        result
    }

    fn location(&self, id: SampleId) -> String {
        self.inner.location(id)
    }

    fn shard(&self, id: SampleId) -> Option<u32> {
        self.inner.shard(id)
    }

    fn shard_location(&self, shard: u32) -> String {
        self.inner.shard_location(shard)
    }

    fn set_group_memory(&self, bytes: u64) {
        self.inner.set_group_memory(bytes);
    }

    fn stats(&self) -> SourceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Serves `size` zero bytes per sample instantly and records peak concurrency.
    #[derive(Debug, Default)]
    struct Instant0 {
        size: usize,
        active: AtomicUsize,
        peak: AtomicUsize,
    }

    impl Source for Instant0 {
        fn read(&self, _: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            out.clear();
            out.resize(self.size, 0);
            std::thread::sleep(Duration::from_millis(1));
            self.active.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
        fn location(&self, id: SampleId) -> String {
            id.to_string()
        }
        fn stats(&self) -> SourceStats {
            SourceStats::default()
        }
    }

    /// Runs `reads` reads of the source from `threads` threads; the elapsed time.
    fn run(source: &Throttled<Instant0>, threads: usize, reads: usize) -> Duration {
        let started = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for id in (t..reads).step_by(threads) {
                        source.read(id as u64, &mut out).unwrap();
                    }
                });
            }
        });
        started.elapsed()
    }

    fn source(size: usize, link: Link) -> Throttled<Instant0> {
        Throttled::new(
            Arc::new(Instant0 {
                size,
                ..Instant0::default()
            }),
            link,
        )
    }

    #[test]
    fn bandwidth_is_shared_by_all_threads() {
        // Transfers queue on one wire: two 50 kB requests at 10 MB/s that start together
        // finish 5 and 10 ms later.
        let link = Link::bandwidth_mb(10.0);
        let throttled = source(50_000, link);
        let t = throttled.began + Duration::from_secs(1);
        assert_eq!(
            throttled.completion(link, t, 50_000),
            t + Duration::from_millis(5)
        );
        assert_eq!(
            throttled.completion(link, t, 50_000),
            t + Duration::from_millis(10)
        );
        // And the wait is real: 40 reads of 50 kB take at least 0.2 s, however many
        // threads ask (a bound from below: sleeps never end early).
        for threads in [1, 4] {
            let took = run(&source(50_000, link), threads, 40).as_secs_f64();
            assert!(took >= 0.19, "{threads} threads took {took:.3} s");
        }
    }

    #[test]
    fn latency_overlaps_across_requests_up_to_the_concurrency_limit() {
        let link = Link {
            latency: Duration::from_millis(20),
            concurrency: Some(4),
            ..Link::default()
        };
        let throttled = source(10, link);
        // Requests that start together complete together: latency overlaps.
        let t = throttled.began;
        for _ in 0..3 {
            assert_eq!(throttled.completion(link, t, 10), t + link.latency);
        }
        // Never more than 4 at once, from 8 threads.
        run(&throttled, 8, 16);
        assert!(throttled.inner.peak.load(Ordering::SeqCst) <= 4);
    }

    #[test]
    fn a_phased_link_serves_each_request_by_the_link_of_its_start() {
        let fast = Link::bandwidth_mb(80.0);
        let slow = Link::bandwidth_mb(5.0);
        let s = Duration::from_secs;
        let throttled = Throttled::phased(
            Arc::new(Instant0::default()),
            vec![(s(4), slow), (s(0), fast), (s(10), fast)],
        );
        let at = |secs: f64| throttled.began + Duration::from_secs_f64(secs);
        assert_eq!(throttled.link_at(at(0.0)), fast);
        assert_eq!(throttled.link_at(at(3.99)), fast);
        assert_eq!(throttled.link_at(at(4.0)), slow);
        assert_eq!(throttled.link_at(at(9.5)), slow);
        assert_eq!(throttled.link_at(at(60.0)), fast);
        // Phases from later on: unlimited before them.
        let later = Throttled::phased(Arc::new(Instant0::default()), vec![(s(1), slow)]);
        assert_eq!(later.link_at(later.began), Link::default());
        assert_eq!(later.link(), Link::default());
        // A 5 MB/s transfer of 50 kB takes 10 ms.
        let t = at(5.0);
        assert_eq!(
            throttled.completion(slow, t, 50_000),
            t + Duration::from_millis(10)
        );
        // A transfer queued at 80 MB/s that reaches the wire after the link slowed goes
        // at 5 MB/s: queued before 10 s, behind 2 s of others, it starts at 12 s.
        let queued = Throttled::phased(
            Arc::new(Instant0::default()),
            vec![(s(0), fast), (s(10), slow)],
        );
        let t = queued.began + Duration::from_millis(9_999);
        queued.lock().free_at = queued.began + s(12);
        assert_eq!(
            queued.completion(fast, t, 50_000),
            queued.began + s(12) + Duration::from_millis(10)
        );
    }
}
