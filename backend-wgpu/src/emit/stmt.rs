//! Statements: bindings, stores, control flow within WGSL's nesting limits,
//! and the loop cap's accounting.

use std::collections::{HashMap, HashSet};

use mpmd_core::ir::visit::{any_expr, any_stmt};
use mpmd_core::ir::{BinaryOp, Expr, MemorySpace, Name, RefType, ScalarType, Stmt};
use mpmd_core::Mode;

use super::helpers::Helper;
use super::memory::{store_text, Storage, WgslRef};
use super::syntax::{describe_access, fixed_array, wgsl_scalar};
use super::unit::{Named, UnitEmitter};
use super::EmitError;

/// How many blocks deep a kernel body's statements may nest in WGSL. tint
/// counts two levels per `if` or `for` (the statement and its block) and
/// stops at 127; the emitter adds at most a few levels of its own (loop-cap
/// checks, short-circuit guards) below a user statement.
pub const MAX_STATEMENT_NESTING: usize = 48;

/// Else-if chains of this many arms or more are written flat
/// (`UnitEmitter::else_if_chain`); shorter ones keep WGSL's `else if`.
const FLAT_ELSE_IF: usize = 8;

/// An `if` / `else if` chain: the arms in order and the final `else` body.
struct ElseIfChain<'b> {
    arms: Vec<(&'b Expr, &'b [Stmt])>,
    last: &'b [Stmt],
}

/// Whether `body` holds a statement the whole block runs together.
fn contains_collective(body: &[Stmt]) -> bool {
    any_stmt(body, &mut |s| {
        matches!(
            s,
            Stmt::Barrier
                | Stmt::Sem { .. }
                | Stmt::SemRead { .. }
                | Stmt::BlockCollective { .. }
                | Stmt::Warp { .. }
                | Stmt::Mma { .. }
        )
    })
}

