//! Runs the generated CUDA C on the CPU: a small shim maps CUDA's built-ins
//! to C++ threads (one per CUDA thread, a std::barrier per block), blocks run
//! one after another in ticket order, and the outputs are compared with
//! values worked out by hand. This checks the generated logic (ticket
//! dispatch, thread exit, offsets of owned refs and `@[coords]`, smem,
//! semaphores, atomics, the error record in checked mode and on a wait
//! timeout) without a GPU. It cannot check the GPU memory model or
//! co-residency. Needs a C++20 compiler (`c++`) on PATH.

mod common;
#[path = "support/emulate.rs"]
mod emulate;

use std::collections::BTreeMap;

use common::*;
use emulate::{emulate, Emulated};
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;
use mpmd_cuda::{emit_module, BlockSchedule};

fn buffer_of<'a>(plan: &LaunchPlan, out: &'a Emulated, name: &str) -> &'a [u32] {
    let index = plan.operand(name).and_then(|o| o.buffer).unwrap();
    &out.buffers[index.index()][..plan.buffer(index).len as usize]
}

fn f32s(words: &[u32]) -> Vec<f32> {
    words.iter().map(|&w| f32::from_bits(w)).collect()
}

#[test]
fn scale_runs_elementwise() {
    let plan = plan_of(&scale());
    let x: Vec<f32> = (0..512).map(|i| i as f32 * 0.25 - 3.0).collect();
    let inputs = BTreeMap::from([("x", x.iter().map(|v| v.to_bits()).collect())]);
    let scalars = BTreeMap::from([("alpha", Literal::f32(2.5)), ("n", Literal::U32(500))]);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(&plan, mode, &inputs, &scalars, 1_000_000_000);
        assert_eq!(out.recorded, None);
        assert_eq!(out.status, 0, "no error, no status ({mode:?})");
        let y = buffer_of(&plan, &out, "y");
        for i in 0..512 {
            if i < 500 {
                assert_eq!(f32::from_bits(y[i]), x[i] * 2.5, "y[{i}] ({mode:?})");
            } else {
                assert_eq!(y[i], 0xdead_beef, "y[{i}] is past n ({mode:?})");
            }
        }
    }
}

#[test]
fn pipeline_hands_data_through_semaphores_owned_refs_and_smem() {
    // 48 producer threads: tickets; 32: the resident walk, whose smaller
    // programs synchronise through named barriers.
    for (module, schedule) in [
        (pipeline(), BlockSchedule::Tickets),
        (pipeline_in_warps(), BlockSchedule::ResidentWalk),
    ] {
        let plan = plan_of(&module);
        assert_eq!(BlockSchedule::for_plan(&plan, true), schedule);
        pipeline_results_are_right(&plan);
    }
}

fn pipeline_results_are_right(plan: &LaunchPlan) {
    let x: Vec<f32> = (0..4 * 96).map(|i| (i % 17) as f32 + 0.5).collect();
    let inputs = BTreeMap::from([("x", x.iter().map(|v| v.to_bits()).collect())]);
    let scalars = BTreeMap::from([("scale", Literal::f32(3.0))]);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(plan, mode, &inputs, &scalars, 1_000_000_000);
        assert_eq!(out.recorded, None, "{mode:?}");
        // mid@[block k] = row k of x times scale; y of consumer block k is
        // mid reversed (through smem) plus sqrt(mid).
        let y = f32s(buffer_of(plan, &out, "y"));
        for k in 0..4 {
            for t in 0..96 {
                let mid = |c: usize| x[k * 96 + c] * 3.0;
                let want = mid(95 - t) + mid(t).sqrt();
                assert_eq!(y[k * 96 + t], want, "y@[{k}][{t}] ({mode:?})");
            }
        }
        assert_eq!(buffer_of(plan, &out, "total"), &[4]);
        // wait_nodec left the 4 signals in `done`; `finish` read 4.
        assert_eq!(buffer_of(plan, &out, "done"), &[4]);
        assert_eq!(buffer_of(plan, &out, "ready"), &[0, 0, 0, 0]);
        assert_eq!(
            f32s(&buffer_of(plan, &out, "hand")[4..]),
            vec![4.0, 4.0, 4.0, 4.0]
        );
        assert_eq!(buffer_of(plan, &out, "credits"), &[0, 0, 1, 0]);
    }
}

