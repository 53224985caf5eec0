//! Checks of block and warp uniformity and of collectives inside kernel
//! bodies: warp and block collectives, fragments, `mma_m16n8k16`,
//! `mma_load_a/b`, uniform control and semaphore operands.

use super::{AccessKind, BlockScope, Walker};
use crate::ir::{
    mma, Binding, BlockOp, Expr, Fragment, IrPath, MemorySpace, RefAccess, RefType, ScalarType,
    WarpOp, WARP_SIZE,
};
use crate::text::print_expr;
use crate::validate::ref_text;

impl Walker<'_, '_> {
    /// Why `e` may differ between the threads of a block, if it may (only
    /// known in a program's context).
    pub(super) fn nonuniform_reason(&self, e: &Expr) -> Option<String> {
        self.uniformity.as_ref()?.reason(e)
    }

    /// Records `exprs` (conditions or bounds guarding what follows) as the
    /// outermost non-uniform control, at each level (block, warp) where one
    /// of them is not uniform and nothing outer already is.
    pub(super) fn enter_control(&mut self, exprs: &[&Expr], what: impl Fn(&Expr) -> String) {
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
    pub(super) fn check_warp(
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
    pub(super) fn check_block_collective(
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
    pub(super) fn check_collective_result(
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
    pub(super) fn check_fragment(
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
    pub(super) fn require_fragment_type(
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
    pub(super) fn check_mma(
        &mut self,
        operands: [&Fragment; 4],
        path: &IrPath,
        scope: &BlockScope,
    ) {
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
    pub(super) fn check_mma_load(
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
    pub(super) fn require_whole_warps(&mut self, name: &str, path: &IrPath) {
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
    pub(super) fn require_warp_uniform_control(&mut self, op: &str, path: &IrPath) {
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
    pub(super) fn require_uniform_control(&mut self, op: &str, path: &IrPath) {
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
    pub(super) fn require_uniform_operand(
        &mut self,
        op: &str,
        what: &str,
        e: &Expr,
        path: &IrPath,
    ) {
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
}
