//! The canonical printer (docs/text-format.md).

use std::fmt::Write;

use super::lexer::CANONICAL_NAN;
use crate::case::{CaseSpec, CompareMode, Expectation, Generator};
use crate::ir::*;

/// Binding strength of a binary operator, loosest first (docs/text-format.md).
pub(crate) fn binary_level(op: BinaryOp) -> u8 {
    use BinaryOp::*;
    match op {
        LogicOr => 1,
        LogicAnd => 2,
        Eq | Ne | Lt | Le | Gt | Ge => 3,
        BitOr => 4,
        BitXor => 5,
        BitAnd => 6,
        Shl | Shr => 7,
        Add | Sub => 8,
        Mul | Div | Rem => 9,
    }
}

/// Unary operators bind tighter than every binary operator.
pub(crate) const UNARY_LEVEL: u8 = 10;

// Operators are spelt by `ir::binary_symbol` and `ir::unary_symbol`, their one home.

/// Whether the literal's text starts with `-`.
fn is_negative(lit: Literal) -> bool {
    match lit {
        Literal::I32(v) => v < 0,
        Literal::F32(bits) => bits.to_f32().is_sign_negative() && !bits.to_f32().is_nan(),
        Literal::F16(_) | Literal::BF16(_) => {
            let v = lit.as_f32().unwrap_or(0.0);
            v.is_sign_negative() && v.is_finite()
        }
        Literal::U32(_) | Literal::Bool(_) => false,
    }
}

pub(crate) fn write_literal(out: &mut String, lit: Literal) {
    match lit {
        Literal::I32(v) => write!(out, "{v}").unwrap(),
        Literal::U32(v) => write!(out, "{v}u").unwrap(),
        Literal::Bool(v) => write!(out, "{v}").unwrap(),
        Literal::F32(bits) => {
            let v = bits.to_f32();
            if bits.0 == CANONICAL_NAN {
                out.push_str("nan");
            } else if v.is_nan() {
                write!(out, "f32_bits({:#010x})", bits.0).unwrap();
            } else if v.is_infinite() {
                out.push_str(if v < 0.0 { "-inf" } else { "inf" });
            } else {
                // `{:?}` is the shortest text that parses back to the same bits
                // and always has a `.` or an exponent.
                write!(out, "{v:?}").unwrap();
            }
        }
        Literal::F16(bits) | Literal::BF16(bits) => write_literal16(out, lit.ty(), bits),
    }
}

/// A 16-bit float: finite values as the shortest decimal that reads back as
/// the same bits, with the type's suffix (`0.1f16`, `-0.0bf16`); infinities
/// and NaNs as their bits (`f16_bits(0x7c00)`).
fn write_literal16(out: &mut String, ty: ScalarType, bits: u16) {
    let value = crate::numerics::to_f32(ty, bits).unwrap_or(f32::NAN);
    if !value.is_finite() {
        write!(out, "{ty}_bits({bits:#06x})").unwrap();
        return;
    }
    let exact = f64::from(value);
    let shortest = (0..17)
        .map(|digits| format!("{exact:.digits$e}").parse::<f64>().unwrap_or(exact))
        .find(|&v| crate::numerics::from_f64(ty, v) == Some(bits))
        .unwrap_or(exact);
    // `{:?}` of an f64 with few digits prints those digits, with a `.` or an exponent.
    let shortest = if value == 0.0 { exact } else { shortest };
    write!(out, "{shortest:?}{ty}").unwrap();
}

/// Whether the printer parenthesises `expr` where the context needs binding
/// strength at least `min`; `guard_sign`: a literal that starts with `-`
/// there must be parenthesised.
pub(crate) fn parenthesized(expr: &Expr, min: u8, guard_sign: bool) -> bool {
    match expr {
        Expr::Lit(lit) => guard_sign && is_negative(*lit),
        Expr::Unary(..) => UNARY_LEVEL < min,
        Expr::Binary(op, ..) => binary_level(*op) < min,
        _ => false,
    }
}

