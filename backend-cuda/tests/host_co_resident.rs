//! `cuda-host` runs the plans MPMD exists for (a semaphore cycle, a program
//! that waits on its own blocks) with every block co-resident, as a
//! cooperative grid runs on a GPU: each corpus case of that kind gives the
//! interpreter's outputs exactly, or its error. Needs a C++17 compiler.

// RunError is the shared error type of every backend.
#![allow(clippy::result_large_err)]

mod common;

use common::corpus_text;
use mpmd_core::inputs::{call_args, Generation};
use mpmd_core::interp::Interpreter;
use mpmd_core::{Backend, CallArgs, CallOutputs, Mode, RunError, RunOptions};
use mpmd_cuda::{
    co_resident, emit_module, HostCudaBackend, HostOptions, CO_RESIDENT_BLOCKS, CO_RESIDENT_THREADS,
};

/// Every call of corpus case `name` on `backend` (the case's generated inputs,
/// seed 1): each call's outputs, or the first error.
fn run_case(
    name: &str,
    backend: &mut dyn Backend,
    mode: Mode,
) -> Result<Vec<CallOutputs>, RunError> {
    let file = mpmd_core::text::parse_file(&corpus_text(name)).unwrap();
    let module = file.module;
    let case = file.case.unwrap();
    let generation = Generation::with_defaults(1).with_generators(&case.generators);
    let all: Vec<CallArgs> = call_args(&module, &generation).unwrap();
    let mut outputs = Vec::new();
    for (call, args) in module.effective_calls().iter().zip(&all) {
        let plan = mpmd_core::plan::lower(&validated(&module), &call.map).unwrap();
        outputs.push(backend.run(&plan, args, &RunOptions { mode, seed: 1 })?);
    }
    Ok(outputs)
}

fn plan_of_case(name: &str) -> mpmd_core::plan::LaunchPlan {
    common::corpus_plan(name)
}

/// The cases whose plans need co-resident blocks, with what makes them so.
const CO_RESIDENT_CASES: [&str; 5] = [
    // A cycle: two pairs of blocks that signal each other.
    "sem_bidirectional_handshake",
    // Every block waits on every other (a wait on later blocks of its own program).
    "sem_all_to_all_barrier",
    // Waits on earlier blocks of its own program (a chained scan, a look-back).
    "sem_chained_scan_lower_blocks",
    "user_decoupled_lookback_scan",
    "pallas_chained_scan",
];

#[test]
fn plans_that_need_co_resident_blocks_run_them_and_agree_with_the_interpreter() {
    for name in CO_RESIDENT_CASES {
        let plan = plan_of_case(name);
        assert!(plan.needs_co_residency(), "{name}");
        let module = emit_module(&plan, Mode::Fast).unwrap();
        assert_eq!(co_resident(&plan, &module), Ok(true), "{name}");
        for mode in [Mode::Fast, Mode::Checked] {
            let expected = run_case(name, &mut Interpreter::new(), mode)
                .unwrap_or_else(|e| panic!("{name} on the interpreter: {e}"));
            let got = run_case(name, &mut HostCudaBackend::new(), mode)
                .unwrap_or_else(|e| panic!("{name} on cuda-host ({mode:?}): {e}"));
            assert_eq!(got, expected, "{name} ({mode:?})");
        }
    }
}

#[test]
fn a_cycle_nothing_can_meet_is_still_a_deadlock() {
    let name = "fail_deadlock_cycle";
    let plan = plan_of_case(name);
    assert!(plan.graph.has_cycle);
    let mut backend = HostCudaBackend::new();
    backend.options = HostOptions {
        co_resident_wait_timeout_ns: 200_000_000,
        ..HostOptions::default()
    };
    let started = std::time::Instant::now();
    let error = run_case(name, &mut backend, Mode::Fast).unwrap_err();
    // The interpreter proves the deadlock; a GPU (and cuda-host) sees a wait
    // that timed out on a semaphore a program does signal, which the
    // harness takes for the deadlock the case expects.
    assert!(matches!(
        run_case(name, &mut Interpreter::new(), Mode::Fast),
        Err(RunError::Deadlock { .. })
    ));
    // Either block may time out first: each waits on the other.
    let RunError::WaitTimeout { site, semaphore } = &error else {
        panic!("{error:?}")
    };
    assert!(
        [("ka", "s[0]"), ("kb", "s[1]")].contains(&(site.kernel.as_str(), semaphore.as_str())),
        "{error:?}"
    );
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
}

/// A grid bigger than the host's co-resident limit: a cycle is refused with
/// the numbers; waits on its own blocks that only look back still run, one
/// block after another.
#[test]
fn a_grid_too_big_to_co_reside_is_refused_with_the_numbers() {
    let plan = plan_of_case("sem_bidirectional_handshake");
    let mut module = emit_module(&plan, Mode::Fast).unwrap();
    module.total_blocks = CO_RESIDENT_BLOCKS + 1;
    let threads = (CO_RESIDENT_BLOCKS + 1) * u64::from(module.block_dim);
    assert_eq!(
        co_resident(&plan, &module),
        Err(RunError::Refused {
            reason: format!(
                "the map needs all its blocks resident at once (a semaphore cycle), and cuda-host runs a co-resident grid on one host thread per CUDA thread: this one needs {threads} threads ({} blocks of {}), its limit is {CO_RESIDENT_THREADS} threads in at most {CO_RESIDENT_BLOCKS} blocks",
                CO_RESIDENT_BLOCKS + 1,
                module.block_dim
            )
        })
    );
    let scan = plan_of_case("sem_chained_scan_lower_blocks");
    let mut module = emit_module(&scan, Mode::Fast).unwrap();
    module.total_blocks = CO_RESIDENT_BLOCKS + 1;
    assert_eq!(co_resident(&scan, &module), Ok(false));
}

/// Co-resident blocks are processes on one shared memory: a resident written
/// by one call is there for the next, and the outputs are whole.
#[test]
fn co_resident_runs_keep_residents_across_calls() {
    let plan = plan_of_case("sem_all_to_all_barrier");
    let mut backend = HostCudaBackend::new();
    let mut interp = Interpreter::new();
    let file = mpmd_core::text::parse_file(&corpus_text("sem_all_to_all_barrier")).unwrap();
    let case = file.case.unwrap();
    let generation = Generation::with_defaults(7).with_generators(&case.generators);
    let args = call_args(&file.module, &generation).unwrap();
    for round in 0..3 {
        let options = RunOptions {
            mode: Mode::Checked,
            seed: round,
        };
        let expected = interp.run(&plan, &args[0], &options).unwrap();
        let got = backend.run(&plan, &args[0], &options).unwrap();
        assert_eq!(got, expected, "round {round}");
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
