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

/// A C-contiguous buffer's memory lent to a call's input tensor
/// ([`mpmd_core::host::SharedWords`]): the words are read where they lie,
/// not copied. The view pins the exporter's memory (numpy cannot resize or
/// free it) until the tensor is dropped, at the end of the call; the array
/// must not be written while the call runs (the call does not hold the GIL).
pub(crate) struct LentWords {
    view: Box<PyBuffer>,
    words: *const u32,
    len: usize,
}

// SAFETY: the words are only read, and only while the view (which keeps
// them alive and in place) is held; releasing the view takes the GIL.
unsafe impl Send for LentWords {}
// SAFETY: as for Send: shared access is reads only.
unsafe impl Sync for LentWords {}

impl std::fmt::Debug for LentWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LentWords({} words)", self.len)
    }
}

impl mpmd_core::host::SharedWords for LentWords {
    fn words(&self) -> &[u32] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` aligned words at `words`, in the view's memory,
        // which stays valid while the view is held (`lend_words`).
        unsafe { std::slice::from_raw_parts(self.words, self.len) }
    }
}

impl Drop for LentWords {
    fn drop(&mut self) {
        // SAFETY: the view obtained in `lend_words`, released once, with the GIL.
        Python::attach(|_| unsafe { PyBuffer_Release(&mut *self.view) });
    }
}

/// The memory of `data` as whole, aligned 32-bit words, lent for one call
/// (`None`: not a C-contiguous buffer of whole aligned words, or a Python
/// without the buffer protocol in its stable ABI; the caller copies).
pub(crate) fn lend_words(data: &Bound<'_, PyAny>) -> Option<LentWords> {
    if !buffer_protocol(data.py()) {
        return None;
    }
    // SAFETY: a zeroed view filled by the object; released by `LentWords`
    // or below, once.
    let mut view: Box<PyBuffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `data` is a live object; the GIL is held.
    if unsafe { PyObject_GetBuffer(data.as_ptr(), &mut *view, BUFFER_SIMPLE) } != 0 {
        PyErr::take(data.py());
        return None;
    }
    let bytes = usize::try_from(view.len).unwrap_or(usize::MAX);
    let words = view.buf as *const u32;
    let lent = LentWords {
        words,
        len: bytes / 4,
        view,
    };
    // Dropping `lent` releases the view.
    let whole = bytes.is_multiple_of(4) && bytes != usize::MAX;
    (whole && !words.is_null() && words.is_aligned()).then_some(lent)
}

/// A call's output words handed to numpy without a copy: numpy reads and
/// writes them in place through `__array_interface__` (bytes, C order) and
/// keeps this object alive as the array's base.
#[pyclass(module = "mpmd._mpmd", name = "_OutputWords", frozen)]
pub(crate) struct OutputWords {
    /// A vector's raw parts, taken apart so that numpy may write the
    /// words (no Rust reference to them exists); put together again on drop.
    words: *mut u32,
    len: usize,
    capacity: usize,
    /// Bytes numpy sees: the elements, not the unused half of a last 16-bit word.
    bytes: usize,
}

// SAFETY: the object owns its words; Rust never reads them after taking the
// vector apart, and numpy accesses them under its own rules.
unsafe impl Send for OutputWords {}
// SAFETY: as for Send.
unsafe impl Sync for OutputWords {}

impl OutputWords {
    /// `words`, of which numpy sees the first `bytes` bytes (at most all).
    pub(crate) fn new(words: Vec<u32>, bytes: usize) -> Self {
        let mut words = std::mem::ManuallyDrop::new(words);
        OutputWords {
            bytes: bytes.min(words.len() * 4),
            words: words.as_mut_ptr(),
            len: words.len(),
            capacity: words.capacity(),
        }
    }
}

impl Drop for OutputWords {
    fn drop(&mut self) {
        // SAFETY: the raw parts of the vector taken apart in `new`, put
        // together once.
        drop(unsafe { Vec::from_raw_parts(self.words, self.len, self.capacity) });
    }
}

#[pymethods]
impl OutputWords {
    /// numpy's array interface (version 3): the bytes, writable.
    #[getter]
    fn __array_interface__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let interface = pyo3::types::PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", (self.bytes,))?;
        interface.set_item("typestr", "|u1")?;
        interface.set_item("data", (self.words as usize, false))?;
        Ok(interface)
    }
}
