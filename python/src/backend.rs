//! `_Backend`: the interpreter, WGSL and CUDA backends and their calls.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mpmd_core::case::CaseSpec;
use mpmd_core::host::host_shape;
use mpmd_core::interp::{
    InterpOptions, Interpreter, Interrupt, MmaProbe, DEFAULT_EXTRA_SCHEDULES, DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIME_LIMIT,
};
use mpmd_core::lru::Lru;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::validate::ValidModule;
use mpmd_core::RunError as CoreRunError;
use mpmd_core::{Backend, CallArgs, CallOutputs, Mode, RunOptions};
use mpmd_cuda::{CudaBackend, CudaOptions, CudaPrepared};
use mpmd_frontend::{BackendKind, FrontendError};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::*;

/// The interpreter's settings beyond the call.
#[derive(Clone, Debug)]
pub(crate) struct InterpSettings {
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

/// Maps the CUDA engine keeps prepared for runs on device memory.
pub(crate) const DEVICE_PREPARED: usize = 16;

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
    /// The times of the last call that succeeded.
    timing: Mutex<Option<CallTiming>>,
}

/// The times `mpmd run --time` reports for a call: wall time, the
/// backend's whole run of it (compiling a plan it has not seen yet,
/// uploads, launch, read-back; not the conversion of Python's arguments
/// and results), and on CUDA with kernel timing on, the kernel's time
/// between two events around the launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallTiming {
    wall: Duration,
    kernel_ms: Option<f32>,
}

impl PyBackend {
    /// A GPU backend as `mpmd run --backend KIND` makes it; unavailable, the
    /// message is the CLI's.
    fn lowered(
        py: Python<'_>,
        kind: BackendKind,
        checked: bool,
        co_resident: bool,
        time_limit: Option<Duration>,
    ) -> PyResult<Self> {
        let backend = py
            .detach(|| mpmd_frontend::resolve_backend_within(kind, co_resident, time_limit))
            .map_err(|e| BackendUnavailableError::new_err(e.to_string()))?;
        let mode = if checked { Mode::Checked } else { Mode::Fast };
        Ok(PyBackend::new(
            kind.name(),
            Engine::Lowered {
                backend,
                options: RunOptions { mode, seed: 0 },
            },
        ))
    }

    fn new(name: &'static str, engine: Engine) -> Self {
        PyBackend {
            name,
            engine: Arc::new(Mutex::new(engine)),
            timing: Mutex::default(),
        }
    }

    fn timing(&self) -> PyResult<MutexGuard<'_, Option<CallTiming>>> {
        self.timing
            .lock()
            .map_err(|_| MpmdError::new_err("the backend was poisoned by an earlier panic"))
    }

    pub(crate) fn engine(&self) -> PyResult<MutexGuard<'_, Engine>> {
        self.engine
            .lock()
            .map_err(|_| MpmdError::new_err("the backend was poisoned by an earlier panic"))
    }
}

/// A bound of `value` seconds given as parameter `name`: None or 0 for
/// no bound, else a finite positive number of seconds.
fn seconds_bound(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(s) if s.is_finite() && (0.0..=1e12).contains(&s) => {
            Ok((s > 0.0).then(|| Duration::from_secs_f64(s)))
        }
        Some(s) => Err(PyValueError::new_err(format!(
            "{name}={s}: give a number of seconds (such as 60, 0.5, or 0 or None for no bound)"
        ))),
    }
}

