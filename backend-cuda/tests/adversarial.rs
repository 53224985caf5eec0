//! Programs written as an attacker would: names that are C++ keywords,
//! CUDA built-ins, prelude or generated names, names built from other names
//! and 10,000-character names; expressions thousands of operators deep;
//! short-circuit guards on loads; run-time semaphore amounts below 1;
//! fast-mode stores far out of bounds. Each must compile (NVRTC + ptxas for
//! sm_90) and, run on CPU threads through the host-emulation shim, compute
//! what the interpreter computes or report the error the IR defines.
//! Needs NVRTC and ptxas (`cargo xtask test`) and a C++20 compiler.

// RunError is the shared error type of every backend; boxing it is not ours to decide.
#![allow(clippy::result_large_err)]

mod common;
#[path = "support/emulate.rs"]
mod emulate;

use std::collections::BTreeMap;

use emulate::{emulate, Emulated};
use mpmd_core::host::CallArgs;
use mpmd_core::inputs::{call_args, Generation};
use mpmd_core::ir::{Literal, Module};
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::{Backend, Mode, RunError, RunOptions};
use mpmd_cuda::{check_plan, emit};

const TIMEOUT_NS: u64 = 2_000_000_000;

/// Parses, validates and lowers the file's first call on a thread with a
/// large stack (deep programs are the parser's and validator's business
/// here; the emitter runs on the test's own thread).
fn prepare(source: &str) -> (Module, LaunchPlan, CallArgs) {
    let source = source.to_string();
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let file = mpmd_core::text::parse_file(&source).expect("parses");
            let module = file.module;
            if let Err(diagnostics) = mpmd_core::validate::validate(&module, &Default::default()) {
                panic!("{diagnostics:?}");
            }
            let map = module.effective_calls()[0].map.clone();
            let plan = lower(&validated(&module), &map).expect("lowers");
            let generators = file.case.map(|c| c.generators).unwrap_or_default();
            let generation = Generation::with_defaults(7).with_generators(&generators);
            let args = call_args(&module, &generation)
                .expect("arguments")
                .remove(0);
            (module, plan, args)
        })
        .unwrap()
        .join()
        .unwrap()
}

fn interpret(plan: &LaunchPlan, args: &CallArgs) -> Result<mpmd_core::host::CallOutputs, RunError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn_scoped(scope, || {
                mpmd_core::interp::Interpreter::new().run(plan, args, &RunOptions::default())
            })
            .unwrap()
            .join()
            .unwrap()
    })
}

fn emulated(plan: &LaunchPlan, args: &CallArgs, mode: Mode) -> Emulated {
    let inputs: BTreeMap<&str, Vec<u32>> = args
        .inputs
        .iter()
        .map(|(name, tensor)| (name.as_str(), tensor.words().to_vec()))
        .collect();
    let scalars: BTreeMap<&str, Literal> = args
        .scalars
        .iter()
        .map(|(name, value)| (name.as_str(), *value))
        .collect();
    emulate(plan, mode, &inputs, &scalars, TIMEOUT_NS)
}

fn output<'a>(plan: &LaunchPlan, out: &'a Emulated, name: &str) -> &'a [u32] {
    let index = plan.operand(name).and_then(|o| o.buffer).unwrap();
    &out.buffers[index.index()][..plan.buffer(index).len as usize]
}

/// NVRTC + ptxas in both modes.
fn compiles(plan: &LaunchPlan) {
    common::require_tools();
    for mode in [Mode::Fast, Mode::Checked] {
        if let Err(e) = check_plan(plan, mode) {
            let source = emit(plan, mode).unwrap();
            let shown: String = source.chars().take(20_000).collect();
            panic!("{mode:?}: {e}\n--- source (start) ---\n{shown}");
        }
    }
}

/// The emulated CUDA C gives the interpreter's outputs, bit for bit, in
/// both modes, with no error recorded.
fn agrees_with_the_interpreter(plan: &LaunchPlan, args: &CallArgs) {
    let want = interpret(plan, args).expect("the interpreter runs it");
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulated(plan, args, mode);
        assert_eq!(out.recorded, None, "{mode:?}");
        for (name, tensor) in &want.outputs {
            assert_eq!(
                output(plan, &out, name),
                tensor.words(),
                "output `{name}` ({mode:?})"
            );
        }
    }
}

