//! `mpmd._mpmd`: the Rust half of the `mpmd` Python package.
//!
//! The Python half (`python/mpmd/__init__.py`) turns numpy arrays, DLPack
//! objects and JAX arrays into `(dtype name, shape, data)` triples (the
//! data a C-contiguous array read in place, `buffer.rs`) and a call's output
//! words or bytearrays back into arrays;
//! everything that decides (parsing, validation and its rendered
//! diagnostics, argument checks, running, error classes) is here, in the
//! library's own terms, so Python behaves as the Rust library and the CLI do.

// RunError is the shared error type of every backend; boxing it is not ours to decide.
#![allow(clippy::result_large_err)]

mod backend;
mod buffer;
mod convert;
mod device;
mod dlpack;
mod errors;
mod ffi;
mod interrupt;
mod module;

pub(crate) use backend::*;
pub(crate) use convert::*;
pub(crate) use device::*;
pub(crate) use errors::*;
pub(crate) use interrupt::SigintGuard;
pub(crate) use module::*;

use pyo3::prelude::*;

/// Runs the `mpmd` CLI with `argv` (the program name first), as the `mpmd`
/// binary does: output on stdout, errors on stderr; returns its exit code.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    use std::io::Write;
    let code = py.detach(|| mpmd_cli::main_with_args(argv));
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // ExitCode keeps its number to itself; the CLI's are small.
    (0..=u8::MAX)
        .find(|&n| std::process::ExitCode::from(n) == code)
        .unwrap_or(1)
}

#[pymodule]
fn _mpmd(m: &Bound<'_, pyo3::types::PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyModule_>()?;
    m.add_class::<PyBackend>()?;
    m.add_class::<dlpack::DeviceArray>()?;
    m.add_class::<buffer::OutputWords>()?;
    m.add_class::<ffi::PyFfiKernel>()?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(ffi::ffi_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(ffi::ffi_handler, m)?)?;
    m.add_function(wrap_pyfunction!(ffi::ffi_synchronize, m)?)?;
    m.add("MpmdError", py.get_type::<MpmdError>())?;
    m.add("ValidationError", py.get_type::<ValidationError>())?;
    m.add("LowerError", py.get_type::<LowerError>())?;
    m.add(
        "BackendUnavailableError",
        py.get_type::<BackendUnavailableError>(),
    )?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("RaceError", py.get_type::<RaceError>())?;
    m.add("DeadlockError", py.get_type::<DeadlockError>())?;
    m.add("OutOfBoundsError", py.get_type::<OutOfBoundsError>())?;
    m.add(
        "UninitializedReadError",
        py.get_type::<UninitializedReadError>(),
    )?;
    m.add("WaitTimeoutError", py.get_type::<WaitTimeoutError>())?;
    m.add(
        "BadSemaphoreAmountError",
        py.get_type::<BadSemaphoreAmountError>(),
    )?;
    m.add("LoopLimitError", py.get_type::<LoopLimitError>())?;
    m.add(
        "NondeterministicError",
        py.get_type::<NondeterministicError>(),
    )?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("RefusedError", py.get_type::<RefusedError>())?;
    Ok(())
}
