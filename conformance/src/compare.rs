//! Comparison of a backend's outputs against the oracle's, per compare mode.

use mpmd_core::case::CompareMode;
use mpmd_core::ir::ScalarType;
use mpmd_core::HostTensor;

/// How far a float may be from the oracle's value: within `ulp` units in the
/// last place, or within `abs` absolutely (for functions whose bound is absolute).
/// `ulp` counts f32 ulps; an `f16`/`bf16` output is judged in its own ulps
/// against `narrow_ulp`: an operation whose f32 result is off by k f32 ulps
/// is off by at most 1 + k / 2^13 ulps once rounded to 16 bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub ulp: u64,
    pub abs: f32,
    pub narrow_ulp: u64,
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance {
        ulp: 0,
        abs: 0.0,
        narrow_ulp: 0,
    };

    /// The bound of one operation: `ulp` f32 ulps or `abs` absolutely, with
    /// its 16-bit bound.
    pub const fn bounded(ulp: u64, abs: f32) -> Tolerance {
        Tolerance {
            ulp,
            abs,
            narrow_ulp: if ulp == 0 && abs == 0.0 {
                0
            } else {
                1 + (ulp >> 13)
            },
        }
    }

    /// The bound of two operations composed (errors add).
    pub fn plus(self, other: Tolerance) -> Tolerance {
        Tolerance {
            ulp: self.ulp + other.ulp,
            abs: self.abs + other.abs,
            narrow_ulp: self.narrow_ulp + other.narrow_ulp,
        }
    }
}

/// One differing element.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    pub index: usize,
    pub expected: u32,
    pub actual: u32,
    pub elem: ScalarType,
    /// Distance in ULP, for floats.
    pub ulp: Option<u64>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] expected {} got {}",
            self.index,
            show(self.elem, self.expected),
            show(self.elem, self.actual)
        )?;
        if let Some(u) = self.ulp {
            write!(f, " ({u} ulp)")?;
        }
        Ok(())
    }
}

/// A value for humans: floats in Rust's shortest form plus their bits.
pub fn show(elem: ScalarType, word: u32) -> String {
    match elem {
        ScalarType::F32 => format!("{:?} (0x{word:08x})", f32::from_bits(word)),
        ScalarType::F16 | ScalarType::BF16 => format!("{}{elem} (0x{word:04x})", widen(elem, word)),
        ScalarType::I32 => format!("{}", word as i32),
        ScalarType::U32 => format!("{word}u"),
        ScalarType::Bool => format!("{}", word != 0),
    }
}

/// Why an output does not match.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Differing elements (after sorting, for multisets).
    pub count: usize,
    pub total: usize,
    /// The first few differences.
    pub first: Vec<Difference>,
    /// Set when the outputs cannot be compared element-wise at all.
    pub detail: Option<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(d) = &self.detail {
            return f.write_str(d);
        }
        write!(f, "{} of {} elements differ", self.count, self.total)?;
        for d in &self.first {
            write!(f, "\n      {d}")?;
        }
        Ok(())
    }
}

/// How many differences a report lists.
pub const FIRST_DIFFERENCES: usize = 8;

/// Distance in units in the last place between two finite-or-infinite floats;
/// `+0` and `-0` are the same point. `None` when exactly one is NaN.
pub fn ulp_distance(a: f32, b: f32) -> Option<u64> {
    if a.is_nan() || b.is_nan() {
        return (a.is_nan() && b.is_nan()).then_some(0);
    }
    // Map the floats onto a line of integers where adjacent floats differ by 1.
    fn key(v: f32) -> i64 {
        let bits = v.to_bits() as i32;
        let magnitude = i64::from(bits & 0x7fff_ffff);
        if bits < 0 {
            -magnitude
        } else {
            magnitude
        }
    }
    Some(key(a).abs_diff(key(b)))
}

fn is_subnormal_or_zero(v: f32) -> bool {
    v == 0.0 || v.is_subnormal()
}

/// A 16-bit float's value (exact).
fn widen(elem: ScalarType, bits: u32) -> f32 {
    mpmd_core::numerics::to_f32(elem, bits as u16).unwrap_or(f32::NAN)
}

