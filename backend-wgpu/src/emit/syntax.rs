//! How mpmd's types, literals and operators are spelled in WGSL, one table
//! each, and how literals, refs and accesses are described in the generated
//! comments.

use mpmd_core::ir::{AtomicOp, BinaryOp, Expr, Literal, MathFn, RefAccess, RefType, ScalarType};

use super::bindings::WordType;
use mpmd_core::host::words_for;

/// The WGSL type of a scalar value.
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

/// The fixed-size WGSL array of `word`s that holds `elements` elements of
/// `elem` (16-bit elements two a word), at least one word: WGSL has no
/// empty arrays.
pub(super) fn fixed_array(word: &str, elem: ScalarType, elements: u64) -> String {
    format!("array<{word}, {}>", words_for(elem, elements).max(1))
}

/// A scalar of type `t` from `raw`, an expression of the type `word` holds
/// (a `u32` parameter word, or a storage word read).
pub(super) fn from_word(t: ScalarType, word: WordType, raw: &str) -> String {
    match t {
        ScalarType::Bool => format!("({raw} != 0u)"),
        // A 16-bit scalar is the low half of its word.
        ScalarType::F16 | ScalarType::BF16 => format!("({raw} & 0xffffu)"),
        t if t == word.value_type() => raw.to_string(),
        t => format!("bitcast<{}>({raw})", wgsl_scalar(t)),
    }
}

/// `value`, a scalar of type `t`, as the type `word` holds.
pub(super) fn to_word(t: ScalarType, word: WordType, value: &str) -> String {
    match t {
        ScalarType::Bool => format!("select(0u, 1u, {value})"),
        t if t == word.value_type() => value.to_string(),
        _ => format!("bitcast<{}>({value})", wgsl_scalar(word.value_type())),
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

/// The WGSL operator of a binary operation: WGSL spells every operator as
/// mpmd's text does (`ir::binary_symbol`, the one table). `/` and `%` are
/// WGSL's, which differ from docs/design.md's on integers and `%` on floats: the
/// emitter calls helpers for those.
fn binary_operator(op: BinaryOp) -> &'static str {
    mpmd_core::ir::binary_symbol(op)
}

/// `(a op b)`. On floats `!=` is `(!(a == b))`: naga emits `!=` as an
/// ordered comparison (false for NaN), and IEEE and Rust say NaN != NaN.
pub(super) fn binary_text(op: BinaryOp, float: bool, a: &str, b: &str) -> String {
    if float && op == BinaryOp::Ne {
        return format!("(!({a} == {b}))");
    }
    format!("({a} {} {b})", binary_operator(op))
}

/// How many operand positions float operations have at most (`fma`): one
/// opaque zero word each (`opaque_operand`).
pub(super) const OPAQUE_POSITIONS: usize = 3;

/// A float operand of a float operation, made opaque to the driver's
/// optimiser: its bits OR'd with `zero_word`, a `0u` read at run time (one
/// word per operand position). The value and its bits are unchanged, but
/// the driver can no longer prove the operand a constant (a zero derived from
/// integers, `f32(d & 0)`, or a loop counter after unrolling) or two operands
/// equal (`x - x`), so it cannot apply the identities that hold only without
/// infinities and NaN (`x * 0 = 0`, `x - x = 0`, `fma(x, 0, c) = c`): the
/// SPIR-V that naga emits does not declare `SignedZeroInfNanPreserve`, and
/// lavapipe applies them. An operand that is not a bare multiply also keeps
/// the driver from contracting `a * b + c` into an fma. `ty` is `f32` (the
/// value, through the `mpmd_opaque` helper) or a 16-bit float (its bits in a
/// `u32`).
pub(super) fn opaque_operand(ty: ScalarType, value: &str, zero_word: &str) -> String {
    if ty.is_16bit() {
        format!("({value} | {zero_word})")
    } else {
        format!("mpmd_opaque({value}, {zero_word})")
    }
}

/// The WGSL built-in of a math function on f32 (the others are helpers).
pub(super) fn math_builtin(f: MathFn) -> &'static str {
    match f {
        MathFn::Rsqrt => "inverseSqrt",
        f => f.name(),
    }
}

/// The WGSL built-in of an atomic operation on a 32-bit integer word.
pub(super) fn atomic_builtin(op: AtomicOp) -> &'static str {
    match op {
        AtomicOp::Load => "atomicLoad",
        AtomicOp::Store => "atomicStore",
        AtomicOp::Add => "atomicAdd",
        AtomicOp::Min => "atomicMin",
        AtomicOp::Max => "atomicMax",
        AtomicOp::And => "atomicAnd",
        AtomicOp::Or => "atomicOr",
        AtomicOp::Xor => "atomicXor",
        AtomicOp::Exchange => "atomicExchange",
        AtomicOp::CompareExchange => "atomicCompareExchangeWeak",
    }
}

/// A literal in a comment: as the text format writes it, a NaN with its bits.
pub(super) fn describe_literal(lit: Literal) -> String {
    match lit {
        Literal::F32(bits) if bits.to_f32().is_nan() => format!("NaN (0x{:08x})", bits.0),
        lit => mpmd_core::text::print_literal(lit),
    }
}

/// A ref type in a comment, without its owner: `gmem<f32[64]>` (a
/// semaphore shows its `i32` counters, unlike the text format).
pub(super) fn describe_ref_type(ty: &RefType) -> String {
    format!("{}<{}{:?}>", ty.space.keyword(), ty.elem, ty.shape)
}

/// An access in a comment, as the text format writes it.
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
