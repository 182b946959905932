//! The hand-off of shared batches (`share=`): a thread of the loader's receives the next
//! batch from the node agent and makes its Python objects (DLPack capsules, tensors)
//! while the training step runs, so that `next()` takes a finished pair.
//!
//! Why a thread: whatever `next()` runs after a training step runs from cold caches. On a
//! small VM the first `torch.from_dlpack` after a step takes tens of microseconds however
//! small its array, against 1.5 µs in a loop, and a receive and two conversions add up to
//! over 100 µs; taking a finished pair from a slot costs a few (docs/agent.md has the
//! figures). It is the pin-memory thread of PyTorch's DataLoader.
//!
//! One batch is made ahead, no more: the thread waits for `next()` to take it before it
//! receives the next (the agent's credit covers the batch trained on, this one and one
//! waiting in the socket). The pair carries its position and figures, so that positions
//! and figures follow the batches taken, not those made; the consumer's wait is timed by
//! `next()`, not by the thread.
//!
//! The thread holds the GIL only while it makes the objects. It is stopped, and joined
//! with the GIL released, when the loader moves to another position, is dropped, or the
//! interpreter exits: an `atexit` hook ([`stop_at_exit`]) stops every hand-off thread
//! before finalisation, after which a thread could not take the GIL, and no more start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use nostall::Position;
use nostall_agent::{AgentError, Client, GroupStats, SharedBatch};
use nostall_peer::NodeStats;
use pyo3::prelude::*;

