//! The language constructs kernel writers reach for: bounded `while`,
//! `break`/`continue`, compound assignment, module constants, kernels that
//! name only the operands they use, names reused in sibling blocks. Each
//! from the text format through validation, the expansion the backends
//! receive (each program's kernel as validation expanded it) and the
//! interpreter's exact results.

#![allow(clippy::result_large_err)]

mod common;
use common::{module, one};
use mpmd_core::backend::Mode;
use mpmd_core::ir::{Expr, Kernel, Literal, Module, Stmt};
use mpmd_core::text::{parse, print};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallOutputs, HostTensor, RunError};

fn valid(src: &str) -> Module {
    let m = module(src);
    if let Err(d) = validate(&m, &ValidateOptions::default()) {
        panic!("expected a valid module, got {d:#?}");
    }
    m
}

fn run(
    m: &Module,
    map: &str,
    inputs: &[(&str, HostTensor)],
    mode: Mode,
) -> Result<CallOutputs, RunError> {
    common::run_with_schedules(m, map, inputs, mode, 2)
}

const LOOPS: &str = "
const N: u32 = 64;
const SCALE: f32 = 2.0;

mesh m {
  grid [b = 2];
  threads t = 32;
}

kernel k(steps: gmem<u32[N]>, x: gmem<f32[N]>, y: gmem<f32[N]>) {
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  var acc: f32 = 0.0;
  for j: u32 in 0u..8u {
    if j == 2u {
      continue;
    }
    if j == 6u {
      break;
    }
    acc += x[i] * SCALE;
  }
  y[i] = acc;
  var v: u32 = i;
  var n: u32 = 0u;
  while v != 1u && v != 0u max 1000u {
    if v % 2u == 0u {
      v /= 2u;
    } else {
      v = 3u * v + 1u;
    }
    n += 1u;
  }
  steps[i] = n;
  for j: u32 in 0u..2u {
    steps[i] <<= 1u;
  }
}

map lang {
  programs [m: k];
  inputs [x: gmem<f32[64]>];
  outputs [y: gmem<f32[64]>, steps: gmem<u32[64]>];
}
";

fn collatz_steps(mut v: u32) -> u32 {
    let mut n = 0;
    while v != 1 && v != 0 {
        v = if v.is_multiple_of(2) {
            v / 2
        } else {
            3 * v + 1
        };
        n += 1;
    }
    n
}

#[test]
fn while_break_continue_and_compound_assignment_compute_exactly() {
    let m = valid(LOOPS);
    let x: Vec<f32> = (0..64).map(|v| v as f32).collect();
    for mode in [Mode::Fast, Mode::Checked] {
        let out = run(
            &m,
            "lang",
            &[("x", HostTensor::from_f32(vec![64], &x))],
            mode,
        )
        .unwrap();
        // j = 0, 1, 3, 4, 5: five of the eight iterations add 2x.
        let y: Vec<f32> = x.iter().map(|v| v * 2.0 * 5.0).collect();
        assert_eq!(out.outputs["y"].to_f32(), y);
        let steps: Vec<u32> = (0..64).map(|i| collatz_steps(i) << 2).collect();
        assert_eq!(out.outputs["steps"].to_u32(), steps);
    }
}

const LIMIT: &str = "
mesh m {
  threads t = 32;
}

kernel k(y: gmem<u32[32]>) {
  var v: u32 = 0u;
  let goal: u32 = select(axis_index(t) == 5u, 10u, 3u);
  while v < goal max 8u {
    v += 1u;
  }
  y[axis_index(t)] = v;
}

