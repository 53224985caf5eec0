//! Running plans on a GPU: one CUBIN per (map, mode, device architecture),
//! one launch per call.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{
    CUcontext, CUdevice_attribute, CUevent, CUevent_flags, CUfunction_attribute_enum, CUresult,
    CUstream,
};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr,
    DriverError, LaunchConfig, PushKernelArg,
};
use mpmd_core::bind::{bind, DeviceArgs, DeviceMemory};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::ir::{Literal, MemorySpace, ScalarType, Type};
use mpmd_core::lru::Lru;
use mpmd_core::plan::{BufferId, BufferInit, LaunchPlan, OperandId};
use mpmd_core::{Backend, Mode, RunError, RunOptions};
use thiserror::Error;

use crate::arena::{
    buffer_words, packed_words, ArenaLayout, BufferPlacement, HostBlock, STATUS_WORD,
};
use crate::control;
use crate::emit::{emit_module_with, loaded_buffers, BlockSchedule, EmittedModule, KernelParam};
use crate::nvrtc::{compile_cubin, CompileError, CompileOptions, Cubin};

/// Why the backend could not start.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CudaError {
    #[error("no CUDA driver found (libcuda.so.1): this machine has no NVIDIA driver; run on a machine with an NVIDIA GPU and its driver")]
    DriverMissing,
    #[error("no CUDA device {ordinal}: {detail}")]
    NoDevice { ordinal: usize, detail: String },
    #[error("CUDA driver error in {call}: {detail}")]
    Driver { call: &'static str, detail: String },
    #[error("{0}")]
    Compile(#[from] CompileError),
    #[error("the CUDA driver library panicked in {call}: {detail}")]
    Panicked { call: &'static str, detail: String },
    #[error("{device} is sm_{arch}, but NVRTC {nvrtc_major}.{nvrtc_minor} compiles for {supported} only, so the CUDA backend cannot run on it; the WGSL backend can (`--backend wgpu`)")]
    UnsupportedArch {
        device: String,
        arch: u32,
        nvrtc_major: i32,
        nvrtc_minor: i32,
        supported: String,
    },
}

/// `sm_75 to sm_121`, or the list when it has gaps.
fn describe_archs(archs: &[u32]) -> String {
    match (archs.first(), archs.last()) {
        (Some(first), Some(last)) if archs.len() > 2 => format!("sm_{first} to sm_{last}"),
        _ => archs
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Backend settings.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Device ordinal.
    pub device: usize,
    /// Time limit of every semaphore wait (default 10 s; the CLI reads
    /// `$MPMD_CUDA_WAIT_TIMEOUT_MS`, the library no variable).
    pub wait_timeout: Duration,
    /// Time every kernel with a pair of events (`CudaBackend::last_kernel_ms`);
    /// off by default, since the events cost a few microseconds per call.
    pub time_kernels: bool,
    /// At most this many blocks for a resident walk (default: as many as
    /// fit on the device); tests use a small number to make every block
    /// walk several logical blocks.
    pub max_resident_blocks: Option<u32>,
    /// Put small outputs and the call's status word in host-mapped memory
    /// (default on; off, or where the platform refuses mapped memory, every
    /// output stays on the device and the control block is read back after
    /// every call).
    pub host_mapped_outputs: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            device: 0,
            wait_timeout: Duration::from_secs(10),
            time_kernels: false,
            max_resident_blocks: None,
            host_mapped_outputs: true,
        }
    }
}

/// One line describing a driver error.
pub fn describe(e: &DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{:?} ({})", e.0, s.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".to_string())
}

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

struct LoadedKernel {
    _module: Arc<CudaModule>,
    function: CudaFunction,
}

struct DeviceResident {
    elem: ScalarType,
    shape: Vec<u32>,
    /// Elements (the words hold them packed, at least one word).
    len: u64,
    words: CudaSlice<u32>,
    /// The device address of `words`, taken once.
    address: u64,
}

/// Device memory a caller binds to one operand of a run
/// ([`CudaBackend::enqueue`]): the device address of element 0 in the
/// backend's context, and the element type and count it holds, which must
/// be exactly the operand's. The memory holds the elements as mpmd lays
/// them out (little-endian, 2 bytes an `f16`/`bf16`, 4 bytes any other
/// type, a `bool` as a 32-bit 0 or 1; `len` times that many bytes, no
/// padding) and starts on a multiple of the element's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaBuffer {
    /// A `CUdeviceptr`.
    pub ptr: u64,
    pub elem: ScalarType,
    /// Elements, not bytes.
    pub len: u64,
}

impl CudaBuffer {
    pub fn new(ptr: u64, elem: ScalarType, len: u64) -> Self {
        CudaBuffer { ptr, elem, len }
    }

    /// The bytes the elements take.
    pub fn bytes(&self) -> u64 {
        self.len.saturating_mul(u64::from(self.elem.byte_size()))
    }
}

impl DeviceMemory for CudaBuffer {
    fn elem(&self) -> ScalarType {
        self.elem
    }
    fn element_count(&self) -> u64 {
        self.len
    }
    fn same_memory(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}

/// A map prepared on one backend ([`CudaBackend::prepare`]): the plan
/// emitted, compiled for the device and loaded, the launch checks that do
/// not depend on the arguments made, and the device memory its runs need
/// besides the caller's (scratch, semaphores, the control block and the
/// status word). Run it any number of times with [`CudaBackend::enqueue`];
/// scalars change per run without recompiling. Dropping it frees that
/// memory (after the next synchronisation when a run of it is pending).
///
/// ```no_run
/// use cudarc::driver::{CudaContext, DevicePtr};
/// use mpmd_core::ir::{Literal, ScalarType};
/// use mpmd_core::{plan::lower, text::parse, validate::validate, Mode};
/// use mpmd_cuda::{CudaBackend, CudaBuffer, CudaOptions, DeviceArgs};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The caller's context, stream and memory (cudarc's here; raw handles
/// // from another library go through `CudaBackend::from_raw`).
/// let stream = CudaContext::new(0)?.new_stream()?;
/// let x = stream.clone_htod(&[1.0f32; 256])?;
/// let y = stream.alloc_zeros::<f32>(256)?;
/// let (x_ptr, y_ptr) = (x.device_ptr(&stream).0, y.device_ptr(&stream).0);
///
/// let (module, _) = parse(include_str!("../../examples/elementwise.mpmd")).map_err(|e| format!("{e:?}"))?;
/// let module = validate(&module, &Default::default()).map_err(|d| format!("{d:?}"))?;
/// let plan = lower(&module, "axpb")?; // y = x * alpha + 1 over 256 f32
/// let mut backend = CudaBackend::on_stream(stream.clone(), CudaOptions::default())?;
/// let prepared = backend.prepare(&plan, Mode::Fast)?; // compiled and loaded once
///
/// for alpha in [2.0, 3.0] {
///     let args = DeviceArgs::default()
///         .buffer("x", CudaBuffer::new(x_ptr, ScalarType::F32, 256))
///         .buffer("y", CudaBuffer::new(y_ptr, ScalarType::F32, 256))
///         .scalar("alpha", Literal::f32(alpha));
///     // SAFETY: x and y are this context's, hold 256 f32 each and outlive the runs.
///     unsafe { backend.enqueue(&prepared, &args)? }; // on `stream`, not waited for
/// }
/// backend.synchronize()?; // waits, and reports an error a kernel recorded
/// assert_eq!(stream.clone_dtoh(&y)?[0], 4.0);
/// # Ok(())
/// # }
/// ```
pub struct CudaPrepared {
    prepared: Arc<PreparedPlan>,
    /// The backend it belongs to (its residents, its stream).
    backend: u64,
}

impl CudaPrepared {
    /// The plan this map runs.
    pub fn plan(&self) -> &LaunchPlan {
        &self.prepared.plan
    }

