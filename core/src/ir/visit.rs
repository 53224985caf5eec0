//! Walks over kernel bodies, shared by lowering, the backends and the harness
//! so that each new statement or expression kind is handled in one place.

use super::{Expr, RefAccess, Stmt};

/// Calls `f` on every statement of `body`, outer before inner, descending
/// into `if` branches and loop bodies.
pub fn for_each_stmt(body: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for stmt in body {
        f(stmt);
        match stmt {
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                for_each_stmt(then_body, f);
                for_each_stmt(else_body, f);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => for_each_stmt(body, f),
            _ => {}
        }
    }
}

/// The `while` loops of `body`, outer before inner, in source order: the
/// numbering every backend uses to name a loop that reached its limit.
pub fn while_loops(body: &[Stmt]) -> Vec<&Stmt> {
    let mut loops = Vec::new();
    // Pre-order without recursion: a stack of statement lists being walked.
    let mut pending = vec![body.iter()];
    while let Some(iter) = pending.last_mut() {
        let Some(stmt) = iter.next() else {
            pending.pop();
            continue;
        };
        match stmt {
            Stmt::While { body, .. } => {
                loops.push(stmt);
                pending.push(body.iter());
            }
            Stmt::For { body, .. } => pending.push(body.iter()),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                // `then` first: push `else` below it.
                pending.push(else_body.iter());
                pending.push(then_body.iter());
            }
            _ => {}
        }
    }
    loops
}

/// Calls `f` on every expression of `body` (sub-expressions and index,
/// coordinate and amount expressions included), parents before children.
pub fn for_each_expr(body: &[Stmt], f: &mut dyn FnMut(&Expr)) {
    for_each_stmt(body, &mut |stmt| match stmt {
        Stmt::Let { value, .. }
        | Stmt::Assign { value, .. }
        | Stmt::CompoundAssign { value, .. } => walk_expr(value, f),
        Stmt::Var { init, .. } => walk_expr(init, f),
        Stmt::Mma { d, a, b, c } => {
            for fragment in [d, a, b, c] {
                fragment.row.iter().for_each(|r| walk_expr(r, f));
            }
        }
        Stmt::MmaLoad { dest, source, .. } => {
            dest.row.iter().for_each(|r| walk_expr(r, f));
            walk_access(source, f);
        }
        Stmt::LocalArray { .. }
        | Stmt::Barrier
        | Stmt::Break
        | Stmt::Continue
        | Stmt::Return { value: None } => {}
        Stmt::Return { value: Some(value) } => walk_expr(value, f),
        Stmt::Call { args, .. } | Stmt::Warp { args, .. } | Stmt::BlockCollective { args, .. } => {
            args.iter().for_each(|a| walk_expr(a, f))
        }
        Stmt::Store { target, value } | Stmt::CompoundStore { target, value, .. } => {
            walk_access(target, f);
            walk_expr(value, f);
        }
        Stmt::Atomic { target, args, .. } => {
            walk_access(target, f);
            args.iter().for_each(|a| walk_expr(a, f));
        }
        Stmt::If { cond, .. } => walk_expr(cond, f),
        Stmt::While { cond, max, .. } => {
            walk_expr(cond, f);
            walk_expr(max, f);
        }
        Stmt::For { start, end, .. } => {
            walk_expr(start, f);
            walk_expr(end, f);
        }
        Stmt::Sem { sem, amount, .. } => {
            walk_access(sem, f);
            walk_expr(amount, f);
        }
        Stmt::SemRead { sem, .. } => walk_access(sem, f),
    });
}

/// Calls `f` on `e` and each of its sub-expressions, parents first (then
/// children left to right). An explicit stack, not recursion: operator
/// chains (`a + b + c + ...`) nest as deep as they are long.
pub fn walk_expr(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        f(e);
        match e {
            Expr::Lit(_)
            | Expr::Var(_)
            | Expr::AxisIndex(_)
            | Expr::AxisSize(_)
            | Expr::WarpPosition(_) => {}
            Expr::Load(a) => stack.extend(access_exprs(a).rev()),
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => stack.push(x),
            Expr::Binary(_, a, b) => stack.extend([b.as_ref(), a.as_ref()]),
            Expr::Select(a, b, c) => stack.extend([c.as_ref(), b.as_ref(), a.as_ref()]),
            Expr::Math(_, args) => stack.extend(args.iter().rev()),
        }
    }
}

