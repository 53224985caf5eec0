//! The warp-collective `mma_m16n8k16`: the text format, validation (local
//! fragments of the right types, whole warps, warp-uniform control) and the
//! interpreter's exact result (PTX's fragment layout, products in f32, sums
//! from `c` over k = 0..15 in order) under lockstep and warp-group schedules.

#![allow(clippy::result_large_err)]

mod common;
use common::{codes, diagnostics, module};
use half::{bf16, f16};
use mpmd_core::backend::Mode;
use mpmd_core::interp::{InterpOptions, Interpreter, MmaProbe};
use mpmd_core::ir::{mma, Fragment, Module, Stmt};
use mpmd_core::text::{parse, print};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError, RunOptions};

/// Four warps (two blocks of 64 threads), each multiplying its own tiles:
/// fragments loaded from gmem by the documented layout, D stored back.
fn tiles(ty: &str) -> String {
    format!(
        "
mesh m {{
  grid [b = 2];
  threads t = 64;
}}

kernel k(x: gmem<{ty}[4, 16, 16]>, y: gmem<{ty}[4, 16, 8]>, z: gmem<f32[4, 16, 8]>,
         out: gmem<f32[4, 16, 8]>) {{
  let w: u32 = axis_index(b) * 2u + axis_index(t) / 32u;
  let lane: u32 = axis_index(t) % 32u;
  let g: u32 = lane >> 2u;
  let q: u32 = lane % 4u;
  local fa: {ty}[8];
  local fb: {ty}[4];
  local acc: f32[4];
  for i: u32 in 0u..8u {{
    fa[i] = x[w, g + 8u * (i / 2u % 2u), 2u * q + i % 2u + 8u * (i / 4u)];
  }}
  for i: u32 in 0u..4u {{
    fb[i] = y[w, 2u * q + i % 2u + 8u * (i / 2u), g];
    acc[i] = z[w, g + 8u * (i / 2u), 2u * q + i % 2u];
  }}
  mma_m16n8k16(acc, fa, fb, acc);
  for i: u32 in 0u..4u {{
    out[w, g + 8u * (i / 2u), 2u * q + i % 2u] = acc[i];
  }}
}}

map mmas {{
  programs [m: k];
  inputs [x: gmem<{ty}[4, 16, 16]>, y: gmem<{ty}[4, 16, 8]>, z: gmem<f32[4, 16, 8]>];
  outputs [out: gmem<f32[4, 16, 8]>];
}}
"
    )
}

fn run(m: &Module, inputs: Vec<(&str, HostTensor)>, mode: Mode) -> Result<CallOutputs, RunError> {
    run_probe(m, inputs, mode, MmaProbe::Off)
}

fn run_probe(
    m: &Module,
    inputs: Vec<(&str, HostTensor)>,
    mode: Mode,
    mma_probe: MmaProbe,
) -> Result<CallOutputs, RunError> {
    let args = CallArgs {
        inputs: inputs
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect(),
        scalars: Default::default(),
    };
    let options = InterpOptions {
        detect: mode == Mode::Checked,
        extra_schedules: 3,
        run: RunOptions { mode, seed: 5 },
        mma_probe,
        ..Default::default()
    };
    Interpreter::new().call(&validated(m), "mmas", &args, &options)
}

/// The documented order: start from c, add a[r][k] * b[k][n] for k = 0..15,
/// each product and sum rounded to f32.
fn reference(a: &[f32], b: &[f32], c: &[f32]) -> Vec<f32> {
    let mut d = vec![0f32; 4 * 16 * 8];
    for w in 0..4 {
        for r in 0..16 {
            for n in 0..8 {
                let mut acc = c[w * 128 + r * 8 + n];
                for k in 0..16 {
                    acc += a[w * 256 + r * 16 + k] * b[w * 128 + k * 8 + n];
                }
                d[w * 128 + r * 8 + n] = acc;
            }
        }
    }
    d
}

