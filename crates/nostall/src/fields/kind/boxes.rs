//! A boxes field: a detection sample's boxes and their labels, moved with the image's
//! pixels by the sample's geometry ([`Placement`]), clamped by its crops and sanitised
//! as torchvision.transforms.v2 does.
//!
//! Its member is either the `coco` member a COCO dataset's records carry (the image's
//! annotations from the dataset's index, [`crate::storage::Annotated`], in the form
//! [`crate::storage::decode_coco_member`] reads), or a JSON
//! document (a WebDataset shard's `.json` member): torchvision's target,
//! `{"boxes": [[x0, y0, x1, y1], ...], "labels": [...]}` in pixels, or COCO's annotations of
//! one image, `{"annotations": [{"bbox": [x, y, w, h], "category_id": 3, "iscrowd": 0},
//! ...]}`. Each box is placed ([`Placement::place_box`]), dropped unless
//! [`sanitize`] keeps it (v2's `SanitizeBoundingBoxes(min_size, min_area)`, its labels
//! with it), and written in the field's format. A member holding more boxes than the
//! field (`max_boxes`), boxes that are not four finite numbers, labels of another count,
//! or an image of another size than its annotations say, is the sample's `bad-targets`.
//!
//! A Parquet dataset's struct column of lists (Hugging Face's detection datasets:
//! `objects: {bbox: [[...], ...], category: [...]}`) comes as the row's lists
//! ([`lists`]): the boxes from `bbox` (or `boxes`), stored as `stored_format` says (the
//! datasets differ: COCO's `xywh`, or corners; no default), the labels from
//! `label_subcolumn` (else `category`, `category_id`, `label` or `labels`).
//!
//! With `masks`, each kept box's instance mask follows it ([`mask`]): from a COCO
//! annotation's `segmentation` (polygons or an RLE, in the `coco` member or a JSON
//! member's COCO annotations), all 0 for a box without one. With `keypoints`, each kept
//! box's points follow it ([`keypoints`]): COCO's `keypoints`, or a torchvision target's.
//! With `anchors`, the kept boxes are also encoded against SSD's default boxes
//! ([`anchors`]): each anchor's class and regression target, as torchvision's SSD
//! computes them in its training step.
//!
//! In its slot: the count (`i64`), the image's height and width in the output (`i64`
//! each: the output's, or less where `RandomShortestSize` leaves each image its size),
//! `max_boxes` boxes of four `f32`, then `max_boxes` labels (`i64`), then where asked each anchor's class (`i64`) and regression target
//! (four `f32`), `max_boxes` boxes' keypoints (three `f32` a point) and masks
//! ([`MaskForm`]); the places past the count hold zeros.

mod anchors;
mod json_member;
mod keypoints;
mod lists;
mod mask;

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{
    prepared_unplaced, targets_of_another_kind, Declaration, FieldKind, Kind, Role, Settings,
    TargetKind, Targets,
};
use crate::error::Cause;
use crate::prep::image::{sanitize, Placement};
use crate::sample::{MaskForm, PartForm, SampleLayout};
use crate::storage::{decode_coco_member, Shape, SubColumns, COCO_MAGIC, LISTS_MAGIC};
use anchors::DefaultBoxes;
use json_member::read_json;
use keypoints::Keypoints;
use lists::read_lists;

pub(super) const DECLARATION: Declaration = Declaration {
    name: "boxes",
    extensions: &["coco"],
    settings: &[
        "max_boxes",
        "max_bytes",
        "box_format",
        "stored_format",
        "label_subcolumn",
        "normalized",
        "min_size",
        "min_area",
        "crowd",
        "masks",
        "keypoints",
        "keypoint_flip",
        "anchors",
    ],
    make,
};

/// `max_boxes` unless set: more than any image of COCO (93) or Objects365 has.
const DEFAULT_MAX_BOXES: usize = 128;

/// The most boxes a field may hold.
const MAX_BOXES: usize = 1 << 16;

/// `max_bytes` of a JSON member unless set (a box with its label takes about 60 bytes of
/// JSON, a COCO annotation with its polygon a few hundred).
const DEFAULT_JSON_BYTES: usize = 256 << 10;

/// The most a JSON member's `max_bytes` may be: it is parsed into a tree of values.
const MAX_JSON_BYTES: usize = 4 << 20;

/// Whether and how a boxes field writes its boxes' masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Masks {
    /// None.
    No,
    /// A byte a pixel.
    Bytes,
    /// A bit a pixel.
    Bits,
}

impl Masks {
    fn value(self) -> Value {
        match self {
            Masks::No => json!(false),
            Masks::Bytes => json!(true),
            Masks::Bits => json!("bits"),
        }
    }

    /// Their form for a sample of `(height, width)`, where asked.
    fn form(self, (height, width): (usize, usize)) -> Option<MaskForm> {
        (self != Masks::No).then_some(MaskForm {
            height,
            width,
            packed: self == Masks::Bits,
        })
    }
}

