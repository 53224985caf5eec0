//! Module assembly: the plan of programs, meshes, edges and outputs, the
//! main map and call, the hand-off call, the case section and each kernel's
//! skeleton.

use super::*;

impl Gen {
    pub(super) fn new(seed: u64) -> Self {
        Gen {
            rng: Rng::new(seed),
            programs: vec![],
            edges: vec![],
            inputs: vec![],
            scalars: vec![],
            sn_value: 0,
            has_tick: false,
            vals: vec![],
            vars: vec![],
            next_name: 0,
            cur: 0,
            loop_depth: 0,
            nest: 0,
            ieee: true,
            resident_input: false,
            helpers: false,
            module_warps: false,
            module_warp_branches: false,
            warp_rng: Rng::for_stream(seed, &["warps"]),
            warp_ctl: true,
            warp_vals: vec![],
            module_mma: false,
            mma_rng: Rng::for_stream(seed, &["mma"]),
            module_provable: false,
            provable_rng: Rng::for_stream(seed, &["provable operands"]),
        }
    }

    pub(super) fn fresh(&mut self, prefix: &str) -> String {
        loop {
            self.next_name += 1;
            let name = format!("{prefix}{}", self.next_name);
            // `i` then 32 would be the keyword `i32`.
            if mpmd_core::text::is_valid_name(&name) {
                return name;
            }
        }
    }

    // ---- the module ------------------------------------------------------

    pub(super) fn file(mut self) -> CaseFile {
        let program_count = *self.rng.pick(&[1u32, 1, 2, 2, 3, 4]) as usize;
        for i in 0..program_count {
            let plan = self.program_plan(i);
            self.programs.push(plan);
        }
        for k in 0..self.rng.range(1, 3) {
            let ty = *self.rng.pick(&[F32, F32, I32, U32, F16, BF16]);
            let len = *self.rng.pick(&INPUT_LENGTHS);
            self.inputs.push(Input {
                name: format!("x{k}"),
                ty,
                len,
                resident: k == 0 && self.resident_input,
            });
        }
        for (name, ty) in [("sf", F32), ("si", I32), ("sn", U32)] {
            if self.rng.chance(60) {
                self.scalars.push((name.to_string(), ty));
            }
        }
        self.sn_value = self.rng.range(0, 5);
        self.plan_edges();
        self.has_tick = self.rng.chance(30);
        self.helpers = self.rng.chance(40);
        if self.module_mma {
            self.plan_mma();
        }

        let map = self.main_map();
        let params = map.params();
        let mut kernels = vec![];
        for i in 0..self.programs.len() {
            kernels.push(self.kernel(i, &params));
        }
        if self.rng.chance(50) {
            name_only_used_operands(&mut kernels);
        }
        let mut module = Module {
            meshes: self.programs.iter().map(|p| p.mesh.clone()).collect(),
            kernels,
            maps: vec![map],
            ..Default::default()
        };
        if self.helpers {
            module.consts.push(Const {
                name: "TRIPS".into(),
                value: Literal::U32(TRIPS),
            });
            module.functions.push(mix_function());
        }
        for x in self.inputs.iter().filter(|x| x.resident) {
            module.residents.push(Resident {
                name: x.name.clone(),
                ty: gmem(x.ty, [x.len]),
                zeroed: false,
            });
        }
        module.calls.push(self.main_call());
        if self.rng.chance(20) {
            self.add_handoff(&mut module);
        }
        let spec = self.case(&module);
        CaseFile { module, spec }
    }

