"""Calls from Python on the interpreter: numpy and DLPack round trips,
16-bit arrays, residents across calls, argument checks and typed errors."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import mpmd
from conftest import CASES, EXAMPLES, run_cli

BF16 = ml_dtypes.bfloat16


def module(name):
    return mpmd.Module.from_file(EXAMPLES / f"{name}.mpmd")


def test_numpy_in_numpy_out():
    axpb = module("elementwise")
    x = np.linspace(-3, 5, 256, dtype=np.float32)
    out = mpmd.Interpreter().call(axpb, "axpb", x=x, alpha=2.5)
    assert list(out) == ["y"]
    y = out["y"]
    assert (y.dtype, y.shape) == (np.float32, (256,))
    np.testing.assert_array_equal(y, x * np.float32(2.5) + np.float32(1.0))
    y[0] = 7.0  # outputs are the caller's own, writable arrays


def _owners(array):
    """The objects an array's memory belongs to, innermost first."""
    chain = []
    while array is not None:
        chain.append(type(array).__name__)
        array = getattr(array, "base", None)
    return chain


def test_outputs_are_the_calls_own_words_without_a_copy():
    """Outputs of 16 KiB and more; smaller ones are copied into a bytearray."""
    axpb = mpmd.Module.from_text(
        (EXAMPLES / "elementwise.mpmd").read_text().replace("[b = 4]", "[b = 128]").replace("[256]", "[8192]")
    )
    x = np.linspace(-3, 5, 8192, dtype=np.float32)
    backend = mpmd.Interpreter()
    small = backend.call(module("elementwise"), "axpb", x=x[:256], alpha=2.5)["y"]
    assert "_OutputWords" not in _owners(small), _owners(small)
    y = backend.call(axpb, "axpb", x=x, alpha=2.5)["y"]
    # numpy holds the words the call wrote, not a bytearray copy of them.
    assert _owners(y)[-1] == "_OutputWords", _owners(y)
    assert y.flags.writeable and y.flags.c_contiguous
    del backend
    import gc

    gc.collect()
    want = x * np.float32(2.5) + np.float32(1.0)
    np.testing.assert_array_equal(y, want)
    y += 1  # the caller's own memory, outliving the backend
    np.testing.assert_array_equal(y, want + np.float32(1.0))


def test_inputs_read_in_place_or_copied_give_the_same_outputs():
    """C-contiguous aligned inputs are read where they lie; misaligned,
    strided, big-endian, odd-length 16-bit and bytes inputs are copied, and
    every one gives the same outputs. The lent memory is given back when the
    call returns: the array can be resized afterwards."""
    axpb = module("elementwise")
    x = np.linspace(-3, 5, 256, dtype=np.float32)
    want = x * np.float32(2.5) + np.float32(1.0)
    raw = np.zeros(256 * 4 + 1, dtype=np.uint8)
    raw[1:] = x.view(np.uint8)
    wide = np.zeros(512, dtype=np.float32)
    wide[::2] = x
    given = {
        "aligned": x,
        "misaligned": np.frombuffer(raw, dtype=np.float32, count=256, offset=1),
        "strided": wide[::2],
        "big-endian": x.astype(">f4"),
    }
    backend = mpmd.Interpreter()
    for what, value in given.items():
        y = backend.call(axpb, "axpb", x=value, alpha=2.5)["y"]
        np.testing.assert_array_equal(y, want, err_msg=what)
    owned = x.copy()
    backend.call(axpb, "axpb", x=owned, alpha=2.5)
    owned.resize(512, refcheck=False)  # raises BufferError while a view is held
    odd = mpmd.Module.from_text(
        """
mesh m { grid [b = 1]; threads t = 5; }
kernel k(x: gmem<f16[5]>, y: gmem<f16[5]>) { y[axis_index(t)] = x[axis_index(t)]; }
map k { programs [m: k]; inputs [x: gmem<f16[5]>]; outputs [y: gmem<f16[5]>]; }
"""
    )
    h = np.arange(5, dtype=np.float16)
    np.testing.assert_array_equal(backend.call(odd, "k", x=h)["y"], h)


def test_a_jax_cpu_array_goes_in_through_dlpack():
    axpb = module("elementwise")
    x = jnp.arange(256, dtype=jnp.float32) / 7
    y = mpmd.Interpreter().call(axpb, "axpb", x=x, alpha=np.float32(-1.5))["y"]
    np.testing.assert_array_equal(y, np.asarray(x * -1.5 + 1.0))


