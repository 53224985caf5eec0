//! Running plans on a GPU: one CUBIN per (map, mode, device architecture),
//! one launch per call.

mod caches;
mod device;
mod errors;
mod launch;
mod prepared;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream};
use mpmd_core::bind::DeviceMemory;
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::ir::ScalarType;
use mpmd_core::lru::Lru;
use mpmd_core::plan::{LaunchPlan, OperandId};
use mpmd_core::{Backend, Mode, RunError, RunOptions};

use crate::arena::{packed_words, ArenaLayout, HostBlock};
use crate::emit::EmittedModule;

use errors::run_err;
use launch::{device_address, download, ScalarArg};

pub use device::{driver_present, driver_version, event_elapsed_ms};
pub use errors::CudaError;
pub use launch::input_words;

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
/// let (module, _) = parse(include_str!("../../../examples/elementwise.mpmd")).map_err(|e| format!("{e:?}"))?;
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

impl CudaBackend {
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
