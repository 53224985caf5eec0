//! The backend each `--backend` names.

use std::time::Duration;

use mpmd_core::interp::Interpreter;
use mpmd_core::{Backend, HostTensor};

use crate::{BackendKind, CliError};

/// The backend `mpmd run --backend` names. Each backend is one arm.
pub fn resolve_backend(
    kind: BackendKind,
    co_resident: bool,
) -> Result<Box<dyn Backend + Send>, CliError> {
    resolve_backend_within(kind, co_resident, None)
}

/// [`resolve_backend`] whose runs are bounded by `time_limit` where the
/// backend can bound them (`--timeout`: wgpu's compile, dispatches and
/// read-back; the interpreter takes its limit from its options).
pub fn resolve_backend_within(
    kind: BackendKind,
    co_resident: bool,
    time_limit: Option<Duration>,
) -> Result<Box<dyn Backend + Send>, CliError> {
    let unavailable = |reason: String| CliError::BackendUnavailable {
        name: kind.name(),
        reason,
    };
    match kind {
        BackendKind::Interp => Ok(Box::new(Interpreter::new())),
        BackendKind::Cuda => Ok(Box::new(cuda_backend(false)?)),
        BackendKind::Wgpu => {
            let options = mpmd_wgpu::WgpuOptions {
                co_resident,
                time_limit,
                ..Default::default()
            };
            let backend =
                mpmd_wgpu::WgpuBackend::new(options).map_err(|e| unavailable(e.to_string()))?;
            Ok(Box::new(backend))
        }
    }
}

/// The environment variable that sets the CUDA backend's limit on one
/// semaphore wait (`CudaOptions::wait_timeout`), in whole milliseconds.
pub const CUDA_WAIT_TIMEOUT_VAR: &str = "MPMD_CUDA_WAIT_TIMEOUT_MS";

/// The CUDA backend; `time_kernels` times each launch with a pair of
/// events (`CudaBackend::last_kernel_ms`). The wait limit comes from
/// [`CUDA_WAIT_TIMEOUT_VAR`] when it holds a whole number of milliseconds
/// (anything else leaves the library's default of 10 s).
pub(crate) fn cuda_backend(time_kernels: bool) -> Result<mpmd_cuda::CudaBackend, CliError> {
    let defaults = mpmd_cuda::CudaOptions::default();
    let wait_timeout = std::env::var(CUDA_WAIT_TIMEOUT_VAR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(defaults.wait_timeout, Duration::from_millis);
    let options = mpmd_cuda::CudaOptions {
        time_kernels,
        wait_timeout,
        ..defaults
    };
    mpmd_cuda::CudaBackend::new(options).map_err(|e| CliError::BackendUnavailable {
        name: BackendKind::Cuda.name(),
        reason: e.to_string(),
    })
}

/// The backend of one `mpmd run`: the interpreter and CUDA are kept as
/// themselves so that the interpreter's report (schedules run) and CUDA's
/// kernel time can be shown.
pub(crate) enum RunBackend {
    Interp(Interpreter),
    Cuda(mpmd_cuda::CudaBackend),
    Other(Box<dyn Backend>),
}

impl RunBackend {
    pub(crate) fn get(&mut self) -> &mut dyn Backend {
        match self {
            RunBackend::Interp(interp) => interp,
            RunBackend::Cuda(cuda) => cuda,
            RunBackend::Other(backend) => backend.as_mut(),
        }
    }

    pub(crate) fn resident(&self, name: &str) -> Option<HostTensor> {
        match self {
            RunBackend::Interp(interp) => interp.resident(name),
            RunBackend::Cuda(cuda) => cuda.resident(name),
            RunBackend::Other(backend) => backend.resident(name),
        }
    }

    /// The `--time` line's kernel part: `kernel 0.012 ms`, or why there is
    /// none. Only CUDA measures a kernel (events around the launch); the
    /// interpreter has no kernel apart from the call, and the WGSL backend
    /// does not use timestamp queries.
    pub(crate) fn kernel_time(&self, backend: BackendKind) -> String {
        match self {
            RunBackend::Cuda(cuda) => match cuda.last_kernel_ms() {
                Some(ms) => format!(", kernel {ms:.3} ms"),
                None => "; kernel time: not measured on cuda (the driver gave no event time)"
                    .to_string(),
            },
            _ => format!("; kernel time: not measured on {}", backend.name()),
        }
    }
}
