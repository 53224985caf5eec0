//! Statements: control flow, assignments, local arrays, atomics on counters
//! and owned elements, and the smem and gmem scratch phases between barriers.

use super::*;

impl Gen {
    /// Appends up to `budget` random statements. `uniform`: control flow here
    /// is block-uniform (barriers and block-collective phases allowed).
    pub(super) fn stmts(&mut self, body: &mut Vec<Stmt>, budget: u32, depth: u32, uniform: bool) {
        for _ in 0..budget {
            self.stmt(body, depth, uniform);
        }
    }

    pub(super) fn scoped(&mut self, f: impl FnOnce(&mut Self, &mut Vec<Stmt>)) -> Vec<Stmt> {
        let (nv, nr, nw) = (self.vals.len(), self.vars.len(), self.warp_vals.len());
        let mut body = vec![];
        f(self, &mut body);
        self.vals.truncate(nv);
        self.vars.truncate(nr);
        self.warp_vals.truncate(nw);
        body
    }

    /// Whether a warp collective may stand here: a warp program in
    /// warp-uniform control.
    pub(super) fn warp_here(&self) -> bool {
        self.programs[self.cur].warps && self.warp_ctl
    }

    pub(super) fn stmt(&mut self, body: &mut Vec<Stmt>, depth: u32, uniform: bool) {
        let p = self.programs[self.cur].clone();
        let nested_ok = depth < 2;
        if self.warp_here() && self.rng.chance(WARP_STMT_PERCENT) {
            return self.warp_stmt(body, depth);
        }
        match self.rng.below(16) {
            0..=2 => {
                let ty = *self.rng.pick(&[F32, F32, I32, U32, Bool, F16, BF16]);
                let uni = self.rng.chance(20);
                let inexact = self.rng.chance(50);
                let v = self.value(ty, 3, inexact, uni);
                let name = self.fresh("v");
                body.push(Stmt::Let {
                    var: Binding {
                        name: name.clone(),
                        ty,
                    },
                    value: v.e,
                });
                self.vals
                    .push(Val::new(var(&name), ty, v.uniform, v.exact, v.bound));
            }
            3 => {
                let ty = *self.rng.pick(&[F32, I32, U32]);
                let exact = self.rng.chance(50);
                let v = self.value(ty, 2, !exact, false);
                let name = self.fresh("acc");
                body.push(Stmt::Var {
                    var: Binding {
                        name: name.clone(),
                        ty,
                    },
                    init: v.e,
                });
                self.vars.push((name.clone(), ty, exact));
                self.vals
                    .push(Val::new(var(&name), ty, false, exact, FLOAT_CLAMP));
            }
            4 | 5 if self.helpers && self.rng.chance(50) => {
                let uni = self.rng.chance(20);
                let args = vec![
                    self.value(U32, 2, false, uni),
                    self.value(U32, 2, false, uni),
                ];
                let uniform = args.iter().all(|a| a.uniform);
                let name = self.fresh("m");
                body.push(Stmt::Call {
                    dest: Some(Binding {
                        name: name.clone(),
                        ty: U32,
                    }),
                    function: MIX.into(),
                    args: args.into_iter().map(|a| a.e).collect(),
                });
                self.vals
                    .push(Val::new(var(&name), U32, uniform, true, 0.0));
            }
            4 | 5 => self.assign(body),
            6 if nested_ok => {
                let cond = self.boolean(2, false);
                // Warp collectives only where the condition is block-uniform.
                let warp_ctl = self.warp_ctl;
                self.warp_ctl &= cond.uniform;
                let then_body = self.scoped(|g, b| g.stmts(b, 2, depth + 1, false));
                let else_body = if self.rng.chance(50) {
                    self.scoped(|g, b| g.stmts(b, 2, depth + 1, false))
                } else {
                    vec![]
                };
                self.warp_ctl = warp_ctl;
                body.push(Stmt::If {
                    cond: cond.e,
                    then_body,
                    else_body,
                });
            }
            7 | 8 if nested_ok && self.loop_depth < 2 => {
                // Named by depth: sibling loops reuse the name.
                let name = format!("li{}", self.loop_depth);
                let (ty, start, end) =
                    if self.scalars.iter().any(|(n, _)| n == "sn") && self.rng.chance(40) {
                        (U32, lit_u32(0), var("sn"))
                    } else if self.rng.chance(50) {
                        (
                            I32,
                            Expr::from(-1i32),
                            Expr::from(self.rng.range(0, 3) as i32),
                        )
                    } else if self.helpers && self.rng.chance(50) {
                        (U32, lit_u32(0), var("TRIPS"))
                    } else {
                        (U32, lit_u32(0), lit_u32(self.rng.range(1, 4)))
                    };
                if self.rng.chance(30) {
                    return self.while_loop(body, depth, uniform);
                }
                self.loop_depth += 1;
                let loop_body = self.scoped(|g, b| {
                    g.vals.push(Val::new(var(&name), ty, true, true, 4.0));
                    g.stmts(b, 2, depth + 1, uniform);
                    if g.rng.chance(30) {
                        g.loop_exit(b, uniform, true);
                    }
                    if g.rng.chance(60) {
                        g.assign(b);
                    }
                });
                self.loop_depth -= 1;
                body.push(Stmt::For {
                    var: Binding { name, ty },
                    start,
                    end,
                    body: loop_body,
                });
            }
            9 if nested_ok && uniform => {
                let cond = self.boolean(2, true);
                let then_body = self.scoped(|g, b| g.stmts(b, 2, depth + 1, true));
                body.push(Stmt::If {
                    cond: cond.e,
                    then_body,
                    else_body: vec![],
                });
            }
            // Modules without warp collectives only: theirs keep their random
            // stream (the warp coverage is measured on fixed seeds).
            10 if uniform && !self.module_warps && self.rng.chance(40) => {
                self.block_collective(body, p.threads)
            }
            10 if uniform => body.push(Stmt::Barrier),
            10 if self.rng.chance(30) => self.deep_chain(body),
            11 => self.local_array(body, uniform),
            12 if p.uses_counters => self.counter_atomic(body),
            13 if p.owned_atomics => self.owned_atomics(body),
            14 if uniform && p.smem.is_some() => self.smem_phase(body, &p),
            15 if uniform && p.gscratch.is_some() => self.gscratch_phase(body, &p),
            _ => {
                let ty = *self.rng.pick(&[F32, I32, U32]);
                let v = self.value(ty, 3, true, false);
                let name = self.fresh("v");
                body.push(Stmt::Let {
                    var: Binding {
                        name: name.clone(),
                        ty,
                    },
                    value: v.e,
                });
                self.vals
                    .push(Val::new(var(&name), ty, v.uniform, v.exact, v.bound));
            }
        }
    }

