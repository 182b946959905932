//! `nostall demo`: the main job on a built-in default. It writes a few real photographs
//! (embedded by the `nostall-demo` crate: see its assets/demo/README.md for their sources
//! and licence) to
//! a temporary directory in ImageFolder layout, and runs the ImageNet training pipeline
//! over them for a few epochs.

use crate::run::{drive_epoch, loader_settings, PipelineArgs, Step};
use nostall::loader::LoaderBuilder;
use nostall_agent::JobBuilder;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Epochs to run.
    #[arg(long, default_value_t = 20)]
    epochs: u64,
    /// Speed of the simulated training step, in images/s (0: no training step, the
    /// consumer takes batches as fast as they come).
    #[arg(long, default_value_t = 1000.0)]
    model_rate: f64,
    /// Threads decoding and transforming.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
}

pub(crate) fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let dir = nostall_demo::write(&nostall_demo::default_dir())?;
    println!(
        "nostall demo: {} photographs ({} classes) in {}, ImageNet training pipeline \
         (RandomResizedCrop 224, flip, normalise; f32 CHW), batch {}, {} prep threads, \
         a simulated training step of {} images/s",
        nostall_demo::PHOTOS.len(),
        nostall_demo::classes().len(),
        dir.display(),
        args.batch_size,
        args.threads,
        args.model_rate
    );
    let settings = loader_settings(&PipelineArgs::train(), args.batch_size, args.threads, 2, 0);
    let builder = LoaderBuilder::with_settings(dir.to_string_lossy(), settings);
    let loader = JobBuilder::new(builder).start()?.loader;
    let mut last = None;
    for epoch in 0..args.epochs {
        let model_rate = (args.model_rate > 0.0).then_some(args.model_rate);
        let step = model_rate.map(|rate| Step { rate, busy: false });
        let stats = drive_epoch(&loader, epoch, false, step, None)?;
        println!(
            "epoch {epoch}: {:.0} images/s, data stall {:.1}% of the epoch",
            stats.throughput(),
            100.0 * stats.stall_fraction()
        );
        last = Some(stats);
    }
    if let Some(stats) = last {
        println!("\nlast epoch in detail:\n{stats}");
        let verdict = if stats.stall_fraction() < 0.05 {
            "the loader keeps up: the simulated GPU almost never waits"
        } else if stats.prep.capacity() > 1.1 * args.model_rate {
            "prep keeps up; the stall left is the wait for each epoch's first batch, large here \
             because the demo's epochs are tiny"
        } else {
            "prep is too slow for this GPU: add prep threads, or see where the time goes with `nostall bench`"
        };
        println!(
            "Simulated training step: {} images/s. Prep could sustain {:.0} images/s with {} threads, so {verdict}.",
            args.model_rate,
            stats.prep.capacity(),
            args.threads
        );
    }
    Ok(())
}
