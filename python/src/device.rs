//! `device=`: the engine's side of batches on a CUDA device. The engine page-locks the
//! batch buffers, splits the pipeline (geometry on the CPU in 8-bit pixels, conversion
//! on the device) and queues the JPEGs the route leaves to the device as they are
//! prepared; `nostall._device` (Python, over PyTorch's CUDA) decodes those on a thread of
//! its own as they come, copies each batch on a side stream, puts the decoded samples in
//! their slots, and hands the tensors over in the consumer's stream order. This module
//! only converts between the two.

use std::sync::Arc;
use std::time::Duration;

use nostall::device::CudaHostMemory;
use nostall::loader::{DeviceQueue, ForDevice, LoaderBuilder, PageLock};
use nostall::prep::image::DeviceFinish;
use nostall::prep::route::{DecodeRoute, RouteMode};
use nostall::{Batch, Catalog};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyList};

use crate::errors::config_error;
use crate::raise;

/// A loader's device: the Python stager, made by `nostall._device.Stager`.
pub(crate) struct Device {
    stager: Py<PyAny>,
    route: Option<Arc<DecodeRoute>>,
    /// What locks the batch buffers; `None` where no CUDA runtime could be loaded.
    host_memory: Option<Arc<CudaHostMemory>>,
}

impl Device {
    /// Resolves `device` (`"cuda"`, `"cuda:N"`) in Python, loads the CUDA runtime to lock
    /// the batch buffers, sets `builder` up for the device with the route `decode` names
    /// (`"auto"`, `"gpu"`, `"cpu"`), and makes the stager.
    pub(crate) fn attach(
        py: Python<'_>,
        device: &str,
        decode: &str,
        min_pixels: u64,
        builder: &mut LoaderBuilder,
    ) -> PyResult<Device> {
        let route = DecodeRoute::named(decode, min_pixels)
            .map_err(|e| raise(py, e))?
            .map(Arc::new);
        let (module, index) = resolve(py, device)?;
        // PyTorch has the device (`resolve` checked), so a runtime that cannot be loaded
        // here costs speed, not correctness: said once, and in the metrics.
        let host_memory = match CudaHostMemory::load(index) {
            Ok(memory) => Some(Arc::new(memory)),
            Err(e) => {
                let warnings = py.import("warnings")?;
                warnings.call_method1(
                    "warn",
                    (format!("nostall: batch buffers are not page-locked: {e}"),),
                )?;
                None
            }
        };
        let queue = route.as_ref().map(|_| Arc::new(DeviceQueue::new()));
        builder.for_device(ForDevice {
            page_lock: host_memory
                .clone()
                .map(|memory| memory as Arc<dyn PageLock>),
            route: route.clone(),
            queue: queue.clone(),
        });
        let finish = builder.device_finish().map_err(|e| raise(py, e))?;
        // Only an image pipeline split for the device has a route to leave JPEGs by: for
        // audio, video, or a pipeline made in code, no decoder thread is started.
        let queue = queue
            .filter(|_| finish.is_some_and(|f| f.clip.is_none()))
            .map(|q| Py::new(py, LeftToDevice(q)))
            .transpose()?;
        let stager = module
            .getattr("Stager")?
            .call1((index, finish_dict(py, finish)?, queue))?
            .unbind();
        Ok(Device {
            stager,
            route,
            host_memory,
        })
    }

    /// A device for a job that shares its batches through the node agent: they are made
    /// on the CPU for every member of the group (float32, normalised), so they are moved
    /// as they are, from the agent's shared memory (not page-locked); no JPEG is left to
    /// the device.
    pub(crate) fn moving_shared(py: Python<'_>, device: &str, decode: &str) -> PyResult<Device> {
        if DecodeRoute::named(decode, DecodeRoute::DEFAULT_MIN_PIXELS)
            .map_err(|e| raise(py, e))?
            .is_some_and(|route| route.mode() == RouteMode::Always)
        {
            return Err(config_error(
                py,
                "decode=\"gpu\" with share=: the node agent decodes the group's batches on the \
                 CPU; leave decode out (or use \"cpu\")"
                    .into(),
            ));
        }
        let (module, index) = resolve(py, device)?;
        let stager = module
            .getattr("Stager")?
            .call1((index, py.None(), py.None()))?
            .unbind();
        Ok(Device {
            stager,
            route: None,
            host_memory: None,
        })
    }

