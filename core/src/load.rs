//! Loading a `.mpmd` text with its diagnostics rendered: parse the module
//! and its case section, validate both, and on failure render every
//! diagnostic at its line and column as `mpmd check` prints them. The one
//! rule every front end (the CLI, the Python package, the Pallas front end
//! through it) loads modules by; reading files is theirs (`mpmd-frontend`).

use std::fmt::Write;

use crate::case::CaseSpec;
use crate::host::{self, UserNumber};
use crate::ir::Literal;
use crate::text::{self, ConstOverrideError, SourceFile, SourceMap};
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
    let parsed = text::parse_file(source).map_err(|e| rendered_parse_error(&e, file))?;
    validated(parsed, source, file)
}

/// Why [`load_source_with`] refused a text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// Its diagnostics, as [`load_source`] renders them.
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// A constant override refused: one that names no constant, or a value
    /// its constant's type cannot hold (the library's message).
    #[error("{0}")]
    Override(String),
}

/// [`load_bytes`] with constants overridden as [`load_source_with`] does.
pub fn load_bytes_with(
    bytes: &[u8],
    file: &str,
    overrides: &[(&str, UserNumber)],
) -> Result<ValidFile, LoadError> {
    let source = text::decode(bytes).map_err(|e| Rejected(e.render(file)))?;
    load_source_with(source, file, overrides)
}

/// [`load_source`] with module constants overridden before they are
/// resolved into types, axis sizes and loop bounds
/// ([`text::parse_file_with`]). Each value becomes a literal of its
/// constant's declared type by the rule scalar arguments follow
/// ([`host::scalar_value`]: an integer for an integer or float constant, a
/// float for a float one, a bool for a bool). The text's syntax errors come
/// first, then the overrides, then the validation of the module they make.
pub fn load_source_with(
    source: &str,
    file: &str,
    overrides: &[(&str, UserNumber)],
) -> Result<ValidFile, LoadError> {
    let parsed = text::parse_file(source).map_err(|e| rendered_parse_error(&e, file))?;
    if overrides.is_empty() {
        return Ok(validated(parsed, source, file)?);
    }
    let literals = overrides
        .iter()
        .map(
            |&(name, value)| match parsed.module.consts.iter().find(|c| c.name == name) {
                Some(constant) => host::scalar_value(constant.value.ty(), value)
                    .map(|literal| (name, literal))
                    .map_err(|e| LoadError::Override(format!("the override `{name}`: {e}"))),
                // parse_file_with refuses it, naming the constants there are.
                None => Ok((name, Literal::Bool(false))),
            },
        )
        .collect::<Result<Vec<_>, _>>()?;
    let parsed = text::parse_file_with(source, &literals).map_err(|e| match e {
        ConstOverrideError::Parse(e) => LoadError::Rejected(rendered_parse_error(&e, file)),
        other => LoadError::Override(other.to_string()),
    })?;
    Ok(validated(parsed, source, file)?)
}

/// A parse error rendered as `mpmd check` prints it.
fn rendered_parse_error(error: &text::ParseError, file: &str) -> Rejected {
    let mut rendered = error.render(file);
    if !rendered.ends_with('\n') {
        rendered.push('\n');
    }
    Rejected(rendered)
}

/// `parsed` (the text of `source`) validated, its case section too; else
/// its diagnostics rendered.
fn validated(parsed: SourceFile, source: &str, file: &str) -> Result<ValidFile, Rejected> {
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

    const SIZED: &str = "const N: u32 = 4;\nconst S: f32 = 1.0;\n\
        mesh m { grid [b = 1]; threads t = N; }\n\
        kernel k(y: gmem<f32[N]>) { y[axis_index(t)] = S; }\n\
        map k { programs [m: k]; outputs [y: gmem<f32[N]>]; }\n";

    #[test]
    fn overrides_take_their_constant_s_type_and_are_refused_with_the_library_s_messages() {
        let file = load_source_with(
            SIZED,
            "s.mpmd",
            &[("N", UserNumber::Int(8)), ("S", UserNumber::Int(3))],
        )
        .unwrap();
        let consts: Vec<_> = file.module.consts.iter().map(|c| c.value).collect();
        assert_eq!(
            consts,
            [
                Literal::U32(8),
                Literal::F32(crate::ir::F32Bits::from_f32(3.0))
            ]
        );
        let refused = |overrides: &[(&str, UserNumber)]| {
            load_source_with(SIZED, "s.mpmd", overrides).unwrap_err()
        };
        assert_eq!(
            refused(&[("M", UserNumber::Int(1))]),
            LoadError::Override(
                "the override `M` matches no constant of the module (its constants: N, S)".into()
            )
        );
        assert_eq!(
            refused(&[("N", UserNumber::Int(-1))]),
            LoadError::Override(
                "the override `N`: `-1` is out of range for `u32` (it holds 0 to 4294967295)"
                    .into()
            )
        );
        // The module the overrides make is validated: no threads.
        assert!(matches!(
            refused(&[("N", UserNumber::Int(0))]),
            LoadError::Rejected(_)
        ));
        // Syntax errors first.
        assert!(matches!(
            load_source_with("mesh {", "x.mpmd", &[("M", UserNumber::Int(1))]).unwrap_err(),
            LoadError::Rejected(Rejected(r)) if r.contains("x.mpmd:1:")
        ));
    }
}
