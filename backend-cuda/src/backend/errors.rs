//! Error decoding: why the backend could not start, a driver error or a
//! panic of the CUDA library as one line, and the error a kernel recorded in
//! its control block.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{CudaStream, DriverError};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::RunError;
use thiserror::Error;

use super::launch::download;
use super::{CallMemory, CudaBackend, PreparedPlan};
use crate::arena::{ArenaLayout, STATUS_WORD};
use crate::control;
use crate::emit::EmittedModule;
use crate::nvrtc::CompileError;

/// Why the backend could not start.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CudaError {
    #[error("no CUDA driver found (libcuda.so.1): this machine has no NVIDIA driver; run on a machine with an NVIDIA GPU and its driver")]
    DriverMissing,
    #[error("no CUDA device {ordinal}: {detail}")]
    NoDevice { ordinal: usize, detail: String },
    #[error("CUDA driver error in {call}: {detail}")]
    Driver { call: &'static str, detail: String },
    #[error("{0}")]
    Compile(#[from] CompileError),
    #[error("the CUDA driver library panicked in {call}: {detail}")]
    Panicked { call: &'static str, detail: String },
    #[error("{device} is sm_{arch}, but NVRTC {nvrtc_major}.{nvrtc_minor} compiles for {supported} only, so the CUDA backend cannot run on it; the WGSL backend can (`--backend wgpu`)")]
    UnsupportedArch {
        device: String,
        arch: u32,
        nvrtc_major: i32,
        nvrtc_minor: i32,
        supported: String,
    },
}

/// `sm_75 to sm_121`, or the list when it has gaps.
pub(super) fn describe_archs(archs: &[u32]) -> String {
    match (archs.first(), archs.last()) {
        (Some(first), Some(last)) if archs.len() > 2 => format!("sm_{first} to sm_{last}"),
        _ => archs
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
/// One line describing a driver error.
pub fn describe(e: &DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{:?} ({})", e.0, s.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

pub(super) fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".to_string())
}

pub(super) fn driver(call: &'static str) -> impl Fn(DriverError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        detail: describe(&e),
    }
}

pub(super) fn run_err(what: &str) -> impl Fn(DriverError) -> RunError + '_ {
    move |e| RunError::Backend(format!("CUDA {what}: {}", describe(&e)))
}
impl CudaBackend {
    /// Runs `work`, turning a panic of the CUDA library (cudarc panics on
    /// a symbol the driver lacks) into an error.
    pub(super) fn guarded<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, RunError>,
    ) -> Result<T, RunError> {
        match catch_unwind(AssertUnwindSafe(|| work(self))) {
            Ok(result) => result,
            Err(payload) => Err(RunError::Backend(format!(
                "the CUDA library panicked: {}",
                panic_text(payload)
            ))),
        }
    }
}

impl PreparedPlan {
    /// After the stream passed its launches: the error a kernel recorded,
    /// if any, after which the control block is clear again.
    pub(super) fn take_recorded_error(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<Option<RunError>, RunError> {
        let Some(memory) = self.memory.as_ref() else {
            return Ok(None);
        };
        let recorded = memory.recorded_error(stream, &self.layout, &self.module, &self.plan)?;
        if recorded.is_some() {
            memory.reset_control(stream, &self.layout)?;
        }
        Ok(recorded)
    }
}
impl CallMemory {
    /// Clears the error record (all but the status address) and the status
    /// word, after the host read them.
    pub(super) fn reset_control(
        &self,
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
    ) -> Result<(), RunError> {
        // SAFETY: the cleared words lie inside the arena.
        unsafe {
            cudarc::driver::sys::cuMemsetD32Async(
                self.control_address(layout),
                0,
                control::CLEARED_WORDS,
                stream.cu_stream(),
            )
        }
        .result()
        .map_err(run_err("memset"))?;
        if let Some(mapped) = &self.mapped {
            // SAFETY: the caller synchronised the stream after the launches
            // that write the word, and no slice of the block is alive.
            unsafe { mapped.clear_word(STATUS_WORD) };
        }
        // The next launch must see the host's write to the mapped block.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// After the launches synchronised: the error the kernel recorded, if
    /// any. With a status word, the control block is copied back only when
    /// the word is set; without one, every time.
    pub(super) fn recorded_error(
        &self,
        stream: &Arc<CudaStream>,
        layout: &ArenaLayout,
        module: &EmittedModule,
        plan: &LaunchPlan,
    ) -> Result<Option<RunError>, RunError> {
        if let Some(mapped) = &self.mapped {
            // SAFETY: the stream is synchronised; the device wrote the word.
            if unsafe { mapped.read_word(STATUS_WORD) } == 0 {
                return Ok(None);
            }
        }
        let words = download(
            stream,
            &self.arena.slice(layout.control_words()),
            "control block read-back",
        )?;
        let recorded = control::decode_for_plan(&words, module, plan);
        if self.mapped.is_some() && recorded.is_none() {
            return Err(RunError::Backend(
                "the kernel flagged an error but recorded none".into(),
            ));
        }
        Ok(recorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_nvrtc_cannot_compile_for_is_named_with_what_it_can() {
        let error = CudaError::UnsupportedArch {
            device: "NVIDIA GeForce GTX 1080".into(),
            arch: 61,
            nvrtc_major: 13,
            nvrtc_minor: 0,
            supported: describe_archs(&[75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]),
        };
        assert_eq!(
            error.to_string(),
            "NVIDIA GeForce GTX 1080 is sm_61, but NVRTC 13.0 compiles for sm_75 to sm_121 only, so the CUDA backend cannot run on it; the WGSL backend can (`--backend wgpu`)"
        );
        assert_eq!(describe_archs(&[90, 100]), "sm_90, sm_100");
    }
}