    pub fn mode(&self) -> Mode {
        self.prepared.mode
    }

    /// The generated CUDA C and launch shape.
    pub fn module(&self) -> &EmittedModule {
        &self.prepared.module
    }
}

/// A plan ready to launch again: the generated kernel, loaded, with the
/// checks that do not change between calls already done.
struct PreparedPlan {
    plan: LaunchPlan,
    mode: Mode,
    module: EmittedModule,
    function: CudaFunction,
    cooperative: bool,
    /// Physical blocks launched (fewer than the logical blocks for a resident walk).
    grid_blocks: u32,
    layout: ArenaLayout,
    /// Dropped when the plan falls out of the most recently used few
    /// (host-copy path); always there for a [`CudaPrepared`].
    memory: Option<CallMemory>,
    /// The scalar arguments of the latest host-copy call, by operand index
    /// (what [`CudaBackend::time_relaunch`] launches with).
    scalars: HashMap<OperandId, ScalarArg>,
}

/// A prepared plan's memory, kept between its calls (see `arena`). The
/// control block starts clear and stays so until a launch records an
/// error, which stays there (later launches see the abort flag) until the
/// host reads it and clears it; a launch clears only the ticket counter.
struct CallMemory {
    arena: CudaSlice<u32>,
    /// The device address of the arena's word 0, taken once.
    arena_base: u64,
    /// `None` where the platform cannot map page-locked memory (WSL2 often
    /// cannot): then no output is mapped and the control block is read back
    /// after every call.
    mapped: Option<HostBlock>,
    /// Page-locked landing place of the arena's outputs, when they are not
    /// too large (a pageable copy costs a few microseconds more).
    staging: Option<HostBlock>,
}

/// Read-backs up to this many words go through page-locked memory.
const STAGING_MAX_WORDS: usize = 1 << 20;

/// Prepared plans the host-copy path keeps, the least recently used going
/// first (a prepared plan is a loaded kernel and its launch checks).
pub const PREPARED_PLANS: usize = 64;
/// Of those, the most recently used that keep their device memory between
/// calls; the others free it and allocate again at their next call.
pub const PLANS_WITH_ARENA: usize = 4;
/// Loaded kernels (CUDA modules) a backend keeps, the least recently used
/// going first; a prepared map keeps its own kernel loaded whatever the
/// cache does.
pub const LOADED_KERNELS: usize = 64;

/// Numbers backends, so that a prepared map is run only on its own.
static NEXT_BACKEND_ID: AtomicU64 = AtomicU64::new(1);

/// The CUDA backend: a context on one device, loaded kernels, and the
/// device-resident refs, which live as long as this value.
pub struct CudaBackend {
    id: u64,
    options: CudaOptions,
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: u32,
    sm_count: u32,
    smem_optin_limit: u32,
    cooperative_launch: bool,
    device_name: String,
    kernels: Lru<String, LoadedKernel>,
    /// The host-copy path's prepared plans, most recently used first.
    prepared: Vec<PreparedPlan>,
    /// Maps run on caller memory since the last synchronisation, whose
    /// control blocks it reads.
    pending: Vec<Arc<PreparedPlan>>,
    residents: BTreeMap<String, DeviceResident>,
    last_kernel_ms: Option<f32>,
    /// A kernel was launched and its call has not synchronised yet.
    in_flight: bool,
    /// Small outputs and the status word live in host-mapped memory.
    host_mapping: bool,
}

fn driver(call: &'static str) -> impl Fn(DriverError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        detail: describe(&e),
    }
}

