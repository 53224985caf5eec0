//! Judging a backend's outputs against the interpreter's.
//!
//! Bounds (documented in ARCHITECTURE.md by the lead at merge):
//! Float bounds come from the backend's [`FloatPolicy`]; for IEEE backends:
//! - `exact`: bit-equal, except that +0.0 equals -0.0, any NaN equals any NaN,
//!   and a subnormal equals a zero of either sign (backends may flush);
//! - `ulp(n)`: floats within `n` units in the last place (same rules for zeros
//!   and NaN);
//! - `profile`: the generator sends a value through a function that is not
//!   correctly rounded only when it is bounded by 64 in magnitude, and never
//!   through a discontinuous operation afterwards; the bound for that mix is
//!   4 ulp plus an absolute 2e-3 (errors of a few math functions, each within
//!   a few ulp of values up to 64, added or multiplied a few times);
//! - `multiset`: the sorted words are equal;
//! - `ignore`: not compared.

use mpmd_core::host::HostTensor;
use mpmd_core::ir::{CompareMode, ScalarType};

use super::FloatPolicy;

/// Units in the last place for `ulp` mode in `profile`.
pub const PROFILE_ULP: u32 = 4;
/// Absolute slack of `profile` mode.
pub const PROFILE_ABS: f32 = 2e-3;

/// The first element that differs, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    pub element: usize,
    pub expected: u32,
    pub got: u32,
    pub elem: ScalarType,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |w: u32| match self.elem {
            ScalarType::F32 => format!("{:?} (0x{w:08x})", f32::from_bits(w)),
            ScalarType::I32 => format!("{}", w as i32),
            ScalarType::U32 => format!("{w}u"),
            ScalarType::Bool => format!("{}", w != 0),
        };
        write!(
            f,
            "element {}: expected {}, got {}",
            self.element,
            show(self.expected),
            show(self.got)
        )
    }
}

/// Compares `got` against `expected` under `mode`.
pub fn compare(
    expected: &HostTensor,
    got: &HostTensor,
    mode: &CompareMode,
    floats: &FloatPolicy,
) -> Result<(), String> {
    if expected.words.len() != got.words.len() {
        return Err(format!(
            "{} elements, expected {}",
            got.words.len(),
            expected.words.len()
        ));
    }
    let elem = expected.elem;
    let first_bad = |ok: &dyn Fn(u32, u32) -> bool| {
        expected
            .words
            .iter()
            .zip(&got.words)
            .position(|(&e, &g)| !ok(e, g))
            .map(|i| Mismatch {
                element: i,
                expected: expected.words[i],
                got: got.words[i],
                elem,
            })
    };
    let float = elem == ScalarType::F32;
    let bad = match mode {
        CompareMode::Ignore => None,
        CompareMode::Multiset => {
            let (mut a, mut b) = (expected.words.clone(), got.words.clone());
            a.sort_unstable();
            b.sort_unstable();
            if a != b {
                return Err("values differ as multisets".to_string());
            }
            None
        }
        CompareMode::Exact if !float => first_bad(&|e, g| e == g),
        CompareMode::Exact => {
            first_bad(&|e, g| floats_within(e, g, floats.exact_ulps, floats.exact_abs))
        }
        CompareMode::Ulp(n) if float => first_bad(&|e, g| floats_within(e, g, *n, 0.0)),
        CompareMode::Profile if float => {
            first_bad(&|e, g| floats_within(e, g, PROFILE_ULP, PROFILE_ABS))
        }
        CompareMode::Ulp(_) | CompareMode::Profile => first_bad(&|e, g| e == g),
    };
    match bad {
        Some(m) => Err(m.to_string()),
        None => Ok(()),
    }
}

/// Whether two f32 bit patterns agree within `ulps` or `abs`.
pub fn floats_within(e: u32, g: u32, ulps: u32, abs: f32) -> bool {
    let (fe, fg) = (f32::from_bits(e), f32::from_bits(g));
    if fe.is_nan() || fg.is_nan() {
        return fe.is_nan() && fg.is_nan();
    }
    let flush = |v: f32| if v.is_subnormal() { 0.0 } else { v };
    let (fe, fg) = (flush(fe), flush(fg));
    if fe == fg {
        return true;
    }
    if fe.is_infinite() || fg.is_infinite() {
        return false;
    }
    if (fe - fg).abs() <= abs {
        return true;
    }
    ordered(fe).abs_diff(ordered(fg)) <= ulps as u64
}

/// Maps floats to integers monotonically, so that adjacent floats differ by 1.
fn ordered(v: f32) -> i64 {
    let b = v.to_bits() as i32;
    if b < 0 {
        -((b & 0x7FFF_FFFF) as i64)
    } else {
        b as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_signs_nan_payloads_and_subnormals_are_equal() {
        assert!(floats_within(0, 0x8000_0000, 0, 0.0));
        assert!(floats_within(0x7FC0_0000, 0x7FC0_0001, 0, 0.0));
        assert!(floats_within(1, 0, 0, 0.0));
        assert!(!floats_within(
            1.0f32.to_bits(),
            1.0000001f32.to_bits(),
            0,
            0.0
        ));
        assert!(floats_within(
            1.0f32.to_bits(),
            1.0000001f32.to_bits(),
            1,
            0.0
        ));
    }

    #[test]
    fn ulp_distance_crosses_zero() {
        let tiny = f32::from_bits(0x0080_0000); // smallest normal
        assert!(floats_within(
            tiny.to_bits(),
            (-tiny).to_bits(),
            0x0100_0000,
            0.0
        ));
        assert!(!floats_within(
            tiny.to_bits(),
            (-tiny).to_bits(),
            0x00FF_FFFF,
            0.0
        ));
    }

    #[test]
    fn mismatch_names_the_first_element() {
        let a = HostTensor::from_i32(vec![3], &[1, 2, 3]);
        let b = HostTensor::from_i32(vec![3], &[1, 5, 4]);
        assert_eq!(
            compare(&a, &b, &CompareMode::Exact, &FloatPolicy::IEEE),
            Err("element 1: expected 2, got 5".to_string())
        );
        assert_eq!(
            compare(&a, &b, &CompareMode::Ignore, &FloatPolicy::IEEE),
            Ok(())
        );
    }
}
