//! An input's bytes read in place: a `bytes` object's own, or the memory
//! of any C-contiguous buffer (a numpy array) through the buffer protocol,
//! so that an array is copied once, into the call's host tensor.
//!
//! The buffer protocol is in the stable ABI from Python 3.11 (`Py_buffer`
//! has had this layout since 3.3, but it is only promised from 3.11); the
//! extension is built for 3.9's stable ABI, so the two functions and the
//! struct are declared here and used only on 3.11 or later. On 3.9 and
//! 3.10 the bytes are those of `data.tobytes()`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `Py_buffer` (`Include/pybuffer.h`, stable ABI from 3.11).
#[repr(C)]
struct PyBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

/// `PyBUF_SIMPLE`: contiguous bytes, no shape, strides or format asked.
const BUFFER_SIMPLE: c_int = 0;

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBuffer);
}

/// Whether this Python has the buffer protocol in its stable ABI.
fn buffer_protocol(py: Python<'_>) -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| py.version_info() >= (3, 11))
}

/// Runs `read` on the bytes of `data` (C order): those of a `bytes`
/// object, of a C-contiguous buffer, or of `data.tobytes()`.
pub(crate) fn with_bytes<R>(data: &Bound<'_, PyAny>, read: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(read(bytes.as_bytes()));
    }
    if buffer_protocol(data.py()) {
        // SAFETY: a zeroed view filled by the object; released below, once.
        let mut view: PyBuffer = unsafe { std::mem::zeroed() };
        // SAFETY: `data` is a live object; the GIL is held.
        if unsafe { PyObject_GetBuffer(data.as_ptr(), &mut view, BUFFER_SIMPLE) } == 0 {
            let len = usize::try_from(view.len).unwrap_or(0);
            let bytes = if view.buf.is_null() || len == 0 {
                &[][..]
            } else {
                // SAFETY: a PyBUF_SIMPLE view is `len` contiguous bytes at
                // `buf`, valid until it is released.
                unsafe { std::slice::from_raw_parts(view.buf as *const u8, len) }
            };
            let result = read(bytes);
            // SAFETY: the view obtained above.
            unsafe { PyBuffer_Release(&mut view) };
            return Ok(result);
        }
        // Not a contiguous buffer: `tobytes` below, or its error.
        PyErr::take(data.py());
    }
    let copied = data.call_method0("tobytes").map_err(|e| {
        PyTypeError::new_err(format!(
            "an input's data must be bytes or an array (tobytes: {e})"
        ))
    })?;
    let bytes = copied.cast::<PyBytes>().map_err(|_| {
        PyTypeError::new_err("an input's data must be bytes or an array (tobytes gave no bytes)")
    })?;
    Ok(read(bytes.as_bytes()))
}