    /// `let b: ty = block_op(...);` in block-uniform control: a broadcast of
    /// a per-thread value from a thread of the block, or a vote on a
    /// per-thread condition. The result is block-uniform, so later
    /// conditions on it may hold barriers.
    pub(super) fn block_collective(&mut self, body: &mut Vec<Stmt>, threads: u32) {
        let name = self.fresh("bc");
        let op = *self.rng.pick(&BlockOp::ALL);
        let (ty, args, val) = match op {
            BlockOp::Broadcast => {
                let ty = *self.rng.pick(&[F32, I32, U32, Bool]);
                let v = self.value(ty, 2, true, false);
                let source = lit_u32(self.rng.range(0, threads.saturating_sub(1)));
                let val = Val::new(var(&name), ty, true, v.exact, v.bound);
                (ty, vec![v.e, source], val)
            }
            _ => {
                let p = self.boolean(2, false);
                let ty = if op == BlockOp::Count { U32 } else { Bool };
                (ty, vec![p.e], Val::new(var(&name), ty, true, true, 0.0))
            }
        };
        body.push(Stmt::BlockCollective {
            dest: Binding {
                name: name.clone(),
                ty,
            },
            op,
            args,
        });
        self.vals.push(val);
    }

    /// `var w = 0u; while w < trips max limit { w += 1u; ... }` with a
    /// maximum that is never reached (reaching it is an error in checked
    /// mode), sometimes leaving early through `break`.
    pub(super) fn while_loop(&mut self, body: &mut Vec<Stmt>, depth: u32, uniform: bool) {
        let counter = self.fresh("w");
        let trips = self.rng.range(0, 4);
        let max = trips + self.rng.range(0, 3);
        body.push(Stmt::Var {
            var: Binding {
                name: counter.clone(),
                ty: U32,
            },
            init: lit_u32(0),
        });
        self.loop_depth += 1;
        let loop_body = self.scoped(|g, b| {
            // First, so that a `continue` further down cannot skip it.
            b.push(Stmt::CompoundAssign {
                name: counter.clone(),
                op: BinaryOp::Add,
                value: lit_u32(1),
            });
            g.stmts(b, 2, depth + 1, uniform);
            if g.rng.chance(40) {
                g.loop_exit(b, uniform, false);
            }
            if g.rng.chance(60) {
                g.assign(b);
            }
        });
        self.loop_depth -= 1;
        body.push(Stmt::While {
            cond: var(&counter).lt(lit_u32(trips)),
            max: lit_u32(max),
            body: loop_body,
        });
    }

