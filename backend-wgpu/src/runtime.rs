//! Running emitted modules through wgpu.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use mpmd_core::backend::{Backend, RunError, RunOptions, Site};
use mpmd_core::bind::{bind, provider, DeviceArgs, DeviceMemory, Provider};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::ir::{Literal, MemorySpace, Name, ScalarType, SemOp, Stmt};
use mpmd_core::lru::Lru;
use mpmd_core::plan::{BufferId, BufferInit, BufferPlan, LaunchPlan, ProgramId, UnitId};
use mpmd_core::Mode;
use thiserror::Error;

use crate::emit::{
    emit_module, fused_workgroup_size, fused_workgroups, fuses_programs, is_split_unit,
    own_workgroup_bytes, splits_blocks, words_for, EmitError, EmitOptions, EmittedModule, WarpPath,
    ERROR_LOOP_CAP, ERROR_LOOP_LIMIT, ERROR_OUT_OF_BOUNDS, ERROR_SEM_AMOUNT,
    ERROR_SUBGROUP_NOT_WARP, ERROR_WAIT_TIMEOUT, MAX_RECORDED_VALUES, PARAMS_BINDING,
    STATUS_BINDING, STATUS_WORDS, TICKET_WORD,
};
use crate::subgroups::{SubgroupFacts, WarpChoice};

/// Compiled modules (WGSL, bind group layout, pipelines) a device keeps, the
/// least recently used going first: a process that runs many distinct maps
/// holds at most this many. A prepared map keeps its own module alive
/// whatever the cache does.
pub const PIPELINE_CACHE_CAPACITY: usize = 64;

/// Prepared maps a backend keeps for [`Backend::run`] (the host-copy path),
/// the least recently used going first; each holds its scratch memory.
pub const RUN_CACHE_CAPACITY: usize = 8;

/// Bytes of device buffers the host-copy path keeps for later calls
/// (inputs, outputs and staging, by size); more are freed.
pub const POOL_MAX_BYTES: u64 = 256 << 20;

/// Loop header visits the backend allows on llvmpipe (measured: it stops an
/// invocation's loops after 65,535 to 65,537 header visits in total).
pub const LLVMPIPE_LOOP_CAP: u32 = 65_000;

/// How the backend is set up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WgpuOptions {
    /// The user declares that every workgroup of a dispatch runs at once on
    /// this adapter, so waits whose signals come from the same dispatch can
    /// make progress: a plan that needs co-residency runs as one fused
    /// dispatch even when the backend cannot establish it for the adapter
    /// ([`WgpuBackend::resident_workgroups`]). Such runs are `unverified`,
    /// never a pass, unless the backend established it too.
    pub co_resident: bool,
    /// Polls one semaphore wait makes before it reports a timeout
    /// (default: 16,384 on llvmpipe, 4,194,304 elsewhere).
    pub wait_poll_budget: Option<u32>,
    /// Per-invocation loop iteration cap (default: 65,000 on llvmpipe, none elsewhere).
    pub loop_cap: Option<u32>,
    /// Use at most this many storage buffers per stage even if the adapter
    /// allows more (packing the rest); for tests of the packed layout.
    pub max_storage_buffers: Option<u32>,
    /// How warp collectives run: `None` (the default) as the adapter
    /// qualifies ([`WarpChoice::for_adapter`]); `Some(WarpPath::Emulated)`
    /// through workgroup memory everywhere; `Some(WarpPath::Native)` on
    /// subgroups wherever the device has them, for tests: where the
    /// subgroups are not the logical warps, a run that uses them fails with
    /// the run-time check's `Unsupported` error ([`WgpuBackend::warp_path`]).
    pub warps: Option<WarpPath>,
    /// Wall-clock bound on one [`Backend::run`] (compiling the pipelines,
    /// the dispatches and reading back) and on [`WgpuBackend::prepare`]'s
    /// compile; past it the call fails with [`RunError::TimeLimit`] saying
    /// what it was doing. A GPU cannot be stopped: a compile or a dispatch
    /// that passes the limit goes on in the background (the device stays
    /// busy until it ends). `None` (the default): no bound.
    pub time_limit: Option<std::time::Duration>,
}

/// A run's deadline and the limit it came from.
type Deadline = Option<(std::time::Instant, std::time::Duration)>;

/// The error of a run whose [`WgpuOptions::time_limit`] passed while it was
/// `doing` something.
fn time_limit(doing: &str, limit: std::time::Duration) -> RunError {
    RunError::TimeLimit {
        at: mpmd_core::backend::Activity::Other(doing.to_string()),
        limit_ms: limit.as_millis().min(u128::from(u64::MAX)) as u64,
        option: "WgpuOptions::time_limit".into(),
    }
}

/// Adapter facts for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterInfo {
    pub name: String,
    pub driver: String,
    pub driver_info: String,
    /// The wgpu backend (`vulkan`, `metal`, ...).
    pub backend: String,
    pub device_type: String,
}

impl std::fmt::Display for AdapterInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, driver {} {})",
            self.name, self.backend, self.driver, self.driver_info
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WgpuError {
    #[error("no WebGPU adapter found ({0}). Install a Vulkan driver; on a machine without a GPU, Mesa's lavapipe: `apt-get install mesa-vulkan-drivers libvulkan1`")]
    NoAdapter(String),
    #[error("the adapter {adapter} refused to create a device: {message}")]
    Device { adapter: String, message: String },
}

/// One device with its pipeline cache: the process's default device, shared
/// by every backend value [`WgpuBackend::new`] makes, or a caller's
/// ([`WgpuBackend::from_device`]).
struct GpuContext {
    info: AdapterInfo,
    limits: wgpu::Limits,
    llvmpipe: bool,
    /// What the device says about its subgroups (the warp path's input).
    subgroups: SubgroupFacts,
    device: wgpu::Device,
    queue: wgpu::Queue,
    modules: Mutex<Lru<String, Arc<CompiledModule>>>,
    /// Workgroups this adapter is established to run at once (measured on
    /// first need; see [`WgpuBackend::resident_workgroups`]).
    residency: OnceLock<Residency>,
    /// The warp path the adapter qualifies for (decided on first need; see
    /// [`WgpuBackend::warp_path`]).
    warps: OnceLock<WarpChoice>,
}

/// What the backend established about workgroups running at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Residency {
    /// Workgroups of one dispatch that are known to run at once (0: none
    /// established, the adapter gives no guarantee).
    pub workgroups: u32,
    /// How it was established, or why not, for messages and reports.
    pub how: String,
}

struct CompiledModule {
    emitted: EmittedModule,
    layout: wgpu::BindGroupLayout,
    /// One per dispatch of `emitted.schedule`.
    pipelines: Vec<wgpu::ComputePipeline>,
}

fn context() -> Result<Arc<GpuContext>, WgpuError> {
    static CONTEXT: OnceLock<Mutex<Option<Arc<GpuContext>>>> = OnceLock::new();
    let slot = CONTEXT.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ctx) = guard.as_ref() {
        return Ok(ctx.clone());
    }
    let ctx = Arc::new(create_context()?);
    *guard = Some(ctx.clone());
    Ok(ctx)
}

fn create_context() -> Result<GpuContext, WgpuError> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| WgpuError::NoAdapter(e.to_string()))?;
    let raw = adapter.get_info();
    let info = adapter_info(&raw);
    let llvmpipe = is_llvmpipe(&raw);
    // The adapter's own limits: lavapipe allows 1024 invocations and more
    // storage buffers than WebGPU's defaults.
    let limits = adapter.limits();
    // Subgroup operations where the adapter has them: native warp collectives
    // need them (`WarpChoice::for_adapter`).
    let features = adapter.features() & wgpu::Features::SUBGROUP;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("mpmd"),
        required_features: features,
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .map_err(|e| WgpuError::Device {
        adapter: info.to_string(),
        message: e.to_string(),
    })?;
    // Errors are caught by error scopes; anything else must not abort the process.
    device.on_uncaptured_error(Arc::new(|e: wgpu::Error| {
        eprintln!("mpmd-wgpu: uncaptured wgpu error: {e}");
    }));
    Ok(GpuContext {
        info,
        limits,
        llvmpipe,
        subgroups: subgroup_facts(&device, &raw),
        device,
        queue,
        modules: Mutex::new(Lru::new(PIPELINE_CACHE_CAPACITY)),
        residency: OnceLock::new(),
        warps: OnceLock::new(),
    })
}

