//! Expressions: indices, loads, float, integer and boolean values over
//! every operator, with what the generator knows about each.

use super::*;

impl Gen {
    // ---- expressions -----------------------------------------------------

    /// An in-bounds `u32` index below `len`.
    pub(super) fn index(&mut self, len: u32) -> Expr {
        match self.rng.below(4) {
            0 => var("gid") % lit_u32(len),
            1 => (var("gid") + lit_u32(self.rng.range(0, 1000))) % lit_u32(len),
            2 => lit_u32(self.rng.range(0, len - 1)),
            _ => {
                let v = self.int(U32, 2, false);
                v.e % lit_u32(len)
            }
        }
    }

    pub(super) fn value(
        &mut self,
        ty: ScalarType,
        depth: u32,
        inexact_ok: bool,
        uniform: bool,
    ) -> Val {
        match ty {
            F32 => self.float(depth, inexact_ok, uniform),
            F16 | BF16 => self.half(ty, depth, inexact_ok, uniform),
            Bool => self.boolean(depth, uniform),
            _ => self.int(ty, depth, uniform),
        }
    }

    pub(super) fn scope_val(
        &mut self,
        ty: ScalarType,
        inexact_ok: bool,
        uniform: bool,
    ) -> Option<Val> {
        let found: Vec<&Val> = self
            .vals
            .iter()
            .filter(|v| v.ty == ty && (inexact_ok || v.exact) && (!uniform || v.uniform))
            .collect();
        if found.is_empty() {
            return None;
        }
        Some(found[self.rng.below(found.len() as u64) as usize].clone())
    }

    /// `j < len && x[j] > v` or `j >= len || x[j] < v` with an index that may
    /// be out of bounds: `&&` and `||` short-circuit, so the load is made only
    /// where it is in bounds (checked mode would report it otherwise).
    pub(super) fn guarded_load(&mut self, depth: u32) -> Val {
        let x = self.rng.pick(&self.inputs).clone();
        // `+ t` keeps the index from folding to a constant, which validation
        // refuses out of bounds even where a guard makes the load unreachable.
        let j =
            (self.int(U32, depth, false).e + var("t")) % lit_u32(x.len.saturating_mul(2).max(1));
        let len = lit_u32(x.len);
        let v = self.value(x.ty, depth, false, false);
        let e = if self.rng.chance(50) {
            j.clone().lt(len).and(Expr::Binary(
                BinaryOp::Gt,
                Box::new(load(&x.name, [j])),
                Box::new(v.e),
            ))
        } else {
            j.clone().ge(len).or(Expr::Binary(
                BinaryOp::Lt,
                Box::new(load(&x.name, [j])),
                Box::new(v.e),
            ))
        };
        Val::new(e, Bool, false, v.exact, 0.0)
    }

    pub(super) fn input_load(&mut self, ty: ScalarType) -> Option<Val> {
        let found: Vec<Input> = self.inputs.iter().filter(|x| x.ty == ty).cloned().collect();
        if found.is_empty() {
            return None;
        }
        let x = self.rng.pick(&found).clone();
        let index = self.index(x.len);
        Some(Val::new(load(&x.name, [index]), ty, false, true, 4.0))
    }

    pub(super) fn float_leaf(&mut self, inexact_ok: bool, uniform: bool) -> Val {
        for _ in 0..4 {
            let got = match self.rng.below(7) {
                0 => {
                    let v = (self.rng.below(33) as f32 - 16.0) / 4.0;
                    Some(Val::new(Expr::from(v), F32, true, true, v.abs()))
                }
                1 if !uniform => self.input_load(F32),
                2 | 3 => self.scope_val(F32, inexact_ok, uniform),
                4 => {
                    let ty = *self.rng.pick(&[I32, U32]);
                    let i = self.int(ty, 1, uniform);
                    let m = if ty == I32 {
                        Expr::from(64i32)
                    } else {
                        lit_u32(64)
                    };
                    Some(Val::new((i.e % m).cast(F32), F32, i.uniform, true, 64.0))
                }
                5 => {
                    let i = self.int(U32, 1, uniform);
                    let bits = (i.e & lit_u32(0x007F_FFFF)) | lit_u32(0x3F80_0000);
                    Some(Val::new(bits.bitcast(F32), F32, i.uniform, true, 2.0))
                }
                6 => {
                    // A 16-bit value widened: exact.
                    let ty = *self.rng.pick(&[F16, BF16]);
                    let h = self.half(ty, 1, inexact_ok, uniform);
                    Some(Val::new(h.e.cast(F32), F32, h.uniform, h.exact, h.bound))
                }
                _ => None,
            };
            if let Some(v) = got {
                return v;
            }
        }
        let v = (self.rng.below(17) as f32 - 8.0) / 2.0;
        Val::new(Expr::from(v), F32, true, true, v.abs())
    }

