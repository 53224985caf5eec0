//! `mpmd check`: each file loaded as every front end loads it
//! (`mpmd_frontend::load_file`).

use std::fmt::Write;
use std::path::PathBuf;

use mpmd_frontend::FrontendError;

use crate::{load_file, CliError};

pub(crate) fn check(files: &[PathBuf]) -> Result<String, CliError> {
    let mut stdout = String::new();
    let mut rejected = String::new();
    let mut failures = 0;
    for file in files {
        match load_file(file) {
            Ok(_) => {
                let _ = writeln!(stdout, "{}: ok", file.display());
            }
            Err(FrontendError::Rejected(rendered)) => {
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
