//! Uniformity: which values of a kernel body may differ between the threads
//! of one block, or between the lanes of one logical warp. The one analysis:
//! validation's rules (E0045, E0053, E0054 for blocks, E0068 for warps) ask
//! it why a value is not uniform, and the facts it returns
//! ([`super::ProgramFacts`]) give the backends the same answer.

use std::collections::BTreeSet;

use crate::ir::{
    Axis, BinaryOp, Binding, Expr, Literal, Name, Stmt, WarpOp, WarpPosition, WARP_SIZE,
};
use crate::text::print_expr;

/// Helper calls inlined inside one another at most this deep while
/// analysing (recursion is refused by validation; this bounds the work).
const MAX_INLINING: usize = 64;

/// The inlined statements of a helper call at its `ordinal`-th call site in
/// a pass over the body (1-based, in walk order); `None` when the call
/// cannot be inlined (validation reports why elsewhere).
pub(crate) type Inliner<'a> =
    dyn FnMut(&str, Option<&Binding>, &[Expr], u32) -> Option<Vec<Stmt>> + 'a;

/// The group of threads a value is uniform over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Every thread of a block.
    Block,
    /// Every lane of a logical warp (32 consecutive threads).
    Warp,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Block => "block-uniform",
            Level::Warp => "warp-uniform",
        }
    }
}

/// Which names of one kernel body may differ between the threads of a group
/// (block or warp), for a program whose thread axis is `thread_axis`.
///
/// Flow-insensitive and keyed by name, which is exact when every
/// declaration has its own name (`expand::with_unique_names`, or the expanded
/// kernel `expand::program_kernel` gives a backend).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uniformity {
    level: Level,
    thread_axis: Name,
    /// The thread axes of a block of several, with their strides in the
    /// linear thread order (empty otherwise).
    thread_axes: Vec<(Name, u32)>,
    nonuniform: BTreeSet<Name>,
    /// `let`s whose value is the thread index plus a warp-uniform multiple
    /// of 32 (warp level only): divided by a multiple of 32 they are
    /// warp-uniform.
    thread_linear: BTreeSet<Name>,
}

impl Uniformity {
    /// Runs the analysis to its fixpoint over `body`; `inline` expands
    /// helper calls (an expanded kernel has none).
    pub(crate) fn analyse(
        body: &[Stmt],
        thread_axis: &str,
        thread_axes: &[Axis],
        level: Level,
        inline: &mut Inliner,
    ) -> Self {
        let mut stride = 1u32;
        let thread_axes = thread_axes
            .iter()
            .map(|a| {
                let at = stride;
                stride = stride.saturating_mul(a.size);
                (a.name.clone(), at)
            })
            .collect();
        let mut facts = Uniformity {
            level,
            thread_axis: thread_axis.to_string(),
            thread_axes,
            nonuniform: BTreeSet::new(),
            thread_linear: BTreeSet::new(),
        };
        loop {
            let mut pass = Pass {
                facts: &mut facts,
                inline: &mut *inline,
                calls_seen: 0,
                depth: 0,
            };
            if !pass.mark(body, false) {
                return facts;
            }
        }
    }

    /// The analysis of an expanded kernel body (no helper calls).
    pub fn of_expanded(body: &[Stmt], thread_axis: &str, level: Level) -> Self {
        Self::analyse(body, thread_axis, &[], level, &mut |_, _, _, _| None)
    }

    pub fn level(&self) -> Level {
        self.level
    }

    /// Whether the binding `name` may differ between threads of the group.
    pub fn is_nonuniform_name(&self, name: &str) -> bool {
        self.nonuniform.contains(name)
    }

    /// Whether `e` has one value in every thread of the group.
    pub fn is_uniform(&self, e: &Expr) -> bool {
        self.reason(e).is_none()
    }

    /// Why `e` may differ between the threads of the group, if it may.
    pub fn reason(&self, e: &Expr) -> Option<String> {
        if self.level == Level::Warp && self.is_warp_index(e) {
            return None;
        }
        match e {
            Expr::Lit(_) | Expr::AxisSize(_) => None,
            Expr::Var(name) => self
                .nonuniform
                .contains(name)
                .then(|| format!("`{name}` is not {}", self.level.word())),
            Expr::AxisIndex(axis) => {
                if let Some((_, stride)) = self.thread_axes.iter().find(|(a, _)| a == axis) {
                    // A thread axis whose stride is a multiple of 32 holds
                    // one value in each warp.
                    return match self.level {
                        Level::Warp if stride % WARP_SIZE == 0 => None,
                        _ => Some(format!("`axis_index({axis})` is a thread axis")),
                    };
                }
                (*axis == self.thread_axis)
                    .then(|| format!("`axis_index({axis})` is the thread axis"))
            }
            Expr::WarpPosition(WarpPosition::Lane) => {
                Some("`lane_id()` differs between the lanes of a warp".to_string())
            }
            // The same in every lane of a warp, not in every thread of a block.
            Expr::WarpPosition(WarpPosition::Warp) => (self.level == Level::Block)
                .then(|| "`warp_id()` differs between the warps of a block".to_string()),
            Expr::Load(access) => Some(format!("it loads from `{}`", access.base)),
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => self.reason(x),
            Expr::Binary(_, a, b) => self.reason(a).or_else(|| self.reason(b)),
            Expr::Select(c, t, f) => [c, t, f].into_iter().find_map(|x| self.reason(x)),
            Expr::Math(_, args) => args.iter().find_map(|x| self.reason(x)),
        }
    }

