//! What the plan's programs use: the buffers they write, load and `read`
//! semaphores of, from the facts validation established (`LaunchUnit::facts`),
//! and the axes they index by.

use std::collections::BTreeSet;

use mpmd_core::ir::visit::for_each_expr;
use mpmd_core::ir::{Expr, Stmt};
use mpmd_core::plan::{BufferId, LaunchPlan};
use mpmd_core::validate::OperandAccess;

/// The plan buffers of the operands some program accesses as `wanted` says.
fn buffers_accessed(
    plan: &LaunchPlan,
    wanted: impl Fn(OperandAccess) -> bool,
) -> BTreeSet<BufferId> {
    plan.units
        .iter()
        .flat_map(|unit| unit.facts.enumerate_accesses())
        .filter(|&(_, access)| wanted(access))
        .filter_map(|(operand, _)| plan.operands.get(operand.index())?.buffer)
        .collect()
}

/// Buffers that some program stores to, or accesses atomically.
pub(super) fn written_buffers(plan: &LaunchPlan) -> BTreeSet<BufferId> {
    buffers_accessed(plan, OperandAccess::writes)
}

/// Buffers that some program loads from (atomics and semaphores aside).
pub(crate) fn loaded_buffers(plan: &LaunchPlan) -> BTreeSet<BufferId> {
    buffers_accessed(plan, |a| a.loaded)
}

/// Buffers of the semaphores some program `read`s: their waits must not let
/// the count dip below what the semantics allow (see `MPMD_WAIT_OPTIMISTIC`).
pub(super) fn read_semaphores(plan: &LaunchPlan) -> BTreeSet<BufferId> {
    buffers_accessed(plan, |a| a.read)
}

/// Whether some program waits on a semaphore (then blocks need ordered tickets).
pub(super) fn some_program_waits(plan: &LaunchPlan) -> bool {
    plan.units.iter().any(|u| !u.facts.waits.is_empty())
}

/// The axes whose `axis_index` a body uses.
pub(super) fn axes(body: &[Stmt]) -> BTreeSet<String> {
    let mut axes = BTreeSet::new();
    for_each_expr(body, &mut |e| {
        if let Expr::AxisIndex(a) = e {
            axes.insert(a.clone());
        }
    });
    axes
}
