//! DLPack on the CUDA device: device arrays of other libraries (PyTorch,
//! JAX, CuPy) used in place by `mpmd.Cuda().call`, and outputs handed back
//! as [`DeviceArray`]s any of them can take without a copy.
//!
//! The structs are DLPack's C ABI (`dlpack.h`, the unversioned
//! `DLManagedTensor` every producer gives when no `max_version` is asked).

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use mpmd_core::ir::ScalarType;
use mpmd_cuda::cudarc::driver::CudaSlice;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// `kDLCUDA`.
pub const DEVICE_CUDA: i32 = 2;

const CODE_INT: u8 = 0;
const CODE_UINT: u8 = 1;
const CODE_FLOAT: u8 = 2;
const CODE_BFLOAT: u8 = 4;
const CODE_BOOL: u8 = 6;

const CAPSULE: &CStr = c"dltensor";
const USED_CAPSULE: &CStr = c"used_dltensor";

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// DLPack's type of an element type as mpmd stores it on the device (a
/// `bool` is a 32-bit word).
fn dl_type(elem: ScalarType) -> DlDataType {
    let (code, bits) = match elem {
        ScalarType::F32 => (CODE_FLOAT, 32),
        ScalarType::I32 => (CODE_INT, 32),
        ScalarType::U32 | ScalarType::Bool => (CODE_UINT, 32),
        ScalarType::F16 => (CODE_FLOAT, 16),
        ScalarType::BF16 => (CODE_BFLOAT, 16),
    };
    DlDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn dl_type_name(t: DlDataType) -> String {
    let kind = match t.code {
        CODE_INT => "int",
        CODE_UINT => "uint",
        CODE_FLOAT => "float",
        CODE_BFLOAT => "bfloat",
        CODE_BOOL => "bool",
        _ => "type code ",
    };
    let lanes = if t.lanes == 1 {
        String::new()
    } else {
        format!("x{}", t.lanes)
    };
    if t.code == CODE_BOOL {
        return format!("bool{lanes}");
    }
    format!("{kind}{}{lanes}", t.bits)
}

/// A device array another library handed over through DLPack, used in
/// place: its capsule is consumed (renamed `used_dltensor`), and the
/// producer's deleter runs when this value is dropped, after the run that
/// used it has finished.
pub struct Imported {
    managed: *mut DlManagedTensor,
    /// The device address of element 0.
    pub address: u64,
}

// SAFETY: the managed tensor is owned by this value alone once its capsule
// is consumed; DLPack lets the deleter run on any thread.
unsafe impl Send for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        // SAFETY: `managed` came from a consumed capsule and is deleted once.
        unsafe {
            if let Some(deleter) = (*self.managed).deleter {
                deleter(self.managed);
            }
        }
    }
}

