//! Reading, parsing and validating `.mpmd` files.

use std::path::Path;

use mpmd_core::host::UserNumber;
use mpmd_core::load::ValidFile;
use mpmd_core::validate::ValidModule;

use crate::{files, FrontendError};

/// The largest `.mpmd` file read (a bound, so that a device or a huge file
/// given by mistake is refused instead of filling memory).
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// Parses and validates a file, its case section too; errors come back
/// rendered (bytes that are not UTF-8 at their line and column).
pub fn load_file(path: &Path) -> Result<ValidFile, FrontendError> {
    load_file_with_text(path).map(|(_, file)| file)
}

/// [`load_file`], with the file's text: what a front end needs to show
/// the source lines a run's error points at (a race's accesses).
pub fn load_file_with_text(path: &Path) -> Result<(String, ValidFile), FrontendError> {
    load_file_with_text_and_consts(path, &[])
}

/// [`load_file`] with module constants overridden
/// (`mpmd_core::load::load_source_with`; the Python package's `consts=`).
pub fn load_file_with(
    path: &Path,
    overrides: &[(&str, UserNumber)],
) -> Result<ValidFile, FrontendError> {
    load_file_with_text_and_consts(path, overrides).map(|(_, file)| file)
}

/// [`load_file_with_text`] with module constants overridden.
pub fn load_file_with_text_and_consts(
    path: &Path,
    overrides: &[(&str, UserNumber)],
) -> Result<(String, ValidFile), FrontendError> {
    let bytes =
        files::read_regular(path, MAX_SOURCE_BYTES).map_err(|source| FrontendError::ReadFile {
            path: path.display().to_string(),
            source,
        })?;
    let file = mpmd_core::load::load_bytes_with(&bytes, &path.display().to_string(), overrides)?;
    // `load_bytes` decoded these bytes: this decoding succeeds.
    let text = mpmd_core::text::decode(&bytes).map_or_else(|_| String::new(), str::to_string);
    Ok((text, file))
}

/// The module of a file, as [`load_file`] checks it (a case section is
/// checked, then left out).
pub fn load_module(path: &Path) -> Result<ValidModule, FrontendError> {
    load_file(path).map(|file| file.module)
}

/// Parses and validates `source`, named `file` in diagnostics: the module,
/// then its case section against it. Errors come back rendered as `mpmd
/// check` prints them (the Python package's `Module.from_text` too).
pub fn load_source(source: &str, file: &str) -> Result<ValidFile, FrontendError> {
    Ok(mpmd_core::load::load_source(source, file)?)
}

/// [`load_source`] with module constants overridden
/// (`mpmd_core::load::load_source_with`).
pub fn load_source_with(
    source: &str,
    file: &str,
    overrides: &[(&str, UserNumber)],
) -> Result<ValidFile, FrontendError> {
    Ok(mpmd_core::load::load_source_with(source, file, overrides)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_load_with_their_diagnostics_rendered_or_name_what_went_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.mpmd");
        std::fs::write(&good, "mesh m { grid [b = 1]; threads t = 1; }\n").unwrap();
        assert_eq!(load_module(&good).unwrap().meshes.len(), 1);

        let bad = dir.path().join("bad.mpmd");
        std::fs::write(&bad, b"mesh m {\n  \xff\n").unwrap();
        let FrontendError::Rejected(rendered) = load_file(&bad).unwrap_err() else {
            panic!("not rendered");
        };
        assert!(
            rendered.contains(&format!("{}:2:3", bad.display())),
            "{rendered}"
        );

        let missing = dir.path().join("missing.mpmd");
        let error = load_file(&missing).unwrap_err();
        assert!(matches!(error, FrontendError::ReadFile { .. }));
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot read `{}`: ", missing.display())),
            "{error}"
        );
        // A folder is not a regular file: refused, not read.
        assert!(matches!(
            load_file(dir.path()).unwrap_err(),
            FrontendError::ReadFile { .. }
        ));
    }
}
