//! Uniform values (`interp::compile::uniform`): an expression of uniform
//! operands, computed once per block and copied to the active lanes, gives
//! the bits the same expression gives lane by lane; uniform conditions,
//! loops and accesses behave as their per-lane forms; and variables that
//! only look uniform (written under divergent control, or later in a loop)
//! are computed lane by lane. Every test runs fast and checked (checked with
//! the warp-group and lane-order schedules), with and without flushing.

mod common;

use common::module;
use mpmd_core::backend::Mode;
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError, RunOptions};

const THREADS: u32 = 64;

/// Operand bits: integer edges, f32 NaN payloads, infinities, subnormals
/// and ones, and f16/bf16 values in the low half.
const VALUES: [u32; 14] = [
    0,
    1,
    7,
    16,
    u32::MAX,
    0x8000_0000,
    0x7fc0_0001,
    0x0000_0001,
    0x7f80_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x0000_3c00,
    0x0000_7e01,
    0x0000_8001,
];

/// Expressions of `A` and `B` (u32), each giving its result's bits as a u32.
const EXPRESSIONS: [&str; 44] = [
    "A + B",
    "A - B",
    "A * B",
    "A / B",
    "A % B",
    "A / 16u",
    "A % 16u",
    "A / 7u",
    "A & B",
    "A ^ B",
    "A << B",
    "A >> B",
    "min(A, B)",
    "max(A, B)",
    "u32(A < B)",
    "u32(A == B)",
    "popcount(A) + clz(B) + ffs(A) + brev(B)",
    "select(A < B, A, B)",
    "bitcast<u32>(bitcast<i32>(A) / bitcast<i32>(B))",
    "bitcast<u32>(bitcast<i32>(A) % bitcast<i32>(B))",
    "bitcast<u32>(bitcast<i32>(A) >> bitcast<i32>(B))",
    "bitcast<u32>(abs(bitcast<i32>(A)) + min(bitcast<i32>(A), bitcast<i32>(B)))",
    "bitcast<u32>(-bitcast<i32>(A))",
    "bitcast<u32>(bitcast<f32>(A) + bitcast<f32>(B))",
    "bitcast<u32>(bitcast<f32>(A) * bitcast<f32>(B))",
    "bitcast<u32>(bitcast<f32>(A) / bitcast<f32>(B))",
    "bitcast<u32>(bitcast<f32>(A) % bitcast<f32>(B))",
    "bitcast<u32>(min(bitcast<f32>(A), bitcast<f32>(B)))",
    "bitcast<u32>(pow(bitcast<f32>(A), bitcast<f32>(B)))",
    "bitcast<u32>(sqrt(bitcast<f32>(A)) - exp(bitcast<f32>(B)))",
    "bitcast<u32>(fma(bitcast<f32>(A), bitcast<f32>(B), bitcast<f32>(A)))",
    "bitcast<u32>(-floor(bitcast<f32>(A)))",
    "u32(bitcast<f32>(A) < bitcast<f32>(B))",
    "bitcast<u32>(i32(bitcast<f32>(A))) + u32(bitcast<f32>(B))",
    "bitcast<u32>(f32(bitcast<i32>(A))) ^ bitcast<u32>(f32(B))",
    "bitcast<u32>(f16(bitcast<f32>(A))) + bitcast<u32>(bf16(bitcast<f32>(B)))",
    "bitcast<u32>(bitcast<f16>(A) + bitcast<f16>(B))",
    "bitcast<u32>(bitcast<f16>(A) * bitcast<f16>(B))",
    "bitcast<u32>(sqrt(bitcast<bf16>(A)) / bitcast<bf16>(B))",
    "bitcast<u32>(fma(bitcast<bf16>(A), bitcast<bf16>(B), bitcast<bf16>(A)))",
    "bitcast<u32>(f32(bitcast<f16>(A))) + u32(bitcast<bf16>(B) < bitcast<bf16>(A))",
    "bitcast<u32>(i32(bitcast<f16>(A))) + bitcast<u32>(bf16(bitcast<f16>(B)))",
    "bitcast<u32>(f16(bitcast<i32>(A))) + bitcast<u32>(bf16(B))",
    "bitcast<u32>(tanh(bitcast<f16>(A)))",
];

#[allow(clippy::result_large_err)]
fn call(
    src: &str,
    map: &str,
    inputs: &[(&str, HostTensor)],
    mode: Mode,
    flush_subnormals: bool,
) -> Result<CallOutputs, RunError> {
    let m = module(src);
    let valid = validate(&m, &ValidateOptions::default())
        .unwrap_or_else(|d| panic!("invalid test module: {d:?}"));
    let args = CallArgs {
        inputs: inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        scalars: Default::default(),
    };
    let options = InterpOptions {
        detect: mode == Mode::Checked,
        extra_schedules: if mode == Mode::Checked { 2 } else { 0 },
        run: RunOptions { mode, seed: 11 },
        flush_subnormals,
        ..Default::default()
    };
    Interpreter::new().call(&valid, map, &args, &options)
}

