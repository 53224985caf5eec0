//! Checks of kernel bodies: names, types, ref accesses and block uniformity.

use std::collections::{HashMap, HashSet};

use super::items::{count_text, instance_bytes};
use super::uniformity::{Level, Uniformity};
use super::{ref_text, Sink};
use crate::ir::fold::{const_value, Leaves};
use crate::ir::limits::{wide_product, MAX_LOCAL_BYTES};
use crate::ir::{
    mma, AtomicOp, BinaryOp, Binding, Expr, IrPath, Kernel, Literal, MemorySpace, Mesh, Module,
    MpmdMap, PathStep, RefAccess, RefType, ScalarType, Scope, SemOp, Stmt, Type,
};
use crate::text::print_expr;

mod collectives;
mod exprs;

/// The program a kernel body is checked for.
pub(super) struct ProgramCtx<'a> {
    pub map: &'a MpmdMap,
    /// The mesh the program runs on.
    pub mesh: &'a Mesh,
    /// Meshes that run a program of the map.
    pub program_meshes: Vec<&'a str>,
    /// Program meshes and owner meshes: where `axis_size` looks.
    pub scope_meshes: Vec<&'a Mesh>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameKind {
    ScalarParam,
    RefParam,
    Let,
    Var,
    LoopVar,
    LocalArray,
    AtomicResult,
    SemRead,
    WarpResult,
    BlockResult,
    Const,
    Table,
}

impl NameKind {
    fn describe(self) -> &'static str {
        match self {
            NameKind::ScalarParam => "a scalar parameter",
            NameKind::RefParam => "a ref parameter",
            NameKind::Let => "a `let` binding",
            NameKind::Var => "a `var`",
            NameKind::LoopVar => "a loop variable",
            NameKind::LocalArray => "a local array",
            NameKind::AtomicResult => "an atomic's result",
            NameKind::SemRead => "a semaphore read",
            NameKind::WarpResult => "a warp collective's result",
            NameKind::BlockResult => "a block collective's result",
            NameKind::Const => "a module constant",
            NameKind::Table => "a constant table",
        }
    }
}

/// Names visible in one block of statements.
#[derive(Clone, Default)]
struct BlockScope {
    types: Scope,
    kinds: HashMap<String, NameKind>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum AccessKind {
    Load,
    Store,
    Atomic(AtomicOp),
    Sem(SemOp),
    SemRead,
    /// The source of a fragment load.
    MmaLoad(mma::Operand),
}

impl AccessKind {
    fn describe(self) -> &'static str {
        match self {
            AccessKind::Load => "load",
            AccessKind::Store => "store",
            AccessKind::Atomic(op) => op.name(),
            AccessKind::Sem(op) => op.name(),
            AccessKind::SemRead => "read",
            AccessKind::MmaLoad(operand) => operand.load_name(),
        }
    }

    fn writes(self) -> bool {
        match self {
            AccessKind::Load | AccessKind::SemRead | AccessKind::MmaLoad(_) => false,
            AccessKind::Atomic(op) => op != AtomicOp::Load,
            AccessKind::Store | AccessKind::Sem(SemOp::Signal | SemOp::Wait) => true,
            AccessKind::Sem(SemOp::WaitNodec) => false,
        }
    }
}

/// The outermost enclosing condition that is not uniform, at each level:
/// (what it is, why its value differs).
#[derive(Clone, Default)]
struct Control {
    block: Option<(String, String)>,
    warp: Option<(String, String)>,
}

struct Walker<'a, 's> {
    module: &'a Module,
    kernel: &'a Kernel,
    ctx: Option<&'a ProgramCtx<'a>>,
    sink: &'s mut Sink,
    /// Every name declared so far in the kernel, in any block.
    declared: HashSet<String>,
    /// Names declared more than once (in sibling blocks): flow-insensitive
    /// facts keyed by name (constant values) do not hold for them.
    reused: HashSet<String>,
    /// How many loops enclose the statement being checked.
    loop_depth: usize,
    /// Blocks around the statement being checked (kernel body: 1).
    block_depth: usize,
    /// Helper calls met so far in this pass (each inlined copy's names are
    /// made unique with it; every pass meets the calls in the same order).
    calls_seen: u32,
    /// Helper calls being walked, innermost last.
    inlining: Vec<String>,
    /// Helpers that take part in a call cycle (E0065): never inlined.
    recursive: HashSet<String>,
    /// Which values may differ between the threads of a block (in a
    /// program's context).
    uniformity: Option<Uniformity>,
    /// Which values may differ between the lanes of a warp.
    warp_uniformity: Option<Uniformity>,
    /// The outermost enclosing non-uniform conditions.
    control: Control,
    /// Values of the `let`s bound to compile-time constants (names are
    /// unique per kernel, so one map serves every block).
    constants: HashMap<String, Literal>,
}