    pub(super) fn program_plan(&mut self, i: usize) -> ProgramPlan {
        let warps = self.module_warps && (i == 0 || self.warp_rng.chance(50));
        let warp_branches = warps && i == 0 && self.module_warp_branches;
        let threads = if warps {
            *self.rng.pick(&WARP_THREAD_COUNTS)
        } else {
            *self.rng.pick(&THREAD_COUNTS)
        };
        let max_blocks = if threads >= 128 { 4 } else { 8 };
        let mut b = MeshBuilder::new(&format!("m{i}"));
        let mut blocks = 1u32;
        for a in 0..self.rng.range(1, 3) {
            let size = self.rng.range(1, (max_blocks / blocks).clamp(1, 3));
            blocks *= size;
            b = b.grid(&format!("m{i}_g{a}"), size);
        }
        if blocks * 2 <= max_blocks && self.rng.chance(15) {
            blocks *= 2;
            b = b.cluster(&format!("m{i}_c0"), 2);
        }
        let mesh = b.threads(&format!("m{i}_t"), threads).build();
        let out_ty = *self.rng.pick(&[F32, F32, I32, U32, F16, BF16]);
        let out_layout = *self
            .rng
            .pick(&[OutLayout::Flat, OutLayout::Owned, OutLayout::TwoD]);
        ProgramPlan {
            mesh,
            blocks,
            threads,
            out_ty,
            out_layout,
            out_inexact: self.rng.chance(50),
            warps,
            warp_branches,
            mma: vec![],
            smem: self
                .rng
                .chance(40)
                .then(|| *self.rng.pick(&[F32, I32, U32, F16, BF16])),
            gscratch: self
                .rng
                .chance(25)
                .then(|| *self.rng.pick(&[F32, I32, U32, F16, BF16])),
            owned_atomics: self.rng.chance(30),
            uses_counters: self.rng.chance(40),
        }
    }

    pub(super) fn plan_edges(&mut self) {
        let n = self.programs.len();
        for from in 0..n {
            for to in from + 1..n {
                if self.edges.len() < 3 && self.rng.chance(45) {
                    self.push_edge(from, to, false);
                }
            }
        }
        let forward: Vec<(usize, usize)> = self.edges.iter().map(|e| (e.from, e.to)).collect();
        if !forward.is_empty() && self.rng.chance(25) {
            let (a, b) = *self.rng.pick(&forward);
            self.push_edge(b, a, true);
        }
    }

    pub(super) fn push_edge(&mut self, from: usize, to: usize, back: bool) {
        let edge = Edge {
            from,
            to,
            buf_ty: *self.rng.pick(&[F32, I32, U32]),
            nodec: self.rng.chance(30),
            exact: self.rng.chance(60),
            back,
        };
        self.edges.push(edge);
    }

    pub(super) fn out_name(i: usize) -> String {
        format!("o{i}")
    }

    pub(super) fn out_type(p: &ProgramPlan) -> RefType {
        match p.out_layout {
            OutLayout::Flat => gmem(p.out_ty, [p.blocks * p.threads]),
            OutLayout::Owned => gmem(p.out_ty, [p.threads]).owned_by(&p.mesh.name),
            OutLayout::TwoD => gmem(p.out_ty, [p.blocks, p.threads]),
        }
    }