    /// `if c { break; }` (or `continue;` where `continue_ok`): under a
    /// thread-dependent condition only where the loop has no block-collective
    /// operation (`uniform` is false), since such a loop is non-uniform.
    pub(super) fn loop_exit(&mut self, body: &mut Vec<Stmt>, uniform: bool, continue_ok: bool) {
        // Where warp collectives may stand (a warp branch), a loop stays
        // warp-uniform: it is left on block-uniform conditions only.
        let cond = self.boolean(2, uniform || self.warp_here());
        let exit = if continue_ok && self.rng.chance(50) {
            Stmt::Continue
        } else {
            Stmt::Break
        };
        body.push(Stmt::If {
            cond: cond.e,
            then_body: vec![exit],
            else_body: vec![],
        });
    }

    /// A long but legal flat operator chain (`((t + 3u) ^ 5u) * 7u ...`, a
    /// tree as deep as it is long): every stage that walks expressions and
    /// the emitted code's compilers must take it.
    pub(super) fn deep_chain(&mut self, body: &mut Vec<Stmt>) {
        // A term nests up to two levels in the text format (`(a + 3u ^ 5u) * 7u`
        // prints parentheses), and the blocks around the statement nest a few.
        let most = (mpmd_core::text::MAX_NESTING as u32 / 2).saturating_sub(8);
        let terms = (*self.rng.pick(&[40u32, 80, 120, 199])).min(most);
        let mut e = var("t");
        for _ in 0..terms {
            let c = lit_u32(self.rng.range(1, 1000));
            e = match self.rng.below(3) {
                0 => e + c,
                1 => e ^ c,
                _ => e * c,
            };
        }
        let name = self.fresh("deep");
        body.push(Stmt::Let {
            var: Binding {
                name: name.clone(),
                ty: U32,
            },
            value: e,
        });
        self.vals.push(Val::new(var(&name), U32, false, true, 0.0));
    }

    pub(super) fn assign(&mut self, body: &mut Vec<Stmt>) {
        if self.vars.is_empty() {
            return;
        }
        let (name, ty, exact) = self.rng.pick(&self.vars).clone();
        let other = self.value(ty, 2, !exact, false);
        let cur = var(&name);
        if ty != F32 && self.rng.chance(50) {
            let op = *self
                .rng
                .pick(&[BinaryOp::Add, BinaryOp::BitXor, BinaryOp::Mul]);
            body.push(Stmt::CompoundAssign {
                name,
                op,
                value: other.e,
            });
            return;
        }
        let value = match ty {
            F32 => clamp(cur + other.e, FLOAT_CLAMP),
            _ => match self.rng.below(3) {
                0 => cur + other.e,
                1 => cur ^ other.e,
                _ => cur * other.e,
            },
        };
        body.push(Stmt::Assign { name, value });
    }