/// A map named `idx` (the prelude's `mpmd_idx`, d12), operands and
/// variables named like CUDA built-ins, C++ keywords, prelude names and
/// generated names, and `let k_end` beside `for k` (whose bound once had
/// the C name `v_k_end`, so the body read the bound instead).
const NAMES: &str = "
mesh m { grid [b = 2]; threads threadIdx = 32; }
kernel int(float4: gmem<f32[64]>, namespace: gmem<f32[64]>, mpmd_idx: gmem<u32[64]>, n: u32, __syncthreads: smem<f32[32]> @ m) {
  let mpmd_block: u32 = axis_index(b) * 32u + axis_index(threadIdx);
  let a_threadIdx: u32 = axis_index(threadIdx);
  let k_end: u32 = 3u;
  var min: f32 = 0.0;
  for k: u32 in 0u..n {
    let k_end_k: u32 = k_end + k;
    min = min + float4[(mpmd_block + k_end_k) % 64u];
  }
  __syncthreads[a_threadIdx] = min;
  barrier;
  let v_min: f32 = __syncthreads[31u - a_threadIdx];
  local p_n: f32[2];
  p_n[0u] = v_min;
  p_n[1u] = min;
  namespace[mpmd_block] = p_n[0u] + p_n[1u];
  mpmd_idx[mpmd_block] = k_end + n;
}
map idx {
  programs [m: int];
  inputs [float4: gmem<f32[64]>];
  outputs [namespace: gmem<f32[64]>, mpmd_idx: gmem<u32[64]>];
  scalars [n: u32];
  scratch [__syncthreads: smem<f32[32]> @ m];
}
call idx(n = 5u);
";

#[test]
fn names_like_builtins_prelude_names_and_loop_bounds_compute_the_interpreters_result() {
    let (_, plan, args) = prepare(NAMES);
    compiles(&plan);
    agrees_with_the_interpreter(&plan, &args);
    // `k_end` is 3, whatever the loop's bound: 3 + 5 in every element.
    let out = emulated(&plan, &args, Mode::Fast);
    assert!(output(&plan, &out, "mpmd_idx").iter().all(|&w| w == 8));
}

/// C++ keywords, CUDA built-ins and macros, prelude, shim and generated
/// names, and names built from each other, as every kind of name at once.
const HOSTILE: [&str; 36] = [
    "idx",
    "report",
    "int",
    "float4",
    "namespace",
    "class",
    "template",
    "asm",
    "sizeof",
    "nullptr",
    "NULL",
    "main",
    "printf",
    "threadIdx",
    "blockIdx",
    "gridDim",
    "__syncthreads",
    "__global__",
    "__shared__",
    "atomicAdd",
    "sqrtf",
    "min",
    "max",
    "mpmd_idx",
    "mpmd_block",
    "mpmd_ctl",
    "mpmd_dim3",
    "mpmd_o1",
    "mpmd_e1",
    "mpmd_n1",
    "MPMD_BAD_OFFSET",
    "u64",
    "v_x",
    "b0_x",
    "m_x",
    "x",
];

/// Every hostile name as a mesh, axis, kernel, map and operand (one map
/// each), and all of them as the values of one body.
fn hostile_module() -> String {
    let mut text = String::new();
    for name in HOSTILE {
        text.push_str(&format!(
            "mesh {name} {{ grid [{name} = 2]; threads t = 32; }}\n\
             kernel {name}({name}: gmem<u32[64]>) {{ {name}[axis_index({name}) * 32u + axis_index(t)] = axis_index({name}); }}\n\
             map {name} {{ programs [{name}: {name}]; outputs [{name}: gmem<u32[64]>]; }}\n"
        ));
    }
    text.push_str("mesh values { grid [g = 1]; threads t = 32; }\nkernel values(y: gmem<u32[32]>) {\n  var acc: u32 = 0u;\n");
    for (k, name) in HOSTILE.iter().enumerate() {
        text.push_str(&format!(
            "  let {name}: u32 = axis_index(t) * {k}u + 1u;\n  acc = acc + {name};\n"
        ));
    }
    text.push_str("  for x_end: u32 in 0u..2u { acc = acc + x_end + x; }\n  y[axis_index(t)] = acc;\n}\nmap values_map { programs [values: values]; outputs [y: gmem<u32[32]>]; }\n");
    for name in HOSTILE {
        text.push_str(&format!("call {name}();\n"));
    }
    text.push_str("call values_map();\n");
    text
}

