//! The dispatches of a call beyond one per unit: the fused dispatch of a
//! co-resident plan, block-split units and their first wave, and the
//! semaphore dispatches that run moved semaphore operations.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use mpmd_core::ir::visit::any_stmt;
use mpmd_core::ir::{Expr, Literal, Name, SemOp, Stmt};
use mpmd_core::plan::{BufferId, IdSource, LaunchPlan, LaunchUnit, ProgramId, UnitId};

use super::bindings::sanitize;
use super::generate::{module_header, ModuleState};
use super::sync::Hoisting;
use super::unit::{UnitEmitter, SUBGROUP_ARGUMENTS, SUBGROUP_BUILTINS};
use super::{
    fused_workgroup_size, fused_workgroups, Dispatch, EmitError, EmittedModule, FUSED_ENTRY_POINT,
    SEMAPHORE_WORKGROUP_SIZE, TICKET_WORD,
};

/// A plan that needs co-residency, on an adapter that runs all of its
/// workgroups at once: one dispatch runs every program. Each program is a
/// function of the thread id; the entry point's workgroup takes the call's
/// next ticket and runs the program and block it names, programs in the
/// plan's topological order, so a workgroup that started has every lower
/// ticket started before it (waits on earlier programs and lower blocks
/// need no more than that; cycles need all of them resident).
pub(super) fn generate_fused(
    mut state: ModuleState<'_>,
    hoistings: &[Hoisting],
) -> Result<EmittedModule, EmitError> {
    let plan = state.plan;
    let options = state.options;
    let per_dim = options.max_workgroups_per_dimension.max(1);
    let total = fused_workgroups(plan);
    let max_blocks = (per_dim as u64 * per_dim as u64).min(u32::MAX as u64);
    if total > max_blocks {
        let units: Vec<String> = plan
            .units
            .iter()
            .map(|u| format!("`{}` {}", u.kernel.name, u.block_count))
            .collect();
        return Err(EmitError::TooManyBlocks {
            program: plan.units.first().map_or(ProgramId::new(0), |u| u.program),
            kernel: format!("all programs together ({})", units.join(", ")),
            blocks: total,
            max: max_blocks,
            per_dim,
        });
    }
    let size = fused_workgroup_size(plan);
    let mut functions = Vec::new();
    let mut entry_points = Vec::new();
    let mut dispatch_lines = Vec::new();
    // Some program uses native warp collectives: the entry point takes the subgroup builtins.
    let mut fused_subgroups = false;
    let mut base = 0u64;
    for (index, unit) in plan.enumerate_units() {
        let name = format!("unit{index}_{}", sanitize(&unit.kernel.name));
        let mut emitter = UnitEmitter::new(
            &mut state,
            index,
            unit,
            name.clone(),
            &hoistings[index.index()],
        )?;
        emitter.idle_guard = unit.threads_per_block < size;
        let subgroups = match emitter.checks_subgroups() {
            true => {
                fused_subgroups = true;
                format!(", {SUBGROUP_ARGUMENTS}")
            }
            false => String::new(),
        };
        functions.push(emitter.emit_entry_with(BlockSource::Fused(base))?);
        let end = base + unit.block_count;
        dispatch_lines.push(format!(
            "  if (ticket < {end}u) {{ {name}(mpmd_lid.x{subgroups}); return; }}"
        ));
        entry_points.push(name);
        base = end;
    }
    let (x, y) = workgroup_grid(total, per_dim);
    let mut out = module_header(plan, options);
    let order: Vec<String> = plan
        .units
        .iter()
        .map(|u| {
            format!(
                "program {} `{}` ({} block(s))",
                u.program, u.kernel.name, u.block_count
            )
        })
        .collect();
    writeln!(
        out,
        "// One fused dispatch ({FUSED_ENTRY_POINT}, {total} workgroup(s) of {size} invocation(s)) runs every \
         program: the plan needs co-residency ({}), and this adapter runs all of its workgroups at once \
         (declared or established). Tickets in program order: {}.",
        if plan.graph.has_cycle {
            "its programs wait on each other in a cycle"
        } else {
            "a program waits on its own signals"
        },
        order.join(", ")
    )
    .unwrap();
    state.write_globals_helpers_functions(&mut out, functions);
    writeln!(
        out,
        "// ---- the fused dispatch: a workgroup's ticket names its program and block.\n\
         @compute @workgroup_size({size})\n\
         fn {FUSED_ENTRY_POINT}(@builtin(local_invocation_id) mpmd_lid: vec3<u32>{}) {{\n  \
         if (mpmd_lid.x == 0u) {{ mpmd_ticket = atomicAdd(&mpmd_status[{TICKET_WORD}], 1u); }}\n  \
         let ticket: u32 = workgroupUniformLoad(&mpmd_ticket);\n{}\n}}",
        match fused_subgroups {
            true => format!(", {SUBGROUP_BUILTINS}"),
            false => String::new(),
        },
        dispatch_lines.join("\n")
    )
    .unwrap();
    let schedule = vec![Dispatch {
        entry_point: FUSED_ENTRY_POINT.to_string(),
        workgroups: [x, y, 1],
        unit: None,
        repeat: 1,
    }];
    let dispatch = vec![[x, y, 1]; plan.units.len()];
    Ok(state.finish(out, entry_points, dispatch, schedule))
}

