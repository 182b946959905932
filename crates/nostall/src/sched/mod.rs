//! Scheduling: the rate model that says what limits throughput and what would remove a
//! stall. It sits below the pipeline so that one implementation serves both
//! `nostall analyze` (which validates it against the real loader) and a runtime scheduler
//! deciding thread roles from online estimates (`roles`) and the reads in flight
//! (`reads`, the fetch controller's decisions). `node` balances the prep
//! threads of a node among the local ranks of a job. [`offload`] decides which images a
//! device decodes instead of a prep thread. `schedule` is the seam an epoch asks for
//! its decisions: the static configuration as one implementation, the adaptive as
//! another.

pub mod model;
pub(crate) mod node;
pub mod offload;
pub(crate) mod reads;
pub(crate) mod roles;
pub(crate) mod schedule;
