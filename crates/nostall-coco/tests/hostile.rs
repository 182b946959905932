//! Hostile files and index bytes give errors or problems, never a panic, a hang or a
//! large allocation: cuts, byte flips, every field of the wrong type, huge numbers,
//! overrunning RLEs, polygons over the limit, damaged indexes; panoptic files' and
//! indexes' cuts and flips likewise.

use nostall_coco::{
    polygons_to_mask, Annotations, CocoError, Limits, PanopticIndex, ProblemKind, Rle, Segmentation,
};
use serde_json::Value;

/// A small file with every kind of annotation: polygons in hundredths and at full
/// precision, several polygons, compressed (with a backslash) and uncompressed RLEs,
/// keypoints, crowds.
fn small() -> String {
    // A first run of 44 is written with a backslash, which JSON escapes.
    let rle = Rle::new(13, 17, vec![44, 10, 20, 5, 142]).unwrap();
    assert!(
        rle.to_compressed().contains('\\'),
        "{}",
        rle.to_compressed()
    );
    let compressed = rle.to_compressed().replace('\\', "\\\\");
    format!(
        r#"{{"info": {{"description": "hostile"}},
"images": [
 {{"id": 3, "file_name": "three.jpg", "width": 17, "height": 13}},
 {{"id": 1, "file_name": "one.jpg", "width": 32, "height": 24, "coco_url": "x"}},
 {{"id": 2, "file_name": "two.jpg", "width": 9, "height": 40}}
],
"annotations": [
 {{"id": 10, "image_id": 1, "category_id": 5, "bbox": [1.5, 2.25, 20, 10], "area": 120.5, "iscrowd": 0,
   "segmentation": [[1.5, 2.25, 21.5, 2.25, 21.5, 12.25, 1.5, 12.25], [3, 3, 5, 3, 4, 8]]}},
 {{"id": 11, "image_id": 3, "category_id": 1, "bbox": [0, 0, 17, 13], "area": 80, "iscrowd": 1,
   "segmentation": {{"size": [13, 17], "counts": "{compressed}"}}}},
 {{"id": 12, "image_id": 3, "category_id": 1, "bbox": [2, 2, 3, 3], "iscrowd": 1,
   "segmentation": {{"counts": {counts:?}, "size": [13, 17]}}}},
 {{"id": 13, "image_id": 2, "category_id": 1, "bbox": [0.1, 0.2, 8, 30], "area": 12,
   "segmentation": [[0.30000000000000004, 0.1, 8.7, 1.9, 4.123456789, 39.5]],
   "keypoints": [1, 2, 2, 3.5, 4, 1, 0, 0, 0], "num_keypoints": 2}},
 {{"id": 14, "image_id": 1, "category_id": 5, "bbox": [30, 20, 5, 5], "segmentation": []}}
],
"categories": [
 {{"id": 5, "name": "kite", "supercategory": "sports"}},
 {{"id": 1, "name": "person", "keypoints": ["nose", "eye", "ear"], "skeleton": [[1, 2], [2, 3]]}}
]}}
"#,
        counts = rle.counts()
    )
}

/// Limits small enough that any mask of an accepted file is cheap to make.
fn limits() -> Limits {
    let mut l = Limits::default();
    l.max_image_side = 2_000;
    l
}

/// Everything an accepted index hands out, used: masks, RLEs, polygons, keypoints, and
/// its bytes round trip.
fn exercise(index: &Annotations) {
    let mut pixels = 0u64;
    for i in 0..index.image_count() {
        let image = index.image(i).unwrap();
        assert_eq!(index.image_index(image.id), Some(i));
        for a in image.annotations() {
            assert!((a.label as usize) < index.categories().len());
            let mask = a.mask();
            assert_eq!(
                mask.len() as u64,
                u64::from(image.width) * u64::from(image.height)
            );
            let rle = a.rle();
            assert_eq!(rle.decode(), mask);
            pixels += rle.area();
            if let Segmentation::Polygons(p) = a.segmentation {
                for polygon in p.iter() {
                    assert!(polygon.len() >= 6 && polygon.to_vec().len() == polygon.len());
                }
            }
            assert_eq!(a.keypoints.len() % 3, 0);
        }
    }
    let again = Annotations::from_bytes(&index.to_bytes(), &limits()).unwrap();
    assert!(again == *index);
    std::hint::black_box(pixels);
}

