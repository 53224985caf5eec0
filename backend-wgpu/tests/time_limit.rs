//! `WgpuOptions::time_limit` bounds a run: the pipelines' compile and the
//! dispatches (t3: `--timeout` was ignored on `--backend wgpu`, and a 1 KB
//! checked-mode module took 327 s to compile on lavapipe).

mod common;

use std::time::{Duration, Instant};

use common::*;
use mpmd_core::backend::Activity;
use mpmd_core::{Backend, CallArgs, Mode, RunError, RunOptions};
use mpmd_wgpu::WgpuOptions;

/// Runs the only map of `src` with a time limit of `limit`; the error, and
/// how long the run took.
fn run_within(src: &str, limit: Duration, mode: Mode) -> (Result<(), RunError>, Duration) {
    let module = module(src);
    let plan = mpmd_core::plan::lower(&validated(&module), &module.maps[0].name).unwrap();
    let mut wgpu = backend(WgpuOptions {
        time_limit: Some(limit),
        ..Default::default()
    });
    let mut args = CallArgs::default();
    for scalar in &module.maps[0].scalars {
        args.scalars
            .insert(scalar.name.clone(), mpmd_core::ir::Literal::I32(1));
    }
    let options = RunOptions {
        mode,
        ..Default::default()
    };
    let start = Instant::now();
    let result = wgpu.run(&plan, &args, &options).map(|_| ());
    (result, start.elapsed())
}

fn assert_time_limit(result: Result<(), RunError>, elapsed: Duration, limit_ms: u64) {
    match result {
        Err(RunError::TimeLimit {
            at: Activity::Other(doing),
            limit_ms: got,
            option,
        }) => {
            assert_eq!(got, limit_ms);
            assert_eq!(option, "WgpuOptions::time_limit");
            assert!(
                doing.starts_with("compiling") || doing.starts_with("waiting for the dispatches"),
                "{doing}"
            );
        }
        other => panic!("{other:?} after {elapsed:?}"),
    }
    assert!(
        elapsed < Duration::from_millis(limit_ms + 2500),
        "{elapsed:?}"
    );
}

/// 65,536 workgroups of 1,024 threads, each with a 512 KiB local array:
/// about 4 s on lavapipe, stopped at the limit (before: run to the end).
#[test]
fn the_time_limit_stops_a_long_dispatch() {
    let src = include_str!("../../defects/t3_wgpu_timeout_ignored.mpmd");
    let (result, elapsed) = run_within(src, Duration::from_millis(500), Mode::Fast);
    assert_time_limit(result, elapsed, 500);
}

/// Checked mode's bounds checks on a chain of 64 nested indices take
/// lavapipe seconds to compile (255: minutes); the run stops at the limit.
/// The stored value is new for every run, so no shader cache has the module.
#[test]
fn the_time_limit_stops_a_long_compile() {
    let fresh = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.subsec_nanos() % 1_000_000);
    let chain = format!("{}0{}", "y[".repeat(64), "]".repeat(64));
    let src = format!(
        "mesh m {{ grid [b = 1]; threads t = 32; }}\n\
         kernel k(y: gmem<i32[32]>) {{ {chain} = {fresh}; }}\n\
         map k {{ programs [m: k]; outputs [y: gmem<i32[32]>]; }}\n"
    );
    let (result, elapsed) = run_within(&src, Duration::from_millis(500), Mode::Checked);
    assert_time_limit(result, elapsed, 500);
}

/// A short run is untouched by a generous limit.
#[test]
fn a_run_within_its_limit_succeeds() {
    let src = "mesh m { grid [b = 1]; threads t = 32; }\n\
        kernel k(y: gmem<u32[32]>) { y[axis_index(t)] = axis_index(t); }\n\
        map k { programs [m: k]; outputs [y: gmem<u32[32]>]; }\n";
    let (result, _) = run_within(src, Duration::from_secs(60), Mode::Checked);
    result.unwrap();
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
