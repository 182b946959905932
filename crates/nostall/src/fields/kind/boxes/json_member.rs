//! A boxes field's JSON member: torchvision's target or COCO's annotations of one image,
//! with their segmentations and keypoints, read into [`Target`]s (a WebDataset shard's
//! `.json` member; a COCO file's images come as the binary `coco` member instead).

use serde_json::Value;

use super::keypoints::json_keypoints;
use super::Target;
use crate::storage::{check_polygon, Shape};

/// The targets of a JSON member: torchvision's `{"boxes", "labels"(, "keypoints")}`
/// (corners) or COCO's `{"annotations": [{"bbox", "category_id", "iscrowd",
/// "segmentation", "keypoints"}]}`, the masks read where `shapes` asks, the keypoints
/// where `points` does.
pub(super) fn read_json(
    member: &[u8],
    max_boxes: usize,
    shapes: bool,
    points: bool,
) -> Result<Vec<Target>, String> {
    let doc: Value =
        serde_json::from_slice(member).map_err(|e| format!("not a JSON document: {e}"))?;
    let Value::Object(doc) = doc else {
        return Err("not a JSON object: give {\"boxes\": [...], \"labels\": [...]}".into());
    };
    let too_many =
        |n: usize| (n > max_boxes).then(|| format!("{n} boxes, more than max_boxes={max_boxes}"));
    if let Some(annotations) = doc.get("annotations") {
        let list = annotations
            .as_array()
            .ok_or("\"annotations\" is not a list")?;
        if let Some(why) = too_many(list.len()) {
            return Err(why);
        }
        return list
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let [x, y, w, h] = numbers(a.get("bbox")).ok_or_else(|| {
                    format!("annotation {i}: \"bbox\" is not four finite numbers")
                })?;
                let label = a
                    .get("category_id")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| {
                        format!("annotation {i}: \"category_id\" is not a whole number")
                    })?;
                let crowd = match a.get("iscrowd") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(v) => {
                        v.as_i64().ok_or_else(|| {
                            format!("annotation {i}: \"iscrowd\" is not 0, 1 or a boolean")
                        })? != 0
                    }
                };
                let shape = match (shapes, a.get("segmentation")) {
                    (true, Some(segmentation)) => {
                        json_shape(segmentation).map_err(|why| format!("annotation {i}: {why}"))?
                    }
                    _ => Shape::None,
                };
                let keypoints = match points {
                    true => json_keypoints(a.get("keypoints"))
                        .map_err(|why| format!("annotation {i}: {why}"))?,
                    false => Vec::new(),
                };
                Ok(Target {
                    corners: [x, y, x + w, y + h],
                    label,
                    crowd,
                    shape,
                    keypoints,
                })
            })
            .collect();
    }
    let boxes = doc
        .get("boxes")
        .and_then(Value::as_array)
        .ok_or("no \"boxes\" list (nor COCO's \"annotations\")")?;
    let labels = doc
        .get("labels")
        .and_then(Value::as_array)
        .ok_or("no \"labels\" list beside \"boxes\"")?;
    if let Some(why) = too_many(boxes.len()) {
        return Err(why);
    }
    if labels.len() != boxes.len() {
        return Err(format!("{} boxes and {} labels", boxes.len(), labels.len()));
    }
    let keypoints = match (points, doc.get("keypoints")) {
        (true, Some(Value::Array(each))) if each.len() == boxes.len() => each.as_slice(),
        (true, Some(_)) => {
            return Err("\"keypoints\" is not a list of one list of points a box".into())
        }
        _ => &[],
    };
    boxes
        .iter()
        .zip(labels)
        .enumerate()
        .map(|(i, (b, l))| {
            let corners =
                numbers(Some(b)).ok_or_else(|| format!("box {i} is not four finite numbers"))?;
            if corners[2] < corners[0] || corners[3] < corners[1] {
                return Err(format!(
                    "box {i} is not x0, y0, x1, y1 with x0 <= x1 and y0 <= y1"
                ));
            }
            let label = l
                .as_i64()
                .ok_or_else(|| format!("label {i} is not a whole number"))?;
            Ok(Target {
                corners,
                label,
                crowd: false,
                shape: Shape::None,
                keypoints: json_keypoints(keypoints.get(i))
                    .map_err(|why| format!("box {i}: {why}"))?,
            })
        })
        .collect()
}

/// A COCO annotation's `segmentation`: polygons (a list of lists of coordinates), an RLE
/// (`{"size": [height, width], "counts": [...] or "compressed"}`), or none (`null`, `[]`).
fn json_shape(segmentation: &Value) -> Result<Shape, String> {
    match segmentation {
        Value::Null => Ok(Shape::None),
        Value::Array(polygons) if polygons.is_empty() => Ok(Shape::None),
        Value::Array(polygons) => {
            let mut total = 0usize;
            polygons
                .iter()
                .map(|polygon| {
                    let coords = polygon
                        .as_array()
                        .ok_or("\"segmentation\" is neither polygons nor an RLE")?;
                    total += coords.len();
                    check_polygon(coords.len(), total)?;
                    coords
                        .iter()
                        .map(|v| v.as_f64().filter(|v| v.is_finite()))
                        .collect::<Option<Vec<f64>>>()
                        .ok_or_else(|| "a polygon's coordinate is not a finite number".into())
                })
                .collect::<Result<_, String>>()
                .map(Shape::Polygons)
        }
        Value::Object(rle) => {
            let size = rle
                .get("size")
                .and_then(Value::as_array)
                .filter(|s| s.len() == 2)
                .and_then(|s| Some((s[0].as_u64()?, s[1].as_u64()?)))
                .and_then(|(h, w)| Some((u32::try_from(h).ok()?, u32::try_from(w).ok()?)))
                .ok_or("an RLE's \"size\" is not [height, width]")?;
            let made = match rle.get("counts") {
                Some(Value::String(compressed)) => {
                    nostall_coco::Rle::from_compressed(size.0, size.1, compressed)
                }
                Some(Value::Array(counts)) => {
                    let counts = counts
                        .iter()
                        .map(|c| c.as_u64().and_then(|c| u32::try_from(c).ok()))
                        .collect::<Option<Vec<u32>>>()
                        .ok_or("an RLE's counts are not whole numbers")?;
                    nostall_coco::Rle::new(size.0, size.1, counts)
                }
                _ => return Err("an RLE without \"counts\"".into()),
            };
            made.map(Shape::Rle).map_err(|e| e.to_string())
        }
        _ => Err("\"segmentation\" is neither polygons nor an RLE".into()),
    }
}

/// Four finite numbers.
fn numbers(value: Option<&Value>) -> Option<[f64; 4]> {
    let list = value?.as_array()?;
    let [a, b, c, d] = list.as_slice() else {
        return None;
    };
    let n = [a.as_f64()?, b.as_f64()?, c.as_f64()?, d.as_f64()?];
    n.iter().all(|v| v.is_finite()).then_some(n)
}
