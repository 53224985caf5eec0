//! Running plans on a GPU: one CUBIN per (map, mode, device architecture),
//! one launch per call.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{
    CUdevice_attribute, CUevent, CUevent_flags, CUfunction_attribute_enum, CUresult,
};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DevicePtr,
    DriverError, LaunchConfig, PushKernelArg,
};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::ir::{Literal, MemorySpace, ScalarType, Type};
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::{Backend, Mode, RunError, RunOptions};
use thiserror::Error;

use crate::arena::{buffer_words, packed_words, ArenaLayout, HostBlock, Place, STATUS_WORD};
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
    /// Dropped when the plan falls out of the most recently used few.
    memory: Option<CallMemory>,
    /// The scalar arguments of the latest call, by operand index.
    scalars: HashMap<usize, ScalarArg>,
}

/// A prepared plan's memory, kept between its calls (see `arena`).
struct CallMemory {
    arena: CudaSlice<u32>,
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

/// Prepared plans kept (compiled kernels are cheap to keep).
const PREPARED_PLANS: usize = 64;
/// Prepared plans that keep their device arena between calls.
const PLANS_WITH_ARENA: usize = 4;

/// The CUDA backend: a context on one device, loaded kernels, and the
/// device-resident refs, which live as long as this value.
pub struct CudaBackend {
    options: CudaOptions,
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: u32,
    sm_count: u32,
    smem_optin_limit: u32,
    cooperative_launch: bool,
    device_name: String,
    kernels: HashMap<String, LoadedKernel>,
    /// Most recently used first.
    prepared: Vec<PreparedPlan>,
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
        let stream = context.default_stream();
        Ok(CudaBackend {
            options,
            context,
            stream,
            arch,
            sm_count,
            smem_optin_limit,
            cooperative_launch,
            device_name,
            kernels: HashMap::new(),
            prepared: Vec::new(),
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
        if let Some(loaded) = self.kernels.get(&key) {
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
        self.kernels.insert(
            key,
            LoadedKernel {
                _module: loaded,
                function: function.clone(),
            },
        );
        Ok(function)
    }

    /// Emits, compiles and loads `plan`, and makes the launch checks that
    /// do not depend on the call's arguments.
    fn prepare(&mut self, plan: &LaunchPlan, mode: Mode) -> Result<PreparedPlan, RunError> {
        let schedule = BlockSchedule::for_plan(plan, self.cooperative_launch);
        let (module, function) = self.compile_and_load(plan, mode, schedule)?;
        if schedule == BlockSchedule::ResidentWalk {
            let per_sm = self.blocks_per_sm(&module, &function)?;
            if per_sm > 0 {
                let resident = (per_sm as u64 * self.sm_count as u64)
                    .min(self.options.max_resident_blocks.map_or(u64::MAX, u64::from))
                    .max(1);
                let grid_blocks = module.total_blocks.min(resident) as u32;
                return Ok(self.prepared_plan(plan, mode, module, function, true, grid_blocks));
            }
            // Not even one block fits: take tickets instead, which then fail
            // with the launch's own error.
            let (module, function) = self.compile_and_load(plan, mode, BlockSchedule::Tickets)?;
            let grid = module.total_blocks as u32;
            return Ok(self.prepared_plan(plan, mode, module, function, false, grid));
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
        Ok(self.prepared_plan(plan, mode, module, function, cooperative, grid))
    }

    fn prepared_plan(
        &self,
        plan: &LaunchPlan,
        mode: Mode,
        module: EmittedModule,
        function: CudaFunction,
        cooperative: bool,
        grid_blocks: u32,
    ) -> PreparedPlan {
        PreparedPlan {
            plan: plan.clone(),
            mode,
            layout: ArenaLayout::new(plan, &loaded_buffers(plan), self.host_mapping),
            module,
            function,
            cooperative,
            grid_blocks,
            memory: None,
            scalars: HashMap::new(),
        }
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
                let prepared = self.prepare(plan, mode)?;
                self.prepared.insert(0, prepared);
                self.prepared.truncate(PREPARED_PLANS);
            }
        }
        for stale in self.prepared.iter_mut().skip(PLANS_WITH_ARENA) {
            stale.memory = None;
        }
        Ok(())
    }

    /// Allocates the device-resident refs the plan binds that do not exist yet.
    fn bind_residents(&mut self, plan: &LaunchPlan) -> Result<(), RunError> {
        for buffer in &plan.buffers {
            let BufferInit::Resident(name) = &buffer.init else {
                continue;
            };
            if let Some(existing) = self.residents.get(name) {
                if existing.elem != buffer.ty.elem {
                    return Err(RunError::BadArguments(format!(
                        "resident `{name}` holds `{}` elements; map `{}` declares `{}`",
                        existing.elem, plan.map.name, buffer.ty.elem
                    )));
                }
                if existing.len != buffer.len {
                    return Err(RunError::BadArguments(format!(
                        "resident `{name}` already holds {} elements; map `{}` declares {}",
                        existing.len, plan.map.name, buffer.len
                    )));
                }
            } else {
                let words = self
                    .stream
                    .alloc_zeros::<u32>(buffer_words(buffer))
                    .map_err(run_err("allocation"))?;
                self.residents.insert(
                    name.clone(),
                    DeviceResident {
                        elem: buffer.ty.elem,
                        shape: plan.host_shape(buffer),
                        len: buffer.len,
                        words,
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

    fn run_inner(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        let scalars = scalar_args(plan, args)?;
        let inputs = input_words(plan, args)?;
        self.prepared(plan, options.mode)?;
        self.bind_residents(plan)?;
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

        // Inputs uploaded, zeroed buffers and the control block cleared;
        // everything else keeps whatever it holds.
        for (index, buffer) in plan.buffers.iter().enumerate() {
            match (layout.place(index), &buffer.init) {
                (Some(Place::Device(range)), BufferInit::Input(_)) => stream
                    .memcpy_htod(
                        inputs[&index].as_slice(),
                        &mut memory.arena.slice_mut(range.clone()),
                    )
                    .map_err(run_err("upload"))?,
                (Some(Place::Device(range)), BufferInit::Zeroed) => stream
                    .memset_zeros(&mut memory.arena.slice_mut(range.clone()))
                    .map_err(run_err("memset"))?,
                (Some(Place::Mapped(range)), BufferInit::Zeroed) => {
                    let mapped = memory.mapped.as_mut().ok_or_else(|| unplaced(index))?;
                    // SAFETY: no kernel is in flight (settled above).
                    unsafe { mapped.words_mut(range.clone()) }.fill(0)
                }
                _ => {}
            }
        }
        memory.clear_control(&stream, layout)?;
        prepared.scalars = scalars;
        self.in_flight = true;
        let events = launch_prepared(&stream, prepared, &self.residents, timeout_ns, time_kernels)?;

        // One copy brings back the arena's outputs (none when all are mapped).
        let layout = &prepared.layout;
        let memory = prepared.memory.as_mut().expect("allocated above");
        let what = "kernel execution or read-back";
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
        if let Some(error) = memory.recorded_error(&stream, layout, &prepared.module, plan)? {
            return Err(error);
        }
        let mut outputs = BTreeMap::new();
        for (index, buffer) in plan.buffers.iter().enumerate() {
            let Some(name) = &buffer.output else { continue };
            // The packed words of the elements (none for an empty buffer).
            let len = packed_words(buffer.ty.elem, buffer.len);
            let words = match (&buffer.init, layout.place(index)) {
                (BufferInit::Resident(resident), _) => {
                    let mut words = download(&stream, &self.residents[resident].words, "download")?;
                    words.truncate(len);
                    words
                }
                (_, Some(Place::Device(range))) => {
                    arena_outputs[range.start..range.start + len].to_vec()
                }
                (_, Some(Place::Mapped(range))) => {
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
    /// read-back; the control block and the zeroed atomic buffers, which
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
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, buffer)| buffer.atomic && buffer.init == BufferInit::Zeroed)
            .filter_map(|(index, _)| prepared.layout.device_range(index))
            .collect();
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let memory = prepared.memory.as_mut().expect("checked above");
            for range in &cleared {
                stream
                    .memset_zeros(&mut memory.arena.slice_mut(range.clone()))
                    .map_err(run_err("memset"))?;
            }
            memory.clear_control(&stream, &prepared.layout)?;
            self.in_flight = true;
            let events = launch_prepared(&stream, prepared, &self.residents, timeout_ns, true)?;
            stream.synchronize().map_err(run_err("kernel execution"))?;
            self.in_flight = false;
            let memory = prepared.memory.as_ref().expect("checked above");
            if let Some(error) = memory.recorded_error(
                &stream,
                &prepared.layout,
                &prepared.module,
                &prepared.plan,
            )? {
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

fn unplaced(buffer: usize) -> RunError {
    RunError::Backend(format!("internal: plan buffer {buffer} has no memory"))
}

impl CallMemory {
    fn new(
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
        host_mapping: bool,
    ) -> Result<Self, RunError> {
        // SAFETY: every word a kernel may read before writing is set before
        // each launch (inputs uploaded, zeroed buffers and control cleared).
        let mut arena =
            unsafe { stream.alloc::<u32>(layout.device_words) }.map_err(run_err("allocation"))?;
        let mapped = if host_mapping {
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
        // there is none). The per-call clear leaves these two words alone, so
        // they are written here, zeros included: the arena's memory may hold
        // an earlier allocation's bytes, which the kernel would take for an
        // address when it records an error.
        let status = mapped
            .as_ref()
            .map_or(0, |mapped| mapped.device_address(STATUS_WORD));
        let address = [status as u32, (status >> 32) as u32];
        let at = layout.control + control::STATUS_LO..layout.control + control::STATUS_HI + 1;
        stream
            .memcpy_htod(&address, &mut arena.slice_mut(at))
            .map_err(run_err("upload"))?;
        Ok(CallMemory {
            arena,
            mapped,
            staging,
        })
    }

    /// Clears the control block (but the status address) and the status word.
    fn clear_control(
        &mut self,
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
    ) -> Result<(), RunError> {
        stream
            .memset_zeros(
                &mut self
                    .arena
                    .slice_mut(layout.control..layout.control + control::CLEARED_WORDS),
            )
            .map_err(run_err("memset"))?;
        if let Some(mapped) = self.mapped.as_mut() {
            // SAFETY: no kernel is in flight (callers settle first).
            unsafe { mapped.words_mut(STATUS_WORD..STATUS_WORD + 1) }.fill(0);
        }
        // The launch must see the host's writes to the mapped block.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// After the launch synchronised: the error the kernel recorded, if any.
    /// With a status word, the control block is copied back only when the
    /// word is set; without one, after every call.
    fn recorded_error(
        &self,
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
        module: &EmittedModule,
        plan: &LaunchPlan,
    ) -> Result<Option<RunError>, RunError> {
        if let Some(mapped) = &self.mapped {
            // SAFETY: the stream is synchronised; the device wrote the word.
            let status = unsafe {
                std::ptr::read_volatile(mapped.words(STATUS_WORD..STATUS_WORD + 1).as_ptr())
            };
            if status == 0 {
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

    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        self.last_kernel_ms = None;
        match catch_unwind(AssertUnwindSafe(|| self.run_inner(plan, args, options))) {
            Ok(result) => result,
            Err(payload) => Err(RunError::Backend(format!(
                "the CUDA library panicked: {}",
                panic_text(payload)
            ))),
        }
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
        self.residents.insert(
            name.to_string(),
            DeviceResident {
                elem: tensor.elem(),
                shape: tensor.shape().to_vec(),
                len: tensor.len() as u64,
                words,
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

/// Launches `prepared`'s kernel once on its memory and the residents, with
/// the scalars of its latest call; with `time_kernels`, between two events.
fn launch_prepared(
    stream: &Arc<CudaStream>,
    prepared: &PreparedPlan,
    residents: &BTreeMap<String, DeviceResident>,
    timeout_ns: u64,
    time_kernels: bool,
) -> Result<Option<(CudaEvent, CudaEvent)>, RunError> {
    let plan = &prepared.plan;
    let layout = &prepared.layout;
    let scalars = &prepared.scalars;
    let Some(memory) = prepared.memory.as_ref() else {
        return Err(RunError::Backend("internal: launch without memory".into()));
    };
    let views: Vec<Option<CudaView<u32>>> = (0..plan.buffers.len())
        .map(|index| {
            layout
                .device_range(index)
                .map(|range| memory.arena.slice(range))
        })
        .collect();
    let mapped_addresses: Vec<u64> = (0..plan.buffers.len())
        .map(|index| match layout.place(index) {
            Some(Place::Mapped(range)) => memory
                .mapped
                .as_ref()
                .map_or(0, |mapped| mapped.device_address(range.start)),
            _ => 0,
        })
        .collect();
    let control_view = memory.arena.slice(layout.control_words());
    let mut launch = stream.launch_builder(&prepared.function);
    for param in &prepared.module.params {
        match param {
            KernelParam::Buffer(index) => {
                match (
                    &plan.buffers[*index].init,
                    layout.place(*index),
                    &views[*index],
                ) {
                    (BufferInit::Resident(name), _, _) => {
                        launch.arg(&residents[name].words);
                    }
                    (_, Some(Place::Device(_)), Some(view)) => {
                        launch.arg(view);
                    }
                    (_, Some(Place::Mapped(_)), _) if mapped_addresses[*index] != 0 => {
                        launch.arg(&mapped_addresses[*index]);
                    }
                    _ => return Err(unplaced(*index)),
                }
            }
            KernelParam::Scalar(index) => {
                match &scalars[index] {
                    ScalarArg::F32(v) => launch.arg(v),
                    ScalarArg::I32(v) => launch.arg(v),
                    ScalarArg::U32(v) => launch.arg(v),
                };
            }
            KernelParam::Control => {
                launch.arg(&control_view);
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
    // (module.params); every buffer holds the elements its ref declares
    // (arena layout, residents checked by length), and the kernel writes
    // no element outside its ref in either mode (emit: checked mode reports
    // and skips such a write, fast mode skips it), so no host memory the
    // device can address (the mapped block, page-locked staging, HMM) is
    // written behind Rust's back; a mapped buffer's address is a device
    // pointer to its words (a pointer-sized argument).
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

fn scalar_args(plan: &LaunchPlan, args: &CallArgs) -> Result<HashMap<usize, ScalarArg>, RunError> {
    let mut out = HashMap::new();
    for (index, operand) in plan.operands.iter().enumerate() {
        let Type::Scalar(ty) = operand.ty else {
            continue;
        };
        let value = args.scalars.get(&operand.name).ok_or_else(|| {
            RunError::BadArguments(format!("missing scalar `{}` ({ty})", operand.name))
        })?;
        if value.ty() != ty {
            return Err(RunError::BadArguments(format!(
                "scalar `{}` is {ty}, but the call gives a {}",
                operand.name,
                value.ty()
            )));
        }
        let arg = match *value {
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
) -> Result<HashMap<usize, Vec<u32>>, RunError> {
    let mut out = HashMap::new();
    for (index, buffer) in plan.buffers.iter().enumerate() {
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