/// SSD's default boxes a field encodes its boxes against (`anchors=`).
#[derive(Debug)]
struct Anchors {
    /// Its name, `anchors=`'s.
    name: &'static str,
    boxes: DefaultBoxes,
}

/// A model whose default boxes `anchors=` names.
struct Preset {
    /// `anchors=`'s name for it.
    name: &'static str,
    /// torchvision's builder of the model.
    model: &'static str,
    /// Its default boxes at its input's size.
    boxes: fn() -> DefaultBoxes,
}

impl Anchors {
    const PRESETS: [Preset; 2] = [
        Preset {
            name: "ssd300",
            model: "ssd300_vgg16",
            boxes: DefaultBoxes::ssd300_vgg16,
        },
        Preset {
            name: "ssdlite320",
            model: "ssdlite320_mobilenet_v3_large",
            boxes: DefaultBoxes::ssdlite320_mobilenet_v3_large,
        },
    ];

    fn named(name: &str) -> Result<Anchors, String> {
        let Some(preset) = Anchors::PRESETS.iter().find(|p| p.name == name) else {
            let known: Vec<String> = Anchors::PRESETS
                .iter()
                .map(|p| format!("\"{}\" ({})", p.name, p.model))
                .collect();
            return Err(format!(
                "anchors={name:?} is not a preset: use {}",
                known.join(" or ")
            ));
        };
        Ok(Anchors {
            name: preset.name,
            boxes: (preset.boxes)(),
        })
    }

    /// Default boxes.
    fn count(&self) -> usize {
        self.boxes.boxes().len()
    }
}

/// How the boxes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Corners: x0, y0, x1, y1.
    Xyxy,
    /// The top-left corner, then width and height (COCO's).
    Xywh,
    /// The centre, then width and height.
    Cxcywh,
}

impl Format {
    /// The format `setting` names (`box_format=`, `stored_format=`).
    fn parse(key: &str, setting: Option<&Value>) -> Result<Option<Format>, String> {
        match setting {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(name)) => match name.as_str() {
                "xyxy" => Ok(Some(Format::Xyxy)),
                "xywh" => Ok(Some(Format::Xywh)),
                "cxcywh" => Ok(Some(Format::Cxcywh)),
                other => Err(format!(
                    "{key}={other:?} is not a format: use \"xyxy\", \"xywh\" or \"cxcywh\""
                )),
            },
            Some(other) => Err(format!("{key}={other} is not a format's name")),
        }
    }

    /// Box `b`, in this format, as corners: x0, y0, x1, y1.
    fn corners(self, b: [f64; 4]) -> [f64; 4] {
        match self {
            Format::Xyxy => b,
            Format::Xywh => [b[0], b[1], b[0] + b[2], b[1] + b[3]],
            Format::Cxcywh => {
                let (w, h) = (b[2] / 2.0, b[3] / 2.0);
                [b[0] - w, b[1] - h, b[0] + w, b[1] + h]
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Xyxy => "xyxy",
            Format::Xywh => "xywh",
            Format::Cxcywh => "cxcywh",
        }
    }

    /// Box `[x0, y0, x1, y1]` in this format, divided by the image's `(width, height)`
    /// where given (DETR's normalised boxes).
    fn write(self, [x0, y0, x1, y1]: [f64; 4], per: Option<(u32, u32)>) -> [f32; 4] {
        let b = match self {
            Format::Xyxy => [x0, y0, x1, y1],
            Format::Xywh => [x0, y0, x1 - x0, y1 - y0],
            Format::Cxcywh => [(x0 + x1) / 2.0, (y0 + y1) / 2.0, x1 - x0, y1 - y0],
        };
        let (w, h) = per.map_or((1.0, 1.0), |(w, h)| (f64::from(w), f64::from(h)));
        [b[0] / w, b[1] / h, b[2] / w, b[3] / h].map(|v| v as f32)
    }
}

#[derive(Debug)]
struct Boxes {
    max_boxes: usize,
    max_bytes: usize,
    format: Format,
    /// The format a struct column's boxes are stored in (`stored_format`), which the
    /// user must say: Hugging Face's datasets differ.
    stored: Option<Format>,
    /// The list of a struct column holding the labels (`label_subcolumn`); `None`: the
    /// first of [`lists::LABEL_LISTS`] the column has.
    label_subcolumn: Option<String>,
    /// Whether the boxes are divided by the image's width and height (DETR's).
    normalized: bool,
    min_size: f64,
    min_area: f64,
    /// Whether COCO's crowd annotations are kept (torchvision's detection references
    /// leave them out).
    crowd: bool,
    masks: Masks,
    keypoints: Option<Keypoints>,
    anchors: Option<Anchors>,
}

