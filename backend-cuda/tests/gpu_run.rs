//! Runs on the GPU against the interpreter. Every test needs a CUDA GPU, so
//! each is `#[ignore]`d: without one it is shown as ignored (nextest:
//! skipped), never as passed; `scripts/gpu-check.sh` runs them with
//! `--include-ignored`, and run that way without a GPU they fail
//! (`needs::gpu`). The no-driver refusal is tests/environment.rs's.

mod common;
#[path = "support/sixteen.rs"]
mod sixteen;

use std::time::Duration;

use common::*;
use mpmd_core::host::{CallArgs, HostTensor};
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::{Backend, Mode, RunError, RunOptions};
use mpmd_cuda::{CudaBackend, CudaOptions};

/// The backend; without a GPU the test fails (`needs::gpu`). Always `Some`.
fn backend(wait_timeout: Duration) -> Option<CudaBackend> {
    backend_with(CudaOptions {
        wait_timeout,
        time_kernels: true,
        ..CudaOptions::default()
    })
}

/// The backend with `options`; without a GPU the test fails. Always `Some`.
fn backend_with(options: CudaOptions) -> Option<CudaBackend> {
    Some(needs::gpu(CudaBackend::new(options)))
}

fn both(
    plan: &LaunchPlan,
    args: &CallArgs,
    mode: Mode,
    cuda: &mut CudaBackend,
) -> (BTreeOut, BTreeOut) {
    let options = RunOptions { mode, seed: 1 };
    let want = Interpreter::new()
        .run(plan, args, &options)
        .expect("interpreter");
    let got = cuda
        .run(plan, args, &options)
        .unwrap_or_else(|e| panic!("cuda ({mode:?}): {e}"));
    (got.outputs, want.outputs)
}

type BTreeOut = std::collections::BTreeMap<String, HostTensor>;

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn scale_matches_the_interpreter() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    let plan = plan_of(&scale());
    let mut args = CallArgs::default();
    let x: Vec<f32> = (0..512).map(|i| i as f32 * 0.37 - 50.0).collect();
    args.inputs
        .insert("x".into(), HostTensor::from_f32(vec![512], &x));
    args.scalars.insert("alpha".into(), Literal::f32(1.5));
    args.scalars.insert("n".into(), Literal::U32(512));
    for mode in [Mode::Fast, Mode::Checked] {
        let (got, want) = both(&plan, &args, mode, &mut cuda);
        assert_eq!(got["y"], want["y"], "{mode:?}");
    }
}

