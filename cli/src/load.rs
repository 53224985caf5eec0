//! Reading, parsing and validating `.mpmd` files; `mpmd check`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use mpmd_core::host::{self, UserNumber};
use mpmd_core::ir::{Literal, Module};
use mpmd_core::text::{self, ConstOverrideError, SourceFile};
use mpmd_core::validate::{self, ValidateOptions};

use crate::{files, CliError};

/// The largest `.mpmd` file read (a bound, so that a device or a huge file
/// given by mistake is refused instead of filling memory).
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// The file's text; bytes that are not UTF-8 are a rendered error at their
/// line and column.
fn read_source(path: &Path) -> Result<String, CliError> {
    let bytes =
        files::read_regular(path, MAX_SOURCE_BYTES).map_err(|source| CliError::ReadFile {
            path: path.display().to_string(),
            source,
        })?;
    match text::decode(&bytes) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => Err(CliError::Rejected(e.render(&path.display().to_string()))),
    }
}

/// Parses and validates a file, its case section too; errors come back
/// rendered.
pub fn load_file(path: &Path) -> Result<SourceFile, CliError> {
    let source = read_source(path)?;
    load_source(&source, &path.display().to_string())
}

/// The module of a file, as [`load_file`] checks it (a case section is
/// checked, then left out).
pub fn load_module(path: &Path) -> Result<Module, CliError> {
    load_file(path).map(|file| file.module)
}

/// Parses and validates `source`, named `file` in diagnostics: the module,
/// then its case section against it. Errors come back rendered as `mpmd
/// check` prints them (the Python package's `Module.from_text` too).
pub fn load_source(source: &str, file: &str) -> Result<SourceFile, CliError> {
    load_source_with(source, file, &[])
}

/// [`load_file`] with module constants overridden ([`load_source_with`]).
pub fn load_file_with(
    path: &Path,
    overrides: &[(&str, UserNumber)],
) -> Result<SourceFile, CliError> {
    let source = read_source(path)?;
    load_source_with(&source, &path.display().to_string(), overrides)
}

/// [`load_source`] with module constants overridden before they are
/// resolved (`text::parse_file_with`; the Python package's `consts=`). Each
/// value becomes a literal of its constant's declared type by the rule
/// scalar arguments follow (`host::scalar_value`); a value that type cannot
/// hold, or an override that names no constant, is [`CliError::Usage`] with
/// the library's message. The text's syntax errors come first, its
/// validation (of the module with the new values) after.
pub fn load_source_with(
    source: &str,
    file: &str,
    overrides: &[(&str, UserNumber)],
) -> Result<SourceFile, CliError> {
    let literals = if overrides.is_empty() {
        Vec::new()
    } else {
        // The declared types, from the text as written; a text that does
        // not parse is reported by the parse below.
        let declared = text::parse_file(source)
            .map(|file| file.module.consts)
            .unwrap_or_default();
        overrides
            .iter()
            .map(
                |&(name, value)| match declared.iter().find(|c| c.name == name) {
                    Some(constant) => host::scalar_value(constant.value.ty(), value)
                        .map(|literal| (name, literal))
                        .map_err(|e| CliError::Usage(format!("the override `{name}`: {e}"))),
                    // The parse below names the constants there are.
                    None => Ok((name, Literal::Bool(false))),
                },
            )
            .collect::<Result<Vec<_>, _>>()?
    };
    let parsed = text::parse_file_with(source, &literals).map_err(|e| match e {
        ConstOverrideError::Parse(e) => {
            let mut rendered = e.render(file);
            if !rendered.ends_with('\n') {
                rendered.push('\n');
            }
            CliError::Rejected(rendered)
        }
        other => CliError::Usage(other.to_string()),
    })?;
    let mut diagnostics = validate::validate(&parsed.module, &ValidateOptions::default())
        .err()
        .unwrap_or_default();
    if let Some(case) = &parsed.case {
        if let Err(found) = validate::validate_case(&parsed.module, case) {
            diagnostics.extend(found);
        }
    }
    if diagnostics.is_empty() {
        return Ok(parsed);
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
    Err(CliError::Rejected(rendered))
}

pub(crate) fn check(files: &[PathBuf]) -> Result<String, CliError> {
    let mut stdout = String::new();
    let mut rejected = String::new();
    let mut failures = 0;
    for file in files {
        match load_file(file) {
            Ok(_) => {
                let _ = writeln!(stdout, "{}: ok", file.display());
            }
            Err(CliError::Rejected(rendered)) => {
                failures += 1;
                rejected.push_str(&rendered);
            }
            Err(other) => {
                failures += 1;
                let _ = writeln!(rejected, "error: {other}");
            }
        }
    }
    if failures == 0 {
        return Ok(stdout);
    }
    print!("{stdout}");
    let _ = writeln!(
        rejected,
        "error: {failures} of {} file(s) rejected",
        files.len()
    );
    Err(CliError::Rejected(rejected))
}