/// Small deterministic values with distinct bits per element.
fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 20;
            (h % 97) as f32 / 16.0 - 3.0
        })
        .collect()
}

fn check_tiles(ty: &str, a: &[f32], b: &[f32], c: &[f32]) {
    let m = module(&tiles(ty));
    validate(&m, &ValidateOptions::default()).expect("valid");
    let sixteen = |shape: Vec<u32>, v: &[f32]| match ty {
        "f16" => HostTensor::from_f16(
            shape,
            &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
        ),
        _ => HostTensor::from_bf16(
            shape,
            &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
        ),
    };
    // What the 16-bit inputs hold (rounded), for the reference.
    let round = |v: &[f32]| -> Vec<f32> {
        v.iter()
            .map(|&x| match ty {
                "f16" => f16::from_f32(x).to_f32(),
                _ => bf16::from_f32(x).to_f32(),
            })
            .collect()
    };
    let expected = reference(&round(a), &round(b), c);
    for mode in [Mode::Checked, Mode::Fast] {
        let out = run(
            &m,
            vec![
                ("x", sixteen(vec![4, 16, 16], a)),
                ("y", sixteen(vec![4, 16, 8], b)),
                ("z", HostTensor::from_f32(vec![4, 16, 8], c)),
            ],
            mode,
        )
        .unwrap_or_else(|e| panic!("{ty} {mode:?}: {e}"));
        let got = out.outputs["out"].to_f32();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&expected), "{ty} {mode:?}");
    }
}

#[test]
fn the_layout_tables_are_plain_functions_of_lane_and_element() {
    // Every element of A, B and C is held by exactly one (lane, i).
    let mut a = [[0u32; 16]; 16];
    let mut b = [[0u32; 8]; 16];
    let mut c = [[0u32; 8]; 16];
    for lane in 0..32 {
        for i in 0..mma::A_LEN {
            let (r, k) = mma::a_position(lane, i);
            a[r as usize][k as usize] += 1;
        }
        for i in 0..mma::B_LEN {
            let (k, n) = mma::b_position(lane, i);
            b[k as usize][n as usize] += 1;
        }
        for i in 0..mma::C_LEN {
            let (r, n) = mma::c_position(lane, i);
            c[r as usize][n as usize] += 1;
        }
    }
    assert!(a.iter().flatten().all(|&n| n == 1));
    assert!(b.iter().flatten().all(|&n| n == 1));
    assert!(c.iter().flatten().all(|&n| n == 1));
    // PTX's figures, spot-checked: lane 5 (g = 1, q = 1).
    assert_eq!(mma::a_position(5, 0), (1, 2));
    assert_eq!(mma::a_position(5, 3), (9, 3));
    assert_eq!(mma::a_position(5, 6), (9, 10));
    assert_eq!(mma::b_position(5, 3), (11, 1));
    assert_eq!(mma::c_position(5, 2), (9, 2));
}

#[test]
fn identity_a_gives_b_plus_c_in_every_warp() {
    // A = I in every tile: D = B + C, so a misplaced element of any fragment
    // lands in the wrong place of D.
    let mut a = vec![0f32; 4 * 256];
    for w in 0..4 {
        for r in 0..16 {
            a[w * 256 + r * 16 + r] = 1.0;
        }
    }
    let b: Vec<f32> = (0..4 * 128).map(|i| (i % 251) as f32).collect();
    let c: Vec<f32> = (0..4 * 128).map(|i| (i as f32) * 1024.0).collect();
    check_tiles("f16", &a, &b, &c);
    check_tiles("bf16", &a, &b, &c);
}

#[test]
fn permutation_b_picks_columns_of_a() {
    // B[k][n] = 1 where k = 2n + 1: D[r][n] = A[r][2n + 1].
    let a: Vec<f32> = (0..4 * 256).map(|i| (i % 509) as f32 / 4.0).collect();
    let mut b = vec![0f32; 4 * 128];
    for w in 0..4 {
        for n in 0..8 {
            b[w * 128 + (2 * n + 1) * 8 + n] = 1.0;
        }
    }
    let c = vec![0f32; 4 * 128];
    check_tiles("f16", &a, &b, &c);
    check_tiles("bf16", &a, &b, &c);
}

