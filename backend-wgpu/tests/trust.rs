//! Generated WGSL that every compiler reads and that keeps the program's
//! meaning whatever the program looks like (issue 14): injective names,
//! bounded nesting, literals tint reads, short-circuit `&&`/`||`, constant
//! indices, f32 arithmetic as written, run-time semaphore amounts.
//! Each program is checked by naga (the library), by the `naga` and `tint`
//! command lines where installed (a note says when they are not), and, with
//! an adapter, run on it and compared with the interpreter.

mod common;

use common::*;
use mpmd_core::backend::{Backend, RunError};
use mpmd_core::host::HostTensor;
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::{BinaryOp, Binding, Expr, Literal, MathFn, ScalarType, Stmt, UnaryOp};
use mpmd_core::Mode;
use mpmd_wgpu::{emit, emit_module, EmitError, EmitOptions, WarpPath, WgpuOptions};

/// Runs `tool args... file` on `wgsl`; `Some(report)` when it refuses it,
/// `None` when it accepts it or is not installed (then a note is printed).
fn tool_refuses(tool: &str, args: &[&str], wgsl: &str, tag: &str) -> Option<String> {
    let path = std::env::temp_dir().join(format!(
        "mpmd-trust-{tool}-{tag}-{}.wgsl",
        std::process::id()
    ));
    std::fs::write(&path, wgsl).unwrap();
    let result = std::process::Command::new(tool)
        .args(args)
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(_) => {
            eprintln!(
                "SKIPPED: the `{tool}` command line is not installed; {tag} not checked by it"
            );
            None
        }
    }
}

/// naga (library, inside `emit`) and the naga and tint command lines accept `wgsl`.
fn compilers_accept(wgsl: &str, tag: &str) {
    if let Some(report) = tool_refuses("naga", &[], wgsl, tag) {
        panic!("naga CLI refused {tag}:\n{report}");
    }
    if let Some(report) = tool_refuses("tint", &["--format", "wgsl", "-o", "/dev/null"], wgsl, tag)
    {
        panic!("tint refused {tag}:\n{report}");
    }
}

/// Both modes' WGSL pass every compiler; with an adapter the run matches the
/// interpreter's bit for bit.
fn check_program(
    module: &mpmd_core::ir::Module,
    map: &str,
    args: &mpmd_core::host::CallArgs,
    tag: &str,
) {
    let p = plan(module, map);
    for mode in [Mode::Fast, Mode::Checked] {
        let start = std::time::Instant::now();
        let wgsl = emit(&p, mode).unwrap_or_else(|e| panic!("{tag} ({mode:?}): {e}"));
        let emitted = start.elapsed();
        compilers_accept(&wgsl, &format!("{tag}-{mode:?}"));
        eprintln!(
            "{tag} {mode:?}: emit {emitted:?}, CLIs {:?}, {} bytes",
            start.elapsed() - emitted,
            wgsl.len()
        );
    }
    let mut wgpu = backend(WgpuOptions::default());
    for options in [fast(), checked()] {
        let start = std::time::Instant::now();
        let expected = Interpreter::new()
            .run(&p, args, &options)
            .unwrap_or_else(|e| panic!("{tag}: interpreter: {e}"));
        let got = wgpu
            .run(&p, args, &options)
            .unwrap_or_else(|e| panic!("{tag}: wgpu: {e}"));
        eprintln!("{tag} {:?}: both runs {:?}", options.mode, start.elapsed());
        assert_eq!(got, expected, "{tag} ({:?})", options.mode);
    }
}

// ---- item 1: names ------------------------------------------------------------

/// Names chosen to meet generated names: an alias `x -> y` beside an operand
/// `x_y` (buffers were named from their operands joined by `_`), names of
/// the generated families (`g0_x`, `v_i`, `mpmd_e1`, `rt_0`, `s0_tile`,
/// `unit0_k`, `block_id`, `thread_id`), WGSL keywords and builtins, and
/// 10,000-character names.
fn adversarial_names() -> String {
    let long_a = "a".repeat(10_000);
    let long_b = format!("{}_{}", "b".repeat(9_998), "x");
    format!(
        "
mesh m {{
  grid [block_id = 2];
  threads thread_id = 32;
}}
kernel unit0_k(x: gmem<f32[64]>, x_y: gmem<f32[64]>, y: gmem<f32[64]>, g0_x: gmem<f32[64]>,
               {long_a}: gmem<f32[64]>, loop: u32, select: f32, s0_tile: smem<f32[32]>) {{
  let i: u32 = axis_index(block_id) * 32u + axis_index(thread_id);
  let v_i: f32 = x_y[i];
  let mpmd_e1: f32 = y[i];
  let rt_0: f32 = v_i + mpmd_e1 * select;
  let array: u32 = i + loop;
  s0_tile[axis_index(thread_id)] = rt_0;
  barrier;
  let {long_b}: f32 = s0_tile[31u - axis_index(thread_id)];
  y[i] = {long_b} + 0.5;
  g0_x[i] = rt_0 - 1.0;
  {long_a}[i] = f32(array);
}}
map unit0_k {{
  programs [m: unit0_k];
  inputs [x: gmem<f32[64]>, x_y: gmem<f32[64]>];
  outputs [y: gmem<f32[64]>, g0_x: gmem<f32[64]>, {long_a}: gmem<f32[64]>];
  scalars [loop: u32, select: f32];
  scratch [s0_tile: smem<f32[32]>];
  aliases [x -> y];
}}
"
    )
}