fn run_err(what: &str) -> impl Fn(DriverError) -> RunError + '_ {
    move |e| RunError::Backend(format!("CUDA {what}: {}", describe(&e)))
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

    fn open(options: CudaOptions) -> Result<Self, CudaError> {
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
    fn open_on(stream: Arc<CudaStream>, options: CudaOptions) -> Result<Self, CudaError> {
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

    /// Whether small outputs go to host-mapped memory on this device.
    pub fn host_mapping(&self) -> bool {
        self.host_mapping
    }

    /// `sm_XY` of the device, as the number `XY`.
    pub fn arch(&self) -> u32 {
        self.arch
    }

    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The backend's one stream.
    ///
    /// # Safety
    /// The context's cross-stream event tracking is off (see
    /// [`CudaBackend::context`]): memory allocated or used through this
    /// stream must not be used on any other stream, and kernels launched on
    /// it must not touch the backend's memory (its arena, host-mapped block
    /// and residents) while a call may be running.
    pub unsafe fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The backend's CUDA context.
    ///
    /// # Safety
    /// Event tracking is off in this context (`disable_event_tracking`: the
    /// backend uses one stream, and the per-allocation events cost time), so
    /// cudarc no longer orders work on different streams for its safe API.
    /// The caller uses only [`CudaBackend::stream`] with what it creates
    /// from this context, or synchronises streams itself.
    pub unsafe fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The device's ordinal (CUDA's numbering).
    pub fn ordinal(&self) -> usize {
        self.context.ordinal()
    }

    /// `words` zeroed words of device memory on the backend's stream, for a
    /// caller's buffer (outputs the caller keeps on the device).
    pub fn alloc_zeroed(&self, words: usize) -> Result<CudaSlice<u32>, RunError> {
        self.stream
            .alloc_zeros::<u32>(words)
            .map_err(run_err("allocation"))
    }

    /// `words` copied to new device memory on the backend's stream.
    pub fn upload_words(&self, words: &[u32]) -> Result<CudaSlice<u32>, RunError> {
        self.stream.clone_htod(words).map_err(run_err("upload"))
    }

    /// The words of device memory the backend allocated, once the stream
    /// has reached this point.
    pub fn download_words(&self, memory: &CudaSlice<u32>) -> Result<Vec<u32>, RunError> {
        download(&self.stream, memory, "download")
    }

    /// The device address of memory the backend allocated.
    pub fn address_of(&self, memory: &CudaSlice<u32>) -> u64 {
        device_address(&self.stream, memory)
    }

    /// Whether calls time their kernel with events (`last_kernel_ms`).
    pub fn set_time_kernels(&mut self, on: bool) {
        self.options.time_kernels = on;
    }

    /// Kernel time of the last successful call, from events around the
    /// launch; `None` unless `CudaOptions::time_kernels` is on.
    pub fn last_kernel_ms(&self) -> Option<f32> {
        self.last_kernel_ms
    }

    /// The CUBIN a plan runs as on this device.
    pub fn cubin_for(
        &self,
        module: &EmittedModule,
        fast_math: bool,
    ) -> Result<Cubin, CompileError> {
        compile_cubin(
            &module.source,
            &CompileOptions {
                arch: self.arch,
                fast_math,
                ..CompileOptions::default()
            },
        )
    }

    fn load_kernel(
        &mut self,
        module: &EmittedModule,
        fast_math: bool,
    ) -> Result<CudaFunction, RunError> {
        let key = format!("{fast_math}\n{}", module.source);
        if let Some(loaded) = self.kernels.get(key.as_str()) {
            return Ok(loaded.function.clone());
        }
        let cubin = self
            .cubin_for(module, fast_math)
            .map_err(|e| RunError::Backend(e.to_string()))?;
        let loaded = self
            .context
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.bytes))
            .map_err(|e| {
                // The usual cause: a CUBIN from a newer NVRTC than the driver supports.
                let driver = driver_version()
                    .map(|(a, b)| format!("{a}.{b}"))
                    .unwrap_or_else(|| "?".into());
                let nvrtc = crate::nvrtc::nvrtc_version()
                    .map(|(a, b)| format!("{a}.{b}"))
                    .unwrap_or_else(|_| "?".into());
                RunError::Backend(format!(
                    "CUDA module load (cuModuleLoadData) for sm_{}: {} (driver supports CUDA {driver}, NVRTC is {nvrtc}; NVRTC must not be newer than the driver)",
                    self.arch,
                    describe(&e)
                ))
            })?;
        let function = loaded
            .load_function(&module.kernel_name)
            .map_err(run_err("cuModuleGetFunction"))?;
        // An evicted module stays loaded while a prepared plan's function
        // holds it (cudarc's functions keep their module).
        self.kernels.insert(
            key,
            LoadedKernel {
                _module: loaded,
                function: function.clone(),
            },
        );
        Ok(function)
    }

    /// Loaded kernels the backend keeps now (at most [`LOADED_KERNELS`]).
    pub fn loaded_kernels(&self) -> usize {
        self.kernels.len()
    }

    /// Emits, compiles and loads `plan`, and makes the launch checks that
    /// do not depend on the call's arguments; `caller_memory`: laid out for
    /// runs on caller memory (only the backend's own buffers in the arena).
    fn prepare_plan(
        &mut self,
        plan: &LaunchPlan,
        mode: Mode,
        caller_memory: bool,
    ) -> Result<PreparedPlan, RunError> {
        let layout = |backend: &Self| {
            if caller_memory {
                ArenaLayout::for_caller_memory(plan, backend.host_mapping)
            } else {
                ArenaLayout::new(plan, &loaded_buffers(plan), backend.host_mapping)
            }
        };
        let schedule = BlockSchedule::for_plan(plan, self.cooperative_launch);
        let (module, function) = self.compile_and_load(plan, mode, schedule)?;
        if schedule == BlockSchedule::ResidentWalk {
            let per_sm = self.blocks_per_sm(&module, &function)?;
            if per_sm > 0 {
                let resident = (per_sm as u64 * self.sm_count as u64)
                    .min(self.options.max_resident_blocks.map_or(u64::MAX, u64::from))
                    .max(1);
                let grid_blocks = module.total_blocks.min(resident) as u32;
                let layout = layout(self);
                return Ok(prepared_plan(
                    plan,
                    mode,
                    module,
                    function,
                    true,
                    grid_blocks,
                    layout,
                ));
            }
            // Not even one block fits: take tickets instead, which then fail
            // with the launch's own error.
            let (module, function) = self.compile_and_load(plan, mode, BlockSchedule::Tickets)?;
            let grid = module.total_blocks as u32;
            let layout = layout(self);
            return Ok(prepared_plan(
                plan, mode, module, function, false, grid, layout,
            ));
        }
        let cooperative = plan.needs_co_residency();
        if cooperative {
            if !self.cooperative_launch {
                return Err(RunError::Refused {
                    reason: "the map needs all its blocks resident at once (a semaphore cycle or a program that waits on itself), and this GPU has no cooperative launch".into(),
                });
            }
            let per_sm = self.blocks_per_sm(&module, &function)?;
            let sm_count = self.sm_count;
            let resident = per_sm as u64 * sm_count as u64;
            if module.total_blocks > resident {
                return Err(RunError::Refused {
                    reason: format!(
                        "the map needs all {} blocks resident at once (a semaphore cycle or a program that waits on itself), but only {resident} fit on this GPU ({per_sm} per SM x {sm_count} SMs at {} threads and {} bytes of shared memory per block)",
                        module.total_blocks, module.block_dim, module.dynamic_smem_bytes
                    ),
                });
            }
        }
        let grid = module.total_blocks as u32;
        let layout = layout(self);
        Ok(prepared_plan(
            plan,
            mode,
            module,
            function,
            cooperative,
            grid,
            layout,
        ))
    }

    /// Emits `plan` with `schedule`, compiles and loads it.
    fn compile_and_load(
        &mut self,
        plan: &LaunchPlan,
        mode: Mode,
        schedule: BlockSchedule,
    ) -> Result<(EmittedModule, CudaFunction), RunError> {
        let module = emit_module_with(plan, mode, schedule).map_err(|e| RunError::Unsupported {
            reason: e.to_string(),
        })?;
        // Shared memory beyond the default 48 KiB needs an opt-in, up to the device's limit.
        let smem = module.dynamic_smem_bytes;
        let smem_limit = self.smem_optin_limit;
        if smem > smem_limit.saturating_sub(64) {
            return Err(RunError::Refused {
                reason: format!(
                    "a block needs {smem} bytes of shared memory; this GPU allows {smem_limit} per block"
                ),
            });
        }
        let function = self.load_kernel(&module, plan.map.fast_math)?;
        if smem > 48 * 1024 {
            function
                .set_attribute(
                    CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
                .map_err(run_err("cuFuncSetAttribute"))?;
        }
        Ok((module, function))
    }

    /// Blocks of the kernel that fit on one multiprocessor at once.
    fn blocks_per_sm(
        &self,
        module: &EmittedModule,
        function: &CudaFunction,
    ) -> Result<u32, RunError> {
        function
            .occupancy_max_active_blocks_per_multiprocessor(
                module.block_dim,
                module.dynamic_smem_bytes as usize,
                None,
            )
            .map_err(run_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    }

    /// The prepared form of `plan`, moved to the front of the cache.
    fn prepared(&mut self, plan: &LaunchPlan, mode: Mode) -> Result<(), RunError> {
        let found = self
            .prepared
            .iter()
            .position(|p| p.mode == mode && p.plan == *plan);
        match found {
            Some(index) => self.prepared[..=index].rotate_right(1),
            None => {
                let prepared = self.prepare_plan(plan, mode, false)?;
                self.prepared.insert(0, prepared);
                self.prepared.truncate(PREPARED_PLANS);
            }
        }
        for stale in self.prepared.iter_mut().skip(PLANS_WITH_ARENA) {
            stale.memory = None;
        }
        Ok(())
    }

    /// Allocates the device-resident refs the plan binds that do not exist
    /// yet, and checks those that do; `given[i]`: plan buffer `i` is bound
    /// to caller memory in this run (its resident is neither made nor used).
    fn bind_residents(
        &mut self,
        plan: &LaunchPlan,
        given: &[Option<&CudaBuffer>],
    ) -> Result<(), RunError> {
        for (index, buffer) in plan.enumerate_buffers() {
            let BufferInit::Resident(name) = &buffer.init else {
                continue;
            };
            if given.get(index.index()).is_some_and(Option::is_some) {
                continue;
            }
            if let Some(existing) = self.residents.get(name) {
                mpmd_core::host::check_resident(
                    name,
                    &plan.map.name,
                    (existing.elem, existing.len),
                    (buffer.ty.elem, buffer.len),
                )?;
            } else {
                let words = self
                    .stream
                    .alloc_zeros::<u32>(buffer_words(buffer))
                    .map_err(run_err("allocation"))?;
                let address = device_address(&self.stream, &words);
                self.residents.insert(
                    name.clone(),
                    DeviceResident {
                        elem: buffer.ty.elem,
                        shape: plan.host_shape(buffer),
                        len: buffer.len,
                        words,
                        address,
                    },
                );
            }
        }
        Ok(())
    }

    /// The wait time limit as the kernel takes it.
    fn timeout_ns(&self) -> u64 {
        self.options.wait_timeout.as_nanos().min(u64::MAX as u128) as u64
    }

    /// Waits for a kernel that a failed call left running: the host writes
    /// the mapped block directly, outside the stream's order.
    fn settle(&mut self) -> Result<(), RunError> {
        if self.in_flight {
            self.stream
                .synchronize()
                .map_err(run_err("an earlier call's kernel"))?;
            self.in_flight = false;
        }
        Ok(())
    }

    /// Prepares `plan` to run in `mode` on caller memory: emits, compiles
    /// (through the module cache) and loads it, makes the launch checks that
    /// do not depend on the arguments (co-residency, shared memory), and
    /// allocates the memory its runs need besides the caller's (scratch,
    /// semaphores, the control block). Run it with [`CudaBackend::enqueue`].
    pub fn prepare(&mut self, plan: &LaunchPlan, mode: Mode) -> Result<CudaPrepared, RunError> {
        self.guarded(|backend| {
            let mut prepared = backend.prepare_plan(plan, mode, true)?;
            prepared.memory = Some(CallMemory::new(
                &backend.stream,
                &prepared.layout,
                backend.host_mapping,
            )?);
            Ok(CudaPrepared {
                prepared: Arc::new(prepared),
                backend: backend.id,
            })
        })
    }

    /// Runs `prepared` once on caller memory: `args` binds device memory to
    /// every input and output of the map (and may bind some to a
    /// device-resident operand, otherwise the backend's resident is used)
    /// and gives every scalar. Each buffer is checked against its operand
    /// (element type, element count, alignment; a mismatch is
    /// [`RunError::BadArguments`] and nothing is enqueued). The launch (and
    /// the clearing of buffers that start at zero) is enqueued on the
    /// backend's stream and not waited for. An error the kernel records (a
    /// wait that timed out, an out-of-bounds access in checked mode) is
    /// reported by the next [`CudaBackend::synchronize`] (or
    /// [`CudaBackend::poll_errors`] once the kernel has finished); until
    /// then later runs of the same map stop early.
    ///
    /// # Safety
    /// Every buffer is device memory of the backend's context holding at
    /// least its `len` elements, which the kernel reads and writes (inputs
    /// too: an aliased input is written) when the stream reaches the launch;
    /// nothing else writes an output or reads it before the stream passes
    /// the launch, and the memory stays allocated until then.
    pub unsafe fn enqueue(
        &mut self,
        prepared: &CudaPrepared,
        args: &DeviceArgs<CudaBuffer>,
    ) -> Result<(), RunError> {
        if prepared.backend != self.id {
            return Err(RunError::BadArguments(format!(
                "map `{}` was prepared on another CUDA backend than this one",
                prepared.plan().map.name
            )));
        }
        let shared = prepared.prepared.clone();
        self.guarded(|backend| {
            let plan = &shared.plan;
            let given = bind(plan, &args.buffers)?;
            for (buffer, given) in plan.buffers.iter().zip(&given) {
                if let Some(given) = given {
                    check_alignment(plan, &buffer.operands, given)?;
                }
            }
            let scalars = scalar_args(plan, &args.scalars)?;
            backend.bind_residents(plan, &given)?;
            let memory = shared.memory.as_ref().ok_or_else(|| {
                RunError::Backend("internal: a prepared map without memory".into())
            })?;
            let caller: Vec<Option<u64>> = given.iter().map(|g| g.map(|b| b.ptr)).collect();
            let addresses = buffer_addresses(&shared, memory, &backend.residents, &caller)?;
            let stream = backend.stream.cu_stream();
            for (index, buffer) in plan.enumerate_buffers() {
                if buffer.init != BufferInit::Zeroed {
                    continue;
                }
                // SAFETY: the address is the caller's buffer of at least this
                // many bytes (this function's contract) or the arena's range.
                unsafe {
                    match given[index.index()] {
                        Some(caller) if caller.bytes() == 0 => Ok(()),
                        Some(caller) => cudarc::driver::sys::cuMemsetD8Async(
                            caller.ptr,
                            0,
                            caller.bytes() as usize,
                            stream,
                        )
                        .result(),
                        None => cudarc::driver::sys::cuMemsetD32Async(
                            addresses[index.index()],
                            0,
                            buffer_words(buffer),
                            stream,
                        )
                        .result(),
                    }
                }
                .map_err(run_err("memset"))?;
            }
            memory.clear_ticket(&backend.stream, &shared)?;
            let timeout_ns = backend.timeout_ns();
            launch(
                &backend.stream,
                &shared,
                &addresses,
                memory.control_address(&shared.layout),
                &scalars,
                timeout_ns,
                false,
            )?;
            if !backend.pending.iter().any(|p| Arc::ptr_eq(p, &shared)) {
                backend.pending.push(shared.clone());
            }
            Ok(())
        })
    }

    /// Waits until the stream has finished everything enqueued on it, then
    /// reports the first error a kernel recorded in a run enqueued since
    /// the last synchronisation (in the order they were enqueued), or a
    /// fault of the stream. A map whose run recorded an error starts clean
    /// at its next run.
    pub fn synchronize(&mut self) -> Result<(), RunError> {
        self.guarded(|backend| {
            backend
                .stream
                .synchronize()
                .map_err(run_err("kernel execution"))?;
            backend
                .context
                .check_err()
                .map_err(run_err("kernel execution"))?;
            backend.in_flight = false;
            let pending = std::mem::take(&mut backend.pending);
            let mut first = None;
            for prepared in &pending {
                if let Some(error) = prepared.take_recorded_error(&backend.stream)? {
                    first.get_or_insert(error);
                }
            }
            first.map_or(Ok(()), Err)
        })
    }

    /// Reports an error recorded by a finished run enqueued since the last
    /// synchronisation, without waiting for the stream unless one is there:
    /// the status word lives in host-mapped memory, so reading it costs
    /// nothing (where the platform cannot map memory, nothing is known
    /// before [`CudaBackend::synchronize`], and this reports nothing).
    pub fn poll_errors(&mut self) -> Result<(), RunError> {
        let flagged = self.pending.iter().any(|prepared| {
            prepared.memory.as_ref().is_some_and(|memory| {
                // SAFETY: the kernel writes the word whole; a stale zero only
                // delays the report to a later poll or synchronisation.
                memory
                    .mapped
                    .as_ref()
                    .is_some_and(|mapped| unsafe { mapped.read_word(STATUS_WORD) } != 0)
            })
        });
        if flagged {
            self.synchronize()
        } else {
            Ok(())
        }
    }

    /// Runs `work`, turning a panic of the CUDA library (cudarc panics on
    /// a symbol the driver lacks) into an error.
    fn guarded<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, RunError>,
    ) -> Result<T, RunError> {
        match catch_unwind(AssertUnwindSafe(|| work(self))) {
            Ok(result) => result,
            Err(payload) => Err(RunError::Backend(format!(
                "the CUDA library panicked: {}",
                panic_text(payload)
            ))),
        }
    }

    fn run_inner(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        let scalars = scalar_args(plan, &args.scalars)?;
        let inputs = input_words(plan, args)?;
        if !self.pending.is_empty() {
            self.synchronize()?;
        }
        self.prepared(plan, options.mode)?;
        self.bind_residents(plan, &[])?;
        self.settle()?;
        let stream = self.stream.clone();
        let time_kernels = self.options.time_kernels;
        let timeout_ns = self.timeout_ns();
        let host_mapping = self.host_mapping;
        let prepared = &mut self.prepared[0];
        if prepared.memory.is_none() {
            prepared.memory = Some(CallMemory::new(&stream, &prepared.layout, host_mapping)?);
        }
        let layout = &prepared.layout;
        let memory = prepared.memory.as_mut().expect("allocated above");

        // Inputs uploaded, zeroed buffers cleared; everything else keeps
        // whatever it holds.
        for (index, buffer) in plan.enumerate_buffers() {
            match (layout.place(index), &buffer.init) {
                (Some(BufferPlacement::Device(range)), BufferInit::Input(_)) => stream
                    .memcpy_htod(
                        inputs[&index].as_slice(),
                        &mut memory.arena.slice_mut(range.clone()),
                    )
                    .map_err(run_err("upload"))?,
                (Some(BufferPlacement::Device(range)), BufferInit::Zeroed) => stream
                    .memset_zeros(&mut memory.arena.slice_mut(range.clone()))
                    .map_err(run_err("memset"))?,
                (Some(BufferPlacement::Mapped(range)), BufferInit::Zeroed) => {
                    let mapped = memory.mapped.as_mut().ok_or_else(|| unplaced(index))?;
                    // SAFETY: no kernel is in flight (settled above).
                    unsafe { mapped.words_mut(range.clone()) }.fill(0)
                }
                _ => {}
            }
        }
        prepared.scalars = scalars;
        let prepared = &self.prepared[0];
        let memory = prepared.memory.as_ref().expect("allocated above");
        // The launch must see the host's writes to the mapped block.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        memory.clear_ticket(&stream, prepared)?;
        let addresses = buffer_addresses(prepared, memory, &self.residents, &[])?;
        self.in_flight = true;
        let events = launch(
            &stream,
            prepared,
            &addresses,
            memory.control_address(&prepared.layout),
            &prepared.scalars,
            timeout_ns,
            time_kernels,
        )?;

        // One copy brings back the arena's outputs (none when all are mapped).
        let what = "kernel execution or read-back";
        {
            let prepared = &mut self.prepared[0];
            let layout = &prepared.layout;
            let memory = prepared.memory.as_mut().expect("allocated above");
            if let Some(staging) = memory.staging.as_mut() {
                // SAFETY: the staging block holds `readback` words and is only
                // read after the synchronisation below.
                unsafe {
                    let (source, _) = memory.arena.slice(0..layout.readback).device_ptr(&stream);
                    cudarc::driver::result::memcpy_dtoh_async(
                        staging.words_mut(0..layout.readback),
                        source,
                        stream.cu_stream(),
                    )
                }
                .map_err(run_err(what))?;
            }
        }
        let prepared = &self.prepared[0];
        let layout = &prepared.layout;
        let memory = prepared.memory.as_ref().expect("allocated above");
        let pageable;
        let arena_outputs: &[u32] = match &memory.staging {
            Some(staging) => {
                stream.synchronize().map_err(run_err(what))?;
                // SAFETY: synchronised; each output is copied out of it below.
                unsafe { staging.words(0..layout.readback) }
            }
            None if layout.readback > 0 => {
                pageable = download(&stream, &memory.arena.slice(0..layout.readback), what)?;
                &pageable
            }
            None => {
                stream.synchronize().map_err(run_err(what))?;
                &[]
            }
        };
        stream.context().check_err().map_err(run_err(what))?;
        self.in_flight = false;
        self.last_kernel_ms = events.and_then(|(start, end)| event_elapsed_ms(&start, &end));
        if let Some(error) = prepared.take_recorded_error(&stream)? {
            return Err(error);
        }
        let mut outputs = BTreeMap::new();
        for (index, buffer) in plan.enumerate_buffers() {
            let Some(name) = &buffer.output else { continue };
            // The packed words of the elements (none for an empty buffer).
            let len = packed_words(buffer.ty.elem, buffer.len);
            let words = match (&buffer.init, layout.place(index)) {
                (BufferInit::Resident(resident), _) => {
                    let mut words = download(&stream, &self.residents[resident].words, "download")?;
                    words.truncate(len);
                    words
                }
                (_, Some(BufferPlacement::Device(range))) => {
                    arena_outputs[range.start..range.start + len].to_vec()
                }
                (_, Some(BufferPlacement::Mapped(range))) => {
                    let mapped = memory.mapped.as_ref().ok_or_else(|| unplaced(index))?;
                    // SAFETY: synchronised above.
                    unsafe { mapped.words(range.start..range.start + len) }.to_vec()
                }
                (_, None) => return Err(unplaced(index)),
            };
            let tensor = HostTensor::from_words(buffer.ty.elem, plan.host_shape(buffer), words)
                .map_err(|e| RunError::Backend(format!("output `{name}`: {e}")))?;
            outputs.insert(name.clone(), tensor);
        }
        Ok(CallOutputs { outputs })
    }
}

