//! Block collectives (docs/text-format.md, "Block collectives"): a value of
//! one invocation shared with the workgroup, and workgroup-wide votes.
//!
//! Both end in `workgroupUniformLoad` of `mpmd_block_word`: its barrier is
//! the collective's, and WGSL's uniformity analysis then knows the result is
//! the same in every invocation (validation's promise: a `break`, a loop
//! bound or an `if` around barriers may depend on it).
//!
//! Broadcast: a barrier (every invocation has read the word's earlier
//! value), the source invocation writes its value's word, then the uniform
//! load. Votes: each invocation whose predicate holds adds 1 to
//! `mpmd_block_votes`; after a barrier, invocation 0 moves the count into
//! the word and zeroes the counter for the next vote (the adds of the next
//! vote come after the uniform load's barrier, which invocation 0 reaches
//! after its exchange), then the uniform load.

use mpmd_core::ir::{Binding, BlockOp, Expr, Stmt};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;

use super::bindings::WordType;
use super::helpers::Helper;
use super::syntax::{from_word, to_word, wgsl_scalar};
use super::unit::UnitEmitter;
use super::{AccessSite, EmitError};

/// Whether some unit of the plan uses a block collective: the module then
/// declares `mpmd_block_word` and `mpmd_block_votes`.
pub(super) fn uses_block_collectives(plan: &LaunchPlan) -> bool {
    plan.units.iter().any(|u| {
        mpmd_core::ir::visit::any_stmt(&u.kernel.body, &mut |s| {
            matches!(s, Stmt::BlockCollective { .. })
        })
    })
}

/// Bytes of workgroup memory the block collectives' two words take.
pub(super) const BLOCK_COLLECTIVE_BYTES: u64 = 8;

impl UnitEmitter<'_, '_> {
    pub(super) fn block_collective(
        &mut self,
        dest: &Binding,
        op: BlockOp,
        args: &[Expr],
    ) -> Result<(), EmitError> {
        let name = op.name();
        let [value, rest @ ..] = args else {
            return Err(self.invalid(format!("`{name}` without a value")));
        };
        let ty = self
            .unit
            .facts
            .type_of(value)
            .map_err(|e| self.invalid(e.to_string()))?;
        let v = self.expr(value)?;
        let threads = self.unit.threads_per_block;
        let result = match op {
            BlockOp::Broadcast => {
                let source = rest
                    .first()
                    .ok_or_else(|| self.invalid(format!("`{name}` without a source thread")))?;
                let s = self.expr(source)?;
                let from = self.temp("source");
                if self.state.options.mode == Mode::Checked {
                    // A source past the block is reported as an index past
                    // the block's threads would be, by invocation 0 (the
                    // source is the same in every invocation).
                    let site = self.state.sites.len();
                    self.state.sites.push(AccessSite {
                        unit: self.unit_id,
                        reference: format!("{name} source thread"),
                        block_extents: Vec::new(),
                        shape: vec![threads],
                        signed: vec![false],
                    });
                    self.state.helpers.insert(Helper::Check(1));
                    self.line(&format!("var {from}: u32 = {s};"));
                    self.line(&format!(
                        "if (thread_id == 0u) {{ {from} = mpmd_check1({site}u, {from}, {threads}u); }}"
                    ));
                } else {
                    self.line(&format!("let {from}: u32 = {s};"));
                }
                self.line(&format!(
                    "// {name}: invocation {from} publishes its word between two barriers."
                ));
                self.line("workgroupBarrier();");
                let word = to_word(ty, WordType::U32, &v);
                self.line(&format!(
                    "if (thread_id == {from}) {{ mpmd_block_word = {word}; }}"
                ));
                from_word(ty, WordType::U32, "workgroupUniformLoad(&mpmd_block_word)")
            }
            BlockOp::Any | BlockOp::All | BlockOp::Count => {
                // The extra invocations of a fused workgroup do not vote.
                let holds = match self.idle_guard {
                    true => format!("({v}) && !mpmd_idle"),
                    false => v.to_string(),
                };
                self.line(&format!(
                    "// {name}: the invocations where it holds count themselves."
                ));
                self.line(&format!(
                    "if ({holds}) {{ atomicAdd(&mpmd_block_votes, 1u); }}"
                ));
                self.line("workgroupBarrier();");
                self.line(
                    "if (thread_id == 0u) { mpmd_block_word = atomicExchange(&mpmd_block_votes, 0u); }",
                );
                let count = self.temp("votes");
                self.line(&format!(
                    "let {count}: u32 = workgroupUniformLoad(&mpmd_block_word);"
                ));
                match op {
                    BlockOp::Any => format!("({count} != 0u)"),
                    BlockOp::All => format!("({count} == {threads}u)"),
                    _ => count,
                }
            }
        };
        let bound = self.bind_scalar(&dest.name, dest.ty)?;
        self.line(&format!(
            "let {bound}: {} = {result};",
            wgsl_scalar(dest.ty)
        ));
        Ok(())
    }
}