    /// The first statement of `body` that `wanted` picks and that stands
    /// under control flow that is not uniform at this level: the statement,
    /// what guards it (`the condition `c``, a loop bound, a loop that some
    /// threads leave early) and why that differs between threads.
    pub fn first_under_nonuniform_control<'b>(
        &self,
        body: &'b [Stmt],
        wanted: &dyn Fn(&Stmt) -> bool,
    ) -> Option<(&'b Stmt, String, String)> {
        self.find_under(body, wanted, None)
    }

    fn find_under<'b>(
        &self,
        body: &'b [Stmt],
        wanted: &dyn Fn(&Stmt) -> bool,
        guard: Option<&(String, String)>,
    ) -> Option<(&'b Stmt, String, String)> {
        for stmt in body {
            if let (Some((what, why)), true) = (guard, wanted(stmt)) {
                return Some((stmt, what.clone(), why.clone()));
            }
            let found = match stmt {
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let own = guard.cloned().or_else(|| {
                        let reason = self.reason(cond)?;
                        Some((format!("the condition `{}`", print_expr(cond)), reason))
                    });
                    self.find_under(then_body, wanted, own.as_ref())
                        .or_else(|| self.find_under(else_body, wanted, own.as_ref()))
                }
                Stmt::For {
                    start, end, body, ..
                } => {
                    let own = guard.cloned().or_else(|| {
                        [start, end].into_iter().find_map(|b| {
                            Some((
                                format!("the loop bound `{}`", print_expr(b)),
                                self.reason(b)?,
                            ))
                        })
                    });
                    let own = own.or_else(|| self.early_exit(body));
                    self.find_under(body, wanted, own.as_ref())
                }
                Stmt::While { cond, body, .. } => {
                    let own = guard.cloned().or_else(|| {
                        Some((
                            format!("the `while` condition `{}`", print_expr(cond)),
                            self.reason(cond)?,
                        ))
                    });
                    let own = own.or_else(|| self.early_exit(body));
                    self.find_under(body, wanted, own.as_ref())
                }
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// A loop body that some threads leave early, described as a guard.
    fn early_exit(&self, body: &[Stmt]) -> Option<(String, String)> {
        self.divergent_exit(body).map(|(cond, reason)| {
            (
                format!(
                    "a loop that some threads leave early (`break` or `continue` under `{cond}`)"
                ),
                reason,
            )
        })
    }

    /// Whether `e` is a thread-linear value (see [`Self::is_thread_linear`])
    /// divided by a `u32` multiple of the warp size (`i / 32u`, `i >> 5u`):
    /// one value per warp. Unsigned only: a signed quotient rounds toward
    /// zero, which splits a warp whose indices straddle 0.
    fn is_warp_index(&self, e: &Expr) -> bool {
        let Expr::Binary(op, a, b) = e else {
            return false;
        };
        let Expr::Lit(Literal::U32(by)) = **b else {
            return false;
        };
        let aligned_divisor = match op {
            BinaryOp::Div => by != 0 && by % WARP_SIZE == 0,
            BinaryOp::Shr => (5..32).contains(&by),
            _ => false,
        };
        aligned_divisor && self.is_thread_linear(a)
    }

    /// The thread index plus a warp-uniform multiple of 32
    /// (`axis_index(t)`, `axis_index(b) * 64u + axis_index(t)`, a `let` of
    /// such): the lanes of one warp hold 32 consecutive values of it, starting
    /// at a multiple of 32 (also after wrapping, 2^32 being one).
    fn is_thread_linear(&self, e: &Expr) -> bool {
        match e {
            Expr::AxisIndex(axis) => *axis == self.thread_axis,
            Expr::Var(name) => self.thread_linear.contains(name),
            Expr::Binary(BinaryOp::Add, a, b) => {
                (self.is_thread_linear(a) && self.is_warp_multiple(b))
                    || (self.is_warp_multiple(a) && self.is_thread_linear(b))
            }
            _ => false,
        }
    }

    /// A warp-uniform `u32` that is a multiple of 32 by its form: a literal
    /// multiple, a product with one, or a shift left by 5 or more.
    fn is_warp_multiple(&self, e: &Expr) -> bool {
        let literal_multiple =
            |x: &Expr| matches!(x, Expr::Lit(Literal::U32(k)) if k % WARP_SIZE == 0);
        let uniform = self.level == Level::Warp && self.reason(e).is_none();
        uniform
            && match e {
                Expr::Lit(_) => literal_multiple(e),
                Expr::Binary(BinaryOp::Mul, a, b) => literal_multiple(a) || literal_multiple(b),
                Expr::Binary(BinaryOp::Shl, _, b) => {
                    matches!(**b, Expr::Lit(Literal::U32(s)) if (5..32).contains(&s))
                }
                Expr::Binary(BinaryOp::Add, a, b) => {
                    self.is_warp_multiple(a) && self.is_warp_multiple(b)
                }
                _ => false,
            }
    }

    /// The first `break` or `continue` of a loop body (not of loops nested
    /// in it) that only some threads of a block may reach: the condition it
    /// is under and why that condition is not block-uniform. Such a loop
    /// runs a different number of iterations per thread.
    pub fn divergent_exit(&self, body: &[Stmt]) -> Option<(String, String)> {
        for stmt in body {
            if let Stmt::If {
                cond,
                then_body,
                else_body,
            } = stmt
            {
                if contains_loop_exit(then_body) || contains_loop_exit(else_body) {
                    if let Some(reason) = self.reason(cond) {
                        return Some((print_expr(cond), reason));
                    }
                }
                let inner = self
                    .divergent_exit(then_body)
                    .or_else(|| self.divergent_exit(else_body));
                if inner.is_some() {
                    return inner;
                }
            }
        }
        None
    }
}

/// One pass of the fixpoint.
struct Pass<'f, 'i, 'a> {
    facts: &'f mut Uniformity,
    inline: &'i mut Inliner<'a>,
    calls_seen: u32,
    depth: usize,
}

