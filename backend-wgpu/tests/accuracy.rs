//! Measures the adapter's float behaviour by running kernels against a Rust
//! f64 reference, prints the table (ACCURACY.md records lavapipe's), and
//! checks it against `accuracy_profile()` on the adapter it was measured on.

mod common;

use common::*;
use mpmd_core::backend::Backend;
use mpmd_core::host::HostTensor;
use mpmd_wgpu::{accuracy_profile, WgpuOptions};

const N: usize = 16384;

/// Functions measured, in output-row order: name, domain sampler, reference.
type Reference = fn(f64, f64) -> f64;

struct Case {
    name: &'static str,
    expr: &'static str,
    domain: (f64, f64),
    log_spaced: bool,
    reference: Reference,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "exp",
            expr: "exp(A)",
            domain: (-87.0, 88.0),
            log_spaced: false,
            reference: |a, _| a.exp(),
        },
        Case {
            name: "log",
            expr: "log(A)",
            domain: (1e-30, 1e30),
            log_spaced: true,
            reference: |a, _| a.ln(),
        },
        Case {
            name: "sqrt",
            expr: "sqrt(A)",
            domain: (1e-30, 1e30),
            log_spaced: true,
            reference: |a, _| a.sqrt(),
        },
        Case {
            name: "rsqrt",
            expr: "rsqrt(A)",
            domain: (1e-30, 1e30),
            log_spaced: true,
            reference: |a, _| 1.0 / a.sqrt(),
        },
        Case {
            name: "sin [-pi, pi]",
            expr: "sin(A)",
            domain: (-std::f64::consts::PI, std::f64::consts::PI),
            log_spaced: false,
            reference: |a, _| a.sin(),
        },
        Case {
            name: "cos [-pi, pi]",
            expr: "cos(A)",
            domain: (-std::f64::consts::PI, std::f64::consts::PI),
            log_spaced: false,
            reference: |a, _| a.cos(),
        },
        Case {
            name: "sin [-100, 100]",
            expr: "sin(A)",
            domain: (-100.0, 100.0),
            log_spaced: false,
            reference: |a, _| a.sin(),
        },
        Case {
            name: "tanh",
            expr: "tanh(A)",
            domain: (-9.0, 9.0),
            log_spaced: false,
            reference: |a, _| a.tanh(),
        },
        Case {
            name: "pow (a > 0)",
            expr: "pow(A, B)",
            domain: (1e-3, 100.0),
            log_spaced: true,
            reference: |a, b| a.powf(b),
        },
        Case {
            name: "a / b",
            expr: "A / B",
            domain: (1e-20, 1e20),
            log_spaced: true,
            reference: |a, b| a / b,
        },
        Case {
            name: "a * b + c (no contraction)",
            expr: "A * B + 1.0",
            domain: (-1e3, 1e3),
            log_spaced: false,
            reference: |a, b| ((a * b) as f32) as f64 + 1.0,
        },
        Case {
            name: "fma(a, b, 1)",
            expr: "fma(A, B, 1.0)",
            domain: (-1e3, 1e3),
            log_spaced: false,
            reference: |a, b| a * b + 1.0,
        },
    ]
}

/// Deterministic samples over a domain.
fn samples(case: &Case, salt: u64) -> Vec<f32> {
    let mut state = 0x2545_F491_4F6C_DD1Du64 ^ salt;
    (0..N)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            let (lo, hi) = case.domain;
            let v = if case.log_spaced {
                (lo.ln() + u * (hi.ln() - lo.ln())).exp()
            } else {
                lo + u * (hi - lo)
            };
            v as f32
        })
        .collect()
}

