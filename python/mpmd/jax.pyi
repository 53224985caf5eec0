from typing import Any, Callable, Dict, Optional

from . import Backend, Module

__all__: list

def kernel(module: Module, map_name: str, backend: Optional[Backend] = None) -> Callable[..., Dict[str, Any]]:
    """A JAX function (usable inside jax.jit) running one call of the map on
    `backend` (default: a new Interpreter) through host callbacks. The GPU
    path through an XLA FFI custom call is not implemented yet."""
