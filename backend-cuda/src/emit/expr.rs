//! Expressions: C expression text with the exact numerics of docs/design.md
//! (integer helpers, one rounding for 16-bit floats, saturating casts),
//! kept shallow by binding deep text to temporaries.

use mpmd_core::ir::{binary_symbol, unary_symbol, BinaryOp, Expr, MathFn, ScalarType, UnaryOp};
use mpmd_core::Mode;

use super::c::{
    self, c_type, from_low_half, round_to, sixteen_bit_suffix, widen, widening_depth, Home,
};
use super::names::user_name;
use super::{EmitError, Emitter, Symbol, UnitContext};

/// Nesting depth of C expression text past which it is bound to a
/// temporary, so that the generated source stays shallow however deep the
/// IR expression is (C++ promises 256 nested parentheses, no more).
pub(super) const MAX_EXPR_DEPTH: u32 = 32;

/// C expression text with its IR type and how deeply it nests.
#[derive(Clone, Debug)]
pub(super) struct Code {
    pub(super) text: String,
    pub(super) ty: ScalarType,
    pub(super) depth: u32,
}

impl Code {
    pub(super) fn new(text: String, ty: ScalarType, depth: u32) -> Self {
        Code { text, ty, depth }
    }
}

impl Emitter<'_> {
    /// `code`, or a temporary holding it once it nests [`MAX_EXPR_DEPTH`]
    /// deep (emitted just before the statement being written).
    fn bounded(&mut self, code: Code) -> Code {
        if code.depth < MAX_EXPR_DEPTH {
            return code;
        }
        let name = self.expression_temp("const ", code.ty, &code.text);
        Code::new(name, code.ty, 1)
    }

    /// A fresh temporary `mpmd_e<n>` of type `ty` holding `value`, declared
    /// just before the statement being written; `qualifier` is `const ` or
    /// nothing.
    fn expression_temp(&mut self, qualifier: &str, ty: ScalarType, value: &str) -> String {
        let name = self.temp('e');
        let ty = c_type(ty, Home::Value);
        self.line(self.depth, &format!("{qualifier}{ty} {name} = {value};"));
        name
    }

    pub(super) fn expr(&mut self, cx: &UnitContext, e: &Expr) -> Result<Code, EmitError> {
        let code = match e {
            Expr::Lit(l) => Code::new(c::literal(*l), l.ty(), 1),
            Expr::WarpPosition(p) => {
                return Err(cx.unsupported(format!(
                    "`{}()` is expanded by `expand::program_kernel` before the emitter",
                    p.name()
                )))
            }
            Expr::Var(name) => match cx.symbol(name)? {
                Symbol::Scalar { c_name, ty } => Code::new(c_name.clone(), *ty, 1),
                _ => return Err(cx.unsupported(format!("`{name}` is a ref, not a value"))),
            },
            Expr::AxisIndex(axis) => {
                if !cx.unit.axes.iter().any(|a| &a.axis == axis) {
                    return Err(cx.unsupported(format!(
                        "axis_index({axis}): `{axis}` is not an axis of mesh `{}`",
                        cx.unit.mesh.name
                    )));
                }
                Code::new(user_name('a', axis), ScalarType::U32, 1)
            }
            Expr::AxisSize(axis) => {
                let size = std::iter::once(&cx.unit.mesh)
                    .chain(self.plan.meshes.iter())
                    .find_map(|m| m.axis(axis))
                    .map(|a| a.size)
                    .ok_or_else(|| {
                        cx.unsupported(format!("axis_size({axis}): no mesh has axis `{axis}`"))
                    })?;
                Code::new(c::unsigned(size), ScalarType::U32, 1)
            }
            Expr::Load(access) => self.load(cx, access)?,
            Expr::Unary(op, a) => {
                let v = self.expr(cx, a)?;
                Code::new(unary(*op, v.ty, &v.text), v.ty, v.depth + 1)
            }
            Expr::Binary(..) => {
                // Operator chains nest to the left as deep as they are long
                // (`a + b + c + ...`): walk the spine with a loop, not
                // recursion, so that no chain length can exhaust the stack.
                let mut spine = Vec::new();
                let mut node = e;
                while let Expr::Binary(op, a, b) = node {
                    spine.push((*op, b.as_ref()));
                    node = a;
                }
                let mut acc = self.expr(cx, node)?;
                for (op, b) in spine.into_iter().rev() {
                    acc = self.binary_step(cx, op, acc, b)?;
                }
                return Ok(acc);
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(cx, c)?;
                let a = self.expr(cx, a)?;
                let b = self.expr(cx, b)?;
                let depth = c.depth.max(a.depth).max(b.depth) + 1;
                // Both operands are evaluated (docs/design.md): in checked mode a
                // call, so that an out-of-bounds load in either is reported.
                let text = match self.mode {
                    Mode::Fast => format!("({} ? {} : {})", c.text, a.text, b.text),
                    Mode::Checked => format!("mpmd_select({}, {}, {})", c.text, a.text, b.text),
                };
                Code::new(text, a.ty, depth)
            }
            Expr::Cast(to, a) => {
                let v = self.expr(cx, a)?;
                let extra = widening_depth(v.ty) + widening_depth(*to);
                Code::new(cast(v.ty, *to, &v.text), *to, v.depth + 2 + extra)
            }
            Expr::Bitcast(to, a) => {
                let v = self.expr(cx, a)?;
                let text = bitcast(v.ty, *to, &v.text)
                    .ok_or_else(|| cx.unsupported(format!("bitcast from {} to {to}", v.ty)))?;
                Code::new(text, *to, v.depth + 2)
            }
            Expr::Math(f, args) => {
                if args.len() != f.arity() {
                    return Err(cx.unsupported(format!(
                        "`{}` takes {} argument(s), found {}",
                        f.name(),
                        f.arity(),
                        args.len()
                    )));
                }
                let values = args
                    .iter()
                    .map(|a| self.expr(cx, a))
                    .collect::<Result<Vec<_>, _>>()?;
                let t = values[0].ty;
                let depth =
                    values.iter().map(|v| v.depth).max().unwrap_or(0) + 1 + 2 * widening_depth(t);
                let texts: Vec<String> = values.into_iter().map(|v| v.text).collect();
                let text = math(*f, t, &texts).ok_or_else(|| {
                    cx.unsupported(format!("`{}` is not defined for {t}", f.name()))
                })?;
                Code::new(text, t, depth)
            }
        };
        Ok(self.bounded(code))
    }

    /// `x op b`. The right operand of `&&` and `||` is evaluated only when
    /// the left does not decide, as in C: when it needs statements of its
    /// own (temporaries), they run under an `if` on the left's value.
    fn binary_step(
        &mut self,
        cx: &UnitContext,
        op: BinaryOp,
        x: Code,
        b: &Expr,
    ) -> Result<Code, EmitError> {
        let lazy = matches!(op, BinaryOp::LogicAnd | BinaryOp::LogicOr);
        let mark = self.out.len();
        let y = self.expr(cx, b)?;
        let ty = if op.is_comparison() {
            ScalarType::Bool
        } else {
            x.ty
        };
        if lazy && self.out.len() > mark {
            let right_statements = self.out.split_off(mark);
            let name = self.expression_temp("", ScalarType::Bool, &x.text);
            let depth = self.depth;
            let decided = match op {
                BinaryOp::LogicAnd => format!("if ({name}) {{"),
                _ => format!("if (!{name}) {{"),
            };
            self.line(depth, &decided);
            for line in right_statements.lines() {
                self.out.push_str("  ");
                self.out.push_str(line);
                self.out.push('\n');
            }
            self.line(depth + 1, &format!("{name} = {};", y.text));
            self.line(depth, "}");
            return Ok(Code::new(name, ScalarType::Bool, 1));
        }
        let depth = x.depth.max(y.depth) + 1 + 2 * widening_depth(x.ty);
        let code = Code::new(binary(op, x.ty, &x.text, &y.text), ty, depth);
        Ok(self.bounded(code))
    }

    /// An index or coordinate as a `u32` expression (i32 indices are
    /// reinterpreted, so negative ones fail the bounds check).
    pub(super) fn index_expr(&mut self, cx: &UnitContext, e: &Expr) -> Result<Code, EmitError> {
        let v = self.expr(cx, e)?;
        Ok(match v.ty {
            ScalarType::U32 => v,
            _ => Code::new(format!("(u32)({})", v.text), ScalarType::U32, v.depth + 1),
        })
    }
}

