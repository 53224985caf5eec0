//! The generated WGSL: names, literal routing, validation by naga (the
//! library always; the `naga` CLI as a second opinion when installed).

mod common;

use common::*;
use mpmd_core::backend::Backend;
use mpmd_core::host::HostTensor;
use mpmd_core::interp::Interpreter;
use mpmd_core::plan::UnitId;
use mpmd_core::Mode;
use mpmd_wgpu::{
    emit, emit_module, validate_wgsl, EmitOptions, F16Conversions, WarpPath, WgpuOptions,
};

/// Runs the `naga` CLI on `wgsl` when it is installed.
fn naga_cli_accepts(wgsl: &str, tag: &str) {
    let path = std::env::temp_dir().join(format!("mpmd-wgpu-{tag}-{}.wgsl", std::process::id()));
    std::fs::write(&path, wgsl).unwrap();
    match std::process::Command::new("naga").arg(&path).output() {
        Ok(out) => assert!(
            out.status.success(),
            "naga CLI rejected {tag}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!(
            "NOTE: the `naga` CLI is not installed; only the naga library validated {tag}"
        ),
    }
    let _ = std::fs::remove_file(&path);
}

/// User names that are WGSL keywords or look like generated names.
const NAMES: &str = "
mesh m {
  grid [block_id = 2];
  threads thread_id = 32;
}
kernel switch(loop: gmem<f32[64]>, continuing: gmem<f32[64]>, discard: f32, mpmd_params: u32) {
  let override: u32 = axis_index(block_id) * 32u + axis_index(thread_id);
  let rt_0: f32 = loop[override] * discard;
  let struct: f32 = rt_0 + f32(mpmd_params);
  continuing[override] = struct;
}
map switch {
  programs [m: switch];
  inputs [loop: gmem<f32[64]>];
  outputs [continuing: gmem<f32[64]>];
  scalars [discard: f32, mpmd_params: u32];
}
";

#[test]
fn user_names_are_prefixed_and_cannot_collide() {
    let m = module(NAMES);
    let p = plan(&m, "switch");
    let wgsl = emit(&p, Mode::Fast).unwrap();
    insta::assert_snapshot!("names_declarations", declarations(&wgsl));
    insta::assert_snapshot!("names_entry", functions(&wgsl, &["unit0_switch"]));
    naga_cli_accepts(&wgsl, "names");
    let mut wgpu = backend(WgpuOptions::default());
    let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let a = args(
        vec![("loop", HostTensor::from_f32(vec![64], &x))],
        vec![
            ("discard", mpmd_core::ir::Literal::f32(2.0)),
            ("mpmd_params", mpmd_core::ir::Literal::U32(5)),
        ],
    );
    let got = wgpu.run(&p, &a, &fast()).unwrap();
    assert_eq!(got.outputs["continuing"].to_f32()[10], 25.0);
}

/// Operations on literals alone: WGSL would fold them at shader creation and
/// reject overflow, division by zero, NaN and infinity.
const LITERALS: &str = "
mesh m {
  threads t = 1;
}
kernel lits(y: gmem<i32[6]>, z: gmem<f32[4]>) {
  y[0] = 2147483647 + 1;
  y[1] = 5 / 0;
  y[2] = -2147483648 / -1;
  y[3] = 1 << 40;
  y[4] = i32(3.0e9);
  y[5] = abs(-2147483648);
  z[0] = nan;
  z[1] = -inf * 0.0;
  z[2] = 1.0e38 * 10.0;
  z[3] = max(nan, 2.0);
}
map lits {
  programs [m: lits];
  outputs [y: gmem<i32[6]>, z: gmem<f32[4]>];
}
";

