//! The kernel a program runs: the IR as written, with its sugar expanded so
//! that the interpreter and every backend implement one smaller language.
//!
//! [`program_kernel`] is the one home of these rules. Validation calls it
//! once per program and returns its result with the program's facts
//! (`validate::ValidModule`); the lowering, the interpreter and conformance's
//! analysis take the kernels from there, and backends receive them in the
//! plan. Nothing else calls it (`xtask/tests/architecture.rs`). This module sits
//! below both validation and the lowering and imports neither:
//! - parameters: a kernel names the operands it uses, in any order; the
//!   program's kernel takes every operand of the map, in the map's order
//!   (inputs, outputs, scalars, scratch), so that parameter `i` binds
//!   operand `i`. An operand the kernel does not name gets a fresh name that
//!   nothing in the body uses;
//! - module constants: a use of a `const` becomes its literal;
//! - compound assignment: `x op= v` becomes `x = x op (v)`, and
//!   `a[i] op= v` becomes `a[i] = a[i] op (v)` (the index expressions are
//!   pure, so evaluating them twice is the same as once);
//! - names reused in sibling blocks: each later declaration gets a fresh
//!   name, so that every name is declared once per kernel (what the
//!   backends' symbol tables and the interpreter's registers assume);
//! - helper functions: each call is replaced by the function's body
//!   ([`inline_call`], which validation's body checks use too, so that a
//!   helper is checked in the context of every call).
//!
//! The input must be valid (`validate` found no error); the output is
//! valid too and has no `CompoundAssign`, `CompoundStore`, `Call`,
//! `Return` or const use.

use std::collections::{HashMap, HashSet};

use thiserror::Error;

use crate::ir::limits::MAX_NESTING;
use crate::ir::visit::for_each_stmt;
use crate::ir::{
    Axis, BinaryOp, Binding, Expr, Fragment, Function, IrPath, Kernel, Mesh, Module, MpmdMap, Name,
    Param, PathStep, RefAccess, Stmt,
};

/// Why a kernel could not be expanded (validation reports each first).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub(crate) enum ExpandError {
    #[error("kernel `{kernel}` calls `{function}`, which is not a helper function of the module")]
    UnknownFunction { kernel: Name, function: Name },
    #[error("kernel `{kernel}` calls the helper `{function}`, which calls itself (directly or through others)")]
    Recursive { kernel: Name, function: Name },
    #[error("kernel `{kernel}` has a `return` that does not end a helper function's body")]
    StrayReturn { kernel: Name },
    #[error("kernel `{kernel}` nests {nesting} levels once its helper calls are inlined, more than {MAX_NESTING}")]
    TooDeep { kernel: Name, nesting: usize },
    #[error("kernel `{kernel}` uses `lane_id()`, `warp_id()` or a thread axis and runs on meshes whose thread axes differ (`{first}` and `{other}`); give them one form")]
    ThreadAxes {
        kernel: Name,
        first: Name,
        other: Name,
    },
}

/// The statements `function(args)` stands for at a call, binding its result
/// to `dest`: each scalar parameter becomes a `let` of its argument, each
/// ref parameter the ref its argument names, every name the body declares
/// is renamed by `rename` (so that the inlined code never meets the
/// caller's names), and the final `return value;` becomes `let dest = value;`.
/// Calls inside the body are left for the caller to inline in turn.
pub(crate) fn inline_call(
    function: &Function,
    dest: Option<&Binding>,
    args: &[Expr],
    rename: &mut dyn FnMut(&str) -> Name,
) -> Vec<Stmt> {
    let mut names: HashMap<Name, Name> = HashMap::new();
    let mut out = Vec::new();
    for (param, arg) in function.params.iter().zip(args) {
        match (&param.ty, arg) {
            (crate::ir::Type::Ref(_), Expr::Var(actual)) => {
                names.insert(param.name.clone(), actual.clone());
            }
            (crate::ir::Type::Scalar(ty), _) => {
                let local = rename(&param.name);
                names.insert(param.name.clone(), local.clone());
                out.push(Stmt::Let {
                    var: Binding {
                        name: local,
                        ty: *ty,
                    },
                    value: arg.clone(),
                });
            }
            // A ref argument that is not a name: validation reports it.
            _ => {}
        }
    }
    let mut body = function.body.as_slice();
    let mut result = None;
    if let Some((Stmt::Return { value }, rest)) = body.split_last() {
        result = value.as_ref();
        body = rest;
    }
    for_each_stmt(body, &mut |stmt| {
        if let Some(name) = declared_by(stmt) {
            if !names.contains_key(name) {
                names.insert(name.clone(), rename(name));
            }
        }
    });
    out.extend(body.iter().map(|s| renamed_stmt(s, &names)));
    if let (Some(dest), Some(value)) = (dest, result) {
        out.push(Stmt::Let {
            var: dest.clone(),
            value: renamed_expr(value, &names),
        });
    }
    out
}