/// A small, sound panoptic file: segments of things and stuff, an image without any,
/// fields nostall does not keep.
fn small_panoptic() -> String {
    r#"{"info": {"year": 2017},
"annotations": [
 {"image_id": 2, "file_name": "b.png", "segments_info": [
   {"id": 5, "category_id": 1, "iscrowd": 0, "bbox": [0, 0, 1, 1], "area": 1},
   {"id": 65536, "category_id": 200}]},
 {"image_id": 1, "file_name": "a.png", "segments_info": []},
 {"image_id": 3, "file_name": "c.png", "segments_info": [{"id": 7, "category_id": 200}]},
 {"image_id": 4, "file_name": "d.png", "segments_info": []}
],
"images": [{"id": 2, "file_name": "b.jpg", "width": 4, "height": 3},
           {"id": 1, "file_name": "a.jpg", "width": 2, "height": 2},
           {"id": 3, "file_name": "c.jpg", "width": 2, "height": 2},
           {"id": 4, "file_name": "d.jpg", "width": 2, "height": 2}],
"categories": [{"id": 200, "name": "wall", "isthing": 0},
               {"id": 1, "name": "person", "isthing": 1, "color": [220, 20, 60]}]}
"#
    .to_string()
}

/// Everything an accepted panoptic index hands out, used, and its bytes round trip.
fn exercise_panoptic(index: &PanopticIndex) {
    for i in 0..index.image_count() {
        let image = index.image(i).unwrap();
        assert_eq!(index.image_index(image.id), Some(i));
        for s in image.segments {
            assert!(index.categories().iter().any(|c| c.id == s.category_id));
        }
    }
    let again = PanopticIndex::from_bytes(&index.to_bytes(), &limits()).unwrap();
    assert!(again == *index);
}

/// A fixed-seed generator (splitmix64).
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

#[test]
fn the_small_file_is_sound() {
    let (index, problems) = Annotations::parse(small().as_bytes(), &limits()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!((index.image_count(), index.annotation_count()), (3, 5));
    exercise(&index);
}

/// Every cut of the file `json` is refused as not the format, but the cut of a trailing
/// newline, which reads as the whole file.
fn every_cut_is_refused<T: PartialEq>(json: &[u8], parse: impl Fn(&[u8]) -> Result<T, CocoError>) {
    let whole = parse(json).expect("the whole file reads");
    for cut in 0..json.len() {
        match parse(&json[..cut]) {
            Err(CocoError::Format(_)) => {}
            // Only the trailing newline can go.
            Ok(r) => assert!(cut == json.len() - 1 && r == whole, "cut at {cut}"),
            Err(e) => panic!("cut at {cut}: {e}"),
        }
    }
}

/// How 5 000 mutations of the file `json` (one to three edits each: a bit flipped, a
/// byte of JSON's syntax put, taken out or added, a piece copied elsewhere) read:
/// `parse` of each says whether it was accepted and with problems. Returns how many
/// were sound, had problems, were refused.
fn mutations(json: &[u8], seed: u64, parse: impl Fn(&[u8]) -> Option<bool>) -> [usize; 3] {
    let mut rng = Rng(seed);
    let mut counts = [0; 3];
    const SIGNIFICANT: &[u8] = b"0123456789.-+eE,:[]{}\" \\ntfa";
    for _ in 0..5_000 {
        let mut bytes = json.to_vec();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(bytes.len());
            match rng.below(5) {
                0 => bytes[at] ^= 1 << rng.below(8),
                1 => bytes[at] = SIGNIFICANT[rng.below(SIGNIFICANT.len())],
                2 => {
                    bytes.remove(at);
                }
                3 => bytes.insert(at, SIGNIFICANT[rng.below(SIGNIFICANT.len())]),
                _ => {
                    let end = (at + rng.below(40)).min(bytes.len());
                    let piece = bytes[at..end].to_vec();
                    let to = rng.below(bytes.len());
                    bytes.splice(to..to, piece);
                }
            }
        }
        match parse(&bytes) {
            Some(false) => counts[0] += 1,
            Some(true) => counts[1] += 1,
            None => counts[2] += 1,
        }
    }
    counts
}

#[test]
fn every_cut_of_a_file_is_refused() {
    every_cut_is_refused(small().as_bytes(), |json| {
        Annotations::parse(json, &limits())
    });
    every_cut_is_refused(small_panoptic().as_bytes(), |json| {
        PanopticIndex::parse(json, &limits())
    });
}

