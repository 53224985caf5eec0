//! The text format: printer and parser (see docs/text-format.md).
//!
//! The IR carries no spans; the parser returns a [`SourceMap`] beside the
//! module so that diagnostics can point at lines and columns.

use std::collections::HashMap;

use thiserror::Error;

use crate::ir::{IrPath, Module};

/// A place in source text. Lines and columns are 1-based; offsets are bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub line: u32,
    pub column: u32,
}

/// Spans of the items and statements of a parsed module, keyed by IR path.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    pub spans: HashMap<IrPath, Span>,
}

impl SourceMap {
    /// The span of `path`, or of its nearest ancestor that has one.
    pub fn span_of(&self, path: &IrPath) -> Option<Span> {
        let mut p = Some(path.clone());
        while let Some(cur) = p {
            if let Some(s) = self.spans.get(&cur) {
                return Some(*s);
            }
            p = cur.parent();
        }
        None
    }
}

/// A syntax error. `Display` renders line, column, the source line with a
/// caret under the column, and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{line}:{column}: {message}")]
pub struct ParseError {
    pub line: u32,
    pub column: u32,
    pub message: String,
    /// The offending source line and a caret line under it.
    pub excerpt: String,
}

/// Parses a whole `.mpmd` file.
pub fn parse(src: &str) -> Result<(Module, SourceMap), ParseError> {
    let _ = src;
    Err(ParseError {
        line: 1,
        column: 1,
        message: "parser not implemented yet".into(),
        excerpt: String::new(),
    })
}

/// Prints a module in canonical form.
pub fn print(module: &Module) -> String {
    format!("{module:?}")
}

/// Prints one expression in canonical form (used by diagnostics).
pub fn print_expr(expr: &crate::ir::Expr) -> String {
    format!("{expr:?}")
}
