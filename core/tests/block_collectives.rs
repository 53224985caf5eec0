//! Block collectives (`block_broadcast`, `block_any`, `block_all`,
//! `block_count`): from the text format through validation (block-uniform
//! control, block-uniform results, operands) to the interpreter's exact
//! results under lockstep and warp-group schedules, the out-of-range source
//! and the barrier each implies.

#![allow(clippy::result_large_err)]

mod common;
use common::{codes, diagnostics, module, one};
use mpmd_core::backend::Mode;
use mpmd_core::ir::{BlockOp, Module};
use mpmd_core::text::{parse, print};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallOutputs, HostTensor, RunError};

fn run(
    m: &Module,
    map: &str,
    inputs: &[(&str, HostTensor)],
    mode: Mode,
) -> Result<CallOutputs, RunError> {
    common::run_with_schedules(m, map, inputs, mode, 3)
}

/// Two blocks of 80 threads (not whole warps: block collectives do not need
/// them); each op's result per thread.
const EVERY_OP: &str = "
mesh m {
  grid [b = 2];
  threads t = 80;
}

kernel k(x: gmem<f32[160]>, n: gmem<i32[160]>, p: gmem<u32[160]>,
         bf: gmem<f32[160]>, bi: gmem<i32[160]>, bu: gmem<u32[160]>, bb: gmem<u32[160]>,
         any: gmem<u32[160]>, all: gmem<u32[160]>, count: gmem<u32[160]>) {
  let i: u32 = axis_index(b) * 80u + axis_index(t);
  let flag: bool = p[i] != 0u;
  let f: f32 = block_broadcast(x[i], 79u);
  bf[i] = f;
  let from: u32 = block_broadcast(p[i] % 80u, 3u);
  let s: i32 = block_broadcast(n[i], from);
  bi[i] = s;
  let u: u32 = block_broadcast(axis_index(t) * 7u, from);
  bu[i] = u;
  let c: bool = block_broadcast(flag, 0u);
  bb[i] = select(c, 1u, 0u);
  let some: bool = block_any(flag);
  any[i] = select(some, 1u, 0u);
  let every: bool = block_all(flag);
  all[i] = select(every, 1u, 0u);
  let many: u32 = block_count(flag);
  count[i] = many;
}

map blocks {
  programs [m: k];
  inputs [x: gmem<f32[160]>, n: gmem<i32[160]>, p: gmem<u32[160]>];
  outputs [bf: gmem<f32[160]>, bi: gmem<i32[160]>, bu: gmem<u32[160]>, bb: gmem<u32[160]>,
           any: gmem<u32[160]>, all: gmem<u32[160]>, count: gmem<u32[160]>];
}
";

#[test]
fn every_block_collective_has_its_exact_result_on_every_schedule() {
    let m = module(EVERY_OP);
    validate(&m, &ValidateOptions::default()).expect("valid");
    let mut x: Vec<f32> = (0..160).map(|i| i as f32 * 0.5 - 20.0).collect();
    x[79] = -0.0;
    x[159] = f32::NAN;
    let n: Vec<i32> = (0..160).map(|i| i * 37 - 3000).collect();
    // Block 0: every thread's flag set but one; block 1: all set.
    let mut p: Vec<u32> = (0..160).map(|i| 1 + (i as u32 * 13) % 200).collect();
    p[41] = 0;
    for mode in [Mode::Checked, Mode::Fast] {
        let out = run(
            &m,
            "blocks",
            &[
                ("x", HostTensor::from_f32(vec![160], &x)),
                ("n", HostTensor::from_i32(vec![160], &n)),
                ("p", HostTensor::from_u32(vec![160], &p)),
            ],
            mode,
        )
        .expect("runs");
        let u = |name: &str| out.outputs[name].to_u32();
        let bits: Vec<u32> = out.outputs["bf"]
            .to_f32()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        for (t, &got) in bits.iter().enumerate() {
            let base = t / 80 * 80;
            let block = base..base + 80;
            let from = (p[base + 3] % 80) as usize;
            assert_eq!(got, x[base + 79].to_bits(), "thread {t}");
            assert_eq!(out.outputs["bi"].to_i32()[t], n[base + from], "thread {t}");
            assert_eq!(u("bu")[t], from as u32 * 7, "thread {t}");
            assert_eq!(u("bb")[t], u32::from(p[base] != 0), "thread {t}");
            let flags = || p[block.clone()].iter().map(|&v| v != 0);
            assert_eq!(u("any")[t], u32::from(flags().any(|f| f)), "thread {t}");
            assert_eq!(u("all")[t], u32::from(flags().all(|f| f)), "thread {t}");
            assert_eq!(u("count")[t], flags().filter(|&f| f).count() as u32);
        }
        // The cases the inputs were chosen for, spelled out.
        assert_eq!((u("all")[0], u("all")[80]), (0, 1));
        assert_eq!((u("count")[0], u("count")[80]), (79, 80));
        assert_eq!(bits[0], (-0.0f32).to_bits());
        assert!(f32::from_bits(bits[80]).is_nan());
    }
}

