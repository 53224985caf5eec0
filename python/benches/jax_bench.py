"""JAX under jit on the GPU: the mpmd map `axpb` (y = x * alpha + 1,
python/benches/axpb.mpmd) through the XLA FFI custom call, against the same
operation in `jnp`, at 1 MiB and at 256 MiB of f32. Each is called back to
back (dispatches pipelined, one wait at the end), the two alternating in
rounds; the best round counts. Prints `bench.jax.*` lines and the goal at
1 MiB; scripts/gpu-check.sh compares the 256 MiB figure with the bare CUDA
backend's (`bench.embedding.bare_256mib` of cuda-bench).

    python python/benches/jax_bench.py
"""

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import mpmd
import mpmd.jax

HERE = Path(__file__).resolve().parent


def per_call(functions, x, calls, rounds):
    """Best seconds per call of each function (back to back, one wait a round)."""
    for f in functions:
        f(x).block_until_ready()
    best = [float("inf")] * len(functions)
    for _ in range(rounds):
        for k, f in enumerate(functions):
            start = time.perf_counter()
            for _ in range(calls):
                y = f(x)
            y.block_until_ready()
            best[k] = min(best[k], (time.perf_counter() - start) / calls)
    return best


def main():
    assert jax.default_backend() == "gpu", f"needs JAX on a GPU, not {jax.default_backend()}"
    module = mpmd.Module.from_file(HERE / "axpb.mpmd")
    status = 0
    for map_name, size, calls in (("axpb_1mib", 1 << 18, 2000), ("axpb_256mib", 1 << 26, 40)):
        kernel = mpmd.jax.kernel(module, map_name)
        with_mpmd = jax.jit(lambda x: kernel(x, alpha=2.0)["y"])
        with_jnp = jax.jit(lambda x: x * 2.0 + 1.0)
        x = (jnp.arange(size, dtype=jnp.float32) % 1000) * 0.5  # x * 2 + 1 is exact
        assert (with_mpmd(x) == with_jnp(x)).all(), f"{map_name}: mpmd and jnp differ"
        assert "mpmd_kernel" in with_mpmd.lower(x).as_text()
        mpmd_s, jnp_s = per_call([with_mpmd, with_jnp], x, calls, rounds=5)
        mpmd.jax.synchronize()
        if size == 1 << 18:
            ratio = mpmd_s / jnp_s
            print(f"bench.jax.axpb_1mib mpmd_us={mpmd_s * 1e6:.2f} jnp_us={jnp_s * 1e6:.2f} ratio={ratio:.3f}")
            met = ratio <= 1.5
            status |= 0 if met else 1
            print(f"goal.jax_1mib_vs_jnp figure={ratio:.3f} target=1.5 {'met' if met else 'NOT met'} (bench.jax.axpb_1mib)")
        else:
            gbps = 2 * size * 4 / mpmd_s / 1e9
            print(f"bench.jax.axpb_256mib mpmd_ms={mpmd_s * 1e3:.4f} jnp_ms={jnp_s * 1e3:.4f} mpmd_gbps={gbps:.1f}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
