//! The source lines a run's error points at, for a front end that has the
//! file's text.

use mpmd_core::ir::{Module, Stmt};
use mpmd_core::validate::Renderer;
use mpmd_core::RunError;

/// The statements `error` points at (a race's two accesses) as they are
/// written in the file, each as a `note:` with its line (for an access
/// inside a helper, the line that calls it, naming the helper): empty, or
/// lines that each start with a newline, to follow the error's message.
/// `renderer` renders `module`'s file (its text and source map).
pub fn source_notes(error: &RunError, module: &Module, renderer: &Renderer) -> String {
    error
        .statements()
        .into_iter()
        .filter_map(|(label, path)| {
            let written = mpmd_core::validate::source_path(module, path)?;
            let label = match module.stmt_at(&written) {
                Some(Stmt::Call { function, .. }) => {
                    format!("{label}, in helper `{function}`, called here")
                }
                _ => label,
            };
            Some(format!(
                "\n{}",
                renderer.render_note(&label, &written).trim_end()
            ))
        })
        .collect()
}
