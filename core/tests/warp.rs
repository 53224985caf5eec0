//! Warp collectives: shuffles, votes and warp reductions on the logical warp
//! of 32 consecutive threads, from the text format through validation (the
//! warp-uniform rule, whole warps) to the interpreter's exact results under
//! lockstep and warp-group schedules.

#![allow(clippy::result_large_err)]

mod common;
use common::{diagnostics, module};
use mpmd_core::backend::Mode;
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::{Module, WarpOp};
use mpmd_core::text::{parse, print};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError, RunOptions};

fn run(m: &Module, inputs: &[(&str, HostTensor)], mode: Mode) -> Result<CallOutputs, RunError> {
    let args = CallArgs {
        inputs: inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        scalars: Default::default(),
    };
    let options = InterpOptions {
        detect: mode == Mode::Checked,
        extra_schedules: 3,
        run: RunOptions { mode, seed: 11 },
        ..Default::default()
    };
    Interpreter::new().call(&validated(m), "warps", &args, &options)
}

/// Two blocks of 64 threads: four warps, each op's result per thread.
const EVERY_OP: &str = "
mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel k(x: gmem<f32[128]>, n: gmem<i32[128]>, p: gmem<u32[128]>, d: gmem<u32[128]>,
         idx: gmem<f32[128]>, up: gmem<f32[128]>, down: gmem<f32[128]>, xor: gmem<i32[128]>,
         any: gmem<u32[128]>, all: gmem<u32[128]>, bal: gmem<u32[128]>,
         fsum: gmem<f32[128]>, fmin: gmem<f32[128]>, fmax: gmem<f32[128]>,
         isum: gmem<i32[128]>, imin: gmem<i32[128]>, umax: gmem<u32[128]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  let lane: u32 = axis_index(t) % 32u;
  let v: f32 = x[i];
  let a: f32 = shfl_idx(v, 31u - lane + d[i] * 32u);
  idx[i] = a;
  let u: f32 = shfl_up(v, d[i] + 1u);
  up[i] = u;
  let w: f32 = shfl_down(v, d[i] + 3u);
  down[i] = w;
  let z: i32 = shfl_xor(n[i], d[i] + 5u);
  xor[i] = z;
  let flag: bool = p[i] != 0u;
  let some: bool = vote_any(flag);
  any[i] = select(some, 1u, 0u);
  let every: bool = vote_all(flag);
  all[i] = select(every, 1u, 0u);
  let bits: u32 = ballot(flag);
  bal[i] = bits;
  let s: f32 = reduce_add(v);
  fsum[i] = s;
  let lo: f32 = reduce_min(v);
  fmin[i] = lo;
  let hi: f32 = reduce_max(v);
  fmax[i] = hi;
  let si: i32 = reduce_add(n[i]);
  isum[i] = si;
  let mi: i32 = reduce_min(n[i]);
  imin[i] = mi;
  let mu: u32 = reduce_max(p[i]);
  umax[i] = mu;
}

map warps {
  programs [m: k];
  inputs [x: gmem<f32[128]>, n: gmem<i32[128]>, p: gmem<u32[128]>, d: gmem<u32[128]>];
  outputs [idx: gmem<f32[128]>, up: gmem<f32[128]>, down: gmem<f32[128]>, xor: gmem<i32[128]>,
           any: gmem<u32[128]>, all: gmem<u32[128]>, bal: gmem<u32[128]>,
           fsum: gmem<f32[128]>, fmin: gmem<f32[128]>, fmax: gmem<f32[128]>,
           isum: gmem<i32[128]>, imin: gmem<i32[128]>, umax: gmem<u32[128]>];
}
";

/// The f32 sum in the butterfly order: halves 16 apart, then 8, 4, 2, 1.
fn butterfly(values: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut t = values.to_vec();
    let mut half = 16;
    while half > 0 {
        for j in 0..half {
            t[j] = f(t[j], t[j + half]);
        }
        half /= 2;
    }
    t[0]
}

struct Inputs {
    x: Vec<f32>,
    n: Vec<i32>,
    p: Vec<u32>,
    d: Vec<u32>,
}

fn inputs() -> Inputs {
    let mut x: Vec<f32> = (0..128).map(|i| (i as f32) * 0.25 - 7.0).collect();
    // Warp 1: the order of the sum shows (1e8 absorbs a following 1.0).
    for (lane, v) in x[32..64].iter_mut().enumerate() {
        *v = match lane {
            0 => 1e8,
            16 => -1e8,
            _ => 1.0,
        };
    }
    // Warp 2: NaN in some lanes (min and max skip it); warp 3: every lane NaN.
    x[64 + 5] = f32::NAN;
    x[64 + 20] = f32::NAN;
    x[96..128].fill(f32::NAN);
    let n: Vec<i32> = (0..128)
        .map(|i: i32| (i * 7919) ^ if i % 5 == 0 { i32::MIN } else { 0x55 })
        .collect();
    // Ballot patterns: every third lane, none, all, only lane 31.
    let p: Vec<u32> = (0..128)
        .map(|i: u32| match i / 32 {
            0 => u32::from(i.is_multiple_of(3)) * (i + 1),
            1 => 0,
            2 => 1 + i,
            _ => u32::from(i % 32 == 31) * 9,
        })
        .collect();
    // Shuffle arguments past 31 wrap (lane arguments are taken modulo 32).
    let d: Vec<u32> = (0..128).map(|i: u32| (i * 13) % 3).collect();
    Inputs { x, n, p, d }
}

