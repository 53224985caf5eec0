//! Prepared maps: `prepare`, `enqueue` on the caller's buffers, `synchronize`,
//! and the checks of a caller's buffers and scalars.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mpmd_core::backend::RunError;
use mpmd_core::bind::{bind, provider, DeviceArgs, Provider};
use mpmd_core::ir::{Literal, Name};
use mpmd_core::plan::{BufferInit, BufferPlan, LaunchPlan};
use mpmd_core::Mode;

use super::{
    PreparedMap, WgpuBackend, WgpuBuffer, WgpuPrepared, RUN_CACHE_CAPACITY, STORAGE_USAGE,
};
use crate::emit::{EmittedModule, STATUS_WORDS};

use super::cache::buffer_words;

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

    pub(super) fn prepare_map(
        &self,
        plan: &LaunchPlan,
        mode: Mode,
    ) -> Result<Arc<PreparedMap>, RunError> {
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

    /// The prepared map of `plan` for [`Backend::run`](mpmd_core::Backend::run), from the run cache.
    pub(super) fn run_prepared(
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
}

/// The parameter buffer's words: the scalars, each checked against its
/// operand, then the run-time literals.
pub(super) fn params_words(
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
pub(super) fn check_caller_buffer(
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
