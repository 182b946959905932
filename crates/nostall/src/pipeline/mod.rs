//! The pipeline: fetch threads read sample bytes along the plan, prep threads prepare
//! them straight into their slot of a batch buffer, and the consumer receives whole
//! batches in plan order.
//!
//! ```text
//!  plan ─▶ fetch threads ─▶ read-ahead (bytes, bounded) ─▶ prep threads ─▶ slot of a batch
//!   │      (cache → storage)                                  ▲                  │
//!   └────────── claim: position + slot, in plan order ────────┘                  │
//!                window of batch buffers (prefetch depth) ◀── consumer ◀─────────┘
//! ```
//!
//! One module per job: [`builder`](LoaderBuilder) (assembly from text), [`config`](LoaderConfig) (settings and their validation), `loader`
//! (a dataset, its cache and buffers), `readahead` (bytes fetched ahead of prep, bounded
//! by an adaptive window), `order` (claims, tentative positions and finalising: the
//! protocol that keeps output in plan order without copying), `workers` (the fetch and
//! prep threads), `epoch` (the consumer's side), `batch` and `buffer` (pooled, aligned
//! batch memory). What a sample becomes is not the pipeline's business: prep threads run
//! the loader's [`Pipeline`](crate::Pipeline) through its [`Prep`](crate::prep::Prep).
//!
//! **Threads** outnumber cores (fetch threads and the consumer beside the prep threads),
//! so every wake-up preempts a prep thread: both the read-ahead and the ordering protocol
//! wake threads in bursts, not once per sample.
//!
//! **Randomness** of each sample's preparation comes from (seed, epoch, sample id), so it
//! does not matter which thread prepares it.

mod balance;
mod batch;
mod budget;
mod buffer;
mod builder;
mod checkpoint;
mod config;
mod epoch;
mod loader;
mod order;
mod quarantine;
mod readahead;
#[cfg(test)]
mod tests;
mod warm;
mod workers;

pub use batch::Batch;
pub use budget::MemoryPlan;
pub use buffer::{Arena, SharedMemory};
pub use builder::{auto_threads, usable_cores, LoaderBuilder, DEFAULT_IMAGE_SIZE, KNOBS};
pub use checkpoint::{Checkpoint, RunIdentity};
pub use config::{ErrorPolicy, LoaderConfig, MAX_BATCH_BYTES};
pub use epoch::{Epoch, Next};
pub use loader::Loader;
