//! Warp collectives in the CUDA output: every warp corpus case compiles and
//! assembles without spills for sm_75 (shuffle butterflies) and sm_90
//! (integer reductions in one `redux.sync`), in both modes, with `shfl.sync`
//! and `vote.sync`. The results are checked on cuda-host by
//! conformance (`cargo xtask conformance --filter '*warp*'`).

mod common;

use common::{assemble_without_spills, corpus_plan, for_arch, require_tools};
use mpmd_core::Mode;
use mpmd_cuda::emit_module;

const CASES: [&str; 4] = [
    "warp_shuffles_every_type",
    "warp_votes_every_ballot_lane",
    "warp_reductions_ties_nan_wrap",
    "user_warp_block_sum",
];

#[test]
fn warp_cases_assemble_for_sm_75_and_sm_90_with_warp_instructions() {
    require_tools();
    for name in CASES {
        let plan = corpus_plan(name);
        for mode in [Mode::Fast, Mode::Checked] {
            let emitted = emit_module(&plan, mode).unwrap();
            for arch in [75, 90] {
                let what = format!("{name} {mode:?}");
                let (ptx, _) = assemble_without_spills(&emitted, &for_arch(arch), &what);
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
