//! The numerics of the 16-bit floats (docs/design.md, "Semantics"; docs/numerics.md):
//! the one definition the interpreter, input generation and comparison use,
//! and the rule every backend's emitted code is tested against.
//!
//! - f32 → `f16`/`bf16` rounds to nearest, ties to even; overflow gives
//!   infinity; NaN stays NaN (quiet). f16 subnormals are produced and kept.
//! - `+ - * /` and `sqrt` compute in f32 and round once: f32 has 24 bits of
//!   precision, at least 2p + 2 for f16 (p = 11) and bf16 (p = 8), so the
//!   double rounding is innocuous and the result is the correctly rounded one.
//! - `fma` rounds once ([`fma16`]): the f32 sum of an exact product could
//!   land on a tie of the 16-bit format, so the sum is rounded to odd first.
//! - An integer converts by rounding its exact value once
//!   ([`from_integer`]); going through a round-to-nearest f32 would round twice.

use crate::ir::ScalarType;

/// An `f16`'s value as an `f32` (exact).
pub fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// A `bf16`'s value as an `f32` (exact: the bits are the high half).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// The nearest `f16` (ties to even, overflow to infinity, NaN stays NaN).
pub fn f16_from_f32(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// The nearest `bf16` (ties to even, overflow to infinity, NaN stays NaN).
pub fn bf16_from_f32(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        // Keep the sign and the top payload bits; set the quiet bit so the
        // truncated payload can never become infinity.
        return ((bits >> 16) | 0x0040) as u16;
    }
    let round_up = (bits >> 15) & 1 == 1 && (bits & 0x7fff != 0 || (bits >> 16) & 1 == 1);
    ((bits >> 16) + u32::from(round_up)) as u16
}

/// [`f16_to_f32`] of every element of `src` into `dst` (the shorter length),
/// several at a time (F16C where the CPU has it).
pub fn f16_to_f32_slice(src: &[half::f16], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len().min(dst.len());
    src[..n].convert_to_f32_slice(&mut dst[..n]);
}

/// [`f16_from_f32`] of every element of `src` into `dst` (the shorter length).
pub fn f16_from_f32_slice(src: &[f32], dst: &mut [half::f16]) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len().min(dst.len());
    dst[..n].convert_from_f32_slice(&src[..n]);
}

/// The value of a 16-bit float of type `ty`, as an `f32` (exact). `None`
/// for a type that is not 16-bit.
pub fn to_f32(ty: ScalarType, bits: u16) -> Option<f32> {
    match ty {
        ScalarType::F16 => Some(f16_to_f32(bits)),
        ScalarType::BF16 => Some(bf16_to_f32(bits)),
        _ => None,
    }
}

/// `v` rounded to the 16-bit float type `ty`. `None` for a type that is not 16-bit.
pub fn from_f32(ty: ScalarType, v: f32) -> Option<u16> {
    match ty {
        ScalarType::F16 => Some(f16_from_f32(v)),
        ScalarType::BF16 => Some(bf16_from_f32(v)),
        _ => None,
    }
}

/// `v` rounded to an f32 with round-to-odd: inexact results keep an odd last
/// bit, so a later round-to-nearest at 2 or more bits fewer is the correct
/// rounding of `v` itself (a sticky bit for the second rounding).
pub fn f64_to_f32_round_to_odd(v: f64) -> f32 {
    let nearest = v as f32;
    if v.is_nan() || f64::from(nearest) == v {
        return nearest;
    }
    if nearest.is_infinite() {
        // Past f32's range: the largest finite f32 is odd and still rounds
        // to infinity in either 16-bit format.
        return f32::MAX.copysign(nearest);
    }
    let bits = nearest.to_bits();
    if bits & 1 == 1 {
        return nearest;
    }
    // Step one ulp toward `v` (the magnitude grows when |v| > |nearest|).
    let away = (f64::from(nearest).abs() < v.abs()) as u32;
    let stepped = if away == 1 { bits + 1 } else { bits - 1 };
    f32::from_bits(stepped)
}

