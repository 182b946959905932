//! `nostall`: find out why training waits for data, and make it stop.
//!
//! Subcommands: `demo` (the ImageNet training pipeline over built-in photographs),
//! `bench` (throughput of a pipeline over a dataset, beside the decode-only floor),
//! `analyze` (where training waits for data, and what would remove the wait),
//! `index` (build or refresh a dataset's index), `simulate cache` (hit rates of cache
//! policies over the seeded shuffle), `simulate cluster` (partitioned caches and
//! locality-aware batches over many nodes) and `simulate remote` (trainers fed by remote
//! CPU hosts), `node` (one node of a job whose nodes
//! share a partitioned cache over the network) and `agent` (the node agent: jobs that
//! read the same stream share one fetch and prep pass).

mod agent;
mod analyze;
mod bench;
mod demo;
mod index;
mod node;
mod run;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "nostall",
    version,
    about = "A data loader for deep-learning training: the GPU never waits for data."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the ImageNet training pipeline over photographs built into nostall.
    Demo(demo::Args),
    /// Measure a pipeline's throughput over a dataset, beside the decode-only floor.
    Bench(bench::Args),
    /// Find out why training waits for data and what would fix it: measure fetch, prep
    /// and the model, predict, check with a real run, and write a report.
    Analyze(analyze::Args),
    /// Build (or refresh) the index of a dataset directory.
    Index {
        /// Dataset root: ImageFolder layout (one sub-directory per class) or flat.
        dir: PathBuf,
        /// Where to keep the index (default: in nostall's cache directory).
        #[arg(long)]
        index: Option<PathBuf>,
        /// The files to list: image (.jpg, .jpeg, .png) or audio (.wav, .flac, .ogg,
        /// .oga, .opus, .mp3).
        #[arg(long, default_value = "image", value_parser = parse_modality)]
        modality: nostall::Modality,
    },
    /// Run one node of a data-parallel job whose nodes share a partitioned cache: its
    /// peer service, and epochs of one rank, with per-epoch byte accounting.
    Node(node::Args),
    /// Run the node agent: jobs of this user on this node that read the same stream
    /// share one fetch and prep pass, receiving batches in shared memory.
    Agent(agent::Args),
    /// Simulate parts of the loader without data (`simulate cache`: cache policies;
    /// `simulate cluster`: partitioned caches across nodes; `simulate remote`: trainers
    /// fed by remote CPU hosts).
    Simulate {
        #[command(subcommand)]
        what: simulate::What,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Analyze(args) => analyze::run(args).map_err(Into::into),
        Command::Index {
            dir,
            index,
            modality,
        } => index::run(&dir, index.as_deref(), modality).map_err(Into::into),
        Command::Node(args) => node::run(args),
        Command::Agent(args) => agent::run(args),
        Command::Simulate { what } => simulate::run(what).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nostall: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_modality(s: &str) -> Result<nostall::Modality, String> {
    s.parse()
        .map_err(|e: nostall::prep::UnknownName| e.to_string())
}
