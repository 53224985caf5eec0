//! How mpmd's scalars are spelt in CUDA C: the one home of their C types
//! (by where a value lives) and of constants and literals. Operators are
//! spelt as in mpmd's text (`ir::binary_symbol`), which took C's. The
//! helpers named here (`mpmd_half`, `mpmd_round_f16`, ...) are the
//! prelude's (`prelude.cu`).

use mpmd_core::ir::{Literal, MemorySpace, RefType, ScalarType};
use mpmd_core::numerics;

/// Where a scalar lives, which decides its C type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Home {
    /// A C variable (`let`, `var`, loop counter, temporary) or a local
    /// array's element: the type itself.
    Value,
    /// An element of a buffer or of smem: a `bool` is a `u32` word.
    Memory,
    /// A scalar kernel parameter: a `bool` and a 16-bit float travel as a
    /// `u32` word (the 16-bit float's bits in the low half).
    Parameter,
}

/// The C type of an IR scalar of type `t` living in `home`.
pub(crate) fn c_type(t: ScalarType, home: Home) -> &'static str {
    match (t, home) {
        (ScalarType::Bool, Home::Memory | Home::Parameter) => "u32",
        (ScalarType::F16 | ScalarType::BF16, Home::Parameter) => "u32",
        (ScalarType::F32, _) => "float",
        (ScalarType::I32, _) => "int",
        (ScalarType::U32, _) => "u32",
        (ScalarType::Bool, _) => "bool",
        (ScalarType::F16, _) => "mpmd_half",
        (ScalarType::BF16, _) => "mpmd_bfloat16",
    }
}

/// The C type of one element of a buffer of type `ty`: a semaphore is an
/// `int` counter whatever element type the plan gives it.
pub(crate) fn buffer_element_type(ty: &RefType) -> &'static str {
    let elem = if ty.space == MemorySpace::Sem {
        ScalarType::I32
    } else {
        ty.elem
    };
    c_type(elem, Home::Memory)
}

/// The value of scalar parameter `c_name` (declared with the [`Home::Parameter`]
/// type) as its IR type.
pub(crate) fn parameter_value(t: ScalarType, c_name: &str) -> String {
    match t {
        ScalarType::Bool => format!("({c_name} != {})", unsigned(0u32)),
        t if t.is_16bit() => from_low_half(t, c_name),
        _ => c_name.to_string(),
    }
}

/// What a host passes for a scalar parameter of IR type `t`, given the
/// `u32` word holding its bits (what `Literal::to_bits` gives).
pub(crate) fn parameter_from_word(t: ScalarType, word: &str) -> String {
    match t {
        ScalarType::F32 => format!("__uint_as_float({word})"),
        ScalarType::I32 => format!("(int){word}"),
        // Declared `u32` (`c_type(t, Home::Parameter)`): the word itself.
        _ => word.to_string(),
    }
}

/// An unsigned constant, `{v}u`: C types it `unsigned int` when it fits in
/// 32 bits, as every count, extent and id the emitter prints does.
pub(crate) fn unsigned(v: impl Into<u64>) -> String {
    format!("{}u", v.into())
}

/// The width of an offset into a buffer: 32 bits when the whole buffer
/// fits, 64 otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    U32,
    U64,
}

impl Width {
    /// The width that indexes `len` elements.
    pub(crate) fn for_len(len: u64) -> Self {
        if len > u64::from(u32::MAX) {
            Width::U64
        } else {
            Width::U32
        }
    }

    pub(crate) fn c_type(self) -> &'static str {
        match self {
            Width::U32 => "u32",
            Width::U64 => "u64",
        }
    }

    /// A constant of this width.
    pub(crate) fn constant(self, v: impl Into<u64>) -> String {
        match self {
            Width::U32 => unsigned(v),
            Width::U64 => format!("{}ull", v.into()),
        }
    }

    /// `text` (a `u32` expression) converted to this width.
    pub(crate) fn widen(self, text: &str) -> String {
        match self {
            Width::U32 => text.to_string(),
            Width::U64 => format!("(u64)({text})"),
        }
    }
}

/// An IR literal, bit-exact.
pub(crate) fn literal(l: Literal) -> String {
    match l {
        Literal::F32(b) => f32_literal(b.0),
        Literal::I32(i32::MIN) => "(-2147483647 - 1)".to_string(),
        Literal::I32(v) if v < 0 => format!("({v})"),
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => unsigned(v),
        Literal::Bool(b) => b.to_string(),
        Literal::F16(bits) => from_low_half(ScalarType::F16, &format!("0x{bits:04x}u")),
        Literal::BF16(bits) => from_low_half(ScalarType::BF16, &format!("0x{bits:04x}u")),
    }
}

/// The literal of 16-bit float type `t` nearest to `v` (exact for the
/// small integers the emitter needs).
pub(crate) fn sixteen_bit_literal(t: ScalarType, v: f32) -> String {
    let bits = numerics::from_f32(t, v).map_or(0, u32::from);
    literal(Literal::from_bits(t, bits))
}

/// An `f32` literal, bit-exact.
fn f32_literal(bits: u32) -> String {
    let v = f32::from_bits(bits);
    if v.is_finite() {
        let text = format!("{v:?}");
        // Exact in binary64 as well, so no double rounding can change it
        // however the compiler parses it.
        if text.parse::<f64>().ok() == Some(v as f64) {
            return if v.is_sign_negative() {
                format!("(-{}f)", &text[1..])
            } else {
                format!("{text}f")
            };
        }
    }
    format!("__uint_as_float(0x{bits:08x}u)")
}

