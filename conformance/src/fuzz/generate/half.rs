//! 16-bit floats (`f16`, `bf16`): their arithmetic, literals, casts and
//! rounded f32 values.

use super::*;

impl Gen {
    /// An `f16` or `bf16` value: the type's own arithmetic (computed in f32 and
    /// rounded once, so as exact as f32's on every backend), casts between the
    /// two types, rounded f32 values and 16-bit literals.
    pub(super) fn half(
        &mut self,
        ty: ScalarType,
        depth: u32,
        inexact_ok: bool,
        uniform: bool,
    ) -> Val {
        self.nested(ty, |g| g.half_inner(ty, depth, inexact_ok, uniform))
    }

    pub(super) fn half_literal(&mut self, ty: ScalarType) -> Val {
        let v = (self.rng.below(33) as f32 - 16.0) / 4.0;
        let bits = numerics::from_f32(ty, v).unwrap_or(0);
        Val::new(
            Expr::Lit(Literal::from_bits(ty, u32::from(bits))),
            ty,
            true,
            true,
            v.abs(),
        )
    }

    pub(super) fn half_leaf(&mut self, ty: ScalarType, inexact_ok: bool, uniform: bool) -> Val {
        let other = if ty == F16 { BF16 } else { F16 };
        for _ in 0..4 {
            let got = match self.rng.below(6) {
                0 => Some(self.half_literal(ty)),
                1 if !uniform => self.input_load(ty),
                2 | 3 => self.scope_val(ty, inexact_ok, uniform),
                4 => {
                    // An f32 value rounded to the type: as exact as the f32 value.
                    let f = self.float(1, inexact_ok, uniform);
                    let bound = f.bound.min(FLOAT_CLAMP);
                    let e = clamp(f.e, FLOAT_CLAMP).cast(ty);
                    Some(Val::new(e, ty, f.uniform, f.exact, bound))
                }
                5 => {
                    let h = self.half(other, 0, inexact_ok, uniform);
                    Some(Val {
                        e: h.e.cast(ty),
                        ty,
                        ..h
                    })
                }
                _ => None,
            };
            if let Some(v) = got {
                return v;
            }
        }
        self.half_literal(ty)
    }

    pub(super) fn half_inner(
        &mut self,
        ty: ScalarType,
        depth: u32,
        inexact_ok: bool,
        uniform: bool,
    ) -> Val {
        if depth == 0 || self.rng.chance(30) {
            return self.half_leaf(ty, inexact_ok, uniform);
        }
        let d = depth - 1;
        let two = |g: &mut Self| {
            (
                g.half(ty, d, inexact_ok, uniform),
                g.half(ty, d, inexact_ok, uniform),
            )
        };
        let both = |e: Expr, a: &Val, b: &Val, bound: f32| {
            Val::new(e, ty, a.uniform && b.uniform, a.exact && b.exact, bound)
        };
        let one = |e: Expr, a: &Val, bound: f32| Val::new(e, ty, a.uniform, a.exact, bound);
        let v = match self.rng.below(11) {
            0..=2 => {
                let (a, b) = two(self);
                let op = *self.rng.pick(&[BinaryOp::Add, BinaryOp::Sub]);
                both(
                    Expr::Binary(op, Box::new(a.e.clone()), Box::new(b.e.clone())),
                    &a,
                    &b,
                    a.bound + b.bound,
                )
            }
            3 => {
                let (a, b) = two(self);
                both(a.e.clone() * b.e.clone(), &a, &b, a.bound * b.bound)
            }
            4 if inexact_ok || self.ieee => {
                let (a, b) = two(self);
                let divisor = math(MathFn::Abs, [b.e.clone()]) + half_one(ty);
                let v = both(a.e.clone() / divisor, &a, &b, a.bound);
                self.rounded(v)
            }
            5 => {
                let f = *self.rng.pick(&[MathFn::Abs, MathFn::Floor, MathFn::Ceil]);
                let a = self.half(ty, d, inexact_ok, uniform);
                one(math(f, [a.e.clone()]), &a, a.bound + 1.0)
            }
            6 => {
                let a = self.half(ty, d, inexact_ok, uniform);
                Val { e: -a.e, ..a }
            }
            7 => {
                let f = *self.rng.pick(&[MathFn::Min, MathFn::Max]);
                let (a, b) = two(self);
                both(
                    math(f, [a.e.clone(), b.e.clone()]),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                )
            }
            8 => {
                let c = self.boolean(d, uniform);
                let (a, b) = two(self);
                let mut v = both(
                    select(c.e, a.e.clone(), b.e.clone()),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                );
                v.uniform &= c.uniform;
                v
            }
            9 if inexact_ok || self.ieee => {
                let (a, b) = two(self);
                let c = self.half(ty, d, inexact_ok, uniform);
                let mut v = both(
                    math(MathFn::Fma, [a.e.clone(), b.e.clone(), c.e.clone()]),
                    &a,
                    &b,
                    a.bound * b.bound + c.bound,
                );
                v.uniform &= c.uniform;
                v.exact &= c.exact;
                self.rounded(v)
            }
            10 if inexact_ok || self.ieee => {
                let a = self.half(ty, d, inexact_ok, uniform);
                let v = one(
                    math(MathFn::Sqrt, [math(MathFn::Abs, [a.e.clone()])]),
                    &a,
                    a.bound.sqrt() + 1.0,
                );
                self.rounded(v)
            }
            _ => self.half_leaf(ty, inexact_ok, uniform),
        };
        if v.bound > FLOAT_CLAMP {
            let b = Expr::Lit(Literal::from_bits(
                ty,
                u32::from(numerics::from_f32(ty, FLOAT_CLAMP).unwrap_or(0)),
            ));
            Val {
                e: math(MathFn::Min, [math(MathFn::Max, [v.e, -b.clone()]), b]),
                bound: FLOAT_CLAMP,
                ..v
            }
        } else {
            v
        }
    }
}
