//! Compile-time constant integer and bool expressions, with docs/design.md's
//! numerics (wrapping arithmetic, division by zero returns the dividend,
//! remainder by zero is 0, shift amounts modulo 32). Floats are not folded.
//! Validation folds indices for E0047 (the WGSL compiler rejects a constant
//! index out of range, and on every backend the access could only fail); the
//! WGSL backend folds a block's wait conditions for its block id to form the
//! first dispatch wave of a split program.
//!
//! Constants are literals, the leaves [`Leaves`] knows (names, `axis_size`,
//! `axis_index`), and operators, casts between integers, `select` and
//! integer `abs`/`min`/`max` over constants.

use crate::ir::{BinaryOp, Expr, Literal, MathFn, ScalarType, UnaryOp};

/// The values the caller knows of an expression's leaves.
pub struct Leaves<'a> {
    /// A constant `let` (or other name) by name.
    pub name: &'a dyn Fn(&str) -> Option<Literal>,
    /// An axis in scope, by name.
    pub axis_size: &'a dyn Fn(&str) -> Option<u32>,
    /// An axis index the caller fixed (a given block's coordinate).
    pub axis_index: &'a dyn Fn(&str) -> Option<u32>,
}

/// The value of `e` if it is a compile-time constant given `leaves`.
pub fn const_value(e: &Expr, leaves: &Leaves) -> Option<Literal> {
    let value = |x: &Expr| const_value(x, leaves);
    use Literal::{Bool, I32, U32};
    Some(match e {
        Expr::Lit(lit @ (I32(_) | U32(_) | Bool(_))) => *lit,
        Expr::Lit(Literal::F32(_) | Literal::F16(_) | Literal::BF16(_))
        | Expr::Load(_)
        | Expr::WarpPosition(_)
        | Expr::Bitcast(..) => return None,
        Expr::Var(n) => (leaves.name)(n)?,
        Expr::AxisSize(axis) => U32((leaves.axis_size)(axis)?),
        Expr::AxisIndex(axis) => U32((leaves.axis_index)(axis)?),
        Expr::Unary(op, x) => match (op, value(x)?) {
            (UnaryOp::Neg, I32(v)) => I32(v.wrapping_neg()),
            (UnaryOp::Neg, U32(v)) => U32(v.wrapping_neg()),
            (UnaryOp::BitNot, I32(v)) => I32(!v),
            (UnaryOp::BitNot, U32(v)) => U32(!v),
            (UnaryOp::Not, Bool(v)) => Bool(!v),
            _ => return None,
        },
        Expr::Binary(op, a, b) => binary(*op, value(a)?, value(b)?)?,
        Expr::Select(c, t, f) => {
            let (t, f) = (value(t)?, value(f)?);
            match value(c)? {
                Bool(c) => {
                    if c {
                        t
                    } else {
                        f
                    }
                }
                _ => return None,
            }
        }
        Expr::Cast(to, x) => match (to, value(x)?) {
            (ScalarType::I32, I32(v)) => I32(v),
            (ScalarType::I32, U32(v)) => I32(v as i32),
            (ScalarType::U32, U32(v)) => U32(v),
            (ScalarType::U32, I32(v)) => U32(v as u32),
            _ => return None,
        },
        Expr::Math(f, args) => {
            let args: Vec<Literal> = args.iter().map(value).collect::<Option<_>>()?;
            match (f, args.as_slice()) {
                (MathFn::Abs, [I32(v)]) => I32(v.wrapping_abs()),
                (MathFn::Abs, [U32(v)]) => U32(*v),
                (MathFn::Min, [I32(a), I32(b)]) => I32(*a.min(b)),
                (MathFn::Min, [U32(a), U32(b)]) => U32(*a.min(b)),
                (MathFn::Max, [I32(a), I32(b)]) => I32(*a.max(b)),
                (MathFn::Max, [U32(a), U32(b)]) => U32(*a.max(b)),
                (f, [I32(v)]) => I32(bit_operation(*f, *v as u32)? as i32),
                (f, [U32(v)]) => U32(bit_operation(*f, *v)?),
                _ => return None,
            }
        }
    })
}

