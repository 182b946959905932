//! A loader's figures as Python dicts: an epoch's, and a partitioned cache's node.

use nostall::EpochStats;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// An epoch's figures (`Loader.stats()`, `Epoch` of the engine) as a dict.
pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &EpochStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("epoch", s.epoch)?;
    d.set_item("batches", s.batches)?;
    d.set_item("samples", s.samples)?;
    d.set_item("wall_s", s.wall.as_secs_f64())?;
    d.set_item("images_per_s", s.throughput())?;
    d.set_item("stall_s", s.wait.as_secs_f64())?;
    d.set_item("stall_fraction", s.stall_fraction())?;
    d.set_item("max_wait_s", s.max_wait.as_secs_f64())?;
    d.set_item("first_wait_s", s.first_wait.as_secs_f64())?;
    d.set_item("prepared_ahead", s.prepared_ahead)?;
    for (name, stage) in [("fetch", &s.fetch), ("prep", &s.prep)] {
        let st = PyDict::new(py);
        st.set_item("threads", stage.threads)?;
        st.set_item("busy_s", stage.busy.as_secs_f64())?;
        st.set_item("items", stage.items)?;
        st.set_item("bytes", stage.bytes)?;
        st.set_item("per_thread_per_s", stage.rate_per_thread())?;
        st.set_item("capacity_per_s", stage.capacity())?;
        d.set_item(name, st)?;
    }
    d.set_item("prep_starved_s", s.prep_starved.as_secs_f64())?;
    let c = PyDict::new(py);
    c.set_item("hits", s.cache.hits)?;
    c.set_item("misses", s.cache.misses)?;
    c.set_item("hit_bytes", s.cache.hit_bytes)?;
    c.set_item("miss_bytes", s.cache.miss_bytes)?;
    c.set_item("hit_rate", s.cache.hit_rate())?;
    c.set_item("entries", s.cache.entries)?;
    c.set_item("used_bytes", s.cache.used)?;
    c.set_item("capacity_bytes", s.cache.capacity)?;
    d.set_item("cache", c)?;
    let st = PyDict::new(py);
    st.set_item("bytes", s.storage.bytes)?;
    st.set_item("requests", s.storage.requests)?;
    d.set_item("storage", st)?;
    let r = PyDict::new(py);
    r.set_item("window_bytes", s.readahead.window)?;
    r.set_item("peak_bytes", s.readahead.peak)?;
    r.set_item("limit_bytes", s.readahead.limit)?;
    r.set_item("reads_in_flight", s.readahead.reads_in_flight)?;
    r.set_item("read_time_s", s.readahead.read_time.as_secs_f64())?;
    let tiers = PyDict::new(py);
    for tier in nostall::storage::Tier::ALL {
        let reads = s.readahead.by_tier[tier.index()];
        let t = PyDict::new(py);
        t.set_item("upcoming", reads.upcoming)?;
        t.set_item("read_time_s", reads.time.map(|time| time.as_secs_f64()))?;
        tiers.set_item(tier.name(), t)?;
    }
    r.set_item("tiers", tiers)?;
    d.set_item("readahead", r)?;
    let k = PyDict::new(py);
    for (cause, n) in &s.skipped {
        k.set_item(*cause, n)?;
    }
    d.set_item("skipped", k)?;
    d.set_item("skipped_total", s.skipped_total())?;
    let slowest = PyList::empty(py);
    for cost in &s.slowest {
        let c = PyDict::new(py);
        c.set_item("id", cost.id)?;
        c.set_item("location", &cost.location)?;
        c.set_item("fetch_s", cost.fetch.as_secs_f64())?;
        c.set_item("prep_s", cost.prep.as_secs_f64())?;
        slowest.append(c)?;
    }
    d.set_item("slowest", slowest)?;
    let shards = PyList::empty(py);
    for cost in &s.slowest_shards {
        let c = PyDict::new(py);
        c.set_item("shard", &cost.shard)?;
        c.set_item("samples", cost.samples)?;
        c.set_item("fetch_s", cost.fetch.as_secs_f64())?;
        c.set_item("prep_s", cost.prep.as_secs_f64())?;
        shards.append(c)?;
    }
    d.set_item("slowest_shards", shards)?;
    Ok(d)
}

/// A partitioned cache's counters since the node joined (all epochs).
pub(crate) fn node_dict<'py>(
    py: Python<'py>,
    s: &nostall_peer::NodeStats,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("local_samples", s.source.local_samples)?;
    d.set_item("local_bytes", s.source.local_bytes)?;
    d.set_item("peer_samples", s.source.peer_samples)?;
    d.set_item("peer_bytes", s.source.peer_bytes)?;
    d.set_item("storage_bytes", s.source.storage_bytes)?;
    d.set_item("fallbacks", s.source.fallbacks)?;
    d.set_item("peer_downs", s.source.peer_downs)?;
    d.set_item("peer_mismatches", s.source.peer_mismatches)?;
    d.set_item(
        "served_bytes",
        s.service.as_ref().map_or(0, |service| service.served_bytes),
    )?;
    d.set_item(
        "served_local_bytes",
        s.service
            .as_ref()
            .map_or(0, |service| service.served_local_bytes),
    )?;
    Ok(d)
}