fn unary(op: UnaryOp, t: ScalarType, v: &str) -> String {
    match (op, t) {
        (UnaryOp::Neg, ScalarType::I32) => format!("mpmd_neg_i32({v})"),
        (UnaryOp::Neg, ScalarType::U32) => format!("(0u - {v})"),
        // The sign bit flips (exact; NaN stays NaN).
        (UnaryOp::Neg, t) if t.is_16bit() => {
            format!("mpmd_neg_{}({v})", sixteen_bit_suffix(t).unwrap_or(""))
        }
        (op, _) => format!("({}{v})", unary_symbol(op)),
    }
}

fn binary(op: BinaryOp, t: ScalarType, x: &str, y: &str) -> String {
    use BinaryOp::*;
    use ScalarType::*;
    if t.is_16bit() {
        // On the exact f32 values; arithmetic rounds once to the type,
        // comparisons need no rounding.
        let (x, y) = (widen(t, x), widen(t, y));
        return match op {
            Rem => round_to(t, &format!("fmodf({x}, {y})")),
            Add | Sub | Mul | Div => round_to(t, &binary(op, F32, &x, &y)),
            _ => binary(op, F32, &x, &y),
        };
    }
    match (op, t) {
        (Add, I32) => format!("mpmd_add_i32({x}, {y})"),
        (Sub, I32) => format!("mpmd_sub_i32({x}, {y})"),
        (Mul, I32) => format!("mpmd_mul_i32({x}, {y})"),
        (Div, I32) => format!("mpmd_div_i32({x}, {y})"),
        (Rem, I32) => format!("mpmd_rem_i32({x}, {y})"),
        (Div, U32) => format!("mpmd_div_u32({x}, {y})"),
        (Rem, U32) => format!("mpmd_rem_u32({x}, {y})"),
        (Rem, _) => format!("fmodf({x}, {y})"),
        (Shl, I32) => format!("mpmd_shl_i32({x}, {y})"),
        (Shr, I32) => format!("mpmd_shr_i32({x}, {y})"),
        (Shl, _) => format!("mpmd_shl_u32({x}, {y})"),
        (Shr, _) => format!("mpmd_shr_u32({x}, {y})"),
        // Everything else is C's own operator, spelt as mpmd spells it.
        (op, _) => format!("({x} {} {y})", binary_symbol(op)),
    }
}

