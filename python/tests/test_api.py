"""The package's API beyond a call: constant overrides, per-call timing,
backend options, inputs of every layout read in place, Ctrl-C without a
thread a call, and the `mpmd` CLI from the package."""

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import mpmd
import mpmd.cli
from conftest import EXAMPLES, ROOT, run_cli

SIZED = """
const N: u32 = 64;
const SCALE: f32 = 2.0;
const ON: bool = true;
mesh m { grid [b = 1]; threads t = N; }
kernel k(y: gmem<f32[N]>) {
  let i: u32 = axis_index(t);
  if ON { y[i] = f32(i) * SCALE; }
}
map k { programs [m: k]; outputs [y: gmem<f32[N]>]; }
"""


def test_consts_override_sizes_and_values_before_they_are_resolved():
    module = mpmd.Module.from_text(SIZED, consts={"N": 8, "SCALE": 0.5})
    assert module.outputs("k") == [("y", "float32", [8])]
    y = mpmd.Interpreter().call(module, "k")["y"]
    np.testing.assert_array_equal(y, np.arange(8, dtype=np.float32) * 0.5)
    # An int is a float constant's value; numpy numbers are numbers.
    module = mpmd.Module.from_text(SIZED, consts={"N": np.uint32(4), "SCALE": 3, "ON": False})
    assert "const SCALE: f32 = 3.0;" in module.text()
    np.testing.assert_array_equal(mpmd.Interpreter().call(module, "k")["y"], np.zeros(4, np.float32))
    # Without consts, the file's own values.
    assert mpmd.Module.from_text(SIZED).outputs("k") == [("y", "float32", [64])]


def test_consts_of_a_file():
    path = EXAMPLES / "stream_k_gemm.mpmd"
    default = mpmd.Module.from_file(path)
    module = mpmd.Module.from_file(path, consts={"BM": 32})
    assert "const BM: u32 = 64u;" in default.text()
    assert "const BM: u32 = 32u;" in module.text()


@pytest.mark.parametrize(
    "consts, error, message",
    [
        ({"M": 3}, ValueError, "the override `M` matches no constant of the module (its constants: N, SCALE, ON)"),
        ({"N": 1.5}, ValueError, "the override `N`: `1.5` is not a `u32` value (`u32` takes an integer)"),
        ({"N": -1}, ValueError, "the override `N`: `-1` is out of range for `u32` (it holds 0 to 4294967295)"),
        ({"N": True}, ValueError, "the override `N`: `true` is not a `u32` value (`u32` takes an integer)"),
        ({"N": "8"}, TypeError, "consts: constant `N` takes a bool, an int or a float, not str"),
        ({1: 2}, TypeError, "consts: a constant's name is a str, not int"),
    ],
)
def test_consts_refuse_unknown_names_and_values_their_type_cannot_hold(consts, error, message):
    with pytest.raises(error) as caught:
        mpmd.Module.from_text(SIZED, consts=consts)
    assert str(caught.value) == message


def test_consts_validate_the_module_they_make_and_syntax_errors_come_first():
    with pytest.raises(mpmd.ValidationError):
        mpmd.Module.from_text(SIZED, consts={"N": 0})
    with pytest.raises(mpmd.ValidationError) as caught:
        mpmd.Module.from_text("mesh {", consts={"N": 1})
    assert str(caught.value).startswith("error")


ELEMENTWISE = EXAMPLES / "elementwise.mpmd"


def test_last_timing_is_the_cli_time_line_of_the_last_call():
    module = mpmd.Module.from_file(ELEMENTWISE)
    backend = mpmd.Interpreter()
    assert backend.last_timing is None
    backend.call(module, "axpb", x=np.zeros(256, np.float32), alpha=1.0)
    timing = backend.last_timing
    assert isinstance(timing, mpmd.Timing)
    assert (timing.kernel_ms, timing.backend) == (None, "interp")
    assert 0 < timing.wall_ms < 60_000
    assert re.fullmatch(r"time: wall \d+\.\d{3} ms; kernel time: not measured on interp", str(timing))
    # The CLI's line has the same form.
    code, stdout, _ = run_cli("run", ELEMENTWISE, "--time")
    assert code == 0
    assert re.search(r"^  time: wall \d+\.\d{3} ms; kernel time: not measured on interp$", stdout, re.M)
    # A call that fails leaves the last one's timing.
    with pytest.raises(ValueError):
        backend.call(module, "axpb", x=np.zeros(3, np.float32), alpha=1.0)
    assert backend.last_timing == timing


def test_timing_lines_of_a_timed_kernel_and_of_cuda_without_timing():
    assert str(mpmd.Timing(1.5, 0.0125, "cuda")) == "time: wall 1.500 ms, kernel 0.013 ms"
    assert (
        str(mpmd.Timing(2.0, None, "cuda"))
        == "time: wall 2.000 ms; kernel time: not measured on cuda (time_kernels=False)"
    )
    assert str(mpmd.Timing(2.0, None, "wgpu")) == "time: wall 2.000 ms; kernel time: not measured on wgpu"


SECONDS = r"give a number of seconds \(such as 60, 0.5, or 0 or None for no bound\)$"