/// The functions that take part in a call cycle (helpers cannot recurse).
pub(crate) fn recursive_functions(module: &Module) -> HashSet<Name> {
    let calls = |f: &Function| {
        let mut callees = Vec::new();
        for_each_stmt(&f.body, &mut |s| {
            if let Stmt::Call { function, .. } = s {
                callees.push(function.clone());
            }
        });
        callees
    };
    let graph: HashMap<&str, Vec<Name>> = module
        .functions
        .iter()
        .map(|f| (f.name.as_str(), calls(f)))
        .collect();
    let mut recursive = HashSet::new();
    for start in graph.keys() {
        // Depth-first from `start`; it is recursive when it reaches itself.
        let mut seen = HashSet::new();
        let mut stack: Vec<&str> = graph[start].iter().map(String::as_str).collect();
        while let Some(f) = stack.pop() {
            if f == *start {
                recursive.insert(start.to_string());
                break;
            }
            if seen.insert(f) {
                if let Some(next) = graph.get(f) {
                    stack.extend(next.iter().map(String::as_str));
                }
            }
        }
    }
    recursive
}

fn renamed(name: &Name, names: &HashMap<Name, Name>) -> Name {
    names.get(name).cloned().unwrap_or_else(|| name.clone())
}

fn renamed_binding(b: &Binding, names: &HashMap<Name, Name>) -> Binding {
    Binding {
        name: renamed(&b.name, names),
        ty: b.ty,
    }
}

fn renamed_access(a: &RefAccess, names: &HashMap<Name, Name>) -> RefAccess {
    let rename = |n: &Name| renamed(n, names);
    rewrite_access(a, &|n| Expr::Var(rename(n)), &rename)
}

fn renamed_fragment(f: &Fragment, names: &HashMap<Name, Name>) -> Fragment {
    let rename = |n: &Name| renamed(n, names);
    rewrite_fragment(f, &|n| Expr::Var(rename(n)), &rename)
}

fn renamed_expr(e: &Expr, names: &HashMap<Name, Name>) -> Expr {
    let rename = |n: &Name| renamed(n, names);
    rewrite_expr(e, &|n| Expr::Var(rename(n)), &rename)
}

/// `e` with each variable `n` replaced by `var(n)` (a new name, or a
/// constant's literal) and each ref `r` it loads from by `base(r)`.
fn rewrite_expr(e: &Expr, var: &dyn Fn(&Name) -> Expr, base: &dyn Fn(&Name) -> Name) -> Expr {
    let mut out = e.clone();
    crate::ir::visit::walk_expr_mut(&mut out, &mut |node| match node {
        Expr::Var(name) => {
            let new = var(name);
            *node = new;
        }
        Expr::Load(a) => a.base = base(&a.base),
        _ => {}
    });
    out
}

/// [`rewrite_expr`] for an access: its base and every coordinate and index.
fn rewrite_fragment(
    f: &Fragment,
    var: &dyn Fn(&Name) -> Expr,
    array: &dyn Fn(&Name) -> Name,
) -> Fragment {
    Fragment {
        array: array(&f.array),
        row: f.row.as_ref().map(|r| rewrite_expr(r, var, array)),
    }
}

fn rewrite_access(
    a: &RefAccess,
    var: &dyn Fn(&Name) -> Expr,
    base: &dyn Fn(&Name) -> Name,
) -> RefAccess {
    RefAccess {
        base: base(&a.base),
        block: a
            .block
            .as_ref()
            .map(|c| c.iter().map(|e| rewrite_expr(e, var, base)).collect()),
        index: a.index.iter().map(|e| rewrite_expr(e, var, base)).collect(),
    }
}

