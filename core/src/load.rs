//! Loading a `.mpmd` text with its diagnostics rendered: parse the module
//! and its case section, validate both, and on failure render every
//! diagnostic at its line and column as `mpmd check` prints them. The one
//! rule every front end (the CLI, the Python package, the Pallas front end
//! through it) loads modules by; reading files is theirs (`mpmd-frontend`).

use std::fmt::Write;

use crate::case::CaseSpec;
use crate::text::{self, SourceMap};
use crate::validate::{self, ValidModule, ValidateOptions};

/// A text that parsed and validated: its module, with every program as
/// validation expanded it, its case section, and where each item and
/// statement is in the text (for reports that show source lines).
#[derive(Clone, Debug)]
pub struct ValidFile {
    pub module: ValidModule,
    /// The `case { ... }` section, if the text has one.
    pub case: Option<CaseSpec>,
    pub source_map: SourceMap,
}

/// A text that does not parse or validate: its diagnostics, rendered (one
/// or more, each ending in a newline, then a count line when validation
/// found them).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

/// Decodes `bytes` (UTF-8; a byte that is not is a rendered error at its
/// line and column) and loads them as [`load_source`] does.
pub fn load_bytes(bytes: &[u8], file: &str) -> Result<ValidFile, Rejected> {
    let source = text::decode(bytes).map_err(|e| Rejected(e.render(file)))?;
    load_source(source, file)
}

/// Parses and validates `source`, named `file` in diagnostics: the module,
/// then its case section against it.
pub fn load_source(source: &str, file: &str) -> Result<ValidFile, Rejected> {
    let parsed = text::parse_file(source).map_err(|e| {
        let mut rendered = e.render(file);
        if !rendered.ends_with('\n') {
            rendered.push('\n');
        }
        Rejected(rendered)
    })?;
    let validated = validate::validate(&parsed.module, &ValidateOptions::default());
    let mut diagnostics = validated.as_ref().err().cloned().unwrap_or_default();
    if let Some(case) = &parsed.case {
        if let Err(found) = validate::validate_case(&parsed.module, case) {
            diagnostics.extend(found);
        }
    }
    if let (Ok(module), true) = (validated, diagnostics.is_empty()) {
        return Ok(ValidFile {
            module,
            case: parsed.case,
            source_map: parsed.source_map,
        });
    }
    let renderer = validate::Renderer::new(file, Some((source, &parsed.source_map)));
    let mut rendered: String = diagnostics
        .iter()
        .map(|d| renderer.render(d))
        .collect::<Vec<_>>()
        .join("\n");
    if !rendered.ends_with('\n') {
        rendered.push('\n');
    }
    let _ = writeln!(
        rendered,
        "error: `{file}` has {} error(s)",
        diagnostics.len()
    );
    Err(Rejected(rendered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_text_is_rendered_at_its_place_with_a_count() {
        let src =
            "mesh m { grid [b = 1]; threads t = 1; }\nkernel k(x: gmem<f32[4]>) { x[0] = y; }\n";
        let Rejected(rendered) = load_source(src, "f.mpmd").unwrap_err();
        assert!(rendered.contains("--> f.mpmd:2:"), "{rendered}");
        assert!(
            rendered.ends_with("error: `f.mpmd` has 1 error(s)\n"),
            "{rendered}"
        );
        let Rejected(rendered) = load_bytes(b"mesh m {\n\xff", "g.mpmd").unwrap_err();
        assert!(rendered.contains("g.mpmd:2:1"), "{rendered}");
        assert!(load_source("", "empty.mpmd").is_ok());
    }
}