/// Every mode: fast and checked, flushing or not.
fn modes() -> [(Mode, bool); 4] {
    [
        (Mode::Fast, false),
        (Mode::Fast, true),
        (Mode::Checked, false),
        (Mode::Checked, true),
    ]
}

#[test]
fn uniform_expressions_give_the_bits_of_their_per_lane_form() {
    let pairs = (VALUES.len() * VALUES.len()) as u32;
    let exprs = EXPRESSIONS.len() as u32;
    // `a`, `b` uniform: loaded at a uniform index. `av`, `bv`: the same
    // values at an index that depends on the lane.
    let mut body = String::new();
    for (e, expr) in EXPRESSIONS.iter().enumerate() {
        let uniform = expr.replace('A', "a").replace('B', "b");
        let per_lane = expr.replace('A', "av").replace('B', "bv");
        body.push_str(&format!(
            "    yu[p, {e}u, tid] = {uniform};\n    yv[p, {e}u, tid] = {per_lane};\n"
        ));
    }
    let src = format!(
        r#"
mesh m {{
  grid [g = 1];
  threads t = {THREADS};
}}

kernel k(v: gmem<u32[{n}]>, yu: gmem<u32[{pairs}, {exprs}, {THREADS}]>, yv: gmem<u32[{pairs}, {exprs}, {THREADS}]>) {{
  let tid: u32 = axis_index(t);
  for p: u32 in 0u..{pairs}u {{
    let a: u32 = v[p / {len}u];
    let b: u32 = v[p % {len}u];
    let av: u32 = v[p / {len}u + tid * 0u];
    let bv: u32 = v[p % {len}u + tid * 0u];
{body}  }}
}}

map k {{
  programs [m: k];
  inputs [v: gmem<u32[{n}]>];
  outputs [yu: gmem<u32[{pairs}, {exprs}, {THREADS}]>, yv: gmem<u32[{pairs}, {exprs}, {THREADS}]>];
}}
"#,
        n = VALUES.len(),
        len = VALUES.len(),
    );
    let v = HostTensor::from_u32(vec![VALUES.len() as u32], &VALUES);
    for (mode, ftz) in modes() {
        let out = call(&src, "k", &[("v", v.clone())], mode, ftz)
            .unwrap_or_else(|e| panic!("{mode:?} ftz {ftz}: {e}"));
        let (yu, yv) = (out.outputs["yu"].to_u32(), out.outputs["yv"].to_u32());
        assert_eq!(yu.len(), (pairs * exprs * THREADS) as usize);
        for (i, (u, w)) in yu.iter().zip(&yv).enumerate() {
            let lane = i % THREADS as usize;
            let e = i / THREADS as usize % exprs as usize;
            let p = i / (THREADS * exprs) as usize;
            let (a, b) = (VALUES[p / VALUES.len()], VALUES[p % VALUES.len()]);
            assert_eq!(
                u, w,
                "{mode:?} ftz {ftz}: `{}` with a = {a:#x}, b = {b:#x}, lane {lane}",
                EXPRESSIONS[e]
            );
        }
    }
}

/// Variables written under divergent control, in loops with a divergent
/// trip count or a `break`, or changed later in a loop are per-lane values;
/// uniform conditions nested in divergent ones narrow only those lanes.
const CONTROL: &str = r#"
mesh m {
  grid [g = 2];
  threads t = 64;
}

kernel k(y: gmem<u32[2, 8, 64]>) {
  let tid: u32 = axis_index(t);
  let g: u32 = axis_index(g);
  let n: u32 = 4u;
  var x: u32 = 0u;
  if tid < 5u {
    x = 1u;
  }
  for i: u32 in 0u..n {
    x = x + i;
  }
  var trips: u32 = 0u;
  var c: u32 = 0u;
  while c < tid % 5u max 8u {
    c = c + 1u;
    trips = trips + 2u;
  }
  var until: u32 = 0u;
  for i: u32 in 0u..8u {
    if tid % 8u == i {
      break;
    }
    until = until + 1u;
  }
  var w: u32 = 3u;
  while w < 10u max 4u {
    w = w + 2u;
  }
  var q: u32 = 9u;
  if tid % 2u == 0u {
    if n > 3u {
      q = 5u;
    } else {
      q = 7u;
    }
    for i: u32 in 0u..n {
      q = q + 1u;
    }
  }
  var later: u32 = 0u;
  var seen: u32 = 0u;
  for i: u32 in 0u..3u {
    seen = seen + later * 2u;
    later = tid;
  }
  var skip: u32 = 0u;
  for i: u32 in 0u..4u {
    if i == 1u {
      continue;
    }
    skip = skip + i + g;
  }
  y[g, 0u, tid] = x;
  y[g, 1u, tid] = trips;
  y[g, 2u, tid] = until;
  y[g, 3u, tid] = w;
  y[g, 4u, tid] = q;
  y[g, 5u, tid] = seen;
  y[g, 6u, tid] = skip;
  y[g, 7u, tid] = n * 3u / 5u + g;
}

