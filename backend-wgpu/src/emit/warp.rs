//! Warp collectives, on one of two paths ([`WarpPath`]).
//!
//! Emulated: every invocation publishes its value's word in
//! `mpmd_warp_words`, a barrier makes the words visible, each reads what its
//! op needs (a shuffle one word, a vote or reduction its warp's 32 in the
//! fixed order of docs/numerics.md), and a second barrier frees the words
//! for the next collective. The barriers need block-uniform control flow: a
//! collective under a condition that is only warp-uniform is refused
//! ([`EmitError::WarpOutsideBlockUniformControl`]).
//!
//! Native: the adapter's subgroups are the logical warps (checked at the
//! entry point, `mpmd_check_subgroups`), so a word moves with
//! `subgroupShuffle` and votes, ballots and integer reductions are the
//! `subgroup*` builtins; no barrier, so warp-uniform control suffices.
//!
//! Both paths take which lane a word comes from from one place
//! ([`shuffle_source`], [`MmaGather::source`]) and differ only in how the
//! word moves ([`UnitEmitter::exchange`]).

use mpmd_core::ir::{mma, Binding, Expr, Fragment, RefAccess, ScalarType, Stmt, WarpOp, WARP_SIZE};
use mpmd_core::plan::{LaunchPlan, LaunchUnit};

use super::bindings::WordType;
use super::helpers::Helper;
use super::memory::{store_text, Storage};
use super::numerics::half_name;
use super::syntax::{from_word, to_word, wgsl_scalar};
use super::unit::UnitEmitter;
use super::{fused_workgroup_size, fuses_programs, EmitError, EmitOptions, WarpPath};

/// Whether the unit's kernel exchanges words between lanes (shuffles,
/// votes, ballots, reductions, `mma_m16n8k16`; the fragment loads are
/// element loads of the lane's own).
pub(super) fn uses_warps(unit: &LaunchUnit) -> bool {
    mpmd_core::ir::visit::any_stmt(&unit.kernel.body, &mut |s| {
        matches!(s, Stmt::Warp { .. } | Stmt::Mma { .. })
    })
}

/// Whether the unit's entry point checks that the adapter's subgroups are
/// its logical warps: it uses warp collectives on the native path.
pub(super) fn checks_subgroups(unit: &LaunchUnit, options: &EmitOptions) -> bool {
    options.warps == WarpPath::Native && uses_warps(unit)
}

/// Words each invocation publishes for an emulated `mma_m16n8k16`: its A
/// and B registers, all at once between one pair of barriers.
pub(super) const MMA_EXCHANGE_WORDS: u32 = (mma::A_LEN + mma::B_LEN) / 2;

/// Words of the exchange array when some program of the plan uses emulated
/// warp collectives: one per invocation of the widest workgroup, or
/// [`MMA_EXCHANGE_WORDS`] per invocation when some program uses an mma.
pub(super) fn warp_exchange_words(plan: &LaunchPlan, options: &EmitOptions) -> Option<u32> {
    if options.warps == WarpPath::Native || !plan.units.iter().any(uses_warps) {
        return None;
    }
    let invocations = if fuses_programs(plan, options) {
        fused_workgroup_size(plan)
    } else {
        plan.units
            .iter()
            .map(|u| u.threads_per_block)
            .max()
            .unwrap_or(WARP_SIZE)
    };
    let uses_mma = plan.units.iter().any(|u| {
        mpmd_core::ir::visit::any_stmt(&u.kernel.body, &mut |s| matches!(s, Stmt::Mma { .. }))
    });
    // At most 1,024 invocations (the runtime refuses wider workgroups): no overflow.
    Some(match uses_mma {
        true => invocations.saturating_mul(MMA_EXCHANGE_WORDS),
        false => invocations,
    })
}

