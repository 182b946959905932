//! `Loader(fields=...)`: the fields of each sample, as Python names them
//! ([`FieldsArg`], [`Field`]), and a batch of records as a dictionary
//! ([`Records::objects`]).

use std::sync::Arc;

use nostall::fields::{FieldKind, Fields};
use nostall::sample::{Content, Part, PartForm, SampleLayout};
use nostall::Modality;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use serde_json::{json, Map, Value};

use crate::convert::SwitchOrChoice;
use crate::device::Device;
use crate::dlpack::Owner;
use crate::errors::{config_error, raise};
use crate::handoff;
use crate::tensor::{objects, Output};
use crate::tokenizer::Tokenizer;

/// One field of a sample, for ``Loader(fields={name: Field(...)})`` where the member's
/// name alone does not say enough.
///
/// - ``members``: the extensions of the WebDataset members it is read from, in order of
///   preference (``"jpg;png"``, ``"txt"``).
/// - ``kind`` (``None``: by the first extension): ``"sample"`` (the pipeline's image or
///   audio), ``"label"`` (``cls``), ``"text"`` (``str``), ``"json"`` (Python objects),
///   ``"bytes"``, ``"vector"`` (numbers as float32, with ``length``), ``"npz"`` (arrays of
///   an ``.npz`` archive as float32, with ``arrays``), ``"boxes"`` (a detection sample's
///   boxes), ``"mask"`` (a segmentation's label map), ``"audio"`` (a video's audio
///   track). By extension: the pipeline's modality's own, ``cls`` the label, ``txt`` and
///   ``text`` text, ``json`` JSON, ``npz`` arrays, anything else bytes.
/// - ``max_bytes`` (``16384``): the longest text, JSON or bytes the field holds, compared
///   before anything of it is parsed; a longer one is the sample's error (``bad-text`` for
///   text, ``too-large`` for JSON, bytes and a caption to tokenize).
/// - ``tokenizer``: a ``nostall.Tokenizer``: the text is tokenized in the engine and the
///   field is ``(input_ids, attention_mask)``, int64 ``[batch, length]``.
/// - ``keys``: for JSON, the keys to keep: each document must be an object holding them
///   (else the sample's ``bad-json`` error), and the field is a dict of one list a key.
/// - ``padded`` (False): for text and bytes, ``(data, lengths)`` instead of a list:
///   uint8 ``[batch, max_bytes]`` zero-padded (a view of the batch's buffer) and int64
///   ``[batch]``.
/// - ``length``: for ``kind="vector"``, its number of elements: a NumPy ``.npy`` array or a
///   JSON array of numbers, as float32 ``[batch, length]`` (another count is the sample's
///   ``bad-vector`` error).
/// - ``arrays``: for an ``.npz`` archive (``numpy.savez``, ``savez_compressed``), the
///   arrays read and their shapes, ``{"embedding": 512, "mask": (16, 16)}``: the field is a
///   dict of float32 ``[batch, *shape]`` arrays by name (a missing array, another count or a
///   damaged archive is the sample's ``bad-vector`` error).
/// - For ``kind="boxes"`` (a COCO file's ``coco`` member, or a JSON member
///   ``{"boxes": [[x0, y0, x1, y1], ...], "labels": [...]}``): the boxes follow the image's
///   geometry, clamped by its crops, and those v2's ``SanitizeBoundingBoxes(min_size,
///   min_area)`` drops are left out. ``max_boxes`` (``128``): the most a sample holds
///   (more is the sample's ``bad-targets`` error); ``box_format`` (``"xyxy"``,
///   ``"xywh"`` or ``"cxcywh"``, in output pixels); for a Parquet column that is a struct
///   of lists (Hugging Face's detection datasets: ``objects: {bbox, category, ...}``),
///   ``stored_format`` (``"xyxy"``, ``"xywh"`` or ``"cxcywh"``, in pixels; required: the
///   datasets differ) says how its ``bbox`` (or ``boxes``) list holds the boxes, and
///   ``label_subcolumn`` names its labels' list (``category``, ``category_id``,
///   ``label`` or ``labels`` unless given); ``normalized`` (False: True divides
///   them by the image's width and height, as DETR takes ``cxcywh`` boxes); ``min_size`` and ``min_area``
///   (``1``); ``crowd`` (False: COCO's crowd annotations left out, as torchvision's
///   detection references do). The field is a list of ``{"boxes": float32 [n, 4],
///   "labels": int64 [n], "size": int64 [2]}``, one a sample, as torchvision's detection
///   models take targets (``size``: the image's height and width in the output); with
///   ``padded=True``, ``{"boxes": [batch, max_boxes, 4], "labels": [batch, max_boxes],
///   "size": [batch, 2], "count": [batch]}``. ``masks`` (False): True adds each box's instance
///   mask (from its COCO ``segmentation``, polygons or RLE; all 0 without one) at the
///   output's size, uint8 ``[n, height, width]`` of 0 and 1 read nearest as v2 reads a
///   ``Mask``; ``"bits"`` packs them, ``[n, height, ceil(width / 8)]`` as
///   ``numpy.packbits`` along the rows. ``keypoints`` (0): each box's points (COCO's
///   ``keypoints``, or a JSON target's ``[n, keypoints, 3]``), float32 ``[n, keypoints,
///   3]`` of x, y and visibility, moved as v2 moves ``KeyPoints`` (a flip takes x to
///   ``width - 1 - x``); an unlabelled point is ``(0, 0, 0)``, one the geometry moves out
///   of the image has visibility 0. ``keypoint_flip``: each point's mirror image, by which
///   a flipped sample swaps left and right as the detection references do (COCO's people:
///   ``[0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]``); none swaps nothing,
///   as v2. ``anchors`` (``"ssd300"`` or ``"ssdlite320"``): the kept boxes encoded
///   against that model's default boxes, as torchvision's SSD computes its training
///   targets: ``"anchor_labels"`` int64 ``[anchors]`` (the matched box's label, 0 for
///   background) and ``"anchor_boxes"`` float32 ``[anchors, 4]`` (``BoxCoder((10, 10, 5,
///   5))`` offsets); the pipeline must end at the model's size.
/// - For ``kind="mask"`` (a semantic segmentation's label map: a one-channel PNG of the
///   image's size, grey or palette, its values the classes): the map follows the image's
///   geometry, read nearest as v2 moves a ``Mask``, uint8 ``[batch, height, width]``.
///   ``fill`` (``0``): the label where no pixel of the image shows (a zoom-out's canvas,
///   ``FixedSizeCrop``'s padding; segmentation recipes often use 255, ignored by the
///   loss). ``max_bytes`` (16 MiB): the largest PNG read. A segmentation dataset's
///   folder (VOC, ADE20K, Cityscapes) or COCO panoptic file gives its maps as the member
///   ``"mask"``; Cityscapes' maps of its 19 training ids
///   (``<name>_gtFine_labelTrainIds.png``) as the member ``"labelTrainIds"``.
/// - With a list of pipelines (views): the image field is a tuple of one tensor a view, as
///   without fields, and each ``boxes`` or ``mask`` field a tuple over the views, each
///   item what the field gives for one pipeline, moved by that view's geometry and draws
///   (masks and label maps at that view's size); the other fields come once a sample.
/// - For ``kind="audio"`` (a video pipeline's field, read from the video's own member):
///   the video's audio track over each clip the sample holds, from its first frame's time
///   to its last frame's end, resampled to ``sample_rate`` as ``audio.Resample`` does,
///   float32 ``[batch, channels, length]`` (``[batch, clips, channels, length]`` for
///   several clips). ``channels`` (``1``: the mean of the track's channels; more keeps
///   exactly that many); ``length``: the samples a channel holds, the span's own count
///   (its duration × ``sample_rate``, rounded up) cut or padded with zeros to it. A video
///   without an audio track is the sample's ``corrupt`` error.
#[pyclass(module = "nostall", frozen)]
pub(crate) struct Field {
    members: String,
    kind: Option<String>,
    max_bytes: Option<usize>,
    tokenizer: Option<Py<Tokenizer>>,
    keys: Vec<String>,
    padded: bool,
    length: Option<usize>,
    arrays: Option<Vec<(String, Vec<usize>)>>,
    targets: TargetSettings,
}

