//! `nostall simulate remote`: a job of trainer nodes fed by remote CPU hosts
//! ([`nostall::sim::remote`]): hosts needed per workload, bytes over the network, the
//! control plane's cost at the job's scale, and one rank's client event by event.
//!
//! Every input is a flag. The defaults are measured figures where nostall has one
//! (docs/benchmarks.md, docs/gpu.md), each cited where it is defined; the rest are
//! assumptions, and say so in `--help`.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::ValueEnum;
use nostall::sim::remote::{
    ClientSim, Failure, Job, Outcome, ReceiveCost, Row, Spread, Trainer, Workload,
};
use nostall::Error;
use nostall_remote::RemoteOptions;

/// A workload nostall knows: a recipe whose cost per sample was measured, on a model
/// whose rate was measured or is assumed.
struct Builtin {
    name: &'static str,
    what: &'static str,
    prep_ms: f64,
    prep_source: &'static str,
    gpu_rate: f64,
    gpu_source: &'static str,
    /// Output bytes per sample as uint8 (`None`: the output has no uint8 form), and as
    /// float32.
    u8_bytes: Option<f64>,
    f32_bytes: f64,
}

/// 3 × 224 × 224.
const IMAGE: f64 = 150_528.0;
/// 77 int64 token ids beside the image.
const TOKENS: f64 = 616.0;
/// DINO's views: 2 × 3 × 224² and 8 × 3 × 96².
const DINO_VIEWS: f64 = 2.0 * IMAGE + 8.0 * 3.0 * 96.0 * 96.0;
/// 64 log-mel bands × 401 frames of float32 (the `melspec` preset).
const MELSPEC: f64 = 64.0 * 401.0 * 4.0;

const R50: &str = "ResNet-50 on one H100 (bf16, batch 256, batches already on the GPU): \
    3 986-3 990 images/s, docs/gpu.md (2026-11-27)";
const R18: &str = "ResNet-18 on one H100, the same way: 12 032-12 041 images/s, docs/gpu.md \
    (2026-11-27)";
const PLAIN: &str = "the train preset from Python, 2 threads: 3 633 images/s, \
    docs/benchmarks.md \"Recipes\" (2026-11-28)";
const TIMM: &str = "timm's DeiT recipe (RandAugment rand-m9-mstd0.5-inc1, erasing 0.25, bicubic), \
    2 threads: 1 914 images/s, docs/benchmarks.md \"Today's recipes\" (2026-11-28)";

/// ms of a core per sample from a rate measured with 2 threads on the 2-core VM.
const fn two_core_ms(rate: f64) -> f64 {
    2_000.0 / rate
}

const BUILTINS: [Builtin; 7] = [
    Builtin {
        name: "resnet50",
        what: "ImageNet's plain pipeline (RandomResizedCrop 224, flip) for ResNet-50",
        prep_ms: two_core_ms(3_633.0),
        prep_source: PLAIN,
        gpu_rate: 3_990.0,
        gpu_source: R50,
        u8_bytes: Some(IMAGE),
        f32_bytes: 4.0 * IMAGE,
    },
    Builtin {
        name: "resnet18",
        what: "the same pipeline for ResNet-18",
        prep_ms: two_core_ms(3_633.0),
        prep_source: PLAIN,
        gpu_rate: 12_032.0,
        gpu_source: R18,
        u8_bytes: Some(IMAGE),
        f32_bytes: 4.0 * IMAGE,
    },
    Builtin {
        name: "timm-r50",
        what: "timm's RandAugment recipe for ResNet-50 (as \"ResNet strikes back\" trains it)",
        prep_ms: two_core_ms(1_914.0),
        prep_source: TIMM,
        gpu_rate: 3_990.0,
        gpu_source: R50,
        u8_bytes: Some(IMAGE),
        f32_bytes: 4.0 * IMAGE,
    },
    Builtin {
        name: "timm-r18",
        what: "timm's RandAugment recipe for ResNet-18",
        prep_ms: two_core_ms(1_914.0),
        prep_source: TIMM,
        gpu_rate: 12_032.0,
        gpu_source: R18,
        u8_bytes: Some(IMAGE),
        f32_bytes: 4.0 * IMAGE,
    },
    Builtin {
        name: "dino",
        what: "DINO's multi-crop (2 × 224 + 8 × 96 views) for a ViT-S/16",
        prep_ms: two_core_ms(670.0),
        prep_source: "DataAugmentationDINO, 2 threads: 670 images/s, docs/benchmarks.md \
            \"Today's recipes\" (2026-11-28)",
        gpu_rate: 1_000.0,
        gpu_source: "assumed, not measured here",
        u8_bytes: Some(DINO_VIEWS),
        f32_bytes: 4.0 * DINO_VIEWS,
    },
    Builtin {
        name: "clip",
        what: "CLIP: OpenCLIP's ViT-B-32 transform and 77 tokens of caption, for ViT-B/32",
        prep_ms: two_core_ms(2_108.0),
        prep_source: "WebDataset shards, 2 threads: 2 108 samples/s, docs/benchmarks.md \
            \"Image-text, CLIP style\" (2026-11-28)",
        gpu_rate: 4_000.0,
        gpu_source: "assumed, not measured here",
        u8_bytes: Some(IMAGE + TOKENS),
        f32_bytes: 4.0 * IMAGE + TOKENS,
    },
    Builtin {
        name: "audio",
        what: "the melspec preset (4 s at 16 kHz, 64 log-mel bands) over mixed formats, \
            for an audio model",
        prep_ms: two_core_ms(404.0),
        prep_source: "1 007 clips in FLAC, WAV, Ogg and MP3, 2 threads: 404 clips/s, \
            docs/benchmarks.md \"Audio\" (2026-11-27)",
        gpu_rate: 4_000.0,
        gpu_source: "assumed, not measured here",
        u8_bytes: None,
        f32_bytes: MELSPEC,
    },
];

