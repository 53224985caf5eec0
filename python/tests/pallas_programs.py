"""Pallas programs written as Pallas users write them (only the mesh class
is mpmd's), each with its inputs and a `jnp` reference.

Shared by tests/test_pallas.py (every program on every CPU backend under
jax.jit) and scripts/pallas_corpus.py (which writes their lowered `.mpmd`
into the conformance corpus, so the Rust side runs them on wgpu and
cuda-host without JAX).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Tuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import mpmd.pallas as mp

F32 = jnp.float32

#: Pallas's `interpret` argument of the single-mesh programs' `pl.kernel`
#: (tests set it to run them on Pallas's own GPU interpret mode: a second
#: oracle, written by other people).
INTERPRET: Any = False


@dataclasses.dataclass
class Program:
    name: str
    fn: Callable[..., Any]
    args: Tuple[Any, ...]
    reference: Callable[..., Any]
    #: Relative tolerance of float comparisons (0: exact).
    rtol: float = 0.0
    #: How the corpus case compares outputs (`exact`, `profile`, `ulp(n)`).
    compare: str = "exact"


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _uniform(shape, seed=0, dtype=np.float32, lo=-1.0, hi=1.0):
    return jnp.asarray(_rng(seed).uniform(lo, hi, size=shape).astype(dtype))


def _quarters(shape, seed=0, dtype=np.float32):
    # Multiples of 1/4 in [-2, 2]: products and sums are exact in f32.
    return jnp.asarray((_rng(seed).integers(-8, 9, size=shape) / 4.0).astype(dtype))


gmem_scratch = mp.gmem_scratch
smem_scratch = mp.smem_scratch
semaphores = mp.semaphores


# ------------------------------------------------------- single mesh


def elementwise() -> Program:
    mesh = mp.Mesh(grid=(8,), grid_names=("b",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((1024,), F32), mesh=mesh, interpret=INTERPRET)
    def axpb(x_ref, y_ref):
        b = lax.axis_index("b")
        tile = pl.ds(b * 128, 128)
        y_ref[tile] = 2.0 * x_ref[tile] + 1.0

    return Program("elementwise", axpb, (_uniform(1024),), lambda x: 2.0 * x + 1.0)


def elementwise_math() -> Program:
    mesh = mp.Mesh(grid=(2,), grid_names=("b",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((2, 256), F32), mesh=mesh, interpret=INTERPRET)
    def math_kernel(x_ref, y_ref):
        b = lax.axis_index("b")
        x = x_ref[b]
        y_ref[b, :] = jnp.where(x > 0.0, jnp.exp(x) * jnp.tanh(x), jnp.abs(x) + jnp.sqrt(x * x + 1.0))

    ref = lambda x: jnp.where(x > 0.0, jnp.exp(x) * jnp.tanh(x), jnp.abs(x) + jnp.sqrt(x * x + 1.0))
    return Program(
        "elementwise_math", math_kernel, (_uniform((2, 256), 1),), ref, rtol=2e-6, compare="profile"
    )


def integer_ops() -> Program:
    mesh = mp.Mesh(grid=(2,), grid_names=("b",))

    @pl.kernel(
        out_type=(jax.ShapeDtypeStruct((256,), jnp.int32), jax.ShapeDtypeStruct((256,), jnp.uint32)),
        mesh=mesh,
        interpret=INTERPRET,
    )
    def int_kernel(a_ref, i_ref, u_ref):
        b = lax.axis_index("b")
        tile = pl.ds(b * 128, 128)
        a = a_ref[tile]
        i_ref[tile] = jnp.where(a % 3 == 0, a // 3, a * 7 - (a >> 1))
        u_ref[tile] = (a.astype(jnp.uint32) ^ jnp.uint32(0x5A5A)) & jnp.uint32(0xFFFF)

    a = jnp.asarray(_rng(2).integers(-1000, 1000, size=256).astype(np.int32))
    ref = lambda a: (
        jnp.where(a % 3 == 0, a // 3, a * 7 - (a >> 1)),
        (a.astype(jnp.uint32) ^ jnp.uint32(0x5A5A)) & jnp.uint32(0xFFFF),
    )
    return Program("integer_ops", int_kernel, (a,), ref)


def block_reduction() -> Program:
    mesh = mp.Mesh(grid=(4,), grid_names=("b",))

    @pl.kernel(
        out_type=(jax.ShapeDtypeStruct((4,), F32), jax.ShapeDtypeStruct((4,), F32)),
        mesh=mesh,
        interpret=INTERPRET,
    )
    def reduce_kernel(x_ref, sum_ref, max_ref):
        b = lax.axis_index("b")
        x = x_ref[pl.ds(b * 512, 512)]
        sum_ref[b] = jnp.sum(x)
        max_ref[b] = jnp.max(x)

    x = _quarters(2048, 3)
    ref = lambda x: (x.reshape(4, 512).sum(axis=1), x.reshape(4, 512).max(axis=1))
    return Program("block_reduction", reduce_kernel, (x,), ref)


def row_reductions() -> Program:
    mesh = mp.Mesh(grid=(2,), grid_names=("b",))

    @pl.kernel(
        out_type=(jax.ShapeDtypeStruct((2, 16), F32), jax.ShapeDtypeStruct((2, 32), F32)),
        mesh=mesh,
        interpret=INTERPRET,
    )
    def rows_kernel(x_ref, rows_ref, cols_ref):
        b = lax.axis_index("b")
        x = x_ref[b]
        rows_ref[b, :] = jnp.min(x, axis=1)
        cols_ref[b, :] = jnp.sum(x, axis=0)

    x = _quarters((2, 16, 32), 4)
    ref = lambda x: (x.min(axis=2), x.sum(axis=1))
    return Program("row_reductions", rows_kernel, (x,), ref)


def softmax() -> Program:
    mesh = mp.Mesh(grid=(4,), grid_names=("row",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((4, 128), F32), mesh=mesh, interpret=INTERPRET)
    def softmax_kernel(x_ref, y_ref):
        r = lax.axis_index("row")
        x = x_ref[r]
        e = jnp.exp(x - jnp.max(x))
        y_ref[r, :] = e / jnp.sum(e)

    x = _uniform((4, 128), 5, lo=-4.0, hi=4.0)
    return Program(
        "softmax", softmax_kernel, (x,), lambda x: jax.nn.softmax(x, axis=-1), rtol=1e-5, compare="profile"
    )


def matmul_tile() -> Program:
    mesh = mp.Mesh(grid=(2, 2), grid_names=("i", "j"))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((64, 64), F32), mesh=mesh, interpret=INTERPRET)
    def matmul_kernel(a_ref, b_ref, c_ref):
        i = lax.axis_index("i")
        j = lax.axis_index("j")
        a = a_ref[pl.ds(i * 32, 32), :]
        b = b_ref[:, pl.ds(j * 32, 32)]
        c_ref[pl.ds(i * 32, 32), pl.ds(j * 32, 32)] = jnp.dot(a, b)

    a, b = _quarters((64, 48), 6), _quarters((48, 64), 7)
    return Program("matmul_tile", matmul_kernel, (a, b), lambda a, b: a @ b)


def matmul_bf16() -> Program:
    mesh = mp.Mesh(grid=(2,), grid_names=("i",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((32, 16), F32), mesh=mesh, interpret=INTERPRET)
    def bf16_kernel(a_ref, b_ref, c_ref):
        i = lax.axis_index("i")
        a = a_ref[pl.ds(i * 16, 16), :]
        c_ref[pl.ds(i * 16, 16), :] = jnp.dot(a, b_ref[...], preferred_element_type=jnp.float32)

    bf16 = ml_dtypes.bfloat16
    a, b = _quarters((32, 32), 8, bf16), _quarters((32, 16), 9, bf16)
    ref = lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32)
    return Program("matmul_bf16", bf16_kernel, (a, b), ref, compare="mma")


def wgmma_tile() -> Program:
    """plgpu.wgmma into a run_scoped accumulator, twice (two K halves)."""
    mesh = mp.Mesh(grid=(2,), grid_names=("b",))

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((2, 64, 32), F32),
        mesh=mesh,
        scratch_types=[plgpu.SMEM((64, 64), jnp.float16), plgpu.SMEM((64, 32), jnp.float16)],
        interpret=INTERPRET,
    )
    def wgmma_kernel(a_ref, b_ref, c_ref, a_smem, b_smem):
        blk = lax.axis_index("b")
        a_smem[...] = a_ref[blk]
        b_smem[...] = b_ref[...]

        def scope(acc_ref):
            plgpu.wgmma(acc_ref, a_smem.at[:, pl.ds(0, 32)], b_smem.at[pl.ds(0, 32), :])
            plgpu.wgmma(acc_ref, a_smem.at[:, pl.ds(32, 32)], b_smem.at[pl.ds(32, 32), :])
            plgpu.wgmma_wait(0)
            c_ref[blk] = acc_ref[...]

        pl.run_scoped(scope, plgpu.ACC((64, 32), F32))

    a, b = _quarters((2, 64, 64), 22, np.float16), _quarters((64, 32), 23, np.float16)
    ref = lambda a, b: jnp.einsum("bik,kj->bij", a.astype(F32), b.astype(F32))
    return Program("wgmma_tile", wgmma_kernel, (a, b), ref, compare="mma")


def copy_pipeline() -> Program:
    mesh = mp.Mesh(grid=(4,), grid_names=("b",))

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((512,), F32),
        mesh=mesh,
        scratch_types=[plgpu.SMEM((128,), F32), plgpu.SMEM((128,), F32), plgpu.Barrier()],
        interpret=INTERPRET,
    )
    def pipeline_kernel(x_ref, y_ref, in_smem, out_smem, barrier):
        b = lax.axis_index("b")
        tile = pl.ds(b * 128, 128)
        plgpu.copy_gmem_to_smem(x_ref.at[tile], in_smem, barrier)
        plgpu.barrier_wait(barrier)
        out_smem[...] = in_smem[...] * in_smem[...]
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(out_smem, y_ref.at[tile])
        plgpu.wait_smem_to_gmem(0)

    return Program("copy_pipeline", pipeline_kernel, (_uniform(512, 10),), lambda x: x * x)


def fori_accumulate() -> Program:
    mesh = mp.Mesh(grid=(2,), grid_names=("b",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((2, 64), F32), mesh=mesh, interpret=INTERPRET)
    def loop_kernel(x_ref, y_ref):
        b = lax.axis_index("b")

        def step(k, acc):
            return acc + x_ref[b, pl.ds(k * 64, 64)] * (k + 1).astype(F32)

        y_ref[b, :] = lax.fori_loop(0, 4, step, jnp.zeros((64,), F32))

        @pl.when(b == 1)
        def _():
            y_ref[b, 0] = -1.0

    x = _quarters((2, 256), 11)

    def ref(x):
        y = sum(x[:, k * 64 : (k + 1) * 64] * (k + 1) for k in range(4))
        return y.at[1, 0].set(-1.0)

    return Program("fori_accumulate", loop_kernel, (x,), ref)


def while_loop_count() -> Program:
    mesh = mp.Mesh(grid=(4,), grid_names=("b",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((4,), jnp.int32), mesh=mesh, interpret=INTERPRET)
    def collatz_kernel(n_ref, steps_ref):
        b = lax.axis_index("b")

        def cond(state):
            return state[0] > 1

        def body(state):
            n, k = state
            return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1

        _, steps = lax.while_loop(cond, body, (b + 6, jnp.int32(0)))
        steps_ref[b] = steps

    def ref(n):
        out = []
        for start in range(6, 10):
            k, v = 0, start
            while v > 1:
                v = v // 2 if v % 2 == 0 else 3 * v + 1
                k += 1
            out.append(k)
        return jnp.asarray(out, jnp.int32)

    return Program("while_loop_count", collatz_kernel, (jnp.zeros(4, jnp.int32),), ref)


def atomics_histogram() -> Program:
    mesh = mp.Mesh(grid=(4,), grid_names=("b",))

    def hist(x, counts0):
        counts = jax.new_ref(counts0)

        @pl.kernel(mesh=mesh)
        def hist_kernel(x_ref, counts_ref):
            b = lax.axis_index("b")
            plgpu.atomic_add(counts_ref.at[pl.ds(0, 128)], x_ref[pl.ds(b * 128, 128)])

        hist_kernel(x, counts)
        return counts[...]

    x = jnp.asarray(_rng(12).integers(0, 5, size=512).astype(np.int32))
    return Program(
        "atomics_histogram",
        hist,
        (x, jnp.zeros(128, jnp.int32)),
        lambda x, c: c + x.reshape(4, 128).sum(axis=0),
    )


# -------------------------------------------------------- several meshes


def producer_consumer() -> Program:
    producer = mp.Mesh(grid=(4,), grid_names=("p",))
    consumer = mp.Mesh(grid=(2,), grid_names=("c",))

    def produce(x_ref, y_ref, buf, ready):
        p = lax.axis_index("p")
        tile = pl.ds(p * 64, 64)
        buf[tile] = x_ref[tile] * 3.0
        pl.semaphore_signal(ready.at[p // 2], 1)

    def consume(x_ref, y_ref, buf, ready):
        c = lax.axis_index("c")
        pl.semaphore_wait(ready.at[c], 2)
        tile = pl.ds(c * 128, 128)
        y_ref[tile] = buf[tile] + 1.0

    fn = mp.mpmd_map(
        [(producer, produce), (consumer, consume)],
        out_types=jax.ShapeDtypeStruct((256,), F32),
        scratch_types=[gmem_scratch((256,), F32, producer), semaphores((2,), consumer)],
    )
    return Program("producer_consumer", fn, (_uniform(256, 13),), lambda x: x * 3.0 + 1.0)


def chained_scan() -> Program:
    """An inclusive prefix sum across blocks: block b adds its tile's sum to
    the carry block b-1 hands it through GMEM scratch and a semaphore."""
    first = mp.Mesh(grid=(1,), grid_names=("f",))
    rest = mp.Mesh(grid=(3,), grid_names=("r",))

    def head(x_ref, y_ref, carry_ref, sems):
        tile = pl.ds(0, 64)
        y_ref[tile] = x_ref[tile]
        carry_ref[0] = jnp.sum(x_ref[tile])
        pl.semaphore_signal(sems.at[0], 1)

    def tail(x_ref, y_ref, carry_ref, sems):
        r = lax.axis_index("r")
        b = r + 1
        pl.semaphore_wait(sems.at[r], 1)
        incoming = carry_ref[r]
        tile = pl.ds(b * 64, 64)
        x = x_ref[tile]
        y_ref[tile] = x + incoming
        carry_ref[b] = incoming + jnp.sum(x)

        @pl.when(b < 3)
        def _():
            pl.semaphore_signal(sems.at[b], 1)

    fn = mp.mpmd_map(
        [(first, head), (rest, tail)],
        out_types=jax.ShapeDtypeStruct((256,), F32),
        scratch_types=[gmem_scratch((4,), F32, first), semaphores((4,), rest)],
    )
    x = _quarters(256, 14)

    def ref(x):
        tiles = x.reshape(4, 64)
        offsets = jnp.concatenate([jnp.zeros(1, F32), jnp.cumsum(tiles.sum(axis=1))[:-1]])
        return (tiles + offsets[:, None]).reshape(-1)

    return Program("chained_scan", fn, (x,), ref)


def stream_k_fixup() -> Program:
    """Two meshes split a K-deep dot: `partial` blocks multiply the first half
    of K into GMEM scratch and signal; `owner` blocks multiply the second
    half, wait, and add the partial (a stream-K fix-up)."""
    partial_mesh = mp.Mesh(grid=(2,), grid_names=("ps",))
    owner_mesh = mp.Mesh(grid=(2,), grid_names=("os",))

    def partial(a_ref, b_ref, c_ref, partials, flags):
        t = lax.axis_index("ps")
        rows = pl.ds(t * 16, 16)
        partials[rows, :] = jnp.dot(a_ref[rows, pl.ds(0, 32)], b_ref[pl.ds(0, 32), :])
        pl.semaphore_signal(flags.at[t], 1)

    def owner(a_ref, b_ref, c_ref, partials, flags):
        t = lax.axis_index("os")
        rows = pl.ds(t * 16, 16)
        mine = jnp.dot(a_ref[rows, pl.ds(32, 32)], b_ref[pl.ds(32, 32), :])
        pl.semaphore_wait(flags.at[t], 1)
        c_ref[rows, :] = partials[rows, :] + mine

    fn = mp.mpmd_map(
        [(partial_mesh, partial), (owner_mesh, owner)],
        out_types=jax.ShapeDtypeStruct((32, 16), F32),
        scratch_types=[gmem_scratch((32, 16), F32, partial_mesh), semaphores((2,), owner_mesh)],
    )
    a, b = _quarters((32, 64), 15), _quarters((64, 16), 16)
    return Program("stream_k_fixup", fn, (a, b), lambda a, b: a @ b)


def scratch_operands() -> Program:
    """SMEM scratch owned by one of two meshes (Mosaic GPU: "Scratch operands
    are not supported by the Mosaic GPU mpmd_map lowering")."""
    left = mp.Mesh(grid=(2,), grid_names=("l",))
    right = mp.Mesh(grid=(2,), grid_names=("r",))

    def stage_left(x_ref, y_ref, z_ref, tile):
        l = lax.axis_index("l")
        tile[...] = x_ref[pl.ds(l * 64, 64)] * 2.0
        y_ref[pl.ds(l * 64, 64)] = tile[...] + 1.0

    def stage_right(x_ref, y_ref, z_ref, tile):
        r = lax.axis_index("r")
        z_ref[pl.ds(r * 64, 64)] = -x_ref[pl.ds(r * 64, 64)]

    fn = mp.mpmd_map(
        [(left, stage_left), (right, stage_right)],
        out_types=(jax.ShapeDtypeStruct((128,), F32), jax.ShapeDtypeStruct((128,), F32)),
        scratch_types=[smem_scratch((64,), F32, left)],
    )
    return Program("scratch_operands", fn, (_quarters(128, 17),), lambda x: (x * 2.0 + 1.0, -x))


def external_mesh_handoff() -> Program:
    """Call 1: a producer fills `hand`, a buffer of the external mesh `ext`
    (which runs no program in that call), through a Ref written in place.
    Call 2: `ext` runs and consumes it."""
    producer = mp.Mesh(grid=(2,), grid_names=("p",))
    ext = mp.Mesh(grid=(2,), grid_names=("e",))

    def produce(x_ref, hand_ref, staging):
        p = lax.axis_index("p")
        tile = pl.ds(p * 64, 64)
        staging[tile] = x_ref[tile] + 0.5
        hand_ref[tile] = staging[tile] * 2.0

    send = mp.mpmd_map([(producer, produce)], scratch_types=[gmem_scratch((128,), F32, ext)])

    def consume(hand_ref, z_ref):
        e = lax.axis_index("e")
        tile = pl.ds(e * 64, 64)
        z_ref[tile] = hand_ref[tile] - 1.0

    receive = mp.mpmd_map([(ext, consume)], out_types=jax.ShapeDtypeStruct((128,), F32))

    def both(x):
        hand = jax.new_ref(jnp.zeros(128, F32))
        send(x, hand)
        return receive(hand[...])

    return Program("external_mesh_handoff", both, (_quarters(128, 18),), lambda x: (x + 0.5) * 2.0 - 1.0)


def dtypes_and_updates() -> Program:
    """f16 arithmetic, a bool mask, integer indices, `+=` on an output and
    SMEM scratch."""
    mesh = mp.Mesh(grid=(2,), grid_names=("b",))

    @pl.kernel(
        out_type=(
            jax.ShapeDtypeStruct((2, 64), jnp.float16),
            jax.ShapeDtypeStruct((2, 64), jnp.bool_),
            jax.ShapeDtypeStruct((2, 64), jnp.uint32),
        ),
        mesh=mesh,
        scratch_types=[plgpu.SMEM((64,), jnp.float16)],
        interpret=INTERPRET,
    )
    def mixed_kernel(h_ref, u_ref, h_out, mask_out, u_out, tile):
        b = lax.axis_index("b")
        tile[...] = h_ref[b, :] * jnp.float16(1.5)
        h_out[b, :] = tile[...] + jnp.float16(0.25)
        mask_out[b, :] = tile[...] > jnp.float16(0.0)
        u_out[b, :] = u_ref[b, :]
        u_out[b, :] += jnp.uint32(7)
        u_out[b, 0] = u_ref[b, 63]

    h = _quarters((2, 64), 19, np.float16)
    u = jnp.asarray(_rng(20).integers(0, 1000, size=(2, 64)).astype(np.uint32))

    def ref(h, u):
        t = h * jnp.float16(1.5)
        return t + jnp.float16(0.25), t > 0, (u + 7).at[:, 0].set(u[:, 63])

    return Program("dtypes_and_updates", mixed_kernel, (h, u), ref)


def scan_switch_scoped() -> Program:
    """lax.scan with stacked outputs, lax.switch, a closed-over scalar and
    run_scoped scratch."""
    mesh = mp.Mesh(grid=(3,), grid_names=("b",))
    scale = 0.5

    @pl.kernel(out_type=jax.ShapeDtypeStruct((3, 4, 32), F32), mesh=mesh, interpret=INTERPRET)
    def scan_kernel(x_ref, y_ref):
        b = lax.axis_index("b")

        def body(carry, row):
            new = carry + row * scale
            return new, new

        _, ys = lax.scan(body, jnp.zeros((32,), F32), x_ref[b])

        def scoped(buf):
            buf[...] = lax.switch(b, [lambda v: v, lambda v: v * 2.0, lambda v: -v], ys)
            y_ref[b] = buf[...]

        pl.run_scoped(scoped, plgpu.SMEM((4, 32), F32))

    x = _quarters((3, 4, 32), 21)

    def ref(x):
        ys = jnp.cumsum(x * 0.5, axis=1)
        return ys * jnp.asarray([1.0, 2.0, -1.0], F32)[:, None, None]

    return Program("scan_switch_scoped", scan_kernel, (x,), ref)


def axis_sizes() -> Program:
    """lax.axis_size of the program's own mesh and of the other mesh."""
    left = mp.Mesh(grid=(2,), grid_names=("l",))
    right = mp.Mesh(grid=(3,), grid_names=("r",))

    def on_left(o_ref):
        l = lax.axis_index("l")
        o_ref[l] = jnp.int32(lax.axis_size("l") * 10 + lax.axis_size("r"))

    def on_right(o_ref):
        r = lax.axis_index("r")
        o_ref[2 + r] = lax.axis_size("r") * 100 + r

    fn = mp.mpmd_map([(left, on_left), (right, on_right)], out_types=jax.ShapeDtypeStruct((5,), jnp.int32))
    return Program("axis_sizes", fn, (), lambda: jnp.asarray([23, 23, 300, 301, 302], jnp.int32))


def kernel_list_atomics() -> Program:
    """`pl.kernel(body=[f, g], mesh=[m1, m2])`: `iota`, `plgpu.atomic_max` /
    `atomic_min` into a Ref, a `wait` without decrement and `semaphore_read`."""
    left = mp.Mesh(grid=(2,), grid_names=("l",))
    right = mp.Mesh(grid=(1,), grid_names=("r",))

    def bounds(x, hi0, lo0):
        hi, lo = jax.new_ref(hi0), jax.new_ref(lo0)

        def on_left(x_ref, hi_ref, lo_ref, counts_ref, done):
            l = lax.axis_index("l")
            v = x_ref[pl.ds(l * 64, 64)] + lax.iota(jnp.int32, 64)
            plgpu.atomic_max(hi_ref.at[pl.ds(0, 64)], v)
            plgpu.atomic_min(lo_ref.at[pl.ds(0, 64)], v)
            pl.semaphore_signal(done.at[0], 1)

        def on_right(x_ref, hi_ref, lo_ref, counts_ref, done):
            pl.semaphore_wait(done.at[0], 2, decrement=False)
            counts_ref[0] = pl.semaphore_read(done.at[0])

        k = pl.kernel(
            body=[on_left, on_right],
            mesh=[left, right],
            out_type=jax.ShapeDtypeStruct((1,), jnp.int32),
            scratch_types=[mp.semaphores((1,), right)],
        )
        counts = k(x, hi, lo)
        return counts, hi[...], lo[...]

    x = jnp.asarray(_rng(24).integers(-500, 500, size=128).astype(np.int32))
    start = (jnp.full(64, -(2**31), jnp.int32), jnp.full(64, 2**31 - 1, jnp.int32))

    def ref(x, hi0, lo0):
        v = x.reshape(2, 64) + jnp.arange(64, dtype=jnp.int32)
        return jnp.asarray([2], jnp.int32), jnp.maximum(hi0, v.max(axis=0)), jnp.minimum(lo0, v.min(axis=0))

    return Program("kernel_list_atomics", bounds, (x, *start), ref)


PROGRAMS: Dict[str, Callable[[], Program]] = {
    f.__name__: f
    for f in (
        elementwise,
        elementwise_math,
        integer_ops,
        block_reduction,
        row_reductions,
        softmax,
        matmul_tile,
        matmul_bf16,
        wgmma_tile,
        copy_pipeline,
        fori_accumulate,
        while_loop_count,
        atomics_histogram,
        producer_consumer,
        chained_scan,
        stream_k_fixup,
        scratch_operands,
        external_mesh_handoff,
        dtypes_and_updates,
        scan_switch_scoped,
        axis_sizes,
        kernel_list_atomics,
    )
}