fn renamed_stmt(stmt: &Stmt, names: &HashMap<Name, Name>) -> Stmt {
    let e = |x: &Expr| renamed_expr(x, names);
    let block = |b: &[Stmt]| b.iter().map(|s| renamed_stmt(s, names)).collect();
    match stmt {
        Stmt::Let { var, value } => Stmt::Let {
            var: renamed_binding(var, names),
            value: e(value),
        },
        Stmt::Var { var, init } => Stmt::Var {
            var: renamed_binding(var, names),
            init: e(init),
        },
        Stmt::Assign { name, value } => Stmt::Assign {
            name: renamed(name, names),
            value: e(value),
        },
        Stmt::CompoundAssign { name, op, value } => Stmt::CompoundAssign {
            name: renamed(name, names),
            op: *op,
            value: e(value),
        },
        Stmt::LocalArray { name, elem, shape } => Stmt::LocalArray {
            name: renamed(name, names),
            elem: *elem,
            shape: shape.clone(),
        },
        Stmt::Store { target, value } => Stmt::Store {
            target: renamed_access(target, names),
            value: e(value),
        },
        Stmt::CompoundStore { target, op, value } => Stmt::CompoundStore {
            target: renamed_access(target, names),
            op: *op,
            value: e(value),
        },
        Stmt::Atomic {
            dest,
            op,
            target,
            args,
        } => Stmt::Atomic {
            dest: dest.as_ref().map(|d| renamed_binding(d, names)),
            op: *op,
            target: renamed_access(target, names),
            args: args.iter().map(e).collect(),
        },
        Stmt::If {
            cond,
            then_body,
            else_body,
        } => Stmt::If {
            cond: e(cond),
            then_body: block(then_body),
            else_body: block(else_body),
        },
        Stmt::For {
            var,
            start,
            end,
            body,
        } => Stmt::For {
            var: renamed_binding(var, names),
            start: e(start),
            end: e(end),
            body: block(body),
        },
        Stmt::While { cond, max, body } => Stmt::While {
            cond: e(cond),
            max: e(max),
            body: block(body),
        },
        Stmt::Call {
            dest,
            function,
            args,
        } => Stmt::Call {
            dest: dest.as_ref().map(|d| renamed_binding(d, names)),
            function: function.clone(),
            args: args.iter().map(e).collect(),
        },
        Stmt::Return { value } => Stmt::Return {
            value: value.as_ref().map(e),
        },
        Stmt::Break => Stmt::Break,
        Stmt::Continue => Stmt::Continue,
        Stmt::Barrier => Stmt::Barrier,
        Stmt::Sem { op, sem, amount } => Stmt::Sem {
            op: *op,
            sem: renamed_access(sem, names),
            amount: e(amount),
        },
        Stmt::SemRead { dest, sem } => Stmt::SemRead {
            dest: renamed(dest, names),
            sem: renamed_access(sem, names),
        },
        Stmt::Warp { dest, op, args } => Stmt::Warp {
            dest: renamed_binding(dest, names),
            op: *op,
            args: args.iter().map(e).collect(),
        },
        Stmt::BlockCollective { dest, op, args } => Stmt::BlockCollective {
            dest: renamed_binding(dest, names),
            op: *op,
            args: args.iter().map(e).collect(),
        },
        Stmt::Mma { d, a, b, c } => {
            let f = |f: &Fragment| renamed_fragment(f, names);
            Stmt::Mma {
                d: f(d),
                a: f(a),
                b: f(b),
                c: f(c),
            }
        }
        Stmt::MmaLoad {
            operand,
            dest,
            source,
        } => Stmt::MmaLoad {
            operand: *operand,
            dest: renamed_fragment(dest, names),
            source: renamed_access(source, names),
        },
    }
}

/// The kernel that program `kernel` of `map` runs (see the module docs).
pub(crate) fn program_kernel(
    module: &Module,
    map: &MpmdMap,
    kernel: &Kernel,
) -> Result<Kernel, ExpandError> {
    let mut taken = declared_names(kernel);
    taken.extend(module.consts.iter().map(|c| c.name.clone()));
    taken.extend(module.tables.iter().map(|t| t.name.clone()));
    let params = map
        .params()
        .into_iter()
        .map(|operand| {
            if kernel.params.iter().any(|p| p.name == operand.name) {
                operand
            } else {
                Param {
                    name: fresh(&format!("unused_{}", operand.name), &mut taken),
                    ty: operand.ty,
                }
            }
        })
        .collect();
    let mut expander = Expander {
        module,
        kernel: &kernel.name,
        inlining: vec![],
        consts: module
            .consts
            .iter()
            .map(|c| (c.name.clone(), Expr::Lit(c.value)))
            .collect(),
        declared: kernel.params.iter().map(|p| p.name.clone()).collect(),
        taken,
        renames: vec![HashMap::new()],
        rename_only: false,
        originals: HashMap::new(),
        threads: program_threads(module, map, kernel)?,
    };
    let body = with_tables(module, kernel, expander.block(&kernel.body)?);
    let nesting = crate::text::body_nesting(&body);
    if nesting > MAX_NESTING {
        return Err(ExpandError::TooDeep {
            kernel: kernel.name.clone(),
            nesting,
        });
    }
    Ok(Kernel {
        name: kernel.name.clone(),
        params,
        body,
    })
}

