//! docs/design.md's numerics where WGSL differs: 16-bit floats emulated on their
//! bits, casts that saturate, integer division and remainder by zero, `min`
//! and `max` with NaN, and the math functions.

use mpmd_core::ir::{BinaryOp, Literal, MathFn, ScalarType};

use super::expr::{is_arithmetic, Value};
use super::helpers::Helper;
use super::syntax::{binary_text, math_builtin, wgsl_scalar};
use super::unit::UnitEmitter;
use super::EmitError;

/// The name of a 16-bit float type in helper names (`f16`, `bf16`).
pub(super) fn half_name(t: ScalarType) -> &'static str {
    if t == ScalarType::BF16 {
        "bf16"
    } else {
        "f16"
    }
}

/// The bits of 1.0 in a 16-bit float type.
fn half_one(t: ScalarType) -> u32 {
    mpmd_core::numerics::from_f32(t, 1.0).map_or(0, u32::from)
}

impl UnitEmitter<'_, '_> {
    /// A binary operation on 16-bit floats: on the exact f32 values, rounded
    /// once to the type (`+ - * / %`); comparisons on the values. Literal
    /// operands of arithmetic are read at run time, as for f32.
    pub(super) fn binary_half(
        &mut self,
        op: BinaryOp,
        x: Value,
        y: Value,
        constant: bool,
    ) -> Result<Value, EmitError> {
        let t = x.ty;
        let rx = constant || (is_arithmetic(op) && x.leaf.is_some());
        let ry = constant || (is_arithmetic(op) && y.leaf.is_some());
        let x = self.spell(x, rx);
        let y = self.spell(y, ry);
        let (text, ty) = match op {
            BinaryOp::Rem => {
                let (a, b) = (self.widen(t, &x.text), self.widen(t, &y.text));
                let r = self.call(Helper::Fmod, "mpmd_fmod", &[a, b]);
                (self.narrow(t, &r), t)
            }
            _ => {
                // The f32 operation on opaque bits (`opaque_operands`).
                let (a, b) = self.opaque_binary(op, &x, &y);
                let (a, b) = (self.widen(t, &a), self.widen(t, &b));
                self.binary_half_values(op, t, &a, &b)?
            }
        };
        let mut v = Value::op(text, ty, &[&x, &y]);
        // The widening and narrowing calls and the opaque bits.
        v.depth += 5;
        Ok(v)
    }

