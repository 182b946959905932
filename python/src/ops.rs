//! `nostall.ops`: the image operators as Python objects.
//!
//! One extension class, `Op`, holds any image operator ([`nostall::prep::image::Op`]).
//! `nostall/ops.py` makes one subclass of it per operator the engine declares
//! ([`image_operators`] lists them, with their parameters and docs), whose `__new__`
//! hands its name and arguments to `Op.__new__`; the engine binds, checks and builds the
//! operator from its declaration. So the classes, their signatures, attributes, docs and
//! `repr` come from the one declaration in the engine, and nothing here names an
//! operator. The torchvision and timm transforms each declaration translates
//! ([`translations`]) are what `nostall/_translate.py` translates recipes by. Python
//! values become the engine's ([`PyValue`]) in one place.

use std::sync::Arc;

use nostall::prep::args::{Handle, Keywords, Operation, Param, Value};
use nostall::prep::audio::{self, AudioOp};
use nostall::prep::image::{op, ImagePipeline, Layout, Op, DECLARATIONS};
use nostall::prep::{DType, Operators};
use nostall::rng::Rng;
use nostall::user_code::function::UserOp;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::audio_ops::AudioOpBase;
use crate::errors::config_error;
use crate::python_ops::PythonOps;
use crate::raise;
use crate::video_ops::VideoOpBase;

