//! How blocks and threads wait for each other: the block schedule (which
//! physical block runs which logical block: block index, resident walk or
//! tickets), the barriers of a unit and its way out when the call aborts,
//! and the semaphore statements (`signal`, `wait`, `wait_nodec`, `read`).

use mpmd_core::ir::{Expr, RefAccess, ScalarType, SemOp};
use mpmd_core::plan::LaunchPlan;

use super::access::{idx_init, AccessMode, CPlace};
use super::c::{self, c_type, Home};
use super::names::user_name;
use super::{uses, EmitError, Emitter, Symbol, UnitContext};

/// How the kernel's physical blocks become the plan's logical blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSchedule {
    /// `blockIdx.x` is the logical block (no program waits).
    BlockIndex,
    /// Resident blocks walk the logical blocks in increasing order; launched
    /// cooperatively with at most as many blocks as fit on the device.
    ResidentWalk,
    /// Each block takes the next ticket from the control block's counter.
    Tickets,
}

impl BlockSchedule {
    /// The schedule `plan` gets when the device can launch cooperatively
    /// (`resident_walk`).
    pub fn for_plan(plan: &LaunchPlan, resident_walk: bool) -> Self {
        let block_dim = plan.units.iter().map(|u| u.threads_per_block).max();
        if !uses::some_program_waits(plan) {
            BlockSchedule::BlockIndex
        } else if resident_walk
            // Plans that need every block resident at once keep one block per
            // logical block. A program with fewer threads than the block
            // synchronises through a named barrier, whose thread count must
            // be a multiple of the warp size.
            && !plan.needs_co_residency()
            && plan
                .units
                .iter()
                .all(|u| Some(u.threads_per_block) == block_dim || u.threads_per_block % 32 == 0)
        {
            BlockSchedule::ResidentWalk
        } else {
            BlockSchedule::Tickets
        }
    }

    /// The kernel's code before the units: what sets `mpmd_ticket_id`, the
    /// logical block (for the walk, the loop the units run in).
    pub(super) fn prologue(self, total_blocks: u64) -> String {
        match self {
            BlockSchedule::Tickets => "  // A ticket, not blockIdx, picks the (program, block): tickets are taken in\n\
                 \x20 // start order, so every block a wait depends on is already running.\n\
                 \x20 if (threadIdx.x == 0u) {\n\
                 \x20   mpmd_ticket = atomicAdd(&mpmd_ctl[MPMD_CTL_TICKET], 1u);\n\
                 \x20   mpmd_stop = *(volatile u32*)&mpmd_ctl[MPMD_CTL_ABORT];\n\
                 \x20 }\n\
                 \x20 __syncthreads();\n\
                 \x20 if (mpmd_stop != 0u) return;\n\
                 \x20 const u32 mpmd_ticket_id = mpmd_ticket;\n"
                .to_string(),
            BlockSchedule::ResidentWalk => format!(
                "  // Every block is resident (cooperative launch) and walks the logical blocks\n\
                 \x20 // in increasing order; a wait only depends on lower ones, so the walk cannot\n\
                 \x20 // deadlock and needs no ticket counter.\n\
                 \x20 if (threadIdx.x == 0u) mpmd_stop = 0u;\n\
                 \x20 for (u32 mpmd_ticket_id = blockIdx.x; mpmd_ticket_id < {}; mpmd_ticket_id += gridDim.x) {{\n",
                c::unsigned(total_blocks)
            ),
            BlockSchedule::BlockIndex => {
                "  // No program waits, so blocks may run in any order: blockIdx is the ticket.\n\
                 \x20 const u32 mpmd_ticket_id = blockIdx.x;\n"
                    .to_string()
            }
        }
    }
}

/// The end of one logical block of the resident walk, before the loop's
/// closing brace: where the threads of the block meet when the next logical
/// block could see what this one left.
pub(super) fn walk_epilogue(plan: &LaunchPlan, block_dim: u32) -> &'static str {
    if plan.units.iter().any(|u| u.threads_per_block < block_dim) {
        // Named barrier 1 may be reused only once every thread is done
        // with this logical block; a stop in a partial unit lands here.
        "  mpmd_next_logical_block:\n\
         \x20   // Threads left out of a smaller program wait here for the others.\n\
         \x20   __syncthreads();\n\
         \x20   if (mpmd_stop != 0u) return;\n  }\n"
    } else if plan.units.iter().any(|u| u.smem_bytes > 0) {
        // Without smem nothing carries over: barriers pair up in order
        // (every thread runs the same barriers per logical block), and the
        // shared words are guarded by the barriers around their uses.
        "    // The next logical block reuses shared memory: finish this one together.\n\
         \x20   __syncthreads();\n  }\n"
    } else {
        "  }\n"
    }
}

/// How a unit's code synchronises its threads and leaves when the call aborts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnitSync {
    /// All of the block's threads run the unit: `__syncthreads()`, and `return`.
    WholeBlock,
    /// Inside a resident walk, a unit with fewer threads than the block: its
    /// first `threads` threads meet at named barrier 1 (`mpmd_bar_sync`), the
    /// others skip it; a stop jumps to the end of the logical block, where
    /// all threads meet and leave together.
    Partial { threads: u32 },
}

impl UnitSync {
    /// The unit's `barrier;`.
    pub(super) fn barrier(self) -> String {
        match self {
            UnitSync::WholeBlock => "__syncthreads();".into(),
            UnitSync::Partial { threads } => {
                format!("mpmd_bar_sync({});", c::unsigned(threads))
            }
        }
    }

