//! `examples/stream_k_gemm.mpmd` at the benchmark's configurations (64 x 64
//! and 128 x 128 tiles, `test-support/gemm_config.rs`, shared by path):
//! both maps compile and assemble for sm_80 and sm_90 without spills or a
//! stack frame, to PTX that loads fragments with `ldmatrix` and multiplies
//! with `mma.sync`, and both configurations multiply exactly on
//! cuda-host (the generated CUDA C on CPU threads) at small shapes. The
//! example's own configuration is checked on cuda-host by conformance, and
//! every configuration against cuBLAS by `cuda-bench` on a GPU.

mod common;

#[path = "../../test-support/gemm_config.rs"]
mod gemm_config;

use common::{assemble_without_spills, require_tools};
use gemm_config::*;
use mpmd_core::ir::Literal;
use mpmd_core::plan::lower;
use mpmd_core::{Backend, CallArgs, Mode, RunOptions};
use mpmd_cuda::{emit_module, CompileOptions, HostCudaBackend};

fn example_source() -> String {
    let path = format!("{}/../examples/{GEMM_FILE}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn gemm_kernels_assemble_without_spills_for_sm_80_and_sm_90_with_mma_sync() {
    require_tools();
    let source = example_source();
    let caps = GemmCaps::holding(&GEMM_SHAPES).unwrap();
    let mut checked = Vec::new();
    for config in GEMM_CONFIGS {
        let module = config
            .module(&source, COMPILE_WAVE, caps)
            .unwrap_or_else(|e| panic!("{e}"));
        for map in GEMM_MAPS {
            let plan = lower(&module, map).unwrap();
            let emitted = emit_module(&plan, Mode::Fast).unwrap();
            for arch in [80, 90] {
                let what = format!("{map} at {}", config.label());
                let options = CompileOptions {
                    arch,
                    fast_math: plan.map.fast_math,
                    ..CompileOptions::default()
                };
                let (ptx, kernel) = assemble_without_spills(&emitted, &options, &what);
                assert!(
                    ptx.text
                        .contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                    "{what}: no bf16 mma.sync"
                );
                // The fragments come from smem tiles whose rows are 16-byte
                // multiples: the ldmatrix path, A as x4, B transposed as x2.
                for load in [
                    "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                    "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                ] {
                    assert!(ptx.text.contains(load), "{what}: no `{load}`");
                }
                assert_eq!(
                    kernel.stack_frame_bytes, 0,
                    "{what}: fragments on the stack"
                );
                assert_eq!(emitted.block_dim, config.threads(), "{what}");
                checked.push(what);
            }
        }
    }
    assert_eq!(checked.len(), 8);
}

#[test]
fn every_configuration_sets_each_constant_of_the_example() {
    // An override naming no constant of the file is an error, so this
    // also catches a constant renamed or dropped in the example.
    let source = example_source();
    let caps = GemmCaps::holding(&GEMM_SHAPES).unwrap();
    assert_eq!(
        caps,
        GemmCaps {
            a: 1536 * 16384,
            b: 16384 * 1536,
            c: 4096 * 4096
        }
    );
    let names: Vec<&str> = GEMM_CONFIGS[0]
        .constants(COMPILE_WAVE, caps)
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let (declared, _) = mpmd_core::text::parse(&source).unwrap();
    let mut declared: Vec<&str> = declared.consts.iter().map(|c| c.name.as_str()).collect();
    let mut set = names.clone();
    set.sort();
    declared.retain(|name| names.contains(name));
    declared.sort();
    assert_eq!(declared, set);
    for config in GEMM_CONFIGS {
        let module = config.module(&source, COMPILE_WAVE, caps).unwrap();
        let value = |name: &str| module.consts.iter().find(|c| c.name == name).unwrap().value;
        use mpmd_core::ir::Literal::U32;
        assert_eq!(value("THREADS"), U32(config.threads()));
        assert_eq!(value("BM"), U32(config.bm()));
        assert_eq!(value("PARTIALS"), U32(COMPILE_WAVE * config.threads() * 32));
    }
    // 128 x 128: 512 threads; 128 * 32 / 512 = 8 loads of A and of B each.
    let big = GEMM_CONFIGS[1].constants(132, caps).unwrap();
    let get = |name: &str| big.iter().find(|(n, _)| *n == name).unwrap().1;
    use mpmd_core::ir::Literal::U32;
    assert_eq!(
        [
            get("SA"),
            get("SB"),
            get("A_LOADS"),
            get("B_LOADS"),
            get("PARTIALS")
        ],
        [U32(40), U32(136), U32(8), U32(8), U32(132 * 512 * 32)]
    );
}

#[test]
fn both_configurations_multiply_exactly_on_cuda_host() {
    // WAVE 3; each shape leaves a partial wave whose stream-K share has at
    // least WAVE iterations: 96x80x160 is one 128x128 tile (all stream-K)
    // and 2x2 64x64 tiles (one data-parallel wave, one stream-K tile);
    // 200x136x128 is 2x2 128x128 tiles and 4x3 64x64 tiles.
    let wave = 3;
    let source = example_source();
    let shapes = [GemmShape::new(96, 80, 160), GemmShape::new(200, 136, 128)];
    let caps = GemmCaps::holding(&shapes).unwrap();
    let mut backend = HostCudaBackend::new();
    let mut runs = 0;
    for (seed, shape) in shapes.into_iter().enumerate() {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        let a = quarters(m * k, 2 * seed as u64);
        let b = quarters(k * n, 2 * seed as u64 + 1);
        let mut args = CallArgs::default();
        args.inputs.insert("a".into(), bf16_tensor(&a, caps.a));
        args.inputs.insert("b".into(), bf16_tensor(&b, caps.b));
        for (name, value) in [("m", shape.m), ("n", shape.n), ("k", shape.k)] {
            args.scalars.insert(name.into(), Literal::U32(value));
        }
        let want: Vec<f32> = (0..m * n)
            .map(|i| (0..k).map(|kk| a[i / n * k + kk] * b[kk * n + i % n]).sum())
            .collect();
        for config in GEMM_CONFIGS {
            let module = config.module(&source, wave, caps).unwrap();
            for map in GEMM_MAPS {
                let what = format!("{map} at {} tiles, {}", config.label(), shape.label());
                let plan = lower(&module, map).unwrap();
                let out = backend
                    .run(&plan, &args, &RunOptions::default())
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let c = out.outputs["c"].to_f32();
                assert_eq!(c.len(), caps.c as usize, "{what}");
                if let Some(i) = (0..m * n).find(|&i| c[i] != want[i]) {
                    panic!("{what}: c[{i}] = {}, the exact sum is {}", c[i], want[i]);
                }
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 8);
}
