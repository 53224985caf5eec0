//! Python's data as the library's and back: dtypes, shapes, scalars,
//! input triples and the checked arguments of a call.

use std::borrow::Cow;
use std::collections::BTreeMap;

use mpmd_core::host::{self, ScalarValueError, UserNumber};
use mpmd_core::ir::{Literal, MpmdMap, Operand, ScalarType, Type};
use mpmd_core::{inputs, CallArgs, HostTensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyTuple};

use crate::*;

/// Every element type, in the order messages list them.
pub(crate) const ELEMENT_TYPES: [ScalarType; 6] = [
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

pub(crate) fn literal_to_py(py: Python<'_>, value: Literal) -> PyResult<Py<PyAny>> {
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

/// The name of `value`'s type, for messages.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A Python number as a user's number, before it has a type: a bool, an
/// int (or anything with `__index__`), or a float (or anything with
/// `__float__`); None for anything else.
pub(crate) fn user_number(value: &Bound<'_, PyAny>) -> Option<UserNumber> {
    if let Ok(b) = value.cast::<pyo3::types::PyBool>() {
        return Some(UserNumber::Bool(b.is_true()));
    }
    if value.is_instance_of::<pyo3::types::PyFloat>() {
        return value.extract::<f64>().ok().map(UserNumber::Float);
    }
    if let Ok(v) = value.extract::<i128>() {
        return Some(UserNumber::Int(v));
    }
    if value.is_instance_of::<pyo3::types::PyString>() {
        return None;
    }
    value.extract::<f64>().ok().map(UserNumber::Float)
}

/// A Python number as a scalar of type `ty`, or why not.
pub(crate) fn scalar_value(
    map: &str,
    name: &str,
    ty: ScalarType,
    value: &Bound<'_, PyAny>,
) -> PyResult<Literal> {
    let what = format!("scalar `{name}` of map `{map}`");
    let type_name = type_name(value);
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

/// An input's data from Python: numpy's dtype name, the shape, the data
/// (C order, little-endian; numpy's bool is one byte an element): a C-
/// contiguous array read in place, or `bytes` ([`crate::buffer::with_bytes`]).
pub(crate) type InputTriple<'py> = (String, Vec<u64>, Bound<'py, PyAny>);

/// The host tensor of input `name` (of type `elem`, host shape `shape`)
/// from Python's data, or a ValueError naming what was expected and given.
/// The data is copied once, into the tensor.
pub(crate) fn input_tensor(
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    (dtype, given_shape, data): InputTriple<'_>,
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
    crate::buffer::with_bytes(&data, |bytes| {
        if elem == ScalarType::Bool {
            let bits = bytes.iter().map(|&b| u32::from(b != 0)).collect();
            return HostTensor::new(elem, shape.to_vec(), bits);
        }
        HostTensor::from_bytes(elem, shape.to_vec(), bytes)
    })?
    .map_err(broken)
}

/// [`input_tensor`] for one call: where the data is a C-contiguous buffer
/// of exactly the tensor's packed words, the tensor reads them in place
/// ([`crate::buffer::lend_words`]) instead of a copy. Only for data that
/// outlives the tensor's use (a call's arguments, dropped when it returns).
pub(crate) fn call_input_tensor(
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    triple: InputTriple<'_>,
) -> PyResult<HostTensor> {
    let (dtype, given_shape, data) = &triple;
    let matches = dtype == dtype_name(elem)
        && given_shape
            .iter()
            .copied()
            .eq(shape.iter().map(|&d| u64::from(d)));
    if matches && elem != ScalarType::Bool {
        if let Some(lent) = crate::buffer::lend_words(data) {
            let lent = std::sync::Arc::new(lent);
            if let Some(tensor) = HostTensor::from_shared_words(elem, shape.to_vec(), lent) {
                return Ok(tensor);
            }
        }
    }
    input_tensor(what, elem, shape, triple)
}

/// Outputs smaller than this are copied into a bytearray: cheaper than the
/// object numpy reads a call's own words through.
const COPIED_OUTPUT_BYTES: usize = 16 << 10;

/// What Python gets for a call's output: numpy's dtype name, the shape, and
/// the tensor's own words without a copy ([`crate::buffer::OutputWords`]),
/// or for `bool` (one byte an element in numpy) and small tensors the
/// bytearray of [`tensor_triple`].
pub(crate) fn output_triple<'py>(
    py: Python<'py>,
    tensor: HostTensor,
) -> PyResult<(&'static str, Bound<'py, PyTuple>, Bound<'py, PyAny>)> {
    let bytes = tensor.len() * tensor.elem().byte_size() as usize;
    if tensor.elem() == ScalarType::Bool
        || bytes < COPIED_OUTPUT_BYTES
        || cfg!(target_endian = "big")
    {
        let (dtype, shape, bytes) = tensor_triple(py, &tensor)?;
        return Ok((dtype, shape, bytes.into_any()));
    }
    let shape = PyTuple::new(py, tensor.shape())?;
    let dtype = dtype_name(tensor.elem());
    let words = crate::buffer::OutputWords::new(tensor.into_words(), bytes);
    Ok((dtype, shape, Bound::new(py, words)?.into_any()))
}

/// A host tensor as Python's data: numpy's dtype name, the shape and the
/// bytes (bool one byte an element), written once, straight from the
/// tensor's words into the bytearray numpy then reads in place.
pub(crate) fn tensor_triple<'py>(py: Python<'py>, tensor: &HostTensor) -> PyResult<Triple<'py>> {
    let shape = PyTuple::new(py, tensor.shape())?;
    let bytes = if tensor.elem() == ScalarType::Bool {
        PyByteArray::new_with(py, tensor.len(), |out| {
            for (i, byte) in out.iter_mut().enumerate() {
                *byte = u8::from(tensor.bits(i).is_some_and(|b| b != 0));
            }
            Ok(())
        })?
    } else {
        PyByteArray::new(py, &tensor_bytes(tensor))
    };
    Ok((dtype_name(tensor.elem()), shape, bytes))
}