/// Dispatches a block-split unit of `blocks` blocks takes with a first wave
/// of `wave` blocks (a wave of fewer than two is no wave).
pub(super) fn split_dispatch_count(blocks: u64, wave: u64) -> u64 {
    if wave >= 2 {
        1 + (blocks - wave)
    } else {
        blocks
    }
}

/// The leading blocks of a block-split unit that reach no wait (at most
/// `per_dim`, one dispatch dimension): they wait on nothing, so they can run
/// together in the unit's first dispatch. A block counts only where the
/// conditions over its waits are decided by its block coordinates and
/// constants (`block_reaches_wait`); anything else may wait.
pub(super) fn first_wave(unit: &LaunchUnit, per_dim: u32) -> u64 {
    let limit = unit.block_count.min(per_dim as u64);
    let mut wave = 0;
    while wave < limit && !block_reaches_wait(unit, wave) {
        wave += 1;
    }
    wave
}

/// Whether block `block` of `unit` may reach a `wait` or `wait_nodec`:
/// conservative (true) wherever a condition is not decided by the block's
/// coordinates, constants and `let`s of those, and for any wait in a loop.
fn block_reaches_wait(unit: &LaunchUnit, block: u64) -> bool {
    /// `e` folded with the block's coordinates and the `let`s known so far.
    fn eval(
        unit: &LaunchUnit,
        block: u64,
        lets: &HashMap<Name, Literal>,
        e: &Expr,
    ) -> Option<Literal> {
        let axis_index = |axis: &str| {
            let a = unit
                .axes
                .iter()
                .find(|a| a.axis == axis && a.source == IdSource::Block)?;
            Some(((block / a.stride.max(1)) % a.size.max(1) as u64) as u32)
        };
        let axis_size = |axis: &str| unit.axes.iter().find(|a| a.axis == axis).map(|a| a.size);
        let name = |n: &str| lets.get(n).copied();
        mpmd_core::ir::fold::const_value(
            e,
            &mpmd_core::ir::fold::Leaves {
                name: &name,
                axis_size: &axis_size,
                axis_index: &axis_index,
            },
        )
    }
    fn reaches(
        unit: &LaunchUnit,
        block: u64,
        lets: &mut HashMap<Name, Literal>,
        body: &[Stmt],
    ) -> bool {
        for stmt in body {
            match stmt {
                Stmt::Let { var, value } => {
                    if let Some(v) = eval(unit, block, lets, value) {
                        lets.insert(var.name.clone(), v);
                    }
                }
                Stmt::Sem {
                    op: SemOp::Wait | SemOp::WaitNodec,
                    ..
                } => return true,
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let taken = match eval(unit, block, lets, cond) {
                        Some(Literal::Bool(true)) => reaches(unit, block, lets, then_body),
                        Some(Literal::Bool(false)) => reaches(unit, block, lets, else_body),
                        _ => {
                            reaches(unit, block, lets, then_body)
                                || reaches(unit, block, lets, else_body)
                        }
                    };
                    if taken {
                        return true;
                    }
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } => {
                    let waits = any_stmt(body, &mut |s| {
                        matches!(
                            s,
                            Stmt::Sem {
                                op: SemOp::Wait | SemOp::WaitNodec,
                                ..
                            }
                        )
                    });
                    if waits {
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }
    reaches(unit, block, &mut HashMap::new(), &unit.kernel.body)
}

/// The moved signals (or waits) of unit `index`, emitted as a function into
/// `functions`; `None` when it has none.
pub(super) fn moved_ops(
    state: &mut ModuleState<'_>,
    hoistings: &[Hoisting],
    index: UnitId,
    signals: bool,
    functions: &mut Vec<String>,
) -> Result<Option<MovedOps>, EmitError> {
    let plan = state.plan;
    let h = &hoistings[index.index()];
    let unit = plan.unit(index);
    let any = unit.kernel.body.iter().zip(&h.moved).any(|(stmt, &m)| {
        m && matches!(stmt, Stmt::Sem { op, .. } if (*op == SemOp::Signal) == signals)
    });
    if !any {
        return Ok(None);
    }
    let name = moved_function(index, signals);
    let text = UnitEmitter::new(state, index, unit, name.clone(), h)?.emit_moved(signals)?;
    functions.push(text);
    Ok(Some(MovedOps {
        function: name,
        unit: index,
        blocks: unit.block_count,
        buffers: h.buffers(plan, unit, signals),
        signals,
    }))
}

/// The function that runs unit `index`'s moved signals (or waits) for one block.
pub(super) fn moved_function(index: UnitId, signals: bool) -> String {
    format!(
        "mpmd_unit{index}_{}",
        if signals { "signals" } else { "waits" }
    )
}

/// Workgroups `(x, y)` for `count` workgroups: 1-D up to the per-dimension
/// limit, then 2-D (the entry point linearises and skips the extra ones).
pub(super) fn workgroup_grid(count: u64, per_dim: u32) -> (u32, u32) {
    if count <= per_dim as u64 {
        (count.max(1) as u32, 1)
    } else {
        (per_dim, count.div_ceil(per_dim as u64) as u32)
    }
}

/// Where an entry point's workgroup finds its block.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum BlockSource {
    /// `workgroup_id.x`.
    OneD,
    /// `workgroup_id.x + workgroup_id.y * per_dim`, extra workgroups return.
    TwoD,
    /// The call's ticket counter less this base (one block per dispatch).
    Ticket(u64),
    /// A program's function in a fused dispatch: the workgroup's ticket
    /// (already taken) less the blocks of the programs before it.
    Fused(u64),
}

/// The semaphore operations of one unit run in a semaphore dispatch.
pub(super) struct MovedOps {
    /// `fn <function>(block_id: u32)` runs them for one block.
    pub(super) function: String,
    pub(super) unit: UnitId,
    pub(super) blocks: u64,
    /// The plan buffers they touch.
    pub(super) buffers: BTreeSet<BufferId>,
    pub(super) signals: bool,
}

/// A semaphore dispatch: one invocation per block of each unit in `group`.
pub(super) fn semaphore_entry(
    plan: &LaunchPlan,
    name: &str,
    group: &[MovedOps],
    two_d: bool,
    per_dim: u32,
) -> String {
    let mut out = String::new();
    let what: Vec<String> = group
        .iter()
        .map(|m| {
            let unit = plan.unit(m.unit);
            format!(
                "the {} of unit {} (program {} `{}`)",
                if m.signals { "signals" } else { "waits" },
                m.unit,
                unit.program,
                unit.kernel.name
            )
        })
        .collect();
    writeln!(
        out,
        "// ---- semaphore dispatch: {}; one invocation per block.",
        what.join(", then ")
    )
    .unwrap();
    writeln!(out, "@compute @workgroup_size({SEMAPHORE_WORKGROUP_SIZE})").unwrap();
    writeln!(
        out,
        "fn {name}(@builtin(workgroup_id) mpmd_wid: vec3<u32>, @builtin(local_invocation_id) mpmd_lid: vec3<u32>) {{"
    )
    .unwrap();
    let workgroup = if two_d {
        format!("(mpmd_wid.x + mpmd_wid.y * {per_dim}u)")
    } else {
        "mpmd_wid.x".to_string()
    };
    writeln!(
        out,
        "  let slot: u32 = {workgroup} * {SEMAPHORE_WORKGROUP_SIZE}u + mpmd_lid.x;"
    )
    .unwrap();
    let mut start = 0u64;
    for m in group {
        let end = start + m.blocks;
        let block = if start == 0 {
            "slot".to_string()
        } else {
            format!("slot - {start}u")
        };
        writeln!(
            out,
            "  if (slot < {end}u) {{\n    {}({block});\n    return;\n  }}",
            m.function
        )
        .unwrap();
        start = end;
    }
    out.push_str("}\n");
    out
}