/// The operands of `expr` in printing order, each with the context it is
/// printed in (`min`, `guard_sign`) and whether the printer wraps it in
/// parentheses of its own whatever the context.
pub(crate) fn operand_contexts(expr: &Expr) -> Vec<(&Expr, u8, bool, bool)> {
    let plain = |e| (e, 0, false, false);
    match expr {
        Expr::Lit(_)
        | Expr::Var(_)
        | Expr::AxisIndex(_)
        | Expr::AxisSize(_)
        | Expr::WarpPosition(_) => vec![],
        Expr::Load(access) => access
            .block
            .iter()
            .flatten()
            .chain(&access.index)
            .map(plain)
            .collect(),
        Expr::Unary(op, operand) => {
            // `-(1)` is negation of a literal; `-1` would be the literal itself.
            let operand_is_number =
                matches!(**operand, Expr::Lit(l) if !matches!(l, Literal::Bool(_)));
            if *op == UnaryOp::Neg && operand_is_number {
                vec![(&**operand, 0, false, true)]
            } else {
                vec![(&**operand, UNARY_LEVEL, true, false)]
            }
        }
        Expr::Binary(op, lhs, rhs) => {
            let level = binary_level(*op);
            // Left-associative, except comparisons, which do not chain at all.
            let lhs_min = if op.is_comparison() { level + 1 } else { level };
            vec![
                (&**lhs, lhs_min, false, false),
                (&**rhs, level + 1, true, false),
            ]
        }
        Expr::Select(cond, if_true, if_false) => {
            vec![plain(&**cond), plain(&**if_true), plain(&**if_false)]
        }
        Expr::Cast(_, operand) | Expr::Bitcast(_, operand) => vec![plain(&**operand)],
        Expr::Math(_, args) => args.iter().map(plain).collect(),
    }
}

/// Prints `expr` where the context needs binding strength at least `min`.
/// `guard_sign`: a literal that starts with `-` here must be parenthesised.
fn write_expr_in(out: &mut String, expr: &Expr, min: u8, guard_sign: bool) {
    let paren = parenthesized(expr, min, guard_sign);
    if paren {
        out.push('(');
    }
    let operands = operand_contexts(expr);
    let write_operand = |out: &mut String, i: usize| {
        let (operand, min, guard_sign, forced) = operands[i];
        if forced {
            out.push('(');
        }
        write_expr_in(out, operand, min, guard_sign);
        if forced {
            out.push(')');
        }
    };
    let write_operands = |out: &mut String| {
        out.push('(');
        for i in 0..operands.len() {
            if i > 0 {
                out.push_str(", ");
            }
            write_operand(out, i);
        }
        out.push(')');
    };
    match expr {
        Expr::Lit(lit) => write_literal(out, *lit),
        Expr::Var(name) => out.push_str(name),
        Expr::AxisIndex(axis) => write!(out, "axis_index({axis})").unwrap(),
        Expr::AxisSize(axis) => write!(out, "axis_size({axis})").unwrap(),
        Expr::WarpPosition(p) => write!(out, "{}()", p.name()).unwrap(),
        Expr::Load(access) => write_access(out, access),
        Expr::Unary(op, _) => {
            out.push_str(unary_symbol(*op));
            write_operand(out, 0);
        }
        Expr::Binary(op, ..) => {
            write_operand(out, 0);
            write!(out, " {} ", binary_symbol(*op)).unwrap();
            write_operand(out, 1);
        }
        Expr::Select(..) => {
            out.push_str("select");
            write_operands(out);
        }
        Expr::Cast(ty, _) => {
            out.push_str(ty.keyword());
            write_operands(out);
        }
        Expr::Bitcast(ty, _) => {
            write!(out, "bitcast<{ty}>").unwrap();
            write_operands(out);
        }
        Expr::Math(f, _) => {
            out.push_str(f.name());
            write_operands(out);
        }
    }
    if paren {
        out.push(')');
    }
}