def test_two_programs_sharing_scratch_and_semaphores():
    pc = module("producer_consumer")
    x = np.arange(256, dtype=np.float32)
    y = mpmd.Interpreter(checked=True).call(pc, "producer_consumer", x=x)["y"]
    np.testing.assert_array_equal(y, x * 3 + 1)


def test_f16_arrays_and_scalars():
    axpb = module("f16_elementwise")
    rng = np.random.default_rng(5)
    x = rng.uniform(-60000, 60000, 1024).astype(np.float16)
    x[:6] = [0.0, -0.0, np.inf, 6.0e-8, 65504, 1 + 2**-10]
    alpha = np.float16(1.5)
    out = mpmd.Interpreter().call(axpb, "axpb16", x=x, alpha=1.5)
    assert out["y"].dtype == np.float16 and out["y"].shape == (1024,)
    # f16 arithmetic rounds each operation once (numpy does the same).
    with np.errstate(over="ignore"):  # overflow to infinity is part of the test
        want = x * alpha + np.float16(1)
        wide = (x.astype(np.float32) * np.float32(alpha) + np.float32(1)).astype(np.float16)
    np.testing.assert_array_equal(out["y"].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(out["y32"].view(np.uint16), wide.view(np.uint16))


def test_bf16_arrays_with_f32_accumulation():
    rowsum = module("bf16_rowsum")
    x = ((np.arange(16 * 256) % 17) - 8).astype(BF16).reshape(16, 256) * BF16(1.5)
    out = mpmd.Interpreter().call(rowsum, "rowsum", x=x)
    assert out["sum16"].dtype == BF16 and out["sum16"].shape == (16,)
    exact = x.astype(np.float32).sum(axis=1)  # small integers: exact in any order
    np.testing.assert_array_equal(out["sum"], exact)
    np.testing.assert_array_equal(out["sum16"].view(np.uint16), exact.astype(BF16).view(np.uint16))


def test_a_jax_bf16_array_arrives_as_ml_dtypes_bf16():
    rowsum = module("bf16_rowsum")
    x = jnp.full((16, 256), 0.25, dtype=jnp.bfloat16)
    out = mpmd.Interpreter().call(rowsum, "rowsum", x=x)
    np.testing.assert_array_equal(out["sum"], np.full(16, 64.0, np.float32))


def test_bool_arrays_round_trip():
    program = mpmd.Module.from_text(
        """
mesh m { grid [b = 1]; threads t = 8; }
kernel k(x: gmem<bool[8]>, y: gmem<bool[8]>, n: gmem<u32[8]>) {
  let i: u32 = axis_index(t);
  y[i] = !x[i];
  n[i] = u32(x[i]);
}
map flip { programs [m: k]; inputs [x: gmem<bool[8]>]; outputs [y: gmem<bool[8]>, n: gmem<u32[8]>]; }
"""
    )
    x = np.array([True, False, False, True, True, True, False, True])
    out = mpmd.Interpreter().call(program, "flip", x=x)
    assert out["y"].dtype == np.bool_
    np.testing.assert_array_equal(out["y"], ~x)
    np.testing.assert_array_equal(out["n"], x.astype(np.uint32))


def test_residents_stay_with_the_backend_across_calls():
    handoff = module("handoff")
    backend = mpmd.Interpreter(checked=True)
    assert backend.resident("hand") is None
    x = np.arange(128, dtype=np.float32)
    assert backend.call(handoff, "send", x=x)["sent"].tolist() == [1, 2]
    np.testing.assert_array_equal(backend.resident("hand"), (x * 10).reshape(2, 64))
    assert backend.resident("credits").tolist() == [[1], [1]]
    y = backend.call(handoff, "receive")["y"]
    np.testing.assert_array_equal(y, x * 10 + 1)
    assert backend.resident("credits").tolist() == [[0], [0]]
    # A second backend has residents of its own: its receive has no credit.
    with pytest.raises(mpmd.DeadlockError):
        mpmd.Interpreter().call(handoff, "receive")


def test_set_resident_hands_data_to_a_later_call():
    handoff = module("handoff")
    backend = mpmd.Interpreter()
    backend.set_resident("hand", np.full((2, 64), 4.0, np.float32), module=handoff)
    backend.set_resident("credits", np.array([[1], [1]], np.int32))
    np.testing.assert_array_equal(backend.call(handoff, "receive")["y"], np.full(128, 5.0, np.float32))
    with pytest.raises(ValueError) as caught:
        backend.set_resident("hand", np.zeros(128, np.float32), module=handoff)
    assert str(caught.value) == (
        "resident `hand` expects float32 of shape (2, 64); given float32 of shape (128,)"
    )
    with pytest.raises(KeyError, match="the module declares no resident `nope`"):
        backend.set_resident("nope", np.zeros(1, np.float32), module=handoff)


def test_wrong_dtype_or_shape_names_the_operand_and_both():
    axpb = module("elementwise")
    backend = mpmd.Interpreter()
    with pytest.raises(ValueError) as caught:
        backend.call(axpb, "axpb", x=np.zeros(256), alpha=1.0)
    assert str(caught.value) == (
        "input `x` of map `axpb` expects float32 of shape (256,); given float64 of shape (256,)"
    )
    with pytest.raises(ValueError) as caught:
        backend.call(axpb, "axpb", x=np.zeros((16, 16), np.float32), alpha=1.0)
    assert str(caught.value) == (
        "input `x` of map `axpb` expects float32 of shape (256,); given float32 of shape (16, 16)"
    )


def test_missing_unknown_and_mistyped_arguments():
    axpb = module("elementwise")
    backend = mpmd.Interpreter()
    x = np.zeros(256, np.float32)
    with pytest.raises(TypeError) as caught:
        backend.call(axpb, "axpb", x=x)
    assert str(caught.value) == "a call of map `axpb` needs scalar `alpha`"
    with pytest.raises(TypeError) as caught:
        backend.call(axpb, "axpb", x=x, alpha=1.0, beta=2.0)
    assert str(caught.value) == (
        "map `axpb` has no input or scalar named `beta` (inputs: `x`; scalars: `alpha`)"
    )
    with pytest.raises(TypeError) as caught:
        backend.call(axpb, "axpb", x=x, alpha="two")
    assert str(caught.value) == "scalar `alpha` of map `axpb` is f32: expected a float, given str"
    with pytest.raises(TypeError) as caught:
        backend.call(axpb, "axpb", x=3.0, alpha=1.0)
    assert str(caught.value) == "input `x` of map `axpb` takes an array, not a Python number"
    with pytest.raises(KeyError, match="no map `nope`"):
        backend.call(axpb, "nope")


def test_the_cli_generated_inputs_give_the_cli_outputs(tmp_path):
    axpb = module("elementwise")
    inputs = mpmd.generated_inputs(axpb, "axpb", seed=3)
    y = mpmd.Interpreter().call(axpb, "axpb", alpha=2.0, **inputs)["y"]
    code, _, stderr = run_cli("run", EXAMPLES / "elementwise.mpmd", "--seed", 3, "--out", tmp_path)
    assert code == 0, stderr
    np.testing.assert_array_equal(y, np.load(tmp_path / "y.npy"))


def cli_run_error(case, *flags):
    """What `mpmd run` reports for a corpus case: the part after `failed: `,
    less the `note:`s with the source lines of a race's accesses (which the
    Python package does not render yet)."""
    code, _, stderr = run_cli("run", f"conformance/cases/{case}.mpmd", *flags)
    prefix = "error: call 0 "
    assert code == 1 and stderr.startswith(prefix), stderr
    return stderr.split("failed: ", 1)[1].split("\nnote: ", 1)[0].removesuffix("\n")


@pytest.mark.parametrize(
    "case, map_name, error, error_class",
    [
        ("fail_data_race", "racy", mpmd.RaceError, "data_race"),
        ("fail_smem_race_missing_barrier", None, mpmd.RaceError, "data_race"),
        ("fail_out_of_bounds_checked", "k", mpmd.OutOfBoundsError, "out_of_bounds"),
        ("fail_uninitialized_read", "uninit", mpmd.UninitializedReadError, "uninitialized_read"),
        ("fail_deadlock_cycle", "cycle", mpmd.DeadlockError, "deadlock"),
    ],
)
def test_findings_raise_typed_errors_with_the_cli_report(case, map_name, error, error_class):
    program = mpmd.Module.from_file(CASES / f"{case}.mpmd")
    map_name = map_name or program.maps[0]
    inputs = mpmd.generated_inputs(program, map_name, seed=0)
    with pytest.raises(error) as caught:
        mpmd.Interpreter(checked=True).call(program, map_name, **inputs)
    assert isinstance(caught.value, mpmd.RunError)
    assert caught.value.error_class == error_class
    assert caught.value.map == map_name
    assert str(caught.value) == cli_run_error(case, "--checked")


def test_a_deadlock_message_holds_the_wait_for_graph():
    program = mpmd.Module.from_file(CASES / "fail_deadlock_cycle.mpmd")
    with pytest.raises(mpmd.DeadlockError) as caught:
        mpmd.Interpreter().call(program, "cycle")
    assert str(caught.value) == (
        "deadlock: every live block waits\n"
        "wait-for graph (no live block can signal):\n"
        "  program 0 (ka), block 0 waits on `s[0]` for 1 (count is 0)\n"
        "  program 1 (kb), block 0 waits on `s[1]` for 1 (count is 0)"
    )
    assert str(caught.value) == cli_run_error("fail_deadlock_cycle")


def test_fast_mode_does_not_detect_and_checked_runs_the_schedules_asked_for():
    racy = mpmd.Module.from_file(CASES / "fail_data_race.mpmd")
    inputs = mpmd.generated_inputs(racy, "racy")
    fast = mpmd.Interpreter()
    fast.call(racy, "racy", **inputs)  # a race is only found when checking
    assert fast.schedules_run == 1
    pc = module("producer_consumer")
    x = np.arange(256, dtype=np.float32)
    for schedules, runs in [(None, 3), (0, 1), (5, 6)]:
        backend = mpmd.Interpreter(checked=True, schedules=schedules)
        backend.call(pc, "producer_consumer", x=x)
        assert backend.schedules_run == runs


def test_limits_name_the_python_parameter():
    pc = module("producer_consumer")
    with pytest.raises(mpmd.RefusedError) as caught:
        mpmd.Interpreter(memory_limit=1000).call(pc, "producer_consumer", x=np.zeros(256, np.float32))
    assert "raise it with Interpreter(memory_limit=BYTES)" in str(caught.value)
    with pytest.raises(ValueError, match=r"^timeout=-1: give a number of seconds \(such as 60, 0.5, or 0 or None for no bound\)$"):
        mpmd.Interpreter(timeout=-1.0)


def test_set_resident_without_a_module_is_checked_by_the_next_call():
    handoff = module("handoff")
    backend = mpmd.Interpreter()
    backend.set_resident("credits", np.ones((2, 1), np.uint32))  # declared int32
    with pytest.raises(mpmd.RunError) as caught:
        backend.call(handoff, "receive")
    assert caught.value.error_class is None
    assert str(caught.value) == (
        "bad call arguments: resident `credits` holds `u32` elements; map `receive` declares `i32`"
    )
    with pytest.raises(ValueError) as caught:
        backend.set_resident("hand", np.zeros(4))
    assert str(caught.value) == (
        "resident `hand`: dtype float64 is none of float32, int32, uint32, bool, float16, bfloat16"
    )


class DlpackOnly:
    """An array that offers only the DLPack protocol (as a PyTorch CPU
    tensor does to numpy): no __array__, no buffer."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_any_dlpack_object_is_an_input():
    axpb = module("elementwise")
    x = np.arange(256, dtype=np.float32) - 100
    assert not hasattr(DlpackOnly(x), "__array__")
    y = mpmd.Interpreter().call(axpb, "axpb", x=DlpackOnly(x), alpha=0.5)["y"]
    np.testing.assert_array_equal(y, x * np.float32(0.5) + 1)
    with pytest.raises(ValueError, match=r"given int64 of shape \(256,\)$"):
        mpmd.Interpreter().call(axpb, "axpb", x=DlpackOnly(np.arange(256)), alpha=0.5)


LOOP = """
mesh m { grid [b = 1]; threads t = 1; }
kernel k(y: gmem<u32[1]>, n: u32) {
  var acc: u32 = 0u;
  for i: u32 in 0u..n {
    acc += i;
  }
  y[0] = acc;
}
map k { programs [m: k]; outputs [y: gmem<u32[1]>]; scalars [n: u32]; }
"""


def test_ctrl_c_stops_an_interpreter_call_and_the_backend_stays_usable():
    import os
    import signal
    import threading
    import time

    module = mpmd.Module.from_text(LOOP)
    backend = mpmd.Interpreter(timeout=None)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        backend.call(module, "k", n=4_000_000_000)
    assert time.monotonic() - start < 10.0
    assert backend.call(module, "k", n=4)["y"].tolist() == [6]
