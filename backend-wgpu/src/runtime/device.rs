//! The device: the process's default adapter or the caller's, what it supports
//! (limits, subgroups, co-residency) and the checks of a plan against it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use mpmd_core::backend::RunError;
use mpmd_core::host::words_for;
use mpmd_core::lru::Lru;
use mpmd_core::plan::{LaunchPlan, UnitId};
use mpmd_core::Mode;

use super::cache::{BufferPool, CompiledModule};
use super::{
    AdapterInfo, Residency, WgpuBackend, WgpuError, WgpuOptions, LLVMPIPE_LOOP_CAP,
    PIPELINE_CACHE_CAPACITY,
};
use crate::emit::{
    emit_module, fused_workgroup_size, fused_workgroups, fuses_programs, own_workgroup_bytes,
    splits_blocks, EmitError, EmitOptions, F16Conversions, WarpPath,
};
use crate::f16_conversions::F16Choice;
use crate::subgroups::{SubgroupFacts, WarpChoice};

/// One device with its pipeline cache: the process's default device, shared
/// by every backend value [`WgpuBackend::new`] makes, or a caller's
/// ([`WgpuBackend::from_device`]).
pub(super) struct GpuContext {
    pub(super) info: AdapterInfo,
    pub(super) limits: wgpu::Limits,
    pub(super) llvmpipe: bool,
    /// What the device says about its subgroups (the warp path's input).
    pub(super) subgroups: SubgroupFacts,
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
    pub(super) modules: Mutex<Lru<String, Arc<CompiledModule>>>,
    /// Workgroups this adapter is established to run at once (measured on
    /// first need; see [`WgpuBackend::resident_workgroups`]).
    pub(super) residency: OnceLock<Residency>,
    /// The warp path the adapter qualifies for (decided on first need; see
    /// [`WgpuBackend::warp_path`]).
    pub(super) warps: OnceLock<WarpChoice>,
    /// The f16 conversions the adapter qualifies for (probed on the first
    /// plan with f16 values; see [`WgpuBackend::f16_conversions`]).
    pub(super) f16: OnceLock<F16Choice>,
}

pub(super) fn context() -> Result<Arc<GpuContext>, WgpuError> {
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

pub(super) fn create_context() -> Result<GpuContext, WgpuError> {
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
        f16: OnceLock::new(),
    })
}

/// A context on a device and queue the caller made (its limits are the
/// device's own; its uncaptured-error handler stays the caller's).
pub(super) fn context_on(device: wgpu::Device, queue: wgpu::Queue) -> GpuContext {
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
        f16: OnceLock::new(),
    }
}

pub(super) fn adapter_info(raw: &wgpu::AdapterInfo) -> AdapterInfo {
    AdapterInfo {
        name: raw.name.clone(),
        driver: raw.driver.clone(),
        driver_info: raw.driver_info.clone(),
        backend: raw.backend.to_string(),
        device_type: format!("{:?}", raw.device_type),
    }
}

/// The device's subgroup feature and the adapter's subgroup sizes.
pub(super) fn subgroup_facts(device: &wgpu::Device, raw: &wgpu::AdapterInfo) -> SubgroupFacts {
    SubgroupFacts {
        feature: device.features().contains(wgpu::Features::SUBGROUP),
        min_size: raw.subgroup_min_size,
        max_size: raw.subgroup_max_size,
    }
}

pub(super) fn is_llvmpipe(raw: &wgpu::AdapterInfo) -> bool {
    raw.name.to_lowercase().contains("llvmpipe") || raw.driver.to_lowercase().contains("llvmpipe")
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

    pub(super) fn on_context(ctx: Arc<GpuContext>, options: WgpuOptions) -> Self {
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
    pub(super) fn start_clock(&mut self) {
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

    /// How this backend converts f16 values here, and why, unless
    /// `WgpuOptions::f16_conversions` asks for a way: the native ones
    /// (`F16Conversions::Native`) where, once per device, a probe dispatch
    /// found them to be the language's conversions on every f16 pattern
    /// and every rounding boundary (`f16_conversions::probe`);
    /// otherwise the conversions on the bits. The probe runs on the first
    /// call (of this or a plan's [`Self::plan_emit_options`] with f16
    /// values), not before.
    pub fn f16_conversions(&self) -> F16Choice {
        if let Some(conversions) = self.options.f16_conversions {
            return F16Choice::requested(conversions);
        }
        self.ctx
            .f16
            .get_or_init(|| {
                let mut native = WgpuBackend::on_context(
                    self.ctx.clone(),
                    WgpuOptions {
                        f16_conversions: Some(F16Conversions::Native),
                        ..WgpuOptions::default()
                    },
                );
                F16Choice::probed(crate::f16_conversions::probe(&mut native))
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
        // Only a plan with f16 values converts them (and so pays for the probe).
        if crate::f16_conversions::plan_has_f16(plan) {
            options.f16_conversions = self.f16_conversions().conversions;
        }
        options
    }

    /// The code-generation options this backend uses on its adapter (f16
    /// conversions on the bits: [`Self::plan_emit_options`] chooses them
    /// for a plan that has f16 values).
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
            subgroups: self.ctx.subgroups.feature,
            f16_conversions: F16Conversions::Emulated,
        }
    }

    /// The WGSL this backend runs for `plan` on its adapter.
    pub fn wgsl(&self, plan: &LaunchPlan, mode: Mode) -> Result<String, EmitError> {
        Ok(emit_module(plan, &self.plan_emit_options(plan, mode))?.wgsl)
    }

    /// What it takes to run `plan`'s fused dispatch here, for messages: the
    /// workgroups it needs at once, what the backend established, and the
    /// two ways (establishing more on lavapipe, or declaring it).
    pub(super) fn co_residency_advice(&self, plan: &LaunchPlan) -> String {
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

    pub(super) fn refuse_if_needed(&self, plan: &LaunchPlan) -> Result<(), RunError> {
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
}
