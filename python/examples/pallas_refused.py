"""The program Mosaic GPU refuses ("Lowering multiple mesh/function pairs is not
supported by the Mosaic GPU backend"), written in Pallas, run by mpmd under
jax.jit on the CPU: the README's Python example (a test keeps the two equal).
"""
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
import mpmd.pallas as mp

producer = mp.Mesh(grid=(4,), grid_names=("p",))   # was plgpu.Mesh
consumer = mp.Mesh(grid=(2,), grid_names=("c",))

def produce(x_ref, y_ref, buf, ready):
    p = lax.axis_index("p")
    buf[pl.ds(p * 64, 64)] = x_ref[pl.ds(p * 64, 64)] * 3.0
    pl.semaphore_signal(ready.at[p // 2], 1)

def consume(x_ref, y_ref, buf, ready):
    c = lax.axis_index("c")
    pl.semaphore_wait(ready.at[c], 2)
    y_ref[pl.ds(c * 128, 128)] = buf[pl.ds(c * 128, 128)] + 1.0

step = mp.mpmd_map(
    [(producer, produce), (consumer, consume)],
    out_types=jax.ShapeDtypeStruct((256,), jnp.float32),
    scratch_types=[mp.gmem_scratch((256,), jnp.float32, producer), mp.semaphores((2,), consumer)],
)
x = jnp.linspace(-1.0, 1.0, 256, dtype=jnp.float32)
assert (jax.jit(step)(x) == x * 3.0 + 1.0).all()
print("ok: y == 3x + 1")