/// A boxes, mask or audio field's settings, as given (absent ones take the kind's defaults).
#[derive(Clone, Default)]
struct TargetSettings {
    max_boxes: Option<usize>,
    box_format: Option<String>,
    stored_format: Option<String>,
    label_subcolumn: Option<String>,
    normalized: Option<bool>,
    min_size: Option<f64>,
    min_area: Option<f64>,
    crowd: Option<bool>,
    masks: Option<Value>,
    keypoints: Option<usize>,
    keypoint_flip: Option<Vec<usize>>,
    fill: Option<u8>,
    anchors: Option<String>,
    sample_rate: Option<usize>,
    channels: Option<usize>,
}

impl TargetSettings {
    /// Those given, by name.
    fn given(&self) -> Map<String, Value> {
        let mut settings = Map::new();
        let mut put = |name: &str, value: Option<Value>| {
            if let Some(value) = value {
                settings.insert(name.into(), value);
            }
        };
        put("max_boxes", self.max_boxes.map(|v| json!(v)));
        put("box_format", self.box_format.as_ref().map(|v| json!(v)));
        put(
            "stored_format",
            self.stored_format.as_ref().map(|v| json!(v)),
        );
        put(
            "label_subcolumn",
            self.label_subcolumn.as_ref().map(|v| json!(v)),
        );
        put("normalized", self.normalized.map(|v| json!(v)));
        put("min_size", self.min_size.map(|v| json!(v)));
        put("min_area", self.min_area.map(|v| json!(v)));
        put("crowd", self.crowd.map(|v| json!(v)));
        put("masks", self.masks.clone());
        put("keypoints", self.keypoints.map(|v| json!(v)));
        put(
            "keypoint_flip",
            self.keypoint_flip.as_ref().map(|v| json!(v)),
        );
        put("fill", self.fill.map(|v| json!(v)));
        put("anchors", self.anchors.as_ref().map(|v| json!(v)));
        put("sample_rate", self.sample_rate.map(|v| json!(v)));
        put("channels", self.channels.map(|v| json!(v)));
        settings
    }
}