/// Later calls of a plan reuse its device arena: inputs, zeroed outputs and
/// semaphores must be fresh in every call all the same.
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn repeated_calls_start_from_fresh_inputs_and_zeroed_buffers() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 64).build();
    let map = MapBuilder::new("acc")
        .program("m", "acc")
        .input("x", gmem(U32, [256]))
        .output_zeroed("sum", gmem(U32, [1]))
        .output("y", gmem(U32, [256]))
        .build();
    let kernel = KernelBuilder::new("acc", map.params()).body(|b| {
        let i = b.let_(
            "i",
            U32,
            axis_index("b") * Expr::from(64u32) + axis_index("t"),
        );
        b.atomic(
            AtomicOp::Add,
            at("sum", [Expr::from(0u32)]),
            [load("x", [i.clone()])],
        );
        b.store(at("y", [i.clone()]), load("x", [i]) + Expr::from(1u32));
    });
    let plan = plan_of(&module(vec![mesh], vec![kernel], map));
    for (call, base) in [1u32, 7, 3].into_iter().enumerate() {
        let x: Vec<u32> = (0..256).map(|i| base * i).collect();
        let mut args = CallArgs::default();
        args.inputs
            .insert("x".into(), HostTensor::from_u32(vec![256], &x));
        let out = cuda
            .run(&plan, &args, &RunOptions::default())
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
        assert_eq!(
            out.outputs["sum"].words(),
            vec![base * 255 * 256 / 2],
            "call {call}"
        );
        let want: Vec<u32> = x.iter().map(|v| v + 1).collect();
        assert_eq!(out.outputs["y"].words(), want, "call {call}");
        assert!(
            cuda.last_kernel_ms().is_some(),
            "call {call}: no kernel time"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn pipeline_matches_the_interpreter_and_keeps_residents() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    let plan = plan_of(&pipeline());
    let mut args = CallArgs::default();
    let x: Vec<f32> = (0..384).map(|i| (i % 23) as f32 * 0.5).collect();
    args.inputs
        .insert("x".into(), HostTensor::from_f32(vec![4, 96], &x));
    args.scalars.insert("scale".into(), Literal::f32(2.0));
    for mode in [Mode::Fast, Mode::Checked] {
        let (got, want) = both(&plan, &args, mode, &mut cuda);
        assert_eq!(got["y"], want["y"], "{mode:?}");
        assert_eq!(got["total"], want["total"], "{mode:?}");
    }
    // `credits` is resident: one signal per call, two calls.
    assert_eq!(cuda.resident("credits").unwrap().words(), vec![0, 0, 2, 0]);
    assert_eq!(
        cuda.resident("hand").unwrap().to_f32()[4..],
        [4.0, 4.0, 4.0, 4.0]
    );
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn cycle_runs_cooperatively() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    let plan = plan_of(&cycle());
    assert!(plan.needs_co_residency());
    for mode in [Mode::Fast, Mode::Checked] {
        let out = cuda
            .run(&plan, &CallArgs::default(), &RunOptions { mode, seed: 0 })
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(out.outputs["y"].words(), vec![1, 1, 2, 2]);
    }
}

/// Programs of 32, 96 and 128 threads in one resident walk (named barriers
/// for the smaller two), with one, two and all resident blocks: each
/// physical block runs logical blocks of every program, and the result,
/// residents included, is the interpreter's.
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn uneven_resident_walk_matches_the_interpreter() {
    require_tools();
    let plan = plan_of(&pipeline_in_warps());
    assert_eq!(
        mpmd_cuda::BlockSchedule::for_plan(&plan, true),
        mpmd_cuda::BlockSchedule::ResidentWalk
    );
    let mut args = CallArgs::default();
    let x: Vec<f32> = (0..384).map(|i| (i % 29) as f32 * 0.25).collect();
    args.inputs
        .insert("x".into(), HostTensor::from_f32(vec![4, 96], &x));
    args.scalars.insert("scale".into(), Literal::f32(1.5));
    for resident in [Some(1), Some(2), None] {
        let cuda = CudaBackend::new(CudaOptions {
            max_resident_blocks: resident,
            ..CudaOptions::default()
        });
        let mut cuda = needs::gpu(cuda);
        let mut interpreter = Interpreter::new();
        for mode in [Mode::Fast, Mode::Checked] {
            let options = RunOptions { mode, seed: 0 };
            let want = interpreter
                .run(&plan, &args, &options)
                .expect("interpreter");
            let got = cuda
                .run(&plan, &args, &options)
                .unwrap_or_else(|e| panic!("{resident:?} resident block(s), {mode:?}: {e}"));
            assert_eq!(
                got.outputs, want.outputs,
                "{resident:?} resident block(s), {mode:?}"
            );
            for name in ["hand", "credits"] {
                assert_eq!(cuda.resident(name), interpreter.resident(name), "{name}");
            }
        }
    }
}

/// `time_relaunch` (cuda-bench's resident figures) launches the latest
/// call's kernel again: its semaphores are cleared first, so the cycle's
/// waits are met again instead of timing out.
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn relaunching_the_latest_call_times_its_kernel() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_millis(500)) else {
        return;
    };
    let err = cuda.time_relaunch(1).unwrap_err();
    assert!(err.to_string().contains("no call to launch again"), "{err}");
    let plan = plan_of(&cycle());
    cuda.run(&plan, &CallArgs::default(), &RunOptions::default())
        .unwrap();
    let ms = cuda.time_relaunch(3).unwrap();
    assert!(ms > 0.0 && ms < 400.0, "{ms} ms");
    let out = cuda
        .run(&plan, &CallArgs::default(), &RunOptions::default())
        .unwrap();
    assert_eq!(out.outputs["y"].words(), vec![1, 1, 2, 2]);
}

/// Where the platform refuses mapped host memory (or the option is off),
/// every output is copied back and the control block is read after every
/// call; results and error reports are the same.
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn without_host_mapping_results_and_errors_are_the_same() {
    require_tools();
    let Some(mut cuda) = backend_with(CudaOptions {
        wait_timeout: Duration::from_millis(200),
        host_mapped_outputs: false,
        ..CudaOptions::default()
    }) else {
        return;
    };
    assert!(!cuda.host_mapping());
    let plan = plan_of(&pipeline_in_warps());
    let mut args = CallArgs::default();
    let x: Vec<f32> = (0..384).map(|i| (i % 31) as f32 * 0.5).collect();
    args.inputs
        .insert("x".into(), HostTensor::from_f32(vec![4, 96], &x));
    args.scalars.insert("scale".into(), Literal::f32(2.5));
    for mode in [Mode::Fast, Mode::Checked] {
        let (got, want) = both(&plan, &args, mode, &mut cuda);
        assert_eq!(got, want, "{mode:?}");
    }
    let err = cuda
        .run(
            &plan_of(&stuck()),
            &CallArgs::default(),
            &RunOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(err, RunError::Deadlock { .. }), "{err}");
    // The default maps them wherever the platform allows (the H200 does).
    let mapped = backend(Duration::from_secs(10)).expect("a driver, as above");
    assert!(mapped.host_mapping());
}

