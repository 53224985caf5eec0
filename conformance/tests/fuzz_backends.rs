//! A short differential fuzz run on every backend available here (what
//! `cargo xtask fuzz` does at length): wgpu runs on lavapipe, CUDA compiles
//! and assembles for sm_90 without a GPU. Any disagreement fails the test.

use std::time::Duration;

use mpmd_conformance::backends::fuzz_factory;
use mpmd_conformance::fuzz::{run_fuzz, FuzzConfig, GenOptions};

#[test]
fn short_fuzz_run_agrees_on_every_backend() {
    let factories: Vec<_> = ["wgpu", "cuda"]
        .into_iter()
        .map(|name| {
            fuzz_factory(name)
                .unwrap_or_else(|e| panic!("backend `{name}` is needed here: {e}; run `cargo xtask test`, which sets it up"))
                .expect("a GPU backend factory")
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
}