#[test]
fn names_cannot_collide_whatever_the_user_writes() {
    let src = adversarial_names();
    let m = module(&src);
    let p = plan(&m, "unit0_k");
    let emitted = mpmd_wgpu::emit_module(&p, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    // The alias's buffer and the operand `x_y` are distinct globals.
    let globals: Vec<&str> = emitted
        .layout
        .bindings
        .iter()
        .map(|b| b.global.as_str())
        .collect();
    assert_eq!(globals[..2], ["g0_x", "g1_x_y"]);
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
    let xy: Vec<f32> = (0..64).map(|i| 100.0 - i as f32).collect();
    let a = args(
        vec![
            ("x", HostTensor::from_f32(vec![64], &x)),
            ("x_y", HostTensor::from_f32(vec![64], &xy)),
        ],
        vec![("loop", Literal::U32(7)), ("select", Literal::f32(3.0))],
    );
    check_program(&m, "unit0_k", &a, "names");
}

// ---- item 2: nesting --------------------------------------------------------

const DEEP: &str = "
mesh m {
  grid [b = 1];
  threads t = 32;
}
kernel k(y: gmem<i32[32]>, f: gmem<f32[32]>, n: i32) {
  let v: i32 = 1;
  y[axis_index(t)] = v;
  f[axis_index(t)] = 0.0;
}
map k {
  programs [m: k];
  outputs [y: gmem<i32[32]>, f: gmem<f32[32]>];
  scalars [n: i32];
}
";

/// `DEEP` with its `let v` (statement 0) computing `value`, or with its
/// first statement replaced by `stmt`.
fn deep_module(value: Option<Expr>, stmt: Option<Stmt>) -> mpmd_core::ir::Module {
    let mut m = module(DEEP);
    let body = &mut m.kernels[0].body;
    if let Some(value) = value {
        body[0] = Stmt::Let {
            var: Binding {
                name: "v".into(),
                ty: ScalarType::I32,
            },
            value,
        };
    }
    if let Some(stmt) = stmt {
        body.insert(0, stmt);
    }
    m
}

fn lit(v: i32) -> Expr {
    Expr::Lit(Literal::I32(v))
}

fn var(name: &str) -> Expr {
    Expr::Var(name.into())
}

fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::Binary(op, Box::new(a), Box::new(b))
}

fn thread() -> Expr {
    Expr::Cast(ScalarType::I32, Box::new(Expr::AxisIndex("t".into())))
}

fn store_y(value: Expr) -> Stmt {
    Stmt::Store {
        target: mpmd_core::ir::RefAccess {
            base: "y".into(),
            block: None,
            index: vec![Expr::AxisIndex("t".into())],
        },
        value,
    }
}

/// Every shape of deep expression `gen_deep.py` makes (and longer flat
/// chains than it does), at depths past tint's (127) and naga's (198 for
/// a chain) limits: each compiles everywhere and computes the
/// interpreter's result. Values depend on the thread and the scalar `n`,
/// so nothing folds.
/// Runs `f` on a thread with a large stack: parsing, validation, lowering
/// and the interpreter recurse over the IR (the IR's nesting limit, not this
/// backend, bounds that), and these programs are deeper than the default
/// test thread's 2 MiB allow in a debug build.
fn with_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

/// As deep as the text format nests (`MAX_NESTING`), with room for the
/// statement around the expression: a flat chain nests one level a term;
/// operators that print parentheses or calls around their operand nest two
/// a step, so those shapes take `DEPTH / 2` steps.
const DEPTH: i32 = mpmd_core::text::MAX_NESTING as i32 - 10;

#[test]
fn deep_expressions_compile_everywhere_and_compute_the_same() {
    with_big_stack(deep_expressions);
}

fn deep_expressions() {
    let n = var("n");
    let t = thread();
    let shapes: Vec<(&str, Expr)> = vec![
        // `n + t + 1 + 1 ...`: flat chains (d02 at 198 terms, d26 at 127).
        ("binchain", {
            let mut e = bin(BinaryOp::Add, n.clone(), t.clone());
            for k in 0..DEPTH {
                e = bin(
                    if k % 3 == 0 {
                        BinaryOp::Sub
                    } else {
                        BinaryOp::Add
                    },
                    e,
                    lit(k),
                );
            }
            e
        }),
        ("rbin", {
            let mut e = t.clone();
            for k in 0..DEPTH / 2 {
                e = bin(BinaryOp::Sub, lit(k), e);
            }
            e
        }),
        ("neg", {
            let mut e = bin(BinaryOp::Add, n.clone(), t.clone());
            for _ in 0..DEPTH / 2 {
                e = Expr::Unary(UnaryOp::Neg, Box::new(e));
            }
            e
        }),
        ("notn", {
            let mut e = t.clone();
            for _ in 0..DEPTH / 2 {
                e = Expr::Unary(UnaryOp::BitNot, Box::new(e));
            }
            e
        }),
        ("casts", {
            let mut e = t.clone();
            // An even number of steps, so that the chain ends in `i32`.
            for k in 0..DEPTH / 4 * 2 {
                let to = if k % 2 == 0 {
                    ScalarType::U32
                } else {
                    ScalarType::I32
                };
                e = Expr::Cast(to, Box::new(e));
            }
            e
        }),
        ("sel", {
            let mut e = t.clone();
            for k in 0..DEPTH / 2 {
                let c = bin(BinaryOp::Gt, t.clone(), lit(k % 32));
                e = Expr::Select(Box::new(c), Box::new(lit(k)), Box::new(e));
            }
            e
        }),
        ("mathmax", {
            let mut e = t.clone();
            for k in 0..DEPTH / 2 {
                e = Expr::Math(MathFn::Max, vec![lit(k % 40 - 5), e]);
            }
            e
        }),
        ("idx", {
            // y[(y[(... t ...) & 31] + t) & 31]: y holds the thread index,
            // stored before these loads read it.
            // (25 loads: each nests 8 levels in the text format, so 200 in
            // all; temporaries are needed.)
            let mut e = t.clone();
            for _ in 0..25 {
                let i = bin(BinaryOp::BitAnd, e, lit(31));
                let load = Expr::Load(Box::new(mpmd_core::ir::RefAccess {
                    base: "y".into(),
                    block: None,
                    index: vec![i],
                }));
                e = bin(BinaryOp::Add, load, t.clone());
            }
            e
        }),
    ];
    for (name, value) in shapes {
        let mut m = deep_module(Some(value), None);
        if name == "idx" {
            // y must be written before the deep loads read it.
            // (and every thread's loads done before any stores again).
            let body = &mut m.kernels[0].body;
            body.insert(0, store_y(thread()));
            body.insert(1, Stmt::Barrier);
            body.insert(3, Stmt::Barrier);
        }
        let a = args(vec![], vec![("n", Literal::I32(5))]);
        check_program(&m, "k", &a, name);
    }
}

