//! nostall's built-in demo dataset: a few real photographs (GPL-2+, sources in
//! `assets/demo/README.md`) in four classes, embedded at build time so that the demo
//! command and the Python package run on a fresh machine with no data to find.

use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/demo_photos.rs"));

/// The class names, in order.
pub fn classes() -> Vec<&'static str> {
    let mut classes: Vec<_> = PHOTOS
        .iter()
        .filter_map(|(name, _)| name.split('/').next())
        .collect();
    classes.dedup();
    classes
}

/// Where [`write`] puts the photographs by default: a folder in the temporary directory,
/// one per nostall version.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("nostall-demo-{}", env!("CARGO_PKG_VERSION")))
}

/// Writes the photographs in ImageFolder layout under `dir` and returns it. Files already
/// there with the right size are kept, so repeated calls cost a few `stat`s.
///
/// # Errors
///
/// [`nostall::Error::Io`] naming the path that cannot be written, and
/// [`nostall::Error::Config`] if this build embedded no photographs.
pub fn write(dir: &Path) -> nostall::Result<PathBuf> {
    if PHOTOS.is_empty() {
        return Err(nostall::Error::Config(
            "this build has no demo photographs (crates/nostall-demo/assets/demo was empty)".into(),
        ));
    }
    for (name, bytes) in PHOTOS {
        let path = dir.join(name);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
            continue;
        }
        let parent = path.parent().expect("class directory");
        std::fs::create_dir_all(parent).map_err(|e| nostall::Error::Io {
            path: parent.into(),
            source: e,
        })?;
        std::fs::write(&path, bytes).map_err(|e| nostall::Error::Io {
            path: path.clone(),
            source: e,
        })?;
    }
    Ok(dir.to_path_buf())
}
