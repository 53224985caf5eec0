//! Warp collectives, emulated through workgroup memory: every invocation
//! publishes its value's word in `mpmd_warp_words`, a barrier makes the
//! words visible, each reads what its op needs (a shuffle one word, a vote
//! or reduction its warp's 32 in the fixed order of docs/numerics.md), and a
//! second barrier frees the words for the next collective. The barriers need
//! block-uniform control flow: a collective under a condition that is only
//! warp-uniform is refused ([`EmitError::WarpOutsideBlockUniformControl`]).

use mpmd_core::ir::{mma, Binding, Expr, Fragment, RefAccess, ScalarType, Stmt, WarpOp, WARP_SIZE};
use mpmd_core::plan::LaunchPlan;

use super::bindings::WordType;
use super::helpers::Helper;
use super::memory::{store_text, Storage};
use super::numerics::half_name;
use super::syntax::{from_word, to_word, wgsl_scalar};
use super::unit::UnitEmitter;
use super::{fused_workgroup_size, fuses_programs, EmitError, EmitOptions};

/// Words of the exchange array when some program of the plan uses warp
/// collectives: one per invocation of the widest workgroup.
pub(super) fn warp_exchange_words(plan: &LaunchPlan, options: &EmitOptions) -> Option<u32> {
    let uses_warps = |body: &[Stmt]| {
        mpmd_core::ir::visit::any_stmt(body, &mut |s| {
            matches!(s, Stmt::Warp { .. } | Stmt::Mma { .. })
        })
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
    let warp = |s: &Stmt| matches!(s, Stmt::Warp { .. } | Stmt::Mma { .. });
    let found = unit
        .facts
        .uniformity
        .first_under_nonuniform_control(&unit.kernel.body, &warp);
    let op = match &found {
        Some((Stmt::Warp { op, .. }, ..)) => op.name(),
        Some((Stmt::Mma { .. }, ..)) => mma::NAME,
        _ => return Ok(()),
    };
    match found {
        Some((_, what, reason)) => Err(EmitError::WarpOutsideBlockUniformControl {
            kernel: unit.kernel.name.clone(),
            op,
            what,
            reason,
        }),
        None => Ok(()),
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

    /// `mma_m16n8k16(d, a, b, c)`: each invocation publishes its registers
    /// (the packed words of its local arrays) one at a time, and between two
    /// barriers its quad (the 4 lanes of its `g`) reads the words of A its
    /// rows need, the quads of its columns `2q` and `2q + 1` those of B; the
    /// prelude's `mpmd_mma_m16n8k16_<ty>` then sums from `c` in the order of
    /// docs/numerics.md.
    ///
    /// A row of a 2-D local array (`fa[i]`) reads and writes its elements
    /// through the ordinary element accesses (checked like any other); a
    /// whole array passes its words.
    pub(super) fn mma(&mut self, operands: [&Fragment; 4]) -> Result<(), EmitError> {
        let mut vars = Vec::with_capacity(4);
        let mut input = ScalarType::F16;
        for (role, operand) in ["d", "a", "b", "c"].into_iter().zip(operands) {
            let info = self.ref_info(&operand.array)?;
            let Storage::Local { var } = info.storage else {
                return Err(self.invalid(format!(
                    "the operand `{role}` of `{}` is not a local array",
                    mma::NAME
                )));
            };
            if role == "a" {
                input = info.ty.elem;
            }
            vars.push(var);
        }
        let [d, a, b, c] = <[String; 4]>::try_from(vars)
            .map_err(|_| self.invalid(format!("`{}` without its operands", mma::NAME)))?;
        let [d_fragment, a_fragment, b_fragment, c_fragment] = operands;
        let a_words = self.fragment_words(a_fragment, &a, mma::A_LEN)?;
        let b_words = self.fragment_words(b_fragment, &b, mma::B_LEN)?;
        let c = match &c_fragment.row {
            None => c,
            Some(_) => {
                let elements = (0..mma::C_LEN)
                    .map(|i| self.expr(&Expr::Load(Box::new(c_fragment.element(i)))))
                    .collect::<Result<Vec<_>, _>>()?;
                let name = self.temp("mma_c");
                self.line(&format!(
                    "let {name} = array<f32, {}>({});",
                    mma::C_LEN,
                    elements.join(", ")
                ));
                name
            }
        };
        let (rows, cols) = (self.temp("mma_a"), self.temp("mma_b"));
        self.line(&format!(
            "// {}: the lane's rows of A from its quad, its columns of B from two quads.",
            mma::NAME
        ));
        self.line(&format!("var {rows}: array<u32, 16>;"));
        self.line(&format!("var {cols}: array<u32, 16>;"));
        let quad = "(thread_id & 0xfffffffcu)";
        for (r, word) in a_words.iter().enumerate() {
            self.line(&format!("mpmd_warp_words[thread_id] = {word};"));
            self.line("workgroupBarrier();");
            for j in 0..4 {
                self.line(&format!(
                    "{rows}[{}] = mpmd_warp_words[{quad} | {j}u];",
                    4 * r + j
                ));
            }
            self.line("workgroupBarrier();");
        }
        // Lane 4 (2q + c) + j holds rows 2j + 8r (and one more) of column 2q + c.
        let column_quads = "((thread_id & 0xffffffe0u) | ((thread_id & 3u) << 3u))";
        for (r, word) in b_words.iter().enumerate() {
            self.line(&format!("mpmd_warp_words[thread_id] = {word};"));
            self.line("workgroupBarrier();");
            for k in 0..8 {
                self.line(&format!(
                    "{cols}[{}] = mpmd_warp_words[{column_quads} | {k}u];",
                    8 * r + k
                ));
            }
            self.line("workgroupBarrier();");
        }
        let name = format!("mpmd_mma_m16n8k16_{}", half_name(input));
        let call = self.call(Helper::Mma(input), &name, &[rows, cols, c]);
        if d_fragment.row.is_none() {
            self.line(&format!("{d} = {call};"));
            return Ok(());
        }
        let result = self.temp("mma_d");
        self.line(&format!("let {result} = {call};"));
        for i in 0..mma::C_LEN {
            let (place, info) = self.place(&d_fragment.element(i))?;
            let text = store_text(&info, &place, &format!("{result}[{i}]"));
            self.line(&text);
        }
        Ok(())
    }

    /// The packed words (two 16-bit elements each, the even one low) of a
    /// 16-bit fragment of `len` elements held in the local array `var`.
    fn fragment_words(
        &mut self,
        fragment: &Fragment,
        var: &str,
        len: u32,
    ) -> Result<Vec<String>, EmitError> {
        (0..len / 2)
            .map(|r| match &fragment.row {
                None => Ok(format!("{var}[{r}]")),
                Some(_) => {
                    let low = self.expr(&Expr::Load(Box::new(fragment.element(2 * r))))?;
                    let high = self.expr(&Expr::Load(Box::new(fragment.element(2 * r + 1))))?;
                    Ok(format!("({low} | ({high} << 16u))"))
                }
            })
            .collect()
    }

    /// `mma_load_a` / `mma_load_b`: the element loads it means
    /// (`ir::mma::element_loads`), no exchange between lanes.
    pub(super) fn mma_load(
        &mut self,
        operand: mma::Operand,
        dest: &Fragment,
        source: &RefAccess,
    ) -> Result<(), EmitError> {
        let thread_axis = self.unit.mesh.threads.name.clone();
        self.line(&format!(
            "// {}: the lane's fragment, element by element.",
            operand.load_name()
        ));
        for stmt in mma::element_loads(operand, dest, source, &thread_axis) {
            self.stmt(&stmt)?;
        }
        Ok(())
    }
}
