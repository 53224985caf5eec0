"""mpmd maps as JAX functions.

``kernel(module, map_name)`` returns a function of ``jax.Array`` s that
works eagerly and inside ``jax.jit``. It runs on the host: through
``jax.pure_callback`` for a map that binds no device-resident ref, and
through ``jax.experimental.io_callback(ordered=True)`` for one that does,
so that XLA neither drops, duplicates nor reorders calls whose effects a
later call reads (a hand-off through residents). Under ``jax.vmap`` a map
without residents runs once per batch element. The backend is the
interpreter unless one is given; residents stay with that backend object.

Not here yet: the GPU path through an XLA FFI custom call (``jax.ffi``)
that runs the CUDA backend on XLA's stream and buffers without a host copy.
On a GPU platform this function still works, through the same host
callbacks (each call copies its arrays to the host and back).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from . import DTYPES, Backend, Interpreter, Module

__all__ = ["kernel"]


def _shape_text(shape) -> str:
    return str(tuple(int(d) for d in shape))


def kernel(
    module: Module, map_name: str, backend: Optional[Backend] = None
) -> Callable[..., Dict[str, Any]]:
    """A JAX function running one call of ``map_name`` of ``module``.

    The function takes the map's uploaded inputs (positionally in the map's
    order, or by name) and its scalars (by name, or positionally after the
    inputs; Python numbers or 0-d arrays, traced values included) and
    returns ``{output: jax.Array}`` with the output shapes and dtypes of the
    map. Inputs must have exactly the input's dtype and shape; a mismatch
    is a ValueError when the function is traced. A failure of the call
    (a race in checked mode, a deadlock) raises the mpmd exception eagerly;
    under ``jax.jit`` JAX reports it as its runtime error carrying the same
    message.
    """
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback

    backend = Interpreter() if backend is None else backend
    inputs = module.inputs(map_name)
    scalars = module.scalars(map_name)
    parameters = [name for name, _, _ in inputs] + [name for name, _ in scalars]
    scalar_names = {name for name, _ in scalars}
    result_shapes = {
        name: jax.ShapeDtypeStruct(tuple(shape), DTYPES[dtype])
        for name, dtype, shape in module.outputs(map_name)
    }
    stateful = module.binds_residents(map_name)

    def on_host(*values):
        arguments = {}
        for name, value in zip(parameters, values):
            arguments[name] = np.asarray(value).item() if name in scalar_names else np.asarray(value)
        outputs = backend.call(module, map_name, **arguments)
        return {name: outputs[name] for name in result_shapes}

    def call(*args: Any, **kwargs: Any) -> Dict[str, Any]:
        if len(args) > len(parameters):
            raise TypeError(
                f"map `{map_name}` takes {len(parameters)} arguments "
                f"({', '.join(parameters) or 'none'}); {len(args)} were given"
            )
        bound = dict(zip(parameters, args))
        for name, value in kwargs.items():
            if name not in parameters:
                raise TypeError(
                    f"map `{map_name}` has no input or scalar named `{name}` "
                    f"(parameters: {', '.join(parameters) or 'none'})"
                )
            if name in bound:
                raise TypeError(f"map `{map_name}`: `{name}` is given twice")
            bound[name] = value
        missing = [name for name in parameters if name not in bound]
        if missing:
            raise TypeError(f"a call of map `{map_name}` needs {', '.join(missing)}")
        values = []
        for name, dtype, shape in inputs:
            value = bound[name]
            given_dtype = getattr(value, "dtype", None)
            given_dtype = np.asarray(value).dtype if given_dtype is None else np.dtype(given_dtype)
            given_shape = tuple(np.shape(value))
            if given_dtype != DTYPES[dtype] or given_shape != tuple(shape):
                raise ValueError(
                    f"input `{name}` of map `{map_name}` expects {dtype} of shape "
                    f"{_shape_text(shape)}; given {given_dtype.name} of shape "
                    f"{_shape_text(given_shape)}"
                )
            values.append(jnp.asarray(value))
        for name, dtype in scalars:
            values.append(jnp.asarray(bound[name], dtype=DTYPES[dtype]))
        if stateful:
            return io_callback(on_host, result_shapes, *values, ordered=True)
        return jax.pure_callback(on_host, result_shapes, *values, vmap_method="sequential")

    call.__name__ = map_name
    call.__qualname__ = map_name
    call.__doc__ = (
        f"Runs map `{map_name}` of {module!r} on {backend!r}: "
        f"parameters {', '.join(parameters) or 'none'}; "
        f"returns {{{', '.join(result_shapes)}}}."
    )
    return call
