//! Paths come from the working directory, a flag or the environment, never
//! from where the binary was built: the runner reads the corpus of the
//! checkout it is run in (or `$MPMD_CORPUS_DIR`), and says what to do when
//! there is none.

use std::path::Path;
use std::process::Command;

use mpmd_conformance::case::corpus_dir_from;

fn corpus_with_one_case(root: &Path, case: &str) {
    let cases = root.join("conformance").join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/i32_arith_edges.mpmd");
    std::fs::copy(fixture, cases.join(format!("{case}.mpmd"))).unwrap();
}

fn run_in(dir: &Path, corpus_var: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mpmd-conformance"));
    cmd.args(["--backends", "interp", "--jobs", "1"])
        .current_dir(dir)
        .env_remove("MPMD_CORPUS_DIR");
    if let Some(var) = corpus_var {
        cmd.env("MPMD_CORPUS_DIR", var);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_runner_reads_the_corpus_of_its_working_directory() {
    let checkout = tempfile::tempdir().unwrap();
    corpus_with_one_case(checkout.path(), "only_here");
    // From a folder inside the checkout, as from its root.
    let inside = checkout.path().join("conformance");
    let (code, stdout, stderr) = run_in(&inside, None);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("mpmd conformance: 1 cases, seed 1, backends interp"),
        "{stdout}"
    );
    assert!(stdout.contains("\nonly_here "), "{stdout}");

    // The variable names another corpus, relative to the working directory.
    let other = tempfile::tempdir().unwrap();
    corpus_with_one_case(other.path(), "from_the_variable");
    let (code, stdout, _) = run_in(&inside, Some(&other.path().join("conformance/cases")));
    assert_eq!(code, 0);
    assert!(stdout.contains("\nfrom_the_variable "), "{stdout}");

    // Outside any checkout: an error that says what to do.
    let nowhere = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run_in(nowhere.path(), None);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stderr.contains("no corpus folder")
            && stderr.contains("--cases DIR")
            && stderr.contains("MPMD_CORPUS_DIR"),
        "{stderr}"
    );
}

#[test]
fn a_relative_corpus_variable_is_read_from_the_working_directory() {
    assert_eq!(
        corpus_dir_from(Some("my/cases".into()), Path::new("/work")).unwrap(),
        Path::new("/work/my/cases")
    );
    assert_eq!(
        corpus_dir_from(Some("/abs".into()), Path::new("/work")).unwrap(),
        Path::new("/abs")
    );
}

#[test]
fn several_filters_select_the_cases_that_match_any() {
    let checkout = tempfile::tempdir().unwrap();
    for case in ["alpha_one", "beta_two", "gamma_three"] {
        corpus_with_one_case(checkout.path(), case);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_mpmd-conformance"))
        .args(["--backends", "interp", "--jobs", "1"])
        .args(["--filter", "alpha", "--filter", "*three"])
        .current_dir(checkout.path())
        .env_remove("MPMD_CORPUS_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with("mpmd conformance: 2 cases, seed 1, backends interp"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nalpha_one ") && stdout.contains("\ngamma_three "),
        "{stdout}"
    );
    assert!(!stdout.contains("beta_two"), "{stdout}");
}