#[test]
fn atomics_have_their_results() {
    let plan = plan_of(&atomics());
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(
            &plan,
            mode,
            &BTreeMap::new(),
            &BTreeMap::new(),
            1_000_000_000,
        );
        assert_eq!(out.recorded, None);
        // 3 blocks x t in 0..96: add 3 * 4560, min 0, max 95, and 0,
        // or 127, xor of 0..96 three times = 0.
        for name in ["cu", "ci"] {
            let c = buffer_of(&plan, &out, name);
            assert_eq!(
                [c[2], c[3], c[4], c[5], c[6], c[7]],
                [13680, 0, 95, 0, 127, 0],
                "{name} ({mode:?})"
            );
        }
    }
}

#[test]
fn f32_atomics_have_their_results() {
    let plan = plan_of(&f32_atomics());
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(
            &plan,
            mode,
            &BTreeMap::new(),
            &BTreeMap::new(),
            1_000_000_000,
        );
        assert_eq!(out.recorded, None);
        let facc = f32s(buffer_of(&plan, &out, "facc"));
        // Sums of multiples of 0.5 and of 1.0: exact in any order.
        assert_eq!(facc[0], 6840.0, "add ({mode:?})");
        assert_eq!([facc[1], facc[2]], [-10.0, 85.0], "min, max ({mode:?})");
        assert_eq!(facc[4], 0.0, "load, store ({mode:?})");
        assert_eq!(facc[5], 288.0, "smem sums ({mode:?})");
        // NaN operands leave the word as it was; the others decide.
        assert_eq!([facc[6], facc[7]], [95.0, -95.0], "NaN operands ({mode:?})");
    }
}

/// One program that waits on a semaphore nobody signals.
fn stuck() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 64).build();
    let map = MapBuilder::new("stuck")
        .program("m", "stuck")
        .output("y", gmem(U32, [128]))
        .scratch("never", sem([3]))
        .build();
    let kernel = KernelBuilder::new("stuck", map.params()).body(|b| {
        b.wait(at("never", [Expr::from(2u32)]), 1);
        b.store(at("y", [axis_index("t")]), Expr::from(1u32));
    });
    module(vec![mesh], vec![kernel], map)
}

#[test]
fn unsignaled_wait_times_out_and_names_the_semaphore() {
    let plan = plan_of(&stuck());
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(&plan, mode, &BTreeMap::new(), &BTreeMap::new(), 20_000_000);
        assert_eq!(
            out.recorded.as_ref().map(|e| e.to_string()),
            Some("wait on `never[2]` timed out at program 0 (stuck), block 0".to_string()),
            "{mode:?}"
        );
        // The plan proves nobody signals `never`: the backend calls it a deadlock.
        assert_eq!(
            out.error.as_ref().map(|e| e.to_string()),
            Some("deadlock: every live block waits\nprogram 0 (stuck), block 0 waits on `never[2]`, which no program of this call signals (and it is not device-resident)".to_string())
        );
        // The abort flag stopped every block before its store; the status
        // word tells the host to read the record.
        assert!(out.aborted);
        assert_eq!(out.status, 1);
        assert!(buffer_of(&plan, &out, "y")
            .iter()
            .all(|&w| w == 0xdead_beef));
    }
}

/// Thread 5 of block 1 stores past the end, through `@[coords]` on an owned ref.
fn out_of_bounds() -> Module {
    let mesh = MeshBuilder::new("m")
        .grid("b", 2)
        .cluster("c", 2)
        .threads("t", 32)
        .build();
    let map = MapBuilder::new("oob")
        .program("m", "oob")
        .output("y", gmem(F32, [32]).owned_by("m"))
        .build();
    let kernel = KernelBuilder::new("oob", map.params()).body(|b| {
        let t = b.let_("t", U32, axis_index("t"));
        let bad = (axis_index("b").eq(Expr::from(0u32)))
            .and(axis_index("c").eq(Expr::from(1u32)))
            .and(t.clone().eq(Expr::from(5u32)));
        let i = b.let_("i", U32, select(bad, Expr::from(40u32), t));
        b.store(
            at_block("y", [axis_index("b"), axis_index("c")], [i]),
            1.0f32,
        );
    });
    module(vec![mesh], vec![kernel], map)
}

#[test]
fn checked_mode_reports_out_of_bounds() {
    let plan = plan_of(&out_of_bounds());
    let out = emulate(
        &plan,
        Mode::Checked,
        &BTreeMap::new(),
        &BTreeMap::new(),
        1_000_000_000,
    );
    assert_eq!(
        out.recorded.as_ref().map(|e| e.to_string()),
        Some("out-of-bounds access at program 0 (oob), block 1, thread 5: `y` index @[0, 1][40] (shape @[2, 2][32])".to_string())
    );
    // The host reads the control block back because the status word says so.
    assert_eq!(out.status, 1);
    // Every in-bounds store happened; the bad one was skipped.
    let y = buffer_of(&plan, &out, "y");
    let written = y.iter().filter(|&&w| w == 1.0f32.to_bits()).count();
    assert_eq!(written, 4 * 32 - 1);
}

