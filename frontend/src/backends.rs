//! The backend each name (`mpmd run --backend`, the Python package) names.

use std::time::Duration;

use mpmd_core::interp::Interpreter;
use mpmd_core::Backend;

use crate::FrontendError;

/// The backend `kind` names (`mpmd run --backend`, the Python package's
/// backends). Each backend is one arm.
pub fn resolve_backend(
    kind: BackendKind,
    co_resident: bool,
) -> Result<Box<dyn Backend + Send>, FrontendError> {
    resolve_backend_within(kind, co_resident, None)
}

/// [`resolve_backend`] whose runs are bounded by `time_limit` where the
/// backend can bound them (`--timeout`: wgpu's compile, dispatches and
/// read-back; cuda-host's emulated program; the interpreter takes its limit
/// from its options).
pub fn resolve_backend_within(
    kind: BackendKind,
    co_resident: bool,
    time_limit: Option<Duration>,
) -> Result<Box<dyn Backend + Send>, FrontendError> {
    let unavailable = |reason: String| FrontendError::BackendUnavailable {
        name: kind.name(),
        reason,
    };
    match kind {
        BackendKind::Interp => Ok(Box::new(Interpreter::new())),
        BackendKind::Cuda => Ok(Box::new(cuda_backend(false)?)),
        BackendKind::CudaHost => {
            mpmd_cuda::host_compiler().map_err(|e| unavailable(e.to_string()))?;
            let options = mpmd_cuda::HostOptions {
                time_limit_s: whole_seconds(time_limit),
                ..Default::default()
            };
            let mut backend = mpmd_cuda::HostCudaBackend::new();
            backend.options = options;
            Ok(Box::new(backend))
        }
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

/// `cuda-host`'s time limit: whole seconds, rounded up so that a limit
/// under a second still bounds the program; 0 (no bound) for `None`.
fn whole_seconds(limit: Option<Duration>) -> u32 {
    limit.map_or(0, |d| {
        let seconds = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        u32::try_from(seconds).unwrap_or(u32::MAX)
    })
}

/// The environment variable that sets the CUDA backend's limit on one
/// semaphore wait (`CudaOptions::wait_timeout`), in whole milliseconds.
pub const CUDA_WAIT_TIMEOUT_VAR: &str = "MPMD_CUDA_WAIT_TIMEOUT_MS";

/// The CUDA backend; `time_kernels` times each launch with a pair of
/// events (`CudaBackend::last_kernel_ms`). The wait limit comes from
/// [`CUDA_WAIT_TIMEOUT_VAR`] when it holds a whole number of milliseconds
/// (anything else leaves the library's default of 10 s).
pub fn cuda_backend(time_kernels: bool) -> Result<mpmd_cuda::CudaBackend, FrontendError> {
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
    mpmd_cuda::CudaBackend::new(options).map_err(|e| FrontendError::BackendUnavailable {
        name: BackendKind::Cuda.name(),
        reason: e.to_string(),
    })
}

/// A backend, by the name `mpmd run --backend` and the Python package take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BackendKind {
    /// The reference interpreter.
    Interp,
    /// WebGPU through wgpu (any adapter).
    Wgpu,
    /// CUDA through NVRTC (NVIDIA GPUs); each semaphore wait gives up after
    /// $MPMD_CUDA_WAIT_TIMEOUT_MS milliseconds (default 10000).
    Cuda,
    /// The CUDA backend's generated C run on CPU threads (no GPU needed):
    /// compiled by the host C++ compiler, $MPMD_HOST_CXX else `c++`.
    CudaHost,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Interp => "interp",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
            Self::CudaHost => "cuda-host",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_host_time_limits_are_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(None), 0);
        assert_eq!(whole_seconds(Some(Duration::from_millis(500))), 1);
        assert_eq!(whole_seconds(Some(Duration::from_secs(60))), 60);
        assert_eq!(whole_seconds(Some(Duration::from_millis(60_001))), 61);
        assert_eq!(whole_seconds(Some(Duration::from_secs(1 << 40))), u32::MAX);
    }
}
