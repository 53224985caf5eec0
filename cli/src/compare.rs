//! `mpmd run --compare NAME=ref.npy`: an output judged against a reference
//! array, element by element.
//!
//! Exact and `--ulp N` verdicts are conformance's
//! (`mpmd_conformance::compare::compare_within`), so that `mpmd run` and
//! `cargo xtask conformance` mean the same by "within N ulp": NaN matches
//! NaN (any payload), `+0` matches `-0`, and a subnormal matches zero
//! (docs/design.md lets f32 subnormals flush). `--rtol R --atol A` is numpy's
//! `allclose(got, ref, rtol=R, atol=A, equal_nan=True)`, which conformance
//! has no mode for; it lives here.

use std::fmt::Write;

use mpmd_conformance::compare::{
    compare_within, show, ulp_distance, ulp_distance16, Tolerance as Bound, FIRST_DIFFERENCES,
};
use mpmd_core::case::CompareMode;
use mpmd_core::ir::ScalarType;
use mpmd_core::HostTensor;

/// How float outputs are judged. Integer and bool outputs are always
/// compared exactly: a tolerance on a count or an index hides bugs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// Equal values (no flag given).
    Exact,
    /// `--ulp N`: within N units in the last place of the output's own
    /// type (f32, f16 or bf16 ulps).
    Ulp(u32),
    /// `--rtol R --atol A`: `|got - expected| <= atol + rtol * |expected|`,
    /// computed in f64; a flag not given is 0.
    Close { rtol: f64, atol: f64 },
}

impl Tolerance {
    /// The flags that select this tolerance, as the user would write them.
    pub fn flags(self) -> String {
        match self {
            Tolerance::Exact => "exact".into(),
            Tolerance::Ulp(n) => format!("--ulp {n}"),
            Tolerance::Close { rtol, atol } => format!("--rtol {rtol} --atol {atol}"),
        }
    }
}

/// One element that does not match.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// Flat (row-major) index.
    pub index: usize,
    pub got: u32,
    pub expected: u32,
    /// How far apart, in the tolerance's terms (`2 ulp`, `3.000e-3 > allowed
    /// 1.000e-3`, `1`), or `None` where no distance applies (bool, NaN against
    /// a number).
    pub error: Option<String>,
}

/// The result of comparing one output with its reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub elem: ScalarType,
    pub shape: Vec<u32>,
    /// What the elements were held to: `exact`, `--ulp 1`, `--rtol 0.001
    /// --atol 0`, or `exact (integer output)` when a float tolerance was given.
    pub tolerance: String,
    pub total: usize,
    pub mismatches: usize,
    /// The first [`FIRST_DIFFERENCES`] mismatches.
    pub first: Vec<Difference>,
    /// For floats: the largest distance over the elements that are both
    /// numbers (`1 ulp`, `2.384e-7`), to calibrate a tolerance.
    pub max_error: Option<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }

    /// `ok (256 elements; --ulp 1; max error 1 ulp)` or `3 of 256 elements
    /// differ (exact; max error 2 ulp)` and one line per difference shown.
    pub fn render(&self) -> String {
        let mut text = if self.passed() {
            format!("ok ({} elements; {}", self.total, self.tolerance)
        } else {
            format!(
                "{} of {} elements differ ({}",
                self.mismatches, self.total, self.tolerance
            )
        };
        if let Some(max) = &self.max_error {
            let _ = write!(text, "; max error {max}");
        }
        text.push(')');
        for d in &self.first {
            let _ = write!(
                text,
                "\n  {} got {}, expected {}",
                index_text(d.index, &self.shape),
                show(self.elem, d.got),
                show(self.elem, d.expected)
            );
            if let Some(error) = &d.error {
                let _ = write!(text, ", error {error}");
            }
        }
        if self.mismatches > self.first.len() {
            let _ = write!(
                text,
                "\n  ... and {} more",
                self.mismatches - self.first.len()
            );
        }
        text
    }
}

/// `[17]`, `[2, 5]`: the element's NumPy index in an array of `shape`.
pub fn index_text(flat: usize, shape: &[u32]) -> String {
    let mut rest = flat;
    let mut coords = vec![0usize; shape.len()];
    for (coord, &extent) in coords.iter_mut().zip(shape).rev() {
        let extent = (extent as usize).max(1);
        *coord = rest % extent;
        rest /= extent;
    }
    let coords: Vec<String> = coords.iter().map(usize::to_string).collect();
    format!("[{}]", coords.join(", "))
}