/// Nested `if`s without `else` (merged with `&&`), long else-if chains
/// (flattened) and 42 nested `for` loops (d26) compile everywhere and
/// compute the interpreter's result; nested loops past what any compiler
/// reads are refused with a clear error, not handed to naga.
#[test]
fn deep_statements_compile_everywhere_or_are_refused_clearly() {
    with_big_stack(deep_statements);
}

fn deep_statements() {
    let a = args(vec![], vec![("n", Literal::I32(7))]);
    // 200 nested ifs: `if n > k { ... }`, innermost stores.
    let mut s = store_y(bin(BinaryOp::Add, thread(), lit(100)));
    for k in (0..200).rev() {
        s = Stmt::If {
            cond: bin(BinaryOp::Gt, var("n"), lit(k % 7 - 1)),
            then_body: vec![s],
            else_body: vec![],
        };
    }
    check_program(&deep_module(None, Some(s)), "k", &a, "ifs");
    // An else-if chain of DEPTH arms on `n + t`.
    let key = bin(BinaryOp::Add, var("n"), thread());
    let mut chain = vec![store_y(lit(-1))];
    for k in (0..DEPTH).rev() {
        chain = vec![Stmt::If {
            cond: bin(BinaryOp::Eq, key.clone(), lit(k)),
            then_body: vec![store_y(lit(k * 3))],
            else_body: chain,
        }];
    }
    check_program(&deep_module(None, chain.pop()), "k", &a, "elseif");
    // 42 nested for loops (d26_tint_for_nesting_42).
    let nest = |depth: usize| {
        let mut s = store_y(bin(BinaryOp::Add, var("v0"), thread()));
        for j in (0..depth).rev() {
            s = Stmt::For {
                var: Binding {
                    name: format!("v{j}"),
                    ty: ScalarType::I32,
                },
                start: lit(0),
                end: lit(1),
                body: vec![s],
            };
        }
        s
    };
    check_program(&deep_module(None, Some(nest(42))), "k", &a, "fors");
    // 200 nested loops: no rewrite keeps them; refused, naming the rule.
    let m = deep_module(None, Some(nest(200)));
    match emit(&plan(&m, "k"), Mode::Fast) {
        Err(e @ EmitError::TooDeep { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`for` loops nest more than"), "{text}");
        }
        other => panic!("expected TooDeep, got {other:?}"),
    }
}

/// `f32::MAX` (d27) and other extreme literals are spelled so that tint
/// reads them; the values arrive unchanged.
#[test]
fn extreme_float_literals_are_read_by_every_compiler() {
    let src = "
mesh m {
  threads t = 1;
}
kernel k(y: gmem<f32[6]>) {
  y[0] = 3.4028235e38;
  y[1] = -3.4028235e38;
  y[2] = 1e-45;
  y[3] = 1.1754942e-38;
  y[4] = 0.1;
  y[5] = 16777217.0;
}
map k {
  programs [m: k];
  outputs [y: gmem<f32[6]>];
}
";
    let m = module(src);
    let wgsl = emit(&plan(&m, "k"), Mode::Fast).unwrap();
    // Each literal as the exact value's shortest f64 decimal (f32::MAX not
    // as `3.4028235e38`, which tint reads as above the range).
    insta::assert_snapshot!("extreme_f32_literals", functions(&wgsl, &["unit0_k"]));
    check_program(&m, "k", &args(vec![], vec![]), "f32max");
}

// ---- item 3: short-circuit ------------------------------------------------------

/// `u_shortcircuit_and.mpmd`: the guarded load is not evaluated for thread 0
/// (`i = -1`), so checked mode reports nothing; also when the right operand
/// is deep enough to need temporaries, whose statements then run under the
/// left operand.
#[test]
fn logic_operators_do_not_evaluate_their_right_operand() {
    let base = |guard: &str| {
        format!(
            "
mesh m {{
  grid [b = 1];
  threads t = 64;
}}
kernel k(x: gmem<f32[64]>, y: gmem<f32[64]>) {{
  let i: i32 = i32(axis_index(t)) - 1;
  var v: f32 = 0.0;
  if {guard} {{
    v = x[i];
  }}
  y[axis_index(t)] = v;
}}
map sc {{
  programs [m: k];
  inputs [x: gmem<f32[64]>];
  outputs [y: gmem<f32[64]>];
}}
"
        )
    };
    let deep = {
        let mut e = "x[i]".to_string();
        for _ in 0..40 {
            e = format!("({e} + 1.0)");
        }
        e
    };
    let x: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
    let a = args(vec![("x", HostTensor::from_f32(vec![64], &x))], vec![]);
    for (tag, guard) in [
        ("and", "i >= 0 && x[i] > 0.0".to_string()),
        ("or", "!(i < 0 || x[i] <= 0.0)".to_string()),
        ("and-deep", format!("i >= 0 && {deep} > 30.0")),
        ("or-deep", format!("!(i < 0 || {deep} <= 30.0)")),
    ] {
        let m = module(&base(&guard));
        let p = plan(&m, "sc");
        let wgsl = emit(&p, Mode::Checked).unwrap();
        if tag.ends_with("deep") {
            // The case this variant exists for, whatever the text around it:
            // the right operand needed temporaries, guarded by a flag.
            assert!(
                wgsl.contains("mpmd_and") || wgsl.contains("mpmd_or"),
                "{wgsl}"
            );
        }
        compilers_accept(&wgsl, tag);
        let deep = tag.ends_with("deep");
        let expected: Vec<f32> = (0..64usize)
            .map(|t| match t.checked_sub(1) {
                Some(i) if (deep && x[i] + 40.0 > 30.0) || (!deep && x[i] > 0.0) => x[i],
                _ => 0.0,
            })
            .collect();
        let mut wgpu = backend(WgpuOptions::default());
        for options in [fast(), checked()] {
            let got = wgpu
                .run(&p, &a, &options)
                .unwrap_or_else(|e| panic!("{tag}: {e}"));
            assert_eq!(got.outputs["y"].to_f32(), expected, "{tag}");
        }
    }
    // `select` evaluates both operands: thread 0 reads x[-1], reported.
    let m = module(&base("select(false, x[i] > 0.0, i >= 0)"));
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&m, "sc");
    let expected = Interpreter::new().run(&p, &a, &checked());
    let got = wgpu.run(&p, &a, &checked());
    match (&expected, &got) {
        (Err(RunError::OutOfBounds { .. }), Err(RunError::OutOfBounds { index, .. })) => {
            assert_eq!(index, "[-1]", "{got:?}")
        }
        _ => panic!("expected out-of-bounds on both: {expected:?} / {got:?}"),
    }
}

