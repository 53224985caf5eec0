//! Emit + NVRTC + ptxas for sm_90 on programs covering the whole IR, in
//! fast and checked mode. Needs libnvrtc.so.13 on LD_LIBRARY_PATH and ptxas
//! on PATH (`cargo xtask test` sets both); fails when they are missing.

mod common;

use common::*;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;
use mpmd_cuda::{
    check_plan, compile_ptx, emit, emit_module_with, BlockSchedule, CompileError, CompileOptions,
};

#[test]
fn every_program_compiles_for_sm_90_without_spills() {
    require_tools();
    for (name, module) in corpus() {
        let plan = plan_of(&module);
        for mode in [Mode::Fast, Mode::Checked] {
            let report = check_plan(&plan, mode).unwrap_or_else(|e| {
                panic!(
                    "{name} ({mode:?}) failed:\n{e}\n--- source ---\n{}",
                    emit(&plan, mode).unwrap()
                )
            });
            assert_eq!(report.status, "compiled");
            assert_eq!(report.arch, 90);
            assert!(report.registers > 0, "{name} ({mode:?}): {report:?}");
            assert_eq!(
                (report.spill_store_bytes, report.spill_load_bytes),
                (0, 0),
                "{name} ({mode:?}) spills: {report:?}"
            );
            println!(
                "{name:>16} {mode:?}: {} registers, {} blocks x {} threads, {} bytes smem",
                report.registers, report.total_blocks, report.block_dim, report.dynamic_smem_bytes
            );
        }
    }
}

/// `source` with the prelude (a reviewed file of its own, `prelude.cu`)
/// replaced by one marker line, for snapshots.
fn without_prelude(source: &str) -> String {
    let (header, body) = source
        .split_once(mpmd_cuda::PRELUDE)
        .expect("emitted CUDA holds prelude.cu");
    format!("{header}// <prelude.cu>\n{body}")
}

/// The CUDA C of `plan` under `schedule`, as a snapshot.
fn snapshot(name: &str, plan: &LaunchPlan, mode: Mode, schedule: BlockSchedule) {
    let module = emit_module_with(plan, mode, schedule).unwrap();
    insta::assert_snapshot!(name, without_prelude(&module.source));
}

/// Tickets: units in plan order by ticket range, threads beyond each
/// program's own count exiting at entry (the snapshot shows both).
#[test]
fn ticket_dispatch_covers_units_in_order() {
    let plan = plan_of(&pipeline());
    let module = mpmd_cuda::emit_module(&plan, Mode::Fast).unwrap();
    // 4 producer blocks, 4 consumer blocks, 1 finisher block; 128 threads.
    assert_eq!(module.block_dim, 128);
    assert_eq!(module.total_blocks, 9);
    let ranges: Vec<(usize, u64, u64)> = module
        .tickets
        .iter()
        .map(|t| (t.program.index(), t.first, t.count))
        .collect();
    assert_eq!(ranges, vec![(0, 0, 4), (1, 4, 4), (2, 8, 1)]);
    // Uneven thread counts keep tickets even where cooperative launch exists.
    assert_eq!(module.schedule, BlockSchedule::Tickets);
    snapshot("pipeline.tickets", &plan, Mode::Fast, module.schedule);
    // smem arena sized by the largest program.
    assert_eq!(module.dynamic_smem_bytes, 384);
}

/// Which physical-to-logical block mapping each kind of plan gets.
#[test]
fn block_schedule_follows_waits_thread_counts_and_co_residency() {
    let even = even_pipeline();
    assert_eq!(
        BlockSchedule::for_plan(&even, true),
        BlockSchedule::ResidentWalk
    );
    // Without cooperative launch the walk's residency is not guaranteed.
    assert_eq!(
        BlockSchedule::for_plan(&even, false),
        BlockSchedule::Tickets
    );
    assert_eq!(
        BlockSchedule::for_plan(&plan_of(&pipeline()), true),
        BlockSchedule::Tickets
    );
    // A cycle needs every logical block resident: one block each, no walk.
    assert_eq!(
        BlockSchedule::for_plan(&plan_of(&cycle()), true),
        BlockSchedule::Tickets
    );
    assert_eq!(
        BlockSchedule::for_plan(&plan_of(&scale()), true),
        BlockSchedule::BlockIndex
    );

    // The walk's text is cli/tests/snapshots/generated_code__pipeline.pipeline.cu.snap.
    let walk = mpmd_cuda::emit_module(&even, Mode::Fast).unwrap();
    assert_eq!(walk.schedule, BlockSchedule::ResidentWalk);
    // Both forms compile for sm_90 without spills.
    for schedule in [BlockSchedule::ResidentWalk, BlockSchedule::Tickets] {
        for mode in [Mode::Fast, Mode::Checked] {
            let module = emit_module_with(&even, mode, schedule).unwrap();
            let what = format!("{schedule:?} {mode:?}");
            assemble_without_spills(&module, &CompileOptions::default(), &what);
        }
    }
}