#[pymethods]
impl Field {
    #[new]
    #[pyo3(signature = (members, *, kind=None, max_bytes=None, tokenizer=None, keys=None, padded=false, length=None, arrays=None, max_boxes=None, box_format=None, stored_format=None, label_subcolumn=None, normalized=None, min_size=None, min_area=None, crowd=None, masks=None, keypoints=None, keypoint_flip=None, fill=None, anchors=None, sample_rate=None, channels=None))]
    #[allow(clippy::too_many_arguments)] // Python's keywords, one each.
    fn new(
        members: String,
        kind: Option<String>,
        max_bytes: Option<usize>,
        tokenizer: Option<Py<Tokenizer>>,
        keys: Option<Vec<String>>,
        padded: bool,
        length: Option<usize>,
        arrays: Option<Bound<'_, PyDict>>,
        max_boxes: Option<usize>,
        box_format: Option<String>,
        stored_format: Option<String>,
        label_subcolumn: Option<String>,
        normalized: Option<bool>,
        min_size: Option<f64>,
        min_area: Option<f64>,
        crowd: Option<bool>,
        masks: Option<SwitchOrChoice>,
        keypoints: Option<usize>,
        keypoint_flip: Option<Vec<usize>>,
        fill: Option<u8>,
        anchors: Option<String>,
        sample_rate: Option<usize>,
        channels: Option<usize>,
    ) -> PyResult<Field> {
        let arrays = arrays
            .map(|arrays| {
                arrays
                    .iter()
                    .map(|(name, shape)| {
                        let name: String = name.extract()?;
                        let shape = match shape.extract::<usize>() {
                            Ok(length) => vec![length],
                            Err(_) => shape.extract::<Vec<usize>>()?,
                        };
                        Ok((name, shape))
                    })
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()
            .map_err(|_| {
                PyTypeError::new_err(
                    "arrays= names each array and its shape, an int or a tuple of ints: \
                     {\"embedding\": 512, \"mask\": (16, 16)}",
                )
            })?;
        Ok(Field {
            members,
            kind,
            max_bytes,
            tokenizer,
            keys: keys.unwrap_or_default(),
            padded,
            length,
            arrays,
            targets: TargetSettings {
                max_boxes,
                box_format,
                stored_format,
                label_subcolumn,
                normalized,
                min_size,
                min_area,
                crowd,
                masks: masks.map(|m| m.0),
                keypoints,
                keypoint_flip,
                fill,
                anchors,
                sample_rate,
                channels,
            },
        })
    }

    /// Its arguments, for pickling (Ray sends a loader's settings to its actors so).
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("kind", &self.kind)?;
        kwargs.set_item("max_bytes", self.max_bytes)?;
        kwargs.set_item("tokenizer", &self.tokenizer)?;
        kwargs.set_item("keys", &self.keys)?;
        kwargs.set_item("padded", self.padded)?;
        kwargs.set_item("length", self.length)?;
        if let Some(arrays) = &self.arrays {
            let d = PyDict::new(py);
            for (name, shape) in arrays {
                d.set_item(name, PyTuple::new(py, shape)?)?;
            }
            kwargs.set_item("arrays", d)?;
        }
        let b = &self.targets;
        kwargs.set_item("max_boxes", b.max_boxes)?;
        kwargs.set_item("box_format", &b.box_format)?;
        kwargs.set_item("stored_format", &b.stored_format)?;
        kwargs.set_item("label_subcolumn", &b.label_subcolumn)?;
        kwargs.set_item("normalized", b.normalized)?;
        kwargs.set_item("min_size", b.min_size)?;
        kwargs.set_item("min_area", b.min_area)?;
        kwargs.set_item("crowd", b.crowd)?;
        match &b.masks {
            Some(Value::Bool(switch)) => kwargs.set_item("masks", switch)?,
            Some(Value::String(choice)) => kwargs.set_item("masks", choice)?,
            _ => {}
        }
        kwargs.set_item("keypoints", b.keypoints)?;
        kwargs.set_item("keypoint_flip", &b.keypoint_flip)?;
        kwargs.set_item("fill", b.fill)?;
        kwargs.set_item("anchors", &b.anchors)?;
        kwargs.set_item("sample_rate", b.sample_rate)?;
        kwargs.set_item("channels", b.channels)?;
        Ok((PyTuple::new(py, [&self.members])?, kwargs))
    }

    fn __repr__(&self) -> String {
        let mut text = format!("Field({:?}", self.members);
        if let Some(kind) = &self.kind {
            text += &format!(", kind={kind:?}");
        }
        if let Some(max) = self.max_bytes {
            text += &format!(", max_bytes={max}");
        }
        if !self.keys.is_empty() {
            text += &format!(", keys={:?}", self.keys);
        }
        if self.padded {
            text += ", padded=True";
        }
        if let Some(length) = self.length {
            text += &format!(", length={length}");
        }
        if let Some(arrays) = &self.arrays {
            let arrays: Vec<String> = arrays
                .iter()
                .map(|(name, shape)| match shape.as_slice() {
                    [length] => format!("{name:?}: {length}"),
                    dims => {
                        let dims: Vec<String> = dims.iter().map(usize::to_string).collect();
                        format!("{name:?}: ({})", dims.join(", "))
                    }
                })
                .collect();
            text += &format!(", arrays={{{}}}", arrays.join(", "));
        }
        for (name, value) in self.targets.given() {
            let value = match value {
                Value::Bool(true) => "True".to_string(),
                Value::Bool(false) => "False".to_string(),
                Value::String(text) => format!("{text:?}"),
                other => other.to_string(),
            };
            text += &format!(", {name}={value}");
        }
        if let Some(t) = &self.tokenizer {
            let t = t.get().engine();
            text += &format!(
                ", tokenizer=Tokenizer(<tokenizer>, length={}, pad_id={})",
                t.length(),
                t.pad_id()
            );
        }
        text + ")"
    }
}

/// `fields=`: a dictionary of names to a member's extensions (`"txt"`) or a [`Field`],
/// in the order the batch's dictionary lists them.
pub(crate) struct FieldsArg(Vec<(String, FieldSpec)>);

struct FieldSpec {
    members: String,
    kind: Option<String>,
    max_bytes: Option<usize>,
    tokenizer: Option<nostall::prep::tokens::Tokenizer>,
    keys: Vec<String>,
    padded: bool,
    length: Option<usize>,
    arrays: Option<Vec<(String, Vec<usize>)>>,
    targets: TargetSettings,
}

impl FieldSpec {
    /// The settings given, by name, as the engine's kinds are made of them.
    fn settings(&self) -> Map<String, Value> {
        let mut settings = self.targets.given();
        if let Some(max_bytes) = self.max_bytes {
            settings.insert("max_bytes".into(), json!(max_bytes));
        }
        if !self.keys.is_empty() {
            settings.insert("keys".into(), json!(self.keys));
        }
        if let Some(length) = self.length {
            settings.insert("length".into(), json!(length));
        }
        if let Some(arrays) = &self.arrays {
            settings.insert("arrays".into(), json!(arrays));
        }
        settings
    }
}

impl<'py> FromPyObject<'_, 'py> for FieldsArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<FieldsArg> {
        let dict = obj.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(
                "fields= is a dict of names to members, e.g. {\"image\": \"jpg;png\", \
                 \"caption\": \"txt\"}",
            )
        })?;
        let mut specs = Vec::with_capacity(dict.len());
        for (name, value) in dict.iter() {
            let name: String = name
                .extract()
                .map_err(|_| PyTypeError::new_err("fields=: each name is a str"))?;
            let spec = if let Ok(members) = value.extract::<String>() {
                FieldSpec {
                    members,
                    kind: None,
                    max_bytes: None,
                    tokenizer: None,
                    keys: Vec::new(),
                    padded: false,
                    length: None,
                    arrays: None,
                    targets: TargetSettings::default(),
                }
            } else if let Ok(field) = value.cast::<Field>() {
                let field = field.get();
                FieldSpec {
                    members: field.members.clone(),
                    kind: field.kind.clone(),
                    max_bytes: field.max_bytes,
                    tokenizer: field.tokenizer.as_ref().map(|t| t.get().engine().clone()),
                    keys: field.keys.clone(),
                    padded: field.padded,
                    length: field.length,
                    arrays: field.arrays.clone(),
                    targets: field.targets.clone(),
                }
            } else {
                return Err(PyTypeError::new_err(format!(
                    "fields[{name:?}]: give a member's extension (\"txt\") or a \
                     nostall.Field, not {}",
                    value.get_type().name()?
                )));
            };
            specs.push((name, spec));
        }
        Ok(FieldsArg(specs))
    }
}