#[test]
fn keywords_builtins_and_generated_names_compile_as_every_kind_of_name() {
    let text = hostile_module();
    let (module, _, _) = prepare(&text);
    common::require_tools();
    for call in module.effective_calls() {
        let plan = lower(&validated(&module), &call.map).unwrap();
        check_plan(&plan, Mode::Fast).unwrap_or_else(|e| panic!("map `{}`: {e}", call.map));
        // Emulating is slow (a C++ compile each): the names the shim or the
        // prelude also use.
        if !["values_map", "main", "mpmd_dim3", "mpmd_idx", "threadIdx"]
            .contains(&call.map.as_str())
        {
            continue;
        }
        let out = emulated(&plan, &CallArgs::default(), Mode::Fast);
        assert_eq!(out.recorded, None);
        let got = output(&plan, &out, plan.buffers[0].output.as_deref().unwrap());
        if call.map == "values_map" {
            // acc = sum over k of (t * k + 1), plus 0 + 1 + 2 x.
            let k_sum: u32 = (0..HOSTILE.len() as u32).sum();
            for (t, &w) in got.iter().enumerate() {
                let t = t as u32;
                let x = t * (HOSTILE.len() as u32 - 1) + 1; // `x` is the last name
                assert_eq!(w, t * k_sum + HOSTILE.len() as u32 + 1 + 2 * x, "t = {t}");
            }
        } else {
            let want: Vec<u32> = (0..64).map(|i| i / 32).collect();
            assert_eq!(got, &want[..], "map `{}`", call.map);
        }
    }
    // Checked mode once, on the values (it names every ref in records).
    let plan = lower(&validated(&module), "values_map").unwrap();
    check_plan(&plan, Mode::Checked).unwrap();
}

/// 10,000-character names of every kind (NVRTC and ptxas take them; the
/// kernel's PTX symbol is the map's name).
#[test]
fn ten_thousand_character_names_compile_and_compute() {
    let long = |c: char| std::iter::repeat_n(c, 10_000).collect::<String>();
    let (mesh, axis, kernel, operand, value, map) = (
        long('m'),
        long('a'),
        long('k'),
        long('y'),
        long('v'),
        long('q'),
    );
    let body = |map: &str| {
        format!(
            "mesh {mesh} {{ grid [{axis} = 2]; threads t = 32; }}\n\
             kernel {kernel}({operand}: gmem<u32[64]>) {{\n  let {value}: u32 = axis_index({axis}) * 32u + axis_index(t);\n  for {value}_i: u32 in 0u..2u {{ {operand}[{value}] = {value}_i + {value}; }}\n}}\n\
             map {map} {{ programs [{mesh}: {kernel}]; outputs [{operand}: gmem<u32[64]>]; }}\n"
        )
    };
    let (_, plan, _) = prepare(&body(&map));
    compiles(&plan);
    // The emulation names its folder after the map, so it gets a short one.
    let (_, plan, args) = prepare(&body("short"));
    agrees_with_the_interpreter(&plan, &args);
}

/// `1 + 1 + ... + 1` with `terms` operators on a run-time value.
fn chain(terms: usize) -> String {
    format!(
        "mesh m {{ grid [b = 1]; threads t = 32; }}\n\
         kernel k(x: gmem<i32[32]>, y: gmem<i32[32]>, n: i32) {{\n  let v: i32 = x[axis_index(t)]{};\n  y[axis_index(t)] = v;\n}}\n\
         map k {{ programs [m: k]; inputs [x: gmem<i32[32]>]; outputs [y: gmem<i32[32]>]; scalars [n: i32]; }}\ncall k(n = 3);\n",
        " + n".repeat(terms)
    )
}

/// A flat chain of operators nests as deep as it is long in the IR: the
/// emitter walks it without recursion and binds it to temporaries (the unit
/// test of the same name bounds how deep the C nests), so the C compiles and
/// computes the interpreter's result.
#[test]
fn chains_at_the_nesting_limit_become_shallow_c() {
    // The longest chain the text format takes, with room for the statement.
    let (_, plan, args) = prepare(&chain(mpmd_core::text::MAX_NESTING - 8));
    compiles(&plan);
    agrees_with_the_interpreter(&plan, &args);
}

