//! `mma_m16n8k16` in the CUDA output: every mma corpus case compiles and
//! assembles without spills for sm_80 and sm_90, in both modes, to PTX
//! `mma.sync.aligned.m16n8k16` of its input type; below sm_80 (sm_75 has
//! only m16n8k8) the compile fails with that reason. The results are checked
//! on cuda-host by conformance (`cargo xtask conformance --filter '*mma*'`).

mod common;

use common::require_tools;
use mpmd_core::plan::lower;
use mpmd_core::Mode;
use mpmd_cuda::{compile_ptx, emit_module, CompileOptions};

const CASES: [(&str, &str); 3] = [
    ("mma_f16_layout_identity_permutation", "f16"),
    ("mma_bf16_layout_identity_permutation", "bf16"),
    ("mma_k_tiles_accumulate_in_place", "bf16"),
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
fn mma_cases_assemble_for_sm_80_and_sm_90_with_mma_sync() {
    require_tools();
    for (name, ty) in CASES {
        let plan = case_plan(name);
        for mode in [Mode::Fast, Mode::Checked] {
            let emitted = emit_module(&plan, mode).unwrap();
            for arch in [80, 90] {
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
                let instruction = format!("mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32");
                assert!(
                    ptx.text.contains(&instruction),
                    "{name} sm_{arch} {mode:?}: no `{instruction}`"
                );
            }
        }
    }
}

#[test]
fn below_sm_80_the_compile_names_the_reason() {
    require_tools();
    let plan = case_plan("mma_f16_layout_identity_permutation");
    let emitted = emit_module(&plan, Mode::Fast).unwrap();
    let options = CompileOptions {
        arch: 75,
        ..CompileOptions::default()
    };
    let e = compile_ptx(&emitted.source, &options).expect_err("sm_75 has no m16n8k16");
    let text = e.to_string();
    assert!(
        text.contains("mma_m16n8k16 needs sm_80 or later") && text.contains("m16n8k8"),
        "{text}"
    );
}
