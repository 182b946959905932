//! Samples left to a device's decoder, handed to it the moment prep threads leave them.
//!
//! A [`DecodeRoute`](crate::prep::route::DecodeRoute) leaves some JPEGs to the
//! device's decoder. Their batch reaches the consumer only once every one of its samples
//! is prepared; a device that waited for the batch before decoding them would decode
//! them while the consumer waits, on the consumer's thread, and its decoder would idle
//! between batches. With a [`DeviceQueue`] in the configuration each such sample is also
//! queued as its prep thread leaves it, so that the consumer's decoder (the Python
//! `Loader`'s device thread) takes them as they come, as many at a time as have come, and
//! a batch finds its samples already decoded.
//!
//! A sample is named by its epoch and id, which fix its augmentation (a preparer's draws
//! come from the seed, the epoch and the id): a sample prepared twice, in an epoch left
//! and run again, is the same either time, so the consumer may use either.
//!
//! The queue keeps what it is given until it is taken: a consumer that sets one up takes
//! from it for as long as the loader runs (what waits in it is then bounded by what the
//! prep threads may prepare ahead of the consumer: the batch buffers).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::prep::Deferred;
use crate::sample::SampleId;

/// A sample left to the device, with what names it.
#[derive(Debug, Clone)]
pub struct ToDecode {
    /// The epoch it was prepared for.
    pub epoch: u64,
    /// The sample.
    pub id: SampleId,
    /// Its encoded bytes and drawn augmentation (the bytes shared with its batch).
    pub sample: Deferred,
}

/// The samples left to a device, in the order prep threads left them (see the module
/// docs). Shared by the prep threads, which push, and the consumer's decoder, which takes.
#[derive(Debug, Default)]
pub struct DeviceQueue {
    waiting: Mutex<VecDeque<ToDecode>>,
    arrived: Condvar,
}

impl DeviceQueue {
    /// An empty queue.
    pub fn new() -> DeviceQueue {
        DeviceQueue::default()
    }

    /// Queues a sample a prep thread has just left to the device.
    pub(super) fn push(&self, item: ToDecode) {
        self.lock().push_back(item);
        self.arrived.notify_all();
    }

    /// Up to `max` samples, oldest first: those waiting, or, when none is, the first to
    /// come within `limit` (none if none comes).
    pub fn take(&self, max: usize, limit: Duration) -> Vec<ToDecode> {
        let waiting = self.lock();
        let (mut waiting, _) = self
            .arrived
            .wait_timeout_while(waiting, limit, |w| w.is_empty())
            .unwrap_or_else(|e| e.into_inner());
        let n = waiting.len().min(max);
        waiting.drain(..n).collect()
    }

    /// Samples waiting to be taken.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<ToDecode>> {
        // A panic elsewhere cannot leave the deque half-changed: each change is one call.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::prep::image::codec::Rect;
    use crate::prep::image::Geometry;

    fn item(id: SampleId) -> ToDecode {
        let geometry = Geometry {
            source: Rect::full(1, 1),
            width: 1,
            height: 1,
            flip: false,
            filter: Default::default(),
            bound: None,
        };
        ToDecode {
            epoch: 0,
            id,
            sample: Deferred {
                data: Arc::from(id.to_le_bytes().as_slice()),
                geometry,
            },
        }
    }

    #[test]
    fn takes_what_waits_oldest_first_up_to_the_most_asked() {
        let queue = DeviceQueue::new();
        for id in 0..5 {
            queue.push(item(id));
        }
        let ids = |taken: Vec<ToDecode>| taken.iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(queue.take(3, Duration::ZERO)), [0, 1, 2]);
        assert_eq!(ids(queue.take(8, Duration::ZERO)), [3, 4]);
        assert!(queue.take(8, Duration::ZERO).is_empty() && queue.is_empty());
    }

    #[test]
    fn a_taker_waiting_on_an_empty_queue_receives_the_next_pushed() {
        let queue = Arc::new(DeviceQueue::new());
        let taker = {
            let queue = queue.clone();
            // Generous: the verdict is the sample received, not when.
            std::thread::spawn(move || queue.take(4, Duration::from_secs(60)))
        };
        queue.push(item(7));
        // Pushed before or after the taker began to wait, the sample reaches it.
        let taken = taker.join().unwrap();
        assert_eq!(taken.iter().map(|t| t.id).collect::<Vec<_>>(), [7]);
    }
}