#[test]
fn every_warp_collective_has_its_exact_result_on_every_schedule() {
    let m = module(EVERY_OP);
    validate(&m, &ValidateOptions::default()).expect("valid");
    let Inputs { x, n, p, d } = inputs();
    let out = run(
        &m,
        &[
            ("x", HostTensor::from_f32(vec![128], &x)),
            ("n", HostTensor::from_i32(vec![128], &n)),
            ("p", HostTensor::from_u32(vec![128], &p)),
            ("d", HostTensor::from_u32(vec![128], &d)),
        ],
        Mode::Checked,
    )
    .expect("runs");
    let f = |name: &str| out.outputs[name].to_f32();
    let i = |name: &str| out.outputs[name].to_i32();
    let u = |name: &str| out.outputs[name].to_u32();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let (mut idx, mut up, mut down, mut xor) = (vec![], vec![], vec![], vec![]);
    let (mut any, mut all, mut bal) = (vec![], vec![], vec![]);
    let (mut fsum, mut fmin, mut fmax) = (vec![], vec![], vec![]);
    let (mut isum, mut imin, mut umax) = (vec![], vec![], vec![]);
    for t in 0..128usize {
        let (base, lane) = (t / 32 * 32, t % 32);
        let warp = base..base + 32;
        let src = (31 - lane + d[t] as usize * 32) % 32;
        idx.push(x[base + src]);
        let delta = (d[t] as usize + 1) % 32;
        up.push(if lane >= delta { x[t - delta] } else { x[t] });
        let delta = (d[t] as usize + 3) % 32;
        down.push(if lane + delta < 32 {
            x[t + delta]
        } else {
            x[t]
        });
        xor.push(n[base + (lane ^ ((d[t] as usize + 5) % 32))]);
        any.push(u32::from(p[warp.clone()].iter().any(|&v| v != 0)));
        all.push(u32::from(p[warp.clone()].iter().all(|&v| v != 0)));
        bal.push((0..32).fold(0u32, |b, l| b | (u32::from(p[base + l] != 0) << l)));
        fsum.push(butterfly(&x[warp.clone()], |a, b| a + b));
        fmin.push(butterfly(&x[warp.clone()], f32::min));
        fmax.push(butterfly(&x[warp.clone()], f32::max));
        isum.push(n[warp.clone()].iter().fold(0i32, |a, &b| a.wrapping_add(b)));
        imin.push(*n[warp.clone()].iter().min().unwrap());
        umax.push(*p[warp].iter().max().unwrap());
    }
    assert_eq!(bits(&f("idx")), bits(&idx));
    assert_eq!(bits(&f("up")), bits(&up));
    assert_eq!(bits(&f("down")), bits(&down));
    assert_eq!(i("xor"), xor);
    assert_eq!(u("any"), any);
    assert_eq!(u("all"), all);
    assert_eq!(u("bal"), bal);
    assert_eq!(bits(&f("fsum")), bits(&fsum));
    assert_eq!(bits(&f("fmin")), bits(&fmin));
    assert_eq!(bits(&f("fmax")), bits(&fmax));
    assert_eq!(i("isum"), isum);
    assert_eq!(i("imin"), imin);
    assert_eq!(u("umax"), umax);
    // The cases the inputs were chosen for, spelled out.
    assert_eq!(u("bal")[0], 0x4924_9249, "every third lane");
    assert_eq!(
        (u("bal")[32], u("bal")[64], u("bal")[96]),
        (0, u32::MAX, 1 << 31)
    );
    assert_eq!((u("any")[32], u("all")[64], u("all")[96]), (0, 1, 0));
    assert_eq!(
        f("fsum")[40],
        30.0,
        "1e8 and -1e8 cancel first in the butterfly"
    );
    assert!(f("fsum")[70].is_nan() && f("fmin")[70] == x[64]);
    assert!(f("fmin")[100].is_nan() && f("fmax")[100].is_nan());
}

#[test]
fn warp_collectives_print_and_parse_back() {
    let m = module(EVERY_OP);
    assert_eq!(module(&print(&m)), m);
    let text = print(&m);
    for op in WarpOp::ALL {
        assert!(text.contains(&format!("= {}(", op.name())), "{}", op.name());
    }
}

