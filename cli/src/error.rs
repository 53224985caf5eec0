//! What goes wrong in a command, and how run errors name options (CLI flags,
//! the Python package's parameters).

use mpmd_core::inputs;
use mpmd_core::interp::OverBudget;
use mpmd_core::plan::LowerError;
use mpmd_core::RunError;
use mpmd_frontend::{name_options, with_option_names};
use thiserror::Error;

use crate::npy;

#[derive(Debug, Error)]
pub enum CliError {
    /// A file not read, a backend not available or a target not emitted:
    /// the shared services' errors, their messages as they are.
    #[error(transparent)]
    Frontend(mpmd_frontend::FrontendError),
    /// Already rendered diagnostics (parse or validation errors).
    #[error("{0}")]
    Rejected(String),
    #[error("cannot lower: {0}")]
    Lower(#[from] LowerError),
    #[error("{0}")]
    Usage(String),
    #[error("call {index} (map `{map}`) failed: {error}{notes}")]
    Run {
        index: usize,
        map: String,
        error: Box<RunError>,
        /// The source of the statements the error points at (a race's
        /// accesses), rendered: empty, or lines that each start with a
        /// newline.
        notes: String,
    },
    #[error(transparent)]
    Npy(#[from] npy::NpyError),
    #[error("{error}{}", limit_hint(error))]
    Generate { error: inputs::GenerateError },
    /// Inputs (generated or read) would pass `--memory-limit` beside what
    /// the run already holds.
    #[error("{0}; raise it with --memory-limit BYTES")]
    MemoryLimit(OverBudget),
    #[error("cannot give resident `{name}` its data: {error}")]
    Resident { name: String, error: Box<RunError> },
    #[error("cannot create `{path}`: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    WriteFile {
        path: String,
        source: std::io::Error,
    },
    /// `--compare` found outputs that differ from their reference: the
    /// run's summary (stdout, as for a run that matches) and one report per
    /// such output (stderr).
    #[error("{report}")]
    Mismatch { summary: String, report: String },
}

/// The shared services' errors keep their messages; the ones the CLI also
/// raises itself (rendered diagnostics, lowering, usage) become those.
impl From<mpmd_frontend::FrontendError> for CliError {
    fn from(error: mpmd_frontend::FrontendError) -> Self {
        use mpmd_frontend::FrontendError as F;
        match error {
            F::Rejected(rendered) => CliError::Rejected(rendered),
            F::Lower(error) => CliError::Lower(error),
            F::ConstOverride(message) => CliError::Usage(message),
            other => CliError::Frontend(other),
        }
    }
}

impl From<inputs::GenerateError> for CliError {
    fn from(error: inputs::GenerateError) -> Self {
        CliError::Generate { error }
    }
}

/// How the CLI user raises the limit a generation error names.
fn limit_hint(error: &inputs::GenerateError) -> &'static str {
    match error {
        inputs::GenerateError::TooLarge { .. } | inputs::GenerateError::OverBudget { .. } => {
            "; raise it with --memory-limit BYTES"
        }
        _ => "",
    }
}

/// The Rust options that messages of the library name, and the flag that
/// sets each in the CLI: the one table that turns one into the other.
pub const OPTION_FLAGS: &[(&str, &str)] = &[
    ("InterpOptions::time_limit", "--timeout SECONDS"),
    ("WgpuOptions::time_limit", "--timeout SECONDS"),
    ("InterpOptions::memory_limit", "--memory-limit BYTES"),
    ("InterpOptions::extra_schedules", "--schedules N"),
    ("WgpuOptions::co_resident", "--co-resident"),
    ("HostOptions::time_limit_s", "--timeout SECONDS"),
];

/// `text` with every Rust option of [`OPTION_FLAGS`] replaced by its flag.
pub fn name_flags(text: &str) -> String {
    name_options(text, OPTION_FLAGS)
}

/// A run error as the CLI reports it: options named by their flags.
pub fn for_cli(error: RunError) -> RunError {
    with_option_names(error, OPTION_FLAGS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages of the library name Rust options; the CLI names its flags.
    #[test]
    fn run_errors_name_cli_flags() {
        let site = mpmd_core::backend::Site::default();
        let error = for_cli(RunError::TimeLimit {
            at: mpmd_core::backend::Activity::Running(site),
            limit_ms: 1000,
            option: "InterpOptions::time_limit".into(),
        });
        assert_eq!(
            error.to_string(),
            "time limit of 1000 ms reached at program 0 (), block 0; raise it with --timeout SECONDS"
        );
        let error = for_cli(RunError::Refused {
            reason: "2 GiB is more than InterpOptions::memory_limit".into(),
        });
        assert_eq!(
            error.to_string(),
            "refused before launch: 2 GiB is more than --memory-limit BYTES"
        );
    }
}
