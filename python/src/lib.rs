//! `mpmd._mpmd`: the Rust half of the `mpmd` Python package.
//!
//! The Python half (`python/mpmd/__init__.py`) turns numpy arrays, DLPack
//! objects and JAX arrays into `(dtype name, shape, bytes)` triples and back;
//! everything that decides (parsing, validation and its rendered
//! diagnostics, argument checks, running, error classes) is here, in the
//! library's own terms, so Python behaves as the Rust library and the CLI do.

// RunError is the shared error type of every backend; boxing it is not ours to decide.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

mod dlpack;
mod ffi;

use mpmd_cli::ValidFile;
use mpmd_cli::{BackendKind, CliError, Target};
use mpmd_core::case::CaseSpec;
use mpmd_core::host::{self, host_shape, ScalarValueError, UserNumber};
use mpmd_core::interp::{
    InterpOptions, Interpreter, Interrupt, MmaProbe, DEFAULT_EXTRA_SCHEDULES, DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIME_LIMIT,
};
use mpmd_core::ir::{Literal, MpmdMap, Operand, ScalarType, Type};
use mpmd_core::lru::Lru;
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::validate::ValidModule;
use mpmd_core::RunError as CoreRunError;
use mpmd_core::{
    inputs, text, Backend, CallArgs, CallOutputs, ErrorClass, HostTensor, Mode, RunOptions,
};
use mpmd_cuda::{CudaBackend, CudaBuffer, CudaOptions, CudaPrepared, DeviceArgs};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyTuple};

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
const OPTION_PARAMETERS: &[(&str, &str)] = &[
    ("InterpOptions::time_limit", "Interpreter(timeout=SECONDS)"),
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
    mpmd_cli::with_option_names(error.clone(), OPTION_PARAMETERS).to_string()
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

/// Every element type, in the order messages list them.
const ELEMENT_TYPES: [ScalarType; 6] = [
    ScalarType::F32,
    ScalarType::I32,
    ScalarType::U32,
    ScalarType::Bool,
    ScalarType::F16,
    ScalarType::BF16,
];

/// numpy's name of the dtype that holds an element type.
pub(crate) fn dtype_name(elem: ScalarType) -> &'static str {
    match elem {
        ScalarType::F32 => "float32",
        ScalarType::I32 => "int32",
        ScalarType::U32 => "uint32",
        ScalarType::Bool => "bool",
        ScalarType::F16 => "float16",
        ScalarType::BF16 => "bfloat16",
    }
}