pub(crate) fn write_expr(out: &mut String, expr: &Expr) {
    write_expr_in(out, expr, 0, false);
}

fn write_expr_list<'e>(out: &mut String, exprs: impl IntoIterator<Item = &'e Expr>) {
    for (i, e) in exprs.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_expr(out, e);
    }
}

/// `fa` or `fa[row]`.
fn write_fragment(out: &mut String, fragment: &Fragment) {
    out.push_str(&fragment.array);
    if let Some(row) = &fragment.row {
        out.push('[');
        write_expr(out, row);
        out.push(']');
    }
}

fn write_access(out: &mut String, access: &RefAccess) {
    out.push_str(&access.base);
    if let Some(block) = &access.block {
        out.push_str("@[");
        write_expr_list(out, block);
        out.push(']');
    }
    out.push('[');
    write_expr_list(out, &access.index);
    out.push(']');
}

fn write_shape(out: &mut String, shape: &[u32]) {
    out.push('[');
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{d}").unwrap();
    }
    out.push(']');
}

pub(crate) fn write_ref_type(out: &mut String, ty: &RefType) {
    write!(out, "{}<", ty.space.keyword()).unwrap();
    // Semaphores are `i32` counters, so the element type is left out.
    if !(ty.space == MemorySpace::Sem && ty.elem == ScalarType::I32) {
        out.push_str(ty.elem.keyword());
    }
    write_shape(out, &ty.shape);
    out.push('>');
    if let Some(owner) = &ty.owner {
        write!(out, " @ {owner}").unwrap();
    }
}