/// The thread axes of the meshes that run `kernel` in `map` (the linear
/// axis's name and the axes of a block of several), for the expansion of
/// `lane_id()`, `warp_id()` and a thread axis's `axis_index`; `None` when
/// no program runs it. Meshes whose thread axes differ cannot share a
/// kernel (or its helpers) that uses those (its expansion names one form).
fn program_threads(
    module: &Module,
    map: &MpmdMap,
    kernel: &Kernel,
) -> Result<Option<(Name, Vec<Axis>)>, ExpandError> {
    let mut meshes = map
        .programs
        .iter()
        .filter(|p| p.kernel == kernel.name)
        .filter_map(|p| module.mesh(&p.mesh));
    let Some(first) = meshes.next() else {
        return Ok(None);
    };
    let form = |m: &Mesh| (m.threads.name.clone(), m.thread_axes.clone());
    if let Some(other) = meshes.find(|m| form(m) != form(first)) {
        let thread_axis = |name: &str| {
            [first, other]
                .iter()
                .any(|m| m.threads.name == name || m.thread_axis_stride(name).is_some())
        };
        let mut uses = false;
        let mut look = |e: &Expr| {
            uses |= match e {
                Expr::WarpPosition(_) => true,
                Expr::AxisIndex(a) => thread_axis(a),
                _ => false,
            }
        };
        crate::ir::visit::for_each_expr(&kernel.body, &mut look);
        for f in &module.functions {
            crate::ir::visit::for_each_expr(&f.body, &mut look);
        }
        if uses {
            let names = |m: &Mesh| {
                if m.thread_axes.is_empty() {
                    m.threads.name.clone()
                } else {
                    let axes: Vec<&str> = m.thread_axes.iter().map(|a| a.name.as_str()).collect();
                    format!("[{}]", axes.join(", "))
                }
            };
            return Err(ExpandError::ThreadAxes {
                kernel: kernel.name.clone(),
                first: names(first),
                other: names(other),
            });
        }
    }
    Ok(Some(form(first)))
}

/// The constant tables a kernel body as written reads: named by a load or
/// passed to a helper, in it or in the helpers it calls (tables share no
/// name with any binding or parameter, so inlining keeps their names).
fn tables_read(module: &Module, body: &[Stmt]) -> HashSet<Name> {
    fn walk(module: &Module, body: &[Stmt], seen: &mut HashSet<Name>, read: &mut HashSet<Name>) {
        crate::ir::visit::for_each_expr(body, &mut |e| match e {
            Expr::Load(a) if module.table(&a.base).is_some() => {
                read.insert(a.base.clone());
            }
            Expr::Var(n) if module.table(n).is_some() => {
                read.insert(n.clone());
            }
            _ => {}
        });
        let mut called = Vec::new();
        for_each_stmt(body, &mut |s| {
            if let Stmt::Call { function, .. } = s {
                called.push(function.clone());
            }
        });
        for name in called {
            if let Some(f) = module.function(&name) {
                if seen.insert(name) {
                    walk(module, &f.body, seen, read);
                }
            }
        }
    }
    let mut read = HashSet::new();
    walk(module, body, &mut HashSet::new(), &mut read);
    read
}

/// How many statements [`with_tables`] puts before the body of `kernel`.
fn table_prelude_len(module: &Module, kernel: &Kernel) -> usize {
    let read = tables_read(module, &kernel.body);
    module
        .tables
        .iter()
        .filter(|t| read.contains(&t.name))
        .map(|t| 1 + t.values.len())
        .sum()
}

/// `body`, the expansion of `kernel`, after the `local` copy of every
/// constant table `kernel` reads ([`tables_read`]): the array, then one
/// store of each value, in table order.
fn with_tables(module: &Module, kernel: &Kernel, body: Vec<Stmt>) -> Vec<Stmt> {
    let read = tables_read(module, &kernel.body);
    let mut out = Vec::new();
    for table in module.tables.iter().filter(|t| read.contains(&t.name)) {
        out.push(Stmt::LocalArray {
            name: table.name.clone(),
            elem: table.elem,
            shape: table.ref_type().shape,
        });
        for (i, v) in table.values.iter().enumerate() {
            out.push(Stmt::Store {
                target: RefAccess {
                    base: table.name.clone(),
                    block: None,
                    index: vec![Expr::Lit(crate::ir::Literal::U32(
                        u32::try_from(i).unwrap_or(u32::MAX),
                    ))],
                },
                value: Expr::Lit(*v),
            });
        }
    }
    if out.is_empty() {
        return body;
    }
    out.extend(body);
    out
}