/// Checks `kernel`'s body; with a program context also the rules that
/// depend on the program (axes, ownership, smem, writes, uniformity).
/// `own_params`: report duplicate parameter names here (for kernels no map
/// runs; otherwise the map's operand checks report them).
pub(super) fn check_kernel(
    module: &Module,
    kernel: &Kernel,
    ctx: Option<&ProgramCtx>,
    own_params: bool,
    sink: &mut Sink,
) {
    // Uniformity facts are keyed by name: in a program's context, check the
    // kernel with names reused by sibling blocks made unique (same
    // statements, same paths), then name them as written in the findings.
    if ctx.is_some() {
        let (unique, originals) = crate::expand::with_unique_names(module, kernel);
        if !originals.is_empty() {
            let mut inner = Sink { diags: Vec::new() };
            check_kernel_as_written(module, &unique, ctx, own_params, &mut inner);
            for mut d in inner.diags {
                d.message = with_original_names(&d.message, &originals);
                d.help = with_original_names(&d.help, &originals);
                sink.diags.push(d);
            }
            return;
        }
    }
    check_kernel_as_written(module, kernel, ctx, own_params, sink);
}

/// `text` with every identifier that is a key of `originals` replaced by its value.
fn with_original_names(text: &str, originals: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(originals.get(word.as_str()).unwrap_or(word));
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

fn check_kernel_as_written(
    module: &Module,
    kernel: &Kernel,
    ctx: Option<&ProgramCtx>,
    own_params: bool,
    sink: &mut Sink,
) {
    let mut walker = Walker {
        module,
        kernel,
        ctx,
        sink,
        declared: HashSet::new(),
        reused: HashSet::new(),
        loop_depth: 0,
        block_depth: 0,
        calls_seen: 0,
        inlining: vec![],
        recursive: crate::expand::recursive_functions(module),
        uniformity: None,
        warp_uniformity: None,
        control: Control::default(),
        constants: HashMap::new(),
    };
    let kernel_path = IrPath::root().child(PathStep::Kernel(kernel.name.clone()));
    let mut scope = BlockScope::default();
    for constant in &module.consts {
        walker.declared.insert(constant.name.clone());
        walker
            .constants
            .insert(constant.name.clone(), constant.value);
        scope.kinds.insert(constant.name.clone(), NameKind::Const);
        scope.types.bind_scalar(&constant.name, constant.value.ty());
    }
    for table in &module.tables {
        walker.declared.insert(table.name.clone());
        scope.kinds.insert(table.name.clone(), NameKind::Table);
        scope.types.bind_ref(&table.name, table.ref_type());
    }
    for param in &kernel.params {
        let path = kernel_path.child(PathStep::Param(param.name.clone()));
        let kind = match &param.ty {
            Type::Scalar(_) => NameKind::ScalarParam,
            Type::Ref(_) => NameKind::RefParam,
        };
        if own_params {
            walker.declare(&param.name, kind, &path, &mut scope);
        } else {
            walker.declared.insert(param.name.clone());
            scope.kinds.insert(param.name.clone(), kind);
        }
        match &param.ty {
            Type::Scalar(t) => scope.types.bind_scalar(&param.name, *t),
            Type::Ref(r) => scope.types.bind_ref(&param.name, r.clone()),
        }
    }
    if let Some(ctx) = ctx {
        let recursive = &walker.recursive;
        let analyse = |level| {
            Uniformity::analyse(
                &kernel.body,
                &ctx.mesh.threads.name,
                &ctx.mesh.thread_axes,
                level,
                &mut |function, dest, args, ordinal| {
                    inline_at_call_site(module, recursive, function, dest, args, ordinal)
                },
            )
        };
        let (block, warp) = (analyse(Level::Block), analyse(Level::Warp));
        walker.uniformity = Some(block);
        walker.warp_uniformity = Some(warp);
    }
    walker.calls_seen = 0;
    walker.walk_block(&kernel.body, &kernel_path, scope);
}

impl Walker<'_, '_> {
    fn kernel_name(&self) -> &str {
        &self.kernel.name
    }

    /// The value of `e` if it is a compile-time constant: literals, and
    /// in a program's context also `axis_size` and constant `let`s.
    fn const_value(&self, e: &Expr) -> Option<Literal> {
        let name = |n: &str| self.constants.get(n).copied();
        let axis_size = |axis: &str| {
            let ctx = self.ctx?;
            let mut axes = ctx.scope_meshes.iter().flat_map(|m| m.axes());
            axes.find(|a| a.name == axis).map(|a| a.size)
        };
        match e {
            Expr::Lit(lit) => Some(*lit),
            _ if self.ctx.is_none() => None,
            _ => const_value(
                e,
                &Leaves {
                    name: &name,
                    axis_size: &axis_size,
                    // Thread and block indices differ between threads or blocks.
                    axis_index: &|_| None,
                },
            ),
        }
    }

    /// An index or coordinate that is a compile-time integer constant, and
    /// how to name it in a message: `5`, or `` `axis_size(t)` (= 64) ``.
    fn constant_index(&self, e: &Expr) -> Option<(i64, String)> {
        let v = match self.const_value(e)? {
            Literal::I32(v) => i64::from(v),
            Literal::U32(v) => i64::from(v),
            _ => return None,
        };
        let shown = match e {
            Expr::Lit(_) => v.to_string(),
            _ => format!("`{}` (= {v})", print_expr(e)),
        };
        Some((v, shown))
    }

    /// Declares `name` in `scope`. Shadowing a name visible here is E0043;
    /// a name that went out of scope (a sibling block's) may be reused.
    fn declare(&mut self, name: &str, kind: NameKind, path: &IrPath, scope: &mut BlockScope) {
        if let Some(earlier) = scope.kinds.get(name) {
            let message = format!(
                "`{name}` is declared twice in kernel `{}`; it is already {} in scope here",
                self.kernel_name(),
                earlier.describe()
            );
            self.sink.report(
                "E0043",
                path.clone(),
                message,
                format!("rename one of the two `{name}`s; names are never shadowed"),
            );
        }
        if !self.declared.insert(name.to_string()) {
            self.reused.insert(name.to_string());
            self.constants.remove(name);
        }
        scope.kinds.insert(name.to_string(), kind);
    }

    // ---- statements -----------------------------------------------------

    fn walk_block(&mut self, stmts: &[Stmt], block_path: &IrPath, mut scope: BlockScope) {
        self.block_depth += 1;
        for (index, stmt) in stmts.iter().enumerate() {
            let path = block_path.child(PathStep::Stmt(index));
            self.walk_stmt(stmt, &path, &mut scope);
        }
        self.block_depth -= 1;
    }

    /// The statements a helper call stands for, its names unique to this
    /// call (`f#2::t`), or `None` when it cannot be inlined (an unknown or
    /// recursive helper, or a wrong number of arguments, reported by
    /// [`Self::check_call`]). Counts the call either way, so that every
    /// pass names the copies alike.
    fn inline(
        &mut self,
        function: &str,
        dest: Option<&Binding>,
        args: &[Expr],
    ) -> Option<Vec<Stmt>> {
        self.calls_seen += 1;
        inline_at_call_site(
            self.module,
            &self.recursive,
            function,
            dest,
            args,
            self.calls_seen,
        )
    }

    /// The checks of a call itself (the helper exists, the arguments fit its
    /// parameters, a result to bind); then its inlined body is checked here,
    /// in this program's context, every finding pointing at the call.
    fn check_call(
        &mut self,
        dest: Option<&Binding>,
        function: &str,
        args: &[Expr],
        path: &IrPath,
        scope: &mut BlockScope,
    ) {
        let inlined = self.inline(function, dest, args);
        let owner = self.kernel.name.clone();
        let report = |sink: &mut Sink, message: String, help: String| {
            sink.report("E0064", path.clone(), message, help);
        };
        let Some(f) = self.module.function(function) else {
            let known: Vec<String> = self
                .module
                .functions
                .iter()
                .map(|f| format!("`{}`", f.name))
                .collect();
            report(
                self.sink,
                format!("kernel `{owner}` calls `{function}`, which is not a helper function of the module"),
                if known.is_empty() {
                    format!("declare `fn {function}(...) {{ ... }}`")
                } else {
                    format!("declare `fn {function}(...) {{ ... }}` or call one of {}", known.join(", "))
                },
            );
            if let Some(d) = dest {
                self.declare(&d.name, NameKind::Let, path, scope);
                scope.types.bind_scalar(&d.name, d.ty);
            }
            return;
        };
        let mut fits = true;
        if f.params.len() != args.len() {
            fits = false;
            report(
                self.sink,
                format!(
                    "`{function}` takes {} argument(s), but kernel `{owner}` gives {}",
                    f.params.len(),
                    args.len()
                ),
                format!("pass one argument per parameter of `{function}`"),
            );
        }
        for (k, (param, arg)) in f.params.iter().zip(args).enumerate() {
            let Type::Ref(expected) = &param.ty else {
                let found = self.check_expr(arg, path, scope);
                if let (Type::Scalar(want), Some(found)) = (&param.ty, found) {
                    if *want != found {
                        fits = false;
                        report(
                            self.sink,
                            format!(
                                "argument {k} of `{function}` (parameter `{}: {want}`) in kernel `{owner}` is `{}`, of type `{found}`",
                                param.name,
                                print_expr(arg)
                            ),
                            format!("pass a `{want}` value, or convert it with `{want}(...)`"),
                        );
                    }
                }
                continue;
            };
            let found = match arg {
                Expr::Var(name) => scope.types.ref_type(name),
                _ => None,
            };
            if !found.is_some_and(|found| ref_fits_param(found, expected)) {
                fits = false;
                report(
                    self.sink,
                    format!(
                        "argument {k} of `{function}` (parameter `{}`) in kernel `{owner}` is `{}`, but the parameter is a `{}` ref",
                        param.name,
                        print_expr(arg),
                        ref_text(expected)
                    ),
                    format!("pass the name of a `{}` ref", ref_text(expected)),
                );
            }
        }
        match (dest, f.result) {
            (Some(d), None) => {
                fits = false;
                report(
                    self.sink,
                    format!("`{function}` returns nothing, but kernel `{owner}` binds its result to `{}`", d.name),
                    format!("call it as a statement: `{function}(...);`"),
                );
            }
            (Some(d), Some(result)) if d.ty != result => {
                fits = false;
                self.sink.report(
                    "E0038",
                    path.clone(),
                    format!("`let {}` in kernel `{owner}` is declared `{}` but `{function}` returns `{result}`", d.name, d.ty),
                    format!("declare it as `{result}`"),
                );
            }
            _ => {}
        }
        let depth = self.block_depth + crate::text::body_nesting(&f.body);
        if fits && depth > crate::ir::limits::MAX_NESTING {
            fits = false;
            self.sink.report(
                "E0057",
                path.clone(),
                format!("kernel `{owner}` nests {depth} levels deep once `{function}` is inlined here; at most {} are allowed", crate::ir::limits::MAX_NESTING),
                "move inner blocks of the helper or of the caller into separate statements",
            );
        }
        match inlined.filter(|_| fits) {
            Some(stmts) => {
                let before = self.sink.count();
                self.inlining.push(function.to_string());
                for stmt in &stmts {
                    self.walk_stmt(stmt, path, scope);
                }
                self.inlining.pop();
                for d in &mut self.sink.diags[before..] {
                    if !d.message.ends_with("inlined at this call)") {
                        d.message
                            .push_str(&format!(" (in helper `{function}`, inlined at this call)"));
                    }
                }
            }
            None => {
                if let Some(d) = dest {
                    self.declare(&d.name, NameKind::Let, path, scope);
                    scope.types.bind_scalar(&d.name, d.ty);
                }
            }
        }
    }

    fn walk_stmt(&mut self, stmt: &Stmt, path: &IrPath, scope: &mut BlockScope) {
        match stmt {
            Stmt::Let { var, value } => {
                let found = self.check_expr(value, path, scope);
                self.check_declared_type(
                    &format!("`let {}`", var.name),
                    var.ty,
                    found,
                    value,
                    path,
                );
                self.declare(&var.name, NameKind::Let, path, scope);
                if let Some(v) = self.const_value(value).filter(|v| v.ty() == var.ty) {
                    if !self.reused.contains(&var.name) {
                        self.constants.insert(var.name.clone(), v);
                    }
                }
                scope.types.bind_scalar(&var.name, var.ty);
            }
            Stmt::Var { var, init } => {
                let found = self.check_expr(init, path, scope);
                self.check_declared_type(&format!("`var {}`", var.name), var.ty, found, init, path);
                self.declare(&var.name, NameKind::Var, path, scope);
                scope.types.bind_scalar(&var.name, var.ty);
            }
            Stmt::Assign { name, value } => {
                let found = self.check_expr(value, path, scope);
                match scope.kinds.get(name.as_str()).copied() {
                    None => self.unknown_name(name, path),
                    Some(NameKind::Var) => {
                        if let Some(declared) = scope.types.scalar(name) {
                            self.check_declared_type(
                                &format!("assignment to `{name}`"),
                                declared,
                                found,
                                value,
                                path,
                            );
                        }
                    }
                    Some(kind) => self.sink.report(
                        "E0042",
                        path.clone(),
                        format!(
                            "`{name}` is {} in kernel `{}`, not a `var`; it cannot be assigned",
                            kind.describe(),
                            self.kernel.name
                        ),
                        format!("declare `{name}` with `var` to make it mutable"),
                    ),
                }
            }
            Stmt::CompoundAssign { name, op, value } => {
                self.check_compound_op(*op, path);
                let expanded = Expr::Binary(
                    *op,
                    Box::new(Expr::Var(name.clone())),
                    Box::new(value.clone()),
                );
                self.walk_stmt(
                    &Stmt::Assign {
                        name: name.clone(),
                        value: expanded,
                    },
                    path,
                    scope,
                );
            }
            Stmt::CompoundStore { target, op, value } => {
                self.check_compound_op(*op, path);
                self.check_access(target, AccessKind::Load, path, scope);
                let expanded = Expr::Binary(
                    *op,
                    Box::new(Expr::Load(Box::new(target.clone()))),
                    Box::new(value.clone()),
                );
                self.walk_stmt(
                    &Stmt::Store {
                        target: target.clone(),
                        value: expanded,
                    },
                    path,
                    scope,
                );
            }
            Stmt::While { cond, max, body } => {
                if let Some(t) = self.check_expr(cond, path, scope) {
                    if t != ScalarType::Bool {
                        self.sink.report(
                            "E0039",
                            path.clone(),
                            format!("the condition `{}` of `while` in kernel `{}` has type `{t}`, not bool", print_expr(cond), self.kernel.name),
                            "compare the value to get a bool, for example `c != 0u`",
                        );
                    }
                }
                if let Some(t) = self.check_expr(max, path, scope) {
                    if t != ScalarType::U32 {
                        self.sink.report(
                            "E0062",
                            path.clone(),
                            format!("the maximum `{}` of a `while` in kernel `{}` has type `{t}`, not u32", print_expr(max), self.kernel.name),
                            "write the maximum trip count as a u32, for example `1024u`",
                        );
                    }
                }
                let mut max_legal = true;
                if let Some(culprit) = self.bound_violation(max, scope) {
                    max_legal = false;
                    self.sink.report(
                        "E0045",
                        path.clone(),
                        format!(
                            "the maximum `{}` of a `while` in kernel `{}` uses {culprit}",
                            print_expr(max),
                            self.kernel.name
                        ),
                        "bound the loop by a literal, a constant, a scalar parameter, an axis size or a `let` of those",
                    );
                }
                let saved = self.control.clone();
                if max_legal {
                    self.enter_control(&[cond], |c| {
                        format!("the `while` condition `{}`", print_expr(c))
                    });
                }
                self.enter_loop_body(body, path, scope.clone(), saved);
            }
            Stmt::Call {
                dest,
                function,
                args,
            } => self.check_call(dest.as_ref(), function, args, path, scope),
            // Inlining removes the `return` that ends a helper; any other is
            // reported with the helper (E0066).
            Stmt::Return { .. } if !self.inlining.is_empty() => {}
            Stmt::Return { .. } => self.sink.report(
                "E0066",
                path.clone(),
                format!(
                    "`return` in kernel `{}`; only a helper function returns",
                    self.kernel.name
                ),
                "remove the `return`; a kernel ends at the end of its body",
            ),
            Stmt::Break | Stmt::Continue => {
                if self.loop_depth == 0 {
                    let word = if matches!(stmt, Stmt::Break) {
                        "break"
                    } else {
                        "continue"
                    };
                    self.sink.report(
                        "E0061",
                        path.clone(),
                        format!(
                            "`{word}` in kernel `{}` is not inside a `for` or `while`",
                            self.kernel.name
                        ),
                        format!("remove the `{word}`, or put it in the body of a loop"),
                    );
                }
            }
            Stmt::LocalArray { name, elem, shape } => {
                let r = RefType {
                    space: MemorySpace::Local,
                    elem: *elem,
                    shape: shape.clone(),
                    owner: None,
                };
                if shape.is_empty() || shape.contains(&0) {
                    self.sink.report(
                        "E0026",
                        path.clone(),
                        format!("local array `{name}` in kernel `{}` has type `{}`, which has no elements", self.kernel.name, ref_text(&r)),
                        "give the array at least one dimension, each of extent at least 1",
                    );
                }
                let bytes = instance_bytes(&r);
                if bytes.is_none_or(|b| b > u128::from(MAX_LOCAL_BYTES)) {
                    let elements = wide_product(shape.iter().map(|&d| u64::from(d)));
                    self.sink.report(
                        "E0059",
                        path.clone(),
                        format!(
                            "local array `{name}` in kernel `{}` has type `{}`: {} elements, {} bytes per thread; a local array holds at most {MAX_LOCAL_BYTES} bytes (512 KiB)",
                            self.kernel.name,
                            ref_text(&r),
                            count_text(elements),
                            count_text(bytes)
                        ),
                        "keep large per-thread data in a gmem scratch operand indexed by the thread",
                    );
                }
                self.declare(name, NameKind::LocalArray, path, scope);
                scope.types.bind_ref(name, r);
            }
            Stmt::Store { target, value } => {
                let r = self.check_access(target, AccessKind::Store, path, scope);
                let found = self.check_expr(value, path, scope);
                if let Some(r) = r.filter(|r| r.space != MemorySpace::Sem) {
                    self.check_element_value(
                        "the stored value",
                        &target.base,
                        r.elem,
                        found,
                        value,
                        path,
                    );
                }
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => {
                let r = self.check_access(target, AccessKind::Atomic(*op), path, scope);
                let found: Vec<_> = args
                    .iter()
                    .map(|a| self.check_expr(a, path, scope))
                    .collect();
                if args.len() != op.arity() {
                    self.sink.report(
                        "E0051",
                        path.clone(),
                        format!(
                            "`{}` takes {} operand(s) after the target, found {} (kernel `{}`)",
                            op.name(),
                            op.arity(),
                            args.len(),
                            self.kernel.name
                        ),
                        "give the atomic its operands: none for atomic_load, two (expected, new) for atomic_compare_exchange, one otherwise",
                    );
                }
                if let (AtomicOp::Store, Some(dest)) = (op, dest) {
                    self.sink.report(
                        "E0051",
                        path.clone(),
                        format!("`atomic_store` returns nothing, but its result is bound to `{}` (kernel `{}`)", dest.name, self.kernel.name),
                        "drop the `let`, or use atomic_exchange to get the old value",
                    );
                }
                let usable = r.filter(|r| {
                    op.applies_to(r.elem)
                        && matches!(r.space, MemorySpace::Gmem | MemorySpace::Smem)
                });
                if let Some(r) = &usable {
                    for (arg, t) in args.iter().zip(found) {
                        self.check_element_value(
                            &format!("the `{}` operand", op.name()),
                            &target.base,
                            r.elem,
                            t,
                            arg,
                            path,
                        );
                    }
                }
                if let Some(dest) = dest {
                    if let (Some(r), true) = (&usable, *op != AtomicOp::Store) {
                        if dest.ty != r.elem {
                            self.sink.report(
                                "E0038",
                                path.clone(),
                                format!(
                                    "the result `{}` of `{}` in kernel `{}` is declared `{}`, but `{}` holds `{}`",
                                    dest.name,
                                    op.name(),
                                    self.kernel.name,
                                    dest.ty,
                                    target.base,
                                    r.elem
                                ),
                                format!("declare it as `{}`", r.elem),
                            );
                        }
                    }
                    self.declare(&dest.name, NameKind::AtomicResult, path, scope);
                    scope.types.bind_scalar(&dest.name, dest.ty);
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                if let Some(t) = self.check_expr(cond, path, scope) {
                    if t != ScalarType::Bool {
                        self.sink.report(
                            "E0039",
                            path.clone(),
                            format!("the condition `{}` of `if` in kernel `{}` has type `{t}`, not bool", print_expr(cond), self.kernel.name),
                            "compare the value to get a bool, for example `c != 0u`",
                        );
                    }
                }
                let saved = self.control.clone();
                self.enter_control(&[cond], |c| format!("the condition `{}`", print_expr(c)));
                self.walk_block(then_body, &path.child(PathStep::Then), scope.clone());
                self.walk_block(else_body, &path.child(PathStep::Else), scope.clone());
                self.control = saved;
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                if !var.ty.is_integer() {
                    self.sink.report(
                        "E0044",
                        path.clone(),
                        format!("loop variable `{}` in kernel `{}` has type `{}`; loops count in i32 or u32", var.name, self.kernel.name, var.ty),
                        format!("declare `for {}: u32 in ...` (or i32)", var.name),
                    );
                }
                let mut bounds_legal = true;
                for (which, bound) in [("start", start), ("end", end)] {
                    let found = self.check_expr(bound, path, scope);
                    if let (Some(found), true) = (found, var.ty.is_integer()) {
                        if found != var.ty {
                            self.sink.report(
                                "E0044",
                                path.clone(),
                                format!(
                                    "the {which} bound `{}` of loop `{}` in kernel `{}` has type `{found}`, but the loop variable is `{}`",
                                    print_expr(bound),
                                    var.name,
                                    self.kernel.name,
                                    var.ty
                                ),
                                format!("write the bound as a `{}` value", var.ty),
                            );
                        }
                    }
                    if let Some(culprit) = self.bound_violation(bound, scope) {
                        bounds_legal = false;
                        self.sink.report(
                            "E0045",
                            path.clone(),
                            format!(
                                "the {which} bound `{}` of loop `{}` in kernel `{}` uses {culprit}",
                                print_expr(bound),
                                var.name,
                                self.kernel.name
                            ),
                            "bound the loop by a literal, a scalar parameter or axis_size, and skip iterations with `if` inside",
                        );
                    }
                }
                let saved = self.control.clone();
                if bounds_legal {
                    self.enter_control(&[start, end], |b| {
                        format!("the loop bound `{}`", print_expr(b))
                    });
                }
                let mut inner = scope.clone();
                self.declare(&var.name, NameKind::LoopVar, path, &mut inner);
                // The loop variable is visible only in the body.
                inner.types.bind_scalar(&var.name, var.ty);
                self.enter_loop_body(body, path, inner, saved);
            }
            Stmt::Barrier => self.require_uniform_control("barrier", path),
            Stmt::Sem { op, sem, amount } => {
                self.require_uniform_control(op.name(), path);
                let r = self.check_access(sem, AccessKind::Sem(*op), path, scope);
                let found = self.check_expr(amount, path, scope);
                if let Some(found) = found.filter(|t| *t != ScalarType::I32) {
                    self.sink.report(
                        "E0041",
                        path.clone(),
                        format!(
                            "the amount `{}` of `{}` has type `{found}`, but semaphores count in `i32` (kernel `{}`)",
                            print_expr(amount),
                            op.name(),
                            self.kernel.name
                        ),
                        "write the amount as an i32, for example `1`",
                    );
                }
                if let Expr::Lit(Literal::I32(n)) = amount {
                    if *n < 1 {
                        self.sink.report(
                            "E0055",
                            path.clone(),
                            format!("`{}` on `{}` in kernel `{}` has amount {n}; amounts are at least 1", op.name(), sem.base, self.kernel.name),
                            "use an amount of 1 or more, or drop the operation",
                        );
                    }
                }
                if r.is_some_and(|r| r.space == MemorySpace::Sem) {
                    self.require_uniform_sem_operands(op.name(), sem, path);
                    self.require_uniform_operand(op.name(), "amount", amount, path);
                }
            }
            Stmt::Mma { d, a, b, c } => self.check_mma([d, a, b, c], path, scope),
            Stmt::MmaLoad {
                operand,
                dest,
                source,
            } => self.check_mma_load(*operand, dest, source, path, scope),
            Stmt::Warp { dest, op, args } => {
                self.check_warp(dest, *op, args, path, scope);
                self.declare(&dest.name, NameKind::WarpResult, path, scope);
                scope.types.bind_scalar(&dest.name, dest.ty);
            }
            Stmt::BlockCollective { dest, op, args } => {
                self.check_block_collective(dest, *op, args, path, scope);
                self.declare(&dest.name, NameKind::BlockResult, path, scope);
                scope.types.bind_scalar(&dest.name, dest.ty);
            }
            Stmt::SemRead { dest, sem } => {
                self.require_uniform_control("read", path);
                let r = self.check_access(sem, AccessKind::SemRead, path, scope);
                if r.is_some_and(|r| r.space == MemorySpace::Sem) {
                    self.require_uniform_sem_operands("read", sem, path);
                }
                self.declare(dest, NameKind::SemRead, path, scope);
                scope.types.bind_scalar(dest, ScalarType::I32);
            }
        }
    }

    /// Walks a loop body: one loop deeper, and under non-uniform control
    /// when only some threads may leave it early (a `break` or `continue`
    /// under a non-uniform condition); restores `saved` control after.
    fn enter_loop_body(&mut self, body: &[Stmt], path: &IrPath, scope: BlockScope, saved: Control) {
        let early = |(cond, reason): (String, String)| {
            (
                format!(
                    "a loop that some threads leave early (`break` or `continue` under `{cond}`)"
                ),
                reason,
            )
        };
        if self.control.block.is_none() {
            self.control.block = self
                .uniformity
                .as_ref()
                .and_then(|u| u.divergent_exit(body))
                .map(early);
        }
        if self.control.warp.is_none() {
            self.control.warp = self
                .warp_uniformity
                .as_ref()
                .and_then(|u| u.divergent_exit(body))
                .map(early);
        }
        self.loop_depth += 1;
        self.walk_block(body, &path.child(PathStep::Body), scope);
        self.loop_depth -= 1;
        self.control = saved;
    }

    fn check_compound_op(&mut self, op: BinaryOp, path: &IrPath) {
        if !BinaryOp::COMPOUND.contains(&op) {
            self.sink.report(
                "E0063",
                path.clone(),
                format!(
                    "`{}=` is not a compound assignment (kernel `{}`)",
                    crate::ir::binary_symbol(op),
                    self.kernel.name
                ),
                "use one of `+= -= *= /= %= &= |= ^= <<= >>=`, or write the assignment out",
            );
        }
    }

    fn require_uniform_sem_operands(&mut self, op: &str, sem: &RefAccess, path: &IrPath) {
        for e in &sem.index {
            self.require_uniform_operand(op, "index", e, path);
        }
        for e in sem.block.iter().flatten() {
            self.require_uniform_operand(op, "block coordinate", e, path);
        }
    }
}

/// The inlined statements of a call of `function` at the `ordinal`-th call
/// site met in a walk of a kernel, its names prefixed `function#ordinal::`
/// (so every copy has its own); `None` for an unknown or recursive helper or
/// a wrong argument count, which the call's own checks report.
fn inline_at_call_site(
    module: &Module,
    recursive: &HashSet<String>,
    function: &str,
    dest: Option<&Binding>,
    args: &[Expr],
    ordinal: u32,
) -> Option<Vec<Stmt>> {
    let f = module.function(function)?;
    if recursive.contains(function) || f.params.len() != args.len() {
        return None;
    }
    Some(crate::expand::inline_call(f, dest, args, &mut |name| {
        format!("{function}#{ordinal}::{name}")
    }))
}

/// Whether a ref of type `found` may be passed for a helper parameter of
/// type `expected`: the same type, or an smem parameter without an owner
/// given an owned smem ref of the same element type and shape. A kernel only
/// reaches its own block's smem, so the owner says nothing inside a helper,
/// and one helper serves the programs of every mesh.
fn ref_fits_param(found: &RefType, expected: &RefType) -> bool {
    found == expected
        || (expected.space == MemorySpace::Smem
            && expected.owner.is_none()
            && found.space == MemorySpace::Smem
            && found.elem == expected.elem
            && found.shape == expected.shape)
}
