//! A short differential fuzz run on every backend available here (what
//! `cargo xtask fuzz` does at length): wgpu runs on lavapipe, CUDA compiles
//! and assembles for sm_90 without a GPU, cuda-host runs the CUDA text on CPU
//! threads. Any disagreement fails the test. The second test does the same
//! for modules that all use warp collectives.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[path = "../../test-support/needs.rs"]
mod needs;

use mpmd_conformance::backends::fuzz_factory;
use mpmd_conformance::fuzz::{
    check_module, generate_with, judge_backend, run_fuzz, BackendFactory, FuzzConfig, GenOptions,
    Verdict,
};
use mpmd_core::ir::{visit, Stmt, WarpOp};
use mpmd_core::plan::lower;
use mpmd_core::Mode;

/// The factories of the backends judged against the oracle: wgpu, cuda and
/// cuda-host (a missing one fails the test, `needs::setup`).
fn gpu_factories() -> Vec<BackendFactory> {
    ["wgpu", "cuda", "cuda-host"]
        .into_iter()
        .map(|name| {
            needs::setup(&format!("backend `{name}`"), fuzz_factory(name))
                .expect("a backend factory, not the oracle")
        })
        .collect()
}

#[test]
fn short_fuzz_run_agrees_on_every_backend() {
    let factories = gpu_factories();
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
    // reason (cycles, warp collectives under control that is warp-uniform
    // but not block-uniform), CUDA compiled.
    let reached = |backend: &str| {
        summary.agreed.get(backend).copied().unwrap_or(0)
            + summary
                .skipped
                .get(backend)
                .map_or(0, |reasons| reasons.values().sum::<u64>())
    };
    assert_eq!(reached("wgpu"), 40, "{summary}");
    for reason in summary
        .skipped
        .get("wgpu")
        .into_iter()
        .flat_map(|r| r.keys())
    {
        assert!(
            reason.contains("cycle") || reason.contains("warp-uniform but not block-uniform"),
            "{summary}"
        );
    }
    assert_eq!(reached("cuda"), 40, "{summary}");
    // cuda-host ran what the CUDA text computes: only plans that need
    // co-resident blocks are declined.
    assert_eq!(reached("cuda-host"), 40, "{summary}");
    let host_agreed = summary.agreed.get("cuda-host").copied().unwrap_or(0);
    assert!(host_agreed >= 30, "{summary}");
}

/// The warp collectives of `body` (nested ones included), by name.
fn warp_ops(body: &[Stmt]) -> Vec<&'static str> {
    let mut ops = vec![];
    visit::for_each_stmt(body, &mut |s| {
        if let Stmt::Warp { op, .. } = s {
            ops.push(op.name());
        }
    });
    ops
}

/// Modules with warp collectives in every program of whole warps, judged
/// module by module: every backend agrees; WGSL declines exactly the
/// modules with a collective under control that is warp-uniform but not
/// block-uniform (a skip, not a disagreement) and runs the others; every op
/// ran on wgpu and cuda-host and compiled for CUDA.
#[test]
fn warp_collectives_agree_on_every_backend() {
    const MODULES: u64 = 12;
    let factories = gpu_factories();
    let options = GenOptions {
        ieee: false,
        warps: 100,
        ..Default::default()
    };
    let mut agreed: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let (mut warp_only_modules, mut wgpu_skips) = (0, 0);
    for seed in 20_261_129..20_261_129 + MODULES {
        let file = generate_with(seed, &options);
        let m = &file.module;
        let ops: Vec<&str> = m.kernels.iter().flat_map(|k| warp_ops(&k.body)).collect();
        assert!(!ops.is_empty(), "seed {seed}");
        let oracle = check_module(&file, seed)
            .unwrap_or_else(|(stage, e)| panic!("seed {seed} at {stage}: {e}"));
        let plan = lower(&validated(m), &m.maps[0].name).expect("a generated module lowers");
        let warp_only = plan.units.iter().any(|u| {
            u.facts
                .uniformity
                .first_under_nonuniform_control(&u.kernel.body, &|s| matches!(s, Stmt::Warp { .. }))
                .is_some()
        });
        warp_only_modules += warp_only as u32;
        for factory in &factories {
            let verdict = judge_backend(
                &file,
                &oracle,
                factory,
                Mode::Fast,
                seed,
                Duration::from_secs(60),
            );
            let name = factory.name.as_str();
            match verdict {
                Verdict::Agrees => agreed.entry(name.into()).or_default().extend(&ops),
                Verdict::Skipped(reason) if name == "wgpu" && warp_only => {
                    assert!(
                        reason.contains("which is warp-uniform but not block-uniform"),
                        "seed {seed}: {reason}"
                    );
                    wgpu_skips += 1;
                }
                // CUDA without a GPU: compiled and assembled, nothing to run.
                Verdict::Skipped(reason) if name == "cuda" && reason.contains("compiled") => {
                    agreed.entry(name.into()).or_default().extend(&ops)
                }
                // Handshake cycles, as for every generated module.
                Verdict::Skipped(reason)
                    if reason.contains("co-resident") || reason.contains("cycle") => {}
                Verdict::Skipped(reason) => panic!("seed {seed}: `{name}` declined: {reason}"),
                Verdict::Disagrees(signature, detail) => panic!(
                    "seed {seed}: `{name}` {signature}: {detail}\n{}",
                    file.print()
                ),
            }
        }
    }
    assert!(
        (1..MODULES as u32).contains(&warp_only_modules),
        "{warp_only_modules} of {MODULES}"
    );
    assert_eq!(wgpu_skips, warp_only_modules);
    for backend in ["wgpu", "cuda", "cuda-host"] {
        for op in WarpOp::ALL {
            assert!(
                agreed
                    .get(backend)
                    .is_some_and(|ops| ops.contains(op.name())),
                "`{}` never ran on `{backend}`: {agreed:?}",
                op.name()
            );
        }
    }
}

