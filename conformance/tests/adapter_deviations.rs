#![cfg(feature = "wgpu")]

//! Cases that feed subnormals are derived a `subnormal` tag, and an adapter
//! whose start-up probe found it flushing subnormals skips exactly those
//! cases with the reason, instead of failing them (as NVIDIA's Vulkan driver
//! would: it flushes, which WGSL allows).

use mpmd_conformance::analysis::{tags, BackendId, SUBNORMAL_TAG};
use mpmd_conformance::backends::{probe, Availability};
use mpmd_conformance::case::{default_corpus_dir, load_dir, Case};
use mpmd_conformance::run::{run_case, RunConfig, Status};

fn corpus_case(name: &str) -> Case {
    load_dir(&default_corpus_dir())
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
fn a_flushing_adapter_skips_subnormal_cases_with_the_reason() {
    let mut env = probe(&[BackendId::Interp, BackendId::Wgpu]);
    if let Availability::Unavailable(why) = &env.wgpu {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs a WebGPU adapter: {why}"
        );
        return;
    }
    // What `probe` reports for an adapter that flushes.
    env.wgpu_deviations = mpmd_wgpu::profile_for(mpmd_wgpu::FloatBehaviour {
        flushes_subnormal_inputs: true,
        flushes_subnormal_results: true,
    })
    .deviations;
    let config = RunConfig {
        backends: vec![BackendId::Interp, BackendId::Wgpu],
        seed: 1,
        extra_schedules: 0,
    };
    let skipped = run_case(&corpus_case("f32_arith_special"), &config, &env);
    match &skipped.results[&BackendId::Wgpu] {
        Status::Skip(reason) => assert!(
            reason.starts_with(
                "adapter deviation `subnormal` (backend-wgpu/ACCURACY.md): this adapter flushes subnormal f32 values to zero"
            ),
            "{reason}"
        ),
        other => panic!("expected a skip, got {other:?}"),
    }
    // Cases without subnormals are still judged.
    let judged = run_case(&corpus_case("i32_arith_edges"), &config, &env);
    assert_eq!(judged.results[&BackendId::Wgpu], Status::Pass);
}
