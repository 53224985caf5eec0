//! The Python package's tests: a virtual environment under the target
//! directory with maturin, pytest, numpy, ml_dtypes, jax (CPU) and absl-py from PyPI,
//! the package built into it (`maturin develop`, debug), then pytest over
//! `python/tests`. A missing Python or pip is a failure that names what to
//! install: a test that could not run never counts as a pass.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::tools::{self, Setup};

/// What the environment gets from PyPI; a change here reinstalls.
pub const REQUIREMENTS: [&str; 6] = [
    "maturin>=1.5,<2",
    "pytest>=7",
    "numpy>=1.22",
    "ml_dtypes>=0.2",
    // mpmd.pallas's supported range (python/mpmd/pallas/_compat.py).
    "jax>=0.10.0,<0.12",
    // `import jax.experimental.pallas.mosaic_gpu` needs it.
    "absl-py",
];

/// Sets up the environment, builds the package and the CLI the tests
/// compare with, and runs pytest (`args` go to pytest). Returns pytest's
/// exit code, or failure when something could not be set up.
pub fn run_pytest(root: &Path, setup: &Setup, args: &[String]) -> ExitCode {
    match prepare(root, setup, Profile::Debug) {
        Ok(venv_python) => {
            let mut pytest = Command::new(&venv_python);
            setup.apply_env(&mut pytest);
            pytest
                .current_dir(root)
                .env(
                    "MPMD_CLI",
                    tools::target_dir(root).join("debug").join("mpmd"),
                )
                .args([
                    "-m",
                    "pytest",
                    "python/tests",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ])
                .args(args);
            eprintln!("xtask: running {}", crate::describe(&pytest));
            match pytest.status() {
                Ok(s) if s.success() => ExitCode::SUCCESS,
                Ok(s) => {
                    // Exit 5 is "no tests collected": never a pass.
                    eprintln!("xtask: error: pytest failed ({s})");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("xtask: error: cannot run pytest: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(why) => {
            eprintln!("xtask: error: the Python tests cannot run: {why}");
            ExitCode::FAILURE
        }
    }
}

/// How [`prepare`] builds the package and the CLI.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Unoptimised, like the tests (`cargo xtask pytest`).
    Debug,
    /// Optimised (`maturin develop --release`, `cargo build --release`): the
    /// benchmarks (`cargo xtask bench report`).
    Release,
}

/// The environment's python, with the requirements and the package installed.
pub fn prepare(root: &Path, setup: &Setup, profile: Profile) -> Result<PathBuf, String> {
    let venv = tools::target_dir(root).join("mpmd-tools").join("pyenv");
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        let system = ["python3", "python"]
            .into_iter()
            .find(|p| tools::on_path(p))
            .ok_or("no `python3` on PATH (install Python 3.9 or later, e.g. `apt-get install python3 python3-venv`)")?;
        let mut make = Command::new(system);
        make.args(["-m", "venv"]).arg(&venv);
        if !tools::run_visible(&mut make) || !python.is_file() {
            return Err(format!(
                "`{system} -m venv {}` failed: install the venv module (e.g. `apt-get install python3-venv`)",
                venv.display()
            ));
        }
    }
    let pip_works = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pip_works {
        return Err(format!(
            "`{} -m pip` does not work: install pip (e.g. `apt-get install python3-pip python3-venv`) \
             and remove {} so that it is made again",
            python.display(),
            venv.display()
        ));
    }
    // Install once per requirement list, not on every run.
    let stamp = venv.join("mpmd-requirements.txt");
    let wanted = REQUIREMENTS.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
        ])
        .args(REQUIREMENTS);
        if !tools::run_visible(&mut pip) {
            return Err(format!(
                "pip could not install {} (no network access to PyPI?)",
                REQUIREMENTS.join(" ")
            ));
        }
        std::fs::write(&stamp, &wanted)
            .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    }
    // The package, into the environment.
    let mut develop = Command::new(venv.join("bin").join("maturin"));
    setup.apply_env(&mut develop);
    develop
        .current_dir(root.join("python"))
        .env("VIRTUAL_ENV", &venv)
        .args(["develop", "--quiet"]);
    if profile == Profile::Release {
        develop.arg("--release");
    }
    if !tools::run_visible(&mut develop) {
        return Err("`maturin develop` could not build the package (see above)".into());
    }
    // The CLI whose messages the tests compare with.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cli = Command::new(cargo);
    cli.current_dir(root)
        .args(["build", "--quiet", "-p", "mpmd-cli", "--bin", "mpmd"]);
    if profile == Profile::Release {
        cli.arg("--release");
    }
    if !tools::run_visible(&mut cli) {
        return Err("`cargo build -p mpmd-cli` failed (see above)".into());
    }
    Ok(python)
}
