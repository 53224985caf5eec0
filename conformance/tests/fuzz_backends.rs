//! A short differential fuzz run on every backend available here (what
//! `cargo xtask fuzz` does at length): wgpu runs on lavapipe, CUDA compiles
//! and assembles for sm_90 without a GPU, cuda-host runs the CUDA text on CPU
//! threads. Any disagreement fails the test.

use std::time::Duration;

#[path = "../../test-support/needs.rs"]
mod needs;

use mpmd_conformance::backends::fuzz_factory;
use mpmd_conformance::fuzz::{run_fuzz, FuzzConfig, GenOptions};

#[test]
fn short_fuzz_run_agrees_on_every_backend() {
    let factories: Vec<_> = ["wgpu", "cuda", "cuda-host"]
        .into_iter()
        .map(|name| {
            needs::setup(&format!("backend `{name}`"), fuzz_factory(name))
                .expect("a backend factory, not the oracle")
        })
        .collect();
    let found = tempfile::tempdir().unwrap();
    let config = FuzzConfig {
        seed: 20_261_129,
        iterations: Some(40),
        found_dir: found.path().to_path_buf(),
        per_program_timeout: Duration::from_secs(60),
        reduce: false,
        generator: GenOptions {
            ieee: false,
            ..Default::default()
        },
        ..FuzzConfig::default()
    };
    let summary = run_fuzz(&config, &factories, &mut |_| {});
    println!("{summary}");
    assert!(summary.ok(), "{summary}");
    assert_eq!(summary.programs, 40);
    // Every program reached both backends: wgpu agreed or declined with a
    // reason (cycles), CUDA compiled.
    let reached = |backend: &str| {
        summary.agreed.get(backend).copied().unwrap_or(0)
            + summary
                .skipped
                .get(backend)
                .map_or(0, |reasons| reasons.values().sum::<u64>())
    };
    assert_eq!(reached("wgpu"), 40, "{summary}");
    assert_eq!(reached("cuda"), 40, "{summary}");
    // cuda-host ran what the CUDA text computes: only plans that need
    // co-resident blocks are declined.
    assert_eq!(reached("cuda-host"), 40, "{summary}");
    let host_agreed = summary.agreed.get("cuda-host").copied().unwrap_or(0);
    assert!(host_agreed >= 30, "{summary}");
}
