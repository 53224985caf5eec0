//! Block collectives in the CUDA output: the votes are `__syncthreads_or`,
//! `_and` and `_count` (PTX `bar.red`) where the program fills the block,
//! `bar.red.popc` at the named barrier of a smaller program inside the
//! resident walk, and a count in shared memory with tickets (after the
//! other threads returned); the broadcast goes through `mpmd_value`. Every
//! corpus case assembles for sm_75 and sm_90 in both modes (without spills
//! in fast mode); cuda-host runs a smaller program in the resident walk and
//! with tickets against the interpreter, and reports a source past the
//! block in checked mode. (The corpus cases run on cuda-host in conformance
//! too: `cargo xtask conformance --filter block_ --backends cuda-host`.)

mod common;
#[path = "support/emulate.rs"]
mod emulate;

use std::collections::BTreeMap;

use common::{assemble_without_spills, corpus_text, for_arch, require_tools, text_plan};
use emulate::emulate;
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::{CallArgs, HostTensor, Mode, RunOptions};
use mpmd_cuda::{emit_module, BlockSchedule};

const CASES: [&str; 4] = [
    "block_votes_any_all_count",
    "block_broadcast_every_type",
    "block_persistent_work_queue",
    "block_collectives_in_smaller_program",
];

#[test]
fn block_cases_assemble_for_sm_75_and_sm_90_with_barrier_reductions() {
    require_tools();
    for name in CASES {
        let plan = text_plan(&corpus_text(name));
        for mode in [Mode::Fast, Mode::Checked] {
            let emitted = emit_module(&plan, mode).unwrap();
            for arch in [75, 90] {
                let what = format!("{name} {mode:?}");
                // Checked mode assembles only: its noinline checks are ABI
                // calls, and the smaller program's three vote counts live
                // across its checked stores spill 4 bytes on sm_90.
                let ptx = match mode {
                    Mode::Fast => assemble_without_spills(&emitted, &for_arch(arch), &what).0,
                    Mode::Checked => {
                        let ptx = mpmd_cuda::compile_ptx(&emitted.source, &for_arch(arch))
                            .unwrap_or_else(|e| panic!("{what} sm_{arch}: {e}"));
                        mpmd_cuda::assemble(&ptx, arch)
                            .unwrap_or_else(|e| panic!("{what} sm_{arch}: {e}"));
                        ptx
                    }
                };
                let reduces = ptx.text.contains("bar.red.popc");
                let votes = name == "block_votes_any_all_count";
                let smaller = name == "block_collectives_in_smaller_program";
                assert_eq!(reduces, votes || smaller, "{what} sm_{arch}: bar.red.popc");
                if votes {
                    assert!(ptx.text.contains("bar.red.or") && ptx.text.contains("bar.red.and"));
                }
            }
        }
    }
}

/// `block_collectives_in_smaller_program` with `threads` consumer threads.
fn smaller_program(threads: u32) -> String {
    corpus_text("block_collectives_in_smaller_program")
        .replace("threads t = 64;", &format!("threads t = {threads};"))
        .replace(
            "axis_index(cb) * 64u",
            &format!("axis_index(cb) * {threads}u"),
        )
        .replace("n % 64u", &format!("n % {threads}u"))
}

fn interpreted(source: &str, x: &[u32]) -> Vec<u32> {
    let (module, _) = mpmd_core::text::parse(source).unwrap();
    let args = CallArgs {
        inputs: [("x".to_string(), HostTensor::from_u32(vec![128], x))].into(),
        scalars: Default::default(),
    };
    let options = InterpOptions {
        run: RunOptions {
            mode: Mode::Checked,
            seed: 3,
        },
        ..Default::default()
    };
    let out = Interpreter::new()
        .call(&validated(&module), "smaller", &args, &options)
        .unwrap();
    out.outputs["y"].to_u32()
}

fn y_of(plan: &LaunchPlan, words: &[Vec<u32>]) -> Vec<u32> {
    let index = plan.operand("y").and_then(|o| o.buffer).unwrap();
    words[index.index()][..plan.buffer(index).len as usize].to_vec()
}

#[test]
fn votes_and_broadcasts_of_a_smaller_program_agree_with_the_interpreter_on_each_schedule() {
    let x: Vec<u32> = (0..128u32).map(|i| (i * 7919) % 1000).collect();
    let inputs = BTreeMap::from([("x", x.clone())]);
    // 64 threads: the resident walk's named barriers; 48 (not whole warps):
    // tickets, the other threads returned.
    for (threads, schedule) in [
        (64, BlockSchedule::ResidentWalk),
        (48, BlockSchedule::Tickets),
    ] {
        let source = smaller_program(threads);
        let plan = text_plan(&source);
        assert_eq!(BlockSchedule::for_plan(&plan, true), schedule);
        let source_text = emit_module(&plan, Mode::Fast).unwrap().source;
        assert!(
            !source_text.contains("__syncthreads_count((int)"),
            "{threads} threads"
        );
        let named_barrier = source_text.contains("mpmd_bar_count(64u, ");
        assert_eq!(named_barrier, schedule == BlockSchedule::ResidentWalk);
        let want = interpreted(&source, &x);
        for mode in [Mode::Fast, Mode::Checked] {
            let out = emulate(&plan, mode, &inputs, &BTreeMap::new(), 1_000_000_000);
            assert_eq!(out.recorded, None, "{threads} {mode:?}");
            // Each quarter of y holds one result per consumer thread.
            let y = y_of(&plan, &out.buffers);
            for quarter in 0..4 {
                let written = quarter * 128..quarter * 128 + 2 * threads as usize;
                assert_eq!(
                    y[written.clone()],
                    want[written],
                    "{threads} threads, {mode:?}"
                );
            }
        }
    }
}

#[test]
fn votes_of_a_program_that_fills_the_block_are_barrier_reductions() {
    let plan = text_plan(&corpus_text("block_votes_any_all_count"));
    let source = emit_module(&plan, Mode::Fast).unwrap().source;
    for vote in [
        "__syncthreads_or(",
        "__syncthreads_and(",
        "__syncthreads_count(",
    ] {
        assert!(source.contains(vote), "{vote}");
    }
}

#[test]
fn checked_mode_reports_a_broadcast_source_past_the_block() {
    let plan = text_plan(&corpus_text("fail_block_broadcast_source_out_of_range"));
    let inputs = BTreeMap::from([("x", (0..64u32).collect::<Vec<_>>())]);
    let scalars = BTreeMap::from([("src", mpmd_core::ir::Literal::U32(64))]);
    let out = emulate(&plan, Mode::Checked, &inputs, &scalars, 1_000_000_000);
    assert_eq!(
        out.recorded.as_ref().map(|e| e.to_string()),
        Some("out-of-bounds access at program 0 (k), block 0, thread 0: `block_broadcast source thread` index [64] (shape [64])".to_string())
    );
    // Fast mode checks nothing: the run completes.
    let out = emulate(&plan, Mode::Fast, &inputs, &scalars, 1_000_000_000);
    assert_eq!(out.recorded, None);
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
