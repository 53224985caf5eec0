//! How mpmd's scalar types and literals are spelled in WGSL, and how
//! literals and accesses are described in the generated comments.

use mpmd_core::ir::{Expr, Literal, RefAccess, ScalarType};

pub(super) fn wgsl_scalar(t: ScalarType) -> &'static str {
    match t {
        ScalarType::F32 => "f32",
        ScalarType::I32 => "i32",
        ScalarType::U32 => "u32",
        ScalarType::Bool => "bool",
        // A 16-bit float is its bits in the low half of a u32 (the high half zero).
        ScalarType::F16 | ScalarType::BF16 => "u32",
    }
}

/// A literal WGSL can spell directly, or `None` (NaN, infinities).
pub(super) fn literal_text(lit: Literal) -> Option<String> {
    Some(match lit {
        Literal::F32(bits) => {
            let v = bits.to_f32();
            if !v.is_finite() {
                return None;
            }
            // The exact value of the f32, in the shortest decimal that reads back
            // as that value in f64: a compiler that reads the literal into f32
            // directly and one that reads it through f64 (tint, which also rejects
            // a decimal above f32::MAX, such as f32::MAX's own shortest form
            // `3.4028235e38`) both get this f32.
            let text = format!("{:?}", v as f64);
            if v.is_sign_negative() {
                format!("({text}f)")
            } else {
                format!("{text}f")
            }
        }
        Literal::I32(i32::MIN) => "bitcast<i32>(2147483648u)".to_string(),
        Literal::I32(v) if v < 0 => format!("({v}i)"),
        Literal::I32(v) => format!("{v}i"),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
        Literal::F16(bits) | Literal::BF16(bits) => format!("{bits}u"),
    })
}

pub(super) fn describe_literal(lit: Literal) -> String {
    match lit {
        Literal::F32(bits) => {
            let v = bits.to_f32();
            if v.is_nan() {
                format!("NaN (0x{:08x})", bits.0)
            } else {
                format!("{v:?}")
            }
        }
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
        Literal::F16(_) | Literal::BF16(_) => mpmd_core::text::print_literal(lit),
    }
}

/// A scalar of type `t` from a raw u32 word expression.
pub(super) fn from_word(t: ScalarType, word: &str) -> String {
    match t {
        ScalarType::F32 => format!("bitcast<f32>({word})"),
        ScalarType::I32 => format!("bitcast<i32>({word})"),
        ScalarType::U32 => word.to_string(),
        ScalarType::Bool => format!("({word} != 0u)"),
        // A 16-bit scalar is the low half of its word.
        ScalarType::F16 | ScalarType::BF16 => format!("({word} & 0xffffu)"),
    }
}

pub(super) fn describe_access(a: &RefAccess) -> String {
    let idx = |es: &[Expr]| {
        es.iter()
            .map(mpmd_core::text::print_expr)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &a.block {
        Some(b) => format!("{}@[{}][{}]", a.base, idx(b), idx(&a.index)),
        None => format!("{}[{}]", a.base, idx(&a.index)),
    }
}
