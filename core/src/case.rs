//! A file's `case` section: test data, not part of the IR.
//!
//! A `.mpmd` file may end its module with `case { ... }`: how to generate
//! each input (`generate`), how to compare each output with the oracle's
//! (`compare`), what the run must produce (`expect`) and free-form `tags`.
//! The text format reads it beside the module ([`crate::text::parse_file`])
//! and prints it beside one ([`crate::text::print_file`]);
//! [`crate::validate::validate_case`] checks it against the module (E0008,
//! E0074).
//!
//! Who reads what: input generation ([`crate::inputs`], so `mpmd run` and
//! the fuzzer too) reads the `generate` lines; the conformance harness
//! reads the rest. The interpreter only learns how far each output may
//! differ between its schedules, in its own terms
//! ([`CompareMode::schedule_tolerance`]).

use crate::backend::ErrorClass;
use crate::interp::ScheduleTolerance;
use crate::ir::{Literal, Name};

/// A file's test case: how to generate inputs, compare outputs, and what to expect.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct CaseSpec {
    pub generators: Vec<(Name, Generator)>,
    pub compares: Vec<(Name, CompareMode)>,
    pub expect: Expectation,
    /// Free-form tags, in addition to those derived from the program.
    pub tags: Vec<Name>,
}

impl CaseSpec {
    /// How far each output with a `compare` line may differ between the
    /// interpreter's schedules ([`crate::interp::InterpOptions::schedule_tolerances`]).
    pub fn schedule_tolerances(&self) -> Vec<(Name, ScheduleTolerance)> {
        self.compares
            .iter()
            .map(|(name, mode)| (name.clone(), mode.schedule_tolerance()))
            .collect()
    }
}

/// A deterministic (for a seed) generator of an input's elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Generator {
    /// Uniform in `[lo, hi)` (floats) or `[lo, hi]` (integers), of the input's type.
    Uniform { lo: Literal, hi: Literal },
    /// Like `Uniform` but never zero.
    NonZero { lo: Literal, hi: Literal },
    /// A mix of the type's edge values (0, -0, ±inf, NaN, subnormals, min, max,
    /// ±1) and random values.
    Special,
    /// Every element is this value.
    Constant(Literal),
    /// Element i is i (converted to the input's type).
    Iota,
    /// A valid index into dimension `dim` of the named operand.
    IndexInto { operand: Name, dim: u32 },
}

/// How an output is compared against the oracle.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CompareMode {
    /// Bit-exact, except that the sign of zero and NaN payloads are ignored.
    Exact,
    /// Floats within `n` units in the last place.
    Ulp(u32),
    /// Floats within the bound of the operations involved (the backend's profile).
    Profile,
    /// As multisets: order depends on the schedule.
    Multiset,
    /// Not compared (for example a value observed by atomics under contention).
    Ignore,
    /// Floats that are sums of `mma_m16n8k16` results, within the
    /// tensor-core bound of docs/numerics.md ("Matrix multiply-accumulate"):
    /// each element's distance from the oracle's is bounded by its magnitude
    /// and its number of mma steps, which conformance learns from the
    /// interpreter's probes ([`crate::interp::MmaProbe`]).
    Mma,
}

impl CompareMode {
    /// What the mode lets differ between two schedules of the interpreter:
    /// `profile` allows only the reordering of f32 atomic adds there (the
    /// other operations are the interpreter's own, identical in every
    /// schedule); `mma` none (the interpreter's mma is one fixed order).
    pub fn schedule_tolerance(&self) -> ScheduleTolerance {
        match self {
            CompareMode::Exact => ScheduleTolerance::Ulps(0),
            CompareMode::Ulp(n) => ScheduleTolerance::Ulps(*n),
            CompareMode::Profile => ScheduleTolerance::SummationOrder,
            CompareMode::Multiset => ScheduleTolerance::Multiset,
            CompareMode::Ignore => ScheduleTolerance::Any,
            CompareMode::Mma => ScheduleTolerance::Ulps(0),
        }
    }
}

/// What a case must produce.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Expectation {
    /// Runs and produces outputs that are compared.
    #[default]
    Ok,
    /// The run must fail with this error class.
    Fails(ErrorClass),
    /// Validation must reject the module with this code (`E0001`, ...).
    Reject(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_modes_give_the_interpreter_its_schedule_tolerances() {
        let spec = CaseSpec {
            compares: vec![
                ("a".into(), CompareMode::Exact),
                ("b".into(), CompareMode::Ulp(3)),
                ("c".into(), CompareMode::Profile),
                ("d".into(), CompareMode::Multiset),
                ("e".into(), CompareMode::Ignore),
                ("f".into(), CompareMode::Mma),
            ],
            ..CaseSpec::default()
        };
        assert_eq!(
            spec.schedule_tolerances(),
            [
                ("a".to_string(), ScheduleTolerance::Ulps(0)),
                ("b".to_string(), ScheduleTolerance::Ulps(3)),
                ("c".to_string(), ScheduleTolerance::SummationOrder),
                ("d".to_string(), ScheduleTolerance::Multiset),
                ("e".to_string(), ScheduleTolerance::Any),
                ("f".to_string(), ScheduleTolerance::Ulps(0)),
            ]
        );
    }
}
