//! Statements: bindings, stores, atomics, control flow and loops (fast
//! mode's loads-first loops among them); semaphores and barriers are
//! [`super::sync`]'s.

use std::collections::BTreeSet;

use mpmd_core::ir::visit::for_each_expr;
use mpmd_core::ir::{
    mma, AtomicOp, BinaryOp, Binding, Expr, Fragment, Literal, RefAccess, ScalarType, Stmt, WarpOp,
};
use mpmd_core::Mode;

use super::access::AccessMode;
use super::c::{self, c_type, Home};
use super::names::user_name;
use super::{EmitError, Emitter, Symbol, UnitContext};

/// Most iterations of a loop whose loads are issued before its stores
/// (each store keeps a pointer and a value per iteration in registers).
const BATCH_MAX_TRIPS: u32 = 16;

impl Emitter<'_> {
    pub(super) fn emit_body(
        &mut self,
        cx: &mut UnitContext,
        body: &[Stmt],
        depth: usize,
    ) -> Result<(), EmitError> {
        for stmt in body {
            self.emit_stmt(cx, stmt, depth)?;
        }
        Ok(())
    }

    fn emit_stmt(
        &mut self,
        cx: &mut UnitContext,
        stmt: &Stmt,
        depth: usize,
    ) -> Result<(), EmitError> {
        // Temporaries of this statement's expressions go just before it.
        self.depth = depth;
        match stmt {
            Stmt::Let { var, value: init } | Stmt::Var { var, init } => {
                let v = self.expr(cx, init)?;
                let qualifier = if matches!(stmt, Stmt::Let { .. }) {
                    "const "
                } else {
                    ""
                };
                self.bind_scalar(cx, var, qualifier, &v.text, depth);
            }
            Stmt::Assign { name, value } => {
                let v = self.expr(cx, value)?;
                let c_name = match cx.symbol(name)? {
                    Symbol::Scalar { c_name, .. } => c_name.clone(),
                    _ => return Err(cx.unsupported(format!("cannot assign to ref `{name}`"))),
                };
                self.line(depth, &format!("{c_name} = {};", v.text));
            }
            Stmt::LocalArray { name, elem, shape } => {
                let c_name = user_name('l', name);
                let len: u64 = shape.iter().map(|&d| d as u64).product();
                self.line(
                    depth,
                    &format!("{} {c_name}[{}];", c_type(*elem, Home::Value), len.max(1)),
                );
                cx.symbols.insert(
                    name.clone(),
                    Symbol::Local {
                        c_name,
                        elem: *elem,
                        shape: shape.clone(),
                    },
                );
            }
            Stmt::Store { target, value } => {
                let place = self.place(cx, target, AccessMode::Write)?;
                let v = self.stored_value(cx, &place, value)?;
                // The value is bound before the bounds test: computed under
                // it, long sums kept many values live across the branch and
                // made ptxas spill.
                let value_name = self.temp('v');
                let lines = [
                    format!("const {} {value_name} = {v};", place.slot_type),
                    format!("if ({}) {} = {value_name};", place.ok, place.slot()),
                ];
                self.guarded_block(depth, &place, &lines);
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => self.emit_atomic(cx, dest.as_ref(), *op, target, args, depth)?,
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c = self.expr(cx, cond)?;
                self.line(depth, &format!("if ({}) {{", c.text));
                self.emit_body(cx, then_body, depth + 1)?;
                if !else_body.is_empty() {
                    self.line(depth, "} else {");
                    self.emit_body(cx, else_body, depth + 1)?;
                }
                self.line(depth, "}");
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                // Checked mode keeps the loop as written: its first
                // out-of-bounds report must be the interpreter's.
                let batched = match self.mode {
                    Mode::Fast => batchable(cx, start, end, body),
                    Mode::Checked => None,
                };
                match batched {
                    Some(trips) => self.emit_batched_loop(cx, var, start, trips, body, depth)?,
                    None => self.emit_loop(cx, var, start, end, body, depth)?,
                }
            }
            Stmt::While { cond, max, body } => {
                let ordinal = cx.next_while;
                cx.next_while += 1;
                let max = self.expr(cx, max)?.text;
                let max_name = self.temp('n');
                let trips = self.temp('i');
                self.line(depth, "{");
                self.line(depth + 1, &format!("const u32 {max_name} = {max};"));
                self.line(depth + 1, &format!("u32 {trips} = 0u;"));
                self.line(depth + 1, "for (;;) {");
                // The condition's temporaries are computed on every trip.
                self.depth = depth + 2;
                let c = self.expr(cx, cond)?.text;
                self.line(depth + 2, &format!("if (!({c})) break;"));
                self.line(depth + 2, &format!("if ({trips} == {max_name}) {{"));
                if self.mode == Mode::Checked {
                    self.line(
                        depth + 3,
                        &format!(
                            "mpmd_loop_limit(mpmd_ctl, {}, mpmd_block, {}, {max_name});",
                            c::unsigned(cx.unit.program.index() as u64),
                            c::unsigned(ordinal)
                        ),
                    );
                }
                self.line(depth + 3, "break;");
                self.line(depth + 2, "}");
                // Counted before the body, so that `continue` counts too.
                self.line(depth + 2, &format!("{trips}++;"));
                self.emit_body(cx, body, depth + 2)?;
                self.line(depth + 1, "}");
                self.line(depth, "}");
            }
            Stmt::Break => self.line(depth, "break;"),
            Stmt::Continue => self.line(depth, "continue;"),
            Stmt::CompoundAssign { .. }
            | Stmt::CompoundStore { .. }
            | Stmt::Call { .. }
            | Stmt::Return { .. } => {
                return Err(cx.unsupported(
                    "a compound assignment or helper call that validation did not expand (expand::program_kernel)",
                ))
            }
            Stmt::Barrier => self.line(depth, &self.unit_sync.barrier()),
            Stmt::Sem { op, sem, amount } => self.emit_sem(cx, *op, sem, amount, depth)?,
            Stmt::SemRead { dest, sem } => self.emit_sem_read(cx, dest, sem, depth)?,
            Stmt::Warp { dest, op, args } => self.emit_warp(cx, dest, *op, args, depth)?,
            Stmt::BlockCollective { dest, op, args } => {
                self.emit_block_collective(cx, dest, *op, args, depth)?
            }
            Stmt::Mma { d, a, b, c } => self.emit_mma(cx, [d, a, b, c], depth)?,
            Stmt::MmaLoad {
                operand,
                dest,
                source,
            } => self.emit_mma_load(cx, *operand, dest, source, depth)?,
        }
        Ok(())
    }

    /// A warp collective: the prelude's `mpmd_shfl_*`, `mpmd_vote_*`,
    /// `mpmd_ballot` and `mpmd_reduce_*` (docs/text-format.md defines each).
    /// Shuffles move any type as its 32-bit word.
    fn emit_warp(
        &mut self,
        cx: &mut UnitContext,
        dest: &Binding,
        op: WarpOp,
        args: &[Expr],
        depth: usize,
    ) -> Result<(), EmitError> {
        let values = args
            .iter()
            .map(|a| self.expr(cx, a))
            .collect::<Result<Vec<_>, _>>()?;
        let [value, rest @ ..] = values.as_slice() else {
            return Err(cx.unsupported(format!("`{}` without a value", op.name())));
        };
        let ty = value.ty;
        let name = op.name();
        let text = match op {
            _ if op.is_shuffle() => {
                let lane = rest
                    .first()
                    .ok_or_else(|| cx.unsupported(format!("`{name}` without a lane")))?;
                let moved = format!(
                    "mpmd_{name}({}, {})",
                    c::word_of(ty, &value.text),
                    lane.text
                );
                c::from_word(ty, &moved)
            }
            WarpOp::VoteAny | WarpOp::VoteAll | WarpOp::Ballot => {
                format!("mpmd_{name}({})", value.text)
            }
            _ => {
                let suffix = match ty {
                    ScalarType::F32 => "f32",
                    ScalarType::I32 => "i32",
                    ScalarType::U32 => "u32",
                    other => {
                        return Err(cx.unsupported(format!("`{name}` of {other}")));
                    }
                };
                format!("mpmd_{name}_{suffix}({})", value.text)
            }
        };
        self.bind_scalar(cx, dest, "const ", &text, depth);
        Ok(())
    }

    /// Declares the C variable of `binding` (`const ` or no `qualifier`),
    /// initialised with `text`, and records it as the binding's symbol.
    pub(super) fn bind_scalar(
        &mut self,
        cx: &mut UnitContext,
        binding: &Binding,
        qualifier: &str,
        text: &str,
        depth: usize,
    ) {
        let c_name = user_name('v', &binding.name);
        let ty = c_type(binding.ty, Home::Value);
        self.line(depth, &format!("{qualifier}{ty} {c_name} = {text};"));
        cx.symbols.insert(
            binding.name.clone(),
            Symbol::Scalar {
                c_name,
                ty: binding.ty,
            },
        );
    }

    /// `mma_m16n8k16(d, a, b, c)`: the prelude's `mpmd_mma_m16n8k16_{f16,bf16}`
    /// on the local arrays (PTX `mma.sync` on sm_80 and later; an `#error`
    /// names the reason below sm_80, where PTX has only m16n8k8). A row of a
    /// 2-D local array goes through a fragment-sized temporary: its elements
    /// are loaded (or, for `d`, stored) as ordinary element accesses, so
    /// they are checked like any other; with rows known after unrolling the
    /// temporaries stay in registers.
    fn emit_mma(
        &mut self,
        cx: &mut UnitContext,
        operands: [&Fragment; 4],
        depth: usize,
    ) -> Result<(), EmitError> {
        let mut names = Vec::with_capacity(4);
        let mut input = ScalarType::F16;
        for (role, operand) in ["d", "a", "b", "c"].into_iter().zip(operands) {
            let (c_name, elem) = match cx.symbol(&operand.array)? {
                Symbol::Local { c_name, elem, .. } => (c_name.clone(), *elem),
                _ => {
                    return Err(cx.unsupported(format!(
                        "the operand `{role}` of `{}` is not a local array",
                        mma::NAME
                    )))
                }
            };
            if role == "a" {
                input = elem;
            }
            if operand.row.is_none() {
                names.push(c_name);
                continue;
            }
            let len = match role {
                "a" => mma::A_LEN,
                "b" => mma::B_LEN,
                _ => mma::C_LEN,
            };
            let temp = self.temp('f');
            if role == "d" {
                self.line(
                    depth,
                    &format!("{} {temp}[{len}];", c_type(elem, Home::Value)),
                );
            } else {
                let elements = (0..len)
                    .map(|i| self.load(cx, &operand.element(i)).map(|code| code.text))
                    .collect::<Result<Vec<_>, _>>()?;
                self.line(
                    depth,
                    &format!(
                        "const {} {temp}[{len}] = {{{}}};",
                        c_type(elem, Home::Value),
                        elements.join(", ")
                    ),
                );
            }
            names.push(temp);
        }
        let suffix = match input {
            ScalarType::BF16 => "bf16",
            _ => "f16",
        };
        self.line(0, "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800");
        self.line(
            0,
            &format!(
                "#error \"{} needs sm_80 or later: mma.sync.m16n8k16 with f32 accumulators is an sm_80 instruction (sm_75 has only m16n8k8)\"",
                mma::NAME
            ),
        );
        self.line(0, "#endif");
        self.line(
            depth,
            &format!("mpmd_mma_m16n8k16_{suffix}({});", names.join(", ")),
        );
        if operands[0].row.is_some() {
            for i in 0..mma::C_LEN {
                self.store_text(
                    cx,
                    &operands[0].element(i),
                    &format!("{}[{i}]", names[0]),
                    depth,
                )?;
            }
        }
        Ok(())
    }

    /// Stores the C value `value` (of the element's type) to `target`, as a
    /// `Stmt::Store` would.
    fn store_text(
        &mut self,
        cx: &mut UnitContext,
        target: &RefAccess,
        value: &str,
        depth: usize,
    ) -> Result<(), EmitError> {
        self.depth = depth;
        let place = self.place(cx, target, AccessMode::Write)?;
        let line = format!("if ({}) {} = {value};", place.ok, place.slot());
        self.guarded_block(depth, &place, &[line]);
        Ok(())
    }

    /// `mma_load_a(fa, s[.., r0, k0])` and `mma_load_b`: the element loads
    /// the statement means (`ir::mma::element_loads`), and in fast mode,
    /// for an smem source whose rows are whole 16-byte units (last extent a
    /// multiple of 8), PTX `ldmatrix` (x4 for A, x2.trans for B, x2 for
    /// K-major B) behind a
    /// test that the column origin is a multiple of 8, which makes every
    /// row address 16-byte aligned (the arena aligns each smem slot to 16
    /// bytes). The origin is warp-uniform (validation, E0073), so the whole
    /// warp takes one path.
    fn emit_mma_load(
        &mut self,
        cx: &mut UnitContext,
        operand: mma::Operand,
        dest: &Fragment,
        source: &RefAccess,
        depth: usize,
    ) -> Result<(), EmitError> {
        let thread_axis = cx.unit.mesh.threads.name.clone();
        let element_loads = mma::element_loads(operand, dest, source, &thread_axis);
        let rows_of_16_bytes = match cx.symbol(&source.base)? {
            Symbol::Smem { ty, .. } => ty.shape.last().is_some_and(|&n| n % 8 == 0),
            _ => false,
        };
        let dims = source.index.len();
        if self.mode == Mode::Checked || !rows_of_16_bytes || dims < 2 {
            return self.emit_body(cx, &element_loads, depth);
        }
        let column = self.expr(cx, &source.index[dims - 1])?;
        self.line(
            depth,
            &format!(
                "if (MPMD_HAS_LDMATRIX && (({}) & 7u) == 0u) {{",
                column.text
            ),
        );
        // Lane l supplies the address of row r of 8x8 matrix j (lane 8j + r).
        // A (x4): row l % 16 of the block, at column 8 (l / 16) (the right
        // half for lanes 16..31). B (x2.trans): row (k) l % 16. K-major B
        // (x2): row (n) l % 8, at column (k) 8 ((l % 16) / 8); lanes 16..31
        // repeat lanes 0..15 (x2 reads those of lanes 0..15 only).
        let u32_lit = |v: u32| Expr::Lit(Literal::U32(v));
        let bin = |op, a: Expr, b: Expr| Expr::Binary(op, Box::new(a), Box::new(b));
        let lane = bin(BinaryOp::Rem, Expr::AxisIndex(thread_axis), u32_lit(32));
        let (row_period, column_half) = match operand {
            mma::Operand::A => (16, Some(bin(BinaryOp::Div, lane.clone(), u32_lit(16)))),
            mma::Operand::B => (16, None),
            mma::Operand::BKMajor => (
                8,
                Some(bin(
                    BinaryOp::Div,
                    bin(BinaryOp::Rem, lane.clone(), u32_lit(16)),
                    u32_lit(8),
                )),
            ),
        };
        let mut row_access = source.clone();
        row_access.index[dims - 2] = bin(
            BinaryOp::Add,
            source.index[dims - 2].clone(),
            bin(BinaryOp::Rem, lane, u32_lit(row_period)),
        );
        if let Some(half) = column_half {
            row_access.index[dims - 1] = bin(
                BinaryOp::Add,
                source.index[dims - 1].clone(),
                bin(BinaryOp::Mul, half, u32_lit(8)),
            );
        }
        self.depth = depth + 1;
        let place = self.place(cx, &row_access, AccessMode::Read)?;
        let (words, call) = match operand {
            mma::Operand::A => (4, "mpmd_ldmatrix_x4"),
            mma::Operand::B => (2, "mpmd_ldmatrix_x2_trans"),
            mma::Operand::BKMajor => (2, "mpmd_ldmatrix_x2"),
        };
        let regs = self.temp('r');
        self.line(depth + 1, &format!("u32 {regs}[{words}];"));
        self.line(depth + 1, &format!("{call}({regs}, &{});", place.element));
        let elem = place.elem;
        for i in 0..operand.fragment_len() {
            let value = c::from_low_half(elem, &format!("{regs}[{}] >> {}u", i / 2, 16 * (i % 2)));
            self.store_text(cx, &dest.element(i), &value, depth + 1)?;
        }
        self.line(depth, "} else {");
        self.emit_body(cx, &element_loads, depth + 1)?;
        self.line(depth, "}");
        Ok(())
    }

    fn emit_atomic(
        &mut self,
        cx: &mut UnitContext,
        dest: Option<&Binding>,
        op: AtomicOp,
        target: &RefAccess,
        args: &[Expr],
        depth: usize,
    ) -> Result<(), EmitError> {
        let place = self.place(cx, target, AccessMode::Write)?;
        if !op.applies_to(place.elem) {
            return Err(cx.unsupported(format!(
                "{} on `{}` of type {}: atomics need i32 or u32 (f32: load, store, add, min, max, exchange)",
                op.name(),
                target.base,
                place.elem
            )));
        }
        let float = place.elem == ScalarType::F32;
        if args.len() != op.arity() {
            return Err(cx.unsupported(format!(
                "{} takes {} value(s), found {}",
                op.name(),
                op.arity(),
                args.len()
            )));
        }
        let values = args
            .iter()
            .map(|a| self.expr(cx, a).map(|c| c.text))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = c_type(place.elem, Home::Value);
        let pointer = format!("&{}", place.slot());
        let call = match op {
            AtomicOp::Load => format!("mpmd_atomic_load({pointer})"),
            AtomicOp::Store => format!("mpmd_atomic_store({pointer}, ({ty})({}))", values[0]),
            // CUDA has no float atomicMin/atomicMax: a compare-exchange loop
            // on the bits with the language's min/max (prelude).
            AtomicOp::Min if float => format!("mpmd_atomic_min_f32({pointer}, {})", values[0]),
            AtomicOp::Max if float => format!("mpmd_atomic_max_f32({pointer}, {})", values[0]),
            AtomicOp::Add => format!("atomicAdd({pointer}, {})", values[0]),
            AtomicOp::Min => format!("atomicMin({pointer}, {})", values[0]),
            AtomicOp::Max => format!("atomicMax({pointer}, {})", values[0]),
            AtomicOp::And => format!("atomicAnd({pointer}, {})", values[0]),
            AtomicOp::Or => format!("atomicOr({pointer}, {})", values[0]),
            AtomicOp::Xor => format!("atomicXor({pointer}, {})", values[0]),
            AtomicOp::Exchange => format!("atomicExch({pointer}, {})", values[0]),
            AtomicOp::CompareExchange => {
                format!("atomicCAS({pointer}, {}, {})", values[0], values[1])
            }
        };
        let dest_name = dest.map(|d| (user_name('v', &d.name), d));
        if let Some((c_name, d)) = &dest_name {
            self.line(
                depth,
                &format!("{} {c_name} = 0;", c_type(d.ty, Home::Value)),
            );
        }
        let line = match &dest_name {
            Some((c_name, _)) if op.returns_value() => {
                format!("if ({}) {c_name} = {call};", place.ok)
            }
            _ => format!("if ({}) {call};", place.ok),
        };
        self.guarded_block(depth, &place, &[line]);
        if let Some((c_name, d)) = dest_name {
            cx.symbols
                .insert(d.name.clone(), Symbol::Scalar { c_name, ty: d.ty });
        }
        Ok(())
    }

    /// A `for` loop as written: the bound is evaluated once, and `<` keeps
    /// the increment from overflowing.
    fn emit_loop(
        &mut self,
        cx: &mut UnitContext,
        var: &Binding,
        start: &Expr,
        end: &Expr,
        body: &[Stmt],
        depth: usize,
    ) -> Result<(), EmitError> {
        let s = self.expr(cx, start)?.text;
        let e = self.expr(cx, end)?.text;
        let c_name = user_name('v', &var.name);
        // A generated name: a user `let k_end` beside `for k` must not see it.
        let end_name = self.temp('n');
        let ty = c_type(var.ty, Home::Value);
        self.line(depth, "{");
        self.line(depth + 1, &format!("const {ty} {end_name} = {e};"));
        self.line(
            depth + 1,
            &format!("for ({ty} {c_name} = {s}; {c_name} < {end_name}; {c_name}++) {{"),
        );
        cx.symbols
            .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
        self.emit_body(cx, body, depth + 2)?;
        self.line(depth + 1, "}");
        self.line(depth, "}");
        Ok(())
    }

    /// A [`batchable`] loop as two unrolled loops: the first runs the `let`s
    /// and evaluates every store's address and value (all loads), the
    /// second does the stores in the original order.
    fn emit_batched_loop(
        &mut self,
        cx: &mut UnitContext,
        var: &Binding,
        start: &Expr,
        trips: u32,
        body: &[Stmt],
        depth: usize,
    ) -> Result<(), EmitError> {
        let s = self.expr(cx, start)?.text;
        let counter = self.temp('k');
        let c_name = user_name('v', &var.name);
        let ty = c_type(var.ty, Home::Value);
        let trips_text = c::unsigned(trips);
        self.line(depth, "{");
        self.line(
            depth + 1,
            "// Every load of the loop is issued before its first store (no buffer is both",
        );
        self.line(
            depth + 1,
            "// loaded and stored here, and plan buffers never overlap).",
        );
        let stores: Vec<&RefAccess> = body
            .iter()
            .filter_map(|stmt| match stmt {
                Stmt::Store { target, .. } => Some(target),
                _ => None,
            })
            .collect();
        // Per store: its element type, pointer array and value array.
        let mut declared = Vec::new();
        for target in stores {
            let (_, elem) = cx
                .symbol(&target.base)?
                .slots()
                .ok_or_else(|| cx.unsupported(format!("`{}` is not a ref", target.base)))?;
            let (pointers, values) = (self.temp('p'), self.temp('x'));
            self.line(
                depth + 1,
                &format!("{elem}* {pointers}[{trips}]; {elem} {values}[{trips}];"),
            );
            declared.push((elem, pointers, values));
        }
        self.line(depth + 1, "#pragma unroll");
        self.line(
            depth + 1,
            &format!("for (u32 {counter} = 0u; {counter} < {trips_text}; {counter}++) {{"),
        );
        self.line(
            depth + 2,
            &format!("const {ty} {c_name} = ({ty})({s} + ({ty}){counter});"),
        );
        cx.symbols
            .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
        let mut j = 0;
        for stmt in body {
            match stmt {
                Stmt::Store { target, value } => {
                    self.depth = depth + 2;
                    let place = self.place(cx, target, AccessMode::Write)?;
                    let v = self.stored_value(cx, &place, value)?;
                    let (elem, pointers, values) = &declared[j];
                    self.line(depth + 2, &place.compute);
                    // A store outside the ref gets no pointer and is skipped.
                    self.line(
                        depth + 2,
                        &format!(
                            "{pointers}[{counter}] = ({}) ? ({elem}*)&{} : ({elem}*)0;",
                            place.ok,
                            place.slot()
                        ),
                    );
                    self.line(depth + 2, &format!("{values}[{counter}] = {v};"));
                    j += 1;
                }
                other => self.emit_stmt(cx, other, depth + 2)?,
            }
        }
        self.line(depth + 1, "}");
        self.line(depth + 1, "#pragma unroll");
        self.line(
            depth + 1,
            &format!("for (u32 {counter} = 0u; {counter} < {trips_text}; {counter}++) {{"),
        );
        for (_, pointers, values) in &declared {
            self.line(
                depth + 2,
                &format!(
                    "if ({pointers}[{counter}] != 0) *{pointers}[{counter}] = {values}[{counter}];"
                ),
            );
        }
        self.line(depth + 1, "}");
        self.line(depth, "}");
        Ok(())
    }
}

