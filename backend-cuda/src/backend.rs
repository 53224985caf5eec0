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
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError,
    LaunchConfig, PushKernelArg,
};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::ir::{Literal, MemorySpace, ScalarType, Type};
use mpmd_core::plan::{BufferInit, BufferPlan, LaunchPlan};
use mpmd_core::{Backend, RunError, RunOptions};
use thiserror::Error;

use crate::control;
use crate::emit::{emit_module, EmittedModule, KernelParam};
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
}

/// Backend settings.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Device ordinal.
    pub device: usize,
    /// Time limit of every semaphore wait (default 10 s, or
    /// `$MPMD_CUDA_WAIT_TIMEOUT_MS`).
    pub wait_timeout: Duration,
}

impl Default for CudaOptions {
    fn default() -> Self {
        let wait_timeout = std::env::var("MPMD_CUDA_WAIT_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_secs(10));
        CudaOptions {
            device: 0,
            wait_timeout,
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
    // SAFETY: only tries to dlopen the candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
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
    words: CudaSlice<u32>,
}

/// The CUDA backend: a context on one device, loaded kernels, and the
/// device-resident refs, which live as long as this value.
pub struct CudaBackend {
    options: CudaOptions,
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: u32,
    sm_count: u32,
    device_name: String,
    kernels: HashMap<String, LoadedKernel>,
    residents: BTreeMap<String, DeviceResident>,
    last_kernel_ms: Option<f32>,
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
        let (major, minor) = context
            .compute_capability()
            .map_err(driver("cuDeviceGetAttribute"))?;
        let sm_count = context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("cuDeviceGetAttribute"))? as u32;
        let device_name = context.name().map_err(driver("cuDeviceGetName"))?;
        // Every run compiles with NVRTC: check now rather than at the first call.
        crate::nvrtc::nvrtc_version()?;
        let stream = context.default_stream();
        Ok(CudaBackend {
            options,
            context,
            stream,
            arch: (major * 10 + minor) as u32,
            sm_count,
            device_name,
            kernels: HashMap::new(),
            residents: BTreeMap::new(),
            last_kernel_ms: None,
        })
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

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// Kernel time of the last successful call, from events around the launch.
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

    fn kernel(
        &mut self,
        module: &EmittedModule,
        fast_math: bool,
    ) -> Result<&LoadedKernel, RunError> {
        let key = format!("{fast_math}\n{}", module.source);
        if !self.kernels.contains_key(&key) {
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
                key.clone(),
                LoadedKernel {
                    _module: loaded,
                    function,
                },
            );
        }
        Ok(&self.kernels[&key])
    }

    fn run_inner(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        let module = emit_module(plan, options.mode).map_err(|e| RunError::Unsupported {
            reason: e.to_string(),
        })?;
        let scalars = scalar_args(plan, args)?;
        let inputs = input_words(plan, args)?;
        let stream = self.stream.clone();

        // Shared memory beyond the default 48 KiB needs an opt-in, up to the device's limit.
        let smem = module.dynamic_smem_bytes;
        let smem_limit = self
            .context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(run_err("cuDeviceGetAttribute"))? as u32;
        if smem > smem_limit.saturating_sub(64) {
            return Err(RunError::Refused {
                reason: format!(
                    "a block needs {smem} bytes of shared memory; this GPU allows {smem_limit} per block"
                ),
            });
        }
        let cooperative = plan.needs_co_residency();
        let sm_count = self.sm_count;
        let coop_supported = self
            .context
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)
            .map_err(run_err("cuDeviceGetAttribute"))?
            != 0;
        let function = self.kernel(&module, plan.map.fast_math)?.function.clone();
        if smem > 48 * 1024 {
            function
                .set_attribute(
                    CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
                .map_err(run_err("cuFuncSetAttribute"))?;
        }
        if cooperative {
            if !coop_supported {
                return Err(RunError::Refused {
                    reason: "the map needs all its blocks resident at once (a semaphore cycle or a program that waits on itself), and this GPU has no cooperative launch".into(),
                });
            }
            let per_sm = function
                .occupancy_max_active_blocks_per_multiprocessor(
                    module.block_dim,
                    smem as usize,
                    None,
                )
                .map_err(run_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
            let resident = per_sm as u64 * sm_count as u64;
            if module.total_blocks > resident {
                return Err(RunError::Refused {
                    reason: format!(
                        "the map needs all {} blocks resident at once (a semaphore cycle or a program that waits on itself), but only {resident} fit on this GPU ({per_sm} per SM x {sm_count} SMs at {} threads and {smem} bytes of shared memory per block)",
                        module.total_blocks, module.block_dim
                    ),
                });
            }
        }

        // Device buffers, in plan order.
        for buffer in &plan.buffers {
            if let BufferInit::Resident(name) = &buffer.init {
                if let Some(existing) = self.residents.get(name) {
                    if existing.words.len() as u64 != buffer.len.max(1) {
                        return Err(RunError::BadArguments(format!(
                            "resident `{name}` already holds {} elements; map `{}` declares {}",
                            existing.words.len(),
                            plan.map.name,
                            buffer.len
                        )));
                    }
                } else {
                    let words = stream
                        .alloc_zeros::<u32>(buffer.len.max(1) as usize)
                        .map_err(run_err("allocation"))?;
                    self.residents.insert(
                        name.clone(),
                        DeviceResident {
                            elem: buffer.ty.elem,
                            shape: host_shape(plan, buffer),
                            words,
                        },
                    );
                }
            }
        }
        let mut call_buffers: Vec<Option<CudaSlice<u32>>> = Vec::with_capacity(plan.buffers.len());
        for (index, buffer) in plan.buffers.iter().enumerate() {
            let len = buffer.len.max(1) as usize;
            let slice = match &buffer.init {
                BufferInit::Resident(_) => None,
                BufferInit::Input(_) => Some(
                    stream
                        .clone_htod(inputs[&index].as_slice())
                        .map_err(run_err("upload"))?,
                ),
                BufferInit::Zeroed => Some(
                    stream
                        .alloc_zeros::<u32>(len)
                        .map_err(run_err("allocation"))?,
                ),
                // SAFETY: uninitialised outputs and scratch are allowed to hold anything.
                BufferInit::Uninitialized => {
                    Some(unsafe { stream.alloc::<u32>(len) }.map_err(run_err("allocation"))?)
                }
            };
            call_buffers.push(slice);
        }
        let control_block = stream
            .alloc_zeros::<u32>(control::WORDS)
            .map_err(run_err("allocation"))?;
        let timeout_ns: u64 = self.options.wait_timeout.as_nanos().min(u64::MAX as u128) as u64;

        let buffer_refs: Vec<&CudaSlice<u32>> = plan
            .buffers
            .iter()
            .enumerate()
            .map(
                |(index, buffer)| match (&buffer.init, &call_buffers[index]) {
                    (BufferInit::Resident(name), _) => &self.residents[name].words,
                    (_, Some(slice)) => slice,
                    (_, None) => unreachable!("every non-resident buffer is allocated above"),
                },
            )
            .collect();
        let mut launch = stream.launch_builder(&function);
        for param in &module.params {
            match param {
                KernelParam::Buffer(index) => {
                    launch.arg(buffer_refs[*index]);
                }
                KernelParam::Scalar(index) => {
                    match &scalars[index] {
                        ScalarArg::F32(v) => launch.arg(v),
                        ScalarArg::I32(v) => launch.arg(v),
                        ScalarArg::U32(v) => launch.arg(v),
                    };
                }
                KernelParam::Control => {
                    launch.arg(&control_block);
                }
                KernelParam::WaitTimeoutNs => {
                    launch.arg(&timeout_ns);
                }
            }
        }
        launch.record_kernel_launch(CUevent_flags::CU_EVENT_DEFAULT);
        let config = LaunchConfig {
            grid_dim: (module.total_blocks as u32, 1, 1),
            block_dim: (module.block_dim, 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: the parameters match the generated kernel's signature
        // (module.params), and every buffer holds the elements the kernel
        // indexes (checked mode checks every index).
        let events = unsafe {
            if cooperative {
                launch.launch_cooperative(config)
            } else {
                launch.launch(config)
            }
        }
        .map_err(run_err("launch"))?;
        stream.synchronize().map_err(run_err("kernel execution"))?;
        self.last_kernel_ms = events.and_then(|(start, end)| event_elapsed_ms(&start, &end));

        let control_words = download(&stream, &control_block)?;
        if let Some(error) = control::decode_for_plan(&control_words, &module, plan) {
            return Err(error);
        }
        let mut outputs = BTreeMap::new();
        for (index, buffer) in plan.buffers.iter().enumerate() {
            let Some(name) = &buffer.output else { continue };
            let mut words = download(&stream, buffer_refs[index])?;
            words.truncate(buffer.len as usize);
            outputs.insert(
                name.clone(),
                HostTensor {
                    elem: buffer.ty.elem,
                    shape: host_shape(plan, buffer),
                    words,
                },
            );
        }
        Ok(CallOutputs { outputs })
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

    fn resident(&self, name: &str) -> Option<HostTensor> {
        let resident = self.residents.get(name)?;
        let mut words = download(&self.stream, &resident.words).ok()?;
        words.truncate(resident.shape.iter().map(|&d| d as usize).product());
        Some(HostTensor {
            elem: resident.elem,
            shape: resident.shape.clone(),
            words,
        })
    }
}

/// Copies a device buffer to the host and waits for the copy.
fn download(stream: &Arc<CudaStream>, slice: &CudaSlice<u32>) -> Result<Vec<u32>, RunError> {
    let words = stream.clone_dtoh(slice).map_err(run_err("download"))?;
    stream.synchronize().map_err(run_err("download"))?;
    stream.context().check_err().map_err(run_err("download"))?;
    Ok(words)
}

/// Host shape of a buffer: the owner mesh's block axes, then the ref's shape
/// (unowned refs: the ref's shape).
pub fn host_shape(plan: &LaunchPlan, buffer: &BufferPlan) -> Vec<u32> {
    let mut shape: Vec<u32> = match &buffer.ty.owner {
        Some(owner) => plan
            .mesh(owner)
            .map(|m| m.block_axes().map(|a| a.size).collect())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    shape.extend(&buffer.ty.shape);
    shape
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
        };
        out.insert(index, arg);
    }
    Ok(out)
}

fn input_words(plan: &LaunchPlan, args: &CallArgs) -> Result<HashMap<usize, Vec<u32>>, RunError> {
    let mut out = HashMap::new();
    for (index, buffer) in plan.buffers.iter().enumerate() {
        let BufferInit::Input(name) = &buffer.init else {
            continue;
        };
        let tensor = args
            .inputs
            .get(name)
            .ok_or_else(|| RunError::BadArguments(format!("missing input `{name}`")))?;
        if tensor.words.len() as u64 != buffer.len {
            return Err(RunError::BadArguments(format!(
                "input `{name}` has {} elements; its type needs {}",
                tensor.words.len(),
                buffer.len
            )));
        }
        let mut words = tensor.words.clone();
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
