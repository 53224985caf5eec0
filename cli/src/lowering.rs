//! `mpmd lower`: a lowered map as a plan, CUDA C or WGSL.

use std::fmt::Write;
use std::path::Path;

use mpmd_core::plan::lower;
use mpmd_frontend::emit;

use crate::output::{create_dir, file_name};
use crate::{files, load_module, CliError, Target};

pub(crate) fn lower_command(
    target: Target,
    file: &Path,
    map: Option<&str>,
    out_dir: Option<&Path>,
) -> Result<String, CliError> {
    let module = load_module(file)?;
    let maps: Vec<&str> = match map {
        Some(name) => vec![name],
        None => module.maps.iter().map(|m| m.name.as_str()).collect(),
    };
    if maps.is_empty() {
        return Err(CliError::Usage(format!(
            "`{}` declares no map",
            file.display()
        )));
    }
    // Each CUDA or WGSL text is a whole translation unit (prelude included):
    // two in one stream do not compile, so several maps go to several files.
    if maps.len() > 1 && target != Target::Plan && out_dir.is_none() {
        return Err(CliError::Usage(format!(
            "`{}` has {} maps ({}), and the {} of each is a file of its own: \
             pass --map NAME to print one map's source, or --out-dir DIR to write one file per map",
            file.display(),
            maps.len(),
            maps.iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", "),
            target.language()
        )));
    }
    let mut texts = Vec::new();
    for name in &maps {
        texts.push(emit(target, &lower(&module, name)?)?);
    }
    let Some(dir) = out_dir else {
        return Ok(texts.join("\n"));
    };
    create_dir(dir)?;
    let mut written = String::new();
    for (name, text) in maps.iter().zip(texts) {
        let path = dir.join(file_name(name, target.extension()));
        files::write_replacing(&path, text.as_bytes()).map_err(|source| CliError::WriteFile {
            path: path.display().to_string(),
            source,
        })?;
        let _ = writeln!(written, "map `{name}` -> {}", path.display());
    }
    Ok(written)
}
