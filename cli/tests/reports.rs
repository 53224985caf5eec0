//! What `mpmd run --checked` and `mpmd lower` report, asserted as exact
//! text: results that differ between schedules (and how to declare an
//! output order-dependent), data races, the plan of 16-bit buffers and
//! collective hints.

mod common;
use common::*;
use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Runs `args` and returns stderr, asserting exit code 1 and nothing on stdout.
fn failure(args: &[&str]) -> String {
    let output = mpmd(args);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{args:?}: {}",
        stdout(&output)
    );
    assert_eq!(stdout(&output), "", "{args:?}");
    stderr(&output)
}

/// 128 threads each take a ticket from one counter: `olds` holds the
/// tickets in the order the schedule gave them.
const TICKETS: &str = "mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel take(count: gmem<u32[1]>, olds: gmem<u32[128]>) {
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  let old: u32 = atomic_add(count[0], 1u);
  olds[i] = old;
}

map take {
  programs [m: take];
  outputs [count: gmem<u32[1]> zeroed, olds: gmem<u32[128]>];
}
";

/// 128 threads exchange their id into one cell: which id stays in the cell
/// (and so is missing from `prev`) depends on the schedule.
const EXCHANGE_CHAIN: &str = "mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel chain(cell: gmem<u32[1]>, prev: gmem<u32[128]>) {
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  let before: u32 = atomic_exchange(cell[0], i + 1u);
  prev[i] = before;
}

map chain {
  programs [m: chain];
  outputs [cell: gmem<u32[1]> zeroed, prev: gmem<u32[128]>];
}

case {
  compare cell = ignore;
  compare prev = multiset;
}
";

/// 128 f32 atomic adds into one word: the sum's rounding depends on the order.
const FLOAT_SUM: &str = "mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel total(x: gmem<f32[128]>, s: gmem<f32[1]>) {
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  atomic_add(s[0], x[i]);
}

map total {
  programs [m: total];
  inputs [x: gmem<f32[128]>];
  outputs [s: gmem<f32[1]> zeroed];
}
";

/// An output that differs between schedules names the `compare` lines that
/// declare it order-dependent: `multiset` and `ignore` for values in another
/// order, `ignore` once a multiset differs, `profile` first for float sums
/// of f32 atomic adds. With the line added, the run passes.
#[test]
fn schedule_differences_say_how_to_declare_an_output_order_dependent() {
    let dir = tempfile::tempdir().unwrap();
    let tickets = write(dir.path(), "tickets.mpmd", TICKETS);
    assert_eq!(
        failure(&["run", &tickets, "--checked"]),
        "error: call 0 (map `take`) failed: results differ between schedules: \
         output `olds` element 0 is 0 in the lockstep schedule and 57 in extra schedule 1 (seed 0); \
         if `olds` depends on the schedule by design, declare it in the file's `case { ... }` section: \
         `compare olds = multiset;` (the same values in any order) or `compare olds = ignore;` (not compared)\n"
    );
    let chain = write(dir.path(), "chain.mpmd", EXCHANGE_CHAIN);
    assert_eq!(
        failure(&["run", &chain, "--checked"]),
        "error: call 0 (map `chain`) failed: results differ between schedules: \
         output `prev` differs as a multiset between the lockstep schedule and extra schedule 1 (seed 0); \
         if `prev` depends on the schedule by design, declare it in the file's `case { ... }` section: \
         `compare prev = ignore;` (not compared)\n"
    );
    let sum = write(dir.path(), "sum.mpmd", FLOAT_SUM);
    assert_eq!(
        failure(&["run", &sum, "--checked"]),
        "error: call 0 (map `total`) failed: results differ between schedules: \
         output `s` element 0 is 2.6133726 in the lockstep schedule and 2.6133716 in extra schedule 2 (seed 0); \
         if `s` depends on the schedule by design, declare it in the file's `case { ... }` section: \
         `compare s = profile;` (f32 atomic adds summed in any order), \
         `compare s = multiset;` (the same values in any order) or `compare s = ignore;` (not compared)\n"
    );
    // The hint's lines, added to the files, make the runs pass.
    for (name, source) in [
        (
            "tickets_declared.mpmd",
            format!("{TICKETS}\ncase {{\n  compare olds = multiset;\n}}\n"),
        ),
        (
            "chain_declared.mpmd",
            EXCHANGE_CHAIN.replace("compare prev = multiset;", "compare prev = ignore;"),
        ),
        (
            "sum_declared.mpmd",
            format!("{FLOAT_SUM}\ncase {{\n  compare s = profile;\n}}\n"),
        ),
    ] {
        let file = write(dir.path(), name, &source);
        let output = mpmd(&["run", &file, "--checked"]);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        assert!(
            stdout(&output).contains("(checked, 3 schedules agree)"),
            "{name}: {}",
            stdout(&output)
        );
    }
}