/// A context on a device and queue the caller made (its limits are the
/// device's own; its uncaptured-error handler stays the caller's).
fn context_on(device: wgpu::Device, queue: wgpu::Queue) -> GpuContext {
    let raw = device.adapter_info();
    let llvmpipe = is_llvmpipe(&raw);
    GpuContext {
        info: adapter_info(&raw),
        limits: device.limits(),
        llvmpipe,
        subgroups: subgroup_facts(&device, &raw),
        device,
        queue,
        modules: Mutex::new(Lru::new(PIPELINE_CACHE_CAPACITY)),
        residency: OnceLock::new(),
        warps: OnceLock::new(),
    }
}

fn adapter_info(raw: &wgpu::AdapterInfo) -> AdapterInfo {
    AdapterInfo {
        name: raw.name.clone(),
        driver: raw.driver.clone(),
        driver_info: raw.driver_info.clone(),
        backend: raw.backend.to_string(),
        device_type: format!("{:?}", raw.device_type),
    }
}

/// The device's subgroup feature and the adapter's subgroup sizes.
fn subgroup_facts(device: &wgpu::Device, raw: &wgpu::AdapterInfo) -> SubgroupFacts {
    SubgroupFacts {
        feature: device.features().contains(wgpu::Features::SUBGROUP),
        min_size: raw.subgroup_min_size,
        max_size: raw.subgroup_max_size,
    }
}

fn is_llvmpipe(raw: &wgpu::AdapterInfo) -> bool {
    raw.name.to_lowercase().contains("llvmpipe") || raw.driver.to_lowercase().contains("llvmpipe")
}

/// A device-resident ref kept across calls.
struct ResidentBuffer {
    buffer: wgpu::Buffer,
    elem: ScalarType,
    shape: Vec<u32>,
    elements: u64,
    /// 32-bit words of `buffer` in use (16-bit elements are packed two a word).
    words: u64,
}

/// Device buffers kept between calls, by size and usage, so that a call
/// does not allocate (per-call overhead); at most [`POOL_MAX_BYTES`] of them.
#[derive(Default)]
struct BufferPool {
    free: Mutex<PoolBuffers>,
}

#[derive(Default)]
struct PoolBuffers {
    by_kind: HashMap<(u64, u32), Vec<wgpu::Buffer>>,
    bytes: u64,
}

impl BufferPool {
    fn take(
        &self,
        device: &wgpu::Device,
        label: &str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        let bytes = bytes.max(4);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let reused = free
                .by_kind
                .get_mut(&(bytes, usage.bits()))
                .and_then(Vec::pop);
            if reused.is_some() {
                free.bytes -= bytes;
            }
            reused
        };
        reused.unwrap_or_else(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        })
    }

    /// Keeps `buffers` for later calls, as far as the bound allows (the
    /// rest are dropped, which frees them).
    fn put(&self, buffers: Vec<wgpu::Buffer>) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        for b in buffers {
            if free.bytes + b.size() > POOL_MAX_BYTES {
                continue;
            }
            free.bytes += b.size();
            free.by_kind
                .entry((b.size(), b.usage().bits()))
                .or_default()
                .push(b);
        }
    }
}

const STORAGE_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);
const STAGING_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// The WGSL backend: runs launch plans on a wgpu adapter.
pub struct WgpuBackend {
    ctx: Arc<GpuContext>,
    options: WgpuOptions,
    residents: BTreeMap<Name, ResidentBuffer>,
    pool: Arc<BufferPool>,
    /// The maps [`Backend::run`] prepared, most recently used first (at most
    /// [`RUN_CACHE_CAPACITY`]): a repeated call finds its map by plan
    /// equality, without building the pipeline cache's key.
    run_cache: Vec<Arc<PreparedMap>>,
    /// Maps run on caller memory since the last [`WgpuBackend::synchronize`],
    /// whose status it reads.
    pending: Vec<Arc<PreparedMap>>,
    /// The deadline of the run or prepare under way ([`WgpuOptions::time_limit`]).
    deadline: Deadline,
}

/// A caller's buffer bound to one operand of a run
/// ([`WgpuBackend::enqueue`]): the buffer, and the element type and count
/// it holds, which must be exactly the operand's. The buffer holds the
/// elements as mpmd lays them out (little-endian, 2 bytes an `f16`/`bf16`,
/// 4 bytes any other type, a `bool` as a 32-bit 0 or 1), so it has at least
/// the packed elements' bytes rounded up to whole 4-byte words. It needs
/// `STORAGE` usage, and `COPY_DST` when the operand starts at zero (the run
/// clears it); when the backend packs buffers into shared arenas (the
/// adapter binds too few storage buffers), `COPY_SRC` for inputs and
/// `COPY_DST` for outputs.
#[derive(Clone, Debug)]
pub struct WgpuBuffer {
    pub buffer: wgpu::Buffer,
    pub elem: ScalarType,
    /// Elements, not bytes.
    pub len: u64,
}

impl WgpuBuffer {
    pub fn new(buffer: wgpu::Buffer, elem: ScalarType, len: u64) -> Self {
        WgpuBuffer { buffer, elem, len }
    }
}

impl DeviceMemory for WgpuBuffer {
    fn elem(&self) -> ScalarType {
        self.elem
    }
    fn element_count(&self) -> u64 {
        self.len
    }
    fn same_memory(&self, other: &Self) -> bool {
        self.buffer == other.buffer
    }
}

/// A map prepared on one backend's device ([`WgpuBackend::prepare`]): the
/// plan checked against the adapter, its WGSL compiled into pipelines, and
/// the memory its runs need besides the caller's buffers (the parameter and
/// status buffers, scratch, semaphores). Run it any number of times with
/// [`WgpuBackend::enqueue`]; scalars change per run without recompiling.
/// Dropping it frees that memory (once no run that uses it is pending).
pub struct WgpuPrepared {
    map: Arc<PreparedMap>,
}

impl WgpuPrepared {
    /// The plan this map runs.
    pub fn plan(&self) -> &LaunchPlan {
        &self.map.plan
    }

    pub fn mode(&self) -> Mode {
        self.map.mode
    }
}

struct PreparedMap {
    /// The device it was prepared on (runs on another are refused).
    ctx: Arc<GpuContext>,
    plan: LaunchPlan,
    mode: Mode,
    compiled: Arc<CompiledModule>,
    params: wgpu::Buffer,
    /// The error record and the ticket counter (`emit::STATUS_WORDS`).
    status: wgpu::Buffer,
    /// Per binding of the module's layout: the backend's own buffer (a
    /// packed arena, or a binding whose plan buffer the backend provides);
    /// `None` for the caller's and residents.
    own: Vec<Option<wgpu::Buffer>>,
    /// An error was read from `status`: the next run clears it whole. A run
    /// otherwise clears only the ticket word, so an error a run records
    /// stays until it is read.
    status_dirty: AtomicBool,
}

impl WgpuBackend {
    /// Opens the default adapter (shared by every backend value of the process).
    pub fn new(options: WgpuOptions) -> Result<Self, WgpuError> {
        Ok(Self::on_context(context()?, options))
    }

