//! A boxes field's lists member: a row's boxes and labels as a Parquet struct column
//! holds them (Hugging Face's `objects: {bbox: [[...], ...], category: [...]}`), handed
//! over by the dataset as [`crate::storage::encode_lists_member`] wrote them, read into
//! [`Target`]s.

use super::{Format, Target};
use crate::storage::{decode_lists_member, Item, Shape};

/// The lists of a boxes field's struct column: the boxes, by their usual names.
pub(super) const BOX_LISTS: [&str; 2] = ["bbox", "boxes"];

/// The labels, by their usual names (`category`: `datasets`' detection features, a
/// `ClassLabel`).
pub(super) const LABEL_LISTS: [&str; 4] = ["category", "category_id", "label", "labels"];

/// The most bytes a lists member of `max_boxes` boxes takes: a tag and a count a box,
/// four tagged numbers, a tagged label, and the lists' names and counts.
pub(super) fn most_bytes(max_boxes: usize) -> usize {
    max_boxes
        .saturating_mul(5 + 4 * 9 + 9)
        .saturating_add(8 + 4 + 2 * (1 + 255 + 5))
}

/// The targets of a lists member: its boxes (stored as `stored` says, in pixels) and
/// their labels, one each.
///
/// # Errors
///
/// No `stored` format, a list null or of more than `max_boxes` boxes, lists of
/// different lengths, a box that is not four finite numbers (or whose width or height is
/// negative), a label that is not a whole number: in words, naming the list and the box.
pub(super) fn read_lists(
    member: &[u8],
    max_boxes: usize,
    stored: Option<Format>,
) -> Result<Vec<Target>, String> {
    let lists = decode_lists_member(member)?;
    let [(box_name, boxes), (label_name, labels)] = lists.as_slice() else {
        return Err(format!(
            "{} lists, where a boxes field reads two (its boxes and their labels)",
            lists.len()
        ));
    };
    let stored = stored.ok_or(
        "its boxes are a struct column's, and the field has no stored_format: give \
         \"xyxy\", \"xywh\" or \"cxcywh\"",
    )?;
    let boxes = list(box_name, boxes, max_boxes)?;
    let labels = list(label_name, labels, max_boxes)?;
    if boxes.len() != labels.len() {
        return Err(format!(
            "{} boxes in {box_name:?} and {} labels in {label_name:?}",
            boxes.len(),
            labels.len()
        ));
    }
    boxes
        .iter()
        .zip(labels)
        .enumerate()
        .map(|(i, (b, l))| {
            let not_four = || format!("box {i} of {box_name:?} is not four finite numbers");
            let Item::List(values) = b else {
                return Err(not_four());
            };
            let numbers: Vec<f64> = values
                .iter()
                .map(|v| match v {
                    Item::Float(v) => Some(*v),
                    Item::Int(v) => Some(*v as f64),
                    _ => None,
                })
                .collect::<Option<Vec<f64>>>()
                .filter(|n| n.iter().all(|v| v.is_finite()))
                .ok_or_else(not_four)?;
            let numbers: [f64; 4] = numbers.try_into().map_err(|_| not_four())?;
            let corners = stored.corners(numbers);
            if corners[2] < corners[0] || corners[3] < corners[1] {
                return Err(format!(
                    "box {i} of {box_name:?} is not {} with a width and height of at least 0",
                    stored.name()
                ));
            }
            let Item::Int(label) = l else {
                return Err(format!(
                    "label {i} of {label_name:?} is not a whole number ({})",
                    describe(l)
                ));
            };
            Ok(Target {
                corners,
                label: *label,
                crowd: false,
                shape: Shape::None,
                keypoints: Vec::new(),
            })
        })
        .collect()
}

/// A row's list named `name`: at most `max_boxes` values.
fn list<'a>(name: &str, item: &'a Item, max_boxes: usize) -> Result<&'a [Item], String> {
    match item {
        Item::List(values) if values.len() <= max_boxes => Ok(values),
        Item::List(_) | Item::TooMany(_) => Err(format!(
            "{name:?} holds more boxes than max_boxes={max_boxes}"
        )),
        other => Err(format!("{name:?} is not a list ({})", describe(other))),
    }
}

/// What a value is, for an error.
fn describe(item: &Item) -> &'static str {
    match item {
        Item::Null => "null",
        Item::Int(_) => "an integer",
        Item::Float(_) => "a floating-point number",
        Item::List(_) => "a list",
        Item::TooMany(_) => "too many values",
    }
}
