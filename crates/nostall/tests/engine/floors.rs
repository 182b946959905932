//! The engine's modules are floors of a house: a module uses only modules on floors below
//! its own (docs/architecture.md, "The engine's modules"). This test reads every `crate::`
//! path in the engine's sources and fails on an arrow that runs back up, and on an item
//! named through the crate root (`crate::Cause`), which hides which floor it is on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module's floor; a module may use those on lower floors.
const FLOORS: &[(&str, u32)] = &[
    ("sample", 0),
    ("error", 1),
    ("rng", 1),
    ("clock", 1),
    ("env", 2),
    ("net", 2),
    ("catalog", 3),
    ("plan", 3),
    ("user_code", 3),
    ("prep", 4),
    ("storage", 5),
    ("dataset", 6),
    ("cache", 6),
    ("fields", 6),
    ("metrics", 7),
    ("sched", 8),
    ("sim", 8),
    ("loader", 9),
    ("device", 10),
];

fn floor(module: &str) -> Option<u32> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without its line comments (doc links name modules they do not use).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names following each `crate::` in `text`.
fn crate_paths(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .filter(|(at, _)| {
            // `nostall_peer::crate::` cannot occur; skip identifiers ending in "crate".
            text[..*at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(at, _)| {
            text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '{')
                .collect::<String>()
        })
        .collect()
}

#[test]
fn no_module_uses_one_on_a_floor_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut up = BTreeSet::new();
    let mut through_root = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue;
        }
        let Some(own) = floor(&top) else {
            unknown.insert(top);
            continue;
        };
        let text = code(&std::fs::read_to_string(file).unwrap());
        for path in crate_paths(&text) {
            if path.starts_with(|c: char| c.is_ascii_uppercase()) || path.starts_with('{') {
                through_root.insert(format!("{}: crate::{path}", relative.display()));
                continue;
            }
            match floor(&path) {
                Some(theirs) if path != top && theirs >= own => {
                    up.insert(format!(
                        "{} ({top}, floor {own}) uses {path} (floor {theirs})",
                        relative.display()
                    ));
                }
                None => {
                    unknown.insert(path);
                }
                _ => {}
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules with no floor: {unknown:?}; give each one"
    );
    assert!(
        through_root.is_empty(),
        "items named through the crate root: {through_root:?}"
    );
    assert!(
        up.is_empty(),
        "arrows running back up the house:\n{}",
        Vec::from_iter(up).join("\n")
    );
}