#[test]
fn flipped_bytes_never_panic() {
    let [ok, problems, refused] = mutations(small().as_bytes(), 0x5eed, |json| {
        let (index, p) = Annotations::parse(json, &limits()).ok()?;
        exercise(&index);
        Some(!p.is_empty())
    });
    eprintln!("5000 mutations: {ok} sound, {problems} with problems, {refused} refused");
    assert!(ok > 0 && problems > 0 && refused > 0);
    let [ok, problems, refused] = mutations(small_panoptic().as_bytes(), 0x5eed, |json| {
        let (index, p) = PanopticIndex::parse(json, &limits()).ok()?;
        exercise_panoptic(&index);
        Some(!p.is_empty())
    });
    eprintln!("5000 mutations of a panoptic file: {ok} sound, {problems} with problems, {refused} refused");
    assert!(ok > 0 && problems > 0 && refused > 0);
}

/// Puts `text` (raw JSON, perhaps not representable as a `Value`) at `pointer` (a new
/// key of an object, or an existing place).
fn with(base: &Value, pointer: &str, text: &str) -> String {
    let mut v = base.clone();
    let marker = Value::String("@@HERE@@".into());
    match v.pointer_mut(pointer) {
        Some(place) => *place = marker,
        None => {
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let object = v.pointer_mut(parent).and_then(Value::as_object_mut);
            object
                .unwrap_or_else(|| panic!("{pointer}"))
                .insert(key.into(), marker);
        }
    }
    v.to_string().replace("\"@@HERE@@\"", text)
}