impl FieldsArg {
    /// How the batch's dictionary gives each field whose form the user chose: its JSON
    /// keys kept, or padded (what `nostall._fields.Split` takes).
    pub(crate) fn shapes(&self) -> Vec<(String, Vec<String>, bool)> {
        let chosen = self
            .0
            .iter()
            .filter(|(_, s)| !s.keys.is_empty() || s.padded);
        chosen
            .map(|(name, spec)| (name.clone(), spec.keys.clone(), spec.padded))
            .collect()
    }

    /// The engine's fields, kinds found by extension for `modality`.
    pub(crate) fn fields(self, py: Python<'_>, modality: Modality) -> PyResult<Fields> {
        let mut fields = Vec::with_capacity(self.0.len());
        for (name, spec) in self.0 {
            let field = nostall::fields::Field::new(&name, &spec.members, modality)
                .map_err(|e| raise(py, e))?;
            let settings = spec.settings();
            let kind = match spec.tokenizer {
                // A tokenizer is given whole, not made of settings: it bounds and pads its
                // text itself.
                Some(tokenizer) => {
                    if let Some(kind) = spec.kind.as_deref().filter(|&kind| kind != "text") {
                        return Err(config_error(
                            py,
                            format!("field {name:?}: a tokenizer takes text, not kind={kind:?}"),
                        ));
                    }
                    if let Some(setting) = settings.keys().next() {
                        return Err(config_error(
                            py,
                            format!(
                                "field {name:?}: {setting}= is not a setting of a tokenized \
                                 field (its nostall.Tokenizer has its own)"
                            ),
                        ));
                    }
                    FieldKind::tokens(Arc::new(tokenizer))
                }
                None => FieldKind::made(
                    &name,
                    spec.kind.as_deref(),
                    &field.members,
                    modality,
                    settings,
                )
                .map_err(|e| raise(py, e))?,
            };
            // Padding is a var slot's (a length, then the bytes) shown whole.
            let form = kind.form(&SampleLayout::new(Vec::new(), nostall::DType::U8));
            let paddable = matches!(
                form,
                PartForm::Var {
                    content: Content::Text | Content::Bytes,
                    ..
                } | PartForm::Boxes { .. }
            );
            if spec.padded && !paddable {
                return Err(config_error(
                    py,
                    format!("field {name:?}: padded=True pads text, bytes or boxes, not this kind"),
                ));
            }
            fields.push(field.with_kind(kind));
        }
        Fields::new(fields).map_err(|e| raise(py, e))
    }
}