map limit {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
";

#[test]
fn a_while_at_its_maximum_fails_in_checked_mode_and_leaves_the_loop_in_fast_mode() {
    let m = valid(LIMIT);
    let err = run(&m, "limit", &[], Mode::Checked).unwrap_err();
    assert_eq!(
        err.to_string(),
        "loop limit at program 0 (k), block 0, thread 5: `while v < goal` (loop 0 of the kernel, \
         counting `while`s in source order) still holds after its maximum of 8 iterations"
    );
    assert_eq!(err.class(), Some(mpmd_core::ErrorClass::LoopLimit));
    let out = run(&m, "limit", &[], Mode::Fast).unwrap();
    let expected: Vec<u32> = (0..32).map(|t| if t == 5 { 8 } else { 3 }).collect();
    assert_eq!(out.outputs["y"].to_u32(), expected);
}

#[test]
fn a_uniform_break_skips_the_barriers_after_it() {
    // Every thread leaves at j == 2, before that iteration's barriers (run
    // with no thread there, they must order nothing and wait for no one):
    // each thread sums the values of j = 0 and 1, that is 1 + 2.
    let m = valid(
        "
mesh m {
  threads t = 64;
}

kernel k(y: gmem<u32[64]>, buf: smem<u32[64]>) {
  var total: u32 = 0u;
  for j: u32 in 0u..4u {
    if j == 2u {
      break;
    }
    buf[axis_index(t)] = j + 1u;
    barrier;
    total += buf[63u - axis_index(t)];
    barrier;
  }
  y[axis_index(t)] = total;
}

map brk {
  programs [m: k];
  outputs [y: gmem<u32[64]>];
  scratch [buf: smem<u32[64]>];
}
",
    );
    for mode in [Mode::Fast, Mode::Checked] {
        let out = run(&m, "brk", &[], mode).unwrap();
        assert_eq!(out.outputs["y"].to_u32(), vec![3; 64]);
    }
}

#[test]
fn loop_bounds_may_be_uniform_lets_but_not_thread_values() {
    valid(
        "
mesh m {
  grid [b = 2];
  threads t = 32;
}
kernel k(y: gmem<u32[64]>) {
  let n: u32 = axis_index(b) + 2u;
  var s: u32 = 0u;
  for j: u32 in 0u..n {
    s += j;
  }
  y[axis_index(b) * 32u + axis_index(t)] = s;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[64]>];
}
",
    );
    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<u32[32]>) {
  let n: u32 = axis_index(t);
  var s: u32 = 0u;
  while s < 100u max n {
    s += 1u;
  }
  y[axis_index(t)] = s;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
");
    assert_eq!(d.code, "E0045");
    assert_eq!(
        d.message,
        "the maximum `n` of a `while` in kernel `k` uses `n`, a `let` binding that is not block-uniform"
    );
}

#[test]
fn break_outside_a_loop_and_a_non_u32_maximum_are_rejected() {
    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<u32[32]>) {
  continue;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
");
    assert_eq!(d.code, "E0061");
    assert_eq!(
        d.message,
        "`continue` in kernel `k` is not inside a `for` or `while`"
    );
    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<i32[32]>) {
  var v: i32 = 0;
  while v < 3 max 4 {
    v += 1;
  }
  y[axis_index(t)] = v;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<i32[32]>];
}
");
    assert_eq!(d.code, "E0062");
    assert_eq!(
        d.message,
        "the maximum `4` of a `while` in kernel `k` has type `i32`, not u32"
    );
}

#[test]
fn a_barrier_in_a_loop_that_some_threads_leave_early_names_the_condition() {
    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<u32[32]>) {
  var v: u32 = 0u;
  for j: u32 in 0u..8u {
    if axis_index(t) == j {
      break;
    }
    barrier;
    v += 1u;
  }
  y[axis_index(t)] = v;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
");
    assert_eq!(d.code, "E0053");
    assert_eq!(
        d.message,
        "barrier in kernel `k` is under a loop that some threads leave early (`break` or \
         `continue` under `axis_index(t) == j`), which is not block-uniform (`axis_index(t)` is the thread axis)"
    );
}

#[test]
fn compound_assignment_is_type_checked_as_its_expansion() {
    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<f32[32]>) {
  var v: f32 = 0.0;
  v += 1u;
  y[axis_index(t)] = v;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<f32[32]>];
}
");
    assert_eq!(d.code, "E0037");
    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<f32[32]>) {
  let v: f32 = 0.0;
  v *= 2.0;
  y[axis_index(t)] = v;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<f32[32]>];
}
");
    assert_eq!(d.code, "E0042");
}

