//! Semaphores and their barriers: signals and waits in a unit (polling or
//! one look), the operations that move out to semaphore dispatches, and the
//! barriers no thread can observe.

use std::collections::{BTreeSet, HashSet};

use mpmd_core::ir::visit::{for_each_expr, for_each_stmt};
use mpmd_core::ir::{
    AtomicOp, BinaryOp, BlockOp, Expr, Name, RefAccess, ScalarType, SemOp, Stmt, Type,
};
use mpmd_core::plan::{BufferId, IdSource, LaunchPlan, LaunchUnit};
use mpmd_core::Mode;

use std::fmt::Write as _;

use super::dispatch::moved_function;
use super::helpers::Helper;
use super::memory::Storage;
use super::syntax::describe_access;
use super::unit::UnitEmitter;
use super::{EmitError, EmitOptions};
use mpmd_core::ir::MemorySpace;

/// Whether a semaphore amount is checked at run time (`UnitEmitter::amount_check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AmountCheck {
    Literal,
    Signed,
    Unsigned,
}

impl UnitEmitter<'_, '_> {
    /// What stays in the kernel of a semaphore operation that moved to a
    /// semaphore dispatch: a note, and its barrier where the block can see it.
    pub(super) fn moved_placeholder(&mut self, stmt: &Stmt, barrier: bool) {
        let Stmt::Sem { op, sem, amount } = stmt else {
            return;
        };
        let when = if *op == SemOp::Signal {
            "after"
        } else {
            "before"
        };
        self.line(&format!(
            "// {}({}, {}): in the semaphore dispatch {when} this one (`{}`).",
            op.name(),
            describe_access(sem),
            mpmd_core::text::print_expr(amount),
            moved_function(self.unit_id, *op == SemOp::Signal)
        ));
        if barrier {
            self.line(
                "// Its barrier orders this block's accesses before it against those after it.",
            );
            self.line("storageBarrier();");
            self.line("workgroupBarrier();");
        }
    }

    /// `fn <entry>(block_id: u32)`: the moved signals (or waits) of one block,
    /// in program order, with the `let`s they use; run by one invocation of
    /// a semaphore dispatch.
    pub(super) fn emit_moved(mut self, signals: bool) -> Result<String, EmitError> {
        let unit = self.unit;
        let hoisting = self.hoisting.clone();
        for (k, stmt) in unit.kernel.body.iter().enumerate() {
            match stmt {
                Stmt::Let { .. } if hoisting.pure_lets[k] => self.stmt(stmt)?,
                Stmt::Sem { op, sem, amount }
                    if hoisting.moved[k] && (*op == SemOp::Signal) == signals =>
                {
                    self.moved_sem_op(*op, sem, amount)?
                }
                _ => {}
            }
        }
        let mut out = String::new();
        writeln!(
            out,
            "// The {} of unit {} (program {} `{}`) for one block, moved out of its dispatch",
            if signals { "signals" } else { "waits" },
            self.unit_id,
            unit.program,
            unit.kernel.name
        )
        .unwrap();
        writeln!(
            out,
            "// into the semaphore dispatch {} it, whose boundary orders counts and data.",
            if signals { "after" } else { "before" }
        )
        .unwrap();
        writeln!(out, "fn {}(block_id: u32) {{", self.entry).unwrap();
        self.write_location(&mut out, "0u");
        self.write_body(&mut out, false, "The block's semaphore operations.");
        Ok(out)
    }

    /// A moved semaphore operation, run once for its block.
    fn moved_sem_op(&mut self, op: SemOp, sem: &RefAccess, amount: &Expr) -> Result<(), EmitError> {
        let (n, check) = self.sem_amount(amount)?;
        let (global, mut index, site) = self.sem_place(sem)?;
        let mut n = n;
        let mut ok = String::new();
        if check != AmountCheck::Literal {
            let (idx, amt) = (self.temp("sem"), self.temp("amount"));
            self.line(&format!("let {idx}: u32 = {index};"));
            self.line(&format!("let {amt}: i32 = {n};"));
            ok = self.amount_check(check, &amt, &idx, site);
            (index, n) = (idx, amt);
        }
        self.line(&format!(
            "// {}({}, {})",
            op.name(),
            describe_access(sem),
            mpmd_core::text::print_expr(amount)
        ));
        let call = match op {
            SemOp::Signal => format!("atomicAdd(&{global}[{index}], {n});"),
            SemOp::Wait | SemOp::WaitNodec => {
                self.state.helpers.insert(Helper::SemTake(global.clone()));
                format!(
                    "mpmd_take_{global}({index}, {n}, {}, {site}u);",
                    op == SemOp::Wait
                )
            }
        };
        if ok.is_empty() {
            self.line(&call);
        } else {
            self.line(&format!("if ({ok}) {{ {call} }}"));
        }
        Ok(())
    }