/// `--workloads`' help: the built-in workloads with their figures and where each comes
/// from, written from the table itself.
fn workloads_help() -> String {
    let mut help = String::from(
        "Workloads to model (comma-separated): built-in ones, and those --workload defines.\n\n\
         Built in (CPU cost per sample from a rate measured with 2 threads on the 2-core VM \
         of docs/benchmarks.md: 2 000 ms / rate):\n",
    );
    for b in &BUILTINS {
        let _ = write!(
            help,
            "\n{}: {}.\n  {:.3} ms a sample: {}.\n  {:.0} samples/s a GPU: {}.\n  {} bytes a \
             sample{}.\n",
            b.name,
            b.what,
            b.prep_ms,
            b.prep_source,
            b.gpu_rate,
            b.gpu_source,
            b.f32_bytes,
            match b.u8_bytes {
                Some(u8) => format!(" in float32, {u8} in uint8"),
                None => " (float32 only)".into(),
            }
        );
    }
    help.push_str(
        "\nThese photographs are 500x375 and 30 KB; ImageNet's average 110 KB, so its samples \
         cost more. On the Ray testbed (docs/benchmarks.md, \"Remote prep on Ray\"), the \
         trainer's own loader in a half-core cgroup took 0.80-0.86 ms a uint8 sample of the \
         plain pipeline and 1.32 ms of timm's: give your own with --workload.",
    );
    help
}

/// The output types a batch may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Dtype {
    /// Pixels as bytes, normalised on the GPU (what remote prep should deliver).
    Uint8,
    /// Normalised float32 pixels: four times the bytes.
    Float32,
}

impl Dtype {
    fn name(self) -> &'static str {
        match self {
            Dtype::Uint8 => "uint8",
            Dtype::Float32 => "float32",
        }
    }
}

/// A workload of the command line: a built-in one changed, or one of the user's own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkloadSpec {
    name: String,
    prep_ms: Option<f64>,
    gpu_rate: Option<f64>,
    u8_bytes: Option<f64>,
    f32_bytes: Option<f64>,
}

fn parse_workload(s: &str) -> Result<WorkloadSpec, String> {
    let (name, settings) = s.split_once(':').unwrap_or((s, ""));
    if name.is_empty() || name.contains(',') {
        return Err(format!("{s}: give NAME:key=value,..."));
    }
    let mut spec = WorkloadSpec {
        name: name.into(),
        prep_ms: None,
        gpu_rate: None,
        u8_bytes: None,
        f32_bytes: None,
    };
    for setting in settings.split(',').filter(|s| !s.is_empty()) {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("{setting}: give key=value"))?;
        let value: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v > 0.0)
            .ok_or_else(|| format!("{setting}: give a number above 0"))?;
        let slot = match key {
            "prep-ms" => &mut spec.prep_ms,
            "gpu" => &mut spec.gpu_rate,
            "u8-bytes" => &mut spec.u8_bytes,
            "f32-bytes" => &mut spec.f32_bytes,
            _ => {
                return Err(format!(
                    "{key}: the keys are prep-ms, gpu, u8-bytes and f32-bytes"
                ))
            }
        };
        *slot = Some(value);
    }
    Ok(spec)
}

fn defaults() -> RemoteOptions {
    RemoteOptions::default()
}