#[test]
fn names_may_be_reused_in_sibling_blocks_but_never_shadowed() {
    let m = valid(
        "
mesh m {
  threads t = 32;
}
kernel k(y: gmem<u32[32]>) {
  var s: u32 = 0u;
  for i: u32 in 0u..3u {
    let c: u32 = 1u;
    s += i * c;
  }
  for i: u32 in 0u..2u {
    let c: u32 = 10u;
    s += i * c;
  }
  y[axis_index(t)] = s;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
",
    );
    // Both constants keep their own value: 0+1+2 + 0+10.
    let out = run(&m, "m1", &[], Mode::Checked).unwrap();
    assert_eq!(out.outputs["y"].to_u32(), vec![13; 32]);
    // The backends see one declaration per name.
    let kernel = expanded(&m, 0);
    let printed = print(&Module {
        kernels: vec![kernel],
        ..Default::default()
    });
    assert!(printed.contains("for i_2: u32 in 0u..2u {"), "{printed}");
    assert!(printed.contains("let c_2: u32 = 10u;"), "{printed}");
    assert!(printed.contains("s = s + i_2 * c_2;"), "{printed}");

    let d = one("
mesh m {
  threads t = 32;
}
kernel k(y: gmem<u32[32]>) {
  for i: u32 in 0u..3u {
    for i: u32 in 0u..3u {
    }
  }
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
");
    assert_eq!(d.code, "E0043");
    assert_eq!(
        d.message,
        "`i` is declared twice in kernel `k`; it is already a loop variable in scope here"
    );
}

#[test]
fn kernels_name_the_operands_they_use_in_any_order() {
    let src = "
mesh p {
  threads t = 32;
}
mesh q {
  threads t = 32;
}
kernel produce(buf: gmem<f32[32]>, x: gmem<f32[32]>, ready: sem<[1]>) {
  buf[axis_index(t)] = x[axis_index(t)] + 1.0;
  signal(ready[0u], 1);
}
kernel consume(ready: sem<[1]>, y: gmem<f32[32]>, buf: gmem<f32[32]>) {
  wait(ready[0u], 1);
  y[axis_index(t)] = buf[axis_index(t)] * 2.0;
}
map pipe {
  programs [p: produce, q: consume];
  inputs [x: gmem<f32[32]>];
  outputs [y: gmem<f32[32]>];
  scratch [buf: gmem<f32[32]>, ready: sem<[1]>];
}
";
    let m = valid(src);
    let x: Vec<f32> = (0..32).map(|v| v as f32).collect();
    let out = run(
        &m,
        "pipe",
        &[("x", HostTensor::from_f32(vec![32], &x))],
        Mode::Checked,
    )
    .unwrap();
    let y: Vec<f32> = x.iter().map(|v| (v + 1.0) * 2.0).collect();
    assert_eq!(out.outputs["y"].to_f32(), y);
    // The program's kernel takes every operand in map order; the ones it
    // does not name get names nothing in its body uses.
    let kernel = expanded(&m, 1);
    let names: Vec<&str> = kernel.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["unused_x", "y", "buf", "ready"]);

    let d = one(&src.replace(
        "kernel consume(ready: sem<[1]>,",
        "kernel consume(ready: sem<[1]>, z: f32,",
    ));
    assert_eq!(d.code, "E0016");
    assert_eq!(
        d.message,
        "parameter `z` of kernel `consume` is not an operand of map `pipe` (its operands: `x`, `y`, `buf`, `ready`)"
    );
    let d = one(&src.replace(
        "scratch [buf: gmem<f32[32]>, ready: sem<[1]>];",
        "scratch [buf: gmem<f32[32]>, ready: sem<[1]>, spare: gmem<u32[4]>];",
    ));
    assert_eq!(d.code, "E0060");
    assert_eq!(
        d.message,
        "operand `spare` of map `pipe` is named by none of its kernels (`produce`, `consume`)"
    );
}

#[test]
fn constants_name_literals_in_types_bounds_and_expressions() {
    let src = "
mesh m {
  grid [b = BLOCKS];
  threads t = 32;
}
kernel k(y: gmem<u32[TOTAL]>) {
  var s: u32 = 0u;
  for j: u32 in 0u..BLOCKS {
    s += STEP;
  }
  y[axis_index(b) * 32u + axis_index(t)] = s;
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[TOTAL]>];
}
const BLOCKS: u32 = 2;
const TOTAL: u32 = 64u;
const STEP: u32 = 5u;
";
    let m = valid(src);
    assert_eq!(m.meshes[0].grid[0].size, 2);
    assert_eq!(m.consts[0].value, Literal::U32(2));
    let out = run(&m, "m1", &[], Mode::Checked).unwrap();
    assert_eq!(out.outputs["y"].to_u32(), vec![10; 64]);
    // Printed first, extents as numbers; the print reads back the same.
    let printed = print(&m);
    assert!(printed.starts_with("const BLOCKS: u32 = 2u;\nconst TOTAL: u32 = 64u;\nconst STEP: u32 = 5u;\n\nmesh m {\n  grid [b = 2];"), "{printed}");
    assert_eq!(parse(&printed).unwrap().0, m);
    // The backends see literals.
    let kernel = expanded(&m, 0);
    let Stmt::For { end, body, .. } = &kernel.body[1] else {
        panic!("{:?}", kernel.body[1]);
    };
    assert_eq!(*end, Expr::Lit(Literal::U32(2)));
    assert!(
        matches!(&body[0], Stmt::Assign { value: Expr::Binary(_, _, b), .. } if **b == Expr::Lit(Literal::U32(5)))
    );

    let err = parse(&src.replace("gmem<u32[TOTAL]>) {", "gmem<u32[TOTL]>) {")).unwrap_err();
    assert_eq!(
        err.message,
        "an extent is a number or the name of a `const`; `TOTL` is neither"
    );
    let err = parse("const N: u32 = -1;").unwrap_err();
    assert_eq!(
        err.message,
        "the constant `N` is declared `u32` but its value is a `i32` literal"
    );
    let d = one(&format!("{src}const STEP: u32 = 6u;\n"));
    assert_eq!(d.code, "E0001");
    let d = one(&src.replace(
        "var s: u32 = 0u;",
        "var s: u32 = 0u;\n  let STEP: u32 = 1u;",
    ));
    assert_eq!(d.code, "E0043");
}

#[test]
fn compound_assignment_prints_as_written() {
    let src = "mesh m {
  threads t = 32;
}

kernel k(y: gmem<u32[32]>) {
  var v: u32 = 1u;
  v <<= 3u;
  v ^= 5u;
  y[axis_index(t)] = v;
  y[axis_index(t)] -= 2u;
  while v > 0u max 100u {
    v >>= 1u;
  }
}

map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
";
    let m = valid(src);
    assert_eq!(print(&m), src);
    let out = run(&m, "m1", &[], Mode::Checked).unwrap();
    assert_eq!(out.outputs["y"].to_u32(), vec![((1u32 << 3) ^ 5) - 2; 32]);
}

