//! XLA FFI handlers: under `jax.jit`, `mpmd.jax.kernel` calls a map through
//! an XLA custom call (`jax.ffi.ffi_call("mpmd_kernel", ...)`) handled here.
//!
//! - On CUDA the handler runs the CUDA backend on XLA's own stream with
//!   XLA's buffers (no host copy, no synchronisation): one backend per
//!   (context, stream), each map prepared once. An error a kernel records
//!   is reported by the next mpmd call on that stream (the status word is
//!   host memory, read without waiting) or by `mpmd.jax.synchronize()`.
//! - On the CPU the handler runs the map on the kernel's backend (the
//!   interpreter unless the user gave another) from XLA's host buffers.
//! - A kernel whose backend is not CUDA, called on a CUDA platform, runs on
//!   its backend through host copies made by the handler.
//!
//! The call frame's layout is XLA's C ABI (`xla/ffi/api/c_api.h` of the
//! installed jaxlib), declared in [`xla`] for what the handlers use. XLA
//! accepts a handler only when it reports exactly the framework's API
//! version, which Python reads from that header and passes to
//! [`ffi_handler`].
//!
//! Operands of a call: the map's uploaded inputs (map order), then the
//! scalars not given as attributes (map order), each a 0-d array.
//! Attributes: `mpmd_kernel` (s64, the registered kernel) and
//! `scalar_NAME` (u32, the scalar's bits) for scalars known when tracing.
//! Results: the map's outputs (map order). A `bool` operand travels as
//! `uint32` 0 or 1 (how mpmd keeps bools on the device).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use mpmd_core::case::CaseSpec;
use mpmd_core::host::CallArgs;
use mpmd_core::ir::{Literal, ScalarType, Type};
use mpmd_core::lru::Lru;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::validate::ValidModule;
use mpmd_core::{inputs, HostTensor, Mode, RunError as CoreRunError};
use mpmd_cuda::cudarc::driver::sys as cu;
use mpmd_cuda::{CudaBackend, CudaBuffer, CudaOptions, CudaPrepared, DeviceArgs};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{run_error, run_error_text, Engine, PyBackend, PyModule_};

/// The XLA FFI C ABI, as far as the handlers use it.
#[allow(dead_code)]
mod xla {
    use std::ffi::{c_char, c_void};

    pub const EXTENSION_METADATA: i32 = 1;
    pub const BUFFER: i32 = 1;
    pub const ATTR_SCALAR: i32 = 3;
    pub const STAGE_EXECUTE: i32 = 3;

    pub const ERROR_INVALID_ARGUMENT: i32 = 3;
    pub const ERROR_FAILED_PRECONDITION: i32 = 9;
    pub const ERROR_INTERNAL: i32 = 13;

    pub const PRED: i32 = 1;
    pub const S32: i32 = 4;
    pub const S64: i32 = 5;
    pub const U32: i32 = 8;
    pub const F16: i32 = 10;
    pub const F32: i32 = 11;
    pub const BF16: i32 = 16;

    #[repr(C)]
    pub struct ExtensionBase {
        pub struct_size: usize,
        pub kind: i32,
        pub next: *mut ExtensionBase,
    }

    #[repr(C)]
    pub struct ApiVersion {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub major: i32,
        pub minor: i32,
    }

    #[repr(C)]
    pub struct Metadata {
        pub struct_size: usize,
        pub api_version: ApiVersion,
        pub traits: u32,
    }

    #[repr(C)]
    pub struct MetadataExtension {
        pub base: ExtensionBase,
        pub metadata: *mut Metadata,
    }

    #[repr(C)]
    pub struct Buffer {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub dtype: i32,
        pub data: *mut c_void,
        pub rank: i64,
        pub dims: *mut i64,
    }

    /// `XLA_FFI_Args` and `XLA_FFI_Rets` (the same layout).
    #[repr(C)]
    pub struct List {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub size: i64,
        pub types: *mut i32,
        pub items: *mut *mut c_void,
    }

    #[repr(C)]
    pub struct ByteSpan {
        pub ptr: *const c_char,
        pub len: usize,
    }

    #[repr(C)]
    pub struct Scalar {
        pub dtype: i32,
        pub value: *mut c_void,
    }

    #[repr(C)]
    pub struct Attrs {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub size: i64,
        pub types: *mut i32,
        pub names: *mut *mut ByteSpan,
        pub attrs: *mut *mut c_void,
    }

