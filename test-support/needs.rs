//! What a test needs from the machine, and the one rule for when it is
//! missing (README, "Tests that cannot run"). Every test crate includes this
//! file (`#[path = ".../test-support/needs.rs"] mod needs;`), so the rule
//! lives here alone:
//!
//! - What this machine cannot have (a CUDA driver and GPU): the test is
//!   `#[ignore = "needs a CUDA GPU ..."]`, so the runner shows it as ignored
//!   (nextest: skipped), never as passed; `scripts/gpu-check.sh` runs it with
//!   `--include-ignored` on a GPU machine. Run that way without a GPU, it
//!   fails through [`gpu`].
//! - What the README's set-up provides (a Vulkan adapter, NVRTC, ptxas, the
//!   host C++ compiler behind cuda-host): the test fails through [`setup`]
//!   when it is missing, with what is missing and how to get it; it never
//!   returns early as a pass. `CI=true` changes nothing here: the set-up is
//!   expected everywhere (`cargo xtask test` installs it or says exactly
//!   what to install).
#![allow(dead_code)]

/// The value a set-up tool provides, or a failure naming it: `what` is the
/// tool ("a Vulkan adapter"), `found` what probing it gave.
#[track_caller]
pub fn setup<T, E: std::fmt::Display>(what: &str, found: Result<T, E>) -> T {
    match found {
        Ok(value) => value,
        Err(e) => panic!("{}", setup_message(what, &e.to_string())),
    }
}

/// The failure text of a missing set-up tool.
pub fn setup_message(what: &str, reason: &str) -> String {
    let ci = if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        " (CI=true)"
    } else {
        ""
    };
    format!(
        "this test needs {what}, which the README's set-up provides, and it is missing here{ci}: {reason}; \
         run the tests through `cargo xtask test`, which installs it or says exactly what to install"
    )
}

/// The value a GPU provides, or a failure: for `#[ignore]`d tests that
/// `scripts/gpu-check.sh` runs on a machine with a CUDA GPU.
#[track_caller]
pub fn gpu<T, E: std::fmt::Display>(found: Result<T, E>) -> T {
    match found {
        Ok(value) => value,
        Err(e) => panic!(
            "this test needs a CUDA GPU and driver, and was run without one (it is #[ignore]d \
             for that reason; scripts/gpu-check.sh runs it on a GPU machine): {e}"
        ),
    }
}
