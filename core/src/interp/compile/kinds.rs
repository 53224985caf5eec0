//! The typed operations of the source's operators, casts and math
//! functions, and what the compiler asks of statements and expressions.

use super::*;

/// The float operation `op` on type `t` (f32 or a 16-bit format).
pub(super) fn float_bin(op: FloatBin, t: ScalarType) -> BinKind {
    match Half::of(t) {
        Some(h) => BinKind::Half(op, h),
        None => BinKind::Float(op),
    }
}

pub(super) fn float_cmp(op: FloatCmp, t: ScalarType) -> BinKind {
    match Half::of(t) {
        Some(h) => BinKind::HalfCmp(op, h),
        None => BinKind::FloatCmp(op),
    }
}

pub(super) fn float_un(op: FloatUn, t: ScalarType) -> UnKind {
    match Half::of(t) {
        Some(h) => UnKind::Half(op, h),
        None => UnKind::Float(op),
    }
}

/// The typed operation for `op` on operands of type `t`, and whether the
/// operands are swapped (`a > b` is `b < a`).
pub(super) fn bin_kind(op: BinaryOp, t: ScalarType) -> (BinKind, bool) {
    use BinKind as K;
    use ScalarType::*;
    let f = t.is_float();
    let s = t == I32;
    let arith = |fk: FloatBin, ik: BinKind| if f { float_bin(fk, t) } else { ik };
    let ordered = |fk: FloatCmp, sk: BinKind, uk: BinKind| {
        if f {
            float_cmp(fk, t)
        } else if s {
            sk
        } else {
            uk
        }
    };
    match op {
        BinaryOp::Add => (arith(FloatBin::Add, K::IAdd), false),
        BinaryOp::Sub => (arith(FloatBin::Sub, K::ISub), false),
        BinaryOp::Mul => (arith(FloatBin::Mul, K::IMul), false),
        BinaryOp::Div => (
            arith(FloatBin::Div, if s { K::SDiv } else { K::UDiv }),
            false,
        ),
        BinaryOp::Rem => (
            arith(FloatBin::Rem, if s { K::SRem } else { K::URem }),
            false,
        ),
        BinaryOp::BitAnd => (K::And, false),
        BinaryOp::BitOr => (K::Or, false),
        BinaryOp::BitXor => (K::Xor, false),
        BinaryOp::Shl => (K::Shl, false),
        BinaryOp::Shr => (if s { K::SShr } else { K::UShr }, false),
        BinaryOp::LogicAnd => (K::LogicAnd, false),
        BinaryOp::LogicOr => (K::LogicOr, false),
        BinaryOp::Eq if t == Bool => (K::BEq, false),
        BinaryOp::Ne if t == Bool => (K::BNe, false),
        BinaryOp::Eq => (ordered(FloatCmp::Eq, K::Eq, K::Eq), false),
        BinaryOp::Ne => (ordered(FloatCmp::Ne, K::Ne, K::Ne), false),
        BinaryOp::Lt => (ordered(FloatCmp::Lt, K::SLt, K::ULt), false),
        BinaryOp::Le => (ordered(FloatCmp::Le, K::SLe, K::ULe), false),
        BinaryOp::Gt => (ordered(FloatCmp::Lt, K::SLt, K::ULt), true),
        BinaryOp::Ge => (ordered(FloatCmp::Le, K::SLe, K::ULe), true),
    }
}

pub(super) fn cast_kind(from: ScalarType, to: ScalarType) -> UnKind {
    use ScalarType::*;
    match (from, to, Half::of(from), Half::of(to)) {
        (a, b, _, _) if a == b => UnKind::Copy,
        (_, _, Some(from), Some(to)) => UnKind::H2H { from, to },
        (F32, _, _, Some(h)) => UnKind::F2H(h),
        (I32, _, _, Some(h)) => UnKind::I2H(h),
        (U32, _, _, Some(h)) => UnKind::U2H(h),
        (Bool, _, _, Some(h)) => UnKind::B2H(h),
        (_, F32, Some(h), _) => UnKind::H2F(h),
        (_, I32, Some(h), _) => UnKind::H2I(h),
        (_, U32, Some(h), _) => UnKind::H2U(h),
        (_, Bool, Some(h), _) => UnKind::H2B(h),
        (F32, I32, ..) => UnKind::F2I,
        (F32, U32, ..) => UnKind::F2U,
        (I32, F32, ..) => UnKind::I2F,
        (U32, F32, ..) => UnKind::U2F,
        (F32, Bool, ..) => UnKind::F2B,
        (I32 | U32 | Bool, Bool, ..) => UnKind::I2B,
        (Bool, F32, ..) => UnKind::B2F,
        (Bool, I32 | U32, ..) => UnKind::B2I,
        _ => UnKind::Copy,
    }
}