/// Distance in units in the last place of a 16-bit format (the sign-magnitude
/// trick of [`ulp_distance`] on 16 bits); `None` when exactly one is NaN.
pub fn ulp_distance16(elem: ScalarType, a: u32, b: u32) -> Option<u64> {
    let (va, vb) = (widen(elem, a), widen(elem, b));
    if va.is_nan() || vb.is_nan() {
        return (va.is_nan() && vb.is_nan()).then_some(0);
    }
    let key = |bits: u32| {
        let magnitude = i64::from(bits & 0x7fff);
        if bits & 0x8000 != 0 {
            -magnitude
        } else {
            magnitude
        }
    };
    Some(key(a).abs_diff(key(b)))
}

/// [`floats_agree`] for `f16` / `bf16` bits, in the type's own ulps. A `bf16`
/// subnormal matches zero, as an f32 one does (its arithmetic is f32's);
/// `f16` subnormals are kept on every backend (they are f32 normals).
fn floats16_agree(
    elem: ScalarType,
    expected: u32,
    actual: u32,
    tol: Tolerance,
) -> (bool, Option<u64>) {
    let (e, a) = (widen(elem, expected), widen(elem, actual));
    let ulp = ulp_distance16(elem, expected, actual);
    if e.is_nan() || a.is_nan() {
        return (e.is_nan() && a.is_nan(), ulp);
    }
    let flushed = elem == ScalarType::BF16 && is_subnormal_or_zero(e) && is_subnormal_or_zero(a);
    if e == a || flushed {
        return (true, ulp);
    }
    if e.is_infinite() || a.is_infinite() {
        return (false, ulp);
    }
    let within = ulp.is_some_and(|u| u <= tol.narrow_ulp) || (e - a).abs() <= tol.abs;
    (within, ulp)
}

/// Whether two float words agree within `tol`: NaN payloads and the sign of
/// zero are ignored, and a subnormal matches zero (subnormals may flush).
fn floats_agree(expected: u32, actual: u32, tol: Tolerance) -> (bool, Option<u64>) {
    let (e, a) = (f32::from_bits(expected), f32::from_bits(actual));
    let ulp = ulp_distance(e, a);
    if e.is_nan() || a.is_nan() {
        return (e.is_nan() && a.is_nan(), ulp);
    }
    if e == a || (is_subnormal_or_zero(e) && is_subnormal_or_zero(a)) {
        return (true, ulp);
    }
    if e.is_infinite() || a.is_infinite() {
        return (false, ulp);
    }
    let within = ulp.is_some_and(|u| u <= tol.ulp) || (e - a).abs() <= tol.abs;
    (within, ulp)
}

fn words_agree(
    elem: ScalarType,
    expected: u32,
    actual: u32,
    tol: Tolerance,
) -> (bool, Option<u64>) {
    match elem {
        ScalarType::F32 => floats_agree(expected, actual, tol),
        ScalarType::F16 | ScalarType::BF16 => floats16_agree(elem, expected, actual, tol),
        ScalarType::Bool => ((expected != 0) == (actual != 0), None),
        _ => (expected == actual, None),
    }
}

/// Canonical form for multiset comparison: one NaN, one zero.
fn canonical(elem: ScalarType, w: u32) -> u32 {
    match elem {
        ScalarType::F32 => {
            let v = f32::from_bits(w);
            if v.is_nan() {
                0x7fc0_0000
            } else if v == 0.0 {
                0
            } else {
                w
            }
        }
        ScalarType::F16 | ScalarType::BF16 => {
            let v = widen(elem, w);
            if v.is_nan() {
                0x7fff
            } else if v == 0.0 {
                0
            } else {
                w
            }
        }
        ScalarType::Bool => u32::from(w != 0),
        _ => w,
    }
}

/// Compares `actual` against the oracle's `expected` under `mode`; `profile`
/// is the backend's bound for `CompareMode::Profile`.
pub fn compare(
    mode: &CompareMode,
    expected: &HostTensor,
    actual: &HostTensor,
    profile: Tolerance,
) -> Result<(), Mismatch> {
    compare_within(mode, expected, actual, Tolerance::EXACT, profile)
}