#[test]
fn block_collectives_print_and_parse_back() {
    let m = module(EVERY_OP);
    assert_eq!(module(&print(&m)), m);
    let text = print(&m);
    for op in BlockOp::ALL {
        assert!(text.contains(&format!("= {}(", op.name())), "{}", op.name());
    }
}

const SHAPES: &str = "
mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel k(x: gmem<u32[128]>, y: gmem<u32[128]>, next: gmem<u32[1]>, slot: smem<u32[1]>, s: sem<[4]>) {
  let i: u32 = axis_index(t);
  let g: u32 = axis_index(b) * 64u + i;
  BODY
}

map blocks {
  programs [m: k];
  inputs [x: gmem<u32[128]>];
  outputs [y: gmem<u32[128]>];
  scratch [next: gmem<u32[1]> zeroed, slot: smem<u32[1]>, s: sem<[4]>];
}
";

fn shaped(body: &str) -> String {
    SHAPES.replace("BODY", body)
}

#[test]
fn a_block_collective_under_a_thread_dependent_condition_is_refused_naming_it() {
    let d = one(&shaped(
        "if i < 5u {\n    let n: u32 = block_count(x[g] > 3u);\n    y[g] = n;\n  }",
    ));
    assert_eq!(d.code, "E0053");
    assert_eq!(
        d.message,
        "block_count in kernel `k` is under the condition `i < 5u`, which is not block-uniform (`i` is not block-uniform)"
    );
    // Warp-uniform is not enough: the whole block takes part.
    let d = one(&shaped(
        "if i / 32u == 0u {\n    let v: u32 = block_broadcast(x[g], 0u);\n    y[g] = v;\n  }",
    ));
    assert_eq!(d.code, "E0053");
    // Nor a loop that some threads leave early.
    let d = one(&shaped(
        "for r: u32 in 0u..4u {\n    if x[g] < r {\n      break;\n    }\n    let a: bool = block_any(x[g] == r);\n    y[g] = select(a, 1u, 0u);\n  }",
    ));
    assert_eq!(d.code, "E0053");
    assert!(
        d.message.contains("a loop that some threads leave early"),
        "{}",
        d.message
    );
}

/// The round-3 reproducer's loop: thread 0 claims a tile, the block leaves
/// when the queue is empty, with a barrier in the loop.
fn work_queue(tile: &str) -> String {
    shaped(&format!(
        "while true max 9u {{
    if i == 0u {{
      let got: u32 = atomic_add(next[0u], 1u);
      slot[0u] = got;
    }}
    barrier;
    {tile}
    if tile >= 8u {{
      break;
    }}
    y[(tile * 64u + i) % 128u] = x[g];
    barrier;
  }}"
    ))
}

#[test]
fn a_broadcast_result_may_decide_a_break_around_barriers() {
    // Before: a load from smem is never block-uniform, whatever it holds.
    // Both barriers of the loop are refused.
    let d = diagnostics(&work_queue("let tile: u32 = slot[0u];"));
    assert_eq!(d.iter().map(|d| d.code).collect::<Vec<_>>(), ["E0053"; 2]);
    assert!(
        d[0].message.ends_with("(`tile` is not block-uniform)"),
        "{}",
        d[0].message
    );
    // The help names the way out.
    assert!(
        d[0].help.contains("`let v: u32 = block_broadcast(x, 0u);`"),
        "{}",
        d[0].help
    );
    // With the broadcast: accepted.
    assert_eq!(
        codes(&work_queue(
            "let tile: u32 = block_broadcast(slot[0u], 0u);"
        )),
        Vec::<&str>::new()
    );
}