/// The prelude's name suffix of a 16-bit float type (`mpmd_round_f16`, ...).
pub(crate) fn sixteen_bit_suffix(t: ScalarType) -> Option<&'static str> {
    match t {
        ScalarType::F16 => Some("f16"),
        ScalarType::BF16 => Some("bf16"),
        _ => None,
    }
}

/// A 16-bit value's text widened to its exact `f32` (other types unchanged).
pub(crate) fn widen(t: ScalarType, v: &str) -> String {
    match sixteen_bit_suffix(t) {
        Some(s) => format!("mpmd_widen_{s}({v})"),
        None => v.to_string(),
    }
}

/// An `f32` text rounded once to the 16-bit type `t` (other types unchanged).
pub(crate) fn round_to(t: ScalarType, v: &str) -> String {
    match sixteen_bit_suffix(t) {
        Some(s) => format!("mpmd_round_{s}({v})"),
        None => v.to_string(),
    }
}

/// Levels of parentheses a widening or a rounding adds to C text (see
/// [`super::MAX_EXPR_DEPTH`]).
pub(crate) fn widening_depth(t: ScalarType) -> u32 {
    u32::from(t.is_16bit())
}

/// The 32-bit word that holds value `v` of type `t` (16-bit values in the
/// low half, `bool` as 0 or 1): what a warp shuffle moves.
pub(crate) fn word_of(t: ScalarType, v: &str) -> String {
    match t {
        ScalarType::F32 => format!("__float_as_uint({v})"),
        ScalarType::U32 => v.to_string(),
        t if t.is_16bit() => format!("(u32)({v}).bits"),
        _ => format!("(u32)({v})"),
    }
}

/// The value of type `t` that the word `w` holds ([`word_of`]'s inverse).
pub(crate) fn from_word(t: ScalarType, w: &str) -> String {
    match t {
        ScalarType::F32 => format!("__uint_as_float({w})"),
        ScalarType::I32 => format!("(int)({w})"),
        ScalarType::U32 => w.to_string(),
        ScalarType::Bool => format!("({w} != {})", unsigned(0u32)),
        t => from_low_half(t, w),
    }
}

/// The prelude's constructor of a 16-bit value from the low half of a `u32`.
pub(crate) fn from_low_half(t: ScalarType, v: &str) -> String {
    match t {
        ScalarType::BF16 => format!("mpmd_bfloat16_bits({v})"),
        _ => format!("mpmd_half_bits({v})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_literals_are_exact() {
        assert_eq!(f32_literal(1.0f32.to_bits()), "1.0f");
        assert_eq!(f32_literal((-2.5f32).to_bits()), "(-2.5f)");
        assert_eq!(f32_literal((-0.0f32).to_bits()), "(-0.0f)");
        assert_eq!(
            f32_literal(0.1f32.to_bits()),
            "__uint_as_float(0x3dcccccdu)"
        );
        assert_eq!(
            f32_literal(f32::INFINITY.to_bits()),
            "__uint_as_float(0x7f800000u)"
        );
        assert_eq!(f32_literal(0x7fc0_0001), "__uint_as_float(0x7fc00001u)");
    }

    #[test]
    fn integer_literals() {
        assert_eq!(literal(Literal::I32(i32::MIN)), "(-2147483647 - 1)");
        assert_eq!(literal(Literal::I32(-7)), "(-7)");
        assert_eq!(literal(Literal::U32(7)), "7u");
        assert_eq!(literal(Literal::Bool(true)), "true");
    }

    #[test]
    fn sixteen_bit_literals_are_bits_in_the_low_half() {
        assert_eq!(
            sixteen_bit_literal(ScalarType::F16, 1.0),
            "mpmd_half_bits(0x3c00u)"
        );
        assert_eq!(
            sixteen_bit_literal(ScalarType::BF16, 1.0),
            "mpmd_bfloat16_bits(0x3f80u)"
        );
        assert_eq!(
            sixteen_bit_literal(ScalarType::BF16, 0.0),
            "mpmd_bfloat16_bits(0x0000u)"
        );
    }

    /// Every scalar type's C type in each home, and how a parameter's word
    /// becomes the parameter: the two sides of one rule.
    #[test]
    fn c_types_by_home() {
        use ScalarType::*;
        let types = [F32, I32, U32, Bool, F16, BF16];
        let of = |home| types.map(|t| c_type(t, home));
        assert_eq!(
            of(Home::Value),
            ["float", "int", "u32", "bool", "mpmd_half", "mpmd_bfloat16"]
        );
        assert_eq!(
            of(Home::Memory),
            ["float", "int", "u32", "u32", "mpmd_half", "mpmd_bfloat16"]
        );
        assert_eq!(
            of(Home::Parameter),
            ["float", "int", "u32", "u32", "u32", "u32"]
        );
        assert_eq!(
            types.map(|t| parameter_from_word(t, "w")),
            ["__uint_as_float(w)", "(int)w", "w", "w", "w", "w"]
        );
        assert_eq!(
            types.map(|t| parameter_value(t, "p")),
            [
                "p",
                "p",
                "p",
                "(p != 0u)",
                "mpmd_half_bits(p)",
                "mpmd_bfloat16_bits(p)"
            ]
        );
    }
}