/// A wait may subtract first and give back when short, unless some program
/// reads the semaphore (it could see the dip); wait_nodec only looks.
#[test]
fn waits_take_optimistically_unless_the_semaphore_is_read() {
    let source = "
mesh p { grid [pb = 1]; threads pt = 32; }
mesh c { grid [cb = 1]; threads ct = 32; }
kernel post(y: gmem<i32[32]>, s: sem<[1]>, t: sem<[1]>) {
  signal(s[0], 2);
  signal(t[0], 1);
}
kernel take(y: gmem<i32[32]>, s: sem<[1]>, t: sem<[1]>) {
  wait(t[0], 1);
  wait(s[0], 1);
  wait_nodec(s[0], 1);
  let v: i32 = read(s[0]);
  y[axis_index(ct)] = v;
}
map m {
  programs [p: post, c: take];
  outputs [y: gmem<i32[32]>];
  scratch [s: sem<[1]>, t: sem<[1]>];
}
";
    let (module, _) = mpmd_core::text::parse(source).unwrap();
    let plan = mpmd_core::plan::lower(&validated(&module), "m").unwrap();
    let src = emit(&plan, Mode::Fast).unwrap();
    // The semaphore and the kind of every wait, in order (the property under
    // test, which a snapshot would bury in the whole kernel).
    let waits: Vec<(&str, &str)> = src
        .split("mpmd_sem_wait(&")
        .skip(1)
        .map(|call| {
            let arguments: Vec<&str> = call.split(',').map(str::trim).collect();
            (arguments[0].split('[').next().unwrap(), arguments[2])
        })
        .collect();
    // Buffers: y = 0, s = 1, t = 2.
    assert_eq!(
        waits,
        [
            ("b2_t", "MPMD_WAIT_OPTIMISTIC"),
            ("b1_s", "MPMD_WAIT_EXACT"),
            ("b1_s", "MPMD_WAIT_NODEC")
        ]
    );
}

/// examples/pipeline.mpmd: three programs of 64 threads chained by semaphores.
fn even_pipeline() -> mpmd_core::plan::LaunchPlan {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/pipeline.mpmd"
    ))
    .unwrap();
    let (module, _) = mpmd_core::text::parse(&source).unwrap();
    mpmd_core::plan::lower(&validated(&module), "pipeline").unwrap()
}

/// Every operator, cast and math function through the exact numerics
/// (prelude helpers for i32 arithmetic, shifts and saturating casts; `fmodf`,
/// `fmaf`; bit-exact literals), as a snapshot.
#[test]
fn generated_code_uses_the_exact_numerics() {
    let plan = plan_of(&all_expressions());
    snapshot(
        "all_expressions",
        &plan,
        Mode::Fast,
        BlockSchedule::BlockIndex,
    );
}

/// The snapshot shows: blocks take blockIdx as their ticket (no program
/// waits); `x`, never written, is read through the read-only cache, `y` is a
/// plain pointer; stores are bounded to their ref in fast mode too, loads
/// read in place.
#[test]
fn scale_kernel_reads_like_the_program() {
    let plan = plan_of(&scale());
    assert_eq!(
        BlockSchedule::for_plan(&plan, true),
        BlockSchedule::BlockIndex
    );
    snapshot("scale", &plan, Mode::Fast, BlockSchedule::BlockIndex);
}

