"""Shared helpers: paths into the checkout, and the `mpmd` CLI the tests
compare messages with (`$MPMD_CLI`, which `cargo xtask test` sets, else
`target/debug/mpmd`). A test that needs the CLI fails when it is missing:
it never passes without comparing."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CASES = ROOT / "conformance" / "cases"
PY_EXAMPLES = ROOT / "python" / "examples"


def cli_path() -> Path:
    path = Path(os.environ.get("MPMD_CLI", ROOT / "target" / "debug" / "mpmd"))
    if not path.is_file():
        pytest.fail(
            f"the `mpmd` CLI is not at {path}: build it with `cargo build -p mpmd-cli` "
            "or set MPMD_CLI (cargo xtask test does both)"
        )
    return path


def run_cli(*args, cwd=ROOT):
    """The CLI's (exit code, stdout, stderr) for `args`, run from the checkout."""
    done = subprocess.run(
        [str(cli_path()), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout, done.stderr