def test_backend_options_are_checked_before_the_backend_is_made():
    with pytest.raises(ValueError, match=r"^timeout=-2: " + SECONDS):
        mpmd.Wgpu(timeout=-2)
    with pytest.raises(ValueError, match=r"^timeout=inf: " + SECONDS):
        mpmd.Wgpu(timeout=float("inf"))
    with pytest.raises(ValueError) as caught:
        mpmd.Cuda(wait_timeout=0)
    assert str(caught.value) == "wait_timeout=0: give a number of seconds of at least 0.001 (such as 10 or 0.5)"
    with pytest.raises(ValueError, match=r"^wait_timeout=-1: " + SECONDS):
        mpmd.Cuda(wait_timeout=-1.0)
    with pytest.raises(ValueError, match=r"^wait_timeout=NaN: " + SECONDS):
        mpmd.Cuda(wait_timeout=float("nan"))


def test_a_wgpu_call_past_its_timeout_names_the_python_parameter():
    module = mpmd.Module.from_file(ELEMENTWISE)
    with pytest.raises(mpmd.RunError) as caught:
        mpmd.Wgpu(timeout=1e-9).call(module, "axpb", x=np.zeros(256, np.float32), alpha=1.0)
    assert "Wgpu(timeout=SECONDS)" in str(caught.value)
    assert "WgpuOptions" not in str(caught.value)


GRID = """
mesh m { grid [b = 1]; threads t = 12; }
kernel k(x: gmem<f32[3, 4]>, y: gmem<f32[3, 4]>) {
  let i: u32 = axis_index(t);
  y[i / 4u, i % 4u] = x[i / 4u, i % 4u] * 2.0;
}
map k { programs [m: k]; inputs [x: gmem<f32[3, 4]>]; outputs [y: gmem<f32[3, 4]>]; }
"""


@pytest.mark.parametrize(
    "layout",
    ["c_order", "fortran_order", "strided", "big_endian", "read_only"],
)
def test_inputs_of_every_layout_give_the_same_outputs(layout):
    module = mpmd.Module.from_text(GRID)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    given = {
        "c_order": x,
        "fortran_order": np.asfortranarray(x),
        "strided": np.repeat(x, 2, axis=1)[:, ::2],
        "big_endian": x.astype(">f4"),
        "read_only": x.copy(),
    }[layout]
    if layout == "read_only":
        given.setflags(write=False)
    y = mpmd.Interpreter().call(module, "k", x=given)["y"]
    np.testing.assert_array_equal(y, x * 2)
    assert y.flags.writeable and y.flags.c_contiguous


def test_16_bit_and_bool_inputs_read_in_place():
    bf16 = ml_dtypes.bfloat16
    text = """
mesh m { grid [b = 1]; threads t = 5; }
kernel k(h: gmem<bf16[5]>, p: gmem<bool[5]>, y: gmem<bf16[5]>, q: gmem<bool[5]>) {
  let i: u32 = axis_index(t);
  y[i] = h[i];
  q[i] = !p[i];
}
map k { programs [m: k]; inputs [h: gmem<bf16[5]>, p: gmem<bool[5]>]; outputs [y: gmem<bf16[5]>, q: gmem<bool[5]>]; }
"""
    module = mpmd.Module.from_text(text)
    h = np.array([1.5, -2.0, 0.0, 3.25, -0.5], dtype=bf16)
    p = np.array([True, False, True, True, False])
    out = mpmd.Interpreter().call(module, "k", h=h[::1], p=p)
    assert out["y"].dtype == bf16 and out["q"].dtype == np.bool_
    np.testing.assert_array_equal(out["y"], h)
    np.testing.assert_array_equal(out["q"], ~p)


def test_a_call_on_another_thread_runs_and_ctrl_c_handling_is_python_s_after_a_call():
    module = mpmd.Module.from_file(ELEMENTWISE)
    backend = mpmd.Interpreter()
    results = []
    worker = threading.Thread(
        target=lambda: results.append(backend.call(module, "axpb", x=np.ones(256, np.float32), alpha=2.0)["y"])
    )
    worker.start()
    worker.join()
    np.testing.assert_array_equal(results[0], np.full(256, 3.0, np.float32))
    before = signal.getsignal(signal.SIGINT)
    backend.call(module, "axpb", x=np.ones(256, np.float32), alpha=2.0)
    assert signal.getsignal(signal.SIGINT) is before
    # Between calls, SIGINT is Python's as ever.
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def cli_of_the_package(*args):
    done = subprocess.run(
        [sys.executable, "-m", "mpmd", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("check", "examples/elementwise.mpmd"),
        ("run", "examples/elementwise.mpmd", "--seed", "3"),
        ("lower", "examples/elementwise.mpmd", "--target", "plan"),
        ("check", "examples/no_such_file.mpmd"),
        ("bogus",),
        ("run", "examples/elementwise.mpmd", "--scalar", "alpha=x"),
    ],
)
def test_the_package_cli_is_the_binary_cli(args):
    assert cli_of_the_package(*args) == run_cli(*args)


def test_the_package_cli_exit_codes_and_console_script():
    assert cli_of_the_package("check", "examples/elementwise.mpmd")[0] == 0
    assert cli_of_the_package("check", "examples/no_such_file.mpmd")[0] == 1
    assert cli_of_the_package("bogus")[0] == 2
    assert mpmd.cli.main(["--version"]) == 0
    pyproject = (ROOT / "python" / "pyproject.toml").read_text()
    assert '\n[project.scripts]\n# The CLI (`mpmd check`, `lower`, `run`, ...), linked into the extension.\nmpmd = "mpmd.cli:console_main"\n' in pyproject
    assert callable(mpmd.cli.console_main)
    # `maturin develop` and pip install the script beside the interpreter.
    script = Path(sys.executable).parent / "mpmd"
    done = subprocess.run([str(script), "check", str(ELEMENTWISE)], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (0, f"{ELEMENTWISE}: ok\n")
