//! Expressions, emitted bottom-up within WGSL's nesting limits, with
//! operations on literals alone read at run time.

use mpmd_core::ir::{BinaryOp, Expr, Literal, MathFn, ScalarType, UnaryOp};

use super::bindings::sanitize;
use super::helpers::Helper;
use super::memory::load_text;
use super::syntax::{binary_text, literal_text, opaque_operand, wgsl_scalar};
use super::unit::{Named, UnitEmitter};
use super::EmitError;

/// How deeply one WGSL expression may nest (parentheses, calls and unary
/// operators, counted generously) before the emitter puts it in a `let`
/// temporary. tint's parser stops at 127 levels of statements and
/// expressions together and naga's at a few hundred; this leaves room for
/// the statements around the expression (`MAX_STATEMENT_NESTING`).
const MAX_EXPR_DEPTH: u32 = 24;

/// An emitted expression.
#[derive(Clone, Debug)]
pub(super) struct Value {
    pub(super) text: String,
    pub(super) ty: ScalarType,
    /// How deeply `text` nests (see `MAX_EXPR_DEPTH`).
    pub(super) depth: u32,
    /// Every leaf is a literal or an axis size (WGSL would fold it).
    pub(super) constant: bool,
    /// A literal not yet written: its parent decides whether it is spelled
    /// or read at run time (`UnitEmitter::spell`); `text` is empty until then.
    pub(super) leaf: Option<Literal>,
    /// `text` is already opaque with the zero word of this operand position
    /// (an f32 product): as that operand it needs no second wrap.
    pub(super) opaque_at: Option<usize>,
}

impl Value {
    pub(super) fn leaf(lit: Literal) -> Value {
        Value {
            text: String::new(),
            ty: lit.ty(),
            depth: 0,
            constant: true,
            leaf: Some(lit),
            opaque_at: None,
        }
    }

    pub(super) fn text(text: String, ty: ScalarType, constant: bool) -> Value {
        Value {
            text,
            ty,
            depth: 0,
            constant,
            leaf: None,
            opaque_at: None,
        }
    }

    /// An operation on `operands` (already spelled).
    pub(super) fn op(text: String, ty: ScalarType, operands: &[&Value]) -> Value {
        Value {
            text,
            ty,
            depth: operands.iter().map(|v| v.depth).max().unwrap_or(0) + 4,
            constant: operands.iter().all(|v| v.constant),
            leaf: None,
            opaque_at: None,
        }
    }

    fn is_f32_leaf(&self) -> bool {
        matches!(self.leaf, Some(Literal::F32(_)))
    }
}

impl UnitEmitter<'_, '_> {
    pub(super) fn runtime_literal(&mut self, lit: Literal) -> String {
        let k = self.state.runtime_literal(lit);
        self.rt_used.insert(k);
        format!("rt_{k}")
    }

    /// `operands` of one float operation (f32 values, or 16-bit float
    /// bits), each made opaque with the zero word of its position
    /// (`syntax::opaque_operand`). This is the one place that decides it:
    /// every float operation the driver could simplify (`+ - * /`, `fma`,
    /// comparisons, math functions, on f32 and on the f32 values of 16-bit
    /// floats) takes its operands through here, so no operand is a constant
    /// to the driver and no two operands are provably equal.
    pub(super) fn opaque_operands(&mut self, ty: ScalarType, operands: &[String]) -> Vec<String> {
        let at: Vec<(&str, usize)> = operands
            .iter()
            .enumerate()
            .map(|(position, value)| (value.as_str(), position))
            .collect();
        self.opaque_operands_at(ty, &at)
    }

    /// `opaque_operands` with the position (zero word) of each operand given.
    fn opaque_operands_at(&mut self, ty: ScalarType, operands: &[(&str, usize)]) -> Vec<String> {
        operands
            .iter()
            .map(|&(value, position)| {
                let k = self.state.opaque_zero(position);
                self.rt_used.insert(k);
                if ty == ScalarType::F32 {
                    self.state.helpers.insert(Helper::Opaque);
                }
                opaque_operand(ty, value, &format!("rt_{k}"))
            })
            .collect()
    }

    /// The operands of binary float operation `op`, opaque: with one zero
    /// word for both where two equal operands allow no wrong identity
    /// (`a + a = 2a` and `a * a` hold for infinities and NaN too), else one
    /// each (`a - a`, `a / a` and `a == a` do not). An operand that already
    /// is opaque with its word (a product, `Value::opaque_at`) stays as it is.
    pub(super) fn opaque_binary(&mut self, op: BinaryOp, x: &Value, y: &Value) -> (String, String) {
        let positions = binary_positions(op);
        let mut texts = [x.text.clone(), y.text.clone()];
        for (text, (v, position)) in texts.iter_mut().zip([x, y].into_iter().zip(positions)) {
            if v.opaque_at != Some(position) {
                *text = self
                    .opaque_operands_at(v.ty, &[(text.as_str(), position)])
                    .remove(0);
            }
        }
        let [a, b] = texts;
        (a, b)
    }