#[derive(clap::Args)]
pub(crate) struct RemoteArgs {
    /// Trainer nodes.
    #[arg(long, default_value_t = 64)]
    trainers: usize,
    /// GPUs per trainer node: one rank each, each rank with its own client and actors.
    #[arg(long, default_value_t = 8)]
    gpus: usize,
    /// Cores of a trainer node, counted as the measured figures count them (one prep
    /// thread each). Assumed: 96 (an 8-GPU cloud node has 96-208 vCPUs).
    #[arg(long, default_value_t = 96.0)]
    trainer_cores: f64,
    /// Of those, cores the training processes keep for themselves. Assumed: one per GPU.
    #[arg(long, default_value_t = 8.0)]
    reserved_cores: f64,
    /// Cores of a CPU host. Assumed: 64.
    #[arg(long, default_value_t = 64.0)]
    host_cores: f64,
    /// Cores of an actor (`Remote(num_cpus=...)`). Default: what a rank needs from its
    /// actors, in whole cores, at most a host's (an actor serves one rank, so a larger one
    /// idles).
    #[arg(long)]
    actor_cores: Option<f64>,
    /// Samples per batch (the receive cost was measured on batches of 64).
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Output types of the batches (comma-separated); a workload with no uint8 form
    /// (audio) is modelled in float32 once.
    #[arg(long, value_delimiter = ',', default_value = "uint8,float32")]
    dtype: Vec<Dtype>,
    /// Workloads to model (comma-separated); --help lists the built-in ones and where
    /// their figures come from.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "resnet50,resnet18,timm-r50,timm-r18,dino,clip,audio",
        long_help = workloads_help()
    )]
    workloads: Vec<String>,
    /// A workload of your own, or a built-in one changed:
    /// NAME:prep-ms=MS,gpu=SAMPLES_PER_S,u8-bytes=B,f32-bytes=B (a new one needs prep-ms,
    /// gpu and a size; f32-bytes defaults to 4 × u8-bytes). Repeat for more; it is added
    /// to --workloads.
    #[arg(long, value_parser = parse_workload)]
    workload: Vec<WorkloadSpec>,
    /// CPU ms the trainer spends receiving a uint8 batch of 64 × 224 × 224 × 3 (9.63 MB):
    /// 5.9 measured, docs/benchmarks.md "Remote prep: float32 batches received at the
    /// output pass's speed" (2026-11-30). With the next, the line through both gives any
    /// batch's cost.
    #[arg(long, default_value_t = ReceiveCost::MEASURED.small.1)]
    receive_u8_ms: f64,
    /// CPU ms the trainer spends receiving the same batch in float32 (38.5 MB in the
    /// batch, sent as its 9.63 MB of bytes): 11.4 measured, as above.
    #[arg(long, default_value_t = ReceiveCost::MEASURED.large.1)]
    receive_f32_ms: f64,
    /// CPU a host spends sending a batch, as a multiple of what receiving it costs the
    /// trainer. Assumed: 1 (TLS 1.3 seals what the other end opens, one copy each; not
    /// measured alone).
    #[arg(long, default_value_t = 1.0)]
    send_cost: f64,
    /// Batches in a part (the client's default).
    #[arg(long, default_value_t = defaults().part_batches)]
    part_batches: u64,
    /// Parts asked of a preparer at once (the client's default).
    #[arg(long, default_value_t = defaults().parts_per_preparer)]
    parts_per_preparer: usize,
    /// A part the consumer waits on is given to an idle preparer too once out this many
    /// times the mean part time (the client's default).
    #[arg(long, default_value_t = defaults().hedge_factor)]
    hedge_factor: f64,
    /// Start each epoch ahead on the actors once every part of the one before is given
    /// out (`Remote(ahead=True)`; the client's default starts it when the consumer
    /// reaches it).
    #[arg(long)]
    ahead: bool,
    /// Samples in an epoch of the job (default: ImageNet-1k's training set); each rank
    /// gets its share, in whole batches.
    #[arg(long, default_value_t = 1_281_167)]
    dataset_samples: u64,
    /// Network cards to compare the bytes into a trainer node with, Gb/s.
    #[arg(long, value_delimiter = ',', default_value = "100,200,400")]
    nic_gbps: Vec<f64>,
    /// A central dispatcher's CPU time per part request, µs. Assumed: 50 (a small RPC
    /// answered from memory; not measured).
    #[arg(long, default_value_t = 50.0)]
    dispatcher_us: f64,
    /// The workload of the event simulation (default: the first that needs hosts, in
    /// --workloads' order).
    #[arg(long)]
    sim_workload: Option<String>,
    /// Its output type (default: the first of --dtype).
    #[arg(long)]
    sim_dtype: Option<Dtype>,
    /// Actors of the rank simulated (comma-separated; default: 0 to twice what the
    /// steady state needs, at least 4).
    #[arg(long, value_delimiter = ',')]
    sim_actors: Vec<usize>,
    /// Parts asked of each preparer (comma-separated), one column each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    sim_windows: Vec<usize>,
    /// Epochs simulated (each a run of the rank's share of the dataset).
    #[arg(long, default_value_t = 50)]
    sim_epochs: u64,
    /// Coefficient of variation of a part's time (log-normal). Assumed: 0.1.
    #[arg(long, default_value_t = 0.1)]
    part_cv: f64,
    /// Share of parts that straggle. Assumed: 0.02.
    #[arg(long, default_value_t = 0.02)]
    straggler_share: f64,
    /// How many times longer a straggling part takes. Assumed: 10.
    #[arg(long, default_value_t = 10.0)]
    straggler_slowdown: f64,
    /// Round trip between a trainer and an actor, ms. Assumed: 0.2 (one data centre); a
    /// run connects in three (TCP, TLS 1.3, the loaders' check).
    #[arg(long, default_value_t = 0.2)]
    rtt_ms: f64,
    /// In the failure case, the first actor to start a part numbered this or later (from
    /// the first epoch's first) dies as it starts it.
    #[arg(long, default_value_t = 100)]
    fail_at_part: u64,
    /// Seconds until a lost actor is back (Ray restarts it; docs/remote.md: "within a few
    /// seconds").
    #[arg(long, default_value_t = 5.0)]
    down_s: f64,
    /// Seed of the part times.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also write each workload's figures to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Also write the event simulation's rows to this CSV file.
    #[arg(long)]
    sim_csv: Option<PathBuf>,
}