pub(crate) fn write_type(out: &mut String, ty: &Type) {
    match ty {
        Type::Scalar(s) => out.push_str(s.keyword()),
        Type::Ref(r) => write_ref_type(out, r),
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// `{}` or `{`, one statement per line, `}` at `depth`.
fn write_block(out: &mut String, body: &[Stmt], depth: usize) {
    if body.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push_str("{\n");
    for stmt in body {
        write_stmt(out, stmt, depth + 1);
    }
    indent(out, depth);
    out.push('}');
}

fn write_binding(out: &mut String, keyword: &str, var: &Binding) {
    write!(out, "{keyword} {}: {} = ", var.name, var.ty).unwrap();
}

/// Writes one statement at `depth`, with its indentation and final newline.
pub(crate) fn write_stmt(out: &mut String, stmt: &Stmt, depth: usize) {
    indent(out, depth);
    match stmt {
        Stmt::Let { var, value } => {
            write_binding(out, "let", var);
            write_expr(out, value);
            out.push(';');
        }
        Stmt::Var { var, init } => {
            write_binding(out, "var", var);
            write_expr(out, init);
            out.push(';');
        }
        Stmt::Assign { name, value } => {
            write!(out, "{name} = ").unwrap();
            write_expr(out, value);
            out.push(';');
        }
        Stmt::LocalArray { name, elem, shape } => {
            write!(out, "local {name}: {elem}").unwrap();
            write_shape(out, shape);
            out.push(';');
        }
        Stmt::Store { target, value } => {
            write_access(out, target);
            out.push_str(" = ");
            write_expr(out, value);
            out.push(';');
        }
        Stmt::Atomic {
            dest,
            op,
            target,
            args,
        } => {
            if let Some(dest) = dest {
                write_binding(out, "let", dest);
            }
            write!(out, "{}(", op.name()).unwrap();
            write_access(out, target);
            for arg in args {
                out.push_str(", ");
                write_expr(out, arg);
            }
            out.push_str(");");
        }
        Stmt::If {
            cond,
            then_body,
            else_body,
        } => {
            out.push_str("if ");
            write_expr(out, cond);
            out.push(' ');
            write_block(out, then_body, depth);
            if !else_body.is_empty() {
                out.push_str(" else ");
                write_block(out, else_body, depth);
            }
        }
        Stmt::For {
            var,
            start,
            end,
            body,
        } => {
            write!(out, "for {}: {} in ", var.name, var.ty).unwrap();
            write_expr(out, start);
            out.push_str("..");
            write_expr(out, end);
            out.push(' ');
            write_block(out, body, depth);
        }
        Stmt::While { cond, max, body } => {
            out.push_str("while ");
            write_expr(out, cond);
            out.push_str(" max ");
            // After the word `max`, a leading `-` would read as subtraction.
            let mut bound = String::new();
            write_expr(&mut bound, max);
            if bound.starts_with('-') {
                write!(out, "({bound})").unwrap();
            } else {
                out.push_str(&bound);
            }
            out.push(' ');
            write_block(out, body, depth);
        }
        Stmt::Break => out.push_str("break;"),
        Stmt::Mma { d, a, b, c } => {
            write!(out, "{}(", mma::NAME).unwrap();
            for (k, fragment) in [d, a, b, c].into_iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_fragment(out, fragment);
            }
            out.push_str(");");
        }
        Stmt::MmaLoad {
            operand,
            dest,
            source,
        } => {
            write!(out, "{}(", operand.load_name()).unwrap();
            write_fragment(out, dest);
            out.push_str(", ");
            write_access(out, source);
            out.push_str(");");
        }
        Stmt::BlockCollective { dest, op, args } => {
            write_binding(out, "let", dest);
            write!(out, "{}(", op.name()).unwrap();
            write_expr_list(out, args);
            out.push_str(");");
        }
        Stmt::Warp { dest, op, args } => {
            write_binding(out, "let", dest);
            write!(out, "{}(", op.name()).unwrap();
            write_expr_list(out, args);
            out.push_str(");");
        }
        Stmt::Call {
            dest,
            function,
            args,
        } => {
            if let Some(dest) = dest {
                write_binding(out, "let", dest);
            }
            write!(out, "{function}(").unwrap();
            write_expr_list(out, args);
            out.push_str(");");
        }
        Stmt::Return { value } => {
            out.push_str("return");
            if let Some(value) = value {
                out.push(' ');
                write_expr(out, value);
            }
            out.push(';');
        }
        Stmt::Continue => out.push_str("continue;"),
        Stmt::CompoundAssign { name, op, value } => {
            write!(out, "{name} {}= ", binary_symbol(*op)).unwrap();
            write_expr(out, value);
            out.push(';');
        }
        Stmt::CompoundStore { target, op, value } => {
            write_access(out, target);
            write!(out, " {}= ", binary_symbol(*op)).unwrap();
            write_expr(out, value);
            out.push(';');
        }
        Stmt::Barrier => out.push_str("barrier;"),
        Stmt::Sem { op, sem, amount } => {
            write!(out, "{}(", op.name()).unwrap();
            write_access(out, sem);
            out.push_str(", ");
            write_expr(out, amount);
            out.push_str(");");
        }
        Stmt::SemRead { dest, sem } => {
            write!(out, "let {dest}: i32 = read(").unwrap();
            write_access(out, sem);
            out.push_str(");");
        }
    }
    out.push('\n');
}

fn write_axes(out: &mut String, keyword: &str, axes: &[Axis]) {
    if axes.is_empty() {
        return;
    }
    write!(out, "  {keyword} [").unwrap();
    for (i, a) in axes.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{} = {}", a.name, a.size).unwrap();
    }
    out.push_str("];\n");
}

fn write_mesh(out: &mut String, mesh: &Mesh) {
    writeln!(out, "mesh {} {{", mesh.name).unwrap();
    write_axes(out, "grid", &mesh.grid);
    write_axes(out, "cluster", &mesh.cluster);
    if mesh.thread_axes.is_empty() {
        writeln!(
            out,
            "  threads {} = {};",
            mesh.threads.name, mesh.threads.size
        )
        .unwrap();
    } else {
        write_axes(out, "threads", &mesh.thread_axes);
    }
    out.push_str("}\n");
}