    /// The WGSL text of `e` (temporaries it needs are emitted before it).
    pub(super) fn expr(&mut self, e: &Expr) -> Result<String, EmitError> {
        Ok(self.value(e)?.text)
    }

    /// `e` emitted, its leaves spelled.
    pub(super) fn value(&mut self, e: &Expr) -> Result<Value, EmitError> {
        let v = self.node(e)?;
        Ok(self.spell(v, false))
    }

    /// A pending literal leaf written out: as WGSL text, or read from the
    /// parameter buffer when `runtime` (or when WGSL cannot spell it).
    pub(super) fn spell(&mut self, mut v: Value, runtime: bool) -> Value {
        if let Some(lit) = v.leaf.take() {
            v.text = match literal_text(lit) {
                Some(text) if !runtime => text,
                _ => self.runtime_literal(lit),
            };
        }
        v
    }

    /// Emits `e` bottom-up. A literal or axis size comes back pending
    /// (`Value::leaf`): its parent decides how it is written. An operation
    /// whose operands are all constant would be evaluated by WGSL at shader
    /// creation, which makes overflow and division by zero errors there: its
    /// literal operands are read at run time instead. A result nested deeper
    /// than `MAX_EXPR_DEPTH` becomes a `let` temporary, so no WGSL
    /// expression is deeper than naga and tint read.
    fn node(&mut self, e: &Expr) -> Result<Value, EmitError> {
        let v = match e {
            Expr::Lit(l) => Value::leaf(*l),
            Expr::WarpPosition(p) => {
                return Err(self.invalid(format!(
                    "`{}()` is expanded by `expand::program_kernel` before the emitter",
                    p.name()
                )))
            }
            Expr::AxisSize(axis) => Value::leaf(Literal::U32(self.axis_size(axis)?)),
            Expr::Var(name) => match self.lookup(name) {
                Some(Named::Scalar { wgsl, ty, .. }) => Value::text(wgsl.clone(), *ty, false),
                _ => return Err(self.invalid(format!("unknown variable `{name}`"))),
            },
            Expr::AxisIndex(axis) => {
                if !self.unit.axes.iter().any(|a| &a.axis == axis) {
                    return Err(self.invalid(format!(
                        "axis_index({axis}): mesh `{}` has no axis `{axis}`",
                        self.unit.mesh.name
                    )));
                }
                Value::text(format!("ax_{}", sanitize(axis)), ScalarType::U32, false)
            }
            Expr::Load(access) if self.ref_info(&access.base)?.ty.elem.is_16bit() => {
                let (text, ty) = self.load_half(access)?;
                let mut v = Value::text(text, ty, false);
                // The shift and mask around the word (the index is a `let`).
                v.depth = 8;
                v
            }
            Expr::Load(access) => {
                let (place, info, depth) = self.place_with_depth(access)?;
                let mut v = Value::text(load_text(&info, &place), info.ty.elem, false);
                // The index, its check call and the load's own conversions.
                v.depth = depth + 8;
                v
            }
            Expr::Unary(op, a) => {
                let a = self.node(a)?;
                let constant = a.constant;
                let a = self.spell(a, constant);
                let text = match (op, a.ty) {
                    (UnaryOp::Neg, ScalarType::F32) => format!("(-{})", a.text),
                    (UnaryOp::Neg, ScalarType::F16 | ScalarType::BF16) => {
                        format!("({} ^ 0x8000u)", a.text)
                    }
                    (UnaryOp::Neg, ScalarType::I32) => format!("(0i - {})", a.text),
                    (UnaryOp::Neg, _) => format!("(0u - {})", a.text),
                    (UnaryOp::Not, _) => format!("(!{})", a.text),
                    (UnaryOp::BitNot, _) => format!("(~{})", a.text),
                };
                Value::op(text, a.ty, &[&a])
            }
            Expr::Binary(op, a, b) => self.binary(*op, a, b)?,
            Expr::Select(c, t, f) => {
                let (c, t, f) = (self.node(c)?, self.node(t)?, self.node(f)?);
                let constant = c.constant && t.constant && f.constant;
                let c = self.spell(c, constant);
                let t = self.spell(t, constant);
                let f = self.spell(f, constant);
                let text = format!("select({}, {}, {})", f.text, t.text, c.text);
                Value::op(text, t.ty, &[&c, &t, &f])
            }
            Expr::Cast(to, a) => {
                let a = self.node(a)?;
                let constant = a.constant;
                let a = self.spell(a, constant);
                let text = self.cast(a.ty, *to, a.text.clone());
                Value::op(text, *to, &[&a])
            }
            Expr::Bitcast(to, a) => {
                let a = self.node(a)?;
                let constant = a.constant;
                let a = self.spell(a, constant);
                let text = match (a.ty, *to) {
                    (from, to) if from == to => a.text.clone(),
                    // Both are bits in a u32: the same 16 bits; from 16 bits the high half is zero.
                    (from, to) if from.is_16bit() && (to.is_16bit() || to == ScalarType::U32) => {
                        a.text.clone()
                    }
                    // To 16 bits the low half is kept.
                    (ScalarType::U32, to) if to.is_16bit() => format!("({} & 0xffffu)", a.text),
                    (ScalarType::I32, to) if to.is_16bit() => {
                        format!("(bitcast<u32>({}) & 0xffffu)", a.text)
                    }
                    (_, to) => format!("bitcast<{}>({})", wgsl_scalar(to), a.text),
                };
                Value::op(text, *to, &[&a])
            }
            Expr::Math(f, args) => {
                let mut vs = Vec::new();
                for a in args {
                    vs.push(self.node(a)?);
                }
                let Some(t) = vs.first().map(|v| v.ty) else {
                    return Err(self.invalid("math function without arguments"));
                };
                let constant = vs.iter().all(|v| v.constant);
                // An f32 literal operand of fma is read at run time like those
                // of + - * / (see `binary`).
                let vs: Vec<Value> = vs
                    .into_iter()
                    .map(|v| {
                        // 16-bit literal operands too: the emulation's f32 steps
                        // must not be folded with them.
                        let float_lit = (*f == MathFn::Fma && v.is_f32_leaf())
                            || (t.is_16bit() && v.leaf.is_some());
                        self.spell(v, constant || float_lit)
                    })
                    .collect();
                let texts: Vec<String> = vs.iter().map(|v| v.text.clone()).collect();
                let text = self.math(*f, t, &texts)?;
                let mut v = Value::op(text, t, &vs.iter().collect::<Vec<_>>());
                if t.is_float() {
                    // Opaque operands (`opaque_operands`) nest three deeper.
                    v.depth += 3;
                }
                v
            }
        };
        Ok(self.bounded(v))
    }

