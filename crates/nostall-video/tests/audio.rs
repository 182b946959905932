//! The audio track over a clip's span, on real footage with real recordings muxed in
//! (`tests/footage/README.md`): equal to the whole track decoded and cut by its times.

use nostall_video::{decode_audio, span_samples, FrameIndex, Limits, Span, VideoError};

/// Videos with an audio track: file, codec's rate and channels.
const WITH_AUDIO: &[(&str, u32, usize)] = &[
    ("h264_aac.mp4", 22_050, 2),
    ("vp9_opus.webm", 48_000, 1),
    ("mpeg4_mp3.avi", 44_100, 2),
];

const MAX: u64 = 1 << 26;

fn read(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/footage/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The span of frames `first..=last`: the first's time to the last's end.
fn span(index: &FrameIndex, first: usize, last: usize) -> Span {
    Span {
        start: index.pts(first),
        end: index.end(last),
        time_base: index.time_base(),
    }
}

/// Samples `wanted` of the whole track, zeros where it has none.
fn cut(whole: &[f32], first: i64, wanted: std::ops::Range<i64>) -> Vec<f32> {
    wanted
        .map(|k| {
            usize::try_from(k - first)
                .ok()
                .and_then(|i| whole.get(i))
                .copied()
                .unwrap_or(0.0)
        })
        .collect()
}

#[test]
fn a_spans_audio_is_the_whole_track_cut_at_its_times() {
    for &(name, rate, channels) in WITH_AUDIO {
        let data = read(name);
        let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
        let whole = decode_audio(&data, None, false, MAX).unwrap();
        assert_eq!((whole.rate, whole.planes.len()), (rate, channels), "{name}");
        let len = whole.planes[0].len();
        assert!(len as u64 > u64::from(rate), "{name}: {len} samples");
        assert!(whole.planes.iter().all(|p| p.len() == len));
        assert!(
            whole.planes[0].iter().any(|&s| s.abs() > 0.01),
            "{name}: silent"
        );
        let n = index.len();
        // The first frames, the middle, the last (the track may end before the video),
        // one frame, the whole video.
        for (first, last) in [
            (0, 15),
            (n / 3, n / 3 + 7),
            (n - 10, n - 1),
            (5, 5),
            (0, n - 1),
        ] {
            let span = span(&index, first, last);
            let got = decode_audio(&data, Some(&span), false, MAX).unwrap();
            let wanted = span_samples(&span, rate);
            assert_eq!(got.rate, rate);
            assert_eq!(got.first, wanted.start);
            for (c, plane) in got.planes.iter().enumerate() {
                let expected = cut(&whole.planes[c], whole.first, wanted.clone());
                assert_eq!(
                    plane, &expected,
                    "{name} frames {first}..={last} channel {c}"
                );
            }
            // Mixed down: the mean of the channels.
            let mono = decode_audio(&data, Some(&span), true, MAX).unwrap();
            assert_eq!(mono.planes.len(), 1);
            for (k, &m) in mono.planes[0].iter().enumerate() {
                let sum = got.planes[1..]
                    .iter()
                    .fold(got.planes[0][k], |s, p| s + p[k]);
                let mean = if channels == 1 {
                    sum
                } else {
                    sum * (1.0 / channels as f32)
                };
                assert_eq!(m, mean, "{name} sample {k}");
            }
        }
    }
}

#[test]
fn the_span_is_the_clips_frames_times_in_samples() {
    let data = read("h264_aac.mp4");
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    let (num, den) = index.time_base();
    let span = span(&index, 10, 25);
    let seconds = |ts: i64| ts as f64 * f64::from(num) / f64::from(den);
    let wanted = span_samples(&span, 22_050);
    // The first sample at or after the first frame's time, the last before the end of
    // the last frame's.
    assert_eq!(wanted.start, (seconds(span.start) * 22_050.0).ceil() as i64);
    assert_eq!(wanted.end, (seconds(span.end) * 22_050.0).ceil() as i64);
    assert_eq!(span.end, index.pts(26));
    let last = index.len() - 1;
    assert!(index.end(last) > index.pts(last));
}

#[test]
fn the_audio_stays_within_its_bounds_and_errors_name_their_cause() {
    let data = read("h264_aac.mp4");
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    let span = span(&index, 0, 40);
    let samples = span_samples(&span, 22_050);
    let needed = 2 * (samples.end - samples.start) as u64;
    assert!(decode_audio(&data, Some(&span), false, needed).is_ok());
    assert!(matches!(
        decode_audio(&data, Some(&span), false, needed - 1),
        Err(VideoError::TooLarge(_))
    ));
    assert!(matches!(
        decode_audio(&data, None, false, 1000),
        Err(VideoError::TooLarge(_))
    ));
    // A video without an audio track.
    assert_eq!(
        decode_audio(&read("h264_bframes.mp4"), Some(&span), true, MAX),
        Err(VideoError::NoAudio)
    );
    // Cut files and random bytes are errors, never a panic.
    for frac in [0.004, 0.3, 0.6, 0.97] {
        let cut = &data[..(data.len() as f64 * frac) as usize];
        let _ = decode_audio(cut, Some(&span), false, MAX);
        let _ = decode_audio(cut, None, true, MAX);
    }
    let mut flipped = data.clone();
    let mdat = data.windows(4).position(|w| w == b"mdat").unwrap();
    for i in (mdat + 200..data.len()).step_by(97) {
        flipped[i] ^= 0x5a;
    }
    let _ = decode_audio(&flipped, Some(&span), false, MAX);
    let _ = decode_audio(&flipped, None, false, MAX);
}
