//! What goes wrong in the shared services.

use mpmd_core::plan::LowerError;
use thiserror::Error;

/// Why a file could not be loaded, a backend chosen or a target emitted.
/// The messages are the CLI's (`mpmd check`, `mpmd run`, `mpmd lower`).
#[derive(Debug, Error)]
pub enum FrontendError {
    #[error("cannot read `{path}`: {source}")]
    ReadFile {
        path: String,
        source: std::io::Error,
    },
    /// Already rendered diagnostics (parse or validation errors).
    #[error("{0}")]
    Rejected(String),
    #[error("backend `{name}` is not available: {reason}")]
    BackendUnavailable { name: &'static str, reason: String },
    #[error("cannot emit {target}: {reason}")]
    Emit {
        target: &'static str,
        reason: String,
    },
    #[error("cannot lower: {0}")]
    Lower(#[from] LowerError),
    /// A constant override the loader refused (`load_source_with`).
    #[error("{0}")]
    ConstOverride(String),
}

impl From<mpmd_core::load::LoadError> for FrontendError {
    fn from(error: mpmd_core::load::LoadError) -> Self {
        match error {
            mpmd_core::load::LoadError::Rejected(rejected) => rejected.into(),
            mpmd_core::load::LoadError::Override(message) => FrontendError::ConstOverride(message),
        }
    }
}

impl From<mpmd_core::load::Rejected> for FrontendError {
    fn from(rejected: mpmd_core::load::Rejected) -> Self {
        FrontendError::Rejected(rejected.0)
    }
}
