//! Warp collectives in warp-uniform control: shuffles, votes, ballots,
//! reductions, branches on warp-uniform values and the edge values of `xw`.

use super::*;

impl Gen {
    // ---- warp collectives -------------------------------------------------

    /// A warp statement in warp-uniform control: mostly a collective,
    /// sometimes a branch on a warp-uniform condition or a collective over
    /// the edge values.
    pub(super) fn warp_stmt(&mut self, body: &mut Vec<Stmt>, depth: u32) {
        let p = &self.programs[self.cur];
        match self.rng.below(10) {
            0 | 1 if p.warp_branches && depth < 2 => self.warp_branch(body, depth),
            2 => self.warp_specials(body),
            _ => self.warp_collective(body),
        }
    }

    /// `if <warp-uniform condition> { collective; ... } else { ... }`:
    /// warp-uniform control that is not block-uniform (no barrier inside).
    pub(super) fn warp_branch(&mut self, body: &mut Vec<Stmt>, depth: u32) {
        let cond = self.warp_cond(body);
        let then_body = self.scoped(|g, b| {
            g.warp_collective(b);
            g.stmts(b, 2, depth + 1, false);
        });
        let else_body = if self.rng.chance(40) {
            self.scoped(|g, b| g.stmts(b, 2, depth + 1, false))
        } else {
            vec![]
        };
        body.push(Stmt::If {
            cond,
            then_body,
            else_body,
        });
    }

    /// A condition that is the same in every lane of a warp but not in
    /// every thread of the block: the warp index in the forms the
    /// uniformity analysis knows, or a warp-uniform result.
    pub(super) fn warp_cond(&mut self, body: &mut Vec<Stmt>) -> Expr {
        let warps = self.programs[self.cur].threads / 32;
        let k = self.rng.range(0, warps - 1);
        let t = var("t");
        let exact: Vec<Val> = self
            .warp_vals
            .iter()
            .filter(|v| v.exact && v.ty != F16 && v.ty != BF16)
            .cloned()
            .collect();
        match self.rng.below(8) {
            0 => (t / lit_u32(32)).eq(lit_u32(k)),
            1 => Expr::Binary(BinaryOp::Shr, Box::new(t), Box::new(lit_u32(5))).ne(lit_u32(k)),
            2 => (t / lit_u32(64)).eq(lit_u32(k / 2)),
            3 => ((t / lit_u32(32)) % lit_u32(2)).eq(lit_u32(k % 2)),
            4 => {
                // A `let` of the thread index plus a multiple of 32.
                let name = self.fresh("wl");
                body.push(Stmt::Let {
                    var: Binding {
                        name: name.clone(),
                        ty: U32,
                    },
                    value: var("lin") * lit_u32(32 * warps) + t,
                });
                ((var(&name) / lit_u32(32)) % lit_u32(warps)).eq(lit_u32(k))
            }
            _ if !exact.is_empty() => {
                let v = self.rng.pick(&exact).clone();
                match v.ty {
                    Bool if self.rng.chance(50) => v.e,
                    Bool => !v.e,
                    U32 => match self.rng.below(3) {
                        0 => (v.e & lit_u32(1 << self.rng.range(0, 31))).ne(lit_u32(0)),
                        1 => v.e.eq(lit_u32(0)),
                        _ => v.e.gt(lit_u32(self.int_literal(U32) as u32)),
                    },
                    I32 => {
                        if self.rng.chance(50) {
                            (v.e & Expr::from(1i32)).eq(Expr::from(0i32))
                        } else {
                            v.e.gt(Expr::from(self.int_literal(I32)))
                        }
                    }
                    _ => v.e.gt(Expr::from((self.rng.below(33) as f32 - 16.0) / 4.0)),
                }
            }
            _ => (t / lit_u32(32)).eq(lit_u32(k)),
        }
    }

    /// A lane, delta or mask: a literal (also past 31), a per-lane value, a
    /// warp-uniform result or any `u32`. Whether it is warp-uniform too.
    pub(super) fn warp_lane(&mut self) -> (Expr, bool) {
        let t = var("t");
        let warp_u32: Vec<Val> = self
            .warp_vals
            .iter()
            .filter(|v| v.ty == U32)
            .cloned()
            .collect();
        match self.rng.below(10) {
            0..=3 => (lit_u32(*self.rng.pick(&WARP_LANES)), true),
            4..=6 => {
                let c = lit_u32(*self.rng.pick(&WARP_LANES));
                let e = match self.rng.below(7) {
                    0 => t,
                    1 => t + c,
                    2 => t * lit_u32(self.rng.range(2, 7)),
                    3 => lit_u32(31) - t % lit_u32(32),
                    4 => t % lit_u32(self.rng.range(2, 9)),
                    5 => t / lit_u32(self.rng.range(2, 8)),
                    _ => var("gid") ^ c,
                };
                (e, false)
            }
            7 if !warp_u32.is_empty() => (self.rng.pick(&warp_u32).e.clone(), true),
            7 | 8 => (self.int(U32, 1, true).e, true),
            _ => {
                let v = self.int(U32, 2, false);
                (v.e, v.uniform)
            }
        }
    }