#[test]
fn operations_on_literals_alone_are_read_at_run_time() {
    let m = module(LITERALS);
    let p = plan(&m, "lits");
    let wgsl = emit(&p, Mode::Fast).unwrap();
    // Every operation's literals are `rt_<k>` lets of the parameter buffer.
    insta::assert_snapshot!("literals_entry", functions(&wgsl, &["unit0_lits"]));
    naga_cli_accepts(&wgsl, "literals");
    let mut wgpu = backend(WgpuOptions::default());
    let a = args(vec![], vec![]);
    let got = wgpu.run(&p, &a, &fast()).unwrap();
    let expected = Interpreter::new().run(&p, &a, &fast()).unwrap();
    assert_eq!(got.outputs["y"], expected.outputs["y"]);
    assert_eq!(
        got.outputs["y"].to_i32(),
        vec![i32::MIN, 5, i32::MIN, 256, i32::MAX, i32::MIN]
    );
    let z = got.outputs["z"].to_f32();
    assert!(z[0].is_nan() && z[1].is_nan());
    assert_eq!(z[2], f32::INFINITY);
    assert_eq!(z[3], 2.0);
}

#[test]
fn every_mode_and_option_validates() {
    let m = module(NAMES);
    let p = plan(&m, "switch");
    for mode in [Mode::Fast, Mode::Checked] {
        for loop_cap in [None, Some(65_000)] {
            for max_storage_buffers in [u32::MAX, 3] {
                let options = EmitOptions {
                    mode,
                    loop_cap,
                    max_storage_buffers,
                    ..EmitOptions::default()
                };
                let emitted = emit_module(&p, &options).unwrap();
                validate_wgsl(&emitted.wgsl).unwrap();
                assert_eq!(emitted.layout.packed, max_storage_buffers == 3);
            }
        }
    }
    let checked = emit_module(
        &p,
        &EmitOptions {
            mode: Mode::Checked,
            loop_cap: Some(65_000),
            ..EmitOptions::default()
        },
    )
    .unwrap();
    insta::assert_snapshot!(
        "checked_offset_helper",
        functions(&checked.wgsl, &["mpmd_check1"])
    );
    naga_cli_accepts(&checked.wgsl, "checked");
}

