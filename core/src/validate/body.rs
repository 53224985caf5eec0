//! Checks of kernel bodies: names, types, ref accesses and block uniformity.

use std::collections::{HashMap, HashSet};

use super::items::{count_text, instance_bytes};
use super::uniformity::{Level, Uniformity};
use super::{ref_text, Sink};
use crate::ir::fold::{const_value, Leaves};
use crate::ir::limits::{wide_product, MAX_LOCAL_BYTES};
use crate::ir::{
    mma, type_of, AtomicOp, BinaryOp, Binding, BlockOp, Expr, Fragment, IrPath, Kernel, Literal,
    MemorySpace, Mesh, Module, MpmdMap, OperandKind, PathStep, RefAccess, RefType, ScalarType,
    Scope, SemOp, Stmt, Type, TypeError, WarpOp, WARP_SIZE,
};
use crate::text::print_expr;

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
        let (unique, originals) = crate::plan::with_unique_names(module, kernel);
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
        recursive: crate::plan::recursive_functions(module),
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

    // ---- uniformity -----------------------------------------------------

    /// Why `e` may differ between the threads of a block, if it may (only
    /// known in a program's context).
    fn nonuniform_reason(&self, e: &Expr) -> Option<String> {
        self.uniformity.as_ref()?.reason(e)
    }

    /// Records `exprs` (conditions or bounds guarding what follows) as the
    /// outermost non-uniform control, at each level (block, warp) where one
    /// of them is not uniform and nothing outer already is.
    fn enter_control(&mut self, exprs: &[&Expr], what: impl Fn(&Expr) -> String) {
        if self.control.block.is_none() {
            let culprit = exprs
                .iter()
                .find_map(|e| Some((*e, self.nonuniform_reason(e)?)));
            self.control.block = culprit.map(|(e, reason)| (what(e), reason));
        }
        if self.control.warp.is_none() {
            let culprit = exprs
                .iter()
                .find_map(|e| Some((*e, self.warp_uniformity.as_ref()?.reason(e)?)));
            self.control.warp = culprit.map(|(e, reason)| (what(e), reason));
        }
    }

    /// The rules of one warp collective: operands, result type, the program's
    /// whole warps (E0069) and warp-uniform control (E0068).
    fn check_warp(
        &mut self,
        dest: &Binding,
        op: WarpOp,
        args: &[Expr],
        path: &IrPath,
        scope: &BlockScope,
    ) {
        let found: Vec<_> = args
            .iter()
            .map(|a| self.check_expr(a, path, scope))
            .collect();
        let kernel = self.kernel.name.clone();
        let name = op.name();
        if args.len() != op.arity() {
            let wanted = if op.is_shuffle() {
                "a value and a `u32` lane (or delta, or mask)"
            } else {
                "one value"
            };
            self.sink.report(
                "E0067",
                path.clone(),
                format!(
                    "`{name}` takes {} argument(s), found {} (kernel `{kernel}`)",
                    op.arity(),
                    args.len()
                ),
                format!("give `{name}` {wanted}"),
            );
        }
        if let Some(Some(lane)) = found.get(1).filter(|_| op.is_shuffle()) {
            if *lane != ScalarType::U32 {
                self.sink.report(
                    "E0067",
                    path.clone(),
                    format!(
                        "the lane operand `{}` of `{name}` in kernel `{kernel}` has type `{lane}`; lanes are `u32`",
                        print_expr(&args[1])
                    ),
                    "cast it: `u32(...)`",
                );
            }
        }
        if let Some(Some(value)) = found.first() {
            let accepts = match op {
                WarpOp::VoteAny | WarpOp::VoteAll | WarpOp::Ballot => "a `bool`",
                _ => "an `i32`, `u32` or `f32` value",
            };
            let result = op.result_type(*value);
            self.check_collective_result(dest, name, accepts, &args[0], *value, result, path);
        }
        self.require_whole_warps(name, path);
        self.require_warp_uniform_control(name, path);
    }

    /// The rules of one block collective: operands (E0075), result type
    /// (E0037, E0038) and block-uniform control (E0053).
    fn check_block_collective(
        &mut self,
        dest: &Binding,
        op: BlockOp,
        args: &[Expr],
        path: &IrPath,
        scope: &BlockScope,
    ) {
        let found: Vec<_> = args
            .iter()
            .map(|a| self.check_expr(a, path, scope))
            .collect();
        let kernel = self.kernel.name.clone();
        let name = op.name();
        let accepts = match op {
            BlockOp::Broadcast => "an `i32`, `u32`, `f32` or `bool` value",
            _ => "a `bool`",
        };
        if args.len() != op.arity() {
            let wanted = match op {
                BlockOp::Broadcast => "a value and the `u32` index of the thread it comes from",
                _ => "one `bool`",
            };
            self.sink.report(
                "E0075",
                path.clone(),
                format!(
                    "`{name}` takes {} argument(s), found {} (kernel `{kernel}`)",
                    op.arity(),
                    args.len()
                ),
                format!("give `{name}` {wanted}"),
            );
        }
        if let (BlockOp::Broadcast, Some(source)) = (op, args.get(1)) {
            if let Some(Some(ty)) = found.get(1).filter(|t| **t != Some(ScalarType::U32)) {
                self.sink.report(
                    "E0075",
                    path.clone(),
                    format!(
                        "the source thread `{}` of `{name}` in kernel `{kernel}` has type `{ty}`; thread indices are `u32`",
                        print_expr(source)
                    ),
                    "cast it: `u32(...)`",
                );
            } else if let Some(reason) = self.nonuniform_reason(source) {
                self.sink.report(
                    "E0075",
                    path.clone(),
                    format!(
                        "the source thread `{}` of `{name}` in kernel `{kernel}` is not block-uniform ({reason})",
                        print_expr(source)
                    ),
                    "name one thread for the whole block: a literal such as `0u`, or a value computed from literals, scalar parameters, grid axis indices, axis sizes, semaphore reads and block collectives",
                );
            }
        }
        if let Some(Some(value)) = found.first() {
            let result = op.result_type(*value);
            self.check_collective_result(dest, name, accepts, &args[0], *value, result, path);
        }
        self.require_uniform_control(name, path);
    }

    /// A warp or block collective's value and result types: `value` (the
    /// type of `arg`, its first operand) must be one the collective takes
    /// (E0037: `result` is None otherwise) and `result` the declared type of
    /// `dest` (E0038).
    #[allow(clippy::too_many_arguments)]
    fn check_collective_result(
        &mut self,
        dest: &Binding,
        name: &str,
        accepts: &str,
        arg: &Expr,
        value: ScalarType,
        result: Option<ScalarType>,
        path: &IrPath,
    ) {
        let kernel = &self.kernel.name;
        match result {
            None => self.sink.report(
                "E0037",
                path.clone(),
                format!(
                    "`{name}` in kernel `{kernel}` takes {accepts}, but `{}` is `{value}`",
                    print_expr(arg)
                ),
                format!("give `{name}` {accepts}"),
            ),
            Some(result) if result != dest.ty => self.sink.report(
                "E0038",
                path.clone(),
                format!(
                    "the result `{}` of `{name}` in kernel `{kernel}` is declared `{}`, but `{name}` of a `{value}` gives `{result}`",
                    dest.name, dest.ty
                ),
                format!("declare `let {}: {result} = {name}(...);`", dest.name),
            ),
            Some(_) => {}
        }
    }

    /// A fragment operand `role` of `op`: a `local` array (E0070), whole
    /// or one row of a 2-D one by a `u32` row index (E0071, E0047 for a
    /// constant row past the end). Returns the fragment's own type, `local
    /// elem[len]` (a row's: the array's element type and last extent), and
    /// how to name it in a message, when the operand has the right form.
    fn check_fragment(
        &mut self,
        op: &str,
        role: &str,
        fragment: &Fragment,
        path: &IrPath,
        scope: &BlockScope,
    ) -> Option<(RefType, String)> {
        let kernel = self.kernel_name().to_string();
        let array = &fragment.array;
        let row_type = fragment
            .row
            .as_ref()
            .map(|row| (row, self.check_expr(row, path, scope)));
        let written = match &fragment.row {
            None => format!("`{array}`"),
            Some(row) => format!("`{array}[{}]`", print_expr(row)),
        };
        let r = match scope.types.ref_type(array) {
            Some(r) if r.space == MemorySpace::Local => r.clone(),
            Some(r) => {
                self.sink.report(
                    "E0070",
                    path.clone(),
                    format!(
                        "the operand `{role}` of `{op}` in kernel `{kernel}` is {written}, of a `{}`; the fragments of an mma are `local` arrays of each thread, or rows of them",
                        ref_text(r)
                    ),
                    format!("load the fragment into a `local` array first (`local {role}: ...;`) and name it (or a row of it: `{role}[i]`)"),
                );
                return None;
            }
            None if scope.types.scalar(array).is_some() => {
                self.sink.report(
                    "E0070",
                    path.clone(),
                    format!(
                        "the operand `{role}` of `{op}` in kernel `{kernel}` is {written}, of a scalar; the fragments of an mma are `local` arrays of each thread, or rows of them"
                    ),
                    "name a `local` array, or a row of a 2-D one",
                );
                return None;
            }
            None => {
                self.unknown_name(array, path);
                return None;
            }
        };
        let Some((row, found)) = row_type else {
            return Some((r.clone(), format!("`{array}: {}`", ref_text(&r))));
        };
        if let Some(t) = found.filter(|t| *t != ScalarType::U32) {
            self.sink.report(
                "E0071",
                path.clone(),
                format!(
                    "the row `{}` of the operand `{role}` of `{op}` in kernel `{kernel}` has type `{t}`; a fragment's row index is `u32`",
                    print_expr(row)
                ),
                "convert it: `u32(...)`",
            );
        }
        let [rows, len] = r.shape[..] else {
            self.sink.report(
                "E0071",
                path.clone(),
                format!(
                    "the operand `{role}` of `{op}` in kernel `{kernel}` is {written}, a row of `{array}: {}`, which is not a 2-D array",
                    ref_text(&r)
                ),
                format!("declare `{array}` as `local {}[rows, length]`, one fragment a row, or name the whole array", r.elem),
            );
            return None;
        };
        if let Some((v, shown)) = self.constant_index(row) {
            if v < 0 || v >= i64::from(rows) {
                self.sink.report(
                    "E0047",
                    path.clone(),
                    format!(
                        "row {shown} of `{array}` (the operand `{role}` of `{op}`) is out of bounds: `{array}` has {rows} rows (kernel `{kernel}`)"
                    ),
                    format!("use a row in 0..{rows}"),
                );
            }
        }
        let fragment_type = RefType {
            shape: vec![len],
            ..r.clone()
        };
        Some((
            fragment_type,
            format!("{written}, a row of `{array}: {}`", ref_text(&r)),
        ))
    }

    /// Reports fragment `role` of `op` (`written`: how to name it, with
    /// its type; `found`: the fragment's own type) unless it is `local` of
    /// one of `elems` with `len` elements: E0071.
    #[allow(clippy::too_many_arguments)]
    fn require_fragment_type(
        &mut self,
        op: &str,
        role: &str,
        written: &str,
        found: &RefType,
        elems: &[ScalarType],
        len: u32,
        why: &str,
        path: &IrPath,
    ) -> bool {
        if elems.contains(&found.elem) && found.shape == [len] {
            return true;
        }
        let kernel = self.kernel_name().to_string();
        let types: Vec<String> = elems
            .iter()
            .map(|t| format!("`local {t}[{len}]`"))
            .collect();
        let wanted = format!("{}{why}", types.join(" or "));
        self.sink.report(
            "E0071",
            path.clone(),
            format!(
                "the operand `{role}` of `{op}` in kernel `{kernel}` is {written}, but `{role}` is {wanted} (or a row of a 2-D `local` array of that type whose last extent is {len})"
            ),
            "declare the array with the fragment's type and length (docs/text-format.md, \"Matrix multiply-accumulate\")",
        );
        false
    }

    /// The rules of `mma_m16n8k16(d, a, b, c)`: each operand a `local` array
    /// of the thread or a row of one (E0070) of its fragment's type and
    /// shape (E0071), the program's whole warps (E0069) and warp-uniform
    /// control (E0068).
    fn check_mma(&mut self, operands: [&Fragment; 4], path: &IrPath, scope: &BlockScope) {
        let name = mma::NAME;
        let mut found: [Option<(RefType, String)>; 4] = Default::default();
        for (slot, (role, operand)) in ["d", "a", "b", "c"].into_iter().zip(operands).enumerate() {
            found[slot] = self.check_fragment(name, role, operand, path, scope);
        }
        let [d, a, b, c] = found;
        let input = a
            .as_ref()
            .map(|(a, _)| a.elem)
            .filter(|t| mma::INPUT_TYPES.contains(t));
        if let Some((a_type, written)) = &a {
            self.require_fragment_type(
                name,
                "a",
                written,
                a_type,
                &mma::INPUT_TYPES,
                mma::A_LEN,
                "",
                path,
            );
        }
        if let Some((b_type, written)) = &b {
            let (elems, why) = match input {
                Some(t) => (vec![t], " (the element type of `a`)"),
                None => (mma::INPUT_TYPES.to_vec(), ""),
            };
            self.require_fragment_type(name, "b", written, b_type, &elems, mma::B_LEN, why, path);
        }
        for (role, operand) in [("d", &d), ("c", &c)] {
            if let Some((found, written)) = operand {
                self.require_fragment_type(
                    name,
                    role,
                    written,
                    found,
                    &[ScalarType::F32],
                    mma::C_LEN,
                    "",
                    path,
                );
            }
        }
        self.require_whole_warps(name, path);
        self.require_warp_uniform_control(name, path);
    }

    /// The rules of `mma_load_a(fa, src[.., r0, k0])` and `mma_load_b`: the
    /// destination a fragment of the operand (E0070, E0071), the source a
    /// gmem or smem ref of at least two dimensions, of the fragment's type,
    /// whose last two extents hold the block (E0072), origin indices the
    /// same in every lane (E0073), a constant origin whose block fits
    /// (E0047), and the rules of every warp collective (E0068, E0069).
    fn check_mma_load(
        &mut self,
        operand: mma::Operand,
        dest: &Fragment,
        source: &RefAccess,
        path: &IrPath,
        scope: &BlockScope,
    ) {
        let kernel = self.kernel_name().to_string();
        let name = operand.load_name();
        let role = operand.role();
        let len = operand.fragment_len();
        let fragment = self.check_fragment(name, role, dest, path, scope);
        let elem = match &fragment {
            Some((found, written)) => self
                .require_fragment_type(name, role, written, found, &mma::INPUT_TYPES, len, "", path)
                .then_some(found.elem),
            None => None,
        };
        let r = self.check_access(source, AccessKind::MmaLoad(operand), path, scope);
        let (block_rows, block_cols) = operand.block_shape();
        let base = &source.base;
        if let Some(r) = r.filter(|r| r.space != MemorySpace::Sem) {
            let wanted_elem = match elem {
                Some(t) => format!("`{t}` (the fragment's type)"),
                None => "`f16` or `bf16`".to_string(),
            };
            let elem_ok = match elem {
                Some(t) => r.elem == t,
                None => mma::INPUT_TYPES.contains(&r.elem),
            };
            let dims = r.shape.len();
            let problem = if !matches!(r.space, MemorySpace::Gmem | MemorySpace::Smem) {
                Some(format!(
                    "a `{}`; fragments load from gmem or smem",
                    r.space.keyword()
                ))
            } else if !elem_ok {
                Some(format!("of `{}`, not {wanted_elem}", r.elem))
            } else if dims < 2 {
                Some(format!("{dims}-dimensional; the block's rows are its second-to-last dimension and its columns its last"))
            } else if r.shape[dims - 2] < block_rows || r.shape[dims - 1] < block_cols {
                Some(format!(
                    "{} x {} in its last two dimensions, smaller than the {block_rows} x {block_cols} block",
                    r.shape[dims - 2],
                    r.shape[dims - 1]
                ))
            } else {
                None
            };
            match problem {
                Some(problem) => self.sink.report(
                    "E0072",
                    path.clone(),
                    format!(
                        "the source `{base}: {}` of `{name}` in kernel `{kernel}` is {problem}",
                        ref_text(&r)
                    ),
                    format!("load from a gmem or smem ref of {wanted_elem} with at least {block_rows} rows and {block_cols} columns in its last two dimensions"),
                ),
                None if source.index.len() == dims => {
                    for (which, dim, extent) in [("row", dims - 2, block_rows), ("column", dims - 1, block_cols)] {
                        if let Some((v, shown)) = self.constant_index(&source.index[dim]) {
                            let end = v + i64::from(extent);
                            if v >= 0 && end > i64::from(r.shape[dim]) {
                                self.sink.report(
                                    "E0047",
                                    path.clone(),
                                    format!(
                                        "the block of `{name}` at {which} {shown} of `{base}` reaches {which} {}, out of bounds for dimension {dim} (extent {}) in kernel `{kernel}`",
                                        end - 1,
                                        r.shape[dim]
                                    ),
                                    format!("use a {which} origin in 0..={}", r.shape[dim] - extent),
                                );
                            }
                        }
                    }
                }
                None => {}
            }
        }
        let origins = source.index.iter().map(|e| ("index", e)).chain(
            source
                .block
                .iter()
                .flatten()
                .map(|e| ("block coordinate", e)),
        );
        for (what, e) in origins {
            let Some(reason) = self.warp_uniformity.as_ref().and_then(|u| u.reason(e)) else {
                continue;
            };
            self.sink.report(
                "E0073",
                path.clone(),
                format!(
                    "the {what} `{}` of the source of `{name}` in kernel `{kernel}` is not warp-uniform ({reason}); every lane names the same block",
                    print_expr(e)
                ),
                "compute the origin from warp-uniform values (block-uniform values, `axis_index(t) / 32u`, loop variables of warp-uniform loops); each lane's part of the block is the statement's",
            );
        }
        self.require_whole_warps(name, path);
        self.require_warp_uniform_control(name, path);
    }

    /// E0069: a warp collective in a program whose blocks are not whole warps.
    fn require_whole_warps(&mut self, name: &str, path: &IrPath) {
        let kernel = self.kernel_name().to_string();
        if let Some(ctx) = self.ctx {
            let threads = ctx.mesh.threads.size;
            if threads % WARP_SIZE != 0 {
                self.sink.report(
                    "E0069",
                    path.clone(),
                    format!(
                        "`{name}` in kernel `{kernel}` runs on mesh `{}`, whose {threads} threads per block are not whole warps of {WARP_SIZE}",
                        ctx.mesh.name
                    ),
                    format!(
                        "give mesh `{}` a multiple of {WARP_SIZE} threads (for example {}) and skip the extra threads' work with `if`",
                        ctx.mesh.name,
                        // The next multiple, or the one below where that
                        // passes a u32 (a size E0010 refuses anyway).
                        threads
                            .div_ceil(WARP_SIZE)
                            .checked_mul(WARP_SIZE)
                            .unwrap_or(threads / WARP_SIZE * WARP_SIZE)
                    ),
                );
            }
        }
    }

    /// Reports a warp collective under control flow that is not warp-uniform.
    fn require_warp_uniform_control(&mut self, op: &str, path: &IrPath) {
        if let Some((what, reason)) = &self.control.warp {
            let message = format!(
                "`{op}` in kernel `{}` is under {what}, which is not warp-uniform ({reason})",
                self.kernel_name()
            );
            self.sink.report(
                "E0068",
                path.clone(),
                message,
                format!("move `{op}` out of that branch or loop, or make the condition the same in every lane of a warp (block-uniform values, or `axis_index` of the thread axis divided by a multiple of 32)"),
            );
        }
    }

    /// Reports a block-collective operation under non-uniform control flow.
    fn require_uniform_control(&mut self, op: &str, path: &IrPath) {
        if let Some((what, reason)) = &self.control.block {
            let message = format!(
                "{op} in kernel `{}` is under {what}, which is not block-uniform ({reason})",
                self.kernel_name()
            );
            self.sink.report(
                "E0053",
                path.clone(),
                message,
                format!("move `{op}` out of that branch or loop, or make the condition depend only on literals, scalar parameters, grid/cluster axis indices, axis sizes, semaphore reads and block collectives: a per-thread value (a load, an atomic's result) becomes block-uniform as one thread's `let v: u32 = block_broadcast(x, 0u);` or as a vote (`block_any(p)`, `block_all(p)`, `block_count(p)`)"),
            );
        }
    }

    /// Reports a non-uniform semaphore index, coordinate or amount.
    fn require_uniform_operand(&mut self, op: &str, what: &str, e: &Expr, path: &IrPath) {
        if let Some(reason) = self.nonuniform_reason(e) {
            let message = format!(
                "the {what} `{}` of `{op}` in kernel `{}` is not block-uniform ({reason})",
                print_expr(e),
                self.kernel_name()
            );
            self.sink.report(
                "E0054",
                path.clone(),
                message,
                "compute it only from literals, scalar parameters, grid/cluster axis indices, axis sizes, semaphore reads and block collectives' results",
            );
        }
    }

    // ---- expressions ----------------------------------------------------

    /// Checks `e` and returns its type when it has one.
    fn check_expr(&mut self, e: &Expr, path: &IrPath, scope: &BlockScope) -> Option<ScalarType> {
        self.visit_leaves(e, path, scope);
        match type_of(e, &scope.types) {
            Ok(t) => Some(t),
            Err(err) => {
                self.type_error(err, e, path);
                None
            }
        }
    }

    fn type_error(&mut self, err: TypeError, e: &Expr, path: &IrPath) {
        match err {
            TypeError::UnknownName(name) => self.unknown_name(&name, path),
            TypeError::BadOperand {
                op: "select",
                found,
                ..
            } => self.sink.report(
                "E0039",
                path.clone(),
                format!(
                    "the condition of `select` in `{}` has type `{found}`, not bool",
                    print_expr(e)
                ),
                "compare the value to get a bool, for example `c != 0u`",
            ),
            other => {
                let fix = match &other {
                    TypeError::Mismatch { lhs, rhs, .. } if lhs.is_float() && rhs.is_float() => {
                        let (narrow, wide) = if lhs.is_16bit() {
                            (lhs, rhs)
                        } else {
                            (rhs, lhs)
                        };
                        format!("there is no implicit widening: write `{wide}(x)` around the `{narrow}` operand to compute in `{wide}`, or `{narrow}(x)` around the other to round it to `{narrow}`")
                    }
                    TypeError::BadBitcast { .. } => {
                        "convert the value with a cast such as `f32(x)` first, then bitcast"
                            .to_string()
                    }
                    _ => "convert operands with casts such as `f32(i)` so that the types agree"
                        .to_string(),
                };
                self.sink.report(
                    "E0037",
                    path.clone(),
                    format!(
                        "{other}, in `{}` in kernel `{}`",
                        print_expr(e),
                        self.kernel_name()
                    ),
                    fix,
                )
            }
        }
    }

    fn unknown_name(&mut self, name: &str, path: &IrPath) {
        let message = format!("unknown name `{name}` in kernel `{}`", self.kernel_name());
        self.sink.report(
            "E0036",
            path.clone(),
            message,
            format!("declare `{name}` before this statement (in this block or an enclosing one), or add an operand of that name"),
        );
    }

    /// Checks the loads and axis uses inside `e` (not their types).
    fn visit_leaves(&mut self, e: &Expr, path: &IrPath, scope: &BlockScope) {
        match e {
            Expr::Lit(_) | Expr::Var(_) | Expr::WarpPosition(_) => {}
            Expr::Load(access) => {
                self.check_access(access, AccessKind::Load, path, scope);
            }
            Expr::AxisIndex(axis) => {
                if let Some(ctx) = self.ctx {
                    if ctx.mesh.axis(axis).is_none() {
                        let axes: Vec<&str> = ctx.mesh.axes().map(|a| a.name.as_str()).collect();
                        let message = format!(
                            "`axis_index({axis})` in kernel `{}`: the program runs on mesh `{}`, which has no axis `{axis}` (its axes: {})",
                            self.kernel_name(),
                            ctx.mesh.name,
                            axes.join(", ")
                        );
                        self.sink.report(
                            "E0034",
                            path.clone(),
                            message,
                            "use an axis of the program's own mesh; other meshes' blocks are reached through `@[coords]`",
                        );
                    }
                }
            }
            Expr::AxisSize(axis) => {
                if let Some(ctx) = self.ctx {
                    if !ctx.scope_meshes.iter().any(|m| m.axis(axis).is_some()) {
                        let meshes: Vec<&str> =
                            ctx.scope_meshes.iter().map(|m| m.name.as_str()).collect();
                        let message = format!(
                            "`axis_size({axis})` in kernel `{}`: no mesh of map `{}` ({}) has an axis `{axis}`",
                            self.kernel_name(),
                            ctx.map.name,
                            meshes.join(", ")
                        );
                        self.sink.report(
                            "E0035",
                            path.clone(),
                            message,
                            "name an axis of a program mesh or of the owner mesh of an operand",
                        );
                    }
                }
            }
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => {
                self.visit_leaves(x, path, scope)
            }
            Expr::Binary(_, a, b) => {
                self.visit_leaves(a, path, scope);
                self.visit_leaves(b, path, scope);
            }
            Expr::Select(c, t, f) => {
                for x in [c, t, f] {
                    self.visit_leaves(x, path, scope);
                }
            }
            Expr::Math(_, args) => {
                for x in args {
                    self.visit_leaves(x, path, scope);
                }
            }
        }
    }

    /// Checks an integer-typed index or coordinate.
    fn check_index(&mut self, e: &Expr, what: &str, base: &str, path: &IrPath, scope: &BlockScope) {
        if let Some(t) = self.check_expr(e, path, scope) {
            if !t.is_integer() {
                self.sink.report(
                    "E0040",
                    path.clone(),
                    format!(
                        "the {what} `{}` of `{base}` has type `{t}`; indices are i32 or u32",
                        print_expr(e)
                    ),
                    "convert it, for example `u32(x)`",
                );
            }
        }
    }

    /// Checks a use of a ref; returns its type when the base is a known ref.
    fn check_access(
        &mut self,
        a: &RefAccess,
        access: AccessKind,
        path: &IrPath,
        scope: &BlockScope,
    ) -> Option<RefType> {
        let kernel = self.kernel_name().to_string();
        let op = access.describe();
        let Some(r) = scope.types.ref_type(&a.base).cloned() else {
            // A load's base is reported by `type_of` on the enclosing expression.
            if access != AccessKind::Load {
                if scope.types.scalar(&a.base).is_some() {
                    self.sink.report(
                        "E0037",
                        path.clone(),
                        format!(
                            "{}, in kernel `{kernel}`",
                            TypeError::NotARef(a.base.clone())
                        ),
                        "index a ref operand or a local array",
                    );
                } else {
                    self.unknown_name(&a.base, path);
                }
            }
            for e in a.block.iter().flatten().chain(&a.index) {
                self.check_expr(e, path, scope);
            }
            return None;
        };
        let base = &a.base;
        match access {
            AccessKind::Load | AccessKind::Store | AccessKind::Atomic(_) | AccessKind::MmaLoad(_)
                if r.space == MemorySpace::Sem =>
            {
                self.sink.report(
                    "E0048",
                    path.clone(),
                    format!(
                        "{op} on the semaphore `{base}` (`{}`) in kernel `{kernel}`",
                        ref_text(&r)
                    ),
                    "use signal, wait, wait_nodec and read on semaphores; keep data in a gmem ref",
                )
            }
            AccessKind::Sem(_) | AccessKind::SemRead if r.space != MemorySpace::Sem => self.sink.report(
                "E0049",
                path.clone(),
                format!(
                    "`{op}` on `{base}` in kernel `{kernel}`, which is a `{}`, not a semaphore",
                    ref_text(&r)
                ),
                "declare a `sem<[n]>` scratch operand for the synchronisation",
            ),
            AccessKind::Atomic(_) if r.space == MemorySpace::Local => self.sink.report(
                "E0050",
                path.clone(),
                format!("`{op}` on the local array `{base}` in kernel `{kernel}`"),
                "local arrays belong to one thread: use a plain load and store",
            ),
            AccessKind::Atomic(atomic) if !atomic.applies_to(r.elem) && r.space != MemorySpace::Sem => {
                self.sink.report(
                    "E0050",
                    path.clone(),
                    format!(
                        "`{op}` on `{base}` in kernel `{kernel}`, whose elements are `{}`",
                        r.elem
                    ),
                    if r.elem == ScalarType::F32 {
                        "f32 refs take atomic_load, atomic_store, atomic_add, atomic_min, atomic_max and atomic_exchange; for bitwise atomics or compare-exchange keep the bits in a u32 ref (bitcast)"
                    } else {
                        "use an i32, u32 or f32 ref for atomics (16-bit floats and bools have none; widen to f32)"
                    },
                )
            }
            _ => {}
        }
        let rank_ok = a.index.len() == r.shape.len();
        if !rank_ok {
            self.sink.report(
                "E0046",
                path.clone(),
                format!(
                    "`{base}` has {} dimension(s) (`{}`) but is indexed with {} index(es) in kernel `{kernel}`",
                    r.shape.len(),
                    ref_text(&r),
                    a.index.len()
                ),
                "give one index per dimension",
            );
        }
        for (dim, e) in a.index.iter().enumerate() {
            self.check_index(e, "index", base, path, scope);
            if let (true, Some((v, shown))) = (rank_ok, self.constant_index(e)) {
                if v < 0 || v >= r.shape[dim] as i64 {
                    self.sink.report(
                        "E0047",
                        path.clone(),
                        format!(
                            "index {shown} is out of bounds for dimension {dim} of `{base}` (extent {}) in kernel `{kernel}`",
                            r.shape[dim]
                        ),
                        format!("use an index in 0..{}", r.shape[dim]),
                    );
                }
            }
        }
        if let Some(coords) = &a.block {
            for e in coords {
                self.check_index(e, "block coordinate", base, path, scope);
            }
            match (&r.owner, r.space) {
                (None, _) => self.sink.report(
                    "E0032",
                    path.clone(),
                    format!("`{base}@[...]` in kernel `{kernel}`: `{base}` (`{}`) has no owner mesh", ref_text(&r)),
                    "declare the ref as `T @ mesh` to have one instance per block, or drop `@[...]`",
                ),
                (Some(_), MemorySpace::Smem | MemorySpace::Local) => self.sink.report(
                    "E0032",
                    path.clone(),
                    format!("`{base}@[...]` in kernel `{kernel}`: `{base}` is smem, which only its own block can touch"),
                    "drop `@[...]`, or move the data to a gmem ref owned by the mesh",
                ),
                (Some(owner), _) => {
                    if let Some(mesh) = self.module.mesh(owner) {
                        let axes: Vec<_> = mesh.block_axes().collect();
                        if coords.len() != axes.len() {
                            let names: Vec<&str> = axes.iter().map(|x| x.name.as_str()).collect();
                            self.sink.report(
                                "E0033",
                                path.clone(),
                                format!(
                                    "`{base}` is owned by mesh `{owner}`, which has {} grid and cluster axes ({}), but `{base}@[...]` in kernel `{kernel}` gives {} coordinate(s)",
                                    axes.len(),
                                    names.join(", "),
                                    coords.len()
                                ),
                                format!("give one coordinate per grid and cluster axis of `{owner}`, in order"),
                            );
                        } else {
                            for (e, axis) in coords.iter().zip(&axes) {
                                if let Some((v, shown)) = self.constant_index(e) {
                                    if v < 0 || v >= axis.size as i64 {
                                        self.sink.report(
                                            "E0047",
                                            path.clone(),
                                            format!(
                                                "block coordinate {shown} of `{base}` is out of bounds for axis `{}` of mesh `{owner}` (size {}) in kernel `{kernel}`",
                                                axis.name, axis.size
                                            ),
                                            format!("use a coordinate in 0..{}", axis.size),
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(ctx) = self.ctx {
            let program_mesh = ctx.mesh.name.as_str();
            let operand = ctx.map.operand(base);
            let is_operand = scope.kinds.get(base.as_str()) == Some(&NameKind::RefParam);
            if let (Some(owner), None, true) = (&r.owner, &a.block, r.space.is_device_resident()) {
                if owner != program_mesh {
                    self.sink.report(
                        "E0031",
                        path.clone(),
                        format!(
                            "`{base}` is owned by mesh `{owner}`, but kernel `{kernel}` runs on mesh `{program_mesh}` and uses `{base}` without `@[...]`"
                        ),
                        format!("name the block of `{owner}` whose instance you mean: `{base}@[coords][...]`"),
                    );
                }
            }
            if let (MemorySpace::Smem, Some(owner), true) = (r.space, &r.owner, is_operand) {
                if owner != program_mesh && ctx.program_meshes.contains(&owner.as_str()) {
                    self.sink.report(
                        "E0029",
                        path.clone(),
                        format!("kernel `{kernel}` runs on mesh `{program_mesh}` and touches `{base}`, which is smem of mesh `{owner}`"),
                        "hand data between programs through gmem and semaphores",
                    );
                }
            }
            if let (true, Some((OperandKind::Input, operand)), true) =
                (access.writes(), operand, is_operand)
            {
                if !operand.resident {
                    self.sink.report(
                        "E0052",
                        path.clone(),
                        format!("`{op}` writes the input `{base}` in kernel `{kernel}`"),
                        format!("write an output instead (alias `{base} -> <output>` to update it in place), or make `{base}` a resident"),
                    );
                }
            }
        }
        Some(r)
    }

    /// Why a loop bound is not built from literals, scalar parameters and
    /// axis sizes, if it is not.
    fn bound_violation(&self, e: &Expr, scope: &BlockScope) -> Option<String> {
        match e {
            Expr::Lit(_) | Expr::AxisSize(_) => None,
            Expr::Var(name) => match scope.kinds.get(name.as_str()) {
                // Unknown names and refs used as values are type errors, reported once.
                Some(
                    NameKind::ScalarParam
                    | NameKind::RefParam
                    | NameKind::LocalArray
                    | NameKind::Const,
                )
                | None => None,
                // A mutable value may change while the loop runs.
                Some(kind @ (NameKind::Var | NameKind::AtomicResult)) => {
                    Some(format!("`{name}`, {}", kind.describe()))
                }
                Some(kind) => self
                    .uniformity
                    .as_ref()
                    .is_some_and(|u| u.is_nonuniform_name(name))
                    .then(|| format!("`{name}`, {} that is not block-uniform", kind.describe())),
            },
            Expr::AxisIndex(axis) => {
                let thread_axis = self.ctx.map(|c| c.mesh.threads.name.as_str());
                (thread_axis == Some(axis.as_str()))
                    .then(|| format!("`axis_index({axis})`, the thread axis"))
            }
            Expr::WarpPosition(p) => {
                Some(format!("`{}()`, which differs between threads", p.name()))
            }
            Expr::Load(access) => Some(format!("a load from `{}`", access.base)),
            Expr::Unary(_, x) | Expr::Cast(_, x) | Expr::Bitcast(_, x) => {
                self.bound_violation(x, scope)
            }
            Expr::Binary(_, a, b) => self
                .bound_violation(a, scope)
                .or_else(|| self.bound_violation(b, scope)),
            Expr::Select(c, t, f) => [c, t, f]
                .into_iter()
                .find_map(|x| self.bound_violation(x, scope)),
            Expr::Math(_, args) => args.iter().find_map(|x| self.bound_violation(x, scope)),
        }
    }

    fn check_declared_type(
        &mut self,
        what: &str,
        declared: ScalarType,
        found: Option<ScalarType>,
        value: &Expr,
        path: &IrPath,
    ) {
        if let Some(found) = found {
            if found != declared {
                let message = format!(
                    "{what} in kernel `{}` is declared `{declared}` but given a `{found}` value: `{}`",
                    self.kernel_name(),
                    print_expr(value)
                );
                self.sink.report(
                    "E0038",
                    path.clone(),
                    message,
                    format!("declare it as `{found}`, or convert the value with `{declared}(...)`"),
                );
            }
        }
    }

    fn check_element_value(
        &mut self,
        what: &str,
        base: &str,
        elem: ScalarType,
        found: Option<ScalarType>,
        value: &Expr,
        path: &IrPath,
    ) {
        if let Some(found) = found {
            if found != elem {
                let message = format!(
                    "{what} `{}` has type `{found}`, but `{base}` holds `{elem}` (kernel `{}`)",
                    print_expr(value),
                    self.kernel_name()
                );
                self.sink.report(
                    "E0041",
                    path.clone(),
                    message,
                    format!("convert the value with `{elem}(...)`"),
                );
            }
        }
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
    Some(crate::plan::inline_call(f, dest, args, &mut |name| {
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
