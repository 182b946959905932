//! The node agent of nostall: jobs on one node share one stream of batches (CoorDL's
//! coordinated prep).
//!
//! Hyper-parameter search runs many jobs over the same data on one server; each would
//! read and prepare every sample itself. Through the agent, jobs that read the same
//! dataset with the same pipeline, seed and batch size form a *group*: each batch is
//! fetched and prepared once, by the agent, into shared memory, and every job of the
//! group receives it, without a copy.
//!
//! # Layers
//!
//! - `socket`: a Unix-domain socket of sequenced packets;
//!   memfds travel beside messages; the peer's user is checked by its credentials on both
//!   ends. `attachment`: bytes too large for a message (a job's tokenizers) in a memfd.
//! - `wire`: the messages (hello, next, release; welcome, batch, end, failed), every
//!   length bounded and checked.
//! - `group`: one group's stream: a producer thread runs an ordinary
//!   [`nostall::Loader`] whose batch buffers are shared memory
//!   ([`nostall::loader::Arena::Shared`]); batches are staged in order, at most a
//!   window of them, until every member has passed them; members hold leases.
//! - [`Agent`]: the process: its socket, the groups by name, a thread per job.
//! - [`Client`]: a job's side: attach, ask for the batch at a position, map buffers
//!   (`mapping`: kept from one batch of a buffer to the next, the pages a job changed
//!   dropped between); a [`SharedBatch`] releases its buffer when dropped.
//! - [`job`]: a training job assembled in one place: the dataset, its peers (a rank of a
//!   partitioned cache), the agent's group, and its own loader. The command line and the
//!   Python bindings call [`JobBuilder::start`] and only convert their arguments; the
//!   agent joins a node for its local ranks with the same step.
//!
//! # Guarantees
//!
//! - Every member receives every batch of an epoch once, in the order its own loader
//!   would have given (the group's loader is the same loader).
//! - No member can stall the others for longer than a lease: one that dies is gone with
//!   its connection; one that stops or falls a whole staging window behind without asking
//!   for a batch for a lease (2 s) is detached. If it comes back, it reads on from exactly
//!   where it was, on a stream of its own, and rejoins at an epoch's start.
//! - A job joins where the group can serve it exactly (a position still staged, the next
//!   one made, or the next epoch's start); before that it reads privately.
//! - Only the agent's user reaches it: the socket's directory is that user's alone (0700)
//!   and every connection's credentials are checked; messages and held batches are
//!   bounded, and a malformed request ends that connection only.

mod attachment;
mod client;
mod group;
mod held;
pub mod job;
mod mapping;
mod node;
mod place;
mod server;
mod socket;
mod wire;

pub use client::{AgentError, Attached, Client, Reading, SharedBatch};
pub use group::GroupStats;
pub use job::{Job, JobBuilder, JobError, Share};
pub use place::{default_socket, private_dir};
pub use server::{Agent, AgentConfig, AgentStats};
#[doc(hidden)]
pub use wire::parse_for_fuzzing;
pub use wire::{SampleFailure, MAX_BATCH, PROTOCOL};

#[cfg(test)]
#[path = "../../nostall-peer/tests/common/mod.rs"]
mod test_common;
#[cfg(test)]
mod tests;