    /// The samples `batch` left to the device, as the stager takes them: `(slot, epoch,
    /// sample id, location)`; their bytes reached the stager's decoder through the queue.
    pub(crate) fn deferred<'py>(
        py: Python<'py>,
        batch: &Batch,
        catalog: &Catalog,
    ) -> PyResult<Bound<'py, PyList>> {
        let deferred = PyList::empty(py);
        let epoch = batch.position().epoch;
        for (slot, _) in batch.deferred() {
            let id = batch.ids()[*slot];
            let location = catalog.path(id).display().to_string();
            deferred.append((*slot, epoch, id, location))?;
        }
        Ok(deferred)
    }

    /// Moves a batch's `(images, labels)` CPU tensors to the device, decoding there the
    /// `deferred` samples.
    pub(crate) fn stage(
        &self,
        py: Python<'_>,
        objects: (Py<PyAny>, Py<PyAny>),
        deferred: Bound<'_, PyList>,
        transform: Option<Bound<'_, PyAny>>,
    ) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let started = std::time::Instant::now();
        let decoding = !deferred.is_empty();
        let staged = self
            .stager
            .bind(py)
            .call_method1("stage", (objects.0, objects.1, deferred, transform))?
            .extract()?;
        if let (Some(route), true) = (&self.route, decoding) {
            route.device_took(started.elapsed());
        }
        Ok(staged)
    }

    /// Moves a batch of records (its one buffer, `record`, with its labels and its
    /// variable-length fields) to the device and splits it there by `split` into its
    /// fields (cut to its largest image as `cut` says), decoding there the `deferred`
    /// samples.
    pub(crate) fn stage_record(
        &self,
        py: Python<'_>,
        (record, labels, varying): (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        cut: Py<PyAny>,
        deferred: Bound<'_, PyList>,
        split: &Py<PyAny>,
        transform: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let started = std::time::Instant::now();
        let decoding = !deferred.is_empty();
        let staged = self
            .stager
            .bind(py)
            .call_method1(
                "stage_record",
                (record, labels, varying, deferred, split, transform, cut),
            )?
            .unbind();
        if let (Some(route), true) = (&self.route, decoding) {
            route.device_took(started.elapsed());
        }
        Ok(staged)
    }

    /// The figures for `metrics["device"]`: the stager's, the buffers page-locked (and
    /// those the runtime refused), and the route's share of eligible images sent and how
    /// many were.
    pub(crate) fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = self
            .stager
            .bind(py)
            .call_method0("metrics")?
            .cast_into::<PyDict>()?;
        d.set_item("page_locked", self.host_memory.is_some())?;
        if let Some(memory) = &self.host_memory {
            let (locked, refused) = memory.counts();
            d.set_item("buffers_page_locked", locked)?;
            d.set_item("buffers_not_page_locked", refused)?;
        }
        if let Some(route) = &self.route {
            d.set_item("gpu_decode_share", route.share())?;
            d.set_item("gpu_decoded", route.sent())?;
        }
        Ok(d)
    }
}

/// `nostall._device`, and the CUDA device index `device` names there (a `ConfigError`
/// when it is not there): it initialises PyTorch's CUDA, whose runtime the buffers are
/// locked with.
fn resolve<'py>(py: Python<'py>, device: &str) -> PyResult<(Bound<'py, PyModule>, u32)> {
    let module = crate::front::front(py)?.device.bind(py).clone();
    let index = module.call_method1("resolve", (device,))?.extract()?;
    Ok((module, index))
}

/// The samples the engine leaves to the device, in the order prep threads leave them:
/// what the stager's decoder thread takes.
#[pyclass(module = "nostall._nostall", frozen)]
pub(crate) struct LeftToDevice(Arc<DeviceQueue>);

#[pymethods]
impl LeftToDevice {
    /// Up to `most` samples, waiting at most `timeout` seconds for the first (none if
    /// none comes): `(epoch, sample id, bytes, (x, y, w, h) of the region in source
    /// pixels, (width, height) of the output, flip)` each.
    fn take<'py>(
        &self,
        py: Python<'py>,
        most: usize,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyList>> {
        let limit = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::ZERO);
        let taken = py.detach(|| self.0.take(most, limit));
        let list = PyList::empty(py);
        for item in taken {
            let g = &item.sample.geometry;
            list.append((
                item.epoch,
                item.id,
                PyByteArray::new(py, &item.sample.data),
                (g.source.x, g.source.y, g.source.w, g.source.h),
                (g.width, g.height),
                g.flip,
            ))?;
        }
        Ok(list)
    }
}

/// `DeviceFinish` as the stager takes it: `None` (move as is), or a dict of `dtype`,
/// `layout`, `mean` and `std` (in [0, 1] units; absent without `Normalize`), and for a
/// video's clips `clip` (`"TCHW"` or `"CTHW"`, the layout the user's Clip asked for).
fn finish_dict(
    py: Python<'_>,
    finish: Option<DeviceFinish>,
) -> PyResult<Option<Bound<'_, PyDict>>> {
    let Some(f) = finish else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("dtype", f.dtype.to_string())?;
    d.set_item("layout", f.layout.to_string())?;
    if let Some(channels_first) = f.clip {
        d.set_item("clip", if channels_first { "CTHW" } else { "TCHW" })?;
    }
    if let Some((mean, std)) = f.normalize {
        d.set_item("mean", mean.to_vec())?;
        d.set_item("std", std.to_vec())?;
    }
    Ok(Some(d))
}
