"""mpmd.jax.kernel through the XLA FFI custom call on the CPU: the handler
in the Rust extension decodes XLA's call frame (operands, results,
attributes) and runs the map on the kernel's backend. The CUDA handler
shares the decoding; its GPU runs are in python/tests_gpu."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
import mpmd.jax
from conftest import CASES, EXAMPLES

SCALARS = """
mesh m { grid [b = 1]; threads t = 64; }

kernel k(x: gmem<f32[64]>, flag: gmem<bool[64]>, y: gmem<f32[64]>, n: gmem<i32[64]>, w: gmem<u32[64]>,
         h: gmem<f16[64]>, g: gmem<bf16[64]>, keep: gmem<bool[64]>,
         a: f32, i: i32, u: u32, hf: f16, bf: bf16) {
  let t: u32 = axis_index(t);
  y[t] = select(flag[t] && u > 3u, x[t] * a, -x[t]);
  n[t] = i32(t) * i;
  w[t] = t + u;
  h[t] = f16(x[t]) * hf;
  g[t] = bf16(x[t]) + bf;
  keep[t] = !flag[t];
}

map every_type {
  programs [m: k];
  inputs [x: gmem<f32[64]>, flag: gmem<bool[64]>];
  outputs [y: gmem<f32[64]>, n: gmem<i32[64]>, w: gmem<u32[64]>, h: gmem<f16[64]>, g: gmem<bf16[64]>, keep: gmem<bool[64]>];
  scalars [a: f32, i: i32, u: u32, hf: f16, bf: bf16];
}
"""

SCALAR_VALUES = dict(a=1.5, i=-3, u=7, hf=0.5, bf=2.0)


def scalars_kernel():
    return mpmd.jax.kernel(mpmd.Module.from_text(SCALARS, "scalars.mpmd"), "every_type")


def inputs():
    x = jnp.linspace(-4.0, 4.0, 64, dtype=jnp.float32)
    flag = (jnp.arange(64) % 3) == 0
    return x, flag


def expected(x, flag):
    # The interpreter through the host-copy path: the FFI handler must agree.
    module = mpmd.Module.from_text(SCALARS, "scalars.mpmd")
    return mpmd.Interpreter().call(
        module, "every_type", x=np.asarray(x), flag=np.asarray(flag), **SCALAR_VALUES
    )


def test_a_jitted_map_lowers_to_the_mpmd_custom_call():
    axpb = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd"), "axpb")
    text = jax.jit(lambda x, a: axpb(x, alpha=a)["y"]).lower(jnp.zeros(256, jnp.float32), 1.0).as_text()
    assert "stablehlo.custom_call @mpmd_kernel" in text
    assert "callback" not in text
    # A map that binds residents stays an ordered host callback.
    send = mpmd.jax.kernel(mpmd.Module.from_file(EXAMPLES / "handoff.mpmd"), "send")
    text = jax.jit(send).lower(jnp.zeros(128, jnp.float32)).as_text()
    assert "mpmd_kernel" not in text and "callback" in text


@pytest.mark.parametrize("as_attributes", [False, True])
def test_every_scalar_type_and_bools_cross_the_call_frame(as_attributes, monkeypatch):
    # Operands (traced or on the CPU) and attributes (known when tracing, on a GPU).
    monkeypatch.setattr(mpmd.jax, "_scalars_as_attributes", as_attributes)
    k = scalars_kernel()
    x, flag = inputs()
    want = expected(x, flag)
    got = jax.jit(lambda x, flag: k(x, flag, **SCALAR_VALUES))(x, flag)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(np.asarray(got[name]), value, err_msg=name)
    # Traced scalars are operands whatever the setting.
    traced = jax.jit(lambda x, flag, a, i: k(x, flag, a=a, i=i, u=7, hf=0.5, bf=2.0))
    got = traced(x, flag, 1.5, -3)
    np.testing.assert_array_equal(np.asarray(got["y"]), want["y"])
    np.testing.assert_array_equal(np.asarray(got["n"]), want["n"])


def test_an_aliased_input_and_output_share_xlas_buffer():
    inplace = mpmd.jax.kernel(mpmd.Module.from_file(CASES / "alias_in_place.mpmd"), "inplace")
    x = jnp.linspace(-100.0, 100.0, 300, dtype=jnp.float32)
    text = jax.jit(inplace).lower(x).as_text()
    assert "output_operand_aliases" in text
    y = jax.jit(inplace)(x)["y"]
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x) * np.float32(2) + np.float32(1))


def test_the_given_backend_runs_the_map_with_its_checks():
    oob = mpmd.Module.from_file(CASES / "fail_out_of_bounds_checked.mpmd")
    k = mpmd.jax.kernel(oob, "k", mpmd.Interpreter(checked=True, schedules=0))
    table = jnp.arange(16, dtype=jnp.float32)
    idx = jnp.full(64, 3, jnp.uint32).at[5].set(40)
    with pytest.raises(Exception, match=r"out-of-bounds access at program 0 \(k\), block 0, thread 5: `table` index \[40\]"):
        jax.block_until_ready(jax.jit(k)(table, idx))
    ok = jax.jit(k)(table, jnp.full(64, 3, jnp.uint32))["y"]
    assert (ok == 3.0).all()


def call_frame(target_args, results, **attributes):
    return jax.ffi.ffi_call(mpmd.jax.FFI_TARGET, results, vmap_method="sequential")(
        *target_args, **attributes
    )


def test_a_call_frame_that_does_not_match_the_kernel_is_refused_with_the_reason():
    module = mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd")
    registered = mpmd._mpmd.ffi_kernel(module, "axpb", mpmd.Interpreter()._raw, False)
    y = jax.ShapeDtypeStruct((256,), jnp.float32)
    kernel_id = np.int64(registered.id)
    alpha = jnp.float32(2.0)
    with pytest.raises(Exception, match=r"input `x` of map `axpb` is float32 of shape \(256,\); XLA passed int32 of shape \(256,\)"):
        jax.block_until_ready(call_frame((jnp.zeros(256, jnp.int32), alpha), [y], mpmd_kernel=kernel_id))
    with pytest.raises(Exception, match=r"map `axpb` takes 2 operands and 1 results here; the call has 1 and 1"):
        jax.block_until_ready(call_frame((jnp.zeros(256, jnp.float32),), [y], mpmd_kernel=kernel_id))
    with pytest.raises(Exception, match="unexpected attribute `stray`"):
        jax.block_until_ready(
            call_frame((jnp.zeros(256, jnp.float32), alpha), [y], mpmd_kernel=kernel_id, stray=np.int64(1))
        )
    (good,) = call_frame((jnp.ones(256, jnp.float32), alpha), [y], mpmd_kernel=kernel_id)
    assert (good == 3.0).all()
    # A deleted registration is gone from the handler's registry.
    stale = registered.id
    del registered
    gc.collect()
    with pytest.raises(Exception, match=rf"kernel {stale} is not registered"):
        jax.block_until_ready(call_frame((jnp.ones(256, jnp.float32), alpha), [y], mpmd_kernel=np.int64(stale)))


def test_synchronize_without_gpu_work_returns():
    mpmd.jax.synchronize()