/// `(256,)`, `(2, 64)`, `()`: a shape as Python writes it.
pub(crate) fn shape_text<T: std::fmt::Display>(shape: &[T]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(T::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A module the CLI's loader refused, or a file it could not read, as
/// the exception Python raises: the message is exactly what the CLI prints.
fn load_error(error: CliError) -> PyErr {
    match error {
        CliError::Rejected(rendered) => validation_error(rendered),
        CliError::ReadFile { .. } => PyOSError::new_err(error.to_string()),
        other => MpmdError::new_err(other.to_string()),
    }
}

fn validation_error(rendered: String) -> PyErr {
    ValidationError::new_err(rendered.trim_end_matches('\n').to_string())
}

/// A parsed and validated module (`.mpmd` text).
#[pyclass(module = "mpmd", name = "Module", frozen)]
pub(crate) struct PyModule_ {
    pub(crate) module: Arc<ValidModule>,
    /// The file's case section (its `generate` and `compare` lines are used).
    pub(crate) case: Option<CaseSpec>,
    /// The file name diagnostics name.
    file: String,
    /// Each map's plan, lowered once (lowering is a pure function of the module).
    plans: Mutex<BTreeMap<String, Arc<LaunchPlan>>>,
}

type Operands = Vec<(String, &'static str, Vec<u32>)>;

impl PyModule_ {
    fn new(source: ValidFile, file: String) -> Self {
        PyModule_ {
            module: Arc::new(source.module),
            case: source.case,
            file,
            plans: Mutex::default(),
        }
    }

    /// The launch plan of `map`, lowered on first use.
    pub(crate) fn plan(&self, map: &str) -> PyResult<Arc<LaunchPlan>> {
        let mut plans = self
            .plans
            .lock()
            .map_err(|_| MpmdError::new_err("the module was poisoned by an earlier panic"))?;
        if let Some(plan) = plans.get(map) {
            return Ok(Arc::clone(plan));
        }
        let plan = Arc::new(
            lower(&self.module, map)
                .map_err(|e| LowerError::new_err(format!("cannot lower: {e}")))?,
        );
        plans.insert(map.to_string(), Arc::clone(&plan));
        Ok(plan)
    }

    pub(crate) fn map(&self, name: &str) -> PyResult<&MpmdMap> {
        self.module.map(name).ok_or_else(|| {
            PyKeyError::new_err(format!(
                "the module has no map `{name}` (its maps: {})",
                self.module
                    .maps
                    .iter()
                    .map(|m| format!("`{}`", m.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    fn operand_list<'a>(&self, operands: impl Iterator<Item = &'a Operand>) -> Operands {
        operands
            .filter_map(|o| {
                let ty = o.ty.as_ref_type()?;
                let shape = inputs::host_shape(&self.module, o)?;
                Some((o.name.clone(), dtype_name(ty.elem), shape))
            })
            .collect()
    }
}

#[pymethods]
impl PyModule_ {
    /// Reads, parses and validates a `.mpmd` file.
    #[staticmethod]
    fn from_file(path: PathBuf) -> PyResult<Self> {
        let source = mpmd_cli::load_file(&path).map_err(load_error)?;
        Ok(PyModule_::new(source, path.display().to_string()))
    }

    /// Parses and validates `.mpmd` text; diagnostics name it `name`.
    #[staticmethod]
    #[pyo3(signature = (text, name = "<text>"))]
    fn from_text(text: &str, name: &str) -> PyResult<Self> {
        let source = mpmd_cli::load_source(text, name).map_err(load_error)?;
        Ok(PyModule_::new(source, name.to_string()))
    }

    /// The name diagnostics give the module's source.
    #[getter]
    fn name(&self) -> &str {
        &self.file
    }

    /// The maps, in declaration order.
    #[getter]
    fn maps(&self) -> Vec<String> {
        self.module.maps.iter().map(|m| m.name.clone()).collect()
    }

    /// The module's `call` lines (or one call of its only map): `(map,
    /// {scalar: value})` pairs.
    fn calls<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Bound<'py, PyDict>)>> {
        self.module
            .effective_calls()
            .into_iter()
            .map(|call| {
                let scalars = PyDict::new(py);
                for (name, value) in &call.scalars {
                    scalars.set_item(name, literal_to_py(py, *value)?)?;
                }
                Ok((call.map, scalars))
            })
            .collect()
    }

    /// The canonical text of the module (and its case section, if any).
    fn text(&self) -> String {
        text::print_file(&self.module, self.case.as_ref())
    }

    /// The inputs a call of `map` takes data for, in parameter order:
    /// `(name, dtype, shape)` (semaphores and `zeroed` inputs start at zero
    /// and take none; resident ones are the backend's).
    fn inputs(&self, map: &str) -> PyResult<Operands> {
        Ok(self.operand_list(inputs::uploaded_inputs(self.map(map)?)))
    }

    /// What `mpmd lower --target TARGET` prints for `map` (default: every
    /// map; CUDA C and WGSL are one map's file each, so a module with
    /// several maps needs `map`).
    #[pyo3(signature = (target, map = None))]
    fn lower(&self, target: &str, map: Option<&str>) -> PyResult<String> {
        let target = match target {
            "plan" => Target::Plan,
            "cuda" => Target::Cuda,
            "wgsl" => Target::Wgsl,
            other => {
                return Err(PyValueError::new_err(format!(
                    "target `{other}`: give \"plan\", \"cuda\" or \"wgsl\""
                )))
            }
        };
        let maps: Vec<String> = match map {
            Some(name) => vec![self.map(name)?.name.clone()],
            None => self.maps(),
        };
        if maps.len() > 1 && target != Target::Plan {
            return Err(PyValueError::new_err(format!(
                "the module has {} maps ({}), and the {} source of each is a file of its own: pass map=NAME",
                maps.len(),
                maps.iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                target.name()
            )));
        }
        let mut texts = Vec::new();
        for name in &maps {
            let plan = self.plan(name)?;
            texts.push(
                mpmd_cli::emit(target, &plan).map_err(|e| LowerError::new_err(e.to_string()))?,
            );
        }
        Ok(texts.join("\n"))
    }

    /// The inputs `mpmd run --seed SEED` generates for a call of `map` (the
    /// module's `generate` lines, else a default per type), as `{input:
    /// (dtype, shape, bytearray)}`: how to give Python the CLI's data.
    #[pyo3(signature = (map, seed = 0, memory_limit = DEFAULT_MEMORY_LIMIT))]
    fn generated_inputs<'py>(
        &self,
        py: Python<'py>,
        map: &str,
        seed: u64,
        memory_limit: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let the_map = self.map(map)?;
        let generators = self.case.as_ref().map_or(&[][..], |c| &c.generators);
        let generation = inputs::Generation::with_defaults(seed).with_generators(generators);
        let dict = PyDict::new(py);
        for input in inputs::uploaded_inputs(the_map) {
            let tensor = inputs::generate_input_within(
                &self.module,
                the_map,
                input,
                &generation,
                memory_limit,
            )
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
            dict.set_item(&input.name, tensor_triple(py, &tensor)?)?;
        }
        Ok(dict)
    }

    /// The outputs a call of `map` returns: `(name, dtype, shape)`.
    fn outputs(&self, map: &str) -> PyResult<Operands> {
        Ok(self.operand_list(self.map(map)?.outputs.iter()))
    }

    /// The scalar parameters of `map`: `(name, dtype)`.
    fn scalars(&self, map: &str) -> PyResult<Vec<(String, &'static str)>> {
        Ok(self
            .map(map)?
            .scalars
            .iter()
            .filter_map(|s| match s.ty {
                Type::Scalar(ty) => Some((s.name.clone(), dtype_name(ty))),
                _ => None,
            })
            .collect())
    }

    /// Whether a call of `map` binds a device-resident ref (so calls of it
    /// depend on the order they run in).
    fn binds_residents(&self, map: &str) -> PyResult<bool> {
        let map = self.map(map)?;
        Ok(map
            .inputs
            .iter()
            .chain(&map.outputs)
            .chain(&map.scratch)
            .any(|o| o.resident))
    }

    /// The inputs of `map` that an output aliases (one buffer under two
    /// names): `(input, output)` pairs.
    fn aliases(&self, map: &str) -> PyResult<Vec<(String, String)>> {
        let plan = self.plan(map)?;
        Ok(plan
            .buffers
            .iter()
            .filter_map(|b| match (&b.init, &b.output) {
                (mpmd_core::plan::BufferInit::Input(input), Some(output)) if input != output => {
                    Some((input.clone(), output.clone()))
                }
                _ => None,
            })
            .collect())
    }

    /// The module's device-resident refs: `(name, dtype, shape)`.
    fn residents(&self) -> Operands {
        self.module
            .residents
            .iter()
            .filter_map(|r| {
                let shape = host_shape(&self.module.meshes, &r.ty)?;
                Some((r.name.clone(), dtype_name(r.ty.elem), shape))
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "mpmd.Module({:?}, maps=[{}])",
            self.file,
            self.maps()
                .iter()
                .map(|m| format!("{m:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn literal_to_py(py: Python<'_>, value: Literal) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Literal::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Literal::I32(v) => v.into_pyobject(py)?.into_any().unbind(),
        Literal::U32(v) => v.into_pyobject(py)?.into_any().unbind(),
        other => other
            .as_f32()
            .map_or(f32::NAN, |v| v)
            .into_pyobject(py)?
            .into_any()
            .unbind(),
    })
}

/// A Python number as a scalar of type `ty`, or why not.
fn scalar_value(
    map: &str,
    name: &str,
    ty: ScalarType,
    value: &Bound<'_, PyAny>,
) -> PyResult<Literal> {
    let what = format!("scalar `{name}` of map `{map}`");
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    let not_a = |expected: &str| {
        PyTypeError::new_err(format!(
            "{what} is {}: expected {expected}, given {type_name}",
            ty.keyword()
        ))
    };
    // Python's own types first; the number then follows core's one rule
    // (range, rounding), which `mpmd run --scalar` shares.
    let number = match ty {
        ScalarType::Bool => UserNumber::Bool(value.extract::<bool>().map_err(|_| not_a("a bool"))?),
        ScalarType::I32 | ScalarType::U32 => {
            if value.is_instance_of::<pyo3::types::PyBool>() {
                return Err(not_a("an int"));
            }
            UserNumber::Int(value.extract::<i128>().map_err(|_| not_a("an int"))?)
        }
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => {
            UserNumber::Float(value.extract::<f64>().map_err(|_| not_a("a float"))?)
        }
    };
    host::scalar_value(ty, number).map_err(|e| match e {
        ScalarValueError::OutOfRange { .. } => PyValueError::new_err(format!("{what}: {e}")),
        ScalarValueError::NotOfType { .. } => PyTypeError::new_err(format!("{what}: {e}")),
    })
}

/// An input's data from Python: numpy's dtype name, the shape, the bytes
/// (C order, little-endian; numpy's bool is one byte an element).
type InputTriple = (String, Vec<u64>, Vec<u8>);

/// The host tensor of input `name` (of type `elem`, host shape `shape`)
/// from Python's data, or a ValueError naming what was expected and given.
fn input_tensor(
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    (dtype, given_shape, bytes): InputTriple,
) -> PyResult<HostTensor> {
    let expected = dtype_name(elem);
    if dtype != expected
        || given_shape
            .iter()
            .copied()
            .ne(shape.iter().map(|&d| u64::from(d)))
    {
        return Err(PyValueError::new_err(format!(
            "{what} expects {expected} of shape {}; given {dtype} of shape {}",
            shape_text(shape),
            shape_text(&given_shape)
        )));
    }
    let broken = |e: mpmd_core::host::ShapeError| PyValueError::new_err(format!("{what}: {e}"));
    if elem == ScalarType::Bool {
        let bits = bytes.iter().map(|&b| u32::from(b != 0)).collect();
        return HostTensor::new(elem, shape.to_vec(), bits).map_err(broken);
    }
    HostTensor::from_bytes(elem, shape.to_vec(), &bytes).map_err(broken)
}

/// A host tensor as Python's data: numpy's dtype name, the shape and the
/// bytes (bool one byte an element).
pub(crate) fn tensor_triple<'py>(py: Python<'py>, tensor: &HostTensor) -> PyResult<Triple<'py>> {
    let bytes = if tensor.elem() == ScalarType::Bool {
        tensor.to_bits().iter().map(|&b| u8::from(b != 0)).collect()
    } else {
        tensor.bytes()
    };
    let shape = PyTuple::new(py, tensor.shape())?;
    Ok((
        dtype_name(tensor.elem()),
        shape,
        PyByteArray::new(py, &bytes),
    ))
}

/// What Python gets for a tensor: numpy's dtype name, the shape, the bytes.
pub(crate) type Triple<'py> = (&'static str, Bound<'py, PyTuple>, Bound<'py, PyByteArray>);

/// The interpreter's settings beyond the call.
#[derive(Clone, Debug)]
struct InterpSettings {
    checked: bool,
    schedules: Option<u32>,
    seed: u64,
    time_limit: Option<Duration>,
    memory_limit: u64,
}

pub(crate) enum Engine {
    Interp {
        interp: Box<Interpreter>,
        settings: InterpSettings,
    },
    /// A GPU backend: it runs the lowered plan of each map.
    Lowered {
        backend: Box<dyn Backend + Send>,
        options: RunOptions,
    },
    /// The CUDA backend, which also runs maps on device arrays in place.
    Cuda {
        backend: Box<CudaBackend>,
        options: RunOptions,
        /// Maps prepared for runs on device memory, by the address of their
        /// plan (held here, so that the address stays theirs).
        prepared: Lru<usize, (Arc<LaunchPlan>, CudaPrepared)>,
    },
}

/// How often a waiting `call` looks for signals (Ctrl-C).
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Maps the CUDA engine keeps prepared for runs on device memory.
const DEVICE_PREPARED: usize = 16;

/// One call of `map` on `engine` (`plan`: its lowered plan, which every
/// backend but the interpreter runs).
pub(crate) fn run_engine(
    engine: &mut Engine,
    module: &Arc<ValidModule>,
    case: Option<&CaseSpec>,
    map: &str,
    plan: Option<&LaunchPlan>,
    args: &CallArgs,
    interrupt: Option<&Interrupt>,
) -> Result<CallOutputs, CoreRunError> {
    let no_plan = || CoreRunError::Backend("no plan for a lowered backend".into());
    match engine {
        Engine::Interp { interp, settings } => {
            let options = interp_options(settings, case, interrupt);
            interp.call(module, map, args, &options)
        }
        Engine::Lowered { backend, options } => {
            backend.run(plan.ok_or_else(no_plan)?, args, options)
        }
        Engine::Cuda {
            backend, options, ..
        } => backend.run(plan.ok_or_else(no_plan)?, args, options),
    }
}

/// One backend value: it owns the device-resident refs across calls.
#[pyclass(module = "mpmd._mpmd", name = "_Backend", frozen)]
pub(crate) struct PyBackend {
    name: &'static str,
    pub(crate) engine: Arc<Mutex<Engine>>,
}

impl PyBackend {
    /// A GPU backend as `mpmd run --backend KIND` makes it; unavailable, the
    /// message is the CLI's.
    fn lowered(
        py: Python<'_>,
        kind: BackendKind,
        checked: bool,
        co_resident: bool,
    ) -> PyResult<Self> {
        let backend = py
            .detach(|| mpmd_cli::resolve_backend(kind, co_resident))
            .map_err(|e| BackendUnavailableError::new_err(e.to_string()))?;
        let mode = if checked { Mode::Checked } else { Mode::Fast };
        Ok(PyBackend {
            name: kind.name(),
            engine: Arc::new(Mutex::new(Engine::Lowered {
                backend,
                options: RunOptions { mode, seed: 0 },
            })),
        })
    }

    pub(crate) fn engine(&self) -> PyResult<MutexGuard<'_, Engine>> {
        self.engine
            .lock()
            .map_err(|_| MpmdError::new_err("the backend was poisoned by an earlier panic"))
    }
}

/// The interpreter's options for one call of a map of `module`, as `mpmd
/// run` sets them: checked mode detects and runs the default extra
/// schedules unless `schedules` says otherwise; schedules compare outputs
/// as the module's `compare` lines say.
fn interp_options(
    settings: &InterpSettings,
    case: Option<&CaseSpec>,
    interrupt: Option<&Interrupt>,
) -> InterpOptions {
    let mode = if settings.checked {
        Mode::Checked
    } else {
        Mode::Fast
    };
    InterpOptions {
        time_limit: settings.time_limit,
        interrupt: interrupt.cloned(),
        memory_limit: settings.memory_limit,
        run: RunOptions {
            mode,
            seed: settings.seed,
        },
        detect: settings.checked,
        extra_schedules: settings.schedules.unwrap_or(if settings.checked {
            DEFAULT_EXTRA_SCHEDULES
        } else {
            0
        }),
        schedule_tolerances: case.map(CaseSpec::schedule_tolerances).unwrap_or_default(),
        flush_subnormals: false,
        mma_probe: MmaProbe::Off,
    }
}

#[pymethods]
impl PyBackend {
    /// The reference interpreter.
    #[staticmethod]
    #[pyo3(signature = (checked = false, schedules = None, seed = 0, timeout = Some(DEFAULT_TIME_LIMIT.as_secs_f64()), memory_limit = DEFAULT_MEMORY_LIMIT))]
    fn interpreter(
        checked: bool,
        schedules: Option<u32>,
        seed: u64,
        timeout: Option<f64>,
        memory_limit: u64,
    ) -> PyResult<Self> {
        let time_limit = match timeout {
            None => None,
            Some(s) if s.is_finite() && (0.0..=1e12).contains(&s) => {
                (s > 0.0).then(|| Duration::from_secs_f64(s))
            }
            Some(s) => {
                return Err(PyValueError::new_err(format!(
                    "timeout={s}: give a number of seconds (such as 60, 0.5, or 0 or None for no bound)"
                )))
            }
        };
        Ok(PyBackend {
            name: "interp",
            engine: Arc::new(Mutex::new(Engine::Interp {
                interp: Box::default(),
                settings: InterpSettings {
                    checked,
                    schedules,
                    seed,
                    time_limit,
                    memory_limit,
                },
            })),
        })
    }

    /// The WGSL backend on the default adapter.
    #[staticmethod]
    #[pyo3(signature = (checked = false, co_resident = false))]
    fn wgpu(py: Python<'_>, checked: bool, co_resident: bool) -> PyResult<Self> {
        Self::lowered(py, BackendKind::Wgpu, checked, co_resident)
    }

    /// The CUDA backend on the first NVIDIA GPU.
    #[staticmethod]
    #[pyo3(signature = (checked = false))]
    fn cuda(py: Python<'_>, checked: bool) -> PyResult<Self> {
        let backend = py
            .detach(|| CudaBackend::new(CudaOptions::default()))
            .map_err(|e| {
                let unavailable = CliError::BackendUnavailable {
                    name: BackendKind::Cuda.name(),
                    reason: e.to_string(),
                };
                BackendUnavailableError::new_err(unavailable.to_string())
            })?;
        let mode = if checked { Mode::Checked } else { Mode::Fast };
        Ok(PyBackend {
            name: BackendKind::Cuda.name(),
            engine: Arc::new(Mutex::new(Engine::Cuda {
                backend: Box::new(backend),
                options: RunOptions { mode, seed: 0 },
                prepared: Lru::new(DEVICE_PREPARED),
            })),
        })
    }

    /// `interp`, `wgpu` or `cuda`.
    #[getter]
    fn name(&self) -> &'static str {
        self.name
    }

    /// Schedules the interpreter's last call ran (1: lockstep only); None
    /// before a call and on other backends.
    #[getter]
    fn schedules_run(&self) -> PyResult<Option<u32>> {
        let engine = self.engine()?;
        Ok(match &*engine {
            Engine::Interp { interp, .. } => interp.last_report().map(|r| r.schedules_run),
            Engine::Lowered { .. } | Engine::Cuda { .. } => None,
        })
    }

    /// Runs one call of `map`: `inputs` maps each input the call uploads to
    /// its `(dtype, shape, bytes)`, `scalars` each scalar to a Python
    /// number. Returns `{output: (dtype, shape, bytearray)}` in map order.
    fn call<'py>(
        &self,
        py: Python<'py>,
        module: &PyModule_,
        map: &str,
        inputs: BTreeMap<String, InputTriple>,
        scalars: BTreeMap<String, Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let the_map = module.map(map)?;
        let args = call_args(module, the_map, inputs, scalars)?;
        let module_ir = Arc::clone(&module.module);
        let case = module.case.clone();
        let plan = match self.name {
            "interp" => None,
            _ => Some(module.plan(map)?),
        };
        // The call runs on a worker thread while this one waits without the
        // GIL and looks for signals, so Ctrl-C stops an interpreter call
        // (through its interrupt flag) and raises KeyboardInterrupt.
        let interrupt = &Interrupt::new();
        let (module_ir, case, plan, args) = (&module_ir, &case, &plan, &args);
        let result = py.detach(|| {
            std::thread::scope(|scope| -> PyResult<_> {
                let (done, finished) = std::sync::mpsc::channel();
                let worker = scope.spawn(move || {
                    let result = self.engine().map(|mut engine| {
                        run_engine(
                            &mut engine,
                            module_ir,
                            case.as_ref(),
                            map,
                            plan.as_deref(),
                            args,
                            Some(interrupt),
                        )
                    });
                    let _ = done.send(());
                    result
                });
                loop {
                    match finished.recv_timeout(SIGNAL_POLL) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                            if let Err(signal) = Python::attach(|py| py.check_signals()) {
                                interrupt.raise();
                                // The interpreter stops at its next time check.
                                let _ = worker.join();
                                return Err(signal);
                            }
                        }
                        _ => {
                            return worker.join().unwrap_or_else(|_| {
                                Err(MpmdError::new_err("the call's worker thread panicked"))
                            })
                        }
                    }
                }
            })
        })?;
        let outputs = result.map_err(|e| run_error(py, Some(map), &e))?;
        let dict = PyDict::new(py);
        for output in &the_map.outputs {
            let tensor = outputs.outputs.get(&output.name).ok_or_else(|| {
                run_error(
                    py,
                    Some(map),
                    &CoreRunError::Backend(format!(
                        "no value returned for output `{}`",
                        output.name
                    )),
                )
            })?;
            dict.set_item(&output.name, tensor_triple(py, tensor)?)?;
        }
        Ok(dict)
    }

    /// Runs one call of `map` on the CUDA device: `inputs` maps each input
    /// the call uploads to a DLPack capsule of a CUDA array of exactly its
    /// dtype and host shape (C-contiguous; used in place, the producer's
    /// stream synchronised with the legacy default stream by `__dlpack__`)
    /// or to `(dtype, shape, bytes)` (copied to the device); `scalars`
    /// each scalar to a Python number. Returns `{output: DeviceArray}` in
    /// map order, on the same device; errors are raised as by `call`.
    fn call_device<'py>(
        &self,
        py: Python<'py>,
        module: &PyModule_,
        map: &str,
        inputs: BTreeMap<String, Bound<'py, PyAny>>,
        scalars: BTreeMap<String, Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let the_map = module.map(map)?;
        let plan = module.plan(map)?;
        let device = match &*self.engine()? {
            Engine::Cuda { backend, .. } => backend.ordinal(),
            _ => {
                return Err(MpmdError::new_err(format!(
                    "backend `{}` runs no map on device arrays: only mpmd.Cuda() does",
                    self.name
                )))
            }
        };
        let (given, scalars) = checked_arguments(
            module,
            the_map,
            inputs,
            scalars,
            |what, elem, shape, value: Bound<'py, PyAny>| -> PyResult<DeviceInput> {
                if value.is_instance_of::<PyTuple>() {
                    let triple: InputTriple = value.extract()?;
                    Ok(DeviceInput::Host(input_tensor(what, elem, shape, triple)?))
                } else {
                    Ok(DeviceInput::Device(dlpack::import(
                        &value, what, elem, shape, device,
                    )?))
                }
            },
        )?;
        let outputs = py.detach(|| -> PyResult<Result<Vec<DeviceOutput>, CoreRunError>> {
            let mut engine = self.engine()?;
            let Engine::Cuda {
                backend,
                options,
                prepared,
            } = &mut *engine
            else {
                return Err(MpmdError::new_err("the CUDA engine went away"));
            };
            Ok(run_on_device(
                backend,
                options.mode,
                prepared,
                &plan,
                given,
                scalars,
            ))
        })?;
        let outputs = outputs.map_err(|e| run_error(py, Some(map), &e))?;
        let dict = PyDict::new(py);
        for output in outputs {
            dict.set_item(
                &output.name,
                Py::new(
                    py,
                    dlpack::DeviceArray::new(
                        output.memory,
                        output.address,
                        output.elem,
                        output.shape,
                        device,
                    ),
                )?,
            )?;
        }
        Ok(dict)
    }

    /// The contents of device-resident ref `name` as `(dtype, shape,
    /// bytearray)`, or None while no call or `set_resident` created it.
    fn resident<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Triple<'py>>> {
        let tensor = {
            let engine = self.engine()?;
            match &*engine {
                Engine::Interp { interp, .. } => Backend::resident(interp.as_ref(), name),
                Engine::Lowered { backend, .. } => backend.resident(name),
                Engine::Cuda { backend, .. } => backend.resident(name),
            }
        };
        tensor.map(|t| tensor_triple(py, &t)).transpose()
    }

    /// Gives device-resident ref `name` the data `data` (`(dtype, shape,
    /// bytes)`). With `module`, the data must have exactly the dtype and
    /// host shape the module declares; without, the array's own are kept
    /// and the next call that binds the resident checks them.
    #[pyo3(signature = (name, data, module = None))]
    fn set_resident(
        &self,
        py: Python<'_>,
        name: &str,
        data: InputTriple,
        module: Option<&PyModule_>,
    ) -> PyResult<()> {
        let what = format!("resident `{name}`");
        let tensor = match module {
            Some(module) => {
                let resident = module.module.resident(name).ok_or_else(|| {
                    PyKeyError::new_err(format!(
                        "the module declares no resident `{name}` (its residents: {})",
                        module
                            .module
                            .residents
                            .iter()
                            .map(|r| format!("`{}`", r.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                let shape = host_shape(&module.module.meshes, &resident.ty).ok_or_else(|| {
                    MpmdError::new_err(format!("resident `{name}` has no host shape"))
                })?;
                input_tensor(&what, resident.ty.elem, &shape, data)?
            }
            None => {
                let elem = ELEMENT_TYPES
                    .iter()
                    .copied()
                    .find(|&e| dtype_name(e) == data.0)
                    .ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "{what}: dtype {} is none of {}",
                            data.0,
                            ELEMENT_TYPES.map(dtype_name).join(", ")
                        ))
                    })?;
                let shape = data
                    .1
                    .iter()
                    .map(|&d| u32::try_from(d))
                    .collect::<Result<Vec<u32>, _>>()
                    .map_err(|_| {
                        PyValueError::new_err(format!(
                            "{what}: shape {} has an extent past 2^32 - 1",
                            shape_text(&data.1)
                        ))
                    })?;
                input_tensor(&what, elem, &shape, data)?
            }
        };
        let mut engine = self.engine()?;
        let result = match &mut *engine {
            Engine::Interp { interp, .. } => Backend::set_resident(interp.as_mut(), name, tensor),
            Engine::Lowered { backend, .. } => backend.set_resident(name, tensor),
            Engine::Cuda { backend, .. } => backend.set_resident(name, tensor),
        };
        result.map_err(|e| run_error(py, None, &e))
    }
}

/// An input of a run on the device: a device array used in place, or host
/// data copied there.
enum DeviceInput {
    Device(dlpack::Imported),
    Host(HostTensor),
}

/// An output of a run on the device, kept there.
struct DeviceOutput {
    name: String,
    memory: mpmd_cuda::cudarc::driver::CudaSlice<u32>,
    address: u64,
    elem: ScalarType,
    shape: Vec<u32>,
}

/// Runs `plan` once on device memory: device inputs in place, host inputs
/// and every output in memory the backend allocates (a resident output is
/// a copy of the resident after the run), then waits and reports an error
/// a kernel recorded.
fn run_on_device(
    backend: &mut CudaBackend,
    mode: Mode,
    prepared: &mut Lru<usize, (Arc<LaunchPlan>, CudaPrepared)>,
    plan: &Arc<LaunchPlan>,
    inputs: BTreeMap<String, DeviceInput>,
    scalars: BTreeMap<String, Literal>,
) -> Result<Vec<DeviceOutput>, CoreRunError> {
    let key = Arc::as_ptr(plan) as usize;
    let cached = prepared.get(&key).is_some_and(|(_, p)| p.mode() == mode);
    if !cached {
        let fresh = backend.prepare(plan, mode)?;
        prepared.insert(key, (Arc::clone(plan), fresh));
    }
    let mut args = DeviceArgs {
        buffers: BTreeMap::new(),
        scalars,
    };
    // Host inputs and outputs live in these until the run is over.
    let mut uploads = BTreeMap::new();
    let mut imported = Vec::new();
    for (name, input) in inputs {
        let buffer = match input {
            DeviceInput::Device(array) => {
                let buffer = plan
                    .buffers
                    .iter()
                    .find(|b| b.operands.contains(&name))
                    .map(|b| CudaBuffer::new(array.address, b.ty.elem, b.len));
                imported.push(array);
                buffer
            }
            DeviceInput::Host(tensor) => {
                let mut words = tensor.words().to_vec();
                if tensor.elem() == ScalarType::Bool {
                    words.iter_mut().for_each(|w| *w = u32::from(*w != 0));
                }
                if words.is_empty() {
                    words.push(0);
                }
                let memory = backend.upload_words(&words)?;
                let buffer = CudaBuffer::new(
                    backend.address_of(&memory),
                    tensor.elem(),
                    tensor.len() as u64,
                );
                uploads.insert(name.clone(), memory);
                Some(buffer)
            }
        };
        if let Some(buffer) = buffer {
            args.buffers.insert(name, buffer);
        }
    }
    let mut outputs = Vec::new();
    // An output aliased to an input is the input's memory: a device array
    // the caller gave is written in place (Python hands that array back),
    // a host input's upload becomes the output.
    let mut aliased = Vec::new();
    for buffer in &plan.buffers {
        let Some(name) = &buffer.output else { continue };
        match &buffer.init {
            mpmd_core::plan::BufferInit::Resident(_) => continue,
            mpmd_core::plan::BufferInit::Input(input) => {
                aliased.push((name.clone(), input.clone(), buffer));
                continue;
            }
            _ => {}
        }
        let words = (buffer.len * u64::from(buffer.ty.elem.byte_size()))
            .div_ceil(4)
            .max(1);
        let memory =
            backend.alloc_zeroed(usize::try_from(words).map_err(|_| CoreRunError::Refused {
                reason: format!("output `{name}` does not fit this machine's memory"),
            })?)?;
        let address = backend.address_of(&memory);
        args.buffers.insert(
            name.clone(),
            CudaBuffer::new(address, buffer.ty.elem, buffer.len),
        );
        outputs.push(DeviceOutput {
            name: name.clone(),
            memory,
            address,
            elem: buffer.ty.elem,
            shape: plan.host_shape(buffer),
        });
    }
    let (_, map) = prepared.get(&key).expect("prepared above");
    // SAFETY: every buffer is device memory of the backend's context holding
    // its operand's elements: imported arrays were checked against their
    // operand's dtype and shape, the others were allocated for it, and all
    // of them outlive the synchronisation below.
    unsafe { backend.enqueue(map, &args) }?;
    backend.synchronize()?;
    drop(imported);
    for (name, input, buffer) in aliased {
        if let Some(memory) = uploads.remove(&input) {
            outputs.push(DeviceOutput {
                name,
                address: backend.address_of(&memory),
                memory,
                elem: buffer.ty.elem,
                shape: plan.host_shape(buffer),
            });
        }
    }
    drop(uploads);
    for buffer in &plan.buffers {
        let (Some(name), mpmd_core::plan::BufferInit::Resident(resident)) =
            (&buffer.output, &buffer.init)
        else {
            continue;
        };
        let tensor = backend.resident(resident).ok_or_else(|| {
            CoreRunError::Backend(format!("resident `{resident}` could not be read"))
        })?;
        let mut words = tensor.words().to_vec();
        if words.is_empty() {
            words.push(0);
        }
        let memory = backend.upload_words(&words)?;
        outputs.push(DeviceOutput {
            name: name.clone(),
            address: backend.address_of(&memory),
            memory,
            elem: tensor.elem(),
            shape: tensor.shape().to_vec(),
        });
    }
    let order: Vec<&String> = plan.map.outputs.iter().map(|o| &o.name).collect();
    outputs.sort_by_key(|o| order.iter().position(|n| **n == o.name));
    Ok(outputs)
}

/// The call's arguments: every uploaded input and every scalar given, of
/// the right dtype and shape, and nothing else.
fn call_args(
    module: &PyModule_,
    map: &MpmdMap,
    given: BTreeMap<String, InputTriple>,
    scalars: BTreeMap<String, Bound<'_, PyAny>>,
) -> PyResult<CallArgs> {
    let (inputs, scalars) = checked_arguments(module, map, given, scalars, input_tensor)?;
    Ok(CallArgs { inputs, scalars })
}

/// Every uploaded input (each made a `T` by `convert`, from what it is
/// called in messages, its element type and host shape) and every scalar,
/// and nothing else.
#[allow(clippy::type_complexity)]
fn checked_arguments<G, T>(
    module: &PyModule_,
    map: &MpmdMap,
    mut given: BTreeMap<String, G>,
    mut scalars: BTreeMap<String, Bound<'_, PyAny>>,
    mut convert: impl FnMut(&str, ScalarType, &[u32], G) -> PyResult<T>,
) -> PyResult<(BTreeMap<String, T>, BTreeMap<String, Literal>)> {
    let mut args = CallArgs::default();
    let mut converted = BTreeMap::new();
    let mut missing = Vec::new();
    for input in inputs::uploaded_inputs(map) {
        let Some(data) = given.remove(&input.name) else {
            missing.push(format!("input `{}`", input.name));
            continue;
        };
        let elem = input.ty.as_ref_type().map_or(ScalarType::U32, |r| r.elem);
        let shape = inputs::host_shape(&module.module, input).unwrap_or_default();
        let what = format!("input `{}` of map `{}`", input.name, map.name);
        converted.insert(input.name.clone(), convert(&what, elem, &shape, data)?);
    }
    for scalar in &map.scalars {
        let Type::Scalar(ty) = scalar.ty else {
            continue;
        };
        let Some(value) = scalars.remove(&scalar.name) else {
            missing.push(format!("scalar `{}`", scalar.name));
            continue;
        };
        args.scalars.insert(
            scalar.name.clone(),
            scalar_value(&map.name, &scalar.name, ty, &value)?,
        );
    }
    if let Some(name) = given.keys().chain(scalars.keys()).next() {
        let starts_zeroed = map.inputs.iter().any(|o| &o.name == name);
        let is_scalar = map.scalars.iter().any(|o| &o.name == name);
        let is_input = inputs::uploaded_inputs(map).any(|o| &o.name == name);
        return Err(PyTypeError::new_err(if is_scalar {
            format!(
                "scalar `{name}` of map `{}` takes a Python number, not an array",
                map.name
            )
        } else if is_input {
            format!(
                "input `{name}` of map `{}` takes an array, not a Python number",
                map.name
            )
        } else if starts_zeroed {
            format!(
                "input `{name}` of map `{}` starts at zero in every call (a semaphore, a `zeroed` \
                 or a resident input) and takes no data",
                map.name
            )
        } else {
            format!(
                "map `{}` has no input or scalar named `{name}` (inputs: {}; scalars: {})",
                map.name,
                names(inputs::uploaded_inputs(map)),
                names(map.scalars.iter())
            )
        }));
    }
    if !missing.is_empty() {
        return Err(PyTypeError::new_err(format!(
            "a call of map `{}` needs {}",
            map.name,
            missing.join(", ")
        )));
    }
    Ok((converted, args.scalars))
}

fn names<'a>(operands: impl Iterator<Item = &'a Operand>) -> String {
    let list: Vec<String> = operands.map(|o| format!("`{}`", o.name)).collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

#[pymodule]
fn _mpmd(m: &Bound<'_, pyo3::types::PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyModule_>()?;
    m.add_class::<PyBackend>()?;
    m.add_class::<dlpack::DeviceArray>()?;
    m.add_class::<ffi::PyFfiKernel>()?;
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