    pub(super) fn main_map(&mut self) -> MpmdMap {
        let mut b = MapBuilder::new(MAIN_MAP);
        for (i, p) in self.programs.iter().enumerate() {
            b = b.program(&p.mesh.name, &format!("k{i}"));
        }
        for x in &self.inputs {
            b = b.input(&x.name, gmem(x.ty, [x.len]));
            if x.resident {
                b = b.resident();
            }
        }
        if self.programs.iter().any(|p| p.warps) {
            b = b.input(WARP_SPECIALS, gmem(F32, [WARP_SPECIALS_LEN]));
        }
        if self.module_provable {
            b = b.input(PROVABLE_SPECIALS, gmem(F32, [PROVABLE_SPECIALS_LEN]));
        }
        for (i, p) in self.programs.iter().enumerate() {
            for (g, group) in p.mma.iter().enumerate() {
                if group.source_needed(MmaSource::Gmem) {
                    b = b.input(&mma_input(i, g), gmem(group.ty, MMA_TILE));
                }
            }
        }
        for (i, p) in self.programs.iter().enumerate() {
            b = b.output_zeroed(&Self::out_name(i), Self::out_type(p));
            if p.owned_atomics {
                b = b.output_zeroed(&format!("a{i}"), gmem(U32, [p.blocks * p.threads]));
            }
            if p.warps {
                let n = p.blocks * p.threads;
                b = b.output_zeroed(&format!("wo{i}"), gmem(U32, [n]));
                b = b.output_zeroed(&format!("ws{i}"), gmem(F32, [WARP_SPECIAL_SLOTS, n]));
            }
            if !p.mma.is_empty() {
                let slots = MMA_ROWS_MAX * p.mma.len() as u32;
                let shape = [slots, p.blocks * p.threads, mma::C_LEN];
                b = b.output_zeroed(&format!("{MMA_OUTPUT_PREFIX}{i}"), gmem(F32, shape));
            }
        }
        if self.module_provable {
            let n = self.programs[0].blocks * self.programs[0].threads;
            b = b.output_zeroed(PROVABLE_OUTPUT, gmem(F32, [PROVABLE_SLOTS, n]));
        }
        if self.programs.iter().any(|p| p.uses_counters) {
            b = b.output_zeroed("cnt", gmem(U32, [COUNTER_OPS.len() as u32]));
            b = b.output_zeroed("icnt", gmem(I32, [SIGNED_COUNTER_OPS.len() as u32]));
            b = b.output_zeroed("fcnt", gmem(F32, [F32_COUNTER_OPS.len() as u32]));
        }
        if self.has_tick {
            let p = &self.programs[0];
            b = b.output_zeroed("tick", gmem(U32, [1]));
            b = b.output_zeroed("obs", gmem(U32, [p.blocks * p.threads]));
        }
        for (name, ty) in &self.scalars {
            b = b.scalar(name, *ty);
        }
        let multi = self.programs.len() > 1;
        for (i, p) in self.programs.iter().enumerate() {
            if let Some(ty) = p.smem {
                let t = smem(ty, [p.threads]);
                // Single-program maps may leave smem unowned; use both forms.
                let t = if multi || i % 2 == 0 {
                    t.owned_by(&p.mesh.name)
                } else {
                    t
                };
                b = b.scratch(&format!("sm{i}"), t);
            }
            if let Some(ty) = p.gscratch {
                b = b.scratch(&format!("g{i}"), gmem(ty, [p.blocks * p.threads]));
            }
            for (g, group) in p.mma.iter().enumerate() {
                if group.source_needed(MmaSource::Smem) {
                    let tile = smem(group.ty, MMA_TILE).owned_by(&p.mesh.name);
                    b = b.scratch(&mma_tile(i, g), tile);
                }
            }
        }
        for e in &self.edges {
            let from = &self.programs[e.from];
            b = b.scratch(&e.buf(), gmem(e.buf_ty, [from.blocks * from.threads]));
            b = b.scratch(&e.sem(), sem([1]).owned_by(&self.programs[e.to].mesh.name));
        }
        b.build()
    }

    pub(super) fn main_call(&mut self) -> Call {
        let scalars = self
            .scalars
            .clone()
            .into_iter()
            .map(|(name, ty)| {
                let v = match ty {
                    F32 => Literal::f32((self.rng.below(33) as f32 - 16.0) / 4.0),
                    I32 => Literal::I32(self.int_literal(I32)),
                    _ => Literal::U32(self.sn_value),
                };
                (name, v)
            })
            .collect();
        Call {
            map: MAIN_MAP.into(),
            scalars,
        }
    }

