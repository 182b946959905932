//! The DLPack protocol: the C structs (DLPack 0.8, `dlpack.h`) and the capsule that hands
//! a batch's buffer to a consumer (PyTorch, NumPy, JAX, CuPy) without copying.
//!
//! All the unsafe code of the bindings is here. The contract (from `dlpack.h` and the
//! Python array API's `__dlpack__`): the producer returns a `PyCapsule` named `"dltensor"`
//! holding a `DLManagedTensor*`. A consumer that takes it renames the capsule
//! `"used_dltensor"` and calls the tensor's `deleter` once when it no longer needs the
//! memory (from any thread, with or without the GIL). A capsule that nobody consumed
//! still holds its name when Python frees it; its destructor then calls the deleter.
//!
//! The `manager_ctx` here is the [`Managed`] allocation itself: it owns the engine's
//! [`nostall::Batch`] (or a labels vector), so the deleter dropping it is what returns
//! the batch buffer to the loader's pool.

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

/// `DLDeviceType::kDLCPU`.
pub(crate) const DEVICE_CPU: i32 = 1;
/// `DLDataTypeCode::kDLInt`.
const CODE_INT: u8 = 0;
/// `DLDataTypeCode::kDLUInt`.
const CODE_UINT: u8 = 1;
/// `DLDataTypeCode::kDLFloat`.
const CODE_FLOAT: u8 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What keeps an exported tensor's memory alive.
pub(crate) enum Owner {
    /// The images of a batch: the engine's buffer, returned to the pool on drop.
    Batch(nostall::Batch),
    /// A batch's labels, copied out of it (a few hundred bytes) so that keeping labels
    /// does not keep the images' buffer from the pool.
    Labels(Vec<i64>),
    /// A mixed batch's soft labels, `len` rows of `classes` ([`nostall::prep::mixup`]).
    SoftLabels(Vec<f32>, usize),
    /// int64 values in rows of the given width (a tokenizer's ids and masks).
    Ints(Vec<i64>, usize),
    /// The images of a batch in the node agent's shared memory (`share=`), released to
    /// the agent on drop. Mapped copy-on-write: an in-place change stays this job's.
    Shared {
        batch: nostall_agent::SharedBatch,
        shape: Vec<i64>,
        dtype: nostall::DType,
    },
}

fn dl_type(dtype: nostall::DType) -> DLDataType {
    match dtype {
        nostall::DType::F32 => DLDataType {
            code: CODE_FLOAT,
            bits: 32,
            lanes: 1,
        },
        nostall::DType::U8 => DLDataType {
            code: CODE_UINT,
            bits: 8,
            lanes: 1,
        },
    }
}

impl Owner {
    /// Data pointer (writable: consumers such as torch may change the tensor in place),
    /// element type and shape.
    fn describe(&mut self) -> (*mut u8, DLDataType, Vec<i64>) {
        match self {
            Owner::Batch(batch) => {
                let shape = batch.shape().iter().map(|&d| d as i64).collect();
                (batch.data_mut().as_mut_ptr(), dl_type(batch.dtype()), shape)
            }
            // A private copy-on-write mapping: an in-place change stays this job's.
            Owner::Shared {
                batch,
                shape,
                dtype,
            } => (
                batch.data_mut().as_mut_ptr(),
                dl_type(*dtype),
                shape.clone(),
            ),
            Owner::Labels(labels) => (
                labels.as_mut_ptr().cast(),
                DLDataType {
                    code: CODE_INT,
                    bits: 64,
                    lanes: 1,
                },
                vec![labels.len() as i64],
            ),
            Owner::SoftLabels(labels, classes) => (
                labels.as_mut_ptr().cast(),
                dl_type(nostall::DType::F32),
                vec![(labels.len() / *classes) as i64, *classes as i64],
            ),
            Owner::Ints(values, width) => (
                values.as_mut_ptr().cast(),
                DLDataType {
                    code: CODE_INT,
                    bits: 64,
                    lanes: 1,
                },
                vec![(values.len() / (*width).max(1)) as i64, *width as i64],
            ),
        }
    }

    /// Address of the first element (for tests and debugging).
    pub(crate) fn data_ptr(&mut self) -> usize {
        self.describe().0 as usize
    }