// ---- item 4: float arithmetic as written ------------------------------------------

/// Fuzz program 90262: `(1.0 + x) + (-1.5)`; lavapipe reassociated the two
/// constants (`x + -0.5`), one ulp off for some x. The literals are read at
/// run time, so the sums are rounded as written.
#[test]
fn float_constants_are_not_reassociated() {
    let src = "
mesh m {
  grid [b = 4];
  threads t = 64;
}
kernel k(x: gmem<f32[256]>, y: gmem<f32[256]>, z: gmem<f32[256]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  y[i] = (1.0 + x[i]) + -1.5;
  z[i] = (x[i] * 3.0) * 0.1;
}
map k {
  programs [m: k];
  inputs [x: gmem<f32[256]>];
  outputs [y: gmem<f32[256]>, z: gmem<f32[256]>];
}
";
    let m = module(src);
    let wgsl = emit(&plan(&m, "k"), Mode::Fast).unwrap();
    // The float literals of the sums are read at run time (`rt_<k>`).
    insta::assert_snapshot!("float_constants_entry", functions(&wgsl, &["unit0_k"]));
    // Values where `x + -0.5` and `(1 + x) - 1.5` differ.
    let x: Vec<f32> = (0..256)
        .map(|i| 1.0e-8 * (i as f32 + 1.0) + if i % 2 == 0 { 0.3 } else { -0.7 })
        .collect();
    let differ = x.iter().filter(|&&v| (1.0 + v) + -1.5 != v + -0.5).count();
    assert!(differ > 0, "the inputs must tell the two orders apart");
    check_program(
        &m,
        "k",
        &args(vec![("x", HostTensor::from_f32(vec![256], &x))], vec![]),
        "reassoc",
    );
}

/// Issue 28: where lavapipe can prove an operand a constant (a zero derived
/// from integers, a loop counter after unrolling) or two operands equal, it
/// applied identities that hold only without infinities and NaN: `x * 0 = 0`,
/// `x - x = 0`, `fma(x, 0, c) = c`, `x / 0` (16-bit too). Every float
/// operand is opaque to the driver now (`syntax::opaque_operand`), so each
/// row matches the interpreter: NaN where the interpreter gives NaN, the
/// same value (the sign of a zero aside) everywhere else.
const PROVABLE_OPERANDS: &str = "
mesh m {
  threads t = 8;
}
kernel k(x: gmem<f32[8]>, d: gmem<i32[8]>, y: gmem<f32[112]>) {
  let t: u32 = axis_index(t);
  let xv: f32 = x[t];
  let dv: i32 = d[t];
  var acc: f32 = 0.0;
  for j: u32 in 0u..2u {
    acc += xv * f32(j);
  }
  y[t] = acc;
  y[8u + t] = xv - xv;
  y[16u + t] = fma(xv, f32(dv & 0), 1.0);
  y[24u + t] = f32(dv) / f32(dv - dv);
  y[32u + t] = f32(dv & 0) * xv;
  y[40u + t] = f32(f16(dv) / f16(dv * 0));
  y[48u + t] = f32(bf16(dv) / bf16(dv & 0));
  y[56u + t] = xv + (-xv);
  y[64u + t] = f32(xv == xv) + 2.0 * f32(xv >= xv);
  y[72u + t] = f32(f16(xv) - f16(xv));
  y[80u + t] = sqrt(xv * xv);
  y[88u + t] = f32(fma(bf16(xv), bf16(dv * 0), bf16(1.0)));
  y[96u + t] = xv * f32(dv - dv) + 1.0;
  y[104u + t] = f32(dv - dv) / f32(dv * 0);
}
map k {
  programs [m: k];
  inputs [x: gmem<f32[8]>, d: gmem<i32[8]>];
  outputs [y: gmem<f32[112]>];
}
";

