//! What the subcommands share: loader settings from options, and driving an epoch with a
//! progress bar.

use std::time::{Duration, Instant};

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use nostall::cache::{CacheConfig, CacheFill, CachePolicy, Capacity};
use nostall::dataset::LabelColumn;
use nostall::loader::{LoaderSettings, PipelineSetting, Threads};
use nostall::storage::Link;
use nostall::{EpochStats, ErrorPolicy, Loader};

/// The preset pipelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Preset {
    /// Images: RandomResizedCrop, horizontal flip, normalise: f32 CHW.
    Train,
    /// Images: resize to 256/224 of the size, centre crop, normalise: f32 CHW.
    Val,
    /// Audio (the data-stall paper's M5 input): mono, 8 kHz, a random 32 000-sample crop.
    M5,
    /// Audio: mono, 16 kHz, a random 4 s crop, 64 log-mel bands (25 ms windows, 10 ms hop).
    Melspec,
}

impl Preset {
    /// The preset's name, as the engine reads it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Preset::Train => "train",
            Preset::Val => "val",
            Preset::M5 => "m5",
            Preset::Melspec => "melspec",
        }
    }

    /// Whether it prepares images (and takes an output size).
    fn is_image(self) -> bool {
        matches!(self, Preset::Train | Preset::Val)
    }
}

/// How the pipeline is given on the command line: a preset, or operators.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PipelineArgs {
    /// Pipeline preset (images: train, val; audio: m5, melspec).
    #[arg(long, value_enum, default_value_t = Preset::Train)]
    pub preset: Preset,
    /// Operators instead of a preset, as Python writes a list of them: '[Resize(256),
    /// CenterCrop(224)]' (nostall.ops for images, nostall.audio for audio).
    #[arg(long, conflicts_with_all = ["preset", "size"], value_parser = parsed::<PipelineSetting>)]
    pub pipeline: Option<PipelineSetting>,
    /// Output height and width of the image presets.
    #[arg(long, default_value_t = 224)]
    pub size: u32,
}

impl PipelineArgs {
    /// The ImageNet training preset at 224 pixels.
    pub(crate) fn train() -> PipelineArgs {
        PipelineArgs {
            preset: Preset::Train,
            pipeline: None,
            size: 224,
        }
    }

    /// The pipeline in a word, for reports: the preset's, or "operators".
    pub(crate) fn name(&self) -> String {
        match self.pipeline {
            Some(_) => "operators".into(),
            None => format!("{:?}", self.preset),
        }
    }

    /// Sets the pipeline of `settings` as the options say.
    fn apply(&self, settings: &mut LoaderSettings) {
        match &self.pipeline {
            Some(operators) => settings.pipeline = operators.clone(),
            None => {
                settings.pipeline = PipelineSetting::Preset(self.preset.name().into());
                if self.preset.is_image() {
                    settings.image_size = Some(self.size);
                }
            }
        }
    }
}

/// The loader settings every subcommand gives: its pipeline, batch size, prep threads
/// (the node's, shared by torchrun ranks), most reads in flight and seed; each sets the
/// rest it has options for.
pub(crate) fn loader_settings(
    pipeline: &PipelineArgs,
    batch_size: usize,
    threads: usize,
    fetch_threads: usize,
    seed: u64,
) -> LoaderSettings {
    let mut settings = LoaderSettings::default();
    pipeline.apply(&mut settings);
    settings.plan.batch_size = batch_size;
    settings.plan.seed = seed;
    settings.threads = Threads::Count(threads);
    // The CLI's thread counts are the node's when torchrun ranks share it.
    settings.balance_ranks = Some(true);
    settings.fetch_threads = fetch_threads;
    settings
}

/// `on_error` for a `--skip-bad` flag.
pub(crate) fn on_error(skip_bad: bool) -> ErrorPolicy {
    if skip_bad {
        ErrorPolicy::Skip
    } else {
        ErrorPolicy::Error
    }
}

