"""mpmd maps inside jax.jit on CPU, checked against jnp."""

import gc
import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
import mpmd.jax
from conftest import CASES, EXAMPLES, PY_EXAMPLES


def test_a_jitted_function_matches_jnp():
    axpb = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd"), "axpb")

    @jax.jit
    def f(x, alpha):
        return jnp.sum(axpb(x, alpha=alpha)["y"] * 2.0)

    x = jnp.linspace(-2.0, 2.0, 256, dtype=jnp.float32)
    for alpha in [0.5, -3.0]:
        assert f(x, alpha) == jnp.sum((x * alpha + 1.0) * 2.0)
    y = axpb(x=x, alpha=2.0)["y"]  # eagerly too
    assert isinstance(y, jax.Array) and y.dtype == jnp.float32 and y.shape == (256,)
    assert (y == x * 2.0 + 1.0).all()


def test_outputs_have_the_map_shapes_and_dtypes_under_jit():
    rowsum = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "bf16_rowsum.mpmd"), "rowsum")
    shapes = jax.eval_shape(rowsum, jax.ShapeDtypeStruct((16, 256), jnp.bfloat16))
    assert shapes == {
        "sum": jax.ShapeDtypeStruct((16,), jnp.float32),
        "sum16": jax.ShapeDtypeStruct((16,), jnp.bfloat16),
    }
    x = (jnp.arange(16 * 256) % 9).astype(jnp.bfloat16).reshape(16, 256)
    out = jax.jit(rowsum)(x)
    assert (out["sum"] == x.astype(jnp.float32).sum(axis=1)).all()
    assert out["sum16"].dtype == jnp.bfloat16


def test_f16_under_jit_matches_jnp_bit_for_bit():
    axpb = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "f16_elementwise.mpmd"), "axpb16")
    x = jnp.linspace(-100, 100, 1024, dtype=jnp.float16)
    out = jax.jit(lambda x: axpb(x, alpha=1.5))(x)
    expected = (x.astype(jnp.float32) * 1.5 + 1.0).astype(jnp.float16)
    np.testing.assert_array_equal(
        np.asarray(out["y32"]).view(np.uint16), np.asarray(expected).view(np.uint16)
    )


def test_wrong_dtype_or_shape_is_a_value_error_at_trace_time():
    axpb = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd"), "axpb")
    with pytest.raises(ValueError) as caught:
        jax.jit(lambda x: axpb(x, alpha=1.0))(jnp.zeros(256, jnp.int32))
    assert str(caught.value) == (
        "input `x` of map `axpb` expects float32 of shape (256,); given int32 of shape (256,)"
    )
    with pytest.raises(ValueError, match=r"given float32 of shape \(2, 128\)$"):
        axpb(jnp.zeros((2, 128), jnp.float32), alpha=1.0)
    with pytest.raises(TypeError, match=r"^a call of map `axpb` needs alpha$"):
        axpb(jnp.zeros(256, jnp.float32))


def test_residents_stay_with_the_given_backend_and_calls_keep_their_order():
    handoff = mpmd.Module.from_file(EXAMPLES / "handoff.mpmd")
    backend = mpmd.Interpreter()
    send = mpmd.jax.kernel(handoff, "send", backend)
    receive = mpmd.jax.kernel(handoff, "receive", backend)

    @jax.jit
    def both(x):
        # `receive` uses no output of `send`: only the ordered callbacks keep it second.
        sent = send(x)["sent"]
        return receive()["y"], sent

    x = jnp.arange(128, dtype=jnp.float32)
    for _ in range(2):
        y, sent = both(x)
        assert (y == x * 10.0 + 1.0).all() and sent.tolist() == [1, 2]
    assert backend.resident("credits").tolist() == [[0], [0]]


def test_a_run_error_inside_jit_carries_the_report():
    cycle = mpmd.jax.kernel(mpmd.Module.from_file(CASES / "fail_deadlock_cycle.mpmd"), "cycle")
    with pytest.raises(Exception, match="wait-for graph") as caught:
        jax.block_until_ready(jax.jit(cycle)())
    assert "program 1 (kb), block 0 waits on `s[1]` for 1 (count is 0)" in str(caught.value)


def test_the_readme_example_runs_and_matches_jnp(capsys):
    runpy.run_path(str(PY_EXAMPLES / "mosaic_refuses.py"), run_name="__main__")
    assert capsys.readouterr().out.endswith(" (match jnp)\n")


def test_the_readme_example_on_the_interpreter_checked():
    # The same module with detection and extra schedules: no race, no
    # uninitialised read, the same values on every schedule.
    module = mpmd.Module.from_file(PY_EXAMPLES / "mosaic_refuses.mpmd")
    backend = mpmd.Interpreter(checked=True)
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    y = backend.call(module, "stage", x=x)["y"]
    z = backend.call(module, "finish", alpha=0.5)["z"]
    np.testing.assert_array_equal(y, x * np.float32(3) + np.float32(1))
    np.testing.assert_array_equal(z, np.float32(0.5) * ((x * np.float32(3)) * np.float32(2)))
    assert backend.schedules_run == 3


def test_vmap_runs_the_map_once_per_batch_element():
    axpb = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd"), "axpb")
    xs = jnp.arange(3 * 256, dtype=jnp.float32).reshape(3, 256) / 5
    alphas = jnp.array([1.0, -2.0, 0.25], dtype=jnp.float32)
    ys = jax.jit(jax.vmap(lambda x, a: axpb(x, alpha=a)["y"]))(xs, alphas)
    assert ys.shape == (3, 256)
    assert (ys == xs * alphas[:, None] + 1.0).all()


def test_a_kernel_made_inside_a_jitted_function_works_on_every_call():
    # As Pallas users write `pl.pallas_call(...)(x)`: the kernel function dies
    # after tracing, the compiled executable calls its registration later.
    module = mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd")
    f = jax.jit(lambda a: mpmd.jax.kernel(module, "axpb")(a, alpha=2.0)["y"])
    x = jnp.arange(256, dtype=jnp.float32)
    first = f(x)
    gc.collect()
    np.testing.assert_array_equal(f(x), first)
    np.testing.assert_array_equal(f(x + 1.0), 2.0 * (x + 1.0) + 1.0)
    # Made again for the same map and backend: one registration, not one per trace.
    before = len(mpmd.jax._registrations)
    for _ in range(3):
        jax.jit(lambda a: mpmd.jax.kernel(module, "axpb")(a, alpha=3.0)["y"])(x)
    assert len(mpmd.jax._registrations) == before


def test_registrations_are_bounded_least_recently_used_first(monkeypatch):
    monkeypatch.setattr(mpmd.jax, "REGISTRATION_BOUND", 2)
    monkeypatch.setattr(mpmd.jax, "_registrations", type(mpmd.jax._registrations)())
    module = mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd")
    backends = [mpmd.Interpreter() for _ in range(3)]
    for backend in backends:
        mpmd.jax.kernel(module, "axpb", backend)
    assert [entry[1] for entry in mpmd.jax._registrations.values()] == backends[1:]