    /// Two calls hand data and semaphore credits over through residents owned
    /// by an external mesh `hx`: `send` writes `hand@[b]` and signals
    /// `credit@[b]`; `recv` waits for the credit and reads the data.
    pub(super) fn add_handoff(&mut self, module: &mut Module) {
        let blocks = self.rng.range(1, 3);
        let threads = *self.rng.pick(&[1u32, 17, 32, 48]);
        let hand = gmem(F32, [threads]).owned_by("hx");
        let credit = sem([1]).owned_by("hx");
        module.meshes.push(
            MeshBuilder::new("hs")
                .grid("hs_b", blocks)
                .threads("hs_t", threads)
                .build(),
        );
        module.meshes.push(
            MeshBuilder::new("hr")
                .grid("hr_b", blocks)
                .threads("hr_t", threads)
                .build(),
        );
        module.meshes.push(
            MeshBuilder::new("hx")
                .grid("hx_b", blocks)
                .threads("hx_t", 1)
                .build(),
        );
        module.residents.push(Resident {
            name: "hand".into(),
            ty: hand.clone(),
            zeroed: false,
        });
        module.residents.push(Resident {
            name: "credit".into(),
            ty: credit.clone(),
            zeroed: true,
        });
        let send = MapBuilder::new("send")
            .program("hs", "send_k")
            .input("hin", gmem(F32, [blocks * threads]))
            .output_zeroed("hecho", gmem(F32, [blocks * threads]))
            .scratch("hand", hand.clone())
            .resident()
            .scratch("credit", credit.clone())
            .resident()
            .build();
        let recv = MapBuilder::new("recv")
            .program("hr", "recv_k")
            .output_zeroed("hout", gmem(F32, [blocks * threads]))
            .scratch("hand", hand)
            .resident()
            .scratch("credit", credit)
            .resident()
            .build();
        let scale = (self.rng.below(9) as f32 - 4.0) / 2.0;
        let exact_fn = *self
            .rng
            .pick(&[MathFn::Floor, MathFn::Ceil, MathFn::Abs, MathFn::Sqrt]);
        let send_k = KernelBuilder::new("send_k", send.params()).body(|b| {
            let blk = b.let_("b", U32, axis_index("hs_b"));
            let t = b.let_("t", U32, axis_index("hs_t"));
            let gid = b.let_("gid", U32, blk.clone() * axis_size("hs_t") + t.clone());
            let x = b.let_("x", F32, load("hin", [gid.clone()]));
            let arg = if exact_fn == MathFn::Sqrt {
                math(MathFn::Abs, [x.clone()])
            } else {
                x.clone()
            };
            b.store(
                at_block("hand", [blk.clone()], [t]),
                math(exact_fn, [arg]) * scale,
            );
            b.store(at("hecho", [gid]), x);
            b.signal(at_block("credit", [blk], [lit_u32(0)]), 1i32);
        });
        let recv_k = KernelBuilder::new("recv_k", recv.params()).body(|b| {
            let blk = b.let_("b", U32, axis_index("hr_b"));
            let t = b.let_("t", U32, axis_index("hr_t"));
            b.wait(at_block("credit", [blk.clone()], [lit_u32(0)]), 1i32);
            let v = b.let_(
                "v",
                F32,
                at_block("hand", [blk.clone()], [t.clone()]).load(),
            );
            b.store(at("hout", [blk * axis_size("hr_t") + t]), v.clone() + v);
        });
        module.kernels.push(send_k);
        module.kernels.push(recv_k);
        module.maps.push(send);
        module.maps.push(recv);
        module.calls.push(Call {
            map: "send".into(),
            scalars: vec![],
        });
        module.calls.push(Call {
            map: "recv".into(),
            scalars: vec![],
        });
    }

