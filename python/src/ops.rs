//! `nostall.ops`: the operators of a pipeline as Python objects.
//!
//! Each class converts its arguments into one [`nostall::prep::image::Op`], which the engine
//! checks ([`Op::validate`]) when the object is made; the common base class `Op` holds
//! that value, which is what `Loader(pipeline=[...])` hands to
//! [`nostall::Pipeline::new`]. The subclasses keep their arguments for their
//! read-only attributes.

use nostall::prep::image::{Op, Size, DEFAULT_CROP_RATIO, DEFAULT_CROP_SCALE};
use nostall::prep::Operators;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{PyClass, PyClassInitializer};

use crate::audio_ops::AudioOpBase;
use crate::raise;

/// An operator of a pipeline: the base class of the operators of `nostall.ops`.
///
/// Operators are made by their subclasses and cannot be changed once made; a list of
/// them is the `pipeline` of a `nostall.Loader`. Two operators are equal when they do
/// the same thing.
#[pyclass(module = "nostall.ops", name = "Op", subclass, frozen, eq)]
#[derive(PartialEq)]
pub struct OpBase(pub Op);

/// A new operator of class `T` doing `op`, once the engine accepts `op`.
fn make<T>(py: Python<'_>, op: Op, operator: T) -> PyResult<PyClassInitializer<T>>
where
    T: PyClass<BaseType = OpBase>,
{
    op.validate().map_err(|e| raise(py, e))?;
    Ok(PyClassInitializer::from(OpBase(op)).add_subclass(operator))
}

#[pymethods]
impl OpBase {
    fn __repr__(&self) -> String {
        self.0.to_string()
    }
}

/// A `size` argument as torchvision takes it: one int, or a `(height, width)` pair.
enum SizeArg {
    One(u32),
    Pair(u32, u32),
}

impl SizeArg {
    fn extract(class: &str, size: &Bound<'_, PyAny>) -> PyResult<SizeArg> {
        if let Ok(side) = size.extract::<u32>() {
            return Ok(SizeArg::One(side));
        }
        if let Ok([height, width]) = size.extract::<[u32; 2]>() {
            return Ok(SizeArg::Pair(height, width));
        }
        Err(PyTypeError::new_err(format!(
            "{class}: size takes an int or a (height, width) pair of ints, not {}",
            size.repr()?
        )))
    }

    /// The int as a square.
    fn square(self) -> (u32, u32) {
        match self {
            SizeArg::One(side) => (side, side),
            SizeArg::Pair(height, width) => (height, width),
        }
    }
}

/// Crops a random area and aspect ratio of the image and resizes it to `size`
/// (torchvision's `RandomResizedCrop`, with the same random choices).
///
/// - `size`: output size, an int (square) or `(height, width)`.
/// - `scale` (`(0.08, 1.0)`): range of the crop's area as a fraction of the image's.
/// - `ratio` (`(3/4, 4/3)`): range of the crop's aspect ratio (width / height).
///
/// nostall decodes only the cropped region of a JPEG, at the smallest sufficient scale.
#[pyclass(module = "nostall.ops", extends = OpBase, frozen, get_all)]
pub struct RandomResizedCrop {
    /// Output `(height, width)`.
    size: (u32, u32),
    /// Range of the crop's area, as a fraction of the image's.
    scale: (f64, f64),
    /// Range of the crop's aspect ratio (width / height).
    ratio: (f64, f64),
}

#[pymethods]
impl RandomResizedCrop {
    #[new]
    #[pyo3(
        signature = (size, scale=DEFAULT_CROP_SCALE, ratio=DEFAULT_CROP_RATIO),
        text_signature = "(size, scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333))"
    )]
    fn new(
        py: Python<'_>,
        size: &Bound<'_, PyAny>,
        scale: (f64, f64),
        ratio: (f64, f64),
    ) -> PyResult<PyClassInitializer<Self>> {
        let size = SizeArg::extract("RandomResizedCrop", size)?.square();
        let op = Op::RandomResizedCrop { size, scale, ratio };
        make(py, op, RandomResizedCrop { size, scale, ratio })
    }
}

/// Resizes the image (bilinear, antialiased when shrinking).
///
/// - `size`: an int resizes the shorter side to it, keeping the aspect ratio (follow
///   it with `CenterCrop` for batches of one shape); `(height, width)` resizes to
///   exactly that.
///
/// Like the crops, it only plans the geometry: the one resize of a sample happens once
/// the crop is known.
#[pyclass(module = "nostall.ops", extends = OpBase, frozen)]
pub struct Resize {
    size: Size,
}

#[pymethods]
impl Resize {
    #[new]
    fn new(py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<PyClassInitializer<Self>> {
        let size = match SizeArg::extract("Resize", size)? {
            SizeArg::One(side) => Size::Shorter(side),
            SizeArg::Pair(height, width) => Size::Exact { height, width },
        };
        make(py, Op::Resize(size), Resize { size })
    }

    /// The shorter side's new length (an int), or the exact `(height, width)`.
    #[getter]
    fn size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.size {
            Size::Shorter(side) => Ok(side.into_pyobject(py)?.into_any()),
            Size::Exact { height, width } => Ok((height, width).into_pyobject(py)?.into_any()),
        }
    }
}

