//! The report: a table of case × backend, failure details with a command
//! that reproduces each alone, a summary line, and the JSON form.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::analysis::BackendId;
use crate::backends::Environment;
use crate::run::{CaseResult, Status, TRIAGE};

/// Counts over every (case, backend) cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub compiled: usize,
    pub unverified: usize,
}

impl Summary {
    pub fn of(results: &[CaseResult]) -> Summary {
        let mut s = Summary::default();
        for status in results.iter().flat_map(|r| r.results.values()) {
            match status {
                Status::Pass => s.passed += 1,
                Status::Fail(_) => s.failed += 1,
                Status::Skip(_) => s.skipped += 1,
                Status::Compiled => s.compiled += 1,
                Status::Unverified(_) => s.unverified += 1,
            }
        }
        s
    }

    /// The summary line: `N passed, N failed, N skipped`.
    pub fn line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// Counts over the triage (`cuda~wgpu`) cells, which the summary line leaves out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TriageSummary {
    pub agree: usize,
    pub disagree: usize,
    pub not_compared: usize,
}

impl TriageSummary {
    /// `None` when no case has a triage cell (not both GPU backends selected).
    pub fn of(results: &[CaseResult]) -> Option<TriageSummary> {
        let mut s = TriageSummary::default();
        let mut any = false;
        for status in results.iter().filter_map(|r| r.triage.as_ref()) {
            any = true;
            match status {
                Status::Pass => s.agree += 1,
                Status::Fail(_) => s.disagree += 1,
                _ => s.not_compared += 1,
            }
        }
        any.then_some(s)
    }

    /// `triage: N agree, N disagree, N not compared`.
    pub fn line(&self) -> String {
        format!(
            "triage: {} agree, {} disagree, {} not compared",
            self.agree, self.disagree, self.not_compared
        )
    }
}

/// The command that reruns a case's triage alone.
pub fn reproduce_triage_command(case: &str, seed: u64) -> String {
    format!("cargo xtask conformance --filter {case} --seed {seed} --backends wgpu,cuda")
}

pub fn reproduce_command(case: &str, seed: u64, backend: BackendId) -> String {
    format!(
        "cargo xtask conformance --filter {case} --seed {seed} --backends {}",
        backend.name()
    )
}

/// The header: seed, backends and the environment of every backend.
pub fn header(env: &Environment, seed: u64, backends: &[BackendId], cases: usize) -> String {
    let mut out = String::new();
    let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    let _ = writeln!(
        out,
        "mpmd conformance: {cases} cases, seed {seed}, backends {}",
        names.join(",")
    );
    for (k, v) in &env.header {
        let _ = writeln!(out, "  {k}: {v}");
    }
    out
}