/// [`compare`] with a bound for `exact` floats too (the fuzzer's float
/// policy: backends whose `/` or `sqrt` are not correctly rounded).
pub fn compare_within(
    mode: &CompareMode,
    expected: &HostTensor,
    actual: &HostTensor,
    exact: Tolerance,
    profile: Tolerance,
) -> Result<(), Mismatch> {
    if matches!(mode, CompareMode::Ignore) {
        return Ok(());
    }
    if expected.shape() != actual.shape()
        || expected.len() != actual.len()
        || expected.elem() != actual.elem()
    {
        return Err(Mismatch {
            count: 0,
            total: expected.len(),
            first: vec![],
            detail: Some(format!(
                "shape differs: expected {} {:?} got {} {:?}",
                expected.elem(),
                expected.shape(),
                actual.elem(),
                actual.shape()
            )),
        });
    }
    let elem = expected.elem();
    let (tol, e_words, a_words) = match mode {
        CompareMode::Exact | CompareMode::Ignore => (exact, expected.to_bits(), actual.to_bits()),
        CompareMode::Ulp(n) => (
            // `ulp(n)` counts ulps of the output's own type.
            Tolerance {
                ulp: u64::from(*n),
                abs: 0.0,
                narrow_ulp: u64::from(*n),
            },
            expected.to_bits(),
            actual.to_bits(),
        ),
        CompareMode::Profile => (profile, expected.to_bits(), actual.to_bits()),
        CompareMode::Multiset => {
            let sorted = |t: &HostTensor| {
                let mut w: Vec<u32> = t
                    .to_bits()
                    .into_iter()
                    .map(|w| canonical(elem, w))
                    .collect();
                match elem {
                    ScalarType::F32 => {
                        w.sort_by(|a, b| f32::from_bits(*a).total_cmp(&f32::from_bits(*b)))
                    }
                    ScalarType::F16 | ScalarType::BF16 => {
                        w.sort_by(|a, b| widen(elem, *a).total_cmp(&widen(elem, *b)))
                    }
                    ScalarType::I32 => w.sort_by_key(|&x| x as i32),
                    _ => w.sort_unstable(),
                }
                w
            };
            (Tolerance::EXACT, sorted(expected), sorted(actual))
        }
    };
    let mut first = Vec::new();
    let mut count = 0;
    for (index, (&e, &a)) in e_words.iter().zip(&a_words).enumerate() {
        let (ok, ulp) = words_agree(elem, e, a, tol);
        if !ok {
            count += 1;
            if first.len() < FIRST_DIFFERENCES {
                first.push(Difference {
                    index,
                    expected: e,
                    actual: a,
                    elem,
                    ulp,
                });
            }
        }
    }
    if count == 0 {
        Ok(())
    } else {
        Err(Mismatch {
            count,
            total: e_words.len(),
            first,
            detail: None,
        })
    }
}

