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
    /// Under `mma`: the element's bound and how far it was.
    pub mma: Option<MmaVerdict>,
}

/// How an element fared under the `mma` bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MmaVerdict {
    /// From the oracle's probes: the number of mma steps that reach the
    /// element (with its slack) and its magnitude (docs/numerics.md).
    pub steps: f64,
    pub magnitude: f32,
    /// `|actual - expected|`, in f64 (NaN when either is NaN, infinite when
    /// one is infinite).
    pub distance: f64,
    /// The allowed distance; `None` when the probes give none (a negative or
    /// NaN step count or magnitude: the output is not a sum of mma results).
    pub bound: Option<f64>,
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
        if let Some(m) = &self.mma {
            write!(f, " {m}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for MmaVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let probes = format!(
            "{:.3} mma steps of magnitude {:?}",
            self.steps, self.magnitude
        );
        match self.bound {
            Some(bound) => write!(
                f,
                "distance {:.3e} > bound {bound:.3e} ({probes})",
                self.distance
            ),
            None => write!(
                f,
                "distance {:.3e}, no bound: the probes gave {probes}, so the output is not a sum of mma results (docs/numerics.md)",
                self.distance
            ),
        }
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
        CompareMode::Mma => {
            return Err(Mismatch {
                count: 0,
                total: expected.len(),
                first: vec![],
                detail: Some(
                    "`mma` judges against the oracle's mma probes, which this comparison was not given (use `compare_mma`)"
                        .into(),
                ),
            })
        }
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
                    mma: None,
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

/// What the oracle's mma probes gave for one output: the interpreter run
/// again, same calls, inputs and seed, with each `MmaProbe`
/// (docs/numerics.md, "Matrix multiply-accumulate").
#[derive(Clone, Debug, PartialEq)]
pub struct MmaProbes {
    /// `MmaProbe::Magnitude`: per element, the magnitude S, |c| plus every
    /// |a_k b_k| that reaches it.
    pub magnitude: HostTensor,
    /// `MmaProbe::StepCount`: per element, the number of mma steps that
    /// reach it plus the magnitude its accumulators started from.
    pub counted: HostTensor,
    /// `MmaProbe::Start`: per element, the magnitude its accumulators
    /// started from.
    pub start: HostTensor,
}

/// How far the step count read from the probes is raised, relative to the
/// count probe: the additions outside the mma round the count probe and the
/// start probe to nearest, each by at most half an f32 ulp (2^-24); 2^-20
/// covers eight such additions of the largest value.
const STEP_COUNT_SLACK: f64 = 1.0 / (1u64 << 20) as f64;

/// The number n of mma steps that reach an element, from its count probe
/// `counted` and start probe `start` (values of the output's type):
/// `counted - start`, raised by [`STEP_COUNT_SLACK`] of `counted` and, for
/// a 16-bit output, by one ulp of the type at `counted` (both probes were
/// rounded to it).
fn mma_steps(elem: ScalarType, counted: u32, start: u32) -> f64 {
    let (value, conversion) = match elem {
        ScalarType::F32 => (f64::from(f32::from_bits(counted)), 0.0),
        _ => (f64::from(widen(elem, counted)), ulp16(elem, counted)),
    };
    let start = match elem {
        ScalarType::F32 => f64::from(f32::from_bits(start)),
        _ => f64::from(widen(elem, start)),
    };
    value - start + STEP_COUNT_SLACK * value.abs() + conversion
}

const TWO_POW_22: f64 = (1u64 << 22) as f64;

/// The relative error one mma step may add to an element, against its
/// magnitude: the tensor-core bound `(k + 1) 2^-22` (k = 16), plus `2^-23`
/// for one rounded f32 addition outside the mma (docs/numerics.md).
pub const MMA_STEP_RELATIVE: f64 = 17.0 / TWO_POW_22 + 0.5 / TWO_POW_22;

/// The absolute error one mma step may add: each of its 17 terms moved by at
/// most `2^-126` where hardware flushes subnormal terms.
pub const MMA_STEP_ABSOLUTE: f64 = 17.0 * (1.0 / (1u128 << 126) as f64);

/// How far an element reached by `steps` mma steps of magnitude
/// `magnitude` may be from the oracle's: `n (MMA_STEP_RELATIVE S +
/// MMA_STEP_ABSOLUTE)`; `None` when either is negative or NaN (the output
/// is then not a sum of mma results). An infinite magnitude gives an
/// infinite bound.
pub fn mma_bound(steps: f64, magnitude: f32) -> Option<f64> {
    (steps >= 0.0 && magnitude >= 0.0)
        .then(|| steps * (MMA_STEP_RELATIVE * f64::from(magnitude) + MMA_STEP_ABSOLUTE))
}

/// One unit in the last place of a 16-bit float at the magnitude of `bits`
/// (the gap to the next larger finite value, or below the largest).
fn ulp16(elem: ScalarType, bits: u32) -> f64 {
    let magnitude = bits & 0x7fff;
    let (low, high) = if widen(elem, magnitude + 1).is_finite() {
        (magnitude, magnitude + 1)
    } else {
        (magnitude - 1, magnitude)
    };
    f64::from(widen(elem, high)) - f64::from(widen(elem, low))
}

/// One element under `mma`: whether it agrees, its ulp distance and the
/// bound it was held to. `bounds` scales the bound: 1 against the oracle,
/// 2 between two backends that are each within one of it.
fn mma_agree(
    elem: ScalarType,
    [expected, actual, magnitude, counted, start]: [u32; 5],
    bounds: f64,
) -> (bool, Option<u64>, MmaVerdict) {
    let value = |bits: u32| match elem {
        ScalarType::F32 => f32::from_bits(bits),
        _ => widen(elem, bits),
    };
    let (e, a) = (value(expected), value(actual));
    let ulp = match elem {
        ScalarType::F32 => ulp_distance(e, a),
        _ => ulp_distance16(elem, expected, actual),
    };
    let (steps, magnitude) = (mma_steps(elem, counted, start), value(magnitude));
    let probed = mma_bound(steps, magnitude);
    // A 16-bit output is the f32 result rounded: each side moves by at most
    // half an ulp of the larger, which is finite below (infinities return
    // first).
    let rounding = || match elem {
        ScalarType::F32 => 0.0,
        _ => ulp16(elem, if e.abs() >= a.abs() { expected } else { actual }),
    };
    let mut verdict = MmaVerdict {
        steps,
        magnitude,
        distance: (f64::from(a) - f64::from(e)).abs(),
        bound: probed.map(|b| b * bounds),
    };
    // The magnitude overflowed f32: the bound assumes no product or sum
    // overflows, and hardware may give an infinity, a NaN (inf - inf) or,
    // with a wider internal exponent, a finite value. Nothing is judged.
    if verdict.bound.is_some_and(f64::is_infinite) {
        return (true, ulp, verdict);
    }
    if e.is_nan() || a.is_nan() {
        return (e.is_nan() && a.is_nan(), ulp, verdict);
    }
    // A subnormal matches zero, as in the other modes (f16 subnormals are
    // f32 normals and never flush).
    let flushes = elem != ScalarType::F16;
    if e == a || (flushes && is_subnormal_or_zero(e) && is_subnormal_or_zero(a)) {
        return (true, ulp, verdict);
    }
    let within = match verdict.bound {
        _ if e.is_infinite() || a.is_infinite() => false,
        Some(bound) => {
            let bound = bound + rounding();
            verdict.bound = Some(bound);
            verdict.distance <= bound
        }
        None => false,
    };
    (within, ulp, verdict)
}

/// Compares `actual` against the oracle's `expected` under `mma`: each
/// element within the bound its probes give (docs/numerics.md), scaled by
/// `bounds` (1 against the oracle; 2 between two backends, each within one).
pub fn compare_mma(
    expected: &HostTensor,
    probes: &MmaProbes,
    actual: &HostTensor,
    bounds: f64,
) -> Result<(), Mismatch> {
    let same = |t: &HostTensor| {
        t.shape() == expected.shape() && t.len() == expected.len() && t.elem() == expected.elem()
    };
    let describe = |what: &str, t: &HostTensor| {
        format!(
            "shape differs: expected {} {:?} got {} {:?}{what}",
            expected.elem(),
            expected.shape(),
            t.elem(),
            t.shape()
        )
    };
    let detail = if !same(actual) {
        Some(describe("", actual))
    } else if !same(&probes.magnitude) {
        Some(describe(" (the magnitude probe)", &probes.magnitude))
    } else if !same(&probes.counted) {
        Some(describe(" (the step-count probe)", &probes.counted))
    } else if !same(&probes.start) {
        Some(describe(" (the start probe)", &probes.start))
    } else {
        None
    };
    if detail.is_some() {
        return Err(Mismatch {
            count: 0,
            total: expected.len(),
            first: vec![],
            detail,
        });
    }
    let elem = expected.elem();
    let words = [
        expected.to_bits(),
        actual.to_bits(),
        probes.magnitude.to_bits(),
        probes.counted.to_bits(),
        probes.start.to_bits(),
    ];
    let mut first = Vec::new();
    let mut count = 0;
    for index in 0..expected.len() {
        let element = words.each_ref().map(|w| w[index]);
        let (ok, ulp, verdict) = mma_agree(elem, element, bounds);
        if !ok {
            count += 1;
            if first.len() < FIRST_DIFFERENCES {
                first.push(Difference {
                    index,
                    expected: element[0],
                    actual: element[1],
                    elem,
                    ulp,
                    mma: Some(verdict),
                });
            }
        }
    }
    if count == 0 {
        Ok(())
    } else {
        Err(Mismatch {
            count,
            total: expected.len(),
            first,
            detail: None,
        })
    }
}

/// Compares `actual` against the oracle's `expected` by `mode`: `mma` by the
/// oracle's `probes` ([`compare_mma`], `bounds` times the bound: 1 against
/// the oracle, 2 between two backends), every other mode by
/// [`compare_within`] with `exact` and `profile`. An `mma` output without
/// probes is a mismatch that says so.
pub fn compare_probed(
    mode: &CompareMode,
    expected: &HostTensor,
    probes: Option<&MmaProbes>,
    actual: &HostTensor,
    [exact, profile]: [Tolerance; 2],
    bounds: f64,
) -> Result<(), Mismatch> {
    match (mode, probes) {
        (CompareMode::Mma, Some(probes)) => compare_mma(expected, probes, actual, bounds),
        _ => compare_within(mode, expected, actual, exact, profile),
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

    /// `ulps` units in the last place above `v`.
    fn above(v: f32, ulps: u32) -> f32 {
        f32::from_bits(v.to_bits() + ulps)
    }

    /// A 16-bit tensor of the values, rounded.
    fn sixteen(elem: ScalarType, values: &[f32]) -> HostTensor {
        let bits = values
            .iter()
            .map(|&v| u32::from(mpmd_core::numerics::from_f32(elem, v).unwrap()))
            .collect();
        HostTensor::new(elem, vec![values.len() as u32], bits).unwrap()
    }

    /// Probes of accumulators that start from zero: `steps` counted.
    fn probes(steps: &[f32], magnitude: &[f32]) -> MmaProbes {
        MmaProbes {
            magnitude: f(magnitude),
            counted: f(steps),
            start: f(&vec![0.0; steps.len()]),
        }
    }

    #[test]
    fn the_mma_bound_is_steps_times_the_relative_and_absolute_terms() {
        assert_eq!(MMA_STEP_RELATIVE, 35.0 * f64::powi(2.0, -23));
        assert_eq!(MMA_STEP_ABSOLUTE, 17.0 * f64::powi(2.0, -126));
        assert_eq!(
            mma_bound(2.0, 16.0),
            Some(35.0 * f64::powi(2.0, -18) + 34.0 * f64::powi(2.0, -126))
        );
        // The count is read against the start probe, raised by 2^-20 of
        // the count (and for 16-bit outputs one ulp of the type).
        assert_eq!(
            mma_steps(ScalarType::F32, 2.0f32.to_bits(), 0),
            2.0 + f64::powi(2.0, -19)
        );
        assert_eq!(
            mma_steps(ScalarType::F32, 1024.0f32.to_bits(), 1021.0f32.to_bits()),
            3.0 + f64::powi(2.0, -10)
        );
        assert_eq!(
            mma_steps(ScalarType::BF16, 0x4080, 0x4000),
            2.0 + f64::powi(2.0, -18) + f64::powi(2.0, -5)
        );
        assert_eq!(mma_bound(0.0, 16.0), Some(0.0));
        assert_eq!(mma_bound(1.0, f32::INFINITY), Some(f64::INFINITY));
        assert_eq!(mma_bound(-1.0, 16.0), None);
        assert_eq!(mma_bound(1.0, -0.5), None);
        assert_eq!(mma_bound(f64::NAN, 1.0), None);
    }

    #[test]
    fn mma_passes_inside_the_bound_and_fails_just_outside_with_it() {
        // Two steps of magnitude 16: the bound is 35 * 2^-18 (plus 34 *
        // 2^-126), which is 140 ulps of 10.0 (2^-20 each).
        let e = f(&[10.0, 10.0]);
        let p = probes(&[2.0, 2.0], &[16.0, 16.0]);
        assert_eq!(
            compare_mma(&e, &p, &f(&[10.0, above(10.0, 140)]), 1.0),
            Ok(())
        );
        let m = compare_mma(&e, &p, &f(&[10.0, above(10.0, 141)]), 1.0).unwrap_err();
        assert_eq!(m.count, 1);
        assert_eq!(
            m.to_string(),
            "1 of 2 elements differ\n      [1] expected 10.0 (0x41200000) got 10.000134 (0x4120008d) (141 ulp) distance 1.345e-4 > bound 1.335e-4 (2.000 mma steps of magnitude 16.0)"
        );
        let verdict = m.first[0].mma.unwrap();
        assert_eq!(verdict.distance, 141.0 * f64::powi(2.0, -20));
        assert_eq!(verdict.bound, mma_bound(2.0 + f64::powi(2.0, -19), 16.0));
        // Two steps on accumulators that started at 100: the same bound.
        let from_100 = MmaProbes {
            magnitude: f(&[16.0]),
            counted: f(&[102.0]),
            start: f(&[100.0]),
        };
        let one = |v: f32| f(&[v]);
        assert_eq!(
            compare_mma(&one(10.0), &from_100, &one(above(10.0, 140)), 1.0),
            Ok(())
        );
        assert!(compare_mma(&one(10.0), &from_100, &one(above(10.0, 141)), 1.0).is_err());
        // Below 10, the same distance is more ulps; it is the distance that counts.
        assert_eq!(
            compare_mma(
                &f(&[-7.0]),
                &probes(&[2.0], &[16.0]),
                &f(&[-7.0 - 140.0 * 2f32.powi(-20)]),
                1.0
            ),
            Ok(())
        );
        // Between two backends each within the bound, twice the bound.
        assert_eq!(
            compare_mma(&e, &p, &f(&[10.0, above(10.0, 280)]), 2.0),
            Ok(())
        );
        assert!(compare_mma(&e, &p, &f(&[10.0, above(10.0, 281)]), 2.0).is_err());
        // No step reaches the element: it must be exact.
        assert!(compare_mma(
            &f(&[1.0]),
            &probes(&[0.0], &[1.0]),
            &f(&[above(1.0, 1)]),
            1.0
        )
        .is_err());
    }

    #[test]
    fn mma_on_16_bit_outputs_adds_one_ulp_of_the_type() {
        let bf = |v: &[f32]| sixteen(ScalarType::BF16, v);
        let p = MmaProbes {
            magnitude: bf(&[16.0]),
            counted: bf(&[1.0]),
            start: bf(&[0.0]),
        };
        // bf16 ulps at 10 are 2^-4; the probes' bound is far below one.
        assert_eq!(compare_mma(&bf(&[10.0]), &p, &bf(&[10.0625]), 1.0), Ok(()));
        let m = compare_mma(&bf(&[10.0]), &p, &bf(&[10.125]), 1.0).unwrap_err();
        assert_eq!(
            m.to_string(),
            "1 of 1 elements differ\n      [0] expected 10bf16 (0x4120) got 10.125bf16 (0x4122) (2 ulp) distance 1.250e-1 > bound 6.257e-2 (1.008 mma steps of magnitude 16.0)"
        );
        // An f16 infinity is no ulp away from the largest finite value.
        let h = |v: &[f32]| sixteen(ScalarType::F16, v);
        let p16 = MmaProbes {
            magnitude: h(&[65504.0]),
            counted: h(&[1.0]),
            start: h(&[0.0]),
        };
        assert!(compare_mma(&h(&[65504.0]), &p16, &h(&[f32::INFINITY]), 1.0).is_err());
    }

    #[test]
    fn mma_handles_nan_infinity_and_probes_that_give_no_bound() {
        let p = probes(&[1.0; 4], &[4.0; 4]);
        let e = f(&[f32::NAN, 1.0, f32::INFINITY, 2.0]);
        // NaN matches NaN only; an infinity only itself.
        let a = f(&[f32::from_bits(0x7fc0_0001), 1.0, f32::INFINITY, -0.0 + 2.0]);
        assert_eq!(compare_mma(&e, &p, &a, 1.0), Ok(()));
        let a = f(&[1.0, f32::NAN, f32::MAX, f32::INFINITY]);
        let m = compare_mma(&e, &p, &a, 1.0).unwrap_err();
        assert_eq!(m.count, 4);
        // The magnitude overflowed f32: nothing is judged, a NaN against a
        // number neither (inf - inf in one order, a wider exponent in another).
        let huge = probes(&[1.0; 3], &[f32::INFINITY; 3]);
        let e = f(&[1.0, 1.0, f32::NAN]);
        assert_eq!(
            compare_mma(&e, &huge, &f(&[-3.0e38, f32::NAN, 2.5]), 1.0),
            Ok(())
        );
        // A finite magnitude still holds NaN to NaN.
        assert!(compare_mma(&e, &probes(&[1.0; 3], &[4.0; 3]), &f(&[1.0, 1.0, 2.5]), 1.0).is_err());
        // A negative magnitude: the output is no sum of mma results.
        let m = compare_mma(
            &f(&[1.0]),
            &probes(&[1.0], &[-1.0]),
            &f(&[above(1.0, 1)]),
            1.0,
        )
        .unwrap_err();
        assert_eq!(
            m.to_string(),
            "1 of 1 elements differ\n      [0] expected 1.0 (0x3f800000) got 1.0000001 (0x3f800001) (1 ulp) distance 1.192e-7, no bound: the probes gave 1.000 mma steps of magnitude -1.0, so the output is not a sum of mma results (docs/numerics.md)"
        );
        // Equal values pass whatever the probes say; subnormals match zero.
        assert_eq!(
            compare_mma(
                &f(&[1.0, 1e-45]),
                &probes(&[-1.0; 2], &[-1.0; 2]),
                &f(&[1.0, 0.0]),
                1.0
            ),
            Ok(())
        );
    }

    #[test]
    fn mma_needs_the_probes_and_their_shape() {
        let e = f(&[1.0, 2.0]);
        let m = compare(&CompareMode::Mma, &e, &e, Tolerance::EXACT).unwrap_err();
        assert_eq!(
            m.to_string(),
            "`mma` judges against the oracle's mma probes, which this comparison was not given (use `compare_mma`)"
        );
        let m = compare_mma(&e, &probes(&[1.0], &[1.0, 1.0]), &e, 1.0).unwrap_err();
        assert_eq!(
            m.to_string(),
            "shape differs: expected f32 [2] got f32 [1] (the step-count probe)"
        );
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
