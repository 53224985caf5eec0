//! `mma_m16n8k16` in the CUDA output: every mma corpus case compiles and
//! assembles without spills for sm_80 and sm_90, in both modes, to PTX
//! `mma.sync.aligned.m16n8k16` of its input type; below sm_80 (sm_75 has
//! only m16n8k8) the compile fails with that reason. The results are checked
//! on cuda-host by conformance (`cargo xtask conformance --filter '*mma*'`).

mod common;

use common::{
    assemble_without_spills, corpus_plan, corpus_text, for_arch, require_tools, text_plan,
};
use mpmd_core::Mode;
use mpmd_cuda::{compile_ptx, emit_module};

const CASES: [(&str, &str); 6] = [
    ("mma_f16_layout_identity_permutation", "f16"),
    ("mma_bf16_layout_identity_permutation", "bf16"),
    ("mma_k_tiles_accumulate_in_place", "bf16"),
    ("mma_rows_fragment_grid", "bf16"),
    ("mma_load_double_buffered_smem", "f16"),
    ("mma_load_gmem_rows_per_lane", "bf16"),
];

#[test]
fn mma_cases_assemble_for_sm_80_and_sm_90_with_mma_sync() {
    require_tools();
    for (name, ty) in CASES {
        let plan = corpus_plan(name);
        for mode in [Mode::Fast, Mode::Checked] {
            let emitted = emit_module(&plan, mode).unwrap();
            for arch in [80, 90] {
                let what = format!("{name} {mode:?}");
                let (ptx, _) = assemble_without_spills(&emitted, &for_arch(arch), &what);
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
    let plan = corpus_plan("mma_f16_layout_identity_permutation");
    let emitted = emit_module(&plan, Mode::Fast).unwrap();
    let e = compile_ptx(&emitted.source, &for_arch(75)).expect_err("sm_75 has no m16n8k16");
    let text = e.to_string();
    assert!(
        text.contains("mma_m16n8k16 needs sm_80 or later") && text.contains("m16n8k8"),
        "{text}"
    );
}

/// PTX for `source` (one map) on `arch`, in `mode`, and its ptxas report
/// of the kernel (which spills nothing).
fn assembled(source: &str, mode: Mode, arch: u32) -> (String, mpmd_cuda::KernelResources) {
    let emitted = emit_module(&text_plan(source), mode).unwrap();
    let (ptx, kernel) = assemble_without_spills(&emitted, &for_arch(arch), &format!("{mode:?}"));
    (ptx.text, kernel)
}

/// One `mma_load_a` and one `mma_load_b` from `source_decl` (the smem or
/// gmem tiles `sa` of 16x`A_COLS` and `sb` of 16x`B_COLS`), at column
/// origins `k0` and `n0`, then an mma and the store of its result.
fn one_load_each(space: &str, a_cols: u32, b_cols: u32) -> String {
    let (params, scratch, fill) = if space == "smem" {
        (
            format!(", sa: smem<f16[16, {a_cols}]>, sb: smem<f16[16, {b_cols}]>"),
            format!("scratch [sa: smem<f16[16, {a_cols}]>, sb: smem<f16[16, {b_cols}]>];"),
            format!(
                "for e: u32 in 0u..{a_cols}u {{
    sa[e % 16u, (axis_index(t) + 32u * e) % {a_cols}u] = x[e % 16u, (axis_index(t) + 32u * e) % {a_cols}u];
  }}
  for e: u32 in 0u..{b_cols}u {{
    sb[e % 16u, (axis_index(t) + 32u * e) % {b_cols}u] = y[e % 16u, (axis_index(t) + 32u * e) % {b_cols}u];
  }}
  barrier;"
            ),
        )
    } else {
        (String::new(), String::new(), String::new())
    };
    let (sa, sb) = if space == "smem" {
        ("sa", "sb")
    } else {
        ("x", "y")
    };
    format!(
        "
mesh m {{
  threads t = 32;
}}

kernel k(x: gmem<f16[16, {a_cols}]>, y: gmem<f16[16, {b_cols}]>, k0: u32, n0: u32, out: gmem<f32[32, 4]>{params}) {{
  {fill}
  local fa: f16[8];
  local fb: f16[4];
  local acc: f32[4];
  for e: u32 in 0u..4u {{
    acc[e] = 0.0;
  }}
  mma_load_a(fa, {sa}[0u, k0]);
  mma_load_b(fb, {sb}[0u, n0]);
  mma_m16n8k16(acc, fa, fb, acc);
  for e: u32 in 0u..4u {{
    out[axis_index(t), e] = acc[e];
  }}
}}

map mm {{
  programs [m: k];
  inputs [x: gmem<f16[16, {a_cols}]>, y: gmem<f16[16, {b_cols}]>];
  outputs [out: gmem<f32[32, 4]>];
  scalars [k0: u32, n0: u32];
  {scratch}
}}
"
    )
}

const LDMATRIX_A: &str = "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
const LDMATRIX_B: &str = "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16";

/// `mma_load_b_kmajor` from smem rows of 16 bytes: ldmatrix without
/// `.trans` in fast mode (the attention case loads Kᵀ that way), element
/// loads in checked mode.
#[test]
fn k_major_loads_use_ldmatrix_without_trans_in_fast_mode() {
    require_tools();
    const LDMATRIX_KMAJOR: &str = "ldmatrix.sync.aligned.m8n8.x2.shared.b16";
    let plan = corpus_plan("mma_attention_kmajor_online_softmax");
    for (mode, wanted) in [(Mode::Fast, true), (Mode::Checked, false)] {
        let emitted = emit_module(&plan, mode).unwrap();
        let (ptx, _) = assemble_without_spills(&emitted, &for_arch(80), &format!("{mode:?}"));
        assert_eq!(
            ptx.text.contains(LDMATRIX_KMAJOR),
            wanted,
            "{mode:?}: `{LDMATRIX_KMAJOR}`"
        );
    }
}

#[test]
fn fragment_loads_use_ldmatrix_exactly_for_smem_rows_of_16_bytes_in_fast_mode() {
    require_tools();
    // (tiles, mode, ldmatrix x4 count, x2.trans count)
    let expectations = [
        (one_load_each("smem", 32, 16), Mode::Fast, 1, 1),
        // Checked mode reports each element's bounds: element loads.
        (one_load_each("smem", 32, 16), Mode::Checked, 0, 0),
        // Rows of 36 and 12 elements are not whole 16-byte units.
        (one_load_each("smem", 36, 12), Mode::Fast, 0, 0),
        // Only A's rows are.
        (one_load_each("smem", 24, 12), Mode::Fast, 1, 0),
        (one_load_each("gmem", 32, 16), Mode::Fast, 0, 0),
    ];
    for (k, (source, mode, a, b)) in expectations.iter().enumerate() {
        for arch in [80, 90] {
            let (ptx, kernel) = assembled(source, *mode, arch);
            assert_eq!(
                (
                    ptx.matches(LDMATRIX_A).count(),
                    ptx.matches(LDMATRIX_B).count()
                ),
                (*a, *b),
                "expectation {k} sm_{arch} {mode:?}"
            );
            assert!(
                !kernel.spills(),
                "expectation {k} sm_{arch} {mode:?}: {kernel:?}"
            );
        }
    }
}

#[test]
fn fragment_rows_under_constant_loops_stay_in_registers() {
    require_tools();
    for name in ["mma_rows_fragment_grid", "mma_load_double_buffered_smem"] {
        let source = corpus_text(name);
        for arch in [80, 90] {
            let (_, kernel) = assembled(&source, Mode::Fast, arch);
            assert_eq!(
                (
                    kernel.stack_frame_bytes,
                    kernel.spill_store_bytes,
                    kernel.spill_load_bytes
                ),
                (0, 0, 0),
                "{name} sm_{arch}: {kernel:?}"
            );
        }
    }
}