    pub(super) fn case(&mut self, module: &Module) -> CaseSpec {
        let mut case = CaseSpec::default();
        for map in &module.maps {
            for x in &map.inputs {
                let Type::Ref(r) = &x.ty else { continue };
                let mma_special = self.mma_input_is_special(&x.name);
                let g = match r.elem {
                    _ if x.name == WARP_SPECIALS || x.name == PROVABLE_SPECIALS => {
                        Generator::Special
                    }
                    // Fragment sources: NaN payloads never reach a bitcast.
                    _ if mma_special == Some(true) => Generator::Special,
                    _ if mma_special == Some(false) => Generator::Uniform {
                        lo: Literal::f32(-4.0),
                        hi: Literal::f32(4.0),
                    },
                    F32 => Generator::Uniform {
                        lo: Literal::f32(-4.0),
                        hi: Literal::f32(4.0),
                    },
                    // Not `special`: NaN payloads are unspecified, and a
                    // bitcast would expose them (the corpus covers specials).
                    F16 | BF16 => Generator::Uniform {
                        lo: Literal::f32(-4.0),
                        hi: Literal::f32(4.0),
                    },
                    I32 if self.rng.chance(50) => Generator::Special,
                    I32 => Generator::Uniform {
                        lo: Literal::I32(-1000),
                        hi: Literal::I32(1000),
                    },
                    _ if self.rng.chance(50) => Generator::Special,
                    _ => Generator::Uniform {
                        lo: Literal::U32(0),
                        hi: Literal::U32(u32::MAX),
                    },
                };
                case.generators.push((x.name.clone(), g));
            }
            for o in &map.outputs {
                let Type::Ref(r) = &o.ty else { continue };
                let mode = match o.name.as_str() {
                    "obs" => CompareMode::Multiset,
                    // Order-independent by construction (`F32_COUNTER_OPS`).
                    "fcnt" => CompareMode::Exact,
                    _ if !r.elem.is_float() => CompareMode::Exact,
                    "hout" | "hecho" => CompareMode::Exact,
                    // Edge values moved and reduced exactly (NaN payloads
                    // and the sign of zero are not compared).
                    name if name.starts_with("ws") => CompareMode::Exact,
                    // Edge values through operations on provable operands:
                    // every result is exact (zeros, infinities, NaN, or
                    // correctly rounded sums of multiples of an input).
                    PROVABLE_OUTPUT => CompareMode::Exact,
                    // Sums of mma results: the tensor-core bound on a GPU
                    // (the fuzzer holds the CPU backends to the bits).
                    name if name.starts_with(MMA_OUTPUT_PREFIX) => CompareMode::Mma,
                    name => {
                        let i: usize = name[1..].parse().unwrap_or(0);
                        if self.programs.get(i).is_some_and(|p| p.out_inexact) {
                            CompareMode::Profile
                        } else {
                            CompareMode::Exact
                        }
                    }
                };
                case.compares.push((o.name.clone(), mode));
            }
        }
        case.tags.push("fuzz".into());
        case
    }

    // ---- kernels ---------------------------------------------------------