/// `lower --target plan` counts a 16-bit buffer in elements and bytes (2 a
/// element), never in 32-bit words.
#[test]
fn the_plan_of_16_bit_buffers_counts_elements_and_bytes() {
    let output = mpmd(&[
        "lower",
        "--target",
        "plan",
        example("bf16_rowsum").to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "plan for map `rowsum`: 1 program(s)\n\
         meshes:\n  m: grid [r = 16] threads t = 64\n\
         external meshes: none\n\
         residents: none\n\
         units (launch order):\n  \
         unit 0: program 0 `rowsum` on mesh `m`: 16 block(s) x 64 thread(s), smem 256 bytes\n    \
         axes: r = (block / 1) % 16, t = (thread / 1) % 64\n    \
         smem `red`: offset 0 bytes, 256 bytes\n\
         operands:\n  \
         0: input `x`: gmem<bf16[16, 256]> -> buffer 0\n  \
         1: output `sum`: gmem<f32[16]> -> buffer 1\n  \
         2: output `sum16`: gmem<bf16[16]> -> buffer 2\n  \
         3: scratch `red`: smem<f32[64]> -> no buffer\n\
         buffers:\n  \
         0: [x] gmem<bf16[16, 256]> x 1 instance(s) = 4096 elements (8192 bytes), from input `x`\n  \
         1: [sum] gmem<f32[16]> x 1 instance(s) = 16 elements (64 bytes), uninitialised, read back as `sum`\n  \
         2: [sum16] gmem<bf16[16]> x 1 instance(s) = 16 elements (32 bytes), uninitialised, read back as `sum16`\n\
         dependency graph:\n  edges: none\n  intra-program: none\n  unsignaled waits: none\n  cycle: no\n  needs co-residency: no\n"
    );
}

/// A warp collective written inside an expression is told to bind its
/// result with the value's own type (`f16` here, not `i32`).
#[test]
fn a_warp_collective_inside_an_expression_is_told_its_own_type() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "hint.mpmd",
        "mesh m { grid [b = 1]; threads t = 32; }\n\
         kernel k(h: gmem<f16[32]>, y: gmem<f32[32]>) {\n  \
         let i: u32 = axis_index(t);\n  \
         y[i] = f32(shfl_xor(h[i], 1u)) + 1.0;\n\
         }\n",
    );
    assert_eq!(
        failure(&["check", &file]),
        format!(
            "error: `shfl_xor` is a statement, not an expression: \
             write `let v: f16 = shfl_xor(...);` before it, then use `v`\n \
             --> {file}:4:14\n  |\n\
             4 |   y[i] = f32(shfl_xor(h[i], 1u)) + 1.0;\n  \
             |              ^\n\
             error: 1 of 1 file(s) rejected\n"
        )
    );
}

/// Two programs on one 2-D ref: `produce` writes row 1 (its column from a
/// helper, whose inlined statements come before the store), `consume`
/// adds to it atomically, unordered.
const RACE_2D: &str = "mesh p {
  grid [b = 1];
  threads t = 8;
}

mesh q {
  grid [c = 1];
  threads u = 8;
}

fn column(t: u32) -> u32 {
  let half: u32 = t / 2u;
  return half * 2u + t % 2u;
}

kernel produce(g: gmem<f32[4, 8]>) {
  let j: u32 = column(axis_index(t));
  g[1u, j] = 2.0;
}