    #[repr(C)]
    pub struct CallFrame {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub api: *const Api,
        pub ctx: *mut c_void,
        pub stage: i32,
        pub args: List,
        pub rets: List,
        pub attrs: Attrs,
    }

    #[repr(C)]
    pub struct ErrorCreateArgs {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub message: *const c_char,
        pub errc: i32,
    }

    #[repr(C)]
    pub struct StreamGetArgs {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub ctx: *mut c_void,
        pub stream: *mut c_void,
    }

    /// An opaque `XLA_FFI_Error`.
    pub type Error = c_void;

    #[repr(C)]
    pub struct Api {
        pub struct_size: usize,
        pub extension_start: *mut ExtensionBase,
        pub api_version: ApiVersion,
        pub internal_api: *const c_void,
        pub error_create: Option<unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut Error>,
        pub error_get_message: *const c_void,
        pub error_destroy: *const c_void,
        pub handler_register: *const c_void,
        pub stream_get: Option<unsafe extern "C" fn(*mut StreamGetArgs) -> *mut Error>,
    }

    /// `XLA_FFI_STRUCT_SIZE`: the offset of the last field plus its size.
    pub const API_VERSION_SIZE: usize = std::mem::offset_of!(ApiVersion, minor) + 4;
    pub const METADATA_SIZE: usize = std::mem::offset_of!(Metadata, traits) + 4;
    pub const CALL_FRAME_SIZE: usize =
        std::mem::offset_of!(CallFrame, attrs) + std::mem::size_of::<Attrs>();
    pub const ERROR_CREATE_SIZE: usize = std::mem::offset_of!(ErrorCreateArgs, errc) + 4;
    pub const STREAM_GET_SIZE: usize = std::mem::offset_of!(StreamGetArgs, stream) + 8;
    pub const API_STREAM_GET_END: usize = std::mem::offset_of!(Api, stream_get) + 8;
}

/// The XLA FFI API version the handlers report (the installed jaxlib's).
static API_MAJOR: AtomicI32 = AtomicI32::new(-1);
static API_MINOR: AtomicI32 = AtomicI32::new(-1);

/// One operand a call passes: its name, element type and host shape.
struct OperandSpec {
    name: String,
    elem: ScalarType,
    shape: Vec<u32>,
    len: u64,
}

/// A map registered for FFI calls (`mpmd.jax.kernel` makes one).
pub struct FfiKernel {
    id: u64,
    module: Arc<ValidModule>,
    /// The file's case section: its `compare` lines set the interpreter's
    /// schedule tolerances, as for `backend.call`.
    case: Option<CaseSpec>,
    map: String,
    plan: Arc<LaunchPlan>,
    /// The backend the CPU handler (and the CUDA handler's host copies) run.
    engine: Arc<Mutex<Engine>>,
    /// Run on the CUDA platform without host copies, in this mode.
    cuda_mode: Option<Mode>,
    inputs: Vec<OperandSpec>,
    outputs: Vec<OperandSpec>,
    scalars: Vec<(String, ScalarType)>,
}

fn kernels() -> MutexGuard<'static, HashMap<u64, Arc<FfiKernel>>> {
    static KERNELS: OnceLock<Mutex<HashMap<u64, Arc<FfiKernel>>>> = OnceLock::new();
    KERNELS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

static NEXT_KERNEL: AtomicU64 = AtomicU64::new(1);

/// The CUDA backend of one XLA stream and the maps it prepared.
struct StreamState {
    backend: CudaBackend,
    /// By kernel id.
    prepared: Lru<u64, CudaPrepared>,
}

/// Maps one stream keeps prepared.
const PREPARED_PER_STREAM: usize = 64;

fn streams() -> MutexGuard<'static, HashMap<(usize, usize), StreamState>> {
    static STREAMS: OnceLock<Mutex<HashMap<(usize, usize), StreamState>>> = OnceLock::new();
    STREAMS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A registered kernel, for Python: unregisters itself when dropped.
#[pyclass(module = "mpmd._mpmd", name = "_FfiKernel", frozen)]
pub struct PyFfiKernel {
    id: u64,
}