#[test]
fn infinities_and_nan_survive_operands_the_driver_can_prove() {
    let rows = [
        "acc += x * f32(j), j from 0, unrolled",
        "x - x",
        "fma(x, f32(d & 0), 1.0)",
        "f32(d) / f32(d - d)",
        "f32(d & 0) * x",
        "f16(d) / f16(d * 0)",
        "bf16(d) / bf16(d & 0)",
        "x + (-x)",
        "(x == x) + 2 (x >= x)",
        "f16(x) - f16(x)",
        "sqrt(x * x)",
        "bf16 fma(x, d * 0, 1)",
        "x * f32(d - d) + 1",
        "f32(d - d) / f32(d * 0)",
    ];
    let m = module(PROVABLE_OPERANDS);
    let x = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0,
        -2.5,
        1.0e30,
        f32::MAX,
        0.0,
    ];
    let d = [1, 2, -3, 4, 5, 6, 7, 0];
    let a = args(
        vec![
            ("x", HostTensor::from_f32(vec![8], &x)),
            ("d", HostTensor::from_i32(vec![8], &d)),
        ],
        vec![],
    );
    let p = plan(&m, "k");
    let expected = Interpreter::new().run(&p, &a, &fast()).unwrap().outputs["y"].to_f32();
    // The interpreter is IEEE: the rows this test is about.
    assert!(
        expected[..8].iter().take(3).all(|v| v.is_nan()),
        "{expected:?}"
    );
    assert!(expected[24..32]
        .iter()
        .all(|v| v.is_infinite() || v.is_nan()));
    let mut wgpu = backend(WgpuOptions::default());
    let got = wgpu.run(&p, &a, &fast()).unwrap().outputs["y"].to_f32();
    let mut wrong = vec![];
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        // NaN matches NaN (payloads are unspecified), zeros match whatever
        // their sign (unspecified), everything else bit for bit.
        if !(g.is_nan() && e.is_nan()
            || g == e && g.to_bits() == e.to_bits()
            || *g == 0.0 && *e == 0.0)
        {
            wrong.push(format!(
                "{} with x = {:e}, d = {}: wgpu {g:e}, interpreter {e:e}",
                rows[i / 8],
                x[i % 8],
                d[i % 8]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---- item 5: run-time errors that say what happened ---------------------------------

const D22: &str = "
mesh p {
  grid [pb = 1];
  threads pt = 32;
}
mesh c {
  grid [cb = 1];
  threads ct = 32;
}
kernel produce(y: gmem<u32[32]>, n: i32, s: sem<[1]>) {
  signal(s[0], 1);
}
kernel consume(y: gmem<u32[32]>, n: i32, s: sem<[1]>) {
  wait(s[0], n);
  let v: i32 = read(s[0]);
  y[axis_index(ct)] = u32(v);
}
map dl {
  programs [p: produce, c: consume];
  outputs [y: gmem<u32[32]>];
  scalars [n: i32];
  scratch [s: sem<[1]>];
}
";

/// d22: a run-time amount below 1 is an error naming program, block and
/// semaphore (it used to add 1 to the count); 1 still runs.
#[test]
fn semaphore_amounts_below_one_are_run_time_errors() {
    let m = module(D22);
    let p = plan(&m, "dl");
    let mut wgpu = backend(WgpuOptions::default());
    for mode in [fast(), checked()] {
        for n in [-1, 0] {
            let err = wgpu
                .run(&p, &args(vec![], vec![("n", Literal::I32(n))]), &mode)
                .unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, RunError::BadSemaphoreAmount { .. }), "{text}");
            assert!(text.contains(&format!("semaphore amount {n}")), "{text}");
            assert!(text.contains("program 1 (consume), block 0"), "{text}");
            assert!(text.contains("`s[0]`"), "{text}");
        }
        let ok = wgpu
            .run(&p, &args(vec![], vec![("n", Literal::I32(1))]), &mode)
            .unwrap();
        assert_eq!(ok.outputs["y"].words(), vec![0u32; 32]);
    }
}

/// A wait on a semaphore no program signals says so (it used to say "every
/// program that signals it has finished").
#[test]
fn deadlock_message_says_no_program_signals() {
    let src = "
mesh c {
  grid [cb = 1];
  threads ct = 32;
}
kernel consume(y: gmem<u32[32]>, s: sem<[1]>) {
  wait(s[0], 1);
  y[axis_index(ct)] = 1u;
}
map dl {
  programs [c: consume];
  outputs [y: gmem<u32[32]>];
  scratch [s: sem<[1]>];
}
";
    let m = module(src);
    let mut wgpu = backend(WgpuOptions::default());
    let err = wgpu
        .run(&plan(&m, "dl"), &args(vec![], vec![]), &fast())
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RunError::Deadlock { .. }), "{text}");
    assert!(
        text.contains("no program of this call signals it"),
        "{text}"
    );
    assert!(!text.contains("every program that signals it"), "{text}");
}