fn cast(from: ScalarType, to: ScalarType, v: &str) -> String {
    use ScalarType::*;
    match (from, to) {
        (f, t) if f == t => v.to_string(),
        // Integers round once: to an f32 rounded to odd (exact below 2^24),
        // then to the type (numerics::from_integer).
        (I32, t) if t.is_16bit() => round_to(t, &format!("mpmd_i32_to_f32_odd({v})")),
        (U32, t) if t.is_16bit() => round_to(t, &format!("mpmd_u32_to_f32_odd({v})")),
        (Bool, t) if t.is_16bit() => format!(
            "(({v}) ? {} : {})",
            c::sixteen_bit_literal(t, 1.0),
            c::sixteen_bit_literal(t, 0.0)
        ),
        (f, Bool) if f.is_16bit() => format!("({} != 0.0f)", widen(f, v)),
        // Everything else goes through the exact f32 value: f32's own rules
        // (to integers: truncate, saturate, NaN to 0), then one rounding.
        (f, t) if f.is_16bit() || t.is_16bit() => {
            let wide = widen(f, v);
            if t.is_16bit() {
                round_to(t, &wide)
            } else {
                cast(F32, t, &wide)
            }
        }
        (F32, I32) => format!("mpmd_f32_to_i32({v})"),
        (F32, U32) => format!("mpmd_f32_to_u32({v})"),
        (I32, F32) => format!("__int2float_rn({v})"),
        (U32, F32) => format!("__uint2float_rn({v})"),
        (I32, U32) => format!("((u32)({v}))"),
        (U32, I32) => format!("((int)({v}))"),
        (Bool, F32) => format!("({v} ? 1.0f : 0.0f)"),
        (Bool, I32) => format!("((int)({v}))"),
        (Bool, U32) => format!("((u32)({v}))"),
        (F32, Bool) => format!("({v} != 0.0f)"),
        (_, Bool) => format!("({v} != 0)"),
        (_, _) => v.to_string(),
    }
}

