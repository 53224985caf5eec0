//! What the core tests of the language share: a module from text, and the
//! diagnostics validation gives it.
#![allow(dead_code)]

use mpmd_core::ir::Module;
use mpmd_core::text::parse;
use mpmd_core::validate::{validate, Diagnostic, ValidateOptions};

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