/// Refuses a unit whose emulated warp collectives stand under control flow
/// that is not block-uniform (validation allows warp-uniform control; the
/// emulation's barriers need the whole workgroup). Native collectives have
/// no barrier, so warp-uniform control is all they need.
pub(super) fn check_warp_control(unit: &LaunchUnit, warps: WarpPath) -> Result<(), EmitError> {
    if warps == WarpPath::Native {
        return Ok(());
    }
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

/// Where a lane reads a word from: `lane` of its warp (the native path's
/// `subgroupShuffle` argument).
struct Source {
    lane: String,
}

impl Source {
    /// The same invocation in the workgroup's numbering (the emulation's
    /// index into `mpmd_warp_words`): the warp's first invocation with
    /// `lane` in the low bits.
    fn invocation(&self) -> String {
        format!("{WARP_BASE} | {}", self.lane)
    }
}

/// The invocation's own lane in its warp.
const OWN_LANE: &str = "(thread_id & 31u)";
/// The first invocation of the invocation's warp.
const WARP_BASE: &str = "(thread_id & 0xffffffe0u)";

/// The source lane of a shuffle by `amount` (already `% 32`), as
/// docs/text-format.md's table says: `shfl_up` and `shfl_down` keep the
/// lane's own value past the ends of the warp.
fn shuffle_source(op: WarpOp, amount: &str) -> Source {
    let own = OWN_LANE;
    let lane = match op {
        WarpOp::ShuffleIdx => amount.to_string(),
        WarpOp::ShuffleUp => format!("select({own}, {own} - {amount}, {own} >= {amount})"),
        WarpOp::ShuffleDown => {
            format!("select({own}, {own} + {amount}, {own} + {amount} <= 31u)")
        }
        _ => format!("({own} ^ {amount})"),
    };
    Source { lane }
}

/// What a lane gathers for `mma_m16n8k16` (the layout of
/// docs/text-format.md; `mpmd_mma_m16n8k16_<ty>` in prelude.wgsl reads it).
#[derive(Clone, Copy)]
enum MmaGather {
    /// Its rows `g` and `g + 8` of A: word `j` of a register comes from
    /// lane `j` of its quad (lanes `4g..4g + 4`).
    RowsOfA,
    /// Its columns `2q` and `2q + 1` of B: word `k` of a register from lane
    /// `k` of the two quads from lane `8q` (lane `4(2q + c) + j` holds rows
    /// `2j + 8r` and one more of column `2q + c`).
    ColumnsOfB,
}

impl MmaGather {
    /// Where word `k` of one register comes from.
    fn source(self, k: u32) -> Source {
        let lane = match self {
            MmaGather::RowsOfA => format!("((thread_id & 28u) | {k}u)"),
            MmaGather::ColumnsOfB => format!("(((thread_id & 3u) << 3u) | {k}u)"),
        };
        Source { lane }
    }

    /// Words gathered from each register: the 4 lanes of a quad, or 8 of two.
    fn words(self) -> u32 {
        match self {
            MmaGather::RowsOfA => 4,
            MmaGather::ColumnsOfB => 8,
        }
    }
}

impl UnitEmitter<'_, '_> {
    fn native_warps(&self) -> bool {
        self.state.options.warps == WarpPath::Native
    }

    /// The word that `source` holds in `word`. Emulated: a read of
    /// `mpmd_warp_words` (every lane published `word` before the barrier,
    /// as its word `slot` of `per_lane`); native: `subgroupShuffle` of the
    /// lane's `word`, a name (so that its expression is evaluated once).
    fn exchange(&self, word: &str, source: &Source, slot: u32, per_lane: u32) -> String {
        if self.native_warps() {
            format!("subgroupShuffle({word}, {})", source.lane)
        } else if per_lane == 1 {
            format!("mpmd_warp_words[{}]", source.invocation())
        } else {
            format!(
                "mpmd_warp_words[({}) * {per_lane}u + {slot}u]",
                source.invocation()
            )
        }
    }

    /// On the emulation, publishes `word` for the warp and waits for every
    /// lane's; nothing on the native path.
    fn publish(&mut self, word: &str) {
        if !self.native_warps() {
            self.line(&format!("mpmd_warp_words[thread_id] = {word};"));
            self.line("workgroupBarrier();");
        }
    }

    /// On the emulation, frees `mpmd_warp_words` for the next collective.
    fn release(&mut self) {
        if !self.native_warps() {
            self.line("workgroupBarrier();");
        }
    }

    /// On the native path, `word` bound to a fresh name (shuffled several
    /// times or by an expression that may report, it is evaluated once);
    /// the emulation publishes the text as it is.
    fn word_name(&mut self, word: String) -> String {
        if !self.native_warps() {
            return word;
        }
        let name = self.temp("word");
        self.line(&format!("let {name}: u32 = {word};"));
        name
    }

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
        let native = self.native_warps();
        if native {
            self.line(&format!(
                "// {name}: subgroup operations (the subgroup is the logical warp)."
            ));
        } else {
            self.line(&format!(
                "// {name}: each invocation publishes its word; its warp reads them between two barriers."
            ));
        }
        let word = match op {
            // Every other value moves as its 32-bit word (16-bit and bool values too).
            _ if op.is_shuffle() => self.word_name(to_word(ty, WordType::U32, &v)),
            _ => to_word(ty, WordType::U32, &v),
        };
        self.publish(&word);
        let base = WARP_BASE;
        let result = match op {
            _ if op.is_shuffle() => {
                let lane = lane.ok_or_else(|| invalid(format!("`{name}` without a lane")))?;
                let amount = self.temp("lane");
                self.line(&format!("let {amount}: u32 = ({lane}) & 31u;"));
                let source = shuffle_source(op, &amount);
                from_word(ty, WordType::U32, &self.exchange(&word, &source, 0, 1))
            }
            // The subgroup is 32 wide: its ballot is the first word.
            WarpOp::Ballot if native => format!("subgroupBallot({v}).x"),
            WarpOp::VoteAny if native => format!("subgroupAny({v})"),
            WarpOp::VoteAll if native => format!("subgroupAll({v})"),
            WarpOp::Ballot => self.call(Helper::WarpBallot, "mpmd_warp_ballot", &[base.into()]),
            WarpOp::VoteAny => {
                let bits = self.call(Helper::WarpBallot, "mpmd_warp_ballot", &[base.into()]);
                format!("({bits} != 0u)")
            }
            WarpOp::VoteAll => {
                let bits = self.call(Helper::WarpBallot, "mpmd_warp_ballot", &[base.into()]);
                format!("({bits} == 0xffffffffu)")
            }
            _ if native => self.native_reduction(op, ty, &v),
            _ => {
                // Integer sums wrap: add the words as u32.
                let (on, back) = match (op, ty) {
                    (WarpOp::ReduceAdd, ScalarType::I32) => (ScalarType::U32, true),
                    _ => (ty, false),
                };
                let call = self.call(
                    Helper::WarpReduce(op, on),
                    &format!("mpmd_warp_{}_{}", reduction_name(op), wgsl_scalar(on)),
                    &[base.into()],
                );
                if back {
                    format!("bitcast<i32>({call})")
                } else {
                    call
                }
            }
        };
        let name = self.bind_scalar(&dest.name, dest.ty)?;
        self.line(&format!("let {name}: {} = {result};", wgsl_scalar(dest.ty)));
        self.release();
        Ok(())
    }

    /// A warp reduction with subgroup operations: integers by the builtins
    /// (exact; sums wrap, so an i32 sum adds the words as u32), f32 by the
    /// butterfly of docs/numerics.md (`mpmd_subgroup_<op>_f32`), since
    /// `subgroupAdd` has no fixed order and `subgroupMin`/`subgroupMax`
    /// leave NaN to the adapter.
    fn native_reduction(&mut self, op: WarpOp, ty: ScalarType, v: &str) -> String {
        let what = reduction_name(op);
        match (op, ty) {
            (_, ScalarType::F32) => self.call(
                Helper::SubgroupReduce(op),
                &format!("mpmd_subgroup_{what}_f32"),
                &[v.to_string(), "thread_id".to_string()],
            ),
            (WarpOp::ReduceAdd, ScalarType::I32) => {
                format!("bitcast<i32>(subgroupAdd(bitcast<u32>({v})))")
            }
            (WarpOp::ReduceAdd, _) => format!("subgroupAdd({v})"),
            (WarpOp::ReduceMin, _) => format!("subgroupMin({v})"),
            _ => format!("subgroupMax({v})"),
        }
    }

    /// `mma_m16n8k16(d, a, b, c)`: each lane gathers the words of A its rows
    /// need from its quad and those of B its columns need from the quads of
    /// columns `2q` and `2q + 1` ([`MmaGather`]); emulated, every lane
    /// publishes its 6 registers at once between one pair of barriers,
    /// natively each word is a `subgroupShuffle`. The prelude's `mpmd_mma_m16n8k16_<ty>` then sums
    /// from `c` in the order of docs/numerics.md.
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
        // Slot `s` of a lane's published words is its register `s`: A's, then B's.
        let registers: Vec<(MmaGather, u32, String, &String)> = (0u32..)
            .zip(a_words)
            .map(|(r, w)| (MmaGather::RowsOfA, r, w, &rows))
            .chain(
                (0u32..)
                    .zip(b_words)
                    .map(|(r, w)| (MmaGather::ColumnsOfB, r, w, &cols)),
            )
            .collect();
        let native = self.native_warps();
        let mut words = Vec::with_capacity(registers.len());
        for (slot, (_, _, word, _)) in (0u32..).zip(&registers) {
            if native {
                words.push(self.word_name(word.clone()));
            } else {
                self.line(&format!(
                    "mpmd_warp_words[thread_id * {MMA_EXCHANGE_WORDS}u + {slot}u] = {word};"
                ));
                words.push(word.clone());
            }
        }
        if !native {
            self.line("workgroupBarrier();");
        }
        for (slot, ((gather, r, _, into), word)) in (0u32..).zip(registers.iter().zip(&words)) {
            let per_register = gather.words();
            for k in 0..per_register {
                let value = self.exchange(word, &gather.source(k), slot, MMA_EXCHANGE_WORDS);
                self.line(&format!("{into}[{}] = {value};", per_register * r + k));
            }
        }
        self.release();
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

/// The name of a warp reduction in helper names (`mpmd_warp_add_f32`).
pub(super) fn reduction_name(op: WarpOp) -> &'static str {
    match op {
        WarpOp::ReduceMin => "min",
        WarpOp::ReduceMax => "max",
        _ => "add",
    }
}
