//! The WGSL backend's accuracy profile, measured on lavapipe (Mesa 22.3.6,
//! LLVM 15, llvmpipe 256 bits) by `tests/accuracy.rs`; ACCURACY.md has the
//! table and the special values. Conformance judges this backend's float
//! results within these bounds.
//!
//! Other adapters differ in ways no tolerance covers: NVIDIA's Vulkan driver
//! flushes subnormal f32 values to zero (WGSL allows it). [`probe_adapter`]
//! measures that when the adapter is opened, and [`profile_for`] turns it
//! into a deviation, so that conformance skips the cases it affects with the
//! reason instead of failing them.

use mpmd_core::host::{CallArgs, HostTensor};
use mpmd_core::ir::ScalarType::{F32, U32};
use mpmd_core::ir::{
    at, axis_index, gmem, load, Expr, KernelBuilder, MapBuilder, MeshBuilder, Module,
};
use mpmd_core::{Backend, RunError, RunOptions};

use crate::WgpuBackend;

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
            ("fma(a, b, 1)", 0.5),
        ],
        deviations: vec![(
            "log_subnormal",
            "log of a subnormal input returns log(2^-127) = -88.03 instead of about -103.3 \
             (or -inf if the input were flushed)",
        )],
    }
}

/// Float behaviour measured on the adapter itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloatBehaviour {
    /// `x + x` of a subnormal `x` (from a buffer, so nothing folds it) is 0
    /// instead of a normal number.
    pub flushes_subnormal_inputs: bool,
    /// `2^-126 * 0.5` (both normal) is 0 instead of the subnormal 2^-127.
    pub flushes_subnormal_results: bool,
}

/// The tag of cases whose inputs or literals include subnormal f32 values
/// (conformance derives it from the program).
pub const SUBNORMAL_TAG: &str = "subnormal";

/// Runs a one-block probe on the backend's adapter.
pub fn probe_adapter(backend: &mut WgpuBackend) -> Result<FloatBehaviour, RunError> {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 1).build();
    let map = MapBuilder::new("float_probe")
        .program("m", "probe")
        .input("x", gmem(F32, [2]))
        .output("y", gmem(U32, [2]))
        .build();
    let kernel = KernelBuilder::new("probe", map.params()).body(|b| {
        let zero = axis_index("t");
        // x = [2^-127 (subnormal), 2^-126 (smallest normal)]
        let sub = load("x", [zero.clone()]);
        let normal = load("x", [zero.clone() + Expr::from(1u32)]);
        b.store(at("y", [zero.clone()]), (sub * 1.0f32).bitcast(U32));
        b.store(
            at("y", [zero + Expr::from(1u32)]),
            (normal * 0.5f32).bitcast(U32),
        );
    });
    let module = Module {
        meshes: vec![mesh],
        kernels: vec![kernel],
        maps: vec![map],
        ..Default::default()
    };
    let module = mpmd_core::validate::validate(&module, &Default::default())
        .map_err(|d| RunError::Backend(format!("float probe: {d:?}")))?;
    let plan = mpmd_core::plan::lower(&module, "float_probe")
        .map_err(|e| RunError::Backend(format!("float probe: {e}")))?;
    let mut args = CallArgs::default();
    let subnormal = f32::from_bits(1 << 22); // 2^-127
    args.inputs.insert(
        "x".into(),
        HostTensor::from_f32(vec![2], &[subnormal, f32::MIN_POSITIVE]),
    );
    let out = backend.run(&plan, &args, &RunOptions::default())?;
    let y = &out.outputs["y"].words();
    // A flushed value is +0 or -0.
    let is_zero = |w: u32| w & 0x7fff_ffff == 0;
    Ok(FloatBehaviour {
        flushes_subnormal_inputs: is_zero(y[0]),
        flushes_subnormal_results: is_zero(y[1]),
    })
}

/// The profile conformance applies on an adapter: the bounds measured on
/// lavapipe (`adapter` names it), with the adapter's own measured subnormal
/// handling and, where it flushes, a deviation for the cases that need
/// subnormals.
pub fn profile_for(behaviour: FloatBehaviour) -> AccuracyProfile {
    let mut profile = accuracy_profile();
    profile.flushes_subnormal_inputs = behaviour.flushes_subnormal_inputs;
    profile.flushes_subnormal_results = behaviour.flushes_subnormal_results;
    if behaviour.flushes_subnormal_inputs || behaviour.flushes_subnormal_results {
        profile.deviations.push((
            SUBNORMAL_TAG,
            "this adapter flushes subnormal f32 values to zero (measured when it was opened; \
             WGSL allows it), so results computed from subnormals differ",
        ));
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushing_adapters_get_a_subnormal_deviation() {
        let keeps = FloatBehaviour {
            flushes_subnormal_inputs: false,
            flushes_subnormal_results: false,
        };
        assert_eq!(profile_for(keeps), accuracy_profile());
        let flushes = profile_for(FloatBehaviour {
            flushes_subnormal_inputs: true,
            flushes_subnormal_results: true,
        });
        assert!(flushes.flushes_subnormal_inputs && flushes.flushes_subnormal_results);
        let (tag, behaviour) = flushes.deviations.last().unwrap();
        assert_eq!(*tag, SUBNORMAL_TAG);
        assert!(behaviour.starts_with("this adapter flushes subnormal f32 values to zero"));
        assert_eq!(flushes.ulp, accuracy_profile().ulp);
    }
}
