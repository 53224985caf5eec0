//! Unit tests of the crate's internals that use the test programs of
//! `tests/common` (included from there, so both kinds of test share them).

#[path = "../../../test-support/needs.rs"]
mod needs;
#[path = "../../tests/common/programs.rs"]
mod programs;

mod arena_layout;
mod caches;
mod host_cache;

/// Fails (never skips) when the CUDA tools are not on the paths the backend
/// searches, as `tests/common::require_tools` does.
fn require_tools() {
    needs::setup(
        "NVRTC (libnvrtc.so.13)",
        if crate::nvrtc_present() {
            Ok(())
        } else {
            Err("libnvrtc.so.13 is not on LD_LIBRARY_PATH")
        },
    );
    needs::setup("ptxas", crate::ptxas_path().map(|_| ()));
}