impl FieldKind {
    /// Boxes and their labels, following the sample's geometry: at most `max_boxes` a
    /// sample, written as `format` (`"xyxy"`, `"xywh"` or `"cxcywh"`, in output pixels),
    /// those v2's `SanitizeBoundingBoxes(min_size=1, min_area=1)` would drop left out,
    /// COCO's crowd annotations too.
    ///
    /// # Errors
    ///
    /// An unknown `format`, in words.
    pub fn boxes(max_boxes: usize, format: &str) -> std::result::Result<FieldKind, String> {
        let mut settings = Settings::new(Map::from_iter([
            ("max_boxes".to_string(), json!(max_boxes)),
            ("box_format".to_string(), json!(format)),
        ]));
        make(&mut settings)
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    let format = Format::parse("box_format", settings.value("box_format"))?.unwrap_or(Format::Xyxy);
    let stored = Format::parse("stored_format", settings.value("stored_format"))?;
    let label_subcolumn = match settings.value("label_subcolumn") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if !name.is_empty() => Some(name.clone()),
        Some(other) => {
            return Err(format!(
                "label_subcolumn={other} is not a column's name (such as \"category\")"
            ))
        }
    };
    let min = |key: &str| -> Result<f64, String> {
        match settings.value(key) {
            None => Ok(1.0),
            Some(v) => v
                .as_f64()
                .filter(|m| m.is_finite() && *m >= 1.0)
                .ok_or_else(|| format!("{key}={v} is not a number of at least 1 (as v2's)")),
        }
    };
    let switch = |key: &str| -> Result<bool, String> {
        match settings.value(key) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("{key}={v} is not True or False")),
        }
    };
    let (crowd, normalized) = (switch("crowd")?, switch("normalized")?);
    let masks = match settings.value("masks") {
        None | Some(Value::Bool(false)) => Masks::No,
        Some(Value::Bool(true)) => Masks::Bytes,
        Some(Value::String(s)) if s == "bits" => Masks::Bits,
        Some(v) => {
            return Err(format!(
                "masks={v} is not a choice: use False, True (a byte a pixel) or \"bits\""
            ))
        }
    };
    Ok(FieldKind::of(Boxes {
        max_boxes: settings.number("max_boxes")?.unwrap_or(DEFAULT_MAX_BOXES),
        max_bytes: settings.number("max_bytes")?.unwrap_or(DEFAULT_JSON_BYTES),
        format,
        stored,
        label_subcolumn,
        normalized,
        min_size: min("min_size")?,
        min_area: min("min_area")?,
        crowd,
        masks,
        keypoints: Keypoints::new(settings.value("keypoints"), settings.value("keypoint_flip"))?,
        anchors: match settings.value("anchors") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => Some(Anchors::named(name)?),
            Some(other) => return Err(format!("anchors={other} is not a preset's name")),
        },
    }))
}

impl Kind for Boxes {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn role(&self) -> Role {
        Role::Target
    }

    fn check(&self, _: &[String]) -> Result<(), String> {
        if self.max_boxes == 0 || self.max_boxes > MAX_BOXES {
            return Err(format!(
                "max_boxes={} is out of bounds: use 1 to {MAX_BOXES}",
                self.max_boxes
            ));
        }
        if self.max_bytes == 0 || self.max_bytes > MAX_JSON_BYTES {
            return Err(format!(
                "max_bytes={} is out of bounds for boxes: use 1 to {MAX_JSON_BYTES}",
                self.max_bytes
            ));
        }
        Ok(())
    }

    fn form(&self, sample: &SampleLayout) -> PartForm {
        PartForm::Boxes {
            capacity: self.max_boxes,
            keypoints: self.keypoint_count(),
            anchors: self.anchors.as_ref().map_or(0, Anchors::count),
            // A sample that is no image has no placement: refused by `RecordPrep::new`.
            masks: self.masks.form(sample.image().unwrap_or((0, 0))),
        }
    }

    fn fingerprint(&self) -> String {
        format!(
            "boxes {} {}{} {} {} crowd={} max_bytes={} masks={} keypoints={} anchors={} \
             stored={} labels={}",
            self.max_boxes,
            self.format.name(),
            if self.normalized { " normalized" } else { "" },
            self.min_size,
            self.min_area,
            self.crowd,
            self.max_bytes,
            self.masks.value(),
            self.keypoints
                .as_ref()
                .map_or(json!(0), |k| json!(k.values())),
            self.anchors.as_ref().map_or("none", |a| a.name),
            self.stored.map_or("none", Format::name),
            self.label_subcolumn.as_deref().unwrap_or("auto"),
        )
    }

    fn prepare(&self, field: &str, _: &[u8], _: &mut [u8]) -> Result<(), Cause> {
        Err(prepared_unplaced(field))
    }

    fn targets(&self) -> Option<&dyn TargetKind> {
        Some(self)
    }

