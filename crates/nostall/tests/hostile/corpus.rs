//! Dozens of kinds of hostile files among real photographs (the demo set). Under `skip`,
//! for 1, 2 and 4 threads and 3 epochs: every good sample once per epoch, the same bytes
//! whatever the thread count, and exact counts by cause. Under `error`: the message names
//! the bad file, never a good one. Every run under a watchdog: never a panic, a hang or
//! an abort. `make test` runs this in a release build too, where overflow wraps.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::watchdog;
use nostall::catalog::Catalog;
use nostall::prep::image::codec::{encode_jpeg, Decoder, EncodePixels, DEFAULT_MAX_PIXELS};
use nostall::storage::{LocalFiles, ReadMode};
use nostall::{ErrorPolicy, Loader, LoaderConfig, Pipeline};

/// A hostile file: its name, its bytes, and what the loader must make of it (a cause
/// kind, or `None` when it is unusual but valid and must be delivered).
struct Kind {
    name: &'static str,
    bytes: Vec<u8>,
    expect: Option<&'static str>,
}

fn kind(name: &'static str, bytes: Vec<u8>, expect: Option<&'static str>) -> Kind {
    Kind {
        name,
        bytes,
        expect,
    }
}

/// The marker segments of a JPEG before its first scan: (marker, offset, length with the
/// marker).
fn segments(jpeg: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 2;
    while at + 4 <= jpeg.len() && jpeg[at] == 0xFF {
        let marker = jpeg[at + 1];
        let len = 2 + u16::from_be_bytes([jpeg[at + 2], jpeg[at + 3]]) as usize;
        out.push((marker, at, len));
        if marker == 0xDA {
            break;
        }
        at += len;
    }
    out
}

fn segment(jpeg: &[u8], marker: u8) -> (usize, usize) {
    let (_, at, len) = *segments(jpeg)
        .iter()
        .find(|s| s.0 == marker)
        .unwrap_or_else(|| panic!("no segment {marker:02x}"));
    (at, len)
}

/// `jpeg` with `bytes` inserted at `at`.
fn insert(jpeg: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut out = jpeg[..at].to_vec();
    out.extend_from_slice(bytes);
    out.extend_from_slice(&jpeg[at..]);
    out
}

/// `jpeg` without the segments of `marker`.
fn without(jpeg: &[u8], marker: u8) -> Vec<u8> {
    let mut out = jpeg.to_vec();
    for (m, at, len) in segments(jpeg).into_iter().rev() {
        if m == marker {
            out.drain(at..at + len);
        }
    }
    out
}

/// `jpeg` with the byte at `offset` within the first segment of `marker` set to `value`.
fn patch(jpeg: &[u8], marker: u8, offset: usize, value: u8) -> Vec<u8> {
    let (at, _) = segment(jpeg, marker);
    let mut out = jpeg.to_vec();
    out[at + offset] = value;
    out
}

/// The frame header (baseline or progressive) declaring `width` × `height`.
fn declare(jpeg: &[u8], width: u16, height: u16) -> Vec<u8> {
    let sof = segments(jpeg)
        .into_iter()
        .find(|s| matches!(s.0, 0xC0 | 0xC2))
        .expect("a frame header");
    let mut out = jpeg.to_vec();
    out[sof.1 + 5..sof.1 + 7].copy_from_slice(&height.to_be_bytes());
    out[sof.1 + 7..sof.1 + 9].copy_from_slice(&width.to_be_bytes());
    out
}

/// A PNG chunk: length, type, data, CRC.
fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = !0u32;
    for &b in kind.iter().chain(data) {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    out.extend_from_slice(&(!crc).to_be_bytes());
    out
}

/// A PNG of the given IHDR fields and IDAT payload (already zlib-compressed).
fn png_with(
    width: u32,
    height: u32,
    depth: u8,
    color: u8,
    idat: &[u8],
    extra: &[Vec<u8>],
) -> Vec<u8> {
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(chunk(b"IHDR", &ihdr));
    for c in extra {
        out.extend_from_slice(c);
    }
    out.extend(chunk(b"IDAT", idat));
    out.extend(chunk(b"IEND", b""));
    out
}

/// A zlib stream that inflates to `len + 1` zero bytes (the png crate's own, taken from a
/// one-row image of `len` zeros): a few kilobytes that inflate to megabytes.
fn zlib_zeros(len: usize) -> Vec<u8> {
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, len as u32, 1);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_compression(png::Compression::Best);
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(&vec![0; len]).unwrap();
    writer.finish().unwrap();
    // The IDAT chunks of that image: their zlib stream inflates to `len` + 1 (the row's
    // filter byte) zeros.
    let mut stream = Vec::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let n = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        if &png[at + 4..at + 8] == b"IDAT" {
            stream.extend_from_slice(&png[at + 8..at + 8 + n]);
        }
        at += 12 + n;
    }
    stream
}