    /// A semaphore amount as an i32 expression.
    /// (`Expr::Lit` amounts need no check; the flag says whether it is a u32.)
    fn sem_amount(&mut self, amount: &Expr) -> Result<(String, AmountCheck), EmitError> {
        let v = self.value(amount)?;
        let check = match (amount, v.ty) {
            (Expr::Lit(_), _) => AmountCheck::Literal,
            (_, ScalarType::U32) => AmountCheck::Unsigned,
            _ => AmountCheck::Signed,
        };
        Ok(match v.ty {
            ScalarType::I32 => (v.text, check),
            _ => (format!("bitcast<i32>({})", v.text), check),
        })
    }

    /// The run-time check that a semaphore amount is at least 1 (docs/design.md),
    /// as a condition that reports and is false when it is not; empty for a
    /// literal amount (validation checks those, E0055). An amount that is a
    /// u32 of 2^31 or more is refused too: the counters are i32.
    fn amount_check(&mut self, check: AmountCheck, amt: &str, idx: &str, site: usize) -> String {
        if check == AmountCheck::Literal {
            return String::new();
        }
        let unsigned = check == AmountCheck::Unsigned;
        self.state.helpers.insert(Helper::SemAmount);
        format!("mpmd_sem_amount_ok({amt}, {idx}, {site}u, {unsigned})")
    }

    pub(super) fn sem_op(
        &mut self,
        op: SemOp,
        sem: &RefAccess,
        amount: &Expr,
    ) -> Result<(), EmitError> {
        let (n, check) = self.sem_amount(amount)?;
        let (global, index, site) = self.sem_place(sem)?;
        let what = describe_access(sem);
        let polls = !self.ordered_by_dispatch;
        match op {
            SemOp::Signal if self.sem_barrier_unobservable => {
                self.line(&format!(
                    "// signal({what}, n): one add. Every waiter runs in a later dispatch, which sees all of"
                ));
                self.line(
                    "// this one's writes, and nothing follows in this block: no barrier to observe.",
                );
            }
            SemOp::Signal => {
                self.line(&format!(
                    "// signal({what}, n): the block's writes first, then one add."
                ));
                self.line("workgroupBarrier();");
                self.line("storageBarrier();");
            }
            SemOp::Wait | SemOp::WaitNodec if polls => self.line(&format!(
                "// {}({what}, n): thread 0 polls (bounded), then the block proceeds together.",
                op.name()
            )),
            SemOp::Wait | SemOp::WaitNodec => self.line(&format!(
                "// {}({what}, n): every signaller ran in an earlier dispatch; thread 0 looks once.",
                op.name()
            )),
        }
        let idx = self.temp("sem");
        let amt = self.temp("amount");
        self.line(&format!("let {idx}: u32 = {index};"));
        self.line(&format!("let {amt}: i32 = {n};"));
        let ok = self.thread0_and(check, &amt, &idx, site);
        let take = op == SemOp::Wait;
        match op {
            SemOp::Signal => self.line(&format!(
                "if ({ok}) {{ atomicAdd(&{global}[{idx}], {amt}); }}"
            )),
            SemOp::Wait | SemOp::WaitNodec if polls => {
                self.state.helpers.insert(Helper::SemWait(global.clone()));
                self.line(&format!(
                    "if ({ok}) {{ mpmd_wait_{global}({idx}, {amt}, {take}, {site}u); }}"
                ));
                if self.state.options.loop_cap.is_some() {
                    // Thread 0's polls count for its SIMD vector: share the count.
                    self.line("if (thread_id == 0u) { mpmd_shared_count = mpmd_loop_count; }");
                    self.line("storageBarrier();");
                    self.line("mpmd_loop_count = max(mpmd_loop_count, workgroupUniformLoad(&mpmd_shared_count));");
                } else {
                    self.line("workgroupBarrier();");
                    self.line("storageBarrier();");
                }
            }
            SemOp::Wait | SemOp::WaitNodec => {
                self.state.helpers.insert(Helper::SemTake(global.clone()));
                self.line(&format!(
                    "if ({ok}) {{ mpmd_take_{global}({idx}, {amt}, {take}, {site}u); }}"
                ));
                if self.sem_barrier_unobservable {
                    self.line(
                        "// No memory access precedes it in this block: no barrier to observe.",
                    );
                } else {
                    self.line("workgroupBarrier();");
                    self.line("storageBarrier();");
                }
            }
        }
        Ok(())
    }

