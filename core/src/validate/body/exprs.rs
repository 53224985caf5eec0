//! Checks of expressions inside kernel bodies: types, loads, indices, ref
//! accesses, loop bounds, declared types.

use super::{AccessKind, BlockScope, NameKind, Walker};
use crate::ir::{
    type_of, Expr, IrPath, MemorySpace, OperandKind, RefAccess, RefType, ScalarType, TypeError,
};
use crate::text::print_expr;
use crate::validate::ref_text;

impl Walker<'_, '_> {
    /// Checks `e` and returns its type when it has one.
    pub(super) fn check_expr(
        &mut self,
        e: &Expr,
        path: &IrPath,
        scope: &BlockScope,
    ) -> Option<ScalarType> {
        self.visit_leaves(e, path, scope);
        match type_of(e, &scope.types) {
            Ok(t) => Some(t),
            Err(err) => {
                self.type_error(err, e, path);
                None
            }
        }
    }

    pub(super) fn type_error(&mut self, err: TypeError, e: &Expr, path: &IrPath) {
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

    pub(super) fn unknown_name(&mut self, name: &str, path: &IrPath) {
        let message = format!("unknown name `{name}` in kernel `{}`", self.kernel_name());
        self.sink.report(
            "E0036",
            path.clone(),
            message,
            format!("declare `{name}` before this statement (in this block or an enclosing one), or add an operand of that name"),
        );
    }

    /// Checks the loads and axis uses inside `e` (not their types).
    pub(super) fn visit_leaves(&mut self, e: &Expr, path: &IrPath, scope: &BlockScope) {
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
    pub(super) fn check_index(
        &mut self,
        e: &Expr,
        what: &str,
        base: &str,
        path: &IrPath,
        scope: &BlockScope,
    ) {
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
    pub(super) fn check_access(
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
        if access.writes() && scope.kinds.get(base.as_str()) == Some(&NameKind::Table) {
            self.sink.report(
                "E0077",
                path.clone(),
                format!("`{op}` writes the constant table `{base}` in kernel `{kernel}`"),
                "a constant table is read-only: copy it into a `local` array to change values",
            );
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
    pub(super) fn bound_violation(&self, e: &Expr, scope: &BlockScope) -> Option<String> {
        match e {
            Expr::Lit(_) | Expr::AxisSize(_) => None,
            Expr::Var(name) => match scope.kinds.get(name.as_str()) {
                // Unknown names and refs used as values are type errors, reported once.
                Some(
                    NameKind::ScalarParam
                    | NameKind::RefParam
                    | NameKind::LocalArray
                    | NameKind::Const
                    | NameKind::Table,
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
                let thread_axis = self.ctx.is_some_and(|c| {
                    c.mesh.threads.name == *axis || c.mesh.thread_axis_stride(axis).is_some()
                });
                thread_axis.then(|| format!("`axis_index({axis})`, the thread axis"))
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

    pub(super) fn check_declared_type(
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

    pub(super) fn check_element_value(
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
}