#[test]
fn failed_nvrtc_compile_shows_the_offending_line() {
    require_tools();
    let source = "extern \"C\" __global__ void k(float* y) {\n  y[0] = undefined_name + 1.0f;\n}\n";
    let err = compile_ptx(
        source,
        &CompileOptions {
            use_cache: false,
            ..CompileOptions::default()
        },
    )
    .unwrap_err();
    let CompileError::Compile { program, log } = &err else {
        panic!("expected a compile error, got {err:?}");
    };
    assert_eq!(program, "mpmd.cu");
    assert!(
        log.contains("mpmd.cu(2): error: identifier \"undefined_name\" is undefined"),
        "{log}"
    );
    assert!(
        log.contains("     2 |   y[0] = undefined_name + 1.0f;"),
        "{log}"
    );
    assert!(err
        .to_string()
        .starts_with("NVRTC failed to compile `mpmd.cu`:\n"));
}

#[test]
fn nvrtc_version_is_reported() {
    require_tools();
    let (major, _minor) = mpmd_cuda::nvrtc_version().unwrap();
    assert!(major >= 12, "NVRTC {major}");
}

#[test]
#[ignore = "prints generated sources for review"]
fn dump_sources() {
    for (name, module) in corpus() {
        let plan = plan_of(&module);
        for mode in [Mode::Fast, Mode::Checked] {
            let src = emit(&plan, mode).unwrap();
            std::fs::write(format!("/tmp/mpmd-{name}-{mode:?}.cu"), src).unwrap();
        }
    }
}

#[test]
fn fast_math_maps_compile_with_fast_math() {
    require_tools();
    let mut module = scale();
    module.maps[0].fast_math = true;
    let report = check_plan(&plan_of(&module), Mode::Fast).unwrap();
    assert!(report
        .nvrtc_options
        .contains(&"--use_fast_math".to_string()));
    assert!(!report.nvrtc_options.contains(&"--fmad=false".to_string()));
    let exact = check_plan(&plan_of(&scale()), Mode::Fast).unwrap();
    assert!(exact.nvrtc_options.contains(&"--fmad=false".to_string()));
}

/// Loops are emitted loads-first only when that cannot change a result.
#[test]
fn loads_first_only_where_no_loaded_buffer_is_stored() {
    let emitted = |body: &str, extra: &str| {
        let source = format!(
            "
mesh m {{ grid [b = 1]; threads t = 32; }}
kernel k(x: gmem<f32[256]>, y: gmem<f32[256]>) {{
  {body}
}}
map m1 {{
  programs [m: k];
  inputs [x: gmem<f32[256]>];
  outputs [y: gmem<f32[256]>];
  {extra}
}}
"
        );
        let (module, _) = mpmd_core::text::parse(&source).unwrap();
        let plan = mpmd_core::plan::lower(&validated(&module), "m1").unwrap();
        emit(&plan, Mode::Fast).unwrap()
    };
    // Whether a loop is emitted loads-first is the property under test; the
    // comment the emitter writes above such a loop says so in one line.
    let batched = |src: &str| src.contains("// Every load of the loop is issued before");
    let copy = "for j: u32 in 0u..8u { let i: u32 = j * 32u + axis_index(t); y[i] = x[i]; }";
    assert!(batched(&emitted(copy, "")));
    // Aliased: x and y are one buffer, so a later load could read an earlier store.
    assert!(!batched(&emitted(copy, "aliases [x -> y];")));
    // Loads and stores of one buffer.
    assert!(!batched(&emitted(
        "for j: u32 in 0u..8u { let i: u32 = j * 32u + axis_index(t); y[i] = y[255u - i] + x[i]; }",
        ""
    )));
    // A var carried between iterations, a trip count over the limit, bounds
    // that are not literals.
    assert!(!batched(&emitted(
        "var s: f32 = 0.0; for j: u32 in 0u..8u { s = s + x[j]; } y[axis_index(t)] = s;",
        ""
    )));
    assert!(!batched(&emitted(
        "for j: u32 in 0u..17u { y[j] = x[j]; }",
        ""
    )));
    assert!(!batched(&emitted(
        "for j: u32 in axis_index(b)..8u { y[j] = x[j]; }",
        ""
    )));
}

