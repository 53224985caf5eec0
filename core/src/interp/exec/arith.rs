//! Lane-wise arithmetic: binary and unary operations with the numerics of
//! docs/design.md, f32 and 16-bit, flushing of subnormals.

#![allow(clippy::needless_range_loop)]

use super::*;

/// The bits of a subnormal f32 become a zero of the same sign; others stay.
#[inline(always)]
pub(super) fn flush(bits: u32) -> u32 {
    if bits & 0x7f80_0000 == 0 {
        bits & 0x8000_0000
    } else {
        bits
    }
}

/// One f32 atomic read-modify-write: `f` of the stored value and the
/// operand, one IEEE operation (`f32::min`/`max` return the other operand
/// when exactly one is NaN, the language's rule). A flushing adapter flushes
/// both operands and the result, as it does for the plain operation.
pub(super) fn f32_rmw(old: u32, operand: u32, ftz: bool, f: impl Fn(f32, f32) -> f32) -> u32 {
    let maybe_flush = |bits: u32| if ftz { flush(bits) } else { bits };
    let x = f32::from_bits(maybe_flush(old));
    let y = f32::from_bits(maybe_flush(operand));
    maybe_flush(f(x, y).to_bits())
}

/// A register's lanes with subnormal f32 values flushed.
pub(super) fn flushed(register: &[u32]) -> Vec<u32> {
    register.iter().map(|&bits| flush(bits)).collect()
}

#[inline(always)]
pub(super) fn ff(f: impl Fn(f32, f32) -> f32) -> impl Fn(u32, u32) -> u32 {
    move |a, b| f(f32::from_bits(a), f32::from_bits(b)).to_bits()
}

#[inline(always)]
pub(super) fn fcmp(f: impl Fn(f32, f32) -> bool) -> impl Fn(u32, u32) -> u32 {
    move |a, b| f(f32::from_bits(a), f32::from_bits(b)) as u32
}

#[inline(always)]
pub(super) fn f1(f: impl Fn(f32) -> f32) -> impl Fn(u32) -> u32 {
    move |a| f(f32::from_bits(a)).to_bits()
}

/// Binds `$f` to the f32 function of a [`FloatBin`] and evaluates `$body`
/// once per operation, so each lane loop is monomorphised (and f32's
/// vectorises). The one definition of each function for f32 and 16 bits.
macro_rules! with_float_bin {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            crate::interp::compile::FloatBin::Add => {
                let $f = |x: f32, y: f32| x + y;
                $body
            }
            crate::interp::compile::FloatBin::Sub => {
                let $f = |x: f32, y: f32| x - y;
                $body
            }
            crate::interp::compile::FloatBin::Mul => {
                let $f = |x: f32, y: f32| x * y;
                $body
            }
            crate::interp::compile::FloatBin::Div => {
                let $f = |x: f32, y: f32| x / y;
                $body
            }
            crate::interp::compile::FloatBin::Rem => {
                let $f = |x: f32, y: f32| x % y;
                $body
            }
            // f32::min/max return the other operand when exactly one is NaN.
            crate::interp::compile::FloatBin::Min => {
                let $f = f32::min;
                $body
            }
            crate::interp::compile::FloatBin::Max => {
                let $f = f32::max;
                $body
            }
            crate::interp::compile::FloatBin::Pow => {
                let $f = f32::powf;
                $body
            }
        }
    };
}

macro_rules! with_float_cmp {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            crate::interp::compile::FloatCmp::Eq => {
                let $f = |x: f32, y: f32| x == y;
                $body
            }
            crate::interp::compile::FloatCmp::Ne => {
                let $f = |x: f32, y: f32| x != y;
                $body
            }
            crate::interp::compile::FloatCmp::Lt => {
                let $f = |x: f32, y: f32| x < y;
                $body
            }
            crate::interp::compile::FloatCmp::Le => {
                let $f = |x: f32, y: f32| x <= y;
                $body
            }
        }
    };
}