    /// An exact f32 per lane with a full mantissa, either sign and
    /// magnitudes from 2^-9 to 2^5 (from the thread id): sums of these
    /// round, so the order of a warp's sum shows in its bits.
    pub(super) fn lane_float(&mut self) -> Val {
        let mix = lit_u32(2 * self.rng.range(1 << 20, 1 << 30) + 1);
        let t = var("t");
        let mantissa = (var("gid") * mix) & lit_u32(0x007F_FFFF);
        let exponent = (lit_u32(118) + t.clone() % lit_u32(14)) << lit_u32(23);
        let sign = ((t / lit_u32(self.rng.range(1, 7))) & lit_u32(1)) << lit_u32(31);
        let bits = mantissa | exponent | sign;
        Val::new(bits.bitcast(F32), F32, false, true, 32.0)
    }

    /// A value of `ty` that usually differs from lane to lane.
    pub(super) fn lane_value(&mut self, ty: ScalarType, inexact_ok: bool) -> Val {
        if ty == F32 && self.rng.chance(30) {
            return self.lane_float();
        }
        let v = self.value(ty, 2, inexact_ok, false);
        if !self.rng.chance(85) {
            return v;
        }
        let t = var("t");
        let small = |ty: ScalarType| (t.clone() % lit_u32(16)).cast(ty);
        let v = match ty {
            U32 => Val::new(
                v.e + var("gid") * lit_u32(2 * self.rng.range(0, 50) + 1),
                U32,
                false,
                true,
                0.0,
            ),
            I32 => Val::new(v.e ^ var("gid").cast(I32), I32, false, true, 0.0),
            Bool => {
                let k = lit_u32(self.rng.range(2, 5));
                let e = v.e.ne((t % k).eq(lit_u32(0)));
                Val::new(e, Bool, false, v.exact, 0.0)
            }
            _ => Val::new(v.e + small(ty), ty, false, v.exact, v.bound + 15.0),
        };
        if v.bound > FLOAT_CLAMP {
            let b = Expr::Lit(Literal::from_bits(
                ty,
                u32::from(numerics::from_f32(ty, FLOAT_CLAMP).unwrap_or(0)),
            ));
            let b = if ty == F32 {
                Expr::from(FLOAT_CLAMP)
            } else {
                b
            };
            Val {
                e: math(MathFn::Min, [math(MathFn::Max, [v.e, -b.clone()]), b]),
                bound: FLOAT_CLAMP,
                ..v
            }
        } else {
            v
        }
    }

    /// A predicate for a vote or ballot: any boolean (often the same in
    /// every lane), one that differs between lanes by its form or by the
    /// input data, or one that holds in all, none or some lanes of a warp
    /// depending on the warp.
    pub(super) fn lane_predicate(&mut self) -> Expr {
        let t = var("t");
        match self.rng.below(20) {
            0..=2 => self.boolean(2, false).e,
            3..=5 => {
                let k = lit_u32(self.rng.range(2, 5));
                self.boolean(1, false).e.ne((t % k).eq(lit_u32(0)))
            }
            6..=8 => {
                let k = self.rng.range(1, 40);
                (t % lit_u32(k)).eq(lit_u32(self.rng.range(0, k - 1)))
            }
            9..=11 => t.lt(lit_u32(*self.rng.pick(&[0u32, 1, 16, 31, 32, 40, 64, 100]))),
            12 => Expr::from(self.rng.chance(50)),
            13..=16 if !self.inputs.is_empty() => {
                // Random data at a per-lane index.
                let x = self.rng.pick(&self.inputs).clone();
                let c = lit_u32(self.rng.range(0, x.len - 1));
                let v = load(&x.name, [(var("gid") + c) % lit_u32(x.len)]);
                let zero = zero_of(x.ty);
                if self.rng.chance(50) {
                    v.gt(zero)
                } else {
                    v.lt(zero)
                }
            }
            _ => (var("gid") & lit_u32(1 << self.rng.range(0, 8))).ne(lit_u32(0)),
        }
    }