    /// `inner` one level deeper, or a flat leaf of `ty` past [`MAX_NEST`].
    pub(super) fn nested(&mut self, ty: ScalarType, inner: impl FnOnce(&mut Self) -> Val) -> Val {
        self.nest += 1;
        let v = if self.nest > MAX_NEST {
            self.flat_leaf(ty)
        } else {
            inner(self)
        };
        self.nest -= 1;
        v
    }

    pub(super) fn float(&mut self, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        self.nested(F32, |g| g.float_inner(depth, inexact_ok, uniform))
    }

    pub(super) fn float_inner(&mut self, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(25) {
            return self.float_leaf(inexact_ok, uniform);
        }
        let d = depth - 1;
        let v = match self.rng.below(22) {
            0..=2 => {
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let op = *self.rng.pick(&[BinaryOp::Add, BinaryOp::Sub]);
                combine(
                    Expr::Binary(op, Box::new(a.e.clone()), Box::new(b.e.clone())),
                    &a,
                    &b,
                    a.bound + b.bound,
                )
            }
            3 | 4 => {
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                combine(a.e.clone() * b.e.clone(), &a, &b, a.bound * b.bound)
            }
            5 if inexact_ok || self.ieee => {
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let v = combine(a.e.clone() / guard(b.e.clone()), &a, &b, a.bound);
                self.rounded(v)
            }
            6 if inexact_ok || self.ieee => {
                let (a, b) = (self.float(d, false, uniform), self.float(d, false, uniform));
                let v = combine(a.e.clone() % guard(b.e.clone()), &a, &b, a.bound);
                self.rounded(v)
            }
            7 => {
                let a = self.float(d, inexact_ok, uniform);
                Val { e: -a.e, ..a }
            }
            8 => {
                let c = self.boolean(d, uniform);
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let mut v = combine(
                    select(c.e, a.e.clone(), b.e.clone()),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                );
                v.uniform &= c.uniform;
                v
            }
            9 if inexact_ok => {
                let a = self.float(d, true, uniform);
                let e = math(MathFn::Exp, [clamp(a.e, 4.0)]);
                Val::new(e, F32, a.uniform, false, 55.0)
            }
            10 if inexact_ok => {
                let a = self.float(d, true, uniform);
                let b = (a.bound + 1.0).ln() + 1.0;
                Val::new(math(MathFn::Log, [guard(a.e)]), F32, a.uniform, false, b)
            }
            11 if inexact_ok || self.ieee => {
                let a = self.float(d, inexact_ok, uniform);
                let b = a.bound.sqrt() + 1.0;
                self.rounded(Val::new(
                    math(MathFn::Sqrt, [math(MathFn::Abs, [a.e])]),
                    F32,
                    a.uniform,
                    a.exact,
                    b,
                ))
            }
            12 if inexact_ok => {
                let a = self.float(d, true, uniform);
                Val::new(
                    math(MathFn::Rsqrt, [guard(a.e)]),
                    F32,
                    a.uniform,
                    false,
                    1.0,
                )
            }
            13 if inexact_ok => {
                let f = *self.rng.pick(&[MathFn::Sin, MathFn::Cos, MathFn::Tanh]);
                let a = self.float(d, true, uniform);
                Val::new(math(f, [a.e]), F32, a.uniform, false, 1.0)
            }
            14 => {
                let f = *self.rng.pick(&[MathFn::Abs, MathFn::Floor, MathFn::Ceil]);
                let exact_only = f != MathFn::Abs;
                let a = self.float(d, inexact_ok && !exact_only, uniform);
                Val::new(math(f, [a.e]), F32, a.uniform, a.exact, a.bound + 1.0)
            }
            15 | 16 => {
                let f = *self.rng.pick(&[MathFn::Min, MathFn::Max]);
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                combine(
                    math(f, [a.e.clone(), b.e.clone()]),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                )
            }
            // fma rounds once on every backend (the WGSL backend on the
            // bits): exact, as `+ - *` are, also where `ieee` is off.
            17 => {
                let (a, b, c) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let mut v = combine(
                    math(MathFn::Fma, [a.e.clone(), b.e.clone(), c.e.clone()]),
                    &a,
                    &b,
                    a.bound * b.bound + c.bound,
                );
                v.uniform &= c.uniform;
                v.exact &= c.exact;
                v
            }
            18 if inexact_ok => {
                let (a, b) = (self.float(d, true, uniform), self.float(d, true, uniform));
                let e = math(MathFn::Pow, [guard(a.e), clamp(b.e, 2.0)]);
                let bound = (a.bound + 1.0).powi(2);
                Val::new(e, F32, a.uniform && b.uniform, false, bound)
            }
            _ => self.float_leaf(inexact_ok, uniform),
        };
        if v.bound > FLOAT_CLAMP {
            Val {
                e: clamp(v.e, FLOAT_CLAMP),
                bound: FLOAT_CLAMP,
                ..v
            }
        } else {
            v
        }
    }