#[test]
fn random_tiles_match_the_documented_order() {
    let (a, b, c) = (values(1024, 1), values(512, 2), values(512, 3));
    check_tiles("f16", &a, &b, &c);
    check_tiles("bf16", &a, &b, &c);
}

#[test]
fn the_sum_starts_from_c_and_goes_up_in_k() {
    // c = 2^24, then products 1 (k = 0) and -2^24 (k = 1): in the documented
    // order 2^24 + 1 rounds back to 2^24 and the result is 0; any order
    // that adds the products first gives 1.
    let mut a = vec![0f32; 4 * 256];
    let mut b = vec![0f32; 4 * 128];
    let mut c = vec![0f32; 4 * 128];
    a[0] = 1.0; // A[0][0]
    b[0] = 1.0; // B[0][0]
    a[1] = -256.0; // A[0][1]
    b[8] = 65_536.0; // B[1][0]: the product is -2^24
    c[0] = 16_777_216.0;
    let m = module(&tiles("bf16"));
    let bf = |shape: Vec<u32>, v: &[f32]| {
        HostTensor::from_bf16(
            shape,
            &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
        )
    };
    let out = run(
        &m,
        vec![
            ("x", bf(vec![4, 16, 16], &a)),
            ("y", bf(vec![4, 16, 8], &b)),
            ("z", HostTensor::from_f32(vec![4, 16, 8], &c)),
        ],
        Mode::Checked,
    )
    .expect("runs");
    assert_eq!(out.outputs["out"].to_f32()[0], 0.0);
}

/// The adversarial tiles of `the_sum_starts_from_c_and_goes_up_in_k`
/// (warp 0, element (0, 0): c = 2^24, products 1 and -2^24) and random
/// ones in the other warps, as bf16 inputs.
fn probe_inputs() -> Vec<(&'static str, HostTensor)> {
    let mut a = values(1024, 1);
    let mut b = values(512, 2);
    let mut c = values(512, 3);
    a[..256].fill(0.0);
    b[..128].fill(0.0);
    c[..128].fill(0.0);
    a[0] = 1.0;
    b[0] = 1.0;
    a[1] = -256.0;
    b[8] = 65_536.0;
    c[0] = 16_777_216.0;
    c[1] = -3.0;
    let bf = |shape: Vec<u32>, v: &[f32]| {
        HostTensor::from_bf16(
            shape,
            &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
        )
    };
    vec![
        ("x", bf(vec![4, 16, 16], &a)),
        ("y", bf(vec![4, 16, 8], &b)),
        ("z", HostTensor::from_f32(vec![4, 16, 8], &c)),
    ]
}

#[test]
fn the_magnitude_probe_gives_c_plus_the_products_in_absolute_value_rounded_up() {
    let m = module(&tiles("bf16"));
    let inputs = probe_inputs();
    let a = inputs[0].1.to_f32();
    let b = inputs[1].1.to_f32();
    let c = inputs[2].1.to_f32();
    for mode in [Mode::Checked, Mode::Fast] {
        let out = run_probe(&m, inputs.clone(), mode, MmaProbe::Magnitude).expect("runs");
        let got = out.outputs["out"].to_f32();
        // 2^24 + 1 + 2^24 = 2^25 + 1 lies between the floats 2^25 and
        // 2^25 + 4: rounded up, never to nearest.
        assert_eq!(got[0], 33_554_436.0, "{mode:?}");
        // c = -3 and no products: |c|.
        assert_eq!(got[1], 3.0, "{mode:?}");
        assert_eq!(got[2], 0.0, "{mode:?}");
        for w in 1..4 {
            for r in 0..16 {
                for n in 0..8 {
                    let mut exact = f64::from(c[w * 128 + r * 8 + n]).abs();
                    for k in 0..16 {
                        exact += (f64::from(a[w * 256 + r * 16 + k])
                            * f64::from(b[w * 128 + k * 8 + n]))
                        .abs();
                    }
                    let g = got[w * 128 + r * 8 + n];
                    // At least the exact value, and at most one float above it.
                    assert!(f64::from(g) >= exact, "{w} {r} {n}: {g} < {exact}");
                    assert!(f64::from(g.next_down()) < exact, "{w} {r} {n}: {g} {exact}");
                }
            }
        }
    }
}

