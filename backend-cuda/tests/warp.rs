//! Warp collectives in the CUDA output: every warp corpus case compiles and
//! assembles without spills for sm_75 (shuffle butterflies) and sm_90
//! (integer reductions in one `redux.sync`), in both modes, with `shfl.sync`
//! and `vote.sync`. The results are checked on cuda-host by
//! conformance (`cargo xtask conformance --filter '*warp*'`).

mod common;

use common::require_tools;
use mpmd_core::plan::lower;
use mpmd_core::Mode;
use mpmd_cuda::{compile_ptx, emit_module, CompileOptions};

const CASES: [&str; 4] = [
    "warp_shuffles_every_type",
    "warp_votes_every_ballot_lane",
    "warp_reductions_ties_nan_wrap",
    "user_warp_block_sum",
];

fn case_plan(name: &str) -> mpmd_core::plan::LaunchPlan {
    let path = format!(
        "{}/../conformance/cases/{name}.mpmd",
        env!("CARGO_MANIFEST_DIR")
    );
    let source = std::fs::read_to_string(&path).expect("corpus case reads");
    let (module, _) = mpmd_core::text::parse(&source).unwrap_or_else(|e| panic!("{e:?}"));
    mpmd_core::validate::validate(&module, &Default::default()).expect("valid");
    lower(&module, &module.maps[0].name).expect("lowers")
}

#[test]
fn warp_cases_assemble_for_sm_75_and_sm_90_with_warp_instructions() {
    require_tools();
    for name in CASES {
        let plan = case_plan(name);
        for mode in [Mode::Fast, Mode::Checked] {
            let emitted = emit_module(&plan, mode).unwrap();
            for arch in [75, 90] {
                let options = CompileOptions {
                    arch,
                    ..CompileOptions::default()
                };
                let ptx = compile_ptx(&emitted.source, &options)
                    .unwrap_or_else(|e| panic!("{name} sm_{arch} {mode:?}: {e}"));
                let report = mpmd_cuda::assemble(&ptx, arch)
                    .unwrap_or_else(|e| panic!("{name} sm_{arch} {mode:?}: {e}"));
                let kernel = report.kernel(&emitted.kernel_name).unwrap();
                assert_eq!(
                    (kernel.spill_store_bytes, kernel.spill_load_bytes),
                    (0, 0),
                    "{name} sm_{arch} {mode:?}"
                );
                let text = &ptx.text;
                let warp_instruction = text.contains("shfl.sync") || text.contains("vote.sync");
                assert!(warp_instruction, "{name} sm_{arch}: no warp instruction");
                let reduce = text.contains("redux.sync");
                let integer_reduction = name == "warp_reductions_ties_nan_wrap";
                assert_eq!(
                    reduce,
                    integer_reduction && arch >= 80,
                    "{name} sm_{arch}: redux.sync where the architecture has it"
                );
            }
        }
    }
}