macro_rules! with_float_un {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            crate::interp::compile::FloatUn::Neg => {
                let $f = |x: f32| -x;
                $body
            }
            crate::interp::compile::FloatUn::Abs => {
                let $f = f32::abs;
                $body
            }
            crate::interp::compile::FloatUn::Floor => {
                let $f = f32::floor;
                $body
            }
            crate::interp::compile::FloatUn::Ceil => {
                let $f = f32::ceil;
                $body
            }
            crate::interp::compile::FloatUn::Sqrt => {
                let $f = f32::sqrt;
                $body
            }
            crate::interp::compile::FloatUn::Rsqrt => {
                let $f = |x: f32| 1.0 / x.sqrt();
                $body
            }
            crate::interp::compile::FloatUn::Exp => {
                let $f = f32::exp;
                $body
            }
            crate::interp::compile::FloatUn::Log => {
                let $f = f32::ln;
                $body
            }
            crate::interp::compile::FloatUn::Sin => {
                let $f = f32::sin;
                $body
            }
            crate::interp::compile::FloatUn::Cos => {
                let $f = f32::cos;
                $body
            }
            crate::interp::compile::FloatUn::Tanh => {
                let $f = f32::tanh;
                $body
            }
        }
    };
}

/// Runs `$func::<BF, FTZ>($args)` for a format and the flushing flag.
macro_rules! by_format {
    ($fmt:expr, $ftz:expr, $func:ident($($arg:expr),*)) => {
        match ($fmt, $ftz) {
            (crate::interp::compile::Half::F16, false) => $func::<false, false>($($arg),*),
            (crate::interp::compile::Half::F16, true) => $func::<false, true>($($arg),*),
            (crate::interp::compile::Half::BF16, false) => $func::<true, false>($($arg),*),
            (crate::interp::compile::Half::BF16, true) => $func::<true, true>($($arg),*),
        }
    };
}

/// A 16-bit arithmetic operation: the f32 operation on the exact widened
/// operands, rounded once (docs/design.md; `numerics`).
pub(super) fn half_binary<const BF: bool, const FTZ: bool>(
    op: FloatBin,
    d: &mut [u32],
    a: &[u32],
    b: &[u32],
    m: Lanes,
    b_uniform: bool,
) {
    with_float_bin!(op, |f| by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let (mut x, mut y) = ([0f32; CHUNK], [0f32; CHUNK]);
        widen_chunk::<BF, FTZ>(&a[lanes.clone()], &mut x[..n]);
        if b_uniform {
            widen_chunk::<BF, FTZ>(&b[lanes.start..lanes.start + 1], &mut y[..1]);
            let v = y[0];
            y[..n].fill(v);
        } else {
            widen_chunk::<BF, FTZ>(&b[lanes], &mut y[..n]);
        }
        for (x, &y) in x[..n].iter_mut().zip(&y[..n]) {
            *x = f(*x, y);
        }
        round_chunk::<BF, FTZ>(&mut x[..n], out);
    }))
}

/// A 16-bit comparison: on the exact widened values.
pub(super) fn half_compare<const BF: bool, const FTZ: bool>(
    op: FloatCmp,
    d: &mut [u32],
    a: &[u32],
    b: &[u32],
    m: Lanes,
) {
    with_float_cmp!(op, |f| by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let (mut x, mut y) = ([0f32; CHUNK], [0f32; CHUNK]);
        widen_chunk::<BF, FTZ>(&a[lanes.clone()], &mut x[..n]);
        widen_chunk::<BF, FTZ>(&b[lanes], &mut y[..n]);
        for ((o, &x), &y) in out.iter_mut().zip(&x[..n]).zip(&y[..n]) {
            *o = f(x, y) as u32;
        }
    }))
}

/// A 16-bit unary operation or math function: the f32 function of the
/// widened value, rounded once.
pub(super) fn half_unary<const BF: bool, const FTZ: bool>(
    op: FloatUn,
    d: &mut [u32],
    a: &[u32],
    m: Lanes,
) {
    with_float_un!(op, |f| by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let mut x = [0f32; CHUNK];
        widen_chunk::<BF, FTZ>(&a[lanes], &mut x[..n]);
        x[..n].iter_mut().for_each(|x| *x = f(*x));
        round_chunk::<BF, FTZ>(&mut x[..n], out);
    }))
}

