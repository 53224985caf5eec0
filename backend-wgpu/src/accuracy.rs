//! The WGSL backend's accuracy profile, measured on lavapipe (Mesa 22.3.6,
//! LLVM 15, llvmpipe 256 bits) by `tests/accuracy.rs`; ACCURACY.md has the
//! table and the special values. Conformance judges this backend's float
//! results within these bounds.

/// Measured float behaviour of one adapter.
#[derive(Clone, Debug, PartialEq)]
pub struct AccuracyProfile {
    /// The adapter measured.
    pub adapter: &'static str,
    /// Whether subnormal inputs of arithmetic are treated as zero.
    pub flushes_subnormal_inputs: bool,
    /// Whether arithmetic results in the subnormal range become zero.
    pub flushes_subnormal_results: bool,
    /// Largest measured error in ulp per operation (see ACCURACY.md for the
    /// domains); a bound a little above the measurement.
    pub ulp: Vec<(&'static str, f64)>,
    /// Measured behaviour outside any bound, by the case tag that exercises
    /// it: conformance reports cases with that tag as skipped on this
    /// adapter, naming the behaviour, rather than passing or failing them.
    pub deviations: Vec<(&'static str, &'static str)>,
}

/// lavapipe's profile (the adapter tests and CI have).
pub fn accuracy_profile() -> AccuracyProfile {
    AccuracyProfile {
        adapter: "llvmpipe (LLVM 15.0.6, 256 bits), Mesa 22.3.6, Vulkan",
        flushes_subnormal_inputs: false,
        flushes_subnormal_results: false,
        ulp: vec![
            ("exp", 80.0),
            ("log", 200.0),
            ("sqrt", 0.5),
            ("rsqrt", 2.0),
            ("sin [-pi, pi]", 2.0),
            ("cos [-pi, pi]", 2.0),
            ("sin [-100, 100]", 2.0),
            ("tanh", 1024.0),
            ("pow (a > 0)", 128.0),
            ("a / b", 0.5),
            ("a * b + c (no contraction)", 0.0),
            ("fma(a, b, 1)", 1.0),
        ],
        deviations: vec![(
            "log_subnormal",
            "log of a subnormal input returns log(2^-127) = -88.03 instead of about -103.3 \
             (or -inf if the input were flushed)",
        )],
    }
}
