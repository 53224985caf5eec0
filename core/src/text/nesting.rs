//! Nesting as the text format counts it (docs/text-format.md, "Nesting"),
//! measured on the IR without recursion, so that modules of any depth can be
//! measured: validation (E0057) and lowering use it before anything that
//! recurses over a body.

use super::printer::{operand_contexts, parenthesized};
use crate::ir::limits::MAX_NESTING;
use crate::ir::{Expr, IrPath, PathStep, RefAccess, Stmt};

/// Levels `expr` takes as the canonical printer writes it, as the parser
/// counts them: a leaf is 1; an operator, call, cast, load or pair of
/// parentheses is one more than its deepest operand.
pub fn expr_nesting(expr: &Expr) -> usize {
    // Top-down: each node's level below the expression's top, which is 1.
    let mut deepest = 0;
    let mut stack = vec![(expr, 1usize)];
    while let Some((e, level)) = stack.pop() {
        deepest = deepest.max(level);
        for (operand, min, guard_sign, forced) in operand_contexts(e) {
            let paren = forced || parenthesized(operand, min, guard_sign);
            stack.push((operand, level + 1 + usize::from(paren)));
        }
    }
    deepest
}

/// The expressions a statement holds itself (not those of its blocks).
fn own_exprs(stmt: &Stmt) -> Vec<&Expr> {
    fn access(a: &RefAccess) -> impl Iterator<Item = &Expr> {
        a.block.iter().flatten().chain(&a.index)
    }
    match stmt {
        Stmt::Let { value, .. }
        | Stmt::Assign { value, .. }
        | Stmt::CompoundAssign { value, .. } => vec![value],
        Stmt::Var { init, .. } => vec![init],
        Stmt::Mma { d, a, b, c } => [d, a, b, c]
            .into_iter()
            .filter_map(|f| f.row.as_ref())
            .collect(),
        Stmt::MmaLoad { dest, source, .. } => dest.row.iter().chain(access(source)).collect(),
        Stmt::LocalArray { .. }
        | Stmt::Barrier
        | Stmt::Break
        | Stmt::Continue
        | Stmt::Return { value: None } => vec![],
        Stmt::Return { value: Some(value) } => vec![value],
        Stmt::Call { args, .. } | Stmt::Warp { args, .. } | Stmt::BlockCollective { args, .. } => {
            args.iter().collect()
        }
        Stmt::Store { target, value } | Stmt::CompoundStore { target, value, .. } => {
            access(target).chain([value]).collect()
        }
        Stmt::While { cond, max, .. } => vec![cond, max],
        Stmt::Atomic { target, args, .. } => access(target).chain(args).collect(),
        Stmt::If { cond, .. } => vec![cond],
        Stmt::For { start, end, .. } => vec![start, end],
        Stmt::Sem { sem, amount, .. } => access(sem).chain([amount]).collect(),
        Stmt::SemRead { sem, .. } => access(sem).collect(),
    }
}

/// The nesting of `stmt` at block `level` (a kernel body is level 1): the
/// level plus the nesting of its deepest expression. The statements of its
/// blocks are one level deeper and measured on their own.
pub fn statement_nesting(stmt: &Stmt, level: usize) -> usize {
    let deepest = own_exprs(stmt).into_iter().map(expr_nesting).max();
    // `x op= v` means `x = x op (v)`: measured as that, so that every
    // backend's expanded form stays within the limit too.
    let compound = usize::from(matches!(
        stmt,
        Stmt::CompoundAssign { .. } | Stmt::CompoundStore { .. }
    ));
    let deepest = deepest.unwrap_or(0).saturating_add(compound * 2);
    // A fragment load means element loads (`ir::mma::element_loads`) whose
    // indices add the lane's offset to the origin inside a load: measured
    // as that too.
    let deepest = match stmt {
        Stmt::MmaLoad { .. } => deepest.saturating_add(3).max(FRAGMENT_LOAD_INDEX_NESTING),
        _ => deepest,
    };
    level.saturating_add(deepest)
}

/// The nesting of the element loads' lane offset,
/// `origin + ((axis_index(t) % 32u) % 4u * 2u + 1u)` inside a load.
const FRAGMENT_LOAD_INDEX_NESTING: usize = 8;

/// Visits the statements of a kernel body, outer before inner and without
/// recursion, with their paths (under `root`) and nesting. The blocks of a
/// statement are visited only when its nesting is within [`MAX_NESTING`], so
/// every statement past the limit is visited and nothing inside it is.
pub fn visit_nesting(root: &IrPath, body: &[Stmt], mut visit: impl FnMut(&IrPath, &Stmt, usize)) {
    struct Block<'a> {
        stmts: &'a [Stmt],
        next: usize,
        level: usize,
        path: IrPath,
    }
    let mut stack = vec![Block {
        stmts: body,
        next: 0,
        level: 1,
        path: root.clone(),
    }];
    while let Some(block) = stack.last_mut() {
        let Some(stmt) = block.stmts.get(block.next) else {
            stack.pop();
            continue;
        };
        let path = block.path.child(PathStep::Stmt(block.next));
        let level = block.level;
        block.next += 1;
        let nesting = statement_nesting(stmt, level);
        visit(&path, stmt, nesting);
        if nesting > MAX_NESTING {
            continue;
        }
        let inner: Vec<(&[Stmt], PathStep)> = match stmt {
            Stmt::If {
                then_body,
                else_body,
                ..
            } => vec![(else_body, PathStep::Else), (then_body, PathStep::Then)],
            Stmt::For { body, .. } | Stmt::While { body, .. } => vec![(body, PathStep::Body)],
            _ => vec![],
        };
        // Pushed last is walked first: `then` before `else`.
        for (stmts, step) in inner {
            stack.push(Block {
                stmts,
                next: 0,
                level: level + 1,
                path: path.child(step),
            });
        }
    }
}

/// The deepest nesting of any statement of `body` that [`visit_nesting`]
/// reaches; past [`MAX_NESTING`] exactly when some statement is.
pub fn body_nesting(body: &[Stmt]) -> usize {
    let mut deepest = 0;
    visit_nesting(&IrPath::root(), body, |_, _, nesting| {
        deepest = deepest.max(nesting)
    });
    deepest
}
