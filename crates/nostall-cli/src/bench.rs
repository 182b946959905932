//! `nostall bench DATASET`: samples/s of a pipeline over a dataset (images or audio
//! clips), per core, and the full decode-only rate of the same files (every pixel, every
//! channel at its own rate) with the same thread count, measured in
//! the same run as a floor to compare with (a loader that decodes less than the whole
//! image can beat it). One pass of the floor follows each measured epoch, so that on a
//! shared, noisy machine both rates are taken over the same stretch of time rather than
//! one after the other. Per epoch it also reports where the bytes came from: the
//! loader's cache, the storage source, and the block device (what the page cache did not
//! serve).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nostall::loader::LoaderBuilder;
use nostall::prep::{DecodeOnly, Modality};
use nostall::storage::{ReadMode, Source};
use nostall_agent::JobBuilder;

use crate::run::{
    device_read_bytes, drive_epoch, loader_settings, memory_mb, on_error, PipelineArgs, Step,
    StorageArgs,
};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The dataset: a directory of images or audio files (class folders or flat), a directory of
    /// WebDataset .tar shards, s3://bucket/prefix, or (audio) a manifest of segments of long
    /// recordings (.jsonl, .json, .csv).
    dataset: String,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Prep (decode + transform) threads; the decode floor uses as many.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The most reads in flight (fetch threads); how many run follows the observed
    /// latency (Little's law), from 2 up to this.
    #[arg(long, default_value_t = 128)]
    fetch_threads: usize,
    /// Batches prepared ahead of the consumer.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Keep --fetch-threads reads in flight throughout instead of following the
    /// latency (a static configuration, as before 2026-11-24, for comparison).
    #[arg(long)]
    fixed_reads: bool,
    /// Keep --threads workers preparing throughout instead of as many as the consumer's
    /// rate needs (a static configuration, for comparison).
    #[arg(long)]
    fixed_prep: bool,
    /// Measured epochs, after one warm-up epoch.
    #[arg(long, default_value_t = 2)]
    epochs: u64,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Read every epoch in the dataset's order (as a validation loader does), not
    /// shuffled.
    #[arg(long)]
    no_shuffle: bool,
    /// Skip and count bad samples instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// With --skip-bad, append every skipped sample to this file as a JSON line (epoch,
    /// sample_id, location, cause, detail), to clean the dataset afterwards.
    #[arg(long, requires = "skip_bad")]
    quarantine: Option<std::path::PathBuf>,
    /// Bypass the page cache on every read (honest storage measurements).
    #[arg(long)]
    cold: bool,
    /// Leave out the decode-only floor (otherwise the files it decodes, held in memory,
    /// count in the resident memory reported).
    #[arg(long)]
    no_floor: bool,
    /// Follow each batch with a simulated training step of this speed (images/s), so
    /// that the stall shows what a GPU of that speed would wait.
    #[arg(long)]
    model_rate: Option<f64>,
    /// Spend the training step of --model-rate on a core instead of asleep: a training
    /// process whose own CPU competes with the loader's threads.
    #[arg(long, requires = "model_rate")]
    busy_step: bool,
    /// Start each epoch while the previous one's last batches are consumed, as loaders
    /// do by default. Off here unless asked: each epoch's rate is then its own, and the
    /// floor's passes between epochs do not share the cores with the next epoch.
    #[arg(long, requires = "no_floor")]
    overlap_epochs: bool,
    /// Print one JSON object instead of progress and a table.
    #[arg(long)]
    json: bool,
    /// Serve live metrics for Prometheus at this address (host:port) while the bench
    /// runs; NOSTALL_METRICS_ADDR when not given.
    #[arg(long)]
    metrics_addr: Option<String>,
    #[command(flatten)]
    storage: StorageArgs,
}

