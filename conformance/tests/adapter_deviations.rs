#![cfg(feature = "wgpu")]

//! Cases that feed subnormals are derived a `subnormal` tag, and an adapter
//! whose start-up probe found it flushing subnormals (NVIDIA's Vulkan driver:
//! WGSL allows it) is judged on those cases against an oracle that flushes
//! too, instead of failing them against the IEEE one; deviations that no
//! oracle models still skip their cases with the reason.

#[path = "../../test-support/needs.rs"]
mod needs;

use mpmd_conformance::analysis::{tags, BackendId, SUBNORMAL_TAG};
use mpmd_conformance::backends::{probe, Availability};
use mpmd_conformance::case::{load_dir, Case};
use mpmd_conformance::run::{run_case, RunConfig, Status};

fn corpus_case(name: &str) -> Case {
    load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
        .expect("the corpus directory is readable")
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no corpus case `{name}`"))
}

#[test]
fn the_subnormal_tag_is_derived_from_inputs_and_literals() {
    assert_eq!(SUBNORMAL_TAG, mpmd_wgpu::SUBNORMAL_TAG);
    let tagged = |name: &str| {
        tags(corpus_case(name).parsed.as_ref().unwrap()).contains(&SUBNORMAL_TAG.to_string())
    };
    // f32 inputs generated with `special` (which includes subnormals).
    assert!(tagged("f32_arith_special"));
    assert!(tagged("bitwise_and_compare"));
    // No special f32 input and no subnormal literal.
    assert!(!tagged("i32_arith_edges"));
    assert!(!tagged("sem_producer_consumer"));
}

#[test]
fn a_flushing_adapter_is_judged_and_other_deviations_still_skip() {
    let mut env = probe(&[BackendId::Interp, BackendId::Wgpu]);
    if let Availability::Unavailable(why) = &env.wgpu {
        needs::setup::<(), _>("a WebGPU adapter (Mesa's lavapipe)", Err(why));
    }
    // What `probe` reports for an adapter that flushes.
    let flushing = mpmd_wgpu::profile_for(mpmd_wgpu::FloatBehaviour {
        flushes_subnormal_inputs: true,
        flushes_subnormal_results: true,
    });
    assert!(flushing
        .deviations
        .iter()
        .any(|(tag, _)| *tag == SUBNORMAL_TAG));
    env.wgpu_deviations = flushing.deviations;
    let config = RunConfig {
        backends: vec![BackendId::Interp, BackendId::Wgpu],
        seed: 1,
        extra_schedules: 0,
    };
    // Judged, not skipped: this adapter (which does not really flush) gives
    // the IEEE oracle's results; a flushing one would give the flushing
    // oracle's (`run::tests` checks that side).
    let judged = run_case(&corpus_case("f32_arith_special"), &config, &env);
    assert_eq!(judged.results[&BackendId::Wgpu], Status::Pass);
    let judged = run_case(&corpus_case("i32_arith_edges"), &config, &env);
    assert_eq!(judged.results[&BackendId::Wgpu], Status::Pass);
    // CUDA keeps subnormals, so it is not compared with this adapter there.
    let with_cuda = RunConfig {
        backends: vec![BackendId::Interp, BackendId::Wgpu, BackendId::Cuda],
        ..config.clone()
    };
    let triaged = run_case(&corpus_case("f32_arith_special"), &with_cuda, &env);
    assert_eq!(
        triaged.triage,
        Some(Status::Skip(
            "wgpu flushes subnormals on this adapter and cuda keeps them (adapter deviation `subnormal`)"
                .into()
        ))
    );
    // A deviation no oracle models still skips its cases, with the reason.
    let skipped = run_case(&corpus_case("math_log_subnormal"), &config, &env);
    match &skipped.results[&BackendId::Wgpu] {
        Status::Skip(reason) => assert!(
            reason.starts_with("adapter deviation `log_subnormal` (backend-wgpu/ACCURACY.md)"),
            "{reason}"
        ),
        other => panic!("expected a skip, got {other:?}"),
    }
}