    /// A backend on a device and queue the caller made (any adapter, the
    /// limits it was created with): runs go to `queue`, and
    /// [`WgpuBackend::enqueue`] runs prepared maps on the caller's buffers
    /// of this device. The device's uncaptured-error handler stays the
    /// caller's; the backend catches its own errors with error scopes.
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, options: WgpuOptions) -> Self {
        Self::on_context(Arc::new(context_on(device, queue)), options)
    }

    fn on_context(ctx: Arc<GpuContext>, options: WgpuOptions) -> Self {
        WgpuBackend {
            ctx,
            options,
            residents: BTreeMap::new(),
            pool: Arc::new(BufferPool::default()),
            run_cache: Vec::new(),
            pending: Vec::new(),
            deadline: None,
        }
    }

    /// Starts the clock of a run or prepare.
    fn start_clock(&mut self) {
        self.deadline = self
            .options
            .time_limit
            .map(|limit| (std::time::Instant::now() + limit, limit));
    }

    /// The device runs go to.
    pub fn device(&self) -> &wgpu::Device {
        &self.ctx.device
    }

    /// The queue runs are submitted to.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.ctx.queue
    }

    /// Compiled modules the device's pipeline cache holds now (at most
    /// [`PIPELINE_CACHE_CAPACITY`]).
    pub fn pipeline_cache_len(&self) -> usize {
        self.ctx
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn adapter_info(&self) -> AdapterInfo {
        self.ctx.info.clone()
    }

    /// Whether the adapter is Mesa's llvmpipe (lavapipe).
    pub fn is_llvmpipe(&self) -> bool {
        self.ctx.llvmpipe
    }

    /// The limits the device was created with (the adapter's own).
    pub fn limits(&self) -> wgpu::Limits {
        self.ctx.limits.clone()
    }

    /// How this backend runs warp collectives here, and why, unless
    /// `WgpuOptions::warps` asks for a path ([`WarpChoice::requested`]):
    /// native subgroup operations only where the adapter's facts qualify
    /// ([`WarpChoice::for_adapter`]) and, once per device, a probe dispatch
    /// of native collectives found its subgroups to be the logical warps and
    /// computed what the interpreter does (`subgroups::probe`); an adapter
    /// that reports subgroups of 32 but runs fewer lanes in them (lavapipe
    /// with `LP_NATIVE_VECTOR_WIDTH=1024`) gets the emulation.
    pub fn warp_path(&self) -> WarpChoice {
        if let Some(path) = self.options.warps {
            return WarpChoice::requested(path, self.ctx.subgroups);
        }
        self.ctx
            .warps
            .get_or_init(|| {
                let choice = WarpChoice::for_adapter(self.ctx.subgroups);
                if choice.path == WarpPath::Emulated {
                    return choice;
                }
                let mut native = WgpuBackend::on_context(
                    self.ctx.clone(),
                    WgpuOptions {
                        warps: Some(WarpPath::Native),
                        ..WgpuOptions::default()
                    },
                );
                match crate::subgroups::probe(&mut native) {
                    Ok(()) => choice.probed(),
                    Err(failure) => choice.refuted(&failure),
                }
            })
            .clone()
    }

    /// Whether a successful run of `plan` is only `unverified`: it needs
    /// co-residency for more workgroups than the backend established for
    /// this adapter ([`Self::resident_workgroups`]), so it runs (as one fused
    /// dispatch) only on the user's declaration, `WgpuOptions::co_resident`
    /// (without it, a plan with a cycle is refused). A plan whose programs
    /// wait on their own signals but has no cycle runs one dispatch per
    /// block of those programs when it cannot fuse, and is verified.
    pub fn unverified(&self, plan: &LaunchPlan) -> bool {
        plan.needs_co_residency()
            && !self.co_residency_established(plan)
            && !splits_blocks(plan, &self.plan_emit_options(plan, Mode::Fast))
    }

    /// What the backend established about this adapter running a
    /// dispatch's workgroups at once: on lavapipe, measured once per process
    /// by a probe dispatch (see `residency.rs`); elsewhere nothing.
    pub fn residency(&self) -> Residency {
        self.ctx
            .residency
            .get_or_init(|| {
                crate::residency::establish(
                    &self.ctx.device,
                    &self.ctx.queue,
                    self.ctx.llvmpipe,
                    &self.ctx.info.name,
                )
            })
            .clone()
    }

    /// Workgroups of one dispatch the backend established to run at once on
    /// this adapter (0 where it cannot establish any).
    pub fn resident_workgroups(&self) -> u32 {
        self.residency().workgroups
    }

    /// Whether every workgroup of `plan`'s fused dispatch is established to
    /// run at once (only asked of plans that need co-residency).
    pub fn co_residency_established(&self, plan: &LaunchPlan) -> bool {
        plan.needs_co_residency() && fused_workgroups(plan) <= self.resident_workgroups() as u64
    }

    /// The code-generation options for `plan`: [`Self::emit_options`], and
    /// a plan that needs co-residency runs fused when the user declared it
    /// or the backend established it for this plan.
    pub fn plan_emit_options(&self, plan: &LaunchPlan, mode: Mode) -> EmitOptions {
        let mut options = self.emit_options(mode);
        if plan.needs_co_residency() && !options.co_resident {
            options.co_resident = self.co_residency_established(plan);
        }
        options
    }

    /// The code-generation options this backend uses on its adapter.
    pub fn emit_options(&self, mode: Mode) -> EmitOptions {
        let llvmpipe = self.ctx.llvmpipe;
        let adapter_max = self.ctx.limits.max_storage_buffers_per_shader_stage;
        EmitOptions {
            mode,
            loop_cap: self.options.loop_cap.or(if llvmpipe {
                Some(LLVMPIPE_LOOP_CAP)
            } else {
                None
            }),
            wait_poll_budget: self.options.wait_poll_budget.unwrap_or(if llvmpipe {
                16_384
            } else {
                1 << 22
            }),
            max_storage_buffers: self
                .options
                .max_storage_buffers
                .map_or(adapter_max, |m| m.min(adapter_max)),
            max_workgroups_per_dimension: self.ctx.limits.max_compute_workgroups_per_dimension,
            co_resident: self.options.co_resident,
            warps: self.warp_path().path,
        }
    }

    /// The WGSL this backend runs for `plan` on its adapter.
    pub fn wgsl(&self, plan: &LaunchPlan, mode: Mode) -> Result<String, EmitError> {
        Ok(emit_module(plan, &self.plan_emit_options(plan, mode))?.wgsl)
    }

    /// What it takes to run `plan`'s fused dispatch here, for messages: the
    /// workgroups it needs at once, what the backend established, and the
    /// two ways (establishing more on lavapipe, or declaring it).
    fn co_residency_advice(&self, plan: &LaunchPlan) -> String {
        let needed = fused_workgroups(plan);
        let residency = self.residency();
        let lavapipe = match self.ctx.llvmpipe {
            true if needed <= crate::residency::MAX_PROBED_WORKGROUPS as u64 => format!(
                "; on lavapipe, LP_NUM_THREADS={needed} or more (set before the process opens the adapter) \
                 lets the backend establish it, and the result is verified"
            ),
            true => format!(
                "; lavapipe runs at most {} workgroups at once (its thread pool's limit), so this plan \
                 cannot run there: use fewer blocks",
                crate::residency::MAX_PROBED_WORKGROUPS
            ),
            false => String::new(),
        };
        format!(
            "as one fused dispatch, which needs {needed} workgroup(s) running at once; the backend established \
             {} on this adapter ({}). Set WgpuOptions::co_resident if this adapter runs them all at once (the \
             result is then unverified){lavapipe}",
            residency.workgroups, residency.how
        )
    }

    fn refuse_if_needed(&self, plan: &LaunchPlan) -> Result<(), RunError> {
        let options = self.plan_emit_options(plan, Mode::Fast);
        if plan.needs_co_residency()
            && !fuses_programs(plan, &options)
            && !splits_blocks(plan, &options)
        {
            let kernel = |unit: UnitId| {
                plan.units
                    .get(unit.index())
                    .map(|u| format!("program {} (`{}`)", u.program, u.kernel.name))
                    .unwrap_or_else(|| format!("unit {unit}"))
            };
            let mut why = Vec::new();
            for e in &plan.graph.intra_program {
                why.push(format!(
                    "{} waits on `{}`, which it signals itself",
                    kernel(e.to),
                    e.semaphore
                ));
            }
            if plan.graph.has_cycle {
                let edges: Vec<String> = plan
                    .graph
                    .edges
                    .iter()
                    .map(|e| {
                        format!(
                            "{} signals `{}` for {}",
                            kernel(e.from),
                            e.semaphore,
                            kernel(e.to)
                        )
                    })
                    .collect();
                why.push(format!(
                    "the programs wait on each other in a cycle ({})",
                    edges.join("; ")
                ));
            }
            return Err(RunError::Refused {
                reason: format!(
                    "{}; such a wait needs another workgroup of the same dispatch to run at the same time, \
                     and WebGPU promises no forward progress between workgroups. No order of dispatches \
                     carries a cycle: the plan must run {}",
                    why.join("; "),
                    self.co_residency_advice(plan)
                ),
            });
        }
        let limits = &self.ctx.limits;
        if fuses_programs(plan, &options) {
            // One entry point holds every program: its workgroup memory is all
            // of theirs, and its workgroup the widest.
            let size = fused_workgroup_size(plan);
            let max_threads = limits
                .max_compute_invocations_per_workgroup
                .min(limits.max_compute_workgroup_size_x);
            let smem: u64 = plan
                .units
                .iter()
                .flat_map(|u| &u.smem)
                .filter_map(|s| plan.operands.get(s.operand.index()))
                .filter_map(|o| o.ty.as_ref_type())
                .map(|r| words_for(r.elem, r.len()).max(1) * 4)
                .sum::<u64>();
            let own = own_workgroup_bytes(plan, &options, None);
            let smem = smem + own;
            if size > max_threads || smem > limits.max_compute_workgroup_storage_size as u64 {
                return Err(RunError::Refused {
                    reason: format!(
                        "the plan needs co-residency and runs as one fused dispatch of every program, whose \
                         workgroup has {size} invocation(s) (the widest program) and {smem} bytes of workgroup \
                         memory (every program's smem plus {own} bytes of the backend's own); the adapter allows \
                         {max_threads} invocations and {} bytes",
                        limits.max_compute_workgroup_storage_size
                    ),
                });
            }
        }
        for (id, unit) in plan.enumerate_units() {
            let max_threads = limits
                .max_compute_invocations_per_workgroup
                .min(limits.max_compute_workgroup_size_x);
            if unit.threads_per_block > max_threads {
                return Err(RunError::Refused {
                    reason: format!(
                        "program {} (`{}`) has {} threads per block; the adapter allows {max_threads} per workgroup",
                        unit.program, unit.kernel.name, unit.threads_per_block
                    ),
                });
            }
            let smem: u64 = unit
                .smem
                .iter()
                .filter_map(|s| plan.operands.get(s.operand.index()))
                .filter_map(|o| o.ty.as_ref_type())
                .map(|r| words_for(r.elem, r.len()).max(1) * 4)
                .sum::<u64>();
            let own = own_workgroup_bytes(plan, &options, Some(id));
            let smem = smem + own;
            if smem > limits.max_compute_workgroup_storage_size as u64 {
                return Err(RunError::Refused {
                    reason: format!(
                        "program {} (`{}`) needs {smem} bytes of workgroup memory (smem plus {own} bytes of the backend's own); the adapter allows {}",
                        unit.program, unit.kernel.name, limits.max_compute_workgroup_storage_size
                    ),
                });
            }
        }
        Ok(())
    }

    fn compile_cached(
        &self,
        plan: &LaunchPlan,
        mode: Mode,
    ) -> Result<Arc<CompiledModule>, RunError> {
        let options = self.plan_emit_options(plan, mode);
        let key = format!("{options:?}\n{plan:?}");
        if let Some(m) = self
            .ctx
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key.as_str())
        {
            return Ok(m.clone());
        }
        let emitted = emit_module(plan, &options).map_err(|e| match e {
            EmitError::TooManyBlocks { .. }
            | EmitError::TooManyBindings { .. }
            | EmitError::TooManyDispatches { .. } => RunError::Refused {
                reason: e.to_string(),
            },
            EmitError::TooDeep { .. } | EmitError::WarpOutsideBlockUniformControl { .. } => {
                RunError::Unsupported {
                    reason: e.to_string(),
                }
            }
            other => RunError::Backend(other.to_string()),
        })?;
        let limits = &self.ctx.limits;
        for b in &emitted.layout.bindings {
            let bytes = b.words * 4;
            let max = limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size);
            if bytes > max {
                return Err(RunError::Refused {
                    reason: format!(
                        "buffer of `{}` needs {bytes} bytes; the adapter binds at most {max} bytes per storage buffer",
                        b.members
                            .iter()
                            .flat_map(|&(i, _)| plan.buffer(i).operands.iter().map(|n| n.as_str()))
                            .collect::<Vec<_>>()
                            .join("`, `")
                    ),
                });
            }
        }
        let device = self.ctx.device.clone();
        let label = plan.map.name.clone();
        // naga and the driver compile here; on lavapipe a 1 KB checked-mode
        // module can take minutes (every bounds check inlines the error
        // report), so the compile runs on its own thread and the run waits
        // for it at most until its deadline.
        let compile = move || -> Result<CompiledModule, RunError> {
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(emitted.wgsl.as_str().into()),
            });
            let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            };
            let mut entries = vec![
                storage(PARAMS_BINDING, true),
                storage(STATUS_BINDING, false),
            ];
            for b in &emitted.layout.bindings {
                entries.push(storage(b.binding, false));
            }
            let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("mpmd operands"),
                entries: &entries,
            });
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some("mpmd"),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let pipelines = emitted
                .schedule
                .iter()
                .map(|step| {
                    let entry = step.entry_point.as_str();
                    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(entry),
                        layout: Some(&pipeline_layout),
                        module: &module,
                        entry_point: Some(entry),
                        compilation_options: Default::default(),
                        cache: None,
                    })
                })
                .collect();
            if let Some(err) = pollster::block_on(scope.pop()) {
                return Err(RunError::Backend(format!(
                    "wgpu rejected the generated shader: {err}\n{}",
                    emitted.wgsl
                )));
            }
            Ok(CompiledModule {
                emitted,
                layout,
                pipelines,
            })
        };
        let compiled = Arc::new(match self.deadline {
            None => compile()?,
            Some((at, limit)) => {
                let (done, result) = std::sync::mpsc::channel();
                std::thread::Builder::new()
                    .name("mpmd-wgsl-compile".into())
                    // Deeply nested modules need stack in naga and the driver.
                    .stack_size(256 << 20)
                    .spawn(move || {
                        let _ = done.send(compile());
                    })
                    .map_err(|e| RunError::Backend(format!("cannot start the compile: {e}")))?;
                match result.recv_timeout(at.saturating_duration_since(std::time::Instant::now())) {
                    Ok(compiled) => compiled?,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        return Err(time_limit(
                            "compiling the WGSL pipelines (the compile goes on in the background)",
                            limit,
                        ))
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(RunError::Backend("the WGSL compile stopped".into()))
                    }
                }
            }
        });
        self.ctx
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, compiled.clone());
        Ok(compiled)
    }

    fn resident_buffer(
        &mut self,
        name: &str,
        plan: &LaunchPlan,
        buf: &BufferPlan,
    ) -> Result<wgpu::Buffer, RunError> {
        if let Some(r) = self.residents.get(name) {
            if r.elem != buf.ty.elem {
                return Err(RunError::BadArguments(format!(
                    "resident `{name}` holds `{}` elements but this map binds it as `{}`",
                    r.elem, buf.ty.elem
                )));
            }
            if r.elements != buf.len {
                return Err(RunError::BadArguments(format!(
                    "resident `{name}` has {} elements but this map binds it as {}",
                    r.elements, buf.len
                )));
            }
            return Ok(r.buffer.clone());
        }
        // New buffers are zero-filled by wgpu: a fresh resident starts at zero.
        let words = buffer_words(buf);
        let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(name),
            size: words.max(1) * 4,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.residents.insert(
            name.to_string(),
            ResidentBuffer {
                buffer: buffer.clone(),
                elem: buf.ty.elem,
                shape: plan.host_shape(buf),
                elements: buf.len,
                words,
            },
        );
        Ok(buffer)
    }

    fn read_words(&self, buffers: &[(&wgpu::Buffer, u64, u64)]) -> Result<Vec<Vec<u32>>, RunError> {
        // (buffer, byte offset, words) -> words, through mapped staging buffers.
        let device = &self.ctx.device;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("mpmd readback"),
        });
        let staging = self.stage_reads(&mut encoder, buffers);
        self.ctx.queue.submit([encoder.finish()]);
        let words = map_and_read(
            device,
            &staging,
            buffers.iter().map(|b| b.2).collect(),
            None,
        );
        self.pool.put(staging);
        words
    }

    /// Staging buffers (from the pool) and the copies into them, for
    /// `(buffer, byte offset, words)` reads.
    fn stage_reads(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        buffers: &[(&wgpu::Buffer, u64, u64)],
    ) -> Vec<wgpu::Buffer> {
        let device = &self.ctx.device;
        buffers
            .iter()
            .map(|&(src, offset, words)| {
                let dst = self
                    .pool
                    .take(device, "mpmd staging", words * 4, STAGING_USAGE);
                if words > 0 {
                    encoder.copy_buffer_to_buffer(src, offset, &dst, 0, words * 4);
                }
                dst
            })
            .collect()
    }
}

