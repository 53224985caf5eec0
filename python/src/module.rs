//! `mpmd.Module`: a parsed and validated module and what Python asks of it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use mpmd_core::case::CaseSpec;
use mpmd_core::host::{host_shape, UserNumber};
use mpmd_core::interp::DEFAULT_MEMORY_LIMIT;
use mpmd_core::ir::{MpmdMap, Operand, Type};
use mpmd_core::load::ValidFile;
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::validate::ValidModule;
use mpmd_core::{inputs, text};
use mpmd_frontend::Target;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::*;

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

pub(crate) type Operands = Vec<(String, &'static str, Vec<u32>)>;

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
    /// Reads, parses and validates a `.mpmd` file; `consts` overrides
    /// module constants (`{name: number}`) before they are resolved.
    #[staticmethod]
    #[pyo3(signature = (path, consts = None))]
    fn from_file(path: PathBuf, consts: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let overrides = const_overrides(consts)?;
        let source =
            mpmd_frontend::load_file_with(&path, &borrowed(&overrides)).map_err(load_error)?;
        Ok(PyModule_::new(source, path.display().to_string()))
    }

    /// Parses and validates `.mpmd` text; diagnostics name it `name`;
    /// `consts` overrides module constants.
    #[staticmethod]
    #[pyo3(signature = (text, name = "<text>", consts = None))]
    fn from_text(text: &str, name: &str, consts: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let overrides = const_overrides(consts)?;
        let source = mpmd_frontend::load_source_with(text, name, &borrowed(&overrides))
            .map_err(load_error)?;
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
                mpmd_frontend::emit(target, &plan)
                    .map_err(|e| LowerError::new_err(e.to_string()))?,
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

/// `consts=` as the loader takes it: each name with its Python number.
fn const_overrides(consts: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, UserNumber)>> {
    let Some(consts) = consts else {
        return Ok(Vec::new());
    };
    consts
        .iter()
        .map(|(name, value)| {
            let name: String = name.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "consts: a constant's name is a str, not {}",
                    type_name(&name)
                ))
            })?;
            let number = user_number(&value).ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "consts: constant `{name}` takes a bool, an int or a float, not {}",
                    type_name(&value)
                ))
            })?;
            Ok((name, number))
        })
        .collect()
}

fn borrowed(overrides: &[(String, UserNumber)]) -> Vec<(&str, UserNumber)> {
    overrides.iter().map(|(n, v)| (n.as_str(), *v)).collect()
}
