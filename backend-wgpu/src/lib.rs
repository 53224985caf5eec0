//! mpmd-wgpu: the portable WGSL backend (DESIGN.md, "Backends").
//!
//! [`mod@emit`] turns a [`LaunchPlan`](mpmd_core::plan::LaunchPlan) into one WGSL
//! module (one entry point per launch unit), validated by naga;
//! [`WgpuBackend`] runs it through wgpu on any adapter, lavapipe included.

// `RunError` is the shared contract type of every backend (core), large by design.
#![allow(clippy::result_large_err)]

pub mod accuracy;
pub mod emit;
pub mod residency;
mod runtime;

pub use accuracy::{
    accuracy_profile, probe_adapter, profile_for, AccuracyProfile, FloatBehaviour, SUBNORMAL_TAG,
};
pub use emit::{emit, emit_module, validate_wgsl, EmitError, EmitOptions, EmittedModule};
pub use runtime::{AdapterInfo, Residency, WgpuBackend, WgpuError, WgpuOptions};
