//! What a backend keeps between calls: loaded kernels (an `Lru`), the
//! host-copy path's prepared plans (the most recently used few keeping
//! their memory) and the device-resident refs.

use std::collections::HashMap;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::CudaFunction;
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::{Mode, RunError};

use super::device::driver_version;
use super::errors::{describe, run_err};
use super::launch::device_address;
use super::{CudaBackend, CudaBuffer, DeviceResident, LoadedKernel, PreparedPlan};
use super::{PLANS_WITH_ARENA, PREPARED_PLANS};
use crate::arena::{buffer_words, ArenaLayout};
use crate::emit::{emit_module_with, loaded_buffers, BlockSchedule, EmittedModule};
use crate::nvrtc::{compile_cubin, CompileError, CompileOptions, Cubin};

impl CudaBackend {
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

    pub(super) fn load_kernel(
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

    /// Loaded kernels the backend keeps now (at most [`LOADED_KERNELS`](super::LOADED_KERNELS)).
    pub fn loaded_kernels(&self) -> usize {
        self.kernels.len()
    }

    /// Emits, compiles and loads `plan`, and makes the launch checks that
    /// do not depend on the call's arguments; `caller_memory`: laid out for
    /// runs on caller memory (only the backend's own buffers in the arena).
    pub(super) fn prepare_plan(
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
    pub(super) fn compile_and_load(
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
    pub(super) fn blocks_per_sm(
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
    pub(super) fn prepared(&mut self, plan: &LaunchPlan, mode: Mode) -> Result<(), RunError> {
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
    pub(super) fn bind_residents(
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
}

#[allow(clippy::too_many_arguments)]
pub(super) fn prepared_plan(
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
