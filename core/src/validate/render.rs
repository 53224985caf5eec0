//! rustc-like rendering of diagnostics.

use std::fmt::Write;

use super::Diagnostic;
use crate::text::SourceMap;

/// Renders a diagnostic like rustc: code, message, `file:line:column`, the
/// source line with a caret, the rule and the fix. Without a source map (or
/// when it has no span for the place) the IR path stands in for the position.
pub fn render(diag: &Diagnostic, file: &str, source: Option<(&str, &SourceMap)>) -> String {
    let mut out = format!("error[{}]: {}\n", diag.code, diag.message);
    let span = source.and_then(|(text, map)| map.span_of(&diag.path).map(|s| (text, s)));
    match span {
        Some((text, span)) => {
            let line_no = span.line.max(1);
            let line = crate::text::source_line(text, line_no);
            let gutter = " ".repeat(line_no.to_string().len());
            let column = (span.column.max(1) as usize).min(line.chars().count() + 1);
            // Underline the span, but never past the end of its first line.
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
