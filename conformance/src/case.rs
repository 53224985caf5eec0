//! Loading the corpus: one `.mpmd` file per case, named by its file stem.

use std::path::{Path, PathBuf};

use mpmd_core::ir::{Expectation, Module};

/// Whether a case runs (and compares outputs or an error class) or must be rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseKind {
    Run,
    Reject,
}

impl CaseKind {
    pub fn name(self) -> &'static str {
        match self {
            CaseKind::Run => "run",
            CaseKind::Reject => "reject",
        }
    }
}

/// One case file, parsed or not (a file that does not parse is a failing case).
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub path: PathBuf,
    pub source: String,
    pub parsed: Result<Module, String>,
}

impl Case {
    /// Parses `source` as the case `name`.
    pub fn from_source(name: &str, path: PathBuf, source: String) -> Case {
        let parsed = match mpmd_core::text::parse(&source) {
            Ok((module, _)) if module.case.is_none() => {
                Err("the file has no `case { ... }` section".to_string())
            }
            Ok((module, _)) => Ok(module),
            Err(e) => Err(format!(
                "{}:{}:{}: {}\n{}",
                path.display(),
                e.line,
                e.column,
                e.message,
                e.excerpt
            )),
        };
        Case {
            name: name.to_string(),
            path,
            source,
            parsed,
        }
    }

    pub fn kind(&self) -> CaseKind {
        match self
            .parsed
            .as_ref()
            .ok()
            .and_then(|m| m.case.as_ref())
            .map(|c| &c.expect)
        {
            Some(Expectation::Reject(_)) => CaseKind::Reject,
            _ => CaseKind::Run,
        }
    }
}

/// The corpus shipped with this crate.
pub fn default_corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases")
}

/// Loads every `*.mpmd` file of `dir`, sorted by name.
pub fn load_dir(dir: &Path) -> std::io::Result<Vec<Case>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "mpmd"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let source = std::fs::read_to_string(&p)?;
            let name = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok(Case::from_source(&name, p, source))
        })
        .collect()
}

/// `--filter`: a substring of the case name, or a glob with `*` (whole name).
pub fn matches_filter(name: &str, pattern: &str) -> bool {
    if !pattern.contains('*') {
        return name.contains(pattern);
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_substring_and_glob() {
        assert!(matches_filter("sem_fan_in", "fan"));
        assert!(!matches_filter("sem_fan_in", "fanout"));
        assert!(matches_filter("sem_fan_in", "sem_*"));
        assert!(matches_filter("sem_fan_in", "*in"));
        assert!(matches_filter("sem_fan_in", "s*f*n"));
        assert!(!matches_filter("sem_fan_in", "*out"));
        assert!(!matches_filter("ab", "ab*b"));
        assert!(matches_filter("anything", "*"));
    }
}