/// How a loader with fields hands over its batches: each a dictionary of the fields'
/// objects, made by `nostall._fields.split` from the batch's one buffer.
pub(crate) struct Records {
    parts: Vec<Part>,
    /// The loader's catalog, naming the samples a device decodes.
    catalog: Arc<nostall::Catalog>,
    /// Bytes of a sample's slot.
    slot_bytes: usize,
    /// `nostall._fields.Split` for these parts.
    split: Py<PyAny>,
    /// How each batch is cut to its largest image (`pad_to_largest`).
    pad: Option<nostall::loader::PadToLargest>,
}

impl Records {
    /// For records of `layout` (its [`parts`](nostall::SampleLayout::parts)), each batch
    /// cut to its largest image where `pad` says how.
    pub(crate) fn new(
        py: Python<'_>,
        layout: &nostall::SampleLayout,
        catalog: Arc<nostall::Catalog>,
        shapes: Vec<(String, Vec<String>, bool)>,
        pad: Option<nostall::loader::PadToLargest>,
    ) -> PyResult<Records> {
        let parts = layout.parts();
        let described = PyList::empty(py);
        for part in parts {
            let (kind, shape, dtype) = describe(py, &part.form, part.offset)?;
            described.append((
                &part.name,
                kind,
                part.offset,
                part.form.bytes(),
                shape,
                dtype,
            ))?;
        }
        let split = crate::front::front(py)?
            .fields
            .bind(py)
            .getattr("Split")?
            .call1((described, shapes))?
            .unbind();
        Ok(Records {
            parts: parts.to_vec(),
            catalog,
            slot_bytes: layout.bytes(),
            split,
            pad,
        })
    }

