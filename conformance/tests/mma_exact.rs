//! The CPU backends compute the documented mma order bit for bit. The
//! corpus compares most mma outputs by the tensor-core bound (`compare ... =
//! mma`, which a real GPU needs); the interpreter, cuda-host (the emitted
//! CUDA C with the shim's stand-in for `mma.sync`) and WGSL on lavapipe all
//! compute docs/numerics.md's fixed order, and this test holds them to it:
//! every output of every corpus case that compares by the bound, exactly
//! the oracle's bits.
#![cfg(all(feature = "wgpu", feature = "cuda"))]

#[path = "../../test-support/needs.rs"]
mod needs;

use mpmd_conformance::analysis::BackendId;
use mpmd_conformance::backends::{new_backend, probe, Availability};
use mpmd_conformance::case::load_dir;
use mpmd_conformance::run::{prepare_calls, run_interp};
use mpmd_core::{Mode, RunError, RunOptions};

/// The mma corpus cases WGSL refuses (an mma under a branch that is warp-
/// but not block-uniform: its emulation needs workgroup barriers).
const WGSL_REFUSES: [&str; 1] = ["mma_in_warp_branch"];

/// Whether a case compares some output by the tensor-core bound.
fn compares_mma(file: &mpmd_conformance::case::CaseFile) -> bool {
    file.spec
        .compares
        .iter()
        .any(|(_, mode)| *mode == mpmd_core::case::CompareMode::Mma)
}

#[test]
fn interpreter_cuda_host_and_wgpu_agree_bit_for_bit_on_the_mma_cases() {
    let backends = [BackendId::Interp, BackendId::Wgpu, BackendId::CudaHost];
    let env = probe(&backends);
    if let Availability::Unavailable(why) = &env.wgpu {
        needs::setup::<(), _>("a Vulkan adapter (lavapipe)", Err(why));
    }
    if let Availability::Unavailable(why) = &env.cuda_host {
        needs::setup::<(), _>("the host C++ compiler behind cuda-host", Err(why));
    }
    let corpus = load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
        .expect("the corpus directory is readable");
    let cases: Vec<_> = corpus
        .iter()
        .filter(|c| c.parsed.as_ref().is_ok_and(compares_mma))
        .collect();
    // Every mma case of the corpus, the stream-K GEMM among them.
    assert!(cases.len() >= 8, "only {} mma cases", cases.len());
    for case in cases {
        let name = case.name.as_str();
        let wgsl_runs = !WGSL_REFUSES.contains(&name);
        let file = case.parsed.as_ref().expect("parses");
        let calls = prepare_calls(name, file, 1).expect("inputs");
        let valid = file.validate().expect("valid");
        let oracle =
            run_interp(&valid, &file.spec, &calls, Mode::Fast, 1, 0).expect("the oracle runs");
        for id in [BackendId::Wgpu, BackendId::CudaHost] {
            let mut backend = new_backend(id).expect("the backend starts");
            for (i, call) in calls.iter().enumerate() {
                let plan = mpmd_core::plan::lower(&valid, &call.map).expect("lowers");
                let options = RunOptions {
                    mode: Mode::Fast,
                    seed: 1,
                };
                let outputs = match backend.run(&plan, &call.args, &options) {
                    Ok(outputs) => outputs,
                    Err(RunError::Unsupported { reason })
                        if id == BackendId::Wgpu && !wgsl_runs =>
                    {
                        assert!(reason.contains("not block-uniform"), "{reason}");
                        continue;
                    }
                    Err(e) => panic!("{name} on {id:?}: {e}"),
                };
                assert!(id != BackendId::Wgpu || wgsl_runs, "{name}: WGSL ran it");
                let expected: Vec<_> = oracle.iter().filter(|o| o.call == Some(i)).collect();
                assert_eq!(outputs.outputs.len(), expected.len(), "{name} on {id:?}");
                for o in expected {
                    assert_eq!(
                        outputs.outputs[&o.name].to_bits(),
                        o.tensor.to_bits(),
                        "{name} on {id:?}: output `{}`",
                        o.name
                    );
                }
            }
        }
    }
}