/// Makes a shared batch's `(images, labels)` objects, as the loader's `output` asks.
pub(crate) type Make =
    Arc<dyn Fn(Python<'_>, SharedBatch) -> PyResult<(Py<PyAny>, Py<PyAny>)> + Send + Sync>;

/// What the thread made of the next position.
pub(crate) enum Made {
    Batch(Box<Received>),
    /// The epoch's end.
    End,
    /// The agent failed the request, or is gone.
    Failed(AgentError),
}

/// A batch received and made into Python objects, with what `next()` records of it.
pub(crate) struct Received {
    pub(crate) objects: PyResult<(Py<PyAny>, Py<PyAny>)>,
    pub(crate) position: Position,
    pub(crate) ids: Vec<u64>,
    pub(crate) len: usize,
    pub(crate) from_group: bool,
    /// The group's figures as the batch brought them, and the batch's bytes.
    pub(crate) group: (GroupStats, u64),
    pub(crate) node: Option<NodeStats>,
}

impl Received {
    fn make(batch: SharedBatch, make: &Make) -> Received {
        let (position, ids, len) = (batch.position(), batch.ids().to_vec(), batch.len());
        let (from_group, node) = (batch.from_group(), batch.node());
        let group = (*batch.group(), batch.data().len() as u64);
        Received {
            objects: Python::attach(|py| make(py, batch)),
            position,
            ids,
            len,
            from_group,
            group,
            node,
        }
    }
}

/// Between the thread and `next()`.
#[derive(Default)]
struct Slot {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Made and not taken yet.
    made: Option<Made>,
    /// The thread is to stop (the loader moves elsewhere, is dropped, or Python exits).
    stop: bool,
    /// The thread has stopped.
    done: bool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopping(&self) -> bool {
        self.lock().stop
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }

    /// Waits until the slot is empty: false if the thread is to stop instead. `next()`
    /// does not wake the thread as it takes a batch (a wake-up is a system call, and on a
    /// VM an interrupt to another CPU, in the middle of the hand-off): the thread looks
    /// again every [`LOOK_AGAIN`], and is woken only by a `next()` that finds nothing to
    /// take, or by a stop.
    fn wait_taken(&self) -> bool {
        let mut st = self.lock();
        while st.made.is_some() && !st.stop {
            st = self
                .changed
                .wait_timeout(st, LOOK_AGAIN)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        !st.stop
    }

    fn put(&self, made: Made) {
        self.lock().made = Some(made);
        self.changed.notify_all();
    }

    fn wait_done(&self) {
        let mut st = self.lock();
        while !st.done {
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Marks the thread done however it ends, a panic included: `next()` must not wait for
/// a batch that will never come.
struct Finish(Arc<Slot>);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.lock().done = true;
        self.0.changed.notify_all();
    }
}

/// A running hand-off thread, from the position the next batch it makes starts at.
pub(crate) struct Handoff {
    slot: Arc<Slot>,
    thread: Option<JoinHandle<Client>>,
    /// Where the batch it makes next starts.
    pub(crate) at: Position,
}

/// Set by [`stop_at_exit`]: no hand-off thread starts after it.
static EXITING: AtomicBool = AtomicBool::new(false);

/// The slots of the running threads, for [`stop_at_exit`].
static RUNNING: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());

/// How often the thread looks whether its batch was taken.
const LOOK_AGAIN: Duration = Duration::from_millis(2);

/// How often a wait for the made batch checks for signals (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

impl Handoff {
    /// Starts the thread making the batches of `client`'s stream from `at`; the client is
    /// given back (`Err`) when no thread can start: the interpreter is exiting, or the
    /// system refuses a thread.
    pub(crate) fn start(
        _py: Python<'_>,
        client: Client,
        at: Position,
        make: Make,
    ) -> Result<Handoff, Box<(Client, String)>> {
        if EXITING.load(Ordering::Acquire) {
            return Err(Box::new((
                client,
                "the Python interpreter is exiting".into(),
            )));
        }
        let slot = Arc::new(Slot::default());
        // Taken by the thread as it starts; still here if it cannot start.
        let handed = Arc::new(Mutex::new(Some(client)));
        let spawned = {
            let (slot, handed) = (slot.clone(), handed.clone());
            std::thread::Builder::new()
                .name("nostall-handoff".into())
                .spawn(move || {
                    let client = handed.lock().unwrap_or_else(|e| e.into_inner()).take();
                    let client = client.expect("the client is handed to the thread once");
                    run(client, at, &make, slot)
                })
        };
        match spawned {
            Ok(thread) => {
                // Registered once running (`stop_at_exit` waits for it to end); the GIL,
                // held here and there, keeps the two apart.
                let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
                running.retain(|s| s.strong_count() > 0);
                running.push(Arc::downgrade(&slot));
                Ok(Handoff {
                    slot,
                    thread: Some(thread),
                    at,
                })
            }
            Err(e) => {
                let client = handed.lock().unwrap_or_else(|e| e.into_inner()).take();
                let client = client.expect("a thread that did not start took nothing");
                Err(Box::new((client, format!("cannot start a thread: {e}"))))
            }
        }
    }

    /// The next batch made (None if the thread ended without making it: a bug, it
    /// panicked), waiting for it with the GIL released; a signal (Ctrl-C) raises and
    /// leaves the thread receiving, for the next call.
    pub(crate) fn take(&mut self, py: Python<'_>) -> PyResult<Option<Made>> {
        loop {
            // Taken with the GIL held: released here, it would let the thread, woken by
            // the empty slot, take it to make the next batch while `next()` waits.
            let mut st = self.slot.lock();
            if let Some(made) = st.made.take() {
                drop(st);
                if let Made::Batch(received) = &made {
                    self.at = received.position;
                }
                return Ok(Some(made));
            }
            if st.done {
                return Ok(None);
            }
            drop(st);
            self.slot.changed.notify_all(); // a thread that has not looked again yet
            let slot = &self.slot;
            py.detach(|| {
                let st = slot.lock();
                if st.made.is_none() && !st.done {
                    drop(slot.changed.wait_timeout(st, SIGNAL_CHECK));
                }
            });
            py.check_signals()?;
        }
    }

    /// Stops the thread and gives its client back (None if the thread panicked); a batch
    /// made and not taken is dropped (released to the agent).
    pub(crate) fn stop(mut self, py: Python<'_>) -> Option<Client> {
        self.join(py)
    }

    fn join(&mut self, py: Python<'_>) -> Option<Client> {
        self.slot.stop();
        let thread = self.thread.take()?;
        // The thread may wait for the GIL to make its last batch.
        let client = py.detach(|| thread.join()).ok();
        let unread = self.slot.lock().made.take();
        drop(unread); // with the GIL: it may hold Python objects
        client
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if self.thread.is_some() {
            Python::attach(|py| drop(self.join(py)));
        }
    }
}

/// The thread: receives each batch once the one before is taken, makes its objects and
/// leaves them in the slot, until the epoch ends, the agent fails, or it is stopped.
fn run(mut client: Client, mut at: Position, make: &Make, slot: Arc<Slot>) -> Client {
    let _finish = Finish(slot.clone());
    while slot.wait_taken() {
        let made = match client.next_while(at, &mut || !slot.stopping()) {
            Err(AgentError::Interrupted) => break, // stopped
            Err(e) => Made::Failed(e),
            Ok(None) => Made::End,
            Ok(Some(batch)) => {
                at = batch.position();
                // Not after `stop_at_exit` has let the interpreter go on to finalise.
                if slot.stopping() {
                    break; // the batch is released as it drops
                }
                Made::Batch(Box::new(Received::make(batch, make)))
            }
        };
        let last = !matches!(made, Made::Batch(_));
        slot.put(made);
        if last {
            break;
        }
    }
    client
}

/// `atexit`: stops every hand-off thread and waits for them, with the GIL released (a
/// thread may be waiting for it to make its last batch), before the interpreter
/// finalises; no thread starts after it.
#[pyfunction]
pub(crate) fn stop_at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::Release);
    let slots: Vec<Arc<Slot>> = RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .filter_map(|s| s.upgrade())
        .collect();
    for slot in &slots {
        slot.stop();
    }
    py.detach(|| slots.iter().for_each(|s| s.wait_done()));
}