pub(crate) fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut settings = loader_settings(
        &args.pipeline,
        args.batch_size,
        args.threads,
        args.fetch_threads,
        args.seed,
    );
    args.storage.apply(&mut settings, Some(args.epochs + 1));
    settings.on_error = on_error(args.skip_bad);
    settings.quarantine = args.quarantine.clone();
    if args.cold {
        settings.read = ReadMode::Cold;
    }
    settings.overlap_epochs = args.overlap_epochs;
    settings.plan.shuffle = !args.no_shuffle;
    settings.adaptive_reads = !args.fixed_reads;
    settings.adaptive_prep = !args.fixed_prep;
    settings.prefetch = args.prefetch;
    let mut builder = LoaderBuilder::with_settings(&args.dataset, settings);
    let phases = args.storage.link_phases();
    if let Some(phases) = &phases {
        builder.link_phases(phases.clone());
    }
    let job = JobBuilder::new(builder).start()?;
    let (loader, storage) = (job.loader, job.storage);
    // The phases' clock started as the loader was made, just now.
    let origin = Instant::now();
    let mut delivered = phases.as_ref().map(|_| Vec::new());
    let loader = std::sync::Arc::new(loader);
    let _endpoint = match nostall::env::metrics_addr(args.metrics_addr.as_deref()) {
        Some(addr) => {
            let endpoint = nostall::metrics::export::serve(&addr, loader.clone(), 0)?;
            if !args.json {
                println!("live metrics: http://{}/metrics", endpoint.local_addr());
            }
            Some(endpoint)
        }
        None => None,
    };
    let mut floor: Option<Floor> = None;
    let quiet = args.json;
    if let (Some(plan), false) = (loader.memory_plan(), quiet) {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        println!(
            "memory budget {:.1} MB: batch buffers {:.1} MB (prefetch {}), read-ahead {:.1} MB, \
             decoded pages {:.1} MB, cache {:.1} MB",
            mb(plan.budget),
            mb(plan.batch_buffers),
            plan.prefetch,
            mb(plan.readahead),
            mb(plan.groups),
            mb(plan.cache)
        );
    }
    let (mut samples, mut wall, mut rss) = (0u64, Duration::ZERO, Vec::new());
    let mut per_epoch = Vec::new();
    // Epoch 0 warms up (and fills caches); the figures are over the epochs after it.
    for epoch in 0..=args.epochs {
        let device_before = device_read_bytes();
        let step = args.model_rate.map(|rate| Step {
            rate,
            busy: args.busy_step,
        });
        let stats = drive_epoch(&loader, epoch, quiet, step, delivered.as_mut())?;
        let device = device_read_bytes() - device_before;
        if epoch > 0 {
            samples += stats.samples;
            wall += stats.wall;
            rss.push(memory_mb().1);
            if let Some(floor) = &mut floor {
                floor.pass(args.threads, loader.catalog().modality());
            }
        }
        if !quiet {
            print!("{stats}");
            println!(
                "  read from the block device: {:.1} MB; resident memory: {:.1} MB",
                device as f64 / 1e6,
                memory_mb().1
            );
        }
        per_epoch.push(format!(
            "{{\"epoch\":{epoch},\"images_per_s\":{:.2},\"stall_s\":{:.3},\"wall_s\":{:.3},\
             \"first_wait_s\":{:.4},\"prepared_ahead\":{},\"reads_in_flight\":{},\
             \"prep_workers\":{},\"cache_hits\":{},\
             \"cache_hit_bytes\":{},\"storage_bytes\":{},\"device_read_bytes\":{device},\
             \"dataset_bytes\":{}}}",
            stats.throughput(),
            stats.wait.as_secs_f64(),
            stats.wall.as_secs_f64(),
            stats.first_wait.as_secs_f64(),
            stats.prepared_ahead,
            stats.readahead.reads_in_flight,
            stats.prep.threads,
            stats.cache.hits,
            stats.cache.hit_bytes,
            stats.storage.bytes,
            loader.catalog().total_bytes(),
        ));
        if epoch == 0 && !args.no_floor {
            // The floor decodes from memory (reads are the pipeline's business, not the
            // floor's), read after the warm-up so that the warm-up saw the storage as it was.
            floor = Some(Floor::read(&loader, storage.as_ref()));
        }
    }
    let rate = samples as f64 / wall.as_secs_f64();
    let floor = floor.map(|floor| floor.images_per_s());
    let phase_rates = match (&phases, &delivered) {
        (Some(phases), Some(delivered)) => per_phase(phases, origin, delivered),
        _ => Vec::new(),
    };
    if !quiet {
        for p in &phase_rates {
            println!(
                "storage at {:.0} MB/s from {:.1} s to {:.1} s: {:.1} images/s",
                p.mbps, p.from, p.to, p.images_per_s
            );
        }
    }
    let (peak, _) = memory_mb();
    if args.json {
        let floor_json = floor.map_or("null".to_string(), |f| format!("{f:.2}"));
        let rss_json: Vec<String> = rss.iter().map(|r| format!("{r:.1}")).collect();
        println!(
            "{{\"loader\":\"nostall\",\"preset\":\"{}\",\"images_per_s\":{rate:.2},\"images_per_s_per_core\":{:.2},\
             \"decode_floor_images_per_s\":{floor_json},\"threads\":{},\"batch_size\":{},\"epochs\":{},\
             \"peak_rss_mb\":{peak:.1},\"rss_after_epoch_mb\":[{}],\"per_epoch\":[{}],\
             \"phases\":[{}]}}",
            args.pipeline.name(),
            rate / args.threads as f64,
            args.threads,
            args.batch_size,
            args.epochs,
            rss_json.join(","),
            per_epoch.join(","),
            phase_rates
                .iter()
                .map(|p| format!(
                    "{{\"mbps\":{},\"from_s\":{:.3},\"to_s\":{:.3},\"images_per_s\":{:.2}}}",
                    p.mbps, p.from, p.to, p.images_per_s
                ))
                .collect::<Vec<_>>()
                .join(",")
        );
    } else {
        println!("\n{:<40} {:>12}", "measure", "samples/s");
        let threads = match args.threads {
            1 => "1 thread".to_string(),
            n => format!("{n} threads"),
        };
        println!(
            "{:<40} {:>12.1}",
            format!("nostall {} pipeline, {threads}", args.pipeline.name()),
            rate
        );
        println!("{:<40} {:>12.1}", "  per core", rate / args.threads as f64);
        if let Some(floor) = floor {
            println!(
                "{:<40} {:>12.1}",
                format!("full decode only, {threads}"),
                floor
            );
            println!("{:<40} {:>12.2}", "pipeline / decode floor", rate / floor);
        }
        println!("peak resident memory: {peak:.1} MB");
    }
    Ok(())
}