/// d16: a 65,000-iteration loop passes the cap; the message states the
/// visits it needed and the cap, not "more than 65,535 loop iterations".
#[test]
fn loop_cap_message_states_the_counts() {
    let src = "
mesh m {
  grid [b = 1];
  threads t = 1;
}
kernel k(y: gmem<u32[1]>) {
  var acc: u32 = 0u;
  for i: u32 in 0u..65000u {
    acc = acc + 1u;
  }
  y[0] = acc;
}
map k {
  programs [m: k];
  outputs [y: gmem<u32[1]>];
}
";
    let m = module(src);
    let mut wgpu = backend(WgpuOptions::default());
    require_llvmpipe(&wgpu, "the loop cap applies on llvmpipe only");
    let err = wgpu
        .run(&plan(&m, "k"), &args(vec![], vec![]), &fast())
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RunError::Unsupported { .. }), "{text}");
    assert!(!text.contains("more than 65,535 loop iterations"), "{text}");
    assert!(
        text.contains("need 65001 loop-header visits, more than the 65000"),
        "{text}"
    );
}

// ---- item 6: constant indices -------------------------------------------------------

/// d13: `tile[axis_size(t)]` folds to a constant out of range; the emitter
/// reads such an index at run time (fast mode) or checks it (checked mode),
/// so naga never sees a constant out-of-range index. Checked mode reports it.
#[test]
fn constant_out_of_range_indices_never_reach_naga() {
    let src = "
mesh m {
  grid [b = 1];
  threads t = 64;
}
kernel k(y: gmem<f32[64]>, tile: smem<f32[64]>) {
  local acc: f32[4];
  acc[axis_size(t) - 60u] = 2.0;
  acc[axis_size(t)] = 1.0;
  tile[axis_size(t)] = 1.0;
  barrier;
  y[axis_index(t)] = tile[axis_index(t) % 1u] + acc[0];
}
map k {
  programs [m: k];
  outputs [y: gmem<f32[64]>];
  scratch [tile: smem<f32[64]>];
}
";
    // Validation refuses constant out-of-range indices (E0047); the emitter
    // must not rely on it, so the plan of an in-range version of the module
    // gets this kernel as written (it has no sugar to expand).
    let m = mpmd_core::text::parse(src).unwrap().0;
    let diagnostics = mpmd_core::validate::validate(&m, &Default::default()).unwrap_err();
    assert!(
        diagnostics.iter().all(|d| d.code == "E0047"),
        "{diagnostics:?}"
    );
    let in_range = src
        .replace(
            "acc[axis_size(t) - 60u] = 2.0",
            "acc[axis_size(t) - 61u] = 2.0",
        )
        .replace("acc[axis_size(t)] = 1.0", "acc[axis_size(t) - 64u] = 1.0")
        .replace("tile[axis_size(t)] = 1.0", "tile[axis_size(t) - 1u] = 1.0");
    let mut p = mpmd_core::plan::lower(
        &validated(&mpmd_core::text::parse(&in_range).unwrap().0),
        "k",
    )
    .unwrap();
    assert_ne!(p.units[0].kernel, m.kernels[0]);
    p.units[0].kernel = m.kernels[0].clone();
    for mode in [Mode::Fast, Mode::Checked] {
        let wgsl = emit(&p, mode).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        // The property, anywhere in either mode's module: no constant index
        // past the 64-element arrays.
        assert!(!wgsl.contains("[64u]"), "{wgsl}");
        compilers_accept(&wgsl, &format!("const-index-{mode:?}"));
    }
    let mut wgpu = backend(WgpuOptions::default());
    let err = wgpu.run(&p, &args(vec![], vec![]), &checked()).unwrap_err();
    assert!(
        matches!(&err, RunError::OutOfBounds { index, .. } if index == "[4]" || index == "[64]"),
        "{err}"
    );
}

// ---- every program of the repository ----------------------------------------------

