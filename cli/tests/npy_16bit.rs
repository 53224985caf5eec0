//! f16 and bf16 `.npy` files written by numpy, ml_dtypes and JAX go in, and
//! what `mpmd run` writes is byte for byte what numpy writes for the results
//! numpy computes (`fixtures/make_fixtures.py` made every fixture).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs `example` on `backend` with `x` from `input`, into a fresh folder.
fn run(example: &str, backend: &str, input: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mpmd"))
        .arg("run")
        .arg(root().join("examples").join(format!("{example}.mpmd")))
        .args(["--backend", backend, "--checked", "--input"])
        .arg(format!("x={}", fixture(input).display()))
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn same_file(dir: &Path, output: &str, expected: &str) {
    let ours = std::fs::read(dir.join(output)).unwrap();
    let numpy = std::fs::read(fixture(expected)).unwrap();
    assert!(
        ours == numpy,
        "{output} differs from numpy's {expected} ({})",
        dir.display()
    );
}

/// The interpreter and the WGSL backend (lavapipe here; `cargo xtask test`
/// finds it, and a run without it fails, naming what is missing).
const BACKENDS: [&str; 2] = ["interp", "wgpu"];

#[test]
fn f16_from_numpy_gives_numpys_f16_results() {
    for backend in BACKENDS {
        let dir = run("f16_elementwise", backend, "f16_x_numpy.npy");
        same_file(dir.path(), "y.npy", "f16_y_numpy.npy");
        same_file(dir.path(), "y32.npy", "f16_y32_numpy.npy");
    }
}

#[test]
fn bf16_from_jax_gives_numpys_row_sums() {
    for backend in BACKENDS {
        let dir = run("bf16_rowsum", backend, "bf16_rows_jax.npy");
        same_file(dir.path(), "sum.npy", "bf16_rowsum_numpy.npy");
        same_file(dir.path(), "sum16.npy", "bf16_rowsum16_numpy.npy");
    }
}

#[test]
fn the_fixtures_differ_where_rounding_twice_differs() {
    // y rounds the product, then the sum; y32 only the sum: numpy's own
    // results differ in some elements, so the test above tells them apart.
    let y = mpmd_cli::npy::read(&fixture("f16_y_numpy.npy")).unwrap();
    let y32 = mpmd_cli::npy::read(&fixture("f16_y32_numpy.npy")).unwrap();
    let differing = y
        .to_bits()
        .iter()
        .zip(y32.to_bits())
        .filter(|(a, b)| **a != *b)
        .count();
    assert_eq!(differing, 9);
}