    /// `v`, or a `let` temporary holding it when it nests too deep.
    fn bounded(&mut self, v: Value) -> Value {
        if v.depth <= MAX_EXPR_DEPTH || v.leaf.is_some() {
            return v;
        }
        let name = self.temp("e");
        self.line(&format!("let {name}: {} = {};", wgsl_scalar(v.ty), v.text));
        Value {
            text: name,
            ty: v.ty,
            depth: 0,
            constant: v.constant,
            leaf: None,
            opaque_at: v.opaque_at,
        }
    }

    pub(super) fn axis_size(&self, axis: &str) -> Result<u32, EmitError> {
        if let Some(a) = self.unit.mesh.axis(axis) {
            return Ok(a.size);
        }
        self.state
            .plan
            .meshes
            .iter()
            .find_map(|m| m.axis(axis))
            .map(|a| a.size)
            .ok_or_else(|| {
                self.invalid(format!(
                    "axis_size({axis}): no mesh in scope has axis `{axis}`"
                ))
            })
    }

    /// `a && b` and `a || b` evaluate `b` only when `a` does not decide
    /// (docs/design.md: no load, no out-of-bounds report). WGSL's own operators
    /// short-circuit; when `b` needed temporaries (statements), they run
    /// under an `if` on `a` instead, so they too are skipped.
    fn logic(&mut self, op: BinaryOp, a: &Expr, b: &Expr) -> Result<Value, EmitError> {
        let x = self.node(a)?;
        let mark = self.body.len();
        let y = self.node(b)?;
        let constant = x.constant && y.constant;
        let x = self.spell(x, constant);
        let y = self.spell(y, constant);
        if self.body.len() == mark {
            return Ok(Value::op(
                binary_text(op, false, &x.text, &y.text),
                ScalarType::Bool,
                &[&x, &y],
            ));
        }
        // `b` emitted statements: move them under `if (a)` (`if (!a)` for `||`).
        let statements = self.body.split_off(mark);
        let flag = self.temp(if op == BinaryOp::LogicAnd {
            "and"
        } else {
            "or"
        });
        self.line(&format!("var {flag}: bool = {};", x.text));
        let test = if op == BinaryOp::LogicAnd {
            flag.clone()
        } else {
            format!("!{flag}")
        };
        self.line(&format!("if ({test}) {{"));
        for line in statements.lines() {
            self.body.push_str("  ");
            self.body.push_str(line);
            self.body.push('\n');
        }
        self.depth += 1;
        self.line(&format!("{flag} = {};", y.text));
        self.depth -= 1;
        self.line("}");
        Ok(Value::text(flag, ScalarType::Bool, false))
    }