/// Maps `staging` and reads `words` words of each; with a `deadline`, a
/// submission that has not finished by then is a time-limit error.
fn map_and_read(
    device: &wgpu::Device,
    staging: &[wgpu::Buffer],
    words: Vec<u64>,
    deadline: Deadline,
) -> Result<Vec<Vec<u32>>, RunError> {
    type MapResults = Arc<Mutex<Vec<Option<Result<(), String>>>>>;
    let results: MapResults = Arc::new(Mutex::new(vec![None; staging.len()]));
    for (i, buf) in staging.iter().enumerate() {
        let results = results.clone();
        buf.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            results.lock().unwrap_or_else(|e| e.into_inner())[i] =
                Some(r.map_err(|e| e.to_string()));
        });
    }
    // Another thread polling the same device may be the one that runs our
    // callbacks: wait until they have all arrived, not only until our poll returns.
    let start = std::time::Instant::now();
    let results = loop {
        let poll = match deadline {
            None => wgpu::PollType::wait_indefinitely(),
            Some((at, _)) => wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(at.saturating_duration_since(std::time::Instant::now())),
            },
        };
        match (device.poll(poll), deadline) {
            (Ok(_), _) => {}
            (Err(wgpu::PollError::Timeout), Some((_, limit))) => {
                return Err(time_limit(
                    "waiting for the dispatches (lavapipe compiles shaders at the first one; they go on on the device)",
                    limit,
                ))
            }
            (Err(e), _) => {
                return Err(RunError::Backend(format!(
                    "waiting for the device failed: {e}"
                )))
            }
        }
        let done = results.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if done.iter().all(Option::is_some) || start.elapsed() > std::time::Duration::from_secs(60)
        {
            break done;
        }
        std::thread::yield_now();
    };
    let mut out = Vec::new();
    for ((buf, r), n) in staging.iter().zip(results).zip(words) {
        match r {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return Err(RunError::Backend(format!(
                    "reading results back failed: {e}"
                )))
            }
            None => {
                return Err(RunError::Backend(
                    "reading results back did not finish".into(),
                ))
            }
        }
        let view = buf
            .get_mapped_range(..)
            .map_err(|e| RunError::Backend(format!("reading results back failed: {e}")))?;
        let words: &[u32] = bytemuck::cast_slice(&view);
        out.push(words[..n as usize].to_vec());
        drop(view);
        buf.unmap();
    }
    Ok(out)
}

