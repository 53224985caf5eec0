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
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
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
    let mut files = Vec::new();
    for krate in [
        "core",
        "backend-cuda",
        "backend-wgpu",
        "conformance",
        "cli",
        "xtask",
    ] {
        rust_files(&workspace().join(krate).join("tests"), &mut files);
    }
    assert!(files.len() > 10, "{files:?}");
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
