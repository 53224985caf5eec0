//! Provable operands ([`GenOptions::provable_operands`]): operations on edge
//! values where a compiler can prove an operand zero or two operands equal.

use super::*;

impl Gen {
    // ---- provable operands ------------------------------------------------

    /// The provable-operand statements ([`GenOptions::provable_operands`]) of
    /// the first program, at its top level, from their own stream (nothing
    /// drawn from `rng`, no name from `fresh`, no value left in scope): an
    /// edge value `x` from `xz`, an integer `d` and a zero `z` derived from
    /// it, then one statement per slot of `zs0`, each a shape lavapipe folded
    /// as if no infinity or NaN existed.
    pub(super) fn provable_operands(&mut self, body: &mut Vec<Stmt>) {
        let r = &mut self.provable_rng;
        let len = PROVABLE_SPECIALS_LEN;
        let t = var("t");
        let index = match r.below(3) {
            // The edge values in order (the first 16), some lanes alike.
            0 => (t * lit_u32(r.range(1, 3)) + lit_u32(r.range(0, 15))) % lit_u32(16),
            1 => (var("gid") + lit_u32(r.range(0, len - 1))) % lit_u32(len),
            _ => t % lit_u32(16),
        };
        let x = || var("zx");
        body.push(Stmt::Let {
            var: Binding {
                name: "zx".into(),
                ty: F32,
            },
            value: load(PROVABLE_SPECIALS, [index]),
        });
        // An integer the compiler knows nothing about, and zeros it can
        // prove from it.
        let d = match r.below(3) {
            0 => var("gid").cast(I32) - Expr::Lit(Literal::I32(r.range(0, 40) as i32)),
            1 => var("lin").cast(I32) + Expr::Lit(Literal::I32(1)),
            _ => var("t").cast(I32) * Expr::Lit(Literal::I32(-3)),
        };
        body.push(Stmt::Let {
            var: Binding {
                name: "zd".into(),
                ty: I32,
            },
            value: d,
        });
        let dv = || var("zd");
        let zero = |r: &mut Rng| match r.below(3) {
            0 => dv() & Expr::Lit(Literal::I32(0)),
            1 => dv() - dv(),
            _ => dv() * Expr::Lit(Literal::I32(0)),
        };
        let fzero = |r: &mut Rng| zero(r).cast(F32);
        let store = |slot: u32, value: Expr| Stmt::Store {
            target: at(PROVABLE_OUTPUT, [lit_u32(slot), var("gid")]),
            value,
        };
        // 0: a loop from 0, which a compiler unrolls: `x * f32(0)` first.
        let trips = r.range(2, 4);
        body.push(Stmt::Var {
            var: Binding {
                name: "zacc".into(),
                ty: F32,
            },
            init: Expr::Lit(Literal::f32(0.0)),
        });
        let term = if r.chance(50) {
            x() * var("zj").cast(F32)
        } else {
            var("zj").cast(F32) * x()
        };
        body.push(Stmt::For {
            var: Binding {
                name: "zj".into(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(trips),
            body: vec![Stmt::CompoundAssign {
                name: "zacc".into(),
                op: BinaryOp::Add,
                value: term,
            }],
        });
        body.push(store(0, var("zacc")));
        // 1: self-subtraction.
        let same = match r.below(3) {
            0 => x() - x(),
            1 => x() + (-x()),
            _ => (x() - x()) * x(),
        };
        body.push(store(1, same));
        // 2: fma with a zero factor.
        let c = Expr::Lit(Literal::f32(*r.pick(&[1.0f32, -0.5, 3.0])));
        let fma = if r.chance(50) {
            math(MathFn::Fma, [x(), fzero(r), c])
        } else {
            math(MathFn::Fma, [fzero(r), x(), c])
        };
        body.push(store(2, fma));
        // 3: a division by a zero.
        let quotient = match r.below(3) {
            0 => x() / fzero(r),
            1 => dv().cast(F32) / fzero(r),
            _ => fzero(r) / fzero(r),
        };
        body.push(store(3, quotient));
        // 4: a product with a zero, sometimes added to.
        let product = match r.below(3) {
            0 => fzero(r) * x(),
            1 => x() * fzero(r),
            _ => x() * fzero(r) + Expr::Lit(Literal::f32(1.0)),
        };
        body.push(store(4, product));
        // 5: the f32 steps of a 16-bit operation.
        let half = *r.pick(&[F16, BF16]);
        let h = |e: Expr| e.cast(half);
        let sixteen = match r.below(4) {
            0 => h(dv()) / h(zero(r)),
            1 => h(x()) - h(x()),
            2 => h(x()) * h(zero(r)),
            _ => math(MathFn::Fma, [h(x()), h(zero(r)), half_one(half)]),
        };
        body.push(store(5, sixteen.cast(F32)));
    }
}
