"""The same calls on the WGSL backend (lavapipe here: `cargo xtask test`
sets up the Vulkan adapter), judged against numpy and the interpreter; and
the CUDA backend's answer on a machine without an NVIDIA GPU."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import mpmd
import mpmd.jax
from conftest import CASES, EXAMPLES, PY_EXAMPLES, run_cli

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def wgpu():
    # No adapter is a failure (with the reason), never a skip.
    return mpmd.Wgpu()


def load(name):
    return mpmd.Module.from_file(EXAMPLES / f"{name}.mpmd")


def test_numpy_and_dlpack_round_trips_on_wgpu(wgpu):
    axpb = load("elementwise")
    x = np.linspace(-3, 5, 256, dtype=np.float32)
    np.testing.assert_array_equal(wgpu.call(axpb, "axpb", x=x, alpha=2.5)["y"], x * np.float32(2.5) + 1)
    xj = jnp.arange(256, dtype=jnp.float32) / 3
    y = wgpu.call(axpb, "axpb", x=xj, alpha=-1.0)["y"]
    np.testing.assert_array_equal(y, mpmd.Interpreter().call(axpb, "axpb", x=xj, alpha=-1.0)["y"])
    assert wgpu.name == "wgpu"


def test_sixteen_bit_arrays_on_wgpu_match_the_interpreter(wgpu):
    axpb = load("f16_elementwise")
    x = np.random.default_rng(2).uniform(-1000, 1000, 1024).astype(np.float16)
    got = wgpu.call(axpb, "axpb16", x=x, alpha=0.75)
    want = mpmd.Interpreter().call(axpb, "axpb16", x=x, alpha=0.75)
    for name in ["y", "y32"]:
        np.testing.assert_array_equal(got[name].view(np.uint16), want[name].view(np.uint16))
    rowsum = load("bf16_rowsum")
    xb = ((np.arange(16 * 256) % 13) - 6).astype(BF16).reshape(16, 256)
    out = wgpu.call(rowsum, "rowsum", x=xb)
    np.testing.assert_array_equal(out["sum"], xb.astype(np.float32).sum(axis=1))
    assert out["sum16"].dtype == BF16


def test_residents_across_calls_on_wgpu():
    handoff = load("handoff")
    backend = mpmd.Wgpu()
    x = np.arange(128, dtype=np.float32)
    assert backend.call(handoff, "send", x=x)["sent"].tolist() == [1, 2]
    np.testing.assert_array_equal(backend.resident("hand"), (x * 10).reshape(2, 64))
    np.testing.assert_array_equal(backend.call(handoff, "receive")["y"], x * 10 + 1)
    backend.set_resident("hand", np.full((2, 64), 2.0, np.float32), module=handoff)
    backend.set_resident("credits", np.ones((2, 1), np.int32))
    np.testing.assert_array_equal(backend.call(handoff, "receive")["y"], np.full(128, 3.0, np.float32))


def test_the_readme_example_on_wgpu_under_jit():
    module = mpmd.Module.from_file(PY_EXAMPLES / "mosaic_refuses.mpmd")
    backend = mpmd.Wgpu()
    stage = mpmd.jax.kernel(module, "stage", backend)
    finish = mpmd.jax.kernel(module, "finish", backend)
    import jax

    step = jax.jit(lambda x, alpha: (stage(x)["y"], finish(alpha=alpha)["z"]))
    x = jnp.linspace(-1.0, 1.0, 256, dtype=jnp.float32)
    y, z = step(x, 0.5)
    assert (y == x * 3.0 + 1.0).all() and (z == 0.5 * ((x * 3.0) * 2.0)).all()


def test_a_refusal_on_wgpu_carries_the_cli_report(wgpu, tmp_path):
    # A cycle of 40 workgroups: more than any adapter is established to run
    # at once (lavapipe's pool included), so it is refused everywhere.
    text = (EXAMPLES / "handshake.mpmd").read_text()
    text = text.replace("grid [pb = 1]", "grid [pb = 20]").replace("grid [qb = 1]", "grid [qb = 20]")
    path = tmp_path / "wide_handshake.mpmd"
    path.write_text(text)
    cycle = mpmd.Module.from_file(path)
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(mpmd.RefusedError) as caught:
        wgpu.call(cycle, "handshake", x=x)
    code, _, stderr = run_cli("run", path, "--backend", "wgpu")
    assert code == 1
    cli = stderr.split("failed: ", 1)[1].removesuffix("\n")
    # The same report; the option is named as Python sets it.
    assert str(caught.value) == cli.replace("--co-resident", "Wgpu(co_resident=True)")
    assert "Wgpu(co_resident=True)" in str(caught.value)


def test_checked_wgpu_reports_out_of_bounds():
    case = mpmd.Module.from_file(CASES / "fail_out_of_bounds_checked.mpmd")
    inputs = mpmd.generated_inputs(case, "k", seed=0)
    with pytest.raises(mpmd.OutOfBoundsError) as caught:
        mpmd.Wgpu(checked=True).call(case, "k", **inputs)
    assert caught.value.error_class == "out_of_bounds"
    code, _, stderr = run_cli(
        "run", "conformance/cases/fail_out_of_bounds_checked.mpmd", "--backend", "wgpu", "--checked"
    )
    assert code == 1 and str(caught.value) == stderr.split("failed: ", 1)[1].removesuffix("\n")


def test_cuda_runs_where_the_cli_can_and_says_why_not_where_it_cannot():
    code, _, stderr = run_cli("run", "examples/elementwise.mpmd", "--backend", "cuda")
    if code == 0:
        axpb = load("elementwise")
        x = np.arange(256, dtype=np.float32)
        np.testing.assert_array_equal(mpmd.Cuda().call(axpb, "axpb", x=x, alpha=2.0)["y"], x * 2 + 1)
        return
    with pytest.raises(mpmd.BackendUnavailableError) as caught:
        mpmd.Cuda()
    assert "error: " + str(caught.value) + "\n" == stderr
