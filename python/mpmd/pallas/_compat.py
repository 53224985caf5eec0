"""The one home of everything mpmd.pallas takes from JAX's private modules.

Pallas's ``mpmd_map`` primitive, its mesh classes and memory spaces live in
``jax._src`` and move between releases, so mpmd.pallas supports a stated
range of jax versions and imports nothing private anywhere else. Outside
the range, importing ``mpmd.pallas`` raises :class:`UnsupportedJaxError`
naming the installed and the supported versions.
"""

from __future__ import annotations

#: The jax releases mpmd.pallas is tested with (inclusive lower bound,
#: exclusive upper bound). 0.10.2 is the CPU release on PyPI this package
#: is tested against; 0.11.x is what the GPU check machine has.
SUPPORTED_JAX = ((0, 10, 0), (0, 12, 0))


class UnsupportedJaxError(ImportError):
    """The installed jax is outside the range mpmd.pallas supports."""


def _version_tuple(text: str):
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def _supported_text() -> str:
    low, high = SUPPORTED_JAX
    return f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def check_jax_version(installed: str) -> None:
    """Raises UnsupportedJaxError when ``installed`` is outside the range."""
    low, high = SUPPORTED_JAX
    if not (low <= _version_tuple(installed) < high):
        raise UnsupportedJaxError(
            f"mpmd.pallas supports jax {_supported_text()}; jax {installed} is installed "
            f"(install a supported jax, e.g. `pip install 'jax{_supported_text()}'`)"
        )


try:
    import jax
except ImportError as error:  # pragma: no cover - jax is a dependency of the extra
    raise UnsupportedJaxError(
        f"mpmd.pallas needs jax {_supported_text()} (`pip install 'mpmd[pallas]'`): {error}"
    ) from error

check_jax_version(jax.__version__)

try:
    from jax._src import core as jax_core
    from jax._src import source_info_util
    from jax._src import tree_util
    from jax._src.interpreters import mlir
    from jax._src.pallas import core as pallas_core
    from jax._src.pallas import mpmd as pallas_mpmd
    from jax._src.state import discharge as state_discharge
    from jax._src.state import indexing as state_indexing
    from jax._src.state import types as state_types
    from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError as error:
    raise UnsupportedJaxError(
        f"mpmd.pallas could not import Pallas's Mosaic GPU API from jax {jax.__version__} "
        f"(supported: {_supported_text()}; `import jax.experimental.pallas.mosaic_gpu` "
        f"needs absl-py): {error}"
    ) from error


def discharge_state(closed_jaxpr):
    """The jaxpr with Refs discharged (their writes become outputs), as JAX
    does before lowering; the signature changed between releases."""
    try:
        return state_discharge.discharge_state(closed_jaxpr)
    except TypeError:
        jaxpr, consts = state_discharge.discharge_state(closed_jaxpr.jaxpr, closed_jaxpr.consts)
        return jax_core.ClosedJaxpr(jaxpr, consts)


mpmd_map_p = pallas_mpmd.mpmd_map_p
mpmd_map = pallas_mpmd.mpmd_map
MemoryRef = pallas_core.MemoryRef
CoreMemorySpace = pallas_core.CoreMemorySpace
Semaphore = pallas_core.Semaphore
AbstractSemaphoreTy = pallas_core.AbstractSemaphoreTy
NDIndexer = state_indexing.NDIndexer
Slice = state_indexing.Slice
AbstractRef = state_types.AbstractRef

__all__ = [
    "pallas_mpmd",
    "discharge_state",
    "SUPPORTED_JAX",
    "UnsupportedJaxError",
    "check_jax_version",
    "jax",
    "jax_core",
    "source_info_util",
    "tree_util",
    "mlir",
    "pallas_core",
    "state_discharge",
    "plgpu",
    "mpmd_map_p",
    "mpmd_map",
    "MemoryRef",
    "CoreMemorySpace",
    "Semaphore",
    "AbstractSemaphoreTy",
    "NDIndexer",
    "Slice",
    "AbstractRef",
]
