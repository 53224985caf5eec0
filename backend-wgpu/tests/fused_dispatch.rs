//! Plans that need co-residency (a cycle between programs, or a program
//! that waits on a higher block) run as one fused dispatch of every
//! program, where the backend established that the adapter runs all of its
//! workgroups at once (verified) or the user declared it (unverified).
//!
//! Expectations follow what the backend established on this machine
//! (`resident_workgroups`: on lavapipe its thread pool, by default one
//! thread per CPU), so each test asserts the exact behaviour for either side
//! of that number.

mod common;

use common::*;
use mpmd_core::backend::{Backend, RunError};
use mpmd_core::host::HostTensor;
use mpmd_wgpu::{emit_module, EmitOptions, WgpuBackend, WgpuOptions};
use mpmd_wgpu::{fused_workgroups, Dispatch, FUSED_ENTRY_POINT};

fn declared() -> WgpuOptions {
    WgpuOptions {
        co_resident: true,
        ..Default::default()
    }
}

fn handshake_example() -> mpmd_core::ir::Module {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/handshake.mpmd");
    module(&std::fs::read_to_string(path).unwrap())
}

/// Whether `wgpu` established co-residency for `workgroups` at once.
fn established(wgpu: &WgpuBackend, workgroups: u64) -> bool {
    workgroups <= wgpu.resident_workgroups() as u64
}

#[test]
fn lavapipe_establishes_its_thread_pool_and_other_adapters_nothing() {
    let wgpu = backend(WgpuOptions::default());
    let residency = wgpu.residency();
    if wgpu.is_llvmpipe() {
        // The pool is LP_NUM_THREADS or the CPU count (capped by Mesa); the
        // probe confirms the candidate or a power-of-two fraction of it.
        let candidate = mpmd_wgpu::lavapipe_candidate();
        assert!(residency.workgroups >= 1, "{residency:?}");
        assert!(residency.workgroups <= candidate, "{residency:?}");
        assert!(residency.how.contains("all arrived"), "{residency:?}");
    } else {
        assert_eq!(residency.workgroups, 0, "{residency:?}");
    }
}

#[test]
fn the_handshake_example_runs_fused_with_the_interpreters_result() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = handshake_example();
    let p = plan(&m, "handshake");
    assert!(p.graph.has_cycle);
    assert_eq!(fused_workgroups(&p), 2);
    let x = HostTensor::from_f32(vec![64], &(0..64).map(|i| i as f32).collect::<Vec<_>>());
    let call = args(vec![("x", x)], vec![]);
    if established(&wgpu, 2) {
        // Established: fused without any declaration, and verified.
        let out = assert_same(&mut wgpu, &m, "handshake", &call);
        let y: Vec<f32> = (0..64).map(|i| 2.0 * i as f32 + 2.5).collect();
        assert_eq!(out.outputs["y"].to_f32(), y);
        assert!(!wgpu.unverified(&p));
        let declared = backend(declared());
        assert!(!declared.unverified(&p), "established beats declared");
    } else {
        let err = wgpu.run(&p, &call, &fast()).unwrap_err();
        assert!(matches!(err, RunError::Refused { .. }), "{err}");
        let mut declared = backend(declared());
        assert!(declared.unverified(&p));
        declared_run(&mut declared, &m, "handshake", &call);
    }
}

/// A run on the user's declaration alone where the backend established
/// less: the interpreter's result, or, where the declaration is false (a
/// lavapipe pool smaller than the dispatch), the wait's timeout: never a
/// hang or a wrong answer.
fn declared_run(
    wgpu: &mut WgpuBackend,
    m: &mpmd_core::ir::Module,
    map: &str,
    call: &mpmd_core::host::CallArgs,
) -> Option<mpmd_core::host::CallOutputs> {
    let (expected, got) = run_both(wgpu, m, map, call, &fast());
    match got {
        Ok(out) => {
            assert_eq!(out, expected.unwrap());
            Some(out)
        }
        Err(RunError::WaitTimeout { .. }) => None,
        Err(e) => panic!("expected the result or a wait timeout, got {e}"),
    }
}