/// How the storage options of `bench` (and later commands) are given on the command line.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StorageArgs {
    /// Loader cache of encoded samples: none (rely on the page cache), minio, lookahead
    /// (Belady's rule over the next epoch's plan), frequency (NoPFS: the samples read most
    /// often over --cache-epochs) or lru.
    #[arg(long, default_value = "none", value_parser = parsed::<CachePolicy>)]
    pub cache: CachePolicy,
    /// Cache size: a share of the dataset (35%, 0.35) or bytes (512MiB, 2GB).
    #[arg(long, default_value = "100%", value_parser = parsed::<Capacity>)]
    pub cache_size: Capacity,
    /// Emulate storage of this bandwidth in MB/s (10^6 bytes), shared by all reads.
    #[arg(long)]
    pub throttle_mbps: Option<f64>,
    /// Emulate storage whose bandwidth changes during the run: MB/s:seconds phases, the
    /// last one open-ended (80:10,5:10,80: 80 MB/s for 10 s, 5 for 10, then 80), timed
    /// from when the loader is made; --latency-ms applies to each.
    #[arg(long, conflicts_with = "throttle_mbps", value_parser = parse_phases)]
    pub throttle_phases: Option<Phases>,
    /// Emulated latency per read, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub latency_ms: f64,
    /// With --cache frequency: the epochs the job runs, over which reads are counted
    /// (default: the epochs this command runs, where it knows them).
    #[arg(long)]
    pub cache_epochs: Option<u64>,
    /// With --cache frequency: when the placement is read, background (beside the epochs'
    /// reads) or before (before the first read, as `nostall simulate cache` assumes).
    /// With --cache minio, before reads the dataset's first samples that fit.
    #[arg(long, default_value = "background", value_parser = parsed::<CacheFill>)]
    pub cache_fill: CacheFill,
    /// Bytes for batch buffers, read-ahead and cache together (2GiB): the pipeline is
    /// paid first, shrunk to fit if needed; the cache gets the rest.
    #[arg(long, value_parser = parse_bytes)]
    pub memory: Option<u64>,
    /// Parquet: bytes for decoded pages, which sets how many are open at once (1GiB, or a
    /// quarter of --memory).
    #[arg(long, value_parser = parse_bytes)]
    pub group_memory: Option<u64>,
    /// Parquet: the column of encoded samples, binary or a struct with a `bytes` field
    /// (default: the Hugging Face Image or Audio feature, else a column named image,
    /// audio...).
    #[arg(long)]
    pub sample_column: Option<String>,
    /// Parquet: the column of labels, auto (the ClassLabel feature, else a column named
    /// label) or none.
    #[arg(long, default_value = "auto", value_parser = parsed::<LabelColumn>)]
    pub label_column: LabelColumn,
}

impl StorageArgs {
    /// Sets the cache, the emulated link, the memory bound and the Parquet columns of
    /// `settings`, for a run of
    /// `epochs` when the command knows it (the link's phases are the builder's).
    pub(crate) fn apply(&self, settings: &mut LoaderSettings, epochs: Option<u64>) {
        settings.cache = self.cache(epochs);
        settings.throttle = self.link();
        settings.memory = self.memory;
        settings.group_memory = self.group_memory;
        settings.columns.sample.clone_from(&self.sample_column);
        settings.columns.label = self.label_column.clone();
    }

    /// The cache, for a run of `epochs` when the command knows it.
    pub(crate) fn cache(&self, epochs: Option<u64>) -> CacheConfig {
        let mut config = CacheConfig::new(self.cache, self.cache_size);
        config.planned_epochs = self.cache_epochs.or(epochs).unwrap_or(0);
        config.fill = self.cache_fill;
        config
    }