/// The bits of `v` (of type `from`) as type `to`; `None` where the sizes
/// differ or `bool` is involved.
fn bitcast(from: ScalarType, to: ScalarType, v: &str) -> Option<String> {
    use ScalarType::*;
    Some(match (from, to) {
        (f, t) if f == t => v.to_string(),
        (F32, I32) => format!("__float_as_int({v})"),
        (F32, U32) => format!("__float_as_uint({v})"),
        (I32, F32) => format!("__int_as_float({v})"),
        (U32, F32) => format!("__uint_as_float({v})"),
        (I32, U32) => format!("((u32)({v}))"),
        (U32, I32) => format!("((int)({v}))"),
        // 16 bits ↔ the low half of a word (the high half zero when
        // widening, dropped when narrowing); f16 ↔ bf16 keep the 16 bits.
        (f, U32) if f.is_16bit() => format!("((u32)({v}).bits)"),
        (f, I32) if f.is_16bit() => format!("((int)(u32)({v}).bits)"),
        (f, t) if f.is_16bit() && t.is_16bit() => from_low_half(t, &format!("({v}).bits")),
        (I32 | U32, t) if t.is_16bit() => from_low_half(t, &format!("(u32)({v})")),
        _ => return None,
    })
}

fn math(f: MathFn, t: ScalarType, v: &[String]) -> Option<String> {
    use ScalarType::*;
    if let Some(suffix) = sixteen_bit_suffix(t) {
        let call = |name: &str| format!("mpmd_{name}_{suffix}({})", v.join(", "));
        return Some(match f {
            // Exact on the bits; fma rounds once; min and max return the
            // operand that is not NaN.
            MathFn::Abs => call("abs"),
            MathFn::Fma => call("fma"),
            MathFn::Min => call("min"),
            MathFn::Max => call("max"),
            // The f32 function of the exact values, rounded once: exact for
            // floor and ceil, correctly rounded for sqrt.
            _ => {
                let wide: Vec<String> = v.iter().map(|x| widen(t, x)).collect();
                round_to(t, &math(f, F32, &wide)?)
            }
        });
    }
    let call = |name: &str| format!("{name}({})", v.join(", "));
    Some(match (f, t) {
        (MathFn::Exp, F32) => call("expf"),
        (MathFn::Log, F32) => call("logf"),
        (MathFn::Sqrt, F32) => call("sqrtf"),
        (MathFn::Rsqrt, F32) => call("rsqrtf"),
        (MathFn::Sin, F32) => call("sinf"),
        (MathFn::Cos, F32) => call("cosf"),
        (MathFn::Tanh, F32) => call("tanhf"),
        (MathFn::Floor, F32) => call("floorf"),
        (MathFn::Ceil, F32) => call("ceilf"),
        (MathFn::Fma, F32) => call("fmaf"),
        (MathFn::Pow, F32) => call("powf"),
        (MathFn::Abs, F32) => call("fabsf"),
        (MathFn::Abs, I32) => call("mpmd_abs_i32"),
        (MathFn::Abs, U32) => v[0].clone(),
        // The other operand when one is NaN, signalling NaNs included.
        (MathFn::Min, F32) => call("mpmd_min_f32"),
        (MathFn::Max, F32) => call("mpmd_max_f32"),
        (MathFn::Min, I32) => call("mpmd_min_i32"),
        (MathFn::Max, I32) => call("mpmd_max_i32"),
        (MathFn::Min, U32) => call("mpmd_min_u32"),
        (MathFn::Max, U32) => call("mpmd_max_u32"),
        // CUDA's intrinsics take and give `int` except `__popc` and `__brev`
        // (`unsigned`); the bits are the same either way.
        (MathFn::Popcount, U32) => format!("((u32)__popc({}))", v[0]),
        (MathFn::Popcount, I32) => format!("__popc((u32)({}))", v[0]),
        (MathFn::Clz, U32) => format!("((u32)__clz((int)({})))", v[0]),
        (MathFn::Clz, I32) => call("__clz"),
        (MathFn::Ffs, U32) => format!("((u32)__ffs((int)({})))", v[0]),
        (MathFn::Ffs, I32) => call("__ffs"),
        (MathFn::Brev, U32) => call("__brev"),
        (MathFn::Brev, I32) => format!("((int)__brev((u32)({})))", v[0]),
        _ => return None,
    })
}
