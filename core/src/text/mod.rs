//! The text format: printer and parser (see docs/text-format.md).
//!
//! The IR carries no spans; the parser returns a [`SourceMap`] beside the
//! module so that diagnostics can point at lines and columns. A file's
//! `case` section is not IR either: [`parse_file`] returns it beside the
//! module and [`print_file`] prints it after one.

use std::collections::HashMap;

use thiserror::Error;

use crate::case::{CaseSpec, Generator};
use crate::ir::{Expr, IrPath, Literal, Module, PathStep, RefType, ScalarType, Stmt, Type};

mod lexer;
mod nesting;
mod parser;
pub(crate) mod printer;

pub use crate::ir::limits::MAX_NESTING;
pub use nesting::{body_nesting, expr_nesting, statement_nesting, visit_nesting};
pub(crate) use parser::is_builtin_function;

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

/// Line `line` (1-based) of `src`, without its line end. Lines end at LF,
/// CR LF or a CR alone; a byte-order mark at the start is not part of line 1.
/// To look up many lines of one text, make one [`SourceLines`].
pub fn source_line(src: &str, line: u32) -> &str {
    SourceLines::new(src).line(line)
}

/// The lines of a text, found once (one pass), so that looking up a line
/// costs no scan: rendering one diagnostic per line of a long file stays
/// linear.
#[derive(Clone, Debug)]
pub struct SourceLines<'s> {
    src: &'s str,
    /// Byte ranges of the lines, line ends excluded.
    lines: Vec<(usize, usize)>,
}

impl<'s> SourceLines<'s> {
    pub fn new(src: &'s str) -> Self {
        let bom = lexer::bom_len(src);
        let mut lines = Vec::new();
        let mut start = bom;
        for (i, c) in src[bom..].char_indices().map(|(i, c)| (i + bom, c)) {
            if lexer::ends_line(src, i, c) {
                // A CR LF line: the CR is part of the line end.
                let end = if src[start..i].ends_with('\r') {
                    i - 1
                } else {
                    i
                };
                lines.push((start, end));
                start = i + 1;
            }
        }
        lines.push((start, src.len()));
        Self { src, lines }
    }

    /// Line `line` (1-based), or `""` past the end.
    pub fn line(&self, line: u32) -> &'s str {
        (line as usize)
            .checked_sub(1)
            .and_then(|i| self.lines.get(i))
            .map_or("", |&(start, end)| &self.src[start..end])
    }
}

/// The source line `line` of `src` and a caret line under `column` (both
/// 1-based; a column past the end points just after the line). Tabs before
/// the column are kept in the caret line so that the caret lines up.
pub fn excerpt(src: &str, line: u32, column: u32) -> String {
    let text = source_line(src, line);
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

/// A parsed `.mpmd` file: the module, the file's test-case section (test
/// data for the conformance harness and `mpmd run`, not IR) and the spans of
/// both.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub module: Module,
    /// The `case { ... }` section, if the file has one.
    pub case: Option<CaseSpec>,
    /// Spans of the module's items and statements, and of the case section
    /// (at [`crate::ir::PathStep::Case`]).
    pub source_map: SourceMap,
}

/// Parses a whole `.mpmd` file: the module and its case section.
pub fn parse_file(src: &str) -> Result<SourceFile, ParseError> {
    parser::parse_file(src)
}

/// Why [`parse_file_with`] refused its constant overrides (or the text).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConstOverrideError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("the override `{name}` matches no constant of the module (its constants: {declared})")]
    NoSuchConstant {
        name: String,
        /// The module's constant names, comma-separated (`none` when it has none).
        declared: String,
    },
    #[error("the override `{name}` is a `{given}` but the constant is declared `{declared}` (line {line})")]
    TypeMismatch {
        name: String,
        declared: ScalarType,
        given: ScalarType,
        /// The line of the constant's declaration.
        line: u32,
    },
    #[error("the constant `{name}` is overridden twice")]
    Duplicate { name: String },
}