/// The compare mode of output `name`: the case's own (`compares`), else
/// exact for integers and bools and the backend's profile for floats.
pub fn mode_for(compares: &[(String, CompareMode)], name: &str, elem: ScalarType) -> CompareMode {
    match compares.iter().find(|(n, _)| n == name) {
        Some((_, mode)) => mode.clone(),
        None if elem.is_float() => CompareMode::Profile,
        None => CompareMode::Exact,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(values: &[f32]) -> HostTensor {
        HostTensor::from_f32(vec![values.len() as u32], values)
    }

    #[test]
    fn ulp_distance_counts_representable_steps() {
        assert_eq!(ulp_distance(1.0, 1.0), Some(0));
        assert_eq!(
            ulp_distance(1.0, f32::from_bits(1.0f32.to_bits() + 3)),
            Some(3)
        );
        assert_eq!(ulp_distance(0.0, -0.0), Some(0));
        assert_eq!(ulp_distance(1e-45, -1e-45), Some(2));
        assert_eq!(ulp_distance(f32::NAN, 1.0), None);
        assert_eq!(ulp_distance(f32::MAX, f32::INFINITY), Some(1));
    }

    #[test]
    fn exact_ignores_sign_of_zero_and_nan_payloads() {
        let e = f(&[0.0, f32::NAN, 1.5]);
        let a = HostTensor::new(
            ScalarType::F32,
            vec![3],
            vec![0x8000_0000, 0x7fc0_0001, 1.5f32.to_bits()],
        )
        .unwrap();
        assert_eq!(
            compare(&CompareMode::Exact, &e, &a, Tolerance::EXACT),
            Ok(())
        );
    }

    #[test]
    fn exact_reports_first_differences_with_ulp() {
        let e = f(&[1.0, 2.0, 3.0]);
        let a = f(&[1.0, f32::from_bits(2.0f32.to_bits() + 1), f32::NAN]);
        let m = compare(&CompareMode::Exact, &e, &a, Tolerance::EXACT).unwrap_err();
        assert_eq!(m.count, 2);
        assert_eq!(m.first[0].index, 1);
        assert_eq!(m.first[0].ulp, Some(1));
        assert_eq!(m.first[1].ulp, None);
        assert_eq!(
            m.to_string(),
            "2 of 3 elements differ\n      [1] expected 2.0 (0x40000000) got 2.0000002 (0x40000001) (1 ulp)\n      [2] expected 3.0 (0x40400000) got NaN (0x7fc00000)"
        );
    }

    #[test]
    fn ulp_mode_allows_n_units() {
        let e = f(&[1.0]);
        let a = f(&[f32::from_bits(1.0f32.to_bits() + 2)]);
        assert!(compare(&CompareMode::Ulp(2), &e, &a, Tolerance::EXACT).is_ok());
        assert!(compare(&CompareMode::Ulp(1), &e, &a, Tolerance::EXACT).is_err());
        // Infinity never matches a finite value, whatever the bound.
        assert!(compare(
            &CompareMode::Ulp(1000),
            &f(&[f32::MAX]),
            &f(&[f32::INFINITY]),
            Tolerance::EXACT
        )
        .is_err());
    }

    #[test]
    fn profile_uses_the_backends_bound() {
        let e = f(&[0.001]);
        let a = f(&[0.0011]);
        let loose = Tolerance::bounded(0, 0.001);
        assert!(compare(&CompareMode::Profile, &e, &a, loose).is_ok());
        assert!(compare(&CompareMode::Profile, &e, &a, Tolerance::EXACT).is_err());
    }

    #[test]
    fn subnormals_match_zero() {
        assert!(compare(
            &CompareMode::Exact,
            &f(&[1e-45]),
            &f(&[0.0]),
            Tolerance::EXACT
        )
        .is_ok());
        assert!(compare(
            &CompareMode::Exact,
            &f(&[1e-37]),
            &f(&[0.0]),
            Tolerance::EXACT
        )
        .is_err());
    }

    #[test]
    fn multiset_ignores_order_but_not_counts() {
        let e = HostTensor::from_i32(vec![4], &[3, -1, 3, 0]);
        let a = HostTensor::from_i32(vec![4], &[0, 3, -1, 3]);
        assert!(compare(&CompareMode::Multiset, &e, &a, Tolerance::EXACT).is_ok());
        let b = HostTensor::from_i32(vec![4], &[0, 3, -1, -1]);
        assert!(compare(&CompareMode::Multiset, &e, &b, Tolerance::EXACT).is_err());
    }

    #[test]
    fn integers_are_exact_and_ignore_mode_ignores() {
        let e = HostTensor::from_u32(vec![2], &[1, 2]);
        let a = HostTensor::from_u32(vec![2], &[1, 3]);
        assert!(compare(&CompareMode::Ulp(5), &e, &a, Tolerance::EXACT).is_err());
        assert!(compare(&CompareMode::Ignore, &e, &a, Tolerance::EXACT).is_ok());
        let m = compare(
            &CompareMode::Exact,
            &e,
            &HostTensor::from_u32(vec![3], &[1, 2, 3]),
            Tolerance::EXACT,
        )
        .unwrap_err();
        assert_eq!(m.to_string(), "shape differs: expected u32 [2] got u32 [3]");
    }
}