    /// How the batch whose slots are `data` is cut to its largest image, for
    /// `nostall._fields.Split`: `(image dimensions, (mask rows, mask bytes a row),
    /// (height, width))`; `None` without `pad_to_largest`.
    fn cut(&self, py: Python<'_>, data: &[u8], len: usize) -> PyResult<Py<PyAny>> {
        let Some(pad) = &self.pad else {
            return Ok(py.None());
        };
        let cut = pad
            .cut(data, self.slot_bytes, len)
            .map_err(|e| raise(py, e))?;
        Ok((cut.image, cut.mask, cut.extent)
            .into_pyobject(py)?
            .into_any()
            .unbind())
    }

    /// The batch's fields as a dictionary, its tensors as `output` makes them (views of
    /// the batch's buffer; on the device with `device`) and its variable-length fields
    /// read out of it here.
    pub(crate) fn objects(
        &self,
        py: Python<'_>,
        output: &Output,
        batch: nostall::Batch,
        labels: Owner,
        device: Option<&Device>,
        transform: Option<(&Py<PyAny>, u64)>,
    ) -> PyResult<Py<PyAny>> {
        let varying = self.varying(py, batch.data())?;
        let cut = self.cut(py, batch.data(), batch.len())?;
        let deferred = match device {
            Some(_) => Device::deferred(py, &batch, &self.catalog)?,
            None => PyList::empty(py),
        };
        let (record, labels) = objects(py, output, Owner::Batch(batch), labels)?;
        self.split(
            py,
            (record, labels, varying.into_any().unbind()),
            cut,
            deferred,
            device,
            transform,
        )
    }

