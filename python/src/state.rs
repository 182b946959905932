//! A loader's saved state as Python holds it: the dict `state_dict()` returns, and what
//! `load_state_dict()` takes (that dict, or a list of them: every rank's).
//!
//! Plain ints, lists and dicts only, so that `torch.save`, JSON or any checkpointing
//! library can store it. The engine checks what the values mean ([`Loader::resolve`]);
//! this module only converts them, naming a missing or mistyped key.
//!
//! [`Loader::resolve`]: nostall::Loader::resolve

use std::collections::{BTreeMap, HashMap};

use nostall::plan::elastic::Stretch;
use nostall::{Checkpoint, Position, RunIdentity};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{config_error, raise};

/// `checkpoint` as the dict `state_dict()` returns.
pub(crate) fn to_dict<'py>(
    py: Python<'py>,
    checkpoint: &Checkpoint,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let p = checkpoint.position;
    d.set_item("epoch", p.epoch)?;
    d.set_item("batch", p.batch)?;
    d.set_item("sample", p.sample)?;
    d.set_item("rank", checkpoint.rank)?;
    let identity = PyDict::new(py);
    for (name, value) in checkpoint.identity.fields() {
        identity.set_item(name, value)?;
    }
    d.set_item("identity", identity)?;
    let skipped = PyDict::new(py);
    for (kind, count) in &checkpoint.skipped {
        skipped.set_item(kind, count)?;
    }
    d.set_item("skipped", skipped)?;
    let history = PyList::empty(py);
    for stretch in &checkpoint.history {
        let s = PyDict::new(py);
        s.set_item("world", stretch.world)?;
        s.set_item("batches", stretch.batches)?;
        s.set_item("consumed", stretch.consumed.clone())?;
        history.append(s)?;
    }
    d.set_item("history", history)?;
    Ok(d)
}

/// The states given to `load_state_dict`: one rank's dict, or a list of dicts.
pub(crate) fn from_python(py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<Vec<Checkpoint>> {
    if let Ok(list) = state.cast::<PyList>() {
        if list.is_empty() {
            return Err(config_error(
                py,
                "load_state_dict got an empty list: give a state_dict() or every rank's".into(),
            ));
        }
        return list.iter().map(|s| checkpoint(py, &s)).collect();
    }
    Ok(vec![checkpoint(py, state)?])
}

fn checkpoint(py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<Checkpoint> {
    let lacks = |key: &str| {
        config_error(
            py,
            format!("state dict lacks {key:?}: give the dict that state_dict() returned"),
        )
    };
    let state = state.cast::<PyDict>().map_err(|_| {
        config_error(
            py,
            "load_state_dict takes the dict state_dict() returned, or a list of them".into(),
        )
    })?;
    let get = |key: &str| -> PyResult<u64> {
        whole(py, &state.get_item(key)?.ok_or_else(|| lacks(key))?, key)
    };
    let position = Position {
        epoch: get("epoch")?,
        batch: get("batch")?,
        sample: get("sample")?,
    };
    let saved = state
        .get_item("identity")?
        .ok_or_else(|| lacks("identity"))?;
    let saved = saved
        .cast::<PyDict>()
        .map_err(|_| config_error(py, "the saved state's identity is not a dict".into()))?;
    let mut values = HashMap::new();
    for name in RunIdentity::FIELDS {
        if let Some(value) = saved.get_item(name)? {
            values.insert(name, whole(py, &value, &format!("identity.{name}"))?);
        }
    }
    let identity =
        RunIdentity::from_fields(|name| values.get(name).copied()).map_err(|e| raise(py, e))?;
    let mut skipped = BTreeMap::new();
    if let Some(counts) = state.get_item("skipped")? {
        let counts = counts
            .cast::<PyDict>()
            .map_err(|_| config_error(py, "the saved state's skipped is not a dict".into()))?;
        for (kind, count) in counts.iter() {
            let kind: String = kind.extract().map_err(|_| {
                config_error(
                    py,
                    "the saved state's skipped has a key that is not text".into(),
                )
            })?;
            let kind = nostall::Cause::kind_named(&kind).ok_or_else(|| {
                config_error(
                    py,
                    format!("state dict counts skips of an unknown cause {kind:?}"),
                )
            })?;
            skipped.insert(kind, whole(py, &count, &format!("skipped[{kind:?}]"))?);
        }
    }
    let mut history = Vec::new();
    if let Some(stretches) = state.get_item("history")? {
        let not = |what: &str| config_error(py, format!("the saved state's {what}"));
        let stretches = stretches
            .cast::<PyList>()
            .map_err(|_| not("history is not a list"))?;
        for (i, s) in stretches.iter().enumerate() {
            let s = s
                .cast::<PyDict>()
                .map_err(|_| not(&format!("history[{i}] is not a dict")))?;
            let get = |key: &str| s.get_item(key)?.ok_or_else(|| lacks(key));
            let consumed = get("consumed")?;
            let consumed = if consumed.is_none() {
                None
            } else {
                let counts = consumed
                    .cast::<PyList>()
                    .map_err(|_| not(&format!("history[{i}].consumed is not a list")))?;
                let field = format!("history[{i}].consumed");
                Some(
                    counts
                        .iter()
                        .map(|n| whole(py, &n, &field))
                        .collect::<PyResult<Vec<u64>>>()?,
                )
            };
            history.push(Stretch {
                world: whole(py, &get("world")?, &format!("history[{i}].world"))?,
                batches: whole(py, &get("batches")?, &format!("history[{i}].batches"))?,
                consumed,
            });
        }
    }
    Ok(Checkpoint {
        position,
        identity,
        // A state without a rank (saved before ranks were recorded) counts as rank 0's;
        // the rank only matters when every rank's state is given.
        rank: state
            .get_item("rank")?
            .map_or(Ok(0), |r| whole(py, &r, "rank"))?,
        skipped,
        history,
    })
}

/// A whole number of the saved state, or a `ConfigError` naming `field`.
fn whole(py: Python<'_>, value: &Bound<'_, PyAny>, field: &str) -> PyResult<u64> {
    value.extract::<u64>().map_err(|_| {
        let shown = value
            .repr()
            .map_or_else(|_| "?".into(), |r| r.to_string_lossy().into_owned());
        let shown: String = shown.chars().take(40).collect();
        config_error(
            py,
            format!(
                "the saved state's {field} is {shown}, and state_dict() saves a whole number \
                 0 or more there: give the state it returned, unchanged"
            ),
        )
    })
}