#[test]
fn the_fused_module_is_one_dispatch_that_takes_tickets_in_program_order() {
    let p = plan(&handshake_example(), "handshake");
    let options = EmitOptions {
        co_resident: true,
        ..EmitOptions::default()
    };
    let emitted = emit_module(&p, &options).unwrap();
    assert_eq!(
        emitted.schedule,
        vec![Dispatch {
            entry_point: FUSED_ENTRY_POINT.into(),
            workgroups: [2, 1, 1],
            unit: None,
            repeat: 1,
        }]
    );
    // The entry point hands out tickets in program order; each program's
    // function takes its block from the ticket, and its waits poll (their
    // signaller runs in the same dispatch). Both programs have 64 threads:
    // nobody is idle.
    insta::assert_snapshot!(
        "handshake_fused",
        functions(
            &emitted.wgsl,
            &["unit0_ping", "unit1_pong", FUSED_ENTRY_POINT]
        )
    );
}

/// A producer and a consumer with a two-slot ring: `full` carries data
/// forward, `empty` carries free slots back (back-pressure), so the
/// programs wait on each other. The consumer is wider than the producer, so
/// the producer's fused workgroup has idle invocations; `count` shows that
/// they neither store nor add.
const RING: &str = "
mesh prod {
  grid [pb = 1];
  threads pt = 32;
}
mesh cons {
  grid [cb = 1];
  threads ct = 64;
}
kernel produce(x: gmem<i32[256]>, y: gmem<i32[256]>, count: gmem<u32[1]>, ring: gmem<i32[64]>, full: sem<[1]>, empty: sem<[1]>) {
  let t: u32 = axis_index(pt);
  for i: u32 in 0u..8u {
    if i >= 2u {
      wait(empty[0u], 1);
    }
    ring[(i % 2u) * 32u + t] = x[i * 32u + t] * 3;
    let old: u32 = atomic_add(count[0u], 1u);
    signal(full[0u], 1);
  }
}
kernel consume(x: gmem<i32[256]>, y: gmem<i32[256]>, count: gmem<u32[1]>, ring: gmem<i32[64]>, full: sem<[1]>, empty: sem<[1]>) {
  let t: u32 = axis_index(ct);
  for i: u32 in 0u..8u {
    wait(full[0u], 1);
    if t < 32u {
      y[i * 32u + t] = ring[(i % 2u) * 32u + t] + 1;
    }
    signal(empty[0u], 1);
  }
}
map ring {
  programs [prod: produce, cons: consume];
  inputs [x: gmem<i32[256]>];
  outputs [y: gmem<i32[256]>, count: gmem<u32[1]> zeroed];
  scratch [ring: gmem<i32[64]>, full: sem<[1]>, empty: sem<[1]>];
}
";

#[test]
fn a_pipeline_with_back_pressure_runs_fused_and_idle_invocations_stay_idle() {
    let m = module(RING);
    let p = plan(&m, "ring");
    assert!(p.graph.has_cycle);
    let emitted = emit_module(
        &p,
        &EmitOptions {
            co_resident: true,
            ..EmitOptions::default()
        },
    )
    .unwrap();
    // The workgroup is the consumer's 64 wide; the producer's 32 extra
    // invocations are idle: no stores, no atomics. The consumer has none.
    insta::assert_snapshot!(
        "ring_fused",
        functions(
            &emitted.wgsl,
            &["unit0_produce", "unit1_consume", FUSED_ENTRY_POINT]
        )
    );

    let wgpu = backend(WgpuOptions::default());
    let mut wgpu = if established(&wgpu, 2) {
        wgpu
    } else {
        backend(declared())
    };
    let x: Vec<i32> = (0..256).map(|i| i * 7 - 300).collect();
    let call = args(vec![("x", HostTensor::from_i32(vec![256], &x))], vec![]);
    assert_eq!(wgpu.unverified(&p), !established(&wgpu, 2));
    let Some(out) = declared_run(&mut wgpu, &m, "ring", &call) else {
        assert!(
            !established(&wgpu, 2),
            "established, yet the wait timed out"
        );
        return;
    };
    let y: Vec<i32> = x.iter().map(|v| v * 3 + 1).collect();
    assert_eq!(out.outputs["y"].to_i32(), y);
    // 32 producer threads x 8 slots: the 32 idle invocations added nothing.
    assert_eq!(out.outputs["count"].to_u32(), vec![256]);
}

