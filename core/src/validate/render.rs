//! rustc-like rendering of diagnostics.

use std::fmt::Write;

use super::Diagnostic;
use crate::text::{SourceLines, SourceMap};

/// Renders a diagnostic like rustc: code, message, `file:line:column`, the
/// source line with a caret, the rule and the fix. Without a source map (or
/// when it has no span for the place) the IR path stands in for the position.
/// To render several diagnostics of one file, make one [`Renderer`].
pub fn render(diag: &Diagnostic, file: &str, source: Option<(&str, &SourceMap)>) -> String {
    Renderer::new(file, source).render(diag)
}

/// Renders the diagnostics of one file; the file's lines are found once, so
/// rendering `n` diagnostics costs time linear in `n` and the file's size.
pub struct Renderer<'a> {
    file: &'a str,
    source: Option<(SourceLines<'a>, &'a SourceMap)>,
}

impl<'a> Renderer<'a> {
    pub fn new(file: &'a str, source: Option<(&'a str, &'a SourceMap)>) -> Self {
        Self {
            file,
            source: source.map(|(text, map)| (SourceLines::new(text), map)),
        }
    }

    /// One diagnostic, as [`render`] says.
    pub fn render(&self, diag: &Diagnostic) -> String {
        render_with(diag, self.file, self.source.as_ref())
    }

    /// A place a run report points at (a race's access): `note: LABEL`,
    /// then the statement at `path` as a diagnostic shows its place, or the
    /// path where the source map has no span.
    pub fn render_note(&self, label: &str, path: &crate::ir::IrPath) -> String {
        let mut out = format!("note: {label}\n");
        let span = self
            .source
            .as_ref()
            .and_then(|(lines, map)| map.span_of(path).map(|s| (lines, s)));
        match span {
            Some((lines, span)) => {
                snippet(&mut out, self.file, lines, span);
            }
            None => {
                let _ = writeln!(out, "  --> {} ({path})", self.file);
            }
        }
        out
    }
}

/// `--> file:line:column`, the line and a caret under the span (never past
/// the end of its first line); returns the gutter's indent.
fn snippet(
    out: &mut String,
    file: &str,
    lines: &SourceLines<'_>,
    span: crate::text::Span,
) -> String {
    let line_no = span.line.max(1);
    let line = lines.line(line_no);
    let gutter = " ".repeat(line_no.to_string().len());
    let column = (span.column.max(1) as usize).min(line.chars().count() + 1);
    let available = line.chars().count() + 1 - column;
    let width = span
        .end
        .saturating_sub(span.start)
        .clamp(1, available.max(1));
    let _ = writeln!(out, "{gutter}--> {file}:{line_no}:{column}");
    let _ = writeln!(out, "{gutter} |");
    let _ = writeln!(out, "{line_no} | {line}");
    let _ = writeln!(
        out,
        "{gutter} | {}{}",
        " ".repeat(column - 1),
        "^".repeat(width)
    );
    gutter
}

fn render_with(
    diag: &Diagnostic,
    file: &str,
    source: Option<&(SourceLines<'_>, &SourceMap)>,
) -> String {
    let mut out = format!("error[{}]: {}\n", diag.code, diag.message);
    let span = source.and_then(|(lines, map)| map.span_of(&diag.path).map(|s| (lines, s)));
    match span {
        Some((lines, span)) => {
            let gutter = snippet(&mut out, file, lines, span);
            let _ = writeln!(out, "{gutter} = rule: {}", diag.rule);
            let _ = writeln!(out, "{gutter} = help: {}", diag.help);
        }
        None => {
            let _ = writeln!(out, "  --> {file} ({})", diag.path);
            let _ = writeln!(out, "  = rule: {}", diag.rule);
            let _ = writeln!(out, "  = help: {}", diag.help);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{self, source_line};
    use crate::validate::{validate, ValidateOptions};

    /// Lines as the lexer ends them: LF, CR LF, a lone CR; a BOM is not
    /// part of line 1.
    #[test]
    fn source_lines_end_where_the_lexer_ends_them() {
        let src = "\u{feff}a\r\nb\rc\n\nd";
        let lines = SourceLines::new(src);
        let all: Vec<&str> = (0..=6).map(|n| lines.line(n)).collect();
        assert_eq!(all, ["", "a", "b", "c", "", "d", ""]);
        assert_eq!(source_line(src, 3), "c");
        assert_eq!(SourceLines::new("x\n").line(2), "");
    }

    /// One error on each of 20,000 lines: before the lines were found once,
    /// each diagnostic scanned the file from its start (quadratic: about a
    /// minute in a debug build, 8 s in release); now well under a second.
    #[test]
    fn rendering_many_diagnostics_is_linear() {
        const ERRORS: usize = 20_000;
        let mut src =
            String::from("mesh m { grid [b = 1]; threads t = 1; }\nkernel k(y: gmem<i32[1]>) {\n");
        for i in 0..ERRORS {
            src.push_str(&format!("  let v{i}: i32 = zz{i};\n"));
        }
        src.push_str("}\n");
        let parsed = text::parse_file(&src).unwrap();
        let diagnostics = validate(&parsed.module, &ValidateOptions::default()).unwrap_err();
        assert_eq!(diagnostics.len(), ERRORS);
        let started = std::time::Instant::now();
        let renderer = Renderer::new("many.mpmd", Some((&src, &parsed.source_map)));
        let rendered: Vec<String> = diagnostics.iter().map(|d| renderer.render(d)).collect();
        let elapsed = started.elapsed();
        assert!(rendered[ERRORS - 1].contains(&format!(
            "{} |   let v{}: i32 = zz{};",
            ERRORS + 2,
            ERRORS - 1,
            ERRORS - 1
        )));
        assert!(
            elapsed < std::time::Duration::from_secs(10),
            "rendering {ERRORS} diagnostics took {elapsed:?}"
        );
    }
}