fn write_const(out: &mut String, constant: &Const) {
    write!(out, "const {}: {} = ", constant.name, constant.value.ty()).unwrap();
    write_literal(out, constant.value);
    out.push_str(";\n");
}

fn write_table(out: &mut String, table: &ConstTable) {
    write!(
        out,
        "const {}: {}[{}] = [",
        table.name,
        table.elem,
        table.values.len()
    )
    .unwrap();
    for (i, v) in table.values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_literal(out, *v);
    }
    out.push_str("];\n");
}

fn write_resident(out: &mut String, resident: &Resident) {
    write!(out, "resident {}: ", resident.name).unwrap();
    write_ref_type(out, &resident.ty);
    if resident.zeroed {
        out.push_str(" zeroed");
    }
    out.push_str(";\n");
}

fn write_params(out: &mut String, params: &[Param]) {
    out.push('(');
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{}: ", p.name).unwrap();
        write_type(out, &p.ty);
    }
    out.push(')');
}

fn write_kernel(out: &mut String, kernel: &Kernel) {
    write!(out, "kernel {}", kernel.name).unwrap();
    write_params(out, &kernel.params);
    out.push(' ');
    write_block(out, &kernel.body, 0);
    out.push('\n');
}

fn write_function(out: &mut String, function: &Function) {
    write!(out, "fn {}", function.name).unwrap();
    write_params(out, &function.params);
    if let Some(result) = function.result {
        write!(out, " -> {result}").unwrap();
    }
    out.push(' ');
    write_block(out, &function.body, 0);
    out.push('\n');
}

fn write_list<T>(
    out: &mut String,
    keyword: &str,
    items: &[T],
    always: bool,
    mut item: impl FnMut(&mut String, &T),
) {
    if items.is_empty() && !always {
        return;
    }
    write!(out, "  {keyword} [").unwrap();
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        item(out, x);
    }
    out.push_str("];\n");
}

fn write_operand(out: &mut String, operand: &Operand) {
    write!(out, "{}: ", operand.name).unwrap();
    write_type(out, &operand.ty);
    if operand.zeroed {
        out.push_str(" zeroed");
    }
    if operand.resident {
        out.push_str(" resident");
    }
}

fn write_map(out: &mut String, map: &MpmdMap) {
    writeln!(out, "map {} {{", map.name).unwrap();
    write_list(out, "programs", &map.programs, true, |out, p| {
        write!(out, "{}: {}", p.mesh, p.kernel).unwrap()
    });
    for (kind, list) in [
        (OperandKind::Input, &map.inputs),
        (OperandKind::Output, &map.outputs),
        (OperandKind::Scalar, &map.scalars),
        (OperandKind::Scratch, &map.scratch),
    ] {
        write_list(out, kind.keyword(), list, false, write_operand);
    }
    write_list(out, "aliases", &map.aliases, false, |out, a| {
        write!(out, "{} -> {}", a.input, a.output).unwrap()
    });
    if map.fast_math {
        out.push_str("  fast_math;\n");
    }
    if map.debug {
        out.push_str("  debug;\n");
    }
    out.push_str("}\n");
}

fn write_call(out: &mut String, call: &Call) {
    write!(out, "call {}(", call.map).unwrap();
    for (i, (name, value)) in call.scalars.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{name} = ").unwrap();
        write_literal(out, *value);
    }
    out.push_str(");\n");
}