#[test]
fn too_few_bindings_is_an_error_with_the_numbers() {
    let m = module(NAMES);
    let p = plan(&m, "switch");
    let err = emit_module(
        &p,
        &EmitOptions {
            max_storage_buffers: 2,
            ..EmitOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the map needs 3 storage buffers even when packed; the adapter allows 2 per shader stage"
    );
}

/// Every example of the repository emits WGSL that naga accepts, in both
/// modes, with and without the loop cap and with packed bindings.
#[test]
fn every_example_emits_valid_wgsl() {
    let files = example_files();
    let mut emitted = 0;
    for file in &files {
        let m = module(&std::fs::read_to_string(file).unwrap());
        for map in &m.maps {
            let p = plan(&m, &map.name);
            for mode in [Mode::Fast, Mode::Checked] {
                for (loop_cap, max_storage_buffers) in [(None, u32::MAX), (Some(65_000), 5)] {
                    let options = EmitOptions {
                        mode,
                        loop_cap,
                        max_storage_buffers,
                        ..EmitOptions::default()
                    };
                    emit_module(&p, &options)
                        .unwrap_or_else(|e| panic!("{} map `{}`: {e}", file.display(), map.name));
                    emitted += 1;
                }
            }
            if map.name == m.maps[0].name {
                naga_cli_accepts(&emit(&p, Mode::Checked).unwrap(), &map.name);
            }
        }
    }
    assert!(emitted >= 4 * files.len());
}

/// The benchmark's producer/consumer pair (README, "Benchmark"), smaller.
const PIPELINE: &str = "
mesh producer {
  grid [pb = 8];
  threads t = 256;
}
mesh consumer {
  grid [cb = 8];
  threads t = 256;
}
kernel produce(x: gmem<f32[2048]>, y: gmem<f32[2048]>, buf: gmem<f32[2048]>, ready: sem<[8]>) {
  let i: u32 = axis_index(pb) * 256u + axis_index(t);
  buf[i] = x[i] * 2.0;
  signal(ready[axis_index(pb)], 1);
}
kernel consume(x: gmem<f32[2048]>, y: gmem<f32[2048]>, buf: gmem<f32[2048]>, ready: sem<[8]>) {
  wait(ready[axis_index(cb)], 1);
  let i: u32 = axis_index(cb) * 256u + axis_index(t);
  y[i] = buf[i] + 1.0;
}
map pipeline {
  programs [producer: produce, consumer: consume];
  inputs [x: gmem<f32[2048]>];
  outputs [y: gmem<f32[2048]>];
  scratch [buf: gmem<f32[2048]>, ready: sem<[8]>];
}
";

/// The signal and the wait run in semaphore dispatches between the units:
/// the units' own kernels hold no atomic (llvmpipe would run it for every
/// SIMD vector of every block).
#[test]
fn producer_consumer_kernels_hold_no_atomic() {
    let p = plan(&module(PIPELINE), "pipeline");
    for mode in [Mode::Fast, Mode::Checked] {
        for loop_cap in [None, Some(65_000)] {
            let options = EmitOptions {
                mode,
                loop_cap,
                ..EmitOptions::default()
            };
            let emitted = emit_module(&p, &options).unwrap();
            let wgsl = &emitted.wgsl;
            // The property itself, in every mode and with and without the
            // loop cap: no atomic, semaphore call or barrier in the kernels
            // (the snapshots below show the semaphore functions).
            for entry in ["unit0_produce", "unit1_consume"] {
                let text = function(wgsl, entry);
                assert!(!text.contains("atomic"), "{mode:?}: {text}");
                assert!(!text.contains("mpmd_take"), "{mode:?}: {text}");
                assert!(!text.contains("Barrier"), "{mode:?}: {text}");
            }
            let order: Vec<(&str, [u32; 3], Option<usize>)> = emitted
                .schedule
                .iter()
                .map(|d| {
                    (
                        d.entry_point.as_str(),
                        d.workgroups,
                        d.unit.map(UnitId::index),
                    )
                })
                .collect();
            // The producer's signals and the consumer's waits touch the same
            // semaphore: two dispatches, the signals first.
            assert_eq!(
                order,
                vec![
                    ("unit0_produce", [8, 1, 1], Some(0)),
                    ("mpmd_sems0", [1, 1, 1], None),
                    ("mpmd_sems1", [1, 1, 1], None),
                    ("unit1_consume", [8, 1, 1], Some(1)),
                ]
            );
            // One snapshot per mode: the loop cap changes none of them.
            insta::assert_snapshot!(
                format!("pipeline_semaphore_dispatches_{mode:?}"),
                functions(
                    wgsl,
                    &[
                        "mpmd_unit0_signals",
                        "mpmd_unit1_waits",
                        "mpmd_sems0",
                        "mpmd_sems1"
                    ]
                )
            );
        }
    }
}

/// A loop before a wait may report the loop cap first (llvmpipe): the wait
/// then stays in the kernel so that errors keep their order; without a cap
/// it moves. Many blocks give a 2-D semaphore dispatch.
const LOOP_THEN_WAIT: &str = "
mesh producer {
  grid [pb = 80000];
  threads t = 32;
}
mesh consumer {
  grid [cb = 80000];
  threads t = 32;
}
kernel give(y: gmem<u32[80000]>, n: u32, ready: sem<[80000]>) {
  signal(ready[axis_index(pb)], 1);
}
kernel take(y: gmem<u32[80000]>, n: u32, ready: sem<[80000]>) {
  var s: u32 = 0u;
  for k: u32 in 0u..n {
    s = s + k;
  }
  wait(ready[axis_index(cb)], 1);
  if axis_index(t) == 0u {
    y[axis_index(cb)] = s;
  }
}
map loop_then_wait {
  programs [producer: give, consumer: take];
  outputs [y: gmem<u32[80000]>];
  scalars [n: u32];
  scratch [ready: sem<[80000]>];
}
";

#[test]
fn a_wait_after_a_capped_loop_stays_in_the_kernel() {
    let p = plan(&module(LOOP_THEN_WAIT), "loop_then_wait");
    let options = |loop_cap| EmitOptions {
        loop_cap,
        max_workgroups_per_dimension: 300,
        ..EmitOptions::default()
    };
    let capped = emit_module(&p, &options(Some(65_000))).unwrap();
    // The signal still moves (in fast mode it cannot report anything); the
    // wait stays in the kernel, after the loop.
    assert_eq!(
        dispatch_order(&capped),
        ["unit0_give", "mpmd_sems0", "unit1_take"]
    );
    insta::assert_snapshot!(
        "loop_then_wait_capped_kernels",
        functions(&capped.wgsl, &["unit0_give", "unit1_take"])
    );

    let uncapped = emit_module(&p, &options(None)).unwrap();
    insta::assert_snapshot!(
        "loop_then_wait_uncapped_take",
        functions(&uncapped.wgsl, &["unit1_take"])
    );
    let order: Vec<(&str, [u32; 3])> = uncapped
        .schedule
        .iter()
        .map(|d| (d.entry_point.as_str(), d.workgroups))
        .collect();
    // 80000 blocks: 313 workgroups of 256, at most 300 per dimension.
    assert_eq!(
        order,
        vec![
            ("unit0_give", [300, 267, 1]),
            ("mpmd_sems0", [300, 2, 1]),
            ("mpmd_sems1", [300, 2, 1]),
            ("unit1_take", [300, 267, 1]),
        ]
    );
    // A 2-D semaphore dispatch: the slot is linearised, the extra ones return.
    insta::assert_snapshot!(
        "loop_then_wait_two_dimensional_semaphore_dispatch",
        functions(&uncapped.wgsl, &["mpmd_sems1"])
    );
}

/// f32 atomics on gmem and smem, with and without results.
const F32_ATOMICS: &str = "
mesh m {
  grid [b = 2];
  threads t = 64;
}
kernel f(x: gmem<f32[128]>, acc: gmem<f32[4]>, own: gmem<f32[128]>, tile: smem<f32[1]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  let v: f32 = x[i];
  let old: f32 = atomic_add(acc[0u], v);
  atomic_min(acc[1u], v);
  atomic_max(acc[2u], old * 0.0 + v);
  atomic_store(own[i], v);
  let was: f32 = atomic_exchange(own[i], v + 1.0);
  let now: f32 = atomic_load(own[i]);
  if axis_index(t) == 0u {
    atomic_store(tile[0u], 0.0);
  }
  barrier;
  atomic_add(tile[0u], 1.0);
  barrier;
  if axis_index(t) == 0u {
    let block: f32 = atomic_load(tile[0u]);
    atomic_add(acc[3u], block + now * 0.0 + was * 0.0);
  }
}
map f32_atomics {
  programs [m: f];
  inputs [x: gmem<f32[128]>];
  outputs [acc: gmem<f32[4]> zeroed, own: gmem<f32[128]>];
  scratch [tile: smem<f32[1]>];
}
";

#[test]
fn f32_atomics_are_compare_exchange_loops_on_atomic_words() {
    let p = plan(&module(F32_ATOMICS), "f32_atomics");
    for loop_cap in [None, Some(65_000)] {
        for mode in [Mode::Fast, Mode::Checked] {
            let options = EmitOptions {
                mode,
                loop_cap,
                ..EmitOptions::default()
            };
            let wgsl = emit_module(&p, &options).unwrap().wgsl;
            validate_wgsl(&wgsl).unwrap_or_else(|e| panic!("{e}\n{wgsl}"));
            let body = function(&wgsl, "unit0_f");
            // Counted in every mode, with and without the cap (one is
            // snapshotted): add, min, max on gmem and two adds on smem are
            // five loops, and each counts toward the loop cap.
            assert_eq!(
                body.matches("atomicCompareExchangeWeak(&").count(),
                5,
                "{body}"
            );
            let ticks = body.matches("if (mpmd_loop_tick()) { break; }").count();
            assert_eq!(ticks, if loop_cap.is_some() { 5 } else { 0 }, "{body}");
            if mode == Mode::Fast && loop_cap.is_some() {
                // `acc`, `own` and the smem tile are atomic u32 words.
                insta::assert_snapshot!("f32_atomics_declarations", declarations(&wgsl));
                insta::assert_snapshot!("f32_atomics_entry", functions(&wgsl, &["unit0_f"]));
            }
            naga_cli_accepts(&wgsl, "f32-atomics");
        }
    }
}

#[test]
fn f32_atomics_agree_with_the_interpreter() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(F32_ATOMICS);
    // Multiples of 0.25: the sum is exact in any order.
    let x: Vec<f32> = (0..128).map(|k| (k as f32 - 50.0) * 0.25).collect();
    let a = args(vec![("x", HostTensor::from_f32(vec![128], &x))], vec![]);
    let out = assert_same(&mut wgpu, &m, "f32_atomics", &a);
    let acc = out.outputs["acc"].to_f32();
    assert_eq!(acc, vec![x.iter().sum::<f32>(), -12.5, 19.25, 128.0]);
    let own: Vec<f32> = x.iter().map(|v| v + 1.0).collect();
    assert_eq!(out.outputs["own"].to_f32(), own);
}