/// The rate of one storage phase.
struct PhaseRate {
    mbps: f64,
    /// Seconds from the loader's start.
    from: f64,
    to: f64,
    images_per_s: f64,
}

/// Images/s delivered during each phase of `phases` (timed from `origin`; the last ends
/// with the run), from the batches `delivered` (when, how many samples), warm-up
/// included: the phases follow the clock, not the epochs.
fn per_phase(
    phases: &[(Duration, nostall::storage::Link)],
    origin: Instant,
    delivered: &[(Instant, usize)],
) -> Vec<PhaseRate> {
    let end = delivered.last().map_or(origin, |&(at, _)| at) - origin;
    phases
        .iter()
        .enumerate()
        .map(|(i, &(from, link))| {
            let to = phases.get(i + 1).map_or(end, |&(next, _)| next.min(end));
            let samples: usize = delivered
                .iter()
                .filter(|&&(at, _)| (from..to).contains(&(at - origin)))
                .map(|&(_, n)| n)
                .sum();
            let seconds = to.saturating_sub(from).as_secs_f64();
            PhaseRate {
                mbps: link.bandwidth.unwrap_or(0.0) / 1e6,
                from: from.as_secs_f64(),
                to: to.as_secs_f64(),
                images_per_s: if seconds > 0.0 {
                    samples as f64 / seconds
                } else {
                    0.0
                },
            }
        })
        .collect()
}

/// The decode-only floor: every sample's bytes, read once, and the full decodes of them
/// so far.
struct Floor {
    files: Vec<Vec<u8>>,
    decoded: usize,
    took: Duration,
}

impl Floor {
    /// Reads every sample; those that fail to read are left out.
    fn read(loader: &nostall::Loader, source: &dyn Source) -> Floor {
        let files = (0..loader.catalog().len() as u64)
            .filter_map(|id| {
                let mut bytes = Vec::new();
                source.read(id, &mut bytes).ok().map(|()| bytes)
            })
            .collect();
        Floor {
            files,
            decoded: 0,
            took: Duration::ZERO,
        }
    }

    /// Decodes every file in full, with `threads` threads. Files that fail to decode are
    /// left out of the count.
    fn pass(&mut self, threads: usize, modality: Modality) {
        let next = AtomicUsize::new(0);
        let decoded = AtomicUsize::new(0);
        let started = Instant::now();
        let files = &self.files;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    let mut decoder = DecodeOnly::new(modality).expect("the decoder starts");
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(data) = files.get(i) else { break };
                        if decoder.decode(data).is_ok() {
                            decoded.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        self.took += started.elapsed();
        self.decoded += decoded.into_inner();
    }

    fn images_per_s(&self) -> f64 {
        self.decoded as f64 / self.took.as_secs_f64()
    }
}