    /// A `local` array filled in a loop and read back; in block-uniform
    /// control flow sometimes across a barrier (register tiling keeps
    /// accumulators live across the barriers around its smem tiles).
    pub(super) fn local_array(&mut self, body: &mut Vec<Stmt>, uniform: bool) {
        let ty = *self.rng.pick(&[F32, I32, U32, F16, BF16]);
        let len = self.rng.range(1, 4);
        let name = self.fresh("la");
        let k = self.fresh("k");
        body.push(Stmt::LocalArray {
            name: name.clone(),
            elem: ty,
            shape: vec![len],
        });
        let exact = self.rng.chance(50);
        let fill = self.scoped(|g, b| {
            g.vals.push(Val::new(var(&k), U32, true, true, 4.0));
            let v = g.value(ty, 2, !exact, false);
            b.push(Stmt::Store {
                target: at(&name, [var(&k)]),
                value: v.e,
            });
        });
        body.push(Stmt::For {
            var: Binding { name: k, ty: U32 },
            start: lit_u32(0),
            end: lit_u32(len),
            body: fill,
        });
        if uniform && self.rng.chance(40) {
            body.push(Stmt::Barrier);
        }
        let index = self.index(len);
        let v = self.fresh("v");
        body.push(Stmt::Let {
            var: Binding {
                name: v.clone(),
                ty,
            },
            value: load(&name, [index]),
        });
        self.vals
            .push(Val::new(var(&v), ty, false, exact, FLOAT_CLAMP));
    }

    pub(super) fn counter_atomic(&mut self, body: &mut Vec<Stmt>) {
        if self.rng.chance(25) {
            return self.f32_counter_atomic(body);
        }
        let signed = self.rng.chance(35);
        let (target, op, ty) = if signed {
            let c = self.rng.below(SIGNED_COUNTER_OPS.len() as u64) as u32;
            (
                at("icnt", [lit_u32(c)]),
                SIGNED_COUNTER_OPS[c as usize],
                I32,
            )
        } else {
            let c = self.rng.below(COUNTER_OPS.len() as u64) as u32;
            (at("cnt", [lit_u32(c)]), COUNTER_OPS[c as usize], U32)
        };
        let v = self.value(ty, 2, false, false);
        // The old value depends on the schedule: bound but never used.
        let dest = self.rng.chance(30).then(|| Binding {
            name: self.fresh("old"),
            ty,
        });
        body.push(Stmt::Atomic {
            dest,
            op,
            target,
            args: vec![v.e],
        });
    }

    /// An f32 counter update (`F32_COUNTER_OPS`): min or max of an exact
    /// value, or an add of an exact value clamped and floored to a small
    /// integer, so the final value is the same in every order, as the
    /// integer counters' are.
    pub(super) fn f32_counter_atomic(&mut self, body: &mut Vec<Stmt>) {
        let c = self.rng.below(F32_COUNTER_OPS.len() as u64) as u32;
        let op = F32_COUNTER_OPS[c as usize];
        let v = self.value(F32, 2, false, false);
        let operand = match op {
            AtomicOp::Add => math(MathFn::Floor, [clamp(v.e, F32_COUNTER_ADD_CLAMP)]),
            _ => v.e,
        };
        // The old value depends on the schedule: bound but never used.
        let dest = self.rng.chance(30).then(|| Binding {
            name: self.fresh("old"),
            ty: F32,
        });
        body.push(Stmt::Atomic {
            dest,
            op,
            target: at("fcnt", [lit_u32(c)]),
            args: vec![operand],
        });
    }

