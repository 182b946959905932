//! `nostall analyze [DATASET]`: where training waits for data and what would fix it
//! (DS-Analyzer). Measures F, P(n) and C, predicts, checks the prediction with a real run
//! fed to a simulated model, and writes a terminal summary, a JSON file and an HTML page.

use std::path::PathBuf;
use std::time::Duration;

use nostall::cache::Capacity;
use nostall::sim::remote::ReceiveCost;
use nostall::storage::ReadMode;
use nostall::Error;
use nostall_analyze::{
    self as analyze, ModelRate, Options, Rates, RemoteCosts, Report, RunLength, Subject,
};

use crate::run::{loader_settings, PipelineArgs, StorageArgs};
use nostall::loader::LoaderBuilder;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The dataset: a directory of images, a directory of .tar shards, s3://bucket/prefix,
    /// or (audio) a manifest of segments of long recordings (.jsonl, .json, .csv). Default: nostall's built-in demo photographs.
    dataset: Option<String>,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Samples per batch (default: 64; 8 for the demo photographs).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Prep (decode + transform) threads of the configuration analysed.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Fetch threads (requests in flight) of the configuration analysed.
    #[arg(long, default_value_t = 2)]
    fetch_threads: usize,
    /// The model's speed in samples/s (e.g. what your GPU trains at).
    #[arg(long, conflicts_with_all = ["step_ms", "no_model"])]
    model_rate: Option<f64>,
    /// A simulated model taking this many milliseconds per batch (default: 1 ms per
    /// image, about a ResNet-50 on one V100-class GPU).
    #[arg(long, conflicts_with = "no_model")]
    step_ms: Option<f64>,
    /// Leave the model out: analyse the input pipeline alone.
    #[arg(long)]
    no_model: bool,
    /// Measure prep for 1 to this many threads (default: the number of cores).
    #[arg(long)]
    max_threads: Option<usize>,
    /// Seconds for the measurements of fetch, prep and cache together.
    #[arg(long, default_value_t = 20.0)]
    budget: f64,
    /// Seconds of the real run beside the prediction.
    #[arg(long, default_value_t = 10.0)]
    run_seconds: f64,
    /// Run at least this many epochs after the cache's warm-up, whatever --run-seconds.
    #[arg(long, default_value_t = 0)]
    run_epochs: u64,
    /// Skip the real run.
    #[arg(long)]
    no_run: bool,
    /// Read through the page cache instead of cold (measures memory, not storage, when
    /// the dataset is cached by the OS).
    #[arg(long)]
    warm: bool,
    /// Reuse the measured rates of an earlier report (its JSON file) instead of
    /// measuring again; the model rate comes from this command's options.
    #[arg(long)]
    rates: Option<PathBuf>,
    /// Node sweep: the share of the dataset each node caches (default: the configured
    /// cache, or 25% without one).
    #[arg(long, value_parser = parse_share)]
    node_cache: Option<f64>,
    /// Node sweep: network bandwidth between nodes, Gb/s.
    #[arg(long, default_value_t = 10.0)]
    network_gbps: f64,
    /// Remote what-if: CPU ms this node spends receiving a uint8 batch of 64 × 224 × 224 ×
    /// 3 (9.63 MB): 5.9 measured, docs/benchmarks.md "Remote prep: float32 batches
    /// received at the output pass's speed" (2026-11-30). With the next, the line through
    /// both gives a batch's cost by its bytes.
    #[arg(long, default_value_t = RemoteCosts::default().receive.small.1)]
    receive_u8_ms: f64,
    /// Remote what-if: the same batch in float32 (38.5 MB in the batch, sent as its 9.63
    /// MB of bytes): 11.4 ms measured, as above.
    #[arg(long, default_value_t = RemoteCosts::default().receive.large.1)]
    receive_f32_ms: f64,
    /// Remote what-if: a remote core's CPU to send a batch, as a multiple of what
    /// receiving it costs here (assumed 1: not measured alone).
    #[arg(long, default_value_t = RemoteCosts::default().send_factor)]
    send_cost: f64,
    /// Remote what-if: cores of a remote host, to count hosts (assumed 64).
    #[arg(long, default_value_t = RemoteCosts::default().host_cores)]
    host_cores: f64,
    /// Where to write the JSON report.
    #[arg(long, default_value = "nostall-analysis.json")]
    json: PathBuf,
    /// Where to write the HTML report.
    #[arg(long, default_value = "nostall-analysis.html")]
    html: PathBuf,
    /// Print only the summary, not the progress.
    #[arg(long)]
    quiet: bool,
    /// Seed of the shuffle and of the measurement order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    storage: StorageArgs,
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<Capacity>().map_err(|e| e.to_string())? {
        Capacity::Fraction(f) => Ok(f),
        Capacity::Bytes(_) => Err(format!(
            "{s}: give a share of the dataset (25% or 0.25), not bytes"
        )),
    }
}

