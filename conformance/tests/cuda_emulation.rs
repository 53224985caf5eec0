//! Differential fuzzing of the CUDA code generator without a GPU, through
//! the `cuda-host` backend (`mpmd_cuda::HostCudaBackend`): the fuzzer's
//! programs are emitted as CUDA C, compiled for the CPU (one thread per CUDA
//! thread, blocks one after another in logical order, or all at once when the
//! plan needs them co-resident) and judged against the interpreter like any
//! backend. This checks the generated logic (schedules, addressing, numerics,
//! semaphores, loads-first loops) on every CI run; the GPU memory model needs
//! a GPU. Needs the host C++ compiler
//! (README set-up). `MPMD_EMULATED_FUZZ=N` runs N programs per mode instead
//! of the few CI runs.
#![cfg(feature = "cuda")]

#[path = "../../test-support/needs.rs"]
mod needs;

use std::time::Duration;

use mpmd_conformance::backends::fuzz_factory;
use mpmd_conformance::fuzz::{run_fuzz, FuzzConfig};
use mpmd_core::Mode;

fn fuzz(seed: u64, iterations: u64, mode: Mode) {
    let iterations = std::env::var("MPMD_EMULATED_FUZZ")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(iterations);
    let factory = needs::setup(
        "the host C++ compiler behind cuda-host",
        fuzz_factory("cuda-host"),
    )
    .expect("a backend factory, not the oracle");
    let config = FuzzConfig {
        seed,
        iterations: Some(iterations),
        mode,
        reduce: false,
        per_program_timeout: Duration::from_secs(60),
        ..FuzzConfig::default()
    };
    let summary = run_fuzz(&config, &[factory], &mut |line| println!("{line}"));
    assert!(
        summary.ok(),
        "generator bugs: {:#?}\nfindings: {:#?}",
        summary.generator_bugs,
        summary.findings
    );
    let agreed = summary.agreed.get("cuda-host").copied().unwrap_or(0);
    // Only grids too big to run co-resident are declined; most programs must run.
    assert!(
        agreed * 2 >= iterations,
        "only {agreed} of {iterations} programs ran: {:?}",
        summary.skipped
    );
}

#[test]
fn generated_cuda_agrees_with_the_interpreter_in_fast_mode() {
    fuzz(0x5eed_0001, 16, Mode::Fast);
}

#[test]
fn generated_cuda_agrees_with_the_interpreter_in_checked_mode() {
    fuzz(0x5eed_0002, 8, Mode::Checked);
}