    /// `a op b` on the widened f32 values `a`, `b` of two 16-bit floats of
    /// type `t` (not `%`): the text and its type.
    fn binary_half_values(
        &mut self,
        op: BinaryOp,
        t: ScalarType,
        a: &str,
        b: &str,
    ) -> Result<(String, ScalarType), EmitError> {
        Ok(match op {
            // The product of two 16-bit floats is exact in f32: no contraction can change it.
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                (self.narrow(t, &binary_text(op, true, a, b)), t)
            }
            _ if op.is_comparison() => (binary_text(op, true, a, b), ScalarType::Bool),
            other => return Err(self.invalid(format!("`{other:?}` on `{t}`"))),
        })
    }

    /// The exact f32 value of 16-bit float bits `v` of type `t`.
    fn widen(&mut self, t: ScalarType, v: &str) -> String {
        self.state.helpers.insert(Helper::Widen(t));
        format!("mpmd_{}_to_f32({v})", half_name(t))
    }

    /// The f32 `v` rounded to the 16-bit float type `t`, as bits.
    fn narrow(&mut self, t: ScalarType, v: &str) -> String {
        self.state.helpers.insert(Helper::Narrow(t));
        format!("mpmd_f32_to_{}({v})", half_name(t))
    }

    pub(super) fn call(&mut self, helper: Helper, name: &str, args: &[String]) -> String {
        self.state.helpers.insert(helper);
        format!("{name}({})", args.join(", "))
    }

    pub(super) fn cast(&mut self, from: ScalarType, to: ScalarType, v: String) -> String {
        use ScalarType::*;
        match (from, to) {
            _ if from == to => v,
            (F32, I32) => self.call(Helper::F32ToI32, "mpmd_f32_to_i32", &[v]),
            (F32, U32) => self.call(Helper::F32ToU32, "mpmd_f32_to_u32", &[v]),
            (F32, Bool) => format!("((bitcast<u32>({v}) & 0x7fffffffu) != 0u)"),
            (I32, Bool) => format!("({v} != 0i)"),
            (U32, Bool) => format!("({v} != 0u)"),
            // 16-bit floats: through the exact f32; to them, rounded once.
            (F16 | BF16, F32) => self.widen(from, &v),
            (F32, F16 | BF16) => self.narrow(to, &v),
            (F16 | BF16, F16 | BF16) => {
                let wide = self.widen(from, &v);
                self.narrow(to, &wide)
            }
            (F16 | BF16, I32) => {
                let wide = self.widen(from, &v);
                self.call(Helper::F32ToI32, "mpmd_f32_to_i32", &[wide])
            }
            (F16 | BF16, U32) => {
                let wide = self.widen(from, &v);
                self.call(Helper::F32ToU32, "mpmd_f32_to_u32", &[wide])
            }
            (F16 | BF16, Bool) => format!("(({v} & 0x7fffu) != 0u)"),
            (I32, F16 | BF16) => {
                let odd = self.call(Helper::IntToF32Odd, "mpmd_i32_to_f32_odd", &[v]);
                self.narrow(to, &odd)
            }
            (U32, F16 | BF16) => {
                let odd = self.call(Helper::IntToF32Odd, "mpmd_u32_to_f32_odd", &[v]);
                self.narrow(to, &odd)
            }
            (Bool, F16 | BF16) => format!("select(0u, {}u, {v})", half_one(to)),
            // i32 <-> u32 keep the bits; int -> f32 rounds to nearest; bool -> 0/1.
            (_, t) => format!("{}({v})", wgsl_scalar(t)),
        }
    }

    pub(super) fn math(
        &mut self,
        f: MathFn,
        t: ScalarType,
        v: &[String],
    ) -> Result<String, EmitError> {
        let arity = f.arity();
        if v.len() != arity {
            return Err(self.invalid(format!("`{}` takes {arity} argument(s)", f.name())));
        }
        let a = v[0].clone();
        if t.is_16bit() {
            return Ok(self.math_half(f, t, v));
        }
        Ok(match (f, t) {
            (MathFn::Abs, ScalarType::I32) => self.call(Helper::AbsI32, "mpmd_abs_i32", &[a]),
            (MathFn::Abs, ScalarType::U32) => a,
            // The bit operations on i32 or u32, the result of that type.
            (MathFn::Popcount, _) => format!("countOneBits({a})"),
            (MathFn::Clz, _) => format!("countLeadingZeros({a})"),
            // firstTrailingBit(0) is all ones (-1): plus one is CUDA's __ffs.
            (MathFn::Ffs, ScalarType::I32) => format!("(firstTrailingBit({a}) + 1i)"),
            (MathFn::Ffs, _) => format!("(firstTrailingBit({a}) + 1u)"),
            (MathFn::Brev, _) => format!("reverseBits({a})"),
            (MathFn::Min, ScalarType::F32) => self.call(Helper::MinF32, "mpmd_min_f32", v),
            (MathFn::Max, ScalarType::F32) => self.call(Helper::MaxF32, "mpmd_max_f32", v),
            // Rounded once on the bits: adapters may compute WGSL's `fma`
            // with two roundings (lavapipe does).
            (MathFn::Fma, ScalarType::F32) => {
                let operands = self.opaque_operands(t, v);
                self.call(Helper::FmaF32, "mpmd_fma_f32", &operands)
            }
            (_, ScalarType::F32) => {
                let operands = self.opaque_operands(t, v);
                format!("{}({})", math_builtin(f), operands.join(", "))
            }
            _ => format!("{}({})", math_builtin(f), v.join(", ")),
        })
    }

    /// A math function on 16-bit floats (`v` has its arity): `abs`, `min`,
    /// `max` on the values; `fma` rounded once; the others the f32 function
    /// of the exact values, rounded once.
    fn math_half(&mut self, f: MathFn, t: ScalarType, v: &[String]) -> String {
        let n = half_name(t);
        match f {
            MathFn::Abs => format!("({} & 0x7fffu)", v[0]),
            MathFn::Min | MathFn::Max => {
                let (helper, what) = if f == MathFn::Min {
                    (Helper::Min16(t), "min")
                } else {
                    (Helper::Max16(t), "max")
                };
                self.call(helper, &format!("mpmd_{what}_{n}"), v)
            }
            MathFn::Fma => {
                let one = self.runtime_literal(Literal::f32(1.0));
                let mut args = self.opaque_operands(t, v);
                args.push(one);
                self.call(Helper::Fma16(t), &format!("mpmd_fma_{n}"), &args)
            }
            _ => {
                let bits = self.opaque_operands(t, v);
                let wide: Vec<String> = bits.iter().map(|a| self.widen(t, a)).collect();
                self.narrow(t, &format!("{}({})", math_builtin(f), wide.join(", ")))
            }
        }
    }
}
