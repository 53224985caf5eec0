//! Device set-up: the driver's presence and version, opening a context
//! (the backend's own, a caller's stream, or raw handles another library
//! hands over).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUdevice_attribute, CUevent, CUresult, CUstream};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use mpmd_core::lru::Lru;

use super::errors::{describe, describe_archs, driver, panic_text, CudaError};
use super::{CudaBackend, CudaOptions};
use super::{LOADED_KERNELS, NEXT_BACKEND_ID};
use crate::arena::HostBlock;

/// Whether the CUDA driver library can be loaded.
pub fn driver_present() -> bool {
    // Asked once per process: each probe is a dlopen and dlclose.
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: only tries to dlopen the candidate names.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// Milliseconds between two recorded events. cudarc's wrapper calls
/// `cuEventElapsedTime_v2`, which drivers before CUDA 12.8 lack (cudarc would
/// panic), so the symbol is looked up here with a fallback.
pub fn event_elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Option<f32> {
    type ElapsedFn = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult;
    start.synchronize().ok()?;
    end.synchronize().ok()?;
    // SAFETY: the driver library is loaded (events exist); both symbols have
    // this signature.
    unsafe {
        let lib = cudarc::driver::sys::culib();
        let elapsed = lib
            .get::<ElapsedFn>(b"cuEventElapsedTime_v2\0")
            .or_else(|_| lib.get::<ElapsedFn>(b"cuEventElapsedTime\0"))
            .ok()?;
        let mut ms = 0.0f32;
        (elapsed(&mut ms, start.cu_event(), end.cu_event()) == CUresult::CUDA_SUCCESS).then_some(ms)
    }
}

/// The CUDA version the driver supports, e.g. `(12, 4)`.
pub fn driver_version() -> Option<(i32, i32)> {
    if !driver_present() {
        return None;
    }
    let mut version = 0;
    // SAFETY: the library is present; cuDriverGetVersion needs no cuInit.
    let result = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    (result == CUresult::CUDA_SUCCESS).then_some((version / 1000, (version % 1000) / 10))
}

impl CudaBackend {
    /// Opens device `options.device`. Fails with a one-line reason when there
    /// is no driver, no device, or no NVRTC.
    pub fn new(options: CudaOptions) -> Result<Self, CudaError> {
        if !driver_present() {
            return Err(CudaError::DriverMissing);
        }
        match catch_unwind(AssertUnwindSafe(|| Self::open(options))) {
            Ok(result) => result,
            Err(payload) => Err(CudaError::Panicked {
                call: "context creation",
                detail: panic_text(payload),
            }),
        }
    }

    /// A backend on a stream the caller owns (cudarc's; its context is the
    /// stream's, `options.device` is not used): every launch, copy and
    /// allocation of the backend goes to `stream`, so work the caller
    /// issues on it before a run is seen by the run, and work after it sees
    /// the run's results. The context's settings (cudarc's event tracking
    /// among them) stay the caller's.
    pub fn on_stream(stream: Arc<CudaStream>, options: CudaOptions) -> Result<Self, CudaError> {
        if !driver_present() {
            return Err(CudaError::DriverMissing);
        }
        match catch_unwind(AssertUnwindSafe(|| Self::open_on(stream, options))) {
            Ok(result) => result,
            Err(payload) => Err(CudaError::Panicked {
                call: "backend creation",
                detail: panic_text(payload),
            }),
        }
    }

    /// A backend on a context and stream another library handed over as
    /// raw driver handles (a framework's current context and stream: XLA's,
    /// PyTorch's, CuPy's). The legacy default stream is a null `stream`.
    ///
    /// # Safety
    /// `context` is a live CUDA context and `stream` a stream of it (or
    /// null), both owned by the caller, who keeps them alive as long as the
    /// backend and everything prepared on it; the backend never destroys
    /// them.
    pub unsafe fn from_raw(
        context: CUcontext,
        stream: CUstream,
        options: CudaOptions,
    ) -> Result<Self, CudaError> {
        if !driver_present() {
            return Err(CudaError::DriverMissing);
        }
        let wrap = || -> Result<Arc<CudaStream>, CudaError> {
            // SAFETY: the caller vouches for the handles (this function's contract).
            let context = unsafe { borrowed_context(context) }?;
            // SAFETY: as above: `stream` belongs to `context` and outlives the backend.
            Ok(unsafe { context.wrap_borrowed_stream(stream) })
        };
        match catch_unwind(AssertUnwindSafe(|| Self::open_on(wrap()?, options))) {
            Ok(result) => result,
            Err(payload) => Err(CudaError::Panicked {
                call: "backend creation",
                detail: panic_text(payload),
            }),
        }
    }

    pub(super) fn open(options: CudaOptions) -> Result<Self, CudaError> {
        let count = CudaContext::device_count().map_err(|e| CudaError::NoDevice {
            ordinal: options.device,
            detail: describe(&e),
        })?;
        if options.device >= count.max(0) as usize {
            return Err(CudaError::NoDevice {
                ordinal: options.device,
                detail: format!("the driver sees {count} device(s)"),
            });
        }
        let context = CudaContext::new(options.device).map_err(|e| CudaError::NoDevice {
            ordinal: options.device,
            detail: describe(&e),
        })?;
        // SAFETY: cudarc's events order work across streams; this backend
        // issues everything on its one stream, and hands the context and the
        // stream out only through `unsafe fn`s whose contract keeps it so.
        unsafe { context.disable_event_tracking() };
        Self::open_on(context.default_stream(), options)
    }

    /// The backend on `stream` (its context is the stream's).
    pub(super) fn open_on(
        stream: Arc<CudaStream>,
        options: CudaOptions,
    ) -> Result<Self, CudaError> {
        let context = stream.context().clone();
        let (major, minor) = context
            .compute_capability()
            .map_err(driver("cuDeviceGetAttribute"))?;
        let attribute = |a| context.attribute(a).map_err(driver("cuDeviceGetAttribute"));
        let sm_count =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let smem_optin_limit =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as u32;
        let cooperative_launch =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0;
        let device_name = context.name().map_err(driver("cuDeviceGetName"))?;
        // Every run compiles with NVRTC for this device: check now rather
        // than fail at the first call with NVRTC's "invalid value for
        // --gpu-architecture".
        let (nvrtc_major, nvrtc_minor) = crate::nvrtc::nvrtc_version()?;
        let arch = (major * 10 + minor) as u32;
        let supported = crate::nvrtc::supported_archs()?;
        if !supported.contains(&arch) {
            return Err(CudaError::UnsupportedArch {
                device: device_name,
                arch,
                nvrtc_major,
                nvrtc_minor,
                supported: describe_archs(&supported),
            });
        }
        // Some platforms (WSL2 among them) refuse mapped page-locked memory:
        // then every output stays on the device (see `arena`).
        let host_mapping = options.host_mapped_outputs && HostBlock::new(&context, 1, true).is_ok();
        Ok(CudaBackend {
            id: NEXT_BACKEND_ID.fetch_add(1, Ordering::Relaxed),
            options,
            context,
            stream,
            arch,
            sm_count,
            smem_optin_limit,
            cooperative_launch,
            device_name,
            kernels: Lru::new(LOADED_KERNELS),
            prepared: Vec::new(),
            pending: Vec::new(),
            residents: BTreeMap::new(),
            last_kernel_ms: None,
            in_flight: false,
            host_mapping,
        })
    }
}

/// The context another library owns, as cudarc wraps it: the device's
/// primary context (what the CUDA runtime and the frameworks on it use) is
/// retained as cudarc retains its own, a balanced retain and release; any
/// other context is wrapped and, since cudarc destroys a non-primary
/// context when its last wrapper goes, one wrapper is never dropped.
///
/// # Safety
/// `context` is a live context.
pub(super) unsafe fn borrowed_context(context: CUcontext) -> Result<Arc<CudaContext>, CudaError> {
    use cudarc::driver::sys;
    let mut device: sys::CUdevice = 0;
    // SAFETY: `context` is live (the contract); it is current only between
    // the push and the pop.
    unsafe {
        sys::cuCtxPushCurrent_v2(context)
            .result()
            .map_err(driver("cuCtxPushCurrent"))?;
        let got = sys::cuCtxGetDevice(&mut device).result();
        let mut popped = std::ptr::null_mut();
        let _ = sys::cuCtxPopCurrent_v2(&mut popped);
        got.map_err(driver("cuCtxGetDevice"))?;
    }
    let count = CudaContext::device_count().map_err(driver("cuDeviceGetCount"))?;
    let ordinal = (0..count)
        .find(|&i| {
            let mut d: sys::CUdevice = 0;
            // SAFETY: plain query.
            unsafe { sys::cuDeviceGet(&mut d, i) }.result().is_ok() && d == device
        })
        .ok_or(CudaError::NoDevice {
            ordinal: 0,
            detail: format!("the context's device {device} is none of the driver's {count}"),
        })?;
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: plain query.
    unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) }
        .result()
        .map_err(driver("cuDevicePrimaryCtxGetState"))?;
    let mut is_primary = false;
    if active != 0 {
        let mut primary = std::ptr::null_mut();
        // SAFETY: retains the active primary context, released at once.
        unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut primary, device)
                .result()
                .map_err(driver("cuDevicePrimaryCtxRetain"))?;
            is_primary = primary == context;
            let _ = sys::cuDevicePrimaryCtxRelease_v2(device);
        }
    }
    if is_primary {
        return CudaContext::new(ordinal as usize).map_err(driver("cuDevicePrimaryCtxRetain"));
    }
    // SAFETY: `context` is live and belongs to `device` (asked above).
    let wrapped = unsafe { CudaContext::from_raw_context(ordinal as usize, device, context) }
        .map_err(driver("cuCtxSetCurrent"))?;
    std::mem::forget(wrapped.clone());
    Ok(wrapped)
}
