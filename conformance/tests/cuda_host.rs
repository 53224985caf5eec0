//! The `cuda-host` column: the emitted CUDA C run on CPU threads, judged
//! against the interpreter like any backend in fast and checked mode, next
//! to `cuda` (which, without a GPU, only compiles). Plans that need
//! co-resident blocks (a cycle, all-to-all) run with every block at once and
//! pass, a cycle nothing can meet included; an out-of-bounds case is caught
//! by the CUDA text's own checked mode.
#![cfg(feature = "cuda")]

#[path = "../../test-support/needs.rs"]
mod needs;

use mpmd_conformance::analysis::BackendId;
use mpmd_conformance::backends::{probe, Availability};
use mpmd_conformance::case::{load_dir, matches_filter};
use mpmd_conformance::report::{render_json, render_text};
use mpmd_conformance::run::{run_case, RunConfig, Status};

const CASES: [&str; 6] = [
    "fail_deadlock_cycle",
    "fail_out_of_bounds_checked",
    "i32_arith_edges",
    "sem_all_to_all_barrier",
    "sem_bidirectional_handshake",
    "sem_producer_consumer",
];

#[test]
fn cuda_host_is_a_column_judged_against_the_interpreter() {
    let cases: Vec<_> = load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
        .expect("the corpus directory is readable")
        .into_iter()
        .filter(|c| CASES.iter().any(|p| matches_filter(&c.name, p)))
        .collect();
    assert_eq!(cases.len(), CASES.len());
    let backends = vec![BackendId::Interp, BackendId::Cuda, BackendId::CudaHost];
    let env = probe(&backends);
    if let Availability::Unavailable(why) = &env.cuda_host {
        needs::setup::<(), _>("the host C++ compiler behind cuda-host", Err(why));
    }
    assert!(
        env.header.iter().any(|(k, _)| k == "cuda-host compiler"),
        "{:?}",
        env.header
    );
    let config = RunConfig {
        backends: backends.clone(),
        seed: 1,
        extra_schedules: 1,
    };
    let results: Vec<_> = cases.iter().map(|c| run_case(c, &config, &env)).collect();
    let host = |name: &str| {
        results
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.results[&BackendId::CudaHost].clone())
            .unwrap()
    };
    assert_eq!(host("i32_arith_edges"), Status::Pass);
    assert_eq!(host("sem_producer_consumer"), Status::Pass);
    // Checked mode ran the CUDA text's bounds check, which reported the
    // expected class (fast mode, where it is undefined, is a skip).
    assert_eq!(host("fail_out_of_bounds_checked"), Status::Pass);
    // Co-resident blocks: a cycle, every block waiting on every other, and
    // a cycle nothing can meet (a wait that times out, as on a GPU).
    assert_eq!(host("sem_bidirectional_handshake"), Status::Pass);
    assert_eq!(host("sem_all_to_all_barrier"), Status::Pass);
    assert_eq!(host("fail_deadlock_cycle"), Status::Pass);
    for r in &results {
        assert!(r.elapsed.contains_key(&BackendId::CudaHost), "{}", r.name);
    }

    let text = render_text(&results, &backends, 1);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["case", "interp", "cuda", "cuda-host"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("cuda-host: 6 passed, 0 failed, 0 skipped in ")),
        "{text}"
    );
    let json = render_json(&results, &env, 1);
    assert_eq!(json["backends"]["cuda-host"]["passed"], 6);
    assert_eq!(
        json["cases"][1]["results"]["cuda-host"]["status"], "pass",
        "{json}"
    );
}

/// Issue 27: a deadlock names the semaphore element it waits on with
/// `mpmd_core::backend::element_text` on every backend (`s[1]`, and
/// `filled@[1][1]` for an instance of an owned semaphore): the
/// interpreter, wgpu and cuda-host report the same element for the same
/// deadlocking program.
#[cfg(feature = "wgpu")]
#[test]
fn a_deadlock_names_its_semaphore_element_alike_on_every_backend() {
    use mpmd_core::backend::{Backend, RunOptions};
    use mpmd_core::host::CallArgs;
    let programs = [
        (
            "mesh m { grid [b = 2]; threads t = 4; }
kernel k(y: gmem<u32[2]>, s: sem<[2]>) {
  wait(s[1], 1);
  y[axis_index(b)] = 1u;
}
map k { programs [m: k]; outputs [y: gmem<u32[2]>]; scratch [s: sem<[2]>]; }",
            "`s[1]`",
        ),
        (
            "mesh m { grid [b = 2]; threads t = 4; }
kernel k(y: gmem<u32[2]>, filled: sem<[2]> @ m) {
  if axis_index(b) == 1u { wait(filled[1], 1); }
  y[axis_index(b)] = 1u;
}
map k { programs [m: k]; outputs [y: gmem<u32[2]>]; scratch [filled: sem<[2]> @ m]; }",
            "`filled@[1][1]`",
        ),
    ];
    for (src, element) in programs {
        let (module, _) = mpmd_core::text::parse(src).expect("parses");
        let valid = mpmd_core::validate::validate(&module, &Default::default()).expect("valid");
        let plan = mpmd_core::plan::lower(&valid, "k").expect("lowers");
        let mut backends: Vec<(&str, Box<dyn Backend>)> = vec![
            ("interp", Box::new(mpmd_core::interp::Interpreter::new())),
            (
                "wgpu",
                Box::new(needs::setup(
                    "a WebGPU adapter (Mesa's lavapipe)",
                    mpmd_wgpu::WgpuBackend::new(Default::default()),
                )),
            ),
            ("cuda-host", Box::new(mpmd_cuda::HostCudaBackend::new())),
        ];
        for (name, backend) in &mut backends {
            let err = backend
                .run(&plan, &CallArgs::default(), &RunOptions::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(element), "{name} names {element}: {err}");
        }
    }
}
