//! What both ends must agree on before a client takes a preparer's batches: the same
//! dataset, settings and rank, and batches of the same bytes.

use nostall::Loader;

/// A loader's description, as (name, value) pairs: its run identity (dataset, pipeline,
/// seed, batch size, world size, plan, layout, groups), its rank, and a sample's bytes.
pub(crate) fn describe(loader: &Loader) -> Vec<(String, u64)> {
    let mut description: Vec<(String, u64)> = loader
        .identity()
        .fields()
        .iter()
        .map(|&(name, value)| (name.to_owned(), value))
        .collect();
    let config = loader.config();
    description.push(("rank".into(), config.plan.rank as u64));
    description.push(("sample_bytes".into(), config.pipeline.sample_bytes() as u64));
    description
}

/// The first thing `theirs` describes otherwise than `ours`, in words; `None` when they
/// agree.
pub(crate) fn differs(ours: &[(String, u64)], theirs: &[(String, u64)]) -> Option<String> {
    for (name, value) in ours {
        match theirs.iter().find(|(n, _)| n == name) {
            None => return Some(format!("it does not say its {name}")),
            Some((_, v)) if v != value => {
                return Some(format!("its {name} is {v}, this loader's {value}"))
            }
            Some(_) => {}
        }
    }
    None
}
