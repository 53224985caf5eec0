"""Pallas programs lowered by mpmd.pallas run under jax.jit on the CUDA
backend, on XLA's stream and buffers, and equal their `jnp` references
(python/tests/pallas_programs.py; their CPU runs are python/tests/test_pallas.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


from pallas_programs import PROGRAMS  # noqa: E402 - after the path

import mpmd.pallas  # noqa: E402,F401 - registers the lowering


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_pallas_program_runs_on_cuda_under_jit(jax_gpu, name):
    program = PROGRAMS[name]()
    got = jax_gpu.tree_util.tree_leaves(jax_gpu.jit(program.fn)(*program.args))
    want = jax_gpu.tree_util.tree_leaves(program.reference(*program.args))
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        # GPU math functions and tensor cores round differently (docs/numerics.md).
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5)
