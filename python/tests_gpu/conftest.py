"""The Python package's tests that need an NVIDIA GPU with its driver, and
PyTorch and JAX with CUDA: `scripts/gpu-check.sh` runs them; `cargo xtask
pytest` does not collect this folder. Without a GPU they fail (never skip)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CASES = ROOT / "conformance" / "cases"
BENCHES = ROOT / "python" / "benches"


@pytest.fixture(scope="session")
def torch_cuda():
    import torch

    assert torch.cuda.is_available(), "these tests need a CUDA GPU that PyTorch sees"
    return torch


@pytest.fixture(scope="session")
def jax_gpu():
    import jax

    assert jax.default_backend() == "gpu", f"these tests need JAX on a CUDA GPU, not {jax.default_backend()}"
    return jax