/// One warp sum per warp of a 64-thread block.
const WARP_SUM: &str = "
mesh m {
  grid [b = 1];
  threads t = 64;
}
kernel warp_sum(x: gmem<u32[64]>, y: gmem<u32[64]>) {
  let i: u32 = axis_index(t);
  let s: u32 = reduce_add(x[i]);
  y[i] = s;
}
map warp_sum {
  programs [m: warp_sum];
  inputs [x: gmem<u32[64]>];
  outputs [y: gmem<u32[64]>];
}
";

/// lavapipe's subgroups are 8 invocations wide: the backend emulates warp
/// collectives, and says why. Native subgroups forced there compile and
/// run, and the entry point's check refuses the run instead of giving the
/// wrong sums, naming the subgroup it found.
#[test]
fn lavapipe_emulates_warps_and_its_check_refuses_forced_native_subgroups() {
    let mut wgpu = backend(WgpuOptions::default());
    require_llvmpipe(&wgpu, "the test states its subgroup facts");
    let choice = wgpu.warp_path();
    assert_eq!(choice.path, WarpPath::Emulated);
    assert_eq!(
        choice.why,
        "the adapter's subgroups are 8 invocations wide, not always 32 (a logical warp)"
    );
    let m = module(WARP_SUM);
    let x: Vec<u32> = (0..64).collect();
    let a = args(vec![("x", HostTensor::from_u32(vec![64], &x))], vec![]);
    let out = assert_same(&mut wgpu, &m, "warp_sum", &a);
    let sums: Vec<u32> = (0..64).map(|i| if i < 32 { 496 } else { 1520 }).collect();
    assert_eq!(out.outputs["y"].to_u32(), sums);

    let mut forced = backend(WgpuOptions {
        warps: Some(WarpPath::Native),
        ..WgpuOptions::default()
    });
    assert_eq!(forced.warp_path().path, WarpPath::Native);
    let p = plan(&m, "warp_sum");
    let err = forced.run(&p, &a, &fast()).unwrap_err();
    let mpmd_core::backend::RunError::Unsupported { reason } = &err else {
        panic!("{err:?}");
    };
    // Thread `t` runs as invocation `t % 8` of a subgroup of 8.
    let prefix =
        "the adapter's subgroups are not the logical warps: program 0 (warp_sum), block 0, thread ";
    let rest = reason
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{reason}"));
    let (thread, rest) = rest.split_once(' ').unwrap();
    let thread: u32 = thread.parse().unwrap();
    assert_eq!(
        rest,
        format!(
            "ran in a subgroup of 8 invocation(s) as its invocation {}, and its subgroup did not hold \
             exactly its warp's 32 threads, where native warp collectives need every logical warp \
             (threads 32w to 32w + 31) to be one whole subgroup, thread 32w + l its invocation l. The \
             warp collectives' results would be wrong; WgpuOptions::warps = Some(WarpPath::Emulated) \
             runs them through workgroup memory instead",
            thread % 8
        )
    );
}

