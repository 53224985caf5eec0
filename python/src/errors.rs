//! The exceptions mpmd raises, and how library errors become them.

use mpmd_core::ErrorClass;
use mpmd_core::RunError as CoreRunError;
use mpmd_frontend::FrontendError;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    mpmd,
    MpmdError,
    PyException,
    "Base class of every error mpmd raises."
);
create_exception!(
    mpmd,
    ValidationError,
    MpmdError,
    "A module that does not parse or validate; the message is the CLI's rendered diagnostics."
);
create_exception!(
    mpmd,
    LowerError,
    MpmdError,
    "A map that cannot be lowered or emitted for a target."
);
create_exception!(
    mpmd,
    BackendUnavailableError,
    MpmdError,
    "A backend this machine cannot provide (no GPU, no adapter)."
);
create_exception!(
    mpmd,
    RunError,
    MpmdError,
    "A call that produced no outputs; `error_class` names the class (or None)."
);
create_exception!(
    mpmd,
    RaceError,
    RunError,
    "A data race (checked interpreter)."
);
create_exception!(
    mpmd,
    DeadlockError,
    RunError,
    "Every live block waits; the message holds the wait-for graph."
);
create_exception!(
    mpmd,
    OutOfBoundsError,
    RunError,
    "An access out of bounds (checked mode)."
);
create_exception!(
    mpmd,
    UninitializedReadError,
    RunError,
    "A read of memory that was never written (checked interpreter)."
);
create_exception!(
    mpmd,
    WaitTimeoutError,
    RunError,
    "A semaphore wait timed out."
);
create_exception!(
    mpmd,
    BadSemaphoreAmountError,
    RunError,
    "A signal or wait amount below 1 at run time."
);
create_exception!(
    mpmd,
    LoopLimitError,
    RunError,
    "A `while` loop reached its maximum trip count (checked mode)."
);
create_exception!(
    mpmd,
    NondeterministicError,
    RunError,
    "Results differ between the interpreter's schedules."
);
create_exception!(
    mpmd,
    UnsupportedError,
    RunError,
    "The backend cannot run this map on this adapter."
);
create_exception!(
    mpmd,
    RefusedError,
    RunError,
    "The backend refused the call before launch (a cycle, a memory limit)."
);

/// The Rust options that the library's messages name, and the Python
/// parameter that sets each: Python's counterpart of the CLI's `OPTION_FLAGS`.
pub(crate) const OPTION_PARAMETERS: &[(&str, &str)] = &[
    ("InterpOptions::time_limit", "Interpreter(timeout=SECONDS)"),
    ("WgpuOptions::time_limit", "Wgpu(timeout=SECONDS)"),
    (
        "InterpOptions::memory_limit",
        "Interpreter(memory_limit=BYTES)",
    ),
    ("InterpOptions::extra_schedules", "Interpreter(schedules=N)"),
    ("WgpuOptions::co_resident", "Wgpu(co_resident=True)"),
];

/// A run error's text as Python reports it: the CLI's report, options
/// named by their parameters.
pub(crate) fn run_error_text(error: &CoreRunError) -> String {
    mpmd_frontend::with_option_names(error.clone(), OPTION_PARAMETERS).to_string()
}

/// The exception for a run error: one class per [`ErrorClass`], `RunError`
/// for the others. The instance carries `error_class` (the class keyword
/// of the corpus, such as `data_race`, or None) and `map` (None when no
/// call failed: `set_resident`).
pub(crate) fn run_error(py: Python<'_>, map: Option<&str>, error: &CoreRunError) -> PyErr {
    let message = run_error_text(error);
    let class = error.class();
    let err = match class {
        Some(ErrorClass::DataRace) => RaceError::new_err(message),
        Some(ErrorClass::Deadlock) => DeadlockError::new_err(message),
        Some(ErrorClass::OutOfBounds) => OutOfBoundsError::new_err(message),
        Some(ErrorClass::UninitializedRead) => UninitializedReadError::new_err(message),
        Some(ErrorClass::WaitTimeout) => WaitTimeoutError::new_err(message),
        Some(ErrorClass::BadSemaphoreAmount) => BadSemaphoreAmountError::new_err(message),
        Some(ErrorClass::LoopLimit) => LoopLimitError::new_err(message),
        Some(ErrorClass::Nondeterministic) => NondeterministicError::new_err(message),
        Some(ErrorClass::Unsupported) => UnsupportedError::new_err(message),
        Some(ErrorClass::Refused) => RefusedError::new_err(message),
        None => RunError::new_err(message),
    };
    let value = err.value(py);
    let _ = value.setattr("error_class", class.map(ErrorClass::keyword));
    let _ = value.setattr("map", map);
    err
}

/// A module the CLI's loader refused, or a file it could not read, as
/// the exception Python raises: the message is exactly what the CLI prints.
pub(crate) fn load_error(error: FrontendError) -> PyErr {
    match error {
        FrontendError::Rejected(rendered) => validation_error(rendered),
        FrontendError::ReadFile { .. } => PyOSError::new_err(error.to_string()),
        // A constant override the loader refused (`consts=`).
        FrontendError::ConstOverride(message) => PyValueError::new_err(message),
        other => MpmdError::new_err(other.to_string()),
    }
}

pub(crate) fn validation_error(rendered: String) -> PyErr {
    ValidationError::new_err(rendered.trim_end_matches('\n').to_string())
}
