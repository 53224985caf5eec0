//! A lowered map as text: the plan description, CUDA C or WGSL.

use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;

use crate::{describe, FrontendError};

/// What `mpmd lower` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Target {
    /// The launch plan, readably.
    Plan,
    /// CUDA C (from `mpmd-cuda`).
    Cuda,
    /// WGSL (from `mpmd-wgpu`).
    Wgsl,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Cuda => "cuda",
            Self::Wgsl => "wgsl",
        }
    }

    /// The file name ending of one map's text (`mpmd lower --out-dir`).
    pub fn extension(self) -> &'static str {
        match self {
            Self::Plan => "plan.txt",
            Self::Cuda => "cu",
            Self::Wgsl => "wgsl",
        }
    }

    /// What the text is written in, for messages.
    pub fn language(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Cuda => "CUDA C",
            Self::Wgsl => "WGSL",
        }
    }
}

/// The text `mpmd lower` prints for one lowered map. Each target is one arm.
pub fn emit(target: Target, plan: &LaunchPlan) -> Result<String, FrontendError> {
    match target {
        Target::Plan => Ok(describe::describe(plan)),
        Target::Cuda => mpmd_cuda::emit(plan, Mode::Fast).map_err(|e| FrontendError::Emit {
            target: target.name(),
            reason: e.to_string(),
        }),
        Target::Wgsl => mpmd_wgpu::emit(plan, Mode::Fast).map_err(|e| FrontendError::Emit {
            target: target.name(),
            reason: e.to_string(),
        }),
    }
}