    fn sub_columns(&self) -> Option<SubColumns> {
        let labels = match &self.label_subcolumn {
            Some(name) => vec![name.clone()],
            None => lists::LABEL_LISTS.map(String::from).to_vec(),
        };
        let refused = self.stored.is_none().then(|| {
            "give the boxes field stored_format=\"xyxy\", \"xywh\" or \"cxcywh\", the format \
             its boxes are stored in, in pixels (Hugging Face's datasets differ: cppe-5 \
             stores COCO's xywh, detection-datasets/coco corners)"
                .to_string()
        });
        Some(SubColumns::new(
            vec![lists::BOX_LISTS.map(String::from).to_vec(), labels],
            // Four numbers a box.
            self.max_boxes.saturating_mul(4),
            refused,
        ))
    }

    fn settings(&self, _: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        let mut settings = Map::from_iter([
            ("max_boxes".into(), json!(self.max_boxes)),
            ("max_bytes".into(), json!(self.max_bytes)),
            ("box_format".into(), json!(self.format.name())),
            ("normalized".into(), json!(self.normalized)),
            ("min_size".into(), json!(self.min_size)),
            ("min_area".into(), json!(self.min_area)),
            ("crowd".into(), json!(self.crowd)),
            ("masks".into(), self.masks.value()),
        ]);
        if let Some(k) = &self.keypoints {
            let (count, flip) = k.values();
            settings.insert("keypoints".into(), count);
            settings.insert("keypoint_flip".into(), flip);
        }
        if let Some(anchors) = &self.anchors {
            settings.insert("anchors".into(), json!(anchors.name));
        }
        if let Some(stored) = self.stored {
            settings.insert("stored_format".into(), json!(stored.name()));
        }
        if let Some(name) = &self.label_subcolumn {
            settings.insert("label_subcolumn".into(), json!(name));
        }
        settings
    }
}

impl TargetKind for Boxes {
    fn fits(&self, (width, height): (usize, usize)) -> Result<(), String> {
        let Some(a) = &self.anchors else {
            return Ok(());
        };
        let [h, w] = a.boxes.image_size();
        if (w, h) == (width, height) {
            return Ok(());
        }
        Err(format!(
            "anchors={:?} are made for {w}x{h} images, and the pipeline gives \
             {width}x{height}: end it with Resize(({h}, {w}))",
            a.name
        ))
    }

    fn read(&self, field: &str, member: &[u8]) -> Result<Targets, Cause> {
        let bad = |reason: String| Cause::BadTargets {
            field: field.to_string(),
            reason,
        };
        let shapes = self.masks != Masks::No;
        let (mut boxes, made_for) = if member.starts_with(COCO_MAGIC) {
            read_coco(member, self.max_boxes, shapes).map_err(&bad)?
        } else if member.starts_with(LISTS_MAGIC) {
            let most = lists::most_bytes(self.max_boxes);
            if member.len() > most {
                return Err(Cause::TooLarge {
                    bytes: member.len() as u64,
                    limit: most as u64,
                    field: Some(field.to_string()),
                });
            }
            (
                read_lists(member, self.max_boxes, self.stored).map_err(&bad)?,
                None,
            )
        } else if member.len() > self.max_bytes {
            return Err(Cause::TooLarge {
                bytes: member.len() as u64,
                limit: self.max_bytes as u64,
                field: Some(field.to_string()),
            });
        } else {
            let points = self.keypoints.is_some();
            (
                read_json(member, self.max_boxes, shapes, points).map_err(&bad)?,
                None,
            )
        };
        boxes.retain(|t| self.crowd || !t.crowd);
        if let Some(k) = &self.keypoints {
            for (i, t) in boxes.iter().enumerate() {
                k.check(&t.keypoints)
                    .map_err(|why| bad(format!("annotation {i}: {why}")))?;
            }
        }
        Ok(Targets::Boxes(BoxTargets { boxes, made_for }))
    }

    fn write(
        &self,
        field: &str,
        targets: &Targets,
        placement: &Placement,
        slot: &mut [u8],
    ) -> Result<(), Cause> {
        let Targets::Boxes(targets) = targets else {
            return Err(targets_of_another_kind(field));
        };
        if let Some((width, height)) = targets.made_for {
            let size = placement.image_size();
            if (width, height) != size {
                return Err(Cause::BadTargets {
                    field: field.to_string(),
                    reason: format!(
                        "the image is {}x{}, and its annotations were made for \
                         {width}x{height}: the annotation file names another image",
                        size.0, size.1
                    ),
                });
            }
        }
        self.put(&targets.boxes, placement, slot)
            .map_err(|reason| Cause::BadTargets {
                field: field.to_string(),
                reason,
            })
    }
}

/// One box as a member gives it: corners in source pixels, its label, whether a crowd,
/// its mask (read only where the field writes masks), its keypoints (x, y, visibility
/// triples in source pixels; read from a JSON member only where the field writes them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    corners: [f64; 4],
    label: i64,
    crowd: bool,
    shape: Shape,
    keypoints: Vec<f32>,
}

