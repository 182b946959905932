//! Batches as Python objects: one tensor exported through DLPack ([`BatchTensor`]), and
//! the objects a loader returns as `output=` asks.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};

use crate::dlpack::{self, Owner};
use crate::errors::config_error;
use crate::handoff;

/// One tensor of a batch (the images, or the labels), exported through DLPack.
///
/// `torch.from_dlpack(t)`, `numpy.from_dlpack(t)` or `jax.dlpack.from_dlpack(t)` take the
/// memory without copying; it is freed (for images: returned to the loader's pool of
/// batch buffers) when that consumer's array is freed. A `BatchTensor` can be exported
/// once. Loaders return these with `output="dlpack"`.
#[pyclass(module = "nostall._nostall", frozen)]
pub(crate) struct BatchTensor {
    owner: Mutex<Option<Owner>>,
    data_ptr: usize,
    shape: Vec<i64>,
    dtype: &'static str,
}

impl BatchTensor {
    fn new(mut owner: Owner) -> BatchTensor {
        BatchTensor {
            data_ptr: owner.data_ptr(),
            shape: owner.shape(),
            dtype: owner.dtype_name(),
            owner: Mutex::new(Some(owner)),
        }
    }
}

#[pymethods]
impl BatchTensor {
    /// Exports the tensor as a DLPack capsule (the array API's `__dlpack__`); the
    /// consumer takes ownership of the memory.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // CPU memory: no stream to synchronise with; the unversioned capsule is what every
        // consumer accepts whatever `max_version` it asks for.
        let _ = (stream, max_version);
        if let Some(device) = dl_device {
            if device != (dlpack::DEVICE_CPU, 0) {
                return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                    "nostall batches live in CPU memory (device (1, 0)); {device:?} was asked for"
                )));
            }
        }
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "nostall exports batches without copying; copy=True is not supported",
            ));
        }
        let owner = self
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(dlpack::already_exported)?;
        dlpack::into_capsule(py, owner)
    }

    /// The device of the memory, `(1, 0)`: DLPack's CPU.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (dlpack::DEVICE_CPU, 0)
    }

    /// Address of the first element: the loader's batch buffer for images.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.data_ptr
    }

    /// The shape: `(n, 3, h, w)` (CHW) or `(n, h, w, 3)` (HWC) for images, `(n,)` for
    /// labels.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// The element type, as NumPy names it (`"float32"`, `"uint8"`, `"int64"`).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype
    }

    fn __repr__(&self) -> String {
        format!(
            "BatchTensor(shape={:?}, dtype={}, data_ptr={:#x})",
            self.shape, self.dtype, self.data_ptr
        )
    }
}

/// How batches are returned to Python.
pub(crate) enum Output {
    /// `BatchTensor`s, for any DLPack consumer.
    DLPack,
    /// `torch.from_dlpack`, given the DLPack capsules themselves: torch takes a capsule
    /// without calling back into the producer (`__dlpack_device__`, `__dlpack__`), and
    /// no `BatchTensor` is made to be thrown away.
    Torch(Py<PyAny>),
    /// Through a `from_dlpack` function that asks for the protocol: `numpy.from_dlpack`.
    Via(Py<PyAny>),
}

/// One tensor (or array, or `BatchTensor`) of `owner`'s values, as `output` asks.
pub(crate) fn object(py: Python<'_>, output: &Output, owner: Owner) -> PyResult<Py<PyAny>> {
    match output {
        Output::Torch(f) => Ok(f
            .bind(py)
            .call1((dlpack::into_capsule(py, owner)?,))?
            .unbind()),
        Output::Via(f) => {
            let tensor = Bound::new(py, BatchTensor::new(owner))?;
            Ok(f.bind(py).call1((tensor,))?.unbind())
        }
        Output::DLPack => Ok(Bound::new(py, BatchTensor::new(owner))?.into_any().unbind()),
    }
}

/// The Python objects of a batch's images and labels, as `output` asks.
pub(crate) fn objects(
    py: Python<'_>,
    output: &Output,
    images: Owner,
    labels: Owner,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    Ok((object(py, output, images)?, object(py, output, labels)?))
}

/// The batch's images as a tuple of one tensor (or array) a view, each `[n, *shape]`,
/// where the sample is made of `views` (each a view of the batch's memory, no copy);
/// `images` as they are where it is not. With `stack`, consecutive views of one shape
/// are one tensor `[k, n, *shape]` (view-major, as DINO's `MultiCropWrapper` concatenates
/// them: `flatten(0, 1)` gives its `torch.cat`), still a view of the batch's memory.
pub(crate) fn split_views(
    py: Python<'_>,
    images: Py<PyAny>,
    views: &[Vec<usize>],
    stack: bool,
) -> PyResult<Py<PyAny>> {
    if views.is_empty() {
        return Ok(images);
    }
    let images = images.bind(py);
    let n: usize = images.getattr("shape")?.get_item(0)?.extract()?;
    let all = PySlice::full(py);
    let mut at = 0;
    let mut parts = Vec::with_capacity(views.len());
    let mut rest = views;
    while let Some(shape) = rest.first() {
        let k = if stack {
            rest.iter().take_while(|s| *s == shape).count()
        } else {
            1
        };
        let elements: usize = shape.iter().product();
        let columns = PySlice::new(py, at as isize, (at + k * elements) as isize, 1);
        let mut dims = vec![n];
        if stack {
            dims.push(k);
        }
        dims.extend_from_slice(shape);
        let mut part = images
            .get_item((&all, columns))?
            .call_method1("reshape", (PyTuple::new(py, dims)?,))?;
        if stack {
            part = part.call_method1("swapaxes", (0, 1))?;
        }
        parts.push(part);
        at += k * elements;
        rest = &rest[k..];
    }
    Ok(PyTuple::new(py, parts)?.into_any().unbind())
}

/// How the hand-off thread makes a shared batch's objects: the images in the agent's
/// memory, shaped by the pipeline's `layout`.
pub(crate) fn shared_objects(
    output: Arc<Output>,
    layout: nostall::prep::SampleLayout,
) -> handoff::Make {
    Arc::new(move |py, batch| {
        let labels = Owner::Labels(batch.labels().to_vec());
        let mut shape = vec![batch.len() as i64];
        shape.extend(layout.shape().iter().map(|&d| d as i64));
        let dtype = layout.dtype();
        objects(
            py,
            &output,
            Owner::Shared {
                batch,
                shape,
                dtype,
            },
            labels,
        )
    })
}
pub(crate) fn resolve_output(py: Python<'_>, output: &str) -> PyResult<Output> {
    let from_dlpack = |module: &str| -> PyResult<Py<PyAny>> {
        Ok(py.import(module)?.getattr("from_dlpack")?.unbind())
    };
    let torch = || from_dlpack("torch").map(Output::Torch);
    let numpy = || from_dlpack("numpy").map(Output::Via);
    match output {
        "torch" => torch(),
        "numpy" => numpy(),
        "dlpack" => Ok(Output::DLPack),
        "auto" => torch().or_else(|_| numpy()).or(Ok(Output::DLPack)),
        other => Err(config_error(
            py,
            format!("output={other:?}: use \"auto\", \"torch\", \"numpy\" or \"dlpack\""),
        )),
    }
}