fn encode_png(
    pixels: &[u8],
    width: u32,
    height: u32,
    color: png::ColorType,
    depth: png::BitDepth,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(color);
    encoder.set_depth(depth);
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(pixels).unwrap();
    writer.finish().unwrap();
    out
}

/// The hostile kinds, made from a real photograph.
fn kinds(photo: &[u8]) -> Vec<Kind> {
    let mut decoder = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
    let full = decoder.decode_full(photo).unwrap();
    let (w, h) = (full.width, full.height);
    let rgb = full.pixels.to_vec();
    let progressive = encode_jpeg(&rgb, w, h, EncodePixels::Rgb, 85, true).unwrap();
    let scans: Vec<usize> = (0..progressive.len() - 1)
        .filter(|&i| progressive[i] == 0xFF && progressive[i + 1] == 0xDA)
        .collect();
    let soi_end = 2;
    let (sof_at, sof_len) = segment(photo, 0xC0);
    let (sos_at, sos_len) = segment(photo, 0xDA);
    let gray: Vec<u8> = rgb.chunks(3).map(|p| p[0]).collect();
    let small_rgb = &rgb[..(w as usize * 3) * 8];
    let mut kinds = vec![
        // Truncation and emptiness.
        kind(
            "truncated.jpg",
            photo[..photo.len() * 2 / 3].to_vec(),
            Some("corrupt"),
        ),
        kind(
            "header-only.jpg",
            photo[..sos_at + sos_len].to_vec(),
            Some("corrupt"),
        ),
        kind("soi-only.jpg", vec![0xFF, 0xD8], Some("unknown-format")),
        kind("empty.jpg", Vec::new(), Some("empty")),
        kind(
            "declares-9999x9999-1kb.jpg",
            declare(&photo[..1024], 9999, 9999),
            Some("corrupt"),
        ),
        // Not images at all.
        kind(
            "noise.jpg",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
                .collect(),
            Some("unknown-format"),
        ),
        kind(
            "text.jpg",
            b"a note, not a picture\n".to_vec(),
            Some("unknown-format"),
        ),
        kind(
            "gif.jpg",
            b"GIF89a\x01\x00\x01\x00\x00\x00\x00;".to_vec(),
            Some("unknown-format"),
        ),
        kind(
            "webp.jpg",
            b"RIFF\x1a\x00\x00\x00WEBPVP8 \x0e\x00\x00\x00".to_vec(),
            Some("unknown-format"),
        ),
        // Frame headers that lie.
        kind("width-0.jpg", declare(photo, 0, h as u16), Some("corrupt")),
        kind("height-0.jpg", declare(photo, w as u16, 0), Some("corrupt")),
        kind(
            "65535x65535.jpg",
            declare(photo, 65535, 65535),
            Some("corrupt"),
        ),
        kind(
            "bomb-60000x60000.jpg",
            declare(photo, 60000, 60000),
            Some("too-many-pixels"),
        ),
        kind("12-bit.jpg", patch(photo, 0xC0, 4, 12), Some("corrupt")),
        kind(
            "no-components.jpg",
            patch(photo, 0xC0, 9, 0),
            Some("corrupt"),
        ),
        kind(
            "sampling-0.jpg",
            patch(photo, 0xC0, 11, 0x00),
            Some("corrupt"),
        ),
        kind(
            "two-frame-headers.jpg",
            insert(photo, sof_at, &photo[sof_at..sof_at + sof_len]),
            Some("corrupt"),
        ),
        // Markers out of place.
        kind(
            "restart-before-frame.jpg",
            insert(photo, soi_end, &[0xFF, 0xD0]),
            Some("corrupt"),
        ),
        kind(
            "tem-before-frame.jpg",
            insert(photo, soi_end, &[0xFF, 0x01]),
            Some("corrupt"),
        ),
        kind("no-quant-tables.jpg", without(photo, 0xDB), Some("corrupt")),
        kind(
            "segment-length-1.jpg",
            insert(photo, soi_end, &[0xFF, 0xFE, 0x00, 0x01]),
            Some("corrupt"),
        ),
        kind(
            "restart-interval-without-markers.jpg",
            insert(photo, soi_end, &[0xFF, 0xDD, 0x00, 0x04, 0x00, 0x01]),
            Some("corrupt"),
        ),
        // Scan data damaged.
        kind(
            "stray-bytes-between-scans-then-cut.jpg",
            {
                let mut b = insert(&progressive, scans[2], &[1, 2, 3]);
                b.truncate(b.len() * 4 / 5);
                b
            },
            Some("corrupt"),
        ),
        kind(
            "stray-bytes-between-scans.jpg",
            insert(&progressive, scans[2], &[1, 2, 3]),
            Some("corrupt"),
        ),
        kind(
            "zeroed-scan-data.jpg",
            {
                let mut b = photo.to_vec();
                let start = sos_at + sos_len;
                let end = b.len() - 2;
                b[start..end].fill(0);
                b
            },
            Some("corrupt"),
        ),
        kind(
            "declares-99mp-cmyk-cut.jpg",
            {
                let cmyk: Vec<u8> = rgb[..(w as usize * 3) * 8]
                    .chunks(3)
                    .flat_map(|p| [p[0], p[1], p[2], 128])
                    .collect();
                let b = encode_jpeg(&cmyk, w, 8, EncodePixels::Cmyk, 90, false).unwrap();
                let b = declare(&b, 9950, 9950);
                b[..b.len() / 2].to_vec()
            },
            Some("corrupt"),
        ),
        // PNG.
        kind(
            "ihdr-2^31x2.png",
            png_with(1 << 31, 2, 8, 2, &zlib_zeros(16), &[]),
            Some("too-many-pixels"),
        ),
        kind(
            "ihdr-0x10.png",
            png_with(0, 10, 8, 2, &zlib_zeros(16), &[]),
            Some("corrupt"),
        ),
        kind(
            "ihdr-length-14.png",
            {
                let mut b = png_with(4, 4, 8, 2, &zlib_zeros(64), &[]);
                b[11] = 14;
                b
            },
            Some("corrupt"),
        ),
        kind(
            "png-truncated.png",
            {
                let b = encode_png(small_rgb, w, 8, png::ColorType::Rgb, png::BitDepth::Eight);
                b[..b.len() / 2].to_vec()
            },
            Some("corrupt"),
        ),
        kind(
            "png-bad-crc.png",
            {
                let mut b = encode_png(small_rgb, w, 8, png::ColorType::Rgb, png::BitDepth::Eight);
                let at = b.windows(4).position(|x| x == b"IDAT").unwrap();
                b[at + 6] ^= 0xFF;
                b
            },
            Some("corrupt"),
        ),
        kind(
            "palette-without-plte.png",
            png_with(4, 4, 8, 3, &zlib_zeros(19), &[]),
            Some("corrupt"),
        ),
        // Found by fuzzing: the png crate's palette expansion panicked on these.
        kind(
            "palette-of-257.png",
            png_with(4, 4, 8, 3, &zlib_zeros(19), &[chunk(b"PLTE", &[9; 771])]),
            Some("corrupt"),
        ),
        kind(
            "palette-of-2-bytes.png",
            png_with(4, 4, 8, 3, &zlib_zeros(19), &[chunk(b"PLTE", &[9; 2])]),
            Some("corrupt"),
        ),
        kind(
            "idat-too-short.png",
            png_with(64, 64, 8, 2, &zlib_zeros(100), &[]),
            Some("corrupt"),
        ),
        kind(
            "ztxt-bomb.png",
            png_with(
                4,
                4,
                8,
                0,
                &zlib_zeros(19),
                &[chunk(
                    b"zTXt",
                    &[b"k\0\0".as_slice(), &zlib_zeros(50 << 20)].concat(),
                )],
            ),
            None,
        ),
        kind(
            "zlib-bomb-4000x4000.png",
            png_with(4000, 4000, 8, 0, &zlib_zeros(4000 * 4001 - 1), &[]),
            None,
        ),
        // Unusual but valid: delivered.
        kind(
            "png-named.jpg",
            encode_png(small_rgb, w, 8, png::ColorType::Rgb, png::BitDepth::Eight),
            None,
        ),
        kind(
            "sixteen-bit-interlaced.png",
            {
                let mut out = Vec::new();
                let mut encoder = png::Encoder::new(&mut out, 16, 16);
                encoder.set_color(png::ColorType::Rgba);
                encoder.set_depth(png::BitDepth::Sixteen);
                let mut writer = encoder.write_header().unwrap();
                writer
                    .write_image_data(
                        &(0..16 * 16 * 8)
                            .map(|i| (i % 251) as u8)
                            .collect::<Vec<u8>>(),
                    )
                    .unwrap();
                writer.finish().unwrap();
                out
            },
            None,
        ),
        kind(
            "apng.png",
            {
                let mut actl = 1u32.to_be_bytes().to_vec();
                actl.extend(0u32.to_be_bytes());
                png_with(4, 4, 8, 0, &zlib_zeros(19), &[chunk(b"acTL", &actl)])
            },
            None,
        ),
        kind(
            "gray.jpg",
            encode_jpeg(&gray, w, h, EncodePixels::Gray, 90, true).unwrap(),
            None,
        ),
        kind(
            "cmyk.jpg",
            {
                let cmyk: Vec<u8> = small_rgb
                    .chunks(3)
                    .flat_map(|p| [p[0], p[1], p[2], 200])
                    .collect();
                encode_jpeg(&cmyk, w, 8, EncodePixels::Cmyk, 90, false).unwrap()
            },
            None,
        ),
        kind(
            "trailing-bytes-before-end.jpg",
            insert(photo, photo.len() - 2, &[1, 2, 3]),
            None,
        ),
        kind(
            "garbage-after-end.jpg",
            [photo, b"trailing garbage".as_slice()].concat(),
            None,
        ),
        kind(
            "large-app-segment.jpg",
            {
                let mut app = vec![0xFF, 0xE1, 0xFF, 0xFF];
                app.extend(std::iter::repeat_n(0x41, 0xFFFF - 2));
                insert(photo, soi_end, &app)
            },
            None,
        ),
        kind(
            "thousand-comments.jpg",
            insert(
                photo,
                soi_end,
                &[0xFF, 0xFE, 0x00, 0x05, b'h', b'i', b'!'].repeat(1000),
            ),
            None,
        ),
    ];
    kinds.sort_by_key(|k| k.name);
    kinds
}

