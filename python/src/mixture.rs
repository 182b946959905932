//! `Loader([a, b], weights=...)`: the samples a mixture's epoch has delivered from each of
//! its datasets, for `metrics["sources"]`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Each dataset of a mixture: where it is, its weight, and what it delivered since the
/// iteration began.
pub(crate) struct SourceCounts {
    locations: Vec<String>,
    weights: Vec<Option<f64>>,
    /// Each dataset's first catalog id, and one past the last one's.
    offsets: Vec<u64>,
    delivered: Vec<u64>,
}

impl SourceCounts {
    /// For datasets at `locations` weighed `weights`, of `lens` samples each.
    pub(crate) fn new(locations: Vec<String>, weights: Vec<Option<f64>>, lens: &[usize]) -> Self {
        let mut offsets = vec![0u64];
        for &len in lens {
            offsets.push(offsets.last().expect("one") + len as u64);
        }
        SourceCounts {
            delivered: vec![0; locations.len()],
            locations,
            weights,
            offsets,
        }
    }

    /// Counts a batch of these catalog ids.
    pub(crate) fn count(&mut self, ids: &[u64]) {
        for &id in ids {
            let s = self.offsets.partition_point(|&o| o <= id) - 1;
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
        for (s, location) in self.locations.iter().enumerate() {
            let d = PyDict::new(py);
            d.set_item("location", location)?;
            let samples = self.offsets[s + 1] - self.offsets[s];
            d.set_item("weight", self.weights[s].unwrap_or(samples as f64))?;
            d.set_item("samples", samples)?;
            d.set_item("delivered", self.delivered[s])?;
            list.append(d)?;
        }
        Ok(list)
    }
}