/// Every example and every valid corpus case (`math_log_edge_values` holds
/// `f32::MAX`, d27) lowers, in both modes, to WGSL that tint reads too.
#[test]
fn every_example_and_corpus_case_passes_tint() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = example_files();
    for dir in ["conformance/cases", "conformance/cases/found"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            files.extend(
                entries
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "mpmd")),
            );
        }
    }
    let mut checked = 0;
    for file in &files {
        let src = std::fs::read_to_string(file).unwrap();
        let Ok((m, _)) = mpmd_core::text::parse(&src) else {
            continue;
        };
        if mpmd_core::validate::validate(&m, &Default::default()).is_err() {
            continue;
        }
        for map in &m.maps {
            let Ok(p) = mpmd_core::plan::lower(&validated(&m), &map.name) else {
                continue;
            };
            for mode in [Mode::Fast, Mode::Checked] {
                let wgsl = match emit(&p, mode) {
                    Ok(w) => w,
                    // Refusals with a reason (conformance reports them as skipped).
                    Err(
                        EmitError::TooManyBlocks { .. }
                        | EmitError::TooManyBindings { .. }
                        | EmitError::WarpOutsideBlockUniformControl { .. },
                    ) => continue,
                    Err(e) => panic!("{}: {e}", file.display()),
                };
                let tag = format!(
                    "{}-{}",
                    file.file_stem().unwrap().to_string_lossy(),
                    map.name
                );
                compilers_accept(&wgsl, &tag);
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} modules checked");
}

// ---- native warp collectives (subgroups) -------------------------------------------

/// What tint needs before a native module, which the module cannot hold:
/// naga 30 refuses `enable subgroups;` (not yet implemented, gfx-rs/wgpu
/// #5555) and does not know the `subgroup_uniformity` rule. Validation
/// (E0068) proved that whole warps reach every collective, which tint's
/// uniformity analysis cannot see.
const TINT_SUBGROUP_HEADER: &str = "enable subgroups;\ndiagnostic(off, subgroup_uniformity);\n";

fn native(mode: Mode, co_resident: bool) -> EmitOptions {
    EmitOptions {
        mode,
        co_resident,
        warps: WarpPath::Native,
        ..EmitOptions::default()
    }
}

fn uses_warps(p: &mpmd_core::plan::LaunchPlan) -> bool {
    p.units.iter().any(|u| {
        mpmd_core::ir::visit::any_stmt(&u.kernel.body, &mut |s| {
            matches!(s, Stmt::Warp { .. } | Stmt::Mma { .. })
        })
    })
}

/// A native module: subgroup operations, the run-time check in each entry
/// point, no exchange array; naga (library, with subgroups; and CLI) and
/// tint (with its header) read it.
fn check_native(wgsl: &str, tag: &str) {
    assert!(
        !wgsl.contains("mpmd_warp_words"),
        "{tag}: exchange array in a native module"
    );
    assert!(wgsl.contains("subgroup"), "{tag}: no subgroup operation");
    assert!(
        wgsl.contains("mpmd_check_subgroups(mpmd_subgroup_size, mpmd_subgroup_lane, thread_id);"),
        "{tag}: no subgroup check"
    );
    if let Some(report) = tool_refuses("naga", &[], wgsl, tag) {
        panic!("naga CLI refused {tag}:\n{report}");
    }
    let for_tint = format!("{TINT_SUBGROUP_HEADER}{wgsl}");
    if let Some(report) = tool_refuses(
        "tint",
        &["--format", "wgsl", "-o", "/dev/null"],
        &for_tint,
        tag,
    ) {
        panic!("tint refused {tag}:\n{report}");
    }
}

/// Every example and corpus case with warp collectives emits natively in
/// both modes, to WGSL every compiler reads; those under control that is
/// only warp-uniform, which the emulation refuses, among them.
#[test]
fn every_warp_program_emits_natively_for_every_compiler() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = example_files();
    for dir in ["conformance/cases", "conformance/cases/found"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            files.extend(
                entries
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "mpmd")),
            );
        }
    }
    let (mut checked, mut refused_emulated) = (Vec::new(), Vec::new());
    for file in &files {
        let src = std::fs::read_to_string(file).unwrap();
        let Ok((m, _)) = mpmd_core::text::parse(&src) else {
            continue;
        };
        if mpmd_core::validate::validate(&m, &Default::default()).is_err() {
            continue;
        }
        for map in &m.maps {
            let Ok(p) = mpmd_core::plan::lower(&validated(&m), &map.name) else {
                continue;
            };
            if !uses_warps(&p) {
                continue;
            }
            let tag = format!(
                "{}-{}",
                file.file_stem().unwrap().to_string_lossy(),
                map.name
            );
            for mode in [Mode::Fast, Mode::Checked] {
                let emitted = emit_module(&p, &native(mode, false))
                    .unwrap_or_else(|e| panic!("{tag} ({mode:?}): {e}"));
                check_native(&emitted.wgsl, &format!("{tag}-native-{mode:?}"));
                if let Err(EmitError::WarpOutsideBlockUniformControl { .. }) = emit(&p, mode) {
                    refused_emulated.push(format!("{tag} {mode:?}"));
                }
            }
            checked.push(tag);
        }
    }
    assert!(
        checked.len() >= 16,
        "only {} maps checked: {checked:?}",
        checked.len()
    );
    refused_emulated.sort();
    assert_eq!(
        refused_emulated,
        [
            "mma_in_warp_branch-tiles Checked",
            "mma_in_warp_branch-tiles Fast",
            "warp_collective_in_warp_branch-sums Checked",
            "warp_collective_in_warp_branch-sums Fast",
        ]
    );
}

/// A collective under a branch on the warp index: the emulation refuses it
/// (its barriers need the whole block), the native path runs it in the
/// branch, with no barrier.
#[test]
fn warp_only_uniform_control_is_refused_only_by_the_emulation() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src =
        std::fs::read_to_string(root.join("conformance/cases/warp_collective_in_warp_branch.mpmd"))
            .unwrap();
    let m = module(&src);
    let p = plan(&m, "sums");
    let refusal = emit(&p, Mode::Fast).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "kernel `first_warp_sums`: `reduce_add` is under the condition `warp == 0u`, which is warp-uniform \
         but not block-uniform (`warp` is not block-uniform); WGSL emulates warp collectives with workgroup \
         barriers, which need the whole block, where the adapter's subgroups are not the logical warps; move \
         it out of that branch or loop"
    );
    let wgsl = emit_module(&p, &native(Mode::Fast, false)).unwrap().wgsl;
    assert!(!wgsl.contains("workgroupBarrier"), "{wgsl}");
    let branch = wgsl.find("if ((v_warp == 0u))").expect("the branch");
    let sum = wgsl.find("subgroupAdd(").expect("the reduction");
    assert!(sum > branch, "{wgsl}");
}