#[pymethods]
impl PyFfiKernel {
    /// The `mpmd_kernel` attribute of the kernel's calls.
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for PyFfiKernel {
    fn drop(&mut self) {
        kernels().remove(&self.id);
        for state in streams().values_mut() {
            state.prepared.remove(&self.id);
        }
    }
}

/// Registers `map` of `module` for FFI calls run by `backend`. `cuda`:
/// on a CUDA platform, run the CUDA backend on XLA's buffers (the CPU
/// handler still runs `backend`); a CUDA `backend` always does, in its mode.
#[pyfunction]
pub fn ffi_kernel(
    module: &PyModule_,
    map: &str,
    backend: &PyBackend,
    cuda: bool,
) -> PyResult<PyFfiKernel> {
    let the_map = module.map(map)?;
    let plan = module.plan(map)?;
    let spec = |o: &mpmd_core::ir::Operand| -> Option<OperandSpec> {
        let ty = o.ty.as_ref_type()?;
        let shape = inputs::host_shape(&module.module, o)?;
        let len = mpmd_core::host::element_count(&shape)?;
        Some(OperandSpec {
            name: o.name.clone(),
            elem: ty.elem,
            shape,
            len,
        })
    };
    let cuda_mode = match &*backend.engine()? {
        Engine::Cuda { options, .. } => Some(options.mode),
        _ if cuda => Some(Mode::Fast),
        _ => None,
    };
    let id = NEXT_KERNEL.fetch_add(1, Ordering::Relaxed);
    let kernel = FfiKernel {
        id,
        module: Arc::clone(&module.module),
        case: module.case.clone(),
        map: map.to_string(),
        plan,
        engine: Arc::clone(&backend.engine),
        cuda_mode,
        inputs: inputs::uploaded_inputs(the_map).filter_map(spec).collect(),
        outputs: the_map.outputs.iter().filter_map(spec).collect(),
        scalars: the_map
            .scalars
            .iter()
            .filter_map(|s| match s.ty {
                Type::Scalar(ty) => Some((s.name.clone(), ty)),
                _ => None,
            })
            .collect(),
    };
    kernels().insert(id, Arc::new(kernel));
    Ok(PyFfiKernel { id })
}

/// The handler of `platform` (`cpu` or `cuda`) as a PyCapsule for
/// `jax.ffi.register_ffi_target`, reporting XLA FFI API version
/// `major.minor` (the installed jaxlib's `c_api.h`).
#[pyfunction]
pub fn ffi_handler(py: Python<'_>, platform: &str, major: i32, minor: i32) -> PyResult<Py<PyAny>> {
    let handler: unsafe extern "C" fn(*mut xla::CallFrame) -> *mut xla::Error =
        match platform.to_ascii_lowercase().as_str() {
            "cpu" | "host" => cpu_handler,
            "cuda" | "gpu" => cuda_handler,
            other => {
                return Err(PyValueError::new_err(format!(
                    "no mpmd FFI handler for platform `{other}` (there are `cpu` and `cuda`)"
                )))
            }
        };
    API_MAJOR.store(major, Ordering::Relaxed);
    API_MINOR.store(minor, Ordering::Relaxed);
    // SAFETY: a capsule of the function pointer, no name and no destructor,
    // as `jax.ffi.pycapsule` makes one.
    unsafe {
        let capsule = pyo3::ffi::PyCapsule_New(handler as *mut c_void, std::ptr::null(), None);
        if capsule.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule).unbind())
    }
}

/// Waits for every XLA stream mpmd ran maps on and raises the first error
/// a kernel recorded there.
#[pyfunction]
pub fn ffi_synchronize(py: Python<'_>) -> PyResult<()> {
    let result = py.detach(|| {
        let mut first = None;
        for state in streams().values_mut() {
            if let Err(error) = state.backend.synchronize() {
                first.get_or_insert(error);
            }
        }
        first
    });
    match result {
        Some(error) => Err(run_error(py, None, &error)),
        None => Ok(()),
    }
}

/// Why a call failed: XLA's error code and the message.
struct Failure(i32, String);

impl Failure {
    fn argument(message: String) -> Self {
        Failure(xla::ERROR_INVALID_ARGUMENT, message)
    }
    fn run(error: &CoreRunError) -> Self {
        Failure(xla::ERROR_FAILED_PRECONDITION, run_error_text(error))
    }
    fn cuda(what: &str, result: cu::CUresult) -> Self {
        Failure(
            xla::ERROR_INTERNAL,
            format!("mpmd: CUDA {what}: {result:?}"),
        )
    }
}

unsafe extern "C" fn cpu_handler(frame: *mut xla::CallFrame) -> *mut xla::Error {
    // SAFETY: XLA passes a live call frame.
    unsafe { handle(frame, false) }
}