pub(crate) fn write_generator(out: &mut String, generator: &Generator) {
    match generator {
        Generator::Uniform { lo, hi } | Generator::NonZero { lo, hi } => {
            let f = if matches!(generator, Generator::Uniform { .. }) {
                "uniform"
            } else {
                "nonzero"
            };
            write!(out, "{f}(").unwrap();
            write_literal(out, *lo);
            out.push_str(", ");
            write_literal(out, *hi);
            out.push(')');
        }
        Generator::Special => out.push_str("special"),
        Generator::Constant(value) => {
            out.push_str("constant(");
            write_literal(out, *value);
            out.push(')');
        }
        Generator::Iota => out.push_str("iota"),
        Generator::IndexInto { operand, dim } => {
            write!(out, "index_into({operand}, {dim})").unwrap()
        }
    }
}

fn write_compare_mode(out: &mut String, mode: &CompareMode) {
    match mode {
        CompareMode::Exact => out.push_str("exact"),
        CompareMode::Ulp(n) => write!(out, "ulp({n})").unwrap(),
        CompareMode::Profile => out.push_str("profile"),
        CompareMode::Multiset => out.push_str("multiset"),
        CompareMode::Ignore => out.push_str("ignore"),
        CompareMode::Mma => out.push_str("mma"),
    }
}

fn write_expectation(out: &mut String, expect: &Expectation) {
    match expect {
        Expectation::Ok => out.push_str("ok"),
        Expectation::Fails(class) => write!(out, "fails({})", class.keyword()).unwrap(),
        Expectation::Reject(code) => write!(out, "reject({code})").unwrap(),
    }
}

fn write_case(out: &mut String, case: &CaseSpec) {
    out.push_str("case {\n");
    for (name, generator) in &case.generators {
        write!(out, "  generate {name} = ").unwrap();
        write_generator(out, generator);
        out.push_str(";\n");
    }
    for (name, mode) in &case.compares {
        write!(out, "  compare {name} = ").unwrap();
        write_compare_mode(out, mode);
        out.push_str(";\n");
    }
    out.push_str("  expect ");
    write_expectation(out, &case.expect);
    out.push_str(";\n");
    write_list(out, "tags", &case.tags, false, |out, t| out.push_str(t));
    out.push_str("}\n");
}

/// The whole file: groups in the order constants, meshes, residents,
/// functions, kernels, maps, calls, then the case section if there is one,
/// separated by blank lines; multi-line items are separated by blank lines
/// too, one-line items (constants, residents, calls) are not.
pub(crate) fn write_file(module: &Module, case: Option<&CaseSpec>) -> String {
    let mut groups: Vec<String> = Vec::new();
    let mut group = |items: Vec<String>, separator: &str| {
        if !items.is_empty() {
            groups.push(items.join(separator));
        }
    };
    let each = |f: &dyn Fn(&mut String)| {
        let mut s = String::new();
        f(&mut s);
        s
    };
    group(
        module
            .consts
            .iter()
            .map(|c| each(&|o| write_const(o, c)))
            .chain(module.tables.iter().map(|t| each(&|o| write_table(o, t))))
            .collect(),
        "",
    );
    group(
        module
            .meshes
            .iter()
            .map(|m| each(&|o| write_mesh(o, m)))
            .collect(),
        "\n",
    );
    group(
        module
            .residents
            .iter()
            .map(|r| each(&|o| write_resident(o, r)))
            .collect(),
        "",
    );
    group(
        module
            .functions
            .iter()
            .map(|f| each(&|o| write_function(o, f)))
            .collect(),
        "\n",
    );
    group(
        module
            .kernels
            .iter()
            .map(|k| each(&|o| write_kernel(o, k)))
            .collect(),
        "\n",
    );
    group(
        module
            .maps
            .iter()
            .map(|m| each(&|o| write_map(o, m)))
            .collect(),
        "\n",
    );
    group(
        module
            .calls
            .iter()
            .map(|c| each(&|o| write_call(o, c)))
            .collect(),
        "",
    );
    group(
        case.iter().map(|c| each(&|o| write_case(o, c))).collect(),
        "",
    );
    groups.join("\n")
}
