//! What the CUDA tests share: the tools they need and the programs they
//! compile ([`programs`]).
#![allow(dead_code)]

#[path = "../../../test-support/needs.rs"]
pub mod needs;
mod programs;

// Not every test file builds these programs.
#[allow(unused_imports)]
pub use programs::*;

/// Fails (never skips) when the CUDA tools are not on the paths the backend
/// searches (`needs::setup`).
pub fn require_tools() {
    needs::setup(
        "NVRTC (libnvrtc.so.13)",
        if mpmd_cuda::nvrtc_present() {
            Ok(())
        } else {
            Err("libnvrtc.so.13 is not on LD_LIBRARY_PATH")
        },
    );
    needs::setup("ptxas", mpmd_cuda::ptxas_path().map(|_| ()));
}