unsafe extern "C" fn cuda_handler(frame: *mut xla::CallFrame) -> *mut xla::Error {
    // SAFETY: as above.
    unsafe { handle(frame, true) }
}

/// # Safety
/// `frame` is XLA's call frame for this call.
unsafe fn handle(frame: *mut xla::CallFrame, cuda: bool) -> *mut xla::Error {
    if frame.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: XLA's frame, live for the call.
    let frame = unsafe { &mut *frame };
    // SAFETY: the extension chain is XLA's.
    let extension = unsafe { frame.extension_start.as_ref() };
    if extension.is_some_and(|e| e.kind == xla::EXTENSION_METADATA) {
        // SAFETY: a metadata extension is an `XLA_FFI_Metadata_Extension`.
        unsafe { report_metadata(frame.extension_start.cast()) };
        return std::ptr::null_mut();
    }
    let api = frame.api;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if frame.struct_size < xla::CALL_FRAME_SIZE {
            return Err(Failure::argument(format!(
                "mpmd: XLA's call frame has {} bytes, fewer than the {} this handler reads",
                frame.struct_size,
                xla::CALL_FRAME_SIZE
            )));
        }
        if frame.stage != xla::STAGE_EXECUTE {
            return Ok(());
        }
        // SAFETY: the frame is XLA's, checked for size above.
        let call = unsafe { decode(frame) }?;
        if cuda {
            // SAFETY: XLA's frame and API on a CUDA platform.
            unsafe { run_on_cuda(frame, api, &call) }
        } else {
            run_on_host(
                &call,
                |buffer, bytes| {
                    if bytes == 0 {
                        return Ok(Cow::Borrowed(&[]));
                    }
                    // SAFETY: XLA's host buffer holds the bytes its dtype and
                    // dims say (checked against the operand; not null when
                    // it holds any), and stays XLA's for the call.
                    Ok(Cow::Borrowed(unsafe {
                        std::slice::from_raw_parts(buffer.data as *const u8, bytes)
                    }))
                },
                |buffer, data| {
                    if data.is_empty() {
                        return Ok(());
                    }
                    // SAFETY: as above; the result buffer is XLA's to write.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            data.as_ptr(),
                            buffer.data as *mut u8,
                            data.len(),
                        )
                    };
                    Ok(())
                },
            )
        }
    }));
    let failure = match outcome {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err(failure)) => failure,
        Err(payload) => Failure(
            xla::ERROR_INTERNAL,
            format!(
                "mpmd: the handler panicked: {}",
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        ),
    };
    // SAFETY: `api` is XLA's.
    unsafe { error(api, failure) }
}

/// Fills the metadata XLA asks for at registration: the API version the
/// handler speaks (Python gave the framework's), no traits (the handler is
/// not safe to capture into a command buffer: a run may compile, allocate
/// and read errors back).
///
/// # Safety
/// `extension` is XLA's metadata extension.
unsafe fn report_metadata(extension: *mut xla::MetadataExtension) {
    // SAFETY: XLA's extension and the metadata it points to.
    unsafe {
        let metadata = (*extension).metadata;
        if metadata.is_null() || (*metadata).struct_size < xla::METADATA_SIZE {
            return;
        }
        (*metadata).api_version = xla::ApiVersion {
            struct_size: xla::API_VERSION_SIZE,
            extension_start: std::ptr::null_mut(),
            major: API_MAJOR.load(Ordering::Relaxed),
            minor: API_MINOR.load(Ordering::Relaxed),
        };
        (*metadata).traits = 0;
    }
}

/// An XLA error carrying `failure`.
///
/// # Safety
/// `api` is XLA's API table (or null).
unsafe fn error(api: *const xla::Api, Failure(errc, message): Failure) -> *mut xla::Error {
    // SAFETY: XLA's table, read within its size.
    let create = unsafe { api.as_ref() }.and_then(|api| api.error_create);
    let Some(create) = create else {
        // Nothing can carry the message: XLA would take a null as success,
        // so fail loudly instead of computing garbage.
        eprintln!("mpmd: {message}");
        std::process::abort();
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = xla::ErrorCreateArgs {
        struct_size: xla::ERROR_CREATE_SIZE,
        extension_start: std::ptr::null_mut(),
        message: text.as_ptr(),
        errc,
    };
    // SAFETY: XLA copies the message.
    unsafe { create(&mut args) }
}

/// A call's operands as decoded from the frame.
struct Call<'a> {
    kernel: Arc<FfiKernel>,
    /// The inputs' buffers, in the kernel's order.
    inputs: Vec<&'a xla::Buffer>,
    /// Scalars: a value from an attribute, or a 0-d buffer.
    scalars: Vec<ScalarSource<'a>>,
    outputs: Vec<&'a xla::Buffer>,
}