/// The workloads asked for, each with the output types it is modelled in.
fn workloads(args: &RemoteArgs) -> nostall::Result<Vec<(Workload, Dtype)>> {
    let mut names: Vec<String> = args.workloads.clone();
    for spec in &args.workload {
        if !names.contains(&spec.name) {
            names.push(spec.name.clone());
        }
    }
    let mut out = Vec::new();
    for name in names {
        let builtin = BUILTINS.iter().find(|b| b.name == name);
        let spec = args.workload.iter().rev().find(|s| s.name == name);
        let (prep_ms, gpu_rate, u8_bytes, f32_bytes) = match (builtin, spec) {
            (Some(b), spec) => (
                spec.and_then(|s| s.prep_ms).unwrap_or(b.prep_ms),
                spec.and_then(|s| s.gpu_rate).unwrap_or(b.gpu_rate),
                spec.and_then(|s| s.u8_bytes).or(b.u8_bytes),
                spec.and_then(|s| s.f32_bytes).unwrap_or(b.f32_bytes),
            ),
            (None, Some(s)) => {
                let (Some(prep), Some(gpu)) = (s.prep_ms, s.gpu_rate) else {
                    return Err(Error::Config(format!(
                        "workload {name}: a new one needs prep-ms and gpu"
                    )));
                };
                let Some(f32_bytes) = s.f32_bytes.or(s.u8_bytes.map(|b| 4.0 * b)) else {
                    return Err(Error::Config(format!(
                        "workload {name}: give its sample's u8-bytes or f32-bytes"
                    )));
                };
                (prep, gpu, s.u8_bytes, f32_bytes)
            }
            (None, None) => {
                let known: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
                return Err(Error::Config(format!(
                    "unknown workload {name}: the built-in ones are {}; define others with \
                     --workload",
                    known.join(", ")
                )));
            }
        };
        let mut dtypes: Vec<Dtype> = Vec::new();
        for &dtype in &args.dtype {
            let dtype = if u8_bytes.is_none() {
                Dtype::Float32
            } else {
                dtype
            };
            if !dtypes.contains(&dtype) {
                dtypes.push(dtype);
            }
        }
        for dtype in dtypes {
            let sample_bytes = match dtype {
                Dtype::Uint8 => u8_bytes.expect("uint8 only where it has a size"),
                Dtype::Float32 => f32_bytes,
            };
            out.push((
                Workload {
                    name: name.clone(),
                    prep_ms,
                    gpu_rate,
                    sample_bytes,
                    // An image sample travels as its bytes in either type.
                    wire_bytes: u8_bytes.unwrap_or(f32_bytes),
                },
                dtype,
            ));
        }
    }
    Ok(out)
}

pub(crate) fn run(args: RemoteArgs) -> nostall::Result<()> {
    if args.dtype.is_empty() || (args.workloads.is_empty() && args.workload.is_empty()) {
        return Err(Error::Config("give at least one workload and dtype".into()));
    }
    if args.reserved_cores.is_nan()
        || args.reserved_cores < 0.0
        || args.reserved_cores >= args.trainer_cores
    {
        return Err(Error::Config(format!(
            "--reserved-cores {}: keep fewer than the node's {} cores",
            args.reserved_cores, args.trainer_cores
        )));
    }
    if let Some(bad) = args.nic_gbps.iter().find(|g| !(g.is_finite() && **g > 0.0)) {
        return Err(Error::Config(format!(
            "--nic-gbps {bad}: give Gb/s above 0"
        )));
    }
    let job = Job {
        trainers: args.trainers,
        gpus: args.gpus,
        trainer_cores: args.trainer_cores - args.reserved_cores,
        host_cores: args.host_cores,
        actor_cores: args.actor_cores,
        batch_size: args.batch_size,
        receive: ReceiveCost::through(args.receive_u8_ms, args.receive_f32_ms),
        send_factor: args.send_cost,
        part_batches: args.part_batches,
        parts_per_preparer: args.parts_per_preparer,
        epoch_samples: args.dataset_samples,
        dispatcher_us: args.dispatcher_us,
    };
    job.validate()?;
    let mut rows: Vec<(Row, Dtype)> = Vec::new();
    for (workload, dtype) in workloads(&args)? {
        rows.push((job.row(&workload)?, dtype));
    }
    print_header(&args, &job);
    print_rows(&args, &job, &rows);
    if let Some(path) = &args.csv {
        write(path, &rows_csv(&args, &rows))?;
        println!("\nfigures written to {}", path.display());
    }
    simulate(&args, &job, &rows)
}