/// The statement as written in `module` that a statement of
/// validation's expansion of its kernel (`program_kernel`, the kernel a
/// program runs) comes from: `path` is
/// `kernel K / stmt ...` in the expansion, the result the same statement
/// in kernel `K` as written (whose span a `text::SourceMap` has). Only
/// inlining moves statements: one that a helper call expanded to maps to
/// that call. `None` when `path` names no statement of the expansion of
/// a kernel of `module`.
pub fn source_path(module: &Module, path: &IrPath) -> Option<IrPath> {
    let (PathStep::Kernel(name), steps) = path.0.split_first()? else {
        return None;
    };
    let kernel = module.kernel(name)?;
    let mut stmts: &[Stmt] = &kernel.body;
    let mut out = vec![PathStep::Kernel(name.clone())];
    let mut steps = steps.iter();
    // The expansion starts with the constant tables' copies.
    let mut prelude = table_prelude_len(module, kernel);
    while let Some(step) = steps.next() {
        let PathStep::Stmt(wanted) = step else {
            return None;
        };
        let wanted = &wanted.checked_sub(std::mem::take(&mut prelude))?;
        // The statement as written whose expansion covers index `wanted`.
        let mut first = 0usize;
        let (index, stmt) = stmts.iter().enumerate().find(|(_, s)| {
            first += expanded_len(module, s, 0);
            first > *wanted
        })?;
        out.push(PathStep::Stmt(index));
        if matches!(stmt, Stmt::Call { .. }) {
            break;
        }
        let Some(child) = steps.next() else { break };
        stmts = match (child, stmt) {
            (PathStep::Then, Stmt::If { then_body, .. }) => then_body,
            (PathStep::Else, Stmt::If { else_body, .. }) => else_body,
            (PathStep::Body, Stmt::For { body, .. } | Stmt::While { body, .. }) => body,
            _ => return None,
        };
        out.push(child.clone());
    }
    Some(IrPath(out))
}

/// How many statements [`program_kernel`] puts in place of `stmt`: one,
/// or for a helper call those of its inlined body (calls in it inlined in
/// turn, at most [`MAX_NESTING`] deep, as validation requires).
fn expanded_len(module: &Module, stmt: &Stmt, depth: usize) -> usize {
    let Stmt::Call {
        dest,
        function,
        args,
    } = stmt
    else {
        return 1;
    };
    let Some(f) = module.function(function).filter(|_| depth < MAX_NESTING) else {
        return 1;
    };
    inline_call(f, dest.as_ref(), args, &mut |name| name.to_string())
        .iter()
        .map(|s| expanded_len(module, s, depth + 1))
        .sum()
}

/// Every name a kernel declares (parameters and bindings), for fresh names.
fn declared_names(kernel: &Kernel) -> HashSet<Name> {
    let mut names: HashSet<Name> = kernel.params.iter().map(|p| p.name.clone()).collect();
    for_each_stmt(&kernel.body, &mut |stmt| {
        if let Some(name) = declared_by(stmt) {
            names.insert(name.clone());
        }
    });
    names
}

/// The name `stmt` declares, if any.
fn declared_by(stmt: &Stmt) -> Option<&Name> {
    match stmt {
        Stmt::Let { var, .. }
        | Stmt::Var { var, .. }
        | Stmt::For { var, .. }
        | Stmt::Warp { dest: var, .. }
        | Stmt::BlockCollective { dest: var, .. } => Some(&var.name),
        Stmt::Atomic {
            dest: Some(dest), ..
        } => Some(&dest.name),
        Stmt::LocalArray { name, .. } | Stmt::SemRead { dest: name, .. } => Some(name),
        Stmt::Call {
            dest: Some(dest), ..
        } => Some(&dest.name),
        _ => None,
    }
}

/// `kernel` as written, but with every name declared once: a declaration
/// that reuses a sibling block's name is renamed (as [`program_kernel`]
/// renames it). Nothing else changes, so statement paths stay the same;
/// validation analyses uniformity on this form (its facts are keyed by
/// name). Also returns each new name's original.
pub(crate) fn with_unique_names(module: &Module, kernel: &Kernel) -> (Kernel, HashMap<Name, Name>) {
    let mut taken = declared_names(kernel);
    taken.extend(module.consts.iter().map(|c| c.name.clone()));
    taken.extend(module.tables.iter().map(|t| t.name.clone()));
    let mut expander = Expander {
        module,
        kernel: &kernel.name,
        inlining: vec![],
        consts: HashMap::new(),
        declared: kernel.params.iter().map(|p| p.name.clone()).collect(),
        taken,
        renames: vec![HashMap::new()],
        rename_only: true,
        originals: HashMap::new(),
        threads: None,
    };
    let body = expander
        .block(&kernel.body)
        .unwrap_or_else(|_| kernel.body.clone());
    let renamed = Kernel {
        name: kernel.name.clone(),
        params: kernel.params.clone(),
        body,
    };
    (renamed, expander.originals)
}