enum ScalarSource<'a> {
    Bits(u32),
    Buffer(&'a xla::Buffer),
}

/// XLA's dtype of an element type as mpmd passes it (`bool` as `u32`).
fn xla_dtype(elem: ScalarType) -> i32 {
    match elem {
        ScalarType::F32 => xla::F32,
        ScalarType::I32 => xla::S32,
        ScalarType::U32 | ScalarType::Bool => xla::U32,
        ScalarType::F16 => xla::F16,
        ScalarType::BF16 => xla::BF16,
    }
}

/// The buffers of a list (args or rets), each checked to be a buffer.
///
/// # Safety
/// `list` is XLA's.
unsafe fn buffers<'a>(list: &'a xla::List, what: &str) -> Result<Vec<&'a xla::Buffer>, Failure> {
    let size = usize::try_from(list.size).unwrap_or(0);
    (0..size)
        .map(|k| {
            // SAFETY: XLA's arrays hold `size` entries.
            let (kind, item) = unsafe { (*list.types.add(k), *list.items.add(k)) };
            if kind != xla::BUFFER || item.is_null() {
                return Err(Failure::argument(format!(
                    "mpmd: {what} {k} is not a buffer"
                )));
            }
            // SAFETY: a buffer entry points at an `XLA_FFI_Buffer`.
            Ok(unsafe { &*(item as *const xla::Buffer) })
        })
        .collect()
}

/// The frame's operands, attributes and results, matched with the kernel.
///
/// # Safety
/// `frame` is XLA's execute frame.
unsafe fn decode(frame: &xla::CallFrame) -> Result<Call<'_>, Failure> {
    let mut kernel_id = None;
    let mut bits: BTreeMap<String, u32> = BTreeMap::new();
    let attrs = &frame.attrs;
    for k in 0..usize::try_from(attrs.size).unwrap_or(0) {
        // SAFETY: XLA's attribute arrays hold `size` entries.
        let (kind, name, value) = unsafe {
            let span = &**attrs.names.add(k);
            let name = std::slice::from_raw_parts(span.ptr as *const u8, span.len);
            (
                *attrs.types.add(k),
                String::from_utf8_lossy(name).into_owned(),
                *attrs.attrs.add(k),
            )
        };
        if kind != xla::ATTR_SCALAR || value.is_null() {
            return Err(Failure::argument(format!(
                "mpmd: attribute `{name}` is not a scalar"
            )));
        }
        // SAFETY: a scalar attribute points at an `XLA_FFI_Scalar`.
        let scalar = unsafe { &*(value as *const xla::Scalar) };
        match (name.as_str(), scalar.dtype) {
            // SAFETY: the value has the scalar's dtype.
            ("mpmd_kernel", xla::S64) => kernel_id = Some(unsafe { *(scalar.value as *const i64) }),
            (n, xla::U32) if n.starts_with("scalar_") => {
                // SAFETY: as above.
                bits.insert(n["scalar_".len()..].to_string(), unsafe {
                    *(scalar.value as *const u32)
                });
            }
            _ => {
                return Err(Failure::argument(format!(
                    "mpmd: unexpected attribute `{name}` (dtype {})",
                    scalar.dtype
                )))
            }
        }
    }
    let id =
        kernel_id.ok_or_else(|| Failure::argument("mpmd: no `mpmd_kernel` attribute".into()))?;
    let kernel = kernels().get(&(id as u64)).cloned().ok_or_else(|| {
        Failure::argument(format!(
            "mpmd: kernel {id} is not registered (its registration was dropped: mpmd.jax keeps the mpmd.jax.REGISTRATION_BOUND most recently used ones)"
        ))
    })?;
    // SAFETY: XLA's lists.
    let args = unsafe { buffers(&frame.args, "operand") }?;
    let rets = unsafe { buffers(&frame.rets, "result") }?;
    let map = &kernel.map;
    let traced = kernel
        .scalars
        .iter()
        .filter(|(name, _)| !bits.contains_key(name))
        .count();
    if args.len() != kernel.inputs.len() + traced || rets.len() != kernel.outputs.len() {
        return Err(Failure::argument(format!(
            "mpmd: map `{map}` takes {} operands and {} results here; the call has {} and {}",
            kernel.inputs.len() + traced,
            kernel.outputs.len(),
            args.len(),
            rets.len()
        )));
    }
    for (spec, buffer) in kernel.inputs.iter().zip(&args) {
        check_buffer(
            &format!("input `{}` of map `{map}`", spec.name),
            buffer,
            spec.elem,
            &spec.shape,
        )?;
    }
    for (spec, buffer) in kernel.outputs.iter().zip(&rets) {
        check_buffer(
            &format!("output `{}` of map `{map}`", spec.name),
            buffer,
            spec.elem,
            &spec.shape,
        )?;
    }
    let mut rest = args[kernel.inputs.len()..].iter();
    let mut scalars = Vec::new();
    for (name, ty) in &kernel.scalars {
        scalars.push(match bits.get(name) {
            Some(&b) => ScalarSource::Bits(b),
            None => {
                let buffer = rest.next().ok_or_else(|| {
                    Failure::argument(format!("mpmd: no operand for scalar `{name}`"))
                })?;
                check_buffer(&format!("scalar `{name}` of map `{map}`"), buffer, *ty, &[])?;
                ScalarSource::Buffer(buffer)
            }
        });
    }
    Ok(Call {
        inputs: args[..kernel.inputs.len()].to_vec(),
        outputs: rets,
        scalars,
        kernel,
    })
}