/// A 16-bit value widened to f32 bits (`H2F`; the caller flushes the result).
pub(super) fn half_to_f32<const BF: bool, const FTZ: bool>(d: &mut [u32], a: &[u32], m: Lanes) {
    by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let mut x = [0f32; CHUNK];
        widen_chunk::<BF, FTZ>(&a[lanes], &mut x[..n]);
        for (o, x) in out.iter_mut().zip(&x[..n]) {
            *o = x.to_bits();
        }
    })
}

/// An f32 rounded to a 16-bit format (`F2H`; the caller flushed the operand).
pub(super) fn f32_to_half<const BF: bool, const FTZ: bool>(d: &mut [u32], a: &[u32], m: Lanes) {
    by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let mut x = [0f32; CHUNK];
        for (x, &bits) in x[..n].iter_mut().zip(&a[lanes]) {
            *x = f32::from_bits(bits);
        }
        round_chunk::<BF, FTZ>(&mut x[..n], out);
    })
}

/// How a binary operation runs beyond its operands.
#[derive(Clone, Copy)]
pub(super) struct Flags {
    /// Flush subnormal f32 intermediates of 16-bit operations (f32
    /// operations have their operands and results flushed by the caller).
    pub(super) ftz: bool,
    /// The second operand has one value on every lane.
    pub(super) uniform: bool,
}

/// One binary operation over all (active) lanes, with docs/design.md's numerics.
pub(super) fn binary(op: BinKind, d: &mut [u32], a: &[u32], b: &[u32], m: Lanes, flags: Flags) {
    use BinKind::*;
    let Flags { ftz, uniform } = flags;
    match op {
        IAdd => map2(d, a, b, m, u32::wrapping_add),
        ISub => map2(d, a, b, m, u32::wrapping_sub),
        IMul => map2(d, a, b, m, u32::wrapping_mul),
        SDiv => map2(d, a, b, m, |x, y| {
            if y == 0 {
                x
            } else {
                (x as i32).wrapping_div(y as i32) as u32
            }
        }),
        // A uniform power-of-two divisor (`idx / 32u`, `idx % 32u`, common
        // in index arithmetic) is a shift or a mask, which vectorise.
        UDiv if pow2_divisor(b, uniform).is_some() => {
            let shift = b[0].trailing_zeros();
            map1(d, a, m, |x| x >> shift)
        }
        UDiv => map2(d, a, b, m, |x, y| x.checked_div(y).unwrap_or(x)),
        SRem => map2(d, a, b, m, |x, y| {
            if y == 0 {
                0
            } else {
                (x as i32).wrapping_rem(y as i32) as u32
            }
        }),
        URem if pow2_divisor(b, uniform).is_some() => {
            let low = b[0] - 1;
            map1(d, a, m, |x| x & low)
        }
        URem => map2(d, a, b, m, |x, y| x.checked_rem(y).unwrap_or(0)),
        And => map2(d, a, b, m, |x, y| x & y),
        Or => map2(d, a, b, m, |x, y| x | y),
        Xor => map2(d, a, b, m, |x, y| x ^ y),
        Shl => map2(d, a, b, m, u32::wrapping_shl),
        SShr => map2(d, a, b, m, |x, y| (x as i32).wrapping_shr(y) as u32),
        UShr => map2(d, a, b, m, u32::wrapping_shr),
        LogicAnd => map2(d, a, b, m, |x, y| (x != 0 && y != 0) as u32),
        LogicOr => map2(d, a, b, m, |x, y| (x != 0 || y != 0) as u32),
        Eq => map2(d, a, b, m, |x, y| (x == y) as u32),
        Ne => map2(d, a, b, m, |x, y| (x != y) as u32),
        BEq => map2(d, a, b, m, |x, y| ((x != 0) == (y != 0)) as u32),
        BNe => map2(d, a, b, m, |x, y| ((x != 0) != (y != 0)) as u32),
        SLt => map2(d, a, b, m, |x, y| ((x as i32) < (y as i32)) as u32),
        ULt => map2(d, a, b, m, |x, y| (x < y) as u32),
        SLe => map2(d, a, b, m, |x, y| ((x as i32) <= (y as i32)) as u32),
        ULe => map2(d, a, b, m, |x, y| (x <= y) as u32),
        SMin => map2(d, a, b, m, |x, y| (x as i32).min(y as i32) as u32),
        UMin => map2(d, a, b, m, u32::min),
        SMax => map2(d, a, b, m, |x, y| (x as i32).max(y as i32) as u32),
        UMax => map2(d, a, b, m, u32::max),
        Float(op) => with_float_bin!(op, |f| map2(d, a, b, m, ff(f))),
        FloatCmp(op) => with_float_cmp!(op, |f| map2(d, a, b, m, fcmp(f))),
        Half(op, h) => by_format!(h, ftz, half_binary(op, d, a, b, m, uniform)),
        HalfCmp(op, h) => by_format!(h, ftz, half_compare(op, d, a, b, m)),
    }
}