/// Calls `f` on `e` and each of its sub-expressions, parents first; `f` may
/// replace the node it is given, and the replacement's children are visited.
/// An explicit stack, as in [`walk_expr`].
pub fn walk_expr_mut(e: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        f(e);
        match e {
            Expr::Lit(_)
            | Expr::Var(_)
            | Expr::AxisIndex(_)
            | Expr::AxisSize(_)
            | Expr::WarpPosition(_) => {}
            Expr::Load(a) => {
                stack.extend(a.index.iter_mut().rev());
                stack.extend(a.block.iter_mut().flatten().rev());
            }
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => stack.push(x),
            Expr::Binary(_, a, b) => stack.extend([b.as_mut(), a.as_mut()]),
            Expr::Select(a, b, c) => stack.extend([c.as_mut(), b.as_mut(), a.as_mut()]),
            Expr::Math(_, args) => stack.extend(args.iter_mut().rev()),
        }
    }
}

/// The block coordinates, then the indices, of an access.
fn access_exprs(a: &RefAccess) -> impl DoubleEndedIterator<Item = &Expr> {
    a.block.iter().flatten().chain(&a.index)
}

/// Calls `f` on the block coordinates and indices of an access.
pub fn walk_access(a: &RefAccess, f: &mut dyn FnMut(&Expr)) {
    for e in access_exprs(a) {
        walk_expr(e, f);
    }
}

/// Whether `pred` holds for some statement of `body`, nested ones included.
pub fn any_stmt(body: &[Stmt], pred: &mut dyn FnMut(&Stmt) -> bool) -> bool {
    let mut found = false;
    for_each_stmt(body, &mut |stmt| found = found || pred(stmt));
    found
}

/// Whether `pred` holds for `e` or one of its sub-expressions (index,
/// coordinate and argument expressions included).
pub fn any_expr(e: &Expr, pred: &mut dyn FnMut(&Expr) -> bool) -> bool {
    let mut found = false;
    walk_expr(e, &mut |e| found = found || pred(e));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::*;

    #[test]
    fn visits_nested_statements_and_every_expression() {
        let body = BodyBuilder::nested(|b| {
            b.if_(axis_index("x").lt(4u32), |b| {
                b.for_("k", ScalarType::U32, 0u32, axis_size("t"), |b, k| {
                    b.store(at("y", [k]), load("x", [axis_index("t")]));
                });
            });
        });
        let mut kinds = vec![];
        for_each_stmt(&body, &mut |s| {
            kinds.push(match s {
                Stmt::If { .. } => "if",
                Stmt::For { .. } => "for",
                Stmt::Store { .. } => "store",
                _ => "other",
            })
        });
        assert_eq!(kinds, ["if", "for", "store"]);
        let mut axes = vec![];
        for_each_expr(&body, &mut |e| {
            if let Expr::AxisIndex(a) | Expr::AxisSize(a) = e {
                axes.push(a.clone());
            }
        });
        assert_eq!(axes, ["x", "t", "t"]);
    }

    #[test]
    fn visits_fragment_rows_and_load_origins() {
        let body = BodyBuilder::nested(|b| {
            b.mma(
                Fragment::row("acc", axis_index("d")),
                Fragment::row("fa", axis_index("a")),
                "fb",
                Fragment::row("acc", axis_index("c")),
            );
            b.mma_load(
                mma::Operand::B,
                Fragment::row("fb", axis_index("row")),
                at("s", [axis_index("origin"), axis_size("col")]),
            );
        });
        let mut axes = vec![];
        for_each_expr(&body, &mut |e| {
            if let Expr::AxisIndex(a) | Expr::AxisSize(a) = e {
                axes.push(a.clone());
            }
        });
        assert_eq!(axes, ["d", "a", "c", "row", "origin", "col"]);
    }

    #[test]
    fn any_finds_nested_statements_and_sub_expressions() {
        let body = BodyBuilder::nested(|b| {
            b.if_(axis_index("x").lt(4u32), |b| {
                b.store(at("y", [axis_index("t")]), load("x", [Expr::from(2u32)]));
            });
        });
        assert!(any_stmt(&body, &mut |s| matches!(s, Stmt::Store { .. })));
        assert!(!any_stmt(&body, &mut |s| matches!(s, Stmt::For { .. })));
        let Stmt::If { then_body, .. } = &body[0] else {
            panic!("the body is one `if`");
        };
        let Stmt::Store { value, .. } = &then_body[0] else {
            panic!("the `if` holds one store");
        };
        assert!(any_expr(value, &mut |e| matches!(
            e,
            Expr::Lit(Literal::U32(2))
        )));
        assert!(!any_expr(value, &mut |e| matches!(e, Expr::AxisIndex(_))));
    }
}