    /// The links of --throttle-phases, by the time each takes over.
    pub(crate) fn link_phases(&self) -> Option<Vec<(Duration, Link)>> {
        let phases = self.throttle_phases.as_ref()?;
        let mut from = Duration::ZERO;
        let mut links = Vec::new();
        for &(mbps, seconds) in &phases.0 {
            links.push((
                from,
                Link {
                    bandwidth: Some(mbps * 1e6),
                    latency: Duration::from_secs_f64(self.latency_ms / 1e3),
                    concurrency: None,
                },
            ));
            from += Duration::from_secs_f64(seconds.unwrap_or(0.0));
        }
        Some(links)
    }

    /// The link of --throttle-mbps and --latency-ms.
    pub(crate) fn link(&self) -> Option<Link> {
        (self.throttle_mbps.is_some() || self.latency_ms > 0.0).then(|| Link {
            bandwidth: self.throttle_mbps.map(|mbps| mbps * 1e6),
            latency: Duration::from_secs_f64(self.latency_ms / 1e3),
            concurrency: None,
        })
    }
}

/// Storage phases: MB/s, and for how many seconds (`None`: until the end).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Phases(pub Vec<(f64, Option<f64>)>);

fn parse_phases(s: &str) -> Result<Phases, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let number = |text: &str, what: &str| -> Result<f64, String> {
        text.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)
            .ok_or_else(|| format!("{what} {text:?} in {s:?} is not a positive number"))
    };
    let mut phases = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let phase = match part.split_once(':') {
            Some((mbps, seconds)) => (number(mbps, "MB/s")?, Some(number(seconds, "seconds")?)),
            None if last => (number(part, "MB/s")?, None),
            None => return Err(format!(
                "phase {part:?} in {s:?} needs a duration (MB/s:seconds); only the last may go without"
            )),
        };
        phases.push(phase);
    }
    Ok(Phases(phases))
}

/// An option's value as the engine reads its text (a policy, a size, a pipeline), for
/// clap's `value_parser`: the engine's own words when it cannot.
pub(crate) fn parsed<T: std::str::FromStr<Err = nostall::Error>>(s: &str) -> Result<T, String> {
    s.parse().map_err(|e: nostall::Error| e.to_string())
}

/// A number of bytes (`512MiB`, `2GiB`), as the engine reads one.
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    nostall::loader::parse_bytes(s).map_err(|e| e.to_string())
}

/// A simulated training step after each batch, of `rate` images/s: asleep, as a process
/// waiting for its GPU, or `busy` on a core, as a step that is the training process's
/// own CPU work (a model trained on the CPU, a Python loop launching kernels).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) rate: f64,
    pub(crate) busy: bool,
}

impl Step {
    /// The step after a batch of `samples`.
    fn take(&self, samples: usize) {
        let length = std::time::Duration::from_secs_f64(samples as f64 / self.rate);
        if !self.busy {
            std::thread::sleep(length);
            return;
        }
        let until = Instant::now() + length;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// Runs one epoch to the end, showing progress unless `quiet`. With a training `step`,
/// each batch is followed by it, so the stall shows what a model of that speed would
/// wait.
pub(crate) fn drive_epoch(
    loader: &Loader,
    epoch: u64,
    quiet: bool,
    step: Option<Step>,
    mut delivered: Option<&mut Vec<(Instant, usize)>>,
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
        if let Some(log) = delivered.as_deref_mut() {
            log.push((Instant::now(), batch.len()));
        }
        if let Some(step) = step {
            step.take(batch.len());
        }
        bar.inc(1);
        bar.set_message(format!("waited {:.1} ms", batch.wait().as_secs_f64() * 1e3));
    }
    bar.finish_and_clear();
    Ok(batches.stats())
}

/// Bytes this process has caused to be read from block devices so far (page-cache hits
/// excluded), from /proc/self/io; 0 where that file is unavailable.
pub(crate) fn device_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Peak and current resident memory of this process, in MB, from /proc.
pub(crate) fn memory_mb() -> (f64, f64) {
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