    /// The result of `/`, `%` or `sqrt`: exact only on IEEE backends.
    pub(super) fn rounded(&self, v: Val) -> Val {
        Val {
            exact: v.exact && self.ieee,
            ..v
        }
    }

    /// A literal or a value in scope: no recursion.
    pub(super) fn flat_leaf(&mut self, ty: ScalarType) -> Val {
        if self.rng.chance(50) {
            if let Some(v) = self.scope_val(ty, false, true) {
                return v;
            }
        }
        match ty {
            F32 => {
                let v = (self.rng.below(33) as f32 - 16.0) / 4.0;
                Val::new(Expr::from(v), F32, true, true, v.abs())
            }
            F16 | BF16 => self.half_literal(ty),
            I32 => Val::new(Expr::from(self.int_literal(I32)), I32, true, true, 0.0),
            U32 => Val::new(lit_u32(self.int_literal(U32) as u32), U32, true, true, 0.0),
            Bool => Val::new(Expr::from(self.rng.chance(50)), Bool, true, true, 0.0),
        }
    }

    pub(super) fn int_literal(&mut self, ty: ScalarType) -> i32 {
        if self.rng.chance(50) {
            let edges: &[i32] = if ty == I32 {
                &[0, 1, -1, 2, 7, -7, 31, 32, 33, i32::MIN, i32::MAX, 100_000]
            } else {
                &[0, 1, 2, 7, 31, 32, 33, -1, i32::MIN, i32::MAX, 65_535]
            };
            *self.rng.pick(edges)
        } else if self.rng.chance(50) {
            self.rng.range(0, 20) as i32 - 10
        } else {
            self.rng.next_u32() as i32
        }
    }

    pub(super) fn int_leaf(&mut self, ty: ScalarType, uniform: bool) -> Val {
        let p = self.programs[self.cur].clone();
        let other = if ty == I32 { U32 } else { I32 };
        for _ in 0..4 {
            let got = match self.rng.below(9) {
                0 => {
                    let v = self.int_literal(ty);
                    let e = if ty == I32 {
                        Expr::from(v)
                    } else {
                        lit_u32(v as u32)
                    };
                    Some(Val::new(e, ty, true, true, 0.0))
                }
                1 if !uniform => self.input_load(ty),
                2 | 3 => self.scope_val(ty, false, uniform),
                4 => {
                    let a = self
                        .rng
                        .pick(&p.mesh.axes().cloned().collect::<Vec<_>>())
                        .clone();
                    let is_thread = a.name == p.mesh.threads.name;
                    if uniform && is_thread {
                        None
                    } else {
                        let e = if self.rng.chance(70) {
                            axis_index(&a.name)
                        } else {
                            axis_size(&a.name)
                        };
                        let uni = !matches!(&e, Expr::AxisIndex(_)) || !is_thread;
                        Some(Val::new(cast_to(e, U32, ty), ty, uni, true, 0.0))
                    }
                }
                5 => {
                    let f = self.float(1, false, uniform);
                    Some(Val::new(f.e.cast(ty), ty, f.uniform, true, 0.0))
                }
                6 => {
                    // The sign of zero is unspecified (and `x + 0.0` is folded to
                    // `x` on lavapipe, keeping -0.0): bitcast the magnitude.
                    let f = self.float(1, false, uniform);
                    Some(Val::new(
                        math(MathFn::Abs, [f.e]).bitcast(ty),
                        ty,
                        f.uniform,
                        true,
                        0.0,
                    ))
                }
                7 => {
                    let b = self.boolean(1, uniform);
                    Some(Val::new(b.e.cast(ty), ty, b.uniform, true, 0.0))
                }
                8 => {
                    let o = self.int(other, 1, uniform);
                    let e = if self.rng.chance(50) {
                        o.e.cast(ty)
                    } else {
                        o.e.bitcast(ty)
                    };
                    Some(Val::new(e, ty, o.uniform, true, 0.0))
                }
                _ => None,
            };
            if let Some(v) = got {
                return v;
            }
        }
        let e = if ty == I32 {
            Expr::from(3i32)
        } else {
            lit_u32(3)
        };
        Val::new(e, ty, true, true, 0.0)
    }