    /// `thread_id == 0u`, and the amount check when the amount needs one.
    fn thread0_and(&mut self, check: AmountCheck, amt: &str, idx: &str, site: usize) -> String {
        match self.amount_check(check, amt, idx, site) {
            ok if ok.is_empty() => "thread_id == 0u".to_string(),
            ok => format!("thread_id == 0u && {ok}"),
        }
    }

    /// Global, word index and site of a semaphore element.
    fn sem_place(&mut self, sem: &RefAccess) -> Result<(String, String, usize), EmitError> {
        let info = self.ref_info(&sem.base)?;
        let global = match &info.storage {
            Storage::Buffer { global, word, .. } if word.is_atomic() => global.clone(),
            _ => return Err(self.invalid(format!("`{}` is not a semaphore buffer", sem.base))),
        };
        let (index, site, _) = self.index_of(sem, &info)?;
        Ok((global, index, site))
    }
}

/// For each top-level statement of a kernel body: whether it is a semaphore
/// operation whose barrier no thread of the block can observe. A barrier only
/// orders the block's own memory accesses before it against those after it,
/// so: waits with no memory access before them (only loads-free `let`, `var`
/// and assignments, and other such waits), and signals with none after them.
/// Only used when the plan orders every signal before its waits by dispatch
/// boundaries, which also order the data for waiters of other programs. A
/// signal of a semaphore the program also `read`s keeps its barrier: another
/// block of the same dispatch may look at the count.
pub(super) fn unobservable_sem_barriers(unit: &LaunchUnit) -> Vec<bool> {
    let body = &unit.kernel.body;
    // The semaphores the program `read`s: the kernel's parameters (= the
    // map's operands) whose access fact says so.
    let read: HashSet<&str> = unit
        .kernel
        .params
        .iter()
        .zip(&unit.facts.accesses)
        .filter(|(_, access)| access.read)
        .map(|(param, _)| param.name.as_str())
        .collect();
    // A statement whose expressions load, or whose nested statements' do.
    let loads = |stmt: &Stmt| {
        let mut found = false;
        for_each_expr(std::slice::from_ref(stmt), &mut |e| {
            found = found || matches!(e, Expr::Load(_))
        });
        found
    };
    let private = |stmt: &Stmt| {
        matches!(
            stmt,
            Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::Var { .. }
        ) && !loads(stmt)
    };
    let sem_without_loads = |stmt: &Stmt, wanted: &[SemOp]| {
        matches!(stmt, Stmt::Sem { op, .. } if wanted.contains(op)) && !loads(stmt)
    };
    let mut quiet = vec![false; body.len()];
    for (k, stmt) in body.iter().enumerate() {
        if sem_without_loads(stmt, &[SemOp::Wait, SemOp::WaitNodec]) {
            quiet[k] = true;
        } else if !private(stmt) {
            break;
        }
    }
    for (k, stmt) in body.iter().enumerate().rev() {
        let read_here = matches!(stmt, Stmt::Sem { sem, .. } if read.contains(sem.base.as_str()));
        if sem_without_loads(stmt, &[SemOp::Signal]) && !read_here {
            quiet[k] = true;
        } else if !private(stmt) {
            break;
        }
    }
    quiet
}

/// Which top-level semaphore operations of a unit leave its dispatch.
///
/// When the plan needs no co-residency, every semaphore's signallers run in
/// earlier dispatches than its waiters, so a block's semaphore operation
/// need not run inside its own dispatch: a signal can run right after it
/// (in a semaphore dispatch with one invocation per block) and a wait right
/// before it, where the dispatch boundary orders both the count and the
/// data. The unit's own kernel then holds no atomic, which matters on
/// llvmpipe: it runs a branch's atomics for every SIMD vector of a block,
/// lanes masked off or not.
///
/// An operation moves when nothing can tell: it is at the top level of the
/// body (unconditional), its element and amount depend only on block
/// coordinates, scalar parameters, constants and `let`s of those (no thread
/// index, no load, no `var`); every operation of the program on that
/// semaphore moves (so their order within a block is kept) and the program
/// does not `read` it (a read would see a count that moved); and errors keep
/// their order: no statement before a moved wait (other moved waits aside)
/// can report an error, and no statement after a moved signal that can
/// itself report one (checked mode: its index) can either. The operation's
/// barrier stays in the kernel where the block can observe it.
#[derive(Clone, Debug, Default)]
pub(super) struct Hoisting {
    /// Per top-level statement: a semaphore operation that runs in a semaphore dispatch.
    pub(super) moved: Vec<bool>,
    /// Per top-level statement: a `let` the moved operations may use.
    pure_lets: Vec<bool>,
    /// Per top-level statement: a moved operation whose barrier stays in the kernel.
    pub(super) barrier_kept: Vec<bool>,
}