/// A lone 16-bit store on a device with subgroup operations is a paired
/// store (issue 25, `emit/pairing.rs`): the neighbour's activity (ballot)
/// and element index and value (shuffles) decide between one whole-word
/// atomic store and the two-atomic store; the entry point takes the
/// subgroup lane. Without the option the store keeps its two atomics.
#[test]
fn a_lone_sixteen_bit_store_pairs_with_its_subgroup_neighbour() {
    let m = module(
        "
mesh m { grid [b = 4]; threads t = 64; }
kernel axpb16(x: gmem<f16[256]>, y: gmem<f16[256]>, alpha: f16, beta: f16) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  y[i] = x[i] * alpha + beta;
}
map axpb16 { programs [m: axpb16]; inputs [x: gmem<f16[256]>]; outputs [y: gmem<f16[256]>]; scalars [alpha: f16, beta: f16]; }
",
    );
    let p = plan(&m, "axpb16");
    for mode in [Mode::Fast, Mode::Checked] {
        let paired = EmitOptions {
            mode,
            subgroups: true,
            ..EmitOptions::default()
        };
        let wgsl = emit_module(&p, &paired).unwrap().wgsl;
        let entry = function(&wgsl, "unit0_axpb16");
        if mode == Mode::Fast {
            insta::assert_snapshot!("paired_store_entry", functions(&wgsl, &["unit0_axpb16"]));
        }
        assert_eq!(entry.matches("atomicStore(").count(), 1, "{entry}");
        let plain = EmitOptions {
            mode,
            ..EmitOptions::default()
        };
        let wgsl = emit_module(&p, &plain).unwrap().wgsl;
        let entry = function(&wgsl, "unit0_axpb16");
        assert!(!wgsl.contains("subgroup"), "{wgsl}");
        assert_eq!(entry.matches("atomicStore(").count(), 0, "{entry}");
        assert_eq!(entry.matches("atomicAnd(").count(), 1, "{entry}");
    }
}