    /// How a batch of the node agent's group becomes Python objects on the hand-off
    /// thread: the record as `output` makes it, the variable-length fields and its cut,
    /// paired with the labels (see [`Records::shared_split`]).
    pub(crate) fn shared_make(self: &Arc<Self>, output: Arc<Output>) -> handoff::Make {
        let records = self.clone();
        Arc::new(move |py, batch| {
            let varying = records.varying(py, batch.data())?;
            let cut = records.cut(py, batch.data(), batch.len())?;
            let labels = Owner::Labels(batch.labels().to_vec());
            let shape = vec![batch.len() as i64, records.slot_bytes as i64];
            let owner = Owner::Shared {
                batch,
                shape,
                dtype: nostall::DType::U8,
            };
            let (record, labels) = objects(py, &output, owner, labels)?;
            Ok((
                PyTuple::new(py, [record, varying.into_any().unbind(), cut])?
                    .into_any()
                    .unbind(),
                labels,
            ))
        })
    }

    /// The dictionary of a batch [`Records::shared_make`] made.
    pub(crate) fn shared_split(
        &self,
        py: Python<'_>,
        (made, labels): (Py<PyAny>, Py<PyAny>),
        device: Option<&Device>,
        transform: Option<(&Py<PyAny>, u64)>,
    ) -> PyResult<Py<PyAny>> {
        let (record, varying, cut): (Py<PyAny>, Py<PyAny>, Py<PyAny>) = made.extract(py)?;
        self.split(
            py,
            (record, labels, varying),
            cut,
            PyList::empty(py),
            device,
            transform,
        )
    }