    fn binary(&mut self, op: BinaryOp, a: &Expr, b: &Expr) -> Result<Value, EmitError> {
        if matches!(op, BinaryOp::LogicAnd | BinaryOp::LogicOr) {
            return self.logic(op, a, b);
        }
        let x = self.node(a)?;
        let y = self.node(b)?;
        let t = x.ty;
        let constant = x.constant && y.constant;
        if matches!(op, BinaryOp::Shl | BinaryOp::Shr) {
            let x = self.spell(x, constant);
            // Shift amounts are taken modulo 32; WGSL wants a u32 amount.
            let (amount, y) = match (&y.leaf, b) {
                (Some(l), Expr::Lit(_)) if !constant => (format!("{}u", l.to_bits() & 31), y),
                _ => {
                    let y = self.spell(y, constant);
                    let word = if y.ty == ScalarType::U32 {
                        y.text.clone()
                    } else {
                        format!("bitcast<u32>({})", y.text)
                    };
                    (format!("({word} & 31u)"), y)
                }
            };
            return Ok(Value::op(
                binary_text(op, false, &x.text, &amount),
                t,
                &[&x, &y],
            ));
        }
        if y.ty != t {
            return Err(self.invalid(format!("`{op:?}` between {t:?} and {:?}", y.ty)));
        }
        if t.is_16bit() {
            return self.binary_half(op, x, y, constant);
        }
        // f32 literal operands of arithmetic are read at run time: lavapipe
        // reassociates operations on constants (`(1.0 + x) + -1.5` as
        // `x + -0.5`, one ulp off), and folds `x * 0.0` to 0.0 (wrong for inf
        // and NaN). A run-time value keeps every operation as written.
        let float_arith = t == ScalarType::F32 && is_arithmetic(op);
        let rx = constant || (float_arith && x.is_f32_leaf());
        let ry = constant || (float_arith && y.is_f32_leaf());
        let x = self.spell(x, rx);
        let y = self.spell(y, ry);
        let result = if op.is_comparison() {
            ScalarType::Bool
        } else {
            t
        };
        let (xt, yt) = match t {
            // Every f32 `+ - * /` and comparison: opaque operands (a product
            // that is already opaque with its position's word as it is).
            ScalarType::F32 if op != BinaryOp::Rem => self.opaque_binary(op, &x, &y),
            _ => (x.text.clone(), y.text.clone()),
        };
        let mut opaque_at = None;
        let text = match (op, t) {
            // No contraction into fma: the product itself is opaque too, so
            // no consumer that adds it (an f32 atomic add, a warp sum) sees a
            // multiply it could fuse with. Fast math allows contraction, but
            // the operands of `+` are opaque anyway: WGSL never contracts.
            (BinaryOp::Mul, ScalarType::F32) => {
                let product = binary_text(op, true, &xt, &yt);
                opaque_at = Some(0);
                self.opaque_operands_at(t, &[(&product, 0)]).remove(0)
            }
            (BinaryOp::Div, ScalarType::I32) => {
                self.call(Helper::DivI32, "mpmd_div_i32", &[xt, yt])
            }
            (BinaryOp::Div, ScalarType::U32) => {
                self.call(Helper::DivU32, "mpmd_div_u32", &[xt, yt])
            }
            (BinaryOp::Rem, ScalarType::I32) => {
                self.call(Helper::RemI32, "mpmd_rem_i32", &[xt, yt])
            }
            (BinaryOp::Rem, ScalarType::U32) => {
                self.call(Helper::RemU32, "mpmd_rem_u32", &[xt, yt])
            }
            (BinaryOp::Rem, _) => self.call(Helper::Fmod, "mpmd_fmod", &[xt, yt]),
            _ => binary_text(op, t == ScalarType::F32, &xt, &yt),
        };
        let mut v = Value::op(text, result, &[&x, &y]);
        v.opaque_at = opaque_at;
        if t == ScalarType::F32 && op != BinaryOp::Rem {
            // Opaque operands nest three deeper, a product six.
            v.depth += if op == BinaryOp::Mul { 6 } else { 3 };
        }
        Ok(v)
    }
}

/// The zero-word positions of the two operands of binary float operation
/// `op` (`UnitEmitter::opaque_binary`).
fn binary_positions(op: BinaryOp) -> [usize; 2] {
    match op {
        BinaryOp::Add | BinaryOp::Mul => [0, 0],
        _ => [0, 1],
    }
}

/// `+ - * / %`: the operations whose f32 and 16-bit literal operands are read
/// at run time (see `UnitEmitter::binary`).
pub(super) fn is_arithmetic(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem
    )
}
