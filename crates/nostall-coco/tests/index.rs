//! What the index holds and hands out, the problems it reports, its limits, and its
//! bytes (a 100 000-annotation file indexed once and reopened).

use std::time::Instant;

use nostall_coco::{Annotations, CocoError, Limits, Problem, ProblemKind, Rle, Segmentation};

/// A COCO file of `images` and `annotations` (JSON texts of each entry) and two
/// categories: 18 "cat" (no keypoints) and 1 "person" (3 keypoints).
fn file(images: &[&str], annotations: &[String]) -> String {
    format!(
        r#"{{"info": {{"year": 2017}}, "licenses": [], "annotations": [{}], "images": [{}],
        "categories": [{{"id": 18, "name": "cat", "supercategory": "animal"}},
                       {{"id": 1, "name": "person", "keypoints": ["nose", "left_eye", "right_eye"],
                         "skeleton": [[1, 2], [1, 3]]}}]}}"#,
        annotations.join(","),
        images.join(",")
    )
}

const IMAGES: &[&str] = &[
    r#"{"id": 9, "file_name": "b.jpg", "width": 40, "height": 30, "license": 3}"#,
    r#"{"id": 2, "file_name": "a.jpg", "width": 20, "height": 10}"#,
];

fn ann(id: u64, image: u64, category: u64, rest: &str) -> String {
    let comma = if rest.is_empty() { "" } else { ", " };
    format!(r#"{{"id": {id}, "image_id": {image}, "category_id": {category}{comma}{rest}}}"#)
}

fn parse(json: &str) -> (Annotations, Vec<Problem>) {
    Annotations::parse(json.as_bytes(), &Limits::default()).unwrap()
}

#[test]
fn images_by_id_labels_by_sorted_category_annotations_in_file_order() {
    let anns = [
        ann(
            5,
            9,
            18,
            r#""bbox": [1, 2, 3, 4], "area": 7.5, "segmentation": [[0, 0, 4, 0, 4, 4]]"#,
        ),
        ann(
            3,
            2,
            1,
            r#""bbox": [0, 0, 5, 5], "iscrowd": 0, "keypoints": [1, 2, 2, 3, 4, 1, 0, 0, 0], "num_keypoints": 2"#,
        ),
        ann(
            4,
            9,
            1,
            r#""bbox": [1.5, 2.25, 3, 4], "segmentation": null, "iscrowd": true"#,
        ),
        ann(
            1,
            9,
            18,
            r#""bbox": [0, 0, 1, 1], "segmentation": [], "attributes": {"x": [1]}"#,
        ),
    ];
    let (index, problems) = parse(&file(IMAGES, &anns));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(index.image_count(), 2);
    assert_eq!(index.annotation_count(), 4);
    let cats = index.categories();
    assert_eq!((cats[0].id, cats[0].name.as_str()), (1, "person"));
    assert_eq!(cats[0].keypoints, ["nose", "left_eye", "right_eye"]);
    assert_eq!(cats[0].skeleton, [[1, 2], [1, 3]]);
    assert_eq!((cats[1].id, cats[1].name.as_str()), (18, "cat"));

    let a = index.image(0).unwrap();
    assert_eq!((a.id, a.file_name, a.width, a.height), (2, "a.jpg", 20, 10));
    let only: Vec<_> = a.annotations().collect();
    assert_eq!(only.len(), 1);
    assert_eq!((only[0].id, only[0].label, only[0].category_id), (3, 0, 1));
    assert_eq!(
        only[0].keypoints,
        [1.0, 2.0, 2.0, 3.0, 4.0, 1.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(only[0].area, 25.0, "no area: the box's");
    assert!(matches!(only[0].segmentation, Segmentation::None));

    let b = index.image(1).unwrap();
    assert_eq!((b.id, b.file_name, b.width, b.height), (9, "b.jpg", 40, 30));
    let anns: Vec<_> = b.annotations().collect();
    assert_eq!(anns.iter().map(|a| a.id).collect::<Vec<_>>(), [5, 4, 1]);
    assert_eq!(
        (anns[0].label, anns[0].bbox, anns[0].area),
        (1, [1.0, 2.0, 3.0, 4.0], 7.5)
    );
    assert!(!anns[0].iscrowd && anns[1].iscrowd);
    assert_eq!(anns[1].bbox, [1.5, 2.25, 3.0, 4.0]);
    assert!(matches!(anns[1].segmentation, Segmentation::None));
    assert!(matches!(anns[2].segmentation, Segmentation::None));
    let Segmentation::Polygons(p) = anns[0].segmentation else {
        panic!("polygons expected");
    };
    assert_eq!(p.len(), 1);
    assert_eq!(p.get(0).unwrap().to_vec(), [0.0, 0.0, 4.0, 0.0, 4.0, 4.0]);
    assert!(p.get(1).is_none());
    assert_eq!(anns[0].mask().len(), 40 * 30);
    assert_eq!(anns[1].mask(), vec![0; 40 * 30]);

    assert_eq!(index.image_index(9), Some(1));
    assert_eq!(index.image_index(3), None);
    assert!(index.image(2).is_none());
}

#[test]
fn coordinates_are_kept_exactly() {
    // 0.1 + 0.2 is not a number of hundredths: the annotation's coordinates are kept as
    // f64, the ones before it too.
    let odd = 0.1 + 0.2;
    let anns = [
        ann(
            1,
            2,
            1,
            &format!(
                r#""bbox": [0, 0, 1, 1], "segmentation": [[1.25, 2, 3, 4, 5, 6], [1, 1, 2, 2, {odd}, 7]]"#
            ),
        ),
        ann(
            2,
            2,
            1,
            r#""bbox": [0, 0, 1, 1], "segmentation": [[-0.01, 21474836.47, 1e-7, 3, 5, 6]]"#,
        ),
    ];
    let (index, problems) = parse(&file(IMAGES, &anns));
    assert!(problems.is_empty(), "{problems:?}");
    let image = index.image(0).unwrap();
    let coords: Vec<Vec<Vec<f64>>> = image
        .annotations()
        .map(|a| match a.segmentation {
            Segmentation::Polygons(p) => p.iter().map(|p| p.to_vec()).collect(),
            _ => panic!("polygons expected"),
        })
        .collect();
    assert_eq!(
        coords,
        [
            vec![
                vec![1.25, 2.0, 3.0, 4.0, 5.0, 6.0],
                vec![1.0, 1.0, 2.0, 2.0, odd, 7.0]
            ],
            vec![vec![-0.01, 21474836.47, 1e-7, 3.0, 5.0, 6.0]],
        ]
    );
}

#[test]
fn crowd_rles_compressed_and_not() {
    let mask: Vec<u8> = (0..200).map(|i| u8::from(i % 7 < 3)).collect();
    let rle = Rle::encode(&mask, 10, 20).unwrap();
    let list = format!("{:?}", rle.counts());
    let anns = [
        ann(
            1,
            2,
            18,
            &format!(
                r#""bbox": [0, 0, 9, 9], "iscrowd": 1, "segmentation": {{"size": [10, 20], "counts": "{}"}}"#,
                rle.to_compressed().replace('\\', "\\\\")
            ),
        ),
        ann(
            2,
            2,
            18,
            &format!(
                r#""bbox": [0, 0, 9, 9], "iscrowd": 1, "segmentation": {{"counts": {list}, "size": [10, 20]}}"#
            ),
        ),
    ];
    let (index, problems) = parse(&file(IMAGES, &anns));
    assert!(problems.is_empty(), "{problems:?}");
    for a in index.image(0).unwrap().annotations() {
        assert!(a.iscrowd);
        assert_eq!(a.mask(), mask);
        assert_eq!(a.rle(), rle);
        let Segmentation::Rle(r) = a.segmentation else {
            panic!("RLE expected");
        };
        assert_eq!((r.height(), r.width(), r.counts()), (10, 20, rle.counts()));
    }
}

/// One bad annotation among good ones: the bad one is reported (with its ids), the
/// others kept.
#[test]
fn bad_annotations_are_problems() {
    let poly = r#""segmentation": [[0, 0, 4, 0, 4, 4]]"#;
    let cases: Vec<(String, ProblemKind)> = vec![
        (
            ann(7, 5, 18, r#""bbox": [0, 0, 1, 1]"#),
            ProblemKind::UnknownImage,
        ),
        (
            ann(7, 2, 3, r#""bbox": [0, 0, 1, 1]"#),
            ProblemKind::UnknownCategory(3),
        ),
        (
            ann(1, 2, 18, r#""bbox": [0, 0, 1, 1]"#),
            ProblemKind::DuplicateId,
        ),
        (ann(7, 2, 18, poly), ProblemKind::BoxShape(0)),
        (
            ann(7, 2, 18, r#""bbox": [0, 0, 1]"#),
            ProblemKind::BoxShape(3),
        ),
        (
            ann(7, 2, 18, r#""bbox": [0, 0, -1, 1]"#),
            ProblemKind::BadBox([0.0, 0.0, -1.0, 1.0]),
        ),
        (
            ann(7, 2, 18, r#""bbox": [0, 0, 1e300, 1]"#),
            ProblemKind::BadBox([0.0, 0.0, 1e300, 1.0]),
        ),
        (
            ann(7, 2, 18, r#""bbox": [20.5, 0, 1, 1]"#),
            ProblemKind::BoxOutside([20.5, 0.0, 1.0, 1.0]),
        ),
        (
            ann(7, 2, 18, r#""bbox": [-3, 0, 2.5, 1]"#),
            ProblemKind::BoxOutside([-3.0, 0.0, 2.5, 1.0]),
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": [1, 2, 3, 4, 5, 6]"#,
            ),
            ProblemKind::FlatPolygon,
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": [[0, 0, 1, 1, 2, 2], [1, 2, 3]]"#,
            ),
            ProblemKind::OddPolygon {
                polygon: 1,
                numbers: 3,
            },
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": [[0, 0, 1, 1]]"#,
            ),
            ProblemKind::ShortPolygon {
                polygon: 0,
                points: 2,
            },
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": [[5, 5]]"#,
            ),
            ProblemKind::ShortPolygon {
                polygon: 0,
                points: 1,
            },
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [10, 20]}"#,
            ),
            ProblemKind::BadRle("no `counts`".into()),
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"counts": [200]}"#,
            ),
            ProblemKind::BadRle("no `size`".into()),
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [10, 20], "counts": [100, 4294967296]}"#,
            ),
            ProblemKind::BadRle("count 1 is 4294967296, over u32".into()),
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [10, 20], "counts": "1~"}"#,
            ),
            ProblemKind::BadRle(
                "compressed counts: character '~' at 1 is not one of COCO's ('0' to 'o')".into(),
            ),
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [20, 10], "counts": [200]}"#,
            ),
            ProblemKind::RleSize {
                rle: [20, 10],
                image: [10, 20],
            },
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [10, 20], "counts": [150, 51]}"#,
            ),
            ProblemKind::RleCoverage {
                covered: 201,
                pixels: 200,
            },
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [10, 20], "counts": [199]}"#,
            ),
            ProblemKind::RleCoverage {
                covered: 199,
                pixels: 200,
            },
        ),
        (
            ann(
                7,
                2,
                18,
                r#""bbox": [0, 0, 1, 1], "segmentation": {"size": [10, 20], "counts": "R9"}"#,
            ),
            ProblemKind::RleCoverage {
                covered: 290,
                pixels: 200,
            },
        ),
        (
            ann(
                7,
                2,
                1,
                r#""bbox": [0, 0, 1, 1], "keypoints": [1, 2, 2, 3]"#,
            ),
            ProblemKind::KeypointsNotTriples(4),
        ),
        (
            ann(7, 2, 1, r#""bbox": [0, 0, 1, 1], "keypoints": [1, 2, 2]"#),
            ProblemKind::KeypointsCount {
                got: 1,
                expected: 3,
            },
        ),
        (
            ann(7, 2, 18, r#""bbox": [0, 0, 1, 1], "keypoints": [1, 2, 2]"#),
            ProblemKind::KeypointsCount {
                got: 1,
                expected: 0,
            },
        ),
        (
            ann(
                7,
                2,
                1,
                r#""bbox": [0, 0, 1, 1], "keypoints": [1, 2, 2, 3, 1e39, 1, 0, 0, 0]"#,
            ),
            ProblemKind::KeypointsNotFinite,
        ),
    ];
    for (bad, kind) in cases {
        let anns = [
            ann(1, 9, 18, r#""bbox": [0, 0, 1, 1]"#),
            bad.clone(),
            ann(2, 2, 1, r#""bbox": [0, 0, 1, 1]"#),
        ];
        let (index, problems) = parse(&file(IMAGES, &anns));
        let image_id = if kind == ProblemKind::UnknownImage {
            5
        } else {
            2
        };
        let id = if kind == ProblemKind::DuplicateId {
            1
        } else {
            7
        };
        assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
        assert_eq!(
            (
                problems[0].image_id,
                problems[0].annotation_id,
                &problems[0].kind
            ),
            (image_id, id, &kind),
            "{bad}"
        );
        assert!(problems[0]
            .to_string()
            .starts_with(&format!("annotation {id} of image {image_id}: ")));
        assert_eq!(index.annotation_count(), 2, "{bad}");
        let kept: Vec<u64> = (0..2)
            .flat_map(|i| {
                index
                    .image(i)
                    .unwrap()
                    .annotations()
                    .map(|a| a.id)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(kept, [2, 1], "{bad}");
    }
}

fn refused(json: &str, limits: &Limits) -> CocoError {
    Annotations::parse(json.as_bytes(), limits).unwrap_err()
}

#[test]
fn unsound_files_are_refused() {
    let good = ann(1, 2, 18, r#""bbox": [0, 0, 1, 1]"#);
    let one = file(IMAGES, std::slice::from_ref(&good));
    let limits = Limits::default();
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "EOF"),
        ("[]".into(), "expected a COCO annotation file"),
        (r#"{"annotations": []}"#.into(), "no `images`"),
        (
            one.replace("\"width\": 20", "\"width\": 0"),
            "sizes must be at least 1x1",
        ),
        (one.replace("\"width\": 20", "\"width\": -20"), "is -20x10"),
        (
            one.replace("\"id\": 9", "\"id\": 2"),
            "two images have id 2",
        ),
        (
            one.replace("\"id\": 18", "\"id\": 1"),
            "two categories have id 1",
        ),
        (
            one.replace("\"width\": 20", "\"width\": \"20\""),
            "image #1 of `images`",
        ),
        (
            file(
                IMAGES,
                &[good.clone(), r#"{"image_id": 2, "category_id": 18}"#.into()],
            ),
            "missing `id`",
        ),
        (
            file(
                IMAGES,
                &[good.clone(), ann(8, 2, 18, r#""bbox": ["0", 0, 1, 1]"#)],
            ),
            "annotation #1 of `annotations` (counted from 0), id 8",
        ),
        (
            file(IMAGES, &[ann(8, 2, 18, r#""bbox": [0, 0, 1e400, 1]"#)]),
            "number out of range",
        ),
        (
            file(IMAGES, &[ann(8, 2, 18, r#""bbox": [0, 0, NaN, 1]"#)]),
            "expected value",
        ),
        (
            file(IMAGES, &[ann(8, 2, 18, r#""iscrowd": 0.5"#)]),
            "expected 0 or 1",
        ),
        (
            file(IMAGES, &[ann(8, 2, 18, r#""segmentation": "x""#)]),
            "a list of polygons or an RLE",
        ),
        (
            file(IMAGES, &[ann(8, 2, 18, r#""id": 9"#)]),
            "appears twice",
        ),
        (format!("{} x", one), "trailing characters"),
    ];
    for (json, says) in cases {
        let e = refused(&json, &limits);
        assert!(matches!(e, CocoError::Format(_)), "{e}");
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
}

#[test]
fn limits_refuse_the_file_naming_where() {
    let big_polygon = {
        let coords: Vec<String> = (0..2 * 11).map(|i| i.to_string()).collect();
        ann(
            8,
            2,
            18,
            &format!(
                r#""bbox": [0, 0, 1, 1], "segmentation": [[0, 1, 2, 3, 4, 5], [{}]]"#,
                coords.join(",")
            ),
        )
    };
    let mut limits = Limits::default();
    limits.max_polygon_points = 13;
    let e = refused(&file(IMAGES, std::slice::from_ref(&big_polygon)), &limits);
    assert_eq!(
        e,
        CocoError::TooLarge(
            "annotation id 8 of image 2 has more than 13 polygon points (raise Limits::max_polygon_points to accept it)".into()
        )
    );
    limits.max_polygon_points = 14;
    assert!(Annotations::parse(file(IMAGES, &[big_polygon]).as_bytes(), &limits).is_ok());

    let mut limits = Limits::default();
    limits.max_annotations_per_image = 2;
    let anns: Vec<String> = (1..=3)
        .map(|i| ann(i, 9, 18, r#""bbox": [0, 0, 1, 1]"#))
        .collect();
    let e = refused(&file(IMAGES, &anns), &limits);
    assert!(
        e.to_string()
            .contains("image 9 has more than 2 annotations"),
        "{e}"
    );
    assert!(e.to_string().contains("annotation id 3"), "{e}");

    let mut limits = Limits::default();
    limits.max_rle_counts = 3;
    let rle = |counts: &str| {
        ann(
            8,
            2,
            18,
            &format!(
                r#""bbox": [0, 0, 1, 1], "segmentation": {{"size": [10, 20], "counts": {counts}}}"#
            ),
        )
    };
    for counts in ["[1, 1, 1, 197]", r#""11115c""#] {
        let e = refused(&file(IMAGES, &[rle(counts)]), &limits);
        assert!(e.to_string().contains("more than 3 RLE counts"), "{e}");
    }
    assert!(Annotations::parse(file(IMAGES, &[rle("[1, 1, 198]")]).as_bytes(), &limits).is_ok());

    let mut limits = Limits::default();
    limits.max_keypoints = 2;
    let e = refused(&file(IMAGES, &[]), &limits);
    assert!(
        e.to_string()
            .contains("category 1 (person) names 3 keypoints"),
        "{e}"
    );

    let mut limits = Limits::default();
    limits.max_image_side = 30;
    let e = refused(&file(IMAGES, &[]), &limits);
    assert!(e.to_string().contains("image 9 (b.jpg) is 40x30"), "{e}");

    let mut limits = Limits::default();
    limits.max_image_side = 100_000;
    let e = refused(
        &file(IMAGES, &[])
            .replace("\"width\": 40", "\"width\": 70000")
            .replace("\"height\": 30", "\"height\": 70000"),
        &limits,
    );
    assert!(
        e.to_string()
            .contains("more pixels than COCO's run lengths (u32) can count"),
        "{e}"
    );

    let json = file(IMAGES, &[]);
    let mut limits = Limits::default();
    limits.max_file_bytes = json.len() as u64 - 1;
    assert!(matches!(refused(&json, &limits), CocoError::TooLarge(_)));
    let dir = std::env::temp_dir().join(format!("nostall-coco-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("instances.json");
    std::fs::write(&path, &json).unwrap();
    assert!(matches!(
        Annotations::open(&path, &limits),
        Err(CocoError::TooLarge(_))
    ));
    limits.max_file_bytes += 1;
    assert_eq!(
        Annotations::open(&path, &limits).unwrap().0.image_count(),
        2
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(
        Annotations::open(&path, &limits),
        Err(CocoError::Io(_))
    ));
}

/// A synthetic COCO file: `images` images listed in a shuffled order, `per_image`
/// annotations each, interleaved; polygons of 4 to 11 points in hundredths (one in 97 at
/// full precision), an RLE every 10th annotation, keypoints on people.
fn synthetic(images: u64, per_image: u64) -> String {
    let mut s = String::from(r#"{"images": ["#);
    for k in 0..images {
        let id = (k * 7919) % images + 1;
        if k > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"id": {id}, "file_name": "{id:012}.jpg", "width": {}, "height": {}}}"#,
            300 + id % 340,
            200 + id % 280
        ));
    }
    s.push_str(r#"], "annotations": ["#);
    for n in 0..images * per_image {
        let image = n % images + 1;
        let (w, h) = (300 + image % 340, 200 + image % 280);
        if n > 0 {
            s.push(',');
        }
        let category = [1, 18, 3][(n % 3) as usize];
        let seg = if n % 10 == 0 {
            let pixels = w * h;
            format!(
                r#"{{"size": [{h}, {w}], "counts": [{}, {}, {}]}}"#,
                n % 50,
                30,
                pixels - 30 - n % 50
            )
        } else {
            let points = 4 + n % 8;
            let coords: Vec<String> = (0..points)
                .flat_map(|p| {
                    let a = p as f64 / points as f64 * std::f64::consts::TAU;
                    [
                        (w as f64 / 2.0 + (w as f64 / 3.0) * a.cos() * 100.0).round() / 100.0,
                        (h as f64 / 2.0 + (h as f64 / 3.0) * a.sin() * 100.0).round() / 100.0,
                    ]
                })
                .enumerate()
                .map(|(i, v)| {
                    if n % 97 == 1 && i == 0 {
                        format!("{}", v + 1e-9)
                    } else {
                        format!("{v}")
                    }
                })
                .collect();
            format!("[[{}]]", coords.join(","))
        };
        let keypoints = if category == 1 {
            r#", "keypoints": [10, 20, 2, 0, 0, 0, 15.5, 21, 1], "num_keypoints": 2"#
        } else {
            ""
        };
        s.push_str(&format!(
            r#"{{"id": {}, "image_id": {image}, "category_id": {category}, "iscrowd": {}, "area": {}.5, "bbox": [{}, {}, 50.25, 40.5], "segmentation": {seg}{keypoints}}}"#,
            n + 1,
            u8::from(n % 10 == 0),
            n % 1000,
            n % 200,
            n % 150,
        ));
    }
    s.push_str(
        r#"], "categories": [{"id": 1, "name": "person", "keypoints": ["a", "b", "c"]}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]}"#,
    );
    s
}

#[test]
fn hundred_thousand_annotations_index_once_and_reopen_fast() {
    let json = synthetic(2_000, 50);
    let started = Instant::now();
    let (index, problems) = Annotations::parse(json.as_bytes(), &Limits::default()).unwrap();
    let parsed = started.elapsed();
    assert!(
        problems.is_empty(),
        "{:?}",
        &problems[..problems.len().min(3)]
    );
    assert_eq!(index.image_count(), 2_000);
    assert_eq!(index.annotation_count(), 100_000);

    let bytes = index.to_bytes();
    let started = Instant::now();
    let reopened = Annotations::from_bytes(&bytes, &Limits::default()).unwrap();
    let reopen = started.elapsed();
    eprintln!(
        "100 000 annotations: JSON {} MB parsed in {parsed:?}; index {} MB reopened in {reopen:?}",
        json.len() >> 20,
        bytes.len() >> 20
    );
    assert!(reopened == index);

    // Spot checks: images by id, annotations in file order, labels by sorted category.
    for i in [0, 1, 999, 1_999] {
        let image = reopened.image(i).unwrap();
        let id = i as u64 + 1;
        assert_eq!(image.id, id);
        assert_eq!(image.file_name, format!("{id:012}.jpg"));
        assert_eq!(
            (image.width, image.height),
            (300 + id as u32 % 340, 200 + id as u32 % 280)
        );
        let anns: Vec<_> = image.annotations().collect();
        assert_eq!(anns.len(), 50);
        for (k, a) in anns.iter().enumerate() {
            let n = k as u64 * 2_000 + (id - 1);
            assert_eq!(a.id, n + 1);
            assert_eq!(a.label, [0, 2, 1][(n % 3) as usize]);
            assert_eq!(a.bbox, [(n % 200) as f32, (n % 150) as f32, 50.25, 40.5]);
            assert_eq!(a.iscrowd, n.is_multiple_of(10));
            assert_eq!(a.keypoints.len(), if n.is_multiple_of(3) { 9 } else { 0 });
            let area = a.rle().area();
            if n.is_multiple_of(10) {
                assert_eq!(area, 30);
            } else {
                assert!(area > 0);
            }
        }
    }
}
