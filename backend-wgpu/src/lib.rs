//! mpmd-wgpu: the portable WGSL backend (docs/design.md, "Backends").
//!
//! [`emit_module`] turns a [`LaunchPlan`](mpmd_core::plan::LaunchPlan) into one WGSL
//! module (one entry point per launch unit), validated by naga;
//! [`WgpuBackend`] runs it through wgpu on any adapter, lavapipe included.
//!
//! # Embedding: the caller's device, queue and buffers
//!
//! [`WgpuBackend::from_device`] builds the backend on a device and queue the
//! caller made; [`WgpuBackend::prepare`] checks and compiles a map once, and
//! [`WgpuBackend::enqueue`] runs it on the caller's buffers as often as
//! needed (scalars change per run without recompiling), submitting to the
//! caller's queue without waiting. Every buffer is checked against its
//! operand (element type, element count, size, usage) before anything runs;
//! errors a run records are reported by [`WgpuBackend::synchronize`].
//! [`Backend::run`](mpmd_core::Backend::run), the host-copy path, is this
//! with pooled buffers and a read-back.
//!
//! ```
//! use mpmd_core::ir::{Literal, ScalarType};
//! use mpmd_core::{plan::lower, text::parse, validate::validate, Mode};
//! use mpmd_wgpu::{wgpu, DeviceArgs, WgpuBackend, WgpuBuffer, WgpuOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The caller's own device and queue (here: the default adapter).
//! let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
//! let adapter = pollster::block_on(instance.request_adapter(&Default::default()))?;
//! let (device, queue) = pollster::block_on(adapter.request_device(&Default::default()))?;
//!
//! let (module, _) = parse(include_str!("../../examples/elementwise.mpmd")).map_err(|e| format!("{e:?}"))?;
//! let module = validate(&module, &Default::default()).map_err(|d| format!("{d:?}"))?;
//! let plan = lower(&module, "axpb")?; // y = x * alpha + 1 over 256 f32
//! let mut backend = WgpuBackend::from_device(device.clone(), queue.clone(), WgpuOptions::default());
//! let prepared = backend.prepare(&plan, Mode::Fast)?;
//!
//! let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
//! let new_buffer = |size| device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage, mapped_at_creation: false });
//! let (x, y) = (new_buffer(1024), new_buffer(1024));
//! let ones = [1.0f32; 256].map(f32::to_bits);
//! queue.write_buffer(&x, 0, &ones.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
//!
//! for alpha in [2.0, 3.0] {
//!     let args = DeviceArgs::default()
//!         .buffer("x", WgpuBuffer::new(x.clone(), ScalarType::F32, 256))
//!         .buffer("y", WgpuBuffer::new(y.clone(), ScalarType::F32, 256))
//!         .scalar("alpha", Literal::f32(alpha));
//!     backend.enqueue(&prepared, &args)?; // submitted to `queue`, not waited for
//! }
//! backend.synchronize()?; // waits, and reports an error a run recorded
//!
//! // A buffer that does not match its operand is refused before anything runs.
//! let wrong = DeviceArgs::default()
//!     .buffer("x", WgpuBuffer::new(x.clone(), ScalarType::I32, 256))
//!     .buffer("y", WgpuBuffer::new(y.clone(), ScalarType::F32, 256))
//!     .scalar("alpha", Literal::f32(1.0));
//! assert_eq!(
//!     backend.enqueue(&prepared, &wrong).unwrap_err().to_string(),
//!     "bad call arguments: input `x` of map `axpb` is 256 `f32` elements; the buffer given holds 256 `i32` elements"
//! );
//! # Ok(())
//! # }
//! ```

// `RunError` is the shared contract type of every backend (core), large by design.
#![allow(clippy::result_large_err)]

mod accuracy;
mod emit;
mod f16_conversions;
mod residency;
mod runtime;
mod runtime_dir;
mod subgroups;

pub use accuracy::{
    accuracy_profile, probe_adapter, profile_for, AccuracyProfile, FloatBehaviour, SUBNORMAL_TAG,
};
pub use emit::{
    emit, emit_module, fused_workgroups, fuses_programs, own_workgroup_bytes, validate_wgsl,
    BindingLayout, Dispatch, EmitError, EmitOptions, EmittedModule, F16Conversions, StorageBinding,
    WarpPath, WordType, FUSED_ENTRY_POINT, MAX_SPLIT_DISPATCHES,
};
pub use f16_conversions::F16Choice;
pub use mpmd_core::bind::DeviceArgs;
pub use residency::{establish, lavapipe_candidate, probe_once, MAX_PROBED_WORKGROUPS};
pub use runtime::{
    AdapterInfo, Residency, WgpuBackend, WgpuBuffer, WgpuError, WgpuOptions, WgpuPrepared,
    PIPELINE_CACHE_CAPACITY, POOL_MAX_BYTES, RUN_CACHE_CAPACITY,
};
pub use runtime_dir::{quiet_display_lookup, RuntimeDir};
pub use subgroups::{SubgroupFacts, WarpChoice};
/// The wgpu this backend is built with: a caller's device, queue and
/// buffers must come from this version.
pub use wgpu;
