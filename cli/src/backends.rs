//! The backend of one `mpmd run`.

use mpmd_core::interp::Interpreter;
use mpmd_core::{Backend, HostTensor};
use mpmd_frontend::BackendKind;

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
