//! The `cuda~wgpu` triage column over a few corpus cases, through the same
//! path as `cargo xtask conformance --filter ...`: every run case gets a
//! triage cell, a reject case none. Without a GPU (CUDA compiles only) the
//! cell is a skip with that reason.

use mpmd_conformance::analysis::BackendId;
use mpmd_conformance::backends::{probe, Availability};
use mpmd_conformance::case::{load_dir, matches_filter};
use mpmd_conformance::report::{render_json, render_text};
use mpmd_conformance::run::{run_case, RunConfig, Status, TRIAGE};

const CASES: [&str; 3] = [
    "bitwise_and_compare",
    "i32_arith_edges",
    "reject_e0001_duplicate_mesh",
];

#[test]
fn the_report_has_a_triage_column_for_run_cases() {
    let cases: Vec<_> = load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
        .expect("the corpus directory is readable")
        .into_iter()
        .filter(|c| CASES.iter().any(|p| matches_filter(&c.name, p)))
        .collect();
    assert_eq!(cases.len(), CASES.len());
    let backends = BackendId::ALL.to_vec();
    let env = probe(&backends);
    let config = RunConfig {
        backends: backends.clone(),
        seed: 1,
        extra_schedules: 2,
    };
    let results: Vec<_> = cases.iter().map(|c| run_case(c, &config, &env)).collect();

    // What the cell must say depends on what this machine can run.
    let expected = match (&env.cuda, &env.wgpu) {
        (Availability::CompileOnly(_), _) => Status::Skip("cuda compiled only (no GPU)".into()),
        (Availability::Unavailable(why), _) => Status::Skip(format!("cuda not run: {why}")),
        (Availability::Runs, Availability::Runs) => Status::Pass,
        (Availability::Runs, Availability::Unavailable(why)) => {
            Status::Skip(format!("wgpu not run: {why}"))
        }
        (Availability::Runs, Availability::CompileOnly(_)) => {
            unreachable!("wgpu never compiles only")
        }
    };
    for r in &results {
        let want = (!r.name.starts_with("reject_")).then(|| expected.clone());
        assert_eq!(r.triage, want, "{}", r.name);
        // Triage never changes a backend's own verdict.
        assert!(
            r.results.values().all(|s| !matches!(s, Status::Fail(_))),
            "{}: {:?}",
            r.name,
            r.results
        );
    }

    let text = render_text(&results, &backends, 1);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["case", "interp", "wgpu", "cuda", "cuda-host", "cuda~wgpu"]
    );
    for r in &results {
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with(&r.name))
            .unwrap()
            .split_whitespace()
            .collect();
        let cell = r.triage.as_ref().map_or("-", |s| s.keyword());
        assert_eq!(row.last(), Some(&cell), "{}", r.name);
    }
    if let Status::Skip(reason) = &expected {
        assert!(
            text.contains(&format!("  cuda~wgpu: {reason} (2 cases)\n")),
            "{text}"
        );
    }
    let lines: Vec<&str> = text.lines().collect();
    let agreeing = usize::from(expected == Status::Pass) * 2;
    assert!(lines.contains(
        &format!(
            "triage: {agreeing} agree, 0 disagree, {} not compared",
            2 - agreeing
        )
        .as_str()
    ));

    let json = render_json(&results, &env, 1);
    for (i, r) in results.iter().enumerate() {
        let cell = &json["cases"][i]["results"][TRIAGE];
        match &r.triage {
            Some(Status::Skip(reason)) => {
                assert_eq!(cell["status"], "skip");
                assert_eq!(cell["reason"], reason.as_str());
            }
            Some(s) => assert_eq!(cell["status"], s.keyword()),
            None => assert!(cell.is_null(), "{}: {cell}", r.name),
        }
    }
}
