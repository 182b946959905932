//! `nostall index DIR`: scan once, then every later start loads the index in milliseconds.

use std::path::Path;
use std::time::Instant;

use nostall::catalog::{Catalog, Opened};
use nostall::Modality;

pub(crate) fn run(dir: &Path, index: Option<&Path>, modality: Modality) -> nostall::Result<()> {
    let started = Instant::now();
    let (catalog, opened) = Catalog::open(dir, index, modality)?;
    let took = started.elapsed();
    let how = match opened {
        Opened::Loaded => "loaded the existing index",
        Opened::Scanned => "scanned the directory",
    };
    let path = index.map_or_else(
        || Catalog::default_index_path(dir, modality),
        Path::to_path_buf,
    );
    println!(
        "{}: {} samples, {} classes, {:.1} MB",
        dir.display(),
        catalog.len(),
        catalog.classes().len(),
        catalog.total_bytes() as f64 / 1e6
    );
    println!(
        "{how} in {:.1} ms; index at {}",
        took.as_secs_f64() * 1e3,
        path.display()
    );
    Ok(())
}
