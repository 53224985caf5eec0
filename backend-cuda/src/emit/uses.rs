//! What the plan's bodies use, found through `ir::visit`: the buffers they
//! write, load and `read` semaphores of, whether they wait, the axes they
//! index by.

use std::collections::BTreeSet;

use mpmd_core::ir::visit::{for_each_expr, for_each_stmt};
use mpmd_core::ir::{Expr, SemOp, Stmt};
use mpmd_core::plan::LaunchPlan;

/// The plan buffers bound to the kernel parameters that `collect(body,
/// names)` adds to `names`, over every program.
fn buffers_named(
    plan: &LaunchPlan,
    collect: impl Fn(&[Stmt], &mut BTreeSet<String>),
) -> BTreeSet<usize> {
    plan.units
        .iter()
        .flat_map(|unit| {
            let mut names = BTreeSet::new();
            collect(&unit.kernel.body, &mut names);
            names
                .into_iter()
                .filter_map(|name| plan.param_buffer(unit, &name))
        })
        .collect()
}

/// Buffers that some program stores to, or accesses atomically.
pub(super) fn written_buffers(plan: &LaunchPlan) -> BTreeSet<usize> {
    let mut written = buffers_named(plan, |body, names| {
        for_each_stmt(body, &mut |stmt| match stmt {
            Stmt::Store { target, .. } | Stmt::Atomic { target, .. } => {
                names.insert(target.base.clone());
            }
            Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } => {
                names.insert(sem.base.clone());
            }
            _ => {}
        });
    });
    written.extend(
        plan.buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.atomic)
            .map(|(i, _)| i),
    );
    written
}

/// Buffers that some program loads from (atomics and semaphores aside).
pub(crate) fn loaded_buffers(plan: &LaunchPlan) -> BTreeSet<usize> {
    buffers_named(plan, |body, names| {
        for_each_expr(body, &mut |e| {
            if let Expr::Load(access) = e {
                names.insert(access.base.clone());
            }
        });
    })
}

/// Buffers of the semaphores some program `read`s: their waits must not let
/// the count dip below what the semantics allow (see `MPMD_WAIT_OPTIMISTIC`).
pub(super) fn read_semaphores(plan: &LaunchPlan) -> BTreeSet<usize> {
    buffers_named(plan, |body, names| {
        for_each_stmt(body, &mut |stmt| {
            if let Stmt::SemRead { sem, .. } = stmt {
                names.insert(sem.base.clone());
            }
        });
    })
}

/// Whether a body waits on a semaphore (then blocks need ordered tickets).
pub(super) fn has_wait(body: &[Stmt]) -> bool {
    let mut waits = false;
    for_each_stmt(body, &mut |stmt| {
        waits |= matches!(
            stmt,
            Stmt::Sem {
                op: SemOp::Wait | SemOp::WaitNodec,
                ..
            }
        );
    });
    waits
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
