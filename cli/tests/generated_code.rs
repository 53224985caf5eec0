//! The CUDA C and WGSL generated for every example and a chosen set of corpus
//! cases, kept as `insta` snapshots (`cli/tests/snapshots/`), so every change
//! to generated code is reviewed as a diff (`cargo insta review`).
//!
//! CUDA texts hold the fixed `prelude.cu` after their header line, which is a reviewed source
//! file of its own: the snapshots replace it with one marker line.

mod common;

use std::path::{Path, PathBuf};

use mpmd_core::backend::Mode;
use mpmd_core::plan::lower;
use mpmd_frontend::load_module;

/// Corpus cases whose generated code is pinned: one or more per construct
/// the emitters treat specially (16-bit storage, atomics of every kind,
/// semaphores in every shape, owned and resident refs, loops, helpers,
/// external meshes, co-resident cycles, warp collectives, mma).
const CORPUS_CASES: &[&str] = &[
    "alias_in_place",
    "atomics_cas_exchange_claim",
    "atomics_every_kind_contention",
    "atomics_f32_min_max_special",
    "barrier_smem_tree_reduction",
    "bf16_math",
    "casts_saturate",
    "ext_axis_size_of_external",
    "ext_two_call_handoff",
    "f16_arith_special",
    "fail_while_loop_limit",
    "lang_while_break_continue",
    "logic_short_circuit_guards",
    "math_fma_no_contraction",
    "mem_3d_shape_3d_grid",
    "mem_local_array",
    "mma_k_tiles_accumulate_in_place",
    "mma_rows_fragment_grid",
    "mma_load_double_buffered_smem",
    "mma_load_gmem_rows_per_lane",
    "mp_four_programs_grids_clusters",
    "mp_owned_smem_scratch",
    "resident_input_written_in_place",
    "sem_bidirectional_handshake",
    "sem_chained_scan_lower_blocks",
    "sem_signal_2d_grid_coords",
    "sem_wait_nodec_and_read",
    "shifts_32_and_more",
    "sixteen_bit_packed_store_contention",
    "user_decoupled_lookback_scan",
    "user_split_k_matmul",
    "user_tiled_matmul_helpers",
    "user_warp_block_sum",
    "warp_shuffles_every_type",
];

/// Cases also pinned in checked mode (bounds checks, wait budgets, loop
/// limits, error records).
const CHECKED_CASES: &[&str] = &[
    "fail_while_loop_limit",
    "mem_local_array",
    "sem_producer_consumer",
    "sixteen_bit_packed_store_contention",
];

fn corpus_case(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../conformance/cases/{name}.mpmd"))
}

fn example_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![common::examples_dir()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("examples directory reads") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "mpmd") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 12, "examples found: {files:?}");
    files
}

fn without_cuda_prelude(text: &str) -> String {
    let (header, body) = text
        .split_once(mpmd_cuda::PRELUDE)
        .expect("emitted CUDA holds prelude.cu");
    format!("{header}// <prelude.cu>\n{body}")
}

/// Snapshot name: `<stem>.<map>.<target>` (`examples/races/x.mpmd` is `races-x`).
fn snapshot_name(path: &Path, map: &str, target: &str) -> String {
    let stem = path.file_stem().unwrap().to_string_lossy();
    let parent = path
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    let prefix = match parent.as_ref() {
        "examples" | "cases" => String::new(),
        dir => format!("{dir}-"),
    };
    format!("{prefix}{stem}.{map}.{target}")
}

fn snapshot_every_map(path: &Path, modes: &[Mode]) {
    let module = load_module(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for map in &module.maps {
        let plan = lower(&module, &map.name).expect("the map lowers");
        for &mode in modes {
            let suffix = match mode {
                Mode::Fast => "",
                Mode::Checked => ".checked",
            };
            let cuda = mpmd_cuda::emit(&plan, mode).expect("CUDA emits");
            insta::assert_snapshot!(
                snapshot_name(path, &map.name, &format!("cu{suffix}")),
                without_cuda_prelude(&cuda)
            );
            let wgsl = mpmd_wgpu::emit(&plan, mode).expect("WGSL emits");
            insta::assert_snapshot!(
                snapshot_name(path, &map.name, &format!("wgsl{suffix}")),
                wgsl
            );
        }
    }
}

#[test]
fn examples_generated_code() {
    for path in example_files() {
        snapshot_every_map(&path, &[Mode::Fast]);
    }
}

#[test]
fn corpus_generated_code() {
    for case in CORPUS_CASES {
        snapshot_every_map(&corpus_case(case), &[Mode::Fast]);
    }
    for case in CHECKED_CASES {
        snapshot_every_map(&corpus_case(case), &[Mode::Checked]);
    }
}

/// The module lavapipe runs for a co-resident cycle: one fused dispatch with
/// a loop cap, which `mpmd lower` does not print.
#[test]
fn fused_dispatch_generated_code() {
    for case in [
        "sem_bidirectional_handshake",
        "user_decoupled_lookback_scan",
    ] {
        let path = corpus_case(case);
        let module = load_module(&path).expect("case loads");
        for map in &module.maps {
            let plan = lower(&module, &map.name).expect("the map lowers");
            let options = mpmd_wgpu::EmitOptions {
                mode: Mode::Fast,
                loop_cap: Some(60_000),
                co_resident: true,
                ..mpmd_wgpu::EmitOptions::default()
            };
            let module = mpmd_wgpu::emit_module(&plan, &options).expect("WGSL emits");
            insta::assert_snapshot!(snapshot_name(&path, &map.name, "fused.wgsl"), module.wgsl);
        }
    }
}

/// The module an adapter whose subgroups are the logical warps runs (native
/// warp collectives: `subgroup*` builtins, no `mpmd_warp_words`, no
/// barriers), which `mpmd lower` does not print: shuffles of every type,
/// votes and ballots, reductions with NaN and wrapping, mma with whole and
/// row fragments, and a collective under a branch that is only warp-uniform.
#[test]
fn native_warps_generated_code() {
    for case in [
        "warp_shuffles_every_type",
        "warp_votes_every_ballot_lane",
        "warp_reductions_ties_nan_wrap",
        "mma_f16_layout_identity_permutation",
        "mma_rows_fragment_grid",
        "warp_collective_in_warp_branch",
    ] {
        let path = corpus_case(case);
        let module = load_module(&path).expect("case loads");
        for map in &module.maps {
            let plan = lower(&module, &map.name).expect("the map lowers");
            let options = mpmd_wgpu::EmitOptions {
                mode: Mode::Fast,
                warps: mpmd_wgpu::WarpPath::Native,
                ..mpmd_wgpu::EmitOptions::default()
            };
            let module = mpmd_wgpu::emit_module(&plan, &options).expect("WGSL emits");
            insta::assert_snapshot!(
                snapshot_name(&path, &map.name, "native-warps.wgsl"),
                module.wgsl
            );
        }
    }
}