/// A bit operation (`MathFn::is_bit_operation`) on the 32 bits of an `i32`
/// or `u32`, which it reads and gives as the same type: the one definition
/// the interpreter and constant folding share (docs/design.md, "Bit
/// operations"). `None` for any other function.
pub fn bit_operation(f: MathFn, x: u32) -> Option<u32> {
    Some(match f {
        MathFn::Popcount => x.count_ones(),
        MathFn::Clz => x.leading_zeros(),
        MathFn::Ffs if x == 0 => 0,
        MathFn::Ffs => x.trailing_zeros() + 1,
        MathFn::Brev => x.reverse_bits(),
        _ => return None,
    })
}

fn binary(op: BinaryOp, a: Literal, b: Literal) -> Option<Literal> {
    use BinaryOp::*;
    use Literal::{Bool, I32, U32};
    Some(match (a, b) {
        // A shift amount of the other integer type: its bits, modulo 32.
        (I32(a), U32(b)) if matches!(op, Shl | Shr) => return binary(op, I32(a), I32(b as i32)),
        (U32(a), I32(b)) if matches!(op, Shl | Shr) => return binary(op, U32(a), U32(b as u32)),
        (I32(a), I32(b)) => match op {
            Add => I32(a.wrapping_add(b)),
            Sub => I32(a.wrapping_sub(b)),
            Mul => I32(a.wrapping_mul(b)),
            Div if b == 0 => I32(a),
            Div => I32(a.wrapping_div(b)),
            Rem if b == 0 => I32(0),
            Rem => I32(a.wrapping_rem(b)),
            BitAnd => I32(a & b),
            BitOr => I32(a | b),
            BitXor => I32(a ^ b),
            Shl => I32(a.wrapping_shl(b as u32)),
            Shr => I32(a.wrapping_shr(b as u32)),
            Eq => Bool(a == b),
            Ne => Bool(a != b),
            Lt => Bool(a < b),
            Le => Bool(a <= b),
            Gt => Bool(a > b),
            Ge => Bool(a >= b),
            LogicAnd | LogicOr => return None,
        },
        (U32(a), U32(b)) => match op {
            Add => U32(a.wrapping_add(b)),
            Sub => U32(a.wrapping_sub(b)),
            Mul => U32(a.wrapping_mul(b)),
            Div if b == 0 => U32(a),
            Div => U32(a / b),
            Rem if b == 0 => U32(0),
            Rem => U32(a % b),
            BitAnd => U32(a & b),
            BitOr => U32(a | b),
            BitXor => U32(a ^ b),
            Shl => U32(a.wrapping_shl(b)),
            Shr => U32(a.wrapping_shr(b)),
            Eq => Bool(a == b),
            Ne => Bool(a != b),
            Lt => Bool(a < b),
            Le => Bool(a <= b),
            Gt => Bool(a > b),
            Ge => Bool(a >= b),
            LogicAnd | LogicOr => return None,
        },
        (Bool(a), Bool(b)) => match op {
            LogicAnd => Bool(a && b),
            LogicOr => Bool(a || b),
            Eq => Bool(a == b),
            Ne => Bool(a != b),
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{axis_size, var};

    fn fold(e: Expr) -> Option<Literal> {
        let name = |n: &str| (n == "four").then_some(Literal::U32(4));
        let axis = |a: &str| (a == "t").then_some(64);
        let index = |a: &str| (a == "b").then_some(3);
        const_value(
            &e,
            &Leaves {
                name: &name,
                axis_size: &axis,
                axis_index: &index,
            },
        )
    }

    #[test]
    fn folds_with_the_ir_numerics() {
        assert_eq!(fold(axis_size("t")), Some(Literal::U32(64)));
        assert_eq!(fold(axis_size("t") - 1u32), Some(Literal::U32(63)));
        assert_eq!(fold(var("four") * 16u32), Some(Literal::U32(64)));
        assert_eq!(fold(Expr::from(0u32) - 1u32), Some(Literal::U32(u32::MAX)));
        assert_eq!(fold(Expr::from(7i32) / 0i32), Some(Literal::I32(7)));
        assert_eq!(fold(Expr::from(7i32) % 0i32), Some(Literal::I32(0)));
        assert_eq!(
            fold(Expr::from(i32::MIN) / -1i32),
            Some(Literal::I32(i32::MIN))
        );
        assert_eq!(fold(Expr::from(1u32) << 33u32), Some(Literal::U32(2)));
        assert_eq!(fold(var("n") + 1u32), None);
        assert_eq!(fold(crate::ir::axis_index("t")), None);
        assert_eq!(
            fold(crate::ir::axis_index("b") + 1u32),
            Some(Literal::U32(4))
        );
    }
}