/// `i >= 0 && x[i] > 0.0` (u_shortcircuit_and): the load is not evaluated
/// when `i` is -1, so checked mode reports nothing; a right operand deep
/// enough to need temporaries keeps them under the guard; `select`
/// evaluates both operands and reports the load.
fn guarded(condition: &str) -> String {
    format!(
        "mesh m {{ grid [b = 1]; threads t = 64; }}\n\
         kernel k(x: gmem<f32[64]>, y: gmem<f32[64]>) {{\n  let i: i32 = i32(axis_index(t)) - 1;\n  var v: f32 = 0.0;\n  if {condition} {{\n    v = x[i];\n  }}\n  y[axis_index(t)] = v;\n}}\n\
         map sc {{ programs [m: k]; inputs [x: gmem<f32[64]>]; outputs [y: gmem<f32[64]>]; }}\ncall sc();\n\
         case {{ generate x = uniform(-1.0, 1.0); expect ok; }}\n"
    )
}

#[test]
fn and_or_short_circuit_in_checked_mode_and_select_does_not() {
    // Deep enough that the emitter binds it to temporaries (it does past 32
    // levels of C), which must then run only when the left does not decide.
    let deep_right = format!("(x[i]{}) > 0.0", " + 0.0".repeat(96));
    for condition in [
        "i >= 0 && x[i] > 0.0".to_string(),
        "!(i < 0 || x[i] <= 0.0)".to_string(),
        format!("i >= 0 && {deep_right}"),
        format!("!(i < 0 || !({deep_right}))"),
    ] {
        let (_, plan, args) = prepare(&guarded(&condition));
        compiles(&plan);
        // A deep right operand is the case of statements under the guard:
        // `bool mpmd_e<n> = <left>; if (...) { <temporaries> ... }`.
        assert_eq!(
            emit(&plan, Mode::Fast).unwrap().contains("bool mpmd_e"),
            condition.contains(&deep_right),
            "{condition}"
        );
        let x: Vec<f32> = args.inputs["x"]
            .words()
            .iter()
            .map(|&w| f32::from_bits(w))
            .collect();
        for mode in [Mode::Fast, Mode::Checked] {
            let out = emulated(&plan, &args, mode);
            assert_eq!(out.recorded, None, "{condition} ({mode:?})");
            let y = output(&plan, &out, "y");
            for t in 0..64usize {
                let want = if t >= 1 && x[t - 1] > 0.0 {
                    x[t - 1]
                } else {
                    0.0
                };
                assert_eq!(f32::from_bits(y[t]), want, "{condition}: y[{t}] ({mode:?})");
            }
        }
    }
    let (_, plan, args) = prepare(&guarded("select(i >= 0, x[i], 0.0) > 0.0"));
    compiles(&plan);
    let out = emulated(&plan, &args, Mode::Checked);
    assert_eq!(
        out.recorded.as_ref().map(|e| e.to_string()),
        Some("out-of-bounds access at program 0 (k), block 0, thread 0: `x` index [4294967295] (shape [64])".to_string())
    );
}

/// Literals every compiler reads, bit for bit.
#[test]
fn extreme_float_literals_keep_their_bits() {
    let values: [u32; 10] = [
        f32::MAX.to_bits(),
        (-f32::MAX).to_bits(),
        f32::MIN_POSITIVE.to_bits(),
        1,           // the smallest subnormal
        0x0000_ffff, // a subnormal
        (-0.0f32).to_bits(),
        f32::INFINITY.to_bits(),
        f32::NEG_INFINITY.to_bits(),
        0x7fc0_0000, // NaN
        0x3dcc_cccd, // 0.1, not exact in decimal
    ];
    let stores: String = values
        .iter()
        .enumerate()
        .map(|(k, &bits)| {
            let literal = match f32::from_bits(bits) {
                v if v.is_nan() => "nan".to_string(),
                v if v == f32::INFINITY => "inf".to_string(),
                v if v == f32::NEG_INFINITY => "-inf".to_string(),
                v => format!("{v:?}"),
            };
            format!("  y[{k}u] = bitcast<u32>({literal});\n")
        })
        .collect();
    let source = format!(
        "mesh m {{ grid [b = 1]; threads t = 1; }}\nkernel k(y: gmem<u32[10]>) {{\n{stores}}}\n\
         map lits {{ programs [m: k]; outputs [y: gmem<u32[10]>]; }}\ncall lits();\n"
    );
    let (_, plan, args) = prepare(&source);
    compiles(&plan);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulated(&plan, &args, mode);
        assert_eq!(output(&plan, &out, "y"), &values[..], "{mode:?}");
    }
}

