//! Native f16 conversions (issue 25): where the backend widens with WGSL's
//! `unpack2x16float` and narrows with the adapter's f32 addition, and where
//! it converts on the bits.
//! The probe's own comparisons (every f16 pattern, every rounding boundary,
//! and that other roundings fail it) are `f16_conversions.rs`'s unit tests;
//! `tests/sixteen_bit.rs` runs every f16 operation, cast and math function
//! both ways against the rules.

mod common;

use common::*;
use mpmd_core::Mode;
use mpmd_wgpu::{F16Conversions, WgpuOptions};

const F16_PLAN: &str = "
mesh m { grid [b = 2]; threads t = 64; }
kernel axpb16(x: gmem<f16[128]>, y: gmem<f16[128]>, alpha: f16, beta: f16) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  y[i] = x[i] * alpha + beta;
}
map axpb16 { programs [m: axpb16]; inputs [x: gmem<f16[128]>]; outputs [y: gmem<f16[128]>]; scalars [alpha: f16, beta: f16]; }
";

/// On lavapipe (Mesa 22.3.6) the probe passes: every f16 pattern widens
/// exactly and every rounding boundary narrows as the language rounds, so
/// f16 code uses `unpack2x16float` and the branch-free narrowing. Measured, not assumed: on an adapter where
/// the probe fails, the choice says why and the conversions stay on the
/// bits (`f16_conversions.rs`'s `every_other_conversion_fails`).
#[test]
fn lavapipe_passes_the_probe_and_converts_natively() {
    let wgpu = backend(WgpuOptions::default());
    require_llvmpipe(&wgpu, "its f16 conversions passed the probe when measured");
    let choice = wgpu.f16_conversions();
    assert_eq!(
        choice.to_string(),
        "native f16 conversions (a probe dispatch found them exact on every f16 pattern and every \
         rounding boundary)"
    );
    let p = plan(&module(F16_PLAN), "axpb16");
    let wgsl = wgpu.wgsl(&p, Mode::Fast).unwrap();
    assert!(wgsl.contains("unpack2x16float(h).x"), "{wgsl}");
    // Narrowing rounds subnormals with the adapter's f32 addition.
    assert!(wgsl.contains("bitcast<f32>(a) + 0.5"), "{wgsl}");
}

/// Only plans with f16 values take the probed choice (and pay for the
/// probe); a request overrides it.
#[test]
fn the_choice_applies_to_plans_with_f16_values() {
    let wgpu = backend(WgpuOptions::default());
    let adapter = wgpu.f16_conversions().conversions;
    let f32_plan = plan(
        &module(
            "
mesh m { threads t = 64; }
kernel k(x: gmem<f32[64]>, y: gmem<bf16[64]>) { y[axis_index(t)] = bf16(x[axis_index(t)]); }
map k { programs [m: k]; inputs [x: gmem<f32[64]>]; outputs [y: gmem<bf16[64]>]; }
",
        ),
        "k",
    );
    assert_eq!(
        wgpu.plan_emit_options(&f32_plan, Mode::Fast)
            .f16_conversions,
        F16Conversions::Emulated
    );
    // An f16 value that only a cast makes, in a kernel of f32 arrays.
    let cast_plan = plan(
        &module(
            "
mesh m { threads t = 64; }
kernel k(x: gmem<f32[64]>, y: gmem<f32[64]>) { y[axis_index(t)] = f32(f16(x[axis_index(t)])); }
map k { programs [m: k]; inputs [x: gmem<f32[64]>]; outputs [y: gmem<f32[64]>]; }
",
        ),
        "k",
    );
    let f16_plan = plan(&module(F16_PLAN), "axpb16");
    for p in [&cast_plan, &f16_plan] {
        assert_eq!(
            wgpu.plan_emit_options(p, Mode::Fast).f16_conversions,
            adapter
        );
    }
    for forced in [F16Conversions::Emulated, F16Conversions::Native] {
        let wgpu = backend(WgpuOptions {
            f16_conversions: Some(forced),
            ..WgpuOptions::default()
        });
        assert_eq!(wgpu.f16_conversions().conversions, forced);
        assert_eq!(
            wgpu.plan_emit_options(&f16_plan, Mode::Fast)
                .f16_conversions,
            forced
        );
    }
}

/// Both ways compute the interpreter's bits (`assert_same`), infinities
/// and values past f16's range included.
#[test]
fn both_ways_agree_with_the_interpreter() {
    let m = module(F16_PLAN);
    let x: Vec<f32> = (0..128).map(|k| (k as f32 - 64.0) * 1037.25).collect();
    let x = mpmd_core::host::HostTensor::new(
        mpmd_core::ir::ScalarType::F16,
        vec![128],
        x.iter()
            .map(|&v| u32::from(mpmd_core::numerics::f16_from_f32(v)))
            .collect(),
    )
    .unwrap();
    let half = |v: f32| mpmd_core::ir::Literal::F16(mpmd_core::numerics::f16_from_f32(v));
    let call = args(
        vec![("x", x)],
        vec![("alpha", half(0.3339)), ("beta", half(-3.0e-5))],
    );
    for way in [F16Conversions::Emulated, F16Conversions::Native] {
        let mut wgpu = backend(WgpuOptions {
            f16_conversions: Some(way),
            ..WgpuOptions::default()
        });
        assert_same(&mut wgpu, &m, "axpb16", &call);
    }
}
