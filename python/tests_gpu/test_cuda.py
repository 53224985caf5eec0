"""mpmd.Cuda on device arrays (DLPack, no host copy) and mpmd.jax.kernel
under jax.jit on the GPU (the XLA FFI custom call on XLA's stream)."""

import numpy as np
import pytest

import mpmd
import mpmd.jax
from conftest import CASES, EXAMPLES


def test_device_arrays_are_used_in_place_and_outputs_stay_on_the_device(torch_cuda):
    torch = torch_cuda
    cuda = mpmd.Cuda()
    module = mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd")
    x = torch.arange(256, device="cuda", dtype=torch.float32) * 0.5
    out = cuda.call(module, "axpb", x=x, alpha=2.0)
    y = out["y"]
    assert isinstance(y, mpmd.DeviceArray)
    assert y.__dlpack_device__() == (2, 0) and y.shape == [256] and y.dtype == "float32"
    on_torch = torch.from_dlpack(y)
    assert on_torch.is_cuda
    assert torch.equal(on_torch, x * 2.0 + 1.0)
    np.testing.assert_array_equal(y.numpy(), (x * 2.0 + 1.0).cpu().numpy())
    # Host inputs only: the host-copy path, numpy outputs.
    host = cuda.call(module, "axpb", x=x.cpu().numpy(), alpha=2.0)["y"]
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, y.numpy())


def test_an_aliased_output_is_the_device_input_written_in_place(torch_cuda):
    torch = torch_cuda
    module = mpmd.Module.from_file(CASES / "alias_in_place.mpmd")
    x = torch.linspace(-100, 100, 300, device="cuda", dtype=torch.float32)
    want = x * 2.0 + 1.0
    out = mpmd.Cuda().call(module, "inplace", x=x)
    assert out["y"] is x
    assert torch.equal(x, want)


def test_jax_device_arrays_sixteen_bit_and_a_mismatch(jax_gpu):
    jax = jax_gpu
    import jax.numpy as jnp

    module = mpmd.Module.from_file(EXAMPLES / "f16_elementwise.mpmd")
    x = jnp.linspace(-100, 100, 1024, dtype=jnp.float16)
    got = mpmd.Cuda().call(module, "axpb16", x=x, alpha=1.5)
    want = mpmd.Interpreter().call(module, "axpb16", x=np.asarray(x), alpha=1.5)
    import jax.dlpack

    for name in ("y", "y32"):
        np.testing.assert_array_equal(got[name].numpy().view(np.uint16), want[name].view(np.uint16))
        back = jax.dlpack.from_dlpack(got[name])
        np.testing.assert_array_equal(np.asarray(back).view(np.uint16), want[name].view(np.uint16))
    with pytest.raises(ValueError, match=r"^input `x` of map `axpb16` expects float16 on the device; given float32"):
        mpmd.Cuda().call(module, "axpb16", x=jnp.zeros(1024, jnp.float32), alpha=1.5)


def test_jit_runs_the_cuda_backend_on_xlas_buffers(jax_gpu):
    jax = jax_gpu
    import jax.numpy as jnp

    axpb = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd"), "axpb")
    x = jnp.arange(256, dtype=jnp.float32) * 0.5
    constant = jax.jit(lambda x: axpb(x, alpha=2.0)["y"])
    text = constant.lower(x).as_text()
    assert "stablehlo.custom_call @mpmd_kernel" in text and "callback" not in text
    assert (constant(x) == x * 2.0 + 1.0).all()
    # A traced scalar is an operand, read back from the device.
    traced = jax.jit(lambda x, a: axpb(x, alpha=a)["y"])
    for alpha in (0.5, -3.0):
        assert (traced(x, alpha) == x * alpha + 1.0).all()
    # vmap runs the map once per element of the batch.
    xs = jnp.stack([x, x + 1.0])
    ys = jax.jit(jax.vmap(lambda x: axpb(x, alpha=2.0)["y"]))(xs)
    assert (ys == xs * 2.0 + 1.0).all()
    mpmd.jax.synchronize()


def test_bools_and_aliases_under_jit_on_the_gpu(jax_gpu):
    jax = jax_gpu
    import jax.numpy as jnp

    logic = mpmd.jax.kernel(mpmd.Module.from_file(CASES / "select_and_logic.mpmd"), "select_and_logic")
    x = jnp.arange(-64, 64, dtype=jnp.int32)
    y = (jnp.arange(128, dtype=jnp.int32) % 7) - 3
    got = jax.jit(logic)(x, y)
    want = mpmd.Interpreter().call(
        mpmd.Module.from_file(CASES / "select_and_logic.mpmd"), "select_and_logic", x=np.asarray(x), y=np.asarray(y)
    )
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(np.asarray(got[name]), value, err_msg=name)
    inplace = mpmd.jax.kernel(mpmd.Module.from_file(CASES / "alias_in_place.mpmd"), "inplace")
    x = jnp.linspace(-100, 100, 300, dtype=jnp.float32)
    assert (jax.jit(inplace)(x)["y"] == x * 2.0 + 1.0).all()


def test_an_error_a_kernel_records_is_reported_at_the_synchronisation(jax_gpu):
    jax = jax_gpu
    import jax.numpy as jnp

    module = mpmd.Module.from_file(CASES / "fail_out_of_bounds_checked.mpmd")
    k = jax.jit(mpmd.jax.kernel(module, "k", mpmd.Cuda(checked=True)))
    table = jnp.arange(16, dtype=jnp.float32)
    bad = jnp.full(64, 3, jnp.uint32).at[5].set(40)
    jax.block_until_ready(k(table, bad))  # enqueued on XLA's stream; no wait on the error
    with pytest.raises(mpmd.OutOfBoundsError, match=r"thread 5: `table` index \[40\]"):
        mpmd.jax.synchronize()
    good = k(table, jnp.full(64, 3, jnp.uint32))["y"]
    assert (good == 3.0).all()
    mpmd.jax.synchronize()
    # Reported by the next mpmd call on the stream when nobody synchronises.
    jax.block_until_ready(k(table, bad))
    with pytest.raises(Exception, match=r"out-of-bounds access"):
        jax.block_until_ready(k(table, bad))
    mpmd.jax.synchronize()  # that call reported the error and ran nothing