/// Native f16 conversions (issue 25, `F16Conversions::Native`) change the
/// two conversion helpers' bodies and nothing else: the kernels call
/// `mpmd_f16_to_f32`/`mpmd_f32_to_f16` either way. naga validates the
/// module with `unpack2x16float` allowed only for the native ones.
#[test]
fn native_f16_conversions_change_only_the_conversion_helpers() {
    let m = module(
        "
mesh m { grid [b = 4]; threads t = 64; }
kernel axpb16(x: gmem<f16[256]>, y: gmem<f16[256]>, alpha: f16, beta: f16) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  y[i] = x[i] * alpha + beta;
}
map axpb16 { programs [m: axpb16]; inputs [x: gmem<f16[256]>]; outputs [y: gmem<f16[256]>]; scalars [alpha: f16, beta: f16]; }
",
    );
    let p = plan(&m, "axpb16");
    let emulated = emit_module(&p, &EmitOptions::default()).unwrap().wgsl;
    let native = emit_module(
        &p,
        &EmitOptions {
            f16_conversions: F16Conversions::Native,
            ..EmitOptions::default()
        },
    )
    .unwrap()
    .wgsl;
    assert_eq!(
        function(&emulated, "unit0_axpb16"),
        function(&native, "unit0_axpb16")
    );
    assert!(!emulated.contains("unpack2x16float"), "{emulated}");
    insta::assert_snapshot!(
        "native_f16_conversions",
        functions(&native, &["mpmd_f16_to_f32", "mpmd_f32_to_f16"])
    );
    // The default validation (no `SHADER_FLOAT16_IN_FLOAT32`) refuses the builtins.
    assert!(validate_wgsl(&native).is_err());
}

