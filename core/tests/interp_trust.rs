//! The oracle holds on valid programs users write and bad ones they run:
//! `local` arrays across barriers under every schedule, race verdicts that do
//! not depend on the seed, short-circuit `&&`/`||`, run-time semaphore
//! amounts, race reports naming two threads, and the time and memory bounds.

#![allow(clippy::result_large_err)]

use std::time::{Duration, Instant};

use mpmd_core::inputs::{call_args, Generation};
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::Module;
use mpmd_core::{CallOutputs, RunError};

fn parse(src: &str) -> Module {
    mpmd_core::text::parse(src).expect("test program parses").0
}

/// Runs the module's first call with generated inputs.
fn run(src: &str, options: &InterpOptions) -> Result<CallOutputs, RunError> {
    let module = parse(src);
    let args = call_args(&module, &Generation::with_defaults(options.run.seed))
        .expect("inputs generate")
        .remove(0);
    let map = module
        .calls
        .first()
        .map_or_else(|| module.maps[0].name.clone(), |c| c.map.clone());
    Interpreter::new().call(&validated(&module), &map, &args, options)
}

fn checked(seed: u64, extra_schedules: u32) -> InterpOptions {
    let mut o = InterpOptions {
        detect: true,
        extra_schedules,
        ..Default::default()
    };
    o.run.seed = seed;
    o
}

const LOCAL_AFTER_BARRIER: &str = include_str!("../../defects/u_local_after_barrier.mpmd");

/// Each warp of a block re-runs a `local` declaration under the warp-group
/// schedule; that must not forget what other warps wrote to their own lanes.
#[test]
fn local_arrays_live_across_barriers_under_every_schedule() {
    for seed in 0..8 {
        let out = run(LOCAL_AFTER_BARRIER, &checked(seed, 4)).expect("no detection fires");
        assert_eq!(out.outputs["y"].to_f32(), vec![1.0; 64], "seed {seed}");
    }
}

/// A `local` declared in a loop starts unwritten in every iteration, for the
/// lanes that run it: the second iteration's read of element 1 was never
/// written in that iteration.
#[test]
fn a_local_declared_again_forgets_the_lanes_that_declare_it() {
    let src = r#"
mesh m { grid [b = 1]; threads t = 64; }
kernel k(y: gmem<f32[64]>) {
  for r: u32 in 0u..2u {
    local acc: f32[2];
    if r == 0u {
      acc[1u] = 1.0;
    }
    acc[0u] = 2.0;
    barrier;
    y[axis_index(t)] = acc[0u] + acc[1u];
  }
}
map k { programs [m: k]; outputs [y: gmem<f32[64]>]; }
"#;
    for extra in [0, 3] {
        let err = run(src, &checked(1, extra)).unwrap_err();
        assert!(
            matches!(&err, RunError::UninitializedRead { reference, element: 1, .. } if reference == "acc"),
            "{err}"
        );
    }
}

const UNDERWAIT: &str = include_str!("../../defects/u_underwait.mpmd");
const WAR: &str = include_str!("../../defects/u_war.mpmd");

/// A wait is ordered after the signals it consumed and no others, so the
/// verdict on these racy programs is the same whatever the seed and the
/// number of schedules (before, the lockstep schedule joined every signal
/// made to the element and found neither race).
#[test]
fn race_verdicts_do_not_depend_on_the_seed_or_the_schedules() {
    for (name, src) in [("underwait", UNDERWAIT), ("war", WAR)] {
        for seed in 0..6 {
            for extra in [0, 1, 3] {
                let err = run(src, &checked(seed, extra)).unwrap_err();
                assert!(
                    matches!(&err, RunError::DataRace { .. }),
                    "{name}, seed {seed}, {extra} extra schedules: {err}"
                );
            }
        }
    }
}

const WAIT_EITHER_BLOCK: &str = include_str!("../../defects/t3_race_wait_either_block.mpmd");