impl CudaBackend {
    /// For benchmarks: launches the latest call's kernel `reps` more times,
    /// back to back on the memory as that call left it (no uploads, no
    /// read-back; the ticket counter and the zeroed atomic buffers, which
    /// hold semaphores and counters, are cleared before each launch), and
    /// returns the best kernel time in ms. This is the kernel's speed when
    /// its data is already on the device, measured the way a raw launch or
    /// `cuMemcpyDtoD` is. The outputs are not read; an error a launch
    /// records (a timed-out wait) is returned.
    pub fn time_relaunch(&mut self, reps: usize) -> Result<f64, RunError> {
        self.settle()?;
        let timeout_ns = self.timeout_ns();
        let stream = self.stream.clone();
        let Some(prepared) = self.prepared.first_mut().filter(|p| p.memory.is_some()) else {
            return Err(RunError::Backend(
                "time_relaunch: no call to launch again".into(),
            ));
        };
        let cleared: Vec<std::ops::Range<usize>> = prepared
            .plan
            .enumerate_buffers()
            .filter(|(_, buffer)| buffer.atomic && buffer.init == BufferInit::Zeroed)
            .filter_map(|(index, _)| prepared.layout.device_range(index))
            .collect();
        let prepared = &*prepared;
        let memory = prepared.memory.as_ref().expect("checked above");
        let addresses = buffer_addresses(prepared, memory, &self.residents, &[])?;
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            for range in &cleared {
                // SAFETY: the range lies inside the arena.
                unsafe {
                    cudarc::driver::sys::cuMemsetD32Async(
                        memory.arena_base + range.start as u64 * 4,
                        0,
                        range.len(),
                        stream.cu_stream(),
                    )
                }
                .result()
                .map_err(run_err("memset"))?;
            }
            memory.clear_ticket(&stream, prepared)?;
            self.in_flight = true;
            let events = launch(
                &stream,
                prepared,
                &addresses,
                memory.control_address(&prepared.layout),
                &prepared.scalars,
                timeout_ns,
                true,
            )?;
            stream.synchronize().map_err(run_err("kernel execution"))?;
            self.in_flight = false;
            if let Some(error) = prepared.take_recorded_error(&stream)? {
                return Err(error);
            }
            let ms = events
                .and_then(|(start, end)| event_elapsed_ms(&start, &end))
                .ok_or_else(|| RunError::Backend("time_relaunch: no kernel time".into()))?;
            best = best.min(ms as f64);
        }
        Ok(best)
    }
}

