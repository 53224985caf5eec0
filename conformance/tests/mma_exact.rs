//! The CPU backends compute the documented mma order bit for bit. The
//! corpus compares most mma outputs by the tensor-core bound (`compare ... =
//! mma`, which a real GPU needs); the interpreter, cuda-host (the emitted
//! CUDA C with the shim's stand-in for `mma.sync`) and WGSL on lavapipe all
//! compute docs/numerics.md's fixed order, and this test holds them to it:
//! every output of the mma corpus cases, exactly the oracle's bits.
#![cfg(all(feature = "wgpu", feature = "cuda"))]

#[path = "../../test-support/needs.rs"]
mod needs;

use mpmd_conformance::analysis::BackendId;
use mpmd_conformance::backends::{new_backend, probe, Availability};
use mpmd_conformance::case::load_dir;
use mpmd_conformance::run::{prepare_calls, run_interp};
use mpmd_core::{Mode, RunError, RunOptions};

/// The mma corpus cases, and whether WGSL runs them (it refuses an mma
/// under a branch that is warp- but not block-uniform).
const CASES: [(&str, bool); 4] = [
    ("mma_f16_layout_identity_permutation", true),
    ("mma_bf16_layout_identity_permutation", true),
    ("mma_k_tiles_accumulate_in_place", true),
    ("mma_in_warp_branch", false),
];

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
    for (name, wgsl_runs) in CASES {
        let case = corpus
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        let file = case.parsed.as_ref().expect("parses");
        let calls = prepare_calls(name, file, 1).expect("inputs");
        let oracle = run_interp(file, &calls, Mode::Fast, 1, 0).expect("the oracle runs");
        for id in [BackendId::Wgpu, BackendId::CudaHost] {
            let mut backend = new_backend(id).expect("the backend starts");
            for (i, call) in calls.iter().enumerate() {
                let plan = mpmd_core::plan::lower(&file.module, &call.map).expect("lowers");
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