kernel consume(g: gmem<f32[4, 8]>, y: gmem<f32[8]>) {
  let u: u32 = axis_index(u);
  atomic_add(g[1u, u], 1.0);
  y[u] = 1.0;
}

map m {
  programs [p: produce, q: consume];
  outputs [g: gmem<f32[4, 8]> zeroed, y: gmem<f32[8]>];
}
";

/// Every thread of both blocks writes its block's element through a helper.
const RACE_IN_HELPER: &str = "mesh m {
  grid [b = 2];
  threads t = 32;
}

fn publish(out: gmem<f32[2, 4]>, v: f32) {
  let row: u32 = axis_index(b);
  out[0u, row] = v;
}

kernel k(out: gmem<f32[2, 4]>) {
  let v: f32 = f32(axis_index(t));
  publish(out, v);
}

map m {
  programs [m: k];
  outputs [out: gmem<f32[2, 4]>];
}
";

/// Each block of `produce` writes its own instance of `part`; `consume`
/// reads instance 1 unordered.
const RACE_OWNED: &str = "mesh p {
  grid [b = 2];
  threads t = 4;
}

mesh q {
  grid [c = 1];
  threads u = 4;
}

kernel produce(part: gmem<f32[4]> @ p) {
  part[axis_index(t)] = 1.0;
}

kernel consume(part: gmem<f32[4]> @ p, y: gmem<f32[4]>) {
  let u: u32 = axis_index(u);
  y[u] = part@[1u][u];
}

map m {
  programs [p: produce, q: consume];
  outputs [part: gmem<f32[4]> @ p, y: gmem<f32[4]>];
}
";

/// A race report names the element by its N-D index (an owned ref's
/// instance by its block coordinates), what each access did
/// (read, write, atomic) and the line of each, as written: statements after
/// an inlined helper keep their own lines; an access inside a helper shows
/// the line that calls it.
#[test]
fn race_reports_give_the_index_the_kinds_and_the_lines_of_both_accesses() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "race2d.mpmd", RACE_2D);
    assert_eq!(
        failure(&["run", &file, "--checked"]),
        format!(
            "error: call 0 (map `m`) failed: data race on `g[1, 0]`: \
             write by program 0 (produce), block 0, thread 0 and atomic by program 1 (consume), block 0, thread 0\n\
             note: the write\n  \
             --> {file}:18:3\n   |\n\
             18 |   g[1u, j] = 2.0;\n   \
             |   ^^^^^^^^^^^^^^^\n\
             note: the atomic\n  \
             --> {file}:23:3\n   |\n\
             23 |   atomic_add(g[1u, u], 1.0);\n   \
             |   ^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        )
    );
    let file = write(dir.path(), "race_owned.mpmd", RACE_OWNED);
    assert_eq!(
        failure(&["run", &file, "--checked"]),
        format!(
            "error: call 0 (map `m`) failed: data race on `part@[1][0]`: \
             write by program 0 (produce), block 1, thread 0 and read by program 1 (consume), block 0, thread 0\n\
             note: the write\n  \
             --> {file}:12:3\n   |\n\
             12 |   part[axis_index(t)] = 1.0;\n   \
             |   ^^^^^^^^^^^^^^^^^^^^^^^^^^\n\
             note: the read\n  \
             --> {file}:17:3\n   |\n\
             17 |   y[u] = part@[1u][u];\n   \
             |   ^^^^^^^^^^^^^^^^^^^^\n"
        )
    );
    let file = write(dir.path(), "race_in_helper.mpmd", RACE_IN_HELPER);
    assert_eq!(
        failure(&["run", &file, "--checked"]),
        format!(
            "error: call 0 (map `m`) failed: data race on `out[0, 0]`: \
             write by program 0 (k), block 0, thread 0 and write by program 0 (k), block 0, thread 1\n\
             note: the first write, in helper `publish`, called here\n  \
             --> {file}:13:3\n   |\n\
             13 |   publish(out, v);\n   \
             |   ^^^^^^^^^^^^^^^^\n\
             note: the second write, in helper `publish`, called here\n  \
             --> {file}:13:3\n   |\n\
             13 |   publish(out, v);\n   \
             |   ^^^^^^^^^^^^^^^^\n"
        )
    );
}
