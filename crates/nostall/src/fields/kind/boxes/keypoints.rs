//! A boxes field's keypoints: each kept box's points (x, y, visibility, as COCO's
//! `person_keypoints` files give them), moved as torchvision.transforms.v2 moves
//! `KeyPoints` ([`Placement::place_point`]), and swapped left for right where the output
//! is mirrored, by the field's `keypoint_flip` (what the detection references'
//! `_flip_coco_person_keypoints` does for COCO's people).
//!
//! An unlabelled point (visibility 0) is written `(0, 0, 0)`, COCO's convention. A
//! labelled point the geometry takes outside the output (past `0..=width` or
//! `0..=height`) keeps its coordinates and is written with visibility 0, as Detectron2
//! marks it: a crop that leaves a shoulder out must not teach the model that it is
//! visible. The bounds are the output's edges, not its last pixel's index: v2 scales a
//! point on the last row of an image halved to half a pixel past the last row.

use serde_json::{json, Value};

use crate::prep::image::Placement;
use crate::storage::MAX_KEYPOINTS;

/// How many keypoints each box holds and which point each one becomes when mirrored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Keypoints {
    /// `flip[j]`: the point whose mirror image is point `j` (an involution).
    flip: Vec<usize>,
}

impl Keypoints {
    /// From the field's `keypoints` (a count) and `keypoint_flip` (the swap) settings;
    /// `None` without keypoints.
    ///
    /// # Errors
    ///
    /// A count out of bounds, or a swap that is not a pairing of the points, in words.
    pub(super) fn new(count: Option<&Value>, flip: Option<&Value>) -> Result<Option<Self>, String> {
        let count = match count {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n <= MAX_KEYPOINTS)
                .ok_or_else(|| {
                    format!("keypoints={v} is not a count of points a box, 0 to {MAX_KEYPOINTS}")
                })?,
        };
        let flip = match flip {
            None | Some(Value::Null) => (0..count).collect(),
            Some(_) if count == 0 => {
                return Err("keypoint_flip is given without keypoints= (the points a box)".into())
            }
            Some(v) => {
                let flip = v
                    .as_array()
                    .and_then(|list| {
                        list.iter()
                            .map(|i| i.as_u64().and_then(|i| usize::try_from(i).ok()))
                            .collect::<Option<Vec<usize>>>()
                    })
                    .ok_or_else(|| format!("keypoint_flip={v} is not a list of point indices"))?;
                let pairs = flip.len() == count
                    && flip
                        .iter()
                        .enumerate()
                        .all(|(j, &i)| i < count && flip[i] == j);
                if !pairs {
                    return Err(format!(
                        "keypoint_flip={v} does not pair the {count} points: give each point's \
                         mirror image, flip[flip[i]] == i (COCO's people: [0, 2, 1, 4, 3, ...])"
                    ));
                }
                flip
            }
        };
        Ok((count > 0).then_some(Keypoints { flip }))
    }

    /// Points a box.
    pub(super) fn count(&self) -> usize {
        self.flip.len()
    }

    /// Its settings' values: `keypoints`, `keypoint_flip`.
    pub(super) fn values(&self) -> (Value, Value) {
        (json!(self.count()), json!(self.flip))
    }

    /// Whether `points` (x, y, visibility triples; none is all unlabelled) fit a box.
    ///
    /// # Errors
    ///
    /// Another count, in words.
    pub(super) fn check(&self, points: &[f32]) -> Result<(), String> {
        match points.len() {
            0 => Ok(()),
            n if n == 3 * self.count() => Ok(()),
            n => Err(format!(
                "{} keypoints, and the field holds {} a box (keypoints={})",
                n / 3,
                self.count(),
                self.count()
            )),
        }
    }

    /// Writes a box's `points` ([`Keypoints::check`]ed) as `placement` moves them into
    /// `out`: three native-endian `f32` a point.
    pub(super) fn write(&self, points: &[f32], placement: &Placement, out: &mut [u8]) {
        out.fill(0);
        if points.is_empty() {
            return;
        }
        let (width, height) = placement.image_extent();
        let (width, height) = (f64::from(width), f64::from(height));
        for (j, out) in out.chunks_exact_mut(12).enumerate() {
            let i = if placement.mirrored() {
                self.flip[j]
            } else {
                j
            };
            let [x, y, v] = [points[3 * i], points[3 * i + 1], points[3 * i + 2]];
            // Unlabelled, or a visibility that is not a number: (0, 0, 0).
            if v.is_nan() || v <= 0.0 {
                continue;
            }
            let [px, py] = placement.place_point(f64::from(x), f64::from(y));
            let inside = (0.0..=width).contains(&px) && (0.0..=height).contains(&py);
            let point = [px as f32, py as f32, if inside { v } else { 0.0 }];
            for (value, bytes) in point.iter().zip(out.chunks_exact_mut(4)) {
                bytes.copy_from_slice(&value.to_ne_bytes());
            }
        }
    }
}