const HELPERS: &str = "mesh m {
  threads t = 32;
}

fn at(r: u32, c: u32) -> u32 {
  return r * 4u + c;
}

fn bump(acc: local<u32[2]>, by: u32) {
  for k: u32 in 0u..2u {
    let o: u32 = at(k, by);
    acc[k] += o;
  }
}

kernel k(y: gmem<u32[64]>) {
  local acc: local<u32[2]>;
  acc[0u] = 0u;
  acc[1u] = 0u;
  bump(acc, axis_index(t));
  bump(acc, 1u);
  let first: u32 = at(0u, axis_index(t));
  y[first] = acc[0u];
  y[first + 32u] = acc[1u];
}

map helpers {
  programs [m: k];
  outputs [y: gmem<u32[64]>];
}
";

#[test]
fn helper_functions_are_inlined_at_each_call() {
    let src = HELPERS.replace("local acc: local<u32[2]>;", "local acc: u32[2];");
    let m = valid(&src);
    assert_eq!(print(&m), src);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = run(&m, "helpers", &[], mode).unwrap();
        // acc[k] = at(k, t) + at(k, 1) = (4k + t) + (4k + 1).
        let y: Vec<u32> = (0..2u32)
            .flat_map(|k| (0..32u32).map(move |t| 8 * k + t + 1))
            .collect();
        assert_eq!(out.outputs["y"].to_u32(), y);
    }
    // The backends see no call: every helper's body is in place, its
    // names fresh.
    let kernel = expanded(&m, 0);
    let printed = print(&Module {
        kernels: vec![kernel],
        ..Default::default()
    });
    assert!(!printed.contains("at("), "{printed}");
    assert!(
        printed.contains("let bump_by: u32 = axis_index(t);"),
        "{printed}"
    );
    assert!(printed.contains("let bump_by_2: u32 = 1u;"), "{printed}");
    assert!(
        printed.contains("let first: u32 = at_r_3 * 4u + at_c_3;"),
        "{printed}"
    );
}