#[test]
fn the_step_count_probe_adds_one_to_the_accumulators_magnitude() {
    let m = module(&tiles("bf16"));
    let inputs = probe_inputs();
    let c = inputs[2].1.to_f32();
    let out = run_probe(&m, inputs, Mode::Checked, MmaProbe::StepCount).expect("runs");
    let got = out.outputs["out"].to_f32();
    // 2^24 + 1 is no f32: rounded up.
    assert_eq!(got[0], 16_777_218.0);
    assert_eq!(got[1], 4.0);
    assert_eq!(got[2], 1.0);
    for (i, (&g, &c)) in got.iter().zip(&c).enumerate().skip(128) {
        assert_eq!(g, c.abs() + 1.0, "{i}");
    }
}

#[test]
fn the_start_probe_passes_the_accumulators_magnitude_through() {
    let m = module(&tiles("bf16"));
    let inputs = probe_inputs();
    let c = inputs[2].1.to_f32();
    let out = run_probe(&m, inputs, Mode::Checked, MmaProbe::Start).expect("runs");
    let got = out.outputs["out"].to_f32();
    assert_eq!(got[0], 16_777_216.0);
    assert_eq!(got[1], 3.0);
    for (i, (&g, &c)) in got.iter().zip(&c).enumerate() {
        assert_eq!(g, c.abs(), "{i}");
    }
}

#[test]
fn mma_prints_and_parses_back() {
    let m = module(&tiles("f16"));
    let text = print(&m);
    assert!(text.contains("mma_m16n8k16(acc, fa, fb, acc);"), "{text}");
    assert_eq!(module(&text), m);
    let has_mma = m.kernels[0]
        .body
        .iter()
        .any(|s| matches!(s, Stmt::Mma { d, c, .. } if *d == Fragment::whole("acc") && *c == Fragment::whole("acc")));
    assert!(has_mma);
}

#[test]
fn mma_is_a_statement_of_four_fragments() {
    let expr = tiles("f16").replace(
        "mma_m16n8k16(acc, fa, fb, acc);",
        "let v: f32 = mma_m16n8k16(acc, fa, fb, acc);",
    );
    let e = parse(&expr).expect_err("refused").render("t");
    assert!(e.contains("is a statement that writes its result"), "{e}");
    let element = tiles("f16").replace(
        "mma_m16n8k16(acc, fa, fb, acc);",
        "mma_m16n8k16(acc[0u, 1u], fa, fb, acc);",
    );
    let e = parse(&element).expect_err("refused").render("t");
    assert!(
        e.contains("a fragment of `mma_m16n8k16` is a local array or one row of a 2-D local array: `acc` or `acc[i]`, one index"),
        "{e}"
    );
    let three = tiles("f16").replace(
        "mma_m16n8k16(acc, fa, fb, acc);",
        "mma_m16n8k16(acc, fa, fb);",
    );
    assert!(parse(&three).is_err());
}

fn with_fragments(threads: u32, decls: &str, body: &str) -> String {
    format!(
        "
mesh m {{
  grid [b = 1];
  threads t = {threads};
}}

kernel k(x: gmem<f32[{threads}]>, y: gmem<f32[{threads}]>) {{
  let i: u32 = axis_index(t);
  {decls}
  {body}
  y[i] = x[i];
}}

map mmas {{
  programs [m: k];
  inputs [x: gmem<f32[{threads}]>];
  outputs [y: gmem<f32[{threads}]>];
}}
"
    )
}