fn print_header(args: &RemoteArgs, job: &Job) {
    let r = &job.receive;
    say(&format!(
        "{} trainers × {} GPUs ({} ranks), batches of {}; a trainer node: {} cores, {} kept \
         by the training processes, {} prepare and receive; a CPU host: {} cores, actors \
         of {}",
        job.trainers,
        job.gpus,
        job.ranks(),
        job.batch_size,
        args.trainer_cores,
        args.reserved_cores,
        job.trainer_cores,
        job.host_cores,
        job.actor_cores
            .map_or("a rank's need".into(), |c| format!("{c} cores"))
    ));
    say(&format!(
        "receiving a batch costs a trainer {:.2} ms + {:.3} ms per MB of CPU (the line \
         through {} ms at {:.2} MB and {} ms at {:.1} MB, measured); sending it costs a host \
         {}× that",
        r.fixed_ms(),
        r.ms_per_byte() * 1e6,
        r.small.1,
        r.small.0 / 1e6,
        r.large.1,
        r.large.0 / 1e6,
        job.send_factor
    ));
    say(&format!(
        "parts of {} batches, {} asked of each preparer; an epoch of {} samples is {} \
         batches a rank",
        job.part_batches,
        job.parts_per_preparer,
        job.epoch_samples,
        job.epoch_batches()
    ));
}

