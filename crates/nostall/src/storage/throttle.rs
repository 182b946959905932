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
//! The inner read happens first, at full speed, and the caller is then held until the
//! moment the link would have delivered the bytes. Holding threads with `sleep` costs no
//! CPU, so throttled runs measure the loader, not the emulation.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Source, SourceStats};
use crate::catalog::SampleId;
use crate::error::Cause;

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

/// A source whose reads take as long as they would over a [`Link`].
#[derive(Debug)]
pub struct Throttled<S: ?Sized = dyn Source> {
    link: Link,
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
        Throttled {
            link,
            wire: Mutex::new(Wire {
                free_at: Instant::now(),
                active: 0,
            }),
            freed: Condvar::new(),
            inner,
        }
    }

    /// The link emulated.
    pub fn link(&self) -> Link {
        self.link
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wire> {
        self.wire.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a free request slot and takes it.
    fn enter(&self) {
        let Some(limit) = self.link.concurrency else {
            return;
        };
        let mut wire = self.lock();
        while wire.active >= limit.max(1) {
            wire = self.freed.wait(wire).unwrap_or_else(|e| e.into_inner());
        }
        wire.active += 1;
    }

    fn leave(&self) {
        if self.link.concurrency.is_some() {
            self.lock().active -= 1;
            self.freed.notify_one();
        }
    }

    /// When a request that began at `began` and moves `bytes` would complete.
    fn completion(&self, began: Instant, bytes: usize) -> Instant {
        let ready = began + self.link.latency;
        let Some(bandwidth) = self.link.bandwidth else {
            return ready;
        };
        let transfer = Duration::from_secs_f64(bytes as f64 / bandwidth);
        let mut wire = self.lock();
        let start = wire.free_at.max(ready);
        wire.free_at = start + transfer;
        wire.free_at
    }
}

impl<S: Source + ?Sized> Source for Throttled<S> {
    fn read(&self, id: SampleId, out: &mut Vec<u8>) -> Result<(), Cause> {
        self.enter();
        let began = Instant::now();
        let result = self.inner.read(id, out);
        // A failed request still costs its round trip.
        let done = self.completion(began, out.len());
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
        self.leave();
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
        // 40 reads of 50 kB over 10 MB/s: 0.2 s however many threads ask.
        let link = Link::bandwidth_mb(10.0);
        for threads in [1, 4] {
            let took = run(&source(50_000, link), threads, 40).as_secs_f64();
            assert!(
                (0.19..0.5).contains(&took),
                "{threads} threads took {took:.3} s"
            );
        }
    }

    #[test]
    fn latency_overlaps_across_threads_up_to_the_concurrency_limit() {
        let link = Link {
            latency: Duration::from_millis(20),
            concurrency: Some(4),
            ..Link::default()
        };
        let throttled = source(10, link);
        // 16 reads, 4 at a time, 20 ms each: about 80 ms, not 16 × 20.
        let took = run(&throttled, 8, 16).as_secs_f64();
        assert!((0.075..0.25).contains(&took), "took {took:.3} s");
        assert!(throttled.inner.peak.load(Ordering::SeqCst) <= 4);
    }
}