/// A sample's boxes as its member gives them ([`TargetKind::read`]), those the field
/// leaves out (crowds) already left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BoxTargets {
    boxes: Vec<Target>,
    /// The image size (width, height) the annotations were made for, where the member
    /// says (a COCO file's).
    made_for: Option<(u32, u32)>,
}

impl BoxTargets {
    /// The boxes' corners (x0, y0, x1, y1 in source pixels), what the geometry's draws read.
    pub(crate) fn corners(&self) -> Vec<[f64; 4]> {
        self.boxes.iter().map(|t| t.corners).collect()
    }
}

impl Boxes {
    /// Keypoints a box (0: none).
    fn keypoint_count(&self) -> usize {
        self.keypoints.as_ref().map_or(0, Keypoints::count)
    }

    /// Places, sanitises and writes `targets` into `slot`.
    ///
    /// # Errors
    ///
    /// A mask that cannot be made for the image (an RLE of another size), in words.
    fn put(
        &self,
        targets: &[Target],
        placement: &Placement,
        slot: &mut [u8],
    ) -> Result<(), String> {
        slot.fill(0);
        // The image in the output, what v2 sanitises against; masks fill the output.
        let canvas = placement.image_extent();
        let (count, rest) = slot.split_at_mut(8);
        let (size, rest) = rest.split_at_mut(16);
        size[..8].copy_from_slice(&i64::from(canvas.1).to_ne_bytes());
        size[8..].copy_from_slice(&i64::from(canvas.0).to_ne_bytes());
        let (boxes, rest) = rest.split_at_mut(16 * self.max_boxes);
        let (labels, rest) = rest.split_at_mut(8 * self.max_boxes);
        let anchor_count = self.anchors.as_ref().map_or(0, Anchors::count);
        let (classes, rest) = rest.split_at_mut(8 * anchor_count);
        let (regression, rest) = rest.split_at_mut(16 * anchor_count);
        let (points, masks) = rest.split_at_mut(12 * self.keypoint_count() * self.max_boxes);
        let kept: Vec<(&Target, [f64; 4])> = targets
            .iter()
            .filter(|t| placement.keeps(t.corners))
            .map(|t| (t, placement.place_box(t.corners)))
            .filter(|(_, b)| sanitize(*b, placement.box_extent(), self.min_size, self.min_area))
            .take(self.max_boxes)
            .collect();
        let per = self.normalized.then_some(canvas);
        for (((t, corners), b), l) in kept
            .iter()
            .zip(boxes.chunks_exact_mut(16))
            .zip(labels.chunks_exact_mut(8))
        {
            for (v, out) in self
                .format
                .write(*corners, per)
                .iter()
                .zip(b.chunks_exact_mut(4))
            {
                out.copy_from_slice(&v.to_ne_bytes());
            }
            l.copy_from_slice(&t.label.to_ne_bytes());
        }
        count.copy_from_slice(&(kept.len() as i64).to_ne_bytes());
        if let Some(anchors) = &self.anchors {
            let boxes: Vec<[f32; 4]> = kept.iter().map(|(_, b)| b.map(|v| v as f32)).collect();
            let labels: Vec<i64> = kept.iter().map(|(t, _)| t.label).collect();
            let mut matched = vec![0i64; anchors.count()];
            let mut targets = vec![[0f32; 4]; anchors.count()];
            anchors
                .boxes
                .encode(&boxes, &labels, &mut matched, &mut targets)
                .map_err(|bad| format!("box {} cannot be matched to SSD's anchors", bad.index))?;
            for (class, out) in matched.iter().zip(classes.chunks_exact_mut(8)) {
                out.copy_from_slice(&class.to_ne_bytes());
            }
            for (v, out) in targets.iter().flatten().zip(regression.chunks_exact_mut(4)) {
                out.copy_from_slice(&v.to_ne_bytes());
            }
        }
        if let Some(k) = &self.keypoints {
            for ((t, _), out) in kept.iter().zip(points.chunks_exact_mut(12 * k.count())) {
                k.write(&t.keypoints, placement, out);
            }
        }
        let output = placement.output_size();
        let Some(form) = self.masks.form((output.1 as usize, output.0 as usize)) else {
            return Ok(());
        };
        if kept.is_empty() {
            return Ok(());
        }
        let image = placement.image_size();
        let (rows, columns) = placement.nearest();
        let moved = placement.moved_pixels();
        for ((t, _), out) in kept.iter().zip(masks.chunks_exact_mut(form.bytes())) {
            let source = mask::source_mask(&t.shape, image)?;
            mask::place_mask(
                source.as_deref(),
                image.0 as usize,
                (&rows, &columns),
                moved.as_deref(),
                form,
                out,
            );
        }
        Ok(())
    }
}

/// The targets of a `coco` member, and the image size they were made for.
type Coco = (Vec<Target>, Option<(u32, u32)>);