/// Every block signals every block, then waits for all of them: a grid
/// barrier, which waits on higher blocks (no order of dispatches carries it).
fn all_to_all(blocks: u32) -> String {
    let n = blocks * 32;
    format!(
        "mesh g {{\n  grid [gb = {blocks}];\n  threads gt = 32;\n}}\n\
         kernel allsum(x: gmem<i32[{n}]>, y: gmem<i32[{n}]>, part: gmem<i32[{n}]>, arrive: sem<[1]> @ g) {{\n  \
         let i: u32 = axis_index(gb) * 32u + axis_index(gt);\n  part[i] = x[i] * 10;\n  \
         for j: u32 in 0u..{blocks}u {{\n    signal(arrive@[j][0], 1);\n  }}\n  \
         wait(arrive[0], {blocks});\n  var acc: i32 = 0;\n  \
         for k: u32 in 0u..{blocks}u {{\n    acc = acc + part[k * 32u + axis_index(gt)];\n  }}\n  y[i] = acc;\n}}\n\
         map allsum {{\n  programs [g: allsum];\n  inputs [x: gmem<i32[{n}]>];\n  outputs [y: gmem<i32[{n}]>];\n  \
         scratch [part: gmem<i32[{n}]>, arrive: sem<[1]> @ g];\n}}\n"
    )
}

#[test]
fn an_all_to_all_barrier_runs_fused_where_established_and_is_unsupported_split() {
    let mut wgpu = backend(WgpuOptions::default());
    let resident = wgpu.resident_workgroups();
    assert!(resident >= 1);
    // As many blocks as are established (at least 2): fused and verified.
    let blocks = resident.clamp(2, 8);
    let m = module(&all_to_all(blocks));
    let p = plan(&m, "allsum");
    assert!(!p.graph.has_cycle && !p.graph.intra_program.is_empty());
    let x: Vec<i32> = (0..blocks as i32 * 32).map(|i| i % 91 - 45).collect();
    let call = args(
        vec![("x", HostTensor::from_i32(vec![x.len() as u32], &x))],
        vec![],
    );
    if established(&wgpu, blocks as u64) {
        let out = assert_same(&mut wgpu, &m, "allsum", &call);
        let y = out.outputs["y"].to_i32();
        for (i, v) in y.iter().enumerate() {
            let t = i % 32;
            let want: i32 = (0..blocks as usize).map(|k| x[k * 32 + t] * 10).sum();
            assert_eq!(*v, want, "y[{i}]");
        }
        assert!(!wgpu.unverified(&p));
    }
    // One block more than established: split one dispatch per block, where
    // block 0 finds the count short.
    let over = resident + 1;
    let m = module(&all_to_all(over));
    let p = plan(&m, "allsum");
    let x: Vec<i32> = vec![1; over as usize * 32];
    let call = args(
        vec![("x", HostTensor::from_i32(vec![x.len() as u32], &x))],
        vec![],
    );
    let err = wgpu.run(&p, &call, &fast()).unwrap_err();
    let RunError::Unsupported { reason } = &err else {
        panic!("expected unsupported, got {err}")
    };
    let residency = wgpu.residency();
    let lavapipe = if wgpu.is_llvmpipe() {
        format!(
            "; on lavapipe, LP_NUM_THREADS={over} or more (set before the process opens the adapter) \
             lets the backend establish it, and the result is verified"
        )
    } else {
        String::new()
    };
    assert_eq!(
        reason,
        &format!(
            "program 0 (allsum), block 0 waits on `arrive@[0][0]`, which its own program signals, and the \
             count was short when it ran: it waits on a block that has not run before it (or on a \
             signal that never comes). Without co-residency this backend runs the program's blocks one \
             dispatch each in linear block order, so a block may only wait on blocks with a lower \
             linear id; no order of dispatches carries this wait. Otherwise the program must run as one \
             fused dispatch, which needs {over} workgroup(s) running at once; the backend established \
             {resident} on this adapter ({}). Set WgpuOptions::co_resident if this adapter runs them all \
             at once (the result is then unverified){lavapipe}",
            residency.how
        )
    );
}

/// The handshake with `blocks` blocks a side.
fn wide_handshake(blocks: u32) -> String {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/handshake.mpmd"
    ))
    .unwrap();
    src.replace("grid [pb = 1]", &format!("grid [pb = {blocks}]"))
        .replace("grid [qb = 1]", &format!("grid [qb = {blocks}]"))
}

