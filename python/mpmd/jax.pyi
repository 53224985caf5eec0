from typing import Any, Callable, Dict, Optional

from . import Backend, Module

__all__: list

def kernel(module: Module, map_name: str, backend: Optional[Backend] = None) -> Callable[..., Dict[str, Any]]:
    """A JAX function (usable inside jax.jit) running one call of the map:
    through an XLA FFI custom call (on a GPU the CUDA backend on XLA's
    stream and buffers; on the CPU `backend`, default a new Interpreter),
    or through ordered host callbacks when the map binds residents."""

def synchronize() -> None:
    """Waits for the XLA streams mpmd kernels ran on and raises the first
    error a kernel recorded there."""