/// The targets of a `coco` member ([`crate::storage::decode_coco_member`]), their masks
/// where `shapes` asks.
fn read_coco(member: &[u8], max_boxes: usize, shapes: bool) -> Result<Coco, String> {
    let (size, annotations) = decode_coco_member(member, max_boxes, shapes)?;
    let boxes = annotations
        .into_iter()
        .map(|a| {
            let [x, y, w, h] = a.bbox.map(f64::from);
            Target {
                corners: [x, y, x + w, y + h],
                label: a.category as i64,
                crowd: a.crowd,
                shape: a.shape,
                keypoints: a.keypoints,
            }
        })
        .collect();
    Ok((boxes, Some(size)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{encode_coco_member, EncodedAnnotation};
    use nostall_coco::Segmentation;

    /// An annotation of a box only.
    fn plain(bbox: [f32; 4], category: u64, crowd: bool) -> EncodedAnnotation<'static> {
        EncodedAnnotation {
            bbox,
            category,
            crowd,
            segmentation: Segmentation::None,
            keypoints: &[],
        }
    }

    fn kind(settings: Value) -> FieldKind {
        let Value::Object(values) = settings else {
            unreachable!()
        };
        make(&mut Settings::new(values)).unwrap()
    }

    /// The slot's count, boxes and labels (past the image's size).
    fn read(slot: &[u8], capacity: usize) -> (usize, Vec<[f32; 4]>, Vec<i64>) {
        let count = i64::from_ne_bytes(slot[..8].try_into().unwrap()) as usize;
        let boxes = slot[24..24 + 16 * capacity]
            .chunks_exact(16)
            .map(|b| {
                let f = |i: usize| f32::from_ne_bytes(b[4 * i..4 * i + 4].try_into().unwrap());
                [f(0), f(1), f(2), f(3)]
            })
            .collect();
        let labels = slot[24 + 16 * capacity..24 + 24 * capacity]
            .chunks_exact(8)
            .map(|l| i64::from_ne_bytes(l.try_into().unwrap()))
            .collect();
        (count, boxes, labels)
    }

    /// Reads and writes `member` as the record's preparer does.
    fn prepare(
        kind: &FieldKind,
        field: &str,
        member: &[u8],
        placement: &Placement,
        slot: &mut [u8],
    ) -> Result<(), Cause> {
        let targets = kind.0.targets().unwrap();
        let read = targets.read(field, member)?;
        targets.write(field, &read, placement, slot)
    }

    fn identity(width: u32, height: u32) -> Placement {
        let view = crate::prep::image::op::View::whole(width, height);
        Placement::new(&view, (width, height), (width, height))
    }

    #[test]
    fn json_and_coco_members_give_the_same_boxes_in_each_format() {
        let torchvision = br#"{"boxes": [[10, 20, 30, 60], [0, 0, 0.5, 9]], "labels": [3, 4]}"#;
        let coco = br#"{"annotations": [{"bbox": [10, 20, 20, 40], "category_id": 3},
            {"bbox": [0, 0, 0.5, 9], "category_id": 4, "iscrowd": 0},
            {"bbox": [1, 1, 5, 5], "category_id": 5, "iscrowd": 1}]}"#;
        let mut encoded = Vec::new();
        encode_coco_member(
            (100, 80),
            [
                plain([10.0, 20.0, 20.0, 40.0], 3, false),
                plain([0.0, 0.0, 0.5, 9.0], 4, false),
                plain([1.0, 1.0, 5.0, 5.0], 5, true),
            ]
            .into_iter(),
            &mut encoded,
        );
        let place = identity(100, 80);
        for (format, expected) in [
            ("xyxy", [10.0, 20.0, 30.0, 60.0]),
            ("xywh", [10.0, 20.0, 20.0, 40.0]),
            ("cxcywh", [20.0, 40.0, 20.0, 40.0]),
        ] {
            let boxes = kind(json!({ "max_boxes": 4, "box_format": format }));
            for member in [&torchvision[..], &coco[..], &encoded[..]] {
                let mut slot = vec![
                    0xAA;
                    PartForm::Boxes {
                        capacity: 4,
                        keypoints: 0,
                        anchors: 0,
                        masks: None
                    }
                    .bytes()
                ];
                prepare(&boxes, "t", member, &place, &mut slot).unwrap();
                let (count, b, l) = read(&slot, 4);
                // The image's height and width in the output.
                let size: Vec<i64> = slot[8..24]
                    .chunks_exact(8)
                    .map(|v| i64::from_ne_bytes(v.try_into().unwrap()))
                    .collect();
                assert_eq!(size, [80, 100]);
                // The half-pixel-wide box is sanitised away, the crowd left out.
                assert_eq!(count, 1, "{format}");
                assert_eq!(b[0], expected);
                assert_eq!(l[..2], [3, 0]);
                assert_eq!(b[1], [0.0; 4]);
            }
        }
        // Crowds kept when asked.
        let boxes = kind(json!({ "max_boxes": 4, "crowd": true }));
        let mut slot = vec![
            0;
            PartForm::Boxes {
                capacity: 4,
                keypoints: 0,
                anchors: 0,
                masks: None
            }
            .bytes()
        ];
        prepare(&boxes, "t", &encoded, &place, &mut slot).unwrap();
        assert_eq!(read(&slot, 4).0, 2);
    }

    #[test]
    fn masks_follow_their_boxes_and_leave_with_them() {
        // Three annotations of a 10x6 image: a polygon, a box half a pixel wide (sanitised
        // away, its mask with it), an RLE of the image's size; a crop of columns 2..8
        // read at 3x3 (torch's nearest: columns 2, 4, 6; rows 0, 2, 4).
        let member = br#"{"annotations": [
            {"bbox": [2, 0, 4, 4], "category_id": 1, "segmentation": [[2, 0, 6, 0, 6, 4, 2, 4]]},
            {"bbox": [0, 0, 0.5, 6], "category_id": 2, "segmentation": [[0, 0, 1, 0, 1, 6]]},
            {"bbox": [0, 0, 10, 6], "category_id": 3,
             "segmentation": {"size": [6, 10], "counts": [12, 48]}}]}"#;
        let mut view = crate::prep::image::op::View::whole(10, 6);
        view.crop(2.0, 0.0, 6.0, 6.0);
        (view.w, view.h) = (3.0, 3.0);
        let place = Placement::new(&view, (10, 6), (3, 3));
        let boxes = kind(json!({ "max_boxes": 3, "masks": true }));
        let form = boxes
            .form(&SampleLayout::new(vec![3, 3, 3], crate::sample::DType::U8).with_image(3, 3));
        let mut slot = vec![0xAA; form.bytes()];
        prepare(&boxes, "t", member, &place, &mut slot).unwrap();
        let (count, _, labels) = read(&slot[..24 + 24 * 3], 3);
        assert_eq!((count, &labels[..2]), (2, &[1, 3][..]));
        let masks = &slot[24 + 24 * 3..];
        // The polygon as pycocotools rasterises it at the image's size, read there.
        let polygon =
            nostall_coco::polygons_to_mask(&[[2.0, 0.0, 6.0, 0.0, 6.0, 4.0, 2.0, 4.0]], 6, 10);
        let read_at: Vec<u8> = [0, 2, 4]
            .iter()
            .flat_map(|r| [2, 4, 6].map(|c| polygon[r * 10 + c]))
            .collect();
        assert_eq!(&masks[..9], &read_at[..]);
        assert!(read_at.contains(&1) && read_at.contains(&0));
        // The RLE's first 12 pixels (columns 0 and 1) are 0: none read.
        assert_eq!(&masks[9..18], &[1; 9]);
        assert_eq!(&masks[18..], &[0; 9]);
        // Packed: a bit a pixel, three to a row's byte.
        let packed = kind(json!({ "max_boxes": 3, "masks": "bits" }));
        let form = packed
            .form(&SampleLayout::new(vec![3, 3, 3], crate::sample::DType::U8).with_image(3, 3));
        let mut slot = vec![0xAA; form.bytes()];
        prepare(&packed, "t", member, &place, &mut slot).unwrap();
        let bits = |row: &[u8]| {
            row.iter()
                .enumerate()
                .fold(0u8, |b, (x, v)| b | v << (7 - x))
        };
        let rows: Vec<u8> = masks.chunks(3).map(bits).collect();
        assert_eq!(&slot[24 + 24 * 3..], &rows[..]);
        // An RLE made for another image is the sample's error, naming the field.
        let other = br#"{"annotations": [{"bbox": [0, 0, 10, 6], "category_id": 3,
             "segmentation": {"size": [5, 10], "counts": [50]}}]}"#;
        let why = prepare(
            &boxes,
            "t",
            other,
            &place,
            &mut vec![
                0;
                boxes
                    .form(&SampleLayout::new(vec![1], crate::sample::DType::U8).with_image(3, 3))
                    .bytes()
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(why.contains("field \"t\"") && why.contains("10x5"), "{why}");
    }

    #[test]
    fn bad_members_are_the_samples_error_naming_the_field() {
        let boxes = kind(json!({ "max_boxes": 2, "max_bytes": 200 }));
        let place = identity(100, 80);
        let slot = vec![
            0;
            PartForm::Boxes {
                capacity: 2,
                keypoints: 0,
                anchors: 0,
                masks: None
            }
            .bytes()
        ];
        let why = |member: &[u8]| {
            let mut slot = slot.clone();
            prepare(&boxes, "target", member, &place, &mut slot)
                .unwrap_err()
                .to_string()
        };
        for (member, says) in [
            (
                &br#"{"boxes": [[1,2,3]], "labels": [1]}"#[..],
                "box 0 is not four",
            ),
            (
                br#"{"boxes": [[1,2,3,4]], "labels": []}"#,
                "1 boxes and 0 labels",
            ),
            (br#"{"boxes": [[5,2,3,4]], "labels": [1]}"#, "x0 <= x1"),
            (
                br#"{"boxes": [[1,2,3,4],[1,2,3,4],[1,2,3,4]], "labels": [1,1,1]}"#,
                "more than max_boxes=2",
            ),
            (br#"{"annotations": [{"bbox": [1,2,3,4]}]}"#, "category_id"),
            (br#"[1, 2]"#, "not a JSON object"),
            (b"{\"boxes\": [[1e999,0,1,1]]}", "not a JSON document"),
            (b"\xff\xfe", "not a JSON document"),
        ] {
            let why = why(member);
            assert!(
                why.contains("field \"target\"") && why.contains(says),
                "{why}"
            );
        }
        assert!(matches!(
            prepare(&boxes, "target", &[b' '; 201], &place, &mut slot.clone()),
            Err(Cause::TooLarge { limit: 200, .. })
        ));
        // A COCO member made for another size, or cut short.
        let mut encoded = Vec::new();
        encode_coco_member(
            (99, 80),
            [plain([1.0, 1.0, 5.0, 5.0], 1, false)].into_iter(),
            &mut encoded,
        );
        assert!(
            why(&encoded).contains("made for 99x80"),
            "{}",
            why(&encoded)
        );
        let mut encoded = Vec::new();
        encode_coco_member(
            (100, 80),
            [plain([1.0, 1.0, 5.0, 5.0], 1, false)].into_iter(),
            &mut encoded,
        );
        assert!(why(&encoded[..encoded.len() - 1]).contains("length"));
        assert!(why(&encoded[..10]).contains("truncated"));
    }

    #[test]
    fn settings_out_of_bounds_are_refused() {
        let check = |settings: Value| {
            let Value::Object(values) = settings else {
                unreachable!()
            };
            make(&mut Settings::new(values)).and_then(|k| k.0.check(&[]))
        };
        assert!(check(json!({ "max_boxes": 0 }))
            .unwrap_err()
            .contains("max_boxes=0"));
        assert!(check(json!({ "max_boxes": 1 << 20 })).is_err());
        assert!(check(json!({ "box_format": "yxyx" }))
            .unwrap_err()
            .contains("\"yxyx\""));
        assert!(check(json!({ "min_size": 0.5 }))
            .unwrap_err()
            .contains("at least 1"));
        assert!(check(json!({ "crowd": 1 }))
            .unwrap_err()
            .contains("True or False"));
        assert!(check(json!({ "normalized": "yes" }))
            .unwrap_err()
            .contains("normalized="));
        assert!(check(json!({ "max_bytes": 64 << 20 })).is_err());
        assert!(check(json!({ "masks": "yes" }))
            .unwrap_err()
            .contains("\"bits\""));
        assert!(check(json!({ "stored_format": "yxyx" }))
            .unwrap_err()
            .contains("stored_format=\"yxyx\""));
        assert!(check(json!({ "label_subcolumn": "" }))
            .unwrap_err()
            .contains("label_subcolumn="));
        assert!(check(json!({})).is_ok());
    }

    #[test]
    fn a_struct_columns_lists_give_boxes_in_their_stored_format() {
        use crate::storage::{encode_lists_member, Item};
        let member = |b: [f64; 4]| {
            let boxes = Item::List(vec![Item::List(b.map(Item::Float).to_vec())]);
            let labels = Item::List(vec![Item::Int(7)]);
            let mut out = Vec::new();
            encode_lists_member(&[("bbox", &boxes), ("category", &labels)], &mut out);
            out
        };
        let place = identity(100, 80);
        let form = PartForm::Boxes {
            capacity: 2,
            keypoints: 0,
            anchors: 0,
            masks: None,
        };
        for (stored, b) in [
            ("xyxy", [10.0, 20.0, 30.0, 60.0]),
            ("xywh", [10.0, 20.0, 20.0, 40.0]),
            ("cxcywh", [20.0, 40.0, 20.0, 40.0]),
        ] {
            let boxes = kind(json!({ "max_boxes": 2, "stored_format": stored }));
            let mut slot = vec![0xAA; form.bytes()];
            prepare(&boxes, "t", &member(b), &place, &mut slot).unwrap();
            let (count, written, labels) = read(&slot, 2);
            assert_eq!(
                (count, written[0], labels[0]),
                (1, [10.0, 20.0, 30.0, 60.0], 7)
            );
        }
        // Without its stored format, the member is the sample's error.
        let boxes = kind(json!({ "max_boxes": 2 }));
        let why = prepare(
            &boxes,
            "t",
            &member([0.0; 4]),
            &place,
            &mut vec![0; form.bytes()],
        )
        .unwrap_err()
        .to_string();
        assert!(why.contains("stored_format"), "{why}");
    }
}
