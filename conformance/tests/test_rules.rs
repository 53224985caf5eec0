//! The rule for tests that cannot run (README, "Tests that cannot run"),
//! checked over the workspace's test sources: no test returns early as a
//! pass after printing that it did not run, every GPU test is `#[ignore]`d for
//! `scripts/gpu-check.sh` to run with `--include-ignored`, and a missing
//! set-up tool fails the test with what is missing.

#[path = "../../test-support/needs.rs"]
mod needs;

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_test_passes_without_running() {
    let files = test_sources();
    let marker = ["NOT", "RUN"].join(" ");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !text.contains(&marker),
            "{} still skips by printing {marker}: use test-support/needs.rs",
            file.display()
        );
    }
}

/// Test sources of every crate.
fn test_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for krate in [
        "core",
        "backend-cuda",
        "backend-wgpu",
        "conformance",
        "cli",
        "xtask",
    ] {
        let dir = workspace().join(krate).join("tests");
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
    }
    assert!(files.len() > 10, "{files:?}");
    files
}

/// Lines (1-based) where a function's top-level statement is
/// `let PATTERN = ... else { return; };`: an early return that passes the
/// test without checking anything (closures and nested blocks, which are
/// indented deeper, are not matched).
fn top_level_early_returns(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let is_else_return = line.trim_end().ends_with("else {")
            && lines.get(i + 1).is_some_and(|l| *l == "        return;")
            && lines.get(i + 2).is_some_and(|l| *l == "    };");
        // The `let` starts at indentation 4, on this line or a few above.
        let starts_at_top = (i.saturating_sub(6)..=i)
            .rev()
            .find(|&k| lines[k].trim_start().starts_with("let "))
            .is_some_and(|k| lines[k].starts_with("    let "));
        if is_else_return && starts_at_top {
            found.push(i + 1);
        }
    }
    found
}

/// Files whose early returns another change removes (each is a dead
/// branch: their helper fails the test instead of returning `None`); the
/// test fails once a file here has none left, so the list only shrinks.
const KNOWN_EARLY_RETURNS: [&str; 1] = ["backend-cuda/tests/gpu_run.rs"];

#[test]
fn no_test_returns_early_as_a_pass() {
    let mut offenders = Vec::new();
    for file in test_sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        let relative = file
            .strip_prefix(workspace())
            .unwrap_or(&file)
            .to_string_lossy()
            .replace('\\', "/");
        let lines = top_level_early_returns(&text);
        if KNOWN_EARLY_RETURNS.contains(&relative.as_str()) {
            assert!(
                !lines.is_empty(),
                "{relative} has no early returns left: remove it from KNOWN_EARLY_RETURNS"
            );
            continue;
        }
        if !lines.is_empty() {
            offenders.push(format!("{relative}: lines {lines:?}"));
        }
        for (i, line) in text.lines().enumerate() {
            if line.contains("\"SKIPPED")
                && text
                    .lines()
                    .nth(i + 1)
                    .is_some_and(|l| l.trim() == "return;")
            {
                offenders.push(format!("{relative}:{}: prints SKIPPED and returns", i + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "tests that return early as a pass (fail through test-support/needs.rs instead):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_early_return_rule_finds_let_else_return() {
    let skip = "fn t() {\n    let Some(x) = f() else {\n        return;\n    };\n}\n";
    assert_eq!(top_level_early_returns(skip), vec![2]);
    let multi = "fn t() {\n    let Some(x) = f(Options {\n        a: 1,\n    }) else {\n        return;\n    };\n}\n";
    assert_eq!(top_level_early_returns(multi), vec![4]);
    let closure = "fn t() {\n    visit(|s| {\n        let Stmt::A = s else {\n            return;\n        };\n    });\n}\n";
    assert!(top_level_early_returns(closure).is_empty());
}

#[test]
fn every_gpu_test_is_ignored_and_gpu_check_runs_them() {
    let source =
        std::fs::read_to_string(workspace().join("backend-cuda/tests/gpu_run.rs")).unwrap();
    let tests = source.matches("#[test]\n").count();
    assert!(tests >= 10, "{tests}");
    assert_eq!(
        source
            .matches("#[test]\n#[ignore = \"needs a CUDA GPU")
            .count(),
        tests
    );
    let script = std::fs::read_to_string(workspace().join("scripts/gpu-check.sh")).unwrap();
    assert!(
        script.contains("\"$TESTS\" --test-threads 1 --include-ignored"),
        "gpu-check.sh must run the ignored GPU tests"
    );
}

#[test]
fn a_missing_setup_tool_fails_the_test_with_what_is_missing() {
    let failure = std::panic::catch_unwind(|| {
        needs::setup::<(), _>("a Vulkan adapter", Err("no adapter found"));
    })
    .expect_err("a missing tool fails");
    let message = failure.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("this test needs a Vulkan adapter, which the README's set-up provides, and it is missing here"),
        "{message}"
    );
    assert!(message.contains("no adapter found"), "{message}");
    assert!(message.contains("`cargo xtask test`"), "{message}");
    assert_eq!(needs::setup::<_, String>("anything", Ok(3)), 3);
    let gpu = std::panic::catch_unwind(|| {
        needs::gpu::<(), _>(Err("no CUDA driver found"));
    })
    .expect_err("a GPU test without a GPU fails");
    assert!(gpu
        .downcast_ref::<String>()
        .unwrap()
        .contains("needs a CUDA GPU and driver"));
}
