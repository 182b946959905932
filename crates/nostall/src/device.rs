//! Device runtimes, loaded at run time: nostall builds, and runs everything else, on a
//! machine with no CUDA at all.
//!
//! For now one piece: [`CudaHostMemory`], which page-locks batch buffers with the CUDA
//! runtime's `cudaHostRegister` ([`PageLock`]), so that the consumer's copy engine moves a
//! batch to the GPU asynchronously, straight from the buffer the prep threads wrote,
//! without a bounce through a staging buffer. The runtime is the one the process already
//! has (PyTorch's, once it initialised CUDA), or else the first one the dynamic loader
//! finds; it is never unloaded.
//!
//! All `unsafe` of this module is the loading and calling of those C functions.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::loader::PageLock;

/// The CUDA runtime's names, newest first.
const CUDA_RUNTIMES: [&CStr; 4] = [
    c"libcudart.so.13",
    c"libcudart.so.12",
    c"libcudart.so.11.0",
    c"libcudart.so",
];

/// `cudaHostRegisterPortable`: locked for every CUDA context of the process.
const HOST_REGISTER_PORTABLE: c_uint = 1;

type SetDevice = unsafe extern "C" fn(c_int) -> c_int;
type HostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> c_int;
type HostUnregister = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Page-locks batch buffers through the CUDA runtime (see the module docs).
pub struct CudaHostMemory {
    library: String,
    device: c_int,
    set_device: SetDevice,
    register: HostRegister,
    unregister: HostUnregister,
    locked: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for CudaHostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaHostMemory")
            .field("library", &self.library)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl CudaHostMemory {
    /// The CUDA runtime the process has, or the first the dynamic loader finds, locking
    /// memory for device `device` (whose context the prep threads use).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when no CUDA runtime can be loaded, naming the libraries tried.
    pub fn load(device: u32) -> Result<CudaHostMemory> {
        // The runtime a framework mapped from its own folder (PyTorch's wheels carry one)
        // by its path, in case its name alone does not find it.
        let mapped = mapped_runtime();
        let mut names: Vec<&CStr> = mapped.iter().map(CString::as_c_str).collect();
        names.extend(CUDA_RUNTIMES);
        Self::load_from(&names, device)
    }

    fn load_from(names: &[&CStr], device: u32) -> Result<CudaHostMemory> {
        let device = c_int::try_from(device)
            .map_err(|_| Error::Config(format!("no CUDA device {device}")))?;
        // The process's own first: a second runtime beside PyTorch's would keep its own
        // contexts.
        let loaded = [libc::RTLD_NOW | libc::RTLD_NOLOAD, libc::RTLD_NOW]
            .into_iter()
            .flat_map(|flags| names.iter().map(move |name| (name, flags)))
            .find_map(|(name, flags)| {
                // SAFETY: a NUL-terminated name; loading the CUDA runtime runs only its
                // own initialisers.
                let handle = unsafe { libc::dlopen(name.as_ptr(), flags) };
                NonNull::new(handle).map(|h| (h, name.to_string_lossy().into_owned()))
            });
        let Some((handle, library)) = loaded else {
            let tried: Vec<_> = names.iter().map(|n| n.to_string_lossy()).collect();
            return Err(Error::Config(format!(
                "batches on a CUDA device need the CUDA runtime, loaded at run time, and none \
                 of {} could be loaded ({}): install PyTorch with CUDA support, or the CUDA \
                 toolkit",
                tried.join(", "),
                last_dl_error()
            )));
        };
        let symbol = |name: &CStr| -> Result<NonNull<c_void>> {
            // SAFETY: a live handle (never closed) and a NUL-terminated name.
            NonNull::new(unsafe { libc::dlsym(handle.as_ptr(), name.as_ptr()) }).ok_or_else(|| {
                Error::Config(format!(
                    "{library} has no {}: not a CUDA runtime nostall can use",
                    name.to_string_lossy()
                ))
            })
        };
        let (set_device, register, unregister) = (
            symbol(c"cudaSetDevice")?,
            symbol(c"cudaHostRegister")?,
            symbol(c"cudaHostUnregister")?,
        );
        // SAFETY: the CUDA runtime's documented signatures for these names; the library
        // stays loaded for the life of the process, and so the functions valid.
        let (set_device, register, unregister) = unsafe {
            (
                std::mem::transmute::<*mut c_void, SetDevice>(set_device.as_ptr()),
                std::mem::transmute::<*mut c_void, HostRegister>(register.as_ptr()),
                std::mem::transmute::<*mut c_void, HostUnregister>(unregister.as_ptr()),
            )
        };
        Ok(CudaHostMemory {
            library,
            device,
            set_device,
            register,
            unregister,
            locked: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// Buffers locked so far, and buffers the runtime refused to lock (used unlocked).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.locked.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

/// The CUDA runtime this process has mapped, by path (from `/proc/self/maps`).
fn mapped_runtime() -> Option<CString> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            path.rsplit('/')
                .next()
                .is_some_and(|file| file.starts_with("libcudart.so"))
        })
        .and_then(|path| CString::new(path).ok())
}

/// Why the last `dlopen` failed.
fn last_dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message valid until the next call.
    let message: *const c_char = unsafe { libc::dlerror() };
    if message.is_null() {
        return "no reason given".into();
    }
    // SAFETY: non-null, NUL-terminated, read at once.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

impl PageLock for CudaHostMemory {
    fn lock(&self, ptr: NonNull<u8>, len: usize) -> bool {
        // Buffers are locked by the prep threads, nostall's own: making the device theirs
        // keeps the runtime from opening a context on device 0 for them.
        // SAFETY: functions of the loaded runtime, called with a device number and a
        // mapping of `len` bytes that this process owns.
        let locked = unsafe {
            (self.set_device)(self.device) == 0
                && (self.register)(ptr.as_ptr().cast(), len, HOST_REGISTER_PORTABLE) == 0
        };
        let count = if locked { &self.locked } else { &self.refused };
        count.fetch_add(1, Ordering::Relaxed);
        locked
    }

    fn unlock(&self, ptr: NonNull<u8>) {
        // SAFETY: a pointer `lock` registered, unregistered once, before it is unmapped.
        unsafe { (self.unregister)(ptr.as_ptr().cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_runtime_is_a_clear_error_naming_what_was_tried() {
        let err = CudaHostMemory::load_from(&[c"libnostall-no-such-cudart.so.1"], 0).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("libnostall-no-such-cudart.so.1")
                && message.contains("install PyTorch with CUDA support"),
            "{message}"
        );
    }
}
