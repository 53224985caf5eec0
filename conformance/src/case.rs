//! Loading the corpus: one `.mpmd` file per case, named by its file stem.

use std::path::{Path, PathBuf};

use mpmd_core::case::{CaseSpec, Expectation};
use mpmd_core::ir::Module;
use mpmd_core::validate::{validate, validate_case, Diagnostic, ValidModule, ValidateOptions};

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

/// What a case file holds: the module under test and its `case` section
/// (how to generate inputs, compare outputs and what to expect). The fuzzer
/// makes these too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaseFile {
    pub module: Module,
    pub spec: CaseSpec,
}

impl CaseFile {
    /// The file's canonical text: the module, then its case section.
    pub fn print(&self) -> String {
        mpmd_core::text::print_file(&self.module, Some(&self.spec))
    }

    /// Validates the module, then the case section against it: the
    /// diagnostics `mpmd check` reports for the file, in its order; for a
    /// valid file, the valid module (what the interpreter and the lowering
    /// take).
    pub fn validate(&self) -> Result<ValidModule, Vec<Diagnostic>> {
        let validated = validate(&self.module, &ValidateOptions::default());
        let mut diagnostics = validated.as_ref().err().cloned().unwrap_or_default();
        if let Err(found) = validate_case(&self.module, &self.spec) {
            diagnostics.extend(found);
        }
        match validated {
            Ok(module) if diagnostics.is_empty() => Ok(module),
            _ => Err(diagnostics),
        }
    }
}

/// One case file, parsed or not (a file that does not parse is a failing case).
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub path: PathBuf,
    pub source: String,
    pub parsed: Result<CaseFile, String>,
}

impl Case {
    /// Parses `source` as the case `name`.
    pub fn from_source(name: &str, path: PathBuf, source: String) -> Case {
        let parsed = match mpmd_core::text::parse_file(&source) {
            Ok(file) => match file.case {
                Some(spec) => Ok(CaseFile {
                    module: file.module,
                    spec,
                }),
                None => Err("the file has no `case { ... }` section".to_string()),
            },
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
        match self.parsed.as_ref().map(|file| &file.spec.expect) {
            Ok(Expectation::Reject(_)) => CaseKind::Reject,
            _ => CaseKind::Run,
        }
    }
}

/// The variable that names the corpus folder.
pub const CORPUS_DIR_VAR: &str = "MPMD_CORPUS_DIR";

/// The corpus, found at run time, never where the binary was built:
/// `$MPMD_CORPUS_DIR`, else `conformance/cases` in the working directory or
/// the nearest folder above it that has one (a checkout's root or any folder
/// inside it). `--cases DIR` overrides both.
pub fn default_corpus_dir() -> Result<PathBuf, String> {
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the working directory: {e}"))?;
    corpus_dir_from(std::env::var_os(CORPUS_DIR_VAR).map(PathBuf::from), &cwd)
}

/// [`default_corpus_dir`] for a given variable value and working directory.
pub fn corpus_dir_from(var: Option<PathBuf>, cwd: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = var.filter(|d| !d.as_os_str().is_empty()) {
        return Ok(if dir.is_absolute() {
            dir
        } else {
            cwd.join(dir)
        });
    }
    cwd.ancestors()
        .map(|d| d.join("conformance").join("cases"))
        .find(|d| d.is_dir())
        .ok_or_else(|| {
            format!(
                "no corpus folder: none of {} and the folders above it has `conformance/cases`; \
                 run from an mpmd checkout, pass `--cases DIR` or set {CORPUS_DIR_VAR}",
                cwd.display()
            )
        })
}

/// Where the fuzzer writes reduced disagreements, under the corpus directory;
/// they run as ordinary cases named `found/<file>`.
pub const FOUND_SUBDIR: &str = "found";

/// Loads every `*.mpmd` file of `dir` and of `dir/found`, sorted by name.
pub fn load_dir(dir: &Path) -> std::io::Result<Vec<Case>> {
    let mpmd_files = |d: &Path| -> std::io::Result<Vec<PathBuf>> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(d)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "mpmd"))
            .collect();
        paths.sort();
        Ok(paths)
    };
    let found = dir.join(FOUND_SUBDIR);
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    for (prefix, d) in [("", dir), ("found/", found.as_path())] {
        if prefix.is_empty() || d.is_dir() {
            for p in mpmd_files(d)? {
                let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
                named.push((format!("{prefix}{}", stem.unwrap_or_default()), p));
            }
        }
    }
    named
        .into_iter()
        .map(|(name, p)| {
            let source = std::fs::read_to_string(&p)?;
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

#[cfg(test)]
mod load_tests {
    use super::*;

    #[test]
    fn reduced_fuzz_findings_load_as_ordinary_cases() {
        let dir = tempfile::tempdir().unwrap();
        let found = dir.path().join(FOUND_SUBDIR);
        std::fs::create_dir(&found).unwrap();
        std::fs::write(dir.path().join("b.mpmd"), "").unwrap();
        std::fs::write(dir.path().join("a.mpmd"), "").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        std::fs::write(found.join("seed_7.mpmd"), "").unwrap();
        let names: Vec<String> = load_dir(dir.path())
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["a", "b", "found/seed_7"]);
    }
}