/// The bytes a device buffer holds for `tensor` (what
/// [`HostTensor::bytes`] gives): its own words, read in place on a
/// little-endian machine.
pub(crate) fn tensor_bytes(tensor: &HostTensor) -> Cow<'_, [u8]> {
    let len = tensor.len() * tensor.elem().byte_size() as usize;
    if cfg!(target_endian = "little") && len <= tensor.words().len() * 4 {
        // SAFETY: `len` bytes lie within the words (checked); on a
        // little-endian machine their order is the device buffer's.
        return Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(tensor.words().as_ptr().cast::<u8>(), len)
        });
    }
    Cow::Owned(tensor.bytes())
}

/// What Python gets for a tensor: numpy's dtype name, the shape, the bytes.
pub(crate) type Triple<'py> = (&'static str, Bound<'py, PyTuple>, Bound<'py, PyByteArray>);

/// The call's arguments: every uploaded input and every scalar given, of
/// the right dtype and shape, and nothing else.
pub(crate) fn call_args(
    module: &PyModule_,
    map: &MpmdMap,
    given: BTreeMap<String, InputTriple<'_>>,
    scalars: BTreeMap<String, Bound<'_, PyAny>>,
) -> PyResult<CallArgs> {
    let (inputs, scalars) = checked_arguments(module, map, given, scalars, call_input_tensor)?;
    Ok(CallArgs { inputs, scalars })
}

/// Every uploaded input (each made a `T` by `convert`, from what it is
/// called in messages, its element type and host shape) and every scalar,
/// and nothing else.
#[allow(clippy::type_complexity)]
pub(crate) fn checked_arguments<G, T>(
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

pub(crate) fn names<'a>(operands: impl Iterator<Item = &'a Operand>) -> String {
    let list: Vec<String> = operands.map(|o| format!("`{}`", o.name)).collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}