fn check_buffer(
    what: &str,
    buffer: &xla::Buffer,
    elem: ScalarType,
    shape: &[u32],
) -> Result<(), Failure> {
    let rank = usize::try_from(buffer.rank).unwrap_or(usize::MAX);
    let dims: Vec<i64> = if rank == 0 || buffer.dims.is_null() || rank == usize::MAX {
        Vec::new()
    } else {
        // SAFETY: XLA's buffer has `rank` dims.
        unsafe { std::slice::from_raw_parts(buffer.dims, rank) }.to_vec()
    };
    let same_shape =
        dims.len() == shape.len() && dims.iter().zip(shape).all(|(&d, &s)| d == i64::from(s));
    if buffer.dtype != xla_dtype(elem)
        || !same_shape
        || (buffer.data.is_null() && !shape.contains(&0))
    {
        return Err(Failure::argument(format!(
            "mpmd: {what} is {} of shape {}; XLA passed {} of shape {}",
            crate::dtype_name(elem),
            crate::shape_text(shape),
            xla_dtype_name(buffer.dtype),
            crate::shape_text(&dims)
        )));
    }
    Ok(())
}

/// numpy's name of an XLA dtype, for messages.
fn xla_dtype_name(dtype: i32) -> String {
    let name = match dtype {
        xla::PRED => "bool",
        2 => "int8",
        3 => "int16",
        xla::S32 => "int32",
        xla::S64 => "int64",
        6 => "uint8",
        7 => "uint16",
        xla::U32 => "uint32",
        9 => "uint64",
        xla::F16 => "float16",
        xla::F32 => "float32",
        12 => "float64",
        xla::BF16 => "bfloat16",
        other => return format!("XLA dtype {other}"),
    };
    name.to_string()
}

/// A scalar's literal from its bits (a 16-bit float's in the low half).
fn literal(ty: ScalarType, bits: u32) -> Literal {
    match ty {
        ScalarType::Bool => Literal::Bool(bits != 0),
        ScalarType::F16 | ScalarType::BF16 => Literal::from_bits(ty, bits & 0xffff),
        _ => Literal::from_bits(ty, bits),
    }
}