/// Columns of text, the first `left` aligned left and the rest right.
fn table(header: &[&str], rows: &[Vec<String>], left: usize) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let pad = w - cell.chars().count();
            if i < left {
                text.push_str(cell);
                text.extend(std::iter::repeat_n(' ', pad));
            } else {
                text.extend(std::iter::repeat_n(' ', pad));
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

/// A rate with no decimals below 100, and grouped thousands: `12.5`, `3 990`, `96 256`.
fn rate(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v < 100.0 {
        return format!("{v:.1}");
    }
    let digits = format!("{v:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

fn print_rows(args: &RemoteArgs, job: &Job, rows: &[(Row, Dtype)]) {
    say(
        "\nper trainer node, samples/s: what its GPUs take, what its cores make alone, what \
         it receives and makes while receiving, and the hosts that make the rest:",
    );
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(r, dtype)| {
            let t = &r.trainer;
            vec![
                r.workload.name.clone(),
                dtype.name().into(),
                format!("{:.3}", r.workload.prep_ms),
                format!("{:.1}", r.receive_ms),
                rate(t.need),
                format!("{:.1}", t.need * r.workload.prep_ms / 1e3),
                rate(t.alone),
                rate(t.deficit()),
                rate(t.remote),
                rate(t.local),
                format!("{:.2}", r.hosts_per_trainer),
                r.hosts.to_string(),
                t.limit.name().into(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "workload",
                "dtype",
                "prep ms",
                "recv ms/batch",
                "need",
                "cores for need",
                "own cores make",
                "deficit",
                "received",
                "made",
                "hosts/trainer",
                "hosts (job)",
                "limit"
            ],
            &cells,
            2
        )
    );
    say(&format!(
        "cores for need: the cores that would feed the GPUs alone; own cores make: {} cores \
         at the prep ms a sample; received R and made L: L·prep + R·recv/batch size = the \
         cores' time, L + R = need; hosts: busy cores of R over {} a host, a sample costing \
         prep + {}× recv; receive>prep: receiving costs more than preparing, remote prep \
         cannot help",
        job.trainer_cores, job.host_cores, job.send_factor
    ));

    println!("\nnetwork, remote batches only:");
    let mut header: Vec<String> = vec![
        "workload".into(),
        "dtype".into(),
        "batch MB".into(),
        "into a trainer Gb/s".into(),
    ];
    header.extend(args.nic_gbps.iter().map(|g| format!("% of {g} Gb/s")));
    header.push("out of a host Gb/s".into());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(r, dtype)| {
            let into = r.bytes_into_trainer * 8.0 / 1e9;
            let mut row = vec![
                r.workload.name.clone(),
                dtype.name().into(),
                format!("{:.1}", r.batch_bytes / 1e6),
                format!("{into:.1}"),
            ];
            row.extend(
                args.nic_gbps
                    .iter()
                    .map(|g| format!("{:.0}%", 100.0 * into / g)),
            );
            row.push(format!("{:.1}", r.bytes_out_of_host * 8.0 / 1e9));
            row
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print!("{}", table(&header, &cells, 2));

    say(&format!(
        "\ncontrol at {} ranks: each rank's client and its own actors, against a central \
         dispatcher asked for every part (one core, {} µs a request: assumed):",
        job.ranks(),
        job.dispatcher_us
    ));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(r, dtype)| {
            let d = &r.dispatcher;
            vec![
                r.workload.name.clone(),
                dtype.name().into(),
                r.actors_per_rank.to_string(),
                if r.actors_per_rank == 0 {
                    "-".into()
                } else {
                    format!("{}", r.actor_cores)
                },
                r.hosts_placed.to_string(),
                r.connections.to_string(),
                format!("{:.2}", r.epochs_per_s),
                rate(r.handshakes_per_s),
                rate(r.parts_per_rank),
                rate(r.parts_job),
                if r.actors_per_rank == 0 {
                    "-".into()
                } else {
                    format!("{:.0}", r.window_bytes / 1e6)
                },
                rate(d.requests_per_s),
                format!("{:.2}", d.busy),
                d.response_ms
                    .map_or("overloaded".into(), |ms| format!("{ms:.3}")),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "workload",
                "dtype",
                "actors/rank",
                "actor cores",
                "hosts placed",
                "connections",
                "epochs/s",
                "handshakes/s",
                "parts/s a rank",
                "parts/s job",
                "window MB/trainer",
                "dispatcher req/s",
                "its cores",
                "response ms"
            ],
            &cells,
            2
        )
    );
    say(&format!(
        "hosts placed: whole actors to a host (an actor's cores are its rank's alone); each \
         epoch is a run of its own and connects to its actors anew (a TLS handshake each); a \
         rank's parts go to its own actors, so no process sees more than one rank's; window: \
         at most the parts out per trainer node, (actors + its own loader) × {} parts of {} \
         batches a rank",
        job.parts_per_preparer, job.part_batches
    ));
}

fn rows_csv(args: &RemoteArgs, rows: &[(Row, Dtype)]) -> String {
    let mut csv = String::from(
        "workload,dtype,prep_ms,gpu_rate,sample_bytes,batch_bytes,receive_ms,need,alone,\
         deficit,received,made,limit,host_rate,hosts_per_trainer,hosts,actor_cores,hosts_placed,\
         bytes_into_trainer,bytes_out_of_host,actors_per_rank,connections,epochs_per_s,handshakes_per_s,\
         parts_per_rank,parts_job,window_bytes,dispatcher_requests_per_s,dispatcher_busy,\
         dispatcher_response_ms",
    );
    for g in &args.nic_gbps {
        let _ = write!(csv, ",nic_{g}gbps_share");
    }
    csv.push('\n');
    for (r, dtype) in rows {
        let t = &r.trainer;
        let d = &r.dispatcher;
        let _ = write!(
            csv,
            "{},{},{},{},{},{},{:.4},{:.2},{:.2},{:.2},{:.2},{:.2},{},{:.2},{:.4},{},{},{},{:.0},\
             {:.0},{},{},{:.4},{:.2},{:.3},{:.2},{:.0},{:.2},{:.6},{}",
            r.workload.name,
            dtype.name(),
            r.workload.prep_ms,
            r.workload.gpu_rate,
            r.workload.sample_bytes,
            r.batch_bytes,
            r.receive_ms,
            t.need,
            t.alone,
            t.deficit(),
            t.remote,
            t.local,
            t.limit.name(),
            r.host_rate,
            r.hosts_per_trainer,
            r.hosts,
            r.actor_cores,
            r.hosts_placed,
            r.bytes_into_trainer,
            r.bytes_out_of_host,
            r.actors_per_rank,
            r.connections,
            r.epochs_per_s,
            r.handshakes_per_s,
            r.parts_per_rank,
            r.parts_job,
            r.window_bytes,
            d.requests_per_s,
            d.busy,
            d.response_ms.map_or(String::new(), |ms| format!("{ms:.6}"))
        );
        for g in &args.nic_gbps {
            let _ = write!(csv, ",{:.6}", r.bytes_into_trainer * 8.0 / 1e9 / g);
        }
        csv.push('\n');
    }
    csv
}

/// One simulated case of the event simulation.
struct Case {
    label: String,
    actors: usize,
    window: usize,
    hedge: f64,
    spread: Spread,
    failure: Option<Failure>,
    outcome: Outcome,
}

fn simulate(args: &RemoteArgs, job: &Job, rows: &[(Row, Dtype)]) -> nostall::Result<()> {
    let dtype = args.sim_dtype.unwrap_or(args.dtype[0]);
    let found = match &args.sim_workload {
        Some(name) => rows
            .iter()
            .find(|(r, d)| &r.workload.name == name && *d == dtype)
            .or_else(|| rows.iter().find(|(r, _)| &r.workload.name == name)),
        None => rows
            .iter()
            .find(|(r, d)| r.hosts > 0 && *d == dtype)
            .or_else(|| rows.iter().find(|(r, _)| r.hosts > 0))
            .or(rows.first()),
    };
    let Some((row, dtype)) = found else {
        return Err(Error::Config(format!(
            "--sim-workload {}: not among the workloads modelled",
            args.sim_workload.as_deref().unwrap_or("")
        )));
    };
    if args.sim_windows.contains(&0) || args.sim_windows.is_empty() {
        return Err(Error::Config(
            "--sim-windows: give 1 or more parts each".into(),
        ));
    }
    let w = &row.workload;
    let batch = job.batch_size as f64;
    let per_sample_receive = row.receive_ms / batch;
    let rank = Trainer {
        cores: job.trainer_cores / job.gpus as f64,
        prep_ms: w.prep_ms,
        receive_ms: per_sample_receive,
    };
    let host_ms = w.prep_ms + job.send_factor * per_sample_receive;
    let actor_rate = 1e3 * row.actor_cores / host_ms;
    let part_samples = job.part_batches as f64 * batch;
    let rtt_s = args.rtt_ms / 1e3;
    let steady = row.actors_per_rank.max(1) as usize;
    let actors: Vec<usize> = if args.sim_actors.is_empty() {
        let top = (2 * steady).max(4);
        let step = top.div_ceil(8);
        (0..=top).step_by(step).collect()
    } else {
        args.sim_actors.clone()
    };
    let spread = Spread {
        cv: args.part_cv,
        straggler_share: args.straggler_share,
        straggler_slowdown: args.straggler_slowdown,
    };
    let sim = |actors: usize, window: usize, hedge: f64, spread, failure| {
        let received = (actors as f64 * actor_rate).min(w.gpu_rate);
        let local = rank.local_while_receiving(received);
        ClientSim {
            epoch_batches: job.epoch_batches(),
            epochs: args.sim_epochs,
            part_batches: job.part_batches,
            parts_per_preparer: window,
            hedge_factor: hedge,
            gpu_batch_s: batch / w.gpu_rate,
            local_part_s: (local > 0.0).then(|| part_samples / local),
            actors,
            actor_part_s: part_samples / actor_rate,
            spread,
            rtt_s,
            connect_s: 3.0 * rtt_s,
            ahead: args.ahead,
            failure,
            seed: args.seed,
        }
    };
    let mut cases = Vec::new();
    for &n in &actors {
        for &window in &args.sim_windows {
            let s = sim(n, window, args.hedge_factor, spread, None);
            cases.push(Case {
                label: "sweep".into(),
                actors: n,
                window,
                hedge: args.hedge_factor,
                spread,
                failure: None,
                outcome: s.run()?,
            });
        }
    }
    let window = job.parts_per_preparer;
    let failure = Failure {
        part: args.fail_at_part,
        down_s: args.down_s,
    };
    let hedge = args.hedge_factor;
    let tail = [
        ("no spread".to_string(), Spread::NONE, hedge, None),
        ("stragglers, no hedge".into(), spread, f64::INFINITY, None),
        (
            format!("stragglers, hedge at {hedge}×"),
            spread,
            hedge,
            None,
        ),
        (
            format!(
                "the same, an actor lost at part {} for {} s",
                failure.part, failure.down_s
            ),
            spread,
            hedge,
            Some(failure),
        ),
    ];
    let sweep_len = cases.len();
    for (label, spread, hedge, failure) in tail {
        let s = sim(steady, window, hedge, spread, failure);
        cases.push(Case {
            label,
            actors: steady,
            window,
            hedge,
            spread,
            failure,
            outcome: s.run()?,
        });
    }

    let gpu_rate = w.gpu_rate;
    say(&format!(
        "\none rank's client, event by event: {} {} (GPU {} samples/s, {:.2} ms a batch); \
         {:.1} cores of the node per rank; an actor of {} cores makes a part in {:.1} ms; \
         {} epochs of {} batches; part times log-normal (cv {}), {}% of them {}× longer; \
         round trip {} ms; seed {}",
        w.name,
        dtype.name(),
        rate(gpu_rate),
        1e3 * batch / gpu_rate,
        rank.cores,
        row.actor_cores,
        1e3 * part_samples / actor_rate,
        args.sim_epochs,
        job.epoch_batches(),
        args.part_cv,
        100.0 * args.straggler_share,
        args.straggler_slowdown,
        args.rtt_ms,
        args.seed
    ));
    say(&format!(
        "samples/s delivered (% of the GPU's) by actors and parts asked of each preparer, \
         hedge at {hedge}×; the steady state needs {} actor{}:",
        row.actors_per_rank,
        if row.actors_per_rank == 1 { "" } else { "s" }
    ));
    let delivered = |o: &Outcome| {
        let v = o.batches_per_s() * batch;
        format!("{} ({:.0}%)", rate(v), 100.0 * v / gpu_rate)
    };
    let mut header = vec!["actors".to_string(), "own loader, ms a part".to_string()];
    header.extend(args.sim_windows.iter().map(|w| format!("{w} a preparer")));
    let cells: Vec<Vec<String>> = actors
        .iter()
        .map(|&n| {
            let local = sim(n, 1, hedge, spread, None).local_part_s;
            let mut row = vec![
                n.to_string(),
                local.map_or("-".into(), |s| format!("{:.1}", 1e3 * s)),
            ];
            row.extend(
                cases[..sweep_len]
                    .iter()
                    .filter(|c| c.actors == n)
                    .map(|c| delivered(&c.outcome)),
            );
            row
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print!("{}", table(&header, &cells, 0));
    say(&format!(
        "own loader: what the rank's cores make while receiving what its actors make (the \
         steady state's share, not simulated batch by batch); 0 actors: the client over the \
         rank's own loader alone, where without remote= the loader makes {} samples/s ({:.0}% \
         of the GPU's) and starts each epoch ahead",
        rate(rank.alone().min(gpu_rate)),
        100.0 * rank.alone().min(gpu_rate) / gpu_rate
    ));
    say(&format!(
        "\nat {steady} actor{}, {window} parts each, hedging and a lost actor:",
        if steady == 1 { "" } else { "s" }
    ));
    let cells: Vec<Vec<String>> = cases[sweep_len..]
        .iter()
        .map(|c| {
            let o = &c.outcome;
            vec![
                c.label.clone(),
                delivered(o),
                format!("{:.1}%", 100.0 * o.wait_share()),
                format!("{:.0}%", 100.0 * o.local_batches as f64 / o.batches as f64),
                o.hedges.to_string(),
                o.late_copies.to_string(),
                o.given_again.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "case",
                "samples/s",
                "GPU waits",
                "own loader",
                "hedges",
                "late copies",
                "given again"
            ],
            &cells,
            1
        )
    );
    say(if !args.ahead {
        "late copies: batches a hedged (or given-again) part brought twice, dropped; the \
         waits include each epoch's start (the actors are connected anew)"
    } else {
        "late copies: batches a hedged (or given-again) part brought twice, dropped; the \
         waits include each epoch's start (the actors connect to the next epoch and make \
         its first parts once every part of the one before is given out)"
    });
    if let Some(path) = &args.sim_csv {
        let mut csv = String::from(
            "case,workload,dtype,actors,parts_per_preparer,hedge_factor,part_cv,\
             straggler_share,straggler_slowdown,fail_at_part,down_s,seed,seconds,batches,\
             samples_per_s,gpu_share,wait_share,local_batches,hedges,late_copies,given_again\n",
        );
        for c in &cases {
            let o = &c.outcome;
            let samples = o.batches_per_s() * batch;
            let _ = writeln!(
                csv,
                // Quoted: a case's label has commas.
                "\"{}\",{},{},{},{},{},{},{},{},{},{},{},{:.6},{},{:.2},{:.6},{:.6},{},{},{},{}",
                c.label,
                w.name,
                dtype.name(),
                c.actors,
                c.window,
                c.hedge,
                c.spread.cv,
                c.spread.straggler_share,
                c.spread.straggler_slowdown,
                c.failure.map_or(String::new(), |f| f.part.to_string()),
                c.failure.map_or(String::new(), |f| f.down_s.to_string()),
                args.seed,
                o.seconds,
                o.batches,
                samples,
                samples / gpu_rate,
                o.wait_share(),
                o.local_batches,
                o.hedges,
                o.late_copies,
                o.given_again
            );
        }
        write(path, &csv)?;
        println!("simulation rows written to {}", path.display());
    }
    Ok(())
}

/// Prints `text` in lines of at most 100 characters, broken at spaces (a leading line
/// break kept): the tables are wide, the sentences need not be.
fn say(text: &str) {
    let (gap, text) = match text.strip_prefix('\n') {
        Some(rest) => ("\n", rest),
        None => ("", text),
    };
    println!("{gap}{}", nostall_analyze::report::wrap(text, 100));
}

fn write(path: &std::path::Path, text: &str) -> nostall::Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_of_the_command_line_is_read_or_refused() {
        let spec = parse_workload("mine:prep-ms=2,gpu=1000,u8-bytes=150528").unwrap();
        assert_eq!(spec.name, "mine");
        assert_eq!(
            (spec.prep_ms, spec.gpu_rate, spec.u8_bytes, spec.f32_bytes),
            (Some(2.0), Some(1000.0), Some(150_528.0), None)
        );
        assert_eq!(parse_workload("timm-r18").unwrap().gpu_rate, None);
        for bad in ["", ":gpu=1", "x:gpu", "x:gpu=-1", "x:speed=3", "x:gpu=nan"] {
            assert!(parse_workload(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_are_grouped_by_thousands() {
        assert_eq!(rate(12.54), "12.5");
        assert_eq!(rate(3_990.0), "3 990");
        assert_eq!(rate(96_256.0), "96 256");
        assert_eq!(rate(123.4), "123");
        assert_eq!(rate(0.0), "0");
    }

    #[test]
    fn every_builtin_cites_its_figures() {
        let help = workloads_help();
        for b in &BUILTINS {
            assert!(help.contains(b.name) && help.contains(b.prep_source));
            assert!(help.contains(b.gpu_source));
        }
    }
}