#[allow(clippy::too_many_arguments)]
fn prepared_plan(
    plan: &LaunchPlan,
    mode: Mode,
    module: EmittedModule,
    function: CudaFunction,
    cooperative: bool,
    grid_blocks: u32,
    layout: ArenaLayout,
) -> PreparedPlan {
    PreparedPlan {
        plan: plan.clone(),
        mode,
        layout,
        module,
        function,
        cooperative,
        grid_blocks,
        memory: None,
        scalars: HashMap::new(),
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
unsafe fn borrowed_context(context: CUcontext) -> Result<Arc<CudaContext>, CudaError> {
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

/// A caller's buffer starts on a multiple of its element's size (the
/// kernel's accesses are aligned).
fn check_alignment(
    plan: &LaunchPlan,
    names: &[String],
    given: &CudaBuffer,
) -> Result<(), RunError> {
    let size = u64::from(given.elem.byte_size());
    if !given.ptr.is_multiple_of(size) {
        return Err(RunError::BadArguments(format!(
            "`{}` of map `{}` needs {size}-byte aligned memory; the buffer given starts at {:#x}",
            names.join("`/`"),
            plan.map.name,
            given.ptr
        )));
    }
    Ok(())
}

/// The device address of `slice`'s first element.
fn device_address(stream: &Arc<CudaStream>, slice: &CudaSlice<u32>) -> u64 {
    let (address, _record) = slice.device_ptr(stream);
    address
}

fn unplaced(buffer: BufferId) -> RunError {
    RunError::Backend(format!("internal: plan buffer {buffer} has no memory"))
}

/// The device address each plan buffer has in a launch: the caller's
/// (`caller`, per plan buffer; empty for none), a resident's, or its place
/// in the prepared plan's arena or mapped block.
fn buffer_addresses(
    prepared: &PreparedPlan,
    memory: &CallMemory,
    residents: &BTreeMap<String, DeviceResident>,
    caller: &[Option<u64>],
) -> Result<Vec<u64>, RunError> {
    let plan = &prepared.plan;
    plan.buffer_ids()
        .map(|index| {
            if let Some(Some(address)) = caller.get(index.index()) {
                return Ok(*address);
            }
            match (&plan.buffer(index).init, prepared.layout.place(index)) {
                (BufferInit::Resident(name), _) => residents
                    .get(name)
                    .map(|r| r.address)
                    .ok_or_else(|| unplaced(index)),
                (_, Some(BufferPlacement::Device(range))) => {
                    Ok(memory.arena_base + range.start as u64 * 4)
                }
                (_, Some(BufferPlacement::Mapped(range))) => memory
                    .mapped
                    .as_ref()
                    .map(|mapped| mapped.device_address(range.start))
                    .ok_or_else(|| unplaced(index)),
                (_, None) => Err(unplaced(index)),
            }
        })
        .collect()
}

impl PreparedPlan {
    /// After the stream passed its launches: the error a kernel recorded,
    /// if any, after which the control block is clear again.
    fn take_recorded_error(&self, stream: &Arc<CudaStream>) -> Result<Option<RunError>, RunError> {
        let Some(memory) = self.memory.as_ref() else {
            return Ok(None);
        };
        let recorded = memory.recorded_error(stream, &self.layout, &self.module, &self.plan)?;
        if recorded.is_some() {
            memory.reset_control(stream, &self.layout)?;
        }
        Ok(recorded)
    }
}

impl CallMemory {
    fn new(
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
        host_mapping: bool,
    ) -> Result<Self, RunError> {
        // SAFETY: every word a kernel may read before writing is set before
        // each launch (inputs uploaded, zeroed buffers cleared) or here (the
        // control block).
        let arena =
            unsafe { stream.alloc::<u32>(layout.device_words) }.map_err(run_err("allocation"))?;
        let arena_base = device_address(stream, &arena);
        let mapped = if host_mapping && layout.mapped_words > 0 {
            Some(
                HostBlock::new(stream.context(), layout.mapped_words, true)
                    .map_err(run_err("mapped page-locked allocation"))?,
            )
        } else {
            None
        };
        // Without page-locked memory (some platforms refuse it) the read-back
        // is a pageable copy, a few microseconds slower.
        let staging = if (1..=STAGING_MAX_WORDS).contains(&layout.readback) {
            HostBlock::new(stream.context(), layout.readback, false).ok()
        } else {
            None
        };
        // The kernel finds the status word through the control block (zero:
        // there is none). Clearing leaves these two words alone, so they are
        // written here, zeros included: the arena's memory may hold an
        // earlier allocation's bytes, which the kernel would take for an
        // address when it records an error.
        let status = mapped
            .as_ref()
            .map_or(0, |mapped| mapped.device_address(STATUS_WORD));
        let mut control = [0u32; control::WORDS];
        control[control::STATUS_LO] = status as u32;
        control[control::STATUS_HI] = (status >> 32) as u32;
        let mut arena = arena;
        stream
            .memcpy_htod(&control, &mut arena.slice_mut(layout.control_words()))
            .map_err(run_err("upload"))?;
        Ok(CallMemory {
            arena,
            arena_base,
            mapped,
            staging,
        })
    }

    /// The device address of the control block.
    fn control_address(&self, layout: &ArenaLayout) -> u64 {
        self.arena_base + layout.control as u64 * 4
    }

    /// Clears the ticket counter before a launch that takes tickets (the
    /// only control word an error-free launch changes).
    fn clear_ticket(
        &self,
        stream: &Arc<CudaStream>,
        prepared: &PreparedPlan,
    ) -> Result<(), RunError> {
        if prepared.module.schedule != BlockSchedule::Tickets {
            return Ok(());
        }
        // SAFETY: the ticket word lies inside the arena.
        unsafe {
            cudarc::driver::sys::cuMemsetD32Async(
                self.control_address(&prepared.layout) + control::TICKET as u64 * 4,
                0,
                1,
                stream.cu_stream(),
            )
        }
        .result()
        .map_err(run_err("memset"))
    }

    /// Clears the error record (all but the status address) and the status
    /// word, after the host read them.
    fn reset_control(
        &self,
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
    ) -> Result<(), RunError> {
        // SAFETY: the cleared words lie inside the arena.
        unsafe {
            cudarc::driver::sys::cuMemsetD32Async(
                self.control_address(layout),
                0,
                control::CLEARED_WORDS,
                stream.cu_stream(),
            )
        }
        .result()
        .map_err(run_err("memset"))?;
        if let Some(mapped) = &self.mapped {
            // SAFETY: the caller synchronised the stream after the launches
            // that write the word, and no slice of the block is alive.
            unsafe { mapped.clear_word(STATUS_WORD) };
        }
        // The next launch must see the host's write to the mapped block.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// After the launches synchronised: the error the kernel recorded, if
    /// any. With a status word, the control block is copied back only when
    /// the word is set; without one, every time.
    fn recorded_error(
        &self,
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
        module: &EmittedModule,
        plan: &LaunchPlan,
    ) -> Result<Option<RunError>, RunError> {
        if let Some(mapped) = &self.mapped {
            // SAFETY: the stream is synchronised; the device wrote the word.
            if unsafe { mapped.read_word(STATUS_WORD) } == 0 {
                return Ok(None);
            }
        }
        let words = download(
            stream,
            &self.arena.slice(layout.control_words()),
            "control block read-back",
        )?;
        let recorded = control::decode_for_plan(&words, module, plan);
        if self.mapped.is_some() && recorded.is_none() {
            return Err(RunError::Backend(
                "the kernel flagged an error but recorded none".into(),
            ));
        }
        Ok(recorded)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    /// The host-copy path: prepares `plan` (once; the backend keeps it),
    /// uploads the inputs into its arena, launches, reads the outputs back
    /// and reports an error the kernel recorded. Errors of runs enqueued
    /// on caller memory earlier are reported first.
    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        self.last_kernel_ms = None;
        self.guarded(|backend| backend.run_inner(plan, args, options))
    }

    fn set_resident(&mut self, name: &str, tensor: HostTensor) -> Result<(), RunError> {
        // A kernel of an earlier failed call may still use the old buffer.
        self.settle()?;
        // Residents hold at least one word, as `bind_residents` allocates them.
        let mut data = tensor.words().to_vec();
        if data.is_empty() {
            data.push(0);
        }
        let words = self
            .stream
            .clone_htod(&data)
            .map_err(run_err("resident upload"))?;
        let address = device_address(&self.stream, &words);
        self.residents.insert(
            name.to_string(),
            DeviceResident {
                elem: tensor.elem(),
                shape: tensor.shape().to_vec(),
                len: tensor.len() as u64,
                words,
                address,
            },
        );
        Ok(())
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        let resident = self.residents.get(name)?;
        let mut words = download(&self.stream, &resident.words, "download").ok()?;
        words.truncate(packed_words(resident.elem, resident.len));
        HostTensor::from_words(resident.elem, resident.shape.clone(), words).ok()
    }
}

/// Launches `prepared`'s kernel once with each plan buffer at `addresses`,
/// the control block at `control` and `scalars`; with `time_kernels`,
/// between two events.
fn launch(
    stream: &Arc<CudaStream>,
    prepared: &PreparedPlan,
    addresses: &[u64],
    control: u64,
    scalars: &HashMap<OperandId, ScalarArg>,
    timeout_ns: u64,
    time_kernels: bool,
) -> Result<Option<(CudaEvent, CudaEvent)>, RunError> {
    let mut launch = stream.launch_builder(&prepared.function);
    for param in &prepared.module.params {
        match param {
            KernelParam::Buffer(index) => {
                launch.arg(
                    addresses
                        .get(index.index())
                        .ok_or_else(|| unplaced(*index))?,
                );
            }
            KernelParam::Scalar(index) => {
                match scalars.get(index) {
                    Some(ScalarArg::F32(v)) => launch.arg(v),
                    Some(ScalarArg::I32(v)) => launch.arg(v),
                    Some(ScalarArg::U32(v)) => launch.arg(v),
                    None => {
                        return Err(RunError::Backend(format!(
                            "internal: no value for scalar operand {index}"
                        )))
                    }
                };
            }
            KernelParam::Control => {
                launch.arg(&control);
            }
            KernelParam::WaitTimeoutNs => {
                launch.arg(&timeout_ns);
            }
        }
    }
    if time_kernels {
        launch.record_kernel_launch(CUevent_flags::CU_EVENT_DEFAULT);
    }
    let config = LaunchConfig {
        grid_dim: (prepared.grid_blocks, 1, 1),
        block_dim: (prepared.module.block_dim, 1, 1),
        shared_mem_bytes: prepared.module.dynamic_smem_bytes,
    };
    // SAFETY: the parameters match the generated kernel's signature
    // (module.params), each buffer parameter a device pointer (a 64-bit
    // value); every buffer holds the elements its ref declares (arena
    // layout, residents checked by length, caller memory by `enqueue`'s
    // contract), and the kernel writes no element outside its ref in either
    // mode (emit: checked mode reports and skips such a write, fast mode
    // skips it), so no host memory the device can address (the mapped
    // block, page-locked staging, HMM) is written behind Rust's back.
    let events = unsafe {
        if prepared.cooperative {
            launch.launch_cooperative(config)
        } else {
            launch.launch(config)
        }
    }
    .map_err(run_err("launch"))?;
    Ok(events)
}

/// Copies a device buffer to the host and waits for the copy.
/// `what` names the step in the error (a kernel's fault surfaces at the
/// first copy after it).
fn download(
    stream: &Arc<CudaStream>,
    slice: &impl DevicePtr<u32>,
    what: &str,
) -> Result<Vec<u32>, RunError> {
    let words = stream.clone_dtoh(slice).map_err(run_err(what))?;
    stream.synchronize().map_err(run_err(what))?;
    stream.context().check_err().map_err(run_err(what))?;
    Ok(words)
}

enum ScalarArg {
    F32(f32),
    I32(i32),
    U32(u32),
}

fn scalar_args(
    plan: &LaunchPlan,
    scalars: &BTreeMap<String, Literal>,
) -> Result<HashMap<OperandId, ScalarArg>, RunError> {
    let mut out = HashMap::new();
    for (index, operand) in plan.enumerate_operands() {
        let Type::Scalar(ty) = operand.ty else {
            continue;
        };
        let value = mpmd_core::host::scalar(scalars, &operand.name, ty)?;
        let arg = match value {
            Literal::F32(b) => ScalarArg::F32(b.to_f32()),
            Literal::I32(v) => ScalarArg::I32(v),
            Literal::U32(v) => ScalarArg::U32(v),
            Literal::Bool(v) => ScalarArg::U32(v as u32),
            // One word, the bits in the low half (the kernel takes a u32).
            Literal::F16(bits) | Literal::BF16(bits) => ScalarArg::U32(u32::from(bits)),
        };
        out.insert(index, arg);
    }
    Ok(out)
}

/// The words a call uploads for each input buffer, by plan buffer index:
/// each input checked against its type, packed (16-bit elements two to a
/// word, [`HostTensor::words`]), `bool`s in gmem as 0 or 1 (the kernel
/// compares with 0), an empty input as one word. Public for the CUDA
/// emulation tests, which must upload what the backend uploads.
pub fn input_words(
    plan: &LaunchPlan,
    args: &CallArgs,
) -> Result<HashMap<BufferId, Vec<u32>>, RunError> {
    let mut out = HashMap::new();
    for (index, buffer) in plan.enumerate_buffers() {
        let BufferInit::Input(name) = &buffer.init else {
            continue;
        };
        let tensor = args.input(name, buffer.ty.elem, buffer.len)?;
        let mut words = tensor.words().to_vec();
        if buffer.ty.space == MemorySpace::Gmem && buffer.ty.elem == ScalarType::Bool {
            // Any non-zero word is `true`; the kernel compares with 0.
            words.iter_mut().for_each(|w| *w = (*w != 0) as u32);
        }
        if words.is_empty() {
            words.push(0);
        }
        out.insert(index, words);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_nvrtc_cannot_compile_for_is_named_with_what_it_can() {
        let error = CudaError::UnsupportedArch {
            device: "NVIDIA GeForce GTX 1080".into(),
            arch: 61,
            nvrtc_major: 13,
            nvrtc_minor: 0,
            supported: describe_archs(&[75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]),
        };
        assert_eq!(
            error.to_string(),
            "NVIDIA GeForce GTX 1080 is sm_61, but NVRTC 13.0 compiles for sm_75 to sm_121 only, so the CUDA backend cannot run on it; the WGSL backend can (`--backend wgpu`)"
        );
        assert_eq!(describe_archs(&[90, 100]), "sm_90, sm_100");
    }
}