const N: u32 = 64;

fn special_f32() -> Vec<f32> {
    let base = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        1.5,
        -2.5,
        3.0,
        f32::NAN,
        // A signalling NaN: the host's fminf returns NaN for it, where
        // min and max must return the other operand.
        f32::from_bits(0x7f80_0001),
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-45,
        -3e-39,
        1e30,
        -1e30,
        3e9,
        -3e9,
        2147483648.0,
        -2147483904.0,
        4294967296.0,
        0.1,
        7.0,
        -7.75,
        16777217.0,
    ];
    (0..N as usize)
        .map(|i| base.get(i).copied().unwrap_or((i as f32 - 40.0) * 1.37))
        .collect()
}

fn special_i32() -> Vec<i32> {
    let base = [
        0,
        1,
        -1,
        2,
        -2,
        7,
        -7,
        31,
        32,
        33,
        -33,
        i32::MIN,
        i32::MAX,
        i32::MIN + 1,
        65536,
        -98765,
    ];
    (0..N as usize)
        .map(|i| base.get(i).copied().unwrap_or((i as i32 - 40) * 977))
        .collect()
}

/// Outputs whose every operation the IR defines exactly, one slot per
/// expression, so that a wrong operator shows up by name.
fn exact_expressions() -> (
    Module,
    Vec<&'static str>,
    Vec<&'static str>,
    Vec<&'static str>,
    Vec<&'static str>,
) {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", N).build();
    let f_names = vec![
        "add",
        "sub",
        "mul",
        "div",
        "rem",
        "neg",
        "sqrt",
        "fma",
        "min",
        "max",
        "abs",
        "floor",
        "ceil",
        "from_i32",
        "from_u32",
        "bitcast_u32",
        "select",
        "mul_add",
        "from_bool",
    ];
    let i_names = vec![
        "add",
        "sub",
        "mul",
        "div",
        "rem",
        "and",
        "or",
        "xor",
        "shl",
        "shr",
        "neg",
        "not",
        "abs",
        "min",
        "max",
        "from_f32",
        "bitcast_f32",
        "from_u32",
        "from_bool",
    ];
    let u_names = vec![
        "add",
        "sub",
        "mul",
        "div",
        "rem",
        "shl",
        "shr",
        "neg",
        "min",
        "max",
        "from_f32",
        "bitcast_f32",
        "from_i32",
    ];
    let b_names = vec![
        "f_lt", "f_le", "f_eq", "f_ne", "f_gt", "f_ge", "i_lt", "i_ge", "u_lt", "u_gt", "and",
        "or", "not", "from_f32", "from_i32", "eq_bool",
    ];
    let map = MapBuilder::new("exact")
        .program("m", "exact")
        .input("xf", gmem(F32, [N]))
        .input("xi", gmem(I32, [N]))
        .output("yf", gmem(F32, [f_names.len() as u32, N]))
        .output("yi", gmem(I32, [i_names.len() as u32, N]))
        .output("yu", gmem(U32, [u_names.len() as u32, N]))
        .output("yb", gmem(Bool, [b_names.len() as u32, N]))
        .build();
    let kernel = KernelBuilder::new("exact", map.params()).body(|b| {
        let t = b.let_("t", U32, axis_index("t"));
        let j = b.let_("j", U32, (t.clone() + Expr::from(7u32)) % Expr::from(N));
        let k = b.let_("k", U32, (t.clone() + Expr::from(13u32)) % Expr::from(N));
        let fa = b.let_("fa", F32, load("xf", [t.clone()]));
        let fb = b.let_("fb", F32, load("xf", [j.clone()]));
        let fc = b.let_("fc", F32, load("xf", [k]));
        let ia = b.let_("ia", I32, load("xi", [t.clone()]));
        let ib = b.let_("ib", I32, load("xi", [j]));
        let ua = b.let_("ua", U32, ia.clone().bitcast(U32));
        let ub = b.let_("ub", U32, ib.clone().bitcast(U32));
        let ba = b.let_("ba", Bool, fa.clone().lt(fb.clone()));
        let bb = b.let_("bb", Bool, ia.clone().ge(ib.clone()));
        let fs: Vec<Expr> = vec![
            fa.clone() + fb.clone(),
            fa.clone() - fb.clone(),
            fa.clone() * fb.clone(),
            fa.clone() / fb.clone(),
            fa.clone() % fb.clone(),
            -fa.clone(),
            math(MathFn::Sqrt, [fa.clone()]),
            math(MathFn::Fma, [fa.clone(), fb.clone(), fc.clone()]),
            math(MathFn::Min, [fa.clone(), fb.clone()]),
            math(MathFn::Max, [fa.clone(), fb.clone()]),
            math(MathFn::Abs, [fa.clone()]),
            math(MathFn::Floor, [fa.clone()]),
            math(MathFn::Ceil, [fa.clone()]),
            ia.clone().cast(F32),
            ua.clone().cast(F32),
            ua.clone().bitcast(F32),
            select(ba.clone(), fa.clone(), fb.clone()),
            fa.clone() * fb.clone() + fc,
            ba.clone().cast(F32),
        ];
        let is: Vec<Expr> = vec![
            ia.clone() + ib.clone(),
            ia.clone() - ib.clone(),
            ia.clone() * ib.clone(),
            ia.clone() / ib.clone(),
            ia.clone() % ib.clone(),
            ia.clone() & ib.clone(),
            ia.clone() | ib.clone(),
            ia.clone() ^ ib.clone(),
            ia.clone() << ib.clone(),
            ia.clone() >> ib.clone(),
            -ia.clone(),
            Expr::Unary(UnaryOp::BitNot, Box::new(ia.clone())),
            math(MathFn::Abs, [ia.clone()]),
            math(MathFn::Min, [ia.clone(), ib.clone()]),
            math(MathFn::Max, [ia.clone(), ib.clone()]),
            fa.clone().cast(I32),
            fa.clone().bitcast(I32),
            ua.clone().cast(I32),
            bb.clone().cast(I32),
        ];
        let us: Vec<Expr> = vec![
            ua.clone() + ub.clone(),
            ua.clone() - ub.clone(),
            ua.clone() * ub.clone(),
            ua.clone() / ub.clone(),
            ua.clone() % ub.clone(),
            ua.clone() << ub.clone(),
            ua.clone() >> ub.clone(),
            -ua.clone(),
            math(MathFn::Min, [ua.clone(), ub.clone()]),
            math(MathFn::Max, [ua.clone(), ub.clone()]),
            fa.clone().cast(U32),
            fa.clone().bitcast(U32),
            ia.clone().cast(U32),
        ];
        let bs: Vec<Expr> = vec![
            fa.clone().lt(fb.clone()),
            fa.clone().le(fb.clone()),
            fa.clone().eq(fb.clone()),
            fa.clone().ne(fb.clone()),
            fa.clone().gt(fb.clone()),
            fa.clone().ge(fb.clone()),
            ia.clone().lt(ib.clone()),
            ia.clone().ge(ib.clone()),
            ua.clone().lt(ub.clone()),
            ua.clone().gt(ub),
            ba.clone().and(bb.clone()),
            ba.clone().or(bb.clone()),
            !ba.clone(),
            fa.cast(Bool),
            ia.cast(Bool),
            ba.eq(bb),
        ];
        for (slot, e) in fs.into_iter().enumerate() {
            b.store(at("yf", [Expr::from(slot as u32), t.clone()]), e);
        }
        for (slot, e) in is.into_iter().enumerate() {
            b.store(at("yi", [Expr::from(slot as u32), t.clone()]), e);
        }
        for (slot, e) in us.into_iter().enumerate() {
            b.store(at("yu", [Expr::from(slot as u32), t.clone()]), e);
        }
        for (slot, e) in bs.into_iter().enumerate() {
            b.store(at("yb", [Expr::from(slot as u32), t.clone()]), e);
        }
    });
    (
        module(vec![mesh], vec![kernel], map),
        f_names,
        i_names,
        u_names,
        b_names,
    )
}