    /// One warp collective of a random op on a random accepted type, its
    /// result in scope afterwards (warp-uniform ones for warp branches and
    /// lanes too), folded into the digest and sometimes used as an index.
    pub(super) fn warp_collective(&mut self, body: &mut Vec<Stmt>) {
        let op = *self.rng.pick(&WarpOp::ALL);
        let (args, val, warp_uniform) = if op.is_shuffle() {
            let ty = *self.rng.pick(&SHUFFLE_TYPES);
            // Exact values reach the digest, so most shuffles move those.
            let inexact_ok = self.rng.chance(20);
            let v = self.lane_value(ty, inexact_ok);
            let (lane, lane_uniform) = self.warp_lane();
            let uniform = op == WarpOp::ShuffleIdx && lane_uniform;
            (vec![v.e.clone(), lane], v, uniform)
        } else if matches!(op, WarpOp::VoteAny | WarpOp::VoteAll | WarpOp::Ballot) {
            let p = self.lane_predicate();
            (
                vec![p],
                Val::new(Expr::from(false), Bool, false, true, 0.0),
                true,
            )
        } else {
            let ty = *self.rng.pick(&REDUCE_TYPES);
            // A float sum is exact only of exact values (its order is fixed).
            let inexact_ok = op != WarpOp::ReduceAdd && self.rng.chance(40);
            let v = if ty == F32 && op == WarpOp::ReduceAdd && self.rng.chance(60) {
                self.lane_float()
            } else {
                self.lane_value(ty, inexact_ok)
            };
            let bound = if op == WarpOp::ReduceAdd {
                v.bound * 32.0
            } else {
                v.bound
            };
            (vec![v.e.clone()], Val { bound, ..v }, true)
        };
        let ty = op.result_type(val.ty).expect("an accepted value type");
        let prefix = match op {
            _ if op.is_shuffle() => "sh",
            WarpOp::VoteAny | WarpOp::VoteAll => "vt",
            WarpOp::Ballot => "bl",
            _ => "rd",
        };
        let name = self.fresh(prefix);
        body.push(Stmt::Warp {
            dest: Binding {
                name: name.clone(),
                ty,
            },
            op,
            args,
        });
        let result = Val::new(var(&name), ty, false, val.exact, val.bound);
        self.vals.push(result.clone());
        if warp_uniform {
            self.warp_vals.push(result.clone());
        }
        // Into the digest: integers and booleans as they are, exact floats
        // through `abs` (the sign of zero is unspecified).
        let word = match ty {
            U32 => Some(result.e.clone()),
            I32 => Some(result.e.clone().bitcast(U32)),
            Bool => Some(result.e.clone().cast(U32)),
            F32 if result.exact => Some(math(MathFn::Abs, [result.e.clone()]).bitcast(U32)),
            F16 | BF16 if result.exact => {
                Some(math(MathFn::Abs, [result.e.clone()]).cast(F32).bitcast(U32))
            }
            _ => None,
        };
        if let Some(word) = word {
            body.push(Stmt::Assign {
                name: WARP_DIGEST.into(),
                value: (var(WARP_DIGEST) * lit_u32(33)) ^ word.clone(),
            });
            if self.rng.chance(30) && !self.inputs.is_empty() && !ty.is_float() {
                // The result as an index.
                let x = self.rng.pick(&self.inputs).clone();
                let u = self.fresh("u");
                body.push(Stmt::Let {
                    var: Binding {
                        name: u.clone(),
                        ty: x.ty,
                    },
                    value: load(&x.name, [word % lit_u32(x.len)]),
                });
                let bound = if x.ty.is_float() { 4.0 } else { 0.0 };
                self.vals.push(Val::new(var(&u), x.ty, false, true, bound));
            }
        }
    }

    /// A shuffle or f32 reduction of the edge values of `xw` (NaN,
    /// infinities, ±0, extremes, subnormals), stored straight to its slot of
    /// `ws<i>` and used for nothing else.
    pub(super) fn warp_specials(&mut self, body: &mut Vec<Stmt>) {
        let slot = self.rng.below(u64::from(WARP_SPECIAL_SLOTS)) as u32;
        let op = match slot {
            0 => WarpOp::ReduceAdd,
            1 => WarpOp::ReduceMin,
            2 => WarpOp::ReduceMax,
            _ => *self.rng.pick(&[
                WarpOp::ShuffleIdx,
                WarpOp::ShuffleUp,
                WarpOp::ShuffleDown,
                WarpOp::ShuffleXor,
            ]),
        };
        let t = var("t");
        let len = WARP_SPECIALS_LEN;
        let index = match self.rng.below(4) {
            // The edge values in order (the first 16), some lanes alike.
            0 => (t * lit_u32(self.rng.range(0, 3)) + lit_u32(self.rng.range(0, 15))) % lit_u32(16),
            1 => (var("gid") + lit_u32(self.rng.range(0, len - 1))) % lit_u32(len),
            2 => lit_u32(self.rng.range(0, len - 1)),
            _ => (t ^ lit_u32(self.rng.range(0, 31))) % lit_u32(len),
        };
        let mut args = vec![load(WARP_SPECIALS, [index])];
        if op.is_shuffle() {
            args.push(self.warp_lane().0);
        }
        let name = self.fresh("sp");
        body.push(Stmt::Warp {
            dest: Binding {
                name: name.clone(),
                ty: F32,
            },
            op,
            args,
        });
        body.push(Stmt::Store {
            target: at(&format!("ws{}", self.cur), [lit_u32(slot), var("gid")]),
            value: var(&name),
        });
    }
}