/// `a * b + c` rounded once to the 16-bit float type `ty` (all three operands
/// of that type, as bits). The product of two 16-bit floats is exact in f64;
/// the sum is rounded to odd at 53 bits and then at 24 bits, which are both
/// at least 2 bits more than `ty`'s precision, so the final rounding is
/// correct. `None` for a type that is not 16-bit.
pub fn fma16(ty: ScalarType, a: u16, b: u16, c: u16) -> Option<u16> {
    let (a, b, c) = (
        f64::from(to_f32(ty, a)?),
        f64::from(to_f32(ty, b)?),
        f64::from(to_f32(ty, c)?),
    );
    let product = a * b;
    let sum = product + c;
    let rounded = if sum.is_finite() {
        // TwoSum: the exact error of `sum` (product and c are finite here).
        let bv = sum - product;
        let av = sum - bv;
        let err = (product - av) + (c - bv);
        if err != 0.0 && sum.to_bits() & 1 == 0 {
            let bits = sum.to_bits();
            let toward_larger = (err > 0.0) == (sum > 0.0);
            f64::from_bits(if toward_larger { bits + 1 } else { bits - 1 })
        } else {
            sum
        }
    } else {
        sum
    };
    from_f32(ty, f64_to_f32_round_to_odd(rounded))
}

/// `v` rounded once to the 16-bit float type `ty` (nearest, ties to even).
/// `None` for a type that is not 16-bit.
pub fn from_f64(ty: ScalarType, v: f64) -> Option<u16> {
    from_f32(ty, f64_to_f32_round_to_odd(v))
}