map k {
  programs [m: k];
  outputs [y: gmem<u32[2, 8, 64]>];
}
"#;

#[test]
fn uniform_control_keeps_per_lane_variables_per_lane() {
    for (mode, ftz) in modes() {
        let out = call(CONTROL, "k", &[], mode, ftz).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let y = out.outputs["y"].to_u32();
        for g in 0..2u32 {
            for t in 0..64u32 {
                let at = |row: u32| y[((g * 8 + row) * 64 + t) as usize];
                let n = 4;
                let x = u32::from(t < 5) + (0..n).sum::<u32>();
                let q = if t % 2 == 0 { 5 + n } else { 9 };
                let seen = 4 * t;
                // Iterations 0, 2 and 3 (1 continues).
                let skip = 2 + 3 + 3 * g;
                let want = [x, 2 * (t % 5), t % 8, 11, q, seen, skip, n * 3 / 5 + g];
                for (row, &w) in want.iter().enumerate() {
                    assert_eq!(
                        at(row as u32),
                        w,
                        "{mode:?}: block {g} thread {t} row {row}"
                    );
                }
            }
        }
    }
}

/// Accesses whose indices are uniform: a broadcast load, a row of a local
/// array (f32 and f16), a store of one lane, through 1-D, 2-D and owned
/// refs, and 2-D accesses with one uniform index (the other a lane's); the
/// same through indices that depend on the lane give the same results.
/// The body of [`accesses`] for one `which`: `z` is `+ 0u` (indices
/// uniform) or `+ tid * 0u` (the same values, per lane).
const ACCESS_BODY: &str = r#"
  for once: u32 in 0u..1u {
    local la: f32[4];
    local lh: f16[5];
    for e: u32 in 0u..4u {
      la[e Z] = f32(tid) + f32(e);
    }
    for e: u32 in 0u..5u {
      lh[e Z] = f16(tid * e);
    }
    if tid < 12u {
      s[tid / 4u, tid % 4u] = f32(tid) * 0.25;
    }
    barrier;
    if tid % 3u != 1u {
      y[g, W, 0u, tid] = x[g + 1u Z, 5u Z] + la[2u Z];
      y[g, W, 1u, tid] = f32(lh[3u Z]) + f32(h[g + 3u Z]);
      y[g, W, 2u, tid] = s[g + 1u Z, tid % 4u] + x[g Z, tid % 8u];
      y[g, W, 6u, tid] = s[tid % 3u, 1u Z] + x[tid % 4u, 6u Z];
    }
    if tid >= 40u {
      y[g, W, 3u, tid] = x[3u Z, 7u Z];
      y[g, W, 4u, tid] = f32(lh[4u Z]);
      y[g, W, 5u, tid] = la[0u Z];
    }
    barrier;
    if tid == 40u {
      s[g + 1u Z, 2u Z] = f32(tid + g);
    }
    barrier;
    y[g, W, 7u, tid] = s[g + 1u Z, 2u Z];
    barrier;
  }
"#;

/// A kernel running [`ACCESS_BODY`] with uniform indices, then per lane.
fn accesses() -> String {
    let body = |which: &str, z: &str| ACCESS_BODY.replace('W', which).replace('Z', z);
    format!(
        r#"
mesh m {{
  grid [g = 2];
  threads t = 48;
}}

kernel k(x: gmem<f32[4, 8]>, h: gmem<f16[6]>, y: gmem<f32[2, 2, 8, 48]>, s: smem<f32[3, 4]>) {{
  let tid: u32 = axis_index(t);
  let g: u32 = axis_index(g);
{}{}}}

map k {{
  programs [m: k];
  inputs [x: gmem<f32[4, 8]>, h: gmem<f16[6]>];
  outputs [y: gmem<f32[2, 2, 8, 48]>];
  scratch [s: smem<f32[3, 4]>];
}}
"#,
        body("0u", "+ 0u"),
        body("1u", "+ tid * 0u")
    )
}

