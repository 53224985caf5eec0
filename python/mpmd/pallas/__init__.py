"""Pallas programs on mpmd: the lowering of Pallas's ``mpmd_map``.

``import mpmd.pallas`` registers mpmd as the CPU and CUDA lowering of
``jax._src.pallas.mpmd.mpmd_map_p``, the primitive behind
``pl.kernel(body=[f, g], mesh=[m1, m2])`` and ``mpmd_map([(m1, f), (m2, g)])``:
the programs Mosaic GPU refuses (several meshes, external meshes, scratch
operands) and JAX's CPU fallback refuses too then run under ``jax.jit``.
Write meshes as :class:`Mesh` (a ``plgpu.Mesh`` that may be traced beside
other meshes); the rest of the program is Pallas's own.

On the CPU the map runs on :func:`backend`'s backend (default: the
interpreter); ``with mpmd.pallas.backend(mpmd.Interpreter(checked=True)):``
around the *first call* of a jitted function (when JAX lowers it) chooses
another. On a GPU it runs on the CUDA backend on XLA's stream.
:func:`to_module` returns the mpmd module a program lowers to. docs/pallas.md
is the manual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator, List, Optional


from . import _compat as jx
from ._compat import SUPPORTED_JAX, UnsupportedJaxError
from ._lower import Compiled, LoweringError, compile_map

from .. import Backend, Module, ValidationError

__all__ = [
    "Mesh",
    "mpmd_map",
    "gmem_scratch",
    "smem_scratch",
    "semaphores",
    "backend",
    "to_module",
    "to_modules",
    "LoweringError",
    "UnsupportedJaxError",
    "SUPPORTED_JAX",
]

#: Pallas's own ``mpmd_map`` (``jax._src.pallas.mpmd.mpmd_map``).
mpmd_map = jx.mpmd_map


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mesh(jx.plgpu.Mesh):
    """A Mosaic GPU mesh (``plgpu.Mesh``'s fields) that can be traced beside
    other meshes: ``plgpu.Mesh.check_is_compatible_with`` refuses every
    other mesh while tracing, before any lowering could run."""

    def check_is_compatible_with(self, other_mesh) -> None:
        if not isinstance(other_mesh, jx.plgpu.Mesh):
            raise TypeError(
                f"an mpmd.pallas.Mesh can share an mpmd_map with Mosaic GPU meshes only, not "
                f"{type(other_mesh).__name__}"
            )
        mine = dict(zip(self.grid_names, self.grid))
        for name, size in zip(other_mesh.grid_names, other_mesh.grid):
            if name in mine and mine[name] != size:
                raise ValueError(
                    f"axis `{name}` has size {mine[name]} in one mesh and {size} in another; "
                    "an axis name means one size in an mpmd_map"
                )


# ------------------------------------------------------ scratch types


def gmem_scratch(shape, dtype, mesh) -> Any:
    """A GMEM scratch operand owned by ``mesh`` (Pallas's
    ``MemoryRef(ShapedArray(shape, dtype), CoreMemorySpace(GMEM, mesh))``)."""
    return jx.MemoryRef(jx.jax.core.ShapedArray(tuple(shape), dtype), jx.CoreMemorySpace(jx.plgpu.GMEM, mesh))


def smem_scratch(shape, dtype, mesh) -> Any:
    """An SMEM scratch operand of each block of ``mesh``."""
    return jx.MemoryRef(jx.jax.core.ShapedArray(tuple(shape), dtype), jx.CoreMemorySpace(jx.plgpu.SMEM, mesh))


def semaphores(shape, mesh) -> Any:
    """Semaphores in GMEM owned by ``mesh`` (Pallas's
    ``MemoryRef(ShapedArray(shape, Semaphore()), CoreMemorySpace(GMEM, mesh))``)."""
    return jx.MemoryRef(
        jx.jax.core.ShapedArray(tuple(shape), jx.Semaphore()), jx.CoreMemorySpace(jx.plgpu.GMEM, mesh)
    )


# ----------------------------------------------------------- backends

_state = threading.local()


def _current_backend() -> Optional[Backend]:
    """The backend a ``with backend(...)`` block chose, or None: mpmd.jax's
    default (the interpreter on the CPU, CUDA on XLA's stream on a GPU)."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def backend(chosen: Backend) -> Iterator[Backend]:
    """Runs the maps JAX lowers inside the ``with`` block on ``chosen``
    (``mpmd.Interpreter(checked=True)``, ``mpmd.Wgpu()``, ``mpmd.Cuda()``)."""
    if not isinstance(chosen, Backend):
        raise TypeError(f"mpmd.pallas.backend takes an mpmd backend, not {type(chosen).__name__}")
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    stack.append(chosen)
    try:
        yield chosen
    finally:
        stack.pop()


# ---------------------------------------------------------- compiling

# Compiled maps by module text (lowering runs once per jit compilation;
# tracing the same program again reuses the module).
_MODULES: "OrderedDict[str, Module]" = OrderedDict()
_MODULES_BOUND = 64


def _module_of(compiled: Compiled) -> Module:
    module = _MODULES.get(compiled.text)
    if module is None:
        try:
            module = Module.from_text(compiled.text, name="<mpmd.pallas>")
        except ValidationError as refused:
            raise LoweringError(
                "mpmd.pallas lowered this mpmd_map to a module that mpmd refuses (the diagnostics "
                "below, on the lowered text; docs/errors.md has each rule). Most often a `pl.when`, "
                "`lax.cond` or loop whose condition is a value loaded from memory holds an array "
                "store, a copy or a semaphore operation: mpmd needs such conditions block-uniform "
                "(grid indices, loop counters, scalar inputs, constants; docs/pallas.md, 'Control "
                f"flow').\n{refused}"
            ) from None
        _MODULES[compiled.text] = module
        while len(_MODULES) > _MODULES_BOUND:
            _MODULES.popitem(last=False)
    else:
        _MODULES.move_to_end(compiled.text)
    return module


def _compile_params(in_avals, params) -> Compiled:
    return compile_map(
        params["jaxprs"],
        params["meshes"],
        params.get("external_meshes", ()),
        in_avals,
        params["out_avals"],
        params.get("input_output_aliases", {}),
        params.get("name"),
    )


def _as_callable(compiled: Compiled, module: Module, chosen: Optional[Backend]) -> Callable[..., List[Any]]:
    from .. import jax as mpmd_jax
    import jax.numpy as jnp

    call = mpmd_jax.kernel(module, compiled.map_name, chosen)

    def run(*args):
        kwargs = {}
        for (kind, name, shape), arg in zip(compiled.inputs, args):
            if kind == "scalar":
                kwargs[name] = arg
            else:
                kwargs[name] = jnp.reshape(arg, shape or (1,))
        outs = call(**kwargs)
        return [jnp.reshape(outs[name], shape) for name, shape in compiled.outputs]

    return run


def _lowering(ctx, *in_nodes, **params):
    if params.get("interpret"):
        # The user asked for Pallas's own interpret mode: Pallas lowers it.
        return jx.pallas_mpmd._mpmd_map_fallback_lowering(ctx, *in_nodes, **params)
    compiled = _compile_params(ctx.avals_in, params)
    module = _module_of(compiled)
    run = _as_callable(compiled, module, _current_backend())
    return jx.mlir.lower_fun(run, multiple_results=True)(ctx, *in_nodes)


for _platform in ("cpu", "cuda"):
    jx.mlir.register_lowering(jx.mpmd_map_p, _lowering, platform=_platform)


# ------------------------------------------------------ to_module


def _mpmd_map_eqns(jaxpr) -> Iterator[Any]:
    for eqn in jaxpr.eqns:
        if eqn.primitive is jx.mpmd_map_p:
            yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", None)
                if isinstance(inner, jx.jax_core.Jaxpr):
                    yield from _mpmd_map_eqns(inner)
                elif isinstance(sub, jx.jax_core.Jaxpr):
                    yield from _mpmd_map_eqns(sub)


def to_modules(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> List[Module]:
    """The mpmd modules of every ``mpmd_map`` that ``fn(*args, **kwargs)``
    runs, in the order it runs them (Refs handed in place become aliases,
    as when JAX lowers the function)."""
    closed = jx.jax.make_jaxpr(fn)(*args, **kwargs)
    discharged = jx.discharge_state(closed)
    modules = []
    for eqn in _mpmd_map_eqns(discharged.jaxpr):
        in_avals = [v.aval for v in eqn.invars]
        modules.append(_module_of(_compile_params(in_avals, eqn.params)))
    return modules


def to_module(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Module:
    """The mpmd module of the one ``mpmd_map`` ``fn(*args, **kwargs)`` runs
    (``check``, ``lower``, the CLI and conformance take it:
    ``module.text()`` is its ``.mpmd`` text; the map is named ``main``)."""
    modules = to_modules(fn, *args, **kwargs)
    if len(modules) != 1:
        raise ValueError(
            f"to_module: the function runs {len(modules)} mpmd_maps; use to_modules for all of them"
        )
    return modules[0]