impl Pass<'_, '_, '_> {
    /// Marks what `stmts` make non-uniform; returns whether a name was added.
    fn mark(&mut self, stmts: &[Stmt], under_nonuniform: bool) -> bool {
        let mut changed = false;
        for stmt in stmts {
            match stmt {
                Stmt::Let { var, value } | Stmt::Var { var, init: value } => {
                    let yes = self.facts.reason(value).is_some();
                    changed |= self.set(&var.name, yes);
                    let linear = matches!(stmt, Stmt::Let { .. })
                        && self.facts.level == Level::Warp
                        && self.facts.is_thread_linear(value);
                    if linear {
                        changed |= self.facts.thread_linear.insert(var.name.clone());
                    }
                }
                Stmt::Assign { name, value } | Stmt::CompoundAssign { name, value, .. } => {
                    let yes = under_nonuniform || self.facts.reason(value).is_some();
                    changed |= self.set(name, yes);
                }
                Stmt::Atomic {
                    dest: Some(dest), ..
                } => changed |= self.set(&dest.name, true),
                Stmt::Warp { dest, op, args } => {
                    let yes = match (self.facts.level, op) {
                        // Each warp of a block gets its own result.
                        (Level::Block, _) => true,
                        (Level::Warp, WarpOp::ShuffleIdx) => args
                            .get(1)
                            .is_none_or(|lane| self.facts.reason(lane).is_some()),
                        (Level::Warp, op) => !op.result_is_warp_uniform(),
                    };
                    changed |= self.set(&dest.name, yes);
                }
                // One result for the whole block (so for each warp too):
                // validation keeps block collectives in block-uniform control.
                Stmt::BlockCollective { dest, .. } => {
                    changed |= self.set(&dest.name, under_nonuniform)
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let inner = under_nonuniform || self.facts.reason(cond).is_some();
                    changed |= self.mark(then_body, inner);
                    changed |= self.mark(else_body, inner);
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let bounds =
                        self.facts.reason(start).is_some() || self.facts.reason(end).is_some();
                    let divergent = bounds || self.facts.divergent_exit(body).is_some();
                    changed |= self.set(&var.name, divergent);
                    changed |= self.mark(body, under_nonuniform || divergent);
                }
                Stmt::While { cond, body, .. } => {
                    let divergent = self.facts.reason(cond).is_some()
                        || self.facts.divergent_exit(body).is_some();
                    changed |= self.mark(body, under_nonuniform || divergent);
                }
                Stmt::Call {
                    dest,
                    function,
                    args,
                } => {
                    self.calls_seen += 1;
                    let inlined = (self.inline)(function, dest.as_ref(), args, self.calls_seen);
                    if let Some(stmts) = inlined {
                        if self.depth < MAX_INLINING {
                            self.depth += 1;
                            changed |= self.mark(&stmts, under_nonuniform);
                            self.depth -= 1;
                        }
                    }
                }
                _ => {}
            }
        }
        changed
    }

    fn set(&mut self, name: &str, nonuniform: bool) -> bool {
        nonuniform && self.facts.nonuniform.insert(name.to_string())
    }
}

/// Whether `body` holds a `break` or `continue` of the loop around it (one
/// inside a nested loop belongs to that loop).
pub(crate) fn contains_loop_exit(body: &[Stmt]) -> bool {
    body.iter().any(|stmt| match stmt {
        Stmt::Break | Stmt::Continue => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => contains_loop_exit(then_body) || contains_loop_exit(else_body),
        _ => false,
    })
}