/// An annotation's keypoints in a JSON member: COCO's flat `[x1, y1, v1, ...]`, or
/// torchvision's `[[x, y, v], ...]` (or `[x, y]`, visible) a point; empty where absent.
///
/// # Errors
///
/// Anything else, or a number that is not finite, in words.
pub(super) fn json_keypoints(value: Option<&Value>) -> Result<Vec<f32>, String> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err("\"keypoints\" is not a list".into()),
    };
    if list.len() > 3 * MAX_KEYPOINTS {
        return Err(format!("more than {MAX_KEYPOINTS} keypoints"));
    }
    let number = |v: &Value| {
        v.as_f64()
            .filter(|v| v.is_finite() && v.abs() <= f64::from(f32::MAX))
            .map(|v| v as f32)
            .ok_or("a keypoint's value is not a finite number")
    };
    if list.iter().all(Value::is_number) {
        if list.len() % 3 != 0 {
            return Err(format!(
                "{} keypoint numbers, not (x, y, visibility) triples",
                list.len()
            ));
        }
        return Ok(list.iter().map(number).collect::<Result<_, _>>()?);
    }
    let mut points = Vec::with_capacity(3 * list.len());
    for point in list {
        match point.as_array().map(Vec::as_slice) {
            Some([x, y]) => points.extend([number(x)?, number(y)?, 2.0]),
            Some([x, y, v]) => points.extend([number(x)?, number(y)?, number(v)?]),
            _ => return Err("a keypoint is not [x, y] or [x, y, visibility]".into()),
        }
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::image::op::View;

    fn read(out: &[u8]) -> Vec<f32> {
        out.chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn mirrored_points_swap_sides_and_those_outside_are_not_visible() {
        let kp = Keypoints::new(Some(&json!(3)), Some(&json!([0, 2, 1])))
            .unwrap()
            .unwrap();
        // A 100x50 image mirrored: x -> 99 - x. Point 1 (left) becomes point 2's place.
        let mut view = View::whole(100, 50);
        view.mirror();
        let place = Placement::new(&view, (100, 50), (100, 50));
        let points = [10.0, 5.0, 2.0, 20.0, 6.0, 1.0, 30.0, 7.0, 0.0];
        let mut out = vec![0xAA; 36];
        kp.write(&points, &place, &mut out);
        assert_eq!(read(&out), [89.0, 5.0, 2.0, 0.0, 0.0, 0.0, 79.0, 6.0, 1.0]);
        // A crop that leaves point 0 out: its coordinates kept, its visibility 0.
        let mut view = View::whole(100, 50);
        view.crop(15.0, 0.0, 50.0, 50.0);
        let place = Placement::new(&view, (100, 50), (50, 50));
        kp.write(&points, &place, &mut out);
        assert_eq!(read(&out), [-5.0, 5.0, 0.0, 5.0, 6.0, 1.0, 0.0, 0.0, 0.0]);
        // None given: all unlabelled.
        kp.write(&[], &place, &mut out);
        assert!(read(&out).iter().all(|v| *v == 0.0));
    }

    #[test]
    fn settings_and_members_out_of_form_are_refused() {
        assert!(Keypoints::new(None, None).unwrap().is_none());
        assert_eq!(
            Keypoints::new(Some(&json!(2)), None).unwrap().unwrap().flip,
            [0, 1]
        );
        for (count, flip, says) in [
            (json!(-1), Value::Null, "keypoints=-1"),
            (json!(5000), Value::Null, "0 to 1000"),
            (json!(0), json!([0]), "without keypoints="),
            (json!(3), json!([1, 2, 0]), "does not pair"),
            (json!(3), json!([0, 1]), "does not pair"),
            (json!(2), json!("lr"), "not a list"),
        ] {
            let why = Keypoints::new(Some(&count), Some(&flip)).unwrap_err();
            assert!(why.contains(says), "{why}");
        }
        let kp = Keypoints::new(Some(&json!(2)), None).unwrap().unwrap();
        assert!(kp.check(&[0.0; 9]).unwrap_err().contains("3 keypoints"));
        assert_eq!(
            json_keypoints(Some(&json!([[1, 2], [3, 4, 1]]))).unwrap(),
            [1.0, 2.0, 2.0, 3.0, 4.0, 1.0]
        );
        assert_eq!(json_keypoints(Some(&json!([1, 2, 0]))).unwrap().len(), 3);
        for bad in [
            json!([1, 2]),
            json!([[1]]),
            json!("x"),
            json!([1e300, 0, 1]),
        ] {
            assert!(json_keypoints(Some(&bad)).is_err(), "{bad}");
        }
    }
}
