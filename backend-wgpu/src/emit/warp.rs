//! Warp collectives, emulated through workgroup memory: every invocation
//! publishes its value's word in `mpmd_warp_words`, a barrier makes the
//! words visible, each reads what its op needs (a shuffle one word, a vote
//! or reduction its warp's 32 in the fixed order of docs/numerics.md), and a
//! second barrier frees the words for the next collective. The barriers need
//! block-uniform control flow: a collective under a condition that is only
//! warp-uniform is refused ([`EmitError::WarpOutsideBlockUniformControl`]).

use mpmd_core::ir::{Binding, Expr, ScalarType, Stmt, WarpOp, WARP_SIZE};
use mpmd_core::plan::LaunchPlan;

use super::bindings::WordType;
use super::helpers::Helper;
use super::syntax::{from_word, to_word, wgsl_scalar};
use super::unit::UnitEmitter;
use super::{fused_workgroup_size, fuses_programs, EmitError, EmitOptions};

/// Words of the exchange array when some program of the plan uses warp
/// collectives: one per invocation of the widest workgroup.
pub(super) fn warp_exchange_words(plan: &LaunchPlan, options: &EmitOptions) -> Option<u32> {
    let uses_warps = |body: &[Stmt]| {
        mpmd_core::ir::visit::any_stmt(body, &mut |s| matches!(s, Stmt::Warp { .. }))
    };
    if !plan.units.iter().any(|u| uses_warps(&u.kernel.body)) {
        return None;
    }
    Some(if fuses_programs(plan, options) {
        fused_workgroup_size(plan)
    } else {
        plan.units
            .iter()
            .map(|u| u.threads_per_block)
            .max()
            .unwrap_or(WARP_SIZE)
    })
}

/// Refuses a unit whose warp collectives stand under control flow that is
/// not block-uniform (validation allows warp-uniform control; the
/// emulation's barriers need the whole workgroup).
pub(super) fn check_warp_control(unit: &mpmd_core::plan::LaunchUnit) -> Result<(), EmitError> {
    let warp = |s: &Stmt| matches!(s, Stmt::Warp { .. });
    let found = unit
        .facts
        .uniformity
        .first_under_nonuniform_control(&unit.kernel.body, &warp);
    match found {
        Some((Stmt::Warp { op, .. }, what, reason)) => {
            Err(EmitError::WarpOutsideBlockUniformControl {
                kernel: unit.kernel.name.clone(),
                op: op.name(),
                what,
                reason,
            })
        }
        _ => Ok(()),
    }
}

impl UnitEmitter<'_, '_> {
    pub(super) fn warp(
        &mut self,
        dest: &Binding,
        op: WarpOp,
        args: &[Expr],
    ) -> Result<(), EmitError> {
        let invalid = |message: String| EmitError::Invalid {
            kernel: self.unit.kernel.name.clone(),
            message,
        };
        let [value, rest @ ..] = args else {
            return Err(invalid(format!("`{}` without a value", op.name())));
        };
        let ty = self
            .unit
            .facts
            .type_of(value)
            .map_err(|e| invalid(e.to_string()))?;
        let v = self.expr(value)?;
        let lane = match rest.first() {
            Some(lane) => Some(self.expr(lane)?),
            None => None,
        };
        let name = op.name();
        self.line(&format!(
            "// {name}: each invocation publishes its word; its warp reads them between two barriers."
        ));
        self.line(&format!(
            "mpmd_warp_words[thread_id] = {};",
            to_word(ty, WordType::U32, &v)
        ));
        self.line("workgroupBarrier();");
        let base = "(thread_id & 0xffffffe0u)";
        let own = "(thread_id & 31u)";
        let result = match op {
            _ if op.is_shuffle() => {
                let lane = lane.ok_or_else(|| invalid(format!("`{name}` without a lane")))?;
                let amount = self.temp("lane");
                self.line(&format!("let {amount}: u32 = ({lane}) & 31u;"));
                let source = match op {
                    WarpOp::ShuffleIdx => amount,
                    WarpOp::ShuffleUp => {
                        format!("select({own}, {own} - {amount}, {own} >= {amount})")
                    }
                    WarpOp::ShuffleDown => {
                        format!("select({own}, {own} + {amount}, {own} + {amount} <= 31u)")
                    }
                    _ => format!("({own} ^ {amount})"),
                };
                from_word(
                    ty,
                    WordType::U32,
                    &format!("mpmd_warp_words[{base} | {source}]"),
                )
            }
            WarpOp::Ballot => self.call(Helper::WarpBallot, "mpmd_warp_ballot", &[base.into()]),
            WarpOp::VoteAny => {
                let bits = self.call(Helper::WarpBallot, "mpmd_warp_ballot", &[base.into()]);
                format!("({bits} != 0u)")
            }
            WarpOp::VoteAll => {
                let bits = self.call(Helper::WarpBallot, "mpmd_warp_ballot", &[base.into()]);
                format!("({bits} == 0xffffffffu)")
            }
            _ => {
                // Integer sums wrap: add the words as u32.
                let (on, back) = match (op, ty) {
                    (WarpOp::ReduceAdd, ScalarType::I32) => (ScalarType::U32, true),
                    _ => (ty, false),
                };
                let what = match op {
                    WarpOp::ReduceMin => "min",
                    WarpOp::ReduceMax => "max",
                    _ => "add",
                };
                let call = self.call(
                    Helper::WarpReduce(op, on),
                    &format!("mpmd_warp_{what}_{}", wgsl_scalar(on)),
                    &[base.into()],
                );
                if back {
                    format!("bitcast<i32>({call})")
                } else {
                    call
                }
            }
        };
        let name = self.bind_scalar(&dest.name, dest.ty);
        self.line(&format!("let {name}: {} = {result};", wgsl_scalar(dest.ty)));
        self.line("workgroupBarrier();");
        Ok(())
    }
}