/// Error in units of the f32 ulp at the reference value.
fn ulp_error(got: f32, reference: f64) -> f64 {
    if reference.is_nan() || got.is_nan() {
        return if reference.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let r = reference as f32;
    if r.is_infinite() || got.is_infinite() {
        return if r == got { 0.0 } else { f64::INFINITY };
    }
    let exponent = if r == 0.0 {
        -126
    } else {
        (r.abs().log2().floor() as i32).max(-126)
    };
    let ulp = 2f64.powi(exponent - 23);
    (got as f64 - reference).abs() / ulp
}

fn kernel_source(cases: &[Case]) -> String {
    let rows = cases.len();
    let mut body = String::new();
    for (k, c) in cases.iter().enumerate() {
        body.push_str(&format!(
            "  {{\n    let a{k}: f32 = xs[{k}u, i];\n    let b{k}: f32 = ws[{k}u, i];\n    o[{k}u, i] = {};\n  }}\n",
            c.expr.replace('A', &format!("a{k}")).replace('B', &format!("b{k}"))
        ));
    }
    // `if` blocks scope the lets; the text format has no bare blocks.
    let body = body.replace("  {\n", "  if true {\n");
    format!(
        "
mesh m {{
  grid [b = {blocks}];
  threads t = 256;
}}
kernel measure(xs: gmem<f32[{rows}, {N}]>, ws: gmem<f32[{rows}, {N}]>, o: gmem<f32[{rows}, {N}]>) {{
  let i: u32 = axis_index(b) * 256u + axis_index(t);
{body}}}
map measure {{
  programs [m: measure];
  inputs [xs: gmem<f32[{rows}, {N}]>, ws: gmem<f32[{rows}, {N}]>];
  outputs [o: gmem<f32[{rows}, {N}]>];
}}
",
        blocks = N / 256
    )
}

#[test]
fn accuracy_profile_holds_on_this_adapter() {
    let mut wgpu = backend(WgpuOptions::default());
    let cases = cases();
    let src = kernel_source(&cases);
    let m = module(&src);
    let p = plan(&m, "measure");
    let mut xs = Vec::new();
    let mut ws = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        xs.extend(samples(c, k as u64 * 2 + 1));
        let w: Vec<f32> = match c.name {
            "pow (a > 0)" => samples(
                &Case {
                    domain: (-10.0, 10.0),
                    log_spaced: false,
                    ..cases_dummy()
                },
                99,
            ),
            _ => samples(c, k as u64 * 2 + 2),
        };
        ws.extend(w);
    }
    let rows = cases.len() as u32;
    let a = args(
        vec![
            ("xs", HostTensor::from_f32(vec![rows, N as u32], &xs)),
            ("ws", HostTensor::from_f32(vec![rows, N as u32], &ws)),
        ],
        vec![],
    );
    let out = wgpu.run(&p, &a, &fast()).unwrap().outputs["o"].to_f32();
    let profile = accuracy_profile();
    println!("adapter: {}", wgpu.adapter_info());
    println!("| operation | domain | max error (ulp) | max absolute error |");
    let mut measured = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        let mut worst = 0.0f64;
        let mut worst_abs = 0.0f64;
        for i in 0..N {
            let (x, w) = (xs[k * N + i] as f64, ws[k * N + i] as f64);
            let reference = (c.reference)(x, w);
            if !reference.is_finite()
                || reference.abs() > f32::MAX as f64
                || (reference != 0.0 && reference.abs() < 1.2e-38)
            {
                continue;
            }
            worst = worst.max(ulp_error(out[k * N + i], reference));
            worst_abs = worst_abs.max((out[k * N + i] as f64 - reference).abs());
        }
        println!(
            "| {} | {:?} | {worst:.2} | {worst_abs:.3e} |",
            c.name, c.domain
        );
        measured.push((c.name, worst));
    }
    // Conformance judges every adapter's float results within these bounds
    // (`profile_for` keeps them), so they must hold on whichever adapter
    // runs this, not only on the lavapipe they were measured on.
    let adapter = wgpu.adapter_info();
    for (name, worst) in &measured {
        let bound = profile
            .ulp
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no profile entry for {name}"))
            .1;
        assert!(
            *worst <= bound,
            "{name}: measured {worst} ulp on {adapter}, the profile conformance applies says {bound}"
        );
    }
    assert_eq!(
        measured.len(),
        profile.ulp.len(),
        "every profile entry is measured"
    );
}

fn cases_dummy() -> Case {
    Case {
        name: "",
        expr: "",
        domain: (0.0, 1.0),
        log_spaced: false,
        reference: |a, _| a,
    }
}

const SPECIALS: &str = "
mesh m {
  threads t = 1;
}
kernel specials(x: gmem<f32[8]>, o: gmem<f32[20]>) {
  let sub: f32 = x[0];
  let pinf: f32 = x[1];
  let qnan: f32 = x[2];
  let tiny: f32 = x[3];
  o[0] = sub * 1.0;
  o[1] = sub + 0.0;
  o[2] = tiny * 0.001;
  o[3] = exp(pinf);
  o[4] = exp(-pinf);
  o[5] = log(0.0);
  o[6] = log(-1.0 * x[4]);
  o[7] = sqrt(-1.0 * x[4]);
  o[8] = qnan + 1.0;
  o[9] = pinf - pinf;
  o[10] = tanh(x[5]);
  o[11] = min(qnan, 1.0);
  o[12] = 1.0 / pinf;
  o[13] = f32(qnan < 1.0 || qnan == qnan);
  o[14] = f32(qnan != qnan);
  o[15] = sub;
  o[16] = pinf - x[6];
  o[17] = pinf * 0.0;
  o[18] = f32(qnan != x[7]);
  o[19] = pinf / x[6];
}
map specials {
  programs [m: specials];
  inputs [x: gmem<f32[8]>];
  outputs [o: gmem<f32[20]>];
}
";