pub(crate) fn run(args: Args) -> nostall::Result<()> {
    let (location, demo) = match &args.dataset {
        Some(location) => (location.clone(), false),
        None => {
            let dir = nostall_demo::write(&nostall_demo::default_dir())?;
            (dir.to_string_lossy().into_owned(), true)
        }
    };
    let batch_size = args.batch_size.unwrap_or(if demo { 8 } else { 64 });
    let mut settings = loader_settings(
        &args.pipeline,
        batch_size,
        args.threads,
        args.fetch_threads,
        args.seed,
    );
    args.storage.apply(&mut settings, None);
    if !args.warm {
        settings.read = ReadMode::Cold;
    }
    // Every option checked before the dataset is opened or anything measured.
    let config = LoaderBuilder::with_settings(&location, settings.clone()).config()?;
    let model = match (args.model_rate, args.step_ms, args.no_model) {
        (_, _, true) => ModelRate::none(),
        (Some(rate), _, _) => ModelRate::given(rate)?,
        (None, step, _) => ModelRate::simulated(step.unwrap_or(batch_size as f64), batch_size)?,
    };
    let rates = args.rates.as_deref().map(read_rates).transpose()?;
    let cores = nostall::loader::usable_cores();
    let options = Options {
        budget: Duration::from_secs_f64(analyze::positive("budget", args.budget, false)?),
        max_threads: args.max_threads.unwrap_or(cores),
        model,
        run: (!args.no_run).then_some(RunLength {
            budget: Duration::from_secs_f64(analyze::positive(
                "run_seconds",
                args.run_seconds,
                true,
            )?),
            min_epochs: args.run_epochs,
        }),
        rates,
        node_cache_share: args.node_cache,
        network_bytes_per_s: analyze::positive("network_gbps", args.network_gbps, false)? * 1e9
            / 8.0,
        remote: RemoteCosts {
            receive: ReceiveCost::through(args.receive_u8_ms, args.receive_f32_ms),
            send_factor: args.send_cost,
            host_cores: args.host_cores,
        },
        seed: args.seed,
    };
    options.validate()?;
    let subject = Subject::open(
        &location,
        config,
        settings.read,
        settings.throttle,
        &settings.columns,
    )?;
    let quiet = args.quiet;
    let report = analyze::analyze(&subject, &options, &mut |msg| {
        if !quiet {
            eprintln!("{msg}");
        }
    })?;
    print!("{}", report.text());
    write(&args.json, &report.json())?;
    write(&args.html, &report.html())?;
    println!(
        "\nreport: {} (open in a browser), figures: {}",
        args.html.display(),
        args.json.display()
    );
    Ok(())
}

fn write(path: &std::path::Path, text: &str) -> nostall::Result<()> {
    std::fs::write(path, text).map_err(|e| Error::Io {
        path: path.into(),
        source: e,
    })
}

/// The rates of an earlier report's JSON file.
fn read_rates(path: &std::path::Path) -> nostall::Result<Rates> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.into(),
        source: e,
    })?;
    Report::rates_from_json(&text).map_err(|e| match e {
        Error::Config(why) => Error::Config(format!("{}: {why}", path.display())),
        other => other,
    })
}
