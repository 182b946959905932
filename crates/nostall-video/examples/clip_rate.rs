//! Frames per CPU-second of 16-frame clips, decoded with `ClipDecoder` (seek to the right
//! key frame, skip non-reference frames nobody wants, convert only wanted frames) and with
//! the usual way (seek to the key frame before the clip, decode and convert every frame
//! from there).
//!
//! `cargo run --release -p nostall-video --example clip_rate -- VIDEO [CLIPS] [STRIDE]`

use nostall_video::{ClipDecoder, DecodeStats, FrameIndex, Limits};

/// CPU time of this process (user + system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: clip_rate VIDEO [CLIPS] [STRIDE]");
    let clips: usize = args.get(2).map_or(50, |a| a.parse().expect("CLIPS"));
    let stride: usize = args.get(3).map_or(1, |a| a.parse().expect("STRIDE"));
    let data = std::fs::read(path).expect("reading the video");
    let t0 = cpu_seconds();
    let index = FrameIndex::scan(&data, &Limits::default()).expect("indexing");
    let scan = cpu_seconds() - t0;
    let n = index.len();
    let span = 15 * stride + 1;
    assert!(n >= span, "{n} frames, a clip spans {span}");
    let keys: Vec<usize> = index.key_frames().collect();
    println!(
        "{path}: {} {}x{}, {n} frames, {} key frames, {:.1} s; indexed in {:.2} CPU-ms",
        index.codec(),
        index.width(),
        index.height(),
        keys.len(),
        index.duration_seconds(),
        scan * 1e3
    );
    // A fixed-seed LCG: the same clips for both ways.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let starts: Vec<usize> = (0..clips)
        .map(|_| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize % (n - span + 1)
        })
        .collect();

    let mut dec = ClipDecoder::new(Limits::default());
    let mut run = |name: &str, sets: &[Vec<u32>]| {
        let mut total = DecodeStats::default();
        let mut frames = 0u64;
        let t0 = cpu_seconds();
        for wanted in sets {
            let s = dec
                .decode(&data, &index, wanted, &mut |_, f| {
                    std::hint::black_box(f.rgb);
                    frames += 1;
                })
                .expect("decoding");
            total.packets_decoded += s.packets_decoded;
            total.frames_skipped += s.frames_skipped;
            total.seeks += s.seeks;
        }
        let cpu = cpu_seconds() - t0;
        // Only the clips' frames count as delivered: the baseline's others are waste.
        let useful = 16 * sets.len();
        println!(
            "{name:>9}: {useful} clip frames ({frames} converted) in {cpu:.3} CPU-s: \
             {:.1} clip frames/CPU-s; {} packets decoded, {} frames skipped, {} seeks",
            useful as f64 / cpu,
            total.packets_decoded,
            total.frames_skipped,
            total.seeks
        );
    };

    let clip_sets: Vec<Vec<u32>> = starts
        .iter()
        .map(|&a| (0..16).map(|j| (a + j * stride) as u32).collect())
        .collect();
    run("clip", &clip_sets);
    // Every frame from the key frame before the clip to its end, each converted; the
    // clip's 16 frames are among them.
    let naive_sets: Vec<Vec<u32>> = starts
        .iter()
        .map(|&a| {
            let key = keys.iter().rev().find(|&&k| k <= a).copied().unwrap_or(0);
            (key as u32..=(a + 15 * stride) as u32).collect()
        })
        .collect();
    run("baseline", &naive_sets);
}
