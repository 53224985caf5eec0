"""The program JAX's Mosaic GPU backend refuses, called from a jitted JAX
function: two (mesh, kernel) programs sharing scratch and semaphores, then
a second call handing data to an external mesh (mosaic_refuses.mpmd).

    python python/examples/mosaic_refuses.py
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import mpmd
import mpmd.jax

module = mpmd.Module.from_file(Path(__file__).with_name("mosaic_refuses.mpmd"))
backend = mpmd.Interpreter()  # or mpmd.Wgpu(); the residents live here
stage = mpmd.jax.kernel(module, "stage", backend)
finish = mpmd.jax.kernel(module, "finish", backend)


@jax.jit
def step(x, alpha):
    y = stage(x)["y"]  # call 1: producer and consumer; hands 2 * buf to `ext`
    z = finish(alpha=alpha)["z"]  # call 2: `ext` picks it up
    return y, z


x = jnp.linspace(-1.0, 1.0, 256, dtype=jnp.float32)
y, z = step(x, 0.5)
assert (y == x * 3.0 + 1.0).all()
assert (z == 0.5 * ((x * 3.0) * 2.0)).all()
print("y[:4] =", np.asarray(y[:4]), " z[:4] =", np.asarray(z[:4]), " (match jnp)")
