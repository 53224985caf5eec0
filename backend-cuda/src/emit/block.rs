//! Block collectives (docs/text-format.md, "Block collectives").
//!
//! Votes: CUDA's `__syncthreads_or`, `__syncthreads_and` and
//! `__syncthreads_count` (PTX `bar.red`, one barrier) where every thread of
//! the block runs the unit. A unit with fewer threads than the block:
//! inside a resident walk ([`UnitSync::Partial`], the block's other threads
//! are on another logical block) `bar.red.popc` at the unit's named barrier
//! (`mpmd_bar_count`); with tickets, where the other threads have returned
//! (what `__syncthreads_and` makes of them is the hardware's), a count in
//! `mpmd_value` between three barriers. Broadcast: the source thread writes its value's word to
//! `mpmd_value` between two barriers (the first: every thread has read the
//! slot's earlier value, a `read`'s or a collective's).

use mpmd_core::ir::{Binding, BlockOp, Expr};
use mpmd_core::Mode;

use super::c;
use super::sync::UnitSync;
use super::{EmitError, Emitter, RecordedRef, UnitContext};

impl Emitter<'_> {
    pub(super) fn emit_block_collective(
        &mut self,
        cx: &mut UnitContext,
        dest: &Binding,
        op: BlockOp,
        args: &[Expr],
        depth: usize,
    ) -> Result<(), EmitError> {
        let name = op.name();
        let values = args
            .iter()
            .map(|a| self.expr(cx, a))
            .collect::<Result<Vec<_>, _>>()?;
        let [value, rest @ ..] = values.as_slice() else {
            return Err(cx.unsupported(format!("`{name}` without a value")));
        };
        let threads = cx.unit.threads_per_block;
        let barrier = self.unit_sync.barrier();
        let text = match op {
            BlockOp::Broadcast => {
                let source = rest
                    .first()
                    .ok_or_else(|| cx.unsupported(format!("`{name}` without a source thread")))?;
                let from = self.temp('s');
                self.line(depth, &format!("const u32 {from} = {};", source.text));
                if self.mode == Mode::Checked {
                    self.report_source_out_of_range(cx, op, &from, threads, depth);
                }
                self.line(depth, &format!("// {name}: thread {from} shares its word."));
                self.line(depth, &barrier);
                self.line(
                    depth,
                    &format!(
                        "if (threadIdx.x == {from}) mpmd_value = (int){};",
                        c::word_of(value.ty, &value.text)
                    ),
                );
                self.line(depth, &barrier);
                c::from_word(value.ty, "(u32)mpmd_value")
            }
            _ if self.unit_fills_block => {
                let p = &value.text;
                match op {
                    BlockOp::Any => format!("(__syncthreads_or((int)({p})) != 0)"),
                    BlockOp::All => format!("(__syncthreads_and((int)({p})) != 0)"),
                    _ => format!("(u32)__syncthreads_count((int)({p}))"),
                }
            }
            _ => {
                let count = match self.unit_sync {
                    UnitSync::Partial { threads } => {
                        format!("mpmd_bar_count({}, {})", c::unsigned(threads), value.text)
                    }
                    // Tickets: the block's other threads have returned.
                    UnitSync::WholeBlock => self.count_in_shared_memory(&value.text, depth),
                };
                match op {
                    BlockOp::Any => format!("({count} != 0u)"),
                    BlockOp::All => format!("({count} == {})", c::unsigned(threads)),
                    _ => count,
                }
            }
        };
        self.bind_scalar(cx, dest, "const ", &text, depth);
        Ok(())
    }

    /// How many of the unit's threads pass a true `p`, counted in
    /// `mpmd_value` between the unit's barriers (the first: every thread
    /// has read the slot's earlier value): the votes of a unit whose block
    /// has threads that returned, where `__syncthreads_and` would leave
    /// what they count as to the hardware.
    fn count_in_shared_memory(&mut self, p: &str, depth: usize) -> String {
        let barrier = self.unit_sync.barrier();
        self.line(depth, &barrier);
        self.line(depth, "if (threadIdx.x == 0u) mpmd_value = 0;");
        self.line(depth, &barrier);
        self.line(depth, &format!("if ({p}) atomicAdd(&mpmd_value, 1);"));
        self.line(depth, &barrier);
        "(u32)mpmd_value".to_string()
    }

    /// Checked mode: a broadcast source past the block's `threads` is
    /// reported as an out-of-bounds index into them would be, by thread 0
    /// (the source is the same in every thread).
    fn report_source_out_of_range(
        &mut self,
        cx: &UnitContext,
        op: BlockOp,
        from: &str,
        threads: u32,
        depth: usize,
    ) {
        let ref_id = self.refs.len() as u32;
        self.refs.push(RecordedRef {
            name: format!("{} source thread", op.name()),
            shape: vec![threads],
            owner_block_shape: Vec::new(),
        });
        self.line(
            depth,
            &format!(
                "if (threadIdx.x == 0u && {from} >= {threads}) mpmd_broadcast_source(mpmd_ctl, {}, mpmd_block, {}, {from}, {threads});",
                c::unsigned(cx.unit.program.index() as u64),
                c::unsigned(ref_id),
                threads = c::unsigned(threads)
            ),
        );
    }
}