/// A map whose only wait is never signalled.
fn stuck() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 64).build();
    let map = MapBuilder::new("stuck")
        .program("m", "stuck")
        .output("y", gmem(U32, [128]))
        .scratch("never", sem([3]))
        .build();
    let kernel = KernelBuilder::new("stuck", map.params()).body(|b| {
        b.wait(at("never", [Expr::from(2u32)]), 1);
        b.store(at("y", [axis_index("t")]), Expr::from(1u32));
    });
    module(vec![mesh], vec![kernel], map)
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn unmet_wait_is_a_deadlock_after_the_time_limit() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_millis(200)) else {
        return;
    };
    let plan = plan_of(&stuck());
    let err = cuda
        .run(&plan, &CallArgs::default(), &RunOptions::default())
        .unwrap_err();
    assert!(matches!(err, RunError::Deadlock { .. }), "{err}");
    assert!(err.to_string().contains("waits on `never[2]`"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn checked_mode_reports_out_of_bounds_on_the_gpu() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 32).build();
    let map = MapBuilder::new("oob")
        .program("m", "oob")
        .output("y", gmem(F32, [32]))
        .build();
    let kernel = KernelBuilder::new("oob", map.params()).body(|b| {
        let i = b.let_(
            "i",
            U32,
            axis_index("b") * Expr::from(40u32) + axis_index("t"),
        );
        b.store(at("y", [i]), 1.0f32);
    });
    let plan = plan_of(&module(vec![mesh], vec![kernel], map));
    let err = cuda
        .run(
            &plan,
            &CallArgs::default(),
            &RunOptions {
                mode: Mode::Checked,
                seed: 0,
            },
        )
        .unwrap_err();
    let RunError::OutOfBounds {
        site,
        reference,
        index,
        shape,
    } = &err
    else {
        panic!("expected out of bounds, got {err}");
    };
    assert_eq!(
        (
            site.program.index(),
            site.block,
            reference.as_str(),
            shape.as_str()
        ),
        (0, 1, "y", "[32]")
    );
    assert_eq!(index, &format!("[{}]", 40 + site.thread.unwrap()));
}

/// Waits on a device that launches cooperatively run as a resident walk:
/// with one or two resident blocks, each block walks several logical blocks
/// of all three programs in order, and the result is the interpreter's.
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn resident_walk_with_few_blocks_matches_the_interpreter() {
    require_tools();
    // Built into the binary: scripts/gpu-check.sh runs it on another
    // machine, where the build's source folder does not exist.
    let source = include_str!("../../examples/pipeline.mpmd");
    let file = mpmd_core::text::parse_file(source).unwrap();
    let module = file.module;
    let plan = mpmd_core::plan::lower(&validated(&module), "pipeline").unwrap();
    assert_eq!(
        mpmd_cuda::BlockSchedule::for_plan(&plan, true),
        mpmd_cuda::BlockSchedule::ResidentWalk
    );
    let generators = file.case.map(|c| c.generators).unwrap_or_default();
    let generation = mpmd_core::inputs::Generation::with_defaults(7).with_generators(&generators);
    let args = mpmd_core::inputs::call_args(&module, &generation).unwrap();
    let options = RunOptions::default();
    let want = Interpreter::new().run(&plan, &args[0], &options).unwrap();
    for resident in [1, 2] {
        let cuda = CudaBackend::new(CudaOptions {
            max_resident_blocks: Some(resident),
            ..CudaOptions::default()
        });
        let mut cuda = needs::gpu(cuda);
        for mode in [Mode::Fast, Mode::Checked] {
            let got = cuda
                .run(&plan, &args[0], &RunOptions { mode, seed: 0 })
                .unwrap_or_else(|e| panic!("{resident} resident block(s), {mode:?}: {e}"));
            assert_eq!(
                got.outputs, want.outputs,
                "{resident} resident block(s), {mode:?}"
            );
        }
    }
}

/// f16 and bf16 on the GPU (PTX `cvt` conversions; bf16 in software below
/// sm_80): every operation and cast bit for bit as `numerics` computes it,
/// but the math functions, which are CUDA's own (within one 16-bit ulp).
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn sixteen_bit_operations_and_casts_match_numerics() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    sixteen::every_operation(&mut cuda, sixteen::MathFunctions::WithinOneUlp);
    sixteen::fma_ties(&mut cuda);
    sixteen::every_cast(&mut cuda);
}

/// Packed 16-bit stores from neighbouring threads, warps and blocks, smem
/// and owned instances; bf16 → f32 accumulation; 16-bit scalars; an
/// odd-length bf16 resident; a checked out-of-bounds report by element.
#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn sixteen_bit_memory_scalars_and_residents_match_numerics() {
    require_tools();
    let Some(mut cuda) = backend(Duration::from_secs(10)) else {
        return;
    };
    sixteen::packed_stores(&mut cuda);
    sixteen::mixed_precision(&mut cuda);
    sixteen::scalar_parameters(&mut cuda);
    sixteen::odd_resident(&mut cuda);
    sixteen::checked_out_of_bounds(&mut cuda);
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