#[test]
fn a_cycle_beyond_what_is_established_is_refused_with_the_numbers() {
    let mut wgpu = backend(WgpuOptions::default());
    let resident = wgpu.resident_workgroups();
    // Each side's blocks all signal and wait on one element: a side of
    // `resident` blocks makes twice as many workgroups as established.
    let blocks = resident.max(1);
    let m = module(&wide_handshake(blocks));
    let p = plan(&m, "handshake");
    let needed = 2 * blocks;
    assert_eq!(fused_workgroups(&p), needed as u64);
    let x = HostTensor::from_f32(vec![64], &[1.0; 64]);
    let err = wgpu
        .run(&p, &args(vec![("x", x)], vec![]), &fast())
        .unwrap_err();
    let RunError::Refused { reason } = &err else {
        panic!("expected a refusal, got {err}")
    };
    assert!(
        reason.starts_with(
            "the programs wait on each other in a cycle (program 0 (`ping`) signals `to_pong` for \
             program 1 (`pong`); program 1 (`pong`) signals `to_ping` for program 0 (`ping`)); such a \
             wait needs another workgroup of the same dispatch to run at the same time, and WebGPU \
             "
        ),
        "{reason}"
    );
    assert!(
        reason.contains(&format!(
            "which needs {needed} workgroup(s) running at once; the backend established {resident} on this adapter"
        )),
        "{reason}"
    );
    assert!(
        reason.contains("Set WgpuOptions::co_resident if this adapter runs them all at once (the result is then unverified)"),
        "{reason}"
    );
    // Any successful run would rest on the declaration alone.
    assert!(wgpu.unverified(&p));
    assert!(backend(declared()).unverified(&p));
}

#[test]
fn spins_are_charged_to_the_loop_cap() {
    // A cycle that can never be met (each program waits first): declared
    // co-resident, the polls run into a small loop cap before the poll budget.
    let src = "
mesh ma {
  grid [ab = 1];
  threads at = 32;
}
mesh mb {
  grid [bb = 1];
  threads bt = 32;
}
kernel ka(y: gmem<u32[32]>, s: sem<[2]>) {
  wait(s[0], 1);
  signal(s[1], 1);
}
kernel kb(y: gmem<u32[32]>, s: sem<[2]>) {
  wait(s[1], 1);
  signal(s[0], 1);
}
map stuck {
  programs [ma: ka, mb: kb];
  outputs [y: gmem<u32[32]> zeroed];
  scratch [s: sem<[2]>];
}
";
    let m = module(src);
    let p = plan(&m, "stuck");
    let mut capped = backend(WgpuOptions {
        co_resident: true,
        loop_cap: Some(500),
        wait_poll_budget: Some(1_000_000),
        ..Default::default()
    });
    let err = capped.run(&p, &args(vec![], vec![]), &fast()).unwrap_err();
    let RunError::Unsupported { reason } = &err else {
        panic!("expected unsupported (loop cap), got {err}")
    };
    assert!(
        reason.starts_with("one invocation's loops need 501 loop-header visits, more than the 500 this backend allows"),
        "{reason}"
    );
    assert!(
        reason.contains("and so does every poll of a semaphore wait that waits on a workgroup of the same dispatch"),
        "{reason}"
    );
    // Without a cap in the way, the poll budget ends the wait: a timeout
    // (conformance counts it as the deadlock the interpreter reports).
    let mut budgeted = backend(WgpuOptions {
        co_resident: true,
        loop_cap: Some(60_000),
        wait_poll_budget: Some(1_000),
        ..Default::default()
    });
    let err = budgeted
        .run(&p, &args(vec![], vec![]), &fast())
        .unwrap_err();
    assert!(matches!(err, RunError::WaitTimeout { .. }), "{err}");
}

/// Measurement, not a check (run with `--ignored --nocapture`): how many
/// workgroups of one probe dispatch ran at once, for 1 to 8 workgroups (or
/// the comma-separated counts in `MPMD_PROBE_SIZES`), and
/// how long each probe took (a failing one spins its whole budget).
#[test]
#[ignore]
fn measure_residency() {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    println!("adapter: {:?}", adapter.get_info());
    println!("LP_NUM_THREADS={:?}", std::env::var("LP_NUM_THREADS").ok());
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    let sizes: Vec<u32> = std::env::var("MPMD_PROBE_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|k| k.trim().parse().ok()).collect())
        .unwrap_or_else(|| (1..=8).collect());
    for k in sizes {
        let start = std::time::Instant::now();
        let (all, polls) = mpmd_wgpu::probe_once(&device, &queue, k).unwrap();
        println!(
            "{k} workgroups: all arrived {all}, most polls {polls}, {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
}