    pub(super) fn kernel(&mut self, i: usize, params: &[Param]) -> Kernel {
        self.cur = i;
        self.vals.clear();
        self.vars.clear();
        self.next_name = 0;
        self.loop_depth = 0;
        self.warp_ctl = true;
        self.warp_vals.clear();
        let p = self.programs[i].clone();
        let mut body = vec![];
        let tn = p.mesh.threads.name.clone();
        let block_axes: Vec<Axis> = p.mesh.block_axes().cloned().collect();

        body.push(Stmt::Let {
            var: Binding {
                name: "t".into(),
                ty: U32,
            },
            value: axis_index(&tn),
        });
        let mut lin: Option<Expr> = None;
        for a in &block_axes {
            lin = Some(match lin {
                None => axis_index(&a.name),
                Some(l) => l * axis_size(&a.name) + axis_index(&a.name),
            });
        }
        body.push(Stmt::Let {
            var: Binding {
                name: "lin".into(),
                ty: U32,
            },
            value: lin.unwrap_or(lit_u32(0)),
        });
        body.push(Stmt::Let {
            var: Binding {
                name: "gid".into(),
                ty: U32,
            },
            value: var("lin") * axis_size(&tn) + var("t"),
        });
        self.vals.push(Val::new(var("t"), U32, false, true, 0.0));
        self.vals.push(Val::new(var("lin"), U32, true, true, 0.0));
        self.vals.push(Val::new(var("gid"), U32, false, true, 0.0));
        for (name, ty) in self.scalars.clone() {
            self.vals.push(Val::new(var(&name), ty, true, true, 4.0));
        }

        if i == 0 && self.has_tick {
            body.push(Stmt::Atomic {
                dest: Some(Binding {
                    name: "tk".into(),
                    ty: U32,
                }),
                op: AtomicOp::Add,
                target: at("tick", [lit_u32(0)]),
                args: vec![lit_u32(1)],
            });
            // The ticket itself depends on the schedule; that it is below
            // the number of tickets does not.
            let total = p.blocks * p.threads;
            body.push(Stmt::Store {
                target: at("obs", [var("gid")]),
                value: var("tk").lt(lit_u32(total)).cast(U32) + var("tk") / lit_u32(total),
            });
        }

        // Incoming forward edges: wait for every producer block, then read.
        for e in self.edges.clone().iter().filter(|e| e.to == i && !e.back) {
            self.consume_edge(e, &mut body);
        }

        if p.warps {
            // Every warp program reads the edge values, makes a collective in
            // block-uniform control and, where it may, one in a warp branch.
            body.push(Stmt::Var {
                var: Binding {
                    name: WARP_DIGEST.into(),
                    ty: U32,
                },
                init: lit_u32(0),
            });
            self.warp_specials(&mut body);
            self.warp_collective(&mut body);
            if p.warp_branches {
                self.warp_branch(&mut body, 0);
            }
        }
        for (g, group) in p.mma.iter().enumerate() {
            self.with_mma_stream(|gen| gen.mma_group(&mut body, g, group));
        }

        let budget = self.rng.range(2, 7);
        self.stmts(&mut body, budget, 0, true);

        // Outgoing edges: write the hand-off buffer at gid, then signal every
        // block of the consumer.
        for e in self.edges.clone().iter().filter(|e| e.from == i) {
            let v = self.value(e.buf_ty, 3, !e.exact, false);
            body.push(Stmt::Store {
                target: at(&e.buf(), [var("gid")]),
                value: v.e,
            });
            let consumer = self.programs[e.to].mesh.clone();
            body.push(signal_all(&consumer, &e.sem()));
        }
        for e in self.edges.clone().iter().filter(|e| e.to == i && e.back) {
            self.consume_edge(e, &mut body);
        }

        if p.warps {
            body.push(Stmt::Store {
                target: at(&format!("wo{i}"), [var("gid")]),
                value: var(WARP_DIGEST),
            });
        }

        if i == 0 && self.module_provable {
            self.provable_operands(&mut body);
        }

        // The final store: every element of the output written once.
        let v = self.value(p.out_ty, 4, p.out_inexact, false);
        let index = match p.out_layout {
            OutLayout::Flat => vec![var("gid")],
            OutLayout::Owned => vec![var("t")],
            OutLayout::TwoD => vec![var("lin"), var("t")],
        };
        let target = at(&Self::out_name(i), index);
        if self.rng.chance(30) {
            // The same element written on every iteration of a short literal
            // loop, the last value kept: the CUDA backend emits such loops
            // loads-first, and the stores must keep their order.
            let trips = self.rng.range(2, 5);
            let k = self.fresh("k");
            let zero = zero_of(p.out_ty);
            body.push(Stmt::For {
                var: Binding {
                    name: k.clone(),
                    ty: U32,
                },
                start: lit_u32(0),
                end: lit_u32(trips),
                body: vec![Stmt::Store {
                    target,
                    value: select(var(&k).eq(lit_u32(trips - 1)), v.e, zero),
                }],
            });
        } else {
            body.push(Stmt::Store { target, value: v.e });
        }
        Kernel {
            name: format!("k{i}"),
            params: params.to_vec(),
            body,
        }
    }

    pub(super) fn consume_edge(&mut self, e: &Edge, body: &mut Vec<Stmt>) {
        let producer_blocks = self.programs[e.from].blocks as i32;
        let producer_len = self.programs[e.from].blocks * self.programs[e.from].threads;
        body.push(Stmt::Sem {
            op: if e.nodec {
                SemOp::WaitNodec
            } else {
                SemOp::Wait
            },
            sem: at(&e.sem(), [lit_u32(0)]),
            amount: Expr::from(producer_blocks),
        });
        if self.rng.chance(40) {
            // Deterministic: every credit has arrived; `wait` took them all.
            let name = self.fresh("sv");
            body.push(Stmt::SemRead {
                dest: name.clone(),
                sem: at(&e.sem(), [lit_u32(0)]),
            });
            self.vals.push(Val::new(var(&name), I32, false, true, 0.0));
        }
        let index = self.index(producer_len);
        let name = self.fresh("w");
        body.push(Stmt::Let {
            var: Binding {
                name: name.clone(),
                ty: e.buf_ty,
            },
            value: load(&e.buf(), [index]),
        });
        self.vals
            .push(Val::new(var(&name), e.buf_ty, false, e.exact, FLOAT_CLAMP));
    }
}
