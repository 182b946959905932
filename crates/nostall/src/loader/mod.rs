//! The loader: one pool of workers, each fetching sample bytes along the plan or
//! preparing them straight into their slot of a batch buffer as its role says, and the
//! consumer receiving whole batches in plan order.
//!
//! ```text
//!  plan ─▶ fetch role ─▶ read-ahead (bytes, bounded) ─▶ prep role ─▶ slot of a batch
//!   │      (cache → storage)                               ▲                │
//!   └────────── claim: position + slot, in plan order ─────┘                │
//!                window of batch buffers (prefetch depth) ◀── consumer ◀────┘
//! ```
//!
//! One module per job: [`settings`](LoaderSettings) (every setting declared, typed, and
//! its text form), [`builder`](LoaderBuilder) (assembly), [`config`](LoaderConfig) (what
//! a loader runs with, and its validation), `loader` (a dataset, its cache and buffers),
//! `order` (claims, tentative positions and finalising: the protocol that keeps output in
//! plan order without copying), `workers` (the workers' fetch and prep work), `epoch`
//! (the consumer's side, which revises the prep role once a batch), `batch` and `buffer`
//! (pooled, aligned batch memory), `padding` (a detection batch cut to its largest
//! image, [`PadToLargest`]). What the workers decide (the reads in flight and the
//! read-ahead window, the role each takes, a rank's share of its node) is the scheduler's,
//! each decision with its mechanism ([`crate::sched`]). What a sample becomes is not the
//! pipeline's business: prep runs the loader's [`Pipeline`](crate::Pipeline) through its
//! [`Prep`](crate::prep::Prep).
//!
//! **Roles.** The fetch role wants as many workers as the bound on reads in flight asks
//! (Little's law: one per read for a source that reads one at a time, one per
//! [`Source::reads_at_once`](crate::storage::Source::reads_at_once) for one that keeps
//! several in flight); the prep role as many as the consumer's rate needs
//! (`sched/roles`), within the cores this process may use and a rank's share of
//! its node. A worker moves between roles as these change, between two pieces of work; a
//! worker is started only when the roles want more than there are.
//!
//! **Threads** outnumber cores (the fetch role's workers, mostly waiting on storage, and
//! the consumer beside the prep role's), so every wake-up preempts a preparing worker:
//! both the read-ahead and the ordering protocol wake threads in bursts, not once per
//! sample.
//!
//! **Randomness** of each sample's preparation comes from (seed, epoch, sample id), so it
//! does not matter which worker prepares it.

mod batch;
mod budget;
mod buffer;
mod builder;
mod checkpoint;
mod config;
mod device_queue;
mod epoch;
// The module is named for the type it holds, as tokio's `runtime::runtime`.
#[allow(clippy::module_inception)]
mod loader;
mod order;
mod padding;
mod quarantine;
mod settings;
#[cfg(test)]
mod tests;
mod warm;
mod workers;

pub use crate::env::usable_cores;
pub use batch::{Batch, BatchHeader};
pub use budget::MemoryPlan;
pub use buffer::{Arena, PageLock, SharedMemory};
pub use builder::{ForDevice, LoaderBuilder};
pub use checkpoint::{Checkpoint, RunIdentity};
pub use config::{ErrorPolicy, LoaderConfig};
pub use device_queue::{DeviceQueue, ToDecode};
pub use epoch::{Epoch, Next};
pub use loader::Loader;
pub use padding::{Cut, PadToLargest, PADDING_MASK};
pub use settings::{
    auto_threads, parse_bytes, LoaderSettings, PipelineSetting, Setting, SettingKind, Threads,
    DEFAULT_IMAGE_SIZE, KNOBS, SETTINGS,
};