    pub(super) fn int(&mut self, ty: ScalarType, depth: u32, uniform: bool) -> Val {
        self.nested(ty, |g| g.int_inner(ty, depth, uniform))
    }

    pub(super) fn int_inner(&mut self, ty: ScalarType, depth: u32, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(25) {
            return self.int_leaf(ty, uniform);
        }
        let d = depth - 1;
        match self.rng.below(8) {
            0..=3 => {
                let op = *self.rng.pick(&BinaryOp::COMPOUND);
                let (a, b) = (self.int(ty, d, uniform), self.int(ty, d, uniform));
                Val::new(
                    Expr::Binary(op, Box::new(a.e), Box::new(b.e)),
                    ty,
                    a.uniform && b.uniform,
                    true,
                    0.0,
                )
            }
            4 => {
                let op = *self.rng.pick(&[UnaryOp::Neg, UnaryOp::BitNot]);
                let a = self.int(ty, d, uniform);
                Val::new(Expr::Unary(op, Box::new(a.e)), ty, a.uniform, true, 0.0)
            }
            5 => {
                let f = *self.rng.pick(&[MathFn::Abs, MathFn::Min, MathFn::Max]);
                let args: Vec<Val> = (0..f.arity()).map(|_| self.int(ty, d, uniform)).collect();
                let uni = args.iter().all(|a| a.uniform);
                Val::new(math(f, args.into_iter().map(|a| a.e)), ty, uni, true, 0.0)
            }
            6 => {
                let c = self.boolean(d, uniform);
                let (a, b) = (self.int(ty, d, uniform), self.int(ty, d, uniform));
                let uni = c.uniform && a.uniform && b.uniform;
                Val::new(select(c.e, a.e, b.e), ty, uni, true, 0.0)
            }
            _ => self.int_leaf(ty, uniform),
        }
    }

    pub(super) fn boolean(&mut self, depth: u32, uniform: bool) -> Val {
        self.nested(Bool, |g| g.boolean_inner(depth, uniform))
    }

    pub(super) fn boolean_inner(&mut self, depth: u32, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(15) {
            if let Some(v) = self.scope_val(Bool, false, uniform) {
                return v;
            }
            if self.rng.chance(20) {
                return Val::new(Expr::from(self.rng.chance(50)), Bool, true, true, 0.0);
            }
        }
        let d = depth.saturating_sub(1);
        match self.rng.below(6) {
            0..=2 => {
                let ty = *self.rng.pick(&[F32, I32, U32, F16, BF16]);
                let (a, b) = (
                    self.value(ty, d, false, uniform),
                    self.value(ty, d, false, uniform),
                );
                let op = *self.rng.pick(&BinaryOp::COMPARISONS);
                Val::new(
                    Expr::Binary(op, Box::new(a.e), Box::new(b.e)),
                    Bool,
                    a.uniform && b.uniform,
                    true,
                    0.0,
                )
            }
            3 if depth > 0 => {
                let op = *self.rng.pick(&[BinaryOp::LogicAnd, BinaryOp::LogicOr]);
                let (a, b) = (self.boolean(d, uniform), self.boolean(d, uniform));
                Val::new(
                    Expr::Binary(op, Box::new(a.e), Box::new(b.e)),
                    Bool,
                    a.uniform && b.uniform,
                    true,
                    0.0,
                )
            }
            4 if depth > 0 => {
                let a = self.boolean(d, uniform);
                Val::new(!a.e, Bool, a.uniform, true, 0.0)
            }
            5 if !uniform && !self.inputs.is_empty() => self.guarded_load(d),
            _ => {
                let ty = *self.rng.pick(&[I32, U32]);
                let a = self.int(ty, d, uniform);
                Val::new(a.e.cast(Bool), Bool, a.uniform, true, 0.0)
            }
        }
    }
}