/// 32-bit words of a plan buffer's device storage.
fn buffer_words(buf: &BufferPlan) -> u64 {
    words_for(buf.ty.elem, buf.len)
}

impl WgpuBackend {
    /// Prepares `plan` to run in `mode` on this backend's device: checks it
    /// against the adapter (refusals are the host-copy path's), compiles it
    /// (through the device's pipeline cache) and allocates the memory its
    /// runs need besides the caller's buffers. Run it with
    /// [`WgpuBackend::enqueue`].
    pub fn prepare(&mut self, plan: &LaunchPlan, mode: Mode) -> Result<WgpuPrepared, RunError> {
        self.start_clock();
        Ok(WgpuPrepared {
            map: self.prepare_map(plan, mode)?,
        })
    }

    fn prepare_map(&self, plan: &LaunchPlan, mode: Mode) -> Result<Arc<PreparedMap>, RunError> {
        self.refuse_if_needed(plan)?;
        let compiled = self.compile_cached(plan, mode)?;
        let emitted = &compiled.emitted;
        let device = &self.ctx.device;
        let create = |label: &str, words: u64, usage: wgpu::BufferUsages| {
            // New buffers are zero-filled by wgpu.
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: words.max(1) * 4,
                usage,
                mapped_at_creation: false,
            })
        };
        let params_words = emitted.scalar_slots.len() + emitted.literal_words.len();
        let params = create(
            "mpmd params",
            params_words as u64,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        );
        let status = create("mpmd status", STATUS_WORDS as u64, STORAGE_USAGE);
        let own = emitted
            .layout
            .bindings
            .iter()
            .map(|binding| {
                if emitted.layout.packed {
                    return Some(create(&binding.global, binding.words, STORAGE_USAGE));
                }
                let buffer = plan.buffer(binding.members[0].0);
                (provider(buffer) == Provider::Backend).then(|| {
                    create(
                        &buffer.operands.join("="),
                        buffer_words(buffer),
                        STORAGE_USAGE,
                    )
                })
            })
            .collect();
        Ok(Arc::new(PreparedMap {
            ctx: self.ctx.clone(),
            plan: plan.clone(),
            mode,
            compiled,
            params,
            status,
            own,
            status_dirty: AtomicBool::new(false),
        }))
    }

    /// Runs `prepared` once on the caller's buffers: `args` binds a buffer
    /// to every input and output of the map (and may bind one to a
    /// device-resident operand, otherwise the backend's resident is used)
    /// and gives every scalar. Each buffer is checked against its operand
    /// (element type, element count, size and usage; a mismatch is
    /// [`RunError::BadArguments`] and nothing runs). The work is submitted
    /// to the backend's queue and not waited for: later submissions to the
    /// queue see its results. An error the run records (an out-of-bounds
    /// access in checked mode, a wait that timed out) is reported by the
    /// next [`WgpuBackend::synchronize`].
    pub fn enqueue(
        &mut self,
        prepared: &WgpuPrepared,
        args: &DeviceArgs<WgpuBuffer>,
    ) -> Result<(), RunError> {
        let map = prepared.map.clone();
        if !Arc::ptr_eq(&map.ctx, &self.ctx) {
            return Err(RunError::BadArguments(format!(
                "map `{}` was prepared on another device than this backend's",
                map.plan.map.name
            )));
        }
        let given = bind(&map.plan, &args.buffers)?;
        let packed = map.compiled.emitted.layout.packed;
        for (buffer, given) in map.plan.buffers.iter().zip(&given) {
            if let Some(given) = given {
                check_caller_buffer(&map.plan, buffer, given, packed)?;
            }
        }
        let params = params_words(&map.compiled.emitted, &args.scalars)?;
        let bound: Vec<Option<&wgpu::Buffer>> =
            given.iter().map(|g| g.map(|b| &b.buffer)).collect();
        let scope = self
            .ctx
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let encoder = self.encode(&map, &bound, &params)?;
        self.ctx.queue.submit([encoder.finish()]);
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(RunError::Backend(format!(
                "wgpu rejected the launch: {err}"
            )));
        }
        if !self.pending.iter().any(|p| Arc::ptr_eq(p, &map)) {
            self.pending.push(map);
        }
        Ok(())
    }

    /// Waits until the device has finished everything submitted to the
    /// queue, then reports the first error recorded by a run enqueued since
    /// the last synchronisation (runs in the order they were enqueued). A
    /// map whose run recorded an error starts clean at its next run.
    pub fn synchronize(&mut self) -> Result<(), RunError> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            self.ctx
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| RunError::Backend(format!("waiting for the device failed: {e}")))?;
            return Ok(());
        }
        let reads: Vec<(&wgpu::Buffer, u64, u64)> = pending
            .iter()
            .map(|map| (&map.status, 0, STATUS_WORDS as u64))
            .collect();
        let statuses = self.read_words(&reads)?;
        let mut first = None;
        for (map, status) in pending.iter().zip(statuses) {
            if status[0] != 0 {
                map.status_dirty.store(true, Ordering::Relaxed);
                if first.is_none() {
                    first = Some(self.decode_error(&map.plan, &map.compiled.emitted, &status));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The prepared map of `plan` for [`Backend::run`], from the run cache.
    fn run_prepared(
        &mut self,
        plan: &LaunchPlan,
        mode: Mode,
    ) -> Result<Arc<PreparedMap>, RunError> {
        if let Some(index) = self
            .run_cache
            .iter()
            .position(|p| p.mode == mode && p.plan == *plan)
        {
            self.run_cache[..=index].rotate_right(1);
            return Ok(self.run_cache[0].clone());
        }
        let map = self.prepare_map(plan, mode)?;
        self.run_cache.insert(0, map.clone());
        self.run_cache.truncate(RUN_CACHE_CAPACITY);
        Ok(map)
    }

    /// Records one run of `map` into a new command encoder: parameters
    /// written, status and zero-started buffers cleared, caller buffers
    /// (`bound`, per plan buffer) and residents bound or copied into the
    /// packed arenas, every dispatch in schedule order, and outputs and
    /// residents copied out of the arenas. The caller submits it (inside an
    /// error scope it pushed first).
    fn encode(
        &mut self,
        map: &PreparedMap,
        bound: &[Option<&wgpu::Buffer>],
        params_words: &[u32],
    ) -> Result<wgpu::CommandEncoder, RunError> {
        let plan = &map.plan;
        let emitted = &map.compiled.emitted;
        // Queue writes land before the next submission's commands.
        self.ctx
            .queue
            .write_buffer(&map.params, 0, bytemuck::cast_slice(params_words));
        // Each buffer a run uses besides the backend's own: the caller's, or a resident.
        let mut sources: Vec<Option<wgpu::Buffer>> = Vec::with_capacity(plan.buffers.len());
        for (buffer, given) in plan.buffers.iter().zip(bound) {
            sources.push(match (given, &buffer.init) {
                (Some(given), _) => Some((*given).clone()),
                (None, BufferInit::Resident(name)) => {
                    Some(self.resident_buffer(name, plan, buffer)?)
                }
                (None, _) => None,
            });
        }
        let device = &self.ctx.device;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("mpmd call"),
        });
        if map.status_dirty.swap(false, Ordering::Relaxed) {
            encoder.clear_buffer(&map.status, 0, None);
        } else {
            encoder.clear_buffer(&map.status, TICKET_WORD as u64 * 4, Some(4));
        }
        let missing = |index: BufferId| {
            RunError::Backend(format!(
                "internal: plan buffer {index} (`{}`) has no memory",
                plan.buffer(index).operands.join("=")
            ))
        };
        let mut binding_buffers = Vec::with_capacity(emitted.layout.bindings.len());
        let mut copy_back: Vec<(wgpu::Buffer, u64, wgpu::Buffer, u64)> = Vec::new();
        for (binding, own) in emitted.layout.bindings.iter().zip(&map.own) {
            if !emitted.layout.packed {
                let (index, _) = binding.members[0];
                let buf = plan.buffer(index);
                let buffer = sources[index.index()]
                    .clone()
                    .or_else(|| own.clone())
                    .ok_or_else(|| missing(index))?;
                let words = buffer_words(buf);
                if buf.init == BufferInit::Zeroed && words > 0 {
                    encoder.clear_buffer(&buffer, 0, Some(words * 4));
                }
                binding_buffers.push(buffer);
                continue;
            }
            let arena = own.clone().ok_or_else(|| missing(binding.members[0].0))?;
            for &(index, offset) in &binding.members {
                let buf = plan.buffer(index);
                let bytes = buffer_words(buf) * 4;
                if bytes == 0 {
                    continue;
                }
                match (&buf.init, &sources[index.index()]) {
                    (BufferInit::Zeroed, _) => {
                        encoder.clear_buffer(&arena, offset * 4, Some(bytes));
                    }
                    (BufferInit::Input(_) | BufferInit::Resident(_), Some(source)) => {
                        encoder.copy_buffer_to_buffer(source, 0, &arena, offset * 4, bytes);
                    }
                    _ => {}
                }
                if let Some(source) = &sources[index.index()] {
                    let written =
                        buf.output.is_some() || matches!(buf.init, BufferInit::Resident(_));
                    if written {
                        copy_back.push((arena.clone(), offset * 4, source.clone(), bytes));
                    }
                }
            }
            binding_buffers.push(arena);
        }
        let mut entries = vec![
            wgpu::BindGroupEntry {
                binding: PARAMS_BINDING,
                resource: map.params.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: STATUS_BINDING,
                resource: map.status.as_entire_binding(),
            },
        ];
        for (binding, buffer) in emitted.layout.bindings.iter().zip(&binding_buffers) {
            entries.push(wgpu::BindGroupEntry {
                binding: binding.binding,
                resource: buffer.as_entire_binding(),
            });
        }
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("mpmd operands"),
            layout: &map.compiled.layout,
            entries: &entries,
        });
        // One dispatch per launch unit, in plan order, with the semaphore
        // dispatches between them: dispatch boundaries are WGSL's only
        // ordering between workgroups.
        // A block-split unit repeats its one-workgroup dispatch once per
        // block; each takes the next ticket, so the blocks run in order.
        for (pipeline, step) in map.compiled.pipelines.iter().zip(&emitted.schedule) {
            let dims = step.workgroups;
            for _ in 0..step.repeat {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(&step.entry_point),
                    timestamp_writes: None,
                });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(dims[0], dims[1], dims[2]);
            }
        }
        for (arena, offset, target, bytes) in &copy_back {
            encoder.copy_buffer_to_buffer(arena, *offset, target, 0, *bytes);
        }
        Ok(encoder)
    }
}