/// Runs the call on the kernel's backend from host copies: `read` gives a
/// buffer's bytes (XLA's host memory itself on the CPU), `write` stores a
/// result's.
fn run_on_host<'b>(
    call: &'b Call<'_>,
    read: impl Fn(&'b xla::Buffer, usize) -> Result<Cow<'b, [u8]>, Failure>,
    write: impl Fn(&xla::Buffer, &[u8]) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let kernel = &call.kernel;
    let mut args = CallArgs::default();
    for (spec, buffer) in kernel.inputs.iter().zip(&call.inputs) {
        let bytes = read(
            buffer,
            (spec.len * u64::from(spec.elem.byte_size())) as usize,
        )?;
        let tensor = if spec.elem == ScalarType::Bool {
            let bits = bytes
                .chunks_exact(4)
                .map(|w| u32::from(w != [0, 0, 0, 0]))
                .collect();
            HostTensor::new(spec.elem, spec.shape.clone(), bits)
        } else {
            HostTensor::from_bytes(spec.elem, spec.shape.clone(), &bytes)
        }
        .map_err(|e| Failure::argument(format!("mpmd: input `{}`: {e}", spec.name)))?;
        args.inputs.insert(spec.name.clone(), tensor);
    }
    for ((name, ty), source) in kernel.scalars.iter().zip(&call.scalars) {
        let bits = match source {
            ScalarSource::Bits(b) => *b,
            ScalarSource::Buffer(buffer) => {
                let bytes = read(buffer, ty.byte_size() as usize)?;
                let mut word = [0u8; 4];
                word[..bytes.len().min(4)].copy_from_slice(&bytes[..bytes.len().min(4)]);
                u32::from_le_bytes(word)
            }
        };
        args.scalars.insert(name.clone(), literal(*ty, bits));
    }
    let outputs = {
        let mut engine = kernel.engine.lock().map_err(|_| {
            Failure(
                xla::ERROR_INTERNAL,
                "mpmd: the backend was poisoned by an earlier panic".into(),
            )
        })?;
        crate::run_engine(
            &mut engine,
            &kernel.module,
            kernel.case.as_ref(),
            &kernel.map,
            Some(&kernel.plan),
            &args,
            // XLA owns this thread: a signal is JAX's to handle.
            None,
        )
        .map_err(|e| Failure::run(&e))?
    };
    for (spec, buffer) in kernel.outputs.iter().zip(&call.outputs) {
        let tensor = outputs.outputs.get(&spec.name).ok_or_else(|| {
            Failure(
                xla::ERROR_INTERNAL,
                format!("mpmd: no value returned for output `{}`", spec.name),
            )
        })?;
        let bytes = crate::tensor_bytes(tensor);
        if bytes.len() as u64 != spec.len * u64::from(spec.elem.byte_size()) {
            return Err(Failure(
                xla::ERROR_INTERNAL,
                format!("mpmd: output `{}` has {} bytes", spec.name, bytes.len()),
            ));
        }
        write(buffer, &bytes)?;
    }
    Ok(())
}

