//! What the CLI's test files share: running the real `mpmd` binary and
//! finding the repository's examples.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn mpmd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mpmd"))
        .args(args)
        .output()
        .expect("the mpmd binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

pub fn example(name: &str) -> PathBuf {
    examples_dir().join(format!("{name}.mpmd"))
}