/// The parameter buffer's words: the scalars, each checked against its
/// operand, then the run-time literals.
fn params_words(
    emitted: &EmittedModule,
    scalars: &BTreeMap<Name, Literal>,
) -> Result<Vec<u32>, RunError> {
    let mut words = Vec::with_capacity(emitted.scalar_slots.len());
    for (name, ty) in &emitted.scalar_slots {
        words.push(mpmd_core::host::scalar(scalars, name, *ty)?.to_bits());
    }
    Ok(emitted.params_words(&words))
}

/// A caller's buffer checked against the plan buffer it is bound to: large
/// enough for the packed elements (whole 4-byte words) and with the usages
/// the run needs.
fn check_caller_buffer(
    plan: &LaunchPlan,
    buffer: &BufferPlan,
    given: &WgpuBuffer,
    packed: bool,
) -> Result<(), RunError> {
    let name = buffer.operands.join("`/`");
    let map = &plan.map.name;
    let bytes = buffer_words(buffer) * 4;
    if given.buffer.size() < bytes {
        return Err(RunError::BadArguments(format!(
            "`{name}` of map `{map}` needs a buffer of at least {bytes} bytes ({} `{}` elements in 4-byte words); the buffer given has {} bytes",
            buffer.len,
            buffer.ty.elem,
            given.buffer.size()
        )));
    }
    let usage = given.buffer.usage();
    let mut needed = wgpu::BufferUsages::empty();
    if packed {
        if matches!(buffer.init, BufferInit::Input(_) | BufferInit::Resident(_)) {
            needed |= wgpu::BufferUsages::COPY_SRC;
        }
        if buffer.output.is_some() || matches!(buffer.init, BufferInit::Resident(_)) {
            needed |= wgpu::BufferUsages::COPY_DST;
        }
    } else {
        needed |= wgpu::BufferUsages::STORAGE;
        if buffer.init == BufferInit::Zeroed {
            needed |= wgpu::BufferUsages::COPY_DST;
        }
    }
    if !usage.contains(needed) {
        return Err(RunError::BadArguments(format!(
            "`{name}` of map `{map}` needs a buffer with usage {needed:?}; the buffer given has {usage:?}"
        )));
    }
    Ok(())
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    /// The host-copy path: prepares `plan` (once; the run cache keeps it),
    /// uploads the inputs into pooled buffers, runs it as
    /// [`WgpuBackend::enqueue`] does, and reads the outputs and the status
    /// back in the same submission. Errors of runs enqueued earlier are
    /// reported first.
    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        if !self.pending.is_empty() {
            self.synchronize()?;
        }
        self.start_clock();
        let map = self.run_prepared(plan, options.mode)?;
        let params = params_words(&map.compiled.emitted, &args.scalars)?;
        for buf in &plan.buffers {
            if let BufferInit::Input(name) = &buf.init {
                args.input(name, buf.ty.elem, buf.len)?;
            }
        }
        // The caller's buffers come from the pool (stale contents: the run
        // clears what must start at zero) and go back to it after the call.
        let ctx = self.ctx.clone();
        let mut lent: Vec<wgpu::Buffer> = Vec::new();
        let mut bound: Vec<Option<wgpu::Buffer>> = Vec::with_capacity(plan.buffers.len());
        for buf in &plan.buffers {
            if provider(buf) != Provider::Caller {
                bound.push(None);
                continue;
            }
            let words = buffer_words(buf);
            let buffer = self.pool.take(
                &ctx.device,
                &buf.operands.join("="),
                words * 4,
                STORAGE_USAGE,
            );
            if let BufferInit::Input(name) = &buf.init {
                if words > 0 {
                    ctx.queue.write_buffer(
                        &buffer,
                        0,
                        bytemuck::cast_slice(args.inputs[name].words()),
                    );
                }
            }
            lent.push(buffer.clone());
            bound.push(Some(buffer));
        }
        let bound_refs: Vec<Option<&wgpu::Buffer>> = bound.iter().map(Option::as_ref).collect();
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self.encode(&map, &bound_refs, &params)?;
        // The status and every output come back in the same submission.
        let mut reads: Vec<(&wgpu::Buffer, u64, u64)> = vec![(&map.status, 0, STATUS_WORDS as u64)];
        let mut outputs = Vec::new();
        for (index, buf) in plan.buffers.iter().enumerate() {
            let Some(name) = &buf.output else { continue };
            let source = match (&bound[index], &buf.init) {
                (Some(buffer), _) => buffer,
                (None, BufferInit::Resident(resident)) => &self.residents[resident].buffer,
                (None, _) => {
                    return Err(RunError::Backend(format!(
                        "internal: output `{name}` has no buffer"
                    )))
                }
            };
            reads.push((source, 0, buffer_words(buf)));
            outputs.push((name.clone(), buf));
        }
        let staging = self.stage_reads(&mut encoder, &reads);
        let lengths: Vec<u64> = reads.iter().map(|r| r.2).collect();
        ctx.queue.submit([encoder.finish()]);
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(RunError::Backend(format!(
                "wgpu rejected the launch: {err}"
            )));
        }
        let words = map_and_read(&ctx.device, &staging, lengths, self.deadline);
        self.pool.put(staging);
        self.pool.put(lent);
        let mut words = words?;
        let status_words = words.remove(0);
        if status_words[0] != 0 {
            map.status_dirty.store(true, Ordering::Relaxed);
            return Err(self.decode_error(plan, &map.compiled.emitted, &status_words));
        }
        let mut result = CallOutputs::default();
        for ((name, buf), data) in outputs.into_iter().zip(words) {
            // Packed words; the padding half of an odd-length 16-bit buffer is dropped.
            let tensor = HostTensor::from_words(buf.ty.elem, plan.host_shape(buf), data)
                .map_err(|e| RunError::Backend(format!("output `{name}`: {e}")))?;
            result.outputs.insert(name, tensor);
        }
        Ok(result)
    }

    fn set_resident(&mut self, name: &str, tensor: HostTensor) -> Result<(), RunError> {
        let words = tensor.words().len() as u64;
        let buffer = match self.residents.get(name) {
            Some(r) if r.words == words => r.buffer.clone(),
            _ => self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(name),
                size: words.max(1) * 4,
                usage: STORAGE_USAGE,
                mapped_at_creation: false,
            }),
        };
        // Queue writes land before any later submission: the next call sees them.
        if words > 0 {
            self.ctx
                .queue
                .write_buffer(&buffer, 0, bytemuck::cast_slice(tensor.words()));
        }
        self.residents.insert(
            name.to_string(),
            ResidentBuffer {
                buffer,
                elem: tensor.elem(),
                shape: tensor.shape().to_vec(),
                elements: tensor.len() as u64,
                words,
            },
        );
        Ok(())
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        let r = self.residents.get(name)?;
        let words = self.read_words(&[(&r.buffer, 0, r.words)]).ok()?.pop()?;
        HostTensor::from_words(r.elem, r.shape.clone(), words).ok()
    }
}

