//! What `demo` and `bench` share: building a loader from options, and driving an epoch
//! with a progress bar.

use std::path::Path;
use std::sync::Arc;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use nostall::catalog::Catalog;
use nostall::storage::{LocalFiles, ReadMode};
use nostall::{EpochStats, ErrorPolicy, Loader, LoaderConfig, Pipeline};

/// The preset pipelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// RandomResizedCrop, horizontal flip, normalise: f32 CHW.
    Train,
    /// Resize to 256/224 of the size, centre crop, normalise: f32 CHW.
    Val,
}

impl Preset {
    pub fn pipeline(self, size: u32) -> Pipeline {
        match self {
            Preset::Train => Pipeline::imagenet_train(size),
            Preset::Val => Pipeline::imagenet_val(size),
        }
    }
}

/// Loader settings common to the subcommands.
pub struct Settings {
    pub preset: Preset,
    pub size: u32,
    pub batch_size: usize,
    pub prep_threads: usize,
    pub fetch_threads: usize,
    pub seed: u64,
    pub skip_bad: bool,
    pub cold: bool,
}

pub fn open_loader(dir: &Path, s: &Settings) -> nostall::Result<Loader> {
    let (catalog, _) = Catalog::open(dir, None)?;
    let catalog = Arc::new(catalog);
    let mode = if s.cold {
        ReadMode::Cold
    } else {
        ReadMode::Cached
    };
    let source = Arc::new(LocalFiles::new(catalog.clone(), mode));
    let mut config = LoaderConfig::new(s.preset.pipeline(s.size));
    config.plan.batch_size = s.batch_size;
    config.plan.seed = s.seed;
    config.prep_threads = s.prep_threads;
    config.fetch_threads = s.fetch_threads;
    config.on_error = if s.skip_bad {
        ErrorPolicy::Skip
    } else {
        ErrorPolicy::Error
    };
    Loader::new(catalog, source, config)
}

/// Runs one epoch to the end, showing progress unless `quiet`. With a `model_rate`
/// (images/s), each batch is followed by a simulated training step of that speed, so the
/// stall shows what a GPU of that speed would wait.
pub fn drive_epoch(
    loader: &Loader,
    epoch: u64,
    quiet: bool,
    model_rate: Option<f64>,
) -> nostall::Result<EpochStats> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(loader.batches_per_epoch() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "epoch {prefix} [{bar:30}] {pos}/{len} batches {per_sec} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(epoch.to_string());
    let mut batches = loader.epoch(epoch)?;
    for batch in batches.by_ref() {
        let batch = batch?;
        if let Some(rate) = model_rate {
            std::thread::sleep(std::time::Duration::from_secs_f64(
                batch.len() as f64 / rate,
            ));
        }
        bar.inc(1);
        bar.set_message(format!("waited {:.1} ms", batch.wait().as_secs_f64() * 1e3));
    }
    bar.finish_and_clear();
    Ok(batches.stats())
}

/// Peak and current resident memory of this process, in MB, from /proc.
pub fn memory_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}
