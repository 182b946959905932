//! Frame counts, index round trips and exactness of clip decoding on real footage
//! (`tests/footage/README.md`).

use nostall_video::{decode_all, ClipDecoder, FrameIndex, Limits, VideoError};

/// Every clip, with its codec, size and the packet count `ffprobe -count_packets` gives.
const CLIPS: &[(&str, &str, u32, u32, usize)] = &[
    ("h264_bframes.mp4", "h264", 320, 240, 81),
    ("h264_opengop.mkv", "h264", 320, 240, 90),
    ("hevc.mkv", "hevc", 384, 288, 40),
    ("vp9.webm", "vp9", 320, 240, 81),
    ("vp9_offset.webm", "vp9", 320, 240, 81),
    ("av1.mp4", "av1", 320, 240, 60),
    ("mpeg4_bframes.avi", "mpeg4", 384, 288, 40),
    ("msmpeg4v3.avi", "msmpeg4v3", 768, 576, 30),
    ("box_vfr.mp4", "h264", 640, 480, 60),
];

fn read(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/footage/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every frame of a clip as `decode_all` gives it.
fn reference(data: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let n = decode_all(data, &Limits::default(), &mut |k, f| {
        assert_eq!(k, frames.len());
        assert_eq!(f.rgb.len(), f.width as usize * f.height as usize * 3);
        frames.push(f.rgb.to_vec());
    })
    .unwrap();
    assert_eq!(n, frames.len());
    frames
}

/// SplitMix64: a fixed-seed generator for the wanted sets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Wanted sets of every shape: single frames, 16-frame clips at strides 1, 2 and 4 (which
/// span GOP boundaries on these clips), clips with repeats, shuffled, and scattered sets.
fn wanted_sets(n: usize, seed: u64, count: usize) -> Vec<Vec<u32>> {
    let mut rng = Rng(seed);
    let mut sets = Vec::new();
    for i in 0..count {
        let set: Vec<u32> = match i % 6 {
            0 => vec![rng.below(n) as u32],
            1..=3 => {
                let stride = [1, 2, 4][i % 6 - 1];
                let span = 15 * stride + 1;
                let first = if n > span { rng.below(n - span + 1) } else { 0 };
                (0..16)
                    .map(|j| ((first + j * stride).min(n - 1)) as u32)
                    .collect()
            }
            4 => {
                let mut s: Vec<u32> = (0..16).map(|_| rng.below(n) as u32).collect();
                s.push(s[0]);
                s.push(s[3]);
                s
            }
            _ => {
                let first = rng.below(n);
                let mut s: Vec<u32> = (0..16).map(|j| ((first + j) % n) as u32).collect();
                for j in (1..s.len()).rev() {
                    s.swap(j, rng.below(j + 1));
                }
                s
            }
        };
        sets.push(set);
    }
    sets
}

/// A loader moves decoders and indexes between its threads.
#[test]
fn decoder_and_index_are_send() {
    fn send<T: Send>() {}
    send::<ClipDecoder>();
    send::<FrameIndex>();
    fn sync<T: Sync>() {}
    sync::<FrameIndex>();
}

#[test]
fn counts_match_ffprobe_and_decode_all() {
    for &(name, codec, w, h, n) in CLIPS {
        let data = read(name);
        let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
        assert_eq!(index.len(), n, "{name}");
        assert_eq!(index.codec(), codec, "{name}");
        assert_eq!((index.width(), index.height()), (w, h), "{name}");
        let frames = reference(&data);
        assert_eq!(frames.len(), n, "{name}");
        // Times increase with the frame number; frame_at inverts seconds, and each frame
        // is the first at or after its own time.
        for k in 0..n {
            assert_eq!(index.frame_at(index.seconds(k)), k, "{name} frame {k}");
            assert_eq!(index.frames_before(index.seconds(k)), k, "{name} frame {k}");
            if k > 0 {
                assert!(index.pts(k) > index.pts(k - 1), "{name} frame {k}");
            }
        }
        assert_eq!(index.seconds(0), 0.0);
        assert!(index.duration_seconds() > index.seconds(n - 1), "{name}");
        assert_eq!(index.frames_before(index.duration_seconds()), n, "{name}");
        assert_eq!(index.frames_before(-1.0), 0, "{name}");
    }
}

#[test]
fn times_count_from_the_first_frame() {
    let plain = FrameIndex::scan(&read("vp9.webm"), &Limits::default()).unwrap();
    let late = FrameIndex::scan(&read("vp9_offset.webm"), &Limits::default()).unwrap();
    assert_eq!(late.time_base(), (1, 1000));
    assert_eq!(late.pts(0), 7500);
    for k in 0..plain.len() {
        assert_eq!(late.pts(k) - 7500, plain.pts(k));
        assert_eq!(late.seconds(k), plain.seconds(k));
    }
    assert_eq!(late.frame_at(1.0), plain.frame_at(1.0));
    assert_eq!(late.duration_seconds(), plain.duration_seconds());
}

#[test]
fn variable_frame_rate_is_kept() {
    let index = FrameIndex::scan(&read("box_vfr.mp4"), &Limits::default()).unwrap();
    let gaps: Vec<i64> = (1..index.len())
        .map(|k| index.pts(k) - index.pts(k - 1))
        .collect();
    let (lo, hi) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
    assert!(lo < hi, "timestamps should be irregular: {gaps:?}");
    // A clip at 10 fps picks frames by their real times.
    let ten_fps: Vec<usize> = (0..20).map(|i| index.frame_at(i as f64 * 0.1)).collect();
    for (i, &k) in ten_fps.iter().enumerate() {
        let t = i as f64 * 0.1;
        assert!(index.seconds(k) <= t + 1e-9);
        assert!(k + 1 == index.len() || index.seconds(k + 1) > t);
    }
}

#[test]
fn index_bytes_round_trip_and_truncations_are_refused() {
    for &(name, ..) in CLIPS {
        let index = FrameIndex::scan(&read(name), &Limits::default()).unwrap();
        let bytes = index.to_bytes();
        assert_eq!(
            FrameIndex::from_bytes(&bytes, &Limits::default()).unwrap(),
            index
        );
        for cut in 0..bytes.len() {
            assert!(
                FrameIndex::from_bytes(&bytes[..cut], &Limits::default()).is_err(),
                "{name}: truncated at {cut} accepted"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(FrameIndex::from_bytes(&long, &Limits::default()).is_err());
        let small = Limits::new(index.width(), index.height(), index.len() as u32 - 1);
        assert!(matches!(
            FrameIndex::from_bytes(&bytes, &small),
            Err(VideoError::TooLarge(_))
        ));
        let mut versioned = bytes.clone();
        versioned[4] = 99;
        assert!(FrameIndex::from_bytes(&versioned, &Limits::default()).is_err());
    }
}

/// Decodes `wanted` and checks every frame against the reference, once per entry.
fn check_set(
    dec: &mut ClipDecoder,
    name: &str,
    data: &[u8],
    index: &FrameIndex,
    frames: &[Vec<u8>],
    wanted: &[u32],
) -> nostall_video::DecodeStats {
    let mut seen = vec![0u32; wanted.len()];
    let stats = dec
        .decode(data, index, wanted, &mut |pos, f| {
            let k = wanted[pos] as usize;
            assert_eq!((f.width, f.height), (index.width(), index.height()));
            assert!(
                f.rgb == frames[k].as_slice(),
                "{name}: frame {k} differs from decode_all's (wanted {wanted:?})"
            );
            seen[pos] += 1;
        })
        .unwrap_or_else(|e| panic!("{name} {wanted:?}: {e}"));
    assert!(
        seen.iter().all(|&c| c == 1),
        "{name}: {wanted:?} delivered {seen:?} times"
    );
    stats
}

#[test]
fn clips_are_byte_equal_to_decode_all() {
    let mut dec = ClipDecoder::new(Limits::default());
    for (i, &(name, ..)) in CLIPS.iter().enumerate() {
        let data = read(name);
        let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
        let frames = reference(&data);
        let mut sets = wanted_sets(index.len(), 0x5eed + i as u64, 120);
        sets.push((0..index.len() as u32).collect());
        sets.push((0..index.len() as u32).rev().collect());
        for wanted in &sets {
            check_set(&mut dec, name, &data, &index, &frames, wanted);
        }
    }
}

#[test]
fn skipping_saves_work() {
    let data = read("h264_bframes.mp4");
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    let frames = reference(&data);
    let mut dec = ClipDecoder::new(Limits::default());
    // Frames 48..64: their GOP starts at frame 30, so 48 packets lie before the clip.
    let wanted: Vec<u32> = (48..64).collect();
    let stats = check_set(
        &mut dec,
        "h264_bframes.mp4",
        &data,
        &index,
        &frames,
        &wanted,
    );
    assert!(stats.packets_decoded < 48, "{stats:?}");
    assert!(stats.frames_skipped > 0, "{stats:?}");
    assert_eq!(stats.seeks, 1, "{stats:?}");
}

#[test]
fn one_decoder_reused_equals_fresh_decoders() {
    let mut reused = ClipDecoder::new(Limits::default());
    for round in 0..2 {
        for (i, &(name, ..)) in CLIPS.iter().enumerate() {
            let data = read(name);
            let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
            for wanted in wanted_sets(index.len(), 77 + i as u64 + round, 6) {
                let mut a = Vec::new();
                reused
                    .decode(&data, &index, &wanted, &mut |p, f| {
                        a.push((p, f.rgb.to_vec()))
                    })
                    .unwrap();
                let mut b = Vec::new();
                ClipDecoder::new(Limits::default())
                    .decode(&data, &index, &wanted, &mut |p, f| {
                        b.push((p, f.rgb.to_vec()))
                    })
                    .unwrap();
                a.sort();
                b.sort();
                assert!(a == b, "{name} {wanted:?}");
            }
        }
    }
}

/// The planned start of every frame is right the first time: one seek at most, no
/// fallback to an earlier key frame. On the HEVC clip this checks that leading pictures
/// (RASL: shown before their CRA key frame, decoded after it) start one key frame
/// earlier. The open-GOP H.264 clip is allowed one fallback: after a seek to a key frame
/// that is not an IDR, FFmpeg's H.264 decoder drops (as not yet "recovered") the frames
/// it decodes before it has output that key frame, good ones included; they are then
/// decoded from the key frame before.
#[test]
fn every_frame_is_reached_with_one_seek() {
    let mut dec = ClipDecoder::new(Limits::default());
    for &(name, ..) in CLIPS {
        let data = read(name);
        let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
        let most = if name == "h264_opengop.mkv" { 2 } else { 1 };
        for k in 0..index.len() as u32 {
            let stats = dec.decode(&data, &index, &[k], &mut |_, _| {}).unwrap();
            assert!(stats.seeks <= most, "{name} frame {k}: {stats:?}");
        }
    }
}