impl WgpuBackend {
    fn decode_error(&self, plan: &LaunchPlan, emitted: &EmittedModule, status: &[u32]) -> RunError {
        let kind = status[1];
        // A wait's record may leave the unit out (see `mpmd_take_*`): its site names it.
        let unit_index = match (kind, emitted.sites.get(status[5] as usize)) {
            (ERROR_WAIT_TIMEOUT, Some(site)) => site.unit,
            _ => UnitId::new(status[2] as usize),
        };
        let block = status[3] as u64;
        let thread = status[4];
        let site_index = status[5] as usize;
        let count = (status[6] as usize).min(MAX_RECORDED_VALUES);
        let values = &status[7..7 + MAX_RECORDED_VALUES];
        // An unknown unit (a corrupt record) is reported under its number.
        let (program, kernel) = plan
            .units
            .get(unit_index.index())
            .map(|u| (u.program, u.kernel.name.clone()))
            .unwrap_or((ProgramId::new(unit_index.index()), String::from("?")));
        let site = |thread: Option<u32>| Site {
            program,
            kernel: kernel.clone(),
            block,
            thread,
        };
        let list = |v: &[u32]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match kind {
            ERROR_OUT_OF_BOUNDS => {
                let Some(access) = emitted.sites.get(site_index) else {
                    return RunError::Backend(format!(
                        "out-of-bounds record names unknown site {site_index}"
                    ));
                };
                let coords: Vec<String> = values[..count]
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| {
                        if access.signed.get(k).copied().unwrap_or(false) {
                            (v as i32).to_string()
                        } else {
                            v.to_string()
                        }
                    })
                    .collect();
                let nb = access.block_extents.len().min(coords.len());
                let index = if nb > 0 {
                    format!(
                        "@[{}][{}]",
                        coords[..nb].join(", "),
                        coords[nb..].join(", ")
                    )
                } else {
                    format!("[{}]", coords.join(", "))
                };
                let shape = if access.block_extents.is_empty() {
                    format!("[{}]", list(&access.shape))
                } else {
                    format!(
                        "@[{}][{}]",
                        list(&access.block_extents),
                        list(&access.shape)
                    )
                };
                RunError::OutOfBounds {
                    site: site(Some(thread)),
                    reference: access.reference.clone(),
                    index,
                    shape,
                }
            }
            ERROR_WAIT_TIMEOUT => {
                let semaphore = emitted
                    .sites
                    .get(site_index)
                    .map(|s| {
                        describe_sem_element(plan, emitted, &s.reference, unit_index, values[0])
                    })
                    .unwrap_or_else(|| format!("site {site_index}"));
                let reference = emitted.sites.get(site_index).map(|s| s.reference.as_str());
                let own = plan.units.get(unit_index.index()).and_then(|u| {
                    let name = format!("program {} `{}`", u.program, u.kernel.name);
                    Some(signallers(plan, unit_index, reference?)?.contains(&name))
                });
                let options = self.plan_emit_options(plan, Mode::Fast);
                if own == Some(true) && is_split_unit(plan, &options, unit_index) {
                    RunError::Unsupported {
                        reason: format!(
                            "{} waits on `{semaphore}`, which its own program signals, and the count was \
                             short when it ran: it waits on a block that has not run before it (or on a signal \
                             that never comes). Without co-residency this backend runs the program's blocks \
                             one dispatch each in linear block order, so a block may only wait on blocks with \
                             a lower linear id; no order of dispatches carries this wait. Otherwise the \
                             program must run {}",
                            site(None),
                            self.co_residency_advice(plan)
                        ),
                    }
                } else if fuses_programs(plan, &options) {
                    RunError::WaitTimeout {
                        site: site(None),
                        semaphore,
                    }
                } else {
                    // Every signaller ran in an earlier dispatch: the count can never grow.
                    let why = match reference.and_then(|r| signallers(plan, unit_index, r)) {
                        Some(names) if names.is_empty() => {
                            "no program of this call signals it, so it holds only what it \
                             started the call with"
                                .to_string()
                        }
                        // The interpreter's words, so both backends report alike.
                        _ => "every program that signals it has finished".to_string(),
                    };
                    RunError::Deadlock {
                        wait_for_graph: format!(
                            "{} waits on `{semaphore}`, whose count is too low and can no longer grow: {why}",
                            site(None)
                        ),
                    }
                }
            }
            ERROR_LOOP_LIMIT => {
                let ordinal = values[0];
                let condition = plan
                    .units
                    .get(unit_index.index())
                    .and_then(|u| {
                        let loops = mpmd_core::ir::visit::while_loops(&u.kernel.body);
                        match loops.get(ordinal as usize) {
                            Some(mpmd_core::ir::Stmt::While { cond, .. }) => {
                                Some(mpmd_core::text::print_expr(cond))
                            }
                            _ => None,
                        }
                    })
                    .unwrap_or_default();
                RunError::LoopLimit {
                    site: site(Some(thread)),
                    ordinal,
                    condition,
                    max: values[1],
                }
            }
            ERROR_SEM_AMOUNT => {
                let semaphore = emitted
                    .sites
                    .get(site_index)
                    .map(|s| {
                        describe_sem_element(plan, emitted, &s.reference, unit_index, values[0])
                    })
                    .unwrap_or_else(|| format!("site {site_index}"));
                let amount = if values[2] != 0 {
                    values[1] as i64
                } else {
                    values[1] as i32 as i64
                };
                RunError::BadSemaphoreAmount {
                    site: site(None),
                    semaphore,
                    amount,
                }
            }
            ERROR_SUBGROUP_NOT_WARP => RunError::Unsupported {
                reason: format!(
                    "the adapter's subgroups are not the logical warps: {} ran in a subgroup of {} invocation(s) \
                     as its invocation {}{}, where native warp collectives need every logical warp (threads \
                     32w to 32w + 31) to be one whole subgroup, thread 32w + l its invocation l. The warp \
                     collectives' results would be wrong; WgpuOptions::warps = Some(WarpPath::Emulated) runs \
                     them through workgroup memory instead",
                    site(Some(thread)),
                    values[0],
                    values[1],
                    if values[2] == 0 {
                        ", and its subgroup did not hold exactly its warp's 32 threads"
                    } else {
                        ""
                    }
                ),
            },
            ERROR_LOOP_CAP => {
                let cap = self
                    .emit_options(Mode::Fast)
                    .loop_cap
                    .unwrap_or(LLVMPIPE_LOOP_CAP);
                let (used, needed) = (values[0] as u64, values[1] as u64);
                RunError::Unsupported {
                    reason: format!(
                        "one invocation's loops need {} loop-header visits, more than the {cap} this backend \
                         allows ({}; it had used {used} when the next loop needed {needed}). Every loop \
                         iteration costs a visit and every loop one more for its exit test, and so does every \
                         poll of a semaphore wait that waits on a workgroup of the same dispatch; the loops \
                         under a branch that threads may take differently are charged up front, both branches \
                         included. \
                         {} silently ends an invocation's loops after about 65,535 visits, so the result would \
                         be wrong (WgpuOptions::loop_cap sets the allowance)",
                        used + needed,
                        site(Some(thread)),
                        self.ctx.info.name
                    ),
                }
            }
            other => RunError::Backend(format!("unknown error record kind {other}")),
        }
    }
}