/// The trip count of a loop whose loads can all be issued before its
/// stores: literal bounds, 2 to [`BATCH_MAX_TRIPS`] iterations, a body of
/// `let`s and stores only, and no buffer both loaded and stored in it (by C
/// name, so aliased operands count as one). Plain `ld.global` and
/// `st.global` are never reordered by NVVM or ptxas (PTX carries no aliasing
/// facts), so without this a thread fetches one element per memory round
/// trip; mpmd knows distinct plan buffers never overlap.
fn batchable(cx: &UnitContext, start: &Expr, end: &Expr, body: &[Stmt]) -> Option<u32> {
    let bound = |e: &Expr| match e {
        Expr::Lit(Literal::U32(v)) => Some(*v as i64),
        Expr::Lit(Literal::I32(v)) => Some(*v as i64),
        _ => None,
    };
    let trips = bound(end)? - bound(start)?;
    if !(2..=BATCH_MAX_TRIPS as i64).contains(&trips) {
        return None;
    }
    let c_name = |name: &str| {
        cx.symbols
            .get(name)
            .and_then(Symbol::slots)
            .map(|(c_name, _)| c_name.to_string())
    };
    let mut stored = BTreeSet::new();
    for stmt in body {
        match stmt {
            Stmt::Let { .. } => {}
            Stmt::Store { target, .. } => {
                stored.insert(c_name(&target.base)?);
            }
            _ => return None,
        }
    }
    if stored.is_empty() {
        return None;
    }
    let mut loaded = BTreeSet::new();
    let mut missing = false;
    for_each_expr(body, &mut |e| {
        if let Expr::Load(access) = e {
            match c_name(&access.base) {
                Some(name) => {
                    loaded.insert(name);
                }
                None => missing = true,
            }
        }
    });
    (!missing && loaded.is_disjoint(&stored)).then_some(trips as u32)
}
