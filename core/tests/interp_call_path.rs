//! The interpreter's call path without detection: the lockstep schedule of
//! a map that synchronises runs its leading blocks that never wait on all
//! host cores, then the blocks that only take from semaphore counts too when
//! each of their waits is met at once, and computes and reports what running
//! them one by one computes and reports.

#![allow(clippy::result_large_err)]

use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::{CallArgs, HostTensor, RunError};

fn validated(src: &str) -> mpmd_core::validate::ValidModule {
    let module = mpmd_core::text::parse(src).expect("test program parses").0;
    mpmd_core::validate::validate(&module, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}

/// 256 producer blocks of 128 threads (2^15 lanes: enough for several host
/// threads) each write their part of `buf` and signal their half's
/// semaphore element 64 times (128 blocks share one); each of two consumer
/// blocks waits for its 8,192 signals, then copies its half of `buf`.
const MANY_SIGNALS: &str = r#"
mesh producer { grid [p = 256]; threads t = 128; }
mesh consumer { grid [c = 2]; threads u = 256; }
kernel produce(x: gmem<f32[32768]>, y: gmem<f32[32768]>, buf: gmem<f32[32768]>, ready: sem<[2]>) {
  let i: u32 = axis_index(p) * axis_size(t) + axis_index(t);
  buf[i] = x[i] * 3.0;
  for k: u32 in 0u..64u { signal(ready[axis_index(p) / 128u], 1); }
}
kernel consume(x: gmem<f32[32768]>, y: gmem<f32[32768]>, buf: gmem<f32[32768]>, ready: sem<[2]>) {
  wait(ready[axis_index(c)], 8192);
  for k: u32 in 0u..64u {
    let i: u32 = axis_index(c) * 16384u + k * 256u + axis_index(u);
    y[i] = buf[i] + 1.0;
  }
}
map pc {
  programs [producer: produce, consumer: consume];
  inputs [x: gmem<f32[32768]>];
  outputs [y: gmem<f32[32768]>];
  scratch [buf: gmem<f32[32768]>, ready: sem<[2]>];
}
"#;

fn many_signals_args() -> (CallArgs, Vec<f32>) {
    let xs: Vec<f32> = (0..32768).map(|k| k as f32 * 0.25).collect();
    let want = xs.iter().map(|x| x * 3.0 + 1.0).collect();
    let mut args = CallArgs::default();
    args.inputs
        .insert("x".into(), HostTensor::from_f32(vec![32768], &xs));
    (args, want)
}

/// The producers never wait: they run on all host cores (the report says
/// so where there are several), every signal counts (the consumer's wait
/// for all of them is met; a lost signal would deadlock), no wait is late, and
/// the output is exact, call after call; with detection the same call runs
/// one block at a time and agrees.
#[test]
fn leading_blocks_that_never_wait_run_on_all_cores_and_signal_exactly() {
    let module = validated(MANY_SIGNALS);
    let (args, want) = many_signals_args();
    let several_cores = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
    let mut interp = Interpreter::new();
    for _ in 0..20 {
        let out = interp
            .call(&module, "pc", &args, &InterpOptions::default())
            .unwrap();
        assert_eq!(out.outputs["y"].to_f32(), want);
        let report = interp.last_report().unwrap();
        assert_eq!(report.parallel, several_cores);
        assert_eq!(report.blocks_run, 258);
        assert_eq!(report.late_waits, vec![]);
    }
    let checked = InterpOptions {
        detect: true,
        ..Default::default()
    };
    let out = interp.call(&module, "pc", &args, &checked).unwrap();
    assert_eq!(out.outputs["y"].to_f32(), want);
    assert!(!interp.last_report().unwrap().parallel);
}

/// A deadlock after the leading blocks ran on several cores is reported as
/// the one-by-one schedule reports it: the waiting block and the count the
/// signals left. The second consumer waits for more than its producers
/// give: on several cores the first consumer has run when the second's wait
/// is not met, and the call runs again one block at a time.
#[test]
fn a_deadlock_after_the_leading_blocks_reports_the_count_they_left() {
    let module = validated(&MANY_SIGNALS.replace(
        "wait(ready[axis_index(c)], 8192);",
        "wait(ready[axis_index(c)], 8192 + i32(axis_index(c)) * 808);",
    ));
    let (args, _) = many_signals_args();
    for detect in [false, true] {
        let options = InterpOptions {
            detect,
            ..Default::default()
        };
        match Interpreter::new().call(&module, "pc", &args, &options) {
            Err(RunError::Deadlock { wait_for_graph }) => assert_eq!(
                wait_for_graph,
                "wait-for graph (no live block can signal):\n  program 1 (consume), block 1 waits on `ready[1]` for 9000 (count is 8192)",
                "detect {detect}"
            ),
            other => panic!("{other:?}"),
        }
    }
}

/// A map whose first program waits and whose second signals runs one block
/// at a time, as before: its waits met later are reported as late.
#[test]
fn a_map_whose_first_program_waits_runs_one_block_at_a_time() {
    let consumer_first = MANY_SIGNALS.replace(
        "programs [producer: produce, consumer: consume]",
        "programs [consumer: consume, producer: produce]",
    );
    let module = validated(&consumer_first);
    let (args, want) = many_signals_args();
    let mut interp = Interpreter::new();
    let out = interp
        .call(&module, "pc", &args, &InterpOptions::default())
        .unwrap();
    assert_eq!(out.outputs["y"].to_f32(), want);
    let report = interp.last_report().unwrap();
    assert!(!report.parallel);
    let late: Vec<(u64, i32)> = report
        .late_waits
        .iter()
        .map(|w| (w.site.block, w.amount))
        .collect();
    assert_eq!(late, vec![(0, 8192), (1, 8192)]);
}

/// 129 consumer blocks of 256 threads (enough for several host threads)
/// each take 1 from one semaphore element 128 times, which 256 producer
/// blocks gave 16,384: on several cores the waits take the count with a
/// compare-exchange, so exactly one block finds it empty, and the call
/// reports the lockstep schedule's deadlock (the last block waiting on an
/// empty count), every time.
#[test]
fn waits_on_several_cores_never_take_more_than_the_count() {
    let src = MANY_SIGNALS
        .replace("grid [c = 2]", "grid [c = 129]")
        .replace("signal(ready[axis_index(p) / 128u], 1)", "signal(ready[0u], 1)")
        .replace(
            "wait(ready[axis_index(c)], 8192);",
            "for w: u32 in 0u..128u { wait(ready[0u], 1); } if axis_index(c) < 128u { y[axis_index(c) * 256u + axis_index(u)] = buf[axis_index(c) * 256u + axis_index(u)]; }",
        )
        .replace("for k: u32 in 0u..64u {\n    let i: u32", "for k: u32 in 0u..0u {\n    let i: u32");
    let module = validated(&src);
    let (args, _) = many_signals_args();
    for _ in 0..10 {
        match Interpreter::new().call(&module, "pc", &args, &InterpOptions::default()) {
            Err(RunError::Deadlock { wait_for_graph }) => assert_eq!(
                wait_for_graph,
                "wait-for graph (no live block can signal):\n  program 1 (consume), block 128 waits on `ready[0]` for 1 (count is 0)"
            ),
            other => panic!("{other:?}"),
        }
    }
}
