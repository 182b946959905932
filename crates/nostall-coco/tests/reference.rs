//! Masks against pycocotools' own (`tests/reference/masks.json`, made by
//! `tests/reference/make.py`; see its README): polygon masks bit-identical to
//! `COCO.annToMask`, RLEs decoded, encoded and measured as pycocotools does.

use std::collections::HashMap;

use nostall_coco::{polygons_to_mask, Annotations, Limits, Rle, Segmentation};
use serde_json::Value;

fn fixture() -> (Vec<u8>, Value) {
    let path = format!("{}/tests/reference/masks.json", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let value = serde_json::from_slice(&bytes).unwrap();
    (bytes, value)
}

fn size(v: &Value) -> (u32, u32) {
    (
        v["height"].as_u64().unwrap() as u32,
        v["width"].as_u64().unwrap() as u32,
    )
}

fn expected_mask(e: &Value, h: u32, w: u32) -> Vec<u8> {
    Rle::from_compressed(h, w, e["counts"].as_str().unwrap())
        .unwrap()
        .decode()
}

#[test]
fn annotation_masks_are_pycocotools() {
    let (bytes, fixture) = fixture();
    let (index, problems) = Annotations::parse(&bytes, &Limits::default()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let anns = fixture["annotations"].as_array().unwrap();
    assert_eq!(index.annotation_count(), anns.len());
    let expected: HashMap<u64, &Value> = fixture["expected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["id"].as_u64().unwrap(), e))
        .collect();
    let images: HashMap<u64, (u32, u32)> = fixture["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|im| (im["id"].as_u64().unwrap(), size(im)))
        .collect();
    let reopened = Annotations::from_bytes(&index.to_bytes(), &Limits::default()).unwrap();
    assert!(reopened == index);

    let (mut polygons, mut rles) = (0, 0);
    for i in 0..index.image_count() {
        let image = index.image(i).unwrap();
        let again = reopened.image(i).unwrap();
        for (ann, ann_again) in image.annotations().zip(again.annotations()) {
            let e = expected[&ann.id];
            let (h, w) = (image.height, image.width);
            let want = expected_mask(e, h, w);
            let got = ann.mask();
            assert!(got == want, "annotation {}: mask differs", ann.id);
            assert!(ann_again.mask() == want, "annotation {}: reopened", ann.id);
            let rle = ann.rle();
            assert_eq!(
                rle.to_compressed(),
                e["counts"].as_str().unwrap(),
                "annotation {}",
                ann.id
            );
            assert_eq!(
                rle.area(),
                e["area"].as_u64().unwrap(),
                "annotation {}",
                ann.id
            );
            match ann.segmentation {
                Segmentation::Polygons(p) => polygons += p.len(),
                Segmentation::Rle(_) => rles += 1,
                Segmentation::None => panic!("annotation {} lost its mask", ann.id),
            }
        }
    }
    assert!(
        polygons >= 300 && rles >= 20,
        "{polygons} polygons, {rles} RLEs"
    );

    // The rasteriser alone, on the coordinates as the JSON gives them; and the index
    // gives back exactly those coordinates (hundredths or f64).
    for ann in anns {
        let Some(polys) = ann["segmentation"].as_array() else {
            continue;
        };
        let coords: Vec<Vec<f64>> = polys
            .iter()
            .map(|p| {
                p.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect()
            })
            .collect();
        let (h, w) = images[&ann["image_id"].as_u64().unwrap()];
        let id = ann["id"].as_u64().unwrap();
        assert!(
            polygons_to_mask(&coords, h, w) == expected_mask(expected[&id], h, w),
            "annotation {id}: polygons_to_mask differs"
        );
        let image = index.image(
            index
                .image_index(ann["image_id"].as_u64().unwrap())
                .unwrap(),
        );
        let stored = image.unwrap().annotations().find(|a| a.id == id).unwrap();
        let Segmentation::Polygons(p) = stored.segmentation else {
            panic!("annotation {id}: not polygons");
        };
        let back: Vec<Vec<f64>> = p.iter().map(|p| p.to_vec()).collect();
        let bits = |c: &[Vec<f64>]| -> Vec<Vec<u64>> {
            c.iter()
                .map(|p| p.iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        assert_eq!(
            bits(&back),
            bits(&coords),
            "annotation {id}: coordinates changed"
        );
    }
}

#[test]
fn rles_are_pycocotools() {
    let (_, fixture) = fixture();
    let cases = fixture["rles"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for (i, case) in cases.iter().enumerate() {
        let h = case["size"][0].as_u64().unwrap() as u32;
        let w = case["size"][1].as_u64().unwrap() as u32;
        let counts: Vec<u32> = case["uncompressed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as u32)
            .collect();
        let compressed = case["counts"].as_str().unwrap();
        let rle = Rle::new(h, w, counts).unwrap();
        assert_eq!(rle.to_compressed(), compressed, "case {i}");
        assert_eq!(
            Rle::from_compressed(h, w, compressed).unwrap(),
            rle,
            "case {i}"
        );
        assert_eq!(rle.area(), case["area"].as_u64().unwrap(), "case {i}");
        let mask = rle.decode();
        assert_eq!(
            mask.iter().map(|&b| u64::from(b)).sum::<u64>(),
            rle.area(),
            "case {i}"
        );
        assert_eq!(Rle::encode(&mask, h, w).unwrap(), rle, "case {i}");
        if let Some(rows) = case["rows"].as_array() {
            let want: Vec<u8> = rows
                .iter()
                .flat_map(|r| r.as_str().unwrap().bytes().map(|b| b - b'0'))
                .collect();
            assert_eq!(mask, want, "case {i}: row-major mask");
        }
    }
}
