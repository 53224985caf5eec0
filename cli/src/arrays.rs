//! The arrays `mpmd run` reads (`--input`, `--compare`) and what they cost in
//! host memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mpmd_core::inputs;
use mpmd_core::interp::{Charge, MemoryBudget};
use mpmd_core::ir::{Call, Module, MpmdMap, Operand, ScalarType};
use mpmd_core::HostTensor;

use crate::{npy, shape_text, CliError};

/// An output that `--compare` judges, with its reference.
pub(crate) struct CompareTarget {
    /// NAME as the user wrote it.
    pub(crate) name: String,
    /// The call's index in the file.
    pub(crate) call: usize,
    pub(crate) output: String,
    pub(crate) path: PathBuf,
    pub(crate) reference: HostTensor,
}

/// The outputs `--compare` names among the calls that run, each with its
/// reference read and checked against the output's dtype and shape, before
/// anything runs.
pub(crate) fn compare_targets(
    module: &Module,
    calls: &[(usize, Call)],
    compares: &BTreeMap<&str, &str>,
) -> Result<Vec<CompareTarget>, CliError> {
    // Every output of the calls that run: (call index, map, output).
    let outputs: Vec<(usize, &MpmdMap, &Operand)> = calls
        .iter()
        .filter_map(|(index, call)| Some((*index, module.map(&call.map)?)))
        .flat_map(|(index, map)| map.outputs.iter().map(move |o| (index, map, o)))
        .collect();
    let stem = |(index, map, output): &(usize, &MpmdMap, &Operand)| {
        format!("{index}_{}_{}", map.name, output.name)
    };
    let mut targets: Vec<CompareTarget> = Vec::new();
    for (&name, &path) in compares {
        let by_name: Vec<_> = outputs.iter().filter(|(_, _, o)| o.name == name).collect();
        let found = match by_name.as_slice() {
            [one] => *one,
            [] => match outputs.iter().find(|o| stem(o) == name) {
                Some(one) => one,
                None => {
                    let known: Vec<String> = outputs
                        .iter()
                        .map(|(index, map, o)| {
                            format!("`{}` (call {index}, map `{}`)", o.name, map.name)
                        })
                        .collect();
                    return Err(CliError::Usage(format!(
                        "--compare `{name}`: the calls that run have no output of that name; their outputs: {}",
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    )));
                }
            },
            several => {
                let stems: Vec<String> = several.iter().map(|o| format!("`{}`", stem(o))).collect();
                return Err(CliError::Usage(format!(
                    "--compare `{name}`: {} calls that run have an output `{name}`: name one by its file stem ({}), or run one call with --call K",
                    several.len(),
                    stems.join(", ")
                )));
            }
        };
        let (index, map, output) = *found;
        if let Some(first) = targets
            .iter()
            .find(|t| t.call == index && t.output == output.name)
        {
            return Err(CliError::Usage(format!(
                "--compare `{}` and `{name}` name the same output (`{}` of call {index}): give it once",
                first.name, output.name
            )));
        }
        let elem = output.ty.as_ref_type().map_or(ScalarType::U32, |r| r.elem);
        let shape = inputs::host_shape(module, output).unwrap_or_default();
        let what = format!("output `{}` of map `{}`", output.name, map.name);
        let reference = read_npy_for("compare", name, &what, elem, &shape, Path::new(path))?;
        targets.push(CompareTarget {
            name: name.to_string(),
            call: index,
            output: output.name.clone(),
            path: PathBuf::from(path),
            reference,
        });
    }
    Ok(targets)
}

/// Host bytes of a tensor of `elem` and `shape`: packed words (two 16-bit
/// elements a word), saturating.
pub(crate) fn packed_bytes(elem: ScalarType, shape: &[u32]) -> u64 {
    mpmd_core::host::element_count(shape)
        .and_then(|elements| mpmd_core::host::word_bytes(elem, elements))
        .unwrap_or(u64::MAX)
}

/// Reads `--input NAME=PATH` for `what` (an input of a map, or a resident),
/// whose tensor has element type `elem` and host shape `shape`: the file's
/// shape must be exactly that, its dtype the element type's (bool takes
/// `|b1`, or 0/1 integers).
///
/// The data is charged to `budget` before it is read (its size follows
/// from the shape, which the file must match).
pub(crate) fn read_input(
    name: &str,
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    path: &Path,
    budget: &MemoryBudget,
) -> Result<(HostTensor, Charge), CliError> {
    let charge = budget
        .charge(packed_bytes(elem, shape), || {
            format!("--input `{name}` ({what})")
        })
        .map_err(CliError::MemoryLimit)?;
    Ok((
        read_npy_for("input", name, what, elem, shape, path)?,
        charge,
    ))
}

/// Reads the `.npy` file of `--FLAG NAME=PATH` for `what`, as
/// [`read_input`] says; messages name the flag.
fn read_npy_for(
    flag: &str,
    name: &str,
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    path: &Path,
) -> Result<HostTensor, CliError> {
    // The widest element a file may hold for it is 4 bytes (bool as `<u4`).
    let max_data_bytes =
        mpmd_core::host::element_count(shape).map_or(u64::MAX, |n| n.saturating_mul(4));
    let mut tensor = npy::read_at_most(path, max_data_bytes)?;
    let prefix = format!("--{flag} `{name}`: `{}`", path.display());
    let compatible = tensor.elem() == elem
        || (elem == ScalarType::Bool && matches!(tensor.elem(), ScalarType::U32 | ScalarType::I32));
    if !compatible {
        return Err(CliError::Usage(format!(
            "{prefix} holds {} data, and {what} is {}: write the array as {}",
            npy::read_descr_of(tensor.elem()),
            elem.keyword(),
            npy::read_descr_of(elem)
        )));
    }
    if tensor.shape() != shape {
        return Err(CliError::Usage(format!(
            "{prefix} has shape {}, and {what} {} shape {}: reshape the array to exactly that",
            shape_text(tensor.shape()),
            // An input needs its shape; an output (--compare) has one.
            if flag == "input" { "needs" } else { "has" },
            shape_text(shape)
        )));
    }
    if elem == ScalarType::Bool {
        if let Some((i, w)) = tensor.words().iter().enumerate().find(|(_, &w)| w > 1) {
            return Err(CliError::Usage(format!(
                "{prefix} holds {} data, and {what} is bool, but element {i} is {}, not 0 or 1",
                npy::read_descr_of(tensor.elem()),
                if tensor.elem() == ScalarType::I32 {
                    (*w as i32).to_string()
                } else {
                    w.to_string()
                }
            )));
        }
        let bits = tensor.to_bits();
        tensor = HostTensor::new(ScalarType::Bool, tensor.shape().to_vec(), bits)
            .map_err(|e| CliError::Usage(format!("{prefix}: {e}")))?;
    }
    Ok(tensor)
}
