//! What keeping a video's frame index saves a read: each video prepared as a loader's
//! prep thread prepares it (`[Clip(16), CenterCrop(112)]`, uint8), by a preparer whose
//! pipeline keeps no frame index (every read scans its file) and by one whose pipeline
//! holds them all (every read finds it), in turn, with the same clips, the CPU time of
//! each read measured on its thread. Also the index step alone: a scan of the file against
//! what a held index costs (the file's CRC-32 and reading the index back).
//!
//! Then a new process's first epoch, each video read once by a fresh pipeline: one that
//! keeps its indexes in memory only (every first read scans), one whose indexes a
//! previous process wrote to disk (the first read also reads the file back), in turn,
//! each round with fresh pipelines.
//!
//! Usage: `cargo run [--release] -p nostall --example video_index_cache -- [ROUNDS]
//! [FILES...]`; without files, nostall-video's test footage. The per-file figures are
//! medians over the rounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nostall::prep::video::{IndexFile, DEFAULT_INDEX_CACHE};
use nostall::prep::{DType, Operators, Prep, Preparer, VideoPipeline};
use nostall::rng::Rng;
use nostall::Layout;
use nostall_video::{FrameIndex, Limits};

/// The calling thread's CPU time.
fn cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The median of `values`, in milliseconds.
fn median_ms(values: &mut [Duration]) -> f64 {
    values.sort();
    values[values.len() / 2].as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: u64 = args.first().map_or(Ok(20), |a| a.parse())?;
    let mut files: Vec<PathBuf> = args.iter().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nostall-video/tests/footage");
        files = std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e != "md" && e != "sh"))
            .collect();
        files.sort();
    }
    let videos: Vec<Vec<u8>> = files.iter().map(std::fs::read).collect::<Result<_, _>>()?;
    let Operators::Video(clip, ops) = "[Clip(16), CenterCrop(112)]".parse::<Operators>()? else {
        return Err("a video pipeline".into());
    };
    let pipeline = VideoPipeline::new(clip, ops, DType::U8, Layout::Hwc)?;
    let (cold, warm) = (
        pipeline.clone().with_index_cache(0),
        pipeline.clone().with_index_cache(usize::MAX),
    );
    let bytes = cold.layout().bytes();
    let mut out = vec![0u8; bytes];
    let (mut scanning, mut keeping) = (cold.preparer()?, warm.preparer()?);
    let mut read = |preparer: &mut Box<dyn Preparer>, id: u64, key: u64| {
        preparer.next_sample(id);
        let start = cpu();
        let made = preparer.prepare(&videos[id as usize], &mut Rng::new(key), &mut out);
        (cpu() - start, made.is_ok())
    };
    // Every index held before the first measured read.
    for id in 0..videos.len() as u64 {
        read(&mut keeping, id, 0);
    }
    let limits = Limits::default();
    println!(
        "{:<28} {:>7} {:>9} {:>9} {:>8} {:>9} {:>9}",
        "file (frames)", "KiB", "cold ms", "warm ms", "saved", "scan ms", "held ms"
    );
    let (mut all_cold, mut all_warm) = (Vec::new(), Vec::new());
    for (id, (path, video)) in files.iter().zip(&videos).enumerate() {
        let id = id as u64;
        let (mut c, mut w, mut scan, mut held) = (vec![], vec![], vec![], vec![]);
        let mut ok = true;
        for round in 0..rounds {
            // In turn, the same clip for both: what differs is the index step.
            let (a, made_a) = read(&mut scanning, id, round);
            let (b, made_b) = read(&mut keeping, id, round);
            ok &= made_a && made_b;
            c.push(a);
            w.push(b);
            let start = cpu();
            let index = FrameIndex::scan(video, &limits)?;
            scan.push(cpu() - start);
            let kept = index.to_bytes();
            let start = cpu();
            let mut crc = flate2::Crc::new();
            crc.update(video);
            std::hint::black_box(crc.sum());
            std::hint::black_box(FrameIndex::from_bytes(&kept, &limits)?);
            held.push(cpu() - start);
        }
        let frames = FrameIndex::scan(video, &limits)?.len();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let (cm, wm) = (median_ms(&mut c), median_ms(&mut w));
        println!(
            "{:<28} {:>7} {cm:>9.3} {wm:>9.3} {:>7.0}% {:>9.3} {:>9.3}{}",
            format!("{name} ({frames})"),
            video.len() / 1024,
            100.0 * (cm - wm) / cm,
            median_ms(&mut scan),
            median_ms(&mut held),
            if ok { "" } else { "  (a read failed)" }
        );
        all_cold.extend(c);
        all_warm.extend(w);
    }
    let sum = |v: &[Duration]| v.iter().sum::<Duration>().as_secs_f64() * 1e3;
    println!(
        "all reads: {:.1} ms cold, {:.1} ms warm ({} reads each); scans made: {} and {}",
        sum(&all_cold),
        sum(&all_warm),
        all_cold.len(),
        cold.frame_indexes().scans(),
        warm.frame_indexes().scans()
    );
    new_process(&pipeline, &videos, rounds)
}

/// A new process's first epoch, without and with the indexes a previous one wrote.
fn new_process(
    pipeline: &VideoPipeline,
    videos: &[Vec<u8>],
    rounds: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = IndexFile::at(dir.path().join("frames.idx"), "the example's videos");
    let bytes = pipeline.layout().bytes();
    let mut out = vec![0u8; bytes];
    let mut epoch =
        |pipeline: &VideoPipeline, round: u64| -> Result<Duration, Box<dyn std::error::Error>> {
            let mut preparer = pipeline.preparer()?;
            let mut total = Duration::ZERO;
            for (id, video) in videos.iter().enumerate() {
                preparer.next_sample(id as u64);
                let start = cpu();
                let made = preparer.prepare(video, &mut Rng::new(round), &mut out);
                total += cpu() - start;
                made.map_err(|e| format!("video {id}: {e}"))?;
            }
            Ok(total)
        };
    // The previous process.
    let writer = pipeline
        .clone()
        .with_index_file(DEFAULT_INDEX_CACHE, file.clone());
    epoch(&writer, 0)?;
    writer.frame_indexes().flush()?;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let (mut scans, mut read_back) = ((0, 0), 0);
    for round in 0..rounds {
        let memory = pipeline.clone().with_index_cache(DEFAULT_INDEX_CACHE);
        let disk = pipeline
            .clone()
            .with_index_file(DEFAULT_INDEX_CACHE, file.clone());
        without.push(epoch(&memory, round)?);
        with.push(epoch(&disk, round)?);
        scans.0 += memory.frame_indexes().scans();
        scans.1 += disk.frame_indexes().scans();
        read_back += disk.frame_indexes().read_back();
    }
    let (a, b) = (median_ms(&mut without), median_ms(&mut with));
    println!(
        "a new process's first epoch ({} videos, the file {} bytes): {a:.2} ms without the \
         disk copy, {b:.2} ms with it: {:.3} ms saved a read; scans made: {} and {}, \
         indexes read back: {read_back}",
        videos.len(),
        std::fs::metadata(file.path())?.len(),
        (a - b) / videos.len() as f64,
        scans.0,
        scans.1
    );
    Ok(())
}
