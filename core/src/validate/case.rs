//! The case section against the module (E0008): what it generates, indexes
//! and compares exists, and `mma` compares float outputs only. The case is test data beside the module
//! ([`crate::case`]), so this check is separate from the module's.

use super::Sink;
use crate::case::{CaseSpec, CompareMode, Generator};
use crate::ir::{IrPath, Module, OperandKind, PathStep};

pub(super) fn check_case(module: &Module, case: &CaseSpec, sink: &mut Sink) {
    let path = IrPath::root().child(PathStep::Case);
    let operands = || module.maps.iter().flat_map(|m| m.operands());
    let is_kind =
        |name: &str, kind: OperandKind| operands().any(|(k, o)| k == kind && o.name == name);
    // What takes host data is `BufferStart`'s rule, as in generation.
    let takes_data = |name: &str| {
        module.resident(name).is_some()
            || module
                .maps
                .iter()
                .any(|m| crate::inputs::uploaded_inputs(m).any(|o| o.name == name))
    };
    for (name, generator) in &case.generators {
        if takes_data(name) {
        } else if is_kind(name, OperandKind::Input) {
            sink.report(
                "E0008",
                path.clone(),
                format!("`generate {name}` names an input that starts at zero in every call (a semaphore, or declared `zeroed`): nothing reads the values"),
                "drop the `generate` line, or `zeroed` from the input",
            );
        } else {
            sink.report(
                "E0008",
                path.clone(),
                format!("`generate {name}` names no input and no resident of the module"),
                "generate values for inputs and residents only",
            );
        }
        if let Generator::IndexInto { operand, dim } = generator {
            let rank = operands()
                .find(|(_, o)| o.name == *operand)
                .and_then(|(_, o)| o.ty.as_ref_type())
                .or_else(|| module.resident(operand).map(|r| &r.ty))
                .map(|r| r.shape.len());
            match rank {
                None => sink.report(
                    "E0008",
                    path.clone(),
                    format!("`generate {name} = index_into({operand}, {dim})` names no ref operand `{operand}`"),
                    "name a ref operand of the map",
                ),
                Some(rank) if *dim as usize >= rank => sink.report(
                    "E0008",
                    path.clone(),
                    format!("`generate {name} = index_into({operand}, {dim})`: `{operand}` has {rank} dimension(s)"),
                    "name a dimension below the operand's rank",
                ),
                Some(_) => {}
            }
        }
    }
    for (name, mode) in &case.compares {
        if !is_kind(name, OperandKind::Output) {
            sink.report(
                "E0008",
                path.clone(),
                format!("`compare {name}` names no output of a map in the module"),
                "compare outputs only",
            );
            continue;
        }
        // The mma bound is relative to a float magnitude: it has no meaning
        // for integers and bools.
        let non_float = operands()
            .filter(|(k, o)| *k == OperandKind::Output && o.name == *name)
            .filter_map(|(_, o)| o.ty.as_ref_type())
            .find(|r| !r.elem.is_float());
        if let (CompareMode::Mma, Some(r)) = (mode, non_float) {
            sink.report(
                "E0008",
                path.clone(),
                format!(
                    "`compare {name} = mma` names an output of type `{}`: the mma bound is for float outputs",
                    r.elem
                ),
                "compare integer and bool outputs with `exact`",
            );
        }
    }
}