/// The mma statements of `body` (nested ones included): multiplies and
/// fragment loads.
fn mma_statements(body: &[Stmt]) -> (u32, u32) {
    let (mut multiplies, mut loads) = (0, 0);
    visit::for_each_stmt(body, &mut |s| match s {
        Stmt::Mma { .. } => multiplies += 1,
        Stmt::MmaLoad { .. } => loads += 1,
        _ => {}
    });
    (multiplies, loads)
}

/// Modules whose warp programs multiply on tensor cores, judged module by
/// module: the interpreter, cuda-host and WGSL compute the documented mma
/// order from the same exact fragments, so every `mma` output matches the
/// oracle's bits (the fuzzer's `MmaJudgement::Exact`); CUDA compiles and
/// assembles each (sm_90, `mma.sync` and `ldmatrix`).
#[test]
fn mma_modules_agree_bit_for_bit_on_every_backend() {
    const MODULES: u64 = 8;
    let factories = gpu_factories();
    let options = GenOptions {
        ieee: false,
        warps: 100,
        mma: 100,
        ..Default::default()
    };
    let mut ran: BTreeMap<&str, u32> = BTreeMap::new();
    let (mut multiplies, mut loads) = (0, 0);
    for seed in 20_261_202..20_261_202 + MODULES {
        let file = generate_with(seed, &options);
        for k in &file.module.kernels {
            let (m, l) = mma_statements(&k.body);
            (multiplies, loads) = (multiplies + m, loads + l);
        }
        let oracle = check_module(&file, seed)
            .unwrap_or_else(|(stage, e)| panic!("seed {seed} at {stage}: {e}"));
        for factory in &factories {
            let name = factory.name.as_str();
            match judge_backend(
                &file,
                &oracle,
                factory,
                Mode::Fast,
                seed,
                Duration::from_secs(60),
            ) {
                Verdict::Agrees => *ran.entry(name).or_default() += 1,
                Verdict::Skipped(reason) if name == "cuda" && reason.contains("compiled") => {
                    *ran.entry(name).or_default() += 1
                }
                // Warp branches (WGSL), handshake cycles and co-residency,
                // as for every generated module.
                Verdict::Skipped(reason)
                    if reason.contains("warp-uniform but not block-uniform")
                        || reason.contains("co-resident")
                        || reason.contains("cycle") => {}
                Verdict::Skipped(reason) => panic!("seed {seed}: `{name}` declined: {reason}"),
                Verdict::Disagrees(signature, detail) => panic!(
                    "seed {seed}: `{name}` {signature}: {detail}\n{}",
                    file.print()
                ),
            }
        }
    }
    eprintln!("{multiplies} multiplies, {loads} loads, ran {ran:?}");
    assert!(
        multiplies >= 15 && loads >= 5,
        "{multiplies} multiplies, {loads} loads"
    );
    assert_eq!(ran.get("cuda"), Some(&(MODULES as u32)), "{ran:?}");
    for backend in ["wgpu", "cuda-host"] {
        let n = ran.get(backend).copied().unwrap_or(0);
        assert!(
            n >= MODULES as u32 / 2,
            "{backend} ran {n} of {MODULES}: {ran:?}"
        );
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
