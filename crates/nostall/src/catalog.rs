//! The sample index (being written).
pub type SampleId = u64;
