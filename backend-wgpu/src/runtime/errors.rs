//! Decoding the error record a run leaves in the status buffer.

use mpmd_core::backend::{RunError, Site};
use mpmd_core::ir::{MemorySpace, SemOp, Stmt};
use mpmd_core::plan::{LaunchPlan, ProgramId, UnitId};
use mpmd_core::Mode;

use super::{WgpuBackend, LLVMPIPE_LOOP_CAP};
use crate::emit::{
    fuses_programs, is_split_unit, EmittedModule, ERROR_LOOP_CAP, ERROR_LOOP_LIMIT,
    ERROR_OUT_OF_BOUNDS, ERROR_SEM_AMOUNT, ERROR_SUBGROUP_NOT_WARP, ERROR_WAIT_TIMEOUT,
    MAX_RECORDED_VALUES,
};

impl WgpuBackend {
    pub(super) fn decode_error(
        &self,
        plan: &LaunchPlan,
        emitted: &EmittedModule,
        status: &[u32],
    ) -> RunError {
        let kind = status[1];
        // A wait's record may leave the unit out (see `mpmd_take_*`): its site names it.
        let unit_index = match (kind, emitted.sites.get(status[5] as usize)) {
            (ERROR_WAIT_TIMEOUT, Some(site)) => site.unit,
            _ => UnitId::new(status[2] as usize),
        };
        let block = status[3] as u64;
        let thread = status[4];
        let site_index = status[5] as usize;
        let count = (status[6] as usize).min(MAX_RECORDED_VALUES);
        let values = &status[7..7 + MAX_RECORDED_VALUES];
        // An unknown unit (a corrupt record) is reported under its number.
        let (program, kernel) = plan
            .units
            .get(unit_index.index())
            .map(|u| (u.program, u.kernel.name.clone()))
            .unwrap_or((ProgramId::new(unit_index.index()), String::from("?")));
        let site = |thread: Option<u32>| Site {
            program,
            kernel: kernel.clone(),
            block,
            thread,
        };
        let list = |v: &[u32]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match kind {
            ERROR_OUT_OF_BOUNDS => {
                let Some(access) = emitted.sites.get(site_index) else {
                    return RunError::Backend(format!(
                        "out-of-bounds record names unknown site {site_index}"
                    ));
                };
                let coords: Vec<String> = values[..count]
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| {
                        if access.signed.get(k).copied().unwrap_or(false) {
                            (v as i32).to_string()
                        } else {
                            v.to_string()
                        }
                    })
                    .collect();
                let nb = access.block_extents.len().min(coords.len());
                let index = if nb > 0 {
                    format!(
                        "@[{}][{}]",
                        coords[..nb].join(", "),
                        coords[nb..].join(", ")
                    )
                } else {
                    format!("[{}]", coords.join(", "))
                };
                let shape = if access.block_extents.is_empty() {
                    format!("[{}]", list(&access.shape))
                } else {
                    format!(
                        "@[{}][{}]",
                        list(&access.block_extents),
                        list(&access.shape)
                    )
                };
                RunError::OutOfBounds {
                    site: site(Some(thread)),
                    reference: access.reference.clone(),
                    index,
                    shape,
                }
            }
            ERROR_WAIT_TIMEOUT => {
                let semaphore = emitted
                    .sites
                    .get(site_index)
                    .map(|s| {
                        describe_sem_element(plan, emitted, &s.reference, unit_index, values[0])
                    })
                    .unwrap_or_else(|| format!("site {site_index}"));
                let reference = emitted.sites.get(site_index).map(|s| s.reference.as_str());
                let own = plan.units.get(unit_index.index()).and_then(|u| {
                    let name = format!("program {} `{}`", u.program, u.kernel.name);
                    Some(signallers(plan, unit_index, reference?)?.contains(&name))
                });
                let options = self.plan_emit_options(plan, Mode::Fast);
                if own == Some(true) && is_split_unit(plan, &options, unit_index) {
                    RunError::Unsupported {
                        reason: format!(
                            "{} waits on `{semaphore}`, which its own program signals, and the count was \
                             short when it ran: it waits on a block that has not run before it (or on a signal \
                             that never comes). Without co-residency this backend runs the program's blocks \
                             one dispatch each in linear block order, so a block may only wait on blocks with \
                             a lower linear id; no order of dispatches carries this wait. Otherwise the \
                             program must run {}",
                            site(None),
                            self.co_residency_advice(plan)
                        ),
                    }
                } else if fuses_programs(plan, &options) {
                    RunError::WaitTimeout {
                        site: site(None),
                        semaphore,
                    }
                } else {
                    // Every signaller ran in an earlier dispatch: the count can never grow.
                    let why = match reference.and_then(|r| signallers(plan, unit_index, r)) {
                        Some(names) if names.is_empty() => {
                            "no program of this call signals it, so it holds only what it \
                             started the call with"
                                .to_string()
                        }
                        // The interpreter's words, so both backends report alike.
                        _ => "every program that signals it has finished".to_string(),
                    };
                    RunError::Deadlock {
                        wait_for_graph: format!(
                            "{} waits on `{semaphore}`, whose count is too low and can no longer grow: {why}",
                            site(None)
                        ),
                    }
                }
            }
            ERROR_LOOP_LIMIT => {
                let ordinal = values[0];
                let condition = plan
                    .units
                    .get(unit_index.index())
                    .and_then(|u| {
                        let loops = mpmd_core::ir::visit::while_loops(&u.kernel.body);
                        match loops.get(ordinal as usize) {
                            Some(mpmd_core::ir::Stmt::While { cond, .. }) => {
                                Some(mpmd_core::text::print_expr(cond))
                            }
                            _ => None,
                        }
                    })
                    .unwrap_or_default();
                RunError::LoopLimit {
                    site: site(Some(thread)),
                    ordinal,
                    condition,
                    max: values[1],
                }
            }
            ERROR_SEM_AMOUNT => {
                let semaphore = emitted
                    .sites
                    .get(site_index)
                    .map(|s| {
                        describe_sem_element(plan, emitted, &s.reference, unit_index, values[0])
                    })
                    .unwrap_or_else(|| format!("site {site_index}"));
                let amount = if values[2] != 0 {
                    values[1] as i64
                } else {
                    values[1] as i32 as i64
                };
                RunError::BadSemaphoreAmount {
                    site: site(None),
                    semaphore,
                    amount,
                }
            }
            ERROR_SUBGROUP_NOT_WARP => RunError::Unsupported {
                reason: format!(
                    "the adapter's subgroups are not the logical warps: {} ran in a subgroup of {} invocation(s) \
                     as its invocation {}{}, where native warp collectives need every logical warp (threads \
                     32w to 32w + 31) to be one whole subgroup, thread 32w + l its invocation l. The warp \
                     collectives' results would be wrong; WgpuOptions::warps = Some(WarpPath::Emulated) runs \
                     them through workgroup memory instead",
                    site(Some(thread)),
                    values[0],
                    values[1],
                    if values[2] == 0 {
                        ", and its subgroup did not hold exactly its warp's 32 threads"
                    } else {
                        ""
                    }
                ),
            },
            ERROR_LOOP_CAP => {
                let options = self.emit_options(Mode::Fast);
                let cap = options.loop_cap.unwrap_or(LLVMPIPE_LOOP_CAP);
                let (used, needed) = (values[0] as u64, values[1] as u64);
                let need = format!(
                    "need {} loop-header visits, more than the {cap} this backend allows ({}; it had used \
                     {used} when the next loop needed {needed})",
                    used + needed,
                    site(Some(thread)),
                );
                let counted = if options.subgroups {
                    "counted as they run for the invocation's subgroup (llvmpipe counts per SIMD vector, \
                     whose lanes share one count) in loops that hold a `while`; a `for` nest is charged its \
                     trip counts at its entry, and the loops under a branch that threads may take \
                     differently up front, both branches included"
                } else {
                    "every loop, and every branch that threads may take differently that holds loops, is \
                     charged up front, at its largest (a `while` at its `max`), both branches included"
                };
                RunError::Unsupported {
                    reason: format!(
                        "one invocation's loops {need}. Every loop iteration costs a visit and every loop one \
                         more for its exit test, and so does every poll of a semaphore wait that waits on a \
                         workgroup of the same dispatch; visits are {counted}. {} silently ends an \
                         invocation's loops after about 65,535 visits, so the result would be wrong \
                         (WgpuOptions::loop_cap sets the allowance)",
                        self.ctx.info.name
                    ),
                }
            }
            other => RunError::Backend(format!("unknown error record kind {other}")),
        }
    }
}