const FRAGMENTS: &str = "local a: f16[8]; local b: f16[4]; local c: f32[4]; local d: f32[4];";

#[test]
fn operands_are_local_arrays() {
    assert_eq!(
        codes(&with_fragments(32, FRAGMENTS, "mma_m16n8k16(d, a, b, c);")),
        Vec::<&str>::new()
    );
    let d = diagnostics(&with_fragments(32, FRAGMENTS, "mma_m16n8k16(y, a, b, c);"));
    assert_eq!(d.iter().map(|d| d.code).collect::<Vec<_>>(), ["E0070"]);
    assert!(d[0].message.contains("operand `d`"), "{}", d[0].message);
    assert_eq!(
        codes(&with_fragments(32, FRAGMENTS, "mma_m16n8k16(d, i, b, c);")),
        ["E0070"]
    );
    assert_eq!(
        codes(&with_fragments(
            32,
            FRAGMENTS,
            "mma_m16n8k16(d, a, nope, c);"
        )),
        ["E0036"]
    );
}

#[test]
fn fragments_have_their_types_and_shapes() {
    let ok = |decls: &str| codes(&with_fragments(32, decls, "mma_m16n8k16(d, a, b, c);"));
    assert_eq!(
        ok("local a: bf16[8]; local b: bf16[4]; local c: f32[4]; local d: f32[4];"),
        Vec::<&str>::new()
    );
    assert_eq!(
        ok("local a: f16[8]; local b: bf16[4]; local c: f32[4]; local d: f32[4];"),
        ["E0071"]
    );
    assert_eq!(
        ok("local a: f32[8]; local b: f32[4]; local c: f32[4]; local d: f32[4];"),
        ["E0071", "E0071"]
    );
    assert_eq!(
        ok("local a: f16[2, 4]; local b: f16[4]; local c: f32[4]; local d: f32[4];"),
        ["E0071"]
    );
    assert_eq!(
        ok("local a: f16[8]; local b: f16[4]; local c: f16[4]; local d: f32[8];"),
        ["E0071", "E0071"]
    );
    let d = diagnostics(&with_fragments(
        32,
        "local a: f16[8]; local b: bf16[4]; local c: f32[4]; local d: f32[4];",
        "mma_m16n8k16(d, a, b, c);",
    ));
    assert!(
        d[0].message
            .contains("`b` is `local f16[4]` (the element type of `a`)"),
        "{}",
        d[0].message
    );
    // d may be c.
    assert_eq!(
        codes(&with_fragments(32, FRAGMENTS, "mma_m16n8k16(c, a, b, c);")),
        Vec::<&str>::new()
    );
}

#[test]
fn mma_needs_whole_warps_and_warp_uniform_control() {
    assert_eq!(
        codes(&with_fragments(48, FRAGMENTS, "mma_m16n8k16(d, a, b, c);")),
        ["E0069"]
    );
    let lane = with_fragments(64, FRAGMENTS, "if i < 5u { mma_m16n8k16(d, a, b, c); }");
    let d = diagnostics(&lane);
    assert_eq!(d.iter().map(|d| d.code).collect::<Vec<_>>(), ["E0068"]);
    assert!(d[0].message.contains("`mma_m16n8k16`"), "{}", d[0].message);
    let warp = with_fragments(
        64,
        FRAGMENTS,
        "if i / 32u == 1u { mma_m16n8k16(d, a, b, c); }",
    );
    assert_eq!(codes(&warp), Vec::<&str>::new());
}

#[test]
fn an_unwritten_fragment_is_an_uninitialised_read() {
    let src = with_fragments(32, FRAGMENTS, "mma_m16n8k16(d, a, b, c); y[i] = d[0];");
    let m = module(&src);
    validate(&m, &ValidateOptions::default()).expect("valid");
    let x = HostTensor::from_f32(vec![32], &[1.0; 32]);
    let e = run(&m, vec![("x", x)], Mode::Checked).expect_err("refused");
    assert!(e.to_string().contains("`a`"), "{e}");
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