    /// The record, labels and variable-length fields split into the fields' dictionary
    /// (cut as `cut` says, [`Records::cut`]), staged on the device with `device`, through
    /// the batch transform with `transform`.
    fn split(
        &self,
        py: Python<'_>,
        batch: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        cut: Py<PyAny>,
        deferred: Bound<'_, PyList>,
        device: Option<&Device>,
        transform: Option<(&Py<PyAny>, u64)>,
    ) -> PyResult<Py<PyAny>> {
        let sample = self.split.bind(py).getattr("sample")?;
        match (device, transform) {
            (Some(device), transform) => {
                let transform = transform
                    .map(|(t, seed)| t.bind(py).call_method1("bound_record", (seed, sample)))
                    .transpose()?;
                device.stage_record(py, batch, cut, deferred, &self.split, transform)
            }
            (None, transform) => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("cut", cut)?;
                let batch = self.split.bind(py).call(batch, Some(&kwargs))?;
                match transform {
                    Some((t, seed)) => Ok(t
                        .bind(py)
                        .call_method1("record", (batch, seed, sample))?
                        .unbind()),
                    None => Ok(batch.unbind()),
                }
            }
        }
    }

    /// The variable-length fields of a batch whose slots are `data`, by name: lists read
    /// out of its slots.
    fn varying<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
        let varying = PyDict::new(py);
        for part in &self.parts {
            let PartForm::Var { content, .. } = &part.form else {
                continue;
            };
            let values = PyList::empty(py);
            for row in data.chunks_exact(self.slot_bytes) {
                let slot = &row[part.offset..part.offset + part.form.bytes()];
                let len = u32::from_le_bytes(slot[..4].try_into().expect("4 bytes")) as usize;
                // The engine bounds each length by its part; a shared batch's come from
                // the node agent's memory, checked all the same.
                let bytes = slot.get(4..4 + len).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "field {:?}: a length of {len} past its {} bytes",
                        part.name,
                        part.form.bytes()
                    ))
                })?;
                match content {
                    // The engine checked both are UTF-8.
                    Content::Text | Content::Json => {
                        values.append(PyString::new(py, &String::from_utf8_lossy(bytes)))?
                    }
                    Content::Bytes => values.append(PyBytes::new(py, bytes))?,
                }
            }
            varying.set_item(&part.name, values)?;
        }
        Ok(varying)
    }
}

/// A part of `form` at `offset` of the slot as `nostall._fields.Split` takes it: its kind,
/// its shape and its element type.
fn describe<'py>(
    py: Python<'py>,
    form: &PartForm,
    offset: usize,
) -> PyResult<(&'static str, Bound<'py, PyTuple>, &'static str)> {
    let dims = |dims: &[usize]| PyTuple::new(py, dims);
    Ok(match form {
        PartForm::Tensor { shape, dtype } => ("tensor", dims(shape)?, dtype_name(*dtype)),
        PartForm::Tokens { length } => ("tokens", dims(&[*length])?, "int64"),
        PartForm::Var { content, .. } => (content_name(*content), dims(&[])?, "uint8"),
        PartForm::Label => ("label", dims(&[])?, "int64"),
        PartForm::Floats { length } => ("vector", dims(&[*length])?, "float32"),
        // The boxes, the keypoints a box, the default boxes, then a mask's
        // height, width and bytes a row (zeros without masks).
        PartForm::Boxes {
            capacity,
            keypoints,
            anchors,
            masks,
        } => {
            let (height, width, row_bytes) =
                masks.map_or((0, 0, 0), |m| (m.height, m.width, m.row_bytes()));
            let shape = vec![*capacity, *keypoints, *anchors, height, width, row_bytes];
            ("boxes", dims(&shape)?, "float32")
        }
        // Its shape: each array's name and dimensions, in order.
        PartForm::Arrays { arrays } => {
            let arrays = arrays
                .iter()
                .map(|(name, shape)| Ok((name.as_str(), dims(shape)?)))
                .collect::<PyResult<Vec<_>>>()?;
            ("arrays", PyTuple::new(py, arrays)?, "float32")
        }
        // Its shape: each view's part, `(kind, offset, bytes, shape, dtype)`, in order.
        PartForm::Views { views } => {
            let views = views
                .iter()
                .map(|(at, view)| {
                    let (kind, shape, dtype) = describe(py, view, offset + at)?;
                    Ok((kind, offset + at, view.bytes(), shape, dtype))
                })
                .collect::<PyResult<Vec<_>>>()?;
            ("views", PyTuple::new(py, views)?, "uint8")
        }
        _ => ("bytes", dims(&[])?, "uint8"),
    })
}

fn dtype_name(dtype: nostall::DType) -> &'static str {
    match dtype {
        nostall::DType::U8 => "uint8",
        nostall::DType::F32 => "float32",
    }
}

fn content_name(content: Content) -> &'static str {
    match content {
        Content::Text => "text",
        Content::Json => "json",
        Content::Bytes => "bytes",
    }
}