#[test]
fn a_helper_is_checked_in_the_context_of_each_call() {
    let d = one("
mesh m {
  threads t = 32;
}
fn sync_add(x: u32) -> u32 {
  barrier;
  return x + 1u;
}
kernel k(y: gmem<u32[32]>) {
  let ok: u32 = sync_add(1u);
  if axis_index(t) < 3u {
    let a: u32 = sync_add(ok);
  }
  y[axis_index(t)] = ok;
}
map mm {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
");
    assert_eq!(d.code, "E0053");
    assert_eq!(
        d.message,
        "barrier in kernel `k` is under the condition `axis_index(t) < 3u`, which is not \
         block-uniform (`axis_index(t)` is the thread axis) (in helper `sync_add`, inlined at this call)"
    );
    assert_eq!(d.path.to_string(), "kernel k / stmt 1 / then / stmt 0");
}

#[test]
fn bad_helper_calls_recursion_and_returns_are_rejected() {
    let base = "
mesh m {
  threads t = 32;
}
fn fill(buf: gmem<u32[32]>, v: u32) {
  buf[axis_index(t)] = v;
}
kernel k(y: gmem<u32[32]>) {
  CALL
}
map mm {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
";
    let cases = [
        ("fill(y, 1.0);", "E0064", "argument 1 of `fill` (parameter `v: u32`) in kernel `k` is `1.0`, of type `f32`"),
        ("fill(y);", "E0064", "`fill` takes 2 argument(s), but kernel `k` gives 1"),
        ("fill(3u, 1u);", "E0064", "argument 0 of `fill` (parameter `buf`) in kernel `k` is `3u`, but the parameter is a `gmem<u32[32]>` ref"),
        ("let r: u32 = fill(y, 1u);", "E0064", "`fill` returns nothing, but kernel `k` binds its result to `r`"),
        ("spill(y, 1u);", "E0064", "kernel `k` calls `spill`, which is not a helper function of the module"),
        ("return;", "E0066", "`return` in kernel `k`; only a helper function returns"),
    ];
    for (call, code, message) in cases {
        let d = one(&base.replace("CALL", call));
        assert_eq!((d.code, d.message.as_str()), (code, message), "{call}");
    }
    let d = validate(
        &module(
            &base
                .replace(
                    "fn fill(",
                    "fn ping(v: u32) {\n  pong(v);\n}\nfn pong(v: u32) -> u32 {\n  ping(v);\n  return v;\n}\nfn fill(",
                )
                .replace("CALL", "fill(y, 1u);"),
        ),
        &ValidateOptions::default(),
    )
    .unwrap_err();
    let found: Vec<(&str, String)> = d.iter().map(|d| (d.code, d.message.clone())).collect();
    assert_eq!(
        found,
        [
            (
                "E0065",
                "helper `ping` calls itself (directly or through other helpers)".to_string()
            ),
            (
                "E0065",
                "helper `pong` calls itself (directly or through other helpers)".to_string()
            ),
        ]
    );
}

/// One helper serves the programs of two meshes: its unowned smem parameter
/// takes each program's owned tile. The element type and shape must still
/// match, and a gmem owner still has to (it decides whose instances an
/// `@[...]` access reaches).
#[test]
fn an_unowned_smem_helper_parameter_takes_owned_smem_refs() {
    let src = "
mesh p {
  threads t = 32;
}
mesh q {
  threads t = 32;
}
fn stage(tile: smem<u32[32]>, y: gmem<u32[64]>, at: u32) {
  tile[axis_index(t)] = axis_index(t) + at;
  barrier;
  y[at + axis_index(t)] = tile[31u - axis_index(t)];
}
kernel kp(y: gmem<u32[64]>, tp: smem<u32[32]> @ p) {
  stage(tp, y, 0u);
}
kernel kq(y: gmem<u32[64]>, tq: smem<u32[32]> @ q) {
  stage(tq, y, 32u);
}
map mm {
  programs [p: kp, q: kq];
  outputs [y: gmem<u32[64]>];
  scratch [tp: smem<u32[32]> @ p, tq: smem<u32[32]> @ q];
}
";
    validate(&module(src), &ValidateOptions::default())
        .expect("owned smem fits an unowned parameter");
    let wrong_elem = src.replace(
        "fn stage(tile: smem<u32[32]>",
        "fn stage(tile: smem<i32[32]>",
    );
    let d = validate(&module(&wrong_elem), &ValidateOptions::default()).unwrap_err();
    let found: Vec<(&str, &str)> = d.iter().map(|d| (d.code, d.message.as_str())).collect();
    assert_eq!(
        found,
        [
            (
                "E0064",
                "argument 0 of `stage` (parameter `tile`) in kernel `kp` is `tp`, but the parameter is a `smem<i32[32]>` ref"
            ),
            (
                "E0064",
                "argument 0 of `stage` (parameter `tile`) in kernel `kq` is `tq`, but the parameter is a `smem<i32[32]>` ref"
            ),
        ]
    );
    let d = one(&src.replace(
        "fn stage(tile: smem<u32[32]>",
        "fn stage(tile: smem<u32[32]> @ q",
    ));
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            "E0064",
            "argument 0 of `stage` (parameter `tile`) in kernel `kp` is `tp`, but the parameter is a `smem<u32[32]> @ q` ref"
        )
    );
}

/// The kernel program `program` of the first map runs, as validation
/// expanded it: what the interpreter and the backends receive.
fn expanded(m: &Module, program: usize) -> Kernel {
    let valid = validate(m, &ValidateOptions::default()).expect("valid");
    valid.valid_maps()[0].programs()[program].kernel().clone()
}