/// The names a kernel declares: its scalar parameters and every binding
/// of its body.
fn declared_names(kernel: &mpmd_core::ir::Kernel) -> Vec<String> {
    use mpmd_core::ir::Stmt;
    let mut names: Vec<String> = kernel
        .params
        .iter()
        .filter(|p| p.ty.as_ref_type().is_none())
        .map(|p| p.name.clone())
        .collect();
    mpmd_core::ir::visit::for_each_stmt(&kernel.body, &mut |stmt| match stmt {
        Stmt::Let { var, .. } | Stmt::Var { var, .. } | Stmt::For { var, .. } => {
            names.push(var.name.clone())
        }
        Stmt::Atomic { dest: Some(d), .. }
        | Stmt::Warp { dest: d, .. }
        | Stmt::BlockCollective { dest: d, .. } => names.push(d.name.clone()),
        Stmt::SemRead { dest, .. } | Stmt::LocalArray { name: dest, .. } => {
            names.push(dest.clone())
        }
        _ => {}
    });
    names
}

/// ARCHITECTURE.md, "IR conventions" and "WGSL names": names are declared
/// once per kernel after `expand::program_kernel`, so the WGSL emitter never
/// renames: for every corpus case and example that emits, each unit's
/// function declares exactly `v_` + the name of every binding of its
/// (expanded) kernel, each once, and uses no other `v_` identifier.
#[test]
fn wgsl_identifiers_are_the_ir_names_with_their_prefix() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<_> = std::fs::read_dir(root.join("conformance/cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mpmd"))
        .collect();
    files.extend(example_files());
    files.sort();
    let mut units_checked = 0;
    for path in &files {
        let Ok(source) = mpmd_core::text::parse_file(&std::fs::read_to_string(path).unwrap())
        else {
            continue;
        };
        let module = source.module;
        let Ok(valid) = mpmd_core::validate::validate(&module, &Default::default()) else {
            continue;
        };
        for map in &module.maps {
            let Ok(p) = mpmd_core::plan::lower(&valid, &map.name) else {
                continue;
            };
            let options = EmitOptions {
                subgroups: true,
                loop_cap: Some(65_000),
                ..EmitOptions::default()
            };
            let Ok(emitted) = emit_module(&p, &options) else {
                continue;
            };
            for (id, unit) in p.enumerate_units() {
                let name = format!("unit{}_{}", id, unit.kernel.name);
                let Some(start) = emitted.wgsl.find(&format!("fn {name}(")) else {
                    continue;
                };
                let text = &emitted.wgsl[start..];
                let text = &text[..text.find("\n}\n").unwrap_or(text.len())];
                let expected: std::collections::BTreeSet<String> = declared_names(&unit.kernel)
                    .into_iter()
                    .map(|n| format!("v_{n}"))
                    .collect();
                let mut used = std::collections::BTreeSet::new();
                for (at, _) in text.match_indices("v_") {
                    let before = text[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                        continue;
                    }
                    let ident: String = text[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    used.insert(ident);
                }
                let case = format!("{} map `{}` {name}", path.display(), map.name);
                assert!(
                    used.is_subset(&expected),
                    "{case}: identifiers that are no IR name: {:?}",
                    used.difference(&expected).collect::<Vec<_>>()
                );
                for ident in &expected {
                    let declarations = [format!("let {ident}:"), format!("var {ident}:")]
                        .iter()
                        .map(|d| text.matches(d.as_str()).count())
                        .sum::<usize>();
                    assert!(
                        declarations <= 1,
                        "{case}: `{ident}` declared {declarations} times"
                    );
                }
                units_checked += 1;
            }
        }
    }
    assert!(units_checked > 150, "only {units_checked} units checked");
}
