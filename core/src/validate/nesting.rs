//! E0057: nesting the text format can read back. The parser refuses input
//! nested deeper than [`MAX_NESTING`] levels (blocks and expressions
//! together), so that a hostile file cannot overflow its stack; the builder
//! API can make deeper modules, which could then not be printed and read
//! back.

use crate::ir::{Expr, IrPath, Module, PathStep, RefAccess, Stmt};
use crate::text::{printed_nesting, MAX_NESTING};

use super::Sink;

pub(super) fn check_nesting(module: &Module, sink: &mut Sink) {
    for kernel in &module.kernels {
        let path = IrPath::root().child(PathStep::Kernel(kernel.name.clone()));
        // The kernel body is the first level.
        check_body(&kernel.body, &path, 1, sink);
    }
}

/// Expressions on the longest path from `e` to a leaf.
fn depth(e: &Expr) -> usize {
    let access = |a: &RefAccess| {
        a.block
            .iter()
            .flatten()
            .chain(&a.index)
            .map(depth)
            .max()
            .unwrap_or(0)
    };
    1 + match e {
        Expr::Lit(_) | Expr::Var(_) | Expr::AxisIndex(_) | Expr::AxisSize(_) => 0,
        Expr::Load(a) => access(a),
        Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => depth(x),
        Expr::Binary(_, a, b) => depth(a).max(depth(b)),
        Expr::Select(a, b, c) => depth(a).max(depth(b)).max(depth(c)),
        Expr::Math(_, args) => args.iter().map(depth).max().unwrap_or(0),
    }
}

/// The expressions a statement holds (not those of nested blocks).
fn exprs(stmt: &Stmt) -> Vec<&Expr> {
    fn access(a: &RefAccess) -> Vec<&Expr> {
        a.block.iter().flatten().chain(&a.index).collect()
    }
    match stmt {
        Stmt::Let { value, .. } | Stmt::Assign { value, .. } => vec![value],
        Stmt::Var { init, .. } => vec![init],
        Stmt::LocalArray { .. } | Stmt::Barrier => vec![],
        Stmt::Store { target, value } => {
            let mut all = access(target);
            all.push(value);
            all
        }
        Stmt::Atomic { target, args, .. } => {
            let mut all = access(target);
            all.extend(args);
            all
        }
        Stmt::If { cond, .. } => vec![cond],
        Stmt::For { start, end, .. } => vec![start, end],
        Stmt::Sem { sem, amount, .. } => {
            let mut all = access(sem);
            all.push(amount);
            all
        }
        Stmt::SemRead { sem, .. } => access(sem),
    }
}

/// Levels the parser needs for the statement's expressions at block `level`.
/// Each expression costs the parser at most two levels (an operand and its
/// parentheses) plus one to enter, so shallow ones need no measuring; deeper
/// ones are printed and measured by the parser itself.
fn needed(stmt: &Stmt, level: usize) -> usize {
    exprs(stmt)
        .into_iter()
        .map(|e| {
            let bound = 2 * depth(e) + 1;
            if level + bound <= MAX_NESTING {
                level
            } else {
                level.saturating_add(printed_nesting(e))
            }
        })
        .max()
        .unwrap_or(level)
}

fn check_body(body: &[Stmt], path: &IrPath, level: usize, sink: &mut Sink) {
    for (i, stmt) in body.iter().enumerate() {
        let here = path.child(PathStep::Stmt(i));
        let needed = needed(stmt, level);
        if needed > MAX_NESTING {
            sink.report(
                "E0057",
                here,
                format!(
                    "this statement needs {needed} levels of nesting (blocks and expressions); the text format reads at most {MAX_NESTING}"
                ),
                "bind inner parts of the expression to `let`s, or move inner blocks into separate statements",
            );
            continue;
        }
        match stmt {
            Stmt::For { body, .. } => {
                check_body(body, &here.child(PathStep::Body), level + 1, sink)
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                check_body(then_body, &here.child(PathStep::Then), level + 1, sink);
                check_body(else_body, &here.child(PathStep::Else), level + 1, sink);
            }
            _ => {}
        }
    }
}