/// The table, failure details, skip reasons and the summary line.
pub fn render_text(results: &[CaseResult], backends: &[BackendId], seed: u64) -> String {
    let mut out = String::new();
    let width = results
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let triage = TriageSummary::of(results);
    let _ = write!(out, "{:<width$}", "case");
    for b in backends {
        let _ = write!(out, "  {:<10}", b.name());
    }
    if triage.is_some() {
        let _ = write!(out, "  {TRIAGE:<10}");
    }
    out.push('\n');
    for r in results {
        let _ = write!(out, "{:<width$}", r.name);
        for b in backends {
            let cell = r.results.get(b).map(|s| s.keyword()).unwrap_or("-");
            let _ = write!(out, "  {cell:<10}");
        }
        if triage.is_some() {
            let cell = r.triage.as_ref().map(|s| s.keyword()).unwrap_or("-");
            let _ = write!(out, "  {cell:<10}");
        }
        out.push('\n');
    }
    let mut failures = String::new();
    let mut skips: BTreeMap<(BackendId, String), usize> = BTreeMap::new();
    let mut unverified: BTreeMap<(BackendId, String), usize> = BTreeMap::new();
    for r in results {
        for (b, s) in &r.results {
            match s {
                Status::Fail(detail) => {
                    let _ = writeln!(failures, "FAIL {} on {}: {}", r.name, b.name(), detail);
                    let _ = writeln!(
                        failures,
                        "  reproduce: {}",
                        reproduce_command(&r.name, seed, *b)
                    );
                }
                Status::Skip(reason) => *skips.entry((*b, reason.clone())).or_default() += 1,
                Status::Unverified(reason) => {
                    *unverified.entry((*b, reason.clone())).or_default() += 1
                }
                _ => {}
            }
        }
    }
    let mut disagreements = String::new();
    let mut triage_skips: BTreeMap<String, usize> = BTreeMap::new();
    for r in results {
        match &r.triage {
            Some(Status::Fail(detail)) => {
                let _ = writeln!(
                    disagreements,
                    "DISAGREE {} on {TRIAGE} (triage): {detail}",
                    r.name
                );
                let _ = writeln!(
                    disagreements,
                    "  reproduce: {}",
                    reproduce_triage_command(&r.name, seed)
                );
            }
            Some(Status::Skip(reason)) => *triage_skips.entry(reason.clone()).or_default() += 1,
            _ => {}
        }
    }
    if !failures.is_empty() {
        out.push('\n');
        out.push_str(&failures);
    }
    if !disagreements.is_empty() {
        out.push('\n');
        out.push_str(&disagreements);
    }
    if !skips.is_empty() || !triage_skips.is_empty() {
        out.push_str("\nskipped:\n");
        for ((b, reason), n) in &skips {
            let _ = writeln!(
                out,
                "  {}: {reason} ({n} case{})",
                b.name(),
                if *n == 1 { "" } else { "s" }
            );
        }
        for (reason, n) in &triage_skips {
            let plural = if *n == 1 { "" } else { "s" };
            let _ = writeln!(out, "  {TRIAGE}: {reason} ({n} case{plural})");
        }
    }
    if !unverified.is_empty() {
        out.push_str("\nunverified:\n");
        for ((b, reason), n) in &unverified {
            let _ = writeln!(
                out,
                "  {}: {reason} ({n} case{})",
                b.name(),
                if *n == 1 { "" } else { "s" }
            );
        }
    }
    let summary = Summary::of(results);
    out.push('\n');
    out.push_str(&backend_figures(results, backends));
    if let Some(triage) = triage {
        let _ = writeln!(out, "{}", triage.line());
    }
    if summary.compiled + summary.unverified > 0 {
        let _ = writeln!(
            out,
            "({} compiled only, {} unverified)",
            summary.compiled, summary.unverified
        );
    }
    let _ = writeln!(out, "{}", summary.line());
    out
}

/// One line per backend: its cells by status and the time it took, e.g.
/// `cuda-host: 80 passed, 0 failed, 20 skipped in 95.2 s`.
pub fn backend_figures(results: &[CaseResult], backends: &[BackendId]) -> String {
    let mut out = String::new();
    for &b in backends {
        let mut s = Summary::default();
        let mut time = std::time::Duration::ZERO;
        for r in results {
            match r.results.get(&b) {
                Some(Status::Pass) => s.passed += 1,
                Some(Status::Fail(_)) => s.failed += 1,
                Some(Status::Skip(_)) => s.skipped += 1,
                Some(Status::Compiled) => s.compiled += 1,
                Some(Status::Unverified(_)) => s.unverified += 1,
                None => {}
            }
            time += r.elapsed.get(&b).copied().unwrap_or_default();
        }
        let mut extra = String::new();
        if s.compiled > 0 {
            extra += &format!(", {} compiled", s.compiled);
        }
        if s.unverified > 0 {
            extra += &format!(", {} unverified", s.unverified);
        }
        let _ = writeln!(
            out,
            "{}: {}{extra} in {:.1} s",
            b.name(),
            s.line(),
            time.as_secs_f64()
        );
    }
    out
}

fn status_json(status: &Status, case: &str, seed: u64, backend: BackendId) -> Value {
    match status {
        Status::Pass | Status::Compiled => json!({ "status": status.keyword() }),
        Status::Skip(reason) | Status::Unverified(reason) => {
            json!({ "status": status.keyword(), "reason": reason })
        }
        Status::Fail(detail) => json!({
            "status": "fail",
            "detail": detail,
            "reproduce": reproduce_command(case, seed, backend),
        }),
    }
}

