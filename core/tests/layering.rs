//! ARCHITECTURE.md's "Facts are computed once", checked over the
//! workspace's Rust sources: a program's kernel is expanded
//! (`expand::program_kernel`) and its facts computed (`ProgramFacts::of`)
//! only where validation builds its `ValidModule`; everything after
//! validation (the lowering, the interpreter, conformance's analysis, the
//! backends) takes both from there. The expansion sits below validation and
//! the lowering, and validation does not depend on the lowering.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust source of the workspace's crates (sources, tests, benches),
/// as `(path relative to the workspace, text)`.
fn sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for krate in [
        "core",
        "backend-cuda",
        "backend-wgpu",
        "conformance",
        "cli",
        "python",
        "xtask",
        "test-support",
    ] {
        for sub in ["src", "tests", "benches", ""] {
            let dir = workspace().join(krate).join(sub);
            if sub.is_empty() {
                // Loose files such as test-support/*.rs.
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
                        files.push(path);
                    }
                }
            } else if dir.is_dir() {
                rust_files(&dir, &mut files);
            }
        }
    }
    files.sort();
    files.dedup();
    assert!(files.len() > 100, "found only {} sources", files.len());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let relative = path
                .strip_prefix(workspace())
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            (relative, text)
        })
        .collect()
}

/// The lines of `text` that are code: comments (doc comments included)
/// name things without depending on them.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(i, line)| (i + 1, line))
}

/// `file:line` of every code line of the workspace that contains `needle`,
/// outside the files in `allowed`.
fn uses_outside(needle: &str, allowed: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in sources() {
        if allowed.contains(&path.as_str()) {
            continue;
        }
        for (line, code) in code_lines(&text) {
            if code.contains(needle) {
                found.push(format!("{path}:{line}: {}", code.trim()));
            }
        }
    }
    found
}

/// Where validation builds its `ValidModule`: the one caller of the
/// expansion and of the facts' computation.
const VALIDATION_RESULT: &str = "core/src/validate/facts.rs";
const EXPANSION: &str = "core/src/expand.rs";
/// This file, which names what it looks for.
const LINT: &str = "core/tests/layering.rs";

#[test]
fn kernels_are_expanded_only_by_validation() {
    assert_eq!(
        uses_outside("program_kernel(", &[EXPANSION, VALIDATION_RESULT, LINT]),
        Vec::<String>::new(),
        "take the expanded kernel from validation's `ValidModule` (`ValidProgram::kernel`)"
    );
    let calls = |path: &str| {
        let text = std::fs::read_to_string(workspace().join(path)).unwrap();
        code_lines(&text)
            .filter(|(_, l)| l.contains("program_kernel("))
            .count()
    };
    assert_eq!(calls(VALIDATION_RESULT), 1, "one expansion per program");
}

#[test]
fn facts_are_computed_only_by_validation() {
    assert_eq!(
        uses_outside("ProgramFacts::of(", &[VALIDATION_RESULT, LINT]),
        Vec::<String>::new(),
        "take the facts from validation's `ValidModule` (`ValidProgram::facts`)"
    );
}

#[test]
fn the_expansion_sits_below_validation_and_the_lowering() {
    let text = std::fs::read_to_string(workspace().join(EXPANSION)).unwrap();
    for layer in ["crate::validate", "crate::plan", "crate::interp", "super::"] {
        let found: Vec<usize> = code_lines(&text)
            .filter(|(_, l)| l.contains(layer))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(found, Vec::<usize>::new(), "{EXPANSION} uses `{layer}`");
    }
    // Validation does not reach up into the lowering.
    let mut validation = Vec::new();
    rust_files(&workspace().join("core/src/validate"), &mut validation);
    assert!(validation.len() > 5);
    for path in validation {
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, code) in code_lines(&text) {
            assert!(
                !code.contains("crate::plan"),
                "{}:{line} uses the lowering: {}",
                path.display(),
                code.trim()
            );
        }
    }
}