/// `base`, or `base_2`, `base_3`, ... : the first that is not taken (then taken).
fn fresh(base: &str, taken: &mut HashSet<Name>) -> Name {
    let mut name = base.to_string();
    let mut k = 2u64;
    while taken.contains(&name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    taken.insert(name.clone());
    name
}

struct Expander<'m> {
    module: &'m Module,
    kernel: &'m Name,
    /// The helpers being inlined, outermost first (a guard: validation
    /// rejects recursion).
    inlining: Vec<Name>,
    /// Module constants by name, as literals.
    consts: HashMap<Name, Expr>,
    /// Names declared so far (in any block): a second declaration is renamed.
    declared: HashSet<Name>,
    /// Every name in use, original or fresh.
    taken: HashSet<Name>,
    /// Renamed declarations, one map per block in scope (innermost last).
    renames: Vec<HashMap<Name, Name>>,
    /// Only make names unique ([`with_unique_names`]): keep calls, compound
    /// assignments and constants as written.
    rename_only: bool,
    /// Each fresh name's original.
    originals: HashMap<Name, Name>,
    /// The linear thread axis of the program's mesh and its thread axes
    /// (of a block of several), which `lane_id()`, `warp_id()` and those
    /// axes' `axis_index` expand into; `None`: keep them as written.
    threads: Option<(Name, Vec<Axis>)>,
}