/// The JSON report: `{"summary": {...}, "environment": {...}, "cases": [...]}`.
pub fn render_json(results: &[CaseResult], env: &Environment, seed: u64) -> Value {
    let summary = Summary::of(results);
    let cases: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut per_backend: serde_json::Map<String, Value> = r
                .results
                .iter()
                .map(|(b, s)| (b.name().to_string(), status_json(s, &r.name, seed, *b)))
                .collect();
            if let Some(triage) = &r.triage {
                let mut cell = status_json(triage, &r.name, seed, BackendId::Cuda);
                if let Status::Fail(_) = triage {
                    cell["reproduce"] = Value::String(reproduce_triage_command(&r.name, seed));
                }
                per_backend.insert(TRIAGE.to_string(), cell);
            }
            json!({
                "name": r.name,
                "kind": r.kind.name(),
                "tags": r.tags,
                "results": per_backend,
            })
        })
        .collect();
    let environment: serde_json::Map<String, Value> = env
        .header
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let mut per_backend_figures = serde_json::Map::new();
    let mut names: Vec<BackendId> = results
        .iter()
        .flat_map(|r| r.results.keys().copied())
        .collect();
    names.sort();
    names.dedup();
    for b in names {
        let (mut passed, mut failed, mut skipped, mut seconds) = (0, 0, 0, 0.0);
        for r in results {
            match r.results.get(&b) {
                Some(Status::Pass) => passed += 1,
                Some(Status::Fail(_)) => failed += 1,
                Some(Status::Skip(_)) => skipped += 1,
                _ => {}
            }
            seconds += r.elapsed.get(&b).map_or(0.0, |d| d.as_secs_f64());
        }
        per_backend_figures.insert(
            b.name().to_string(),
            json!({ "passed": passed, "failed": failed, "skipped": skipped, "seconds": seconds }),
        );
    }
    let mut report = json!({
        "summary": { "passed": summary.passed, "failed": summary.failed, "skipped": summary.skipped },
        "backends": per_backend_figures,
        "seed": seed,
        "environment": environment,
        "cases": cases,
    });
    if let Some(t) = TriageSummary::of(results) {
        report["triage"] =
            json!({ "agree": t.agree, "disagree": t.disagree, "not compared": t.not_compared });
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::Availability;
    use crate::case::CaseKind;

    fn results() -> Vec<CaseResult> {
        vec![
            CaseResult {
                name: "add".into(),
                kind: CaseKind::Run,
                tags: vec!["scratch".into()],
                results: [
                    (BackendId::Interp, Status::Pass),
                    (BackendId::Wgpu, Status::Fail("[0] expected 1 got 2".into())),
                    (BackendId::Cuda, Status::Compiled),
                ]
                .into_iter()
                .collect(),
                triage: None,
                elapsed: Default::default(),
            },
            CaseResult {
                name: "bad".into(),
                kind: CaseKind::Reject,
                tags: vec!["reject".into()],
                results: [
                    (BackendId::Interp, Status::Pass),
                    (BackendId::Wgpu, Status::Skip("no adapter".into())),
                    (BackendId::Cuda, Status::Pass),
                ]
                .into_iter()
                .collect(),
                triage: None,
                elapsed: Default::default(),
            },
        ]
    }

    fn env() -> Environment {
        Environment {
            header: vec![("wgpu adapter".into(), "llvmpipe".into())],
            wgpu_measured_ulp: vec![],
            wgpu_deviations: vec![],
            wgpu: Availability::Runs,
            cuda: Availability::CompileOnly("no device".into()),
            cuda_host: Availability::Runs,
        }
    }

    #[test]
    fn summary_counts_cells() {
        let s = Summary::of(&results());
        assert_eq!(s.line(), "3 passed, 1 failed, 1 skipped");
        assert_eq!((s.compiled, s.unverified), (1, 0));
    }

    #[test]
    fn text_report_has_table_failure_reproduction_and_summary_line() {
        let text = render_text(
            &results(),
            &[BackendId::Interp, BackendId::Wgpu, BackendId::Cuda],
            7,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["case", "interp", "wgpu", "cuda"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["add", "pass", "fail", "compiled"]
        );
        assert!(text.contains("FAIL add on wgpu: [0] expected 1 got 2\n  reproduce: cargo xtask conformance --filter add --seed 7 --backends wgpu\n"));
        assert!(text.contains("  wgpu: no adapter (1 case)\n"));
        assert_eq!(lines.last(), Some(&"3 passed, 1 failed, 1 skipped"));
        // One line of figures per backend.
        assert!(
            text.contains("\nwgpu: 0 passed, 1 failed, 1 skipped in 0.0 s\n"),
            "{text}"
        );
        assert!(
            text.contains("\ncuda: 1 passed, 0 failed, 0 skipped, 1 compiled in 0.0 s\n"),
            "{text}"
        );
    }

    #[test]
    fn json_report_follows_the_schema() {
        let v = render_json(&results(), &env(), 7);
        assert_eq!(
            v["summary"],
            json!({"passed": 3, "failed": 1, "skipped": 1})
        );
        assert_eq!(v["cases"][0]["name"], "add");
        assert_eq!(v["cases"][0]["kind"], "run");
        assert_eq!(v["cases"][0]["tags"], json!(["scratch"]));
        assert_eq!(
            v["cases"][0]["results"]["interp"],
            json!({"status": "pass"})
        );
        assert_eq!(
            v["cases"][0]["results"]["cuda"],
            json!({"status": "compiled"})
        );
        assert_eq!(v["cases"][0]["results"]["wgpu"]["status"], "fail");
        assert_eq!(v["cases"][1]["kind"], "reject");
        assert_eq!(
            v["cases"][1]["results"]["wgpu"],
            json!({"status": "skip", "reason": "no adapter"})
        );
        assert_eq!(v["environment"]["wgpu adapter"], "llvmpipe");
        assert!(v["cases"][0]["results"].get(TRIAGE).is_none());
        assert!(v.get("triage").is_none());
    }

    /// Three run cases with a triage cell each (agree, disagree, not
    /// compared) and a reject case without one.
    fn results_with_triage() -> Vec<CaseResult> {
        let run = |name: &str, triage: Status| CaseResult {
            name: name.into(),
            kind: CaseKind::Run,
            tags: vec![],
            results: [
                (BackendId::Interp, Status::Pass),
                (BackendId::Wgpu, Status::Pass),
                (BackendId::Cuda, Status::Pass),
            ]
            .into_iter()
            .collect(),
            triage: Some(triage),
            elapsed: Default::default(),
        };
        let mut bad = results().remove(1);
        bad.results.insert(BackendId::Wgpu, Status::Pass);
        vec![
            run("same", Status::Pass),
            run(
                "apart",
                Status::Fail(
                    "fast mode: call 0: output `y` (exact): 1 of 4 elements differ".into(),
                ),
            ),
            run("nogpu", Status::Skip("cuda compiled only (no GPU)".into())),
            bad,
        ]
    }

    #[test]
    fn text_report_has_a_triage_column_disagreements_and_a_triage_line() {
        let text = render_text(
            &results_with_triage(),
            &[BackendId::Interp, BackendId::Wgpu, BackendId::Cuda],
            3,
        );
        let rows: Vec<Vec<&str>> = text
            .lines()
            .take(5)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["case", "interp", "wgpu", "cuda", "cuda~wgpu"]);
        assert_eq!(rows[1], ["same", "pass", "pass", "pass", "pass"]);
        assert_eq!(rows[2], ["apart", "pass", "pass", "pass", "fail"]);
        assert_eq!(rows[3], ["nogpu", "pass", "pass", "pass", "skip"]);
        assert_eq!(rows[4], ["bad", "pass", "pass", "pass", "-"]);
        assert!(text.contains(
            "\nDISAGREE apart on cuda~wgpu (triage): fast mode: call 0: output `y` (exact): 1 of 4 elements differ\n  reproduce: cargo xtask conformance --filter apart --seed 3 --backends wgpu,cuda\n"
        ));
        assert!(!text.contains("FAIL"));
        assert!(text.contains("\nskipped:\n  cuda~wgpu: cuda compiled only (no GPU) (1 case)\n"));
        let tail: Vec<&str> = text.lines().rev().take(2).collect();
        assert_eq!(
            tail,
            [
                "12 passed, 0 failed, 0 skipped",
                "triage: 1 agree, 1 disagree, 1 not compared"
            ]
        );
    }

    #[test]
    fn triage_never_counts_in_the_summary() {
        let with_triage = results_with_triage();
        assert_eq!(
            Summary::of(&with_triage),
            Summary {
                passed: 12,
                ..Summary::default()
            }
        );
        assert_eq!(
            TriageSummary::of(&with_triage),
            Some(TriageSummary {
                agree: 1,
                disagree: 1,
                not_compared: 1
            })
        );
        assert_eq!(TriageSummary::of(&results()), None);
    }

    #[test]
    fn json_report_has_the_triage_cells_and_counts() {
        let v = render_json(&results_with_triage(), &env(), 3);
        assert_eq!(
            v["summary"],
            json!({"passed": 12, "failed": 0, "skipped": 0})
        );
        assert_eq!(
            v["triage"],
            json!({"agree": 1, "disagree": 1, "not compared": 1})
        );
        assert_eq!(v["cases"][0]["results"][TRIAGE], json!({"status": "pass"}));
        assert_eq!(
            v["cases"][1]["results"][TRIAGE],
            json!({
                "status": "fail",
                "detail": "fast mode: call 0: output `y` (exact): 1 of 4 elements differ",
                "reproduce": "cargo xtask conformance --filter apart --seed 3 --backends wgpu,cuda"
            })
        );
        assert_eq!(
            v["cases"][2]["results"][TRIAGE],
            json!({"status": "skip", "reason": "cuda compiled only (no GPU)"})
        );
        assert!(v["cases"][3]["results"].get(TRIAGE).is_none());
    }
}