/// The programs whose kernels signal the buffer that unit `unit` names
/// `reference`; `None` when the unit or the buffer is unknown.
fn signallers(plan: &LaunchPlan, unit: UnitId, reference: &str) -> Option<Vec<String>> {
    let u = plan.units.get(unit.index())?;
    let buffer = plan.param_buffer(u, reference)?;
    let names = plan
        .units
        .iter()
        .filter(|other| {
            let mut signals = false;
            mpmd_core::ir::visit::for_each_stmt(&other.kernel.body, &mut |stmt| {
                if let Stmt::Sem {
                    op: SemOp::Signal,
                    sem,
                    ..
                } = stmt
                {
                    signals |= plan.param_buffer(other, &sem.base) == Some(buffer);
                }
            });
            signals
        })
        .map(|other| format!("program {} `{}`", other.program, other.kernel.name))
        .collect();
    Some(names)
}

/// `name[i]` or `name@[c...][i...]` for a flat word index into a semaphore's binding.
fn describe_sem_element(
    plan: &LaunchPlan,
    emitted: &EmittedModule,
    reference: &str,
    unit: UnitId,
    word: u32,
) -> String {
    // Find the buffer: the unit's kernel names the param; map it to the operand.
    let Some(u) = plan.units.get(unit.index()) else {
        return reference.to_string();
    };
    let Some(buffer) = plan.param_buffer(u, reference) else {
        return reference.to_string();
    };
    let buf = plan.buffer(buffer);
    let (_, offset) = emitted.layout.place(buffer);
    let local = (word as u64).saturating_sub(offset);
    let len = buf.ty.len().max(1);
    let instance = local / len;
    let mut element = local % len;
    let mut index = vec![0u64; buf.ty.shape.len()];
    for (k, &d) in buf.ty.shape.iter().enumerate().rev() {
        index[k] = element % d.max(1) as u64;
        element /= d.max(1) as u64;
    }
    match buf.ty.owner.as_ref().and_then(|m| plan.mesh(m)) {
        Some(mesh) if buf.ty.space == MemorySpace::Sem || buf.ty.space == MemorySpace::Gmem => {
            let extents: Vec<u64> = mesh.block_axes().map(|a| a.size as u64).collect();
            let mut rest = instance;
            let mut coords = vec![0u64; extents.len()];
            for (k, &d) in extents.iter().enumerate().rev() {
                coords[k] = rest % d.max(1);
                rest /= d.max(1);
            }
            mpmd_core::backend::element_text(reference, &coords, &index)
        }
        _ => mpmd_core::backend::element_text(reference, &[] as &[u64], &index),
    }
}