#[test]
fn vote_results_are_block_uniform_loop_bounds_conditions_and_semaphore_operands() {
    let body = "let n: u32 = block_count(x[g] % 2u == 0u);
  let more: bool = block_any(x[g] > 10u);
  for r: u32 in 0u..n {
    if more {
      barrier;
    }
    let all: bool = block_all(x[g] > r);
    if all {
      break;
    }
  }
  let k: u32 = block_broadcast(x[g] % 4u, 1u);
  signal(s[k], i32(n) + 1);
  y[g] = n;";
    assert_eq!(codes(&shaped(body)), Vec::<&str>::new());
}

#[test]
fn operands_and_results_are_typed() {
    let codes_of = |body: &str| -> Vec<&'static str> {
        diagnostics(&shaped(&format!("{body}\n  y[g] = 0u;")))
            .iter()
            .map(|d| d.code)
            .collect()
    };
    assert_eq!(codes_of("let a: bool = block_any(x[g]);"), ["E0037"]);
    assert_eq!(codes_of("let a: u32 = block_all(x[g] > 1u);"), ["E0038"]);
    assert_eq!(codes_of("let a: bool = block_count(x[g] > 1u);"), ["E0038"]);
    assert_eq!(codes_of("let a: u32 = block_broadcast(x[g]);"), ["E0075"]);
    assert_eq!(codes_of("let a: bool = block_any(true, 1u);"), ["E0075"]);
    assert_eq!(
        codes_of("let a: u32 = block_broadcast(x[g], 1);"),
        ["E0075"]
    );
    let h = "let h: f16 = f16(1.0);\n  let a: f16 = block_broadcast(h, 0u);";
    assert_eq!(codes_of(h), ["E0037"]);
    let d = one(&shaped(
        "let v: u32 = block_broadcast(x[g], i ^ 1u);\n  y[g] = v;",
    ));
    assert_eq!(d.code, "E0075");
    assert_eq!(
        d.message,
        "the source thread `i ^ 1u` of `block_broadcast` in kernel `k` is not block-uniform (`i` is not block-uniform)"
    );
    // A block-uniform source: a scalar, an axis size, another broadcast.
    let ok = "let a: u32 = block_broadcast(x[g], axis_size(t) - 1u);
  let b: u32 = block_broadcast(x[g], a % 64u);
  y[g] = b;";
    assert_eq!(codes(&shaped(ok)), Vec::<&str>::new());
}

#[test]
fn a_block_collective_is_a_statement() {
    let err = parse(&shaped("y[g] = block_count(x[g] > 1u);")).unwrap_err();
    let text = err.render("t");
    assert!(
        text.contains("`block_count` is a statement, not an expression: write `let v: u32 = block_count(...);`"),
        "{text}"
    );
    let err = parse(&shaped("block_any(true);")).unwrap_err();
    assert!(
        err.render("t").contains("`block_any` returns a value"),
        "{}",
        err.render("t")
    );
}

const SOURCE: &str = "
mesh m {
  threads t = 64;
}

kernel k(x: gmem<u32[64]>, y: gmem<u32[64]>) {
  let i: u32 = axis_index(t);
  let v: u32 = block_broadcast(x[i], x[0u] + 60u);
  y[i] = v;
}

map src {
  programs [m: k];
  inputs [x: gmem<u32[64]>];
  outputs [y: gmem<u32[64]>];
}
";

#[test]
fn a_source_past_the_block_is_out_of_bounds() {
    // `x[0u] + 60u` is the same in every thread, but a load: not provably so.
    let m = module(SOURCE);
    assert_eq!(codes(SOURCE), ["E0075"]);
    let m = module(&print(&m).replace("x[0u] + 60u", "u32(axis_size(t)) + 0u"));
    validate(&m, &ValidateOptions::default()).expect("valid");
    let x: Vec<u32> = (0..64).collect();
    for mode in [Mode::Checked, Mode::Fast] {
        let err = run(
            &m,
            "src",
            &[("x", HostTensor::from_u32(vec![64], &x))],
            mode,
        )
        .expect_err("out of range");
        assert_eq!(
            err.to_string(),
            "out-of-bounds access at program 0 (k), block 0, thread 0: `block_broadcast source thread` index [64] (shape [64])"
        );
    }
    let last = module(&print(&m).replace("u32(axis_size(t)) + 0u", "u32(axis_size(t)) - 1u"));
    let out = run(
        &last,
        "src",
        &[("x", HostTensor::from_u32(vec![64], &x))],
        Mode::Checked,
    )
    .expect("thread 63 is in range");
    assert_eq!(out.outputs["y"].to_u32(), vec![63; 64]);
}

