//! Scheduling: the rate model that says what limits throughput and what would remove a
//! stall. It sits below the pipeline so that one implementation serves both
//! `nostall analyze` (which validates it against the real loader) and a runtime scheduler
//! deciding thread roles from online estimates (`roles`) and the reads in flight
//! (`reads`, the fetch controller's decisions). `node` balances the prep
//! threads of a node among the local ranks of a job. `schedule` is the seam an epoch
//! asks for its decisions: the static configuration as one implementation, the adaptive
//! as another. (Which images a device decodes is the preparer's route,
//! [`crate::prep::route`], which prep asks per image: below the scheduler.)

pub mod model;
pub(crate) mod node;
pub(crate) mod reads;
pub(crate) mod roles;
pub(crate) mod schedule;
