//! Hostile inputs (`tests/footage/hostile`, see its README) give the right `VideoError`,
//! never a panic, and limits are enforced before decoding.

use nostall_video::{decode_all, ClipDecoder, FrameIndex, Limits, VideoError};

fn read(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/footage/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[derive(Debug, PartialEq)]
enum Kind {
    UnknownFormat,
    Corrupt,
}

fn kind(e: &VideoError) -> Kind {
    match e {
        VideoError::UnknownFormat(_) => Kind::UnknownFormat,
        VideoError::Corrupt(_) => Kind::Corrupt,
        other => panic!("unexpected error {other}"),
    }
}

/// Files that no index can be made of, and the error they give (with what it must say).
const REFUSED: &[(&str, Kind, &str)] = &[
    ("empty.mp4", Kind::UnknownFormat, "demux"),
    ("random.bin", Kind::UnknownFormat, "demux"),
    ("h264_cut004.mp4", Kind::UnknownFormat, "no video stream"),
    ("h264_cut500.mp4", Kind::Corrupt, "truncated"),
    ("h264_cut970.mp4", Kind::Corrupt, "truncated"),
    ("hevc_cut004.mkv", Kind::UnknownFormat, "demux"),
    ("hevc_cut500.mkv", Kind::Corrupt, "truncated"),
    ("hevc_cut970.mkv", Kind::Corrupt, "truncated"),
    ("mpeg4_cut004.avi", Kind::UnknownFormat, "demux"),
    ("mpeg4_cut500.avi", Kind::Corrupt, "truncated"),
    ("mpeg4_cut970.avi", Kind::Corrupt, "truncated"),
    // Another container: refused before its demuxer reads it.
    (
        "nsv_slow.nsv",
        Kind::UnknownFormat,
        "not a container nostall reads",
    ),
];

#[test]
fn unreadable_files_are_refused() {
    for (name, want, says) in REFUSED {
        let data = read(&format!("hostile/{name}"));
        let e = FrameIndex::scan(&data, &Limits::default()).unwrap_err();
        assert_eq!(&kind(&e), want, "{name}: {e}");
        assert!(e.to_string().contains(says), "{name}: {e}");
        let e = decode_all(&data, &Limits::default(), &mut |_, _| {}).unwrap_err();
        assert_eq!(&kind(&e), want, "{name}: {e}");
    }
}

/// Flipped bytes in frame 0 (a key frame every other frame of its GOP depends on).
#[test]
fn damaged_key_frame_is_corrupt_naming_the_frame() {
    let data = read("hostile/h264_flipped.mp4");
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    let e = decode_all(&data, &Limits::default(), &mut |_, _| {}).unwrap_err();
    assert_eq!(e, VideoError::Corrupt("frame 0 is damaged".into()));
    let mut dec = ClipDecoder::new(Limits::default());
    let e = dec
        .decode(&data, &index, &[5, 6], &mut |_, _| {})
        .unwrap_err();
    assert_eq!(e, VideoError::Corrupt("frame 0 is damaged".into()));
    // The next GOP does not depend on it: a clip there decodes (and is exact).
    let clean = read("h264_bframes.mp4");
    let mut want = Vec::new();
    decode_all(&clean, &Limits::default(), &mut |k, f| {
        if k == 40 {
            want = f.rgb.to_vec();
        }
    })
    .unwrap();
    let mut got = Vec::new();
    dec.decode(&data, &index, &[40], &mut |_, f| got = f.rgb.to_vec())
        .unwrap();
    assert!(got == want);
}

#[test]
fn unknown_codec_is_unsupported() {
    let data = read("hostile/hevc_unknown_codec.mkv");
    let e = FrameIndex::scan(&data, &Limits::default()).unwrap_err();
    assert_eq!(
        e,
        VideoError::UnsupportedCodec("a codec FFmpeg does not know".into())
    );
    let e = decode_all(&data, &Limits::default(), &mut |_, _| {}).unwrap_err();
    assert!(matches!(e, VideoError::UnsupportedCodec(_)), "{e}");
}

#[test]
fn header_size_that_lies_is_corrupt() {
    let data = read("hostile/h264_size_lies.mp4");
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    assert_eq!((index.width(), index.height()), (640, 480));
    let said = "frame 0 is 320x240, the header says 640x480";
    let e = decode_all(&data, &Limits::default(), &mut |_, _| {}).unwrap_err();
    assert_eq!(e, VideoError::Corrupt(said.into()));
    let e = ClipDecoder::new(Limits::default())
        .decode(&data, &index, &[0], &mut |_, _| {})
        .unwrap_err();
    assert_eq!(e, VideoError::Corrupt(said.into()));
}

#[test]
fn a_16k_header_is_refused_before_anything_of_its_size_is_allocated() {
    let data = read("hostile/h264_16k_lies.mp4");
    let said = "frames are 16384x16384, over the limit of 8192x8192";
    assert_eq!(
        FrameIndex::scan(&data, &Limits::default()).unwrap_err(),
        VideoError::TooLarge(said.into())
    );
    let e = decode_all(&data, &Limits::default(), &mut |_, _| panic!("decoded")).unwrap_err();
    assert_eq!(e, VideoError::TooLarge(said.into()));
}

#[test]
fn header_frame_count_is_not_trusted() {
    let data = read("hostile/mpeg4_count_lies.avi");
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    assert_eq!(index.len(), 40);
    assert_eq!(
        decode_all(&data, &Limits::default(), &mut |_, _| {}),
        Ok(40)
    );
    // Limits below the header's claim but above the real count do not refuse it.
    assert!(FrameIndex::scan(&data, &Limits::new(400, 300, 50)).is_ok());
}

#[test]
fn limits_refuse_before_decoding() {
    let data = read("h264_bframes.mp4");
    for limits in [
        Limits::new(319, 240, 1000),
        Limits::new(320, 239, 1000),
        Limits::new(320, 240, 80),
    ] {
        let e = FrameIndex::scan(&data, &limits).unwrap_err();
        assert!(matches!(e, VideoError::TooLarge(_)), "{e}");
        let e = decode_all(&data, &limits, &mut |_, _| panic!("decoded")).unwrap_err();
        assert!(matches!(e, VideoError::TooLarge(_)), "{e}");
    }
    let mut pixels = Limits::default();
    pixels.max_pixels = 320 * 240 - 1;
    let e = FrameIndex::scan(&data, &pixels).unwrap_err();
    assert_eq!(
        e,
        VideoError::TooLarge("frames have 76800 pixels, over the limit of 76799".into())
    );
    // A decoder with smaller limits than the index was made with refuses it unopened.
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    let e = ClipDecoder::new(Limits::new(160, 120, 1000))
        .decode(&data, &index, &[0], &mut |_, _| panic!("decoded"))
        .unwrap_err();
    assert!(matches!(e, VideoError::TooLarge(_)), "{e}");
}

#[test]
fn an_index_of_another_video_is_refused() {
    let a = read("h264_bframes.mp4");
    let b = read("vp9.webm");
    let index = FrameIndex::scan(&b, &Limits::default()).unwrap();
    let e = ClipDecoder::new(Limits::default())
        .decode(&a, &index, &[3], &mut |_, _| panic!("decoded"))
        .unwrap_err();
    assert!(matches!(e, VideoError::Corrupt(_)), "{e}");
}

/// Every cut and every single flipped byte of a small clip's header region gives an
/// error or frames, never a panic or a hang; the reused decoder survives them all.
#[test]
fn cuts_and_flips_never_panic() {
    let data = read("h264_bframes.mp4");
    let mut dec = ClipDecoder::new(Limits::default());
    let mut cuts: Vec<usize> = (0..data.len()).step_by(997).collect();
    cuts.push(data.len() - 1);
    for cut in cuts {
        let d = &data[..cut];
        if let Ok(index) = FrameIndex::scan(d, &Limits::default()) {
            let _ = dec.decode(d, &index, &[0, (index.len() / 2) as u32], &mut |_, _| {});
        }
    }
    let moov = data.windows(4).position(|w| w == b"moov").unwrap();
    for at in (moov..data.len().min(moov + 1500)).step_by(7) {
        let mut d = data.clone();
        d[at] ^= 0x5a;
        if let Ok(index) = FrameIndex::scan(&d, &Limits::default()) {
            let n = index.len() as u32;
            let _ = dec.decode(&d, &index, &[0, n / 2, n - 1], &mut |_, _| {});
        }
        let _ = decode_all(&d, &Limits::default(), &mut |_, _| {});
    }
    // And it still decodes a good file exactly as a fresh one does.
    let index = FrameIndex::scan(&data, &Limits::default()).unwrap();
    let mut a = Vec::new();
    dec.decode(&data, &index, &[10, 50], &mut |p, f| {
        a.push((p, f.rgb.to_vec()))
    })
    .unwrap();
    let mut b = Vec::new();
    ClipDecoder::new(Limits::default())
        .decode(&data, &index, &[10, 50], &mut |p, f| {
            b.push((p, f.rgb.to_vec()))
        })
        .unwrap();
    a.sort();
    b.sort();
    assert!(a == b);
}