/// The divisor of a uniform operand `b` (the same in every lane) when it
/// is a power of two.
fn pow2_divisor(b: &[u32], uniform: bool) -> Option<u32> {
    b.first()
        .copied()
        .filter(|y| uniform && y.is_power_of_two())
}

/// One unary operation or conversion over all (active) lanes; `ftz` as in
/// [`binary`].
pub(super) fn unary(op: UnKind, d: &mut [u32], a: &[u32], m: Lanes, ftz: bool) {
    use UnKind::*;
    // A 16-bit operand widened to f32, flushed when the adapter flushes.
    let wide = |h: crate::interp::compile::Half, x: u32| {
        let v = h.widen(x);
        if ftz {
            f32::from_bits(flush(v.to_bits()))
        } else {
            v
        }
    };
    match op {
        Copy => map1(d, a, m, |x| x),
        Low16 => map1(d, a, m, |x| x & 0xffff),
        INeg => map1(d, a, m, u32::wrapping_neg),
        LogicNot => map1(d, a, m, |x| (x == 0) as u32),
        BitNot => map1(d, a, m, |x| !x),
        IAbs => map1(d, a, m, |x| (x as i32).wrapping_abs() as u32),
        Bits(f) => map1(d, a, m, |x| {
            crate::ir::fold::bit_operation(f, x).unwrap_or(x)
        }),
        Float(op) => with_float_un!(op, |f| map1(d, a, m, f1(f))),
        Half(op, h) => by_format!(h, ftz, half_unary(op, d, a, m)),
        F2I => map1(d, a, m, |x| f32::from_bits(x) as i32 as u32),
        F2U => map1(d, a, m, |x| f32::from_bits(x) as u32),
        I2F => map1(d, a, m, |x| (x as i32 as f32).to_bits()),
        U2F => map1(d, a, m, |x| (x as f32).to_bits()),
        F2B => map1(d, a, m, |x| (f32::from_bits(x) != 0.0) as u32),
        I2B => map1(d, a, m, |x| (x != 0) as u32),
        B2F => map1(d, a, m, |x| if x != 0 { 1.0f32.to_bits() } else { 0 }),
        B2I => map1(d, a, m, |x| (x != 0) as u32),
        // The operand was flushed by the caller (it reads an f32); an f32
        // of normal magnitude never rounds to a 16-bit subnormal of bf16.
        F2H(h) => by_format!(h, ftz, f32_to_half(d, a, m)),
        H2F(h) => by_format!(h, ftz, half_to_f32(d, a, m)),
        I2H(h) => map1(d, a, m, |x| h.round_integer(i64::from(x as i32))),
        U2H(h) => map1(d, a, m, |x| h.round_integer(i64::from(x))),
        B2H(h) => map1(d, a, m, |x| h.round_integer(i64::from(x != 0))),
        // Through the exact f32, then f32's rules (truncate, saturate, NaN to 0).
        H2I(h) => map1(d, a, m, |x| wide(h, x) as i32 as u32),
        H2U(h) => map1(d, a, m, |x| wide(h, x) as u32),
        H2B(h) => map1(d, a, m, |x| (wide(h, x) != 0.0) as u32),
        H2H { from, to } => map1(d, a, m, |x| to.round(wide(from, x))),
    }
}