#[test]
fn special_values_on_this_adapter() {
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(SPECIALS), "specials");
    let x = [
        1e-40f32,
        f32::INFINITY,
        f32::NAN,
        1e-36,
        1.0,
        100.0,
        f32::INFINITY,
        f32::NAN,
    ];
    let a = args(vec![("x", HostTensor::from_f32(vec![8], &x))], vec![]);
    let o = wgpu.run(&p, &a, &fast()).unwrap().outputs["o"].to_f32();
    let labels = [
        "subnormal * 1.0",
        "subnormal + 0.0",
        "1e-36 * 0.001 (subnormal result)",
        "exp(inf)",
        "exp(-inf)",
        "log(0)",
        "log(-1)",
        "sqrt(-1)",
        "NaN + 1",
        "inf - inf",
        "tanh(100)",
        "min(NaN, 1)",
        "1 / inf",
        "NaN < 1 || NaN == NaN",
        "NaN != NaN",
        "subnormal loaded and stored",
        "inf - inf (distinct values)",
        "inf * 0.0",
        "NaN != NaN (distinct values)",
        "inf / inf (distinct values)",
    ];
    println!("adapter: {}", wgpu.adapter_info());
    for (l, v) in labels.iter().zip(&o) {
        println!("| {l} | {v:e} (0x{:08x}) |", v.to_bits());
    }
    // What docs/design.md requires on every adapter:
    assert_eq!(o[3], f32::INFINITY);
    assert_eq!(o[4], 0.0);
    assert!(o[8].is_nan());
    assert_eq!(o[14], 1.0, "NaN != NaN, one value");
    assert_eq!(o[11], 1.0, "min with one NaN returns the other operand");
    assert_eq!(o[13], 0.0, "comparisons with NaN are false");
    assert_eq!(o[18], 1.0, "NaN != NaN");
    assert!(
        o[16].is_nan() && o[17].is_nan() && o[19].is_nan(),
        "inf - inf, inf * 0, inf / inf"
    );
    // One value on both sides: lavapipe folded it to 0 until every float
    // operand was made opaque to the driver (ACCURACY.md).
    assert!(o[9].is_nan(), "inf - inf, one value: {:e}", o[9]);
    assert_eq!(
        o[15].to_bits(),
        1e-40f32.to_bits(),
        "moves keep subnormal bits"
    );
    // The subnormal handling conformance assumes for this adapter (the
    // probe it runs when the adapter opens) is what these operations do.
    let profile = mpmd_wgpu::profile_for(mpmd_wgpu::probe_adapter(&mut wgpu).unwrap());
    assert_eq!(
        o[0] == 0.0,
        profile.flushes_subnormal_inputs,
        "subnormal * 1.0 = {:e}",
        o[0]
    );
    assert_eq!(
        o[2] == 0.0,
        profile.flushes_subnormal_results,
        "1e-36 * 0.001 = {:e}",
        o[2]
    );
    if wgpu.is_llvmpipe() {
        assert_eq!(
            profile,
            accuracy_profile(),
            "lavapipe is the profile's adapter"
        );
        assert_eq!(o[10], 1.0, "tanh(100)");
    }
}

/// The start-up probe conformance uses agrees with this adapter's profile
/// (lavapipe keeps subnormals), so no subnormal case is skipped here.
#[test]
fn float_probe_matches_the_profile() {
    let mut wgpu = backend(WgpuOptions::default());
    let behaviour = mpmd_wgpu::probe_adapter(&mut wgpu).unwrap();
    let profile = mpmd_wgpu::accuracy_profile();
    assert_eq!(
        (
            behaviour.flushes_subnormal_inputs,
            behaviour.flushes_subnormal_results
        ),
        (
            profile.flushes_subnormal_inputs,
            profile.flushes_subnormal_results
        )
    );
    assert_eq!(mpmd_wgpu::profile_for(behaviour), profile);
}