const ORDERS: &str = "
mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel k(x: gmem<u32[128]>, y: gmem<u32[128]>, tile: smem<u32[64]>) {
  let i: u32 = axis_index(t);
  let g: u32 = axis_index(b) * 64u + i;
  tile[i] = x[g];
  SYNC
  y[g] = tile[63u - i];
}

map orders {
  programs [m: k];
  inputs [x: gmem<u32[128]>];
  outputs [y: gmem<u32[128]>];
  scratch [tile: smem<u32[64]>];
}
";

#[test]
fn each_block_collective_orders_the_block_like_a_barrier() {
    let x: Vec<u32> = (0..128).map(|v| v * 3).collect();
    let expected: Vec<u32> = (0..128).map(|g| x[g / 64 * 64 + 63 - g % 64]).collect();
    let inputs = [("x", HostTensor::from_u32(vec![128], &x))];
    for sync in [
        "let a: u32 = block_broadcast(i, 0u);",
        "let a: bool = block_any(i == 3u);",
        "let a: bool = block_all(i < 64u);",
        "let a: u32 = block_count(i > 9u);",
        "barrier;",
    ] {
        let m = module(&ORDERS.replace("SYNC", sync));
        let out =
            run(&m, "orders", &inputs, Mode::Checked).unwrap_or_else(|e| panic!("{sync}: {e}"));
        assert_eq!(out.outputs["y"].to_u32(), expected, "{sync}");
    }
    // Without one, the same kernel races.
    let m = module(&ORDERS.replace("SYNC", "let a: u32 = i;"));
    let err = run(&m, "orders", &inputs, Mode::Checked).expect_err("a race");
    assert!(matches!(err, RunError::DataRace { .. }), "{err}");
}

/// A helper that claims a tile for the block: its broadcast's result,
/// returned, is block-uniform at the call.
const HELPER: &str = "
mesh m {
  grid [b = 2];
  threads t = 64;
}

fn claim(next: gmem<u32[1]>) -> u32 {
  var got: u32 = 0u;
  if axis_index(t) == 0u {
    let c: u32 = atomic_add(next[0u], 1u);
    got = c;
  }
  let tile: u32 = block_broadcast(got, 0u);
  return tile;
}

kernel k(x: gmem<u32[512]>, y: gmem<u32[512]>, next: gmem<u32[1]>) {
  let i: u32 = axis_index(t);
  while true max 9u {
    let tile: u32 = claim(next);
    if tile >= 8u {
      break;
    }
    barrier;
    y[tile * 64u + i] = x[tile * 64u + i] + 1u;
  }
}

map k {
  programs [m: k];
  inputs [x: gmem<u32[512]>];
  outputs [y: gmem<u32[512]>];
  scratch [next: gmem<u32[1]> zeroed];
}
";

#[test]
fn a_block_collective_in_a_helper_keeps_its_rules_and_its_uniform_result() {
    assert_eq!(codes(HELPER), Vec::<&str>::new());
    let m = module(HELPER);
    let x: Vec<u32> = (0..512).collect();
    let out = run(
        &m,
        "k",
        &[("x", HostTensor::from_u32(vec![512], &x))],
        Mode::Checked,
    )
    .expect("runs");
    let y: Vec<u32> = (1..=512).collect();
    assert_eq!(out.outputs["y"].to_u32(), y);
    // Called by some threads only: refused at the helper's collective.
    let some = HELPER.replace(
        "    let tile: u32 = claim(next);",
        "    var tile: u32 = 9u;\n    if i < 3u {\n      let c2: u32 = claim(next);\n      tile = c2;\n    }",
    );
    let d = diagnostics(&some);
    assert_eq!(d[0].code, "E0053");
    assert!(
        d[0].message.starts_with("block_broadcast in kernel `k`")
            && d[0]
                .message
                .ends_with("(in helper `claim`, inlined at this call)"),
        "{}",
        d[0].message
    );
}