/// Compares `got` with `expected`, which the caller has checked have the
/// same element type and shape.
pub fn compare(got: &HostTensor, expected: &HostTensor, tolerance: Tolerance) -> Verdict {
    let elem = got.elem();
    let shape = got.shape().to_vec();
    if !elem.is_float() {
        let given = if tolerance == Tolerance::Exact {
            "exact"
        } else {
            "exact (integer output)"
        };
        return by_conformance(got, expected, &CompareMode::Exact, given.into());
    }
    match tolerance {
        Tolerance::Exact => {
            let mut verdict = by_conformance(got, expected, &CompareMode::Exact, "exact".into());
            verdict.max_error = max_ulp(got, expected);
            verdict
        }
        Tolerance::Ulp(n) => {
            let mut verdict =
                by_conformance(got, expected, &CompareMode::Ulp(n), tolerance.flags());
            verdict.max_error = max_ulp(got, expected);
            verdict
        }
        Tolerance::Close { rtol, atol } => {
            let (g, e) = (got.to_f32(), expected.to_f32());
            let (got_bits, expected_bits) = (got.to_bits(), expected.to_bits());
            let mut first = Vec::new();
            let mut mismatches = 0;
            let mut max_error: Option<f64> = None;
            for (index, (&g, &e)) in g.iter().zip(&e).enumerate() {
                let (g, e) = (f64::from(g), f64::from(e));
                // Equal infinities are 0 apart (their difference is NaN).
                let error = if g == e { 0.0 } else { (g - e).abs() };
                if !error.is_nan() {
                    max_error = Some(max_error.map_or(error, |m: f64| m.max(error)));
                }
                let allowed = atol + rtol * e.abs();
                if allclose(g, e, allowed) {
                    continue;
                }
                mismatches += 1;
                if first.len() < FIRST_DIFFERENCES {
                    first.push(Difference {
                        index,
                        got: got_bits[index],
                        expected: expected_bits[index],
                        error: (!g.is_nan() && !e.is_nan())
                            .then(|| format!("{error:.3e} > allowed {allowed:.3e}")),
                    });
                }
            }
            Verdict {
                elem,
                shape,
                tolerance: format!(
                    "{}: |got - expected| <= atol + rtol * |expected|",
                    tolerance.flags()
                ),
                total: got.len(),
                mismatches,
                first,
                max_error: max_error.map(|m| format!("{m:.3e}")),
            }
        }
    }
}

/// numpy's `isclose` with `equal_nan=True`: infinities match only
/// themselves (an infinite difference is never within a finite bound).
fn allclose(got: f64, expected: f64, allowed: f64) -> bool {
    if got.is_nan() || expected.is_nan() {
        return got.is_nan() && expected.is_nan();
    }
    if got.is_infinite() || expected.is_infinite() {
        return got == expected;
    }
    (got - expected).abs() <= allowed
}

/// The verdict of conformance's comparator under `mode`, with the error
/// of each difference in ulps (floats) or as the integer difference.
fn by_conformance(
    got: &HostTensor,
    expected: &HostTensor,
    mode: &CompareMode,
    tolerance: String,
) -> Verdict {
    let elem = got.elem();
    let (mismatches, first) = match compare_within(mode, expected, got, Bound::EXACT, Bound::EXACT)
    {
        Ok(()) => (0, Vec::new()),
        Err(mismatch) => (
            mismatch.count,
            mismatch
                .first
                .iter()
                .map(|d| Difference {
                    index: d.index,
                    got: d.actual,
                    expected: d.expected,
                    error: match elem {
                        _ if elem.is_float() => d.ulp.map(|u| format!("{u} ulp")),
                        ScalarType::I32 => Some(
                            (i64::from(d.actual as i32) - i64::from(d.expected as i32)).to_string(),
                        ),
                        ScalarType::U32 => {
                            Some((i64::from(d.actual) - i64::from(d.expected)).to_string())
                        }
                        _ => None,
                    },
                })
                .collect(),
        ),
    };
    Verdict {
        elem,
        shape: got.shape().to_vec(),
        tolerance,
        total: got.len(),
        mismatches,
        first,
        max_error: None,
    }
}