/// Takes the DLPack capsule `capsule` (what `__dlpack__` returned) for an
/// operand of `elem` elements and host shape `shape` on CUDA device
/// `device`: checks device, type, shape and layout (C-contiguous) and
/// consumes the capsule. `what` names the operand in messages.
pub fn import(
    capsule: &Bound<'_, PyAny>,
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    device: usize,
) -> PyResult<Imported> {
    // SAFETY: plain capsule queries on a live object.
    let managed = unsafe {
        if ffi::PyCapsule_IsValid(capsule.as_ptr(), CAPSULE.as_ptr()) != 1 {
            return Err(PyTypeError::new_err(format!(
                "{what}: `__dlpack__()` did not return an unused DLPack capsule"
            )));
        }
        ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr()) as *mut DlManagedTensor
    };
    if managed.is_null() {
        return Err(PyTypeError::new_err(format!(
            "{what}: the DLPack capsule holds no tensor"
        )));
    }
    // SAFETY: a valid `dltensor` capsule points at a live managed tensor.
    let tensor = unsafe { &(*managed).dl_tensor };
    let expected = dl_type(elem);
    if tensor.device.device_type != DEVICE_CUDA || tensor.device.device_id as i64 != device as i64 {
        return Err(PyValueError::new_err(format!(
            "{what} is on DLPack device ({}, {}); this backend runs on CUDA device {device}",
            tensor.device.device_type, tensor.device.device_id
        )));
    }
    let (code, bits, lanes) = (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes);
    if (code, bits, lanes) != (expected.code, expected.bits, 1) {
        let hint = if elem == ScalarType::Bool {
            " (mpmd keeps a bool as a 32-bit 0 or 1 on the device: pass a uint32 array)"
        } else {
            ""
        };
        return Err(PyValueError::new_err(format!(
            "{what} expects {} on the device; given {}{hint}",
            dl_type_name(expected),
            dl_type_name(tensor.dtype)
        )));
    }
    let ndim = usize::try_from(tensor.ndim).unwrap_or(0);
    let given: Vec<i64> = if ndim == 0 || tensor.shape.is_null() {
        Vec::new()
    } else {
        // SAFETY: DLPack: `shape` holds `ndim` extents.
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }.to_vec()
    };
    if given.len() != shape.len() || given.iter().zip(shape).any(|(&g, &s)| g != i64::from(s)) {
        return Err(PyValueError::new_err(format!(
            "{what} expects shape {}; given {}",
            crate::shape_text(shape),
            crate::shape_text(&given)
        )));
    }
    if !tensor.strides.is_null() && ndim > 0 {
        // SAFETY: DLPack: `strides`, when not null, holds `ndim` strides in elements.
        let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
        let mut expected_stride = 1i64;
        for (k, &extent) in given.iter().enumerate().rev() {
            if extent > 1 && strides[k] != expected_stride {
                return Err(PyValueError::new_err(format!(
                    "{what} is not C-contiguous (strides {:?}): make it contiguous first",
                    strides
                )));
            }
            expected_stride = expected_stride.saturating_mul(extent);
        }
    }
    let address = (tensor.data as u64)
        .checked_add(tensor.byte_offset)
        .ok_or_else(|| PyValueError::new_err(format!("{what}: its address overflows")))?;
    // SAFETY: consuming the capsule is renaming it, so that its destructor
    // leaves the tensor to us.
    unsafe {
        ffi::PyCapsule_SetName(capsule.as_ptr(), USED_CAPSULE.as_ptr());
    }
    Ok(Imported { managed, address })
}

/// An output of a run on the CUDA device, kept there: pass it to
/// `torch.from_dlpack`, `jax.dlpack.from_dlpack`, `cupy.from_dlpack`, ...
/// (no copy), or `numpy()` it to the host. A `bool` output is a `uint32`
/// array of 0 and 1 (how mpmd keeps bools on the device).
#[pyclass(module = "mpmd._mpmd", name = "DeviceArray", frozen)]
pub struct DeviceArray {
    memory: Arc<CudaSlice<u32>>,
    /// The device address of `memory`.
    address: u64,
    elem: ScalarType,
    shape: Vec<u32>,
    device: i32,
}

impl DeviceArray {
    pub fn new(
        memory: CudaSlice<u32>,
        address: u64,
        elem: ScalarType,
        shape: Vec<u32>,
        device: usize,
    ) -> Self {
        DeviceArray {
            memory: Arc::new(memory),
            address,
            elem,
            shape,
            device: device as i32,
        }
    }
}

/// What a capsule's tensor keeps alive: the memory and the shape it points
/// at. `repr(C)`: the managed tensor is its first field, at its address.
#[repr(C)]
struct Exported {
    managed: DlManagedTensor,
    _memory: Arc<CudaSlice<u32>>,
    shape: Vec<i64>,
}

unsafe extern "C" fn delete_exported(managed: *mut DlManagedTensor) {
    // SAFETY: `managed` is the first field of a boxed `Exported` (repr(C))
    // that `__dlpack__` leaked; DLPack calls the deleter once.
    unsafe { drop(Box::from_raw(managed.cast::<Exported>())) };
}

unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: an unconsumed capsule still owns its tensor; a consumed one
    // (renamed) belongs to its consumer.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE.as_ptr()) == 1 {
            let managed =
                ffi::PyCapsule_GetPointer(capsule, CAPSULE.as_ptr()) as *mut DlManagedTensor;
            if !managed.is_null() {
                if let Some(deleter) = (*managed).deleter {
                    deleter(managed);
                }
            }
        }
    }
}

#[pymethods]
impl DeviceArray {
    /// numpy's name of the element type (`uint32` for a bool output).
    #[getter]
    fn dtype(&self) -> &'static str {
        match self.elem {
            ScalarType::Bool => "uint32",
            other => crate::dtype_name(other),
        }
    }

    #[getter]
    fn shape(&self) -> Vec<u32> {
        self.shape.clone()
    }

    /// `(kDLCUDA, device)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DEVICE_CUDA, self.device)
    }

    /// A DLPack capsule of the array (no copy). The run that wrote it has
    /// finished, so any consumer stream may read it at once.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (stream, max_version);
        if copy == Some(true) {
            return Err(PyValueError::new_err(
                "DeviceArray.__dlpack__(copy=True): a copy is not offered; take the array as it is",
            ));
        }
        if let Some(device) = dl_device {
            let wanted: (i32, i32) = device.extract()?;
            if wanted != (DEVICE_CUDA, self.device) {
                return Err(PyValueError::new_err(format!(
                    "DeviceArray.__dlpack__(dl_device={wanted:?}): the array is on ({DEVICE_CUDA}, {})",
                    self.device
                )));
            }
        }
        let shape: Vec<i64> = self.shape.iter().map(|&d| i64::from(d)).collect();
        let mut exported = Box::new(Exported {
            managed: DlManagedTensor {
                dl_tensor: DlTensor {
                    data: std::ptr::null_mut(),
                    device: DlDevice {
                        device_type: DEVICE_CUDA,
                        device_id: self.device,
                    },
                    ndim: shape.len() as i32,
                    dtype: dl_type(self.elem),
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_exported),
            },
            _memory: Arc::clone(&self.memory),
            shape,
        });
        exported.managed.dl_tensor.shape = exported.shape.as_mut_ptr();
        exported.managed.dl_tensor.data = self.address as *mut c_void;
        let raw = Box::into_raw(exported);
        // SAFETY: `raw` is a leaked `Exported` whose first field is the
        // managed tensor; the capsule's destructor or a consumer deletes it.
        unsafe {
            (*raw).managed.manager_ctx = raw.cast();
            let capsule = ffi::PyCapsule_New(
                raw.cast::<c_void>(),
                CAPSULE.as_ptr(),
                Some(capsule_destructor),
            );
            if capsule.is_null() {
                delete_exported(raw.cast());
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, capsule))
        }
    }

    /// The elements copied to the host, as a numpy array (a `bool`
    /// output as `uint32`).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.memory.stream();
        let words = stream
            .clone_dtoh(&*self.memory)
            .and_then(|w| stream.synchronize().map(|_| w))
            .map_err(|e| {
                crate::MpmdError::new_err(format!("copying a device array to the host: {e:?}"))
            })?;
        let elem = if self.elem == ScalarType::Bool {
            ScalarType::U32
        } else {
            self.elem
        };
        let len = mpmd_core::host::element_count(&self.shape)
            .and_then(|elements| usize::try_from(mpmd_core::host::words_for(elem, elements)).ok())
            .ok_or_else(|| {
                crate::MpmdError::new_err(format!(
                    "a device array of shape {:?} has more bytes than this machine can address",
                    self.shape
                ))
            })?;
        let tensor = mpmd_core::HostTensor::from_words(
            elem,
            self.shape.clone(),
            words.into_iter().take(len).collect(),
        )
        .map_err(|e| crate::MpmdError::new_err(e.to_string()))?;
        let triple = crate::tensor_triple(py, &tensor)?;
        py.import("mpmd")?.getattr("_array")?.call1((triple,))
    }

    fn __repr__(&self) -> String {
        format!(
            "mpmd.DeviceArray(shape={}, dtype={}, device=cuda:{})",
            crate::shape_text(&self.shape),
            self.dtype(),
            self.device
        )
    }
}