#[test]
fn exact_operations_agree_with_the_interpreter() {
    use mpmd_core::host::{CallArgs, HostTensor};
    use mpmd_core::{Backend, RunOptions};
    let (module, f_names, i_names, u_names, b_names) = exact_expressions();
    let plan = plan_of(&module);
    let xf = special_f32();
    let xi = special_i32();
    let mut args = CallArgs::default();
    args.inputs
        .insert("xf".into(), HostTensor::from_f32(vec![N], &xf));
    args.inputs
        .insert("xi".into(), HostTensor::from_i32(vec![N], &xi));
    let oracle = mpmd_core::interp::Interpreter::new()
        .run(&plan, &args, &RunOptions::default())
        .expect("interpreter runs");
    let inputs = BTreeMap::from([
        ("xf", xf.iter().map(|v| v.to_bits()).collect()),
        ("xi", xi.iter().map(|&v| v as u32).collect()),
    ]);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(&plan, mode, &inputs, &BTreeMap::new(), 1_000_000_000);
        assert_eq!(out.recorded, None);
        let mut mismatches = Vec::new();
        for (output, names, float) in [
            ("yf", &f_names, true),
            ("yi", &i_names, false),
            ("yu", &u_names, false),
            ("yb", &b_names, false),
        ] {
            let got = buffer_of(&plan, &out, output);
            let want = &oracle.outputs[output].words();
            for (slot, name) in names.iter().enumerate() {
                for t in 0..N as usize {
                    let (g, w) = (got[slot * N as usize + t], want[slot * N as usize + t]);
                    let same = if float {
                        let (gf, wf) = (f32::from_bits(g), f32::from_bits(w));
                        g == w || (gf.is_nan() && wf.is_nan()) || (gf == 0.0 && wf == 0.0)
                    } else {
                        g == w
                    };
                    if !same {
                        mismatches.push(format!(
                            "{output}.{name} thread {t}: cuda {g:#010x}, interp {w:#010x} (a = {:?}/{}, b = {:?}/{})",
                            xf[t],
                            xi[t],
                            xf[(t + 7) % N as usize],
                            xi[(t + 7) % N as usize]
                        ));
                    }
                }
            }
        }
        assert!(
            mismatches.is_empty(),
            "{mode:?}:\n{}",
            mismatches.join("\n")
        );
    }
}

