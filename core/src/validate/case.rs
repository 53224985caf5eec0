//! The case section against the module: what it generates, indexes and
//! compares exists, and `mma` compares float outputs only (E0008); each
//! operand has one `generate` and one `compare` line at most, each generator
//! can make its operand's values, and `expect reject(CODE)` names a code
//! validation has (E0074). The case is test data beside the module
//! ([`crate::case`]), so this check is separate from the module's.

use std::collections::BTreeSet;

use super::Sink;
use crate::case::{CaseSpec, CompareMode, Expectation, Generator};
use crate::ir::{IrPath, Module, OperandKind, PathStep, ScalarType};

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
    // The element types each name takes data as (an operand of several
    // maps, or a resident).
    let data_types = |name: &str| {
        let mut types: BTreeSet<ScalarType> = module
            .maps
            .iter()
            .flat_map(crate::inputs::uploaded_inputs)
            .filter(|o| o.name == name)
            .filter_map(|o| o.ty.as_ref_type())
            .map(|r| r.elem)
            .collect();
        types.extend(module.resident(name).map(|r| r.ty.elem));
        types
    };
    let mut generated = BTreeSet::new();
    for (name, _) in &case.generators {
        if !generated.insert(name) {
            sink.report(
                "E0074",
                path.clone(),
                format!("`generate {name}` is given twice"),
                "keep one `generate` line for each operand",
            );
        }
    }
    let mut compared = BTreeSet::new();
    for (name, _) in &case.compares {
        if !compared.insert(name) {
            sink.report(
                "E0074",
                path.clone(),
                format!("`compare {name}` is given twice"),
                "keep one `compare` line for each output",
            );
        }
    }
    if let Expectation::Reject(code) = &case.expect {
        if !super::CODES.iter().any(|(known, _, _)| known == code) {
            sink.report(
                "E0074",
                path.clone(),
                format!("`expect reject({code})` names no validation error code"),
                "name a code of docs/errors.md (E0001 ...)",
            );
        }
    }
    for (name, generator) in &case.generators {
        if takes_data(name) {
            // Generation's own rule, so that `check` refuses what `run`
            // would (index_into's operand is checked below).
            for elem in data_types(name) {
                if let Err(e) = crate::inputs::check_generator(generator, name, elem) {
                    sink.report(
                        "E0074",
                        path.clone(),
                        e.to_string(),
                        "change the generator as the message says",
                    );
                }
            }
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

#[cfg(test)]
mod tests {
    use crate::text::parse_file;
    use crate::validate::validate_case;

    /// `x: u32[256]` in, `y: f32[256]` out, and `case_lines` in the case.
    fn case_diagnostics(case_lines: &str) -> Vec<(String, String)> {
        let src = format!(
            "mesh m {{ grid [b = 1]; threads t = 256; }}\n\
             kernel k(x: gmem<u32[256]>, y: gmem<f32[256]>) {{ y[axis_index(t)] = f32(x[axis_index(t)]); }}\n\
             map k {{ programs [m: k]; inputs [x: gmem<u32[256]>]; outputs [y: gmem<f32[256]>]; }}\n\
             call k();\n\
             case {{ {case_lines} }}\n"
        );
        let parsed = parse_file(&src).unwrap();
        validate_case(&parsed.module, parsed.case.as_ref().unwrap())
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|d| (d.code.to_string(), d.message))
            .collect()
    }

    fn e0074(message: &str) -> Vec<(String, String)> {
        vec![("E0074".to_string(), message.to_string())]
    }

    #[test]
    fn a_name_generated_or_compared_twice_is_refused() {
        assert_eq!(
            case_diagnostics("generate x = iota; generate x = constant(1);"),
            e0074("`generate x` is given twice")
        );
        assert_eq!(
            case_diagnostics("compare y = exact; compare y = ulp(2);"),
            e0074("`compare y` is given twice")
        );
    }

    #[test]
    fn expect_reject_names_a_known_code() {
        assert_eq!(
            case_diagnostics("expect reject(E9999);"),
            e0074("`expect reject(E9999)` names no validation error code")
        );
        assert_eq!(case_diagnostics("expect reject(E0036);"), vec![]);
    }

    #[test]
    fn generators_are_checked_against_the_operands_type() {
        assert_eq!(
            case_diagnostics("generate x = uniform(0.0, 1.0);"),
            e0074("generator `uniform(0.0, 1.0)` for `x`: the bounds are floats, and `u32` takes integers; write integer bounds such as `uniform(0, 10)`")
        );
        assert_eq!(
            case_diagnostics("generate x = nonzero(0, 2.5);"),
            e0074("generator `nonzero(0, 2.5)` for `x`: the bounds are floats, and `u32` takes integers; write integer bounds such as `nonzero(0, 10)`")
        );
        assert_eq!(
            case_diagnostics("generate x = constant(nan);"),
            e0074("generator `constant(nan)` for `x`: `nan` has no exact value of type `u32`; write one such as `0u`")
        );
        for fine in [
            "generate x = uniform(0, 10);",
            "generate x = uniform(0u, 10u);",
            "generate x = nonzero(-5, 5);",
            "generate x = special;",
        ] {
            assert_eq!(case_diagnostics(fine), vec![], "{fine}");
        }
    }
}