/// An integer rounded once to the 16-bit float type `ty` (nearest, ties to
/// even, overflow to infinity). `None` for a type that is not 16-bit.
pub fn from_integer(ty: ScalarType, v: i64) -> Option<u16> {
    // i64 → f64 is exact for every i32 and u32 value.
    from_f64(ty, v as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_to_16bit_rounds_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1 and the next f16: ties to even (1).
        assert_eq!(f16_from_f32(1.0 + f32::powi(2.0, -11)), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between two f16s: the even one is above.
        assert_eq!(f16_from_f32(1.0 + 3.0 * f32::powi(2.0, -11)), 0x3c02);
        assert_eq!(f16_from_f32(65520.0), 0x7c00, "overflow gives infinity");
        assert_eq!(f16_from_f32(65519.0), 0x7bff);
        assert_eq!(
            f16_from_f32(f32::powi(2.0, -24)),
            0x0001,
            "smallest subnormal"
        );
        assert_eq!(
            f16_from_f32(f32::powi(2.0, -25)),
            0x0000,
            "tie to even zero"
        );
        assert!(half::f16::from_bits(f16_from_f32(f32::NAN)).is_nan());
        assert_eq!(bf16_from_f32(1.0 + f32::powi(2.0, -8)), 0x3f80);
        assert_eq!(bf16_from_f32(1.0 + 3.0 * f32::powi(2.0, -8)), 0x3f82);
        assert_eq!(bf16_from_f32(f32::MAX), 0x7f80, "overflow gives infinity");
        assert_eq!(bf16_from_f32(f32::from_bits(0x7f80_0001)) & 0x7fc0, 0x7fc0);
        assert_eq!(
            bf16_from_f32(f32::from_bits(0x0000_8000)),
            0x0000,
            "tie to even"
        );
        assert_eq!(bf16_from_f32(f32::from_bits(0x0001_8000)), 0x0002);
    }

    #[test]
    fn bf16_rounding_agrees_with_half_on_every_high_half() {
        for high in 0..=u16::MAX {
            for low in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
                let v = f32::from_bits((u32::from(high) << 16) | low);
                let ours = bf16_from_f32(v);
                let theirs = half::bf16::from_f32(v).to_bits();
                if v.is_nan() {
                    assert!(half::bf16::from_bits(ours).is_nan());
                } else {
                    assert_eq!(ours, theirs, "{v:e}");
                }
            }
        }
    }

    #[test]
    fn slice_conversions_are_the_element_ones() {
        let all: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
        let mut wide = vec![0.0f32; all.len()];
        f16_to_f32_slice(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            assert_eq!(w.to_bits(), f16_to_f32(h.to_bits()).to_bits());
        }
        let values: Vec<f32> = (0..1 << 16)
            .map(|i: u32| f32::from_bits(0x3300_0000u32.wrapping_add(i << 12)))
            .collect();
        let mut narrow = vec![half::f16::ZERO; values.len()];
        f16_from_f32_slice(&values, &mut narrow);
        for (v, h) in values.iter().zip(&narrow) {
            let expected = f16_from_f32(*v);
            if half::f16::from_bits(expected).is_nan() {
                assert!(h.is_nan());
            } else {
                assert_eq!(h.to_bits(), expected, "{v:e}");
            }
        }
    }

    #[test]
    fn integers_round_once() {
        // 2^24 + 2^16 + 1 is just above a bf16 tie; through a nearest f32 it
        // would become the tie itself and round to even (down).
        let v = (1 << 24) + (1 << 16) + 1;
        assert_eq!(
            bf16_to_f32(from_integer(ScalarType::BF16, v).unwrap()),
            ((1 << 24) + (1 << 17)) as f32
        );
        assert_eq!(from_integer(ScalarType::F16, 65519), Some(0x7bff));
        assert_eq!(from_integer(ScalarType::F16, 65520), Some(0x7c00));
        assert_eq!(
            from_integer(ScalarType::F16, -2049),
            Some(0xe800),
            "-2048, tie to even"
        );
        assert_eq!(
            f16_to_f32(from_integer(ScalarType::F16, i64::from(i32::MIN)).unwrap()),
            f32::NEG_INFINITY
        );
    }

    #[test]
    fn fma_rounds_once() {
        let f = |v: f32| f16_from_f32(v);
        // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 exactly.
        let a = f(1.0 + f32::powi(2.0, -10));
        // ab + c with c = -2^-9: 1 + 2^-20, which rounds to 1 (once).
        let c = f(-f32::powi(2.0, -9));
        assert_eq!(fma16(ScalarType::F16, a, a, c), Some(0x3c00));
        // (1 + 2^-6)(1 + 2^-5) = 1 + 2^-5 + 2^-6 + 2^-11 is an f16 tie (ulp 2^-10);
        // c = 2^-24 (the smallest subnormal) puts the exact sum above it. The
        // nearest f32 of the sum drops c (half an f32 ulp, to even), so rounding
        // through f32 would give the tie's even neighbour below.
        let a = f(1.0 + f32::powi(2.0, -6));
        let b = f(1.0 + f32::powi(2.0, -5));
        let above = 1.0 + f32::powi(2.0, -5) + f32::powi(2.0, -6) + f32::powi(2.0, -10);
        assert_eq!(fma16(ScalarType::F16, a, b, 0x0001), Some(f(above)));
        let through_f32 = f(f16_to_f32(a).mul_add(f16_to_f32(b), f16_to_f32(0x0001)));
        assert_ne!(
            through_f32,
            f(above),
            "the case must be one double rounding gets wrong"
        );
        // A real tie case for bf16: (1 + 2^-4)^2 = 1 + 2^-3 + 2^-8, a bf16 tie
        // (ulp 2^-7), plus a tiny c decides: up with c > 0, down (to even) with c = 0,
        // and below with c < 0.
        let g = |v: f32| bf16_from_f32(v);
        let a = g(1.0 + f32::powi(2.0, -4));
        let tiny = g(f32::powi(2.0, -60));
        let up = bf16_to_f32(fma16(ScalarType::BF16, a, a, tiny).unwrap());
        let tie = bf16_to_f32(fma16(ScalarType::BF16, a, a, 0).unwrap());
        let below = bf16_to_f32(fma16(ScalarType::BF16, a, a, tiny | 0x8000).unwrap());
        assert_eq!(up, 1.0 + f32::powi(2.0, -3) + f32::powi(2.0, -7));
        assert_eq!(tie, 1.0 + f32::powi(2.0, -3), "tie to even");
        assert_eq!(below, 1.0 + f32::powi(2.0, -3));
        // Through f32 the tiny term would vanish and `up` would equal `tie`.
        assert_ne!(up, tie);
    }
}