/// The hand-written kernels `cuda-bench` times beside the generated ones
/// compile for sm_90 without spills (the bench only runs on a GPU machine,
/// where a compile error would cost a device run).
#[test]
fn benchmark_reference_kernels_compile() {
    require_tools();
    let source = include_str!("../src/bin/cuda-bench/reference_kernels.cu");
    let ptx = compile_ptx(source, &CompileOptions::default()).unwrap();
    let report = mpmd_cuda::assemble(&ptx, 90).unwrap();
    for name in [
        "ref_copy_scalar8",
        "ref_copy_vec4x2",
        "ref_copy_vec4x4",
        "ref_reduce_scalar16",
        "ref_reduce_vec4x4",
    ] {
        let kernel = report
            .kernel(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(
            (kernel.spill_store_bytes, kernel.spill_load_bytes),
            (0, 0),
            "{name}"
        );
    }
}

/// Programs with fewer threads than the block still walk when their thread
/// counts are warp multiples: their threads meet at named barrier 1, the
/// block's other threads skip to the end of the logical block, and a stop
/// jumps there so that all threads leave together. 48 threads keep tickets.
#[test]
fn uneven_warp_multiples_walk_with_named_barriers() {
    require_tools();
    let plan = plan_of(&pipeline_in_warps());
    assert_eq!(
        BlockSchedule::for_plan(&plan, true),
        BlockSchedule::ResidentWalk
    );
    assert_eq!(
        BlockSchedule::for_plan(&plan_of(&pipeline()), true),
        BlockSchedule::Tickets
    );
    for mode in [Mode::Fast, Mode::Checked] {
        // The snapshots show: the producer (32 threads) and the consumer (96)
        // run under `if (threadIdx.x < n)`, the finisher on the whole block
        // of 128; the consumer's barrier, wait and signal use named barrier
        // `mpmd_bar_sync(96u)`; a stop jumps to `mpmd_next_logical_block`,
        // where every thread meets before the next logical block.
        let suffix = match mode {
            Mode::Fast => "",
            Mode::Checked => ".checked",
        };
        snapshot(
            &format!("pipeline_in_warps.walk{suffix}"),
            &plan,
            mode,
            BlockSchedule::ResidentWalk,
        );
        let module = emit_module_with(&plan, mode, BlockSchedule::ResidentWalk).unwrap();
        let src = &module.source;
        let ptx = compile_ptx(src, &CompileOptions::default()).unwrap();
        let report = mpmd_cuda::assemble(&ptx, 90).unwrap();
        let kernel = report.kernel(&module.kernel_name).unwrap();
        assert_eq!(
            (kernel.spill_store_bytes, kernel.spill_load_bytes),
            (0, 0),
            "{mode:?}"
        );
    }
}

/// The backend refuses devices NVRTC cannot compile for (CUDA 13 dropped
/// everything before Turing) with the supported list, asked of NVRTC.
#[test]
fn nvrtc_lists_the_architectures_it_compiles_for() {
    require_tools();
    let archs = mpmd_cuda::supported_archs().unwrap();
    assert!(archs.contains(&75) && archs.contains(&90), "{archs:?}");
    assert!(!archs.contains(&70), "{archs:?}");
    assert!(archs.windows(2).all(|w| w[0] < w[1]), "{archs:?}");
}

/// The generated code (semaphores through PTX release/acquire atomics,
/// `__nanosleep`, named barriers) compiles for the oldest architecture
/// NVRTC 13 supports, sm_75 (Turing workstation GPUs), and the newest it
/// lists, in both modes and every schedule, without spills.
#[test]
fn the_corpus_compiles_for_the_oldest_and_newest_supported_architectures() {
    require_tools();
    let archs = mpmd_cuda::supported_archs().unwrap();
    let (oldest, newest) = (archs[0], archs[archs.len() - 1]);
    let mut programs = corpus();
    programs.push(("pipeline_in_warps", pipeline_in_warps()));
    for arch in [oldest, newest] {
        let options = CompileOptions {
            arch,
            ..CompileOptions::default()
        };
        for (name, module) in &programs {
            let plan = plan_of(module);
            for schedule in [BlockSchedule::for_plan(&plan, true), BlockSchedule::Tickets] {
                for mode in [Mode::Fast, Mode::Checked] {
                    let emitted = emit_module_with(&plan, mode, schedule).unwrap();
                    let what = format!("{name} {schedule:?} {mode:?}");
                    assemble_without_spills(&emitted, &options, &what);
                }
            }
        }
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