#[test]
fn uniform_accesses_reach_what_per_lane_indices_reach() {
    let xs: Vec<f32> = (0..32).map(|i| i as f32 * 0.5).collect();
    let x = HostTensor::from_f32(vec![4, 8], &xs);
    let h: Vec<half::f16> = (1..=6).map(|i| half::f16::from_f32(i as f32)).collect();
    let h = HostTensor::from_f16(vec![6], &h);
    for (mode, ftz) in modes() {
        let out = call(
            &accesses(),
            "k",
            &[("x", x.clone()), ("h", h.clone())],
            mode,
            ftz,
        )
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let y = out.outputs["y"].to_f32();
        let at =
            |g: usize, which: usize, row: usize, t: usize| y[((g * 2 + which) * 8 + row) * 48 + t];
        let smem = |r: usize, c: usize| (r * 4 + c) as f32 * 0.25;
        for g in 0..2 {
            for t in 0..48 {
                for row in 0..8 {
                    assert_eq!(
                        at(g, 0, row, t).to_bits(),
                        at(g, 1, row, t).to_bits(),
                        "{mode:?}: block {g} thread {t} row {row}"
                    );
                }
                if t % 3 != 1 {
                    assert_eq!(at(g, 0, 0, t), xs[(g + 1) * 8 + 5] + t as f32 + 2.0);
                    assert_eq!(at(g, 0, 1, t), (3 * t) as f32 + (g + 4) as f32);
                    assert_eq!(at(g, 0, 2, t), smem(g + 1, t % 4) + xs[g * 8 + t % 8]);
                    assert_eq!(at(g, 0, 6, t), smem(t % 3, 1) + xs[(t % 4) * 8 + 6]);
                }
                if t >= 40 {
                    assert_eq!(at(g, 0, 3, t), xs[31]);
                    assert_eq!(at(g, 0, 4, t), (4 * t) as f32);
                    assert_eq!(at(g, 0, 5, t), t as f32);
                }
                assert_eq!(at(g, 0, 7, t), (40 + g) as f32);
            }
        }
    }
}

/// Every lane storing to one element (a race checked mode reports): the
/// last active lane's value stays, whether the index is uniform or not.
#[test]
fn a_uniform_store_of_every_lane_keeps_the_last_lanes_value() {
    let src = r#"
mesh m {
  grid [g = 2];
  threads t = 40;
}

kernel k(one: gmem<f32[2, 2]>, h: gmem<f16[2, 2]>) {
  let tid: u32 = axis_index(t);
  let g: u32 = axis_index(g);
  if tid % 7u != 3u {
    one[g, 0u] = f32(tid);
    h[g, 0u] = f16(tid + g);
    one[g, 1u + tid * 0u] = f32(tid);
    h[g, 1u + tid * 0u] = f16(tid + g);
  }
}

map k {
  programs [m: k];
  outputs [one: gmem<f32[2, 2]>, h: gmem<f16[2, 2]>];
}
"#;
    let out = call(src, "k", &[], Mode::Fast, false).unwrap_or_else(|e| panic!("{e}"));
    // Thread 38 is the last active one (39 % 7 == 4, so 39 is active too).
    assert_eq!(out.outputs["one"].to_f32(), vec![39.0; 4]);
    let h: Vec<f32> = out.outputs["h"]
        .to_f16()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(h, vec![39.0, 39.0, 40.0, 40.0]);
}

/// An out-of-bounds uniform index is reported as the per-lane index is:
/// by the first active thread, with its index and shape.
#[test]
fn a_uniform_index_out_of_bounds_is_reported_by_the_first_active_thread() {
    let src = |index: &str| {
        format!(
            r#"
mesh m {{
  grid [g = 1];
  threads t = 32;
}}

kernel k(x: gmem<f32[4, 8]>, y: gmem<f32[32]>) {{
  let tid: u32 = axis_index(t);
  let n: u32 = u32(x[0u, 0u]) + 6u;
  if tid >= 3u {{
    y[tid] = x[{index}];
  }}
}}

map k {{
  programs [m: k];
  inputs [x: gmem<f32[4, 8]>];
  outputs [y: gmem<f32[32]>];
}}
"#
        )
    };
    let x = HostTensor::from_f32(vec![4, 8], &[0.0; 32]);
    for mode in [Mode::Fast, Mode::Checked] {
        let uniform = call(&src("n, 2u"), "k", &[("x", x.clone())], mode, false);
        let per_lane = call(
            &src("n + tid * 0u, 2u"),
            "k",
            &[("x", x.clone())],
            mode,
            false,
        );
        let (Err(u), Err(p)) = (uniform, per_lane) else {
            panic!("{mode:?}: both must fail");
        };
        assert_eq!(u.to_string(), p.to_string(), "{mode:?}");
        assert!(u.to_string().contains("thread 3"), "{u}");
    }
}