/// The programs whose kernels signal the buffer that unit `unit` names
/// `reference`; `None` when the unit or the buffer is unknown.
pub(super) fn signallers(plan: &LaunchPlan, unit: UnitId, reference: &str) -> Option<Vec<String>> {
    let u = plan.units.get(unit.index())?;
    let buffer = plan.param_buffer(u, reference)?;
    let names = plan
        .units
        .iter()
        .filter(|other| {
            let mut signals = false;
            mpmd_core::ir::visit::for_each_stmt(&other.kernel.body, &mut |stmt| {
                if let Stmt::Sem {
                    op: SemOp::Signal,
                    sem,
                    ..
                } = stmt
                {
                    signals |= plan.param_buffer(other, &sem.base) == Some(buffer);
                }
            });
            signals
        })
        .map(|other| format!("program {} `{}`", other.program, other.kernel.name))
        .collect();
    Some(names)
}

/// `name[i]` or `name@[c...][i...]` for a flat word index into a semaphore's binding.
pub(super) fn describe_sem_element(
    plan: &LaunchPlan,
    emitted: &EmittedModule,
    reference: &str,
    unit: UnitId,
    word: u32,
) -> String {
    // Find the buffer: the unit's kernel names the param; map it to the operand.
    let Some(u) = plan.units.get(unit.index()) else {
        return reference.to_string();
    };
    let Some(buffer) = plan.param_buffer(u, reference) else {
        return reference.to_string();
    };
    let buf = plan.buffer(buffer);
    let (_, offset) = emitted.layout.place(buffer);
    let local = (word as u64).saturating_sub(offset);
    let len = buf.ty.len().max(1);
    let instance = local / len;
    let mut element = local % len;
    let mut index = vec![0u64; buf.ty.shape.len()];
    for (k, &d) in buf.ty.shape.iter().enumerate().rev() {
        index[k] = element % d.max(1) as u64;
        element /= d.max(1) as u64;
    }
    match buf.ty.owner.as_ref().and_then(|m| plan.mesh(m)) {
        Some(mesh) if buf.ty.space == MemorySpace::Sem || buf.ty.space == MemorySpace::Gmem => {
            let extents: Vec<u64> = mesh.block_axes().map(|a| a.size as u64).collect();
            let mut rest = instance;
            let mut coords = vec![0u64; extents.len()];
            for (k, &d) in extents.iter().enumerate().rev() {
                coords[k] = rest % d.max(1);
                rest /= d.max(1);
            }
            mpmd_core::backend::element_text(reference, &coords, &index)
        }
        _ => mpmd_core::backend::element_text(reference, &[] as &[u64], &index),
    }
}