impl UnitEmitter<'_, '_> {
    /// The loop-header visits `body` costs at most (both branches of every
    /// `if`), as a WGSL expression evaluated before it; `None` when it has
    /// no loop, `Err` when a loop bound is not known before the region.
    fn cost(&mut self, body: &[Stmt], inner: &HashSet<Name>) -> Result<Option<String>, ()> {
        let mut terms = Vec::new();
        let mut inner = inner.clone();
        for stmt in body {
            match stmt {
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let known = |e: &Expr| !mentions_any(e, &inner) && !has_load(e);
                    if !known(start) || !known(end) {
                        return Err(());
                    }
                    let (s, e) = match (self.expr(start), self.expr(end)) {
                        (Ok(s), Ok(e)) => (s, e),
                        _ => return Err(()),
                    };
                    let trip = if var.ty == ScalarType::I32 {
                        format!("select(0u, bitcast<u32>({e} - {s}), {e} > {s})")
                    } else {
                        format!("select(0u, {e} - {s}, {e} > {s})")
                    };
                    let mut nested = inner.clone();
                    nested.insert(var.name.clone());
                    self.state.helpers.insert(Helper::Saturating);
                    let visits = format!("mpmd_sat_add({trip}, 1u)");
                    terms.push(match self.cost(body, &nested)? {
                        Some(c) => format!("mpmd_sat_add({visits}, mpmd_sat_mul({trip}, {c}))"),
                        None => visits,
                    });
                    inner.insert(var.name.clone());
                }
                Stmt::While { max, body, .. } => {
                    // At most `max` iterations, and one more header visit
                    // for the exit test.
                    if mentions_any(max, &inner) || has_load(max) {
                        return Err(());
                    }
                    let Ok(trip) = self.expr(max) else {
                        return Err(());
                    };
                    self.state.helpers.insert(Helper::Saturating);
                    let visits = format!("mpmd_sat_add({trip}, 1u)");
                    terms.push(match self.cost(body, &inner)? {
                        Some(c) => format!("mpmd_sat_add({visits}, mpmd_sat_mul({trip}, {c}))"),
                        None => visits,
                    });
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    for branch in [then_body, else_body] {
                        if let Some(c) = self.cost(branch, &inner)? {
                            terms.push(c);
                        }
                    }
                }
                Stmt::Let { var, .. } | Stmt::Var { var, .. } => {
                    inner.insert(var.name.clone());
                }
                Stmt::Atomic { dest: Some(d), .. } => {
                    inner.insert(d.name.clone());
                }
                Stmt::SemRead { dest, .. } => {
                    inner.insert(dest.clone());
                }
                Stmt::BlockCollective { dest, .. } => {
                    inner.insert(dest.name.clone());
                }
                Stmt::LocalArray { name, .. } => {
                    inner.insert(name.clone());
                }
                _ => {}
            }
        }
        let mut it = terms.into_iter();
        let Some(first) = it.next() else {
            return Ok(None);
        };
        Ok(Some(
            it.fold(first, |acc, t| format!("mpmd_sat_add({acc}, {t})")),
        ))
    }

    /// On adapters with a loop cap, a loop (or an `if` whose threads may
    /// diverge) that holds loops pays the loop-header visits of everything
    /// inside at its entry, both branches of every `if` included: lanes of
    /// one SIMD vector that take different branches share the driver's
    /// count. Returns whether the region was emitted here.
    fn paid_region(&mut self, stmt: &Stmt) -> Result<bool, EmitError> {
        if self.state.options.loop_cap.is_none()
            || self.paid
            || !contains_loop(std::slice::from_ref(stmt))
        {
            return Ok(false);
        }
        let collective = contains_collective(std::slice::from_ref(stmt));
        match stmt {
            Stmt::If { cond, .. } if self.is_uniform(cond) => return Ok(false),
            // A loop that holds a `while` (or is one) is counted as it runs,
            // for its subgroup (`loop_enter`): paid up front, a `while` costs
            // its `max`. A `for` nest's cost is its trip counts, paid once
            // (cheaper than a count per iteration).
            Stmt::For { .. } | Stmt::While { .. }
                if self.state.options.subgroups && contains_while(std::slice::from_ref(stmt)) =>
            {
                return Ok(false)
            }
            _ => {}
        }
        let saved = (self.body.len(), self.temp, self.rt_used.clone());
        let cost = match self.cost(std::slice::from_ref(stmt), &HashSet::new()) {
            Ok(Some(c)) => c,
            _ => {
                self.body.truncate(saved.0);
                self.temp = saved.1;
                self.rt_used = saved.2;
                return Ok(false);
            }
        };
        self.state.helpers.insert(Helper::Saturating);
        self.line("// Loop-header visits of what follows, paid up front (see mpmd_loop_pay).");
        if collective {
            self.line(&format!(
                "if (mpmd_loop_pay({cost})) {{ mpmd_block_stop = 1u; }}"
            ));
            let stop = self.temp("stop");
            self.line(&format!(
                "let {stop} = workgroupUniformLoad(&mpmd_block_stop);"
            ));
            self.line(&format!("if ({stop} == 0u) {{"));
        } else {
            self.line(&format!("if (!mpmd_loop_pay({cost})) {{"));
        }
        self.depth += 1;
        self.paid = true;
        let r = self.stmt_unpaid(stmt);
        self.paid = false;
        self.depth -= 1;
        self.line("}");
        r?;
        Ok(true)
    }

    pub(super) fn block(&mut self, body: &[Stmt]) -> Result<(), EmitError> {
        self.scopes.push(HashMap::new());
        self.depth += 1;
        let r = self.stmts(body);
        self.depth -= 1;
        self.scopes.pop();
        r
    }

    fn stmts(&mut self, body: &[Stmt]) -> Result<(), EmitError> {
        for stmt in body {
            self.stmt(stmt)?;
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, stmt: &Stmt) -> Result<(), EmitError> {
        if self.paid_region(stmt)? {
            return Ok(());
        }
        self.stmt_unpaid(stmt)
    }

    fn stmt_unpaid(&mut self, stmt: &Stmt) -> Result<(), EmitError> {
        match stmt {
            Stmt::Warp { dest, op, args } => self.warp(dest, *op, args)?,
            Stmt::BlockCollective { dest, op, args } => self.block_collective(dest, *op, args)?,
            Stmt::Mma { d, a, b, c } => self.mma([d, a, b, c])?,
            Stmt::MmaLoad {
                operand,
                dest,
                source,
            } => self.mma_load(*operand, dest, source)?,
            Stmt::Let { var, value } => {
                let v = self.expr(value)?;
                let name = self.bind_scalar(&var.name, var.ty)?;
                self.line(&format!("let {name}: {} = {v};", wgsl_scalar(var.ty)));
            }
            Stmt::Var { var, init } => {
                let v = self.expr(init)?;
                let name = self.bind_scalar(&var.name, var.ty)?;
                self.line(&format!("var {name}: {} = {v};", wgsl_scalar(var.ty)));
            }
            Stmt::Assign { name, value } => {
                let v = self.expr(value)?;
                let target = match self.lookup(name) {
                    Some(Named::Scalar { wgsl, .. }) => wgsl.clone(),
                    _ => {
                        return Err(self.invalid(format!("assignment to unknown variable `{name}`")))
                    }
                };
                self.line(&format!("{target} = {v};"));
            }
            Stmt::LocalArray { name, elem, shape } => {
                let var = self.fresh("v_", name)?;
                let ty = RefType {
                    space: MemorySpace::Local,
                    elem: *elem,
                    shape: shape.clone(),
                    owner: None,
                };
                self.line(&format!(
                    "var {var}: {};",
                    fixed_array(wgsl_scalar(*elem), *elem, ty.len())
                ));
                self.scopes.last_mut().unwrap().insert(
                    name.clone(),
                    Named::Ref(WgslRef {
                        ty,
                        storage: Storage::Local { var },
                    }),
                );
            }
            Stmt::Store { target, value } => {
                let v = self.expr(value)?;
                if self.ref_info(&target.base)?.ty.elem.is_16bit() {
                    self.store_half(target, &v)?;
                    return Ok(());
                }
                let (place, info) = self.place(target)?;
                let text = store_text(&info, &place, &v);
                if self.idle_guard && !matches!(info.storage, Storage::Local { .. }) {
                    self.line(&format!("if (!mpmd_idle) {{ {text} }}"));
                } else {
                    self.line(&text);
                }
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => self.atomic(
                dest.as_ref().map(|d| (d.name.as_str(), d.ty)),
                *op,
                target,
                args,
            )?,
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.check_nesting("`if` statements")?;
                if let Some(chain) = self.flat_chain(stmt) {
                    return self.else_if_chain(&chain);
                }
                let (cond, then_body) = self.merged_ifs(cond, then_body, else_body);
                let c = self.expr(&cond)?;
                self.line(&format!("if ({c}) {{"));
                self.block(then_body)?;
                if else_body.is_empty() {
                    self.line("}");
                } else {
                    self.line("} else {");
                    self.block(else_body)?;
                    self.line("}");
                }
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                self.check_nesting("`for` loops")?;
                let s = self.expr(start)?;
                let e = self.expr(end)?;
                let end_name = self.temp("end");
                self.line(&format!("let {end_name}: {} = {e};", wgsl_scalar(var.ty)));
                self.scopes.push(HashMap::new());
                let v = self.bind_scalar(&var.name, var.ty)?;
                let one = if var.ty == ScalarType::I32 {
                    "1i"
                } else {
                    "1u"
                };
                if !self.paid {
                    self.loop_enter();
                }
                self.line(&format!(
                    "for (var {v}: {} = {s}; {v} < {end_name}; {v} = {v} + {one}) {{",
                    wgsl_scalar(var.ty)
                ));
                if !self.paid {
                    self.depth += 1;
                    self.loop_tick(contains_collective(body));
                    self.depth -= 1;
                }
                self.block(body)?;
                self.scopes.pop();
                self.line("}");
                if !self.paid {
                    self.loop_exit();
                }
            }
            Stmt::While { cond, max, body } => {
                self.check_nesting("`while` loops")?;
                let ordinal = self.next_while;
                self.next_while += 1;
                let m = self.expr(max)?;
                let max_name = self.temp("max");
                let trips = self.temp("trips");
                self.line(&format!("let {max_name}: u32 = {m};"));
                self.line(&format!("var {trips}: u32 = 0u;"));
                if !self.paid {
                    self.loop_enter();
                }
                self.line("loop {");
                self.depth += 1;
                if !self.paid {
                    self.loop_tick(contains_collective(body));
                }
                self.scopes.push(HashMap::new());
                let c = self.expr(cond)?;
                self.line(&format!("if (!({c})) {{ break; }}"));
                self.line(&format!("if ({trips} == {max_name}) {{"));
                if self.state.options.mode == Mode::Checked {
                    self.state.helpers.insert(Helper::LoopLimit);
                    self.line(&format!("  mpmd_loop_limit({ordinal}u, {max_name});"));
                }
                self.line("  break;");
                self.line("}");
                // Counted before the body, so that `continue` counts too.
                self.line(&format!("{trips} = {trips} + 1u;"));
                self.scopes.pop();
                self.depth -= 1;
                self.block(body)?;
                self.line("}");
                if !self.paid {
                    self.loop_exit();
                }
            }
            Stmt::Break => self.line("break;"),
            Stmt::Continue => self.line("continue;"),
            Stmt::CompoundAssign { .. }
            | Stmt::CompoundStore { .. }
            | Stmt::Call { .. }
            | Stmt::Return { .. } => {
                return Err(self.invalid(
                    "a compound assignment or helper call that validation did not expand (expand::program_kernel)",
                ))
            }
            Stmt::Barrier => {
                self.line("// barrier: orders this block's smem and gmem accesses.");
                self.line("storageBarrier();");
                self.line("workgroupBarrier();");
            }
            Stmt::Sem { op, sem, amount } => self.sem_op(*op, sem, amount)?,
            Stmt::SemRead { dest, sem } => {
                let (place, _) = self.place(sem)?;
                self.line(&format!(
                    "// read({}): thread 0 reads, the block shares the value.",
                    describe_access(sem)
                ));
                self.line(&format!(
                    "if (thread_id == 0u) {{ mpmd_sem_value = atomicLoad(&{place}); }}"
                ));
                let name = self.bind_scalar(dest, ScalarType::I32)?;
                self.line(&format!(
                    "let {name}: i32 = workgroupUniformLoad(&mpmd_sem_value);"
                ));
                self.line("workgroupBarrier();");
            }
        }
        Ok(())
    }

    /// Refuses a statement that would open a block deeper than WGSL
    /// compilers read (`MAX_STATEMENT_NESTING`).
    fn check_nesting(&self, what: &str) -> Result<(), EmitError> {
        if self.depth < MAX_STATEMENT_NESTING {
            return Ok(());
        }
        Err(EmitError::TooDeep {
            kernel: self.unit.kernel.name.clone(),
            what: what.to_string(),
            limit: MAX_STATEMENT_NESTING,
        })
    }

    /// Whether a region may be restructured without changing what the loop
    /// cap charges: only `paid_region` charges divergent regions up front,
    /// so a region with loops keeps its shape unless its cost is paid.
    fn restructurable(&self, body: &[Stmt]) -> bool {
        self.state.options.loop_cap.is_none() || self.paid || !contains_loop(body)
    }

    /// `if a { if b { S } }` (no `else` on either) as `if (a && b) { S }`:
    /// the same meaning (`&&` evaluates `b` only when `a` holds) one level
    /// shallower, so `if`s nested past what tint reads still compile.
    fn merged_ifs<'b>(
        &self,
        cond: &Expr,
        mut then_body: &'b [Stmt],
        else_body: &[Stmt],
    ) -> (Expr, &'b [Stmt]) {
        let mut cond = cond.clone();
        if !else_body.is_empty() {
            return (cond, then_body);
        }
        while let [Stmt::If {
            cond: inner,
            then_body: inner_then,
            else_body: inner_else,
        }] = then_body
        {
            if !inner_else.is_empty() || !self.restructurable(then_body) {
                break;
            }
            cond = Expr::Binary(BinaryOp::LogicAnd, Box::new(cond), Box::new(inner.clone()));
            then_body = inner_then;
        }
        (cond, then_body)
    }

    /// An `if` / `else if` chain of at least `FLAT_ELSE_IF` arms, as
    /// (condition, body) arms and the final `else`; `None` otherwise.
    fn flat_chain<'b>(&self, stmt: &'b Stmt) -> Option<ElseIfChain<'b>> {
        let mut arms = Vec::new();
        let mut at = stmt;
        let last = loop {
            let Stmt::If {
                cond,
                then_body,
                else_body,
            } = at
            else {
                unreachable!("the chain is made of `if`s");
            };
            arms.push((cond, then_body.as_slice()));
            match else_body.as_slice() {
                [next @ Stmt::If { .. }] => at = next,
                rest => break rest,
            }
        };
        if arms.len() < FLAT_ELSE_IF || !self.restructurable(std::slice::from_ref(stmt)) {
            return None;
        }
        Some(ElseIfChain { arms, last })
    }

    /// An else-if chain written flat: each arm at the same nesting level,
    /// guarded by a flag that says whether an earlier arm ran, so that its
    /// condition is evaluated only when no earlier one held (as in the
    /// nested form) and a chain of any length nests two levels deep.
    fn else_if_chain(&mut self, chain: &ElseIfChain<'_>) -> Result<(), EmitError> {
        let taken = self.temp("taken");
        self.line(&format!(
            "// An else-if chain of {} arms, flat: `{taken}` says whether an arm ran.",
            chain.arms.len()
        ));
        self.line(&format!("var {taken}: bool = false;"));
        for (k, (cond, body)) in chain.arms.iter().enumerate() {
            if k > 0 {
                self.line(&format!("if (!{taken}) {{"));
                self.depth += 1;
            }
            let c = self.expr(cond)?;
            self.line(&format!("if ({c}) {{"));
            self.depth += 1;
            self.line(&format!("{taken} = true;"));
            self.depth -= 1;
            self.block(body)?;
            self.line("}");
            if k > 0 {
                self.depth -= 1;
                self.line("}");
            }
        }
        if !chain.last.is_empty() {
            self.line(&format!("if (!{taken}) {{"));
            self.block(chain.last)?;
            self.line("}");
        }
        Ok(())
    }

    /// The loop-cap check at the top of a loop body. In a loop that holds
    /// barriers every invocation must take the same way out, so the decision
    /// goes through a workgroup flag read uniformly.
    /// llvmpipe counts every visit of a loop header, the final exit test
    /// included: a loop costs one more than its iterations.
    pub(super) fn loop_enter(&mut self) {
        if self.state.options.loop_cap.is_some() {
            self.subgroup_loop_count();
            self.line("_ = mpmd_loop_tick();");
        }
    }

    /// After a loop whose visits were counted as it ran: its lanes left it
    /// at different iterations, and the vector ran until the last left.
    pub(super) fn loop_exit(&mut self) {
        if self.state.options.loop_cap.is_some() {
            self.subgroup_loop_count();
        }
    }

    /// With subgroup operations, every lane here takes the largest count of
    /// its subgroup: llvmpipe counts loop-header visits per SIMD vector (its
    /// subgroup), also those its lanes made while others waited, so after a
    /// loop whose lanes ran different numbers of iterations, and before the
    /// next one, the vector's count is the subgroup's largest.
    fn subgroup_loop_count(&mut self) {
        if self.state.options.subgroups {
            self.line("mpmd_loop_count = subgroupMax(mpmd_loop_count);");
        }
    }

    pub(super) fn loop_tick(&mut self, collective: bool) {
        if self.state.options.loop_cap.is_none() {
            return;
        }
        if collective {
            self.line("if (mpmd_loop_tick()) { mpmd_block_stop = 1u; }");
            self.line("let mpmd_stop = workgroupUniformLoad(&mpmd_block_stop);");
            self.line("workgroupBarrier();");
            self.line("if (mpmd_stop != 0u) { break; }");
        } else {
            self.line("if (mpmd_loop_tick()) { break; }");
        }
    }
}

/// Whether `body` holds a `while` loop.
fn contains_while(body: &[Stmt]) -> bool {
    any_stmt(body, &mut |s| matches!(s, Stmt::While { .. }))
}

/// Whether `body` holds a loop.
fn contains_loop(body: &[Stmt]) -> bool {
    any_stmt(body, &mut |s| {
        matches!(s, Stmt::For { .. } | Stmt::While { .. })
    })
}

/// Whether `e` names any of `names`.
fn mentions_any(e: &Expr, names: &HashSet<Name>) -> bool {
    any_expr(e, &mut |e| matches!(e, Expr::Var(n) if names.contains(n)))
}

/// Whether `e` loads from memory.
fn has_load(e: &Expr) -> bool {
    any_expr(e, &mut |e| matches!(e, Expr::Load(_)))
}