/// Runs the call on XLA's CUDA stream: the CUDA backend on XLA's buffers,
/// or the kernel's own backend through host copies.
///
/// # Safety
/// `frame` and `api` are XLA's for a call on a CUDA platform.
unsafe fn run_on_cuda(
    frame: &xla::CallFrame,
    api: *const xla::Api,
    call: &Call<'_>,
) -> Result<(), Failure> {
    if !mpmd_cuda::driver_present() {
        return Err(Failure(
            xla::ERROR_FAILED_PRECONDITION,
            "mpmd: no CUDA driver (libcuda.so.1) in this process".into(),
        ));
    }
    // SAFETY: XLA's API table, read within its size.
    let stream_get = unsafe { api.as_ref() }
        .filter(|api| api.struct_size >= xla::API_STREAM_GET_END)
        .and_then(|api| api.stream_get)
        .ok_or_else(|| {
            Failure(
                xla::ERROR_INTERNAL,
                "mpmd: XLA's API has no stream getter".into(),
            )
        })?;
    let mut args = xla::StreamGetArgs {
        struct_size: xla::STREAM_GET_SIZE,
        extension_start: std::ptr::null_mut(),
        ctx: frame.ctx,
        stream: std::ptr::null_mut(),
    };
    // SAFETY: XLA fills in its stream for this call.
    let failed = unsafe { stream_get(&mut args) };
    if !failed.is_null() {
        return Err(Failure(
            xla::ERROR_INTERNAL,
            "mpmd: XLA gave no CUDA stream".into(),
        ));
    }
    let stream = args.stream as cu::CUstream;
    let kernel = &call.kernel;
    let Some(mode) = kernel.cuda_mode else {
        return run_on_host(
            call,
            // SAFETY (both): XLA's device buffers hold the bytes their dtype
            // and dims say; each copy is waited for before its memory is used.
            |buffer, bytes| {
                unsafe { copy_from_device(stream, buffer.data as u64, bytes) }.map(Cow::Owned)
            },
            |buffer, data| unsafe { copy_to_device(stream, buffer.data as u64, data) },
        );
    };
    let mut context: cu::CUcontext = std::ptr::null_mut();
    // SAFETY: plain query of the thread's current context (XLA set it).
    let result = unsafe { cu::cuCtxGetCurrent(&mut context) };
    if result != cu::CUresult::CUDA_SUCCESS || context.is_null() {
        return Err(Failure::cuda("cuCtxGetCurrent", result));
    }
    let mut states = streams();
    let key = (context as usize, stream as usize);
    let state = match states.entry(key) {
        std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
        std::collections::hash_map::Entry::Vacant(entry) => {
            // SAFETY: XLA's context and stream live as long as its client,
            // which outlives the calls it makes.
            let backend = unsafe { CudaBackend::from_raw(context, stream, CudaOptions::default()) }
                .map_err(|e| Failure(xla::ERROR_FAILED_PRECONDITION, format!("mpmd: {e}")))?;
            entry.insert(StreamState {
                backend,
                prepared: Lru::new(PREPARED_PER_STREAM),
            })
        }
    };
    // An error an earlier run on this stream recorded is reported now.
    state.backend.poll_errors().map_err(|e| Failure::run(&e))?;
    if !state.prepared.contains(&kernel.id) {
        let prepared = state
            .backend
            .prepare(&kernel.plan, mode)
            .map_err(|e| Failure::run(&e))?;
        state.prepared.insert(kernel.id, prepared);
    }
    let mut device = DeviceArgs::default();
    for (spec, buffer) in kernel.inputs.iter().zip(&call.inputs) {
        device = device.buffer(
            &spec.name,
            CudaBuffer::new(buffer.data as u64, spec.elem, spec.len),
        );
    }
    for (spec, buffer) in kernel.outputs.iter().zip(&call.outputs) {
        device = device.buffer(
            &spec.name,
            CudaBuffer::new(buffer.data as u64, spec.elem, spec.len),
        );
    }
    for ((name, ty), source) in kernel.scalars.iter().zip(&call.scalars) {
        let bits = match source {
            ScalarSource::Bits(b) => *b,
            // A traced scalar lives on the device: reading it waits for the stream.
            ScalarSource::Buffer(buffer) => {
                // SAFETY: a 0-d device buffer of the scalar's size.
                let bytes = unsafe {
                    copy_from_device(stream, buffer.data as u64, ty.byte_size() as usize)
                }?;
                let mut word = [0u8; 4];
                word[..bytes.len()].copy_from_slice(&bytes);
                u32::from_le_bytes(word)
            }
        };
        device = device.scalar(name, literal(*ty, bits));
    }
    let prepared = state.prepared.get(&kernel.id).expect("prepared above");
    // SAFETY: XLA's buffers are device memory of this context holding their
    // dtype and dims (checked against the operands), alive until the stream
    // passes this call's work.
    unsafe { state.backend.enqueue(prepared, &device) }.map_err(|e| Failure::run(&e))
}

/// # Safety
/// `address` is device memory of the current context holding `bytes` bytes.
unsafe fn copy_from_device(
    stream: cu::CUstream,
    address: u64,
    bytes: usize,
) -> Result<Vec<u8>, Failure> {
    let mut data = vec![0u8; bytes];
    if bytes == 0 {
        return Ok(data);
    }
    // SAFETY: the caller's contract; the copy is waited for below.
    unsafe {
        let result = cu::cuMemcpyDtoHAsync_v2(data.as_mut_ptr().cast(), address, bytes, stream);
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(Failure::cuda("cuMemcpyDtoHAsync", result));
        }
        let result = cu::cuStreamSynchronize(stream);
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(Failure::cuda("cuStreamSynchronize", result));
        }
    }
    Ok(data)
}

/// # Safety
/// `address` is device memory of the current context with room for `data`.
unsafe fn copy_to_device(stream: cu::CUstream, address: u64, data: &[u8]) -> Result<(), Failure> {
    if data.is_empty() {
        return Ok(());
    }
    // SAFETY: the caller's contract; the copy is waited for before `data` goes.
    unsafe {
        let result = cu::cuMemcpyHtoDAsync_v2(address, data.as_ptr().cast(), data.len(), stream);
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(Failure::cuda("cuMemcpyHtoDAsync", result));
        }
        let result = cu::cuStreamSynchronize(stream);
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(Failure::cuda("cuStreamSynchronize", result));
        }
    }
    Ok(())
}