/// Whether `body` has a `break` or `continue` of the loop it is the body
/// of (outside the loops nested in it).
pub(super) fn exits_loop(body: &[Stmt]) -> bool {
    let mut stack: Vec<&[Stmt]> = vec![body];
    while let Some(stmts) = stack.pop() {
        for s in stmts {
            match s {
                Stmt::Break | Stmt::Continue => return true,
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => stack.extend([&then_body[..], &else_body[..]]),
                _ => {}
            }
        }
    }
    false
}

/// Whether evaluating `e` loads from memory (the only part of an expression
/// that can fail or race).
pub(super) fn contains_load(e: &Expr) -> bool {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match e {
            Expr::Load(_) => return true,
            Expr::Lit(_)
            | Expr::Var(_)
            | Expr::AxisIndex(_)
            | Expr::AxisSize(_)
            | Expr::WarpPosition(_) => {}
            Expr::Unary(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) => stack.push(a),
            Expr::Binary(_, a, b) => stack.extend([&**a, &**b]),
            Expr::Select(c, a, b) => stack.extend([&**c, &**a, &**b]),
            Expr::Math(_, args) => stack.extend(args),
        }
    }
    false
}

/// The registers of a fragment whose length validation fixed.
pub(super) fn array<const N: usize>(regs: Vec<Reg>) -> [Reg; N] {
    let mut out = [0; N];
    out.iter_mut().zip(regs).for_each(|(o, r)| *o = r);
    out
}

/// A pure operation of registers: the same key, the same value, as long as
/// neither operand changes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Pure {
    Bin(BinKind, Reg, Reg),
    Un(UnKind, Reg),
}

impl Pure {
    fn reads(&self, reg: Reg) -> bool {
        match *self {
            Pure::Bin(_, a, b) => a == reg || b == reg,
            Pure::Un(_, a) => a == reg,
        }
    }
}

/// The pure operations computed so far whose results later expressions may
/// take instead of computing them again, by construct: an `if`'s body sees
/// what was computed before it (its lanes computed that too) and what it
/// computes goes with it; a loop body sees, of what was computed before
/// the loop, only what reads no variable the loop assigns. A variable's
/// assignment forgets what read it.
#[derive(Default)]
pub(super) struct Computed {
    /// Innermost last; the kernel's body first.
    scopes: Vec<Scope>,
}

/// The variables a loop assigns (`None` for an `if` or the kernel's body)
/// and what was computed in the construct.
type Scope = (Option<Vec<Reg>>, HashMap<Pure, Reg>);

impl Computed {
    pub(super) fn enter(&mut self, loop_changes: Option<Vec<Reg>>) {
        self.scopes.push((loop_changes, HashMap::new()));
    }

    pub(super) fn leave(&mut self) {
        self.scopes.pop();
    }

    pub(super) fn find(&self, key: &Pure) -> Option<Reg> {
        let mut hidden: Vec<Reg> = vec![];
        for (changes, computed) in self.scopes.iter().rev() {
            if let Some(&reg) = computed.get(key) {
                if !hidden.iter().any(|&r| key.reads(r)) {
                    return Some(reg);
                }
            }
            if let Some(changes) = changes {
                hidden.extend(changes);
            }
        }
        None
    }

    pub(super) fn record(&mut self, key: Pure, reg: Reg) {
        if self.scopes.is_empty() {
            self.scopes.push((None, HashMap::new()));
        }
        if let Some((_, computed)) = self.scopes.last_mut() {
            computed.insert(key, reg);
        }
    }

    /// `reg` (a variable) was assigned: what read it is out of date.
    pub(super) fn changed(&mut self, reg: Reg) {
        for (_, computed) in &mut self.scopes {
            computed.retain(|k, _| !k.reads(reg));
        }
    }

    /// `reg` no longer holds what it computed.
    pub(super) fn forget(&mut self, reg: Reg) {
        for (_, computed) in &mut self.scopes {
            computed.retain(|k, r| *r != reg && !k.reads(reg));
        }
    }
}