/// A loop of `let`s and stores to buffers it does not load from is emitted
/// loads-first (fast mode). Gathers, owned refs, smem, a bool output and a
/// store whose value depends on an earlier store's element must all keep
/// their results; compared with the interpreter in both modes.
#[test]
fn batched_loops_keep_their_results() {
    let source = "
mesh m { grid [b = 2]; threads t = 32; }
kernel k(x: gmem<f32[256]>, idx: gmem<u32[256]>, y: gmem<f32[256]>, z: gmem<bool[256]>, w: gmem<f32[4]> @ m, tile: smem<f32[128]>) {
  for j: u32 in 0u..4u {
    let i: u32 = (axis_index(b) * 4u + j) * 32u + axis_index(t);
    let g: f32 = x[idx[i]];
    y[i] = g * 2.0;
    z[i] = g > 1.5;
    tile[j * 32u + axis_index(t)] = g;
  }
  barrier;
  for j: u32 in 0u..4u {
    w[j] = tile[j * 32u] + tile[j * 32u + 31u];
  }
}
map batched {
  programs [m: k];
  inputs [x: gmem<f32[256]>, idx: gmem<u32[256]>];
  outputs [y: gmem<f32[256]>, z: gmem<bool[256]>, w: gmem<f32[4]> @ m];
  scratch [tile: smem<f32[128]>];
}
";
    let (module, _) = mpmd_core::text::parse(source).unwrap();
    let plan = mpmd_core::plan::lower(&validated(&module), "batched").unwrap();
    // Which loops are emitted loads-first (the comment the emitter writes
    // above each says so): both in fast mode, none in checked mode.
    let fast = emit_module(&plan, Mode::Fast).unwrap().source;
    assert_eq!(
        fast.matches("// Every load of the loop is issued before")
            .count(),
        2,
        "{fast}"
    );
    let checked = emit_module(&plan, Mode::Checked).unwrap().source;
    assert!(
        !checked.contains("// Every load of the loop is issued before"),
        "{checked}"
    );

    let x: Vec<f32> = (0..256).map(|i| (i % 7) as f32 * 0.5).collect();
    let idx: Vec<u32> = (0..256).map(|i| (i * 37 + 11) % 256).collect();
    let mut args = mpmd_core::host::CallArgs::default();
    args.inputs.insert(
        "x".into(),
        mpmd_core::host::HostTensor::from_f32(vec![256], &x),
    );
    args.inputs.insert(
        "idx".into(),
        mpmd_core::host::HostTensor::from_u32(vec![256], &idx),
    );
    let want = mpmd_core::Backend::run(
        &mut mpmd_core::interp::Interpreter::new(),
        &plan,
        &args,
        &mpmd_core::RunOptions::default(),
    )
    .unwrap();
    let inputs = BTreeMap::from([
        ("x", x.iter().map(|v| v.to_bits()).collect()),
        ("idx", idx.clone()),
    ]);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = emulate(&plan, mode, &inputs, &BTreeMap::new(), 1_000_000_000);
        assert_eq!(out.recorded, None, "{mode:?}");
        for name in ["y", "z", "w"] {
            assert_eq!(
                buffer_of(&plan, &out, name),
                want.outputs[name].words(),
                "{name} ({mode:?})"
            );
        }
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
