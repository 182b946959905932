//! Exactness on any video files: at random offsets, the frames `ClipDecoder` gives are
//! byte-equal to decoding the file from its start. For the benchmark set, which the
//! tests' footage does not cover (1080p, key frames 10 s apart, a phone's variable rate).
//!
//! `cargo run --release -p nostall-video --example exactness -- [--offsets N] VIDEO...`
//!
//! For each file, `N` single frames and `N` 16-frame clips at random places (a fixed
//! seed), each decoded by a fresh call as the loader does; a line per file says how many
//! frames were checked and how many differed. Exits 1 if any did.

use nostall_video::{decode_all, ClipDecoder, FrameIndex, Limits};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut offsets = 100usize;
    if let Some(at) = args.iter().position(|a| a == "--offsets") {
        offsets = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .expect("--offsets N");
        args.drain(at..at + 2);
    }
    assert!(!args.is_empty(), "usage: exactness [--offsets N] VIDEO...");
    let limits = Limits::default();
    let mut wrong_files = 0;
    for path in &args {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut frames: Vec<Vec<u8>> = Vec::new();
        decode_all(&data, &limits, &mut |_, f| frames.push(f.rgb.to_vec()))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let index = FrameIndex::scan(&data, &limits).expect("indexed by decode_all");
        let n = frames.len();
        // SplitMix64 from a fixed seed: the same places on every run.
        let mut state = 0x5eed_u64;
        let mut next = |bound: usize| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % bound as u64) as usize
        };
        let mut sets: Vec<Vec<u32>> = (0..offsets).map(|_| vec![next(n) as u32]).collect();
        let span = 16.min(n);
        sets.extend((0..offsets).map(|_| {
            let start = next(n - span + 1);
            (start..start + span).map(|k| k as u32).collect()
        }));
        let (mut checked, mut differ) = (0usize, 0usize);
        let mut first_wrong = None;
        for wanted in &sets {
            let mut decoder = ClipDecoder::new(limits);
            decoder
                .decode(&data, &index, wanted, &mut |at, f| {
                    checked += 1;
                    if f.rgb != frames[wanted[at] as usize].as_slice() {
                        differ += 1;
                        first_wrong.get_or_insert(wanted[at]);
                    }
                })
                .unwrap_or_else(|e| panic!("{path}: frames {wanted:?}: {e}"));
        }
        let expected: usize = sets.iter().map(Vec::len).sum();
        let verdict = match (differ, checked == expected) {
            (0, true) => "exact".to_string(),
            (_, true) => format!("{differ} DIFFER (first: frame {})", first_wrong.unwrap()),
            _ => format!("{} frames MISSING", expected - checked),
        };
        println!(
            "{path}: {} {}x{}, {n} frames, {} key frames: {checked} frames at {} offsets \
             checked, {verdict}",
            index.codec(),
            index.width(),
            index.height(),
            index.key_frames().count(),
            sets.len()
        );
        if verdict != "exact" {
            wrong_files += 1;
        }
    }
    if wrong_files > 0 {
        std::process::exit(1);
    }
}
