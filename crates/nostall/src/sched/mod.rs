//! Scheduling: what the loader's workers do, each decision in a folder of its own that
//! holds its policy (`mod.rs`) and the mechanism that carries it out.
//!
//! - `reads`: how many reads are in flight (Little's law), and `reads::readahead`, the
//!   window of bytes fetched ahead of prep and the reads under its bound.
//! - `roles`: how many workers prepare, from online estimates through the rate model,
//!   and `roles::table`, the table each worker asks for its role.
//! - `balance`: the node's prep threads shared among a job's local ranks by demand, and
//!   `balance::share`, one rank's side of it.
//!
//! `cpu` is the process's CPU budget (its cgroup quota, as a fraction of cores) and the
//! CPU it used, for decisions held to the budget.
//!
//! `model` is the rate model that says what limits throughput and what would remove a
//! stall: one implementation serves both `nostall analyze` (which validates it against
//! the real loader) and the runtime decisions. `schedule` is the seam an epoch asks for
//! its decisions: the static configuration as one implementation, the adaptive as
//! another. Everything here sits below the loader (`pipeline`), which runs the workers.
//! (Which images a device decodes is the preparer's route, [`crate::prep::route`], which
//! prep asks per image: below the scheduler.)

pub(crate) mod balance;
pub mod cpu;
pub mod model;
pub(crate) mod reads;
pub(crate) mod roles;
pub(crate) mod schedule;