/// The base class of one modality's operators: `$base` holding a `$op` (a
/// [`Handle`]), the Python class `Op` of `$module`. Each modality's module makes one with
/// its own docs; what they do is [`call`], [`hash`], [`arg`] and [`reduce`].
macro_rules! operator_base {
    ($(#[$doc:meta])* $base:ident($op:ty), module = $module:tt) => {
        $(#[$doc])*
        #[::pyo3::pyclass(module = $module, name = "Op", subclass, frozen, eq)]
        #[derive(PartialEq)]
        pub struct $base(pub $op);

        #[::pyo3::pymethods]
        impl $base {
            /// The operator `name` with these arguments (what each class's `__new__`
            /// calls).
            #[new]
            #[pyo3(signature = (name, args, kwargs))]
            fn new(
                py: ::pyo3::Python<'_>,
                name: &str,
                args: Vec<$crate::ops::PyValue>,
                kwargs: Option<&::pyo3::Bound<'_, ::pyo3::types::PyDict>>,
            ) -> ::pyo3::PyResult<$base> {
                Ok($base($crate::ops::call(py, name, args, kwargs)?))
            }

            fn __repr__(&self) -> String {
                self.0.to_string()
            }

            fn __hash__(&self) -> u64 {
                $crate::ops::hash(&self.0)
            }

            /// The value of its parameter `name`, as the operator holds it (each class's
            /// properties read them).
            fn _arg<'py>(
                &self,
                py: ::pyo3::Python<'py>,
                name: &str,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::PyAny>> {
                $crate::ops::arg(py, &self.0, name)
            }

            /// Pickled as its class and its arguments, in order.
            fn __reduce__<'py>(
                slf: &::pyo3::Bound<'py, Self>,
            ) -> ::pyo3::PyResult<(
                ::pyo3::Bound<'py, ::pyo3::PyAny>,
                ::pyo3::Bound<'py, ::pyo3::types::PyTuple>,
            )> {
                use ::pyo3::types::PyAnyMethods;
                $crate::ops::reduce(slf.get_type().into_any(), &slf.get().0)
            }
        }
    };
}
pub(crate) use operator_base;

operator_base!(
    /// An operator of a pipeline: the base class of the operators of `nostall.ops`.
    ///
    /// Operators are made by their subclasses and cannot be changed once made; a list of
    /// them is the `pipeline` of a `nostall.Loader`. Two operators are equal when they do
    /// the same thing.
    OpBase(Op),
    module = "nostall.ops"
);

// What the base classes of `nostall.ops`, `nostall.audio` and `nostall.video` do, once for
// all: an operator of any modality is a `Handle` of its own.

/// The operator `name` of `T`'s modality with these arguments (what each base class's
/// `__new__` makes).
pub(crate) fn call<T: Operation>(
    py: Python<'_>,
    name: &str,
    args: Vec<PyValue>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Handle<T>> {
    let (positional, keywords) = arguments(args, kwargs)?;
    Handle::call(name, positional, keywords).map_err(|e| raise(py, e))
}

/// The hash of `op`: of its call, as equal operators write it alike.
pub(crate) fn hash<T: Operation>(op: &Handle<T>) -> u64 {
    nostall::rng::digest_text(&op.to_string())
}

/// A call's arguments from Python: by position, then by keyword.
fn arguments(
    args: Vec<PyValue>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<(Vec<Value>, Keywords)> {
    let positional = args.into_iter().map(|v| v.0).collect();
    let mut keywords = Vec::new();
    for (key, value) in kwargs.into_iter().flatten() {
        keywords.push((key.extract::<String>()?, value.extract::<PyValue>()?.0));
    }
    Ok((positional, keywords))
}

/// The value of the parameter `name` of `op`.
pub(crate) fn arg<'py, T: Operation>(
    py: Python<'py>,
    op: &Handle<T>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    match op.arg(name) {
        Some(value) => to_python_value(py, &value),
        None => Err(PyAttributeError::new_err(format!(
            "{} has no parameter {name:?}",
            op.name()
        ))),
    }
}

/// `op` pickled as its `class` called with its arguments, in order.
pub(crate) fn reduce<'py, T: Operation>(
    class: Bound<'py, PyAny>,
    op: &Handle<T>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
    let py = class.py();
    let args = op
        .args()
        .iter()
        .map(|(_, value)| to_python_value(py, value))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((class, PyTuple::new(py, args)?))
}

/// An argument from Python: a number, a string, `None`, a bool, numbers in a tuple or
/// list, or image operators in one.
pub(crate) struct PyValue(pub Value);

impl<'py> FromPyObject<'_, 'py> for PyValue {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<PyValue> {
        if obj.is_none() {
            return Ok(PyValue(Value::None));
        }
        if let Ok(v) = obj.extract::<bool>() {
            return Ok(PyValue(Value::Bool(v)));
        }
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(PyValue(Value::Int(v)));
        }
        if let Ok(v) = obj.extract::<f64>() {
            return Ok(PyValue(Value::Float(v)));
        }
        if let Ok(v) = obj.extract::<String>() {
            return Ok(PyValue(Value::Str(v)));
        }
        if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
            let items: Vec<Bound<'py, PyAny>> = obj.extract()?;
            if !items.is_empty() && items.iter().all(|i| i.cast::<OpBase>().is_ok()) {
                let ops = items
                    .iter()
                    .map(|i| i.cast::<OpBase>().map(|o| o.get().0.clone()));
                return Ok(PyValue(Value::Ops(ops.collect::<Result<_, _>>()?)));
            }
            let mut numbers = Vec::with_capacity(items.len());
            for item in &items {
                match item.extract::<PyValue>()?.0 {
                    number @ (Value::Int(_) | Value::Float(_)) => numbers.push(number),
                    _ => {
                        return Err(PyTypeError::new_err(format!(
                            "{}: a sequence of numbers or of operators, not a mix or nested \
                             sequences",
                            obj.repr()?
                        )))
                    }
                }
            }
            return Ok(PyValue(Value::Tuple(numbers)));
        }
        Err(PyTypeError::new_err(format!(
            "{} is not an argument an operator takes: give numbers, strings, None, True or \
             False, sequences of numbers, or lists of operators",
            obj.repr()?
        )))
    }
}