impl Expander<'_> {
    fn block(&mut self, stmts: &[Stmt]) -> Result<Vec<Stmt>, ExpandError> {
        self.renames.push(HashMap::new());
        let mut out = Vec::with_capacity(stmts.len());
        let r = stmts.iter().try_for_each(|s| self.stmt_into(s, &mut out));
        self.renames.pop();
        r.map(|()| out)
    }

    /// Appends what `stmt` expands to: itself, or a call's inlined body.
    fn stmt_into(&mut self, stmt: &Stmt, out: &mut Vec<Stmt>) -> Result<(), ExpandError> {
        let Stmt::Call {
            dest,
            function,
            args,
        } = stmt
        else {
            out.push(self.stmt(stmt)?);
            return Ok(());
        };
        if self.rename_only {
            let args = args.iter().map(|a| self.expr(a)).collect();
            out.push(Stmt::Call {
                dest: dest.as_ref().map(|d| self.binding(d)),
                function: function.clone(),
                args,
            });
            return Ok(());
        }
        let Some(f) = self.module.function(function) else {
            return Err(ExpandError::UnknownFunction {
                kernel: self.kernel.clone(),
                function: function.clone(),
            });
        };
        if self.inlining.contains(function) {
            return Err(ExpandError::Recursive {
                kernel: self.kernel.clone(),
                function: function.clone(),
            });
        }
        let taken = &mut self.taken;
        let inlined = inline_call(f, dest.as_ref(), args, &mut |name| {
            fresh(&format!("{function}_{name}"), taken)
        });
        // The inlined statements are in the caller's block: its names
        // resolve there (arguments, `dest`) and its own names are fresh.
        self.inlining.push(function.clone());
        let r = inlined.iter().try_for_each(|s| self.stmt_into(s, out));
        self.inlining.pop();
        r
    }

    /// The name a use of `name` refers to here.
    fn resolve(&self, name: &str) -> Name {
        self.renames
            .iter()
            .rev()
            .find_map(|scope| scope.get(name))
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    /// Declares `name` in the innermost block, renaming a reused name.
    fn declare(&mut self, name: &Name) -> Name {
        let unique = if self.declared.insert(name.clone()) {
            name.clone()
        } else {
            let unique = fresh(name, &mut self.taken);
            self.originals.insert(unique.clone(), name.clone());
            unique
        };
        if let Some(scope) = self.renames.last_mut() {
            scope.insert(name.clone(), unique.clone());
        }
        unique
    }

    fn binding(&mut self, var: &Binding) -> Binding {
        Binding {
            name: self.declare(&var.name),
            ty: var.ty,
        }
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<Stmt, ExpandError> {
        Ok(match stmt {
            Stmt::Let { var, value } => {
                let value = self.expr(value);
                Stmt::Let {
                    var: self.binding(var),
                    value,
                }
            }
            Stmt::Var { var, init } => {
                let init = self.expr(init);
                Stmt::Var {
                    var: self.binding(var),
                    init,
                }
            }
            Stmt::Assign { name, value } => Stmt::Assign {
                name: self.resolve(name),
                value: self.expr(value),
            },
            Stmt::CompoundAssign { name, op, value } if self.rename_only => Stmt::CompoundAssign {
                name: self.resolve(name),
                op: *op,
                value: self.expr(value),
            },
            Stmt::CompoundStore { target, op, value } if self.rename_only => Stmt::CompoundStore {
                target: self.access(target),
                op: *op,
                value: self.expr(value),
            },
            Stmt::Return { value } if self.rename_only => Stmt::Return {
                value: value.as_ref().map(|v| self.expr(v)),
            },
            Stmt::CompoundAssign { name, op, value } => {
                let name = self.resolve(name);
                Stmt::Assign {
                    value: Expr::Binary(
                        *op,
                        Box::new(Expr::Var(name.clone())),
                        Box::new(self.expr(value)),
                    ),
                    name,
                }
            }
            Stmt::LocalArray { name, elem, shape } => Stmt::LocalArray {
                name: self.declare(name),
                elem: *elem,
                shape: shape.clone(),
            },
            Stmt::Store { target, value } => Stmt::Store {
                target: self.access(target),
                value: self.expr(value),
            },
            Stmt::CompoundStore { target, op, value } => {
                let target = self.access(target);
                Stmt::Store {
                    value: Expr::Binary(
                        *op,
                        Box::new(Expr::Load(Box::new(target.clone()))),
                        Box::new(self.expr(value)),
                    ),
                    target,
                }
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => {
                let target = self.access(target);
                let args = args.iter().map(|a| self.expr(a)).collect();
                Stmt::Atomic {
                    dest: dest.as_ref().map(|d| self.binding(d)),
                    op: *op,
                    target,
                    args,
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond: self.expr(cond),
                then_body: self.block(then_body)?,
                else_body: self.block(else_body)?,
            },
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                let (start, end) = (self.expr(start), self.expr(end));
                // The loop variable lives in the body's scope.
                self.renames.push(HashMap::new());
                let var = self.binding(var);
                let body = self.block(body);
                self.renames.pop();
                let body = body?;
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                }
            }
            Stmt::While { cond, max, body } => Stmt::While {
                cond: self.expr(cond),
                max: self.expr(max),
                body: self.block(body)?,
            },
            // `stmt_into` inlines every call (blocks go through it too); a
            // `return` may only end a helper's body, which inlining removes.
            Stmt::Call { .. } | Stmt::Return { .. } => {
                return Err(ExpandError::StrayReturn {
                    kernel: self.kernel.clone(),
                })
            }
            Stmt::Break => Stmt::Break,
            Stmt::Continue => Stmt::Continue,
            Stmt::Barrier => Stmt::Barrier,
            Stmt::Sem { op, sem, amount } => Stmt::Sem {
                op: *op,
                sem: self.access(sem),
                amount: self.expr(amount),
            },
            Stmt::SemRead { dest, sem } => {
                let sem = self.access(sem);
                Stmt::SemRead {
                    dest: self.declare(dest),
                    sem,
                }
            }
            Stmt::Warp { dest, op, args } => {
                let args = args.iter().map(|a| self.expr(a)).collect();
                Stmt::Warp {
                    dest: self.binding(dest),
                    op: *op,
                    args,
                }
            }
            Stmt::BlockCollective { dest, op, args } => {
                let args = args.iter().map(|a| self.expr(a)).collect();
                Stmt::BlockCollective {
                    dest: self.binding(dest),
                    op: *op,
                    args,
                }
            }
            Stmt::Mma { d, a, b, c } => Stmt::Mma {
                d: self.fragment(d),
                a: self.fragment(a),
                b: self.fragment(b),
                c: self.fragment(c),
            },
            Stmt::MmaLoad {
                operand,
                dest,
                source,
            } => Stmt::MmaLoad {
                operand: *operand,
                dest: self.fragment(dest),
                source: self.access(source),
            },
        })
    }

    fn access(&self, a: &RefAccess) -> RefAccess {
        let mut out = rewrite_access(a, &|n| self.variable(n), &|n| self.resolve(n));
        for e in out.block.iter_mut().flatten().chain(&mut out.index) {
            self.expand_positions(e);
        }
        out
    }

    fn fragment(&self, f: &Fragment) -> Fragment {
        let mut out = rewrite_fragment(f, &|n| self.variable(n), &|n| self.resolve(n));
        if let Some(row) = &mut out.row {
            self.expand_positions(row);
        }
        out
    }

    /// Rewrites names (renamed bindings, constants) and warp positions in `e`.
    fn expr(&self, e: &Expr) -> Expr {
        let mut out = rewrite_expr(e, &|n| self.variable(n), &|n| self.resolve(n));
        self.expand_positions(&mut out);
        out
    }

    /// Replaces `lane_id()` and `warp_id()` in `e` by their expansions
    /// ([`WarpPosition::expansion`]) on the program's linear thread axis,
    /// and `axis_index(ty)` of a thread axis of a block of several by
    /// `axis_index(threads) / stride % size` (the first axis fastest).
    fn expand_positions(&self, e: &mut Expr) {
        let Some((linear, axes)) = &self.threads else {
            return;
        };
        crate::ir::visit::walk_expr_mut(e, &mut |node| match node {
            Expr::WarpPosition(p) => *node = p.expansion(linear),
            Expr::AxisIndex(name) => {
                let mut stride = 1u32;
                for (i, axis) in axes.iter().enumerate() {
                    if axis.name == *name {
                        let u32_lit = |v: u32| Box::new(Expr::Lit(crate::ir::Literal::U32(v)));
                        let mut index = Expr::AxisIndex(linear.clone());
                        if stride > 1 {
                            index = Expr::Binary(BinaryOp::Div, Box::new(index), u32_lit(stride));
                        }
                        if i + 1 < axes.len() {
                            index =
                                Expr::Binary(BinaryOp::Rem, Box::new(index), u32_lit(axis.size));
                        }
                        *node = index;
                        return;
                    }
                    stride = stride.saturating_mul(axis.size);
                }
            }
            _ => {}
        });
    }

    /// What a use of the variable `name` becomes: its renamed binding, or
    /// the literal of the module constant it names.
    fn variable(&self, name: &Name) -> Expr {
        let resolved = self.resolve(name);
        match self.consts.get(name) {
            Some(lit) if resolved == *name => lit.clone(),
            _ => Expr::Var(resolved),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::expand::{program_kernel, source_path};
    use crate::ir::{IrPath, PathStep, Stmt};

    /// Statements after an inlined call keep their place as written; those
    /// the call became map to the call.
    #[test]
    fn source_paths_undo_the_inlining_of_helper_calls() {
        let src = "mesh m { grid [b = 1]; threads t = 32; }\n\
                   fn twice(v: u32) -> u32 {\n  let w: u32 = v * 2u;\n  return w;\n}\n\
                   kernel k(y: gmem<u32[32]>) {\n  \
                     let i: u32 = axis_index(t);\n  \
                     let a: u32 = twice(i);\n  \
                     if i > 3u {\n    let b: u32 = twice(a);\n    y[i] = b;\n  }\n  \
                     y[0u] = a;\n}\n\
                   map k { programs [m: k]; outputs [y: gmem<u32[32]>]; }\n";
        let module = crate::text::parse_file(src).unwrap().module;
        let kernel = program_kernel(&module, &module.maps[0], &module.kernels[0]).unwrap();
        // `twice(i)` became `let v`, `let w`, `let a`.
        assert_eq!(kernel.body.len(), 6);
        let path = |steps: &[PathStep]| {
            let mut all = vec![PathStep::Kernel("k".into())];
            all.extend_from_slice(steps);
            IrPath(all)
        };
        use PathStep::{Stmt as S, Then};
        let cases = [
            (vec![S(0)], vec![S(0)]),
            (vec![S(2)], vec![S(1)]),
            (vec![S(3)], vec![S(1)]),
            (vec![S(4), Then, S(1)], vec![S(2), Then, S(0)]),
            (vec![S(4), Then, S(3)], vec![S(2), Then, S(1)]),
            (vec![S(5)], vec![S(3)]),
        ];
        for (expanded, written) in cases {
            assert_eq!(
                source_path(&module, &path(&expanded)),
                Some(path(&written)),
                "{expanded:?}"
            );
        }
        assert_eq!(source_path(&module, &path(&[S(6)])), None);
        // What the statements as written are.
        assert!(
            matches!(module.stmt_at(&path(&[S(1)])), Some(Stmt::Call { function, .. }) if function == "twice")
        );
        assert!(matches!(
            module.stmt_at(&path(&[S(2), Then, S(1)])),
            Some(Stmt::Store { .. })
        ));
        assert!(module.stmt_at(&path(&[S(2), Then])).is_none());
        assert!(module.stmt_at(&path(&[S(9)])).is_none());
        assert_eq!(
            source_path(&module, &IrPath(vec![PathStep::Kernel("nope".into())])),
            None
        );
    }
}