/// The interpreter's options for one call of a map of `module`, as `mpmd
/// run` sets them: checked mode detects and runs the default extra
/// schedules unless `schedules` says otherwise; schedules compare outputs
/// as the module's `compare` lines say.
pub(crate) fn interp_options(
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
        let time_limit = seconds_bound("timeout", timeout)?;
        Ok(PyBackend::new(
            "interp",
            Engine::Interp {
                interp: Box::default(),
                settings: InterpSettings {
                    checked,
                    schedules,
                    seed,
                    time_limit,
                    memory_limit,
                },
            },
        ))
    }

    /// The WGSL backend on the default adapter.
    #[staticmethod]
    #[pyo3(signature = (checked = false, co_resident = false, timeout = Some(DEFAULT_TIME_LIMIT.as_secs_f64())))]
    fn wgpu(
        py: Python<'_>,
        checked: bool,
        co_resident: bool,
        timeout: Option<f64>,
    ) -> PyResult<Self> {
        let time_limit = seconds_bound("timeout", timeout)?;
        Self::lowered(py, BackendKind::Wgpu, checked, co_resident, time_limit)
    }

    /// The CUDA backend on the first NVIDIA GPU.
    #[staticmethod]
    #[pyo3(signature = (checked = false, wait_timeout = CudaOptions::default().wait_timeout.as_secs_f64(), time_kernels = false))]
    fn cuda(
        py: Python<'_>,
        checked: bool,
        wait_timeout: f64,
        time_kernels: bool,
    ) -> PyResult<Self> {
        let wait_timeout = seconds_bound("wait_timeout", Some(wait_timeout))?
            .filter(|d| d.as_millis() >= 1)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "wait_timeout={wait_timeout}: give a number of seconds of at least 0.001 (such as 10 or 0.5)"
                ))
            })?;
        let options = CudaOptions {
            wait_timeout,
            time_kernels,
            ..CudaOptions::default()
        };
        let backend = py.detach(|| CudaBackend::new(options)).map_err(|e| {
            let unavailable = FrontendError::BackendUnavailable {
                name: BackendKind::Cuda.name(),
                reason: e.to_string(),
            };
            BackendUnavailableError::new_err(unavailable.to_string())
        })?;
        let mode = if checked { Mode::Checked } else { Mode::Fast };
        Ok(PyBackend::new(
            BackendKind::Cuda.name(),
            Engine::Cuda {
                backend: Box::new(backend),
                options: RunOptions { mode, seed: 0 },
                prepared: Lru::new(DEVICE_PREPARED),
            },
        ))
    }

    /// The times of the last call that succeeded, as `mpmd run --time`
    /// reports them: `(wall_ms, kernel_ms)`, kernel_ms None where no
    /// kernel is timed; None before the first call.
    #[getter]
    fn last_timing(&self) -> PyResult<Option<(f64, Option<f64>)>> {
        Ok(self
            .timing()?
            .map(|t| (t.wall.as_secs_f64() * 1e3, t.kernel_ms.map(f64::from))))
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
    /// its `(dtype, shape, data)` (an array or bytes), `scalars` each scalar
    /// to a Python number. Returns `{output: (dtype, shape, bytearray)}` in
    /// map order.
    fn call<'py>(
        &self,
        py: Python<'py>,
        module: &PyModule_,
        map: &str,
        inputs: BTreeMap<String, InputTriple<'py>>,
        scalars: BTreeMap<String, Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let the_map = module.map(map)?;
        let args = call_args(module, the_map, inputs, scalars)?;
        let plan = match self.name {
            "interp" => None,
            _ => Some(module.plan(map)?),
        };
        // The call runs right here without the GIL; Ctrl-C raises its
        // interrupt flag (the interpreter stops at its next time check),
        // and the signal reaches Python once the call is back.
        let (module_ir, case) = (&module.module, module.case.as_ref());
        let result = py.detach(|| -> PyResult<_> {
            let (guard, interrupt) = SigintGuard::listen();
            let mut engine = self.engine()?;
            let started = Instant::now();
            let result = run_engine(
                &mut engine,
                module_ir,
                case,
                map,
                plan.as_deref(),
                &args,
                Some(&interrupt),
            );
            let wall = started.elapsed();
            drop(guard);
            if result.is_ok() {
                let kernel_ms = match &*engine {
                    Engine::Cuda { backend, .. } => backend.last_kernel_ms(),
                    _ => None,
                };
                *self.timing()? = Some(CallTiming { wall, kernel_ms });
            }
            Ok(result)
        })?;
        py.check_signals()?;
        let mut outputs = result.map_err(|e| run_error(py, Some(map), &e))?;
        // The inputs' lent memory goes back before the outputs are handed out.
        drop(args);
        let dict = PyDict::new(py);
        for output in &the_map.outputs {
            let tensor = outputs.outputs.remove(&output.name).ok_or_else(|| {
                run_error(
                    py,
                    Some(map),
                    &CoreRunError::Backend(format!(
                        "no value returned for output `{}`",
                        output.name
                    )),
                )
            })?;
            dict.set_item(&output.name, output_triple(py, tensor)?)?;
        }
        Ok(dict)
    }

    /// Runs one call of `map` on the CUDA device: `inputs` maps each input
    /// the call uploads to a DLPack capsule of a CUDA array of exactly its
    /// dtype and host shape (C-contiguous; used in place, the producer's
    /// stream synchronised with the legacy default stream by `__dlpack__`)
    /// or to `(dtype, shape, data)` (copied to the device); `scalars`
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
                    let triple: InputTriple<'py> = value.extract()?;
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
    /// data)`, the data an array or bytes). With `module`, the data must
    /// have exactly the dtype and host shape the module declares; without,
    /// the array's own are kept and the next call that binds the resident
    /// checks them.
    #[pyo3(signature = (name, data, module = None))]
    fn set_resident(
        &self,
        py: Python<'_>,
        name: &str,
        data: InputTriple<'_>,
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
