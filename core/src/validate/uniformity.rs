//! Block uniformity: which values of a kernel body may differ between the
//! threads of one block. The one analysis: validation's rules (E0045, E0053,
//! E0054) ask it why a value is not uniform, and the facts it returns
//! ([`super::ProgramFacts`]) give the backends the same answer.

use std::collections::BTreeSet;

use crate::ir::{Binding, Expr, Name, Stmt};
use crate::text::print_expr;

/// Helper calls inlined inside one another at most this deep while
/// analysing (recursion is refused by validation; this bounds the work).
const MAX_INLINING: usize = 64;

/// The inlined statements of a helper call at its `ordinal`-th call site in
/// a pass over the body (1-based, in walk order); `None` when the call
/// cannot be inlined (validation reports why elsewhere).
pub(crate) type Inliner<'a> =
    dyn FnMut(&str, Option<&Binding>, &[Expr], u32) -> Option<Vec<Stmt>> + 'a;

/// Which names of one kernel body may differ between the threads of a block,
/// for a program whose thread axis is `thread_axis`.
///
/// Flow-insensitive and keyed by name, which is exact when every
/// declaration has its own name (`plan::with_unique_names`, or the expanded
/// kernel `plan::program_kernel` gives a backend).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uniformity {
    thread_axis: Name,
    nonuniform: BTreeSet<Name>,
}

impl Uniformity {
    /// Runs the analysis to its fixpoint over `body`; `inline` expands
    /// helper calls (an expanded kernel has none).
    pub(crate) fn analyse(body: &[Stmt], thread_axis: &str, inline: &mut Inliner) -> Self {
        let mut facts = Uniformity {
            thread_axis: thread_axis.to_string(),
            nonuniform: BTreeSet::new(),
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
    pub fn of_expanded(body: &[Stmt], thread_axis: &str) -> Self {
        Self::analyse(body, thread_axis, &mut |_, _, _, _| None)
    }

    /// Whether the binding `name` may differ between threads of a block.
    pub fn is_nonuniform_name(&self, name: &str) -> bool {
        self.nonuniform.contains(name)
    }

    /// Whether `e` has one value in every thread of the block.
    pub fn is_uniform(&self, e: &Expr) -> bool {
        self.reason(e).is_none()
    }

    /// Why `e` may differ between the threads of a block, if it may.
    pub fn reason(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Lit(_) | Expr::AxisSize(_) => None,
            Expr::Var(name) => self
                .nonuniform
                .contains(name)
                .then(|| format!("`{name}` is not block-uniform")),
            Expr::AxisIndex(axis) => (*axis == self.thread_axis)
                .then(|| format!("`axis_index({axis})` is the thread axis")),
            Expr::Load(access) => Some(format!("it loads from `{}`", access.base)),
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => self.reason(x),
            Expr::Binary(_, a, b) => self.reason(a).or_else(|| self.reason(b)),
            Expr::Select(c, t, f) => [c, t, f].into_iter().find_map(|x| self.reason(x)),
            Expr::Math(_, args) => args.iter().find_map(|x| self.reason(x)),
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
                }
                Stmt::Assign { name, value } | Stmt::CompoundAssign { name, value, .. } => {
                    let yes = under_nonuniform || self.facts.reason(value).is_some();
                    changed |= self.set(name, yes);
                }
                Stmt::Atomic {
                    dest: Some(dest), ..
                } => changed |= self.set(&dest.name, true),
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