/// A fused dispatch (a cycle) whose programs use native collectives, one
/// narrower than the workgroup: the entry point takes the subgroup builtins
/// and passes them on; an idle copy does not check its subgroup.
#[test]
fn a_fused_dispatch_passes_the_subgroup_builtins_to_its_programs() {
    let src = "
mesh ma {
  grid [ab = 2];
  threads at = 32;
}
mesh mb {
  grid [bb = 2];
  threads bt = 64;
}
kernel side_a(x: gmem<u32[64]>, y: gmem<u32[64]>, ping: gmem<u32[64]>, pong: gmem<u32[128]>, to_b: sem<[1]> @ mb, to_a: sem<[1]> @ ma) {
  let i: u32 = axis_index(ab) * 32u + axis_index(at);
  let near: u32 = shfl_xor(x[i], 1u);
  ping[i] = near + 1u;
  signal(to_b@[axis_index(ab)][0], 1);
  wait(to_a[0], 1);
  y[i] = pong[axis_index(ab) * 64u + 32u + axis_index(at)] * 2u;
}
kernel side_b(x: gmem<u32[64]>, y: gmem<u32[64]>, ping: gmem<u32[64]>, pong: gmem<u32[128]>, to_b: sem<[1]> @ mb, to_a: sem<[1]> @ ma) {
  wait(to_b[0], 1);
  let i: u32 = axis_index(bb) * 32u + axis_index(bt) % 32u;
  var s: u32 = 0u;
  if axis_index(bt) / 32u == 1u {
    let total: u32 = reduce_add(ping[i]);
    s = total;
  }
  pong[axis_index(bb) * 64u + axis_index(bt)] = s;
  signal(to_a@[axis_index(bb)][0], 1);
}
map handshake {
  programs [ma: side_a, mb: side_b];
  inputs [x: gmem<u32[64]>];
  outputs [y: gmem<u32[64]>];
  scratch [ping: gmem<u32[64]>, pong: gmem<u32[128]>, to_b: sem<[1]> @ mb, to_a: sem<[1]> @ ma];
}
";
    let m = module(src);
    let p = plan(&m, "handshake");
    let wgsl = emit_module(&p, &native(Mode::Fast, true)).unwrap().wgsl;
    assert!(
        wgsl.contains(
            "fn mpmd_fused(@builtin(local_invocation_id) mpmd_lid: vec3<u32>, @builtin(subgroup_size) \
             mpmd_subgroup_size: u32, @builtin(subgroup_invocation_id) mpmd_subgroup_lane: u32) {"
        ),
        "{wgsl}"
    );
    assert!(wgsl.contains(
        "fn unit0_side_a(thread_id: u32, mpmd_subgroup_size: u32, mpmd_subgroup_lane: u32) {"
    ));
    assert!(
        wgsl.contains("unit0_side_a(mpmd_lid.x, mpmd_subgroup_size, mpmd_subgroup_lane); return;")
    );
    // side_a runs 32 of the workgroup's 64 invocations: its idle copies skip the check.
    assert!(wgsl.contains(
        "  if (!mpmd_idle) { mpmd_check_subgroups(mpmd_subgroup_size, mpmd_subgroup_lane, thread_id); }"
    ));
    assert!(wgsl
        .contains("  mpmd_check_subgroups(mpmd_subgroup_size, mpmd_subgroup_lane, thread_id);\n"));
    check_native(&wgsl, "fused-native");
    // The emulation of the same plan refuses side_b's collective under the warp branch.
    assert!(matches!(
        emit_module(
            &p,
            &EmitOptions {
                co_resident: true,
                ..EmitOptions::default()
            }
        ),
        Err(EmitError::WarpOutsideBlockUniformControl { .. })
    ));
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}

/// What lavapipe runs (`EmitOptions::subgroups` and the loop cap: paired
/// 16-bit stores, loop counts taken per subgroup) is read by every
/// compiler, for every example and corpus case: naga's CLI as it is, tint
/// with `TINT_SUBGROUP_HEADER` (the ballot, shuffles and `subgroupMax` may
/// sit under control that is not subgroup-uniform: they observe only the
/// lanes active there, which is what they are for, `emit/pairing.rs`).
#[test]
fn every_module_lavapipe_runs_passes_naga_and_tint() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = example_files();
    files.extend(
        std::fs::read_dir(root.join("conformance/cases"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "mpmd")),
    );
    let (mut checked, mut paired, mut counted) = (0, 0, 0);
    for file in &files {
        let src = std::fs::read_to_string(file).unwrap();
        let Ok((m, _)) = mpmd_core::text::parse(&src) else {
            continue;
        };
        let Ok(valid) = mpmd_core::validate::validate(&m, &Default::default()) else {
            continue;
        };
        for map in &m.maps {
            let Ok(p) = mpmd_core::plan::lower(&valid, &map.name) else {
                continue;
            };
            let options = EmitOptions {
                subgroups: true,
                loop_cap: Some(65_000),
                ..EmitOptions::default()
            };
            let wgsl = match emit_module(&p, &options) {
                Ok(m) => m.wgsl,
                Err(
                    EmitError::TooManyBlocks { .. }
                    | EmitError::TooManyBindings { .. }
                    | EmitError::WarpOutsideBlockUniformControl { .. },
                ) => continue,
                Err(e) => panic!("{}: {e}", file.display()),
            };
            let tag = format!(
                "lavapipe-{}-{}",
                file.file_stem().unwrap().to_string_lossy(),
                map.name
            );
            if let Some(report) = tool_refuses("naga", &[], &wgsl, &tag) {
                panic!("naga CLI refused {tag}:\n{report}");
            }
            let for_tint = format!("{TINT_SUBGROUP_HEADER}{wgsl}");
            if let Some(report) = tool_refuses(
                "tint",
                &["--format", "wgsl", "-o", "/dev/null"],
                &for_tint,
                &tag,
            ) {
                panic!("tint refused {tag}:\n{report}");
            }
            checked += 1;
            paired += usize::from(wgsl.contains("subgroupBallot("));
            counted += usize::from(wgsl.contains("subgroupMax(mpmd_loop_count)"));
        }
    }
    assert!(checked > 100, "only {checked} modules checked");
    assert!(
        paired > 0 && counted > 0,
        "{paired} module(s) pair a store, {counted} count a loop"
    );
}
