//! mpmd-cuda: launch plan → CUDA C → NVRTC (through `cudarc`) → one driver
//! launch per call (docs/design.md, "Backends").
//!
//! - [`emit`] / [`emit_module`] turn a plan into readable CUDA C (one
//!   kernel; its blocks become logical blocks by block index, a resident
//!   walk or tickets: [`BlockSchedule`]).
//! - [`compile_ptx`] / [`compile_cubin`] run NVRTC with exact IEEE options
//!   unless the map opts into fast math; results go through the module
//!   cache ([`ModuleCache`]).
//! - [`assemble`] runs `ptxas -arch=sm_90 -v` and reports registers and spills.
//! - [`check_plan`] is emit + NVRTC + ptxas: what tests and conformance call
//!   without a GPU (status `compiled`).
//! - [`CudaBackend`] runs plans on a GPU from CUBINs.
//! - [`HostCudaBackend`] (`cuda-host`) runs the same CUDA C on CPU threads,
//!   compiled by the host's C++ compiler, so that builds without a GPU check
//!   what the CUDA text computes.
//!
//! Tools are found through the environment: `libnvrtc.so.13` through
//! LD_LIBRARY_PATH (or the system), `ptxas` as `$MPMD_PTXAS` or on PATH,
//! `libcuda.so.1` from the NVIDIA driver, the host compiler as
//! `$MPMD_HOST_CXX` or `c++`.

// RunError is the shared error type of every backend; boxing it is not ours to decide.
#![allow(clippy::result_large_err)]

mod arena;
mod backend;
mod cache;
mod control;
mod emit;
mod host_cache;
mod host_emulation;
mod nvrtc;
mod ptxas;
#[cfg(test)]
mod tests;

use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;
use thiserror::Error;

/// Words a plan buffer takes in device memory (what a launch of an
/// [`EmittedModule`] allocates for [`KernelParam::Buffer`]).
pub use arena::buffer_words;
pub use backend::{driver_present, driver_version, event_elapsed_ms};
pub use backend::{CudaBackend, CudaError, CudaOptions};
pub use backend::{CudaBuffer, CudaPrepared, LOADED_KERNELS, PLANS_WITH_ARENA, PREPARED_PLANS};
/// The disk and memory cache of NVRTC's outputs, keyed by source, options
/// and NVRTC version ([`compile_with_cache`]).
pub use cache::ModuleCache;
/// Words of the per-call control block ([`KernelParam::Control`]), zeroed
/// before a launch: ticket counter, abort flag, the first error record.
pub use control::WORDS as CONTROL_WORDS;
/// The cudarc this backend is built with: a caller's context and stream
/// ([`CudaBackend::on_stream`]) must come from this version.
pub use cudarc;
pub use emit::{
    emit, emit_module, emit_module_with, BlockSchedule, EmitError, EmittedModule, KernelParam,
    TicketRange, PRELUDE,
};
pub use host_cache::{CacheError, DISK_BYTES as HOST_CACHE_BYTES};
pub use host_emulation::{
    co_resident, compilations as host_compilations, emulate_words, host_compiler, Emulated,
    HostCompiler, HostCudaBackend, HostEmulationError, HostOptions, CO_RESIDENT_BLOCKS,
    CO_RESIDENT_THREADS, HOST_CXX_FLAGS, MEMORY_PROGRAMS as HOST_MEMORY_PROGRAMS,
    UNINITIALISED_WORD,
};
pub use mpmd_core::bind::DeviceArgs;
/// Which output NVRTC produces: PTX text or a CUBIN.
pub use nvrtc::Output as NvrtcOutput;
pub use nvrtc::{
    compile_cubin, compile_ptx, compile_with_cache, nvrtc_present, nvrtc_version, supported_archs,
    CompileError, CompileOptions, Cubin, Ptx,
};
pub use ptxas::{assemble, ptxas_path, AssembleError, AssembleReport, KernelResources};

/// The architecture every build checks the CUDA output for.
pub const CHECK_ARCH: u32 = 90;

/// Why [`check_plan`] failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CheckError {
    /// The plan has no CUDA C.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// NVRTC refused the CUDA C (or is missing).
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// ptxas refused the PTX (or is missing).
    #[error(transparent)]
    Assemble(#[from] AssembleError),
}

/// The result of compiling a plan without running it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileReport {
    /// Always `compiled`: the CUDA output was checked but not run.
    pub status: &'static str,
    /// The kernel's name.
    pub kernel: String,
    /// The mode the plan was emitted in.
    pub mode: Mode,
    /// NVRTC's version (major, minor).
    pub nvrtc_version: (i32, i32),
    /// The NVRTC options of the PTX compile.
    pub nvrtc_options: Vec<String>,
    /// The `sm_XY` architecture ptxas assembled for, as `XY`.
    pub arch: u32,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes spilled to local memory by stores.
    pub spill_store_bytes: u32,
    /// Bytes spilled to local memory by loads.
    pub spill_load_bytes: u32,
    /// Threads per block.
    pub block_dim: u32,
    /// Blocks of all programs together.
    pub total_blocks: u64,
    /// Dynamic shared memory per block.
    pub dynamic_smem_bytes: u32,
    /// Size of the PTX text.
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
