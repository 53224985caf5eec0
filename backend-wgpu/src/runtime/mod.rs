//! Running emitted modules through wgpu.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use mpmd_core::backend::RunError;
use mpmd_core::bind::DeviceMemory;
use mpmd_core::ir::{Name, ScalarType};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;
use thiserror::Error;

use crate::emit::{F16Conversions, WarpPath};

mod cache;
mod device;
mod errors;
mod launch;
mod prepared;

use cache::{BufferPool, CompiledModule, ResidentBuffer};
use device::GpuContext;

/// Compiled modules (WGSL, bind group layout, pipelines) a device keeps, the
/// least recently used going first: a process that runs many distinct maps
/// holds at most this many. A prepared map keeps its own module alive
/// whatever the cache does.
pub const PIPELINE_CACHE_CAPACITY: usize = 64;

/// Prepared maps a backend keeps for [`Backend::run`](mpmd_core::Backend::run) (the host-copy path),
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
    /// qualifies ([`WarpChoice::for_adapter`](crate::WarpChoice::for_adapter)); `Some(WarpPath::Emulated)`
    /// through workgroup memory everywhere; `Some(WarpPath::Native)` on
    /// subgroups wherever the device has them, for tests: where the
    /// subgroups are not the logical warps, a run that uses them fails with
    /// the run-time check's `Unsupported` error ([`WgpuBackend::warp_path`]).
    pub warps: Option<WarpPath>,
    /// How f16 values convert to and from f32: `None` (the default) as the
    /// adapter's probe decides ([`WgpuBackend::f16_conversions`]);
    /// `Some(..)` forces either, for tests (native on an adapter whose
    /// conversions are not the language's gives wrong f16 results).
    pub f16_conversions: Option<F16Conversions>,
    /// Wall-clock bound on one [`Backend::run`](mpmd_core::Backend::run) (compiling the pipelines,
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

/// What the backend established about workgroups running at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Residency {
    /// Workgroups of one dispatch that are known to run at once (0: none
    /// established, the adapter gives no guarantee).
    pub workgroups: u32,
    /// How it was established, or why not, for messages and reports.
    pub how: String,
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
    /// The maps [`Backend::run`](mpmd_core::Backend::run) prepared, most recently used first (at most
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