/// Crops the centre of the image to `size`: an int (square) or `(height, width)`.
#[pyclass(module = "nostall.ops", extends = OpBase, frozen, get_all)]
pub struct CenterCrop {
    /// Output `(height, width)`.
    size: (u32, u32),
}

#[pymethods]
impl CenterCrop {
    #[new]
    fn new(py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<PyClassInitializer<Self>> {
        let (height, width) = SizeArg::extract("CenterCrop", size)?.square();
        let size = (height, width);
        make(py, Op::CenterCrop { height, width }, CenterCrop { size })
    }
}

/// Mirrors the image left to right with probability `p` (0.5).
#[pyclass(module = "nostall.ops", extends = OpBase, frozen, get_all)]
pub struct RandomHorizontalFlip {
    /// Probability of mirroring.
    p: f64,
}

#[pymethods]
impl RandomHorizontalFlip {
    #[new]
    #[pyo3(signature = (p=0.5))]
    fn new(py: Python<'_>, p: f64) -> PyResult<PyClassInitializer<Self>> {
        make(
            py,
            Op::RandomHorizontalFlip { p },
            RandomHorizontalFlip { p },
        )
    }
}

/// Subtracts `mean` and divides by `std`, per RGB channel, in [0, 1] units (pixel / 255),
/// as torchvision's `ToTensor` then `Normalize` do. Needs `dtype="float32"`.
///
/// ImageNet's: `Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))`.
#[pyclass(module = "nostall.ops", extends = OpBase, frozen, get_all)]
pub struct Normalize {
    /// Per-channel mean (R, G, B), as the engine holds it (32-bit floats).
    mean: (f32, f32, f32),
    /// Per-channel standard deviation (R, G, B), as the engine holds it.
    std: (f32, f32, f32),
}

#[pymethods]
impl Normalize {
    #[new]
    fn new(py: Python<'_>, mean: Vec<f32>, std: Vec<f32>) -> PyResult<PyClassInitializer<Self>> {
        let (mean, std) = (rgb("mean", mean)?, rgb("std", std)?);
        let operator = Normalize {
            mean: mean.into(),
            std: std.into(),
        };
        make(py, Op::Normalize { mean, std }, operator)
    }
}

/// A per-channel argument of `Normalize`: three values, R, G, B.
fn rgb(name: &str, values: Vec<f32>) -> PyResult<[f32; 3]> {
    let n = values.len();
    values.try_into().map_err(|_| {
        PyValueError::new_err(format!(
            "Normalize: {name} takes 3 values (R, G, B), not {n}"
        ))
    })
}

/// `op` as an object of its `nostall.ops` class.
pub(crate) fn to_python<'py>(py: Python<'py>, op: &Op) -> PyResult<Bound<'py, PyAny>> {
    let op = op.clone();
    let object = match op {
        Op::RandomResizedCrop { size, scale, ratio } => {
            let operator = RandomResizedCrop { size, scale, ratio };
            Bound::new(py, make(py, op, operator)?)?.into_any()
        }
        Op::Resize(size) => Bound::new(py, make(py, op, Resize { size })?)?.into_any(),
        Op::CenterCrop { height, width } => {
            let size = (height, width);
            Bound::new(py, make(py, op, CenterCrop { size })?)?.into_any()
        }
        Op::RandomHorizontalFlip { p } => {
            Bound::new(py, make(py, op, RandomHorizontalFlip { p })?)?.into_any()
        }
        Op::Normalize { mean, std } => {
            let operator = Normalize {
                mean: mean.into(),
                std: std.into(),
            };
            Bound::new(py, make(py, op, operator)?)?.into_any()
        }
    };
    Ok(object)
}

/// The operators of a `pipeline=` list; a `TypeError` names the first item that is not
/// an operator, or of the other modality than the first.
pub(crate) fn from_python(pipeline: &Bound<'_, PyAny>) -> PyResult<Operators> {
    let not_a_list = || {
        PyTypeError::new_err(
            "pipeline takes a preset (\"train\", \"val\", \"m5\", \"melspec\") or a list of \
             nostall.ops operators (images) or nostall.audio operators (audio)",
        )
    };
    let items = pipeline.try_iter().map_err(|_| not_a_list())?;
    let (mut image, mut audio) = (Vec::new(), Vec::new());
    for (i, item) in items.enumerate() {
        let item = item?;
        if let Ok(op) = item.cast::<OpBase>() {
            image.push(op.get().0.clone());
        } else if let Ok(op) = item.cast::<AudioOpBase>() {
            audio.push(op.get().0.clone());
        } else {
            return Err(PyTypeError::new_err(format!(
                "pipeline[{i}] is {}, not an operator: build the list from nostall.ops \
                 (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Normalize) or \
                 from nostall.audio (Channels, Resample, RandomCrop, CenterCrop, \
                 MelSpectrogram, Log)",
                item.repr()?
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
    Ok(if audio.is_empty() {
        Operators::Image(image)
    } else {
        Operators::Audio(audio)
    })
}

/// Adds the operator classes to the extension module (`nostall.ops` re-exports them).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OpBase>()?;
    m.add_class::<RandomResizedCrop>()?;
    m.add_class::<Resize>()?;
    m.add_class::<CenterCrop>()?;
    m.add_class::<RandomHorizontalFlip>()?;
    m.add_class::<Normalize>()?;
    Ok(())
}