/// Writes the demo photographs and the hostile kinds (as class `zz-hostile`) under `root`,
/// plus files that change after indexing; returns the photographs' count.
fn corpus(root: &Path) -> (Vec<Kind>, usize) {
    nostall_demo::write(root).unwrap();
    let photo = fs::read(first_photo(root)).unwrap();
    let photos = count_files(root);
    let bad = root.join("zz-hostile");
    fs::create_dir_all(&bad).unwrap();
    let kinds = kinds(&photo);
    for k in &kinds {
        fs::write(bad.join(k.name), &k.bytes).unwrap();
    }
    (kinds, photos)
}

fn first_photo(root: &Path) -> PathBuf {
    let class = root.join("flowers");
    let mut names: Vec<PathBuf> = fs::read_dir(class)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names.into_iter().next().unwrap()
}

fn count_files(root: &Path) -> usize {
    fs::read_dir(root)
        .unwrap()
        .map(|class| fs::read_dir(class.unwrap().path()).unwrap().count())
        .sum()
}

/// Files that change between indexing and reading: deleted, grown past the byte limit
/// (sparse), replaced by another image. Returns them with their expected causes.
fn change_after_indexing(root: &Path) -> Vec<(&'static str, Option<&'static str>)> {
    let bad = root.join("zz-hostile");
    fs::remove_file(bad.join("gray.jpg")).unwrap();
    let grown = fs::File::options()
        .append(true)
        .open(bad.join("cmyk.jpg"))
        .unwrap();
    grown.set_len(65 << 20).unwrap();
    fs::copy(first_photo(root), bad.join("apng.png")).unwrap();
    vec![
        ("gray.jpg", Some("missing")),
        ("cmyk.jpg", Some("too-large")),
        ("apng.png", None),
    ]
}