#[test]
fn every_field_of_the_wrong_type_never_panics() {
    let base: Value = serde_json::from_str(&small()).unwrap();
    let pointers = [
        "/images",
        "/images/0",
        "/images/0/id",
        "/images/0/file_name",
        "/images/0/width",
        "/images/0/height",
        "/annotations",
        "/annotations/0",
        "/categories",
        "/categories/1",
        "/categories/1/id",
        "/categories/1/name",
        "/categories/1/keypoints",
        "/categories/1/keypoints/0",
        "/categories/1/skeleton",
        "/categories/1/skeleton/0",
        "/categories/1/skeleton/0/1",
    ];
    let mut fields = pointers.map(String::from).to_vec();
    for a in 0..5 {
        for key in [
            "id",
            "image_id",
            "category_id",
            "bbox",
            "area",
            "iscrowd",
            "segmentation",
            "keypoints",
            "num_keypoints",
        ] {
            fields.push(format!("/annotations/{a}/{key}"));
        }
    }
    fields.extend(
        [
            "/annotations/0/bbox/2",
            "/annotations/0/segmentation/0",
            "/annotations/0/segmentation/1/3",
            "/annotations/1/segmentation/size",
            "/annotations/1/segmentation/size/0",
            "/annotations/1/segmentation/counts",
            "/annotations/2/segmentation/counts",
            "/annotations/2/segmentation/counts/1",
            "/annotations/3/keypoints/4",
        ]
        .map(String::from),
    );
    let values = [
        "\"s\"",
        "\"\"",
        "[]",
        "{}",
        "null",
        "true",
        "false",
        "0",
        "-1",
        "1.5",
        "-0.0",
        "1e400",
        "-1e400",
        "1e300",
        "18446744073709551616",
        "4294967296",
        "[[1]]",
        "[1, 2]",
        "{\"a\": 1}",
        "NaN",
        "Infinity",
    ];
    let (mut accepted, mut refused) = (0, 0);
    for field in &fields {
        for value in values {
            let json = with(&base, field, value);
            match Annotations::parse(json.as_bytes(), &limits()) {
                Ok((index, _)) => {
                    exercise(&index);
                    accepted += 1;
                }
                Err(e) => {
                    assert!(
                        matches!(e, CocoError::Format(_) | CocoError::TooLarge(_)),
                        "{field} = {value}: {e}"
                    );
                    refused += 1;
                }
            }
        }
    }
    eprintln!(
        "{} wrong fields: {accepted} accepted, {refused} refused",
        fields.len() * values.len()
    );
    // A string where the box's numbers belong refuses the file, naming the annotation
    // (by position, and by id when its `id` came before).
    let e = Annotations::parse(
        with(&base, "/annotations/3/bbox/1", "\"1\"").as_bytes(),
        &limits(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("in annotation #3 of `annotations`"),
        "{e}"
    );
    let json = small().replace("[0.1, 0.2, 8, 30]", "[0.1, \"0.2\", 8, 30]");
    let e = Annotations::parse(json.as_bytes(), &limits()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "not a COCO annotation file: invalid type: string \"0.2\", expected f64 at line 14 \
         column 64, in annotation #3 of `annotations` (counted from 0), id 13"
    );
}

#[test]
fn huge_and_negative_numbers() {
    let base: Value = serde_json::from_str(&small()).unwrap();
    let parse = |pointer: &str, text: &str| {
        Annotations::parse(with(&base, pointer, text).as_bytes(), &limits())
    };
    let problem = |pointer: &str, text: &str| {
        let (_, problems) = parse(pointer, text).unwrap();
        assert_eq!(problems.len(), 1, "{pointer} = {text}: {problems:?}");
        problems[0].kind.clone()
    };
    assert!(matches!(
        parse("/images/1/width", "10000000000"),
        Err(CocoError::TooLarge(_))
    ));
    assert!(matches!(
        parse("/images/1/width", "2001"),
        Err(CocoError::TooLarge(_))
    ));
    assert!(matches!(
        parse("/images/1/width", "-32"),
        Err(CocoError::Format(_))
    ));
    assert!(matches!(
        parse("/images/1/width", "1e10"),
        Err(CocoError::Format(_))
    ));
    assert!(matches!(
        parse("/annotations/0/id", "18446744073709551616"),
        Err(CocoError::Format(_))
    ));
    assert!(matches!(
        parse("/annotations/0/id", "-1"),
        Err(CocoError::Format(_))
    ));
    assert!(matches!(
        parse("/annotations/0/bbox/2", "1e400"),
        Err(CocoError::Format(_))
    ));
    assert!(matches!(
        problem("/annotations/0/bbox/2", "-20"),
        ProblemKind::BadBox(_)
    ));
    assert!(matches!(
        problem("/annotations/0/bbox/2", "1e39"),
        ProblemKind::BadBox(_)
    ));
    assert!(matches!(
        problem("/annotations/0/bbox/0", "-1e6"),
        ProblemKind::BoxOutside(_)
    ));
    assert!(matches!(
        problem("/annotations/0/bbox/1", "1e30"),
        ProblemKind::BoxOutside(_)
    ));
    assert!(matches!(
        problem("/annotations/3/keypoints/3", "-1e300"),
        ProblemKind::KeypointsNotFinite
    ));
    // Far coordinates are kept (as f64) and rasterised without walking to them.
    let (index, problems) = parse("/annotations/0/segmentation/0/2", "1e300").unwrap();
    assert!(problems.is_empty());
    exercise(&index);
    let (index, _) = parse("/annotations/0/segmentation/0/3", "-1.7976931348623157e308").unwrap();
    exercise(&index);
}

#[test]
fn rle_overruns_and_malformed_strings() {
    let base: Value = serde_json::from_str(&small()).unwrap();
    let kind = |pointer: &str, text: &str| {
        let (_, problems) =
            Annotations::parse(with(&base, pointer, text).as_bytes(), &limits()).unwrap();
        assert_eq!(problems.len(), 1, "{text}: {problems:?}");
        assert_eq!(problems[0].annotation_id, 11);
        problems[0].kind.clone()
    };
    let counts = "/annotations/1/segmentation/counts";
    let pixels = 13 * 17;
    for (text, covered) in [
        (format!("[{pixels}, 1]"), pixels + 1),
        (
            "[4294967295, 4294967295, 4294967295]".to_string(),
            3 * 4294967295,
        ),
        ("[]".to_string(), 0),
        ("\"\"".to_string(), 0),
        (
            format!(
                "{:?}",
                Rle::new(1, 1_000_000, vec![5, 999_995])
                    .unwrap()
                    .to_compressed()
            ),
            1_000_000,
        ),
    ] {
        assert_eq!(
            kind(counts, &text),
            ProblemKind::RleCoverage { covered, pixels },
            "{text}"
        );
    }
    for text in [
        "\"0o\"",
        "\"{}\"",
        "\"ooooooooooo0\"",
        "\"0~\"",
        "\"\\u0000\"",
        "\"é\"",
        "\"0P\"",
    ] {
        assert!(
            matches!(kind(counts, text), ProblemKind::BadRle(_)),
            "{text}"
        );
    }
    let negative = with(&base, counts, "[-1, 222]");
    assert!(matches!(
        Annotations::parse(negative.as_bytes(), &limits()),
        Err(CocoError::Format(_))
    ));
    assert!(matches!(
        kind("/annotations/1/segmentation/size", "[17, 13]"),
        ProblemKind::RleSize {
            rle: [17, 13],
            image: [13, 17]
        }
    ));
}

#[test]
fn short_polygons_and_a_million_points() {
    let base: Value = serde_json::from_str(&small()).unwrap();
    for (text, points) in [("[[1, 2]]", 1), ("[[1, 2, 3, 4]]", 2), ("[[]]", 0)] {
        let json = with(&base, "/annotations/0/segmentation", text);
        let (_, problems) = Annotations::parse(json.as_bytes(), &limits()).unwrap();
        assert_eq!(
            problems[0].kind,
            ProblemKind::ShortPolygon { polygon: 0, points },
            "{text}"
        );
    }
    let million: Vec<String> = (0..2_000_000).map(|i| (i % 1000).to_string()).collect();
    let json = with(
        &base,
        "/annotations/3/segmentation",
        &format!("[[{}]]", million.join(",")),
    );
    let e = Annotations::parse(json.as_bytes(), &limits()).unwrap_err();
    assert_eq!(
        e,
        CocoError::TooLarge(
            "annotation id 13 of image 2 has more than 100000 polygon points (raise Limits::max_polygon_points to accept it)"
                .into()
        )
    );
}

/// Every cut of the index `bytes`, and the index with a byte more, is refused; of 5 000
/// damaged copies (one to three bytes changed), those `read` accepts are `exercise`d.
/// Returns how many were accepted.
fn damaged<T>(
    bytes: &[u8],
    seed: u64,
    read: impl Fn(&[u8]) -> Result<T, CocoError>,
    exercise: impl Fn(&T),
) -> usize {
    for cut in 0..bytes.len() {
        assert!(read(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(read(&longer).is_err());
    let mut rng = Rng(seed);
    let mut accepted = 0;
    for _ in 0..5_000 {
        let mut b = bytes.to_vec();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(b.len());
            if rng.below(2) == 0 {
                b[at] ^= 1 << rng.below(8);
            } else {
                b[at] = [0, 1, 0xff, 0x7f, 0x80][rng.below(5)];
            }
        }
        if let Ok(index) = read(&b) {
            exercise(&index);
            accepted += 1;
        }
    }
    accepted
}

#[test]
fn damaged_indexes_are_refused() {
    let (index, _) = Annotations::parse(small().as_bytes(), &limits()).unwrap();
    let bytes = index.to_bytes();
    let read = |b: &[u8]| Annotations::from_bytes(b, &limits());
    let accepted = damaged(&bytes, 0xb17e5, read, exercise);
    eprintln!("5000 damaged indexes: {accepted} accepted (values changed, still consistent)");
    // A length of 2^64 - 1 is refused before anything is allocated.
    let mut forged = bytes[..5].to_vec();
    forged.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        Annotations::from_bytes(&forged, &limits()),
        Err(CocoError::Corrupt(_))
    ));
    let mut one = limits();
    one.max_annotations_per_image = 1;
    assert!(matches!(
        Annotations::from_bytes(&bytes, &one),
        Err(CocoError::TooLarge(_))
    ));
    let (index, _) = PanopticIndex::parse(small_panoptic().as_bytes(), &limits()).unwrap();
    let read = |b: &[u8]| PanopticIndex::from_bytes(b, &limits());
    let accepted = damaged(&index.to_bytes(), 0xb17e5, read, exercise_panoptic);
    eprintln!("5000 damaged panoptic indexes: {accepted} accepted");
}

#[test]
fn the_rasteriser_takes_anything() {
    let polys: Vec<Vec<f64>> = vec![
        vec![f64::NAN; 6],
        vec![f64::INFINITY, 0.0, f64::NEG_INFINITY, 1.0, 3.0, f64::MAX],
        vec![0.0, 0.0, f64::MIN_POSITIVE, 1e-300, 5.0],
        vec![],
        vec![1.0],
        vec![-1e18, -1e18, 1e18, -1e18, 1e18, 1e18, -1e18, 1e18],
    ];
    for (h, w) in [(0, 0), (0, 7), (7, 0), (1, 1), (9, 13)] {
        let mask = polygons_to_mask(&polys, h, w);
        assert_eq!(mask.len(), (h * w) as usize);
    }
    // The square far around the image covers it all.
    assert!(polygons_to_mask(&polys[5..], 9, 13).iter().all(|&b| b == 1));
}
