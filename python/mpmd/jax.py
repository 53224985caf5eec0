"""mpmd maps as JAX functions.

``kernel(module, map_name)`` returns a function of ``jax.Array`` s that
works eagerly and inside ``jax.jit``.

A map that binds no device-resident ref runs as an XLA FFI custom call
(``jax.ffi.ffi_call``) whose handler is in mpmd's Rust extension:

- on a CUDA GPU, the CUDA backend on XLA's own stream with XLA's buffers:
  no host copy and no synchronisation (the map is compiled once per
  stream). An error a kernel records there (a wait that timed out, an
  out-of-bounds access in checked mode) is reported by the next mpmd call
  on that stream or by :func:`synchronize`;
- on the CPU, the given backend (default: the interpreter) on XLA's host
  buffers.

A map that binds residents runs through
``jax.experimental.io_callback(ordered=True)`` on the given backend, so
that XLA neither drops, duplicates nor reorders calls whose effects a
later call reads (a hand-off through residents); each call copies its
arrays to the host and back. Without ``jax.ffi`` (older jax) every map
runs through host callbacks (``jax.pure_callback`` for the others).

Scalars known when the function is traced (Python numbers) are attributes
of the call on a GPU; traced scalars are operands, which the CUDA handler
reads back from the device (a synchronisation of the stream per call).
Under ``jax.vmap`` the map runs once per batch element.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import DTYPES, Backend, Cuda, Interpreter, Module, _mpmd, _preload_nvrtc

__all__ = ["kernel", "synchronize"]

#: The custom call target the handlers are registered under.
FFI_TARGET = "mpmd_kernel"

# Whether the handlers are registered (None: not tried yet).
_ffi_registered: Optional[bool] = None

# Scalars known at trace time as call attributes (None: on a GPU only,
# where an operand would cost a device-to-host copy; tests set it).
_scalars_as_attributes: Optional[bool] = None


def _shape_text(shape) -> str:
    return str(tuple(int(d) for d in shape))


def _ffi_api_version(include_dir: str) -> Tuple[int, int]:
    """The XLA FFI API version of the installed jaxlib, from its
    ``xla/ffi/api/c_api.h`` (XLA accepts a handler only when it reports
    exactly this version)."""
    with open(os.path.join(include_dir, "xla", "ffi", "api", "c_api.h"), encoding="utf-8") as header:
        text = header.read()
    major = re.search(r"#define\s+XLA_FFI_API_MAJOR\s+(\d+)", text)
    minor = re.search(r"#define\s+XLA_FFI_API_MINOR\s+(\d+)", text)
    if major is None or minor is None:
        raise RuntimeError("c_api.h names no XLA_FFI_API_MAJOR/MINOR")
    return int(major.group(1)), int(minor.group(1))


def _register_ffi() -> bool:
    """Registers the CPU and CUDA handlers with XLA once; False when this
    jax has no FFI (then maps run through host callbacks)."""
    global _ffi_registered
    if _ffi_registered is not None:
        return _ffi_registered
    _ffi_registered = False
    if os.environ.get("MPMD_JAX_CALLBACKS") == "1":
        return False
    try:
        import jax.ffi

        version = _ffi_api_version(jax.ffi.include_dir())
    except (ImportError, AttributeError, OSError, RuntimeError):
        return False
    jax.ffi.register_ffi_target(FFI_TARGET, _mpmd.ffi_handler("cpu", *version), platform="cpu")
    _preload_nvrtc()
    try:
        jax.ffi.register_ffi_target(
            FFI_TARGET, _mpmd.ffi_handler("cuda", *version), platform="CUDA"
        )
    except Exception:  # noqa: BLE001: a jax without CUDA support
        pass
    _ffi_registered = True
    return True


#: How many FFI registrations are kept (least recently used first out).
REGISTRATION_BOUND = 256

# Registrations by what they run: (module text, map, backend, CUDA flag) ->
# (registration, backend). A compiled executable calls its registration for
# as long as it lives, long after the function that made it is gone (Pallas
# users build kernels inside jitted functions), so registrations are kept
# here, one per distinct map and backend, not by the function.
_registrations: "OrderedDict[Tuple[str, str, int, bool], Tuple[Any, Backend]]" = OrderedDict()
_registrations_lock = threading.Lock()
# The backend of kernels made without one (their maps bind no residents,
# so one interpreter serves them all).
_default_backend: Optional[Backend] = None


def _registration(module: Module, map_name: str, backend: Backend, cuda: bool):
    """The FFI registration running ``map_name`` of ``module`` on ``backend``:
    the one made before for the same map, backend and flag, else a new one."""
    key = (module.text(), map_name, id(backend), cuda)
    with _registrations_lock:
        entry = _registrations.get(key)
        if entry is not None:
            _registrations.move_to_end(key)
            return entry[0]
        registered = _mpmd.ffi_kernel(module, map_name, backend._raw, cuda)
        # The entry holds the backend, so its id cannot be reused while the
        # key names it.
        _registrations[key] = (registered, backend)
        while len(_registrations) > REGISTRATION_BOUND:
            _registrations.popitem(last=False)
        return registered


def synchronize() -> None:
    """Waits for every XLA stream mpmd kernels ran on (GPU) and raises the
    first error a kernel recorded there as its mpmd exception."""
    _mpmd.ffi_synchronize()


def _device_dtype(dtype: str) -> np.dtype:
    """The dtype an operand of element type ``dtype`` has in an FFI call:
    its own, but ``uint32`` for ``bool`` (mpmd's bools are 32-bit words)."""
    return np.dtype(np.uint32) if dtype == "bool" else DTYPES[dtype]


def _scalar_bits(value: Any, dtype: str) -> np.uint32:
    """The bits a scalar of element type ``dtype`` travels as (a 16-bit
    float's in the low half)."""
    array = np.asarray(value, dtype=DTYPES[dtype])
    if dtype == "bool":
        return np.uint32(bool(array))
    if array.dtype.itemsize == 2:
        return np.uint32(array.view(np.uint16))
    return array.view(np.uint32)[()]


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
    (a race in checked mode, a deadlock) raises the mpmd exception eagerly
    through host callbacks, and JAX's runtime error carrying the same
    message through the FFI call.

    ``backend`` runs the map on the CPU (default: a new interpreter) and
    holds the residents a map binds; on a GPU the CUDA backend runs it on
    XLA's buffers (in ``backend``'s mode when it is a :class:`mpmd.Cuda`),
    except for a map that binds residents, which runs on ``backend``.
    """
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback

    global _default_backend
    default_backend = backend is None
    if backend is None:
        if _default_backend is None:
            _default_backend = Interpreter()
        backend = _default_backend if not module.binds_residents(map_name) else Interpreter()
    inputs = module.inputs(map_name)
    scalars = module.scalars(map_name)
    parameters = [name for name, _, _ in inputs] + [name for name, _ in scalars]
    result_shapes = {
        name: jax.ShapeDtypeStruct(tuple(shape), DTYPES[dtype])
        for name, dtype, shape in module.outputs(map_name)
    }
    output_dtypes = {name: dtype for name, dtype, _ in module.outputs(map_name)}
    stateful = module.binds_residents(map_name)
    use_ffi = not stateful and _register_ffi()

    if use_ffi:
        registered = _registration(
            module, map_name, backend, default_backend or isinstance(backend, Cuda)
        )
        ffi_shapes = [
            jax.ShapeDtypeStruct(shape.shape, _device_dtype(output_dtypes[name]))
            for name, shape in result_shapes.items()
        ]
        input_index = {name: k for k, (name, _, _) in enumerate(inputs)}
        output_index = {name: k for k, name in enumerate(result_shapes)}
        aliases = {
            input_index[i]: output_index[o]
            for i, o in module.aliases(map_name)
            if i in input_index and o in output_index
        }
        as_attributes = (
            jax.default_backend() != "cpu"
            if _scalars_as_attributes is None
            else _scalars_as_attributes
        )

    def on_host(*values):
        arguments = {}
        for name, value in zip(parameters, values):
            arguments[name] = (
                np.asarray(value).item()
                if name in {s for s, _ in scalars}
                else np.asarray(value)
            )
        outputs = backend.call(module, map_name, **arguments)
        return {name: outputs[name] for name in result_shapes}

    def through_ffi(values, bound):
        operands = [
            value.astype(jnp.uint32) if dtype == "bool" else value
            for value, (_, dtype, _) in zip(values, inputs)
        ]
        attributes = {"mpmd_kernel": np.int64(registered.id)}
        for name, dtype in scalars:
            value = bound[name]
            if as_attributes and not isinstance(value, jax.core.Tracer):
                attributes["scalar_" + name] = _scalar_bits(value, dtype)
            else:
                operands.append(jnp.asarray(value, dtype=DTYPES[dtype]).astype(_device_dtype(dtype)))
        results = jax.ffi.ffi_call(
            FFI_TARGET,
            ffi_shapes,
            vmap_method="sequential",
            input_output_aliases=aliases or None,
        )(*operands, **attributes)
        return {
            name: (result.astype(jnp.bool_) if output_dtypes[name] == "bool" else result)
            for name, result in zip(result_shapes, results)
        }

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
        if use_ffi:
            return through_ffi(values, bound)
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
    call._mpmd_ffi_kernel = registered if use_ffi else None  # type: ignore[attr-defined]
    return call