    /// The shape.
    pub(crate) fn shape(&mut self) -> Vec<i64> {
        self.describe().2
    }

    /// The element type as NumPy spells it.
    pub(crate) fn dtype_name(&self) -> &'static str {
        match self {
            Owner::Batch(b) if b.dtype() == nostall::DType::U8 => "uint8",
            Owner::Shared { dtype, .. } if *dtype == nostall::DType::U8 => "uint8",
            Owner::Batch(_) | Owner::Shared { .. } => "float32",
            Owner::Labels(_) | Owner::Ints(..) => "int64",
            Owner::SoftLabels(..) => "float32",
        }
    }
}

/// One allocation per exported tensor: the DLPack struct first (so a pointer to it is a
/// pointer to the whole), then what its pointers point into.
#[repr(C)]
struct Managed {
    tensor: DLManagedTensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
    owner: Owner,
}

/// Frees an exported tensor: drops the owner (returning a batch buffer to its pool).
///
/// # Safety
///
/// `tensor` must come from [`into_capsule`] and this must be its only call, as the
/// DLPack contract requires of consumers.
unsafe extern "C" fn deleter(tensor: *mut DLManagedTensor) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: `tensor` points at the `tensor` field, which is first in the `repr(C)`
    // `Managed` that `into_capsule` leaked with `Box::into_raw`; ownership comes back
    // exactly once (the consumer's single call, or the capsule destructor when unused).
    drop(unsafe { Box::from_raw(tensor.cast::<Managed>()) });
}

const NAME: &CStr = c"dltensor";
const USED_NAME: &CStr = c"used_dltensor";

/// Destructor of the capsule: frees the tensor only if no consumer took it.
///
/// # Safety
///
/// Called by Python, with the GIL held, on a capsule made by [`into_capsule`].
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule (Python calls this while freeing it). A
    // consumer renames it to "used_dltensor" when it takes ownership; then it is not ours.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, USED_NAME.as_ptr()) == 1 {
            return;
        }
        let ptr = pyo3::ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr());
        if ptr.is_null() {
            // Wrong name: not ours to free. Clear the lookup error, which must not leak
            // out of a destructor.
            pyo3::ffi::PyErr_Clear();
            return;
        }
        deleter(ptr.cast::<DLManagedTensor>());
    }
}

/// Wraps `owner`'s memory in a `"dltensor"` capsule (CPU, compact row-major strides).
pub(crate) fn into_capsule(py: Python<'_>, mut owner: Owner) -> PyResult<Bound<'_, PyAny>> {
    let (data, dtype, shape) = owner.describe();
    let mut strides = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let mut managed = Box::new(Managed {
        tensor: DLManagedTensor {
            dl_tensor: DLTensor {
                data: data.cast(),
                device: DLDevice {
                    device_type: DEVICE_CPU,
                    device_id: 0,
                },
                ndim: shape.len() as i32,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter),
        },
        shape,
        strides,
        owner,
    });
    // The vectors' heap storage does not move when the box is leaked below.
    managed.tensor.dl_tensor.shape = managed.shape.as_mut_ptr();
    managed.tensor.dl_tensor.strides = managed.strides.as_mut_ptr();
    let raw = Box::into_raw(managed);
    // SAFETY: `raw` is a valid, uniquely owned allocation; the pointer to its first field
    // is the pointer to it (`repr(C)`).
    unsafe {
        (*raw).tensor.manager_ctx = raw.cast();
    }
    // SAFETY: PyCapsule_New takes a non-null pointer, a 'static name and a destructor;
    // the GIL is held (we have `py`). On failure it returns NULL with an exception set, and
    // we take the allocation back to free it.
    unsafe {
        let capsule = pyo3::ffi::PyCapsule_New(
            raw.cast::<c_void>(),
            NAME.as_ptr() as *const c_char,
            Some(capsule_destructor),
        );
        if capsule.is_null() {
            deleter(raw.cast::<DLManagedTensor>());
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule))
    }
}

/// The error a second export of the same tensor raises.
pub(crate) fn already_exported() -> PyErr {
    PyBufferError::new_err(
        "this nostall tensor was already exported through __dlpack__ (each batch tensor can \
         be handed to one consumer; use the tensor that consumer returned)",
    )
}