/// [`parse_file`] with the values of some module constants replaced before
/// they are resolved into types, axis sizes and loop bounds, so one text
/// serves several configurations without editing it (the GEMM benchmark
/// instantiates `examples/stream_k_gemm.mpmd` at other tile sizes and
/// capacities this way). Each override names a `const` of the file and
/// gives a literal of exactly its declared type (`Literal::U32(4096)` for a
/// `u32`); the module's `consts` then hold the new values. An override
/// naming no constant, of another type, or given twice is an error; a
/// syntax error of the text is reported first.
pub fn parse_file_with(
    src: &str,
    overrides: &[(&str, Literal)],
) -> Result<SourceFile, ConstOverrideError> {
    let mut by_name = HashMap::new();
    for (name, value) in overrides {
        if by_name.insert(name.to_string(), *value).is_some() {
            return Err(ConstOverrideError::Duplicate {
                name: name.to_string(),
            });
        }
    }
    let file = parser::parse_file_overriding(src, &by_name)?;
    for (name, given) in overrides {
        let Some(constant) = file.module.consts.iter().find(|c| c.name == *name) else {
            let names: Vec<&str> = file.module.consts.iter().map(|c| c.name.as_str()).collect();
            return Err(ConstOverrideError::NoSuchConstant {
                name: name.to_string(),
                declared: if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                },
            });
        };
        if constant.value.ty() != given.ty() {
            let path = IrPath(vec![PathStep::Const(constant.name.clone())]);
            return Err(ConstOverrideError::TypeMismatch {
                name: name.to_string(),
                declared: constant.value.ty(),
                given: given.ty(),
                line: file.source_map.span_of(&path).map_or(0, |span| span.line),
            });
        }
    }
    Ok(file)
}

/// Parses a whole `.mpmd` file for its module alone: a case section must be
/// well formed but is left out ([`parse_file`] keeps it).
pub fn parse(src: &str) -> Result<(Module, SourceMap), ParseError> {
    let file = parse_file(src)?;
    Ok((file.module, file.source_map))
}

/// Parses a whole `.mpmd` file given as bytes: [`decode`], then [`parse`].
pub fn parse_bytes(bytes: &[u8]) -> Result<(Module, SourceMap), ParseError> {
    parse(decode(bytes)?)
}

/// The text of a `.mpmd` file, which is UTF-8; otherwise an error at the
/// line and column of the first byte that is not.
pub fn decode(bytes: &[u8]) -> Result<&str, ParseError> {
    let error = match std::str::from_utf8(bytes) {
        Ok(text) => return Ok(text),
        Err(error) => error,
    };
    let valid = error.valid_up_to();
    // The prefix is valid UTF-8, so it gives the line and column.
    let before = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
    let (line, column) = position_of(before, valid);
    let line_start = valid - source_line(before, line).len();
    let line_end = bytes[valid..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map_or(bytes.len(), |n| valid + n);
    let shown = String::from_utf8_lossy(&bytes[line_start..line_end]);
    Err(ParseError {
        line,
        column,
        message: format!(
            "byte 0x{:02X} is not valid UTF-8; .mpmd files are UTF-8 (save the file as UTF-8)",
            bytes[valid]
        ),
        excerpt: excerpt(&shown, 1, column),
    })
}

/// The 1-based line and column (in characters) of byte `offset` of `src`,
/// with the lexer's line ends and byte-order mark.
pub(crate) fn position_of(src: &str, offset: usize) -> (u32, u32) {
    let (mut line, mut column) = (1u32, 1u32);
    for (i, c) in src[..offset].char_indices() {
        if i < lexer::bom_len(src) {
            continue;
        }
        if lexer::ends_line(src, i, c) {
            line += 1;
            column = 1;
        } else if !lexer::is_line_break(c) {
            column += 1;
        }
    }
    (line, column)
}

/// Parses a single expression (the whole of `src`), as [`print_expr`] prints it.
pub fn parse_expr(src: &str) -> Result<Expr, ParseError> {
    parser::parse_expr_only(src)
}

/// Prints a module in canonical form.
pub fn print(module: &Module) -> String {
    printer::write_file(module, None)
}

/// Prints a module and, after it, a case section, in canonical form:
/// `parse_file(&print_file(m, c))` gives back `m` and `c`.
pub fn print_file(module: &Module, case: Option<&CaseSpec>) -> String {
    printer::write_file(module, case)
}

/// Prints a generator as a `generate` line writes it (`uniform(-1.0, 1.0)`).
pub fn print_generator(generator: &Generator) -> String {
    let mut out = String::new();
    printer::write_generator(&mut out, generator);
    out
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

/// Prints a ref type (`gmem<f32[4, 256]> @ m`, `sem<[2]>`, `local<f32[4]>`):
/// the one printer of types in the text format, which validation's messages,
/// the CLI and the plan description use.
pub fn print_ref_type(ty: &RefType) -> String {
    let mut out = String::new();
    printer::write_ref_type(&mut out, ty);
    out
}

/// Prints a literal (`1.0`, `-7`, `7u`, `true`, `nan`, `f32_bits(0x7fc00001)`).
pub fn print_literal(lit: Literal) -> String {
    let mut out = String::new();
    printer::write_literal(&mut out, lit);
    out
}