    /// Atomics on the element this thread owns: results are deterministic.
    pub(super) fn owned_atomics(&mut self, body: &mut Vec<Stmt>) {
        let name = format!("a{}", self.cur);
        let target = at(&name, [var("gid")]);
        let op = *self.rng.pick(&AtomicOp::ALL);
        let args: Vec<Expr> = (0..op.arity())
            .map(|_| self.value(U32, 2, false, false).e)
            .collect();
        let dest = (op.returns_value()).then(|| Binding {
            name: self.fresh("at"),
            ty: U32,
        });
        if let Some(d) = &dest {
            self.vals
                .push(Val::new(var(&d.name), U32, false, true, 0.0));
        }
        body.push(Stmt::Atomic {
            dest,
            op,
            target,
            args,
        });
    }

    /// `sm[t] = v; barrier; read a neighbour (or thread 0 sums all); barrier`.
    pub(super) fn smem_phase(&mut self, body: &mut Vec<Stmt>, p: &ProgramPlan) {
        let ty = p.smem.expect("smem phase needs smem");
        let sm = format!("sm{}", self.cur);
        let exact = self.rng.chance(50);
        let v = self.value(ty, 3, !exact, false);
        body.push(Stmt::Store {
            target: at(&sm, [var("t")]),
            value: v.e,
        });
        body.push(Stmt::Barrier);
        if self.rng.chance(50) {
            let off = self.rng.range(0, p.threads);
            let name = self.fresh("n");
            body.push(Stmt::Let {
                var: Binding {
                    name: name.clone(),
                    ty,
                },
                value: load(&sm, [(var("t") + lit_u32(off)) % lit_u32(p.threads)]),
            });
            self.vals
                .push(Val::new(var(&name), ty, false, exact, v.bound));
        } else {
            // Thread 0 reduces the block's values in a fixed order.
            let acc = self.fresh("red");
            let j = self.fresh("j");
            let zero = zero_of(ty);
            body.push(Stmt::Var {
                var: Binding {
                    name: acc.clone(),
                    ty,
                },
                init: zero,
            });
            body.push(Stmt::If {
                cond: var("t").eq(lit_u32(0)),
                then_body: vec![Stmt::For {
                    var: Binding {
                        name: j.clone(),
                        ty: U32,
                    },
                    start: lit_u32(0),
                    end: axis_size(&p.mesh.threads.name),
                    body: vec![Stmt::Assign {
                        name: acc.clone(),
                        value: var(&acc) + load(&sm, [var(&j)]),
                    }],
                }],
                else_body: vec![],
            });
            self.vals.push(Val::new(
                var(&acc),
                ty,
                false,
                exact,
                v.bound.max(1.0) * p.threads as f32,
            ));
        }
        body.push(Stmt::Barrier);
    }

    /// The same pattern on the program's gmem scratch, within the block.
    pub(super) fn gscratch_phase(&mut self, body: &mut Vec<Stmt>, p: &ProgramPlan) {
        let ty = p.gscratch.expect("gscratch phase needs gmem scratch");
        let g = format!("g{}", self.cur);
        let exact = self.rng.chance(50);
        let v = self.value(ty, 3, !exact, false);
        body.push(Stmt::Store {
            target: at(&g, [var("gid")]),
            value: v.e,
        });
        body.push(Stmt::Barrier);
        let off = self.rng.range(1, p.threads.max(2));
        let name = self.fresh("n");
        let neighbour = var("lin") * axis_size(&p.mesh.threads.name)
            + (var("t") + lit_u32(off)) % lit_u32(p.threads);
        body.push(Stmt::Let {
            var: Binding {
                name: name.clone(),
                ty,
            },
            value: load(&g, [neighbour]),
        });
        self.vals
            .push(Val::new(var(&name), ty, false, exact, v.bound));
        body.push(Stmt::Barrier);
    }
}