/// A value as Python's: tuples for tuples, lists of operator objects for operators.
fn to_python_value<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::None => py.None().into_bound(py),
        Value::Bool(v) => v.into_pyobject(py)?.to_owned().into_any(),
        Value::Int(v) => v.into_pyobject(py)?.into_any(),
        Value::Float(v) => v.into_pyobject(py)?.into_any(),
        Value::Str(v) => v.into_pyobject(py)?.into_any(),
        Value::Tuple(items) => {
            let items = items
                .iter()
                .map(|v| to_python_value(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any()
        }
        Value::Ops(ops) => {
            let ops = ops
                .iter()
                .map(|op| to_python(py, op))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, ops)?.into_any()
        }
        _ => return Err(PyTypeError::new_err(format!("{value} has no Python form"))),
    })
}

/// `op` as an object of its `nostall.ops` class.
pub(crate) fn to_python<'py>(py: Python<'py>, op: &Op) -> PyResult<Bound<'py, PyAny>> {
    let class = crate::front::front(py)?.ops.bind(py).getattr(op.name())?;
    let args = op
        .args()
        .iter()
        .map(|(_, value)| to_python_value(py, value))
        .collect::<PyResult<Vec<_>>>()?;
    class.call1(PyTuple::new(py, args)?)
}

/// One parameter as `nostall/_declared.py` reads it: name, what it takes and gives
/// (Python annotations), its default as Python writes it, its doc.
type ParamRow = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
);

/// An operator's declaration as `nostall/_declared.py` reads it to make its class:
/// `(name, doc, [parameter, ...])`.
pub(crate) type Declared = (&'static str, &'static str, Vec<ParamRow>);

/// The declaration of the operator `name`, documented by `doc`, with `params`.
pub(crate) fn declared(name: &'static str, doc: &'static str, params: &[Param]) -> Declared {
    let params = params
        .iter()
        .map(|p| (p.name, p.kind.takes(), p.kind.gives(), p.default, p.doc));
    (name, doc, params.collect())
}

/// The image operators' declarations, for `nostall/ops.py` to make their classes.
#[pyfunction]
#[pyo3(name = "_image_operators")]
fn image_operators() -> Vec<Declared> {
    DECLARATIONS
        .iter()
        .map(|d| declared(d.name, d.doc, d.params))
        .collect()
}

/// One transform an operator translates, as `nostall/_translate.py` reads it: `(operator,
/// library, transform class, [(parameter, attribute, converter), ...], [attributes
/// refused when set], translator or None)`.
type TranslationRow = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str, &'static str)>,
    Vec<&'static str>,
    Option<&'static str>,
);

/// The transforms of torchvision and timm the image operators' declarations translate, for
/// `nostall/_translate.py` to translate recipes by.
#[pyfunction]
#[pyo3(name = "_translations")]
fn translations() -> Vec<TranslationRow> {
    let rows = DECLARATIONS.iter().flat_map(|d| {
        d.translates.iter().map(|t| {
            let args = t.args.iter().map(|(p, a, conv)| (*p, *a, conv.name()));
            (
                d.name,
                t.library.name(),
                t.name,
                args.collect(),
                t.unsupported.to_vec(),
                t.translator,
            )
        })
    });
    rows.collect()
}

/// The operators of a `pipeline=` list (the front has translated any recipe in it): nostall's
/// operators, or a list of such lists (views, each a list of image operators or a video's
/// clip and image operators). A
/// `TypeError` names the first item that is not an operator, or of the other modality than
/// the first. The `ops.Python` among them join `python`, the loader's.
pub(crate) fn from_python(
    pipeline: &Bound<'_, PyAny>,
    python: &Arc<PythonOps>,
) -> PyResult<Operators> {
    match views_of(pipeline, python)? {
        Some(views) => Ok(views),
        None => from_native(pipeline, python),
    }
}