fn config(threads: usize, policy: ErrorPolicy) -> LoaderConfig {
    let mut config = LoaderConfig::new(Pipeline::imagenet_train(48));
    config.plan.batch_size = 5;
    config.plan.seed = 9;
    config.prep_threads = threads;
    config.fetch_threads = threads;
    config.on_error = policy;
    config
}

fn loader(catalog: &std::sync::Arc<Catalog>, config: LoaderConfig) -> Loader {
    let source = std::sync::Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
    Loader::new(catalog.clone(), source, config).unwrap()
}

type Epochs = Vec<(
    Vec<(Vec<u64>, Vec<u8>)>,
    BTreeMap<&'static str, u64>,
    Vec<(String, &'static str)>,
)>;

fn three_epochs(catalog: &std::sync::Arc<Catalog>, threads: usize) -> Epochs {
    let catalog = catalog.clone();
    watchdog(format!("{threads} threads"), move || {
        let l = loader(&catalog, config(threads, ErrorPolicy::Skip));
        (0..3)
            .map(|epoch| {
                let mut it = l.epoch(epoch).unwrap();
                let batches = it
                    .by_ref()
                    .map(|b| b.unwrap())
                    .map(|b| (b.ids().to_vec(), b.data().to_vec()))
                    .collect();
                let skipped = it
                    .skipped()
                    .into_iter()
                    .map(|e| {
                        (
                            e.location.rsplit('/').next().unwrap().to_string(),
                            e.cause.kind(),
                        )
                    })
                    .collect();
                (batches, it.stats().skipped, skipped)
            })
            .collect()
    })
}

#[test]
fn hostile_files_among_photographs_are_skipped_exactly_and_never_disturb_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (kinds, photos) = corpus(dir.path());
    let catalog = std::sync::Arc::new(
        Catalog::scan(dir.path(), nostall::Modality::Image)
            .unwrap()
            .0,
    );
    let mut expected: BTreeMap<String, Option<&'static str>> = kinds
        .iter()
        .map(|k| (k.name.to_string(), k.expect))
        .collect();
    for (name, expect) in change_after_indexing(dir.path()) {
        expected.insert(name.to_string(), expect);
    }
    assert!(expected.len() >= 40, "{} kinds", expected.len());
    let mut by_cause: BTreeMap<&'static str, u64> = BTreeMap::new();
    for cause in expected.values().flatten() {
        *by_cause.entry(cause).or_default() += 1;
    }
    let delivered = photos + expected.values().filter(|e| e.is_none()).count();

    let one = three_epochs(&catalog, 1);
    for (epoch, (batches, skipped, which)) in one.iter().enumerate() {
        let mut which = which.clone();
        which.sort();
        let expected_which: Vec<(String, &str)> = expected
            .iter()
            .filter_map(|(name, e)| e.map(|cause| (name.clone(), cause)))
            .collect();
        assert_eq!(which, expected_which, "epoch {epoch}");
        let mut ids: Vec<u64> = batches.iter().flat_map(|b| b.0.clone()).collect();
        ids.sort_unstable();
        let all = ids.len();
        ids.dedup();
        assert_eq!((all, ids.len()), (delivered, delivered), "epoch {epoch}");
        assert_eq!(skipped, &by_cause, "epoch {epoch}");
    }
    assert!(one == three_epochs(&catalog, 2), "2 threads differ from 1");
    assert!(one == three_epochs(&catalog, 4), "4 threads differ from 1");
}