/// d22: `wait(s, n)` / `signal(s, n)` with an amount below 1 at run time is
/// an error naming program, block and semaphore, in both modes.
fn amounts(wait: &str, signal: &str) -> String {
    format!(
        "mesh p {{ grid [pb = 1]; threads pt = 32; }}\nmesh c {{ grid [cb = 1]; threads ct = 32; }}\n\
         kernel produce(y: gmem<u32[32]>, n: i32, s: sem<[1]>) {{ signal(s[0], {signal}); }}\n\
         kernel consume(y: gmem<u32[32]>, n: i32, s: sem<[1]>) {{\n  wait(s[0], {wait});\n  let v: i32 = read(s[0]);\n  y[axis_index(ct)] = u32(v);\n}}\n\
         map dl {{ programs [p: produce, c: consume]; outputs [y: gmem<u32[32]>]; scalars [n: i32]; scratch [s: sem<[1]>]; }}\n"
    )
}

#[test]
fn semaphore_amounts_below_one_at_run_time_are_errors() {
    common::require_tools();
    for (source, n, want) in [
        (amounts("n", "1"), -1, "semaphore amount -1 on `s[0]` at program 1 (consume), block 0: a signal or wait amount must be at least 1"),
        (amounts("n", "1"), 0, "semaphore amount 0 on `s[0]` at program 1 (consume), block 0: a signal or wait amount must be at least 1"),
        (amounts("1", "n"), 0, "semaphore amount 0 on `s[0]` at program 0 (produce), block 0: a signal or wait amount must be at least 1"),
    ] {
        let (_, plan, _) = prepare(&format!("{source}call dl(n = 1);\n"));
        compiles(&plan);
        let mut args = CallArgs::default();
        args.scalars.insert("n".into(), Literal::I32(n));
        for mode in [Mode::Fast, Mode::Checked] {
            // A short time limit: a zero signal leaves the wait unmet.
            let inputs = BTreeMap::new();
            let scalars = BTreeMap::from([("n", Literal::I32(n))]);
            let out = emulate(&plan, mode, &inputs, &scalars, 50_000_000);
            let error = out.recorded.clone();
            assert_eq!(error.as_ref().map(|e| e.to_string()).as_deref(), Some(want), "n = {n} ({mode:?})");
            assert_eq!(
                error.and_then(|e| e.class()),
                Some(mpmd_core::ErrorClass::BadSemaphoreAmount)
            );
            assert_eq!(out.status, 1);
        }
        // An amount of 1 still runs.
        let scalars = BTreeMap::from([("n", Literal::I32(1))]);
        let out = emulate(&plan, Mode::Fast, &BTreeMap::new(), &scalars, TIMEOUT_NS);
        assert_eq!(out.recorded, None);
        let _ = args;
    }
}

/// Fast mode leaves out-of-bounds results undefined, but a store, an atomic
/// or a local-array write far outside its ref never writes memory outside
/// it: host-mapped outputs (and, with unified addressing, all page-locked
/// host memory) are in the kernel's address space. Under emulation a wild
/// store would write the test process's memory and crash it.
#[test]
fn fast_mode_writes_never_leave_their_ref() {
    let source = "
mesh m { grid [b = 1]; threads t = 32; }
kernel k(y: gmem<u32[32]>, z: gmem<u32[32]>, c: gmem<u32[4]>, far: u32) {
  let t: u32 = axis_index(t);
  local tmp: u32[4];
  tmp[t * far] = 7u;
  tmp[0u] = t;
  z[t] = tmp[0u];
  y[t * far + t] = 1u;
  y[t] = t + 100u;
  atomic_add(c[t * far], 1u);
}
map wild { programs [m: k]; outputs [y: gmem<u32[32]>, z: gmem<u32[32]>, c: gmem<u32[4]> zeroed]; scalars [far: u32]; }
call wild(far = 0u);
";
    let (module, plan, _) = prepare(source);
    let _ = module;
    compiles(&plan);
    // 2^30 elements away: 4 GiB past the buffer.
    let scalars = BTreeMap::from([("far", Literal::U32(1 << 30))]);
    let out = emulate(&plan, Mode::Fast, &BTreeMap::new(), &scalars, TIMEOUT_NS);
    let y = output(&plan, &out, "y");
    let z = output(&plan, &out, "z");
    for t in 0..32u32 {
        assert_eq!(y[t as usize], t + 100, "y[{t}]");
        assert_eq!(z[t as usize], t, "z[{t}]");
    }
    // `t * 2^30` wraps to 0 for t = 0, 4, ..., 28 (in bounds: 8 atomics);
    // every other one is 1 GiB or more away and skipped.
    assert_eq!(output(&plan, &out, "c"), &[8, 0, 0, 0]);
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
