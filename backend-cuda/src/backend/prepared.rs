//! Prepared maps on caller memory: `prepare`, `enqueue`, `synchronize`,
//! `poll_errors`, and the memory a prepared map keeps between its runs.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use mpmd_core::bind::{bind, DeviceArgs};
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::{Mode, RunError};

use super::errors::run_err;
use super::launch::{buffer_addresses, device_address, launch, scalar_args};
use super::STAGING_MAX_WORDS;
use super::{CallMemory, CudaBackend, CudaBuffer, CudaPrepared, PreparedPlan};
use crate::arena::{buffer_words, ArenaLayout, HostBlock, STATUS_WORD};
use crate::control;
use crate::emit::BlockSchedule;

impl CudaBackend {
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
}

/// A caller's buffer starts on a multiple of its element's size (the
/// kernel's accesses are aligned).
pub(super) fn check_alignment(
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

impl CallMemory {
    pub(super) fn new(
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
    pub(super) fn control_address(&self, layout: &ArenaLayout) -> u64 {
        self.arena_base + layout.control as u64 * 4
    }

    /// Clears the ticket counter before a launch that takes tickets (the
    /// only control word an error-free launch changes).
    pub(super) fn clear_ticket(
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
}