/// t3: two blocks signal one element and only block 0 writes the data the
/// waiter reads after taking one unit. Whichever block's unit it took in
/// this schedule, another schedule gives it the other block's, so the read
/// is never ordered after the write: a data race on every seed and
/// schedule count, with the reader's program first or last (before: the
/// lockstep schedule passed, and the extra schedules said `data_race`,
/// `uninitialized_read` or nothing, by seed).
#[test]
fn a_wait_that_either_block_can_satisfy_races_on_every_seed() {
    let reader_first = WAIT_EITHER_BLOCK.replace(
        "programs [w: signal_both, r: read];",
        "programs [r: read, w: signal_both];",
    );
    assert_ne!(reader_first, WAIT_EITHER_BLOCK);
    for (name, src) in [
        ("signallers first", WAIT_EITHER_BLOCK),
        ("reader first", &reader_first),
    ] {
        for seed in 0..6 {
            for extra in [0, 1, 2, 5] {
                let err = run(src, &checked(seed, extra)).unwrap_err();
                assert!(
                    matches!(&err, RunError::DataRace { reference, .. } if reference == "data"),
                    "{name}, seed {seed}, {extra} extra schedules: {err}"
                );
            }
        }
    }
    // Waiting for both units orders the read after both signals.
    let both = WAIT_EITHER_BLOCK.replace("wait(s[0u], 1);", "wait(s[0u], 2);");
    assert_ne!(both, WAIT_EITHER_BLOCK);
    for seed in 0..6 {
        let out = run(&both, &checked(seed, 3)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(out.outputs["y"].to_bits(), vec![7; 32]);
    }
    // What every candidate signal is ordered after still orders the wait
    // (their meet): when both signallers first wait for a producer, the
    // reader is ordered after the producer's write whichever unit it took.
    let common = r#"
mesh p { grid [pb = 1]; threads pt = 32; }
mesh w { grid [b = 2]; threads t = 32; }
mesh r { grid [rb = 1]; threads u = 32; }
kernel produce(data: gmem<u32[32]>, y: gmem<u32[32]>, go: sem<[1]>, s: sem<[1]>) {
  data[axis_index(pt)] = 7u;
  signal(go[0u], 2);
}
kernel relay(data: gmem<u32[32]>, y: gmem<u32[32]>, go: sem<[1]>, s: sem<[1]>) {
  wait(go[0u], 1);
  signal(s[0u], 1);
}
kernel read(data: gmem<u32[32]>, y: gmem<u32[32]>, go: sem<[1]>, s: sem<[1]>) {
  wait(s[0u], 1);
  y[axis_index(u)] = data[axis_index(u)];
}
map m {
  programs [p: produce, w: relay, r: read];
  outputs [y: gmem<u32[32]>];
  scratch [data: gmem<u32[32]>, go: sem<[1]>, s: sem<[1]>];
}
"#;
    for seed in 0..6 {
        for extra in [0, 2] {
            let out = run(common, &checked(seed, extra))
                .unwrap_or_else(|e| panic!("seed {seed}, {extra}: {e}"));
            assert_eq!(out.outputs["y"].to_bits(), vec![7; 32]);
        }
    }
}

/// Waiting for all four signals makes the same reduction race-free: taking
/// exactly the consumed units does not invent races either.
#[test]
fn waiting_for_every_signal_is_race_free_under_every_seed() {
    let fixed = UNDERWAIT.replace("wait(ready[0u], 3);", "wait(ready[0u], 4);");
    for seed in 0..6 {
        run(&fixed, &checked(seed, 3)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// Units carried over from the start of the call (a resident semaphore's
/// count) are consumed first and carry no clock; a `wait_nodec` joins the
/// units it saw without taking them, so a later wait still gets them.
#[test]
fn wait_nodec_orders_without_consuming() {
    let src = r#"
mesh p { grid [pb = 1]; threads t = 32; }
mesh c { grid [cb = 1]; threads t = 32; }
kernel prod(y: gmem<u32[64]>, buf: gmem<u32[32]>, s: sem<[1]>) {
  buf[axis_index(t)] = axis_index(t) + 5u;
  signal(s[0u], 1);
}
kernel cons(y: gmem<u32[64]>, buf: gmem<u32[32]>, s: sem<[1]>) {
  wait_nodec(s[0u], 1);
  y[axis_index(t)] = buf[axis_index(t)];
  wait(s[0u], 1);
  y[axis_index(t) + 32u] = buf[axis_index(t)] * 2u;
}
map nodec {
  programs [p: prod, c: cons];
  outputs [y: gmem<u32[64]>];
  scratch [buf: gmem<u32[32]>, s: sem<[1]>];
}
"#;
    for seed in 0..4 {
        let out = run(src, &checked(seed, 3)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let y = &out.outputs["y"].words();
        assert_eq!(y[3], 8);
        assert_eq!(y[35], 16);
    }
}

const SHORT_CIRCUIT: &str = include_str!("../../defects/u_shortcircuit_and.mpmd");

/// `i >= 0 && x[i] > 0.0` never loads `x[-1]`; `||` likewise; `select`
/// evaluates both operands and does.
#[test]
fn logic_operators_short_circuit_and_select_does_not() {
    for extra in [0, 3] {
        let out = run(SHORT_CIRCUIT, &checked(2, extra)).expect("no out-of-bounds load");
        assert_eq!(out.outputs["y"].words().len(), 64);
    }
    let or = SHORT_CIRCUIT.replace(
        "if i >= 0 && x[i] > 0.0 {",
        "if i < 0 || x[i] > 0.0 {\n    v = 0.0;\n  }\n  if i >= 0 {",
    );
    run(&or, &checked(2, 3)).expect("`||` does not load x[-1]");
    let select = SHORT_CIRCUIT.replace(
        "if i >= 0 && x[i] > 0.0 {",
        "if select(x[i] > 0.0, false, i < 0) {",
    );
    let err = run(&select, &checked(2, 0)).unwrap_err();
    assert!(
        matches!(&err, RunError::OutOfBounds { reference, index, .. } if reference == "x" && index.contains("-1")),
        "{err}"
    );
}

/// The values of `&&`/`||` stay those of the logic operators on every lane.
#[test]
fn short_circuit_values_match_the_truth_tables() {
    let src = r#"
mesh m { grid [b = 1]; threads t = 64; }
kernel k(x: gmem<u32[64]>, y: gmem<u32[64]>, z: gmem<u32[64]>) {
  let a: bool = (axis_index(t) & 1u) == 1u;
  y[axis_index(t)] = u32(a && x[axis_index(t)] > 1u);
  z[axis_index(t)] = u32(a || x[axis_index(t)] > 1u);
}
map k { programs [m: k]; inputs [x: gmem<u32[64]>]; outputs [y: gmem<u32[64]>, z: gmem<u32[64]>]; }
call k();
case { generate x = uniform(0u, 4u); }
"#;
    let file = mpmd_core::text::parse_file(src).unwrap();
    let (module, case) = (file.module, file.case.unwrap());
    let generation = Generation::with_defaults(3).with_generators(&case.generators);
    let args = call_args(&module, &generation).unwrap().remove(0);
    let x = args.inputs["x"].to_bits();
    let out = Interpreter::new()
        .call(&validated(&module), "k", &args, &checked(3, 2))
        .unwrap();
    for (t, &xt) in x.iter().enumerate() {
        let a = t % 2 == 1;
        let b = xt > 1;
        assert_eq!(out.outputs["y"].words()[t], (a && b) as u32, "thread {t}");
        assert_eq!(out.outputs["z"].words()[t], (a || b) as u32, "thread {t}");
    }
}

const SEM_AMOUNT: &str = include_str!("../../defects/d22_sem_runtime_amount.mpmd");

/// A run-time amount below 1 is an error naming the semaphore and the block,
/// in both modes; before, `wait(s, -1)` added 1 to the counter.
#[test]
fn semaphore_amounts_below_one_are_run_time_errors() {
    for n in ["-1", "0"] {
        let src = SEM_AMOUNT.replace("call dl(n = 1);", &format!("call dl(n = {n});"));
        for detect in [false, true] {
            let o = InterpOptions {
                detect,
                ..Default::default()
            };
            let err = run(&src, &o).unwrap_err();
            match &err {
                RunError::BadSemaphoreAmount {
                    site,
                    semaphore,
                    amount,
                } => {
                    assert_eq!(semaphore, "s[0]");
                    assert_eq!(amount.to_string(), n);
                    assert_eq!((site.program.index(), site.block), (1, 0));
                }
                other => panic!("n = {n}: {other}"),
            }
            assert!(err.to_string().contains("must be at least 1"), "{err}");
        }
    }
    run(SEM_AMOUNT, &checked(0, 1)).unwrap();
}

const RACE_SAME_THREAD: &str = include_str!("../../defects/d25_race_report_same_thread.mpmd");

#[test]
fn a_race_report_names_two_different_threads() {
    let err = run(RACE_SAME_THREAD, &checked(0, 0)).unwrap_err();
    let RunError::DataRace { first, second, .. } = &err else {
        panic!("{err}");
    };
    assert_ne!(first.thread, second.thread, "{err}");
    assert_eq!((first.block, second.block), (0, 0));
}

const UNBOUNDED_LOOP: &str = include_str!("../../defects/d15_interp_unbounded_loop.mpmd");

/// A 2^32-iteration loop stops at the time limit with the block named.
#[test]
fn the_time_limit_stops_a_runaway_loop_naming_its_block() {
    for detect in [false, true] {
        let o = InterpOptions {
            detect,
            time_limit: Some(Duration::from_millis(200)),
            ..Default::default()
        };
        let start = Instant::now();
        let err = run(UNBOUNDED_LOOP, &o).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        match &err {
            RunError::TimeLimit {
                at: mpmd_core::backend::Activity::Running(site),
                limit_ms,
                option,
            } => {
                assert_eq!((site.program.index(), site.block, *limit_ms), (0, 0, 200));
                assert_eq!(option, "InterpOptions::time_limit");
            }
            other => panic!("{other}"),
        }
    }
}

/// Parallel blocks (no atomics, no detection) check the limit too.
#[test]
fn the_time_limit_holds_for_parallel_blocks() {
    let src = UNBOUNDED_LOOP
        .replace("grid [b = 1];", "grid [b = 4];")
        .replace("y[0] = acc;", "y[axis_index(b)] = acc;")
        .replace("u32[1]", "u32[4]");
    let o = InterpOptions {
        time_limit: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let err = run(&src, &o).unwrap_err();
    assert!(matches!(err, RunError::TimeLimit { .. }), "{err}");
}

const DETECTION_OOM: &str = include_str!("../../defects/d14a_checked_detection_oom.mpmd");

/// A call whose buffers (and their detection state) pass the memory limit is
/// refused before anything is allocated, with the size and the limit.
#[test]
fn the_memory_limit_refuses_up_front_with_the_numbers() {
    let err = run(DETECTION_OOM, &checked(0, 0)).unwrap_err();
    match &err {
        RunError::MemoryLimit {
            needed,
            limit,
            option,
            ..
        } => {
            assert_eq!(*needed, (1u64 << 29) * 21);
            assert_eq!(*limit, 4 << 30);
            assert_eq!(option, "InterpOptions::memory_limit");
        }
        other => panic!("{other}"),
    }
    assert_eq!(err.class(), Some(mpmd_core::ErrorClass::Refused));
    // Block states count too: 64 blocks that all wait hold their locals.
    let src = r#"
mesh w { grid [b = 64]; threads t = 1024; }
mesh s { grid [sb = 1]; threads st = 32; }
kernel waiter(y: gmem<f32[65536]>, go: sem<[1]>) {
  local big: f32[1024];
  wait_nodec(go[0u], 1);
  big[0u] = 1.0;
  y[axis_index(b) * 1024u + axis_index(t)] = big[0u];
}
kernel go(y: gmem<f32[65536]>, go: sem<[1]>) {
  signal(go[0u], 1);
}
map m { programs [w: waiter, s: go]; outputs [y: gmem<f32[65536]>]; scratch [go: sem<[1]>]; }
"#;
    let o = InterpOptions {
        memory_limit: 64 << 20,
        ..Default::default()
    };
    let err = run(src, &o).unwrap_err();
    assert!(
        matches!(&err, RunError::MemoryLimit { what, limit, .. } if what.contains("program 0") && *limit == 64 << 20),
        "{err}"
    );
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
