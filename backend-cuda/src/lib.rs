//! mpmd-cuda: launch plan → CUDA C → NVRTC (through `cudarc`) → one driver
//! launch per call (DESIGN.md, "Backends").
//!
//! - [`mod@emit`] turns a plan into readable CUDA C (one kernel; its blocks
//!   become logical blocks by block index, a resident walk or tickets).
//! - [`compile_ptx`] / [`nvrtc::compile_cubin`] run NVRTC with exact IEEE
//!   options unless the map opts into fast math; results go through the
//!   module cache ([`cache`]).
//! - [`assemble`] runs `ptxas -arch=sm_90 -v` and reports registers and spills.
//! - [`check_plan`] is emit + NVRTC + ptxas: what tests and conformance call
//!   without a GPU (status `compiled`).
//! - [`CudaBackend`] runs plans on a GPU from CUBINs.
//!
//! Tools are found through the environment: `libnvrtc.so.13` through
//! LD_LIBRARY_PATH (or the system), `ptxas` as `$MPMD_PTXAS` or on PATH,
//! `libcuda.so.1` from the NVIDIA driver.

// RunError is the shared error type of every backend; boxing it is not ours to decide.
#![allow(clippy::result_large_err)]

pub mod arena;
pub mod backend;
pub mod cache;
pub mod control;
pub mod emit;
pub mod host_emulation;
pub mod nvrtc;
pub mod ptxas;

use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;
use thiserror::Error;

pub use backend::{
    driver_present, CudaBuffer, CudaPrepared, LOADED_KERNELS, PLANS_WITH_ARENA, PREPARED_PLANS,
};
pub use backend::{CudaBackend, CudaError, CudaOptions};
/// The cudarc this backend is built with: a caller's context and stream
/// ([`CudaBackend::on_stream`]) must come from this version.
pub use cudarc;
pub use emit::{emit, emit_module, EmitError, EmittedModule, PRELUDE};
pub use mpmd_core::bind::DeviceArgs;
pub use nvrtc::{compile_cubin, compile_ptx, nvrtc_version, CompileError, CompileOptions, Ptx};
pub use ptxas::{assemble, AssembleError, AssembleReport, KernelResources};

/// The architecture every build checks the CUDA output for.
pub const CHECK_ARCH: u32 = 90;

/// Why [`check_plan`] failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CheckError {
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Assemble(#[from] AssembleError),
}

/// The result of compiling a plan without running it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileReport {
    /// Always `compiled`: the CUDA output was checked but not run.
    pub status: &'static str,
    pub kernel: String,
    pub mode: Mode,
    pub nvrtc_version: (i32, i32),
    pub nvrtc_options: Vec<String>,
    pub arch: u32,
    pub registers: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub block_dim: u32,
    pub total_blocks: u64,
    pub dynamic_smem_bytes: u32,
    pub ptx_bytes: usize,
}

/// Emit + NVRTC (PTX for compute_90) + `ptxas -arch=sm_90`.
pub fn check_plan(plan: &LaunchPlan, mode: Mode) -> Result<CompileReport, CheckError> {
    let module = emit_module(plan, mode)?;
    let options = CompileOptions {
        arch: CHECK_ARCH,
        fast_math: plan.map.fast_math,
        ..CompileOptions::default()
    };
    let ptx = compile_ptx(&module.source, &options)?;
    let report = assemble(&ptx, CHECK_ARCH)?;
    let kernel = report
        .kernel(&module.kernel_name)
        .cloned()
        .unwrap_or_default();
    Ok(CompileReport {
        status: "compiled",
        kernel: module.kernel_name,
        mode,
        nvrtc_version: nvrtc_version()?,
        nvrtc_options: options.nvrtc_args(nvrtc::Output::Ptx),
        arch: CHECK_ARCH,
        registers: kernel.registers,
        spill_store_bytes: kernel.spill_store_bytes,
        spill_load_bytes: kernel.spill_load_bytes,
        block_dim: module.block_dim,
        total_blocks: module.total_blocks,
        dynamic_smem_bytes: module.dynamic_smem_bytes,
        ptx_bytes: ptx.text.len(),
    })
}
