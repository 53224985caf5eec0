//! What the core tests of the language share: a module from text, the
//! diagnostics validation gives it, and a run on the interpreter.
#![allow(dead_code)]

use mpmd_core::backend::Mode;
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::Module;
use mpmd_core::text::parse;
use mpmd_core::validate::{validate, Diagnostic, ValidateOptions};
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError, RunOptions};

/// One call of `map` on the interpreter with `inputs`, seed 7, in `mode`
/// (checked: with detection), plus `extra_schedules` seeded schedules.
#[allow(clippy::result_large_err)]
pub fn run_with_schedules(
    m: &Module,
    map: &str,
    inputs: &[(&str, HostTensor)],
    mode: Mode,
    extra_schedules: u32,
) -> Result<CallOutputs, RunError> {
    let args = CallArgs {
        inputs: inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        scalars: Default::default(),
    };
    let options = InterpOptions {
        detect: mode == Mode::Checked,
        extra_schedules,
        run: RunOptions { mode, seed: 7 },
        ..Default::default()
    };
    Interpreter::new().call(&validated(m), map, &args, &options)
}

/// The module of `src` (panics with the rendered syntax error).
pub fn module(src: &str) -> Module {
    parse(src)
        .unwrap_or_else(|e| panic!("{}", e.render("test")))
        .0
}

/// The diagnostics of `src` under the default options (none when valid).
pub fn diagnostics(src: &str) -> Vec<Diagnostic> {
    validate(&module(src), &ValidateOptions::default())
        .err()
        .unwrap_or_default()
}

/// The codes of `src`'s diagnostics.
pub fn codes(src: &str) -> Vec<&'static str> {
    diagnostics(src).iter().map(|d| d.code).collect()
}

/// The codes and messages of `src`'s diagnostics.
pub fn found(src: &str) -> Vec<(&'static str, String)> {
    diagnostics(src)
        .into_iter()
        .map(|d| (d.code, d.message))
        .collect()
}

/// The only diagnostic of `src`.
pub fn one(src: &str) -> Diagnostic {
    let d = validate(&module(src), &ValidateOptions::default()).expect_err("must be rejected");
    assert_eq!(d.len(), 1, "expected one diagnostic, got {d:#?}");
    d.into_iter().next().unwrap()
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