impl Hoisting {
    /// Plan buffers of the moved signals (or waits).
    pub(super) fn buffers(
        &self,
        plan: &LaunchPlan,
        unit: &LaunchUnit,
        signals: bool,
    ) -> BTreeSet<BufferId> {
        unit.kernel
            .body
            .iter()
            .zip(&self.moved)
            .filter_map(|(stmt, &moved)| match stmt {
                Stmt::Sem { op, sem, .. } if moved && (*op == SemOp::Signal) == signals => {
                    sem_buffer(plan, unit, &sem.base)
                }
                _ => None,
            })
            .collect()
    }
}

/// The plan buffer of semaphore parameter `name` of `unit`'s kernel.
fn sem_buffer(plan: &LaunchPlan, unit: &LaunchUnit, name: &str) -> Option<BufferId> {
    let param = unit.kernel.params.iter().find(|p| p.name == name)?;
    match &param.ty {
        Type::Ref(r) if r.space == MemorySpace::Sem => plan.param_buffer(unit, name),
        _ => None,
    }
}

pub(super) fn hoisting(plan: &LaunchPlan, unit: &LaunchUnit, options: &EmitOptions) -> Hoisting {
    let body = &unit.kernel.body;
    let n = body.len();
    let mut h = Hoisting {
        moved: vec![false; n],
        pure_lets: vec![false; n],
        barrier_kept: vec![false; n],
    };
    if plan.needs_co_residency() {
        return h;
    }
    let block_axes: HashSet<&str> = unit
        .axes
        .iter()
        .filter(|a| a.source == IdSource::Block)
        .map(|a| a.axis.as_str())
        .collect();
    let block_level = |e: &Expr, pure: &HashSet<Name>| {
        let mut ok = true;
        mpmd_core::ir::visit::walk_expr(e, &mut |e| match e {
            Expr::Load(_) => ok = false,
            Expr::Var(name) if !pure.contains(name) => ok = false,
            Expr::AxisIndex(axis) if !block_axes.contains(axis.as_str()) => ok = false,
            _ => {}
        });
        ok
    };
    // Names bound to block-level values at each top-level statement.
    let mut pure: HashSet<Name> = unit
        .kernel
        .params
        .iter()
        .filter(|p| matches!(p.ty, Type::Scalar(_)))
        .map(|p| p.name.clone())
        .collect();
    let mut candidate = vec![None; n];
    let mut pinned: HashSet<BufferId> = HashSet::new();
    let mut unknown = false;
    for (k, stmt) in body.iter().enumerate() {
        match stmt {
            Stmt::Let { var, value } => {
                if block_level(value, &pure) {
                    h.pure_lets[k] = true;
                    pure.insert(var.name.clone());
                } else {
                    pure.remove(&var.name);
                }
            }
            Stmt::Var { var, .. } => {
                pure.remove(&var.name);
            }
            Stmt::Atomic { dest: Some(d), .. } => {
                pure.remove(&d.name);
            }
            Stmt::SemRead { dest, .. } => {
                pure.remove(dest);
            }
            Stmt::LocalArray { name, .. } => {
                pure.remove(name);
            }
            Stmt::Sem { sem, amount, .. } => {
                let operands_ok = sem
                    .block
                    .iter()
                    .flatten()
                    .chain(&sem.index)
                    .chain([amount])
                    .all(|e| block_level(e, &pure));
                match sem_buffer(plan, unit, &sem.base) {
                    Some(buffer) if operands_ok => candidate[k] = Some(buffer),
                    Some(buffer) => {
                        pinned.insert(buffer);
                    }
                    None => unknown = true,
                }
            }
            _ => {}
        }
        // Semaphores used below the top level, or read, stay in the kernel.
        let nested = match stmt {
            Stmt::If { .. } | Stmt::For { .. } | Stmt::While { .. } | Stmt::SemRead { .. } => {
                std::slice::from_ref(stmt)
            }
            _ => &[],
        };
        for_each_stmt(nested, &mut |s| {
            if let Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } = s {
                match sem_buffer(plan, unit, &sem.base) {
                    Some(buffer) => {
                        pinned.insert(buffer);
                    }
                    None => unknown = true,
                }
            }
        });
    }
    if unknown {
        // Something the emitter will reject anyway: leave everything in place.
        return h;
    }
    let checked = options.mode == Mode::Checked;
    let capped = options.loop_cap.is_some();
    let f32_refs: HashSet<&str> = unit
        .kernel
        .params
        .iter()
        .filter(|p| matches!(&p.ty, Type::Ref(r) if r.elem == ScalarType::F32))
        .map(|p| p.name.as_str())
        .collect();
    let reports: Vec<bool> = body
        .iter()
        .map(|s| may_report(s, checked, capped, &f32_refs))
        .collect();
    let op_of = |k: usize| match &body[k] {
        Stmt::Sem { op, .. } => Some(*op),
        _ => None,
    };
    loop {
        for (moved, candidate) in h.moved.iter_mut().zip(&candidate) {
            *moved = candidate.is_some_and(|b| !pinned.contains(&b));
        }
        let mut changed = false;
        for k in 0..n {
            if !h.moved[k] {
                continue;
            }
            let in_order = if op_of(k) == Some(SemOp::Signal) {
                !reports[k]
                    || (k + 1..n)
                        .all(|j| !reports[j] || (h.moved[j] && op_of(j) == Some(SemOp::Signal)))
            } else {
                (0..k).all(|j| !reports[j] || (h.moved[j] && op_of(j) != Some(SemOp::Signal)))
            };
            if !in_order {
                pinned.extend(candidate[k]);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // A moved operation's barrier orders the block's accesses before it
    // against those after it: kept only where both exist.
    let touches: Vec<bool> = body
        .iter()
        .zip(&h.moved)
        .map(|(s, &moved)| !moved && touches_memory(s))
        .collect();
    for k in 0..n {
        h.barrier_kept[k] =
            h.moved[k] && touches[..k].iter().any(|&t| t) && touches[k + 1..].iter().any(|&t| t);
    }
    h
}

/// Whether running `stmt` may record an error: a wait (deadlock), in checked
/// mode any memory access (out of bounds), with a loop cap any loop of its own
/// or of the backend's (`for`, strong compare-exchange, the f32 atomic add,
/// min and max on `f32_refs`, the float `%`).
fn may_report(stmt: &Stmt, checked: bool, capped: bool, f32_refs: &HashSet<&str>) -> bool {
    let one = std::slice::from_ref(stmt);
    let mut reports = false;
    for_each_stmt(one, &mut |s| match s {
        Stmt::Sem { op, .. } if *op != SemOp::Signal || checked => reports = true,
        Stmt::Store { .. } | Stmt::Atomic { .. } | Stmt::SemRead { .. } if checked => {
            reports = true
        }
        // A source thread past the block.
        Stmt::BlockCollective {
            op: BlockOp::Broadcast,
            ..
        } if checked => reports = true,
        // A `while` reports reaching its limit in checked mode.
        Stmt::While { .. } if checked || capped => reports = true,
        Stmt::For { .. }
        | Stmt::Atomic {
            op: AtomicOp::CompareExchange,
            ..
        } if capped => reports = true,
        Stmt::Atomic {
            op: AtomicOp::Add | AtomicOp::Min | AtomicOp::Max,
            target,
            ..
        } if capped && f32_refs.contains(target.base.as_str()) => reports = true,
        _ => {}
    });
    mpmd_core::ir::visit::for_each_expr(one, &mut |e| match e {
        Expr::Load(_) if checked => reports = true,
        Expr::Binary(BinaryOp::Rem, ..) if capped => reports = true,
        _ => {}
    });
    reports
}

/// Whether `stmt` accesses memory another thread of the block may see.
fn touches_memory(stmt: &Stmt) -> bool {
    let one = std::slice::from_ref(stmt);
    let mut touches = false;
    for_each_stmt(one, &mut |s| {
        if matches!(
            s,
            Stmt::Store { .. } | Stmt::Atomic { .. } | Stmt::Sem { .. } | Stmt::SemRead { .. }
        ) {
            touches = true;
        }
    });
    mpmd_core::ir::visit::for_each_expr(one, &mut |e| {
        if matches!(e, Expr::Load(_)) {
            touches = true;
        }
    });
    touches
}