/// The views of a `pipeline=` list whose items are each a list of operators: one list
/// of image operators a view, or one video pipeline (a clip and image operators) a view.
fn views_of(pipeline: &Bound<'_, PyAny>, python: &Arc<PythonOps>) -> PyResult<Option<Operators>> {
    let is_list = |item: &Bound<'_, PyAny>| {
        item.is_instance_of::<PyList>() || item.is_instance_of::<PyTuple>()
    };
    if !is_list(pipeline) {
        return Ok(None);
    }
    let items: Vec<_> = pipeline.try_iter()?.collect::<PyResult<_>>()?;
    if items.is_empty() || !items.iter().all(is_list) {
        return Ok(None);
    }
    let mut images = Vec::with_capacity(items.len());
    let mut videos = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match from_native(item, python)? {
            Operators::Image(ops) => images.push(ops),
            Operators::Video(clip, ops) => videos.push((clip, ops)),
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "pipeline[{i}] is {}: each view is a list of image operators \
                     (nostall.ops) or a torchvision or timm recipe, or a video's Clip \
                     followed by image operators",
                    item.repr()?
                )))
            }
        }
        if !images.is_empty() && !videos.is_empty() {
            return Err(config_error(
                pipeline.py(),
                format!(
                    "pipeline[{i}] is {}: the views of a sample are all of images or all of \
                     videos (each starting with its own video.Clip), read from one file",
                    item.repr()?
                ),
            ));
        }
    }
    Ok(Some(match videos.is_empty() {
        true => Operators::Views(images),
        false => Operators::VideoViews(videos),
    }))
}

/// The operators of a list of nostall's operators (and `ops.Python`, of either modality),
/// or of a video's: its clip first, then image operators.
fn from_native(pipeline: &Bound<'_, PyAny>, python: &Arc<PythonOps>) -> PyResult<Operators> {
    let not_a_list = || {
        PyTypeError::new_err(
            "pipeline takes a preset (\"train\", \"val\", \"m5\", \"melspec\") or a list of \
             nostall.ops operators (images), nostall.audio operators (audio), or a \
             nostall.video.Clip followed by nostall.ops operators (videos)",
        )
    };
    let items = pipeline.try_iter().map_err(|_| not_a_list())?;
    let (mut image, mut audio, mut user) = (Vec::new(), Vec::new(), Vec::new());
    let mut clip = None;
    for (i, item) in items.enumerate() {
        let item = item?;
        if let Ok(op) = item.cast::<VideoOpBase>() {
            if i > 0 {
                return Err(PyTypeError::new_err(format!(
                    "pipeline[{i}] is {}: a video's Clip comes first, then the image \
                     operators each frame goes through",
                    item.repr()?
                )));
            }
            clip = Some(op.get().0.clone());
        } else if let Ok(op) = item.cast::<OpBase>() {
            image.push((i, op.get().0.clone()));
        } else if let Ok(op) = item.cast::<AudioOpBase>() {
            audio.push((i, op.get().0.clone()));
        } else if let Some(op) = python.user_op(&item)? {
            user.push((i, op));
        } else {
            let names: Vec<_> = DECLARATIONS.iter().map(|d| d.name).collect();
            let audio_names: Vec<_> = audio::DECLARATIONS.iter().map(|d| d.name).collect();
            return Err(PyTypeError::new_err(format!(
                "pipeline[{i}] is {}, not an operator: build the list from nostall.ops \
                 ({}, Python) or from nostall.audio ({})",
                item.repr()?,
                names.join(", "),
                audio_names.join(", ")
            )));
        }
        if !image.is_empty() && !audio.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "pipeline[{i}] is {}: a pipeline's operators are all of nostall.ops (images) \
                 or all of nostall.audio (audio)",
                item.repr()?
            )));
        }
    }
    // Each function in its place among the others.
    fn placed<T>(
        mut ops: Vec<(usize, T)>,
        user: Vec<(usize, UserOp)>,
        f: fn(UserOp) -> T,
    ) -> Vec<T> {
        ops.extend(user.into_iter().map(|(i, op)| (i, f(op))));
        ops.sort_by_key(|(i, _)| *i);
        ops.into_iter().map(|(_, op)| op).collect()
    }
    if let Some(clip) = clip {
        if !audio.is_empty() {
            return Err(PyTypeError::new_err(
                "a video's frames go through image operators (nostall.ops), not audio ones",
            ));
        }
        return Ok(Operators::Video(clip, placed(image, user, Op::user)));
    }
    Ok(if audio.is_empty() {
        Operators::Image(placed(image, user, Op::user))
    } else {
        Operators::Audio(placed(audio, user, AudioOp::user))
    })
}

