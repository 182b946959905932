//! `Loader([a, b], weights=...)`: the samples a mixture's epoch has delivered from each of
//! its datasets, for `metrics["sources"]`.

use nostall::plan::mixture::Mixture;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Each dataset of a mixture: where it is, its weight and size (the plan's mixture's),
/// and what it delivered since the iteration began.
pub(crate) struct SourceCounts {
    locations: Vec<String>,
    mixture: Mixture,
    delivered: Vec<u64>,
}

impl SourceCounts {
    /// For the datasets at `locations`, mixed as `mixture` mixes them.
    pub(crate) fn new(locations: Vec<String>, mixture: Mixture) -> Self {
        SourceCounts {
            delivered: vec![0; locations.len()],
            locations,
            mixture,
        }
    }

    /// Counts a batch of these catalog ids.
    pub(crate) fn count(&mut self, ids: &[u64]) {
        for (s, _) in ids.iter().filter_map(|&id| self.mixture.source_of(id)) {
            self.delivered[s] += 1;
        }
    }

    /// A new iteration: nothing delivered yet.
    pub(crate) fn restart(&mut self) {
        self.delivered.fill(0);
    }

    /// `[{"location", "weight", "samples", "delivered"}, ...]`.
    pub(crate) fn list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let sources = self.mixture.sources();
        for ((location, source), delivered) in
            self.locations.iter().zip(sources).zip(&self.delivered)
        {
            let d = PyDict::new(py);
            d.set_item("location", location)?;
            d.set_item("weight", source.weight)?;
            d.set_item("samples", source.len)?;
            d.set_item("delivered", delivered)?;
            list.append(d)?;
        }
        Ok(list)
    }
}