const SHAPES: &str = "
mesh m {
  grid [b = 1];
  threads t = THREADS;
}

kernel k(y: gmem<u32[64]>) {
  let i: u32 = axis_index(t);
  BODY
}

map warps {
  programs [m: k];
  outputs [y: gmem<u32[64]>];
}
";

fn shaped(threads: u32, body: &str) -> String {
    SHAPES
        .replace("THREADS", &threads.to_string())
        .replace("BODY", body)
}

#[test]
fn a_warp_collective_under_a_lane_dependent_condition_is_refused_naming_it() {
    let d = diagnostics(&shaped(
        64,
        "if i < 5u {\n    let s: u32 = reduce_add(i);\n    y[i] = s;\n  }",
    ));
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].code, "E0068");
    assert_eq!(
        d[0].message,
        "`reduce_add` in kernel `k` is under the condition `i < 5u`, which is not warp-uniform (`i` is not warp-uniform)"
    );
}

#[test]
fn warp_uniform_conditions_are_accepted() {
    // The warp index, a warp reduction's result and a broadcast are the same
    // in every lane of a warp (not of the block: a barrier there is E0053).
    let body = "let warp: u32 = i / 32u;
  let total: u32 = reduce_add(i);
  let first: u32 = shfl_idx(i, 0u);
  if warp == 1u && total > 10u && first != 3u {
    let s: u32 = shfl_xor(i, 1u);
    y[i] = s;
  }
  if (i >> 5u) == 0u {
    let b: u32 = ballot(i % 2u == 0u);
    y[i] = b;
  }";
    assert_eq!(diagnostics(&shaped(64, body)), vec![]);
    let barrier = diagnostics(&shaped(64, "if i / 32u == 1u {\n    barrier;\n  }"));
    assert_eq!(
        barrier.iter().map(|d| d.code).collect::<Vec<_>>(),
        ["E0053"]
    );
    // A shuffle's result differs between lanes: a condition on it is not
    // warp-uniform.
    let shuffled = diagnostics(&shaped(
        64,
        "let s: u32 = shfl_down(i, 1u);\n  if s > 3u {\n    let v: bool = vote_any(true);\n    y[i] = select(v, 1u, 0u);\n  }",
    ));
    assert_eq!(
        shuffled.iter().map(|d| d.code).collect::<Vec<_>>(),
        ["E0068"]
    );
}

#[test]
fn a_loop_some_lanes_leave_early_refuses_warp_collectives_in_it() {
    let d = diagnostics(&shaped(
        32,
        "for j: u32 in 0u..4u {\n    if i == j {\n      break;\n    }\n    let s: u32 = reduce_max(j);\n    y[i] = s;\n  }",
    ));
    assert_eq!(d.iter().map(|d| d.code).collect::<Vec<_>>(), ["E0068"]);
    assert!(
        d[0].message
            .contains("a loop that some threads leave early"),
        "{}",
        d[0].message
    );
}

#[test]
fn partial_warps_are_refused_with_the_next_multiple() {
    let d = diagnostics(&shaped(48, "let s: u32 = reduce_add(i);\n  y[i] = s;"));
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].code, "E0069");
    assert!(d[0].help.contains("(for example 64)"), "{}", d[0].help);
}

#[test]
fn operands_and_results_are_typed() {
    let codes = |body: &str| -> Vec<&'static str> {
        diagnostics(&shaped(32, body))
            .iter()
            .map(|d| d.code)
            .collect()
    };
    assert_eq!(
        codes("let s: f32 = reduce_add(i);\n  y[i] = 0u;"),
        ["E0038"]
    );
    assert_eq!(codes("let s: bool = vote_any(i);\n  y[i] = 0u;"), ["E0037"]);
    assert_eq!(
        codes("let s: u32 = shfl_xor(i, 1);\n  y[i] = s;"),
        ["E0067"]
    );
    assert_eq!(codes("let s: u32 = shfl_xor(i);\n  y[i] = s;"), ["E0067"]);
    assert_eq!(
        codes("let s: u32 = ballot(i == 0u);\n  y[i] = s;"),
        Vec::<&str>::new()
    );
    assert_eq!(
        codes("let h: f16 = f16(1.0);\n  let s: f16 = shfl_idx(h, 3u);\n  y[i] = u32(f32(s));"),
        Vec::<&str>::new()
    );
}

#[test]
fn a_warp_collective_is_a_statement() {
    let err = parse(&shaped(32, "y[i] = reduce_add(i);")).unwrap_err();
    assert!(
        err.render("t")
            .contains("`reduce_add` is a statement, not an expression"),
        "{}",
        err.render("t")
    );
    let err = parse(&shaped(32, "ballot(true);")).unwrap_err();
    assert!(
        err.render("t").contains("`ballot` returns a value"),
        "{}",
        err.render("t")
    );
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
