//! The text format: printer and parser (see docs/text-format.md).
//!
//! The IR carries no spans; the parser returns a [`SourceMap`] beside the
//! module so that diagnostics can point at lines and columns.

use std::collections::HashMap;

use thiserror::Error;

use crate::ir::{Expr, IrPath, Literal, Module, Stmt, Type};

mod lexer;
mod parser;

pub use parser::MAX_NESTING;
mod printer;

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

/// A syntax error. `Display` gives `line:column: message`;
/// [`ParseError::render`] gives the rustc-style report with the excerpt.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{line}:{column}: {message}")]
pub struct ParseError {
    pub line: u32,
    pub column: u32,
    pub message: String,
    /// The offending source line and a caret line under it.
    pub excerpt: String,
}

impl ParseError {
    /// The error as rustc prints one, naming `file`:
    ///
    /// ```text
    /// error: expected `;` after statement, found `}`
    ///  --> scale.mpmd:3:18
    ///   |
    /// 3 |   let x: u32 = 1u
    ///   |                  ^
    /// ```
    pub fn render(&self, file: &str) -> String {
        render_diagnostic(
            "error",
            &self.message,
            file,
            self.line,
            self.column,
            &self.excerpt,
        )
    }
}

/// The source line `line` of `src` and a caret line under `column` (both
/// 1-based; a column past the end points just after the line). Tabs before
/// the column are kept in the caret line so that the caret lines up.
pub fn excerpt(src: &str, line: u32, column: u32) -> String {
    let text = src
        .split('\n')
        .nth(line.saturating_sub(1) as usize)
        .unwrap_or("")
        .trim_end_matches('\r');
    let pad: String = text
        .chars()
        .chain(std::iter::repeat(' '))
        .take(column.saturating_sub(1) as usize)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("{text}\n{pad}^")
}

/// A rustc-style report: `{severity}: {message}`, ` --> file:line:column`,
/// and `excerpt` (as made by [`excerpt`]) under a line-number gutter.
pub fn render_diagnostic(
    severity: &str,
    message: &str,
    file: &str,
    line: u32,
    column: u32,
    excerpt: &str,
) -> String {
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    let mut out =
        format!("{severity}: {message}\n{gutter}--> {file}:{line}:{column}\n{gutter} |\n");
    let mut lines = excerpt.lines();
    if let Some(source) = lines.next() {
        out.push_str(&format!("{number} | {source}\n"));
    }
    for caret in lines {
        out.push_str(&format!("{gutter} | {caret}\n"));
    }
    out
}

/// Whether `name` can be printed and read back as a name: an identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`) that is not a keyword.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    starts_well && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !lexer::is_keyword(name)
}

/// Parses a whole `.mpmd` file.
pub fn parse(src: &str) -> Result<(Module, SourceMap), ParseError> {
    parser::parse_module(src)
}

/// Parses a single expression (the whole of `src`), as [`print_expr`] prints it.
pub fn parse_expr(src: &str) -> Result<Expr, ParseError> {
    parser::parse_expr_only(src)
}

/// Levels of nesting the parser needs for `expr` as [`print_expr`] prints it
/// (at most [`MAX_NESTING`], together with the enclosing blocks, in a file).
pub fn printed_nesting(expr: &Expr) -> usize {
    // Our own output, so no limit beyond the stack the caller already used
    // to build and print the expression.
    parser::parse_expr_with_limit(&print_expr(expr), usize::MAX)
        .map(|(_, deepest)| deepest)
        .unwrap_or(usize::MAX)
}

/// Prints a module in canonical form.
pub fn print(module: &Module) -> String {
    printer::write_module(module)
}

/// Prints one expression in canonical form (used by diagnostics).
pub fn print_expr(expr: &Expr) -> String {
    let mut out = String::new();
    printer::write_expr(&mut out, expr);
    out
}

/// Prints one statement in canonical form, without indentation; an `if` or
/// `for` spans several lines. No trailing newline.
pub fn print_stmt(stmt: &Stmt) -> String {
    let mut out = String::new();
    printer::write_stmt(&mut out, stmt, 0);
    out.pop();
    out
}

/// Prints a parameter or operand type (`u32`, `gmem<f32[4, 256]> @ m`).
pub fn print_type(ty: &Type) -> String {
    let mut out = String::new();
    printer::write_type(&mut out, ty);
    out
}

/// Prints a literal (`1.0`, `-7`, `7u`, `true`, `nan`, `f32_bits(0x7fc00001)`).
pub fn print_literal(lit: Literal) -> String {
    let mut out = String::new();
    printer::write_literal(&mut out, lit);
    out
}