#[test]
fn under_the_error_policy_the_message_names_the_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let (kinds, _) = corpus(dir.path());
    for k in kinds.iter().filter(|k| k.expect.is_some()) {
        let only = tempfile::tempdir().unwrap();
        let class = only.path().join("c");
        fs::create_dir(&class).unwrap();
        fs::copy(first_photo(dir.path()), class.join("0000-good.jpg")).unwrap();
        fs::write(class.join(k.name), &k.bytes).unwrap();
        fs::copy(first_photo(dir.path()), class.join("~~~~-good.jpg")).unwrap();
        let catalog = std::sync::Arc::new(
            Catalog::scan(only.path(), nostall::Modality::Image)
                .unwrap()
                .0,
        );
        let message = watchdog(k.name.to_string(), move || {
            let mut c = config(1, ErrorPolicy::Error);
            c.plan.shuffle = false;
            c.plan.batch_size = 1;
            let results: Vec<_> = loader(&catalog, c).epoch(0).unwrap().collect();
            let delivered = results.iter().filter(|r| r.is_ok()).count();
            let err = results.into_iter().find_map(|r| r.err());
            (delivered, err.map(|e| e.to_string()))
        });
        let (delivered, err) = message;
        let err = err.unwrap_or_else(|| panic!("{}: no error", k.name));
        assert_eq!(delivered, 1, "{}: {err}", k.name);
        assert!(err.contains(k.name) && !err.contains("good.jpg"), "{err}");
        assert!(
            err.contains(match k.expect.unwrap() {
                "corrupt" => "cannot decode",
                "empty" => "empty",
                "unknown-format" => "not a JPEG or PNG",
                "too-many-pixels" => "decompression bomb",
                other => other,
            }),
            "{}: {err}",
            k.name
        );
    }
}

#[test]
fn a_file_without_tables_never_borrows_those_of_the_file_before() {
    let dir = tempfile::tempdir().unwrap();
    nostall_demo::write(dir.path()).unwrap();
    let photo = fs::read(first_photo(dir.path())).unwrap();
    let tableless = without(&photo, 0xDB);
    let mut fresh = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
    assert!(fresh.decode_full(&tableless).is_err());
    // libjpeg keeps the tables of the image before; nostall must not let them be used.
    let mut used = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
    used.decode_full(&photo).unwrap();
    assert!(used.decode_full(&tableless).is_err());
}