/// The largest ulp distance over the elements that are both numbers, in the
/// output's own type (`None` when no such element exists).
fn max_ulp(got: &HostTensor, expected: &HostTensor) -> Option<String> {
    let elem = got.elem();
    got.to_bits()
        .iter()
        .zip(expected.to_bits())
        .filter_map(|(&g, e)| match elem {
            ScalarType::F32 => ulp_distance(f32::from_bits(g), f32::from_bits(e))
                .filter(|_| !f32::from_bits(g).is_nan()),
            _ => ulp_distance16(elem, g, e)
                .filter(|_| !mpmd_core::numerics::to_f32(elem, g as u16).is_none_or(f32::is_nan)),
        })
        .max()
        .map(|u| format!("{u} ulp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(values: &[f32]) -> HostTensor {
        HostTensor::from_f32(vec![values.len() as u32], values)
    }

    fn next_up(v: f32) -> f32 {
        f32::from_bits(v.to_bits() + 1)
    }

    #[test]
    fn one_ulp_fails_ulp_0_and_passes_ulp_1() {
        let expected = f32s(&[1.0, 2.0]);
        let got = f32s(&[1.0, next_up(2.0)]);
        let strict = compare(&got, &expected, Tolerance::Ulp(0));
        assert_eq!(
            strict.render(),
            "1 of 2 elements differ (--ulp 0; max error 1 ulp)\n  \
             [1] got 2.0000002 (0x40000001), expected 2.0 (0x40000000), error 1 ulp"
        );
        let loose = compare(&got, &expected, Tolerance::Ulp(1));
        assert_eq!(loose.render(), "ok (2 elements; --ulp 1; max error 1 ulp)");
    }

    #[test]
    fn nan_matches_nan_and_not_a_number() {
        let expected = f32s(&[f32::NAN, 1.0]);
        let got = f32s(&[f32::NAN, f32::NAN]);
        for tolerance in [
            Tolerance::Exact,
            Tolerance::Ulp(4),
            Tolerance::Close {
                rtol: 1.0,
                atol: 1.0,
            },
        ] {
            let verdict = compare(&got, &expected, tolerance);
            assert_eq!(verdict.mismatches, 1, "{tolerance:?}");
            assert_eq!(verdict.first[0].index, 1);
            assert_eq!(verdict.first[0].error, None, "no distance to a NaN");
        }
    }

    #[test]
    fn allclose_is_numpys_formula() {
        let expected = f32s(&[100.0, 0.0, f32::INFINITY, 1.0]);
        let got = f32s(&[100.1, 0.0005, f32::INFINITY, 1.0]);
        let tolerance = Tolerance::Close {
            rtol: 1e-3,
            atol: 1e-3,
        };
        assert!(compare(&got, &expected, tolerance).passed());
        let tight = Tolerance::Close {
            rtol: 1e-4,
            atol: 0.0,
        };
        let verdict = compare(&got, &expected, tight);
        assert_eq!(
            verdict.render(),
            "2 of 4 elements differ (--rtol 0.0001 --atol 0: |got - expected| <= atol + rtol * |expected|; max error 1.000e-1)\n  \
             [0] got 100.1 (0x42c83333), expected 100.0 (0x42c80000), error 1.000e-1 > allowed 1.000e-2\n  \
             [1] got 0.0005 (0x3a03126f), expected 0.0 (0x00000000), error 5.000e-4 > allowed 0.000e0"
        );
        let inf = compare(&f32s(&[f32::INFINITY]), &f32s(&[f32::MAX]), tolerance);
        assert_eq!(inf.mismatches, 1, "infinity is never close to a number");
    }

    #[test]
    fn integers_are_exact_whatever_the_tolerance() {
        let expected = HostTensor::from_i32(vec![2, 2], &[1, 2, 3, 4]);
        let got = HostTensor::from_i32(vec![2, 2], &[1, 2, 3, 5]);
        let verdict = compare(&got, &expected, Tolerance::Ulp(10));
        assert_eq!(
            verdict.render(),
            "1 of 4 elements differ (exact (integer output))\n  [1, 1] got 5, expected 4, error 1"
        );
        let bools = HostTensor::new(ScalarType::Bool, vec![2], vec![1, 0]).unwrap();
        let flipped = HostTensor::new(ScalarType::Bool, vec![2], vec![1, 1]).unwrap();
        assert_eq!(
            compare(&flipped, &bools, Tolerance::Exact).render(),
            "1 of 2 elements differ (exact)\n  [1] got true, expected false"
        );
    }

    #[test]
    fn sixteen_bit_floats_count_their_own_ulps() {
        let one = u32::from(mpmd_core::numerics::f16_from_f32(1.0));
        let expected = HostTensor::new(ScalarType::F16, vec![1], vec![one]).unwrap();
        let got = HostTensor::new(ScalarType::F16, vec![1], vec![one + 2]).unwrap();
        assert_eq!(
            compare(&got, &expected, Tolerance::Ulp(1)).render(),
            "1 of 1 elements differ (--ulp 1; max error 2 ulp)\n  \
             [0] got 1.0019531f16 (0x3c02), expected 1f16 (0x3c00), error 2 ulp"
        );
        assert!(compare(&got, &expected, Tolerance::Ulp(2)).passed());
    }

    #[test]
    fn indices_are_numpy_indices() {
        assert_eq!(index_text(17, &[256]), "[17]");
        assert_eq!(index_text(13, &[4, 8]), "[1, 5]");
        assert_eq!(index_text(0, &[]), "[]");
    }

    #[test]
    fn long_reports_say_how_many_are_not_shown() {
        let expected = f32s(&[0.0; 10]);
        let got = f32s(&[1.0; 10]);
        let text = compare(&got, &expected, Tolerance::Exact).render();
        assert_eq!(text.lines().count(), 1 + FIRST_DIFFERENCES + 1, "{text}");
        assert!(text.ends_with("\n  ... and 2 more"), "{text}");
    }
}