/// The augmentations an automatic augmentation (`op`) draws for `count` samples of
/// `width` × `height`: for the tests of its distribution against the reference's.
#[pyfunction]
#[pyo3(name = "_augment_draws")]
fn augment_draws(
    py: Python<'_>,
    op: &OpBase,
    seed: u64,
    count: usize,
    width: usize,
    height: usize,
) -> PyResult<Vec<Vec<(&'static str, f64)>>> {
    op::augmentation_draws(&op.0, seed, count, width, height).map_err(|e| raise(py, e))
}

/// One augmentation `name` with argument `value` of an automatic augmentation (`op`),
/// applied to `image` (3 planes of `width` × `height` bytes, R, G, B): for the tests of
/// its kernels against the reference's. The bytes come back changed.
#[pyfunction]
#[pyo3(name = "_augment", signature = (op, name, value, image, width, height, seed=0))]
#[allow(clippy::too_many_arguments)]
fn augment(
    py: Python<'_>,
    op: &OpBase,
    name: &str,
    value: f64,
    mut image: Vec<u8>,
    width: usize,
    height: usize,
    seed: u64,
) -> PyResult<Vec<u8>> {
    op::apply_augmentation(&op.0, name, value, &mut image, width, height, seed)
        .map_err(|e| raise(py, e))?;
    Ok(image)
}

/// The regions (left, top, width, height, in source pixels) `count` samples of
/// `width` × `height` read under the geometric operator `op` (a crop), drawn in turn from
/// one generator seeded by `seed`: for the tests of its draws against the reference's.
#[pyfunction]
#[pyo3(name = "_crop_draws")]
fn crop_draws(
    py: Python<'_>,
    op: &OpBase,
    seed: u64,
    count: usize,
    width: u32,
    height: u32,
) -> PyResult<Vec<(f64, f64, f64, f64)>> {
    let pipeline =
        ImagePipeline::new(vec![op.0.clone()], DType::U8, Layout::Chw).map_err(|e| raise(py, e))?;
    let mut rng = Rng::new(seed);
    Ok((0..count)
        .map(|_| {
            let region = pipeline.geometry(width, height, &mut rng).source;
            (region.x, region.y, region.w, region.h)
        })
        .collect())
}

/// The perspective taking an image's corners to `endpoints` (x then y of the top left,
/// top right, bottom right and bottom left corner), sampled `interpolation` with `fill`
/// outside: `RandomPerspective` with its draw pinned, for the tests against
/// torchvision's functional `perspective`.
#[pyfunction]
#[pyo3(name = "_perspective", signature = (endpoints, interpolation="bilinear", fill=[0.0; 3]))]
fn perspective(
    py: Python<'_>,
    endpoints: [i64; 8],
    interpolation: &str,
    fill: [f64; 3],
) -> PyResult<OpBase> {
    op::pinned_perspective(endpoints, interpolation, fill)
        .map(OpBase)
        .map_err(|e| raise(py, e))
}

/// Adds `Op`, the declarations and their translations to the extension module
/// (`nostall.ops` makes the classes, `nostall._translate` reads the translations).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OpBase>()?;
    m.add_function(wrap_pyfunction!(image_operators, m)?)?;
    m.add_function(wrap_pyfunction!(translations, m)?)?;
    m.add_function(wrap_pyfunction!(augment_draws, m)?)?;
    m.add_function(wrap_pyfunction!(augment, m)?)?;
    m.add_function(wrap_pyfunction!(crop_draws, m)?)?;
    m.add_function(wrap_pyfunction!(perspective, m)?)
}