    /// Leaves the unit once the call is stopping (after a failed wait).
    pub(super) fn stop(self) -> &'static str {
        match self {
            UnitSync::WholeBlock => "if (mpmd_stop != 0u) return;",
            UnitSync::Partial { .. } => "if (mpmd_stop != 0u) goto mpmd_next_logical_block;",
        }
    }
}

impl Emitter<'_> {
    /// `signal`, `wait` and `wait_nodec`: thread 0 acts for the block,
    /// between barriers.
    pub(super) fn emit_sem(
        &mut self,
        cx: &mut UnitContext,
        op: SemOp,
        sem: &RefAccess,
        amount: &Expr,
        depth: usize,
    ) -> Result<(), EmitError> {
        let place = self.place(cx, sem, AccessMode::Write)?;
        let n = self.expr(cx, amount)?.text;
        let (ref_id, coords, index) = self.site_values(cx, sem)?;
        let pointer = format!("&{}", place.slot());
        // What an amount below 1 reports (docs/design.md: amounts are at least 1).
        let site = format!(
            "mpmd_ctl, {}, mpmd_block, {}, {coords}, {index}",
            c::unsigned(cx.unit.program.index() as u64),
            c::unsigned(ref_id)
        );
        match op {
            SemOp::Signal => {
                self.line(depth, &format!("// signal({}, ...)", sem.base));
                self.line(depth, &self.unit_sync.barrier());
                let signal = format!("if ({}) mpmd_sem_signal({pointer}, {n}, {site});", place.ok);
                self.on_thread_zero(depth, &place, &signal);
            }
            SemOp::Wait | SemOp::WaitNodec => {
                let how = match op {
                    SemOp::WaitNodec => "MPMD_WAIT_NODEC",
                    _ if self.is_read_semaphore(cx, &sem.base) => "MPMD_WAIT_EXACT",
                    _ => "MPMD_WAIT_OPTIMISTIC",
                };
                self.line(depth, &format!("// {}({}, ...)", op.name(), sem.base));
                let wait = format!(
                    "if ({} || !mpmd_sem_wait({pointer}, {n}, {how}, mpmd_wait_timeout_ns, {site})) mpmd_stop = 1u;",
                    place.bad
                );
                self.on_thread_zero(depth, &place, &wait);
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, self.unit_sync.stop());
            }
        }
        Ok(())
    }

    /// `let dest = read(sem)`: thread 0 reads and shares the value, so that
    /// it is block-uniform.
    pub(super) fn emit_sem_read(
        &mut self,
        cx: &mut UnitContext,
        dest: &str,
        sem: &RefAccess,
        depth: usize,
    ) -> Result<(), EmitError> {
        let place = self.place(cx, sem, AccessMode::Write)?;
        let c_name = user_name('v', dest);
        // The first barrier keeps the slot from being overwritten before
        // every thread has read an earlier value.
        self.line(depth, &self.unit_sync.barrier());
        let read = format!(
            "mpmd_value = ({}) ? mpmd_sem_read(&{}) : 0;",
            place.ok,
            place.slot()
        );
        self.on_thread_zero(depth, &place, &read);
        self.line(depth, &self.unit_sync.barrier());
        self.line(
            depth,
            &format!(
                "const {} {c_name} = mpmd_value;",
                c_type(ScalarType::I32, Home::Value)
            ),
        );
        cx.symbols.insert(
            dest.to_string(),
            Symbol::Scalar {
                c_name,
                ty: ScalarType::I32,
            },
        );
        Ok(())
    }

    /// `line` on thread 0 alone, which acts for the block on a semaphore
    /// (after the offset of `place`).
    fn on_thread_zero(&mut self, depth: usize, place: &CPlace, line: &str) {
        self.line(depth, "if (threadIdx.x == 0u) {");
        self.line(depth + 1, &place.compute);
        self.line(depth + 1, line);
        self.line(depth, "}");
    }

    /// Whether kernel parameter `name` of this unit is a semaphore some program reads.
    fn is_read_semaphore(&self, cx: &UnitContext, name: &str) -> bool {
        self.plan
            .param_buffer(cx.unit, name)
            .is_some_and(|buffer| self.read_semaphores.contains(&buffer))
    }

    /// The ref id and the coordinate and index values of an access, as
    /// `mpmd_idx` initialisers, for error records.
    fn site_values(
        &mut self,
        cx: &UnitContext,
        access: &RefAccess,
    ) -> Result<(u32, String, String), EmitError> {
        let ref_id = self.ref_id(cx, &access.base)?;
        let coords = match (&access.block, cx.symbol(&access.base)?) {
            (Some(c), _) => c
                .iter()
                .map(|e| self.index_expr(cx, e).map(|c| c.text))
                .collect::<Result<Vec<_>, _>>()?,
            // This block's own instance of an owned ref: its coordinates
            // (row-major over the owner's block axes, the last fastest), so
            // that the record names the element as every backend does
            // (`mpmd_core::backend::element_text`).
            (
                None,
                Symbol::Buffer {
                    ty,
                    owner_block_shape,
                    ..
                },
            ) if ty.owner.is_some() => {
                let mut stride = 1u64;
                let mut texts = Vec::with_capacity(owner_block_shape.len());
                for &size in owner_block_shape.iter().rev() {
                    texts.push(format!("(mpmd_block / {stride}u) % {size}u"));
                    stride = stride.saturating_mul(u64::from(size.max(1)));
                }
                texts.reverse();
                texts
            }
            (None, _) => Vec::new(),
        };
        let index = access
            .index
            .iter()
            .map(|e| self.index_expr(cx, e).map(|c| c.text))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ref_id, idx_init(&coords), idx_init(&index)))
    }
}
