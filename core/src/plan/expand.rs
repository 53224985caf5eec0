//! The kernel a program runs: the IR as written, with its sugar expanded so
//! that the interpreter and every backend implement one smaller language.
//!
//! [`program_kernel`] is the one home of these rules (the interpreter and
//! the lowering both call it; backends receive its result in the plan):
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
//!   backends' symbol tables and the interpreter's registers assume).
//!
//! The input must be valid (`validate` found no error); the output is
//! valid too and has no `CompoundAssign`, `CompoundStore` or const use.

use std::collections::{HashMap, HashSet};

use crate::ir::visit::for_each_stmt;
use crate::ir::{Binding, Expr, Kernel, Module, MpmdMap, Name, Param, RefAccess, Stmt};

/// The kernel that program `kernel` of `map` runs (see the module docs).
pub fn program_kernel(module: &Module, map: &MpmdMap, kernel: &Kernel) -> Kernel {
    let mut taken = declared_names(kernel);
    taken.extend(module.consts.iter().map(|c| c.name.clone()));
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
        consts: module
            .consts
            .iter()
            .map(|c| (c.name.clone(), Expr::Lit(c.value)))
            .collect(),
        declared: kernel.params.iter().map(|p| p.name.clone()).collect(),
        taken,
        renames: vec![HashMap::new()],
    };
    Kernel {
        name: kernel.name.clone(),
        params,
        body: expander.block(&kernel.body),
    }
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
        Stmt::Let { var, .. } | Stmt::Var { var, .. } | Stmt::For { var, .. } => Some(&var.name),
        Stmt::Atomic {
            dest: Some(dest), ..
        } => Some(&dest.name),
        Stmt::LocalArray { name, .. } | Stmt::SemRead { dest: name, .. } => Some(name),
        _ => None,
    }
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

struct Expander {
    /// Module constants by name, as literals.
    consts: HashMap<Name, Expr>,
    /// Names declared so far (in any block): a second declaration is renamed.
    declared: HashSet<Name>,
    /// Every name in use, original or fresh.
    taken: HashSet<Name>,
    /// Renamed declarations, one map per block in scope (innermost last).
    renames: Vec<HashMap<Name, Name>>,
}

impl Expander {
    fn block(&mut self, stmts: &[Stmt]) -> Vec<Stmt> {
        self.renames.push(HashMap::new());
        let out = stmts.iter().map(|s| self.stmt(s)).collect();
        self.renames.pop();
        out
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
            fresh(name, &mut self.taken)
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

    fn stmt(&mut self, stmt: &Stmt) -> Stmt {
        match stmt {
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
                then_body: self.block(then_body),
                else_body: self.block(else_body),
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
                body: self.block(body),
            },
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
        }
    }

    fn access(&mut self, a: &RefAccess) -> RefAccess {
        RefAccess {
            base: self.resolve(&a.base),
            block: a
                .block
                .as_ref()
                .map(|coords| coords.iter().map(|e| self.expr(e)).collect()),
            index: a.index.iter().map(|e| self.expr(e)).collect(),
        }
    }

    /// Rewrites names (renamed bindings, constants) in `e`. An explicit
    /// stack over a clone, not recursion: operator chains nest as deep as
    /// they are long.
    fn expr(&mut self, e: &Expr) -> Expr {
        let mut out = e.clone();
        let mut stack: Vec<&mut Expr> = vec![&mut out];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Var(name) => {
                    let resolved = self.resolve(name);
                    if resolved == *name {
                        if let Some(lit) = self.consts.get(name) {
                            *e = lit.clone();
                            continue;
                        }
                    }
                    *name = resolved;
                }
                Expr::Lit(_) | Expr::AxisIndex(_) | Expr::AxisSize(_) => {}
                Expr::Load(a) => {
                    a.base = self.resolve(&a.base);
                    stack.extend(a.block.iter_mut().flatten());
                    stack.extend(a.index.iter_mut());
                }
                Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => stack.push(x),
                Expr::Binary(_, a, b) => {
                    stack.push(a);
                    stack.push(b);
                }
                Expr::Select(a, b, c) => {
                    stack.push(a);
                    stack.push(b);
                    stack.push(c);
                }
                Expr::Math(_, args) => stack.extend(args.iter_mut()),
            }
        }
        out
    }
}
